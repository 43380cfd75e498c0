/*
 * test_waits.c — long polls on PostgreSQL that cost the database nothing
 * (pg/README.md §5.4): a topic a claim found empty, with no doorbell since,
 * is known empty, and a new fetch naming only such topics waits (or answers
 * empty) without a transaction; a park through another engine, or a
 * delayed task's instant, ends that knowledge. Two engines on one database
 * stand for two replicas, on the system clock.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "engine/engine.h"
#include "store/err.h"
#include "pg/pgconn.h"
#include "pg/pglisten.h"
#include "tests/support/pgtmp.h"
#include "tests/support/pgtmp_hooks.h"
#include "tests/support/timing.h"

static char err[1024];

static engine *open_on(const char *uri)
{
    engine_options o;
    engine_options_default(&o);
    o.store_uri = uri;
    engine *e;
    cr_assert_eq(engine_open(&o, &e, err, sizeof err), BERTH_OK, "engine_open: %s", err);
    return e;
}

static uint64_t turns(engine *e)
{
    engine_durable d;
    engine_durability(e, &d);
    return d.turns;
}

typedef struct poll_call {
    engine *e;
    const char *topic;
    uint64_t wait_ms;
    engine_reply *r;
    uint64_t answered_ms;
    pthread_t th;
} poll_call;

static engine_reply *fetch(engine *e, const char *topic, uint64_t wait_ms)
{
    const char *topics[1] = {topic};
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){
        .worker_id = "w", .topics = topics, .n_topics = 1, .has_wait_ms = true, .wait_ms = wait_ms};
    engine_reply *r = engine_exec_sync(e, &req);
    cr_assert_not_null(r);
    cr_assert_eq(r->status.code, ENGINE_CODE_OK, "%s", r->status.message);
    return r;
}

static void *poll_main(void *arg)
{
    poll_call *p = arg;
    p->r = fetch(p->e, p->topic, p->wait_ms);
    p->answered_ms = mono_ms();
    return NULL;
}

static void poll_start(poll_call *p)
{
    p->r = NULL;
    pthread_create(&p->th, NULL, poll_main, p);
}

static void submit(engine *e, const char *topic, uint64_t delay_ms)
{
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit = (engine_submit_args){.topic = topic,
                                        .payload = (const uint8_t *)"x",
                                        .payload_len = 1,
                                        .has_delay_ms = delay_ms > 0,
                                        .delay_ms = delay_ms};
    engine_reply *r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_OK, "%s", r->status.message);
    engine_reply_free(r);
}

/* The engine's turns once they have stopped changing. */
static uint64_t settled_turns(engine *e)
{
    uint64_t t = turns(e);
    for (int i = 0; i < 50; i++) {
        sleep_ms(40);
        uint64_t u = turns(e);
        if (u == t)
            return t;
        t = u;
    }
    cr_assert_fail("the engine's turns did not settle");
    return t;
}

Test(waits, a_fetch_on_a_topic_known_empty_runs_no_transaction_until_a_park_rings_it)
{
    char uri[256];
    pgtmp_createdb("waits_empty", uri, sizeof uri);
    engine *a = open_on(uri), *b = open_on(uri);
    poll_call first = {.e = b, .topic = "idle", .wait_ms = 4000};
    poll_start(&first); /* claims, finds nothing: "idle" is known empty on b */
    uint64_t t0 = settled_turns(b);
    engine_reply *r = fetch(b, "idle", 0);
    cr_assert_eq(r->n_tasks, 0);
    engine_reply_free(r);
    poll_call second = {.e = b, .topic = "idle", .wait_ms = 4000};
    poll_start(&second);
    cr_assert_eq(settled_turns(b), t0, "a fetch on a topic known empty ran a turn");
    uint64_t parked = mono_ms();
    submit(a, "idle", 0); /* a's doorbell rings b: its waiters claim */
    pthread_join(first.th, NULL);
    cr_assert_eq(first.r->n_tasks, 1, "the first waiter takes the task");
    cr_assert_lt(first.answered_ms - parked, 1000);
    cr_assert_gt(turns(b), t0);
    engine_reply_free(first.r);
    pthread_join(second.th, NULL);
    cr_assert_eq(second.r->n_tasks, 0, "the second waits to its end: one task");
    engine_reply_free(second.r);
    engine_close(b);
    engine_close(a);
}

