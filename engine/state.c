/*
 * state.c — see state.h. The invariant checks at the bottom hold between
 * turns.
 *
 * WHAT A TASK COSTS IN MEMORY
 *   A backlog is millions of tasks that wait, so a waiting task carries
 *   only what ordering, finding and fetching it need. Per ready task, on
 *   x86-64, berthd linked with tcmalloc:
 *     task struct                 112 B (a size class of its own; 120 B
 *                                  with glibc's header)
 *     its slot in the id map       12 B at a load of 3/8 to 3/4 (idtab.h):
 *                                  16 to 32 B
 *     its listing entry             8 B (listing.c), and the dead entries
 *                                  of tasks gone until the next tidy
 *     the topic's two order arrays 2 x 8 B of room, written only when a
 *                                  task leaves the in-order runs (heap.h)
 *   about 140 B measured (BENCHMARKS.md, "A backlog"), and its encoded
 *   Body while the body cache (--body-cache-bytes) has room. What only a
 *   claimed task needs (lock, worker, failure budget, last error, its
 *   gauge place, its availability once it has been claimed) is its
 *   task_run (core.h), 128 B more from its first claim to its end. Ids
 *   are stored once, in the task; the map keeps 32 bits of their hash.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "engine/listing.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "store/err.h"

/* The budget above: grow the task struct only with a reason. */
_Static_assert(sizeof(void *) != 8 || sizeof(task) <= 112, "a task grew past its memory budget");

topic *state_topic(engine *e, const char *name, size_t len, bool create)
{
    topic *t = table_get(&e->topics, name, len);
    if (t != NULL || !create)
        return t;
    t = mem_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->name = mem_alloc(len + 1);
    if (t->name == NULL) {
        free(t);
        return NULL;
    }
    memcpy(t->name, name, len);
    t->name[len] = '\0';
    t->name_len = len;
    heap_init(&t->locked);
    heap_init(&t->backoff);
    if ((t->tc = tcounts_get(&e->tcounts, t->name, len)) == NULL) {
        free(t->name);
        free(t);
        return NULL;
    }
    heap_init(&t->ready);
    heap_init(&t->later);
    if (table_put(&e->topics, t->name, len, t) != BERTH_OK) {
        free(t->name);
        free(t);
        return NULL;
    }
    return t;
}

static bool topic_unused(const topic *tp)
{
    return tp->ready.n == 0 && tp->later.n == 0 && tp->n_terminal == 0 && tp->n_deliveries == 0 &&
           tp->n_waiters == 0 && !tp->rung;
}

void state_topic_maybe_idle(engine *e, topic *tp)
{
    if (tp->idle_listed || !topic_unused(tp))
        return;
    tp->idle_listed = true;
    tp->idle_next = e->idle;
    e->idle = tp;
}

void state_topics_reap(engine *e, bool all)
{
    if (all) {
        size_t i = 0;
        topic *tp;
        while ((tp = table_next(&e->topics, &i)) != NULL)
            state_topic_maybe_idle(e, tp); /* (listing does not change the table) */
    }
    while (e->idle != NULL) {
        topic *tp = e->idle;
        e->idle = tp->idle_next;
        tp->idle_listed = false;
        if (!topic_unused(tp))
            continue;
        table_del(&e->topics, tp->name, tp->name_len);
        state_topic_fini(tp);
        free(tp->name);
        free(tp);
    }
}

void state_topic_fini(topic *tp)
{
    heap_fini(&tp->ready);
    heap_fini(&tp->later);
    heap_fini(&tp->locked);
    heap_fini(&tp->backoff);
    tp->n_later_unfetched = 0;
}

/* Puts t, in neither order, into the one its fetchable instant says at
 * now (the arrays have room: state_task_index). */
static void place(task *t, uint64_t now)
{
    topic *tp = t->topic;
    t->ready.at = state_fetchable_at(t);
    t->later = t->ready.at > now;
    t->ready.prio = t->later ? 0 : t->priority;
    heap_push_reserved(t->later ? &tp->later : &tp->ready, &t->ready);
    tp->n_later_unfetched += t->later && state_run(t)->claims == 0;
}

