/*
 * actor.c — the engine's thread: its queue, its turns, group commit.
 *
 * ONE WRITER
 *   engine_exec() appends to a mutex-guarded queue (the only state other
 *   threads touch) and signals. The actor takes everything queued (up to
 *   turn_max_requests), applies it, runs the relay and the waits, and
 *   writes the turn's batch with ONE append. It hands the turn's answers
 *   and events to the commit thread (commit.c), which answers them after
 *   the sync that makes the turn durable; meanwhile the actor runs the
 *   next turns, and one sync serves them all: this is where throughput
 *   comes from.
 *
 * A FAILED TURN
 *   If the append failed, or a request left the turn half-applied
 *   (turn_fail, turn.h), nothing of the turn is kept: memory is reloaded
 *   from the store (recover.c), every staged reply is answered with the
 *   recorded reason (retryable), the events are dropped, the turn's
 *   parks count as failed delivery attempts, and the store backs off
 *   (ENGINE_STORE_BACKOFF_*: 50 ms doubling to 2 s):
 *   until then the relay pauses and requests that would write are refused
 *   UNAVAILABLE at once, so a failing disk costs one reload per backoff,
 *   not one per turn. Memory never disagrees with the store, and nothing
 *   is answered OK that is not on disk (R1). A failed SYNC halts the
 *   engine (commit.c says why).
 *
 * A HALTED ENGINE
 *   answers every request UNAVAILABLE (retryable), saying why, and tries
 *   to come back as a restart would: it answers every turn handed to the
 *   commit thread, closes the store, reopens it (only if it is still
 *   there: a data directory that went away is never replaced by an empty
 *   store) and reloads memory from what the disk holds. The first try is
 *   ENGINE_REOPEN_BACKOFF_MIN_MS after the halt, then the pause doubles
 *   up to ENGINE_REOPEN_BACKOFF_MAX_MS while it fails. So a disk that
 *   filled up serves again once it has room, without a restart. Between
 *   a failed reopen and the next try there is no store: requests are
 *   answered from the queue, no turn runs.
 *
 * SLEEPING
 *   The actor sleeps until a request arrives or the next due instant (an
 *   outbox attempt, a wait deadline, a watched topic's front becoming
 *   fetchable). With a manual clock it sleeps until a request arrives:
 *   tests move the clock and then call engine_tick().
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "engine/actor.h"
#include "engine/admin.h"
#include "engine/backend.h"
#include "engine/calls.h"
#include "engine/claim.h"
#include "engine/commit.h"
#include "engine/core.h"
#include "engine/deploy.h"
#include "engine/guard.h"
#include "engine/instance.h"
#include "engine/listing.h"
#include "engine/recover.h"
#include "engine/relay.h"
#include "engine/reply.h"
#include "engine/state.h"
#include "engine/submit.h"
#include "engine/turn.h"
#include "engine/wait.h"
#include "store/err.h"

/* The request queue and the thread: the only state other threads touch. */
struct actor {
    pthread_t thread;
    pthread_mutex_t mu; /* guards the queue, `stopping` and `held` */
    pthread_cond_t cv;
    pending *q_head, *q_tail;
    bool stopping;
    bool joined;                /* the thread has been joined */
    bool held;                  /* engine_hold(): take no request until it ends */
    atomic_uint_fast64_t turns; /* turns finished */
};

static const engine_backend actor_backend; /* at the end */

static uint64_t now_ms(engine *e)
{
    return e->clock.now_ms(e->clock.ctx);
}

/* Requests that only read, served even while the store is failing. */
static bool read_only(engine_op op)
{
    return op == ENGINE_OP_GET_TASK || op == ENGINE_OP_LIST_TASKS ||
           op == ENGINE_OP_LIST_INCIDENTS || op == ENGINE_OP_STATS || op == ENGINE_OP_TICK ||
           op == ENGINE_OP_CANCEL || op == ENGINE_OP_AWAIT_CALL || op == ENGINE_OP_CHECKPOINT ||
           op == ENGINE_OP_METRICS || op == ENGINE_OP_LIST_DEPLOYMENTS;
}

typedef int (*handler_fn)(engine *e, pending *p);

static void halted_status(const engine *e, engine_status *st)
{
    char why[sizeof(e->halt_why) + 64];
    snprintf(why, sizeof(why), "the engine has halted (%s); it reopens the store shortly",
             e->halt_why);
    reply_unavailable(st, why);
}

