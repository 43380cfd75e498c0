/*
 * pgstmt.h — berth's named statements: pg/sql/statements.sql (embedded at
 * build, pgsql.h) split at its `-- name: NAME` markers into a table, and
 * prepared under those names on a connection.
 *
 * The file's grammar: text before the first marker is comments and blank
 * lines only; a marker is a line "-- name: NAME" with NAME of [a-z0-9_],
 * at most 63 bytes (PostgreSQL's identifier limit), given once; a section's
 * text is everything up to the next marker, without a trailing ';' and
 * surrounding blanks, and must not be empty. A file that breaks a rule is
 * refused at start (BERTH_EFORMAT naming the line), so a duplicate never
 * reaches a server.
 *
 * Who calls it: the code opening the PostgreSQL store parses once
 * (pgstmt_parse(pgsql_statements)); the table is then read-only, shared by
 * every connection; each engine connection is prepared with
 * pgstmt_prepare_all() right after it enters pipeline mode.
 */
#ifndef BERTH_PG_PGSTMT_H
#define BERTH_PG_PGSTMT_H

#include <stddef.h>

#include <libpq-fe.h>

#define PGSTMT_NAME_MAX 63

typedef struct pgstmt_entry {
    const char *name; /* into the table's text */
    const char *sql;  /* into the table's text, NUL-terminated */
} pgstmt_entry;

typedef struct pgstmt_table {
    pgstmt_entry *v; /* n entries, file order */
    size_t n;
    char *text; /* the parsed copy names and texts point into */
} pgstmt_table;

/* Parses text (a statements.sql) into t, which owns a copy: give it back
 * with pgstmt_fini(). On an error t is left empty and err says which line
 * broke which rule. */
int pgstmt_parse(const char *text, pgstmt_table *t, char *err, size_t errlen);
/* pgstmt_parse() of the embedded pg/sql/statements.sql. */
int pgstmt_load(pgstmt_table *t, char *err, size_t errlen);
void pgstmt_fini(pgstmt_table *t); /* an empty or zeroed table: no-op */

/* The text of statement name, or NULL. */
const char *pgstmt_sql(const pgstmt_table *t, const char *name);

/*
 * Prepares every statement of t on c, which must be in pipeline mode with
 * nothing in flight (pgturn_enter()): one PQsendPrepare each, one Sync,
 * every result checked. Waits for the server (libpq's blocking read:
 * bounded by the session's statement_timeout, not by a deadline of ours):
 * meant for connect time. A failure names the statement (BERTH_EIO).
 */
int pgstmt_prepare_all(PGconn *c, const pgstmt_table *t, char *err, size_t errlen);

#endif