int state_task_index(engine *e, task *t, uint64_t now)
{
    topic *tp = t->topic;
    size_t n = tp->ready.n + tp->later.n + 1;
    if (heap_reserve(&tp->ready, n) != BERTH_OK || heap_reserve(&tp->later, n) != BERTH_OK)
        return BERTH_ENOMEM;
    if (state_task_gauge(e, t, now) != BERTH_OK)
        return BERTH_ENOMEM;
    place(t, now);
    return BERTH_OK;
}

void state_task_unindex(task *t)
{
    if (!heap_has(&t->ready))
        return;
    topic *tp = t->topic;
    heap_remove(t->later ? &tp->later : &tp->ready, &t->ready);
    tp->n_later_unfetched -= t->later && state_run(t)->claims == 0;
}

void state_task_reindex(engine *e, task *t)
{
    if (heap_has(&t->ready)) {
        state_task_unindex(t);
        place(t, e->t.now_ms);
    }
    if (state_task_gauge(e, t, e->t.now_ms) != BERTH_OK)
        turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory keeping the gauges");
}

/* Moves what has become fetchable out of tp's later order. */
static void promote(topic *tp, uint64_t now)
{
    heap_node *x;
    while ((x = heap_min(&tp->later)) != NULL && x->at <= now) {
        task *t = container_of(x, task, ready);
        state_task_unindex(t);
        place(t, now);
    }
}

task *state_topic_front(topic *tp, uint64_t now)
{
    promote(tp, now);
    heap_node *x = heap_min(&tp->ready);
    return x != NULL ? container_of(x, task, ready) : NULL;
}

uint64_t state_topic_due(const topic *tp)
{
    if (tp->ready.n > 0)
        return 0;
    const heap_node *x = heap_min(&tp->later);
    return x != NULL ? x->at : UINT64_MAX;
}

engine_task_state state_task_state(const task *t, uint64_t now)
{
    if (t->terminal)
        return ENGINE_TASK_TERMINAL;
    if (state_task_lock_live(t, now))
        return ENGINE_TASK_LOCKED;
    if (state_task_available_at(t) > now)
        return state_run(t)->claims == 0 ? ENGINE_TASK_DELAYED : ENGINE_TASK_BACKOFF;
    return ENGINE_TASK_READY;
}

void state_task_gauge_drop(task *t)
{
    gauge *g = t->run != NULL ? &t->run->gauge : NULL;
    if (g == NULL || g->in == NULL)
        return;
    heap_remove(g->in, &g->n);
    g->in = NULL;
}

int state_task_gauge(engine *e, task *t, uint64_t now)
{
    (void)e;
    heap *want = NULL;
    uint64_t at = 0;
    switch (state_task_state(t, now)) {
    case ENGINE_TASK_LOCKED:
        want = &t->topic->locked;
        at = t->run->lock_expires_at_ms;
        break;
    case ENGINE_TASK_BACKOFF:
        want = &t->topic->backoff;
        at = t->run->available_at_ms;
        break;
    default: /* (a delayed task is counted by its place in `later`) */
        break;
    }
    /* (Locked or backing off: the task has been claimed, so has a run.) */
    gauge *g = t->run != NULL ? &t->run->gauge : NULL;
    if (g != NULL && g->in == want && want != NULL) {
        g->n.at = at;
        heap_fix(want, &g->n);
        return BERTH_OK;
    }
    state_task_gauge_drop(t);
    if (want == NULL)
        return BERTH_OK;
    g->n.at = at;
    g->n.seq = t->ready.seq;
    if (heap_push(want, &g->n) != BERTH_OK)
        return BERTH_ENOMEM;
    g->in = want;
    return BERTH_OK;
}

static void settle(heap *h, uint64_t now)
{
    heap_node *x;
    while ((x = heap_min(h)) != NULL && x->at <= now) {
        heap_remove(h, x);
        container_of(x, gauge, n)->in = NULL;
    }
}