static handler_fn handler_of(engine_op op)
{
    switch (op) {
    case ENGINE_OP_SUBMIT:
        return submit_task;
    case ENGINE_OP_SUBMIT_BATCH:
        return submit_batch;
    case ENGINE_OP_FETCH:
        return claim_fetch;
    case ENGINE_OP_COMPLETE:
        return guard_complete;
    case ENGINE_OP_COMPLETE_BATCH:
        return guard_complete_batch;
    case ENGINE_OP_FAIL:
        return guard_fail;
    case ENGINE_OP_REFUSE:
        return guard_refuse;
    case ENGINE_OP_EXTEND_LOCK:
        return guard_extend_lock;
    case ENGINE_OP_RELEASE:
        return guard_release;
    case ENGINE_OP_CALL:
        return submit_call;
    case ENGINE_OP_AWAIT_CALL:
        return calls_await;
    case ENGINE_OP_GET_TASK:
        return admin_get_task;
    case ENGINE_OP_LIST_TASKS:
        return admin_list_tasks;
    case ENGINE_OP_RETRY_TERMINAL:
        return admin_retry_terminal;
    case ENGINE_OP_DISCARD_TERMINAL:
        return admin_discard_terminal;
    case ENGINE_OP_RETRY_DELIVERY:
        return relay_retry_delivery;
    case ENGINE_OP_LIST_INCIDENTS:
        return admin_list_incidents;
    case ENGINE_OP_STATS:
        return admin_stats;
    case ENGINE_OP_CHECKPOINT:
        return admin_checkpoint;
    case ENGINE_OP_METRICS:
        return admin_metrics;
    case ENGINE_OP_CANCEL:
        return wait_cancel;
    case ENGINE_OP_DEPLOY:
        return deploy_apply;
    case ENGINE_OP_RETIRE:
        return deploy_retire;
    case ENGINE_OP_LIST_DEPLOYMENTS:
        return deploy_list;
    case ENGINE_OP_PUSH_ACK:
        return relay_push_ack;
    case ENGINE_OP_TICK:
        break;
    }
    return NULL;
}

static void dispatch(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    p->arrived_ms = e->t.now_ms;
    if (e->halted) {
        halted_status(e, &r->status);
    } else if (turn_failed(e)) {
        /* The turn will be undone: applying more of it would be lost. */
        turn_fail_status(e, &r->status);
    } else if (e->t.now_ms < e->write_retry_at_ms && !read_only(p->req.op)) {
        /* The circuit breaker: a write failed a moment ago. Until the
         * store's backoff ends, whatever would write is refused at once
         * rather than applied, failed and undone by reloading the store
         * every turn. */
        reply_unavailable(&r->status, "the store is failing writes; try again shortly");
    } else if (p->req.op != ENGINE_OP_TICK) {
        handler_fn h = handler_of(p->req.op);
        if (h != NULL)
            (void)h(e, p); /* a failure is the turn's: turn_failed() */
        else
            reply_status(&r->status, ENGINE_CODE_UNIMPLEMENTED, "unknown request %d",
                         (int)p->req.op);
    }
    if (p->waiter == NULL)
        turn_answer(e, p);
}

/* Memory from the store again; if that fails, the engine halts. */
static void reload_or_halt(engine *e)
{
    recover_clear(e);
    char err[256] = "";
    if (recover_load(e, err, sizeof(err)) != BERTH_OK) {
        char msg[300];
        snprintf(msg, sizeof(msg), "cannot reload state: %s", err);
        turn_halt(e, msg);
    }
}

/* The turn wrote nothing (its write failed, or it was half-applied):
 * memory is reloaded from the store and every request of the turn is
 * answered with the reason. */
