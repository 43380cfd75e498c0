/*
 * pgread.h — a turn's reads for the operator: get_task (`task_get`),
 * list_incidents (`incidents_list`, an incident's id its at and seq) and
 * stats (`stats`, counted at the turn's now, with the replica's own
 * counters).
 */
#ifndef BERTH_PG_PGREAD_H
#define BERTH_PG_PGREAD_H

#include <stdbool.h>

#include "pg/pgplan.h"

/* A GET_TASK, LIST_INCIDENTS or STATS request joins the turn (or p is
 * settled, refused). */
void pgread_plan(pgops_turn *t, pgreq *p);
/* After COMMIT: its answer (any other request: nothing). */
void pgread_answer(pgops_turn *t, pgreq *p);

#endif
