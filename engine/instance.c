/*
 * instance.c — a call's instance: the second budget (engine/README.md, "Calls", R12, R13).
 *
 * A call is a submit plus an instance. The instance waits for the outcome
 * of its attempts: a worker's completion (RESOLVED with the result) or
 * refusal (RESOLVED with the worker's error), both arriving through intake
 * (intake.c correlates them by the parked instance id). A worker's fail
 * never reaches it (R13): the task's own budget handles that.
 *
 * ITS OWN RETRY POLICY
 *   With a policy, each attempt has a timeout: a durable timer (the 'L'
 *   row carries it; memory keeps every live instance's timer in one heap,
 *   rebuilt at open, so nothing ever scans for due timers). When it fires
 *   the attempt is dead: its delivery, if still in the outbox, and its
 *   task, if no worker holds it, are withdrawn in the same batch; then the
 *   instance backs off (BACKOFF, a durable timer again) or, with its
 *   attempts spent, FAILS with TIMEOUT. A reply that arrives in BACKOFF is
 *   refused RETRY_PENDING. The backoff's end re-drives: the dead
 *   attempt's task goes if its holder let go meanwhile, and a fresh
 *   delivery (a fresh id, which is its idempotency key) carries
 *   attempt + 1. A late reply to an older attempt, outside a backoff,
 *   still resolves. A request the relay poisons is a failed attempt too
 *   (instance_poisoned, told in the turn after): FAILED with
 *   DELIVERY_POISONED once no attempt is left, at once without a policy.
 *
 * ITS END
 *   One batch deletes the 'L' row, writes the 'E' row (the outcome) and a
 *   retention timer (calls.c drops the instance when its retention ends).
 *   The instance stays in memory to the end of that turn, with its 'E'
 *   row encoded, so an await later in the same turn reads what the store
 *   will hold; then it leaves memory. Its awaits are answered at once.
 *
 * Engine thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/check.h"
#include "engine/instance.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "engine/wait.h"
#include "store/err.h"

instance *instance_find(engine *e, const uint8_t id[BERTH_ID_LEN])
{
    return table_get(&e->instances, id, BERTH_ID_LEN);
}

void instance_free(instance *i)
{
    if (i == NULL)
        return;
    free(i->topic);
    for (size_t k = 0; k < i->n_non_retryable; k++)
        free(i->non_retryable[k]);
    free(i->non_retryable);
    free(i->request);
    free(i->dedup_key);
    free(i->ended_row);
    free(i);
}

/* The record of i as it now stands (live fields). */
static store_instance record_of(const instance *i)
{
    store_instance r = {
        .state = (int)i->state,
        .topic = i->topic,
        .deployment = i->chan != NULL ? i->chan->dep->number : 0,
        .attempt = i->attempt,
        .created_at_ms = i->created_at_ms,
        .timer_at_ms = heap_has(&i->timer) ? i->timer.at : 0,
        .has_current = i->has_current,
        .has_retry = i->has_retry,
        .timeout_ms = i->timeout_ms,
        .max_attempts = i->max_attempts,
        .initial_backoff_ms = i->initial_backoff_ms,
        .max_backoff_ms = i->max_backoff_ms,
        .multiplier = i->multiplier,
        .non_retryable_codes = (const char *const *)i->non_retryable,
        .n_non_retryable_codes = i->n_non_retryable,
        .request = i->request,
        .request_len = i->request_len,
        .dedup_key = i->dedup_key,
        .dedup_key_len = i->dedup_key_len,
    };
    memcpy(r.id, i->id, BERTH_ID_LEN);
    memcpy(r.current_id, i->current, BERTH_ID_LEN);
    return r;
}

int instance_put(engine *e, instance *i)
{
    store_instance r = record_of(i);
    if (store_instance_encode(&r, &e->buf) != BERTH_OK)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED,
                         "out of memory writing a call's instance");
    uint8_t key[STORE_INSTANCE_KEY_LEN];
    store_instance_key(key, STORE_INSTANCE_LIVE, i->id);
    store_batch_put(e->batch, STORE_CF_INSTANCES, key, sizeof(key), e->buf.data, e->buf.len);
    return BERTH_OK;
}

int instance_arm(engine *e, instance *i, uint64_t at)
{
    i->timer.at = at;
    if (heap_has(&i->timer)) {
        heap_fix(&e->timers, &i->timer);
        return BERTH_OK;
    }
    if (heap_push(&e->timers, &i->timer) != BERTH_OK)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory arming a call's timer");
    return BERTH_OK;
}