static void undo_turn(engine *e)
{
    turn *t = &e->t;
    /* A fetch that applied completions and then began to wait must not
     * answer them later as done: it ends now, with the turn (its reply is
     * set below, with the others'). */
    for (size_t i = 0; i < t->fused_waits.n; i++)
        if (t->fused_waits.v[i]->waiter != NULL)
            wait_answer(e, t->fused_waits.v[i]->waiter);
    t->fused_waits.n = 0;
    reload_or_halt(e);
    engine_status st;
    turn_fail_status(e, &st);
    turn_refuse(t->answered, &st, false);
    turn_events_free(t->events.v, t->events.n);
    t->events.n = 0;
    uint64_t b = e->write_backoff_ms ? e->write_backoff_ms * 2 : ENGINE_STORE_BACKOFF_MIN_MS;
    e->write_backoff_ms = b > ENGINE_STORE_BACKOFF_MAX_MS ? ENGINE_STORE_BACKOFF_MAX_MS : b;
    e->write_retry_at_ms = t->now_ms + e->write_backoff_ms;
    if (!e->halted) {
        /* The parks of the turn were not kept: each is a failed attempt,
         * written by the next turn. Staged after the turn's own failure
         * was recorded, so it must be cleared first. */
        char reason[300];
        snprintf(reason, sizeof(reason), "park failed: %s", t->fail_why);
        t->failed = false;
        if (relay_parks_failed(e, t->parked.v, t->parked.n, reason) != BERTH_OK) {
            /* No memory to account for them: the store still holds every
             * delivery, so reloading again is enough (attempts uncounted). */
            store_batch_clear(e->batch);
            reload_or_halt(e);
        }
    }
}

static void run_turn(engine *e, pending *list)
{
    turn *t = &e->t;
    turn_begin(e, now_ms(e));
    if (!e->halted && commit_failed(e)) {
        char why[300];
        snprintf(why, sizeof(why), "the store failed to sync: %s", commit_failure(e));
        turn_halt(e, why);
    }

    /* Fire the calls' timers and park what came due since the last turn
     * before serving fetches, and what this turn's submits created after
     * them. */
    if (!e->halted && calls_run(e) == BERTH_OK)
        (void)relay_run(e);
    while (list != NULL) {
        pending *next = list->next;
        dispatch(e, list);
        list = next;
    }
    if (!e->halted && !turn_failed(e) && relay_run(e) == BERTH_OK && claim_wake(e) == BERTH_OK)
        wait_expire(e);
    if (!e->halted && !turn_failed(e))
        (void)deploy_gate(e);
    relay_flush_fresh(e);

    bool wrote = store_batch_count(e->batch) > 0;
    if (!turn_failed(e) && wrote && store_append(e->store, e->batch) != BERTH_OK)
        turn_fail(e, ENGINE_CODE_UNAVAILABLE, "the store write failed (%s)",
                  store_last_error(e->store));
    store_batch_clear(e->batch);
    bool undone = turn_failed(e);
    if (undone) {
        e->counters.commits_failed++;
        undo_turn(e);
    } else if (wrote) { /* the store writes again: the breaker closes */
        commit_appended(e);
        e->counters.turns++;
        e->counters.calls += t->count.calls;
        e->counters.calls_resolved += t->count.calls_resolved;
        e->counters.calls_failed += t->count.calls_failed;
        e->counters.calls_timed_out += t->count.calls_timed_out;
        e->counters.instances_dropped += t->count.instances_dropped;
        e->write_backoff_ms = 0;
        e->write_retry_at_ms = 0;
    }
    if (t->halt) {
        engine_status st;
        halted_status(e, &st);
        wait_abort(e, &st, false);
    }
    /* An undone turn's events are dropped, except the retry accounting's,
     * which its next write carries. */
    commit_turn(e, !undone);
    instance_turn_done(e); /* after commit_turn: the events name their topics */
    /* What the turn kept in memory for the store's sake is written now. */
    while (t->key_list != NULL) {
        turn_key *k = t->key_list;
        t->key_list = k->next;
        free(k);
    }
    table_clear(&t->keys);
    if (!undone)
        state_task_evict_bodies(e);
    listing_tidy(e);
    state_topics_reap(e, undone);
    state_check(e);
    deploy_check(e);
    atomic_fetch_add(&e->actor->turns, 1);
}

static uint64_t next_due(engine *e)
{
    uint64_t due = claim_next_due(e);
    heap_node *x = heap_min(&e->outbox);
    uint64_t relay = UINT64_MAX;
    if (x != NULL)
        relay = x->at;
    if (store_batch_count(e->batch) > 0) /* retry accounting left by a failed turn */
        relay = 0;
    uint64_t calls = calls_next_due(e);
    if (calls < relay)
        relay = calls;
    if (relay != UINT64_MAX && relay < e->write_retry_at_ms)
        relay = e->write_retry_at_ms;
    return relay < due ? relay : due;
}

static void sleep_until(engine *e, uint64_t due)
{
    struct actor *a = e->actor;
    uint64_t now = now_ms(e);
    if (e->clock.manual || due == UINT64_MAX) {
        pthread_cond_wait(&a->cv, &a->mu);
        return;
    }
    /* The clock may have reached `due` since the caller looked. */
    uint64_t ms = due > now ? due - now : 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&a->cv, &a->mu, &ts);
}