void state_gauges_settle(engine *e, uint64_t now)
{
    size_t i = 0;
    topic *tp;
    while ((tp = table_next(&e->topics, &i)) != NULL) {
        settle(&tp->locked, now);
        settle(&tp->backoff, now);
        promote(tp, now); /* then n_later_unfetched counts the delayed */
    }
}

int state_task_put(engine *e, task *t)
{
    const task_run *run = state_run(t);
    store_task_state r = {
        .available_at_ms = state_task_available_at(t),
        .worker_id = run->worker_id,
        .has_lock_token = run->has_lock,
        .lock_expires_at_ms = run->lock_expires_at_ms,
        .claims = run->claims,
        .retries_left = state_task_retries_left(e, t),
        .failures = run->failures,
        .terminal = t->terminal,
        .last_error = {run->err_code, run->err_message, run->err_details},
    };
    memcpy(r.lock_token, run->lock_token, BERTH_ID_LEN);
    if (store_task_state_encode(&r, &e->buf) != BERTH_OK)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory writing a task's state");
    uint8_t key[STORE_ROW_KEY_LEN];
    store_row_key(key, t->ready.seq, STORE_KIND_STATE);
    store_batch_put(e->batch, STORE_CF_TASKS, key, sizeof(key), e->buf.data, e->buf.len);
    return BERTH_OK;
}

static void body_drop(engine *e, task *t);

void state_task_free(engine *e, task *t)
{
    if (t == NULL)
        return;
    body_drop(e, t);
    /* (Its gauge is out of its heap already, or the heaps are being reset.) */
    task_run *run = t->run;
    if (run != NULL) {
        free(run->worker_id);
        free(run->err_code);
        free(run->err_message);
        free(run->err_details);
        free(run);
    }
    free(t);
}

void state_task_delete(engine *e, task *t)
{
    uint8_t key[STORE_ROW_KEY_LEN];
    store_row_key(key, t->ready.seq, STORE_KIND_BODY);
    store_batch_single_delete(e->batch, STORE_CF_TASKS, key, sizeof(key));
    /* Every task that can be deleted has been claimed, so it has a state
     * row; deleting one that is absent would be harmless anyway. */
    store_row_key(key, t->ready.seq, STORE_KIND_STATE);
    store_batch_delete(e->batch, STORE_CF_TASKS, key, sizeof(key));
    state_task_unindex(t);
    deployment *dep = state_dep(e, t->chan);
    dep->n_tasks--;
    if (t->terminal) {
        t->topic->n_terminal--;
        dep->n_terminal--;
    }
    state_task_gauge_drop(t);
    listing_drop(e, t);
    topic *tp = t->topic;
    idtab_del(&e->tasks, t->id);
    state_task_free(e, t);
    state_topic_maybe_idle(e, tp);
}

/*
 * THE BODY CACHE
 *   A fetch answers with the task's encoded Body: from memory when it is
 *   cached, else read back from the store (a RocksDB read, several times a
 *   claim's cost). 7/8 of --body-cache-bytes keeps bodies from park until
 *   their task ends, first come first kept: a backlog being drained is
 *   fetched oldest first, so its oldest bodies are the ones to keep, and
 *   they never move. Once that is full, a body parked is held as recent,
 *   in the last 1/8, which lets its oldest go (at the end of each turn:
 *   until the turn is written the store cannot serve them). So a backlog
 *   nobody fetches, which fills the kept part, does not cost the topics
 *   that are served their cache: their tasks are fetched soon after park.
 */
static uint64_t recent_budget(const engine *e)
{
    return e->o.body_cache_bytes / 8;
}

static uint64_t kept_budget(const engine *e)
{
    return e->o.body_cache_bytes - recent_budget(e);
}

/* Most recent entries (some of tasks gone): bounds the ring. */
static size_t recent_max(const engine *e)
{
    uint64_t n = recent_budget(e) / 128;
    return n < 1024 ? 1024 : (size_t)n;
}

