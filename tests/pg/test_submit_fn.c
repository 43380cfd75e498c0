/*
 * test_submit_fn.c — berth.submit() (pg/sql/003_submit.sql), a task
 * submitted inside an application's own transaction: it exists if and only
 * if that transaction commits, a fetch waiting on an engine is woken at the
 * COMMIT and not before, its key is the same key berthd's submits keep, and
 * its refusals say what berthd's would.
 *
 * One throwaway cluster for the binary (pgtmp); each test makes its own
 * database and opens an engine on it (the engine writes the settings
 * berth.submit() checks against).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "engine/engine.h"
#include "pg/pgconn.h"
#include "store/err.h"
#include "tests/support/pgtmp.h"
#include "tests/support/pgtmp_hooks.h"
#include "tests/support/timing.h"

static char err[1024];

/* An engine on a fresh database, on the system clock. */
static engine *open_engine(const char *name, char *uri, size_t len)
{
    pgtmp_createdb(name, uri, len);
    engine_options o;
    engine_options_default(&o);
    o.store_uri = uri;
    o.payload_max_bytes = 1000;
    o.fetch_max_bytes = 1000;
    o.fetch_inflight_max_bytes = 1000;
    o.priority_default = 10;
    o.priority_max = 100;
    engine *e;
    int rv = engine_open(&o, &e, err, sizeof err);
    cr_assert_eq(rv, BERTH_OK, "engine_open: %s", err);
    return e;
}

/* The first column of the first row of sql, as text; "ERROR sqlstate: message
 * | detail" when it fails. */
static const char *one(PGconn *c, const char *sql)
{
    static char v[1024];
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_TUPLES_OK && PQntuples(r) > 0)
        snprintf(v, sizeof v, "%s", PQgetisnull(r, 0, 0) ? "NULL" : PQgetvalue(r, 0, 0));
    else if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        snprintf(v, sizeof v, "(none)");
    else
        snprintf(v, sizeof v, "ERROR %s: %s | %s", PQresultErrorField(r, PG_DIAG_SQLSTATE),
                 PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY),
                 PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL)
                     ? PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL)
                     : "");
    PQclear(r);
    return v;
}

static engine_reply *fetch(engine *e, const char *topic, uint64_t wait_ms)
{
    static const char *topics[1];
    topics[0] = topic;
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){
        .worker_id = "w", .topics = topics, .n_topics = 1, .has_wait_ms = true, .wait_ms = wait_ms};
    engine_reply *r = engine_exec_sync(e, &req);
    cr_assert_not_null(r);
    return r;
}

/* The 32 hex digits of a uuid as berth prints ids. */
static void berth_id(const char *uuid, char out[ENGINE_ID_STR])
{
    size_t k = 0;
    for (const char *p = uuid; *p && k < ENGINE_ID_STR - 1; p++)
        if (*p != '-')
            out[k++] = *p;
    out[k] = '\0';
}

Test(submit_fn, a_task_submitted_in_a_transaction_exists_once_it_commits)
{
    char uri[256];
    engine *e = open_engine("fn_commit", uri, sizeof uri);
    PGconn *app = pgtmp_connect(uri), *look = pgtmp_connect(uri);
    cr_assert_str_eq(one(app, "BEGIN"), "(none)");
    char id[64];
    snprintf(id, sizeof id, "%s",
             one(app, "SELECT id FROM berth.submit('orders', '\\x68656c6c6f'::bytea, "
                      "headers => '{trace,t-1}', content_type => 'text/plain', priority => 7)"));
    cr_assert_str_eq(one(look, "SELECT count(*) FROM berth.tasks"), "0",
                     "not there before the transaction commits");
    engine_reply *r = fetch(e, "orders", 0);
    cr_assert_eq(r->n_tasks, 0, "nor fetchable");
    engine_reply_free(r);
    cr_assert_str_eq(one(app, "COMMIT"), "(none)");
    r = fetch(e, "orders", 0);
    cr_assert_eq(r->n_tasks, 1);
    char want[ENGINE_ID_STR];
    berth_id(id, want);
    cr_assert_str_eq(r->tasks[0].id, want);
    cr_assert_eq(r->tasks[0].payload_len, 5);
    cr_assert_eq(memcmp(r->tasks[0].payload, "hello", 5), 0);
    cr_assert_str_eq(r->tasks[0].content_type, "text/plain");
    cr_assert_eq(r->tasks[0].n_headers, 1);
    cr_assert_str_eq(r->tasks[0].headers[0].name, "trace");
    cr_assert_str_eq(r->tasks[0].headers[0].value, "t-1");
    cr_assert_eq(r->tasks[0].priority, 7);
    cr_assert_eq(r->tasks[0].retries_left, 3, "the failure budget of the engine's settings");
    engine_reply_free(r);
    pgconn_close(app);
    pgconn_close(look);
    engine_close(e);
}

