/* submit.h — a producer hands over work, a task or a call (R1, R17, R18).
 * Engine thread. */
#ifndef BERTH_ENGINE_SUBMIT_H
#define BERTH_ENGINE_SUBMIT_H

#include "engine/core.h"

/* Request handlers: the answer goes into p->reply; nonzero only when the
 * turn failed (turn_fail). */
int submit_task(engine *e, pending *p);
int submit_batch(engine *e, pending *p);
/* A call: a submit plus its instance (instance.c). */
int submit_call(engine *e, pending *p);

#endif
