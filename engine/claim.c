/*
 * claim.c — fetch-and-lock, waiting fetches, and doorbells (R5, R6, R7).
 *
 * THE CLAIM PREDICATE (R5)
 *   A task is fetchable when it is not terminal, its backoff has ended and
 *   it is unlocked or its lock has expired. Each topic keeps its
 *   non-terminal tasks in one heap keyed by the instant they become
 *   fetchable, max(available_at, lock_expires_at), so the predicate is
 *   "front.at <= now" and a claim takes from the front. An expired lock is
 *   not a state anyone cleans up: the task is simply at the front the
 *   instant its lock runs out. There is no sweeper.
 *
 * LONG POLLS (R7)
 *   A fetch that claims nothing and may wait becomes a waiter: linked into
 *   each of its topics and into a deadline heap. Doorbells: a park (or a
 *   release, a retry) rings its topic; at the end of the turn each rung
 *   topic's waiters, oldest first, re-run their claims. A doorbell carries
 *   nothing but "look again". A waiting fetch also hears time: when a
 *   watched topic's front becomes fetchable (a lock ran out, a backoff
 *   ended) the actor wakes for it and rings the topic. At its deadline a
 *   waiter is answered with an empty list (OK). The claim and the
 *   registration run in one turn of the one actor, and parks happen later
 *   in the turn than requests, so no park can fall between a fetch's claim
 *   and its wait: no wake-up is lost.
 *
 * Engine thread only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "engine/check.h"
#include "engine/claim.h"
#include "engine/reply.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "store/err.h"

struct waiter;

/* The waiting fetches of one owner (a connection), in e->owners while it
 * has any: engine_cancel() finds them here, and their count is bounded. */
typedef struct owner {
    uint64_t id; /* the key's 8 bytes */
    struct waiter *first;
    uint32_t n;
} owner;

/* A fetch waiting for work: linked into each of its topics, into the
 * deadline heap and into its owner's list. Waiting is data, not a
 * thread. */
typedef struct waiter {
    pending *p;
    owner *own; /* NULL: a request with no owner */
    struct waiter *own_prev, *own_next;
    topic **topics;
    size_t n_topics;
    wait_link *links; /* one per topic */
    heap_node deadline;
    uint32_t max_tasks;
    uint64_t lock_ms;
} waiter;