static store_options options_for_store(engine *e);
static void actor_wake(void *arg);

/* The engine without its store: no turn runs (a halted engine whose
 * reopen failed). */
static bool without_store(const engine *e)
{
    return e->store == NULL;
}

static void shut_store(engine *e)
{
    store_batch_free(e->batch);
    e->batch = NULL;
    store_close(e->store);
    e->store = NULL;
}

/* A halted engine comes back as a restart would (see the top). Engine
 * thread, outside a turn. */
static void reopen(engine *e)
{
    e->syncs_past += commit_syncs(e);
    commit_free(e); /* every turn handed over is answered first */
    recover_clear(e);
    shut_store(e);
    char err[256] = "";
    store_options so = options_for_store(e);
    so.must_exist = true;
    int rv = store_open(e->o.data_dir, &so, &e->store, err, sizeof(err));
    if (rv == BERTH_OK && (rv = store_batch_alloc(e->store, &e->batch)) != BERTH_OK)
        snprintf(err, sizeof(err), "out of memory");
    if (rv == BERTH_OK)
        rv = recover_load(e, err, sizeof(err));
    if (rv == BERTH_OK && (rv = commit_start(e, actor_wake, e)) != BERTH_OK)
        snprintf(err, sizeof(err), "cannot start the commit thread");
    uint64_t now = now_ms(e);
    if (rv != BERTH_OK) {
        recover_clear(e);
        commit_free(e);
        shut_store(e);
        if (strcmp(err, e->halt_why) != 0)
            fprintf(stderr, "berth: engine still halted: %s\n", err);
        snprintf(e->halt_why, sizeof(e->halt_why), "%s", err);
        uint64_t b = e->reopen_backoff_ms * 2;
        e->reopen_backoff_ms = b < ENGINE_REOPEN_BACKOFF_MAX_MS ? b : ENGINE_REOPEN_BACKOFF_MAX_MS;
        e->reopen_at_ms = now + e->reopen_backoff_ms;
        return;
    }
    fprintf(stderr, "berth: engine serving again: the store reopened\n");
    e->halted = false;
    e->halt_why[0] = '\0';
    e->write_backoff_ms = e->write_retry_at_ms = 0;
    e->counters.reopens++;
}

/* No store: what was queued is answered at once, nothing applied. */
static void refuse_closed(engine *e, pending *list)
{
    engine_status st;
    halted_status(e, &st);
    turn_refuse(list, &st, false);
    turn_call_done(list);
}

static void *actor_main(void *arg)
{
    engine *e = arg;
    struct actor *a = e->actor;
    prctl(PR_SET_NAME, "berth-engine", 0, 0, 0); /* top -H, perf, gdb */
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while ((a->q_head == NULL || a->held) && !a->stopping) {
            if (!e->halted && !a->held && commit_failed(e))
                break; /* a turn halts the engine */
            uint64_t due = a->held ? UINT64_MAX : e->halted ? e->reopen_at_ms : next_due(e);
            if (due <= now_ms(e))
                break;
            sleep_until(e, due);
        }
        if (a->stopping)
            break;
        if (e->halted && !a->held && e->reopen_at_ms <= now_ms(e)) {
            pthread_mutex_unlock(&a->mu);
            reopen(e);
            pthread_mutex_lock(&a->mu);
            continue;
        }
        pending *list = a->q_head, *last = NULL;
        uint32_t n = 0;
        for (pending *p = list; p != NULL && n < e->o.turn_max_requests; p = p->next, n++)
            last = p;
        if (last != NULL) {
            a->q_head = last->next;
            if (a->q_head == NULL)
                a->q_tail = NULL;
            last->next = NULL;
        }
        pthread_mutex_unlock(&a->mu);
        if (without_store(e))
            refuse_closed(e, list);
        else
            run_turn(e, list);
        pthread_mutex_lock(&a->mu);
    }
    /* Closing: nothing more is applied; everything still owed an answer
     * gets UNAVAILABLE. */
    pending *rest = a->q_head;
    a->q_head = a->q_tail = NULL;
    pthread_mutex_unlock(&a->mu);
    /* Every turn written is answered (after its sync) before closing. */
    commit_stop(e);
    /* Retry accounting left by a failed turn: one last try to keep it. */
    if (!e->halted && !commit_failed(e) && store_batch_count(e->batch) > 0 &&
        store_write(e->store, e->batch) != BERTH_OK)
        fprintf(stderr, "berth: closing: %s\n", store_last_error(e->store));
    if (!without_store(e))
        store_batch_clear(e->batch);
    engine_status st;
    reply_unavailable(&st, "the engine is closing");
    e->t.answered = e->t.answered_tail = NULL;
    wait_abort(e, &st, false);
    turn_refuse(rest, &st, false);
    turn_call_done(e->t.answered);
    e->t.answered = e->t.answered_tail = NULL;
    turn_call_done(rest);
    return NULL;
}

