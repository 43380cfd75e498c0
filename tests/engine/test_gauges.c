/* The gauges of /metrics (tasks by topic and state) are kept as the engine
 * goes, never by walking the tasks: checked here against the walk that
 * admin stats does, after every step of random work with the clock moving
 * (locks that run out, backoffs that end), and across a restart. */
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "tests/support/harness.h"
#ifdef BERTH_WITH_PG
#include "tests/support/pgtmp.h"
#endif

TestSuite(gauges, .init = h_setup, .fini = h_teardown);

typedef struct counts {
    uint64_t ready, locked, backoff, terminal, delayed;
} counts;

static counts find(const engine_reply *r, const char *topic)
{
    counts c = {0};
    for (size_t i = 0; i < r->n_topic_stats; i++)
        if (strcmp(r->topic_stats[i].topic, topic) == 0)
            c = (counts){r->topic_stats[i].ready, r->topic_stats[i].locked,
                         r->topic_stats[i].backoff, r->topic_stats[i].terminal,
                         r->topic_stats[i].delayed};
    return c;
}

static void agree(int step)
{
    engine_request s = {.op = ENGINE_OP_STATS}, m = {.op = ENGINE_OP_METRICS};
    engine_reply *walk = h_exec(&s), *kept = h_exec(&m);
    h_expect_ok(walk);
    h_expect_ok(kept);
    static const char *const topics[] = {"a", "b"};
    for (int k = 0; k < 2; k++) {
        counts w = find(walk, topics[k]), g = find(kept, topics[k]);
        cr_assert(w.ready == g.ready && w.locked == g.locked && w.backoff == g.backoff &&
                      w.terminal == g.terminal && w.delayed == g.delayed,
                  "step %d topic %s: walked %llu/%llu/%llu/%llu/%llu, kept "
                  "%llu/%llu/%llu/%llu/%llu (ready/locked/backoff/terminal/delayed)",
                  step, topics[k], (unsigned long long)w.ready, (unsigned long long)w.locked,
                  (unsigned long long)w.backoff, (unsigned long long)w.terminal,
                  (unsigned long long)w.delayed, (unsigned long long)g.ready,
                  (unsigned long long)g.locked, (unsigned long long)g.backoff,
                  (unsigned long long)g.terminal, (unsigned long long)g.delayed);
    }
    engine_reply_free(walk);
    engine_reply_free(kept);
}

typedef struct held {
    char id[ENGINE_ID_STR], token[ENGINE_ID_STR];
} held;

Test(gauges, kept_counts_agree_with_a_walk_through_random_work)
{
    h_skip_on_pg("METRICS reads what STATS reads there (the test of the cluster's gauges below)");
    H.o.retries = 2;
    h_reopen();
    static held hs[4096];
    size_t n = 0;
    for (int step = 0; step < 3000; step++) {
        uint32_t op = randombytes_uniform(10);
        const char *topic = randombytes_uniform(2) ? "a" : "b";
        if (op < 2) {
            h_submit(topic, "p", NULL);
        } else if (op < 3) { /* delayed, up to 2 s */
            engine_request q = {.op = ENGINE_OP_SUBMIT};
            q.u.submit = (engine_submit_args){.topic = topic,
                                              .payload = (const uint8_t *)"d",
                                              .payload_len = 1,
                                              .has_delay_ms = true,
                                              .delay_ms = randombytes_uniform(2000)};
            engine_reply *r = h_exec(&q);
            h_expect_ok(r);
            engine_reply_free(r);
        } else if (op < 5) {
            engine_reply *r =
                h_fetch("w", topic, 1 + randombytes_uniform(4), 100 + randombytes_uniform(3000));
            for (size_t i = 0; i < r->n_tasks && n < 4096; i++, n++) {
                memcpy(hs[n].id, r->tasks[i].id, ENGINE_ID_STR);
                memcpy(hs[n].token, r->tasks[i].lock_token, ENGINE_ID_STR);
            }
            engine_reply_free(r);
        } else if (op < 9 && n > 0) {
            size_t i = randombytes_uniform((uint32_t)n);
            engine_request q = {0};
            engine_guard g = {hs[i].id, "w", hs[i].token};
            switch (op) {
            case 5:
                q.op = ENGINE_OP_COMPLETE;
                q.u.complete.guard = g;
                break;
            case 6:
                q.op = ENGINE_OP_FAIL;
                q.u.fail.guard = g;
                q.u.fail.has_retry_in_ms = randombytes_uniform(2);
                q.u.fail.retry_in_ms = randombytes_uniform(2000);
                break;
            case 7:
                q.op = ENGINE_OP_EXTEND_LOCK;
                q.u.extend.guard = g;
                q.u.extend.has_lock_ms = true;
                q.u.extend.lock_ms = 1 + randombytes_uniform(3000);
                break;
            default:
                q.op = ENGINE_OP_RELEASE;
                q.u.release = g;
                break;
            }
            engine_reply_free(h_exec(&q)); /* LOCK_LOST and the like are fine */
            if (op != 7)
                hs[i] = hs[--n];
        } else {
            h_advance(randombytes_uniform(700));
        }
        if (step % 7 == 0)
            agree(step);
        if (step % 1000 == 999) {
            h_reopen();
            agree(step);
        }
    }
    agree(-1);
}

