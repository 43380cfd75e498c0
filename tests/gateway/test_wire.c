/* The operate surface over real sockets: berthd as a process, the wire
 * contract of proto/berth/v1/operate.proto. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"
#include "tests/support/raw.h"

static daemon_proc D;
static bc *C;

static void setup(void)
{
    static const char *const extra[] = {"--retries", "2", "--contexts", "4", NULL};
    d_start(&D, extra);
    C = d_client(&D);
}

static void teardown(void)
{
    bc_close(C);
    d_cleanup(&D);
}

TestSuite(wire, .init = setup, .fini = teardown, .timeout = 120);

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static Berth__V1__Task *fetch_one(const char *worker, const char *topic, uint64_t lock_ms,
                                  Berth__V1__Response **keep)
{
    Berth__V1__Response *r = w_fetch(C, worker, topic, 1, lock_ms, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_not_null(r->fetch);
    cr_assert_eq(r->fetch->n_tasks, 1);
    *keep = r;
    return r->fetch->tasks[0];
}

static void expect_verdict(Berth__V1__Response *r, Berth__V1__Status__Verdict v)
{
    cr_assert_neq(r->status->code, BERTH__V1__CODE__OK);
    cr_assert(r->status->has_verdict);
    cr_assert_eq(r->status->verdict, v, "verdict %d, expected %d: %s", r->status->verdict, v,
                 r->status->message);
    cr_assert_eq(r->method_case, BERTH__V1__RESPONSE__METHOD__NOT_SET,
                 "a failure carries no payload");
    w_free(r);
}

DTest(wire, submit_fetch_complete_round_trip)
{
    char *id = w_submit_id(C, "orders", "{\"n\":1}");
    Berth__V1__Response *f;
    Berth__V1__Task *t = fetch_one("w1", "orders", 0, &f);
    cr_assert_str_eq(t->id, id);
    cr_assert_str_eq(t->topic, "orders");
    cr_assert_eq(t->payload.len, 7);
    cr_assert_eq(memcmp(t->payload.data, "{\"n\":1}", 7), 0);
    cr_assert_eq(t->attempt, 1);
    cr_assert_eq(t->retries_left, 2);
    cr_assert_eq(strlen(t->lock_token), 32);
    Berth__V1__Response *c =
        w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "w1", t->lock_token);
    w_expect_code(c, BERTH__V1__CODE__OK);
    cr_assert_eq(c->method_case, BERTH__V1__RESPONSE__METHOD_COMPLETE);
    w_free(c);
    w_free(f);
    free(id);
}

DTest(wire, every_verdict_over_the_wire)
{
    char *id = w_submit_id(C, "v", "p");
    Berth__V1__Response *f1;
    Berth__V1__Task *t = fetch_one("w1", "v", 60000, &f1);
    char *tok1 = strdup(t->lock_token);
    w_free(f1);
    /* LOCK_LOST: released. */
    w_free(w_guarded(C, BERTH__V1__REQUEST__METHOD_RELEASE, id, "w1", tok1));
    expect_verdict(w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, id, "w1", tok1),
                   BERTH__V1__STATUS__VERDICT__LOCK_LOST);
    /* LOCK_HELD: another worker claimed it. */
    Berth__V1__Response *f2;
    t = fetch_one("w2", "v", 60000, &f2);
    char *tok2 = strdup(t->lock_token);
    w_free(f2);
    expect_verdict(w_guarded(C, BERTH__V1__REQUEST__METHOD_EXTEND_LOCK, id, "w1", tok1),
                   BERTH__V1__STATUS__VERDICT__LOCK_HELD);
    /* TERMINAL: the budget (2) is spent. The first failure asks to be
     * retried at once, so the second claim needs no waiting. */
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    Berth__V1__FailRequest fr = BERTH__V1__FAIL_REQUEST__INIT;
    fr.task_id = id;
    fr.worker_id = "w2";
    fr.lock_token = tok2;
    fr.has_retry_in_ms = 1;
    fr.retry_in_ms = 0;
    req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
    req.fail = &fr;
    Berth__V1__Response *r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_not(r->fail->terminal);
    cr_assert_eq(r->fail->retries_left, 1);
    w_free(r);
    Berth__V1__Response *f3;
    t = fetch_one("w3", "v", 60000, &f3);
    char *tok3 = strdup(t->lock_token);
    w_free(f3);
    fr.worker_id = "w3";
    fr.lock_token = tok3;
    r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert(r->fail->terminal);
    w_free(r);
    expect_verdict(w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, id, "w3", tok3),
                   BERTH__V1__STATUS__VERDICT__TERMINAL);
    /* NOT_FOUND. */
    expect_verdict(w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE,
                             "00000000000000000000000000000000", "w1", tok1),
                   BERTH__V1__STATUS__VERDICT__NOT_FOUND);
    free(id);
    free(tok1);
    free(tok2);
    free(tok3);
}

