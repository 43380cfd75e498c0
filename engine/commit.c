/*
 * commit.c — the commit thread: durability off the engine's path.
 *
 * PIPELINE
 *   The engine appends each turn's batch to the store without waiting
 *   for the disk (store_append: the store's reads see it at once) and
 *   seals the turn: its answers, events and push sends, and how many
 *   appends must be durable before they go out. It then starts the next
 *   turn at once. This thread takes every sealed turn queued, syncs the
 *   store once for all of them (store_sync covers every append before
 *   it), and only then sends their pushes, publishes their events and
 *   answers them. While the disk flushes turn N, the engine builds N+1
 *   and later turns; the next sync serves them all. Nothing is answered
 *   or pushed before what it says is on disk (R1), and a turn that only
 *   read waits for the sync of what it read. Answers that leave give
 *   their fetch bytes back to the budget (e->fetch_inflight) and wake the
 *   actor if a claim stopped on it.
 *
 * A FAILED SYNC
 *   The appends since the last good sync are in memory and in the store's
 *   reads, and whether they reached the disk is unknown: memory cannot be
 *   made to match the disk by reloading. So the engine halts (as a
 *   database that cannot trust its fsync must): every turn not known
 *   durable is answered UNAVAILABLE, saying that it may have been kept,
 *   its events are dropped and its pushes never sent, and the actor,
 *   woken, halts at its next turn. From then on the halted engine answers
 *   every request UNAVAILABLE (retryable) and reopens its store by itself,
 *   as a restart would (actor.c): this thread is stopped, the store closed
 *   and opened again, memory reloaded from what the disk holds and a new
 *   commit thread started. The first try is ENGINE_REOPEN_BACKOFF_MIN_MS
 *   (100 ms) after the halt on the engine's clock; while it fails the
 *   pause doubles, up to ENGINE_REOPEN_BACKOFF_MAX_MS (a try every 5 s).
 *   A failed APPEND is different: nothing of it was applied, and actor.c
 *   undoes the turn and goes on.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "engine/check.h"
#include "engine/commit.h"
#include "engine/reply.h"
#include "engine/turn.h"
#include "store/err.h"

struct committer {
    pthread_t thread;
    pthread_mutex_t mu; /* guards the queue and `stopping` */
    pthread_cond_t cv;
    struct sealed *head, *tail; /* turns appended, not yet answered */
    bool stopping;
    bool joined;             /* the thread has been joined */
    void (*wake)(void *arg); /* tells the engine thread a sync failed */
    void *wake_arg;
    pthread_mutex_t sync_mu;       /* one sync at a time */
    atomic_uint_fast64_t appended; /* turns appended (engine thread writes) */
    atomic_uint_fast64_t synced;   /* of those, known durable */
    atomic_uint_fast64_t syncs;    /* store syncs done */
    atomic_bool failed;            /* a sync failed: nothing is durable any more */
    char why[256];                 /* its error, set before `failed` */
};

/* A turn appended, waiting to be answered. */
typedef struct sealed {
    struct sealed *next;
    uint64_t need; /* appends that must be durable first */
    pending *answered;
    engine_event *events;
    size_t n_events;
    staged_push *pushes; /* sent once durable */
    size_t n_pushes;
    char names[]; /* the events' topic names: the topics may go meanwhile */
} sealed;

void commit_pushes_free(staged_push *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].body);
        free(v[i].transport);
    }
}

/* Hands each push to the transport (once its turn is durable). One whose
 * Body does not decode, or that the transport does not take, is left to
 * its deadline in the engine: a failed attempt. */
static void send_pushes(engine *e, const staged_push *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        store_body b;
        if (store_body_decode(v[i].body, v[i].body_len, &b) != BERTH_OK)
            continue;
        engine_header hs[ENGINE_HEADERS_MAX + 2];
        size_t nh = 0;
        for (; nh < b.n_headers && nh < ENGINE_HEADERS_MAX; nh++)
            hs[nh] = (engine_header){b.headers[nh].name, b.headers[nh].value};
        engine_push_delivery d = {
            .transport = v[i].transport,
            .topic = b.topic,
            .flight = v[i].flight,
            .payload = b.payload,
            .payload_len = b.payload_len,
            .headers = hs,
            .content_type = b.content_type,
            .attempt = v[i].attempt,
            .created_at_ms = b.created_at_ms,
        };
        char attempt[12];
        store_id_format(b.id, d.id);
        if (b.has_instance) { /* a call's request names its call, as its task would */
            store_id_format(b.instance_id, d.instance_id);
            snprintf(attempt, sizeof(attempt), "%u", b.call_attempt);
            hs[nh++] = (engine_header){ENGINE_HEADER_INSTANCE, d.instance_id};
            hs[nh++] = (engine_header){ENGINE_HEADER_ATTEMPT, attempt};
        }
        d.n_headers = nh;
        (void)e->o.push_fn(e->o.push_ctx, e, &d);
        store_body_clear(&b);
    }
}

