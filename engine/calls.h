/* calls.h — await_call, and the calls' clock: timers and retention
 * (engine/README.md, "Calls"). Engine thread. */
#ifndef BERTH_ENGINE_CALLS_H
#define BERTH_ENGINE_CALLS_H

#include "engine/core.h"

/* The await_call request: answered now, or left waiting (p->waiter set). */
int calls_await(engine *e, pending *p);
/* At the start of a turn: drops ended instances whose retention is over,
 * then fires the timers that came due (each bounded per turn). Nonzero:
 * the turn failed. */
int calls_run(engine *e);
/* The earliest instant calls_run has work; UINT64_MAX if none. */
uint64_t calls_next_due(const engine *e);

#endif