static bool node_less(const heap_node *a, const heap_node *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

/* Claims up to max fetchable tasks of the given topics, oldest fetchable
 * instant first across them, into r->tasks; stops early rather than pass
 * the fetch byte budget (the first task always fits: the budget is at
 * least the payload ceiling). A failure before the first task is claimed
 * is the fetch's own answer (r->status); after it, the fetch answers with
 * the tasks it has. Nonzero only when the turn failed. */
static int claim_tasks(engine *e, topic *const *topics, size_t n_topics, uint32_t max,
                       uint64_t lock_ms, const char *worker_id, engine_reply *r)
{
    uint64_t now = e->t.now_ms, bytes = 0;
    while (r->n_tasks < max) {
        heap_node *best = NULL;
        for (size_t i = 0; i < n_topics; i++) {
            heap_node *x = topics[i] ? heap_min(&topics[i]->ready) : NULL;
            if (x != NULL && x->at <= now && (best == NULL || node_less(x, best)))
                best = x;
        }
        if (best == NULL)
            return BERTH_OK;
        task *t = container_of(best, task, ready);
        if (r->n_tasks > 0 && bytes + t->body_bytes > e->o.fetch_max_bytes)
            return BERTH_OK;

        /* Everything that can fail comes before the task changes. */
        if (r->tasks == NULL && (r->tasks = reply_mem(r, max * sizeof(*r->tasks))) == NULL)
            goto no_memory;
        store_body *b = reply_body(r);
        if (b == NULL)
            goto no_memory;
        int rv = state_task_read_body(e, t, b);
        if (rv == BERTH_ENOMEM)
            goto no_memory;
        if (rv != BERTH_OK) {
            if (r->n_tasks == 0) {
                char id[ENGINE_ID_STR];
                berth_id_format(t->id, id);
                if (rv == BERTH_ECORRUPT)
                    reply_status(&r->status, ENGINE_CODE_INTERNAL,
                                 "task %s: its body did not decode", id);
                else
                    reply_unavailable(&r->status, "reading a task failed");
            }
            return BERTH_OK;
        }
        engine_header *hs = NULL;
        char *wid = mem_strdup(worker_id);
        if (wid == NULL ||
            (b->n_headers && (hs = reply_mem(r, b->n_headers * sizeof(*hs))) == NULL)) {
            free(wid);
            goto no_memory;
        }

        bytes += t->body_bytes;
        t->has_lock = true;
        state_random(e, t->lock_token, BERTH_ID_LEN);
        free(t->worker_id);
        t->worker_id = wid;
        t->lock_expires_at_ms = now + lock_ms;
        t->claims++;
        state_task_reindex(e, t);
        if ((rv = state_task_put(e, t)) != BERTH_OK)
            return rv;

        engine_task *et = &r->tasks[r->n_tasks++];
        memset(et, 0, sizeof(*et));
        berth_id_format(t->id, et->id);
        et->topic = b->topic;
        et->payload = b->payload;
        et->payload_len = b->payload_len;
        for (size_t i = 0; i < b->n_headers; i++)
            hs[i] = (engine_header){b->headers[i].name, b->headers[i].value};
        et->headers = hs;
        et->n_headers = b->n_headers;
        et->content_type = b->content_type;
        if (b->has_instance)
            berth_id_format(b->instance_id, et->instance_id);
        et->attempt = t->claims;
        et->retries_left = t->retries_left;
        berth_id_format(t->lock_token, et->lock_token);
        et->lock_expires_at_ms = t->lock_expires_at_ms;
        et->created_at_ms = t->created_at_ms;
    }
    return BERTH_OK;

no_memory:
    /* Never "no work": a fetch that claimed nothing says why. */
    if (r->n_tasks == 0)
        reply_no_memory(&r->status);
    return BERTH_OK;
}

static bool fetch_check(engine *e, const engine_fetch_args *a, uint64_t *max, uint64_t *lock_ms,
                        uint64_t *wait_ms, engine_status *st)
{
    if (!check_text(a->worker_id, ENGINE_WORKER_ID_MAX, true, "worker_id", st))
        return false;
    if (a->n_topics == 0) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "topics: at least one is required");
        snprintf(st->field, sizeof(st->field), "topics");
        return false;
    }
    if (a->n_topics > e->o.topics_max) {
        reply_over_ceiling(st, "topics", a->n_topics, e->o.topics_max);
        return false;
    }
    for (size_t i = 0; i < a->n_topics; i++) {
        if (!check_topic(a->topics[i], "topics", st))
            return false;
        if (e->o.strict_channels && state_channel(e, a->topics[i]) == NULL) {
            reply_status(st, ENGINE_CODE_NOT_FOUND, "topic %s is not a declared channel",
                         a->topics[i]);
            snprintf(st->field, sizeof(st->field), "topics");
            return false;
        }
    }
    return check_bound(a->has_max_tasks, a->max_tasks, e->o.batch_default, e->o.batch_max, false,
                       "max_tasks", max, st) &&
           check_bound(a->has_lock_ms, a->lock_ms, e->o.lock_default_ms, e->o.lock_max_ms, false,
                       "lock_ms", lock_ms, st) &&
           check_bound(a->has_wait_ms, a->wait_ms, e->o.wait_default_ms, e->o.wait_max_ms, true,
                       "wait_ms", wait_ms, st);
}

/* ---- waiters ---- */

static void watch(engine *e, topic *tp)
{
    tp->watch_prev = NULL;
    tp->watch_next = e->watched;
    if (e->watched)
        e->watched->watch_prev = tp;
    e->watched = tp;
}

static void unwatch(engine *e, topic *tp)
{
    if (tp->watch_prev)
        tp->watch_prev->watch_next = tp->watch_next;
    else
        e->watched = tp->watch_next;
    if (tp->watch_next)
        tp->watch_next->watch_prev = tp->watch_prev;
    tp->watch_prev = tp->watch_next = NULL;
}

static void waiter_free(waiter *w)
{
    free(w->topics);
    free(w->links);
    free(w);
}

static void owner_drop_if_empty(engine *e, owner *o)
{
    if (o != NULL && o->n == 0) {
        table_del(&e->owners, &o->id, sizeof(o->id));
        free(o);
    }
}

/* Unlinks w everywhere and answers its fetch with whatever its reply
 * holds. */
