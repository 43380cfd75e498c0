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
 * PUSH SINKS
 *   A push channel's delivery is staged with the turn and sent by the
 *   commit thread once the turn is durable (engine_push_fn): nothing goes
 *   out that the store could still lose. While it is in flight it stays an
 *   outbox row, keyed in the due index by the deadline of its answer
 *   (push_timeout_ms and a grace for the sync). Its answer comes back as a
 *   request (relay_push_ack): DELIVERED ends it (a call's result resolves
 *   the call through intake; a result intake refuses is an incident);
 *   RETRY is a failed attempt on the outbox curve, as a deadline that
 *   passes is; REJECT ends it (a call: RESOLVED with the error, or FAILED
 *   when its policy names the code non-retryable; a task: refused). An
 *   answer to a send that has ended (a deadline passed, berthd restarted,
 *   the delivery was withdrawn) is ignored: each send has its flight
 *   number. A channel has push_inflight_max sends unanswered at most; the
 *   rest wait in its lane, in order (core.h).
 *
 * Engine thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/check.h"
#include "engine/deploy.h"
#include "engine/fault.h"
#include "engine/instance.h"
#include "engine/intake.h"
#include "engine/listing.h"
#include "engine/relay.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "store/err.h"

typedef enum sink_result {
    SINK_DELIVERED,
    SINK_RETRY,
    SINK_REJECT,
    SINK_SENT,   /* on its way (a push): an outbox row until its answer */
    SINK_FAILED, /* the sink left the turn half-applied (turn_fail): stop */
} sink_result;

typedef struct sink {
    const char *scheme; /* the channel transport it serves */
    sink_result (*deliver)(engine *e, delivery *d, const char **reason);
} sink;

static sink_result pull_deliver(engine *e, delivery *d, const char **reason);
static sink_result push_deliver(engine *e, delivery *d, const char **reason);

static const sink sinks[] = {
    {"pull", pull_deliver},
    {"nng+req", push_deliver},
};

/* The sink of a delivery's channel: deploy.c admits only transports with
 * a sink here, so every channel resolves; the implicit deployment's
 * channels are pull channels. */
static const sink *sink_for(const channel *c)
{
    return c != NULL && c->lane != NULL ? &sinks[1] : &sinks[0];
}

/* d's encoded Body: its own while fresh, else read from its outbox row
 * (into v, which the caller frees). */
static int delivery_body(engine *e, const delivery *d, store_value *v, const void **body,
                         size_t *len)
{
    if (d->fresh) {
        *body = d->body;
        *len = d->body_len;
        return BERTH_OK;
    }
    uint8_t key[STORE_ROW_KEY_LEN];
    store_row_key(key, d->seq, STORE_KIND_BODY);
    int rv = store_get(e->store, STORE_CF_OUTBOX, key, sizeof(key), v);
    *body = v->data;
    *len = v->len;
    return rv;
}

