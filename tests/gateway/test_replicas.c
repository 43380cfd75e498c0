/* Replicas of berthd on one PostgreSQL database (pg/README.md §5, §6.3):
 * real berthd processes started with --store on a throwaway cluster,
 * spoken to over real sockets. A task fetched through one replica is
 * completed through another, with the verdicts of one berthd; one
 * idempotency key is one task whichever replicas it reaches at once; a
 * park through one wakes a long poll waiting on another (LISTEN/NOTIFY)
 * within milliseconds, a delayed task wakes them at its instant; a replica
 * killed with tasks locked loses nothing and its locks expire; a lost
 * listener or engine connection is reopened by berthd itself, with no
 * acknowledged submit and no doorbell lost; idle long polls run no
 * statement; a database berthd cannot serve is refused at boot with the
 * exit status that says why.
 *
 * One cluster for the binary (pgtmp; its runner hooks come with
 * pgtmp_hooks.h, included here and nowhere else in this binary); each test
 * makes its own database and stops every berthd it started. */
#define _GNU_SOURCE /* memmem, rand_r, strdup, pthread barriers */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"
#include "tests/support/pgtmp.h"
#include "tests/support/pgtmp_hooks.h"
#include "tests/support/timing.h"

enum { REPLICAS = 3 };
static daemon_proc R[REPLICAS]; /* A, B, C */
static char URI[256];
static PGconn *SQL;

static void teardown(void)
{
    for (int i = 0; i < REPLICAS; i++)
        if (R[i].dir[0] != '\0')
            d_cleanup(&R[i]);
    if (SQL != NULL)
        PQfinish(SQL);
    SQL = NULL;
}

TestSuite(replicas, .fini = teardown, .timeout = 60);

/* A test whose verdict includes every replica still running stopping
 * cleanly on SIGTERM (as DTest does for one; a .fini's is not counted). */
#define RTest(name)                                                                                \
    static void replicas_##name##_body(void);                                                      \
    Test(replicas, name)                                                                           \
    {                                                                                              \
        replicas_##name##_body();                                                                  \
        for (int i = 0; i < REPLICAS; i++)                                                         \
            d_stop(&R[i]);                                                                         \
    }                                                                                              \
    static void replicas_##name##_body(void)

/* ---- time ---- */

/* ---- the database and the replicas ---- */

/* A fresh database for this test, and a connection to it for checks. */
static void fresh_db(const char *name)
{
    char db[64];
    snprintf(db, sizeof db, "rep_%s", name);
    pgtmp_createdb(db, URI, sizeof URI);
    SQL = pgtmp_connect(URI);
}

/* Starts replicas 0..n-1 on the test's database, one after the other
 * (the first migrates it). */
static void start(int n, const char *const *extra)
{
    for (int i = 0; i < n; i++)
        d_start_store(&R[i], URI, extra);
}

/* The cluster's port, from the test's URI (postgresql://berth@127.0.0.1:PORT/db). */
static int pg_port(void)
{
    const char *colon = strrchr(URI, ':');
    cr_assert_not_null(colon);
    return atoi(colon + 1);
}

/* The pids of replica d's backends named app ("berthd": its engine
 * connections; "berthd listener"), found by the client ports of its
 * connections, in *pids (at most max, ascending); returns how many. */
static int backends_of(const daemon_proc *d, const char *app, long *pids, int max)
{
    int ports[32];
    int n = d_peer_ports(d, pg_port(), ports, 32);
    if (n == 0)
        return 0;
    char sql[768], list[384] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", i ? "," : "", ports[i]);
    snprintf(sql, sizeof sql,
             "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND "
             "application_name = '%s' AND client_port IN (%s) ORDER BY pid",
             app, list);
    PGresult *r = PQexec(SQL, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(SQL));
    int got = 0;
    for (int i = 0; i < PQntuples(r) && got < max; i++)
        pids[got++] = strtol(PQgetvalue(r, i, 0), NULL, 10);
    PQclear(r);
    return got;
}

/* The one backend of d named app (0: none); fails the test if several. */
static long backend_of(const daemon_proc *d, const char *app)
{
    long pids[8];
    int n = backends_of(d, app, pids, 8);
    cr_assert_leq(n, 1, "%d backends named %s", n, app);
    return n ? pids[0] : 0;
}

/* Terminates the backends pids[0..n-1]. */
static void terminate(const long *pids, int n)
{
    for (int i = 0; i < n; i++) {
        char sql[96];
        snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%ld)::int", pids[i]);
        cr_assert_eq(pgtmp_one_long(SQL, sql), 1, "backend %ld", pids[i]);
    }
}

/* Waits until replica d holds at least n waiting fetches (5 s at most). */
static void await_waiting(const daemon_proc *d, uint64_t n)
{
    for (int i = 0; i < 2500 && d_waiting_fetches(d) < n; i++)
        sleep_ms(2);
    cr_assert_geq(d_waiting_fetches(d), n, "the fetch never waited in berthd");
}

/* ---- requests ---- */

static char *submitted_id(Berth__V1__Response *r)
{
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_not_null(r->submit);
    char *id = strdup(r->submit->id);
    w_free(r);
    return id;
}

/* A submit with a delay and a priority (0: omitted). */
static Berth__V1__Response *submit_in(bc *c, const char *topic, const char *payload,
                                      uint64_t delay_ms, uint32_t priority)
{
    Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
    s.topic = (char *)topic;
    s.has_payload = 1;
    s.payload.data = (uint8_t *)payload;
    s.payload.len = strlen(payload);
    s.has_delay_ms = delay_ms != 0;
    s.delay_ms = delay_ms;
    s.has_priority = priority != 0;
    s.priority = priority;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    req.submit = &s;
    return w_call(c, &req, 0);
}

static void expect_verdict(Berth__V1__Response *r, Berth__V1__Code code,
                           Berth__V1__Status__Verdict v)
{
    w_expect_code(r, code);
    cr_assert(r->status->has_verdict, "no verdict: %s", r->status->message);
    cr_assert_eq(r->status->verdict, v, "verdict %d, expected %d: %s", r->status->verdict, v,
                 r->status->message);
    cr_assert_eq(r->method_case, BERTH__V1__RESPONSE__METHOD__NOT_SET,
                 "a failure carries no payload");
    w_free(r);
}

/* One task fetched (wait 0); the response is kept in *keep. */
static Berth__V1__Task *fetch_one(bc *c, const char *worker, const char *topic, uint64_t lock_ms,
                                  Berth__V1__Response **keep)
{
    Berth__V1__Response *r = w_fetch(c, worker, topic, 1, lock_ms, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->fetch->n_tasks, 1, "%s: no task to fetch", topic);
    *keep = r;
    return r->fetch->tasks[0];
}

static Berth__V1__Response *extend(bc *c, const char *id, const char *worker, const char *token,
                                   uint64_t lock_ms)
{
    Berth__V1__ExtendLockRequest x = BERTH__V1__EXTEND_LOCK_REQUEST__INIT;
    x.task_id = (char *)id;
    x.worker_id = (char *)worker;
    x.lock_token = (char *)token;
    x.has_lock_ms = 1;
    x.lock_ms = lock_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_EXTEND_LOCK;
    req.extend_lock = &x;
    return w_call(c, &req, 0);
}

static Berth__V1__Response *fail_now(bc *c, const char *id, const char *worker, const char *token)
{
    Berth__V1__FailRequest f = BERTH__V1__FAIL_REQUEST__INIT;
    f.task_id = (char *)id;
    f.worker_id = (char *)worker;
    f.lock_token = (char *)token;
    f.has_retry_in_ms = 1;
    f.retry_in_ms = 0;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
    req.fail = &f;
    return w_call(c, &req, 0);
}

/* An admin call on replica d (no key: the suite runs without one). */
static Berth__V1__AdminResponse *admin(const daemon_proc *d, Berth__V1__AdminRequest *req)
{
    bc *a;
    char err[256];
    cr_assert_eq(bc_open(d->admin, &a, err, sizeof err), BC_OK, "%s", err);
    Berth__V1__AdminResponse *r = NULL;
    cr_assert_eq(bc_admin_call(a, req, NULL, 0, 10000, &r), BC_OK);
    bc_close(a);
    cr_assert_not_null(r->status);
    return r;
}

static Berth__V1__AdminResponse *get_task(const daemon_proc *d, const char *id)
{
    Berth__V1__GetTaskRequest g = BERTH__V1__GET_TASK_REQUEST__INIT;
    g.id = (char *)id;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_GET_TASK;
    req.get_task = &g;
    return admin(d, &req);
}

/* A fetch of several topics (max 1, the default lock). */
static Berth__V1__Response *fetch_topics(bc *c, const char *worker, char **topics, size_t n,
                                         long wait_ms)
{
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    f.worker_id = (char *)worker;
    f.n_topics = n;
    f.topics = topics;
    f.has_max_tasks = 1;
    f.max_tasks = 1;
    f.has_wait_ms = 1;
    f.wait_ms = (uint64_t)wait_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &f;
    return w_call(c, &req, (int)wait_ms + 15000);
}

/* A fetch run on its own thread (a long poll), timed; of topics[] when
 * n_topics, else of topic. */
typedef struct poller {
    bc *c;
    const char *worker, *topic;
    char **topics;
    size_t n_topics;
    uint32_t max;
    uint64_t lock_ms;
    long wait_ms;
    pthread_t th;
    uint64_t start_us, answer_us, answer_real_ms;
    Berth__V1__Response *r;
} poller;

static void *poll_run(void *arg)
{
    poller *p = arg;
    p->start_us = mono_us();
    p->r = p->n_topics ? fetch_topics(p->c, p->worker, p->topics, p->n_topics, p->wait_ms)
                       : w_fetch(p->c, p->worker, p->topic, p->max, p->lock_ms, p->wait_ms);
    p->answer_us = mono_us();
    p->answer_real_ms = real_ms();
    return NULL;
}

/* Milliseconds from `from_us` to a poller's answer. The answer may come
 * on its thread before the main thread has read the clock after the
 * submit's own answer: that counts as 0, never as a wrapped difference. */
static double answered_after_ms(const poller *p, uint64_t from_us)
{
    return p->answer_us > from_us ? (double)(p->answer_us - from_us) / 1000.0 : 0.0;
}

static void poll_start(poller *p)
{
    cr_assert_eq(pthread_create(&p->th, NULL, poll_run, p), 0);
}

