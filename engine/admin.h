/* admin.h — what an operator can see and do (R11). Engine thread. Each
 * returns nonzero only when the turn failed (turn_fail). */
#ifndef BERTH_ENGINE_ADMIN_H
#define BERTH_ENGINE_ADMIN_H

#include "engine/core.h"

int admin_get_task(engine *e, pending *p);
/* A page of tasks (listing.c's order), filtered by topic and state. */
int admin_list_tasks(engine *e, pending *p);
int admin_retry_terminal(engine *e, pending *p);
int admin_discard_terminal(engine *e, pending *p);
int admin_list_incidents(engine *e, pending *p);
int admin_stats(engine *e, pending *p);
/* A copy of the store, consistent as of this turn, in a new directory:
 * every turn written before it is in it. Blocks the turn while RocksDB
 * flushes and links the files. */
int admin_checkpoint(engine *e, pending *p);
/* What /metrics exports: counters, gauges kept as the engine goes, and
 * histograms; never a scan. */
int admin_metrics(engine *e, pending *p);

#endif
