/*
 * calls.c — what a caller waits on, and the calls' clock.
 *
 * AWAIT_CALL
 *   An ended instance answers at once: from memory if it ended this turn,
 *   else from its 'E' row. A live one answers at once when wait_ms is 0,
 *   and otherwise waits (wait.c) with fetch's default, ceiling and bounds:
 *   the wait is linked into the instance in the same turn that read its
 *   state, and the instance's end answers every wait linked to it (R7: no
 *   end can fall between the look and the wait). At its deadline a wait
 *   answers OK with the instance as it then stands. An id that names no
 *   instance, or one whose retention ended, is NOT_FOUND.
 *
 * TIMERS
 *   Every live instance with a timer sits in one heap (e->timers) by the
 *   instant it fires; a turn fires what came due, at most
 *   timers_max_per_turn, so a burst of timeouts cannot stall requests.
 *
 * POISONED REQUESTS
 *   The relay notes a call's request that it poisons; the next turn tells
 *   the call (a failed attempt, instance.c). At load the note is rebuilt
 *   from the poisoned deliveries, so a crash in between forgets nothing.
 *
 * RETENTION
 *   Ended instances are dropped from the front of the timers family (keyed
 *   by the instant their retention began), at most timers_max_per_turn a
 *   turn: the 'E' row, the retention key, and the idempotency key if it
 *   still names the instance. Memory holds only when the next drop is due
 *   and where the last read stopped, so a read starts past the tombstones
 *   of what was dropped. Nothing ever scans the family as a whole on a
 *   turn.
 *
 * Engine thread only.
 */
#include <stdio.h>
#include <string.h>

#include "engine/calls.h"
#include "engine/instance.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/turn.h"
#include "engine/wait.h"
#include "store/err.h"

/* A read of the timers family failed: look again this much later. */
#define RETENTION_RETRY_MS 1000

static int answer_ended_row(engine *e, const uint8_t id[BERTH_ID_LEN], const char *id_str,
                            engine_reply *r)
{
    uint8_t key[STORE_INSTANCE_KEY_LEN];
    store_instance_key(key, STORE_INSTANCE_ENDED, id);
    store_value v;
    int rv = store_get(e->store, STORE_CF_INSTANCES, key, sizeof(key), &v);
    if (rv == BERTH_ENOTFOUND) {
        rules_await_not_found(&r->status, id_str);
        return BERTH_OK;
    }
    if (rv != BERTH_OK) {
        reply_unavailable(&r->status, "reading the call failed");
        return BERTH_OK;
    }
    rv = instance_reply_ended(r, v.data, v.len);
    store_value_free(&v);
    if (rv != BERTH_OK) {
        reply_reset(r);
        if (rv == BERTH_ENOMEM)
            reply_no_memory(&r->status);
        else
            reply_status(&r->status, ENGINE_CODE_INTERNAL, "call %s: its record did not decode",
                         id_str);
    }
    return BERTH_OK;
}

int calls_await(engine *e, pending *p)
{
    const engine_await_args *a = &p->req.u.await_call;
    engine_reply *r = p->reply;
    uint8_t id[BERTH_ID_LEN];
    uint64_t wait_ms;
    if (!rules_await_check(&e->o, a, id, &wait_ms, &r->status))
        return BERTH_OK;
    instance *i = instance_find(e, id);
    if (i == NULL)
        return answer_ended_row(e, id, a->instance_id, r);
    if (i->ended) {
        int rv = instance_reply_ended(r, i->ended_row, i->ended_row_len);
        if (rv != BERTH_OK) {
            reply_reset(r);
            reply_no_memory(&r->status);
        }
        return BERTH_OK;
    }
    if (wait_ms > 0 && wait_may(e, p, &r->status)) {
        if (!wait_await(e, p, i, wait_ms))
            reply_no_memory(&r->status);
        return BERTH_OK;
    }
    if (r->status.code == ENGINE_CODE_OK) { /* wait_ms 0: as it stands */
        rules_instance_live(&r->instance, i->id, i->state, i->attempt, i->created_at_ms);
    }
    return BERTH_OK;
}

/* The key is deleted in this turn's batch: a call later in the turn must
 * not find it in the store (submit.c reads the turn's keys first). */
static bool key_gone(engine *e, const uint8_t *key, size_t len)
{
    turn_key *k = mem_alloc(sizeof(*k) + len);
    if (k == NULL)
        return false;
    k->gone = true;
    k->len = len;
    memcpy(k->key, key, len);
    if (table_put(&e->t.keys, k->key, len, k) != BERTH_OK) {
        free(k);
        return false;
    }
    k->next = e->t.key_list;
    e->t.key_list = k;
    return true;
}

/* The idempotency key of a dropped instance goes too, if it still names
 * it (past the dedup horizon a later call may have taken the key). False:
 * no memory, nothing done. */