/* The commit thread's callback: a sync failed, the actor must look. */
static void actor_wake(void *arg)
{
    engine *e = arg;
    pthread_mutex_lock(&e->actor->mu);
    pthread_cond_signal(&e->actor->cv);
    pthread_mutex_unlock(&e->actor->mu);
}

/* ---- the backend (backend.h) ---- */

static uint64_t clock_thunk(void *ctx)
{
    return now_ms(ctx);
}

static store_options options_for_store(engine *e)
{
    return (store_options){
        .dedup_horizon_ms = e->o.dedup_horizon_ms,
        .now_ms = clock_thunk,
        .now_ctx = e,
    };
}

static void actor_free(engine *e)
{
    recover_clear(e);
    size_t i = 0;
    topic *tp;
    while ((tp = table_next(&e->topics, &i)) != NULL) {
        state_topic_fini(tp);
        free(tp->name);
        free(tp);
    }
    table_fini(&e->topics);
    idtab_fini(&e->tasks);
    idtab_fini(&e->deliveries);
    table_fini(&e->routes);
    VEC_FREE(&e->deps);
    table_fini(&e->t.keys);
    table_fini(&e->owners); /* empty: every wait was answered */
    table_fini(&e->instances);
    heap_fini(&e->timers);
    tcounts_fini(&e->tcounts);
    VEC_FREE(&e->t.ended);
    VEC_FREE(&e->calls_poisoned);
    free(e->listing.v);
    heap_fini(&e->outbox);
    heap_fini(&e->waits);
    commit_free(e);
    store_batch_free(e->batch);
    store_close(e->store);
    store_buf_fini(&e->buf);
    turn_events_free(e->t.events.v, e->t.events.n);
    VEC_FREE(&e->t.events);
    VEC_FREE(&e->t.fresh);
    VEC_FREE(&e->t.parked);
    free(e->recent.v);
    commit_pushes_free(e->t.pushes.v, e->t.pushes.n);
    VEC_FREE(&e->t.pushes);
    VEC_FREE(&e->t.fused_waits);
    if (e->actor != NULL) {
        pthread_mutex_destroy(&e->actor->mu);
        pthread_cond_destroy(&e->actor->cv);
        free(e->actor);
    }
    free((char *)e->o.data_dir);
    free(e);
}

static int actor_init(engine *e)
{
    struct actor *a = mem_calloc(1, sizeof(*a));
    if (a == NULL)
        return BERTH_ENOMEM;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&a->turns, 0);
    e->actor = a;
    return BERTH_OK;
}

