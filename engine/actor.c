/*
 * actor.c — the engine's thread: its queue, its turns, group commit.
 *
 * ONE WRITER
 *   engine_exec() appends to a mutex-guarded queue (the only state other
 *   threads touch) and signals. The actor takes everything queued (up to
 *   turn_max_requests), applies it, runs the relay and the waits, and
 *   writes the turn's batch with ONE append. It hands the turn's answers
 *   and events to the commit thread (commit.c), which releases them after
 *   the sync that makes the turn durable; meanwhile the actor runs the
 *   next turns, and one sync serves them all: this is where throughput
 *   comes from.
 *
 * A FAILED WRITE
 *   If the append failed, nothing of it was applied: memory is reloaded
 *   from the store (recover.c), every staged reply becomes UNAVAILABLE
 *   (retryable), the events are dropped, the turn's parks count as failed
 *   delivery attempts, and the store backs off (50 ms doubling to 2 s):
 *   until then the relay pauses and requests that would write are refused
 *   UNAVAILABLE at once, so a failing disk costs one reload per backoff,
 *   not one per turn. Memory never disagrees with the store, and nothing
 *   is answered OK that is not on disk (R1). A failed SYNC halts the
 *   engine (commit.c says why).
 *
 * SLEEPING
 *   The actor sleeps until a request arrives or the next due instant (an
 *   outbox attempt, a wait deadline, a watched topic's front becoming
 *   fetchable). With a manual clock it sleeps until a request arrives:
 *   tests move the clock and then call engine_tick().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include <sodium.h>

#include "engine/internal.h"

uint64_t engine_now(engine *e)
{
    return e->clock.now_ms(e->clock.ctx);
}

bool failpoint_take(atomic_int *n)
{
    int v = atomic_load(n);
    while (v > 0)
        if (atomic_compare_exchange_weak(n, &v, v - 1))
            return true;
    return false;
}

void turn_answer(engine *e, pending *p)
{
    p->next = NULL;
    if (e->t.answered_tail)
        e->t.answered_tail->next = p;
    else
        e->t.answered = p;
    e->t.answered_tail = p;
}

void turn_event(engine *e, engine_event_kind kind, const topic *t, const uint8_t id[BERTH_ID_LEN],
                const engine_error *err, uint32_t retries_left)
{
    turn *tn = &e->t;
    if (e->o.on_event == NULL)
        return;
    if (tn->n_events == tn->cap_events) {
        size_t cap = tn->cap_events ? tn->cap_events * 2 : 64;
        engine_event *v = realloc(tn->events, cap * sizeof(*v));
        if (v == NULL)
            return; /* events are best effort */
        tn->events = v;
        tn->cap_events = cap;
    }
    engine_event *ev = &tn->events[tn->n_events++];
    memset(ev, 0, sizeof(*ev));
    ev->kind = kind;
    ev->topic = t->name;
    berth_id_format(id, ev->id);
    if (err != NULL) {
        /* Copied: the event is published after later turns ran, which may
         * have freed what the strings belong to (a delivery, a request). */
        ev->error.code = strdup_or_null(err->code);
        ev->error.message = strdup_or_null(err->message);
        ev->error.details = strdup_or_null(err->details);
    }
    ev->retries_left = retries_left;
    ev->at_ms = tn->now_ms;
}

void events_free(engine_event *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((char *)v[i].error.code);
        free((char *)v[i].error.message);
        free((char *)v[i].error.details);
    }
}

/* Requests that only read, served even while the store is failing. */
static bool read_only(engine_op op)
{
    return op == ENGINE_OP_GET_TASK || op == ENGINE_OP_LIST_INCIDENTS || op == ENGINE_OP_STATS ||
           op == ENGINE_OP_TICK;
}

