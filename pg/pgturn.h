/*
 * pgturn.h — one turn of the PostgreSQL actor: one transaction of a few
 * prepared statements, pipelined on one connection (pg/README.md §3.0, §4).
 *
 * What goes on the wire, in order:
 *   BEGIN; turn_begin($clock); the turn's statements; [turn_notify($1)];
 *   COMMIT; Sync
 * every statement with binary parameters and binary results. By default it
 * is all sent at once: one round trip. A turn whose later statements depend
 * on its first ones' results (§3.5: guarded requests) sets n_first: BEGIN,
 * turn_begin and stmts[0, n_first) go first, closed by a flush request
 * (PQsendFlushRequest: the transaction stays open); the rest, the notify and
 * COMMIT are sent only once those results are in, and the `between` hook
 * may build them from those results first.
 *
 * The rule the outcome keeps: nothing is answered before COMMIT returns.
 * Each statement's result reaches the caller (stmts[i].result) only when
 * COMMIT's result is PGRES_COMMAND_OK; for any other outcome every result
 * is dropped and stmts[i].result stays NULL.
 *
 * Outcomes:
 * - COMMITTED: kept; results handed over.
 * - ABORTED: a statement (or COMMIT itself: a deferred constraint) failed;
 *   the later ones came back PGRES_PIPELINE_ABORTED; pgturn then sent
 *   ROLLBACK + Sync (one more round trip), so the connection serves
 *   the next turn (unless `broken`). Nothing kept. sqlstate/message/failed
 *   say what; `rerunnable` is set for 40P01 (deadlock) and 55P03 (lock not
 *   available: lock_timeout), which the actor re-runs once.
 * - LOST_BEFORE_COMMIT: the connection was lost before COMMIT was handed
 *   to libpq: the server rolls back; not kept.
 * - IN_DOUBT: lost after COMMIT was handed to libpq, before its result:
 *   "may or may not have been kept". Conservative: COMMIT counts as sent
 *   from the moment it is queued (libpq may write it at once), so a turn
 *   sent in one round trip that loses its connection in any statement is
 *   IN_DOUBT unless a statement's error had already come back (then
 *   ABORTED: an aborted transaction cannot commit).
 * After LOST_BEFORE_COMMIT, IN_DOUBT, or `broken`, the connection is
 * unusable: close it and connect again.
 *
 * Driving: pgturn_start() queues the first round; then the caller polls
 * PQsocket() for pgturn_events() and calls pgturn_advance() whenever the
 * socket is ready (or at any time: it never blocks) until it returns 1.
 * That is the shape the actor's own poll() loop (eventfd + engine socket +
 * listener) will drive; pgturn_run() is that loop for one turn with a
 * deadline, the synchronous form used for now. A turn past its deadline is
 * treated as a lost connection (the caller must close it: the server may
 * still run it).
 *
 * The connection: pgturn_enter() (non-blocking, pipeline mode), then
 * pgstmt_prepare_all() (turn_begin and turn_notify must be among the
 * statements), then turns one after another; one thread at a time.
 */
#ifndef BERTH_PG_PGTURN_H
#define BERTH_PG_PGTURN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "pg/pgwire.h"

typedef enum pgturn_outcome {
    PGTURN_PENDING = 0, /* not finished yet */
    PGTURN_COMMITTED,
    PGTURN_ABORTED,
    PGTURN_LOST_BEFORE_COMMIT,
    PGTURN_IN_DOUBT,
} pgturn_outcome;

const char *pgturn_outcome_name(pgturn_outcome o);

typedef struct pgturn_stmt {
    const char *name;            /* a statement prepared on the connection */
    const pgwire_params *params; /* NULL: no parameters; read when queued */
    PGresult *result;            /* out: set only when COMMITTED; the caller's to PQclear() */
    PGresult *held;              /* private: the result until COMMIT returns */
} pgturn_stmt;

