/*
 * submit.c — a producer hands over a task or a call (R1, R17, R18).
 *
 * A submit creates a delivery: its Body, encoded once, and its place in
 * the outbox due index, due now. Its outbox row is written by the relay at
 * the end of the same turn: if the pull sink parks it in that turn the
 * row would be written and deleted in one batch, so neither is (the park
 * writes the task row instead, the state the two writes would leave). The
 * producer's idempotency key is written in the same batch. Either way the
 * reply waits for that batch's fsync: OK means kept (R1).
 *
 * submit_batch is all or nothing: every item is checked before any is
 * applied, and all share the turn's one write; an item that fails after
 * others were applied (out of memory, an unreadable key) fails the turn,
 * so none is kept.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "engine/check.h"
#include "engine/deploy.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/instance.h"
#include "engine/state.h"
#include "engine/submit.h"
#include "engine/turn.h"
#include "store/err.h"

static int dedup_lookup(engine *e, const uint8_t *skey, size_t sklen, uint8_t id[BERTH_ID_LEN]);
static bool has_key(const engine_submit_args *a);

/* A's idempotency key names a submit (call: a call) accepted before: a
 * repeat, answered "duplicate" even when its channel takes nothing new
 * any more. */
static bool accepted_before(engine *e, const engine_submit_args *a, bool call)
{
    if (!has_key(a))
        return false;
    uint8_t key[STORE_CALL_KEY_MAX], id[BERTH_ID_LEN];
    size_t len = call ? store_call_key(key, a->topic, a->idempotency_key)
                      : store_submit_key(key, a->topic, a->idempotency_key);
    return len > 0 && dedup_lookup(e, key, len, id) == BERTH_OK;
}

/* Field names are plain ("topic"); a batch prefixes the item's index to
 * them only when an item is rejected, off the hot path. */
static bool submit_check(engine *e, const engine_submit_args *a, bool call, engine_status *st)
{
    if (!check_topic(a->topic, "topic", st))
        return false;
    (void)deploy_route(e, a->topic, st);
    if (st->code != ENGINE_CODE_OK) {
        if (!accepted_before(e, a, call))
            return false;
        memset(st, 0, sizeof(*st)); /* (the dedup step answers it) */
    }
    return rules_submit_check(&e->o, e->t.now_ms, a, st);
}

/* The original id when the key was used inside the dedup horizon: this
 * turn (memory) or before (the store). */
static int dedup_lookup(engine *e, const uint8_t *skey, size_t sklen, uint8_t id[BERTH_ID_LEN])
{
    const turn_key *k = table_get(&e->t.keys, skey, sklen);
    if (k != NULL && k->gone)
        return BERTH_ENOTFOUND;
    if (k != NULL) {
        memcpy(id, k->id, BERTH_ID_LEN);
        return BERTH_OK;
    }
    store_value v;
    int rv = store_get(e->store, STORE_CF_SUBMIT_KEYS, skey, sklen, &v);
    if (rv != BERTH_OK)
        return rv;
    if (v.len != STORE_SUBMIT_VALUE_LEN ||
        !store_dedup_alive(v.data, v.len, e->t.now_ms, e->o.dedup_horizon_ms))
        rv = BERTH_ENOTFOUND;
    else
        memcpy(id, v.data + STORE_DEDUP_TIME_LEN, BERTH_ID_LEN);
    store_value_free(&v);
    return rv;
}

/* The idempotency key's row for this turn, remembered so that a repeat in
 * the same turn (before the store has the row) finds it. NULL: no memory. */
static turn_key *key_new(const uint8_t *skey, size_t sklen)
{
    turn_key *k = mem_alloc(sizeof(*k) + sklen);
    if (k != NULL) {
        k->gone = false;
        k->len = sklen;
        memcpy(k->key, skey, sklen);
    }
    return k;
}

/* Writes the key's row naming id, and keeps it for the turn. False: no
 * memory (nothing written, k freed). */
static bool key_keep(engine *e, turn_key *k, const uint8_t id[BERTH_ID_LEN])
{
    memcpy(k->id, id, BERTH_ID_LEN);
    if (table_put(&e->t.keys, k->key, k->len, k) != BERTH_OK) {
        free(k);
        return false;
    }
    k->next = e->t.key_list;
    e->t.key_list = k;
    uint8_t v[STORE_SUBMIT_VALUE_LEN];
    store_put_be64(v, e->t.now_ms);
    memcpy(v + STORE_DEDUP_TIME_LEN, id, BERTH_ID_LEN);
    store_batch_put(e->batch, STORE_CF_SUBMIT_KEYS, k->key, k->len, v, sizeof(v));
    return true;
}

/* The dedup step of a submit or a call: 1 when the key names an earlier
 * one (its id in out, duplicate), 0 to go on (with *k to keep when there
 * is a key), -1 when st holds the failure. */