static void poll_join(poller *p)
{
    pthread_join(p->th, NULL);
    cr_assert_not_null(p->r);
    w_expect_code(p->r, BERTH__V1__CODE__OK);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- 1. one task, three replicas ---- */

RTest(fetched_through_one_completed_through_another_verdicts_as_on_one_berthd)
{
    fresh_db("verdicts");
    start(3, (const char *const[]){"--retries", "2", NULL});
    bc *a = d_client(&R[0]), *b = d_client(&R[1]), *c = d_client(&R[2]);

    /* Submitted through A, fetched through B, completed through C. */
    char *id = submitted_id(w_submit(a, "orders", "{\"n\":1}", NULL));
    Berth__V1__Response *f;
    Berth__V1__Task *t = fetch_one(b, "wb", "orders", 60000, &f);
    cr_assert_str_eq(t->id, id);
    cr_assert_eq(t->attempt, 1);
    cr_assert_eq(t->payload.len, 7);
    cr_assert_eq(memcmp(t->payload.data, "{\"n\":1}", 7), 0);
    /* C sees B's lock. */
    Berth__V1__AdminResponse *g = get_task(&R[2], id);
    cr_assert_eq(g->status->code, BERTH__V1__CODE__OK, "%s", g->status->message);
    cr_assert_eq(g->get_task->task->state, BERTH__V1__TASK_INFO__STATE__LOCKED);
    cr_assert_str_eq(g->get_task->task->worker_id, "wb");
    berth__v1__admin_response__free_unpacked(g, NULL);
    Berth__V1__Response *r =
        w_guarded(c, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "wb", t->lock_token);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->method_case, BERTH__V1__RESPONSE__METHOD_COMPLETE);
    w_free(r);
    /* Completed again through A: gone. */
    expect_verdict(w_guarded(a, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "wb", t->lock_token),
                   BERTH__V1__CODE__NOT_FOUND, BERTH__V1__STATUS__VERDICT__NOT_FOUND);
    g = get_task(&R[1], id);
    cr_assert_eq(g->status->code, BERTH__V1__CODE__NOT_FOUND, "%s", g->status->message);
    berth__v1__admin_response__free_unpacked(g, NULL);
    w_free(f);
    free(id);

    /* Another task: fetched through A, extended through C, released
     * through A; the old lock is lost through B, and held by C's claim. */
    id = submitted_id(w_submit(b, "orders", "two", NULL));
    t = fetch_one(a, "w1", "orders", 60000, &f);
    cr_assert_str_eq(t->id, id);
    uint64_t first_expiry = t->lock_expires_at_ms;
    r = extend(c, id, "w1", t->lock_token, 120000);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_gt(r->extend_lock->lock_expires_at_ms, first_expiry + 50000,
                 "extended through C: %llu, fetched with %llu",
                 (unsigned long long)r->extend_lock->lock_expires_at_ms,
                 (unsigned long long)first_expiry);
    w_free(r);
    r = w_guarded(a, BERTH__V1__REQUEST__METHOD_RELEASE, id, "w1", t->lock_token);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    expect_verdict(w_guarded(b, BERTH__V1__REQUEST__METHOD_COMPLETE, id, "w1", t->lock_token),
                   BERTH__V1__CODE__ABORTED, BERTH__V1__STATUS__VERDICT__LOCK_LOST);
    char *tok1 = strdup(t->lock_token);
    w_free(f);
    t = fetch_one(c, "w2", "orders", 60000, &f); /* released: fetchable at once */
    cr_assert_str_eq(t->id, id);
    cr_assert_eq(t->attempt, 2);
    expect_verdict(extend(a, id, "w1", tok1, 60000), BERTH__V1__CODE__ABORTED,
                   BERTH__V1__STATUS__VERDICT__LOCK_HELD);

    /* The failure budget (2) spent through two replicas: TERMINAL
     * through the third, and an incident every replica lists. */
    r = fail_now(b, id, "w2", t->lock_token);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_not(r->fail->terminal);
    w_free(r);
    w_free(f);
    t = fetch_one(a, "w3", "orders", 60000, &f);
    cr_assert_str_eq(t->id, id);
    cr_assert_eq(t->attempt, 3);
    r = fail_now(c, id, "w3", t->lock_token);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert(r->fail->terminal);
    w_free(r);
    expect_verdict(w_guarded(b, BERTH__V1__REQUEST__METHOD_COMPLETE, id, "w3", t->lock_token),
                   BERTH__V1__CODE__FAILED_PRECONDITION, BERTH__V1__STATUS__VERDICT__TERMINAL);
    Berth__V1__ListIncidentsRequest li = BERTH__V1__LIST_INCIDENTS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_INCIDENTS;
    req.list_incidents = &li;
    for (int k = 0; k < 3; k++) {
        g = admin(&R[k], &req);
        cr_assert_eq(g->status->code, BERTH__V1__CODE__OK, "%s", g->status->message);
        cr_assert_eq(g->list_incidents->n_incidents, 1, "replica %d", k);
        cr_assert_eq(g->list_incidents->incidents[0]->kind,
                     BERTH__V1__INCIDENT__KIND__TASK_TERMINAL);
        cr_assert_str_eq(g->list_incidents->incidents[0]->subject_id, id);
        berth__v1__admin_response__free_unpacked(g, NULL);
    }
    w_free(f);
    free(tok1);
    free(id);

    /* Priorities given through three replicas, fetched in their order
     * through one; completed fused in a fetch through another, and in a
     * batch through the third. */
    char *p5 = submitted_id(submit_in(a, "prio", "5", 0, 5));
    char *p1 = submitted_id(submit_in(b, "prio", "1", 0, 1));
    char *p3 = submitted_id(submit_in(c, "prio", "3", 0, 3));
    f = w_fetch(a, "wp", "prio", 3, 60000, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, 3);
    cr_assert_str_eq(f->fetch->tasks[0]->id, p1);
    cr_assert_str_eq(f->fetch->tasks[1]->id, p3);
    cr_assert_str_eq(f->fetch->tasks[2]->id, p5);
    cr_assert_eq(f->fetch->tasks[0]->priority, 1);
    const char *fused_id[] = {p1}, *fused_tok[] = {f->fetch->tasks[0]->lock_token};
    r = w_fetch_completing(b, "wp", "prio", 0, fused_id, fused_tok, 1);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->fetch->n_complete_statuses, 1);
    cr_assert_eq(r->fetch->complete_statuses[0]->code, BERTH__V1__CODE__OK, "%s",
                 r->fetch->complete_statuses[0]->message);
    cr_assert_eq(r->fetch->n_tasks, 0, "the others are held through A");
    w_free(r);
    Berth__V1__CompleteRequest items[3], *ip[3];
    const char *bids[3] = {p3, p5, p1};
    for (int k = 0; k < 3; k++) {
        berth__v1__complete_request__init(&items[k]);
        items[k].task_id = (char *)bids[k];
        items[k].worker_id = "wp";
        items[k].lock_token = f->fetch->tasks[k == 2 ? 0 : k + 1]->lock_token;
        ip[k] = &items[k];
    }
    Berth__V1__CompleteBatchRequest cb = BERTH__V1__COMPLETE_BATCH_REQUEST__INIT;
    cb.items = ip;
    cb.n_items = 3;
    Berth__V1__Request breq = BERTH__V1__REQUEST__INIT;
    breq.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE_BATCH;
    breq.complete_batch = &cb;
    r = w_call(c, &breq, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->complete_batch->n_statuses, 3);
    cr_assert_eq(r->complete_batch->statuses[0]->code, BERTH__V1__CODE__OK);
    cr_assert_eq(r->complete_batch->statuses[1]->code, BERTH__V1__CODE__OK);
    cr_assert_eq(r->complete_batch->statuses[2]->verdict, BERTH__V1__STATUS__VERDICT__NOT_FOUND,
                 "completed fused through B already");
    w_free(r);
    w_free(f);
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks WHERE topic = 'prio'"), 0);
    free(p1);
    free(p3);
    free(p5);
    bc_close(a);
    bc_close(b);
    bc_close(c);
}

/* ---- 2. one key, two replicas at once ---- */

enum { KEYS = 40 };
typedef struct keyed {
    bc *c;
    pthread_barrier_t *go;
    char ids[KEYS][33];
    bool dup[KEYS];
} keyed;

static void *submit_keys(void *arg)
{
    keyed *k = arg;
    for (int i = 0; i < KEYS; i++) {
        char key[32], payload[32];
        snprintf(key, sizeof key, "key-%d", i);
        snprintf(payload, sizeof payload, "%d", i);
        pthread_barrier_wait(k->go);
        Berth__V1__Response *r = w_submit(k->c, "keyed", payload, key);
        w_expect_code(r, BERTH__V1__CODE__OK);
        snprintf(k->ids[i], sizeof k->ids[i], "%s", r->submit->id);
        k->dup[i] = r->submit->has_duplicate && r->submit->duplicate;
        w_free(r);
    }
    return NULL;
}

/* submit_batch: BATCH keys per round, in key order or the reverse; the
 * answers kept by key. */
enum { BATCH_ROUNDS = 10, BATCH = 20 };
typedef struct batcher {
    bc *c;
    pthread_barrier_t *go;
    bool reverse;
    int code[BATCH_ROUNDS];
    char why[BATCH_ROUNDS][128];
    char ids[BATCH_ROUNDS][BATCH][33];
    bool dup[BATCH_ROUNDS][BATCH];
} batcher;

static void *submit_batches(void *arg)
{
    batcher *b = arg;
    for (int round = 0; round < BATCH_ROUNDS; round++) {
        char keys[BATCH][32];
        Berth__V1__SubmitRequest items[BATCH], *ip[BATCH];
        for (int i = 0; i < BATCH; i++) {
            int k = b->reverse ? BATCH - 1 - i : i;
            snprintf(keys[i], sizeof keys[i], "r%d-k%02d", round, k);
            berth__v1__submit_request__init(&items[i]);
            items[i].topic = "batched";
            items[i].idempotency_key = keys[i];
            ip[i] = &items[i];
        }
        Berth__V1__SubmitBatchRequest sb = BERTH__V1__SUBMIT_BATCH_REQUEST__INIT;
        sb.items = ip;
        sb.n_items = BATCH;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
        req.submit_batch = &sb;
        pthread_barrier_wait(b->go);
        Berth__V1__Response *r = w_call(b->c, &req, 0);
        b->code[round] = (int)r->status->code;
        snprintf(b->why[round], sizeof b->why[round], "%s",
                 r->status->message ? r->status->message : "");
        if (r->status->code == BERTH__V1__CODE__OK && r->submit_batch->n_items == BATCH)
            for (int i = 0; i < BATCH; i++) {
                int k = b->reverse ? BATCH - 1 - i : i;
                snprintf(b->ids[round][k], 33, "%s", r->submit_batch->items[i]->id);
                b->dup[round][k] = r->submit_batch->items[i]->duplicate;
            }
        w_free(r);
    }
    return NULL;
}

RTest(one_idempotency_key_through_two_replicas_at_once_is_one_task)
{
    fresh_db("keys");
    start(2, NULL);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    static keyed ka, kb;
    ka.c = d_client(&R[0]), ka.go = &go;
    kb.c = d_client(&R[1]), kb.go = &go;
    pthread_t ta, tb;
    pthread_create(&ta, NULL, submit_keys, &ka);
    pthread_create(&tb, NULL, submit_keys, &kb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&go);
    int dup_a = 0;
    for (int i = 0; i < KEYS; i++) {
        cr_assert_str_eq(ka.ids[i], kb.ids[i], "key-%d: A answered %s, B %s", i, ka.ids[i],
                         kb.ids[i]);
        cr_assert_neq(ka.dup[i], kb.dup[i], "key-%d: exactly one answer is the duplicate", i);
        dup_a += ka.dup[i];
    }
    cr_log_info("duplicates answered by A: %d of %d, by B: %d", dup_a, KEYS, KEYS - dup_a);
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks WHERE topic = 'keyed'"),
                 KEYS, "one task per key");
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(DISTINCT key) FROM berth.submit_keys"), KEYS);
    /* And the tasks are those ids, each payload once. */
    Berth__V1__Response *f = w_fetch(ka.c, "w", "keyed", 1000, 0, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, KEYS);
    for (size_t i = 0; i < f->fetch->n_tasks; i++) {
        const Berth__V1__Task *t = f->fetch->tasks[i];
        char num[16];
        snprintf(num, sizeof num, "%.*s", (int)t->payload.len, (const char *)t->payload.data);
        int k = atoi(num);
        cr_assert(k >= 0 && k < KEYS);
        cr_assert_str_eq(t->id, ka.ids[k], "key-%d's task", k);
    }
    w_free(f);

    /* Batches naming the same keys in opposite orders, through A and B at
     * once: no deadlock between them, and still one task per key. */
    static batcher ba, bb;
    ba = (batcher){.c = ka.c, .go = &go, .reverse = false};
    bb = (batcher){.c = kb.c, .go = &go, .reverse = true};
    pthread_barrier_init(&go, NULL, 2);
    pthread_create(&ta, NULL, submit_batches, &ba);
    pthread_create(&tb, NULL, submit_batches, &bb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&go);
    for (int round = 0; round < BATCH_ROUNDS; round++)
        for (int k = 0; k < BATCH; k++) {
            cr_assert_eq(ba.code[round], BERTH__V1__CODE__OK, "A's batch %d: %s", round,
                         ba.why[round]);
            cr_assert_eq(bb.code[round], BERTH__V1__CODE__OK, "B's batch %d: %s", round,
                         bb.why[round]);
            cr_assert_str_eq(ba.ids[round][k], bb.ids[round][k], "batch %d, key %d", round, k);
            cr_assert_neq(ba.dup[round][k], bb.dup[round][k], "batch %d, key %d", round, k);
        }
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks WHERE topic = 'batched'"),
                 BATCH_ROUNDS * BATCH, "one task per key");
    bc_close(ka.c);
    bc_close(kb.c);
}

