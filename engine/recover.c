/*
 * recover.c — rebuilds the engine's memory from the store.
 *
 * Called by engine_open(), after a turn whose write failed and when a
 * halted engine reopens its store (with recover_clear() first): the store
 * is the truth, so reading it back is the one way to make memory match
 * it, and this path is exercised by every restart test. The cost is a
 * scan of the tasks and outbox column families (bodies are decoded for
 * their topic and order, payloads are not kept) and of the live instances
 * (ended ones are not read); tombstones are skipped by RocksDB's
 * iterators. A record that does not decode stops the load: berth refuses
 * to serve from a store it cannot read rather than silently dropping work.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/deploy.h"
#include "engine/instance.h"
#include "engine/listing.h"
#include "engine/recover.h"
#include "engine/reply.h"
#include "engine/state.h"
#include "engine/wait.h"
#include "store/err.h"

typedef struct load_ctx {
    engine *e;
    uint64_t max_seq;
    void *last;        /* the object of the last body row: its state row follows */
    uint64_t last_seq; /* and its sequence */
    topic *last_topic; /* the topic of the last task body */
    char *err;
    size_t errlen;
} load_ctx;

static int corrupt(load_ctx *c, const char *what, uint64_t seq)
{
    if (c->err != NULL)
        snprintf(c->err, c->errlen, "corrupt store: %s (row %" PRIu64 ")", what, seq);
    return BERTH_ECORRUPT;
}

/* The loaders of a tasks-shaped family's rows (load_rows): a body row b
 * (read, and checked against its key) makes the object *obj, and the
 * state row that may follow it (same sequence) updates that object. */
typedef int (*body_fn)(load_ctx *c, uint64_t seq, const void *v, size_t vl,
                       const store_body_meta *b, void **obj);
typedef int (*state_fn)(load_ctx *c, void *obj, uint64_t seq, const void *v, size_t vl);

static int load_task_body(load_ctx *c, uint64_t seq, const void *v, size_t vl,
                          const store_body_meta *b, void **obj)
{
    engine *e = c->e;
    /* Without a state row the task was never claimed. Rows of one topic
     * come in runs: the last row's topic is looked up once. */
    topic *tp = c->last_topic;
    if (tp == NULL || tp->name_len != b->topic_len || memcmp(tp->name, b->topic, b->topic_len) != 0)
        tp = c->last_topic = state_topic(e, b->topic, b->topic_len, true);
    task *t =
        tp ? state_task_new(e, b->id, tp, seq, b->created_at_ms, vl, b->priority, b->not_before_ms)
           : NULL;
    if (t == NULL)
        return BERTH_ENOMEM;
    t->has_instance = b->has_instance;
    t->chan = deploy_channel_of(e, b->deployment, tp->name);
    state_task_cache_body(e, t, v, vl);
    if (idtab_put(&e->tasks, t) != BERTH_OK) {
        state_task_free(e, t);
        return BERTH_ENOMEM;
    }
    if (listing_add(e, t) != BERTH_OK) /* (rows come in sequence order: appends) */
        return BERTH_ENOMEM;           /* the task is in the table: cleared with it */
    *obj = t;
    return BERTH_OK;
}

static int load_task_state(load_ctx *c, void *obj, uint64_t seq, const void *v, size_t vl)
{
    task *t = obj;
    store_task_state s;
    if (store_task_state_decode(v, vl, &s) != BERTH_OK)
        return corrupt(c, "task state", seq);
    task_run *run = state_task_run(c->e, t);
    if (run == NULL) {
        store_task_state_clear(&s);
        return BERTH_ENOMEM;
    }
    run->available_at_ms = s.available_at_ms;
    run->has_lock = s.has_lock_token && s.worker_id != NULL;
    memcpy(run->lock_token, s.lock_token, BERTH_ID_LEN);
    run->worker_id = mem_strdup(s.worker_id);
    if (s.worker_id != NULL && run->worker_id == NULL) {
        store_task_state_clear(&s);
        return BERTH_ENOMEM;
    }
    run->lock_expires_at_ms = s.lock_expires_at_ms;
    run->claims = s.claims;
    run->retries_left = s.retries_left;
    run->failures = s.failures;
    t->terminal = s.terminal;
    engine_error err = {s.last_error.code, s.last_error.message, s.last_error.details};
    int rv = state_task_set_error(run, &err);
    store_task_state_clear(&s);
    return rv;
}

