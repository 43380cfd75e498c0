/*
 * pgadmin.h — a turn's writes for the operator: retry_terminal
 * (`tasks_retry`: the task fetchable again with a new failure budget) and
 * discard_terminal (`tasks_discard`: the task goes; a call's attempt in
 * flight ends its call FAILED, DISCARDED). Their statements run in the
 * turn's first round, so that what they did decides the turn's doorbell
 * (pgadmin_between) before COMMIT; the events and answers follow it.
 */
#ifndef BERTH_PG_PGADMIN_H
#define BERTH_PG_PGADMIN_H

#include <stdbool.h>

#include "pg/pgplan.h"

/* A RETRY_TERMINAL or DISCARD_TERMINAL request joins the turn (or p is
 * settled, refused). */
void pgadmin_plan(pgops_turn *t, pgreq *p);
/* Whether a request of the turn is one: the turn takes two rounds. */
bool pgadmin_in(const pgops_turn *t);
/* Between the rounds: the doorbell's records for what they did. */
void pgadmin_between(pgops_turn *t, pgturn *pt);
/* After COMMIT: p's answer and events (any other request: nothing). */
void pgadmin_answer(pgops_turn *t, pgreq *p);

#endif
