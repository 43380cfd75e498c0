/* harness.c — see harness.h. */
#define _XOPEN_SOURCE 700
#include "tests/support/harness.h"

#include <errno.h>
#include <ftw.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/err.h"
#ifdef BERTH_WITH_PG
#include <criterion/hooks.h>

#include "tests/support/pgtmp.h"
#endif

harness H;

bool h_store_is_pg(void)
{
    const char *s = getenv("BERTH_TEST_STORE");
    return s != NULL && strcmp(s, "pg") == 0;
}

void h_skip_on_pg(const char *why)
{
    if (h_store_is_pg())
        cr_skip_test("not on PostgreSQL: %s", why);
}

#ifdef BERTH_WITH_PG
/* The runner's cluster, for the whole binary, when the suite runs on
 * PostgreSQL. */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    if (h_store_is_pg())
        pgtmp_runner_start();
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    if (h_store_is_pg())
        pgtmp_runner_stop();
}
#endif

static void on_event(void *ctx, const engine_event *ev)
{
    (void)ctx;
    pthread_mutex_lock(&H.mu);
    if (H.n_ev < H_MAX_EVENTS) {
        h_event *h = &H.ev[H.n_ev++];
        h->kind = ev->kind;
        snprintf(h->topic, sizeof(h->topic), "%s", ev->topic);
        memcpy(h->id, ev->id, ENGINE_ID_STR);
        snprintf(h->code, sizeof(h->code), "%s", ev->error.code ? ev->error.code : "");
        snprintf(h->message, sizeof(h->message), "%s", ev->error.message ? ev->error.message : "");
        h->retries_left = ev->retries_left;
    }
    pthread_mutex_unlock(&H.mu);
}

static int on_push(void *ctx, engine *e, const engine_push_delivery *d)
{
    (void)ctx;
    (void)e;
    pthread_mutex_lock(&H.mu);
    if (H.n_pushes < H_MAX_PUSHES) {
        h_push *h = &H.pushes[H.n_pushes++];
        memset(h, 0, sizeof(*h));
        memcpy(h->id, d->id, ENGINE_ID_STR);
        h->flight = d->flight;
        snprintf(h->transport, sizeof(h->transport), "%s", d->transport);
        snprintf(h->topic, sizeof(h->topic), "%s", d->topic);
        snprintf(h->payload, sizeof(h->payload), "%.*s", (int)d->payload_len,
                 (const char *)d->payload);
        h->attempt = d->attempt;
        memcpy(h->instance_id, d->instance_id, ENGINE_ID_STR);
        for (size_t i = 0; i < d->n_headers; i++)
            if (strcmp(d->headers[i].name, ENGINE_HEADER_ATTEMPT) == 0)
                snprintf(h->header_attempt, sizeof(h->header_attempt), "%s", d->headers[i].value);
    }
    pthread_mutex_unlock(&H.mu);
    return 0;
}

void h_push_on(void)
{
    H.o.push_fn = on_push;
    H.o.push_ctx = NULL;
}

size_t h_pushes(void)
{
    pthread_mutex_lock(&H.mu);
    size_t n = H.n_pushes;
    pthread_mutex_unlock(&H.mu);
    return n;
}

engine_reply *h_push_ack(size_t i, int outcome, const char *code, const engine_result *result)
{
    cr_assert_lt(i, h_pushes(), "no send %zu", i);
    engine_request req = {.op = ENGINE_OP_PUSH_ACK};
    req.u.push_ack.id = H.pushes[i].id;
    req.u.push_ack.flight = H.pushes[i].flight;
    req.u.push_ack.outcome = outcome;
    req.u.push_ack.error.code = code;
    req.u.push_ack.error.message = code ? "the receiver says so" : NULL;
    req.u.push_ack.result = result;
    return h_exec(&req);
}