Test(gauges, a_lock_or_a_backoff_ends_at_its_very_millisecond)
{
    char id[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_task t;
    h_submit("a", "p", id);
    h_fetch_one("w", "a", 1000, &t, token);
    h_advance(999);
    agree(1);
    h_advance(1); /* the lock's last millisecond is over */
    agree(2);
    h_fetch_one("w", "a", 1000, &t, token);
    engine_request f = {.op = ENGINE_OP_FAIL};
    f.u.fail.guard = (engine_guard){t.id, "w", token};
    f.u.fail.has_retry_in_ms = true;
    f.u.fail.retry_in_ms = 500;
    engine_reply_free(h_exec(&f));
    agree(3);
    h_advance(500);
    agree(4);
    engine_request m = {.op = ENGINE_OP_METRICS};
    engine_reply *r = h_exec(&m);
    counts c = find(r, "a");
    cr_assert_eq(c.ready, 1);
    cr_assert_eq(c.locked + c.backoff + c.terminal, 0);
    engine_reply_free(r);
}

Test(gauges, a_halted_engine_answers_metrics_unavailable_so_healthz_says_503)
{
    h_skip_on_pg("a replica reconnects by itself on real time (the r1 suite's write in doubt)");
    engine_failpoint_set(H.e, ENGINE_FP_STORE_SYNC, 1);
    engine_reply_free(h_submit_key("a", "p", NULL)); /* its sync fails: the engine halts */
    engine_request m = {.op = ENGINE_OP_METRICS};
    engine_reply *r = h_exec(&m);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(strstr(r->status.message, "halted") != NULL, "%s", r->status.message);
    engine_reply_free(r);
    h_advance(ENGINE_REOPEN_BACKOFF_MIN_MS); /* it reopens the store */
    engine_tick(H.e);
    r = h_exec(&m);
    h_expect_ok(r);
    engine_reply_free(r);
}

static void ok(engine_reply *r)
{
    h_expect_ok(r);
    engine_reply_free(r);
}

static const engine_topic_counters *counters_of(const engine_reply *r, const char *topic)
{
    for (size_t i = 0; i < r->metrics.n_topics; i++)
        if (strcmp(r->metrics.topics[i].topic, topic) == 0)
            return &r->metrics.topics[i];
    cr_assert_fail("no counters for topic %s", topic);
    return NULL;
}

/* The counters per topic count what this process did, each act once, the
 * same on either store (on PostgreSQL: the replica's own acts); past
 * metrics_topics_max topics the rest share "_other". A completion's
 * latency and every fetch's wait are observed. */
Test(gauges, topic_counters_count_each_act_once_within_their_bound)
{
    h_close();
    H.o.metrics_topics_max = 2;
    h_open();
    for (int i = 0; i < 3; i++)
        h_submit("a", "p", NULL);
    engine_reply_free(h_submit_key("a", "p", "k"));
    engine_reply_free(h_submit_key("a", "p", "k")); /* a duplicate: not counted */
    h_submit("b", "p", NULL);
    h_submit("c", "p", NULL); /* the third topic: "_other" */

    engine_reply *f = h_fetch("w", "a", 10, 60000);
    cr_assert_eq(f->n_tasks, 4);
    engine_task *t = f->tasks;
    ok(h_complete(t[0].id, "w", t[0].lock_token));
    ok(h_guarded(ENGINE_OP_REFUSE, t[1].id, "w", t[1].lock_token));
    ok(h_fail(t[2].id, "w", t[2].lock_token, "E"));
    engine_request last = {.op = ENGINE_OP_FAIL};
    last.u.fail.guard = (engine_guard){t[3].id, "w", t[3].lock_token};
    last.u.fail.error = (engine_error){.code = "E", .message = "for good"};
    last.u.fail.has_retries_left = true; /* retries_left 0: terminal */
    engine_reply *r = h_exec(&last);
    h_expect_ok(r);
    cr_assert(r->terminal);
    engine_reply_free(r);
    engine_reply_free(f);
    f = h_fetch("w", "c", 10, 60000);
    cr_assert_eq(f->n_tasks, 1);
    ok(h_complete(f->tasks[0].id, "w", f->tasks[0].lock_token));
    engine_reply_free(f);

    engine_request m = {.op = ENGINE_OP_METRICS};
    r = h_exec(&m);
    h_expect_ok(r);
    cr_assert_eq(r->metrics.n_topics, 3, "a, b and _other");
    const engine_topic_counters *a = counters_of(r, "a"), *b = counters_of(r, "b"),
                                *o = counters_of(r, "_other");
    cr_assert(
        a->submitted == 4 && a->fetched == 4 && a->completed == 1 && a->refused == 1 &&
            a->failed == 2 && a->terminal == 1,
        "a: submitted %llu fetched %llu completed %llu refused %llu failed %llu terminal %llu",
        (unsigned long long)a->submitted, (unsigned long long)a->fetched,
        (unsigned long long)a->completed, (unsigned long long)a->refused,
        (unsigned long long)a->failed, (unsigned long long)a->terminal);
    cr_assert(b->submitted == 1 && b->fetched == 0 && b->completed == 0);
    cr_assert(o->submitted == 1 && o->fetched == 1 && o->completed == 1);
    cr_assert_eq(r->metrics.task_latency.count, 2, "two completions");
    cr_assert_eq(r->metrics.fetch_wait.count, 2, "two fetches answered");
    cr_assert_gt(r->metrics.fsync.count, 0, "what made them durable is timed");
    engine_reply_free(r);
}

#ifdef BERTH_WITH_PG
/* On PostgreSQL the gauges are the cluster's, read from the database: a
 * task another replica submitted shows within a second, and within that
 * second METRICS answers from what the replica read last (no turn). */
Test(gauges, on_a_shared_store_metrics_shows_the_cluster_at_most_a_second_late)
{
    if (!h_store_is_pg())
        cr_skip_test("the embedded store keeps its gauges as it goes");
    h_submit("a", "p", NULL);
    h_submit("a", "p", NULL);
    engine_request m = {.op = ENGINE_OP_METRICS};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    engine_reply *r = h_exec(&m);
    h_expect_ok(r);
    cr_assert(r->metrics.shared, "the gauges say they are shared");
    cr_assert_eq(r->stats.tasks, 2);
    cr_assert_eq(find(r, "a").ready, 2);
    uint64_t turns = r->stats.turns;
    engine_reply_free(r);

    /* Another replica's submit, straight into the database. */
    PGconn *c = pgtmp_connect(H.store_uri);
    pgtmp_exec(c, "SELECT berth.submit('a', '\\x00'::bytea)");
    PQfinish(c);
    r = h_exec(&m);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (ms < 900) { /* (a machine slower than that proves nothing here) */
        cr_assert_eq(r->stats.tasks, 2, "answered from what it read %.0f ms before", ms);
        cr_assert_eq(r->stats.turns, turns, "no transaction for it");
        cr_assert_eq(find(r, "a").ready, 2, "the topic's gauges came along");
    }
    engine_reply_free(r);
    nanosleep(&(struct timespec){.tv_sec = 1, .tv_nsec = 100 * 1000 * 1000}, NULL);
    r = h_exec(&m);
    h_expect_ok(r);
    cr_assert_eq(r->stats.tasks, 3, "read again once a second old");
    cr_assert_gt(r->stats.turns, turns);
    engine_reply_free(r);
}
#endif
