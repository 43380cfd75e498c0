/*
 * pgops.h — one turn of the PostgreSQL engine, planned and answered: the
 * requests a turn drained become a few statements (pg/README.md §3), and
 * the statements' results become the requests' replies.
 *
 * THE SHAPE OF A TURN
 *   Round one: a housekeeping turn's timers, drops and expiries (pgcall.h);
 *   every submit of the turn in ONE `submit` statement, every call in ONE
 *   `call`; one locking read (`guard_read`) of every task a guarded
 *   request names (complete, complete_batch, fail, refuse, extend_lock,
 *   release, and a fetch's fused completions), then of their calls.
 *   Between the rounds the rules (engine/rules.h) run on those rows, in
 *   request order, each request seeing the rows as the ones before it left
 *   them; round two writes the calls' outcomes, then the tasks'
 *   (`tasks_delete`, `tasks_update`, `incidents_insert`: one each however
 *   many items), then one claim per fetch and, for fetches that may wait,
 *   `topics_due` (when the topic's next task becomes fetchable), then the
 *   turn's awaits. A turn with nothing guarded and no housekeeping is one
 *   round. The turn's doorbell (§5.1) goes last, then COMMIT. Nothing is
 *   answered before COMMIT returns (R1).
 *
 * Checks that need no state run before the turn (the same rules the
 * embedded engine runs, same wording); what they refuse takes no part in
 * it. The actor thread only.
 */
#ifndef BERTH_PG_PGOPS_H
#define BERTH_PG_PGOPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/hist.h"
#include "engine/rules.h"
#include "engine/tcounts.h"
#include "pg/pgdeploy.h"
#include "pg/pgreq.h"
#include "pg/pgturn.h"

/* A fetch's own checks (R6), as a turn runs them: p->f and p->may_wait
 * set; false: refused in p->reply->status. */
bool pgops_fetch_check(const engine_options *o, const pgdeploys *deps, pgreq *p);

/* How a turn is to be planned (pgops_plan). */
typedef struct pgops_how {
    uint64_t now_ms;       /* the replica's clock, for the checks */
    bool manual;           /* the clock is a test's, and the database takes it */
    bool fail;             /* the turn is made to fail (ENGINE_FP_STORE_WRITE) */
    bool notify_in_turn;   /* the doorbell is the turn's last statement; else the
                            * caller sends it after COMMIT (pgops_notify) */
    bool housekeeping;     /* the turn also fires the calls' timers that came,
                            * drops ended calls past their retention and keys
                            * past the dedup horizon (pgcall.h) */
    bool one_round;        /* completions may take pgguard.h's one round (a
                            * turn that fails with PGGUARD_UNDECIDED is planned
                            * again without it) */
    uint64_t fetch_budget; /* the task bytes its claims may answer at most
                            * (pgclaim.h: a fetch past it waits a turn) */
    /* Once committed, the turn counts its acts per topic here, and each
     * completion's latency (NULL: not counted). */
    tcounts *topics;
    hist *task_latency;
    const pgdeploys *deps; /* the replica's deployments (pgdeploy.h) */
    bool gate_wait;        /* the turn is the gate alone, waiting for K_DEPLOY */
    /* The relay (pgrelay.h): the push channels of the copy with the room
     * the replica has on each (valid through the turn); relay: a delivery
     * came due (a deadline, a backoff's end, a doorbell's o:): the turn
     * takes the sends past their deadline, and claims. */
    const pgrelay_chan *chans;
    size_t n_chans;
    bool relay;
} pgops_how;

/* Plans the turn over list (linked by next): the checks, then the
 * statements of its first round (and the hook that builds the second).
 * replica: this replica's counters, which STATS answers beside the
 * database's counts. BERTH_ENOMEM: nothing planned. */
int pgops_plan(const engine_options *o, const engine_stats *replica, pgreq *list,
               const pgops_how *how, PGconn *conn, pgops_turn **out);
/* The doorbell a committed turn left for the caller to send, or NULL. */
const char *pgops_notify(const pgops_turn *t);
/* The turn to drive (pgturn_start/advance or pgturn_run). */
pgturn *pgops_pgturn(pgops_turn *t);
/* Whether anything needs the database. */
bool pgops_empty(const pgops_turn *t);
/* COMMITTED: fills the replies from the results, then hands the turn's
 * doorbell text (pg/README.md §5.1; NULL: none) to bells(ctx, text), which
 * rings here what it rings on the other replicas. */
void pgops_answer(pgops_turn *t, void (*bells)(void *ctx, const char *payload), void *ctx);
/* After a committed housekeeping turn: in how many ms the next is due
 * (UINT64_MAX: nothing waits; 0: more now). */
uint64_t pgops_housekeeping_next(const pgops_turn *t);
/* After COMMIT: whether the turn changed the deployments (a deploy, a
 * retire, the gate, an operator's retry that drained one again). */
bool pgops_deploys_changed(const pgops_turn *t);
/* After COMMIT: the counters the turn adds to the replica's (calls...). */
const engine_stats *pgops_delta(const pgops_turn *t);
/* For the fetches of the turn that claimed nothing and may wait: what
 * topics_due found (n of them, the turn's memory). */
const pgops_topic_due *pgops_dues(const pgops_turn *t, size_t *n);
void pgops_free(pgops_turn *t);

#endif