static void dispatch(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    if (e->halted || e->t.halt) {
        status_unavailable(&r->status, "the engine has halted");
        turn_answer(e, p);
        return;
    }
    /* The circuit breaker: a write failed a moment ago. Until the store's
     * backoff ends, whatever would write is refused at once rather than
     * applied, failed and undone by reloading the store every turn. */
    if (e->t.now_ms < e->write_retry_at_ms && !read_only(p->req.op)) {
        status_unavailable(&r->status, "the store is failing writes; try again shortly");
        turn_answer(e, p);
        return;
    }
    switch (p->req.op) {
    case ENGINE_OP_SUBMIT:
        op_submit(e, p);
        break;
    case ENGINE_OP_SUBMIT_BATCH:
        op_submit_batch(e, p);
        break;
    case ENGINE_OP_FETCH:
        op_fetch(e, p);
        break;
    case ENGINE_OP_COMPLETE:
        op_complete(e, p);
        break;
    case ENGINE_OP_COMPLETE_BATCH:
        op_complete_batch(e, p);
        break;
    case ENGINE_OP_FAIL:
        op_fail(e, p);
        break;
    case ENGINE_OP_REFUSE:
        op_refuse(e, p);
        break;
    case ENGINE_OP_EXTEND_LOCK:
        op_extend_lock(e, p);
        break;
    case ENGINE_OP_RELEASE:
        op_release(e, p);
        break;
    case ENGINE_OP_GET_TASK:
        op_get_task(e, p);
        break;
    case ENGINE_OP_RETRY_TERMINAL:
        op_retry_terminal(e, p);
        break;
    case ENGINE_OP_DISCARD_TERMINAL:
        op_discard_terminal(e, p);
        break;
    case ENGINE_OP_RETRY_DELIVERY:
        op_retry_delivery(e, p);
        break;
    case ENGINE_OP_LIST_INCIDENTS:
        op_list_incidents(e, p);
        break;
    case ENGINE_OP_STATS:
        op_stats(e, p);
        break;
    case ENGINE_OP_TICK:
        break;
    default:
        status_set(&r->status, ENGINE_CODE_UNIMPLEMENTED, "unknown request %d", (int)p->req.op);
        break;
    }
    if (p->waiter == NULL)
        turn_answer(e, p);
}

static void deliver_answers(engine *e)
{
    pending *p = e->t.answered;
    e->t.answered = e->t.answered_tail = NULL;
    while (p != NULL) {
        pending *next = p->next;
        p->done(p->arg, p->reply);
        free(p);
        p = next;
    }
}

/* Memory cannot be made to match the store: serve nothing more. */
static void halt(engine *e, const char *why)
{
    fprintf(stderr, "berth: engine halted: %s\n", why);
    e->halted = true;
    claim_abort_all(e, ENGINE_CODE_UNAVAILABLE, "the engine has halted");
}

/* The write failed (or a request was half-applied): undo the turn. */
static void turn_failed(engine *e, const char *why)
{
    turn *t = &e->t;
    state_clear(e);
    char err[256] = "";
    if (state_load(e, err, sizeof(err)) != BERTH_OK) {
        char msg[300];
        snprintf(msg, sizeof(msg), "cannot reload state: %s", err);
        halt(e, msg);
    }
    for (pending *p = t->answered; p != NULL; p = p->next) {
        reply_reset(p->reply);
        status_unavailable(&p->reply->status, "the store write failed; nothing of this request "
                                              "was kept: try again");
    }
    events_free(t->events, t->n_events);
    t->n_events = 0;
    uint64_t b = e->write_backoff_ms ? e->write_backoff_ms * 2 : ENGINE_STORE_BACKOFF_MIN_MS;
    e->write_backoff_ms = b > ENGINE_STORE_BACKOFF_MAX_MS ? ENGINE_STORE_BACKOFF_MAX_MS : b;
    e->write_retry_at_ms = t->now_ms + e->write_backoff_ms;
    if (!e->halted) {
        char reason[300];
        snprintf(reason, sizeof(reason), "park failed: %s", why);
        relay_parks_failed(e, (const uint8_t(*)[BERTH_ID_LEN])t->parked, t->n_parked, reason);
    }
}

static void run_turn(engine *e, pending *list)
{
    turn *t = &e->t;
    t->now_ms = engine_now(e);
    t->answered = t->answered_tail = NULL;
    t->rung = NULL; /* (events staged by a failed turn's retry accounting are kept) */
    t->n_parked = 0;
    t->halt = false;
    t->abort = false;
    if (!e->halted && commit_failed(e)) {
        char why[300];
        snprintf(why, sizeof(why), "the store failed to sync: %s", commit_failure(e));
        halt(e, why);
    }

    /* Park what came due since the last turn before serving fetches, and
     * what this turn's submits created after them. */
    if (!e->halted)
        relay_run(e);
    while (list != NULL) {
        pending *next = list->next;
        dispatch(e, list);
        list = next;
    }
    if (!t->halt && !e->halted) {
        relay_run(e);
        claim_wake(e);
        claim_expire(e);
    }
    relay_flush_fresh(e);

    int rv = BERTH_OK;
    bool reloaded = false;
    const char *why = "a request failed part-way";
    if (t->abort)
        rv = BERTH_EIO;
    else if (store_batch_count(e->batch) > 0 && (rv = store_append(e->store, e->batch)) != BERTH_OK)
        why = store_last_error(e->store);
    bool wrote = store_batch_count(e->batch) > 0;
    store_batch_clear(e->batch);
    if (rv == BERTH_OK) {
        if (wrote) { /* the store writes again: the breaker closes */
            commit_appended(e);
            e->counters.turns++;
            e->write_backoff_ms = 0;
            e->write_retry_at_ms = 0;
        }
    } else {
        e->counters.commits_failed++;
        turn_failed(e, why);
        reloaded = true;
    }
    if (t->halt) {
        e->halted = true;
        for (pending *p = t->answered; p != NULL; p = p->next) {
            reply_reset(p->reply);
            status_unavailable(&p->reply->status, "the engine halted (failpoint)");
        }
        claim_abort_all(e, ENGINE_CODE_UNAVAILABLE, "the engine has halted");
    }
    /* A failed turn's events are dropped, except the retry accounting's,
     * which its next write carries. */
    commit_turn(e, !reloaded);
    /* What the turn kept in memory for the store's sake is written now. */
    while (t->key_list != NULL) {
        turn_key *k = t->key_list;
        t->key_list = k->next;
        free(k);
    }
    table_clear(&t->keys);
    if (!reloaded)
        task_evict_bodies(e);
    topics_reap(e, reloaded);
    state_check(e);
    atomic_fetch_add(&e->commit.turns, 1);
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
    if (relay != UINT64_MAX && relay < e->write_retry_at_ms)
        relay = e->write_retry_at_ms;
    return relay < due ? relay : due;
}

