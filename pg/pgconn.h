/*
 * pgconn.h — one libpq connection: opened with a bounded wait, and the
 * checks every statement's result goes through.
 *
 * Who calls it: pgschema (migrations, on the thread that opens the store,
 * before any actor runs) and the tests; later the PG actor and its
 * listener, each on its own thread. A PGconn is used by one thread at a
 * time; nothing here keeps global state, so distinct connections may be
 * used on distinct threads at once.
 *
 * Errors follow store/err.h: 0 or a negative BERTH_E*, with a sentence in
 * the caller's err buffer naming what failed and what libpq or the server
 * said. Texts never contain a password: targets are described from the
 * parsed connection options (host, port, dbname, user), never the URI.
 * Pipeline mode and turns are pg/pgturn.h's; prepared statements
 * pg/pgstmt.h's.
 */
#ifndef BERTH_PG_PGCONN_H
#define BERTH_PG_PGCONN_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

/* The connect retry pause: 50 ms, doubling to 1 s, never past the deadline. */
#define PGCONN_BACKOFF_FIRST_MS 50
#define PGCONN_BACKOFF_MAX_MS   1000
/* An attempt started near the deadline still gets this long to finish. */
#define PGCONN_ATTEMPT_MIN_MS 100

/*
 * Opens a connection to uri: a libpq URI (postgresql://h1,h2:5432/db?...) or
 * a key=value string; several hosts are libpq's to try in order. app_name
 * (e.g. "berthd") becomes application_name unless the uri sets one; it may
 * be NULL. Attempts are retried with backoff until wait_ms has passed since
 * the call, the last one starting at the deadline, then BERTH_EIO with
 * libpq's last message: the call returns within wait_ms +
 * PGCONN_ATTEMPT_MIN_MS. wait_ms 0 is BERTH_EINVAL, and so is a uri libpq
 * cannot parse, at once. Host names are resolved inside an attempt, and
 * libpq resolves synchronously: a slow resolver stretches the wait by one
 * lookup. On success *out is the caller's, to give back with pgconn_close().
 */
int pgconn_open(const char *uri, const char *app_name, uint64_t wait_ms, PGconn **out, char *err,
                size_t errlen);
void pgconn_close(PGconn *c); /* NULL: no-op */

/* "host=... port=... dbname=... user=..." of uri, without its password:
 * for messages. An unparsable uri gives "(unparsable connection string)". */
void pgconn_describe(const char *uri, char *buf, size_t len);

/*
 * Checks r (may be NULL: libpq could not send or allocate) against the
 * status wanted; on a mismatch writes "<what>: <server's message> (SQLSTATE
 * xxxxx)" to err and returns pgconn_code() of it. Does not clear r.
 */
int pgconn_check(PGconn *c, const PGresult *r, ExecStatusType want, const char *what, char *err,
                 size_t errlen);

/* The BERTH_E* a failed result means: BERTH_EIO for everything the server
 * or the connection refused (retrying may help or not: the text says),
 * BERTH_ENOMEM for a NULL result on a live connection. */
int pgconn_code(PGconn *c, const PGresult *r);

/* In the three below, `what` opens the error text ("applying 001_schema"). */

/* Runs sql (one or more statements, no parameters: the simple protocol) and
 * wants its last result to be PGRES_COMMAND_OK or PGRES_TUPLES_OK; rows are
 * dropped. A failing statement stops the rest. */
int pgconn_exec(PGconn *c, const char *sql, const char *what, char *err, size_t errlen);

/*
 * Runs one statement with text parameters (NULL entries are SQL NULL) and
 * wants PGRES_TUPLES_OK; *out is the caller's to PQclear(), set only on
 * success.
 */
int pgconn_query(PGconn *c, const char *sql, int nparams, const char *const *params,
                 const char *what, PGresult **out, char *err, size_t errlen);

/* As pgconn_query() for a statement returning no rows (PGRES_COMMAND_OK). */
int pgconn_command(PGconn *c, const char *sql, int nparams, const char *const *params,
                   const char *what, char *err, size_t errlen);

#endif