static int load_delivery_body(load_ctx *c, uint64_t seq, const void *v, size_t vl,
                              const store_body_meta *b, void **obj)
{
    (void)v;
    (void)vl;
    engine *e = c->e;
    delivery *d = mem_calloc(1, sizeof(*d));
    topic *tp = d ? state_topic(e, b->topic, b->topic_len, true) : NULL;
    if (tp == NULL) {
        free(d);
        return BERTH_ENOMEM;
    }
    memcpy(d->id, b->id, BERTH_ID_LEN);
    d->topic = tp;
    tp->n_deliveries++;
    d->chan = deploy_channel_of(e, b->deployment, tp->name);
    d->seq = seq;
    d->created_at_ms = b->created_at_ms;
    d->has_instance = b->has_instance;
    memcpy(d->instance_id, b->instance_id, BERTH_ID_LEN);
    d->priority = b->priority;
    d->not_before_ms = b->not_before_ms;
    heap_node_init(&d->due);
    d->due.at = state_delivery_due(d);
    d->due.seq = seq;
    if (idtab_put(&e->deliveries, d) != BERTH_OK) {
        state_delivery_free(d);
        return BERTH_ENOMEM;
    }
    *obj = d;
    return BERTH_OK;
}

static int load_delivery_state(load_ctx *c, void *obj, uint64_t seq, const void *v, size_t vl)
{
    delivery *d = obj;
    store_delivery_state s;
    if (store_delivery_state_decode(v, vl, &s) != BERTH_OK)
        return corrupt(c, "outbox state", seq);
    d->attempts = s.attempts;
    d->due.at = s.next_attempt_at_ms;
    d->poisoned = s.poisoned;
    d->err_message = mem_strdup(s.last_error.message);
    d->has_state_row = true;
    bool oom = s.last_error.message != NULL && d->err_message == NULL;
    store_delivery_state_clear(&s);
    return oom ? BERTH_ENOMEM : BERTH_OK;
}

/*
 * THE SCAN: READING ON A SECOND THREAD
 *   A restart with millions of tasks is bound by one core doing two jobs:
 *   RocksDB's iteration with the reading of each Body, and building the
 *   engine's memory from them. A scan thread does the first, a batch of
 *   rows at a time (values copied, bodies read in place with
 *   store_body_peek, which allocates nothing), into a ring of a few
 *   batches; the loading thread takes them in order and does the second.
 *   The scan allocates with plain malloc, outside the engine's failure
 *   seam (mem.h), so that an injected failure stays on the loading thread.
 */
enum { SCAN_ROWS = 1024, SCAN_DEPTH = 4, SCAN_ARENA = 256 << 10 };

typedef struct scan_row {
    uint64_t seq;
    char kind;         /* the key's kind byte; 0: a key of the wrong length */
    int rv;            /* a body: how reading it went */
    size_t off, len;   /* the value, in the batch's arena */
    store_body_meta b; /* a body read (rv BERTH_OK): points into the arena */
} scan_row;

typedef struct scan_batch {
    size_t n;
    scan_row rows[SCAN_ROWS];
    char *arena;
    size_t used, cap;
} scan_batch;

typedef struct scan {
    store_iter *it;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    scan_batch *ring[SCAN_DEPTH];
    size_t head, count; /* filled batches: ring[head], ... (count of them) */
    bool done;          /* the scan has filled its last batch */
    bool stop;          /* the loader gave up: stop scanning */
    int status;         /* the scan's end: BERTH_OK, BERTH_EIO (the store's read) or
                           BERTH_ENOMEM */
} scan;