typedef struct pgturn {
    /* in: set before pgturn_start() */
    PGconn *conn;
    bool clock_set;   /* turn_begin($1): clock_ms if set, NULL otherwise */
    int64_t clock_ms; /* the manual clock, Unix ms */
    /* turn_begin_routed in place of turn_begin (pg/pgdeploy.h): the deploy
     * epoch must be expect_epoch (else SQLSTATE BR002, nothing kept);
     * share: K_DEPLOY held shared until COMMIT */
    bool check_epoch;
    int64_t expect_epoch;
    bool share;
    pgturn_stmt *stmts; /* the caller's, n of them, living until the turn ends */
    size_t n;
    size_t n_first;     /* 0: one round trip; else stmts[0, n_first) first (§3.5) */
    const char *notify; /* the pg_notify payload, or NULL: none */
    /* A failpoint (tests): once COMMIT and its Sync are on the wire, the
     * socket is shut down both ways, as a network that dies then would:
     * the server commits, the answer never comes (IN_DOUBT, in fact kept). */
    bool cut_after_commit;
    /* n_first > 0: called once the first round's results are in and none
     * failed, before the rest is sent. It reads them (pgturn_first_result)
     * and may set what follows: t->n and t->stmts[n_first, n) (the array
     * must have room), t->notify. false: the transaction is rolled back
     * (ABORTED, t->message set by it or a default); nothing is kept. */
    bool (*between)(struct pgturn *t, void *arg);
    void *between_arg;

    /* out */
    pgturn_outcome outcome;
    int64_t now_ms;       /* turn_begin's now_ms (set once its result is in) */
    int64_t deploy_epoch; /* turn_begin's deploy_epoch */
    bool rerunnable;      /* ABORTED by 40P01 or 55P03 */
    bool broken;          /* the connection is unusable now: close it */
    int failed;           /* ABORTED: the stmts index that failed, -1 the bracket */
    char sqlstate[6];     /* ABORTED (and lost, when the server said): SQLSTATE */
    char message[512];    /* what happened, one line */

    /* private */
    size_t queued;      /* commands queued, in wire order (BEGIN = 0) */
    size_t next;        /* the command whose result is read next */
    bool in_null;       /* its result is in; its closing NULL is next */
    int syncs;          /* Syncs queued, not yet read */
    bool commit_sent;   /* COMMIT handed to libpq */
    bool error_seen;    /* a statement failed: the transaction is aborted */
    int rollback;       /* 0 none; 1 ROLLBACK queued, result next; 2 its NULL next */
    bool want_write;    /* PQflush left bytes: poll for POLLOUT */
    bool commit_ok;     /* COMMIT's result was COMMAND_OK */
    bool round2_sent;   /* n_first: the second round is queued */
    pgwire_params tb;   /* turn_begin's parameters */
    uint8_t tb_buf[32]; /* their bytes */
} pgturn;

/* Puts c into non-blocking pipeline mode (and drops server notices, which
 * libpq would print to stderr); it must be idle. BERTH_EIO if libpq
 * refuses. */
int pgturn_enter(PGconn *c, char *err, size_t errlen);

/*
 * Queues the turn's first round and flushes what the socket takes. Turn t
 * must have its inputs set, the rest zeroed (e.g. a designated
 * initializer). BERTH_EINVAL for a bad turn (no conn, n_first > n, a
 * statement without a name or with failed params, a notify payload of 8000
 * bytes or more, a connection not in pipeline mode); any other failure ends the turn at
 * once (t->outcome set) and still returns 0: outcomes are not errors.
 */
int pgturn_start(pgturn *t);

/* POLLIN, plus POLLOUT while libpq holds unsent bytes. */
short pgturn_events(const pgturn *t);

/* Flushes, reads what has arrived, and queues the next round when due.
 * 1: the turn is over (t->outcome); 0: not yet. Never blocks. */
int pgturn_advance(pgturn *t);

/* start + poll()/advance until the turn is over or CLOCK_MONOTONIC passes
 * deadline_ms (then a lost connection, t->broken). Returns 0 (outcome in
 * t->outcome) or BERTH_EINVAL as pgturn_start(). */
int pgturn_run(pgturn *t, uint64_t deadline_ms);

/* Ends a turn still in flight as if its connection were lost (a turn past
 * its caller's deadline): LOST_BEFORE_COMMIT or IN_DOUBT, broken. */
void pgturn_give_up(pgturn *t, const char *why);

/* The monotonic clock pgturn_run()'s deadline is on, ms; and in us. */
uint64_t pgturn_mono_ms(void);
uint64_t pgturn_mono_us(void);

/* In the between hook: stmts[i]'s result (i < n_first), else NULL. */
const PGresult *pgturn_first_result(const pgturn *t, size_t i);

/* Drops what the turn still holds (results of a turn that did not
 * commit are dropped already; this clears handed-over ones too). */
void pgturn_clear_results(pgturn *t);

#endif