DTest(wire, bounds_are_rejected_with_field_and_limit)
{
    Berth__V1__Response *r = w_fetch(C, "w", "b", 1001, 0, 0);
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_str_eq(r->status->field, "max_tasks");
    cr_assert(r->status->has_limit);
    cr_assert_eq(r->status->limit, 1000);
    w_free(r);
    r = w_fetch(C, "w", "b", 1, 3600001, 0);
    cr_assert_str_eq(r->status->field, "lock_ms");
    cr_assert_eq(r->status->limit, 3600000);
    w_free(r);
    r = w_fetch(C, "w", "b", 1, 0, 30001);
    cr_assert_str_eq(r->status->field, "wait_ms");
    cr_assert_eq(r->status->limit, 30000);
    w_free(r);
}

DTest(wire, omitted_bounds_take_the_defaults)
{
    for (int i = 0; i < 12; i++)
        free(w_submit_id(C, "d", "p"));
    uint64_t before = now_ms();
    Berth__V1__Response *r = w_fetch(C, "w", "d", 0, 0, 0);
    uint64_t after = now_ms();
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->fetch->n_tasks, 10, "the default batch");
    uint64_t exp = r->fetch->tasks[0]->lock_expires_at_ms;
    cr_assert_geq(exp, before + 30000 - 1000, "the default lock (30 s), not the ceiling");
    cr_assert_leq(exp, after + 30000 + 1000);
    w_free(r);
}

static void *poll_thread(void *arg)
{
    *(Berth__V1__Response **)arg = w_fetch(C, "w", "lp", 1, 0, 25000);
    return NULL;
}

DTest(wire, a_long_poll_is_woken_by_a_park_not_by_its_deadline)
{
    Berth__V1__Response *r = NULL;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, poll_thread, &r), 0);
    struct timespec pause = {0, 200 * 1000000L};
    nanosleep(&pause, NULL); /* sequencing only: let the fetch start waiting */
    uint64_t t0 = now_ms();
    free(w_submit_id(C, "lp", "wake"));
    pthread_join(th, NULL);
    uint64_t waited = now_ms() - t0;
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->fetch->n_tasks, 1);
    cr_assert_lt(waited, 10000, "answered by the park, long before its 25 s deadline");
    w_free(r);
}

DTest(wire, a_long_poll_ends_empty_and_ok_at_wait_ms)
{
    uint64_t t0 = now_ms();
    Berth__V1__Response *r = w_fetch(C, "w", "empty", 1, 0, 300);
    uint64_t took = now_ms() - t0;
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_not_null(r->fetch);
    cr_assert_eq(r->fetch->n_tasks, 0);
    cr_assert_geq(took, 290, "it waited its wait_ms");
    w_free(r);
}

#define N_POLLERS 200

static void *idle_poller(void *arg)
{
    Berth__V1__Response **out = arg;
    *out = w_fetch(C, "idle", "nothing-here", 1, 0, 4000);
    return NULL;
}