int actor_open(const engine_options *o, engine **out, char *err, size_t errlen)
{
    *out = NULL;
    int rv;
    engine *e = mem_calloc(1, sizeof(*e));
    if (e == NULL) {
        snprintf(err, errlen, "out of memory");
        return BERTH_ENOMEM;
    }
    e->front.vt = &actor_backend;
    e->o = *o;
    e->o.channels = NULL;
    e->o.n_channels = 0;
    e->o.data_dir = mem_strdup(o->data_dir ? o->data_dir : "./var/berth");
    e->clock = o->clock.now_ms ? o->clock : engine_clock_system();
    e->implicit.state = ENGINE_DEPLOYMENT_LIVE;
    heap_init(&e->outbox);
    heap_init(&e->waits);
    heap_init(&e->timers);
    hist_init(&e->task_latency, HIST_SECONDS);
    hist_init(&e->fetch_wait, HIST_SECONDS);
    hist_init(&e->fsync, HIST_SECONDS);
    hist_init(&e->commit_batch, HIST_SIZES);
    atomic_init(&e->fp_park, 0);
    atomic_init(&e->fetch_inflight, 0);
    atomic_init(&e->fetch_blocked, false);
    if (e->o.data_dir == NULL || idtab_init(&e->tasks, offsetof(task, id)) ||
        idtab_init(&e->deliveries, offsetof(delivery, id)) || table_init(&e->topics) ||
        table_init(&e->routes) || table_init(&e->t.keys) || table_init(&e->owners) ||
        table_init(&e->instances) || tcounts_init(&e->tcounts, e->o.metrics_topics_max) ||
        actor_init(e)) {
        snprintf(err, errlen, "out of memory");
        actor_free(e);
        return BERTH_ENOMEM;
    }
    store_options so = options_for_store(e);
    uint64_t t0 = engine_monotonic_ms();
    rv = store_open(e->o.data_dir, &so, &e->store, err, errlen);
    if (rv == BERTH_OK)
        rv = store_batch_alloc(e->store, &e->batch);
    uint64_t t1 = engine_monotonic_ms();
    if (rv == BERTH_OK)
        rv = recover_load(e, err, errlen);
    if (rv == BERTH_OK)
        rv = deploy_boot(e, o, err, errlen);
    if (rv != BERTH_OK) {
        actor_free(e);
        return rv;
    }
    e->recovery = (engine_recovery){.store_ms = t1 - t0,
                                    .rebuild_ms = engine_monotonic_ms() - t1,
                                    .tasks = e->tasks.n,
                                    .deliveries = e->deliveries.n,
                                    .instances = e->instances.n};
    /* Push sends are numbered from a random start, so that no answer to
     * an engine opened before on this process can match a send of this
     * one. */
    state_random(e, &e->flight_seq, sizeof(e->flight_seq));
    e->flight_seq >>= 2;
    if (commit_start(e, actor_wake, e) != BERTH_OK ||
        pthread_create(&e->actor->thread, NULL, actor_main, e) != 0) {
        snprintf(err, errlen, "cannot start the engine threads");
        actor_free(e);
        return BERTH_ENOMEM;
    }
    *out = e;
    return BERTH_OK;
}

static void actor_stop(engine *e)
{
    struct actor *a = e->actor;
    pthread_mutex_lock(&a->mu);
    bool join = !a->joined;
    a->stopping = true;
    a->joined = true;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (join)
        pthread_join(a->thread, NULL);
}

static int enqueue(engine *e, const engine_request *req, engine_done_fn done, void *arg)
{
    struct actor *a = e->actor;
    pending *p = mem_calloc(1, sizeof(*p));
    if (p == NULL || (p->reply = reply_alloc(req->op)) == NULL) {
        free(p);
        return BERTH_ENOMEM;
    }
    p->req = *req;
    p->done = done;
    p->arg = arg;
    pthread_mutex_lock(&a->mu);
    if (a->stopping) {
        pthread_mutex_unlock(&a->mu);
        engine_reply_free(p->reply);
        free(p);
        return BERTH_ECLOSED;
    }
    if (a->q_tail)
        a->q_tail->next = p;
    else
        a->q_head = p;
    a->q_tail = p;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return BERTH_OK;
}

static void actor_failpoint_set(engine *e, engine_failpoint fp, int n)
{
    if (fp != ENGINE_FP_PARK && e->store == NULL)
        return; /* halted, between reopens: no store to fail */
    switch (fp) {
    case ENGINE_FP_PARK:
        atomic_store(&e->fp_park, n);
        break;
    case ENGINE_FP_STORE_WRITE:
        store_failpoint_writes(e->store, n);
        break;
    case ENGINE_FP_STORE_READ:
        store_failpoint_reads(e->store, n);
        break;
    case ENGINE_FP_STORE_SYNC:
        store_failpoint_syncs(e->store, n);
        break;
    case ENGINE_FP_HOLD_SYNCS:
        store_hold_syncs(e->store, n > 0);
        break;
    }
}

static void actor_hold(engine *e, bool hold)
{
    pthread_mutex_lock(&e->actor->mu);
    e->actor->held = hold;
    pthread_cond_signal(&e->actor->cv);
    pthread_mutex_unlock(&e->actor->mu);
}

static void actor_recovery_get(const engine *e, engine_recovery *out)
{
    *out = e->recovery;
}

static void actor_durability(engine *e, engine_durable *out)
{
    commit_durability(e, out);
    out->turns = atomic_load(&e->actor->turns);
}

static const engine_backend actor_backend = {
    .enqueue = enqueue,
    .stop = actor_stop,
    .free = actor_free,
    .failpoint_set = actor_failpoint_set,
    .hold = actor_hold,
    .recovery_get = actor_recovery_get,
    .durability = actor_durability,
};