/* ---- 3. a long poll woken across replicas ---- */

RTest(a_long_poll_on_one_replica_is_woken_by_a_submit_through_another)
{
    fresh_db("wake");
    start(2, NULL);
    bc *a = d_client(&R[0]), *b = d_client(&R[1]);
    enum { SAMPLES = 60 };
    uint64_t lat[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        poller p = {.c = b, .worker = "wb", .topic = "bell", .max = 1, .wait_ms = 5000};
        poll_start(&p);
        await_waiting(&R[1], 1);
        char payload[16];
        snprintf(payload, sizeof payload, "%d", i);
        char *id = submitted_id(w_submit(a, "bell", payload, NULL));
        uint64_t submitted = mono_us();
        poll_join(&p);
        cr_assert_eq(p.r->fetch->n_tasks, 1, "sample %d: the long poll on B was not woken", i);
        cr_assert_str_eq(p.r->fetch->tasks[0]->id, id);
        lat[i] = (uint64_t)(answered_after_ms(&p, submitted) * 1000.0);
        const char *ids[] = {id};
        const char *toks[] = {p.r->fetch->tasks[0]->lock_token};
        Berth__V1__Response *done = w_fetch_completing(b, "wb", "nothing", 0, ids, toks, 1);
        w_expect_code(done, BERTH__V1__CODE__OK);
        w_free(done);
        w_free(p.r);
        free(id);
    }
    qsort(lat, SAMPLES, sizeof lat[0], cmp_u64);
    uint64_t p50 = lat[SAMPLES / 2], p99 = lat[SAMPLES * 99 / 100], max = lat[SAMPLES - 1];
    fprintf(stderr,
            "replicas: long poll on B woken by a submit through A, %d samples, from the "
            "submit's answer to the fetch's: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
            SAMPLES, p50 / 1000.0, p99 / 1000.0, max / 1000.0);
    cr_assert_lt(p50, 50000, "p50 %.2f ms", p50 / 1000.0);
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks"), 0);

    /* A long poll on several topics is woken by a park on any of them. */
    char *topics[] = {"gong", "chime", "bell"};
    poller p = {.c = b, .worker = "wb", .topics = topics, .n_topics = 3, .wait_ms = 5000};
    poll_start(&p);
    await_waiting(&R[1], 1);
    char *id = submitted_id(w_submit(a, "chime", "c", NULL));
    uint64_t submitted = mono_us();
    poll_join(&p);
    cr_assert_eq(p.r->fetch->n_tasks, 1, "a park on its second topic did not wake it");
    cr_assert_str_eq(p.r->fetch->tasks[0]->id, id);
    cr_assert_lt(answered_after_ms(&p, submitted), 1000.0);
    w_free(p.r);
    free(id);
    bc_close(a);
    bc_close(b);
}

/* ---- 4. a delayed task wakes every replica at its instant ---- */

RTest(a_delayed_task_wakes_long_polls_on_other_replicas_at_its_instant)
{
    fresh_db("delayed");
    start(3, NULL);
    bc *a = d_client(&R[0]), *b = d_client(&R[1]), *c = d_client(&R[2]);
    enum { DELAY = 800, WAIT = 2000 };
    poller pb = {.c = b, .worker = "wb", .topic = "later", .max = 1, .wait_ms = WAIT};
    poller pc = {.c = c, .worker = "wc", .topic = "later", .max = 1, .wait_ms = WAIT};
    poll_start(&pb);
    poll_start(&pc);
    await_waiting(&R[1], 1);
    await_waiting(&R[2], 1);
    uint64_t sent_us = mono_us(), sent_ms = real_ms();
    char *id = submitted_id(submit_in(a, "later", "p", DELAY, 0));
    poll_join(&pb);
    poll_join(&pc);
    poller *won = pb.r->fetch->n_tasks ? &pb : &pc, *lost = won == &pb ? &pc : &pb;
    cr_assert_eq(pb.r->fetch->n_tasks + pc.r->fetch->n_tasks, 1,
                 "fetched once: B took %zu, C took %zu", pb.r->fetch->n_tasks,
                 pc.r->fetch->n_tasks);
    const Berth__V1__Task *t = won->r->fetch->tasks[0];
    cr_assert_str_eq(t->id, id);
    cr_assert_geq(t->available_at_ms, sent_ms + DELAY);
    /* Not before its instant, and not much after it. */
    double after = ((double)won->answer_us - (double)sent_us) / 1000.0;
    fprintf(stderr, "replicas: a task delayed %d ms, fetched through %s %.1f ms after its submit\n",
            DELAY, won == &pb ? "B" : "C", after);
    cr_assert_geq(won->answer_real_ms, t->available_at_ms, "fetched before its instant");
    cr_assert_geq(after, DELAY);
    cr_assert_lt(after, DELAY + 500, "woken %.1f ms after the submit", after);
    /* The other waited on, and ended empty at its deadline. */
    double waited = ((double)lost->answer_us - (double)lost->start_us) / 1000.0;
    cr_assert_geq(waited, WAIT - 50, "the other long poll ended early: %.1f ms", waited);
    w_free(pb.r);
    w_free(pc.r);
    free(id);

    /* Delayed before anyone waits: a long poll that comes later learns
     * the instant from its own empty claim. */
    sent_us = mono_us();
    id = submitted_id(submit_in(a, "later", "q", DELAY, 0));
    sleep_ms(100);
    pb = (poller){.c = b, .worker = "wb", .topic = "later", .max = 1, .wait_ms = WAIT};
    poll_start(&pb);
    poll_join(&pb);
    cr_assert_eq(pb.r->fetch->n_tasks, 1, "the long poll that came later was never woken");
    cr_assert_str_eq(pb.r->fetch->tasks[0]->id, id);
    after = ((double)pb.answer_us - (double)sent_us) / 1000.0;
    cr_assert_geq(after, DELAY);
    cr_assert_lt(after, DELAY + 500, "woken %.1f ms after the submit", after);
    w_free(pb.r);
    free(id);
    bc_close(a);
    bc_close(b);
    bc_close(c);
}

/* ---- 5. kill -9 of a replica holding locks ---- */

RTest(kill_9_of_a_replica_holding_locks_loses_nothing_and_its_locks_expire)
{
    fresh_db("kill9");
    start(2, NULL);
    bc *a = d_client(&R[0]), *b = d_client(&R[1]);
    enum { N = 30, HELD = 10, LOCK = 1500 };
    static char ids[N][33];
    static bool seen[N];
    for (int i = 0; i < N; i++) {
        char payload[16];
        snprintf(payload, sizeof payload, "%d", i);
        char *id = submitted_id(w_submit(i % 2 ? b : a, "held", payload, NULL));
        snprintf(ids[i], sizeof ids[i], "%s", id);
        free(id);
    }
    Berth__V1__Response *f = w_fetch(a, "wa", "held", HELD, LOCK, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, HELD);
    static char held[HELD][33];
    uint64_t expiry = 0;
    for (int i = 0; i < HELD; i++) {
        snprintf(held[i], sizeof held[i], "%s", f->fetch->tasks[i]->id);
        if (f->fetch->tasks[i]->lock_expires_at_ms > expiry)
            expiry = f->fetch->tasks[i]->lock_expires_at_ms;
    }
    w_free(f);
    /* More acknowledged through A just before it dies. */
    enum { LATE = 10 };
    static char late[LATE][33];
    for (int i = 0; i < LATE; i++) {
        char *id = submitted_id(w_submit(a, "held", "late", NULL));
        snprintf(late[i], sizeof late[i], "%s", id);
        free(id);
    }
    bc_close(a);
    cr_assert_eq(d_signal(&R[0], SIGKILL), 128 + SIGKILL);

    /* B serves on: what A did not hold at once, attempt 1. */
    int got = 0, late_got = 0;
    f = w_fetch(b, "wb", "held", 1000, 60000, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, N - HELD + LATE, "what A held stays locked until it expires");
    for (size_t i = 0; i < f->fetch->n_tasks; i++) {
        const Berth__V1__Task *t = f->fetch->tasks[i];
        cr_assert_eq(t->attempt, 1);
        for (int k = 0; k < HELD; k++)
            cr_assert_str_neq(t->id, held[k], "a task A holds was fetched before its lock expired");
        for (int k = 0; k < N; k++)
            if (strcmp(t->id, ids[k]) == 0) {
                cr_assert_not(seen[k]);
                seen[k] = true;
                got++;
            }
        for (int k = 0; k < LATE; k++)
            late_got += strcmp(t->id, late[k]) == 0;
    }
    cr_assert_eq(late_got, LATE, "every submit acknowledged before the kill is there");
    w_free(f);
    /* Then A's, once their locks expire, attempt 2: a long poll on B
     * learns the instant from its empty claim. */
    int again = 0;
    while (again < HELD) {
        f = w_fetch(b, "wb", "held", 1000, 60000, 5000);
        w_expect_code(f, BERTH__V1__CODE__OK);
        uint64_t at = real_ms();
        cr_assert_gt(f->fetch->n_tasks, 0, "A's locked tasks never came back");
        cr_assert_geq(at, expiry, "fetched again before A's lock expired");
        cr_assert_lt(at, expiry + 2000, "fetched %llu ms after A's locks expired",
                     (unsigned long long)(at - expiry));
        for (size_t i = 0; i < f->fetch->n_tasks; i++) {
            const Berth__V1__Task *t = f->fetch->tasks[i];
            cr_assert_eq(t->attempt, 2, "the second claim of a task A held");
            int k = 0;
            while (k < N && strcmp(t->id, ids[k]) != 0)
                k++;
            cr_assert_lt(k, N, "a task nobody submitted");
            cr_assert_not(seen[k], "task %s fetched twice", t->id);
            seen[k] = true;
            got++;
            again++;
        }
        w_free(f);
    }
    cr_assert_eq(got, N, "every task, once");
    f = w_fetch(b, "wb", "held", 1000, 60000, 0);
    cr_assert_eq(f->fetch->n_tasks, 0);
    w_free(f);
    bc_close(b);
}

/* ---- 6. the listener lost ---- */

