/*
 * turn.h — the turn in flight: what it answers, publishes and rings, and
 * how it fails.
 *
 * A TURN (actor.c runs it)
 *   calls' timers → relay (park what came due) → requests → relay (park
 *   this turn's submits, ring doorbells) → wake waiting fetches → expire
 *   waits → the retirement gate → ONE write (appended) → hand answers,
 *   events and pushes to the commit thread, which syncs and then answers
 *   them (commit.c). Everything a turn changes in
 *   memory is written into e->batch by the same code that changed it;
 *   nothing is answered before the sync.
 *
 * FAILURE
 *   Code that leaves the turn half-applied (memory changed, its row not
 *   written, or the other way round) calls turn_fail() with the reason and
 *   returns the error to its caller, which stops. The first reason is kept:
 *   the actor then writes nothing, reloads memory from the store and
 *   answers every request of the turn with that reason (turn_fail_status),
 *   never OK and never "no work". A request that fails before it changes
 *   anything answers its own error and the turn goes on.
 *
 * Engine thread only, except turn_call_done() and turn_refuse() (a list
 * of answers, on whichever thread owns it).
 */
#ifndef BERTH_ENGINE_TURN_H
#define BERTH_ENGINE_TURN_H

#include "engine/core.h"

/* Starts a turn at now_ms: nothing staged, no failure. */
void turn_begin(engine *e, uint64_t now_ms);
/* Stages p's reply, to be answered after this turn's sync. */
void turn_answer(engine *e, pending *p);
/* Stages an event (its strings are copied). Events are best effort: one
 * that finds no memory is dropped, and the turn goes on. */
void turn_event(engine *e, engine_event_kind kind, const topic *t, const uint8_t id[BERTH_ID_LEN],
                const engine_error *err, uint32_t retries_left);
/* The same for a topic named by a string that lives to the end of the
 * turn, with the call the event concerns (instance_id, or NULL). */
void turn_event_named(engine *e, engine_event_kind kind, const char *topic_name,
                      const uint8_t id[BERTH_ID_LEN], const uint8_t *instance_id,
                      const engine_error *err);
/* deployment.retired: the deployment's id travels as the event's topic. */
void turn_event_deployment(engine *e, const char *id, uint32_t version);
/* Frees the strings the events own. */
void turn_events_free(engine_event *v, size_t n);
/* Rings t's doorbell: its waiting fetches look again this turn (R7). */
void turn_doorbell(engine *e, topic *t);

/* Records why the turn is half-applied (the first reason wins) and
 * returns the BERTH_E* code for the caller to pass up: BERTH_ENOMEM for
 * RESOURCE_EXHAUSTED, else BERTH_EIO. */
__attribute__((format(printf, 3, 4))) int turn_fail(engine *e, engine_code code, const char *fmt,
                                                    ...);
static inline bool turn_failed(const engine *e)
{
    return e->t.failed;
}
/* The status every request of a failed turn is answered with. */
void turn_fail_status(const engine *e, engine_status *st);
/* Memory cannot be made to match the store: the engine serves nothing
 * more (every request UNAVAILABLE) until its store is reopened and
 * reloaded (actor.c tries, from ENGINE_REOPEN_BACKOFF_MIN_MS on). */
void turn_halt(engine *e, const char *why);

/* Calls done() for every request of the list, which it frees. */
void turn_call_done(pending *list);
/* Replaces every reply of the list with st (keep_unavailable: a reply
 * already UNAVAILABLE keeps its own reason). */
void turn_refuse(pending *list, const engine_status *st, bool keep_unavailable);

#endif
