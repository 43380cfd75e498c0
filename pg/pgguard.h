/*
 * pgguard.h — a turn's lock-guarded requests (R8-R12): complete, complete_batch, fail,
 * refuse, extend_lock, release and a fetch's fused completions. Round
 * one: ONE locking read of every task they name (`guard_read`). Between
 * the rounds: engine/rules.c's verdicts and outcomes on those rows, each
 * request seeing the rows as the ones before it left them. Round two: one
 * delete, one update, one incident insert for the whole turn.
 *
 * ONE ROUND: a turn whose guarded requests are all completions without a
 * result, each task named once, sends `complete_fast` instead: the
 * completions that hold their task's live lock delete it, the others get
 * their verdict from the lock state it returns, after COMMIT. One that
 * needs the rules' second look (a call's task) fails the turn with
 * SQLSTATE BR001 (PGGUARD_UNDECIDED), and the caller runs it again the
 * two-round way.
 */
#ifndef BERTH_PG_PGGUARD_H
#define BERTH_PG_PGGUARD_H

#include <stdbool.h>

#include "pg/pgplan.h"

/* A guarded request joins the turn (or p is settled, refused). */
void pgguard_plan(pgops_turn *t, pgreq *p);
/* One item of the turn's read, answered in st (out: the item, or NULL);
 * false: out of memory. A malformed guard is answered in st at once. */
bool pgguard_add(pgops_turn *t, pgreq *p, gkind kind, const engine_guard *g, const void *args,
                 engine_status *st, guard_item **out);
/* A batch's completions (a complete_batch's, a fetch's): a status each. */
bool pgguard_plan_completes(pgops_turn *t, pgreq *p, const engine_complete_args *items, size_t n);
/* The turn's locking read of every task named. */
bool pgguard_stmt_read(pgops_turn *t);
/* Between the rounds: the rules on the rows read (a call's task's reply
 * correlated with its call). The outcome statements follow the calls'. */
bool pgguard_between(pgops_turn *t, pgturn *pt);
/* A task's row as the turn read it, or NULL. */
trow *pgguard_row(pgops_turn *t, const uint8_t id[BERTH_ID_LEN]);
/* The outcome statements (delete, update, incidents). */
bool pgguard_stmt_outcomes(pgops_turn *t);
/* SQLSTATE of a one-round turn to run again in two. */
#define PGGUARD_UNDECIDED "BR001"
/* The one-round statement, when the turn's guarded items allow it
 * (planned); false: out of memory. */
bool pgguard_stmt_fast(pgops_turn *t, bool *planned);
/* After COMMIT: the one round's statuses (and rows, for the events). */
void pgguard_fast_answer(pgops_turn *t);
/* After COMMIT: task.completed, .refused, .failed, .terminal. */
void pgguard_events(pgops_turn *t);

#endif