DTest(wire, completions_flow_while_200_workers_long_poll)
{
    static pthread_t th[N_POLLERS];
    static Berth__V1__Response *rs[N_POLLERS];
    for (int i = 0; i < N_POLLERS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, idle_poller, &rs[i]), 0);
    struct timespec pause = {0, 300 * 1000000L};
    nanosleep(&pause, NULL);
    /* berthd started with 4 contexts: these need the pool to have grown. */
    for (int i = 0; i < 20; i++) {
        char *id = w_submit_id(C, "busy", "p");
        Berth__V1__Response *f;
        Berth__V1__Task *t = fetch_one("worker", "busy", 0, &f);
        cr_assert_str_eq(t->id, id);
        Berth__V1__Response *c =
            w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "worker", t->lock_token);
        w_expect_code(c, BERTH__V1__CODE__OK);
        w_free(c);
        w_free(f);
        free(id);
    }
    for (int i = 0; i < N_POLLERS; i++) {
        pthread_join(th[i], NULL);
        w_expect_code(rs[i], BERTH__V1__CODE__OK);
        cr_assert_eq(rs[i]->fetch->n_tasks, 0);
        w_free(rs[i]);
    }
}

DTest(wire, complete_batch_answers_in_order)
{
    char *a = w_submit_id(C, "cb", "1"), *b = w_submit_id(C, "cb", "2");
    Berth__V1__Response *f = w_fetch(C, "w", "cb", 2, 0, 0);
    cr_assert_eq(f->fetch->n_tasks, 2);
    Berth__V1__CompleteRequest items[3] = {BERTH__V1__COMPLETE_REQUEST__INIT,
                                           BERTH__V1__COMPLETE_REQUEST__INIT,
                                           BERTH__V1__COMPLETE_REQUEST__INIT};
    Berth__V1__CompleteRequest *ip[3] = {&items[0], &items[1], &items[2]};
    items[0].task_id = f->fetch->tasks[1]->id;
    items[0].worker_id = "w";
    items[0].lock_token = f->fetch->tasks[1]->lock_token;
    items[1].task_id = "ffffffffffffffffffffffffffffffff";
    items[1].worker_id = "w";
    items[1].lock_token = f->fetch->tasks[1]->lock_token;
    items[2].task_id = f->fetch->tasks[0]->id;
    items[2].worker_id = "w";
    items[2].lock_token = "00000000000000000000000000000000";
    Berth__V1__CompleteBatchRequest cb = BERTH__V1__COMPLETE_BATCH_REQUEST__INIT;
    cb.n_items = 3;
    cb.items = ip;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE_BATCH;
    req.complete_batch = &cb;
    Berth__V1__Response *r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->complete_batch->n_statuses, 3);
    cr_assert_eq(r->complete_batch->statuses[0]->code, BERTH__V1__CODE__OK);
    cr_assert_eq(r->complete_batch->statuses[1]->verdict, BERTH__V1__STATUS__VERDICT__NOT_FOUND);
    cr_assert_eq(r->complete_batch->statuses[2]->verdict, BERTH__V1__STATUS__VERDICT__LOCK_HELD);
    w_free(r);
    w_free(f);
    free(a);
    free(b);
}

DTest(wire, a_fetch_carries_completions_and_answers_their_statuses)
{
    char *a = w_submit_id(C, "fu", "1"), *b = w_submit_id(C, "fu", "2");
    Berth__V1__Response *f = w_fetch(C, "w", "fu", 1, 0, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    const char *token = f->fetch->tasks[0]->lock_token;
    const char *ids[] = {f->fetch->tasks[0]->id, "ffffffffffffffffffffffffffffffff"};
    const char *tokens[] = {token, token};
    Berth__V1__Response *r = w_fetch_completing(C, "w", "fu", 0, ids, tokens, 2);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->fetch->n_complete_statuses, 2);
    cr_assert_eq(r->fetch->complete_statuses[0]->code, BERTH__V1__CODE__OK);
    cr_assert_eq(r->fetch->complete_statuses[1]->verdict, BERTH__V1__STATUS__VERDICT__NOT_FOUND);
    cr_assert_eq(r->fetch->n_tasks, 1, "then the fetch claimed the other one");
    cr_assert_str_eq(r->fetch->tasks[0]->id, b);
    w_free(r);

    /* Over --batch-max (1000) completions: refused, naming them. */
    const char **many = calloc(1001, sizeof(*many));
    for (size_t i = 0; i < 1001; i++)
        many[i] = ids[0];
    r = w_fetch_completing(C, "w", "fu", 0, many, many, 1001);
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_str_eq(r->status->field, "completes");
    cr_assert_eq(r->status->limit, 1000);
    w_free(r);
    free(many);
    w_free(f);
    free(a);
    free(b);
}

