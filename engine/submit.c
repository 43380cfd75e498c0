/*
 * submit.c — a producer hands over a task (R1, R17, R18).
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
#include "engine/reply.h"
#include "engine/state.h"
#include "engine/submit.h"
#include "engine/turn.h"
#include "store/err.h"

/* Field names are plain ("topic"); a batch prefixes the item's index to
 * them only when an item is rejected, off the hot path. */
static bool submit_check(engine *e, const engine_submit_args *a, engine_status *st)
{
    if (!check_topic(a->topic, "topic", st))
        return false;
    if (e->o.strict_channels && state_channel(e, a->topic) == NULL) {
        reply_status(st, ENGINE_CODE_NOT_FOUND, "topic %s is not a declared channel", a->topic);
        snprintf(st->field, sizeof(st->field), "topic");
        return false;
    }
    if (a->payload_len > e->o.payload_max_bytes) {
        reply_over_ceiling(st, "payload", a->payload_len, e->o.payload_max_bytes);
        return false;
    }
    return check_headers(a->headers, a->n_headers, "headers", st) &&
           check_text(a->content_type, ENGINE_CONTENT_TYPE_MAX, false, "content_type", st) &&
           check_text(a->idempotency_key, BERTH_IDEM_KEY_MAX, false, "idempotency_key", st);
}

/* Names batch item i in a rejection: "items[i].topic". */
static void name_item(engine_status *st, size_t i)
{
    char field[sizeof(st->field)], msg[sizeof(st->message)];
    snprintf(field, sizeof(field), "items[%zu].%.35s", i, st->field);
    snprintf(msg, sizeof(msg), "items[%zu].%.227s", i, st->message);
    memcpy(st->field, field, sizeof(field));
    memcpy(st->message, msg, sizeof(msg));
}

/* The original id when the key was used inside the dedup horizon: this
 * turn (memory) or before (the store). */
static int dedup_lookup(engine *e, const uint8_t *skey, size_t sklen, uint8_t id[BERTH_ID_LEN])
{
    const turn_key *k = table_get(&e->t.keys, skey, sklen);
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

static void new_id(engine *e, uint8_t id[BERTH_ID_LEN])
{
    do
        state_random(e, id, BERTH_ID_LEN);
    while (table_get(&e->deliveries, id, BERTH_ID_LEN) != NULL ||
           table_get(&e->tasks, id, BERTH_ID_LEN) != NULL);
}

static bool fresh_push(engine *e, delivery *d)
{
    delivery **slot = VEC_ADD(&e->t.fresh);
    if (slot == NULL)
        return false;
    d->fresh_idx = e->t.fresh.n - 1;
    *slot = d;
    return true;
}

/* One submit, answered in out or st. Fails before it changes anything, or
 * else succeeds: a failure never leaves it half-applied. */
static void submit_one(engine *e, const engine_submit_args *a, engine_submitted *out,
                       engine_status *st)
{
    uint64_t now = e->t.now_ms;
    uint8_t skey[STORE_SUBMIT_KEY_MAX];
    size_t sklen = 0;
    if (a->idempotency_key != NULL && a->idempotency_key[0] != '\0') {
        sklen = store_submit_key(skey, a->topic, a->idempotency_key);
        uint8_t id[BERTH_ID_LEN];
        int rv = dedup_lookup(e, skey, sklen, id);
        if (rv == BERTH_OK) {
            berth_id_format(id, out->id);
            out->duplicate = true;
            return;
        }
        if (rv != BERTH_ENOTFOUND) {
            reply_unavailable(st, "reading the idempotency key failed");
            return;
        }
    }

    /* The key's bookkeeping first: after it, nothing can fail. */
    turn_key *k = NULL;
    if (sklen > 0) {
        k = mem_alloc(sizeof(*k) + sklen);
        if (k == NULL) {
            reply_no_memory(st);
            return;
        }
        k->len = sklen;
        memcpy(k->key, skey, sklen);
    }
    delivery *d = mem_calloc(1, sizeof(*d));
    topic *tp = d ? state_topic(e, a->topic, strlen(a->topic), true) : NULL;
    if (tp == NULL) {
        free(d);
        free(k);
        reply_no_memory(st);
        return;
    }
    new_id(e, d->id);
    d->topic = tp;
    tp->n_deliveries++;
    d->seq = e->next_seq++;
    d->created_at_ms = now;
    heap_node_init(&d->due);
    d->due.at = now;
    d->due.seq = d->seq;

    store_header hs[ENGINE_HEADERS_MAX];
    for (size_t i = 0; i < a->n_headers; i++)
        hs[i] = (store_header){a->headers[i].name, a->headers[i].value};
    store_body b = {
        .topic = a->topic,
        .payload = a->payload,
        .payload_len = a->payload_len,
        .headers = hs,
        .n_headers = a->n_headers,
        .content_type = (a->content_type && a->content_type[0]) ? a->content_type : NULL,
        .seq = d->seq,
        .created_at_ms = now,
    };
    memcpy(b.id, d->id, BERTH_ID_LEN);
    if (store_body_encode(&b, &e->buf) != BERTH_OK ||
        (d->body = mem_dup(e->buf.data, e->buf.len)) == NULL)
        goto no_memory;
    d->body_len = e->buf.len;
    d->fresh = true;
    if (table_put(&e->deliveries, d->id, BERTH_ID_LEN, d) != BERTH_OK)
        goto no_memory;
    if (heap_push(&e->outbox, &d->due) != BERTH_OK)
        goto unlist;
    if (!fresh_push(e, d))
        goto unqueue;
    if (k != NULL) {
        memcpy(k->id, d->id, BERTH_ID_LEN);
        if (table_put(&e->t.keys, k->key, sklen, k) != BERTH_OK) {
            e->t.fresh.n--; /* the slot fresh_push just took */
            goto unqueue;
        }
    }
    if (k != NULL) {
        k->next = e->t.key_list;
        e->t.key_list = k;
        uint8_t v[STORE_SUBMIT_VALUE_LEN];
        store_put_be64(v, now);
        memcpy(v + STORE_DEDUP_TIME_LEN, d->id, BERTH_ID_LEN);
        store_batch_put(e->batch, STORE_CF_SUBMIT_KEYS, skey, sklen, v, sizeof(v));
    }
    berth_id_format(d->id, out->id);
    out->duplicate = false;
    return;

unqueue:
    heap_remove(&e->outbox, &d->due);
unlist:
    table_del(&e->deliveries, d->id, BERTH_ID_LEN);
no_memory:
    state_delivery_free(d);
    state_topic_maybe_idle(e, tp);
    free(k);
    reply_no_memory(st);
}

int submit_task(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    if (!submit_check(e, &p->req.u.submit, &r->status))
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
    if (n == 0) {
        reply_status(&r->status, ENGINE_CODE_INVALID_ARGUMENT, "items: at least one is required");
        snprintf(r->status.field, sizeof(r->status.field), "items");
        return BERTH_OK;
    }
    if (n > e->o.batch_max) {
        reply_over_ceiling(&r->status, "items", n, e->o.batch_max);
        return BERTH_OK;
    }
    for (size_t i = 0; i < n; i++) {
        if (!submit_check(e, &items[i], &r->status)) {
            name_item(&r->status, i);
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
