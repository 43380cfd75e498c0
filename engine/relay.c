/*
 * relay.c — the outbox relay, its sinks, and the pull sink that parks.
 *
 * Each turn the relay hands every due delivery (up to relay_max_per_turn)
 * to the sink its channel's transport names. A sink answers Delivered,
 * Retry(reason) or Reject(reason). This is the one retry machinery (R4):
 * a Retry backs off on the outbox curve and, at the attempt ceiling, the
 * delivery is poisoned: kept for an operator with an incident and an
 * event, and out of the due index (so it no longer pins anything).
 *
 * THE PULL SINK (R3)
 *   Parking writes the task row (Body copied byte for byte, key = the
 *   delivery id, so a re-park overwrites and never duplicates) into the
 *   same batch that deletes the outbox row, and answers Delivered: the
 *   ownership moves atomically. If that batch then fails to commit, the
 *   parks of the turn are failed attempts like any other Retry
 *   (relay_parks_failed, after memory is reloaded).
 *
 * Engine thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

typedef enum sink_result {
    SINK_DELIVERED,
    SINK_RETRY,
    SINK_REJECT,
} sink_result;

typedef struct sink {
    const char *scheme; /* the channel transport it serves */
    sink_result (*deliver)(engine *e, delivery *d, const char **reason);
} sink;

static sink_result pull_deliver(engine *e, delivery *d, const char **reason);

static const sink sinks[] = {
    {"pull", pull_deliver},
};

/* engine_options_check() admits only transports with a sink here, so every
 * channel resolves; undeclared topics are pull channels. */
static const sink *sink_for(const topic *t)
{
    (void)t;
    return &sinks[0];
}

static bool parked_push(engine *e, const uint8_t id[BERTH_ID_LEN])
{
    turn *t = &e->t;
    if (t->n_parked == t->cap_parked) {
        size_t cap = t->cap_parked ? t->cap_parked * 2 : 64;
        uint8_t(*v)[BERTH_ID_LEN] = realloc(t->parked, cap * sizeof(*v));
        if (v == NULL)
            return false;
        t->parked = v;
        t->cap_parked = cap;
    }
    memcpy(t->parked[t->n_parked++], id, BERTH_ID_LEN);
    return true;
}

/* A fresh delivery's outbox row goes into the batch after all. */
static void write_fresh_body(engine *e, delivery *d)
{
    if (!d->fresh)
        return;
    uint8_t key[STORE_ROW_KEY_LEN];
    store_row_key(key, d->seq, STORE_KIND_BODY);
    store_batch_put(e->batch, STORE_CF_OUTBOX, key, sizeof(key), d->body, d->body_len);
    free(d->body);
    d->body = NULL;
    d->fresh = false;
    e->t.fresh[d->fresh_idx] = NULL;
}

static sink_result pull_deliver(engine *e, delivery *d, const char **reason)
{
    if (failpoint_take(&e->fp_park)) {
        *reason = "park failed: failpoint";
        return SINK_RETRY;
    }
    uint8_t key[STORE_ROW_KEY_LEN];
    store_row_key(key, d->seq, STORE_KIND_BODY);
    store_value v = {0};
    const void *body = d->body;
    size_t body_len = d->body_len;
    if (!d->fresh) {
        if (store_get(e->store, STORE_CF_OUTBOX, key, sizeof(key), &v) != BERTH_OK) {
            *reason = "park failed: the outbox row could not be read";
            return SINK_RETRY;
        }
        body = v.data;
        body_len = v.len;
    }
    task *t = task_new(e, d->id, d->topic, d->seq, d->created_at_ms, body_len);
    if (t == NULL)
        goto oom;
    if (table_put(&e->tasks, t->id, BERTH_ID_LEN, t) != BERTH_OK)
        goto oom_free;
    if (heap_push(&d->topic->ready, &t->ready) != BERTH_OK) {
        table_del(&e->tasks, t->id, BERTH_ID_LEN);
        goto oom_free;
    }
    t->has_instance = false; /* pull deliveries of this build carry no call */
    if (!d->fresh && !parked_push(e, d->id)) {
        heap_remove(&d->topic->ready, &t->ready);
        table_del(&e->tasks, t->id, BERTH_ID_LEN);
        goto oom_free;
    }

    store_batch_put(e->batch, STORE_CF_TASKS, key, sizeof(key), body, body_len);
    /* The body stays in memory for the claim and the completion to come. */
    if (d->fresh) {
        task_keep_body(e, t, d->body, NULL, body_len);
        d->body = NULL;
    } else {
        task_keep_body(e, t, NULL, body, body_len);
    }
    store_value_free(&v);
    if (!d->fresh) {
        store_batch_single_delete(e->batch, STORE_CF_OUTBOX, key, sizeof(key));
        if (d->has_state_row) {
            store_row_key(key, d->seq, STORE_KIND_STATE);
            store_batch_delete(e->batch, STORE_CF_OUTBOX, key, sizeof(key));
        }
    }
    turn_event(e, ENGINE_EVENT_TASK_PARKED, t->topic, t->id, NULL, 0);
    doorbell_ring(e, t->topic);
    return SINK_DELIVERED;

oom_free:
    free(t);
oom:
    store_value_free(&v);
    *reason = "park failed: out of memory";
    return SINK_RETRY;
}