static void waiter_answer(engine *e, waiter *w)
{
    for (size_t i = 0; i < w->n_topics; i++) {
        topic *tp = w->topics[i];
        wait_link *l = &w->links[i];
        if (l->prev)
            l->prev->next = l->next;
        else
            tp->waiters = l->next;
        if (l->next)
            l->next->prev = l->prev;
        else
            tp->waiters_tail = l->prev;
        if (--tp->n_waiters == 0) {
            unwatch(e, tp);
            state_topic_maybe_idle(e, tp);
        }
    }
    heap_remove(&e->waits, &w->deadline);
    e->n_waiters--;
    owner *o = w->own;
    if (o != NULL) {
        if (w->own_prev)
            w->own_prev->own_next = w->own_next;
        else
            o->first = w->own_next;
        if (w->own_next)
            w->own_next->own_prev = w->own_prev;
        o->n--;
        owner_drop_if_empty(e, o);
    }
    pending *p = w->p;
    p->waiter = NULL;
    waiter_free(w);
    turn_answer(e, p);
}

/* The owner of an owned request, made if it has no wait yet; NULL when
 * there is no memory for it (*oom) or no owner. */
static owner *owner_get(engine *e, uint64_t id, bool *oom)
{
    *oom = false;
    if (id == 0)
        return NULL;
    owner *o = table_get(&e->owners, &id, sizeof(id));
    if (o != NULL)
        return o;
    if ((o = mem_calloc(1, sizeof(*o))) == NULL) {
        *oom = true;
        return NULL;
    }
    o->id = id;
    if (table_put(&e->owners, &o->id, sizeof(o->id), o) != BERTH_OK) {
        free(o);
        *oom = true;
        return NULL;
    }
    return o;
}

/* False: no memory (nothing changed). */
static bool waiter_add(engine *e, pending *p, uint32_t max, uint64_t lock_ms, uint64_t wait_ms)
{
    const engine_fetch_args *a = &p->req.u.fetch;
    bool oom;
    owner *o = owner_get(e, p->req.owner, &oom);
    if (oom)
        return false;
    waiter *w = mem_calloc(1, sizeof(*w));
    if (w == NULL)
        goto fail;
    w->topics = mem_calloc(a->n_topics, sizeof(*w->topics));
    w->links = mem_calloc(a->n_topics, sizeof(*w->links));
    if (w->topics == NULL || w->links == NULL)
        goto fail;
    for (size_t i = 0; i < a->n_topics; i++) {
        topic *tp = state_topic(e, a->topics[i], strlen(a->topics[i]), true);
        if (tp == NULL)
            goto fail;
        bool seen = false; /* a topic named twice waits once */
        for (size_t j = 0; j < w->n_topics; j++)
            seen |= w->topics[j] == tp;
        if (!seen)
            w->topics[w->n_topics++] = tp;
    }
    w->p = p;
    w->max_tasks = max;
    w->lock_ms = lock_ms;
    heap_node_init(&w->deadline);
    w->deadline.at = e->t.now_ms + wait_ms;
    w->deadline.seq = e->next_seq++;
    if (heap_push(&e->waits, &w->deadline) != BERTH_OK)
        goto fail;
    e->n_waiters++;
    if (o != NULL) {
        w->own = o;
        w->own_next = o->first;
        if (o->first)
            o->first->own_prev = w;
        o->first = w;
        o->n++;
    }
    for (size_t i = 0; i < w->n_topics; i++) {
        topic *tp = w->topics[i];
        wait_link *l = &w->links[i];
        l->w = w;
        l->next = NULL;
        l->prev = tp->waiters_tail;
        if (tp->waiters_tail)
            tp->waiters_tail->next = l;
        else
            tp->waiters = l;
        tp->waiters_tail = l;
        if (tp->n_waiters++ == 0)
            watch(e, tp);
    }
    p->waiter = w;
    return true;

fail:
    if (w != NULL) {
        for (size_t j = 0; j < w->n_topics; j++)
            state_topic_maybe_idle(e, w->topics[j]);
        waiter_free(w);
    }
    owner_drop_if_empty(e, o);
    return false;
}

/* A fetch that may wait only while the bounds allow: else RESOURCE_EXHAUSTED. */
static bool may_wait(engine *e, const pending *p, engine_status *st)
{
    const owner *o =
        p->req.owner ? table_get(&e->owners, &p->req.owner, sizeof(p->req.owner)) : NULL;
    if (e->n_waiters >= e->o.waits_max) {
        reply_status(st, ENGINE_CODE_RESOURCE_EXHAUSTED,
                     "%llu fetches are waiting already, the most berthd keeps (waits-max): "
                     "fetch again later, or with wait_ms 0",
                     (unsigned long long)e->n_waiters);
    } else if (o != NULL && o->n >= e->o.waits_per_owner_max) {
        reply_status(st, ENGINE_CODE_RESOURCE_EXHAUSTED,
                     "this connection has %u fetches waiting already, the most it may "
                     "(waits-per-connection)",
                     o->n);
    } else {
        return true;
    }
    st->engine_code = ENGINE_EC_ENGINE_UNAVAILABLE;
    st->retryable = true;
    e->counters.waits_refused++;
    return false;
}