/* Fills batch with the next rows; false when the store has no more. */
static bool scan_fill(scan *s, scan_batch *batch, int *status)
{
    batch->n = 0;
    batch->used = 0;
    if (batch->arena == NULL) { /* (even rows of empty values point into it) */
        if ((batch->arena = malloc(SCAN_ARENA)) == NULL) {
            *status = BERTH_ENOMEM;
            return false;
        }
        batch->cap = SCAN_ARENA;
    }
    for (; batch->n < SCAN_ROWS && store_iter_valid(s->it); store_iter_next(s->it)) {
        size_t kl, vl;
        const uint8_t *k = store_iter_key(s->it, &kl);
        const void *v = store_iter_value(s->it, &vl);
        if (batch->used + vl > batch->cap) {
            if (batch->n > 0)
                return true; /* the rest in the next batch */
            size_t cap = vl > SCAN_ARENA ? vl : SCAN_ARENA;
            char *a = realloc(batch->arena, cap);
            if (a == NULL) {
                *status = BERTH_ENOMEM;
                return false;
            }
            batch->arena = a;
            batch->cap = cap;
        }
        scan_row *r = &batch->rows[batch->n++];
        r->seq = kl == STORE_ROW_KEY_LEN ? store_get_be64(k) : 0;
        r->kind = kl == STORE_ROW_KEY_LEN ? (char)k[8] : 0;
        r->off = batch->used;
        r->len = vl;
        if (vl > 0)
            memcpy(batch->arena + batch->used, v, vl);
        if (r->kind == STORE_KIND_BODY)
            r->rv = store_body_peek(batch->arena + batch->used, vl, &r->b);
        batch->used += vl;
    }
    if (store_iter_status(s->it) != BERTH_OK)
        *status = BERTH_EIO;
    return batch->n > 0 && *status == BERTH_OK;
}

static void *scan_main(void *arg)
{
    scan *s = arg;
    int status = BERTH_OK;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->count == SCAN_DEPTH && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        bool stop = s->stop;
        scan_batch *batch = s->ring[(s->head + s->count) % SCAN_DEPTH];
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        bool more = scan_fill(s, batch, &status);
        pthread_mutex_lock(&s->mu);
        if (batch->n > 0)
            s->count++;
        if (!more) {
            s->done = true;
            s->status = status;
        }
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (!more)
            break;
    }
    return NULL;
}

/* The next filled batch in order, NULL at the end of the scan. */
static scan_batch *scan_next(scan *s)
{
    pthread_mutex_lock(&s->mu);
    while (s->count == 0 && !s->done)
        pthread_cond_wait(&s->cv, &s->mu);
    scan_batch *batch = s->count > 0 ? s->ring[s->head] : NULL;
    pthread_mutex_unlock(&s->mu);
    return batch;
}

