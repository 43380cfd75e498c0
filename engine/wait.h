/*
 * wait.h — requests that wait (R7): a fetch for work on its topics, an
 * await_call for its call to end. Waiting is data, not a thread: a waiter
 * is linked into what it waits on (each of its topics, or its instance),
 * into the deadline heap and into its owner's list, and is answered by
 * whoever changes what it waits on (claim.c rings topics, instance.c ends
 * instances), by its deadline, or by engine_cancel() of its owner.
 *
 * Bounds: at most waits_max waiters in all and waits_per_owner_max of one
 * owner (a connection); past either a request is answered at once,
 * RESOURCE_EXHAUSTED, retryable.
 *
 * Engine thread only.
 */
#ifndef BERTH_ENGINE_WAIT_H
#define BERTH_ENGINE_WAIT_H

#include "engine/core.h"

struct owner;

typedef struct waiter {
    pending *p;
    struct owner *own; /* NULL: a request with no owner */
    struct waiter *own_prev, *own_next;
    heap_node deadline; /* in e->waits */
    /* a fetch: linked once into each of its topics */
    topic **topics;
    size_t n_topics;
    wait_link *links; /* one per topic */
    uint32_t max_tasks;
    uint64_t lock_ms;
    /* an await: linked into its instance's list */
    instance *inst;
    struct waiter *inst_prev, *inst_next;
} waiter;

/* Whether p may wait under the bounds; if not, st says why (and the
 * refusal is counted). */
bool wait_may(engine *e, const pending *p, engine_status *st);
/* p (a fetch) waits on its topics until wait_ms from now. False: no
 * memory, nothing changed. */
bool wait_fetch(engine *e, pending *p, uint32_t max_tasks, uint64_t lock_ms, uint64_t wait_ms);
/* p (an await) waits on inst until wait_ms from now. False: no memory. */
bool wait_await(engine *e, pending *p, instance *inst, uint64_t wait_ms);
/* Unlinks w everywhere and answers its request with whatever its reply
 * holds; an await whose reply is still empty is answered with its
 * instance as it stands (OK). */
void wait_answer(engine *e, waiter *w);
/* The cancel request (engine_cancel): every wait of its owner is
 * answered CANCELLED. */
int wait_cancel(engine *e, pending *p);
/* Answers the waiters whose deadline has come. */
void wait_expire(engine *e);
/* The earliest deadline, UINT64_MAX if none. */
uint64_t wait_next_deadline(const engine *e);
/* Answers every waiter with st (halting, closing); awaits_only: only the
 * awaits (their instances are about to be freed and reloaded). */
void wait_abort(engine *e, const engine_status *st, bool awaits_only);

#endif