static int dedup(engine *e, const uint8_t *skey, size_t sklen, engine_submitted *out, turn_key **k,
                 engine_status *st)
{
    *k = NULL;
    if (sklen == 0)
        return 0;
    uint8_t id[BERTH_ID_LEN];
    int rv = dedup_lookup(e, skey, sklen, id);
    if (rv == BERTH_OK) {
        store_id_format(id, out->id);
        out->duplicate = true;
        return 1;
    }
    if (rv != BERTH_ENOTFOUND) {
        reply_unavailable(st, "reading the idempotency key failed");
        return -1;
    }
    if ((*k = key_new(skey, sklen)) == NULL) {
        reply_no_memory(st);
        return -1;
    }
    return 0;
}

/* The Body a submit or a call's first attempt carries; hs holds the
 * headers' storage. */
static store_body body_of(engine *e, const engine_submit_args *a, store_header *hs)
{
    for (size_t i = 0; i < a->n_headers; i++)
        hs[i] = (store_header){a->headers[i].name, a->headers[i].value};
    uint64_t now = e->t.now_ms;
    uint64_t at = a->has_delay_ms ? now + a->delay_ms : a->has_not_before_ms ? a->not_before_ms : 0;
    return (store_body){
        .priority = a->has_priority ? a->priority : e->o.priority_default,
        .not_before_ms = at > now ? at : 0,
        .topic = a->topic,
        .payload = a->payload,
        .payload_len = a->payload_len,
        .headers = hs,
        .n_headers = a->n_headers,
        .content_type = (a->content_type && a->content_type[0]) ? a->content_type : NULL,
    };
}

static bool has_key(const engine_submit_args *a)
{
    return a->idempotency_key != NULL && a->idempotency_key[0] != '\0';
}

/* One submit, answered in out or st. Fails before it changes anything, or
 * else succeeds: a failure never leaves it half-applied. */
static void submit_one(engine *e, const engine_submit_args *a, engine_submitted *out,
                       engine_status *st)
{
    uint8_t skey[STORE_SUBMIT_KEY_MAX];
    size_t sklen = has_key(a) ? store_submit_key(skey, a->topic, a->idempotency_key) : 0;
    turn_key *k;
    if (dedup(e, skey, sklen, out, &k, st) != 0)
        return;
    topic *tp = state_topic(e, a->topic, strlen(a->topic), true);
    store_header hs[ENGINE_HEADERS_MAX];
    store_body b = body_of(e, a, hs);
    delivery *d;
    const channel *chan = deploy_route(e, a->topic, st); /* (checked: not refused) */
    if (tp == NULL || state_delivery_new(e, tp, chan, &b, &d) != BERTH_OK) {
        if (tp != NULL)
            state_topic_maybe_idle(e, tp);
        free(k);
        reply_no_memory(st);
        return;
    }
    if (k != NULL && !key_keep(e, k, d->id)) {
        state_delivery_delete(e, d);
        reply_no_memory(st);
        return;
    }
    tp->tc->submitted++;
    store_id_format(d->id, out->id);
    out->duplicate = false;
}