Test(waits, a_delayed_task_on_a_topic_known_empty_is_fetched_at_its_instant)
{
    char uri[256];
    pgtmp_createdb("waits_delay", uri, sizeof uri);
    engine *a = open_on(uri), *b = open_on(uri);
    engine_reply_free(fetch(b, "soon", 200)); /* waits, ends empty: "soon" known empty on b */
    uint64_t t0 = settled_turns(b);
    uint64_t at = mono_ms();
    submit(a, "soon", 700); /* a's doorbell tells b when "soon" has work */
    poll_call p = {.e = b, .topic = "soon", .wait_ms = 4000};
    poll_start(&p);
    sleep_ms(300);
    cr_assert_null(p.r, "answered before the task's instant");
    pthread_join(p.th, NULL);
    cr_assert_eq(p.r->n_tasks, 1, "the delayed task, at its instant");
    uint64_t took = p.answered_ms - at;
    fprintf(stderr, "waits: a task delayed 700 ms fetched through the other engine after %llu ms\n",
            (unsigned long long)took);
    cr_assert_geq(took, 690);
    cr_assert_lt(took, 1500);
    cr_assert_gt(turns(b), t0);
    engine_reply_free(p.r);
    engine_close(b);
    engine_close(a);
}

/* pglisten.h: doorbells leave at most one per PGLISTEN_GAP_MS, the ones
 * behind gathered into it, none lost. A burst of turns through one engine,
 * each parking work on one of 20 topics, heard on a LISTEN of the test's
 * own: at most one notification per gap (plus the first and the last), and
 * every topic rung. */
Test(waits, a_burst_of_turns_rings_at_most_one_doorbell_per_gap_and_every_topic)
{
    char uri[256];
    pgtmp_createdb("waits_gap", uri, sizeof uri);
    engine *a = open_on(uri);
    PGconn *l = pgtmp_connect(uri);
    pgtmp_exec(l, "LISTEN berth");
    enum { TURNS = 200, TOPICS = 20 };
    char topics[TOPICS][16];
    for (int i = 0; i < TOPICS; i++)
        snprintf(topics[i], sizeof topics[i], "gap%02d", i);
    uint64_t t0 = mono_ms();
    for (int i = 0; i < TURNS; i++)
        submit(a, topics[i % TOPICS], 0); /* one turn each: the calls wait for their answer */
    uint64_t elapsed = mono_ms() - t0;
    bool rung[TOPICS] = {false};
    int heard = 0;
    for (uint64_t until = mono_ms() + 1000; mono_ms() < until;) {
        sleep_ms(20);
        cr_assert_eq(PQconsumeInput(l), 1);
        PGnotify *n;
        while ((n = PQnotifies(l)) != NULL) {
            heard++;
            for (int i = 0; i < TOPICS; i++) {
                char rec[sizeof topics[0] + 8];
                snprintf(rec, sizeof rec, "p:%.15s", topics[i]);
                for (const char *at = strstr(n->extra, rec); at != NULL; at = strstr(at + 1, rec))
                    if (at[strlen(rec)] == '\0' || at[strlen(rec)] == ';')
                        rung[i] = true;
            }
            PQfreemem(n);
        }
    }
    for (int i = 0; i < TOPICS; i++)
        cr_assert(rung[i], "no doorbell rang %s", topics[i]);
    uint64_t most = elapsed / PGLISTEN_GAP_MS + 2;
    cr_assert_leq((uint64_t)heard, most,
                  "%d doorbells for %d turns in %llu ms: more than one per %d ms", heard, TURNS,
                  (unsigned long long)elapsed, PGLISTEN_GAP_MS);
    fprintf(stderr, "waits: %d turns in %llu ms rang %d doorbells\n", TURNS,
            (unsigned long long)elapsed, heard);
    pgconn_close(l);
    engine_close(a);
}

/* Gathered past what one notification carries, the doorbells become
 * "p:*" (every topic and await looks again) and keep the earliest timer
 * they held: another replica's housekeeping learns of it from nothing
 * else. (No connection: nothing leaves, what gathers is all there is.) */