RTest(a_replica_whose_listener_was_killed_still_wakes_its_long_polls)
{
    fresh_db("listener");
    start(2, NULL);
    bc *a = d_client(&R[0]), *b = d_client(&R[1]);
    long listener = backend_of(&R[1], "berthd listener");
    cr_assert_gt(listener, 0, "B's listener backend not found");
    cr_assert_neq(listener, backend_of(&R[0], "berthd listener"));

    poller p = {.c = b, .worker = "wb", .topic = "lost", .max = 1, .wait_ms = 10000};
    poll_start(&p);
    await_waiting(&R[1], 1);
    terminate(&listener, 1);
    /* Parked while B has no LISTEN: its notification is lost to B. */
    char *id = submitted_id(w_submit(a, "lost", "p", NULL));
    uint64_t submitted = mono_us();
    poll_join(&p);
    cr_assert_eq(p.r->fetch->n_tasks, 1, "B's waiting fetch was never rung again");
    cr_assert_str_eq(p.r->fetch->tasks[0]->id, id);
    double took = answered_after_ms(&p, submitted);
    fprintf(stderr,
            "replicas: listener killed, B's waiting fetch answered %.1f ms after the submit\n",
            took);
    cr_assert_lt(took, 3000);
    w_free(p.r);
    free(id);

    /* B listens again (a new backend), and wakes as before. */
    long again = 0;
    for (int i = 0;
         i < 300 && ((again = backend_of(&R[1], "berthd listener")) == 0 || again == listener); i++)
        sleep_ms(10);
    cr_assert(again != 0 && again != listener, "B did not listen again");
    p = (poller){.c = b, .worker = "wb", .topic = "lost", .max = 1, .wait_ms = 10000};
    poll_start(&p);
    await_waiting(&R[1], 1);
    id = submitted_id(w_submit(a, "lost", "q", NULL));
    submitted = mono_us();
    poll_join(&p);
    cr_assert_eq(p.r->fetch->n_tasks, 1);
    cr_assert_str_eq(p.r->fetch->tasks[0]->id, id);
    cr_assert_lt(answered_after_ms(&p, submitted), 1000.0, "the new listener did not ring B");
    w_free(p.r);
    free(id);
    bc_close(a);
    bc_close(b);
}

/* ---- 7, 8. databases berthd cannot serve ---- */

/* Ports of its own, as d_start's: not berthd's defaults, which a berthd
 * refused at the same moment in another test would hold. */
static const char *const any_ports[] = {
    "--operate", "tcp://127.0.0.1:0", "--events",  "tcp://127.0.0.1:0",
    "--admin",   "tcp://127.0.0.1:0", "--metrics", "http://127.0.0.1:0",
    NULL};

RTest(a_database_whose_schema_is_newer_than_berthd_is_refused_with_status_2)
{
    fresh_db("newer");
    start(1, NULL); /* migrates it */
    d_stop(&R[0]);
    long version =
        pgtmp_one_long(SQL, "SELECT value::bigint FROM berth.meta WHERE key = 'schema_version'");
    cr_assert_gt(version, 0);
    pgtmp_exec(SQL, "UPDATE berth.meta SET value = '999' WHERE key = 'schema_version'");
    char err[4096];
    int status = d_refused_store(URI, any_ports, err, sizeof err);
    cr_assert_eq(status, 2, "exit %d: %s", status, err);
    char known[64];
    snprintf(known, sizeof known, "up to %ld", version);
    cr_assert_not_null(strstr(err, "999"), "%s", err);
    cr_assert_not_null(strstr(err, known), "%s", err);
    /* Nothing of it was touched. */
    cr_assert_eq(
        pgtmp_one_long(SQL, "SELECT value::bigint FROM berth.meta WHERE key = 'schema_version'"),
        999);
}

RTest(a_database_nobody_listens_at_is_refused_with_status_1_naming_it_without_its_password)
{
    int port = pgtmp_free_port();
    cr_assert_gt(port, 0);
    char uri[256], where[32];
    snprintf(uri, sizeof uri, "postgresql://berth:Sw0rdf1sh-t8@127.0.0.1:%d/berth", port);
    snprintf(where, sizeof where, "%d", port);
    char err[4096];
    uint64_t t0 = mono_us();
    int status = d_refused_store(uri, any_ports, err, sizeof err);
    double took = (double)(mono_us() - t0) / 1e6;
    fprintf(stderr, "replicas: no server at port %d: berthd exited %d after %.1f s\n", port, status,
            took);
    cr_assert_eq(status, 1, "exit %d: %s", status, err);
    cr_assert_lt(took, 10.0);
    cr_assert_not_null(strstr(err, "127.0.0.1"), "%s", err);
    cr_assert_not_null(strstr(err, where), "%s", err);
    cr_assert_null(strstr(err, "Sw0rdf1sh"), "the password was printed: %s", err);
}

/* ---- 9. the engine connection killed under load ---- */

enum { LOAD_THREADS = 2, LOAD_MAX = 20000 };
typedef struct loader {
    bc *c;
    atomic_bool *stop;
    char (*ids)[33];
    int n_ok, n_maybe, n_not_kept;
    uint64_t first_refusal_us, last_refusal_us, first_ok_after_refusal_us;
    int bad_code;
    char bad[256];
} loader;

static void *load(void *arg)
{
    loader *l = arg;
    int i = 0;
    while (!atomic_load(l->stop) && l->n_ok < LOAD_MAX) {
        Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
        char payload[32];
        snprintf(payload, sizeof payload, "%p-%d", (void *)l, i++);
        s.topic = "load";
        s.has_payload = 1;
        s.payload.data = (uint8_t *)payload;
        s.payload.len = strlen(payload);
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        req.submit = &s;
        Berth__V1__Response *r = NULL;
        int rv = bc_call(l->c, &req, 10000, &r);
        if (rv != BC_OK) {
            l->bad_code = -1;
            snprintf(l->bad, sizeof l->bad, "transport: %s", bc_strerror(rv));
            break;
        }
        uint64_t now = mono_us();
        if (r->status != NULL && r->status->code == BERTH__V1__CODE__OK && r->submit != NULL) {
            snprintf(l->ids[l->n_ok++], 33, "%s", r->submit->id);
            if (l->first_refusal_us != 0 && l->first_ok_after_refusal_us == 0)
                l->first_ok_after_refusal_us = now;
        } else if (r->status != NULL && r->status->code == BERTH__V1__CODE__UNAVAILABLE &&
                   r->status->has_retryable && r->status->retryable) {
            const char *m = r->status->message ? r->status->message : "";
            if (strstr(m, "may or may not") != NULL)
                l->n_maybe++;
            else
                l->n_not_kept++;
            if (l->first_refusal_us == 0)
                l->first_refusal_us = now;
            l->last_refusal_us = now;
        } else {
            l->bad_code = r->status ? (int)r->status->code : -2;
            snprintf(l->bad, sizeof l->bad, "%s",
                     r->status && r->status->message ? r->status->message : "");
            berth__v1__response__free_unpacked(r, NULL);
            break;
        }
        berth__v1__response__free_unpacked(r, NULL);
    }
    return NULL;
}

RTest(an_engine_connection_killed_under_load_loses_no_acknowledged_submit)
{
    fresh_db("engineconn");
    start(1, NULL);
    long engine[8];
    int n_engine = backends_of(&R[0], "berthd", engine, 8);
    cr_assert_gt(n_engine, 0, "A's engine connections not found");
    atomic_bool stop = false;
    static loader l[LOAD_THREADS];
    static char ids[LOAD_THREADS][LOAD_MAX][33];
    pthread_t th[LOAD_THREADS];
    for (int i = 0; i < LOAD_THREADS; i++) {
        l[i] = (loader){.c = d_client(&R[0]), .stop = &stop, .ids = ids[i]};
        pthread_create(&th[i], NULL, load, &l[i]);
    }
    sleep_ms(300);
    uint64_t killed = mono_us();
    terminate(engine, n_engine); /* every one of them */
    sleep_ms(2000);
    atomic_store(&stop, true);
    int ok = 0, maybe = 0, not_kept = 0;
    uint64_t back = 0, last_refusal = 0;
    for (int i = 0; i < LOAD_THREADS; i++) {
        pthread_join(th[i], NULL);
        bc_close(l[i].c);
        cr_assert_eq(l[i].bad_code, 0, "an answer neither OK nor retryable UNAVAILABLE: %d %s",
                     l[i].bad_code, l[i].bad);
        ok += l[i].n_ok, maybe += l[i].n_maybe, not_kept += l[i].n_not_kept;
        if (l[i].first_ok_after_refusal_us > back)
            back = l[i].first_ok_after_refusal_us;
        if (l[i].last_refusal_us > last_refusal)
            last_refusal = l[i].last_refusal_us;
        cr_assert(l[i].first_refusal_us == 0 || l[i].first_ok_after_refusal_us != 0,
                  "a submitter never got an OK after its refusal: A did not serve again");
    }
    uint64_t first_refusal = UINT64_MAX;
    for (int i = 0; i < LOAD_THREADS; i++)
        if (l[i].first_refusal_us != 0 && l[i].first_refusal_us < first_refusal)
            first_refusal = l[i].first_refusal_us;
    fprintf(stderr,
            "replicas: engine connection killed under load: %d submits OK, %d UNAVAILABLE "
            "(%d may have been kept, %d not kept) from %.1f to %.1f ms after the kill; serving "
            "again %.1f ms after it\n",
            ok, maybe + not_kept, maybe, not_kept,
            first_refusal != UINT64_MAX ? ((double)first_refusal - (double)killed) / 1000.0 : -1.0,
            ((double)last_refusal - (double)killed) / 1000.0,
            ((double)back - (double)killed) / 1000.0);
    cr_assert_gt(maybe + not_kept, 0, "no submit noticed the connection's loss");
    cr_assert_lt(back - killed, 3000000, "A served again only %.1f ms after the kill",
                 (double)(back - killed) / 1000.0);
    cr_assert_lt(last_refusal, killed + 3000000, "A still refused 3 s after the kill");
    long now_engine[8];
    int n_now = backends_of(&R[0], "berthd", now_engine, 8);
    cr_assert_eq(n_now, n_engine, "A's engine connections were not all reopened");
    for (int i = 0; i < n_now; i++)
        for (int k = 0; k < n_engine; k++)
            cr_assert_neq(now_engine[i], engine[k], "backend %ld still there", engine[k]);

    /* Every acknowledged submit is in the database; of the others, only
     * those that may have been kept may be. */
    size_t cap = (size_t)ok * 36 + 128, len = 0;
    char *q = malloc(cap);
    cr_assert_not_null(q);
    len += (size_t)snprintf(q, cap, "SELECT count(*) FROM berth.tasks WHERE id = ANY('{");
    bool first = true;
    for (int i = 0; i < LOAD_THREADS; i++)
        for (int k = 0; k < l[i].n_ok; k++) {
            len += (size_t)snprintf(q + len, cap - len, "%s%s", first ? "" : ",", l[i].ids[k]);
            first = false;
        }
    snprintf(q + len, cap - len, "}'::uuid[])");
    cr_assert_eq(pgtmp_one_long(SQL, q), ok, "an acknowledged submit is not in the database");
    free(q);
    long total = pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks WHERE topic = 'load'");
    cr_assert(total >= ok && total <= ok + maybe,
              "%ld tasks for %d acknowledged and %d that may have been kept", total, ok, maybe);
}

/* ---- 10. the engine connection lost under a waiting long poll ---- */