static bool drop_key(engine *e, const uint8_t id[BERTH_ID_LEN], const store_value *row)
{
    store_instance rec;
    if (store_instance_decode(row->data, row->len, &rec) != BERTH_OK)
        return true; /* a record that does not decode names no key */
    bool ok = true;
    store_value v;
    if (rec.dedup_key != NULL && store_get(e->store, STORE_CF_SUBMIT_KEYS, rec.dedup_key,
                                           rec.dedup_key_len, &v) == BERTH_OK) {
        if (v.len == STORE_SUBMIT_VALUE_LEN &&
            memcmp(v.data + STORE_DEDUP_TIME_LEN, id, BERTH_ID_LEN) == 0 &&
            (ok = key_gone(e, rec.dedup_key, rec.dedup_key_len)))
            store_batch_delete(e->batch, STORE_CF_SUBMIT_KEYS, rec.dedup_key, rec.dedup_key_len);
        store_value_free(&v);
    }
    store_instance_clear(&rec);
    return ok;
}

static void drop_ended(engine *e)
{
    uint64_t now = e->t.now_ms, keep = e->o.instance_retention_ms;
    if (e->retention_due_ms == UINT64_MAX || e->retention_due_ms > now)
        return;
    store_iter *it;
    if (store_iter_open(e->store, STORE_CF_TIMERS, &it) != BERTH_OK) {
        e->retention_due_ms = now + RETENTION_RETRY_MS;
        return;
    }
    store_iter_seek(it, e->retention_cursor, sizeof(e->retention_cursor));
    uint64_t due = UINT64_MAX;
    for (uint32_t n = 0; store_iter_valid(it); store_iter_next(it)) {
        size_t kl;
        const uint8_t *k = store_iter_key(it, &kl);
        if (kl != STORE_RETENTION_KEY_LEN) { /* not berth's: leave it */
            continue;
        }
        uint64_t ended_at = store_get_be64(k);
        if (ended_at + keep > now) {
            due = ended_at + keep;
            break;
        }
        if (n++ == e->o.timers_max_per_turn) {
            due = now; /* more next turn */
            break;
        }
        uint8_t key[STORE_INSTANCE_KEY_LEN];
        store_instance_key(key, STORE_INSTANCE_ENDED, k + 8);
        store_value row;
        int rv = store_get(e->store, STORE_CF_INSTANCES, key, sizeof(key), &row);
        if (rv == BERTH_OK) {
            bool dropped = drop_key(e, k + 8, &row);
            store_value_free(&row);
            if (!dropped) {
                due = now + RETENTION_RETRY_MS;
                break;
            }
            store_batch_single_delete(e->batch, STORE_CF_INSTANCES, key, sizeof(key));
        } else if (rv != BERTH_ENOTFOUND) {
            due = now + RETENTION_RETRY_MS;
            break;
        }
        store_batch_single_delete(e->batch, STORE_CF_TIMERS, k, kl);
        memcpy(e->retention_cursor, k, sizeof(e->retention_cursor));
        e->t.count.instances_dropped++;
    }
    if (due == UINT64_MAX && store_iter_status(it) != BERTH_OK)
        due = now + RETENTION_RETRY_MS;
    store_iter_close(it);
    e->retention_due_ms = due;
}

/* Calls whose request was poisoned since the last turn hear of it. */
static int tell_poisoned(engine *e)
{
    size_t n = e->calls_poisoned.n;
    e->calls_poisoned.n = 0;
    for (size_t k = 0; k < n; k++) {
        const delivery *d = idtab_get(&e->deliveries, e->calls_poisoned.v[k].b);
        instance *i = d && d->poisoned ? instance_find(e, d->instance_id) : NULL;
        int rv = i ? instance_poisoned(e, i, d) : BERTH_OK;
        if (rv != BERTH_OK)
            return rv; /* the turn is undone: memory reloads, the list with it */
    }
    return BERTH_OK;
}

int calls_run(engine *e)
{
    uint64_t now = e->t.now_ms;
    if (now < e->write_retry_at_ms)
        return BERTH_OK; /* the store is failing: nothing that writes */
    int rv = tell_poisoned(e);
    if (rv != BERTH_OK)
        return rv;
    drop_ended(e);
    heap_node *x;
    for (uint32_t n = 0;
         n < e->o.timers_max_per_turn && (x = heap_min(&e->timers)) != NULL && x->at <= now; n++) {
        if ((rv = instance_fire(e, container_of(x, instance, timer))) != BERTH_OK)
            return rv;
    }
    return BERTH_OK;
}

uint64_t calls_next_due(const engine *e)
{
    if (e->calls_poisoned.n > 0)
        return 0;
    uint64_t due = e->retention_due_ms;
    const heap_node *x = heap_min(&e->timers);
    if (x != NULL && x->at < due)
        due = x->at;
    return due;
}