static sink_result push_deliver(engine *e, delivery *d, const char **reason)
{
    if (e->o.push_fn == NULL) {
        *reason = "push failed: this berthd has no push transport";
        return SINK_RETRY;
    }
    push_lane *l = d->chan->lane;
    bool its_turn = d->admitted;
    d->admitted = false;
    if (l->inflight >= e->o.push_inflight_max || (l->head != NULL && !its_turn)) {
        state_lane_wait(d); /* behind the others: in order */
        return SINK_SENT;
    }
    store_value v = {0};
    const void *body;
    size_t len;
    if (delivery_body(e, d, &v, &body, &len) != BERTH_OK) {
        *reason = "push failed: the outbox row could not be read";
        return SINK_RETRY;
    }
    staged_push *sp = VEC_ADD(&e->t.pushes);
    if (sp != NULL) {
        sp->body = mem_dup(body, len);
        sp->body_len = len;
        sp->transport = mem_strdup(d->chan->transport);
        if (sp->body == NULL || sp->transport == NULL) {
            free(sp->body);
            free(sp->transport);
            e->t.pushes.n--;
            sp = NULL;
        }
    }
    store_value_free(&v);
    if (sp == NULL) {
        *reason = "push failed: out of memory";
        return SINK_RETRY;
    }
    d->flight = sp->flight = ++e->flight_seq;
    sp->attempt = d->attempts + 1;
    d->inflight = true;
    l->inflight++;
    d->due.at = e->t.now_ms + e->o.push_timeout_ms + RULES_PUSH_GRACE_MS;
    if (heap_push(&e->outbox, &d->due) != BERTH_OK) {
        *reason = "push failed: out of memory";
        return SINK_FAILED;
    }
    return SINK_SENT;
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
    task *t = state_task_new(e, d->id, d->topic, d->seq, d->created_at_ms, body_len, d->priority,
                             d->not_before_ms);
    if (t == NULL)
        goto oom;
    t->has_instance = d->has_instance;
    t->chan = d->chan;
    if (idtab_put(&e->tasks, t) != BERTH_OK)
        goto oom_free;
    if (state_task_index(e, t, e->t.now_ms) != BERTH_OK) {
        idtab_del(&e->tasks, t->id);
        goto oom_free;
    }
    berth_id_bytes *parked = d->fresh ? NULL : VEC_ADD(&e->t.parked);
    if ((!d->fresh && parked == NULL) || listing_add(e, t) != BERTH_OK) {
        if (parked != NULL)
            e->t.parked.n--;
        state_task_unindex(t);
        state_task_gauge_drop(t);
        idtab_del(&e->tasks, t->id);
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
    state_task_free(e, t); /* (its gauge too, if it had one) */
oom:
    store_value_free(&v);
    *reason = "park failed: out of memory";
    return SINK_RETRY;
}

static int relay_poison(engine *e, delivery *d, const char *reason)
{
    d->topic->tc->poisoned++;
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
    d->topic->tc->retried++;
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
        if (d->inflight) { /* no answer by its deadline: a failed attempt */
            d->inflight = false;
            d->chan->lane->inflight--;
            rv = state_lane_admit(e, d->chan->lane);
            if (rv == BERTH_OK)
                rv = relay_retry(e, d, RULES_PUSH_NO_ANSWER);
            if (rv != BERTH_OK)
                return rv;
            continue;
        }
        switch (sink_for(d->chan)->deliver(e, d, &reason)) {
        case SINK_DELIVERED:
            d->topic->tc->delivered++;
            state_dep(e, d->chan)->n_deliveries--;
            if (d->fresh)
                e->t.fresh.v[d->fresh_idx] = NULL;
            idtab_del(&e->deliveries, d->id);
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
        case SINK_SENT:
            write_fresh_body(e, d); /* an outbox row until its answer */
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
        delivery *d = idtab_get(&e->deliveries, ids[i].b);
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
    if (!rules_delivery_id(p->req.u.retry_delivery.id, id, st))
        return BERTH_OK;
    delivery *d = idtab_get(&e->deliveries, id);
    if (d == NULL) {
        rules_delivery_not_found(st, p->req.u.retry_delivery.id);
        return BERTH_OK;
    }
    if (!d->poisoned) {
        rules_delivery_not_poisoned(st, p->req.u.retry_delivery.id);
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
    int rv = deploy_redrain(e, dep);
    if (rv == BERTH_OK)
        rv = state_delivery_put(e, d);
    if (rv == BERTH_OK)
        turn_event(e, ENGINE_EVENT_DELIVERY_RETRIED, d->topic, d->id, NULL, 0);
    return rv;
}

/* ---- push answers ---- */

/* The call d asks for, as intake sees a reply to it: d's Body read into
 * b (cleared by the caller). */
static int call_reply(engine *e, delivery *d, const engine_result *result, const engine_error *err,
                      engine_status *st)
{
    store_value v = {0};
    const void *body;
    size_t len;
    store_body b = {0};
    int rv = delivery_body(e, d, &v, &body, &len);
    if (rv == BERTH_OK)
        rv = store_body_decode(body, len, &b);
    store_value_free(&v);
    if (rv != BERTH_OK) {
        store_body_clear(&b);
        return turn_fail(e, ENGINE_CODE_UNAVAILABLE, "reading a delivery's body failed");
    }
    inbound in = {.topic = d->topic, .chan = d->chan, .parked = &b, .error = err};
    intake_set_reply(&in, result, &b); /* without a result: the request, as a completion */
    rv = intake_dispatch(e, &in, st);
    store_body_clear(&b);
    return rv;
}

static bool non_retryable(const instance *i, const char *code)
{
    for (size_t k = 0; code != NULL && k < i->n_non_retryable; k++)
        if (strcmp(i->non_retryable[k], code) == 0)
            return true;
    return false;
}

static int push_delivered(engine *e, delivery *d, const engine_result *result)
{
    d->topic->tc->delivered++;
    if (d->has_instance) {
        engine_status st = {0};
        int rv = call_reply(e, d, result, NULL, &st);
        if (turn_failed(e))
            return rv;
        if (rv != BERTH_OK) { /* refused: kept as an incident, never dropped silently */
            rv = state_incident_put(e, STORE_INCIDENT_RESULT_REFUSED, d->id, d->topic,
                                    st.engine_code ? st.engine_code : ENGINE_EC_VALIDATION_REJECTED,
                                    st.message);
            if (rv != BERTH_OK)
                return rv;
        }
    }
    state_delivery_delete(e, d);
    return BERTH_OK;
}

static int push_rejected(engine *e, delivery *d, const engine_error *err)
{
    d->topic->tc->rejected++;
    if (d->has_instance) {
        instance *i = instance_find(e, d->instance_id);
        int rv;
        if (i != NULL && !i->ended && i->state != ENGINE_INSTANCE_BACKOFF &&
            non_retryable(i, err->code)) {
            rv = instance_end(e, i, ENGINE_INSTANCE_FAILED, NULL, err);
        } else {
            engine_status st = {0};
            rv = call_reply(e, d, NULL, err, &st); /* (a refusal, RETRY_PENDING: nothing to do) */
            if (!turn_failed(e))
                rv = BERTH_OK;
        }
        if (rv != BERTH_OK)
            return rv;
    } else {
        turn_event(e, ENGINE_EVENT_TASK_REFUSED, d->topic, d->id, err, 0);
    }
    state_delivery_delete(e, d);
    return BERTH_OK;
}

int relay_push_ack(engine *e, pending *p)
{
    const struct engine_push_ack *a = &p->req.u.push_ack;
    engine_status *st = &p->reply->status;
    uint8_t id[BERTH_ID_LEN];
    if (!rules_delivery_id(a->id, id, st))
        return BERTH_OK;
    delivery *d = idtab_get(&e->deliveries, id);
    if (d == NULL || !d->inflight || d->flight != a->flight)
        return BERTH_OK; /* the answer to a send that has ended: ignored */
    heap_remove(&e->outbox, &d->due);
    d->inflight = false;
    d->chan->lane->inflight--;
    int rv = state_lane_admit(e, d->chan->lane);
    if (rv != BERTH_OK)
        return rv;
    /* What a receiver says is checked like anything else from outside. */
    engine_error err = a->error;
    engine_status bad;
    char why[300];
    rules_push_answer(a->outcome, &err, &bad, why, sizeof(why));
    switch (a->outcome) {
    case ENGINE_PUSH_DELIVERED:
        return push_delivered(e, d, a->result);
    case ENGINE_PUSH_REJECT:
        return push_rejected(e, d, &err);
    default:
        return relay_retry(e, d, why);
    }
}