RTest(a_replica_whose_engine_connection_was_killed_still_wakes_its_long_polls)
{
    fresh_db("enginewait");
    start(2, NULL);
    bc *a = d_client(&R[0]), *b = d_client(&R[1]);
    long engine[8];
    int n_engine = backends_of(&R[1], "berthd", engine, 8);
    cr_assert_gt(n_engine, 0, "B's engine connections not found");
    poller p = {.c = b, .worker = "wb", .topic = "idle", .max = 1, .wait_ms = 8000};
    poll_start(&p);
    await_waiting(&R[1], 1);
    terminate(engine, n_engine);
    /* B's listener is fine: the doorbell reaches B, whose claim then
     * finds its engine connection gone. */
    char *id = submitted_id(w_submit(a, "idle", "p", NULL));
    uint64_t submitted = mono_us();
    poll_join(&p);
    double took = answered_after_ms(&p, submitted);
    fprintf(stderr,
            "replicas: B's engine connection killed, its waiting fetch answered %.1f ms after "
            "the submit with %zu task(s)\n",
            took, p.r->fetch->n_tasks);
    cr_assert_eq(p.r->fetch->n_tasks, 1,
                 "B's waiting fetch ended empty %.1f ms after the submit beside a fetchable task",
                 took);
    cr_assert_str_eq(p.r->fetch->tasks[0]->id, id);
    cr_assert_lt(took, 3000);
    w_free(p.r);
    free(id);
    bc_close(a);
    bc_close(b);
}

/* ---- 11. a trickle through one replica to workers on two others ---- */

enum { TRICKLE = 200, WORKERS = 4 };
typedef struct worker {
    bc *c;
    char name[8];
    atomic_bool *stop;
    atomic_int *seen; /* per task (its payload's number): fetches */
    atomic_int *fetched;
    int mine;
    char bad[128];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    char ids[1][33], toks[1][33];
    size_t held = 0;
    for (;;) {
        bool stopping = atomic_load(w->stop);
        if (stopping && held == 0)
            break;
        const char *ip[] = {ids[0]}, *tp[] = {toks[0]};
        Berth__V1__Response *r =
            w_fetch_completing(w->c, w->name, "trickle", stopping ? 0 : 1000, ip, tp, held);
        if (r->status->code != BERTH__V1__CODE__OK ||
            (held && (r->fetch->n_complete_statuses != held ||
                      r->fetch->complete_statuses[0]->code != BERTH__V1__CODE__OK))) {
            snprintf(w->bad, sizeof w->bad, "fetch %d: %s", (int)r->status->code,
                     r->status->message ? r->status->message : "");
            w_free(r);
            break;
        }
        held = 0;
        for (size_t i = 0; i < r->fetch->n_tasks && i < 1; i++) {
            const Berth__V1__Task *t = r->fetch->tasks[i];
            char num[16];
            snprintf(num, sizeof num, "%.*s", (int)t->payload.len, (const char *)t->payload.data);
            int k = atoi(num);
            if (k >= 0 && k < TRICKLE)
                atomic_fetch_add(&w->seen[k], 1);
            atomic_fetch_add(w->fetched, 1);
            w->mine++;
            snprintf(ids[0], 33, "%s", t->id);
            snprintf(toks[0], 33, "%s", t->lock_token);
            held = 1;
        }
        if (r->fetch->n_tasks > 1)
            snprintf(w->bad, sizeof w->bad, "%zu tasks for max 1", r->fetch->n_tasks);
        w_free(r);
    }
    return NULL;
}

RTest(tasks_trickled_through_one_replica_reach_workers_long_polling_on_others_once_each)
{
    fresh_db("trickle");
    start(3, (const char *const[]){"--batch-default", "1", NULL}); /* one task a fetch */
    bc *a = d_client(&R[0]);
    atomic_bool stop = false;
    static atomic_int seen[TRICKLE];
    atomic_int fetched = 0;
    static worker w[WORKERS];
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        w[i] = (worker){
            .c = d_client(&R[1 + i % 2]), .stop = &stop, .seen = seen, .fetched = &fetched};
        snprintf(w[i].name, sizeof w[i].name, "w%d", i);
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    await_waiting(&R[1], 2);
    await_waiting(&R[2], 2);
    unsigned seed = 7;
    for (int i = 0; i < TRICKLE; i++) {
        char payload[16];
        snprintf(payload, sizeof payload, "%d", i);
        free(submitted_id(w_submit(a, "trickle", payload, NULL)));
        if (rand_r(&seed) % 4 == 0)
            sleep_ms(rand_r(&seed) % 4);
    }
    uint64_t last = mono_us();
    while (atomic_load(&fetched) < TRICKLE && mono_us() - last < 5000000)
        sleep_ms(1);
    double drained = (double)(mono_us() - last) / 1000.0;
    atomic_store(&stop, true);
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(th[i], NULL);
        bc_close(w[i].c);
        cr_assert_str_eq(w[i].bad, "", "worker %d: %s", i, w[i].bad);
    }
    fprintf(stderr,
            "replicas: %d tasks trickled through A, fetched through B %d+%d, through C %d+%d; "
            "the last fetched %.1f ms after the last submit\n",
            TRICKLE, w[0].mine, w[2].mine, w[1].mine, w[3].mine, drained);
    for (int k = 0; k < TRICKLE; k++)
        cr_assert_eq(atomic_load(&seen[k]), 1, "task %d fetched %d times", k,
                     atomic_load(&seen[k]));
    cr_assert_lt(drained, 3000, "tasks left behind while workers waited");
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks"), 0, "all completed");
    bc_close(a);
}

/* ---- 12. idle long polls cost the database nothing ---- */

RTest(idle_long_polls_on_three_replicas_commit_nothing_while_they_wait)
{
    fresh_db("idle");
    start(3, NULL);
    /* 102 long polls over 3 replicas, 20 s (the budget: at most 2
     * transactions a second per replica; a replica's housekeeping runs at
     * its boot, then once a minute when nothing is due). */
    enum { PER = 34, WINDOW_MS = 20000 };
    bc *c[REPLICAS];
    poller p[REPLICAS * PER];
    for (int i = 0; i < REPLICAS; i++) {
        c[i] = d_client(&R[i]);
        for (int k = 0; k < PER; k++) {
            p[i * PER + k] = (poller){.c = c[i],
                                      .worker = "idle",
                                      .topic = k ? "quiet" : "still",
                                      .max = 1,
                                      .wait_ms = WINDOW_MS + 1500};
            poll_start(&p[i * PER + k]);
        }
    }
    for (int i = 0; i < REPLICAS; i++)
        await_waiting(&R[i], PER);
    long commits0 = pgtmp_one_long(SQL, "SELECT xact_commit FROM pg_stat_database "
                                        "WHERE datname = current_database()");
    /* pg_stat_database's xact_commit lags by up to 10 s for a backend that
     * goes idle (PGSTAT_IDLE_INTERVAL): too coarse for a short window. A
     * statement on an engine connection moves its state_change instead. */
    long t0 = pgtmp_one_long(SQL, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
    sleep_ms(WINDOW_MS);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
             "application_name = 'berthd' AND (state <> 'idle' OR state_change >= "
             "to_timestamp(%ld / 1000.0))",
             t0);
    long busy = pgtmp_one_long(SQL, sql);
    long engines = pgtmp_one_long(SQL, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                       "current_database() AND application_name = 'berthd'");
    long commits = pgtmp_one_long(SQL, "SELECT xact_commit FROM pg_stat_database "
                                       "WHERE datname = current_database()") -
                   commits0;
    fprintf(stderr,
            "replicas: %d idle long polls on %d replicas: %ld of %ld engine connections ran a "
            "statement in %d ms (xact_commit moved by %ld, this test's own reads included)\n",
            REPLICAS * PER, REPLICAS, busy, engines, WINDOW_MS, commits);
    cr_assert_geq(engines, REPLICAS);
    /* (PostgreSQL reports an idle backend's counters up to 10 s late: the
     * engine connections' state_change is the sharper check below.) */
    cr_assert_leq(commits, 2L * REPLICAS * WINDOW_MS / 1000, "over 2 commits/s per replica");
    cr_assert_eq(busy, 0, "%ld engine connections ran statements while every fetch waited", busy);
    for (int i = 0; i < REPLICAS * PER; i++) {
        poll_join(&p[i]);
        cr_assert_eq(p[i].r->fetch->n_tasks, 0);
        double waited = (double)(p[i].answer_us - p[i].start_us) / 1000.0;
        cr_assert_geq(waited, WINDOW_MS + 1500 - 50, "ended early: %.1f ms", waited);
        w_free(p[i].r);
    }
    for (int i = 0; i < REPLICAS; i++)
        bc_close(c[i]);
}

/* ---- 13. a listener connection gone silent ---- */

/* A TCP proxy in front of the cluster for one replica's connections: it
 * forwards both ways, and can blackhole the listener's (the connection
 * whose startup packet names "berthd listener"): nothing more passes, and
 * nothing tells the client, as a network partition or a server host gone
 * without a RST would leave it. */
enum { PROXY_MAX = 32 };
typedef struct proxy {
    int lfd, port, to_port;
    pthread_t th;
    atomic_bool stop, silence, cut; /* cut: the silent ones are closed (the client sees EOF) */
    struct {
        int c, s;
        bool listener, silent;
    } conn[PROXY_MAX];
    int n;
} proxy;

static bool send_all(int fd, const char *b, ssize_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, b, (size_t)n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        b += w, n -= w;
    }
    return true;
}

static void proxy_close(proxy *p, int i)
{
    if (p->conn[i].c >= 0)
        close(p->conn[i].c);
    if (p->conn[i].s >= 0)
        close(p->conn[i].s);
    p->conn[i] = p->conn[--p->n];
}

static void *proxy_run(void *arg)
{
    proxy *p = arg;
    while (!atomic_load(&p->stop)) {
        if (atomic_load(&p->cut)) {
            atomic_store(&p->silence, false); /* what connects next is heard */
            atomic_store(&p->cut, false);
            for (int i = p->n - 1; i >= 0; i--)
                if (p->conn[i].silent)
                    proxy_close(p, i);
        }
        struct pollfd fds[1 + 2 * PROXY_MAX];
        int nf = 0;
        fds[nf++] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
        for (int i = 0; i < p->n; i++) {
            fds[nf++] = (struct pollfd){.fd = p->conn[i].c, .events = POLLIN};
            fds[nf++] = (struct pollfd){.fd = p->conn[i].s, .events = POLLIN};
        }
        if (poll(fds, (nfds_t)nf, 20) <= 0)
            continue;
        if ((fds[0].revents & POLLIN) && p->n < PROXY_MAX) {
            /* (CLOEXEC: a berthd started later must not hold them open) */
            int c = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
            int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            struct sockaddr_in to = {.sin_family = AF_INET,
                                     .sin_port = htons((uint16_t)p->to_port)};
            to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            if (c >= 0 && s >= 0 && connect(s, (struct sockaddr *)&to, sizeof to) == 0) {
                p->conn[p->n].c = c, p->conn[p->n].s = s;
                p->conn[p->n].listener = p->conn[p->n].silent = false;
                p->n++;
            } else {
                if (c >= 0)
                    close(c);
                if (s >= 0)
                    close(s);
            }
            continue; /* the fds moved */
        }
        bool silence = atomic_load(&p->silence);
        for (int i = p->n - 1; i >= 0; i--) {
            short rc = fds[1 + 2 * i].revents, rs = fds[2 + 2 * i].revents;
            if (silence && p->conn[i].listener)
                p->conn[i].silent = true;
            char buf[16384];
            bool gone = false;
            if (rc & (POLLIN | POLLHUP | POLLERR)) {
                ssize_t n = recv(p->conn[i].c, buf, sizeof buf, 0);
                if (n <= 0)
                    gone = true;
                else if (!p->conn[i].silent) {
                    if (memmem(buf, (size_t)n, "berthd listener", 15) != NULL)
                        p->conn[i].listener = true;
                    gone = !send_all(p->conn[i].s, buf, n);
                }
            }
            if (!gone && (rs & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t n = recv(p->conn[i].s, buf, sizeof buf, 0);
                if (n <= 0 && p->conn[i].silent) {
                    close(p->conn[i].s); /* the client is not told */
                    p->conn[i].s =
                        socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* never readable */
                } else if (n <= 0) {
                    gone = true;
                } else if (!p->conn[i].silent) {
                    gone = !send_all(p->conn[i].c, buf, n);
                }
            }
            if (gone)
                proxy_close(p, i);
        }
    }
    while (p->n > 0)
        proxy_close(p, 0);
    return NULL;
}

static void proxy_start(proxy *p, int to_port)
{
    memset(p, 0, sizeof *p);
    p->to_port = to_port;
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    cr_assert_eq(bind(p->lfd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(p->lfd, 16), 0);
    cr_assert_eq(getsockname(p->lfd, (struct sockaddr *)&a, &len), 0);
    p->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&p->th, NULL, proxy_run, p), 0);
}