int claim_fetch(engine *e, pending *p)
{
    const engine_fetch_args *a = &p->req.u.fetch;
    engine_reply *r = p->reply;
    uint64_t max, lock_ms, wait_ms;
    if (!fetch_check(e, a, &max, &lock_ms, &wait_ms, &r->status))
        return BERTH_OK;
    topic *stack[64] = {0};
    topic **topics = a->n_topics <= 64 ? stack : mem_calloc(a->n_topics, sizeof(*topics));
    if (topics == NULL) {
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    /* A topic with no struct has no tasks; NULL entries are skipped. */
    for (size_t i = 0; i < a->n_topics; i++)
        topics[i] = state_topic(e, a->topics[i], strlen(a->topics[i]), false);
    int rv = claim_tasks(e, topics, a->n_topics, (uint32_t)max, lock_ms, a->worker_id, r);
    if (topics != stack)
        free(topics);
    /* Answered by the actor unless it becomes a waiter. */
    if (rv != BERTH_OK || r->n_tasks > 0 || r->status.code != ENGINE_CODE_OK || wait_ms == 0)
        return rv;
    if (may_wait(e, p, &r->status) && !waiter_add(e, p, (uint32_t)max, lock_ms, wait_ms))
        reply_no_memory(&r->status);
    return BERTH_OK;
}

int claim_cancel(engine *e, pending *p)
{
    uint64_t id = p->req.u.cancel.owner;
    owner *o = table_get(&e->owners, &id, sizeof(id));
    /* Answering the last wait frees o: take each while it is there. */
    while (o != NULL) {
        waiter *w = o->first;
        bool last = o->n == 1;
        reply_reset(w->p->reply);
        reply_status(&w->p->reply->status, ENGINE_CODE_CANCELLED,
                     "cancelled: the connection that asked closed");
        e->counters.waits_cancelled++;
        waiter_answer(e, w);
        if (last)
            break;
    }
    return BERTH_OK;
}

static bool front_due(const topic *tp, uint64_t now)
{
    const heap_node *x = heap_min(&tp->ready);
    return x != NULL && x->at <= now;
}

int claim_wake(engine *e)
{
    uint64_t now = e->t.now_ms;
    for (topic *tp = e->watched; tp != NULL; tp = tp->watch_next)
        if (front_due(tp, now))
            turn_doorbell(e, tp);
    while (e->t.rung != NULL) {
        topic *tp = e->t.rung;
        e->t.rung = tp->rung_next;
        tp->rung = false;
        wait_link *l = tp->waiters;
        while (l != NULL && front_due(tp, now)) {
            /* Answering w unlinks only w's links; the next one is another
             * waiter's, since each waiter links a topic once. */
            wait_link *next = l->next;
            waiter *w = l->w;
            engine_reply *r = w->p->reply;
            int rv = claim_tasks(e, w->topics, w->n_topics, w->max_tasks, w->lock_ms,
                                 w->p->req.u.fetch.worker_id, r);
            if (rv != BERTH_OK) {
                waiter_answer(e, w); /* with the turn's failure */
                return rv;
            }
            if (r->n_tasks > 0 || r->status.code != ENGINE_CODE_OK)
                waiter_answer(e, w);
            else
                break; /* nothing claimable after all: the front is not ours to take */
            l = next;
        }
    }
    return BERTH_OK;
}

void claim_expire(engine *e)
{
    heap_node *x;
    while ((x = heap_min(&e->waits)) != NULL && x->at <= e->t.now_ms)
        waiter_answer(e, container_of(x, waiter, deadline)); /* empty list, OK */
}

uint64_t claim_next_due(engine *e)
{
    uint64_t due = UINT64_MAX;
    heap_node *x = heap_min(&e->waits);
    if (x != NULL)
        due = x->at;
    for (topic *tp = e->watched; tp != NULL; tp = tp->watch_next) {
        x = heap_min(&tp->ready);
        if (x != NULL && x->at < due)
            due = x->at;
    }
    return due;
}

void claim_abort_all(engine *e, const engine_status *st)
{
    heap_node *x;
    while ((x = heap_min(&e->waits)) != NULL) {
        waiter *w = container_of(x, waiter, deadline);
        reply_reset(w->p->reply);
        w->p->reply->status = *st;
        waiter_answer(e, w);
    }
}
