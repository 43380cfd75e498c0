/*
 * relay.c — the outbox relay, its sinks, and the pull sink that parks.
 *
 * Each turn the relay hands every due delivery (up to relay_max_per_turn)
 * to the sink its channel's transport names. A sink answers Delivered,
 * Retry(reason) or Reject(reason). This is the one retry machinery (R4):
 * a Retry backs off on the outbox curve and, at the attempt ceiling, the
 * delivery is poisoned: kept for an operator with an incident and an
 * event, and out of the due index (so it no longer pins anything). A
 * call's request that is poisoned is a failed attempt of its call
 * (instance.c), told at the next turn.
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

#include "engine/check.h"
#include "engine/deploy.h"
#include "engine/fault.h"
#include "engine/listing.h"
#include "engine/relay.h"
#include "engine/reply.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "store/err.h"

typedef enum sink_result {
    SINK_DELIVERED,
    SINK_RETRY,
    SINK_REJECT,
    SINK_FAILED, /* the sink left the turn half-applied (turn_fail): stop */
} sink_result;

typedef struct sink {
    const char *scheme; /* the channel transport it serves */
    sink_result (*deliver)(engine *e, delivery *d, const char **reason);
} sink;

static sink_result pull_deliver(engine *e, delivery *d, const char **reason);

static const sink sinks[] = {
    {"pull", pull_deliver},
};

/* The sink of a delivery's channel: deploy.c admits only transports with
 * a sink here, so every channel resolves; the implicit deployment's
 * channels are pull channels. */
static const sink *sink_for(const channel *c)
{
    for (size_t i = 0; c != NULL && i < sizeof(sinks) / sizeof(sinks[0]); i++)
        if (strcmp(c->transport, sinks[i].scheme) == 0)
            return &sinks[i];
    return &sinks[0];
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
    e->t.fresh.v[d->fresh_idx] = NULL;
}

static sink_result pull_deliver(engine *e, delivery *d, const char **reason)
{
    if (fault_take(&e->fp_park)) {
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
    task *t = state_task_new(e, d->id, d->topic, d->seq, d->created_at_ms, body_len);
    if (t == NULL)
        goto oom;
    if (table_put(&e->tasks, t->id, BERTH_ID_LEN, t) != BERTH_OK)
        goto oom_free;
    if (heap_push(&d->topic->ready, &t->ready) != BERTH_OK) {
        table_del(&e->tasks, t->id, BERTH_ID_LEN);
        goto oom_free;
    }
    t->has_instance = d->has_instance;
    t->chan = d->chan;
    berth_id_bytes *parked = d->fresh ? NULL : VEC_ADD(&e->t.parked);
    if (!d->fresh && parked == NULL) {
        heap_remove(&d->topic->ready, &t->ready);
        table_del(&e->tasks, t->id, BERTH_ID_LEN);
        goto oom_free;
    }
    if (listing_add(e, t) != BERTH_OK) {
        if (parked != NULL)
            e->t.parked.n--;
        heap_remove(&d->topic->ready, &t->ready);
        table_del(&e->tasks, t->id, BERTH_ID_LEN);
        goto oom_free;
    }
    if (parked != NULL)
        memcpy(parked->b, d->id, BERTH_ID_LEN);

    store_batch_put(e->batch, STORE_CF_TASKS, key, sizeof(key), body, body_len);
    /* The body stays in memory for the claim and the completion to come.
     * From here the park is half-applied: a failure fails the turn. */
    int rv;
    if (d->fresh) {
        rv = state_task_keep_body(e, t, d->body, NULL, body_len);
        d->body = NULL;
    } else {
        rv = state_task_keep_body(e, t, NULL, body, body_len);
    }
    store_value_free(&v);
    if (rv != BERTH_OK) {
        *reason = "park failed: out of memory";
        return SINK_FAILED;
    }
    if (!d->fresh) {
        store_batch_single_delete(e->batch, STORE_CF_OUTBOX, key, sizeof(key));
        if (d->has_state_row) {
            store_row_key(key, d->seq, STORE_KIND_STATE);
            store_batch_delete(e->batch, STORE_CF_OUTBOX, key, sizeof(key));
        }
    }
    state_dep(e, t->chan)->n_tasks++; /* (and one delivery less: relay_run) */
    turn_event(e, ENGINE_EVENT_TASK_PARKED, t->topic, t->id, NULL, 0);
    turn_doorbell(e, t->topic);
    return SINK_DELIVERED;

oom_free:
    free(t);
oom:
    store_value_free(&v);
    *reason = "park failed: out of memory";
    return SINK_RETRY;
}

static int relay_poison(engine *e, delivery *d, const char *reason)
{
    d->topic->tc->c.poisoned++;
    d->poisoned = true;
    e->n_poisoned++;
    state_dep(e, d->chan)->n_poisoned++;
    write_fresh_body(e, d);
    int rv = state_delivery_put(e, d);
    if (rv == BERTH_OK)
        rv = state_incident_put(e, STORE_INCIDENT_DELIVERY_POISONED, d->id, d->topic,
                                "DELIVERY_POISONED", reason);
    if (rv != BERTH_OK)
        return rv;
    engine_error err = {.code = ENGINE_EC_DELIVERY_POISONED, .message = d->err_message};
    turn_event(e, ENGINE_EVENT_DELIVERY_POISONED, d->topic, d->id, &err, 0);
    /* A call's request that cannot be delivered is a failed attempt of the
     * call: the next turn tells it (calls.c), with whatever this turn's
     * write was (a turn that failed and counts its parks here included). */
    if (d->has_instance) {
        berth_id_bytes *slot = VEC_ADD(&e->calls_poisoned);
        if (slot == NULL)
            return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED,
                             "out of memory noting a call's poisoned request");
        memcpy(slot->b, d->id, BERTH_ID_LEN);
    }
    return BERTH_OK;
}