DTest(wire, submit_batch_and_idempotency_keys)
{
    Berth__V1__SubmitRequest items[2] = {BERTH__V1__SUBMIT_REQUEST__INIT,
                                         BERTH__V1__SUBMIT_REQUEST__INIT};
    Berth__V1__SubmitRequest *ip[2] = {&items[0], &items[1]};
    items[0].topic = "sb";
    items[1].topic = "sb";
    items[1].idempotency_key = "k";
    Berth__V1__SubmitBatchRequest sb = BERTH__V1__SUBMIT_BATCH_REQUEST__INIT;
    sb.n_items = 2;
    sb.items = ip;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
    req.submit_batch = &sb;
    Berth__V1__Response *r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->submit_batch->n_items, 2);
    char *keyed = strdup(r->submit_batch->items[1]->id);
    w_free(r);
    r = w_submit(C, "sb", NULL, "k");
    cr_assert(r->submit->duplicate);
    cr_assert_str_eq(r->submit->id, keyed);
    w_free(r);
    free(keyed);
}

static Berth__V1__Response *raw(const void *buf, size_t len)
{
    Berth__V1__Response *r;
    int rv = bc_call_raw(C, buf, len, 10000, &r);
    cr_assert_eq(rv, BC_OK, "no answer to a bad request: %s", bc_strerror(rv));
    cr_assert_not_null(r->status);
    return r;
}

DTest(wire, garbage_gets_an_error_and_the_daemon_keeps_serving)
{
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99};
    Berth__V1__Response *r = raw(junk, sizeof(junk));
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert(strstr(r->status->message, "malformed") != NULL);
    w_free(r);
    r = raw("", 0); /* a valid, empty envelope */
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert(strstr(r->status->message, "no method") != NULL);
    w_free(r);
    /* Field 99, length-delimited, empty: tag (99 << 3 | 2) = 794 as a varint. */
    const uint8_t unknown[] = {0x9A, 0x06, 0x00};
    r = raw(unknown, sizeof(unknown));
    w_expect_code(r, BERTH__V1__CODE__UNIMPLEMENTED);
    w_free(r);
    free(w_submit_id(C, "alive", "still"));
}

DTest(wire, an_oversize_message_gets_an_error_and_the_connection_stays)
{
    /* berthd's default ceiling is 8 MiB; its socket takes up to twice that. */
    size_t n = 9u << 20;
    uint8_t *big = calloc(1, n);
    Berth__V1__Response *r = raw(big, n);
    w_expect_code(r, BERTH__V1__CODE__RESOURCE_EXHAUSTED);
    cr_assert_str_eq(r->status->field, "request");
    cr_assert_eq(r->status->limit, 8u << 20);
    w_free(r);
    free(big);
    free(w_submit_id(C, "alive", "same connection")); /* same client, same pipe */
}

DTest(wire, events_are_published_with_their_subjects)
{
    int s = raw_sub(D.events);
    struct timespec pause = {0, 200 * 1000000L};
    nanosleep(&pause, NULL); /* a subscription needs its connection first */
    char *id = w_submit_id(C, "ev", "p");
    Berth__V1__Response *f;
    Berth__V1__Task *t = fetch_one("w", "ev", 0, &f);
    w_free(w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "w", t->lock_token));
    w_free(f);
    const char *want[] = {"task.parked.ev", "task.completed.ev"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        uint8_t *m = raw_event(s, "task.", &n);
        const char *body = (const char *)m;
        size_t sl = strnlen(body, n);
        cr_assert_str_eq(body, want[i]);
        Berth__V1__Event *ev = berth__v1__event__unpack(NULL, n - sl - 1, m + sl + 1);
        cr_assert_not_null(ev);
        cr_assert_str_eq(ev->task_id, id);
        cr_assert_str_eq(ev->topic, "ev");
        berth__v1__event__free_unpacked(ev, NULL);
        free(m);
    }
    close(s);
    free(id);
}

