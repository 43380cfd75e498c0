/*
 * pgcall.h — a turn's calls (pg/README.md §3.2, §3.6, §3.7; engine/README.md, "Calls").
 *
 *   CALL       every call of the turn in ONE `call` statement (its key, its
 *              instance, its first attempt's task), round one.
 *   A REPLY    a completion or refusal of a call's task: the instances of
 *              the turn's guarded tasks are locked in round one after the
 *              tasks (`instances_lock`), and between the rounds
 *              engine/rules.c correlates each reply with its call.
 *   TIMERS     a housekeeping turn (any replica's, whichever comes first)
 *              locks the calls whose timer came (`timers_due`, SKIP
 *              LOCKED): a timeout backs off or fails the call, a backoff's
 *              end re-drives it; it also drops ended calls past their
 *              retention and keys past the dedup horizon, in bounded
 *              batches, and learns when the next is due.
 *   WRITES     what a turn did to its calls, in round two: one
 *              `instances_write`, `tasks_withdraw` for dead attempts,
 *              `redrive_insert` for next attempts.
 *   AWAIT      read after the turn's own writes (`await_read`): an await
 *              in the turn that ends its call sees the end. A live call
 *              with wait_ms > 0 waits in the actor, rung by `r:` doorbells
 *              (any change of the call, on any replica).
 */
#ifndef BERTH_PG_PGCALL_H
#define BERTH_PG_PGCALL_H

#include <stdbool.h>
#include <stdint.h>

#include "pg/pgplan.h"

/* A CALL joins the turn (or p is settled, refused). */
void pgcall_plan(pgops_turn *t, pgreq *p);
/* An AWAIT_CALL joins the turn (or p is settled, refused). */
void pgcall_plan_await(pgops_turn *t, pgreq *p);
/* Round one: the `call` statement; the instances of the guarded tasks
 * (m of them) and of the deliveries push answers name (k), locked; a
 * housekeeping turn's statements. */
bool pgcall_stmt_call(pgops_turn *t);
bool pgcall_stmt_lock(pgops_turn *t, const uint8_t (*tasks)[BERTH_ID_LEN], size_t m,
                      const uint8_t (*deliveries)[BERTH_ID_LEN], size_t k);
bool pgcall_stmt_housekeeping(pgops_turn *t);
/* Between the rounds: the instances round one locked (before the rules;
 * once per turn however often called). */
bool pgcall_read_locked(pgops_turn *t, pgturn *pt);
/* A reply to w, a call's task: correlated with its call (rules_correlate).
 * result NULL and err NULL: resolved with the task's own payload. false:
 * refused in st (RETRY_PENDING); the task stays the replier's. */
bool pgcall_correlate(pgops_turn *t, const trow *w, const engine_result *result,
                      const engine_error *err, engine_status *st);
/* A push receiver's REJECT of w, a call's request: the call FAILED with
 * err when its policy names the code non-retryable (and it is not backing
 * off), else resolved with err as any reply (pgcall_correlate). */
void pgcall_reject(pgops_turn *t, const trow *w, const engine_error *err);
/* Between the rounds of a housekeeping turn: the timers fired. */
bool pgcall_timers(pgops_turn *t, pgturn *pt);
/* Round two: what the turn did to its calls (before the tasks' outcomes),
 * its doorbell records; then the awaits' read and housekeeping's next. */
bool pgcall_stmt_writes(pgops_turn *t);
bool pgcall_stmt_after(pgops_turn *t);
/* After COMMIT: the calls' and awaits' replies, the events, the counts.
 * A housekeeping turn: *next_in_ms, when the next is due (UINT64_MAX:
 * nothing waits). */
void pgcall_answer(pgops_turn *t, uint64_t *next_in_ms);

#endif
