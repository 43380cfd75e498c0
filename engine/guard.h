/* guard.h — the lock-guarded worker requests (R8–R12). Engine thread.
 * Each returns nonzero only when the turn failed (turn_fail). */
#ifndef BERTH_ENGINE_GUARD_H
#define BERTH_ENGINE_GUARD_H

#include "engine/core.h"

int guard_complete(engine *e, pending *p);
int guard_complete_batch(engine *e, pending *p);
int guard_fail(engine *e, pending *p);
int guard_refuse(engine *e, pending *p);
int guard_extend_lock(engine *e, pending *p);
int guard_release(engine *e, pending *p);

#endif