DTest(wire, a_small_message_that_decodes_huge_is_refused)
{
    /* Request{submit_batch: {items: [{}, {}, ...]}}: two bytes on the wire
     * per empty item, a hundred or more once decoded. */
    enum { N = 1000000 };
    size_t inner = 2 * (size_t)N;
    uint8_t *buf = malloc(inner + 8);
    size_t n = 0;
    buf[n++] = 0x12; /* field 2 (submit_batch), length-delimited */
    for (size_t v = inner;; v >>= 7) {
        buf[n++] = (uint8_t)(v & 0x7f) | (v >= 0x80 ? 0x80 : 0);
        if (v < 0x80)
            break;
    }
    for (int i = 0; i < N; i++) {
        buf[n++] = 0x0a; /* items: field 1, length-delimited */
        buf[n++] = 0x00;
    }
    Berth__V1__Response *r = raw(buf, n);
    w_expect_code(r, BERTH__V1__CODE__RESOURCE_EXHAUSTED);
    cr_assert_str_eq(r->status->field, "request");
    w_free(r);
    free(buf);
    free(w_submit_id(C, "alive", "after the attempt"));
}

/* bc_open_direct speaks the REQ protocol over TCP by itself: the same
 * surface, the same answers. */
DTest(wire, a_direct_connection_speaks_the_same_surface)
{
    bc *d = NULL;
    char err[256];
    cr_assert_eq(bc_open_direct(D.operate, &d, err, sizeof(err)), BC_OK, "%s", err);
    char *id = w_submit_id(C, "direct", "p");
    Berth__V1__Response *f = w_fetch(d, "wd", "direct", 1, 0, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, 1);
    Berth__V1__Task *t = f->fetch->tasks[0];
    cr_assert_str_eq(t->id, id);
    Berth__V1__Response *c =
        w_guarded(d, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "wd", t->lock_token);
    w_expect_code(c, BERTH__V1__CODE__OK);
    w_free(c);
    c = w_guarded(d, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "wd", t->lock_token);
    expect_verdict(c, BERTH__V1__STATUS__VERDICT__NOT_FOUND);
    w_free(f);
    const uint8_t junk[] = {0xff, 0xff, 0xff};
    Berth__V1__Response *r = NULL;
    cr_assert_eq(bc_call_raw(d, junk, sizeof(junk), 0, &r), BC_OK);
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    w_free(r);
    bc_close(d);
    free(id);
}

DTest(wire, a_direct_call_that_timed_out_does_not_take_the_next_calls_answer)
{
    bc *d = NULL;
    cr_assert_eq(bc_open_direct(D.operate, &d, NULL, 0), BC_OK);
    Berth__V1__FetchRequest fr = BERTH__V1__FETCH_REQUEST__INIT;
    char *topics[] = {"nothing-here"};
    fr.worker_id = "w";
    fr.n_topics = 1;
    fr.topics = topics;
    fr.has_wait_ms = 1;
    fr.wait_ms = 300;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &fr;
    Berth__V1__Response *r = NULL;
    cr_assert_eq(bc_call(d, &req, 50, &r), BC_EUNREACHABLE);
    struct timespec pause = {0, 600 * 1000000L};
    nanosleep(&pause, NULL); /* the fetch's empty answer is on its way now */
    r = w_submit(d, "after", "p", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->method_case, BERTH__V1__RESPONSE__METHOD_SUBMIT);
    w_free(r);
    bc_close(d);
}

DTest(wire, a_direct_connection_reports_bad_urls_and_absent_servers)
{
    bc *d = NULL;
    char err[256];
    cr_assert_eq(bc_open_direct("ipc:///tmp/x", &d, err, sizeof(err)), BC_EINVAL);
    cr_assert(strstr(err, "tcp://host:port") != NULL, "%s", err);
    cr_assert_eq(bc_open_direct("tcp://127.0.0.1:1", &d, err, sizeof(err)), BC_EUNREACHABLE);
    cr_assert_null(d);
}