Test(submit_fn, a_transaction_rolled_back_leaves_no_task_and_no_key)
{
    char uri[256];
    engine *e = open_engine("fn_rollback", uri, sizeof uri);
    PGconn *app = pgtmp_connect(uri);
    one(app, "BEGIN");
    one(app, "SELECT berth.submit('orders', '\\x00'::bytea, idempotency_key => 'o-1')");
    one(app, "ROLLBACK");
    cr_assert_str_eq(one(app, "SELECT count(*) FROM berth.tasks"), "0");
    cr_assert_str_eq(one(app, "SELECT count(*) FROM berth.submit_keys"), "0");
    engine_reply *r = fetch(e, "orders", 0);
    cr_assert_eq(r->n_tasks, 0);
    engine_reply_free(r);
    /* The key is free: a later submit with it is new. */
    cr_assert_str_eq(one(app, "SELECT duplicate FROM berth.submit('orders', '\\x00'::bytea, "
                              "idempotency_key => 'o-1')"),
                     "f");
    pgconn_close(app);
    engine_close(e);
}

typedef struct waiting {
    engine *e;
    uint64_t wait_ms;
    engine_reply *r;
    struct timespec at;
} waiting;

static void *wait_main(void *arg)
{
    waiting *w = arg;
    w->r = fetch(w->e, "mail", w->wait_ms);
    clock_gettime(CLOCK_MONOTONIC, &w->at);
    return NULL;
}

static double ms_since(const struct timespec *t0, const struct timespec *t1)
{
    return (double)(t1->tv_sec - t0->tv_sec) * 1e3 + (double)(t1->tv_nsec - t0->tv_nsec) / 1e6;
}

Test(submit_fn, a_waiting_fetch_wakes_at_the_commit_and_not_before)
{
    char uri[256];
    engine *e = open_engine("fn_wake", uri, sizeof uri);
    PGconn *app = pgtmp_connect(uri);
    waiting w = {.e = e, .wait_ms = 10000};
    pthread_t th;
    pthread_create(&th, NULL, wait_main, &w);
    sleep_ms(300); /* the fetch claims nothing and waits */
    one(app, "BEGIN");
    one(app, "SELECT berth.submit('mail', '\\x01'::bytea)");
    sleep_ms(400);
    cr_assert_null(w.r, "answered before the transaction committed");
    struct timespec committed;
    one(app, "COMMIT");
    clock_gettime(CLOCK_MONOTONIC, &committed);
    pthread_join(th, NULL);
    cr_assert_eq(w.r->n_tasks, 1, "the commit's doorbell woke the waiting fetch");
    double took = ms_since(&committed, &w.at);
    fprintf(stderr, "submit_fn: a waiting fetch answered %.1f ms after the COMMIT\n", took);
    cr_assert_lt(took, 1000.0);
    engine_reply_free(w.r);

    /* Rolled back: no doorbell, no task; the fetch waits to its end. */
    w.r = NULL;
    w.wait_ms = 1500;
    pthread_create(&th, NULL, wait_main, &w);
    sleep_ms(300);
    one(app, "BEGIN");
    one(app, "SELECT berth.submit('mail', '\\x02'::bytea)");
    one(app, "ROLLBACK");
    sleep_ms(500);
    cr_assert_null(w.r, "a rolled back submit woke the fetch");
    pthread_join(th, NULL);
    cr_assert_eq(w.r->status.code, ENGINE_CODE_OK);
    cr_assert_eq(w.r->n_tasks, 0, "it ended empty at its deadline");
    engine_reply_free(w.r);
    pgconn_close(app);
    engine_close(e);
}