int instance_reply_ended(engine_reply *r, const void *row, size_t len)
{
    store_instance *rec = reply_instance_row(r);
    if (rec == NULL)
        return BERTH_ENOMEM;
    int rv = store_instance_decode(row, len, rec);
    if (rv != BERTH_OK)
        return rv;
    return rules_instance_answer(r, rec) ? BERTH_OK : BERTH_ENOMEM;
}

/* Answers every await of i, which has just ended, with its 'E' row. */
static void answer_awaits(engine *e, instance *i)
{
    while (i->awaits != NULL) {
        waiter *w = i->awaits;
        engine_reply *r = w->p->reply;
        int rv = instance_reply_ended(r, i->ended_row, i->ended_row_len);
        if (rv != BERTH_OK) {
            reply_reset(r);
            if (rv == BERTH_ENOMEM)
                reply_no_memory(&r->status);
            else
                reply_status(&r->status, ENGINE_CODE_INTERNAL, "the call's record did not decode");
        }
        wait_answer(e, w);
    }
}

int instance_end(engine *e, instance *i, engine_instance_state state, const engine_result *result,
                 const engine_error *err)
{
    uint64_t now = e->t.now_ms;
    store_header hs[ENGINE_HEADERS_MAX];
    size_t nh = result ? result->n_headers : 0;
    for (size_t k = 0; k < nh && k < ENGINE_HEADERS_MAX; k++)
        hs[k] = (store_header){result->headers[k].name, result->headers[k].value};
    store_instance r = {
        .state = (int)state,
        .topic = i->topic,
        .deployment = i->chan != NULL ? i->chan->dep->number : 0,
        .attempt = i->attempt,
        .created_at_ms = i->created_at_ms,
        .has_current = i->has_current,
        .dedup_key = i->dedup_key,
        .dedup_key_len = i->dedup_key_len,
        .ended_at_ms = now,
        .has_result = result != NULL,
        .result_payload = result ? result->payload : NULL,
        .result_payload_len = result ? result->payload_len : 0,
        .result_content_type = result ? result->content_type : NULL,
        .result_headers = hs,
        .n_result_headers = nh < ENGINE_HEADERS_MAX ? nh : ENGINE_HEADERS_MAX,
    };
    if (err != NULL)
        r.error = (store_error){err->code, err->message, err->details};
    memcpy(r.id, i->id, BERTH_ID_LEN);
    memcpy(r.current_id, i->current, BERTH_ID_LEN);
    instance **slot = NULL;
    if (store_instance_encode(&r, &e->buf) != BERTH_OK ||
        (i->ended_row = mem_dup(e->buf.data, e->buf.len)) == NULL ||
        (slot = VEC_ADD(&e->t.ended)) == NULL)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory ending a call");
    *slot = i;
    i->ended_row_len = e->buf.len;

    uint8_t key[STORE_INSTANCE_KEY_LEN], rkey[STORE_RETENTION_KEY_LEN];
    store_instance_key(key, STORE_INSTANCE_LIVE, i->id);
    store_batch_delete(e->batch, STORE_CF_INSTANCES, key, sizeof(key));
    store_instance_key(key, STORE_INSTANCE_ENDED, i->id);
    store_batch_put(e->batch, STORE_CF_INSTANCES, key, sizeof(key), i->ended_row, i->ended_row_len);
    store_retention_key(rkey, now, i->id);
    store_batch_put(e->batch, STORE_CF_TIMERS, rkey, sizeof(rkey), "", 0);
    if (e->retention_due_ms == UINT64_MAX)
        e->retention_due_ms = now + e->o.instance_retention_ms;
    if (now < store_get_be64(e->retention_cursor)) /* the clock went back */
        memset(e->retention_cursor, 0, sizeof(e->retention_cursor));

    if (heap_has(&i->timer))
        heap_remove(&e->timers, &i->timer);
    if (i->state == ENGINE_INSTANCE_BACKOFF) {
        e->n_backoff--;
        state_dep(e, i->chan)->n_backoff--;
    }
    if (i->attempt < i->max_attempts)
        state_dep(e, i->chan)->n_retrying--;
    i->state = state;
    i->ended = true;
    if (state == ENGINE_INSTANCE_RESOLVED)
        e->t.count.calls_resolved++;
    else
        e->t.count.calls_failed++;
    turn_event_named(e, ENGINE_EVENT_INSTANCE_RESOLVED, i->topic, i->id, NULL, err);
    answer_awaits(e, i);
    return BERTH_OK;
}

void instance_withdraw(engine *e, instance *i, const task *except)
{
    if (!i->has_current)
        return;
    delivery *d = idtab_get(&e->deliveries, i->current);
    if (d != NULL && !d->poisoned)
        state_delivery_delete(e, d);
    task *t = idtab_get(&e->tasks, i->current);
    if (t != NULL && t != except && !state_task_lock_live(t, e->t.now_ms))
        state_task_delete(e, t);
}