static void relay_poison(engine *e, delivery *d, const char *reason)
{
    d->poisoned = true;
    e->n_poisoned++;
    write_fresh_body(e, d);
    if (delivery_put_state(e, d) != BERTH_OK ||
        incident_put(e, STORE_INCIDENT_DELIVERY_POISONED, d->id, d->topic, "DELIVERY_POISONED",
                     reason) != BERTH_OK) {
        e->t.abort = true;
        return;
    }
    engine_error err = {.code = "DELIVERY_POISONED", .message = d->err_message};
    turn_event(e, ENGINE_EVENT_DELIVERY_POISONED, d->topic, d->id, &err, 0);
}

/* A failed attempt: back off on the outbox curve, or poison at the
 * ceiling. d is out of the due index. */
static void relay_retry(engine *e, delivery *d, const char *reason)
{
    d->attempts++;
    free(d->err_message);
    d->err_message = strdup(reason);
    if (e->o.delivery_attempts > 0 && d->attempts >= e->o.delivery_attempts) {
        relay_poison(e, d, reason);
        return;
    }
    d->due.at =
        e->t.now_ms + engine_backoff(e->o.delivery_backoff_initial_ms, e->o.delivery_backoff_max_ms,
                                     d->attempts, e->o.backoff_jitter);
    write_fresh_body(e, d);
    if (heap_push(&e->outbox, &d->due) != BERTH_OK || delivery_put_state(e, d) != BERTH_OK)
        e->t.abort = true;
}

void relay_run(engine *e)
{
    uint64_t now = e->t.now_ms;
    if (now < e->write_retry_at_ms)
        return; /* the store is failing: do not pile up attempts */
    heap_node *x;
    for (uint32_t n = 0;
         n < e->o.relay_max_per_turn && (x = heap_min(&e->outbox)) != NULL && x->at <= now; n++) {
        delivery *d = container_of(x, delivery, due);
        heap_remove(&e->outbox, x);
        const char *reason = NULL;
        switch (sink_for(d->topic)->deliver(e, d, &reason)) {
        case SINK_DELIVERED:
            if (d->fresh)
                e->t.fresh[d->fresh_idx] = NULL;
            table_del(&e->deliveries, d->id, BERTH_ID_LEN);
            delivery_free(d);
            break;
        case SINK_RETRY:
            relay_retry(e, d, reason);
            break;
        case SINK_REJECT:
            free(d->err_message);
            d->err_message = strdup(reason);
            relay_poison(e, d, reason);
            break;
        }
    }
}

void relay_flush_fresh(engine *e)
{
    for (size_t i = 0; i < e->t.n_fresh; i++)
        if (e->t.fresh[i] != NULL)
            write_fresh_body(e, e->t.fresh[i]);
    e->t.n_fresh = 0;
}

void relay_parks_failed(engine *e, const uint8_t (*ids)[BERTH_ID_LEN], size_t n, const char *why)
{
    for (size_t i = 0; i < n; i++) {
        delivery *d = table_get(&e->deliveries, ids[i], BERTH_ID_LEN);
        if (d == NULL || d->poisoned)
            continue;
        heap_remove(&e->outbox, &d->due);
        relay_retry(e, d, why);
    }
}

void op_retry_delivery(engine *e, pending *p)
{
    engine_status *st = &p->reply->status;
    uint8_t id[BERTH_ID_LEN];
    if (berth_id_parse(p->req.u.retry_delivery.id, id) != BERTH_OK) {
        status_set(st, ENGINE_CODE_INVALID_ARGUMENT, "id: not a delivery id (32 hex digits)");
        return;
    }
    delivery *d = table_get(&e->deliveries, id, BERTH_ID_LEN);
    if (d == NULL) {
        status_set(st, ENGINE_CODE_NOT_FOUND, "no delivery %s in the outbox",
                   p->req.u.retry_delivery.id);
        return;
    }
    if (!d->poisoned) {
        status_set(st, ENGINE_CODE_FAILED_PRECONDITION, "delivery %s is not poisoned",
                   p->req.u.retry_delivery.id);
        return;
    }
    d->poisoned = false;
    e->n_poisoned--;
    d->attempts = 0;
    d->due.at = e->t.now_ms;
    if (heap_push(&e->outbox, &d->due) != BERTH_OK || delivery_put_state(e, d) != BERTH_OK)
        e->t.abort = true;
}
