/*
 * pgsubmit.h — a turn's submits and submit_batches (R1, R6, R17): checked, then every item
 * of the turn in ONE `submit` statement (in-turn repeats of a key folded
 * first), answered from its rows.
 */
#ifndef BERTH_PG_PGSUBMIT_H
#define BERTH_PG_PGSUBMIT_H

#include <stdbool.h>
#include <stddef.h>

#include "pg/pgplan.h"

/* A submit's checks (a call's request's too): topic, rules_submit_check,
 * then its route by the replica's deployments (pgdeploy.h): *dep the
 * deployment it goes to, or -1 with st holding the route's refusal (the
 * turn checks the copy was current; a repeat of a key accepted before is
 * a duplicate all the same, found by the submit statement), and *push
 * whether that is a push channel (its delivery, not a task: the turn
 * claims). False: a check refused it. */
bool pgsubmit_check(pgops_turn *t, const engine_submit_args *a, int32_t *dep, bool *push,
                    engine_status *st);
/* A task's size as fetch budgets count it (fetch_max_bytes): its
 * payload, topic, headers and content type, and 16 bytes for its fixed
 * fields; the embedded store counts its encoded row, a few bytes apart. */
size_t pgsubmit_body_bytes(const engine_submit_args *a);
/* A SUBMIT or SUBMIT_BATCH request: its checks, then its items join the turn
 * (or p is settled, refused). */
void pgsubmit_plan(pgops_turn *t, pgreq *p);
/* The turn's submit statement, over every item. false: out of memory. */
bool pgsubmit_stmt(pgops_turn *t);
/* The turn's doorbell records for its submits (between the rounds). */
void pgsubmit_notify(pgops_turn *t);
/* After COMMIT: each item's id and whether it was a duplicate. */
void pgsubmit_answer(pgops_turn *t);
/* After COMMIT: task.parked for each new task. */
void pgsubmit_events(pgops_turn *t);

#endif