static void sleep_until(engine *e, uint64_t due)
{
    uint64_t now = engine_now(e);
    if (e->clock.manual || due == UINT64_MAX) {
        pthread_cond_wait(&e->cv, &e->mu);
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
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

static void *actor_main(void *arg)
{
    engine *e = arg;
    prctl(PR_SET_NAME, "berth-engine", 0, 0, 0); /* top -H, perf, gdb */
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while ((e->q_head == NULL || e->held) && !e->stopping) {
            if (!e->halted && !e->held && commit_failed(e))
                break; /* a turn halts the engine */
            uint64_t due = e->halted || e->held ? UINT64_MAX : next_due(e);
            if (due <= engine_now(e))
                break;
            sleep_until(e, due);
        }
        if (e->stopping)
            break;
        pending *list = e->q_head, *last = NULL;
        uint32_t n = 0;
        for (pending *p = list; p != NULL && n < e->o.turn_max_requests; p = p->next, n++)
            last = p;
        if (last != NULL) {
            e->q_head = last->next;
            if (e->q_head == NULL)
                e->q_tail = NULL;
            last->next = NULL;
        }
        pthread_mutex_unlock(&e->mu);
        run_turn(e, list);
        pthread_mutex_lock(&e->mu);
    }
    /* Closing: nothing more is applied; everything still owed an answer
     * gets UNAVAILABLE. */
    pending *rest = e->q_head;
    e->q_head = e->q_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    /* Every turn written is answered (after its sync) before closing. */
    commit_stop(e);
    /* Retry accounting left by a failed turn: one last try to keep it. */
    if (!e->halted && !commit_failed(e) && store_batch_count(e->batch) > 0 &&
        store_write(e->store, e->batch) != BERTH_OK)
        fprintf(stderr, "berth: closing: %s\n", store_last_error(e->store));
    store_batch_clear(e->batch);
    e->t.answered = e->t.answered_tail = NULL;
    claim_abort_all(e, ENGINE_CODE_UNAVAILABLE, "the engine is closing");
    while (rest != NULL) {
        pending *next = rest->next;
        status_unavailable(&rest->reply->status, "the engine is closing");
        turn_answer(e, rest);
        rest = next;
    }
    deliver_answers(e);
    return NULL;
}

/* ---- public API ---- */

static void channels_free(engine *e)
{
    for (size_t i = 0; i < e->n_chans; i++) {
        free(e->chans[i].name);
        for (size_t j = 0; j < e->chans[i].n_content_types; j++)
            free(e->chans[i].content_types[j]);
        free(e->chans[i].content_types);
    }
    free(e->chans);
}

static int channels_copy(engine *e, const engine_options *o)
{
    e->chans = calloc(o->n_channels ? o->n_channels : 1, sizeof(*e->chans));
    if (e->chans == NULL)
        return BERTH_ENOMEM;
    e->n_chans = o->n_channels;
    for (size_t i = 0; i < o->n_channels; i++) {
        const engine_channel *src = &o->channels[i];
        channel *c = &e->chans[i];
        c->name = strdup(src->name);
        c->reply_max_bytes = src->reply_max_bytes;
        c->content_types =
            calloc(src->n_content_types ? src->n_content_types : 1, sizeof(*c->content_types));
        if (c->name == NULL || c->content_types == NULL)
            return BERTH_ENOMEM;
        c->n_content_types = src->n_content_types;
        for (size_t j = 0; j < src->n_content_types; j++)
            if ((c->content_types[j] = strdup(src->content_types[j])) == NULL)
                return BERTH_ENOMEM;
        if (table_put(&e->channels, c->name, strlen(c->name), c) != BERTH_OK)
            return BERTH_ENOMEM;
    }
    return BERTH_OK;
}

static uint64_t clock_thunk(void *ctx)
{
    engine *e = ctx;
    return engine_now(e);
}

static void engine_free(engine *e)
{
    state_clear(e);
    size_t i = 0;
    topic *tp;
    while ((tp = table_next(&e->topics, &i)) != NULL) {
        heap_fini(&tp->ready);
        free(tp->name);
        free(tp);
    }
    table_fini(&e->topics);
    table_fini(&e->tasks);
    table_fini(&e->deliveries);
    table_fini(&e->channels);
    table_fini(&e->t.keys);
    free(e->t.evict);
    channels_free(e);
    heap_fini(&e->outbox);
    heap_fini(&e->waits);
    store_batch_free(e->batch);
    store_close(e->store);
    store_buf_fini(&e->buf);
    events_free(e->t.events, e->t.n_events);
    free(e->t.events);
    free(e->t.fresh);
    free(e->t.parked);
    free((char *)e->o.data_dir);
    free(e);
}

int engine_open(const engine_options *o, engine **out, char *err, size_t errlen)
{
    *out = NULL;
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium failed to initialise");
        return BERTH_EINVAL;
    }
    int rv = engine_options_check(o, err, errlen);
    if (rv != BERTH_OK)
        return rv;
    engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return BERTH_ENOMEM;
    e->o = *o;
    e->o.channels = NULL;
    e->o.n_channels = 0;
    e->o.data_dir = strdup(o->data_dir ? o->data_dir : "./var/berth");
    e->clock = o->clock.now_ms ? o->clock : engine_clock_system();
    heap_init(&e->outbox);
    heap_init(&e->waits);
    atomic_init(&e->fp_park, 0);
    atomic_init(&e->fp_crash, 0);
    if (e->o.data_dir == NULL || table_init(&e->tasks) || table_init(&e->deliveries) ||
        table_init(&e->topics) || table_init(&e->channels) || table_init(&e->t.keys) ||
        channels_copy(e, o)) {
        snprintf(err, errlen, "out of memory");
        engine_free(e);
        return BERTH_ENOMEM;
    }
    store_options so = {
        .dedup_horizon_ms = o->dedup_horizon_ms,
        .now_ms = clock_thunk,
        .now_ctx = e,
    };
    if ((rv = store_open(e->o.data_dir, &so, &e->store, err, errlen)) != BERTH_OK ||
        (rv = store_batch_alloc(e->store, &e->batch)) != BERTH_OK ||
        (rv = state_load(e, err, errlen)) != BERTH_OK) {
        engine_free(e);
        return rv;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (commit_start(e) != BERTH_OK || pthread_create(&e->thread, NULL, actor_main, e) != 0) {
        snprintf(err, errlen, "cannot start the engine threads");
        commit_stop(e);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        engine_free(e);
        return BERTH_ENOMEM;
    }
    *out = e;
    return BERTH_OK;
}

void engine_stop(engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool join = !e->joined;
    e->stopping = true;
    e->joined = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (join)
        pthread_join(e->thread, NULL);
}

void engine_close(engine *e)
{
    if (e == NULL)
        return;
    engine_stop(e);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    engine_free(e);
}

int engine_exec(engine *e, const engine_request *req, engine_done_fn done, void *arg)
{
    pending *p = calloc(1, sizeof(*p));
    if (p == NULL || (p->reply = reply_alloc(req->op)) == NULL) {
        free(p);
        return BERTH_ENOMEM;
    }
    p->req = *req;
    p->done = done;
    p->arg = arg;
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        engine_reply_free(p->reply);
        free(p);
        return BERTH_ECLOSED;
    }
    if (e->q_tail)
        e->q_tail->next = p;
    else
        e->q_head = p;
    e->q_tail = p;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return BERTH_OK;
}

typedef struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    engine_reply *reply;
    bool done;
} sync_wait;

static void sync_done(void *arg, engine_reply *r)
{
    sync_wait *w = arg;
    pthread_mutex_lock(&w->mu);
    w->reply = r;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

engine_reply *engine_exec_sync(engine *e, const engine_request *req)
{
    sync_wait w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    engine_reply *r = NULL;
    if (engine_exec(e, req, sync_done, &w) == BERTH_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        r = w.reply;
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return r;
}

void engine_tick(engine *e)
{
    engine_request req = {.op = ENGINE_OP_TICK};
    engine_reply_free(engine_exec_sync(e, &req));
}

void engine_failpoint_set(engine *e, engine_failpoint fp, int n)
{
    switch (fp) {
    case ENGINE_FP_PARK:
        atomic_store(&e->fp_park, n);
        break;
    case ENGINE_FP_CRASH_AFTER_DISPATCH:
        atomic_store(&e->fp_crash, n);
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

void engine_hold(engine *e, bool hold)
{
    pthread_mutex_lock(&e->mu);
    e->held = hold;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}
