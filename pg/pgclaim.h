/*
 * pgclaim.h — a turn's claims (R5): one statement per fetch, or one `claim_many` for
 * every fetch of the turn naming the same one topic; `topics_due` for the
 * topics of fetches that may wait; the claimed rows as the fetches'
 * tasks.
 */
#ifndef BERTH_PG_PGCLAIM_H
#define BERTH_PG_PGCLAIM_H

#include <stdbool.h>

#include "pg/pgplan.h"

/* The turn's claim statements, after its outcomes (round two). */
bool pgclaim_stmts(pgops_turn *t);
/* After COMMIT: a fetch's tasks, in claim order. */
void pgclaim_answer(pgops_turn *t, pgreq *p);
/* After COMMIT: what topics_due said of each topic (pgops_dues()). */
void pgclaim_dues(pgops_turn *t);

#endif