static void proxy_stop(proxy *p)
{
    atomic_store(&p->stop, true);
    pthread_join(p->th, NULL);
    close(p->lfd);
}

RTest(a_replica_whose_listener_went_silent_still_rings_the_others)
{
    fresh_db("silent");
    static proxy px;
    proxy_start(&px, pg_port());
    char via[256];
    const char *db = strrchr(URI, '/');
    snprintf(via, sizeof via, "postgresql://berth@127.0.0.1:%d%s", px.port, db);
    d_start_store(&R[0], via, NULL); /* A, through the proxy */
    d_start_store(&R[1], URI, NULL); /* B */
    bc *a = d_client(&R[0]), *b = d_client(&R[1]);
    /* A's parks ring B as long as its listener is heard. */
    poller p = {.c = b, .worker = "wb", .topic = "far", .max = 1, .wait_ms = 6000};
    poll_start(&p);
    await_waiting(&R[1], 1);
    char *id = submitted_id(w_submit(a, "far", "before", NULL));
    poll_join(&p);
    cr_assert_eq(p.r->fetch->n_tasks, 1);
    cr_assert_str_eq(p.r->fetch->tasks[0]->id, id);
    w_free(p.r);
    free(id);
    /* A's listener goes silent; its engine connections are fine. */
    atomic_store(&px.silence, true);
    sleep_ms(50);
    p = (poller){.c = b, .worker = "wb", .topic = "far", .max = 1, .wait_ms = 6000};
    poll_start(&p);
    await_waiting(&R[1], 1);
    id = submitted_id(w_submit(a, "far", "after", NULL));
    uint64_t submitted = mono_us();
    /* A second later A's listener connection is closed under it: A
     * listens again (a doorbell kept would go out then). */
    sleep_ms(1000);
    atomic_store(&px.cut, true);
    poll_join(&p);
    double took = answered_after_ms(&p, submitted);
    fprintf(stderr,
            "replicas: A's listener silent, B's waiting fetch answered %.1f ms after a submit "
            "through A with %zu task(s)\n",
            took, p.r->fetch->n_tasks);
    /* (The doorbell is not late but gone: A listens again, and its next
     * park rings B at once.) */
    bool woken = p.r->fetch->n_tasks == 1;
    w_free(p.r);
    Berth__V1__Response *f = w_fetch(b, "wb", "far", 1, 0, 0);
    cr_assert_eq(f->fetch->n_tasks, woken ? 0 : 1, "the task was fetchable all along");
    w_free(f);
    p = (poller){.c = b, .worker = "wb", .topic = "far", .max = 1, .wait_ms = 6000};
    poll_start(&p);
    await_waiting(&R[1], 1);
    char *id2 = submitted_id(w_submit(a, "far", "later", NULL));
    submitted = mono_us();
    poll_join(&p);
    cr_assert_eq(p.r->fetch->n_tasks, 1, "A's new listener does not ring B either");
    cr_assert_str_eq(p.r->fetch->tasks[0]->id, id2);
    cr_assert_lt(answered_after_ms(&p, submitted), 1000.0);
    w_free(p.r);
    free(id2);
    bc_close(a);
    bc_close(b);
    d_stop(&R[0]);
    proxy_stop(&px);
    cr_assert(woken, "B's long poll was not woken by a park through A (%.1f ms)", took);
    free(id);
}

/* /healthz and /metrics on PostgreSQL: each replica answers from its own
 * counters, without a scan of the database. */
RTest(each_replica_serves_healthz_and_metrics_of_its_own_and_the_cluster_s_tasks)
{
    fresh_db("metrics");
    start(2, NULL);
    bc *a = d_client(&R[0]);
    w_free(w_submit(a, "m", "x", NULL));
    for (int k = 0; k < 2; k++) {
        char *body;
        cr_assert_eq(d_http_get(&R[k], "/healthz", &body), 200, "replica %d: %s", k, body);
        free(body);
        cr_assert_eq(d_http_get(&R[k], "/metrics", &body), 200, "replica %d: %s", k, body);
        cr_assert(strstr(body, "berth_waiting_fetches ") != NULL, "%s", body);
        /* The cluster's tasks on each, whichever replica took them. */
        cr_assert(strstr(body, "berth_tasks{topic=\"m\",state=\"ready\",scope=\"cluster\"} 1\n") !=
                      NULL,
                  "replica %d: %s", k, body);
        free(body);
    }

    /* Counters are each replica's own acts: three submits through A, two
     * fetched through B, one completed through each. */
    bc *b = d_client(&R[1]);
    w_free(w_submit(a, "m", "x", NULL));
    w_free(w_submit(a, "m", "x", NULL));
    Berth__V1__Response *f = w_fetch(b, "w", "m", 2, 60000, 0);
    cr_assert_eq(f->fetch->n_tasks, 2);
    for (int k = 0; k < 2; k++) {
        Berth__V1__Task *t = f->fetch->tasks[k];
        Berth__V1__Response *r = w_guarded(k == 0 ? a : b, BERTH__V1__REQUEST__METHOD_COMPLETE,
                                           t->id, "w", t->lock_token);
        cr_assert(r->status == NULL || r->status->code == BERTH__V1__CODE__OK);
        w_free(r);
    }
    w_free(f);
    static const char *const own[2][3] = {{"berth_tasks_submitted_total{topic=\"m\"} 3\n",
                                           "berth_tasks_completed_total{topic=\"m\"} 1\n",
                                           "berth_tasks_fetched_total{topic=\"m\"} 0\n"},
                                          {"berth_tasks_fetched_total{topic=\"m\"} 2\n",
                                           "berth_tasks_completed_total{topic=\"m\"} 1\n",
                                           "berth_tasks_submitted_total{topic=\"m\"} 0\n"}};
    for (int k = 0; k < 2; k++) {
        char *body;
        cr_assert_eq(d_http_get(&R[k], "/metrics", &body), 200);
        for (int i = 0; i < 3; i++)
            cr_assert(strstr(body, own[k][i]) != NULL, "replica %d lacks %s%s", k, own[k][i], body);
        free(body);
    }

    /* berth top over both: the cluster's gauges once, counters summed. A
     * delivery in the outbox (written here: no replica sends it) is one. */
    pgtmp_exec(SQL, "INSERT INTO berth.outbox (id, topic, priority, created_at, due_at, "
                    "body_bytes, payload) VALUES (gen_random_uuid(), 'p', 0, 0, "
                    "9000000000000, 1, '\\x00')");
    sleep_ms(1100); /* the gauges' cache (a second at most) is past */
    char cmd[600], out[4096];
    snprintf(cmd, sizeof cmd, "%s top --metrics %s,%s --count 1 --json", BERTH_CLI_PATH,
             R[0].metrics, R[1].metrics);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s", out);
    cr_assert(strstr(out, "\"replicas\":2,\"reached\":2") != NULL, "%s", out);
    cr_assert(strstr(out, "{\"topic\":\"m\",\"ready\":1,\"delayed\":0,\"locked\":0,\"backoff\":0,"
                          "\"terminal\":0,\"completed\":2,") != NULL,
              "one ready task (not one per replica), two completions (one per replica): %s", out);
    cr_assert(strstr(out, "\"outbox\":1,") != NULL, "one delivery, not one per replica: %s", out);
    bc_close(b);
    bc_close(a);
}

/* Replicas' clocks may disagree by seconds: B runs 6 s ahead of A, C 6 s
 * behind (libfaketime, Debian's faketime, on their wall clock), and every
 * instant is still the database's: a delay ends when it ends, whoever made
 * it and whoever waits for it, and a lock taken through a replica behind
 * the others expires on time for them. */