void h_setup(void)
{
    memset(&H, 0, sizeof(H));
    pthread_mutex_init(&H.mu, NULL);
    snprintf(H.dir, sizeof(H.dir), "/tmp/berth-test-XXXXXX");
    cr_assert_not_null(mkdtemp(H.dir));
    engine_manual_clock_init(&H.clock, H_T0);
    engine_options_default(&H.o);
    H.o.data_dir = H.dir;
    if (h_store_is_pg()) {
#ifdef BERTH_WITH_PG
        static int k;
        char name[64];
        snprintf(name, sizeof name, "h%d_%d", (int)getpid(), k++);
        pgtmp_createdb(name, H.store_uri, sizeof H.store_uri);
        H.o.store_uri = H.store_uri;
#else
        cr_skip_test("BERTH_TEST_STORE=pg: built without PostgreSQL");
#endif
    }
    H.o.clock = engine_manual_clock_get(&H.clock);
    H.o.backoff_jitter = 0;
    H.o.on_event = on_event;
    h_open();
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void h_teardown(void)
{
    h_close();
    nftw(H.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void h_open(void)
{
    char err[256] = "";
    int rv = engine_open(&H.o, &H.e, err, sizeof(err));
    cr_assert_eq(rv, BERTH_OK, "engine_open: %s (%s)", berth_strerror(rv), err);
}

void h_close(void)
{
    /* A test that failed while holding syncs must still close. */
    if (H.e != NULL)
        engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 0);
    engine_close(H.e);
    H.e = NULL;
}

void h_reopen(void)
{
    h_close();
    h_open();
}

engine_reply *h_exec(const engine_request *req)
{
    engine_reply *r = engine_exec_sync(H.e, req);
    cr_assert_not_null(r, "request not queued");
    return r;
}

void h_advance(uint64_t ms)
{
    engine_manual_clock_advance(&H.clock, ms);
    engine_tick(H.e);
}

void h_wait_durability(uint64_t appended, uint32_t held)
{
    engine_durable d;
    for (int i = 0; i < 10000; i++) {
        engine_durability(H.e, &d);
        if (d.appended >= appended && d.syncs_held == held)
            return;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    cr_assert_fail("appended %llu (want %llu), syncs held %u (want %u)",
                   (unsigned long long)d.appended, (unsigned long long)appended, d.syncs_held,
                   held);
}

void h_wait_turns(uint64_t turns)
{
    engine_durable d;
    for (int i = 0; i < 10000; i++) {
        engine_durability(H.e, &d);
        if (d.turns >= turns)
            return;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    cr_assert_fail("turns %llu, want %llu", (unsigned long long)d.turns, (unsigned long long)turns);
}

uint64_t h_now(void)
{
    return atomic_load(&H.clock.now_ms);
}

engine_reply *h_submit_key(const char *topic, const char *payload, const char *key)
{
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit.topic = topic;
    req.u.submit.payload = (const uint8_t *)payload;
    req.u.submit.payload_len = payload ? strlen(payload) : 0;
    req.u.submit.idempotency_key = key;
    return h_exec(&req);
}

void h_submit(const char *topic, const char *payload, char *id_out)
{
    engine_reply *r = h_submit_key(topic, payload, NULL);
    h_expect_ok(r);
    cr_assert_eq(r->n_submitted, 1);
    if (id_out != NULL)
        memcpy(id_out, r->submitted[0].id, ENGINE_ID_STR);
    engine_reply_free(r);
}

engine_reply *h_fetch(const char *worker, const char *topic, uint32_t max, uint64_t lock_ms)
{
    static const char *topics[1];
    topics[0] = topic;
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){
        .worker_id = worker,
        .topics = topics,
        .n_topics = 1,
        .has_max_tasks = max != 0,
        .max_tasks = max,
        .has_lock_ms = lock_ms != 0,
        .lock_ms = lock_ms,
        .has_wait_ms = true,
        .wait_ms = 0,
    };
    return h_exec(&req);
}

void h_fetch_one(const char *worker, const char *topic, uint64_t lock_ms, engine_task *out,
                 char token[ENGINE_ID_STR])
{
    engine_reply *r = h_fetch(worker, topic, 1, lock_ms);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 1, "expected one task on %s, got %zu", topic, r->n_tasks);
    if (out != NULL) {
        *out = r->tasks[0];
        out->topic = NULL; /* pointers die with the reply */
        out->payload = NULL;
        out->headers = NULL;
        out->content_type = NULL;
    }
    if (token != NULL)
        memcpy(token, r->tasks[0].lock_token, ENGINE_ID_STR);
    engine_reply_free(r);
}

engine_reply *h_guarded(engine_op op, const char *id, const char *worker, const char *token)
{
    engine_request req = {.op = op};
    engine_guard g = {id, worker, token};
    switch (op) {
    case ENGINE_OP_COMPLETE:
        req.u.complete.guard = g;
        break;
    case ENGINE_OP_FAIL:
        req.u.fail.guard = g;
        break;
    case ENGINE_OP_REFUSE:
        req.u.refuse.guard = g;
        break;
    case ENGINE_OP_EXTEND_LOCK:
        req.u.extend.guard = g;
        break;
    case ENGINE_OP_RELEASE:
        req.u.release = g;
        break;
    default:
        cr_assert_fail("not a guarded op");
    }
    return h_exec(&req);
}

engine_reply *h_complete(const char *id, const char *worker, const char *token)
{
    return h_guarded(ENGINE_OP_COMPLETE, id, worker, token);
}

engine_reply *h_fail(const char *id, const char *worker, const char *token, const char *code)
{
    engine_request req = {.op = ENGINE_OP_FAIL};
    req.u.fail.guard = (engine_guard){id, worker, token};
    req.u.fail.error = (engine_error){.code = code, .message = "it broke"};
    return h_exec(&req);
}

engine_reply *h_get_task(const char *id)
{
    engine_request req = {.op = ENGINE_OP_GET_TASK};
    req.u.get_task.id = id;
    return h_exec(&req);
}

engine_stats h_stats(void)
{
    engine_request req = {.op = ENGINE_OP_STATS};
    engine_reply *r = h_exec(&req);
    engine_stats s = r->stats;
    engine_reply_free(r);
    return s;
}

size_t h_events(engine_event_kind kind)
{
    size_t n = 0;
    pthread_mutex_lock(&H.mu);
    for (size_t i = 0; i < H.n_ev; i++)
        n += H.ev[i].kind == kind;
    pthread_mutex_unlock(&H.mu);
    return n;
}

static void async_done(void *arg, engine_reply *r)
{
    h_async *a = arg;
    pthread_mutex_lock(&a->mu);
    a->r = r;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

int h_exec_async_try(const engine_request *req, h_async *a)
{
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->r = NULL;
    return engine_exec(H.e, req, async_done, a);
}

void h_exec_async(const engine_request *req, h_async *a)
{
    cr_assert_eq(h_exec_async_try(req, a), BERTH_OK);
}

engine_reply *h_async_peek(h_async *a)
{
    pthread_mutex_lock(&a->mu);
    engine_reply *r = a->r;
    pthread_mutex_unlock(&a->mu);
    return r;
}

engine_reply *h_async_wait(h_async *a)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&a->mu);
    int rv = 0;
    while (a->r == NULL && rv != ETIMEDOUT)
        rv = pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    engine_reply *r = a->r;
    pthread_mutex_unlock(&a->mu);
    cr_assert_not_null(r, "no reply within 10 s");
    return r;
}

void h_async_free(h_async *a)
{
    engine_reply_free(a->r);
    a->r = NULL;
}

void h_fetch_async(const char *worker, const char *const *topics, size_t n, uint64_t wait_ms,
                   h_async *a)
{
    /* The engine copies the request; worker and topics must outlive it. */
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){.worker_id = worker,
                                      .topics = topics,
                                      .n_topics = n,
                                      .has_wait_ms = true,
                                      .wait_ms = wait_ms};
    h_exec_async(&req, a);
    engine_tick(H.e); /* served (or waiting) as of the current clock */
}
