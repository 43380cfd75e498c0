/*
 * state.h — the engine's objects (topics, tasks, deliveries, incidents):
 * how each is found, indexed, written into the turn's batch and freed.
 * Every mutation of a persisted field is followed, in the same turn, by
 * the state_*_put that writes it. Functions that return int return 0 or a
 * BERTH_E* code; those that change memory and then fail have called
 * turn_fail() (the turn is undone). Engine thread only.
 */
#ifndef BERTH_ENGINE_STATE_H
#define BERTH_ENGINE_STATE_H

#include "engine/core.h"

/* The topic named so; create: make it if absent (NULL: no memory). */
topic *state_topic(engine *e, const char *name, size_t len, bool create);
/* A topic lives while a task, a delivery or a waiting fetch names it:
 * state_topic_maybe_idle() notes one that may have lost its last; the end
 * of the turn frees it if so (never sooner: the turn's events name it).
 * state_topics_reap(e, true) looks at every topic (after a reload). */
void state_topic_maybe_idle(engine *e, topic *tp);
void state_topics_reap(engine *e, bool all);
/* The deployment a declaration belongs to (NULL: the implicit one), whose
 * counters (core.h) the code that changes what it holds keeps. */
static inline deployment *state_dep(engine *e, const channel *c)
{
    return c != NULL ? c->dep : &e->implicit;
}
/* What a task never claimed reads as (its retries_left is the engine's
 * budget: state_task_retries_left). */
extern const task_run state_run_none;
/* t's claim record for reading: its own, or state_run_none. */
static inline const task_run *state_run(const task *t)
{
    return t->run != NULL ? t->run : &state_run_none;
}
static inline uint32_t state_task_retries_left(const engine *e, const task *t)
{
    return t->run != NULL ? t->run->retries_left : e->o.retries;
}
/* t's claim record for writing, made (as a never-claimed task's) if it
 * has none. NULL: no memory, nothing changed. */
task_run *state_task_run(engine *e, task *t);
/* A claim holds t at now (its lock is live). */
static inline bool state_task_lock_live(const task *t, uint64_t now)
{
    return t->run != NULL && t->run->has_lock && t->run->lock_expires_at_ms > now;
}
/* Not fetchable before this: its delay's end, then a backoff's. */
static inline uint64_t state_task_available_at(const task *t)
{
    return t->run != NULL ? t->run->available_at_ms : t->ready.at;
}
/* The instant t becomes fetchable: max(available_at, lock_expires_at). */
static inline uint64_t state_fetchable_at(const task *t)
{
    if (t->run == NULL)
        return t->ready.at;
    const task_run *r = t->run;
    return r->available_at_ms > r->lock_expires_at_ms ? r->available_at_ms : r->lock_expires_at_ms;
}
/* A topic's orders (core.h): state_task_index() puts t, in neither, into
 * the one it belongs to at now and into the gauges (BERTH_ENOMEM: nothing
 * changed); state_task_unindex() takes it out of its order (terminal, or
 * gone). state_task_reindex() moves t where it belongs after its times
 * changed, and places it in the gauges (turn_fail when that finds no
 * memory); a move between the orders never allocates. */
int state_task_index(engine *e, task *t, uint64_t now);
void state_task_unindex(task *t);
void state_task_reindex(engine *e, task *t);
/* The task a claim of tp takes first at now, the most urgent fetchable one
 * (NULL: none), after moving every task that has become fetchable out of
 * tp's later order: the claim predicate of R5, with no sweeper. */
task *state_topic_front(topic *tp, uint64_t now);
/* When tp next has a fetchable task: 0 if it has one now (as last
 * placed), UINT64_MAX if none is coming. */
uint64_t state_topic_due(const topic *tp);
void state_topic_fini(topic *tp);
/* t's state as listings and gauges show it at now. */
engine_task_state state_task_state(const task *t, uint64_t now);
/* Places t in the gauges' heaps as it stands at now (also when it went
 * terminal, and at load). BERTH_ENOMEM. */
int state_task_gauge(engine *e, task *t, uint64_t now);
/* Takes t out of the gauges. */
void state_task_gauge_drop(task *t);
/* Drops the gauges' entries whose instant has passed, and moves the
 * tasks that have come due out of each topic's later order: then each
 * topic's locked.n, backoff.n and n_later_unfetched (its delayed tasks)
 * are exact. */