RTest(replicas_whose_clocks_are_seconds_apart_keep_every_instant_on_the_databases_clock)
{
    static const char lib[] = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
    cr_assert_eq(access(lib, R_OK), 0, "%s is needed (Debian's faketime)", lib);
    fresh_db("skew");
    d_start_store(&R[0], URI, NULL);
    setenv("LD_PRELOAD", lib, 1);
    setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
    /* Under AddressSanitizer the preload comes before its runtime: let it. */
    char *asan = getenv("ASAN_OPTIONS") ? strdup(getenv("ASAN_OPTIONS")) : NULL;
    char opts[512];
    snprintf(opts, sizeof opts, "%s%sverify_asan_link_order=0", asan ? asan : "", asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    setenv("FAKETIME", "+6s", 1);
    d_start_store(&R[1], URI, NULL);
    setenv("FAKETIME", "-6s", 1);
    d_start_store(&R[2], URI, NULL);
    unsetenv("LD_PRELOAD");
    unsetenv("FAKETIME");
    unsetenv("FAKETIME_DONT_FAKE_MONOTONIC");
    if (asan != NULL)
        setenv("ASAN_OPTIONS", asan, 1);
    else
        unsetenv("ASAN_OPTIONS");
    free(asan);
    bc *a = d_client(&R[0]), *b = d_client(&R[1]), *c = d_client(&R[2]);
    enum { DELAY = 1500 };

    /* Delayed through A, waited for on B (ahead): at its instant, not at once. */
    poller pb = {.c = b, .worker = "wb", .topic = "ahead", .max = 1, .wait_ms = 5000};
    poll_start(&pb);
    await_waiting(&R[1], 1);
    uint64_t sent = mono_us();
    w_free(submit_in(a, "ahead", "p", DELAY, 0));
    poll_join(&pb);
    double after = answered_after_ms(&pb, sent);
    fprintf(stderr,
            "replicas: skewed clocks: delayed %d ms through A, fetched through B (+6 s) "
            "after %.0f ms\n",
            DELAY, after);
    cr_assert_eq(pb.r->fetch->n_tasks, 1);
    cr_assert_geq(after, DELAY - 50, "fetched before its instant");
    cr_assert_lt(after, DELAY + 700, "fetched late");
    w_free(pb.r);

    /* Delayed through B (ahead), waited for on C (behind). */
    poller pc = {.c = c, .worker = "wc", .topic = "behind", .max = 1, .wait_ms = 5000};
    poll_start(&pc);
    await_waiting(&R[2], 1);
    sent = mono_us();
    w_free(submit_in(b, "behind", "q", DELAY, 0));
    poll_join(&pc);
    after = answered_after_ms(&pc, sent);
    fprintf(stderr,
            "replicas: skewed clocks: delayed %d ms through B (+6 s), fetched through C "
            "(-6 s) after %.0f ms\n",
            DELAY, after);
    cr_assert_eq(pc.r->fetch->n_tasks, 1);
    cr_assert_geq(after, DELAY - 50, "fetched before its instant");
    cr_assert_lt(after, DELAY + 700, "fetched late");
    w_free(pc.r);

    /* A lock of 1500 ms taken through C (behind) holds for A, then expires. */
    w_free(w_submit(a, "locks", "l", NULL));
    Berth__V1__Response *f = w_fetch(c, "wc", "locks", 1, DELAY, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    w_free(f);
    f = w_fetch(a, "wa", "locks", 1, 0, 0);
    cr_assert_eq(f->fetch->n_tasks, 0, "taken while C's lock holds");
    w_free(f);
    sleep_ms(DELAY + 300);
    f = w_fetch(a, "wa", "locks", 1, 0, 0);
    cr_assert_eq(f->fetch->n_tasks, 1, "C's lock did not expire on the database's clock");
    cr_assert_eq(f->fetch->tasks[0]->attempt, 2);
    w_free(f);
    bc_close(a);
    bc_close(b);
    bc_close(c);
}

/* ---- 15, 16. calls across replicas ---- */

/* A call through c with a policy (timeout_ms 0: none); its instance id. */
static char *call_in(bc *c, const char *topic, const char *payload, uint64_t timeout_ms,
                     uint32_t attempts, uint64_t backoff_ms)
{
    Berth__V1__RetryPolicy p = BERTH__V1__RETRY_POLICY__INIT;
    p.has_timeout_ms = 1;
    p.timeout_ms = timeout_ms;
    p.has_max_attempts = 1;
    p.max_attempts = attempts;
    p.has_initial_backoff_ms = 1;
    p.initial_backoff_ms = backoff_ms;
    Berth__V1__CallRequest q = BERTH__V1__CALL_REQUEST__INIT;
    q.topic = (char *)topic;
    q.has_payload = 1;
    q.payload = (ProtobufCBinaryData){strlen(payload), (uint8_t *)payload};
    q.retry = timeout_ms ? &p : NULL;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
    req.call = &q;
    Berth__V1__Response *r = w_call(c, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_not_null(r->call);
    char *id = strdup(r->call->instance_id);
    w_free(r);
    return id;
}

static Berth__V1__Response *await_in(bc *c, const char *id, uint64_t wait_ms)
{
    Berth__V1__AwaitCallRequest w = BERTH__V1__AWAIT_CALL_REQUEST__INIT;
    w.instance_id = (char *)id;
    w.has_wait_ms = 1;
    w.wait_ms = wait_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_AWAIT_CALL;
    req.await_call = &w;
    Berth__V1__Response *r = w_call(c, &req, (int)wait_ms + 5000);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_not_null(r->await_call);
    cr_assert_not_null(r->await_call->instance);
    return r;
}

typedef struct awaiter {
    bc *c;
    const char *id;
    uint64_t wait_ms;
    pthread_t th;
    uint64_t answer_us;
    Berth__V1__Response *r;
} awaiter;

static void *await_run(void *arg)
{
    awaiter *w = arg;
    w->r = await_in(w->c, w->id, w->wait_ms);
    w->answer_us = mono_us();
    return NULL;
}

RTest(a_call_made_through_one_replica_is_awaited_through_another_and_answered_through_a_third)
{
    fresh_db("calls");
    start(3, NULL);
    bc *a = d_client(&R[0]), *b = d_client(&R[1]), *c = d_client(&R[2]);
    char *id = call_in(a, "quotes", "how much?", 30000, 2, 100);

    /* B awaits it; C's worker answers. */
    awaiter w = {.c = b, .id = id, .wait_ms = 10000};
    cr_assert_eq(pthread_create(&w.th, NULL, await_run, &w), 0);
    await_waiting(&R[1], 1);
    Berth__V1__Response *f;
    Berth__V1__Task *t = fetch_one(c, "wc", "quotes", 60000, &f);
    cr_assert_str_eq(t->instance_id, id);
    uint64_t sent = mono_us();
    Berth__V1__Response *r = w_answer_or_null(c, t, "wc", "42", 2);
    cr_assert_not_null(r);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    pthread_join(w.th, NULL);
    double after = w.answer_us > sent ? (double)(w.answer_us - sent) / 1000.0 : 0.0;
    fprintf(stderr,
            "replicas: a call through A, answered through C, its await on B woken %.1f ms "
            "after the answer\n",
            after);
    const Berth__V1__Instance *in = w.r->await_call->instance;
    cr_assert_eq(in->state, BERTH__V1__INSTANCE__STATE__RESOLVED);
    cr_assert_not_null(in->result);
    cr_assert_eq(in->result->payload.len, 2);
    cr_assert_eq(memcmp(in->result->payload.data, "42", 2), 0);
    cr_assert_lt(after, 1000.0, "the await on B was not rung by C's answer");
    w_free(w.r);

    /* A reads the same end; the task is gone for everyone. */
    r = await_in(a, id, 0);
    cr_assert_eq(r->await_call->instance->state, BERTH__V1__INSTANCE__STATE__RESOLVED);
    cr_assert_eq(r->await_call->instance->attempt, 1);
    w_free(r);
    expect_verdict(w_guarded(b, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "wc", t->lock_token),
                   BERTH__V1__CODE__NOT_FOUND, BERTH__V1__STATUS__VERDICT__NOT_FOUND);
    w_free(f);
    free(id);
    bc_close(a);
    bc_close(b);
    bc_close(c);
}

/* Polls SQL until it gives want (long) or ms pass; the last value. */
static long sql_until(const char *sql, long want, int ms)
{
    long v = -1;
    for (int i = 0; i < ms / 20; i++) {
        if ((v = pgtmp_one_long(SQL, sql)) == want)
            break;
        sleep_ms(20);
    }
    return v;
}

RTest(the_timers_of_calls_fire_once_whichever_replica_comes_first)
{
    fresh_db("timers");
    start(3, NULL);
    enum { N = 30, TIMEOUT = 1500, BACKOFF = 100 };
    bc *c[REPLICAS];
    for (int i = 0; i < REPLICAS; i++)
        c[i] = d_client(&R[i]);
    char *ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = call_in(c[i % REPLICAS], "nobody", "q", TIMEOUT, 2, BACKOFF);
    /* Nobody works: every first attempt times out on whichever replica's
     * housekeeping comes first (all three hear of the timers), backs off,
     * and is re-driven ONCE: one task per call, its second attempt's. */
    long moved = sql_until("SELECT count(*) FROM berth.instances WHERE state = 1 AND attempt = 2",
                           N, TIMEOUT + BACKOFF + 2000);
    cr_assert_eq(moved, N, "%ld of %d calls on their second attempt", moved, N);
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks"), N,
                 "one task per call: a re-drive ran twice, or a dead attempt stayed");
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks WHERE call_attempt = 2"), N);
    /* The second timeouts fail them, each once, seen from any replica. */
    long failed =
        sql_until("SELECT count(*) FROM berth.instances WHERE state = 4", N, TIMEOUT + 2000);
    cr_assert_eq(failed, N);
    for (int i = 0; i < N; i++) {
        Berth__V1__Response *r = await_in(c[(i + 1) % REPLICAS], ids[i], 0);
        const Berth__V1__Instance *in = r->await_call->instance;
        cr_assert_eq(in->state, BERTH__V1__INSTANCE__STATE__FAILED);
        cr_assert_eq(in->attempt, 2);
        cr_assert_str_eq(in->error->code, "TIMEOUT");
        cr_assert_not_null(strstr(in->error->message, "attempt 2 of 2 timed out"), "%s",
                           in->error->message);
        w_free(r);
        free(ids[i]);
    }
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks"), 0);
    long fired = 0;
    for (int i = 0; i < REPLICAS; i++) {
        char *body;
        cr_assert_eq(d_http_get(&R[i], "/metrics", &body), 200);
        static const char key[] = "\nberth_calls_total{state=\"failed\"} ";
        const char *m = strstr(body, key);
        cr_assert_not_null(m, "replica %d: no failed calls line", i);
        fired += strtol(m + strlen(key), NULL, 10);
        free(body);
    }
    fprintf(stderr,
            "replicas: %d calls timed out twice each; their ends counted %ld times over "
            "3 replicas\n",
            N, fired);
    cr_assert_eq(fired, N, "each call's end by one replica, once");
    for (int i = 0; i < REPLICAS; i++)
        bc_close(c[i]);
}

/* ---- the operator's requests on any replica ---- */

/* A fail through c that spends the task's budget: terminal. */
static void fail_terminal(bc *c, const char *id, const char *worker_id, const char *token)
{
    Berth__V1__FailRequest f = BERTH__V1__FAIL_REQUEST__INIT;
    f.task_id = (char *)id;
    f.worker_id = (char *)worker_id;
    f.lock_token = (char *)token;
    f.has_retries_left = 1;
    f.retries_left = 0;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
    req.fail = &f;
    Berth__V1__Response *r = w_call(c, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert(r->fail->terminal);
    w_free(r);
}

static Berth__V1__AdminResponse *list_tasks(const daemon_proc *d, Berth__V1__TaskInfo__State state,
                                            uint32_t limit, const char *after)
{
    Berth__V1__ListTasksRequest l = BERTH__V1__LIST_TASKS_REQUEST__INIT;
    l.has_state = state != 0;
    l.state = state;
    l.has_limit = 1;
    l.limit = limit;
    l.after_id = (char *)after;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_TASKS;
    req.list_tasks = &l;
    return admin(d, &req);
}

RTest(
    an_operator_on_any_replica_lists_retries_and_discards_for_the_cluster_and_is_told_how_to_back_up)
{
    fresh_db("operator");
    start(3, NULL);
    bc *a = d_client(&R[0]), *b = d_client(&R[1]);
    char *ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = submitted_id(w_submit(a, i == 0 ? "spent" : "fine", "p", NULL));
    Berth__V1__Response *keep;
    Berth__V1__Task *t = fetch_one(a, "wa", "spent", 60000, &keep);
    fail_terminal(b, t->id, "wa", t->lock_token); /* through another replica */
    w_free(keep);

    /* Pages through C: every task once, in submission order. */
    Berth__V1__AdminResponse *r = list_tasks(&R[2], 0, 2, NULL);
    cr_assert_eq(r->status->code, BERTH__V1__CODE__OK, "%s", r->status->message);
    cr_assert_eq(r->list_tasks->n_tasks, 2);
    cr_assert_str_eq(r->list_tasks->tasks[0]->id, ids[0]);
    cr_assert_str_eq(r->list_tasks->tasks[1]->id, ids[1]);
    cr_assert_not_null(r->list_tasks->next_after_id, "not the last page");
    Berth__V1__AdminResponse *r2 = list_tasks(&R[1], 0, 2, r->list_tasks->next_after_id);
    cr_assert_eq(r2->list_tasks->n_tasks, 1);
    cr_assert_str_eq(r2->list_tasks->tasks[0]->id, ids[2]);
    cr_assert_null(r2->list_tasks->next_after_id, "the last page");
    berth__v1__admin_response__free_unpacked(r, NULL);
    berth__v1__admin_response__free_unpacked(r2, NULL);
    r = list_tasks(&R[0], BERTH__V1__TASK_INFO__STATE__TERMINAL, 10, NULL);
    cr_assert_eq(r->list_tasks->n_tasks, 1);
    cr_assert_str_eq(r->list_tasks->tasks[0]->id, ids[0]);
    berth__v1__admin_response__free_unpacked(r, NULL);

    /* A retry through C wakes a long poll waiting on B. */
    poller p = {.c = b, .worker = "wb", .topic = "spent", .max = 1, .wait_ms = 10000};
    poll_start(&p);
    await_waiting(&R[1], 1);
    Berth__V1__RetryTerminalRequest rt = BERTH__V1__RETRY_TERMINAL_REQUEST__INIT;
    rt.id = ids[0];
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL;
    req.retry_terminal = &rt;
    r = admin(&R[2], &req);
    cr_assert_eq(r->status->code, BERTH__V1__CODE__OK, "%s", r->status->message);
    berth__v1__admin_response__free_unpacked(r, NULL);
    uint64_t retried = mono_us();
    poll_join(&p);
    cr_assert_eq(p.r->fetch->n_tasks, 1, "the long poll on B was not woken by the retry");
    cr_assert_str_eq(p.r->fetch->tasks[0]->id, ids[0]);
    cr_assert_lt(answered_after_ms(&p, retried), 1000.0);

    /* Terminal again; discarded through A; gone on C. */
    fail_terminal(b, ids[0], "wb", p.r->fetch->tasks[0]->lock_token);
    w_free(p.r);
    Berth__V1__DiscardTerminalRequest dt = BERTH__V1__DISCARD_TERMINAL_REQUEST__INIT;
    dt.id = ids[0];
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DISCARD_TERMINAL;
    req.discard_terminal = &dt;
    r = admin(&R[0], &req);
    cr_assert_eq(r->status->code, BERTH__V1__CODE__OK, "%s", r->status->message);
    berth__v1__admin_response__free_unpacked(r, NULL);
    r = get_task(&R[2], ids[0]);
    cr_assert_eq(r->status->code, BERTH__V1__CODE__NOT_FOUND);
    berth__v1__admin_response__free_unpacked(r, NULL);
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks"), 2);

    /* A checkpoint says what to use instead. */
    Berth__V1__CheckpointRequest cp = BERTH__V1__CHECKPOINT_REQUEST__INIT;
    cp.dir = "/tmp/never-made";
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_CHECKPOINT;
    req.checkpoint = &cp;
    r = admin(&R[1], &req);
    cr_assert_eq(r->status->code, BERTH__V1__CODE__UNIMPLEMENTED);
    cr_assert(strstr(r->status->message, "pg_basebackup") && strstr(r->status->message, "pg_dump"),
              "%s", r->status->message);
    berth__v1__admin_response__free_unpacked(r, NULL);
    for (int i = 0; i < 3; i++)
        free(ids[i]);
    bc_close(a);
    bc_close(b);
}

/* ---- deployments across replicas (R14, R15; pg/pgdeploy.h) ---- */

static Berth__V1__AdminResponse *deploy_in(const daemon_proc *d, const char *id,
                                           const char *const *names)
{
    Berth__V1__ChannelDecl decl[4], *decls[4];
    size_t n = 0;
    for (; names[n] != NULL; n++) {
        berth__v1__channel_decl__init(&decl[n]);
        decl[n].name = (char *)names[n];
        decls[n] = &decl[n];
    }
    Berth__V1__DeployRequest dr = BERTH__V1__DEPLOY_REQUEST__INIT;
    dr.id = (char *)id;
    dr.n_channels = n;
    dr.channels = decls;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DEPLOY;
    req.deploy = &dr;
    return admin(d, &req);
}

/* Version v of id as replica d lists it (asserts it is listed). */
static Berth__V1__Deployment__State listed_state(const daemon_proc *d, const char *id, uint32_t v,
                                                 uint64_t *tasks)
{
    Berth__V1__ListDeploymentsRequest lr = BERTH__V1__LIST_DEPLOYMENTS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_DEPLOYMENTS;
    req.list_deployments = &lr;
    Berth__V1__AdminResponse *r = admin(d, &req);
    cr_assert_eq(r->status->code, BERTH__V1__CODE__OK, "%s", r->status->message);
    for (size_t i = 0; i < r->list_deployments->n_deployments; i++) {
        Berth__V1__Deployment *x = r->list_deployments->deployments[i];
        if (strcmp(x->id, id) == 0 && x->version == v) {
            Berth__V1__Deployment__State s = x->state;
            if (tasks != NULL)
                *tasks = x->tasks;
            berth__v1__admin_response__free_unpacked(r, NULL);
            return s;
        }
    }
    cr_assert_fail("%s version %u is not listed", id, v);
    return 0;
}

RTest(a_deployment_made_through_one_replica_routes_and_drains_on_every_replica)
{
    fresh_db("deploy");
    start(3, NULL);
    bc *a, *b, *c;
    char err[256];
    cr_assert_eq(bc_open(R[0].operate, &a, err, sizeof err), BC_OK, "%s", err);
    cr_assert_eq(bc_open(R[1].operate, &b, err, sizeof err), BC_OK, "%s", err);
    cr_assert_eq(bc_open(R[2].operate, &c, err, sizeof err), BC_OK, "%s", err);

    /* Deployed through A: the next submit through B goes to it. */
    Berth__V1__AdminResponse *r =
        deploy_in(&R[0], "shop", (const char *[]){"orders", "legacy", NULL});
    cr_assert_eq(r->status->code, BERTH__V1__CODE__OK, "%s", r->status->message);
    cr_assert_eq(r->deploy->deployment->version, 1);
    berth__v1__admin_response__free_unpacked(r, NULL);
    free(submitted_id(w_submit(b, "legacy", "l1", NULL)));
    free(submitted_id(w_submit(c, "orders", "o1", NULL)));
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.tasks t JOIN berth.deployments d "
                                     "ON d.number = t.deployment WHERE d.id = 'shop'"),
                 2, "both tasks belong to shop version 1");

    /* Version 2 through C: legacy is declared only by draining version 1,
     * and no replica takes new work for it, whatever it read before. */
    r = deploy_in(&R[2], "shop", (const char *[]){"orders", NULL});
    cr_assert_eq(r->status->code, BERTH__V1__CODE__OK, "%s", r->status->message);
    cr_assert_eq(r->deploy->deployment->version, 2);
    berth__v1__admin_response__free_unpacked(r, NULL);
    for (int i = 0; i < REPLICAS; i++) {
        bc *x = i == 0 ? a : i == 1 ? b : c;
        Berth__V1__Response *s = w_submit(x, "legacy", "l2", NULL);
        w_expect_code(s, BERTH__V1__CODE__FAILED_PRECONDITION);
        cr_assert(strstr(s->status->message, "draining"), "%s", s->status->message);
        w_free(s);
    }
    /* A change no replica was told of (no doorbell): the copy each read is
     * stale, and the turn's own check refuses all the same. */
    pgtmp_exec(SQL, "BEGIN");
    pgtmp_exec(SQL, "UPDATE berth.deployments SET state = 2 WHERE id = 'shop' AND version = 2");
    pgtmp_exec(SQL, "SELECT berth.deploy_epoch_bump()");
    pgtmp_exec(SQL, "COMMIT");
    Berth__V1__Response *s = w_submit(b, "orders", "o2", NULL);
    w_expect_code(s, BERTH__V1__CODE__FAILED_PRECONDITION);
    w_free(s);
    pgtmp_exec(SQL, "BEGIN");
    pgtmp_exec(SQL, "UPDATE berth.deployments SET state = 1 WHERE id = 'shop' AND version = 2");
    pgtmp_exec(SQL, "SELECT berth.deploy_epoch_bump()");
    pgtmp_exec(SQL, "COMMIT");
    free(submitted_id(w_submit(a, "orders", "o3", NULL)));

    /* What version 1 holds is served through any replica; once it holds
     * nothing it retires, and every replica lists it so within a second
     * or two (the gate runs where the last task went, or on a replica's
     * gate turn). */
    cr_assert_eq(listed_state(&R[1], "shop", 1, NULL), BERTH__V1__DEPLOYMENT__STATE__DRAINING);
    Berth__V1__Response *keep;
    Berth__V1__Task *t = fetch_one(a, "w", "legacy", 30000, &keep);
    w_free(w_guarded(b, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "w", t->lock_token));
    w_free(keep);
    t = fetch_one(b, "w", "orders", 30000, &keep); /* o1: the oldest, version 1's */
    cr_assert(t->payload.len == 2 && memcmp(t->payload.data, "o1", 2) == 0, "not o1");
    Berth__V1__Response *done =
        w_guarded(c, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "w", t->lock_token);
    w_expect_code(done, BERTH__V1__CODE__OK);
    w_free(done);
    w_free(keep);
    Berth__V1__Deployment__State st = 0;
    for (int i = 0; i < 100 && st != BERTH__V1__DEPLOYMENT__STATE__RETIRED; i++) {
        st = listed_state(&R[i % REPLICAS], "shop", 1, NULL);
        if (st != BERTH__V1__DEPLOYMENT__STATE__RETIRED)
            sleep_ms(20);
    }
    cr_assert_eq(st, BERTH__V1__DEPLOYMENT__STATE__RETIRED);
    uint64_t held = 0;
    cr_assert_eq(listed_state(&R[0], "shop", 2, &held), BERTH__V1__DEPLOYMENT__STATE__LIVE);
    cr_assert_eq(held, 1, "o3 is version 2's");
    /* /metrics on any replica: the cluster's deployments, labelled so that
     * a sum over replicas does not count them three times (at most 1 s
     * old). */
    bool shown = false;
    for (int i = 0; i < 150 && !shown; i++) {
        char *body = NULL;
        cr_assert_eq(d_http_get(&R[i % REPLICAS], "/metrics", &body), 200);
        shown = strstr(body, "berth_deployments{state=\"live\",scope=\"cluster\"} 1\n") &&
                strstr(body, "berth_deployments{state=\"retired\",scope=\"cluster\"} 1\n") &&
                strstr(body, "berth_outbox_pending{scope=\"cluster\"} 0\n");
        free(body);
        if (!shown)
            sleep_ms(20);
    }
    cr_assert(shown, "the cluster's deployments are not in /metrics");
    bc_close(a);
    bc_close(b);
    bc_close(c);
}

/* Under --strict-channels a fetch, too, is routed: a replica whose copy of
 * the deployments is stale (the change made in SQL, with no doorbell)
 * still answers what the database says. */
RTest(strict_channels_follow_the_database_whatever_a_replica_read)
{
    fresh_db("strict");
    static const char *const strict[] = {"--strict-channels", NULL};
    start(2, strict);
    bc *b;
    char err[256];
    cr_assert_eq(bc_open(R[1].operate, &b, err, sizeof err), BC_OK, "%s", err);
    Berth__V1__AdminResponse *r = deploy_in(&R[0], "d", (const char *[]){"t", NULL});
    cr_assert_eq(r->status->code, BERTH__V1__CODE__OK, "%s", r->status->message);
    berth__v1__admin_response__free_unpacked(r, NULL);
    Berth__V1__Response *f = w_fetch(b, "w", "t", 1, 0, 0);
    w_expect_code(f, BERTH__V1__CODE__OK); /* declared now, through A */
    w_free(f);
    Berth__V1__Response *s = w_submit(b, "u", "x", NULL);
    w_expect_code(s, BERTH__V1__CODE__NOT_FOUND);
    w_free(s);

    pgtmp_exec(SQL, "BEGIN");
    pgtmp_exec(SQL, "UPDATE berth.deployments SET state = 3, retired_at = 1 WHERE id = 'd'");
    pgtmp_exec(SQL, "SELECT berth.deploy_epoch_bump()");
    pgtmp_exec(SQL, "COMMIT");
    f = w_fetch(b, "w", "t", 1, 0, 0);
    w_expect_code(f, BERTH__V1__CODE__NOT_FOUND);
    w_free(f);
    s = w_submit(b, "t", "x", NULL);
    w_expect_code(s, BERTH__V1__CODE__NOT_FOUND);
    w_free(s);
    bc_close(b);
}