Test(submit_fn, its_idempotency_keys_are_the_ones_berthd_keeps)
{
    char uri[256];
    engine *e = open_engine("fn_keys", uri, sizeof uri);
    PGconn *app = pgtmp_connect(uri);
    char first[64];
    snprintf(first, sizeof first, "%s",
             one(app, "SELECT id || ' ' || duplicate FROM berth.submit('orders', '\\x01'::bytea, "
                      "idempotency_key => 'k')"));
    cr_assert(strstr(first, " false") != NULL, "%s", first);
    char again[64];
    snprintf(again, sizeof again, "%s",
             one(app, "SELECT id || ' ' || duplicate FROM berth.submit('orders', '\\x02'::bytea, "
                      "idempotency_key => 'k')"));
    cr_assert_eq(strncmp(again, first, 36), 0, "%s / %s", again, first);
    cr_assert(strstr(again, " true") != NULL);
    /* berthd's submit with that key answers the same task. */
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit = (engine_submit_args){.topic = "orders",
                                        .payload = (const uint8_t *)"x",
                                        .payload_len = 1,
                                        .idempotency_key = "k"};
    engine_reply *r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_OK);
    cr_assert(r->submitted[0].duplicate);
    char want[ENGINE_ID_STR];
    first[36] = '\0';
    berth_id(first, want);
    cr_assert_str_eq(r->submitted[0].id, want);
    engine_reply_free(r);
    cr_assert_str_eq(one(app, "SELECT count(*) FROM berth.tasks"), "1");
    pgconn_close(app);
    engine_close(e);
}

/* A submit refused by berthd and by berth.submit(): the same message, and
 * the field (and limit) in the DETAIL. */
static void same_refusal(engine *e, PGconn *app, const engine_submit_args *a, const char *sql,
                         const char *detail)
{
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit = *a;
    engine_reply *r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_INVALID_ARGUMENT, "%s: %d %s", sql, r->status.code,
                 r->status.message);
    char want[1024];
    snprintf(want, sizeof want, "ERROR 22023: %s | %s", r->status.message, detail);
    engine_reply_free(r);
    cr_assert_str_eq(one(app, sql), want);
}

Test(submit_fn, its_refusals_say_what_berthd_says)
{
    char uri[256];
    engine *e = open_engine("fn_bounds", uri, sizeof uri);
    PGconn *app = pgtmp_connect(uri);
    static uint8_t big[1001];
    same_refusal(
        e, app, &(engine_submit_args){.topic = "t", .payload = big, .payload_len = sizeof big},
        "SELECT berth.submit('t', decode(repeat('00', 1001), 'hex'))", "field=payload limit=1000");
    same_refusal(e, app, &(engine_submit_args){.topic = "t!"},
                 "SELECT berth.submit('t!', '\\x'::bytea)", "field=topic");
    engine_header h = {"Berth-Attempt", "9"};
    same_refusal(e, app, &(engine_submit_args){.topic = "t", .headers = &h, .n_headers = 1},
                 "SELECT berth.submit('t', '\\x'::bytea, headers => '{Berth-Attempt,9}')",
                 "field=headers");
    engine_options d;
    engine_options_default(&d);
    char sql[256], detail[64];
    same_refusal(e, app, &(engine_submit_args){.topic = "t", .has_priority = true, .priority = 101},
                 "SELECT berth.submit('t', '\\x'::bytea, priority => 101)",
                 "field=priority limit=100");
    snprintf(sql, sizeof sql, "SELECT berth.submit('t', '\\x'::bytea, delay_ms => %llu)",
             (unsigned long long)d.delay_max_ms + 1);
    snprintf(detail, sizeof detail, "field=delay_ms limit=%llu",
             (unsigned long long)d.delay_max_ms);
    same_refusal(
        e, app,
        &(engine_submit_args){.topic = "t", .has_delay_ms = true, .delay_ms = d.delay_max_ms + 1},
        sql, detail);
    cr_assert_str_eq(one(app, "SELECT count(*) FROM berth.tasks"), "0", "nothing kept");
    pgconn_close(app);
    engine_close(e);
}