/* A subscriber that is connected once the pause after it has passed. */
static int subscriber(void)
{
    return raw_sub(D.events);
}

/* The next event under prefix is subject. */
static void expect_event(int s, const char *prefix, const char *subject)
{
    size_t n;
    uint8_t *m = raw_event(s, prefix, &n);
    cr_assert_str_eq((const char *)m, subject);
    free(m);
}

/* berthd skips events while nobody subscribes; it must go on publishing
 * to the subscribers that stay when another one leaves or comes back. */
DTest(wire, events_reach_the_subscribers_that_stay)
{
    int a = subscriber(), b = subscriber();
    struct timespec pause = {0, 200 * 1000000L};
    nanosleep(&pause, NULL);
    free(w_submit_id(C, "stay1", "p"));
    expect_event(a, "task.parked.", "task.parked.stay1");
    expect_event(b, "task.parked.", "task.parked.stay1");
    close(b);
    nanosleep(&pause, NULL);
    free(w_submit_id(C, "stay2", "p"));
    expect_event(a, "task.parked.", "task.parked.stay2");
    close(a);
    nanosleep(&pause, NULL);
    free(w_submit_id(C, "unseen", "p")); /* nobody listens */
    int c = subscriber();
    nanosleep(&pause, NULL);
    free(w_submit_id(C, "stay3", "p"));
    expect_event(c, "task.parked.", "task.parked.stay3");
    close(c);
}

/* ---- calls ---- */

static char *call_id(const char *topic, const char *payload, Berth__V1__RetryPolicy *retry)
{
    Berth__V1__CallRequest call = BERTH__V1__CALL_REQUEST__INIT;
    call.topic = (char *)topic;
    call.has_payload = 1;
    call.payload.data = (uint8_t *)payload;
    call.payload.len = strlen(payload);
    call.retry = retry;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
    req.call = &call;
    Berth__V1__Response *r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_not_null(r->call);
    cr_assert_not(r->call->duplicate);
    char *id = strdup(r->call->instance_id);
    w_free(r);
    return id;
}

typedef struct awaiter {
    const char *id;
    uint64_t wait_ms;
    Berth__V1__Response *r;
    uint64_t took_ms;
} awaiter;

static void *await_on(void *arg)
{
    awaiter *a = arg;
    Berth__V1__AwaitCallRequest w = BERTH__V1__AWAIT_CALL_REQUEST__INIT;
    w.instance_id = (char *)a->id;
    w.has_wait_ms = 1;
    w.wait_ms = a->wait_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_AWAIT_CALL;
    req.await_call = &w;
    uint64_t t0 = now_ms();
    a->r = w_call(C, &req, 60000);
    a->took_ms = now_ms() - t0;
    return NULL;
}

DTest(wire, a_caller_awaiting_is_woken_by_the_worker_s_completion)
{
    int ev = subscriber();
    char *id = call_id("calls", "what is 6*7?", NULL);
    awaiter a = {.id = id, .wait_ms = 25000};
    pthread_t th;
    pthread_create(&th, NULL, await_on, &a);
    struct timespec pause = {0, 200 * 1000000L};
    nanosleep(&pause, NULL); /* the await is waiting, and the subscription is up */
    Berth__V1__Response *keep;
    Berth__V1__Task *t = fetch_one("w", "calls", 30000, &keep);
    cr_assert_str_eq(t->instance_id, id);
    bool named = false;
    for (size_t i = 0; i < t->n_headers; i++)
        named |= strcmp(t->headers[i]->key, "berth-instance-id") == 0 &&
                 strcmp(t->headers[i]->value, id) == 0;
    cr_assert(named, "the task names its call in a reserved header");
    Berth__V1__Response *r = w_answer(C, t, "w", "42", 2);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    w_free(keep);
    pthread_join(th, NULL);
    w_expect_code(a.r, BERTH__V1__CODE__OK);
    cr_assert_lt(a.took_ms, 20000, "woken by the completion, not by its wait");
    Berth__V1__Instance *in = a.r->await_call->instance;
    cr_assert_eq(in->state, BERTH__V1__INSTANCE__STATE__RESOLVED);
    cr_assert_str_eq(in->id, id);
    cr_assert_eq(in->result->payload.len, 2);
    cr_assert_eq(memcmp(in->result->payload.data, "42", 2), 0);
    w_free(a.r);
    char subject[64];
    snprintf(subject, sizeof(subject), "instance.resolved.%s", id);
    expect_event(ev, "instance.resolved.", subject);
    close(ev);
    free(id);
}