void state_gauges_settle(engine *e, uint64_t now);
/* Writes t's TaskState row into the turn's batch (turn_fail on error). */
int state_task_put(engine *e, task *t);
/* Deletes t's rows in the batch and frees it. */
void state_task_delete(engine *e, task *t);
/* A task as the pull sink parks it: fetchable from created_at_ms or its
 * delay's end (not_before_ms, 0: none), the whole failure budget, never
 * claimed, not yet in any index or table. NULL: no memory. */
task *state_task_new(engine *e, const uint8_t id[BERTH_ID_LEN], topic *tp, uint64_t seq,
                     uint64_t created_at_ms, size_t body_bytes, uint32_t priority,
                     uint64_t not_before_ms);
void state_task_free(engine *e, task *t);
/* Keeps t's encoded body in memory (the body cache, state.c): takes
 * `owned` (allocated, len bytes; freed on failure) or else copies `bytes`.
 * Past the kept part of the budget it is held as recent, at least to the
 * end of the turn (until then the store has not seen it). turn_fail on
 * error. */
int state_task_keep_body(engine *e, task *t, uint8_t *owned, const void *bytes, size_t len);
/* Keeps a copy of a body the store already holds (at load) while the
 * cache has room; past it, or without memory, the store serves it. */
void state_task_cache_body(engine *e, task *t, const void *bytes, size_t len);
/* Lets the oldest recent bodies go, down to their budget (after the
 * turn's write). */
void state_task_evict_bodies(engine *e);
/* Forgets the recent bodies' order (their tasks have been freed). */
void state_task_forget_bodies(engine *e);
/* Decodes t's body, from memory or from the store (seeing the batch). */
int state_task_read_body(engine *e, task *t, store_body *out);
/* Replaces a claimed task's last error (copies; BERTH_ENOMEM leaves it unchanged). */
int state_task_set_error(task_run *run, const engine_error *err);
/* The task of a printable id: INVALID_ARGUMENT naming field for a bad id,
 * NOT_FOUND (verdict NOT_FOUND) for none. */
task *state_task_find(engine *e, const char *id_str, const char *field, engine_status *st);

/* A new delivery of body to channel chan (NULL: the implicit one) (its
 * id, seq, deployment and created_at are set here; the rest is the
 * caller's), due now, fresh (its outbox row is written at the end of the
 * turn unless it is parked first). BERTH_ENOMEM: nothing changed. */
int state_delivery_new(engine *e, topic *tp, const channel *chan, store_body *body, delivery **out);
/* When d's task becomes fetchable (a push: when d is first sent): its
 * delay's end, or now. A call's attempt times out from here. */
static inline uint64_t state_delivery_starts(const delivery *d, uint64_t now)
{
    return d->not_before_ms > now ? d->not_before_ms : now;
}
/* When a new d is first due: a push waits out its delay in the outbox;
 * the pull sink parks at once (its task carries the delay). */
static inline uint64_t state_delivery_due(const delivery *d)
{
    bool push = d->chan != NULL && d->chan->lane != NULL;
    return push ? state_delivery_starts(d, d->created_at_ms) : d->created_at_ms;
}
/* Withdraws d (or forgets it, delivered): its rows go from the batch (or are never written, if
 * fresh), it leaves every index and is freed. */
void state_delivery_delete(engine *e, delivery *d);
/* Push lanes (core.h): d waits at the end of its lane for a free slot
 * (out of the due index); state_lane_leave() takes it out again. */
void state_lane_wait(delivery *d);
void state_lane_leave(delivery *d);
/* A slot of lane l is free again: the oldest delivery waiting there is
 * admitted to it (sent before the others waiting), due now. turn_fail
 * when the due index finds no memory. */
int state_lane_admit(engine *e, push_lane *l);
/* Writes d's DeliveryState row into the batch (turn_fail on error). */
int state_delivery_put(engine *e, delivery *d);
void state_delivery_free(delivery *d);
/* Writes an incident row into the batch (turn_fail on error). */
int state_incident_put(engine *e, int kind, const uint8_t subject[BERTH_ID_LEN], const topic *t,
                       const char *code, const char *message);

/* Fresh random bytes from libsodium's CSPRNG, drawn in blocks (one
 * system call per 4 KiB rather than per id). */
void state_random(engine *e, void *out, size_t n);
/* Whole-state invariants (BERTH_CHECKS builds; otherwise nothing). */
void state_check(engine *e);

#endif
