/*
 * pgclaim.h — a turn's claims (R5): one statement per fetch, or one `claim_many` for
 * every fetch of the turn naming the same one topic; `topics_due` for the
 * topics of fetches that may wait; the claimed rows as the fetches'
 * tasks.
 *
 * THE FETCH BUDGET (--fetch-inflight-max-bytes, per replica): the answers a
 * turn's claims hand over are in the replica's memory at once. Each fetch
 * reserves what it could take at most (its max_tasks tasks of the largest
 * size a task may have, or fetch-max-bytes), in arrival order, against the
 * turn's budget; a fetch that does not fit claims nothing (deferred) and
 * claims in the next turn (or answers empty, when it may not wait), as the
 * embedded engine's fetch waits for answers in flight to leave. The
 * turn's first fetch always claims.
 */
#ifndef BERTH_PG_PGCLAIM_H
#define BERTH_PG_PGCLAIM_H

#include <stdbool.h>

#include "pg/pgplan.h"

/* The largest body_bytes a task may have under o. */
uint64_t pgclaim_task_max(const engine_options *o);
/* The turn's claim statements, after its outcomes (round two). */
bool pgclaim_stmts(pgops_turn *t);
/* After COMMIT: a fetch's tasks, in claim order. */
void pgclaim_answer(pgops_turn *t, pgreq *p);
/* After COMMIT: what topics_due said of each topic (pgops_dues()). */
void pgclaim_dues(pgops_turn *t);

#endif