DTest(wire, a_call_s_timeout_and_its_bounds_over_the_wire)
{
    Berth__V1__RetryPolicy p = BERTH__V1__RETRY_POLICY__INIT;
    p.has_max_attempts = 1;
    p.max_attempts = 1;
    Berth__V1__CallRequest call = BERTH__V1__CALL_REQUEST__INIT;
    call.topic = "calls2";
    call.retry = &p;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
    req.call = &call;
    Berth__V1__Response *r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_str_eq(r->status->field, "retry.timeout_ms");
    w_free(r);
    p.has_timeout_ms = 1;
    p.timeout_ms = 604800001;
    r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_eq(r->status->limit, 604800000);
    w_free(r);

    p.timeout_ms = 300; /* nobody works calls2: it times out */
    char *id = call_id("calls2", "q", &p);
    awaiter a = {.id = id, .wait_ms = 20000};
    await_on(&a);
    w_expect_code(a.r, BERTH__V1__CODE__OK);
    Berth__V1__Instance *in = a.r->await_call->instance;
    cr_assert_eq(in->state, BERTH__V1__INSTANCE__STATE__FAILED);
    cr_assert_str_eq(in->error->code, "TIMEOUT");
    w_free(a.r);
    a.id = "00000000000000000000000000000000";
    await_on(&a);
    w_expect_code(a.r, BERTH__V1__CODE__NOT_FOUND);
    w_free(a.r);
    free(id);
}

/* 500 callers awaiting at once, over two connections, while a worker keeps
 * completing: every await is answered once, with its own call's result. */
DTest(wire, five_hundred_awaits_while_a_worker_completes)
{
    enum { N = 500, CONNS = 2 };
    static char ids[N][33];
    for (int i = 0; i < N; i++) {
        char payload[32];
        snprintf(payload, sizeof(payload), "call-%d", i);
        char *id = call_id("many", payload, NULL);
        snprintf(ids[i], sizeof(ids[i]), "%s", id);
        free(id);
    }
    int fd[CONNS];
    for (int c = 0; c < CONNS; c++)
        fd[c] = raw_req(D.operate);
    static uint8_t frame[256], body[128];
    for (int i = 0; i < N; i++) {
        Berth__V1__AwaitCallRequest w = BERTH__V1__AWAIT_CALL_REQUEST__INIT;
        w.instance_id = ids[i];
        w.has_wait_ms = 1;
        w.wait_ms = 25000;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_AWAIT_CALL;
        req.await_call = &w;
        size_t len = berth__v1__request__pack(&req, body);
        size_t n = raw_frame(frame, 0x80000000u | (uint32_t)i, body, len);
        raw_write_all(fd[i % CONNS], frame, n);
    }
    struct timespec pause = {0, 200 * 1000000L};
    nanosleep(&pause, NULL); /* they wait */
    int done = 0;
    while (done < N) {
        Berth__V1__Response *f = w_fetch(C, "w", "many", 100, 30000, 1000);
        w_expect_code(f, BERTH__V1__CODE__OK);
        for (size_t k = 0; k < f->fetch->n_tasks; k++) {
            const Berth__V1__Task *t = f->fetch->tasks[k];
            char answer[40];
            int n = snprintf(answer, sizeof(answer), "%.*s!", (int)t->payload.len,
                             (const char *)t->payload.data);
            Berth__V1__Response *r = w_answer(C, t, "w", answer, (size_t)n);
            w_expect_code(r, BERTH__V1__CODE__OK);
            w_free(r);
            done++;
        }
        w_free(f);
    }
    static bool seen[N];
    for (int k = 0; k < N; k++) {
        uint32_t rid;
        Berth__V1__Response *r = raw_answer(fd[k % CONNS], &rid);
        int i = (int)(rid & 0x7fffffffu);
        cr_assert_lt(i, N);
        cr_assert_not(seen[i], "await %d answered twice", i);
        seen[i] = true;
        w_expect_code(r, BERTH__V1__CODE__OK);
        const Berth__V1__Instance *in = r->await_call->instance;
        cr_assert_str_eq(in->id, ids[i]);
        cr_assert_eq(in->state, BERTH__V1__INSTANCE__STATE__RESOLVED);
        char want[40];
        int n = snprintf(want, sizeof(want), "call-%d!", i);
        cr_assert_eq(in->result->payload.len, (size_t)n);
        cr_assert_eq(memcmp(in->result->payload.data, want, (size_t)n), 0);
        w_free(r);
    }
    for (int c = 0; c < CONNS; c++)
        close(fd[c]);
}

