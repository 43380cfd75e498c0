/* guard.h — the lock-guarded worker requests (R8–R12). Engine thread.
 * Each returns nonzero only when the turn failed (turn_fail). */
#ifndef BERTH_ENGINE_GUARD_H
#define BERTH_ENGINE_GUARD_H

#include "engine/core.h"

int guard_complete(engine *e, pending *p);
int guard_complete_batch(engine *e, pending *p);
/* Completes items in order, each with its status in r->statuses (a
 * failed one never stops the rest); r->status says only a lack of memory
 * for the statuses (then none is applied). */
int guard_complete_items(engine *e, const struct engine_complete_args *items, size_t n,
                         engine_reply *r);
int guard_fail(engine *e, pending *p);
int guard_refuse(engine *e, pending *p);
int guard_extend_lock(engine *e, pending *p);
int guard_release(engine *e, pending *p);

#endif