/* i's retry policy, as rules.h reads it. */
static rules_policy instance_policy(const instance *i)
{
    return (rules_policy){.timeout_ms = i->timeout_ms,
                          .max_attempts = i->max_attempts,
                          .initial_backoff_ms = i->initial_backoff_ms,
                          .max_backoff_ms = i->max_backoff_ms,
                          .multiplier = i->multiplier};
}

/* The next attempt: a fresh delivery of the request, attempt + 1. The
 * dead attempt's task goes first, unless a worker holds it now. */
static int redrive(engine *e, instance *i)
{
    instance_withdraw(e, i, NULL);
    store_body b;
    int rv = i->request ? store_body_decode(i->request, i->request_len, &b) : BERTH_ECORRUPT;
    if (rv != BERTH_OK) {
        engine_error err = {.code = ENGINE_EC_INTERNAL,
                            .message = "the call's request could not be read for its next attempt"};
        return rv == BERTH_ENOMEM
                   ? turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory re-driving a call")
                   : instance_end(e, i, ENGINE_INSTANCE_FAILED, NULL, &err);
    }
    topic *tp = state_topic(e, b.topic, strlen(b.topic), true);
    b.has_instance = true;
    memcpy(b.instance_id, i->id, BERTH_ID_LEN);
    b.call_attempt = i->attempt + 1;
    delivery *d;
    rv = tp ? state_delivery_new(e, tp, i->chan, &b, &d) : BERTH_ENOMEM;
    store_body_clear(&b);
    if (rv != BERTH_OK) {
        if (tp != NULL)
            state_topic_maybe_idle(e, tp);
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory re-driving a call");
    }
    i->attempt++;
    i->state = ENGINE_INSTANCE_WAITING;
    e->n_backoff--;
    state_dep(e, i->chan)->n_backoff--;
    if (i->attempt >= i->max_attempts) /* its last: it re-drives no more */
        state_dep(e, i->chan)->n_retrying--;
    i->has_current = true;
    memcpy(i->current, d->id, BERTH_ID_LEN);
    if ((rv = instance_arm(e, i, state_delivery_starts(d, e->t.now_ms) + i->timeout_ms)) !=
        BERTH_OK)
        return rv;
    return instance_put(e, i);
}

/* A failed attempt (engine/README.md, "Calls": its timeout, or its request poisoned):
 * back off before the next one, or FAIL with err when none is left. */
static int attempt_failed(engine *e, instance *i, const engine_error *err)
{
    rules_policy pol = instance_policy(i);
    rules_call_next next;
    rules_call_failed_attempt(&pol, i->attempt, e->t.now_ms, e->o.backoff_jitter, &next);
    if (next.fail)
        return instance_end(e, i, ENGINE_INSTANCE_FAILED, NULL, err);
    i->state = ENGINE_INSTANCE_BACKOFF;
    e->n_backoff++;
    state_dep(e, i->chan)->n_backoff++;
    int rv = instance_arm(e, i, next.retry_at_ms);
    if (rv != BERTH_OK)
        return rv;
    return instance_put(e, i);
}

int instance_fire(engine *e, instance *i)
{
    heap_remove(&e->timers, &i->timer);
    if (i->state == ENGINE_INSTANCE_BACKOFF)
        return redrive(e, i);
    /* WAITING: the attempt's timeout. */
    e->t.count.calls_timed_out++;
    instance_withdraw(e, i, NULL);
    char msg[160];
    engine_error err;
    rules_policy pol = instance_policy(i);
    rules_call_timeout(&pol, i->attempt, msg, sizeof(msg), &err);
    return attempt_failed(e, i, &err);
}

int instance_poisoned(engine *e, instance *i, const delivery *d)
{
    if (i->ended || i->state != ENGINE_INSTANCE_WAITING || !i->has_current ||
        memcmp(i->current, d->id, BERTH_ID_LEN) != 0)
        return BERTH_OK; /* an attempt that is over already */
    char msg[300];
    engine_error err;
    rules_call_poisoned(i->attempt, i->max_attempts, d->err_message, msg, sizeof(msg), &err);
    return attempt_failed(e, i, &err);
}

void instance_turn_done(engine *e)
{
    for (size_t k = 0; k < e->t.ended.n; k++) {
        instance *i = e->t.ended.v[k];
        table_del(&e->instances, i->id, BERTH_ID_LEN);
        state_dep(e, i->chan)->n_instances--;
        instance_free(i);
    }
    e->t.ended.n = 0;
}