static berth_id_bytes *recent_push(engine *e)
{
    if (e->recent.n == e->recent.cap) {
        size_t cap = e->recent.cap ? 2 * e->recent.cap : 1024;
        berth_id_bytes *v = mem_alloc(cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        for (size_t i = 0; i < e->recent.n; i++)
            v[i] = e->recent.v[(e->recent.head + i) % e->recent.cap];
        free(e->recent.v);
        e->recent.v = v;
        e->recent.cap = cap;
        e->recent.head = 0;
    }
    e->recent.n++;
    return &e->recent.v[(e->recent.head + e->recent.n - 1) % e->recent.cap];
}

static void body_drop(engine *e, task *t)
{
    if (t->body == NULL)
        return;
    if (t->recent)
        e->recent_used -= t->body_bytes;
    else
        e->body_cache_used -= t->body_bytes;
    free(t->body);
    t->body = NULL;
    t->recent = false;
}

int state_task_keep_body(engine *e, task *t, uint8_t *owned, const void *bytes, size_t len)
{
    bool recent = e->body_cache_used + len > kept_budget(e);
    berth_id_bytes *slot = recent ? recent_push(e) : NULL;
    if (owned == NULL && (!recent || slot != NULL))
        owned = mem_dup(bytes, len);
    if (owned == NULL || (recent && slot == NULL)) {
        if (slot != NULL)
            e->recent.n--;
        free(owned);
        /* The store cannot serve the body before the turn's write. */
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory keeping a task's body");
    }
    t->body = owned;
    t->recent = recent;
    if (recent) {
        memcpy(slot->b, t->id, BERTH_ID_LEN);
        e->recent_used += len;
    } else {
        e->body_cache_used += len;
    }
    return BERTH_OK;
}

void state_task_cache_body(engine *e, task *t, const void *bytes, size_t len)
{
    if (e->body_cache_used + len > kept_budget(e) || (t->body = mem_dup(bytes, len)) == NULL)
        return;
    e->body_cache_used += len;
}

void state_task_evict_bodies(engine *e)
{
    while (e->recent.n > 0) {
        const berth_id_bytes *front = &e->recent.v[e->recent.head];
        task *t = idtab_get(&e->tasks, front->b);
        bool held = t != NULL && t->recent;
        if (held && e->recent_used <= recent_budget(e) && e->recent.n <= recent_max(e))
            break;
        if (held)
            body_drop(e, t);
        e->recent.head = (e->recent.head + 1) % e->recent.cap;
        e->recent.n--;
    }
}

void state_task_forget_bodies(engine *e)
{
    e->recent.n = e->recent.head = 0;
    e->recent_used = 0;
}

int state_task_read_body(engine *e, task *t, store_body *out)
{
    if (t->body != NULL)
        return store_body_decode(t->body, t->body_bytes, out);
    e->counters.body_reads++;
    uint8_t key[STORE_ROW_KEY_LEN];
    store_row_key(key, t->ready.seq, STORE_KIND_BODY);
    store_value v;
    int rv = store_get(e->store, STORE_CF_TASKS, key, sizeof(key), &v);
    if (rv != BERTH_OK)
        return rv;
    rv = store_body_decode(v.data, v.len, out);
    store_value_free(&v);
    return rv;
}

void state_random(engine *e, void *out, size_t n)
{
    if (n > sizeof(e->rand_pool)) {
        randombytes_buf(out, n);
        return;
    }
    if (e->rand_used == 0 || e->rand_used + n > sizeof(e->rand_pool)) {
        randombytes_buf(e->rand_pool, sizeof(e->rand_pool));
        e->rand_used = 0;
    }
    memcpy(out, e->rand_pool + e->rand_used, n);
    sodium_memzero(e->rand_pool + e->rand_used, n); /* drawn bytes are not kept */
    e->rand_used += n;
}

task *state_task_new(engine *e, const uint8_t id[BERTH_ID_LEN], topic *tp, uint64_t seq,
                     uint64_t created_at_ms, size_t body_bytes, uint32_t priority,
                     uint64_t not_before_ms)
{
    task *t = mem_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    memcpy(t->id, id, BERTH_ID_LEN);
    t->topic = tp;
    t->created_at_ms = created_at_ms;
    t->body_bytes = (uint32_t)body_bytes;
    t->priority = priority;
    heap_node_init(&t->ready);
    t->ready.at = not_before_ms > created_at_ms ? not_before_ms : created_at_ms;
    t->ready.seq = seq;
    return t;
}

int state_task_set_error(task_run *run, const engine_error *err)
{
    char *code = mem_strdup(err->code), *message = mem_strdup(err->message),
         *details = mem_strdup(err->details);
    if ((err->code && !code) || (err->message && !message) || (err->details && !details)) {
        free(code);
        free(message);
        free(details);
        return BERTH_ENOMEM;
    }
    free(run->err_code);
    free(run->err_message);
    free(run->err_details);
    run->err_code = code;
    run->err_message = message;
    run->err_details = details;
    return BERTH_OK;
}

const task_run state_run_none = {.gauge = {.n = {.pos = HEAP_ABSENT}}};

task_run *state_task_run(engine *e, task *t)
{
    if (t->run != NULL)
        return t->run;
    task_run *run = mem_calloc(1, sizeof(*run));
    if (run == NULL)
        return NULL;
    run->retries_left = e->o.retries;
    run->available_at_ms = t->ready.at; /* (a task never claimed keeps it there) */
    heap_node_init(&run->gauge.n);
    t->run = run;
    return run;
}

task *state_task_find(engine *e, const char *id_str, const char *field, engine_status *st)
{
    uint8_t id[BERTH_ID_LEN];
    if (!rules_task_id(id_str, field, id, st))
        return NULL;
    task *t = idtab_get(&e->tasks, id);
    if (t == NULL)
        rules_not_found(st, id_str);
    return t;
}

/* A random id no delivery or task has. */
static void new_delivery_id(engine *e, uint8_t id[BERTH_ID_LEN])
{
    do
        state_random(e, id, BERTH_ID_LEN);
    while (idtab_get(&e->deliveries, id) != NULL || idtab_get(&e->tasks, id) != NULL);
}

int state_delivery_new(engine *e, topic *tp, const channel *chan, store_body *b, delivery **out)
{
    delivery *d = mem_calloc(1, sizeof(*d));
    if (d == NULL)
        return BERTH_ENOMEM;
    new_delivery_id(e, d->id);
    d->topic = tp;
    tp->n_deliveries++;
    d->chan = chan;
    b->deployment = chan != NULL ? chan->dep->number : 0;
    d->seq = e->next_seq++;
    d->created_at_ms = e->t.now_ms;
    d->has_instance = b->has_instance;
    memcpy(d->instance_id, b->instance_id, BERTH_ID_LEN);
    d->priority = b->priority;
    d->not_before_ms = b->not_before_ms;
    heap_node_init(&d->due);
    d->due.at = state_delivery_due(d);
    d->due.seq = d->seq;
    memcpy(b->id, d->id, BERTH_ID_LEN);
    b->seq = d->seq;
    b->created_at_ms = d->created_at_ms;
    if (store_body_encode(b, &e->buf) != BERTH_OK ||
        (d->body = mem_dup(e->buf.data, e->buf.len)) == NULL)
        goto fail;
    d->body_len = e->buf.len;
    d->fresh = true;
    if (idtab_put(&e->deliveries, d) != BERTH_OK)
        goto fail;
    if (heap_push(&e->outbox, &d->due) != BERTH_OK)
        goto unlist;
    delivery **slot = VEC_ADD(&e->t.fresh);
    if (slot == NULL)
        goto unqueue;
    d->fresh_idx = e->t.fresh.n - 1;
    *slot = d;
    state_dep(e, chan)->n_deliveries++;
    *out = d;
    return BERTH_OK;

unqueue:
    heap_remove(&e->outbox, &d->due);
unlist:
    idtab_del(&e->deliveries, d->id);
fail:
    state_delivery_free(d);
    state_topic_maybe_idle(e, tp);
    return BERTH_ENOMEM;
}

void state_delivery_delete(engine *e, delivery *d)
{
    if (d->fresh) {
        e->t.fresh.v[d->fresh_idx] = NULL;
    } else {
        uint8_t key[STORE_ROW_KEY_LEN];
        store_row_key(key, d->seq, STORE_KIND_BODY);
        store_batch_single_delete(e->batch, STORE_CF_OUTBOX, key, sizeof(key));
        if (d->has_state_row) {
            store_row_key(key, d->seq, STORE_KIND_STATE);
            store_batch_delete(e->batch, STORE_CF_OUTBOX, key, sizeof(key));
        }
    }
    deployment *dep = state_dep(e, d->chan);
    dep->n_deliveries--;
    if (d->waiting)
        state_lane_leave(d);
    if (d->inflight) {
        d->inflight = false; /* its answer, if one comes, finds no delivery */
        d->chan->lane->inflight--;
        (void)state_lane_admit(e, d->chan->lane);
    }
    if (d->poisoned) {
        e->n_poisoned--;
        dep->n_poisoned--;
    } else if (heap_has(&d->due)) {
        heap_remove(&e->outbox, &d->due);
    }
    topic *tp = d->topic;
    idtab_del(&e->deliveries, d->id);
    state_delivery_free(d);
    state_topic_maybe_idle(e, tp);
}

void state_lane_wait(delivery *d)
{
    push_lane *l = d->chan->lane;
    d->waiting = true;
    d->wait_next = NULL;
    d->wait_prev = l->tail;
    if (l->tail != NULL)
        l->tail->wait_next = d;
    else
        l->head = d;
    l->tail = d;
}

void state_lane_leave(delivery *d)
{
    push_lane *l = d->chan->lane;
    if (d->wait_prev != NULL)
        d->wait_prev->wait_next = d->wait_next;
    else
        l->head = d->wait_next;
    if (d->wait_next != NULL)
        d->wait_next->wait_prev = d->wait_prev;
    else
        l->tail = d->wait_prev;
    d->wait_prev = d->wait_next = NULL;
    d->waiting = false;
}

int state_lane_admit(engine *e, push_lane *l)
{
    delivery *d = l->head;
    if (d == NULL)
        return BERTH_OK;
    state_lane_leave(d);
    d->admitted = true;
    d->due.at = e->t.now_ms;
    if (heap_push(&e->outbox, &d->due) != BERTH_OK)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory re-queueing a delivery");
    return BERTH_OK;
}

int state_delivery_put(engine *e, delivery *d)
{
    store_delivery_state r = {
        .attempts = d->attempts,
        .next_attempt_at_ms = d->due.at,
        .poisoned = d->poisoned,
        .last_error = {.message = d->err_message},
    };
    if (store_delivery_state_encode(&r, &e->buf) != BERTH_OK)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED,
                         "out of memory writing a delivery's state");
    uint8_t key[STORE_ROW_KEY_LEN];
    store_row_key(key, d->seq, STORE_KIND_STATE);
    store_batch_put(e->batch, STORE_CF_OUTBOX, key, sizeof(key), e->buf.data, e->buf.len);
    d->has_state_row = true;
    return BERTH_OK;
}