Test(submit_fn, a_delay_holds_the_task_back_from_the_transactions_now)
{
    char uri[256];
    engine *e = open_engine("fn_delay", uri, sizeof uri);
    PGconn *app = pgtmp_connect(uri);
    one(app, "BEGIN");
    one(app, "SELECT set_config('berth.clock_ms', '1700000000000', true)");
    one(app, "SELECT berth.submit('later', '\\x01'::bytea, delay_ms => 60000)");
    one(app, "COMMIT");
    cr_assert_str_eq(one(app, "SELECT available_at - created_at || ' ' || created_at FROM "
                              "berth.tasks"),
                     "60000 1700000000000");
    pgconn_close(app);
    engine_close(e);
}

/* It routes as berthd does (R14): a declared channel's task belongs to its
 * live deployment; a channel only draining deployments declare takes
 * nothing new, with berthd's words, but a key accepted before is its
 * duplicate; a retire waits for the application's transaction, so the
 * gate sees its task. */
Test(submit_fn, it_routes_by_the_deployments_as_berthd_does)
{
    char uri[256];
    engine *e = open_engine("fn_routes", uri, sizeof uri);
    PGconn *app = pgtmp_connect(uri), *other = pgtmp_connect(uri);
    engine_request req = {.op = ENGINE_OP_DEPLOY};
    req.u.deploy.id = "shop";
    req.u.deploy.channels = (engine_channel[]){{.name = "orders"}};
    req.u.deploy.n_channels = 1;
    engine_reply *r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_OK, "%s", r->status.message);
    engine_reply_free(r);

    cr_assert_str_eq(one(app, "SELECT duplicate FROM berth.submit('orders', '\\x01'::bytea, "
                              "idempotency_key => 'k1')"),
                     "f");
    cr_assert_str_eq(one(app, "SELECT deployment FROM berth.tasks"), "1", "shop's version 1");

    /* A retire waits for a transaction that submitted to the channel. */
    pgtmp_exec(app, "BEGIN");
    cr_assert_str_eq(one(app, "SELECT duplicate FROM berth.submit('orders', '\\x02'::bytea)"), "f");
    pgtmp_exec(other, "SET lock_timeout = '200ms'");
    cr_assert(
        strncmp(one(other, "SELECT count(*) FROM berth.deploy_lock(NULL)"), "ERROR 55P03", 11) == 0,
        "a retire's lock did not wait for the application's transaction");
    pgtmp_exec(app, "COMMIT");

    req = (engine_request){.op = ENGINE_OP_RETIRE};
    req.u.retire.id = "shop";
    r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_OK, "%s", r->status.message);
    cr_assert_eq(r->deployments[0].state, ENGINE_DEPLOYMENT_DRAINING, "it holds two tasks");
    engine_reply_free(r);

    /* Draining: berthd's refusal, in berth.submit's words too. */
    req = (engine_request){.op = ENGINE_OP_SUBMIT};
    req.u.submit = (engine_submit_args){.topic = "orders"};
    r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_FAILED_PRECONDITION);
    char want[512];
    snprintf(want, sizeof want, "ERROR 55000: %s | field=topic", r->status.message);
    engine_reply_free(r);
    cr_assert_str_eq(one(app, "SELECT berth.submit('orders', '\\x03'::bytea)"), want);
    cr_assert_str_eq(one(app, "SELECT duplicate FROM berth.submit('orders', '\\x04'::bytea, "
                              "idempotency_key => 'k1')"),
                     "t", "a key accepted before is its duplicate");
    cr_assert_str_eq(one(app, "SELECT count(*) FROM berth.tasks"), "2");
    pgconn_close(other);
    pgconn_close(app);
    engine_close(e);
}

