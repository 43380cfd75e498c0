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

#include "engine/internal.h"

static bool node_less(const heap_node *a, const heap_node *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

/* Claims up to max fetchable tasks of the given topics, oldest fetchable
 * instant first across them, into r->tasks; stops early rather than pass
 * the fetch byte budget (the first task always fits: the budget is at
 * least the payload ceiling). */
static void claim(engine *e, topic *const *topics, size_t n_topics, uint32_t max, uint64_t lock_ms,
                  const char *worker_id, engine_reply *r)
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
            return;
        task *t = container_of(best, task, ready);
        if (r->n_tasks > 0 && bytes + t->body_bytes > e->o.fetch_max_bytes)
            return;
        bytes += t->body_bytes;

        if (r->tasks == NULL && (r->tasks = reply_mem(r, max * sizeof(*r->tasks))) == NULL)
            return;
        store_body *b = reply_body(r);
        int rv = b ? task_read_body(e, t, b) : BERTH_ENOMEM;
        if (rv == BERTH_EIO || rv == BERTH_ENOTFOUND) {
            if (r->n_tasks == 0)
                status_unavailable(&r->status, "reading a task failed");
            return;
        }
        engine_header *hs = NULL;
        char *wid = strdup(worker_id);
        if (rv != BERTH_OK || wid == NULL ||
            (b->n_headers && (hs = reply_mem(r, b->n_headers * sizeof(*hs))) == NULL)) {
            free(wid);
            if (r->n_tasks == 0)
                status_set(&r->status, ENGINE_CODE_INTERNAL, "a task's body did not decode");
            return;
        }

        t->has_lock = true;
        engine_random(e, t->lock_token, BERTH_ID_LEN);
        free(t->worker_id);
        t->worker_id = wid;
        t->lock_expires_at_ms = now + lock_ms;
        t->claims++;
        task_reindex(e, t);
        if (task_put_state(e, t) != BERTH_OK) {
            e->t.abort = true;
            return;
        }

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
}

static bool fetch_check(engine *e, const engine_fetch_args *a, uint64_t *max, uint64_t *lock_ms,
                        uint64_t *wait_ms, engine_status *st)
{
    if (!check_text(a->worker_id, ENGINE_WORKER_ID_MAX, true, "worker_id", st))
        return false;
    if (a->n_topics == 0) {
        status_set(st, ENGINE_CODE_INVALID_ARGUMENT, "topics: at least one is required");
        snprintf(st->field, sizeof(st->field), "topics");
        return false;
    }
    if (a->n_topics > e->o.topics_max) {
        status_over_ceiling(st, "topics", a->n_topics, e->o.topics_max);
        return false;
    }
    for (size_t i = 0; i < a->n_topics; i++) {
        if (!check_topic(a->topics[i], "topics", st))
            return false;
        if (e->o.strict_channels && channel_find(e, a->topics[i]) == NULL) {
            status_set(st, ENGINE_CODE_NOT_FOUND, "topic %s is not a declared channel",
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
            topic_maybe_idle(e, tp);
        }
    }
    heap_remove(&e->waits, &w->deadline);
    e->n_waiters--;
    pending *p = w->p;
    p->waiter = NULL;
    waiter_free(w);
    turn_answer(e, p);
}

static bool waiter_add(engine *e, pending *p, uint32_t max, uint64_t lock_ms, uint64_t wait_ms)
{
    const engine_fetch_args *a = &p->req.u.fetch;
    waiter *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return false;
    w->topics = calloc(a->n_topics, sizeof(*w->topics));
    w->links = calloc(a->n_topics, sizeof(*w->links));
    if (w->topics == NULL || w->links == NULL) {
        waiter_free(w);
        return false;
    }
    for (size_t i = 0; i < a->n_topics; i++) {
        topic *tp = topic_get(e, a->topics[i], strlen(a->topics[i]), true);
        if (tp == NULL) {
            for (size_t j = 0; j < w->n_topics; j++)
                topic_maybe_idle(e, w->topics[j]);
            waiter_free(w);
            return false;
        }
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
    if (heap_push(&e->waits, &w->deadline) != BERTH_OK) {
        for (size_t j = 0; j < w->n_topics; j++)
            topic_maybe_idle(e, w->topics[j]);
        waiter_free(w);
        return false;
    }
    e->n_waiters++;
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
}

void op_fetch(engine *e, pending *p)
{
    const engine_fetch_args *a = &p->req.u.fetch;
    engine_reply *r = p->reply;
    uint64_t max, lock_ms, wait_ms;
    if (!fetch_check(e, a, &max, &lock_ms, &wait_ms, &r->status))
        return;
    topic *stack[64] = {0};
    topic **topics = a->n_topics <= 64 ? stack : calloc(a->n_topics, sizeof(*topics));
    if (topics == NULL) {
        status_set(&r->status, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* A topic with no struct has no tasks; NULL entries are skipped. */
    for (size_t i = 0; i < a->n_topics; i++)
        topics[i] = topic_get(e, a->topics[i], strlen(a->topics[i]), false);
    claim(e, topics, a->n_topics, (uint32_t)max, lock_ms, a->worker_id, r);
    if (topics != stack)
        free(topics);
    /* Answered by the actor unless it becomes a waiter. */
    if (r->n_tasks > 0 || r->status.code != ENGINE_CODE_OK || wait_ms == 0)
        return;
    if (!waiter_add(e, p, (uint32_t)max, lock_ms, wait_ms))
        status_set(&r->status, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory");
}

void doorbell_ring(engine *e, topic *tp)
{
    if (tp->n_waiters == 0 || tp->rung)
        return;
    tp->rung = true;
    tp->rung_next = e->t.rung;
    e->t.rung = tp;
}

static bool front_due(const topic *tp, uint64_t now)
{
    const heap_node *x = heap_min(&tp->ready);
    return x != NULL && x->at <= now;
}

void claim_wake(engine *e)
{
    uint64_t now = e->t.now_ms;
    for (topic *tp = e->watched; tp != NULL; tp = tp->watch_next)
        if (front_due(tp, now))
            doorbell_ring(e, tp);
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
            claim(e, w->topics, w->n_topics, w->max_tasks, w->lock_ms, w->p->req.u.fetch.worker_id,
                  r);
            if (r->n_tasks > 0 || r->status.code != ENGINE_CODE_OK)
                waiter_answer(e, w);
            else
                break; /* nothing claimable after all: the front is not ours to take */
            l = next;
        }
    }
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

void claim_abort_all(engine *e, engine_code code, const char *why)
{
    heap_node *x;
    while ((x = heap_min(&e->waits)) != NULL) {
        waiter *w = container_of(x, waiter, deadline);
        engine_reply *r = w->p->reply;
        reply_reset(r);
        status_set(&r->status, code, "%s", why);
        if (code == ENGINE_CODE_UNAVAILABLE)
            status_unavailable(&r->status, why);
        waiter_answer(e, w);
    }
}