static void deliver(engine *e, pending *p, engine_event *ev, size_t n_ev, bool durable)
{
    struct committer *c = e->commit;
    /* The fetch answers leave the engine: their bytes are off its budget,
     * and a claim that stopped on it may go on. */
    uint64_t freed = 0;
    for (pending *q = p; q != NULL; q = q->next)
        freed += q->charged;
    if (freed > 0) {
        atomic_fetch_sub(&e->fetch_inflight, freed);
        if (atomic_exchange(&e->fetch_blocked, false))
            c->wake(c->wake_arg);
    }
    if (durable)
        for (size_t i = 0; i < n_ev; i++)
            e->o.on_event(e->o.event_ctx, &ev[i]);
    turn_events_free(ev, n_ev);
    if (!durable) {
        char why[400];
        snprintf(why, sizeof(why),
                 "the store failed to sync (%s); this request may or may not have been kept",
                 c->why);
        engine_status st;
        reply_unavailable(&st, why);
        turn_refuse(p, &st, true); /* an answer already UNAVAILABLE keeps its reason */
    }
    turn_call_done(p);
}

/* Syncs unless the first `need` appends are known durable. Caller holds
 * c->sync_mu. True when they are. */
static bool sync_upto(engine *e, uint64_t need)
{
    struct committer *c = e->commit;
    if (need <= atomic_load(&c->synced))
        return true;
    if (atomic_load(&c->failed))
        return false;
    uint64_t upto = atomic_load(&c->appended);
    char why[sizeof(c->why)];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rv = store_sync(e->store, why, sizeof(why));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    hist_observe(&e->fsync,
                 (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    if (rv == BERTH_OK) {
        atomic_store(&c->synced, upto);
        atomic_fetch_add(&c->syncs, 1);
        return need <= upto;
    }
    memcpy(c->why, why, sizeof(why));
    atomic_store(&c->failed, true);
    c->wake(c->wake_arg); /* the engine halts at its next turn */
    return false;
}

static void deliver_list(engine *e, sealed *list)
{
    uint64_t synced = atomic_load(&e->commit->synced);
    while (list != NULL) {
        sealed *next = list->next;
        if (list->n_pushes > 0 && list->need <= synced)
            send_pushes(e, list->pushes, list->n_pushes);
        commit_pushes_free(list->pushes, list->n_pushes);
        free(list->pushes);
        deliver(e, list->answered, list->events, list->n_events, list->need <= synced);
        free(list->events);
        free(list);
        list = next;
    }
}

static void commit_list(engine *e, sealed *list)
{
    struct committer *c = e->commit;
    uint64_t need = 0, requests = 0;
    for (sealed *s = list; s != NULL; s = s->next) {
        if (s->need > need)
            need = s->need;
        for (const pending *p = s->answered; p != NULL; p = p->next)
            requests++;
    }
    pthread_mutex_lock(&c->sync_mu);
    uint64_t syncs = atomic_load(&c->syncs);
    sync_upto(e, need);
    if (atomic_load(&c->syncs) != syncs && requests > 0)
        hist_observe(&e->commit_batch, (double)requests);
    pthread_mutex_unlock(&c->sync_mu);
    deliver_list(e, list);
}

static void *committer_main(void *arg)
{
    engine *e = arg;
    struct committer *c = e->commit;
    prctl(PR_SET_NAME, "berth-commit", 0, 0, 0);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->head == NULL && !c->stopping)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->head == NULL)
            break; /* stopping, and everything sealed is answered */
        sealed *list = c->head;
        c->head = c->tail = NULL;
        pthread_mutex_unlock(&c->mu);
        commit_list(e, list);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int commit_start(engine *e, void (*wake)(void *arg), void *arg)
{
    struct committer *c = mem_calloc(1, sizeof(*c));
    if (c == NULL)
        return BERTH_ENOMEM;
    c->wake = wake;
    c->wake_arg = arg;
    atomic_init(&c->appended, 0);
    atomic_init(&c->synced, 0);
    atomic_init(&c->syncs, 0);
    atomic_init(&c->failed, false);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->sync_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    e->commit = c;
    if (pthread_create(&c->thread, NULL, committer_main, e) != 0) {
        pthread_mutex_destroy(&c->mu);
        pthread_mutex_destroy(&c->sync_mu);
        pthread_cond_destroy(&c->cv);
        free(c);
        e->commit = NULL;
        return BERTH_ENOMEM;
    }
    return BERTH_OK;
}

void commit_stop(engine *e)
{
    struct committer *c = e->commit;
    if (c == NULL || c->joined)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    c->joined = true;
}

void commit_free(engine *e)
{
    struct committer *c = e->commit;
    if (c == NULL)
        return;
    commit_stop(e);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->sync_mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    e->commit = NULL;
}

void commit_appended(engine *e)
{
    atomic_fetch_add(&e->commit->appended, 1);
}

bool commit_failed(engine *e)
{
    return e->commit != NULL && atomic_load(&e->commit->failed);
}

const char *commit_failure(engine *e)
{
    return commit_failed(e) ? e->commit->why : "";
}

uint64_t commit_syncs(engine *e)
{
    return e->commit != NULL ? atomic_load(&e->commit->syncs) : 0;
}

void commit_turn(engine *e, bool with_events)
{
    turn *t = &e->t;
    struct committer *c = e->commit;
    size_t n_ev = with_events ? t->events.n : 0;
    uint64_t need = atomic_load(&c->appended);
    if (!with_events) { /* undone: what it sent never happened */
        commit_pushes_free(t->pushes.v, t->pushes.n);
        t->pushes.n = 0;
    }
    if (t->answered == NULL && n_ev == 0 && t->pushes.n == 0 && need <= atomic_load(&c->synced))
        return;
    size_t names = 0;
    for (size_t i = 0; i < n_ev; i++)
        names += strlen(t->events.v[i].topic) + 1;
    sealed *s = mem_alloc(sizeof(*s) + names);
    if (s == NULL) {
        /* No memory to hand the turn over: sync and answer it here. Its
         * events are dropped (they are best effort), so that on_event
         * runs on the commit thread only. */
        pthread_mutex_lock(&c->sync_mu);
        bool durable = sync_upto(e, need);
        pthread_mutex_unlock(&c->sync_mu);
        deliver(e, t->answered, NULL, 0, durable);
        t->answered = t->answered_tail = NULL;
        /* (its pushes are dropped too: their deadlines make them attempts) */
        commit_pushes_free(t->pushes.v, t->pushes.n);
        t->pushes.n = 0;
        if (with_events) {
            turn_events_free(t->events.v, t->events.n);
            t->events.n = 0;
        }
        return;
    }
    s->next = NULL;
    s->need = need;
    s->answered = t->answered;
    s->events = NULL;
    s->n_events = n_ev;
    s->pushes = t->pushes.v; /* the array goes with the turn */
    s->n_pushes = t->pushes.n;
    t->pushes.v = NULL;
    t->pushes.n = t->pushes.cap = 0;
    t->answered = t->answered_tail = NULL;
    if (n_ev > 0) {
        char *at = s->names;
        for (size_t i = 0; i < n_ev; i++) {
            size_t len = strlen(t->events.v[i].topic) + 1;
            memcpy(at, t->events.v[i].topic, len);
            t->events.v[i].topic = at;
            at += len;
        }
        s->events = t->events.v; /* the array goes with the turn */
        t->events.v = NULL;
        t->events.n = t->events.cap = 0;
    }
    pthread_mutex_lock(&c->mu);
    if (c->tail)
        c->tail->next = s;
    else
        c->head = s;
    c->tail = s;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void commit_durability(engine *e, engine_durable *out)
{
    if (e->commit == NULL || e->store == NULL) /* halted, between reopens */
        return;
    out->appended = atomic_load(&e->commit->appended);
    out->synced = atomic_load(&e->commit->synced);
    out->syncs_held = (uint32_t)store_syncs_waiting(e->store);
}
