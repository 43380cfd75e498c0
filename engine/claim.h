/* claim.h — fetch-and-lock, waiting fetches, doorbells (R5–R7). Engine
 * thread. */
#ifndef BERTH_ENGINE_CLAIM_H
#define BERTH_ENGINE_CLAIM_H

#include "engine/core.h"

/* The fetch request: answered now, or left waiting (p->waiter set). */
int claim_fetch(engine *e, pending *p);
/* Re-runs the claims of the waiters on every topic rung this turn, and on
 * watched topics whose front became fetchable. */
int claim_wake(engine *e);
/* Earliest instant a wait ends or a watched topic's front becomes
 * fetchable; UINT64_MAX if none. */
uint64_t claim_next_due(engine *e);

#endif