Test(waits, doorbells_gathered_past_one_notification_keep_their_earliest_timer)
{
    pglisten l = {0};
    pglisten_ring(&l, "p:a;i:+500");
    cr_assert_str_eq(l.bells, "p:a;i:+500");
    char big[7200];
    size_t n = 0;
    for (int k = 0; n + 12 < sizeof big - 1; k++)
        n += (size_t)snprintf(big + n, sizeof big - n, "%sp:t%05d", k ? ";" : "", k);
    pglisten_ring(&l, big);
    cr_assert_str_eq(l.bells, "p:*;i:+500", "past the size: look at everything, the timer kept");
    pglisten_ring(&l, "r:abc;t:x+40");
    cr_assert_str_eq(l.bells, "p:*;i:+500", "p:* rings awaits and topics already");
    pglisten_ring(&l, "p:b;i:+200");
    cr_assert_str_eq(l.bells, "p:*;i:+200", "an earlier timer replaces it");
    pglisten_ring(&l, "i:+900");
    cr_assert_str_eq(l.bells, "p:*;i:+200", "a later one does not");
    pglisten_fini(&l);

    pglisten m = {0};
    pglisten_ring(&m, "p:c");
    pglisten_ring(&m, "p:*");
    cr_assert_str_eq(m.bells, "p:*", "no timer, none made up");
    pglisten_fini(&m);
}

/* The state version 1 of deployment id has, as e lists it. */
static engine_deployment_state dep_state(engine *e, const char *id)
{
    engine_request req = {.op = ENGINE_OP_LIST_DEPLOYMENTS};
    engine_reply *r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_OK, "%s", r->status.message);
    engine_deployment_state s = 0;
    for (size_t i = 0; i < r->n_deployments; i++)
        if (strcmp(r->deployments[i].id, id) == 0 && r->deployments[i].version == 1)
            s = r->deployments[i].state;
    engine_reply_free(r);
    cr_assert_neq(s, 0, "%s is not listed", id);
    return s;
}

/* The gate (pg/pgdeploy.h, THE GATE): a turn that ends a draining
 * deployment's last task takes K_DEPLOY only if it is free; while another
 * replica's submits hold it shared, the replica's gate-only turn, which
 * waits for it, retires the deployment within a second or so of their
 * commit. */
Test(waits, a_deployment_left_draining_by_a_busy_lock_is_retired_by_the_gate_turn)
{
    char uri[256];
    pgtmp_createdb("gate_turn", uri, sizeof uri);
    engine *e = open_on(uri);
    PGconn *other = pgtmp_connect(uri);
    engine_request req = {.op = ENGINE_OP_DEPLOY};
    req.u.deploy.id = "d";
    req.u.deploy.channels = (engine_channel[]){{.name = "t"}};
    req.u.deploy.n_channels = 1;
    engine_reply *r = engine_exec_sync(e, &req);
    cr_assert_eq(r->status.code, ENGINE_CODE_OK, "%s", r->status.message);
    engine_reply_free(r);
    submit(e, "t", 0);
    req = (engine_request){.op = ENGINE_OP_RETIRE};
    req.u.retire.id = "d";
    engine_reply_free(engine_exec_sync(e, &req));
    cr_assert_eq(dep_state(e, "d"), ENGINE_DEPLOYMENT_DRAINING);

    /* Another replica's turn holds K_DEPLOY shared across the completion. */
    pgtmp_exec(other, "BEGIN");
    pgtmp_exec(other, "SELECT pg_advisory_xact_lock_shared(7089066377542189057)");
    r = fetch(e, "t", 0);
    cr_assert_eq(r->n_tasks, 1);
    engine_request c = {.op = ENGINE_OP_COMPLETE};
    c.u.complete.guard = (engine_guard){r->tasks[0].id, "w", r->tasks[0].lock_token};
    engine_reply *done = engine_exec_sync(e, &c);
    cr_assert_eq(done->status.code, ENGINE_CODE_OK, "%s", done->status.message);
    engine_reply_free(done);
    engine_reply_free(r);
    cr_assert_eq(dep_state(e, "d"), ENGINE_DEPLOYMENT_DRAINING,
                 "the completion's turn could not take the lock");
    pgtmp_exec(other, "COMMIT");
    uint64_t t0 = mono_ms();
    while (dep_state(e, "d") != ENGINE_DEPLOYMENT_RETIRED && mono_ms() - t0 < 5000)
        sleep_ms(20);
    cr_assert_eq(dep_state(e, "d"), ENGINE_DEPLOYMENT_RETIRED, "no gate turn retired it");
    cr_assert_lt(mono_ms() - t0, 2500);
    pgconn_close(other);
    engine_close(e);
}