/* The loader is done with the batch scan_next() gave it. */
static void scan_advance(scan *s)
{
    pthread_mutex_lock(&s->mu);
    s->head = (s->head + 1) % SCAN_DEPTH;
    s->count--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* A tasks-shaped family's row r, of value v: a body row ('b') is checked
 * against its key and loaded; a state row ('s') must follow the body of
 * its sequence, which sorts right before it. what names the family's
 * state rows in a message ("task state"). */
static int load_row(load_ctx *c, const scan_row *r, const void *v, body_fn body, state_fn state,
                    const char *what)
{
    char orphan[64];
    switch (r->kind) {
    case 0:
        return corrupt(c, "row key length", 0);
    case STORE_KIND_BODY: {
        if (r->rv != BERTH_OK)
            return corrupt(c, "body", r->seq);
        if (r->b.seq != r->seq)
            return corrupt(c, "body under another sequence's key", r->seq);
        if (r->seq > c->max_seq)
            c->max_seq = r->seq;
        void *obj = NULL;
        int rv = body(c, r->seq, v, r->len, &r->b, &obj);
        if (rv == BERTH_OK) {
            c->last = obj;
            c->last_seq = r->seq;
        }
        return rv;
    }
    case STORE_KIND_STATE:
        if (c->last == NULL || c->last_seq != r->seq) {
            snprintf(orphan, sizeof(orphan), "%s without a body", what);
            return corrupt(c, orphan, r->seq);
        }
        return state(c, c->last, r->seq, v, r->len);
    default:
        return corrupt(c, "row kind", r->seq);
    }
}

/* Walks a tasks-shaped family in sequence order: each body row ('b')
 * sorts right before its state row ('s'). */
static int load_rows(load_ctx *c, store_cf cf, body_fn body, state_fn state, const char *what)
{
    scan s = {.status = BERTH_OK};
    int rv = store_iter_open(c->e->store, cf, &s.it);
    if (rv != BERTH_OK)
        return rv;
    size_t made = 0;
    for (; made < SCAN_DEPTH; made++)
        if ((s.ring[made] = calloc(1, sizeof(*s.ring[made]))) == NULL)
            break;
    bool started = false;
    if (made == SCAN_DEPTH) {
        pthread_mutex_init(&s.mu, NULL);
        pthread_cond_init(&s.cv, NULL);
        started = pthread_create(&s.thread, NULL, scan_main, &s) == 0;
        if (!started) {
            pthread_mutex_destroy(&s.mu);
            pthread_cond_destroy(&s.cv);
        }
    }
    if (!started) {
        for (size_t i = 0; i < made; i++)
            free(s.ring[i]);
        store_iter_close(s.it);
        return BERTH_ENOMEM;
    }
    c->last = NULL;
    scan_batch *batch;
    while (rv == BERTH_OK && (batch = scan_next(&s)) != NULL) {
        for (size_t i = 0; rv == BERTH_OK && i < batch->n; i++) {
            const scan_row *r = &batch->rows[i];
            rv = load_row(c, r, batch->arena + r->off, body, state, what);
        }
        scan_advance(&s);
    }
    pthread_mutex_lock(&s.mu);
    s.stop = true;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    pthread_join(s.thread, NULL);
    for (size_t k = 0; k < SCAN_DEPTH; k++) {
        free(s.ring[k]->arena);
        free(s.ring[k]);
    }
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    if (rv == BERTH_OK && s.status != BERTH_OK) {
        if (s.status == BERTH_EIO && c->err != NULL)
            snprintf(c->err, c->errlen, "reading %s: %s", store_cf_name(cf),
                     store_last_error(c->e->store));
        rv = s.status;
    }
    store_iter_close(s.it);
    return rv;
}

static int index_all(engine *e)
{
    size_t i = 0;
    task *t;
    uint64_t now = e->clock.now_ms(e->clock.ctx);
    /* In sequence order (the listing's): each order then mostly appends
     * to a sorted run instead of sifting through its heap. */
    uint64_t seq;
    while (listing_next(e, &i, &t, &seq)) {
        if (t == NULL)
            continue;
        deployment *dep = state_dep(e, t->chan);
        dep->n_tasks++;
        if (t->terminal) {
            t->topic->n_terminal++;
            dep->n_terminal++;
            continue;
        }
        if (state_task_index(e, t, now) != BERTH_OK)
            return BERTH_ENOMEM;
    }
    i = 0;
    instance *inst;
    while ((inst = table_next(&e->instances, &i)) != NULL) {
        if (inst->timer.at != 0 && heap_push(&e->timers, &inst->timer) != BERTH_OK)
            return BERTH_ENOMEM;
        state_dep(e, inst->chan)->n_instances++;
        if (inst->state == ENGINE_INSTANCE_BACKOFF)
            state_dep(e, inst->chan)->n_backoff++;
        if (inst->attempt < inst->max_attempts)
            state_dep(e, inst->chan)->n_retrying++;
    }
    i = 0;
    delivery *d;
    while ((d = idtab_next(&e->deliveries, &i)) != NULL) {
        deployment *dep = state_dep(e, d->chan);
        dep->n_deliveries++;
        if (d->poisoned) {
            e->n_poisoned++;
            dep->n_poisoned++;
            /* A live call whose attempt this was hears of it (calls.c). */
            const instance *call = d->has_instance ? instance_find(e, d->instance_id) : NULL;
            if (call != NULL && call->has_current &&
                memcmp(call->current, d->id, BERTH_ID_LEN) == 0) {
                berth_id_bytes *slot = VEC_ADD(&e->calls_poisoned);
                if (slot == NULL)
                    return BERTH_ENOMEM;
                memcpy(slot->b, d->id, BERTH_ID_LEN);
            }
            continue;
        }
        if (heap_push(&e->outbox, &d->due) != BERTH_OK)
            return BERTH_ENOMEM;
    }
    return BERTH_OK;
}

/* A live instance from its 'L' row. */
static int load_instance(load_ctx *c, const void *v, size_t vl)
{
    engine *e = c->e;
    store_instance r;
    if (store_instance_decode(v, vl, &r) != BERTH_OK ||
        (r.state != STORE_INSTANCE_WAITING && r.state != STORE_INSTANCE_BACKOFF) ||
        (r.state == STORE_INSTANCE_BACKOFF && r.timer_at_ms == 0)) {
        store_instance_clear(&r);
        return corrupt(c, "live instance", 0);
    }
    instance *i = mem_calloc(1, sizeof(*i));
    int rv = i ? BERTH_OK : BERTH_ENOMEM;
    if (i != NULL) {
        memcpy(i->id, r.id, BERTH_ID_LEN);
        i->state = (engine_instance_state)r.state;
        i->attempt = r.attempt;
        i->created_at_ms = r.created_at_ms;
        i->has_current = r.has_current;
        memcpy(i->current, r.current_id, BERTH_ID_LEN);
        i->has_retry = r.has_retry;
        i->timeout_ms = r.timeout_ms;
        i->max_attempts = r.max_attempts ? r.max_attempts : 1;
        i->initial_backoff_ms = r.initial_backoff_ms;
        i->max_backoff_ms = r.max_backoff_ms;
        i->multiplier = r.multiplier;
        heap_node_init(&i->timer);
        i->timer.at = r.timer_at_ms;
        i->topic = mem_strdup(r.topic);
        i->chan = deploy_channel_of(e, r.deployment, r.topic);
        i->non_retryable = r.n_non_retryable_codes
                               ? mem_calloc(r.n_non_retryable_codes, sizeof(*i->non_retryable))
                               : NULL;
        if (i->topic == NULL || (r.n_non_retryable_codes && i->non_retryable == NULL))
            rv = BERTH_ENOMEM;
        for (size_t k = 0; rv == BERTH_OK && k < r.n_non_retryable_codes; k++, i->n_non_retryable++)
            if ((i->non_retryable[k] = mem_strdup(r.non_retryable_codes[k])) == NULL)
                rv = BERTH_ENOMEM;
        if (rv == BERTH_OK && r.request != NULL) {
            if ((i->request = mem_dup(r.request, r.request_len)) == NULL)
                rv = BERTH_ENOMEM;
            i->request_len = r.request_len;
        }
        if (rv == BERTH_OK && r.dedup_key != NULL) {
            if ((i->dedup_key = mem_dup(r.dedup_key, r.dedup_key_len)) == NULL)
                rv = BERTH_ENOMEM;
            i->dedup_key_len = r.dedup_key_len;
        }
        if (rv == BERTH_OK && table_put(&e->instances, i->id, BERTH_ID_LEN, i) != BERTH_OK)
            rv = BERTH_ENOMEM;
        if (rv != BERTH_OK)
            instance_free(i);
        else if (i->state == ENGINE_INSTANCE_BACKOFF)
            e->n_backoff++;
    }
    store_instance_clear(&r);
    return rv;
}

/* Every live instance: the 'L' rows, and nothing of the ended ones. */
static int load_instances(load_ctx *c)
{
    store_iter *it;
    int rv = store_iter_open(c->e->store, STORE_CF_INSTANCES, &it);
    if (rv != BERTH_OK)
        return rv;
    uint8_t from = STORE_INSTANCE_LIVE;
    store_iter_seek(it, &from, 1);
    for (; rv == BERTH_OK && store_iter_valid(it); store_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = store_iter_key(it, &kl);
        if (kl == 0 || k[0] != STORE_INSTANCE_LIVE)
            break;
        const void *v = store_iter_value(it, &vl);
        rv = kl == STORE_INSTANCE_KEY_LEN ? load_instance(c, v, vl)
                                          : corrupt(c, "instance key length", 0);
    }
    if (rv == BERTH_OK && store_iter_status(it) != BERTH_OK) {
        if (c->err != NULL)
            snprintf(c->err, c->errlen, "reading instances: %s", store_last_error(c->e->store));
        rv = BERTH_EIO;
    }
    store_iter_close(it);
    /* Where ended instances stand is read by the first turn (calls.c). */
    c->e->retention_due_ms = 0;
    memset(c->e->retention_cursor, 0, sizeof(c->e->retention_cursor));
    return rv;
}

/* Incident keys carry a sequence number too: keep new ones above them. */
static int scan_incident_seq(load_ctx *c)
{
    store_iter *it;
    int rv = store_iter_open(c->e->store, STORE_CF_INCIDENTS, &it);
    if (rv != BERTH_OK)
        return rv;
    for (; store_iter_valid(it); store_iter_next(it)) {
        size_t kl;
        const uint8_t *k = store_iter_key(it, &kl);
        if (kl == STORE_INCIDENT_KEY_LEN && store_get_be64(k + 8) > c->max_seq)
            c->max_seq = store_get_be64(k + 8);
    }
    rv = store_iter_status(it);
    store_iter_close(it);
    return rv;
}

int recover_load(engine *e, char *err, size_t errlen)
{
    load_ctx c = {.e = e, .err = err, .errlen = errlen};
    int rv = deploy_load(e, err, errlen);
    /* Room for every task at once (a task is one or two rows), so the id
     * map is not rehashed as it fills; only a hint: a map that cannot have
     * it grows as it goes. */
    (void)idtab_reserve(&e->tasks, store_estimate_keys(e->store, STORE_CF_TASKS));
    if (rv == BERTH_OK)
        rv = load_rows(&c, STORE_CF_TASKS, load_task_body, load_task_state, "task state");
    idtab_fit(&e->tasks); /* (the estimate counts state rows and deletions too) */
    if (rv == BERTH_OK)
        rv =
            load_rows(&c, STORE_CF_OUTBOX, load_delivery_body, load_delivery_state, "outbox state");
    if (rv == BERTH_OK)
        rv = load_instances(&c);
    if (rv == BERTH_OK)
        rv = scan_incident_seq(&c);
    if (rv == BERTH_OK)
        rv = index_all(e);
    if (rv == BERTH_ENOMEM && err != NULL && err[0] == '\0')
        snprintf(err, errlen, "out of memory");
    if (c.max_seq + 1 > e->next_seq)
        e->next_seq = c.max_seq + 1;
    return rv;
}

void recover_clear(engine *e)
{
    /* Heaps first: emptying one touches its nodes, which live in the
     * objects freed below. */
    size_t i = 0;
    topic *tp;
    while ((tp = table_next(&e->topics, &i)) != NULL) {
        state_topic_fini(tp);
        tp->n_terminal = 0;
    }
    heap_fini(&e->outbox);
    i = 0;
    task *t;
    while ((t = idtab_next(&e->tasks, &i)) != NULL)
        state_task_free(e, t);
    idtab_clear(&e->tasks);
    listing_clear(e);
    i = 0;
    delivery *d;
    while ((d = idtab_next(&e->deliveries, &i)) != NULL)
        state_delivery_free(d);
    idtab_clear(&e->deliveries);
    e->n_poisoned = 0;
    e->t.fresh.n = 0;
    state_task_forget_bodies(e);
    /* Awaits point at the instances freed below: they are answered first
     * (a reload follows a failed write; the caller awaits again). */
    engine_status st;
    reply_unavailable(&st, "berthd reloaded its state after a failed write: await again");
    wait_abort(e, &st, true);
    heap_fini(&e->timers);
    i = 0;
    instance *inst;
    while ((inst = table_next(&e->instances, &i)) != NULL)
        instance_free(inst);
    table_clear(&e->instances);
    e->t.ended.n = 0;
    e->n_backoff = 0;
    e->calls_poisoned.n = 0;
    deploy_clear(e); /* last: what was freed above pointed into it */
}
