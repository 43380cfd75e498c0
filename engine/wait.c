/* wait.c — see wait.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "engine/wait.h"
#include "store/err.h"

/* The waiting requests of one owner (a connection), in e->owners while it
 * has any: engine_cancel() finds them here, and their count is bounded. */
typedef struct owner {
    uint64_t id; /* the key's 8 bytes */
    waiter *first;
    uint32_t n;
} owner;

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

bool wait_may(engine *e, const pending *p, engine_status *st)
{
    const owner *o =
        p->req.owner ? table_get(&e->owners, &p->req.owner, sizeof(p->req.owner)) : NULL;
    if (rules_wait_may(&e->o, e->n_waiters, o != NULL, o != NULL ? o->n : 0, st))
        return true;
    e->counters.waits_refused++;
    return false;
}

/* A waiter for p with its owner and deadline, linked into neither yet;
 * NULL: no memory. */
static waiter *waiter_new(engine *e, pending *p, uint64_t wait_ms)
{
    bool oom;
    owner *o = owner_get(e, p->req.owner, &oom);
    if (oom)
        return NULL;
    waiter *w = mem_calloc(1, sizeof(*w));
    if (w == NULL) {
        owner_drop_if_empty(e, o);
        return NULL;
    }
    w->p = p;
    w->own = o;
    heap_node_init(&w->deadline);
    w->deadline.at = e->t.now_ms + wait_ms;
    w->deadline.seq = e->next_seq++;
    return w;
}

/* Links w into the deadline heap and its owner's list. False: no memory
 * (w is freed, its topics left for the end of the turn to reap). */
static bool waiter_start(engine *e, waiter *w)
{
    owner *o = w->own;
    if (heap_push(&e->waits, &w->deadline) != BERTH_OK) {
        for (size_t j = 0; j < w->n_topics; j++)
            state_topic_maybe_idle(e, w->topics[j]);
        waiter_free(w);
        owner_drop_if_empty(e, o);
        return false;
    }
    e->n_waiters++;
    if (o != NULL) {
        w->own_next = o->first;
        if (o->first)
            o->first->own_prev = w;
        o->first = w;
        o->n++;
    }
    w->p->waiter = w;
    return true;
}

bool wait_fetch(engine *e, pending *p, uint32_t max_tasks, uint64_t lock_ms, uint64_t wait_ms)
{
    const engine_fetch_args *a = &p->req.u.fetch;
    waiter *w = waiter_new(e, p, wait_ms);
    if (w == NULL)
        return false;
    w->topics = mem_calloc(a->n_topics, sizeof(*w->topics));
    w->links = mem_calloc(a->n_topics, sizeof(*w->links));
    bool ok = w->topics != NULL && w->links != NULL;
    for (size_t i = 0; ok && i < a->n_topics; i++) {
        topic *tp = state_topic(e, a->topics[i], strlen(a->topics[i]), true);
        if (tp == NULL) {
            ok = false;
            break;
        }
        bool seen = false; /* a topic named twice waits once */
        for (size_t j = 0; j < w->n_topics; j++)
            seen |= w->topics[j] == tp;
        if (!seen)
            w->topics[w->n_topics++] = tp;
    }
    if (!ok) {
        for (size_t j = 0; j < w->n_topics; j++)
            state_topic_maybe_idle(e, w->topics[j]);
        owner *o = w->own;
        waiter_free(w);
        owner_drop_if_empty(e, o);
        return false;
    }
    w->max_tasks = max_tasks;
    w->lock_ms = lock_ms;
    if (!waiter_start(e, w))
        return false;
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
    return true;
}

bool wait_await(engine *e, pending *p, instance *inst, uint64_t wait_ms)
{
    waiter *w = waiter_new(e, p, wait_ms);
    if (w == NULL || !waiter_start(e, w))
        return false;
    w->inst = inst;
    w->inst_next = inst->awaits;
    if (inst->awaits)
        inst->awaits->inst_prev = w;
    inst->awaits = w;
    return true;
}

/* An await answered before its instance ended: the instance as it stands. */
static void await_fill(const instance *inst, engine_reply *r)
{
    if (r->status.code != ENGINE_CODE_OK || r->instance.state != 0)
        return;
    rules_instance_live(&r->instance, inst->id, inst->state, inst->attempt, inst->created_at_ms);
}

void wait_answer(engine *e, waiter *w)
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
    if (w->inst != NULL) {
        if (w->inst_prev)
            w->inst_prev->inst_next = w->inst_next;
        else
            w->inst->awaits = w->inst_next;
        if (w->inst_next)
            w->inst_next->inst_prev = w->inst_prev;
        await_fill(w->inst, w->p->reply);
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
    if (p->req.op == ENGINE_OP_FETCH)
        hist_observe(&e->fetch_wait, (double)(e->t.now_ms - p->arrived_ms) / 1000.0);
    turn_answer(e, p);
}

int wait_cancel(engine *e, pending *p)
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
        wait_answer(e, w);
        if (last)
            break;
    }
    return BERTH_OK;
}

void wait_expire(engine *e)
{
    heap_node *x;
    while ((x = heap_min(&e->waits)) != NULL && x->at <= e->t.now_ms)
        wait_answer(e, container_of(x, waiter, deadline)); /* as it stands, OK */
}

uint64_t wait_next_deadline(const engine *e)
{
    heap_node *x = heap_min(&e->waits);
    return x != NULL ? x->at : UINT64_MAX;
}

static void abort_one(engine *e, waiter *w, const engine_status *st)
{
    reply_reset(w->p->reply);
    w->p->reply->status = *st;
    wait_answer(e, w);
}

void wait_abort(engine *e, const engine_status *st, bool awaits_only)
{
    if (awaits_only) {
        size_t i = 0;
        instance *inst;
        while ((inst = table_next(&e->instances, &i)) != NULL)
            while (inst->awaits != NULL)
                abort_one(e, inst->awaits, st);
        return;
    }
    heap_node *x;
    while ((x = heap_min(&e->waits)) != NULL)
        abort_one(e, container_of(x, waiter, deadline), st);
}