int submit_task(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    if (!submit_check(e, &p->req.u.submit, false, &r->status))
        return BERTH_OK;
    r->submitted = reply_mem(r, sizeof(*r->submitted));
    if (r->submitted == NULL) {
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    r->n_submitted = 1;
    submit_one(e, &p->req.u.submit, r->submitted, &r->status);
    return BERTH_OK;
}

int submit_batch(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    const engine_submit_args *items = p->req.u.submit_batch.items;
    size_t n = p->req.u.submit_batch.n;
    if (!check_items(n, e->o.batch_max, &r->status))
        return BERTH_OK;
    for (size_t i = 0; i < n; i++) {
        if (!submit_check(e, &items[i], false, &r->status)) {
            rules_item_name(&r->status, i);
            return BERTH_OK;
        }
    }
    r->submitted = reply_mem(r, n * sizeof(*r->submitted));
    if (r->submitted == NULL) {
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    r->n_submitted = n;
    for (size_t i = 0; i < n; i++) {
        submit_one(e, &items[i], &r->submitted[i], &r->status);
        /* Failing part-way must not keep the items before: the whole turn
         * is undone, as a failed write would be, with this reason. */
        if (r->status.code != ENGINE_CODE_OK) {
            r->n_submitted = 0;
            if (i == 0)
                return BERTH_OK; /* nothing was applied */
            return turn_fail(e, r->status.code, "items[%zu]: %s", i, r->status.message);
        }
    }
    return BERTH_OK;
}

/* A call's retry policy, checked (R6) and with its defaults filled in. */
static bool retry_check(engine *e, const engine_retry_policy *r, instance *i, engine_status *st)
{
    rules_policy pol;
    if (!rules_call_policy(&e->o, r, &pol, st))
        return false;
    i->timeout_ms = pol.timeout_ms;
    i->max_attempts = pol.max_attempts;
    i->max_backoff_ms = pol.max_backoff_ms;
    i->initial_backoff_ms = pol.initial_backoff_ms;
    i->multiplier = pol.multiplier;
    i->has_retry = true;
    return true;
}

/* The policy's codes, copied into i. False: no memory. */
static bool keep_codes(instance *i, const engine_retry_policy *r)
{
    if (r == NULL || r->n_non_retryable_codes == 0)
        return true;
    i->non_retryable = mem_calloc(r->n_non_retryable_codes, sizeof(*i->non_retryable));
    if (i->non_retryable == NULL)
        return false;
    for (size_t k = 0; k < r->n_non_retryable_codes; k++, i->n_non_retryable++)
        if ((i->non_retryable[k] = mem_strdup(r->non_retryable_codes[k])) == NULL)
            return false;
    return true;
}

static void new_instance_id(engine *e, uint8_t id[BERTH_ID_LEN])
{
    do
        state_random(e, id, BERTH_ID_LEN);
    while (instance_find(e, id) != NULL);
}

int submit_call(engine *e, pending *p)
{
    const engine_call_args *a = &p->req.u.call;
    engine_reply *r = p->reply;
    engine_status *st = &r->status;
    instance *i = mem_calloc(1, sizeof(*i));
    if (i == NULL) {
        reply_no_memory(st);
        return BERTH_OK;
    }
    heap_node_init(&i->timer);
    i->max_attempts = 1;
    if (!submit_check(e, &a->request, true, st) || (a->retry && !retry_check(e, a->retry, i, st)) ||
        (r->submitted = reply_mem(r, sizeof(*r->submitted))) == NULL) {
        if (st->code == ENGINE_CODE_OK)
            reply_no_memory(st);
        instance_free(i);
        return BERTH_OK;
    }
    r->n_submitted = 1;
    uint8_t ckey[STORE_CALL_KEY_MAX];
    size_t cklen = has_key(&a->request)
                       ? store_call_key(ckey, a->request.topic, a->request.idempotency_key)
                       : 0;
    turn_key *k;
    if (dedup(e, ckey, cklen, r->submitted, &k, st) != 0) {
        instance_free(i);
        return BERTH_OK;
    }
    uint64_t now = e->t.now_ms;
    new_instance_id(e, i->id);
    i->state = ENGINE_INSTANCE_WAITING;
    i->attempt = 1;
    i->created_at_ms = now;
    i->topic = mem_strdup(a->request.topic);
    i->chan = deploy_route(e, a->request.topic, st); /* (checked: not refused) */
    if (cklen > 0 && (i->dedup_key = mem_dup(ckey, cklen)) != NULL)
        i->dedup_key_len = cklen;
    topic *tp = state_topic(e, a->request.topic, strlen(a->request.topic), true);
    store_header hs[ENGINE_HEADERS_MAX];
    store_body b = body_of(e, &a->request, hs);
    b.has_instance = true;
    memcpy(b.instance_id, i->id, BERTH_ID_LEN);
    b.call_attempt = 1;
    delivery *d = NULL;
    if (i->topic == NULL || (cklen > 0 && i->dedup_key == NULL) || !keep_codes(i, a->retry) ||
        tp == NULL || state_delivery_new(e, tp, i->chan, &b, &d) != BERTH_OK)
        goto no_memory;
    /* A call that may be re-driven keeps its request for the next attempts. */
    if (i->max_attempts > 1 && (i->request = mem_dup(d->body, d->body_len)) == NULL)
        goto no_memory;
    i->request_len = i->request ? d->body_len : 0;
    i->has_current = true;
    memcpy(i->current, d->id, BERTH_ID_LEN);
    if (table_put(&e->instances, i->id, BERTH_ID_LEN, i) != BERTH_OK)
        goto no_memory;
    state_dep(e, i->chan)->n_instances++;
    if (i->attempt < i->max_attempts) /* it may re-drive: it holds its deployment (R14) */
        state_dep(e, i->chan)->n_retrying++;
    /* From here a failure leaves the call half-applied: the turn fails. */
    /* An attempt's time runs from when its task is fetchable (its delay). */
    int rv =
        i->has_retry ? instance_arm(e, i, state_delivery_starts(d, now) + i->timeout_ms) : BERTH_OK;
    if (rv == BERTH_OK)
        rv = instance_put(e, i);
    if (rv != BERTH_OK) {
        free(k);
        return rv;
    }
    if (k != NULL && !key_keep(e, k, i->id)) /* (k is freed) */
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory keeping a call's key");
    e->t.count.calls++;
    tp->tc->submitted++;
    store_id_format(i->id, r->submitted->id);
    r->submitted->duplicate = false;
    return BERTH_OK;

no_memory:
    if (d != NULL)
        state_delivery_delete(e, d);
    else if (tp != NULL)
        state_topic_maybe_idle(e, tp);
    free(k);
    instance_free(i);
    reply_no_memory(st);
    return BERTH_OK;
}
