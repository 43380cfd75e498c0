/*
 * instance.h — a call's instance: its rows, its timer, its end (engine/README.md, "Calls",
 * R12, R13). See instance.c. Engine thread only; writes go into the
 * turn's batch, and those that change memory and then fail call
 * turn_fail().
 */
#ifndef BERTH_ENGINE_INSTANCE_H
#define BERTH_ENGINE_INSTANCE_H

#include "engine/core.h"

/* The live instance of an id (or one ended this turn: i->ended), NULL if
 * none. */
instance *instance_find(engine *e, const uint8_t id[BERTH_ID_LEN]);
/* Writes i's 'L' row into the batch. */
int instance_put(engine *e, instance *i);
/* Arms i's timer at `at` (re-keys it if armed). */
int instance_arm(engine *e, instance *i, uint64_t at);
void instance_free(instance *i);

/* Ends i: RESOLVED with a result or a refusal (err), or FAILED with err.
 * Its 'L' row goes, its 'E' row and retention timer come, its awaits are
 * answered with it, and an event tells. */
int instance_end(engine *e, instance *i, engine_instance_state state, const engine_result *result,
                 const engine_error *err);
/* The attempt in flight is not needed: its delivery, if still in the
 * outbox (and not poisoned: that stays for the operator), and its task,
 * if no worker holds it and it is not `except` (a task being answered),
 * are withdrawn. */
void instance_withdraw(engine *e, instance *i, const task *except);
/* i's timer came due: a timeout (a failed attempt) or the end of a
 * backoff (the next attempt). */
int instance_fire(engine *e, instance *i);
/* The attempt's request delivery d was poisoned: a failed attempt, if d
 * is still i's attempt in flight. */
int instance_poisoned(engine *e, instance *i, const delivery *d);
/* After the turn's write: the instances it ended leave memory. */
void instance_turn_done(engine *e);

/* r->instance from an encoded 'E' row (its memory is the reply's).
 * BERTH_ECORRUPT, BERTH_ENOMEM. */
int instance_reply_ended(engine_reply *r, const void *row, size_t len);

#endif