void state_delivery_free(delivery *d)
{
    if (d == NULL)
        return;
    if (d->topic != NULL)
        d->topic->n_deliveries--;
    free(d->err_message);
    free(d->body);
    free(d);
}

int state_incident_put(engine *e, int kind, const uint8_t subject[BERTH_ID_LEN], const topic *t,
                       const char *code, const char *message)
{
    store_incident r = {
        .kind = kind,
        .topic = t->name,
        .error = {.code = code, .message = message},
        .at_ms = e->t.now_ms,
    };
    memcpy(r.subject_id, subject, BERTH_ID_LEN);
    if (store_incident_encode(&r, &e->buf) != BERTH_OK)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory writing an incident");
    uint8_t key[STORE_INCIDENT_KEY_LEN];
    store_incident_key(key, e->t.now_ms, e->next_seq++);
    store_batch_put(e->batch, STORE_CF_INCIDENTS, key, sizeof(key), e->buf.data, e->buf.len);
    return BERTH_OK;
}

/* Whole-state invariants. Cheap enough to run after every turn in the
 * checking build, far too slow for production. */
void state_check(engine *e)
{
#ifdef BERTH_CHECKS
    size_t i = 0;
    task *t;
    uint64_t n_unfetched = 0; /* tasks never fetched in a later order */
    uint64_t kept = 0, recent = 0;
    while ((t = idtab_next(&e->tasks, &i)) != NULL) {
        assert(!t->recent || t->body != NULL);
        if (t->body != NULL)
            *(t->recent ? &recent : &kept) += t->body_bytes;
        assert(t->topic != NULL);
        assert(t->terminal == !heap_has(&t->ready));
        if (heap_has(&t->ready)) {
            assert(t->ready.at == state_fetchable_at(t));
            assert(heap_holds(t->later ? &t->topic->later : &t->topic->ready, &t->ready));
            /* in the ready order only once fetchable, and by its priority */
            assert(t->later || (t->ready.at <= e->t.now_ms && t->ready.prio == t->priority));
            assert(!t->later || t->ready.prio == 0);
        }
        const task_run *run = state_run(t);
        assert(!run->has_lock || run->worker_id != NULL);
        /* its gauge: in the locked or backoff heap as its state says */
        if (t->run != NULL && t->run->gauge.in != NULL) {
            assert(heap_has(&t->run->gauge.n));
            assert(t->run->gauge.in == &t->topic->locked || t->run->gauge.in == &t->topic->backoff);
        }
        n_unfetched += heap_has(&t->ready) && t->later && run->claims == 0;
    }
    i = 0;
    topic *tp;
    size_t n_ready = 0;
    uint64_t n_terminal = 0;
    uint64_t n_deliveries = 0;
    while ((tp = table_next(&e->topics, &i)) != NULL) {
        assert(!topic_unused(tp)); /* reaped at the end of every turn */
        n_deliveries += tp->n_deliveries;
        assert(heap_valid(&tp->ready) && heap_valid(&tp->later));
        assert(tp->ready.cap >= tp->ready.n + tp->later.n &&
               tp->later.cap >= tp->ready.n + tp->later.n); /* a move never allocates */
        n_ready += tp->ready.n + tp->later.n;
        n_unfetched -= tp->n_later_unfetched;
        n_terminal += tp->n_terminal;
        assert((tp->n_waiters > 0) == (tp->waiters != NULL));
    }
    assert(n_ready + n_terminal == e->tasks.n);
    assert(kept == e->body_cache_used && kept <= kept_budget(e));
    assert(recent == e->recent_used && recent <= recent_budget(e)); /* (between turns) */
    assert(n_unfetched == 0); /* each topic's count of them sums to it */
    i = 0;
    delivery *d;
    uint64_t n_poisoned = 0;
    while ((d = idtab_next(&e->deliveries, &i)) != NULL) {
        assert((d->poisoned || d->waiting) == !heap_has(&d->due));
        assert(!(d->poisoned && (d->waiting || d->inflight)) && !(d->waiting && d->inflight));
        assert(!(d->waiting || d->inflight) || (d->chan != NULL && d->chan->lane != NULL));
        assert(!d->fresh);
        n_poisoned += d->poisoned;
    }
    assert(n_poisoned == e->n_poisoned);
    assert(n_deliveries == e->deliveries.n);
    assert(heap_valid(&e->outbox));
    assert(heap_valid(&e->waits));
    assert(e->waits.n == e->n_waiters);
#else
    (void)e;
#endif
}
