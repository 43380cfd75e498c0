/*
 * commit.c — the commit thread: durability off the engine's path.
 *
 * PIPELINE
 *   The engine appends each turn's batch to the store without waiting
 *   for the disk (store_append: the store's reads see it at once) and
 *   seals the turn: its answers and events, and how many appends must be
 *   durable before they are released. It then starts the next turn at
 *   once. This thread takes every sealed turn queued, syncs the store
 *   once for all of them (store_sync covers every append before it), and
 *   only then publishes their events and answers them. While the disk
 *   flushes turn N, the engine builds N+1 and later turns; the next sync
 *   serves them all. Nothing is answered before what it says is on disk
 *   (R1), and a turn that only read waits for the sync of what it read.
 *
 * A FAILED SYNC
 *   The appends since the last good sync are in memory and in the store's
 *   reads, and whether they reached the disk is unknown: memory cannot be
 *   made to match the disk by reloading. So the engine halts (as a
 *   database that cannot trust its fsync must), and every turn not known
 *   durable is answered UNAVAILABLE, saying that it may have been kept. A
 *   restart recovers what the disk holds. A failed APPEND is different:
 *   nothing of it was applied, and actor.c undoes the turn and goes on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "engine/internal.h"

/* A turn appended, waiting to be answered. */
typedef struct sealed {
    struct sealed *next;
    uint64_t need; /* appends that must be durable first */
    pending *answered;
    engine_event *events;
    size_t n_events;
    char names[]; /* the events' topic names: the topics may go meanwhile */
} sealed;

static void deliver(engine *e, pending *p, engine_event *ev, size_t n_ev, bool durable)
{
    committer *c = &e->commit;
    if (durable)
        for (size_t i = 0; i < n_ev; i++)
            e->o.on_event(e->o.event_ctx, &ev[i]);
    events_free(ev, n_ev);
    while (p != NULL) {
        pending *next = p->next;
        /* (an answer already UNAVAILABLE keeps its own reason) */
        if (!durable && p->reply->status.code != ENGINE_CODE_UNAVAILABLE) {
            reply_reset(p->reply);
            char why[400];
            snprintf(why, sizeof(why),
                     "the store failed to sync (%s); this request may or may not have been kept",
                     c->why);
            status_unavailable(&p->reply->status, why);
        }
        p->done(p->arg, p->reply);
        free(p);
        p = next;
    }
}

/* Syncs unless the first `need` appends are known durable. Caller holds
 * c->sync_mu. True when they are. */
static bool sync_upto(engine *e, uint64_t need)
{
    committer *c = &e->commit;
    if (need <= atomic_load(&c->synced))
        return true;
    if (atomic_load(&c->failed))
        return false;
    uint64_t upto = atomic_load(&c->appended);
    char why[sizeof(c->why)];
    if (store_sync(e->store, why, sizeof(why)) == BERTH_OK) {
        atomic_store(&c->synced, upto);
        atomic_fetch_add(&c->syncs, 1);
        return need <= upto;
    }
    memcpy(c->why, why, sizeof(why));
    atomic_store(&c->failed, true);
    /* The engine halts at its next turn: wake it. */
    pthread_mutex_lock(&e->mu);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return false;
}

static void deliver_list(engine *e, sealed *list)
{
    uint64_t synced = atomic_load(&e->commit.synced);
    while (list != NULL) {
        sealed *next = list->next;
        deliver(e, list->answered, list->events, list->n_events, list->need <= synced);
        free(list->events);
        free(list);
        list = next;
    }
}

static void commit_list(engine *e, sealed *list)
{
    committer *c = &e->commit;
    uint64_t need = 0;
    for (sealed *s = list; s != NULL; s = s->next)
        if (s->need > need)
            need = s->need;
    pthread_mutex_lock(&c->sync_mu);
    sync_upto(e, need);
    pthread_mutex_unlock(&c->sync_mu);
    deliver_list(e, list);
}

static void *committer_main(void *arg)
{
    engine *e = arg;
    committer *c = &e->commit;
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

int commit_start(engine *e)
{
    committer *c = &e->commit;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->sync_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->thread, NULL, committer_main, e) != 0) {
        pthread_mutex_destroy(&c->mu);
        pthread_mutex_destroy(&c->sync_mu);
        pthread_cond_destroy(&c->cv);
        return BERTH_ENOMEM;
    }
    c->started = true;
    return BERTH_OK;
}

void commit_stop(engine *e)
{
    committer *c = &e->commit;
    if (!c->started)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->sync_mu);
    pthread_cond_destroy(&c->cv);
    c->started = false;
}

void commit_appended(engine *e)
{
    atomic_fetch_add(&e->commit.appended, 1);
}

bool commit_failed(engine *e)
{
    return atomic_load(&e->commit.failed);
}

const char *commit_failure(engine *e)
{
    return atomic_load(&e->commit.failed) ? e->commit.why : "";
}

void commit_turn(engine *e, bool with_events)
{
    turn *t = &e->t;
    committer *c = &e->commit;
    size_t n_ev = with_events ? t->n_events : 0;
    uint64_t need = atomic_load(&c->appended);
    if (t->answered == NULL && n_ev == 0 && need <= atomic_load(&c->synced))
        return;
    size_t names = 0;
    for (size_t i = 0; i < n_ev; i++)
        names += strlen(t->events[i].topic) + 1;
    sealed *s = malloc(sizeof(*s) + names);
    if (s == NULL) {
        /* No memory to hand the turn over: sync and answer it here. Its
         * events are dropped (they are best effort), so that on_event
         * runs on the commit thread only. */
        pthread_mutex_lock(&c->sync_mu);
        bool durable = sync_upto(e, need);
        pthread_mutex_unlock(&c->sync_mu);
        deliver(e, t->answered, t->events, 0, durable);
        t->answered = t->answered_tail = NULL;
        if (with_events) {
            events_free(t->events, t->n_events);
            t->n_events = 0;
        }
        return;
    }
    s->next = NULL;
    s->need = need;
    s->answered = t->answered;
    s->events = NULL;
    s->n_events = n_ev;
    t->answered = t->answered_tail = NULL;
    if (n_ev > 0) {
        char *at = s->names;
        for (size_t i = 0; i < n_ev; i++) {
            size_t len = strlen(t->events[i].topic) + 1;
            memcpy(at, t->events[i].topic, len);
            t->events[i].topic = at;
            at += len;
        }
        s->events = t->events;
        t->events = NULL;
        t->n_events = t->cap_events = 0;
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

void engine_durability(engine *e, engine_durable *out)
{
    out->turns = atomic_load(&e->commit.turns);
    out->appended = atomic_load(&e->commit.appended);
    out->synced = atomic_load(&e->commit.synced);
    out->syncs_held = (uint32_t)store_syncs_waiting(e->store);
}