/* Keeps reason as d's last error (an allocation failure fails the turn). */
static int note_error(engine *e, delivery *d, const char *reason)
{
    char *m = mem_strdup(reason);
    if (m == NULL)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED,
                         "out of memory recording a delivery's failure");
    free(d->err_message);
    d->err_message = m;
    return BERTH_OK;
}

/* A failed attempt: back off on the outbox curve, or poison at the
 * ceiling. d is out of the due index. */
static int relay_retry(engine *e, delivery *d, const char *reason)
{
    d->topic->tc->c.retried++;
    d->attempts++;
    int rv = note_error(e, d, reason);
    if (rv != BERTH_OK)
        return rv;
    if (e->o.delivery_attempts > 0 && d->attempts >= e->o.delivery_attempts)
        return relay_poison(e, d, reason);
    d->due.at =
        e->t.now_ms + check_backoff(e->o.delivery_backoff_initial_ms, e->o.delivery_backoff_max_ms,
                                    d->attempts, e->o.backoff_jitter);
    write_fresh_body(e, d);
    if (heap_push(&e->outbox, &d->due) != BERTH_OK)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory re-queueing a delivery");
    return state_delivery_put(e, d);
}

int relay_run(engine *e)
{
    uint64_t now = e->t.now_ms;
    if (now < e->write_retry_at_ms)
        return BERTH_OK; /* the store is failing: do not pile up attempts */
    heap_node *x;
    for (uint32_t n = 0;
         n < e->o.relay_max_per_turn && (x = heap_min(&e->outbox)) != NULL && x->at <= now; n++) {
        delivery *d = container_of(x, delivery, due);
        heap_remove(&e->outbox, x);
        const char *reason = NULL;
        int rv = BERTH_OK;
        switch (sink_for(d->chan)->deliver(e, d, &reason)) {
        case SINK_DELIVERED:
            d->topic->tc->c.delivered++;
            state_dep(e, d->chan)->n_deliveries--;
            if (d->fresh)
                e->t.fresh.v[d->fresh_idx] = NULL;
            table_del(&e->deliveries, d->id, BERTH_ID_LEN);
            state_delivery_free(d);
            break;
        case SINK_RETRY:
            rv = relay_retry(e, d, reason);
            break;
        case SINK_REJECT:
            rv = note_error(e, d, reason);
            if (rv == BERTH_OK)
                rv = relay_poison(e, d, reason);
            break;
        case SINK_FAILED:
            rv = turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "%s", reason);
            break;
        }
        if (rv != BERTH_OK)
            return rv;
    }
    return BERTH_OK;
}

void relay_flush_fresh(engine *e)
{
    for (size_t i = 0; i < e->t.fresh.n; i++)
        if (e->t.fresh.v[i] != NULL)
            write_fresh_body(e, e->t.fresh.v[i]);
    e->t.fresh.n = 0;
}

int relay_parks_failed(engine *e, const berth_id_bytes *ids, size_t n, const char *why)
{
    for (size_t i = 0; i < n; i++) {
        delivery *d = table_get(&e->deliveries, ids[i].b, BERTH_ID_LEN);
        if (d == NULL || d->poisoned)
            continue;
        heap_remove(&e->outbox, &d->due);
        int rv = relay_retry(e, d, why);
        if (rv != BERTH_OK)
            return rv;
    }
    return BERTH_OK;
}

int relay_retry_delivery(engine *e, pending *p)
{
    engine_status *st = &p->reply->status;
    uint8_t id[BERTH_ID_LEN];
    if (berth_id_parse(p->req.u.retry_delivery.id, id) != BERTH_OK) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "id: not a delivery id (32 hex digits)");
        return BERTH_OK;
    }
    delivery *d = table_get(&e->deliveries, id, BERTH_ID_LEN);
    if (d == NULL) {
        reply_status(st, ENGINE_CODE_NOT_FOUND, "no delivery %s in the outbox",
                     p->req.u.retry_delivery.id);
        return BERTH_OK;
    }
    if (!d->poisoned) {
        reply_status(st, ENGINE_CODE_FAILED_PRECONDITION, "delivery %s is not poisoned",
                     p->req.u.retry_delivery.id);
        return BERTH_OK;
    }
    d->due.at = e->t.now_ms;
    if (heap_push(&e->outbox, &d->due) != BERTH_OK) {
        reply_no_memory(st); /* nothing changed yet */
        return BERTH_OK;
    }
    d->poisoned = false;
    e->n_poisoned--;
    deployment *dep = state_dep(e, d->chan);
    dep->n_poisoned--;
    d->attempts = 0;
    int rv = deploy_hold(e, dep);
    if (rv == BERTH_OK)
        rv = state_delivery_put(e, d);
    if (rv == BERTH_OK)
        turn_event(e, ENGINE_EVENT_DELIVERY_RETRIED, d->topic, d->id, NULL, 0);
    return rv;
}