/* ---- a push channel: the delivery, sent by a replica's relay ---- */

static struct {
    pthread_mutex_t mu;
    int n;
    char id[ENGINE_ID_STR], payload[32];
    uint64_t flight;
} PUSHED = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int on_push(void *ctx, engine *e, const engine_push_delivery *d)
{
    (void)ctx;
    (void)e;
    pthread_mutex_lock(&PUSHED.mu);
    PUSHED.n++;
    memcpy(PUSHED.id, d->id, ENGINE_ID_STR);
    snprintf(PUSHED.payload, sizeof PUSHED.payload, "%.*s", (int)d->payload_len,
             (const char *)d->payload);
    PUSHED.flight = d->flight;
    pthread_mutex_unlock(&PUSHED.mu);
    return 0;
}

static int pushed(void)
{
    pthread_mutex_lock(&PUSHED.mu);
    int n = PUSHED.n;
    pthread_mutex_unlock(&PUSHED.mu);
    return n;
}

Test(submit_fn, to_a_push_channel_it_writes_the_delivery_that_a_replica_sends)
{
    char uri[256];
    pgtmp_createdb("fn_push", uri, sizeof uri);
    engine_options o;
    engine_options_default(&o);
    o.store_uri = uri;
    o.push_fn = on_push;
    engine *e;
    cr_assert_eq(engine_open(&o, &e, err, sizeof err), BERTH_OK, "engine_open: %s", err);
    PGconn *app = pgtmp_connect(uri);
    engine_request req = {.op = ENGINE_OP_DEPLOY};
    req.u.deploy.id = "hooks";
    req.u.deploy.channels =
        (engine_channel[]){{.name = "mail", .transport = "nng+req://127.0.0.1:9"}};
    req.u.deploy.n_channels = 1;
    engine_reply *r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_OK, "%s", r->status.message);
    engine_reply_free(r);

    pgtmp_exec(app, "BEGIN");
    cr_assert_str_eq(one(app, "SELECT duplicate FROM berth.submit('mail', 'hi'::bytea)"), "f");
    sleep_ms(300);
    cr_assert_eq(pushed(), 0, "nothing is sent before the application's COMMIT");
    pgtmp_exec(app, "COMMIT");
    cr_assert_str_eq(one(app, "SELECT count(*) FROM berth.tasks"), "0", "a push channel: no task");
    cr_assert_str_eq(one(app, "SELECT count(*) FROM berth.outbox"), "1");
    for (int i = 0; i < 500 && pushed() == 0; i++) /* the o: doorbell: the relay looks */
        sleep_ms(10);
    cr_assert_eq(pushed(), 1);
    cr_assert_str_eq(PUSHED.payload, "hi");

    req = (engine_request){.op = ENGINE_OP_PUSH_ACK};
    req.u.push_ack = (struct engine_push_ack){
        .id = PUSHED.id, .flight = PUSHED.flight, .outcome = ENGINE_PUSH_DELIVERED};
    r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_OK, "%s", r->status.message);
    engine_reply_free(r);
    cr_assert_str_eq(one(app, "SELECT count(*) FROM berth.outbox"), "0", "delivered");
    pgconn_close(app);
    engine_close(e);
}