/* ---- long polls of a connection that is gone ---- */

typedef struct poller {
    bc *c;
    const char *topic;
    long wait_ms;
    Berth__V1__Response *r; /* NULL: the call failed (its socket closed) */
} poller;

static void *poll_on(void *arg)
{
    poller *p = arg;
    char *topics[] = {(char *)p->topic};
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    f.worker_id = "gone";
    f.n_topics = 1;
    f.topics = topics;
    f.has_wait_ms = 1;
    f.wait_ms = (uint64_t)p->wait_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &f;
    p->r = NULL;
    if (bc_call(p->c, &req, 30000, &p->r) != BC_OK)
        p->r = NULL;
    return NULL;
}

DTest(wire, a_closed_connection_s_long_polls_claim_nothing)
{
    /* A client that pipelines long polls and hangs up (by hand: a client
     * library would not let its socket close under its calls). */
    enum { N = 16 };
    int fd = raw_req(D.operate);
    uint8_t body[128], f[256];
    size_t bl = raw_pack_fetch(body, "orphan", 1, 25000);
    for (uint32_t i = 0; i < N; i++)
        raw_write_all(fd, f, raw_frame(f, 100 + i, body, bl));
    struct timespec pause = {0, 300 * 1000000L};
    nanosleep(&pause, NULL); /* sequencing only: let the fetches wait */
    close(fd);
    nanosleep(&pause, NULL); /* sequencing only: let berthd hear it */

    /* Work parked now is for those still there: not locked by the dead. */
    char *id = w_submit_id(C, "orphan", "for the living");
    Berth__V1__Response *r;
    Berth__V1__Task *t = fetch_one("alive", "orphan", 0, &r);
    cr_assert_str_eq(t->id, id);
    w_free(r);
    free(id);
}

DTest(wire, a_connection_may_keep_only_so_many_fetches_waiting)
{
    enum { N = 3 };
    static const char *const extra[] = {"--waits-per-connection", "2", NULL};
    bc_close(C);
    d_cleanup(&D);
    d_start(&D, extra);
    C = d_client(&D);
    bc *one = d_client(&D);
    static poller ps[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        ps[i] = (poller){one, "few", 1500, NULL};
        cr_assert_eq(pthread_create(&th[i], NULL, poll_on, &ps[i]), 0);
    }
    int refused = 0, empty = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        cr_assert_not_null(ps[i].r);
        if (ps[i].r->status->code == BERTH__V1__CODE__RESOURCE_EXHAUSTED) {
            refused++;
            cr_assert(ps[i].r->status->retryable);
        } else {
            w_expect_code(ps[i].r, BERTH__V1__CODE__OK);
            cr_assert_eq(ps[i].r->fetch->n_tasks, 0);
            empty++;
        }
        w_free(ps[i].r);
    }
    cr_assert_eq(refused, 1, "the third waiting fetch of one connection is refused");
    cr_assert_eq(empty, 2);
    bc_close(one);
}
