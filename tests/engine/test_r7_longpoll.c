/* R7 the long poll wakes and cannot miss; a waiting fetch holds no thread. */
#include <string.h>
#include <time.h>

#include "tests/support/harness.h"
#ifdef BERTH_WITH_PG
#include "tests/support/pgtmp.h"
#endif

TestSuite(r7_longpoll, .init = h_setup, .fini = h_teardown);

static const char *T[] = {"t"};

Test(r7_longpoll, a_park_wakes_a_waiting_fetch)
{
    h_async a;
    h_fetch_async("w", T, 1, 30000, &a);
    engine_tick(H.e); /* the fetch is now waiting */
    cr_assert_null(h_async_peek(&a));
    cr_assert_eq(h_stats().waiting_fetches, 1);
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id); /* no clock movement: the doorbell alone wakes it */
    engine_reply *r = h_async_wait(&a);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_str_eq(r->tasks[0].id, id);
    h_async_free(&a);
    cr_assert_eq(h_stats().waiting_fetches, 0);
}

Test(r7_longpoll, a_wait_ends_empty_and_ok_at_wait_ms)
{
    h_async a;
    h_fetch_async("w", T, 1, 5000, &a);
    h_advance(4999);
    cr_assert_null(h_async_peek(&a));
    h_advance(1);
    engine_reply *r = h_async_wait(&a);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 0);
    h_async_free(&a);
}

Test(r7_longpoll, wait_zero_answers_at_once)
{
    engine_reply *r = h_fetch("w", "t", 1, 0);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 0);
    engine_reply_free(r);
    cr_assert_eq(h_stats().waiting_fetches, 0);
}

Test(r7_longpoll, a_park_on_another_topic_does_not_answer)
{
    h_async a;
    h_fetch_async("w", T, 1, 5000, &a);
    h_submit("other", "p", NULL);
    engine_tick(H.e);
    cr_assert_null(h_async_peek(&a), "woken only by its own topics");
    h_advance(5000);
    cr_assert_eq(h_async_wait(&a)->n_tasks, 0);
    h_async_free(&a);
    cr_assert_eq(h_stats().ready, 1, "the other topic's task was not claimed");
}

Test(r7_longpoll, a_submit_in_the_same_turn_reaches_the_waiter)
{
    /* Queue the fetch and the submit back to back: whichever turn they
     * share, the fetch must end up with the task. */
    h_async a, s;
    engine_request fetch = {.op = ENGINE_OP_FETCH};
    fetch.u.fetch = (engine_fetch_args){
        .worker_id = "w", .topics = T, .n_topics = 1, .has_wait_ms = true, .wait_ms = 30000};
    h_exec_async(&fetch, &a);
    engine_request sub = {.op = ENGINE_OP_SUBMIT};
    sub.u.submit = (engine_submit_args){.topic = "t"};
    h_exec_async(&sub, &s);
    h_expect_ok(h_async_wait(&s));
    engine_reply *r = h_async_wait(&a);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_str_eq(r->tasks[0].id, h_async_peek(&s)->submitted[0].id);
    h_async_free(&a);
    h_async_free(&s);
}

Test(r7_longpoll, an_expiring_lock_wakes_a_waiter_at_the_expiry)
{
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 1000, NULL, NULL);
    h_async a;
    h_fetch_async("w2", T, 1, 30000, &a);
    h_advance(999);
    cr_assert_null(h_async_peek(&a));
    h_advance(1);
    engine_reply *r = h_async_wait(&a);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_str_eq(r->tasks[0].id, id);
    h_async_free(&a);
}

Test(r7_longpoll, a_release_wakes_a_waiter)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 60000, NULL, tok);
    h_async a;
    h_fetch_async("w2", T, 1, 30000, &a);
    engine_tick(H.e);
    engine_reply_free(h_guarded(ENGINE_OP_RELEASE, id, "w1", tok));
    engine_reply *r = h_async_wait(&a);
    cr_assert_eq(r->n_tasks, 1);
    h_async_free(&a);
}

Test(r7_longpoll, waiters_are_served_oldest_first)
{
    h_async a, b;
    h_fetch_async("first", T, 1, 30000, &a);
    engine_tick(H.e);
    h_fetch_async("second", T, 1, 30000, &b);
    engine_tick(H.e);
    h_submit("t", "p", NULL);
    engine_reply *r = h_async_wait(&a);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_null(h_async_peek(&b), "one task, one waiter");
    h_submit("t", "q", NULL);
    cr_assert_eq(h_async_wait(&b)->n_tasks, 1);
    h_async_free(&a);
    h_async_free(&b);
}

Test(r7_longpoll, a_waiter_on_several_topics_wakes_for_any)
{
    static const char *two[] = {"x", "y"};
    h_async a;
    h_fetch_async("w", two, 2, 30000, &a);
    engine_tick(H.e);
    h_submit("y", "p", NULL);
    cr_assert_eq(h_async_wait(&a)->n_tasks, 1);
    h_async_free(&a);
}

Test(r7_longpoll, many_waiters_hold_no_threads_and_all_end)
{
    enum { N = 200 };
    static h_async a[N];
    for (int i = 0; i < N; i++)
        h_fetch_async("w", T, 1, 1000, &a[i]);
    engine_tick(H.e);
    cr_assert_eq(h_stats().waiting_fetches, N);
    /* The engine still serves other requests while they wait. */
    char id[ENGINE_ID_STR];
    h_submit("other", "p", id);
    engine_reply *f = h_fetch("x", "other", 1, 0);
    cr_assert_eq(f->n_tasks, 1);
    engine_reply *c = h_complete(id, "x", f->tasks[0].lock_token);
    h_expect_ok(c);
    engine_reply_free(c);
    engine_reply_free(f);
    h_advance(1000);
    for (int i = 0; i < N; i++) {
        h_expect_ok(h_async_wait(&a[i]));
        h_async_free(&a[i]);
    }
    cr_assert_eq(h_stats().waiting_fetches, 0);
}

Test(r7_longpoll, closing_answers_waiters_unavailable)
{
    h_async a;
    h_fetch_async("w", T, 1, 30000, &a);
    engine_tick(H.e);
    h_close();
    engine_reply *r = h_async_wait(&a);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(r->status.retryable);
    h_async_free(&a);
    h_open();
}

Test(r7_longpoll, topics_named_only_by_waits_and_finished_work_are_freed)
{
    h_skip_on_pg("topics in memory are the embedded store's: a replica keeps none");
    static const char *names[] = {"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"};
    h_async a;
    h_fetch_async("w", names, 8, 1000, &a);
    cr_assert_eq(h_stats().topics, 8, "a waiting fetch holds its topics");
    h_advance(1000);
    h_expect_ok(h_async_wait(&a));
    h_async_free(&a);
    cr_assert_eq(h_stats().topics, 0, "released with the wait");

    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("one-off", "p", id);
    cr_assert_eq(h_stats().topics, 1);
    h_fetch_one("w", "one-off", 0, NULL, tok);
    engine_reply_free(h_complete(id, "w", tok));
    cr_assert_eq(h_stats().topics, 0, "released with its last task");
}

/* ---- waits of a connection that closed, and the bounds on waiting ---- */

static const char *T1[] = {"t"};

static void wait_as(uint64_t owner, h_async *a)
{
    engine_request req = {.op = ENGINE_OP_FETCH, .owner = owner};
    req.u.fetch = (engine_fetch_args){
        .worker_id = "w", .topics = T1, .n_topics = 1, .has_wait_ms = true, .wait_ms = 30000};
    h_exec_async(&req, a);
    engine_tick(H.e); /* served or waiting */
}

Test(r7_longpoll, cancelling_an_owner_ends_its_waits_before_they_claim)
{
    h_async a[3];
    wait_as(7, &a[0]);
    wait_as(7, &a[1]);
    wait_as(8, &a[2]);
    cr_assert_eq(h_stats().waiting_fetches, 3);
    cr_assert_eq(engine_cancel(H.e, 7), 0);
    for (int i = 0; i < 2; i++) {
        engine_reply *r = h_async_wait(&a[i]);
        h_expect_code(r, ENGINE_CODE_CANCELLED);
        cr_assert_eq(r->n_tasks, 0);
        h_async_free(&a[i]);
    }
    /* Work parked now goes to the connection that is still there. */
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    engine_reply *r = h_async_wait(&a[2]);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_str_eq(r->tasks[0].id, id);
    h_async_free(&a[2]);
    engine_stats s = h_stats();
    cr_assert_eq(s.waits_cancelled, 2);
    cr_assert_eq(s.waiting_fetches, 0);
    cr_assert_eq(engine_cancel(H.e, 7), 0, "an owner with nothing waiting: nothing happens");
    cr_assert_eq(engine_cancel(H.e, 99), 0);
    cr_assert_eq(h_stats().waits_cancelled, 2);
}

Test(r7_longpoll, a_connection_may_keep_only_so_many_fetches_waiting)
{
    H.o.waits_per_owner_max = 2;
    h_reopen();
    h_async a[4];
    wait_as(7, &a[0]);
    wait_as(7, &a[1]);
    wait_as(7, &a[2]);
    engine_reply *r = h_async_wait(&a[2]);
    h_expect_code(r, ENGINE_CODE_RESOURCE_EXHAUSTED);
    cr_assert(r->status.retryable);
    cr_assert(strstr(r->status.message, "waits-per-connection"), "%s", r->status.message);
    h_async_free(&a[2]);
    wait_as(8, &a[3]); /* another connection still may */
    cr_assert_null(h_async_peek(&a[3]));
    /* A fetch that does not wait is never refused for it. */
    engine_request req = {.op = ENGINE_OP_FETCH, .owner = 7};
    req.u.fetch = (engine_fetch_args){
        .worker_id = "w", .topics = T1, .n_topics = 1, .has_wait_ms = true, .wait_ms = 0};
    r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert_eq(h_stats().waits_refused, 1);
    engine_cancel(H.e, 7);
    engine_cancel(H.e, 8);
    for (int i = 0; i < 4; i++)
        if (i != 2) {
            h_expect_code(h_async_wait(&a[i]), ENGINE_CODE_CANCELLED);
            h_async_free(&a[i]);
        }
}

Test(r7_longpoll, berthd_keeps_only_so_many_fetches_waiting_in_all)
{
    H.o.waits_max = 2;
    h_reopen();
    h_async a[3];
    wait_as(1, &a[0]);
    wait_as(2, &a[1]);
    wait_as(3, &a[2]);
    engine_reply *r = h_async_wait(&a[2]);
    h_expect_code(r, ENGINE_CODE_RESOURCE_EXHAUSTED);
    cr_assert(strstr(r->status.message, "waits-max"), "%s", r->status.message);
    h_async_free(&a[2]);
    h_advance(30000); /* the others end at their deadline, empty and OK */
    for (int i = 0; i < 2; i++) {
        r = h_async_wait(&a[i]);
        h_expect_ok(r);
        cr_assert_eq(r->n_tasks, 0);
        h_async_free(&a[i]);
    }
}

/* Answers claimed and not yet handed over are bounded in all: past the
 * budget a fetch claims nothing, and a waiter is woken when answers leave,
 * without polling (the clock never moves here). On PostgreSQL the answers
 * in flight are a turn's (pgclaim.h, THE FETCH BUDGET): the three fetches
 * share one, and the one that may wait claims in the next. */
Test(r7_longpoll, answers_in_flight_are_bounded_and_a_waiter_goes_on_when_they_leave)
{
    H.o.payload_max_bytes = 1000;
    H.o.fetch_max_bytes = 4000;
    H.o.fetch_inflight_max_bytes = 4000;
    h_reopen();
    char payload[901];
    memset(payload, 'x', 900);
    payload[900] = '\0';
    for (int i = 0; i < 6; i++)
        h_submit("t", payload, NULL);
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){.worker_id = "a",
                                      .topics = T,
                                      .n_topics = 1,
                                      .has_max_tasks = true,
                                      .max_tasks = 10,
                                      .has_wait_ms = true};
    h_async a, b, c;
    if (h_store_is_pg()) { /* one turn for the three */
        engine_hold(H.e, true);
        h_exec_async(&req, &a);
        req.u.fetch.worker_id = "b"; /* wait 0: answered at once, with nothing */
        h_exec_async(&req, &b);
        req.u.fetch.worker_id = "c";
        req.u.fetch.wait_ms = 5000;
        h_exec_async(&req, &c);
        engine_hold(H.e, false);
    } else {
        engine_durable before;
        engine_durability(H.e, &before);
        engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 1); /* answers stay in the engine */
        h_exec_async(&req, &a);
        h_wait_durability(before.appended + 1, 1);
        /* (served, as the turns show: their answers wait for the sync too) */
        engine_durable now;
        engine_durability(H.e, &now);
        req.u.fetch.worker_id = "b"; /* wait 0: answered at once, with nothing */
        h_exec_async(&req, &b);
        h_wait_turns(now.turns + 1);
        req.u.fetch.worker_id = "c";
        req.u.fetch.wait_ms = 5000;
        h_exec_async(&req, &c);
        h_wait_turns(now.turns + 2);
        engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 0);
    }
    engine_reply *ra = h_async_wait(&a);
    h_expect_ok(ra);
    cr_assert_eq(ra->n_tasks, 4, "four bodies of ~950 bytes fit 4000");
    engine_reply *rb = h_async_wait(&b);
    h_expect_ok(rb);
    cr_assert_eq(rb->n_tasks, 0, "the budget is spent while a's answer is in flight");
    engine_reply *rc = h_async_wait(&c);
    h_expect_ok(rc);
    cr_assert_eq(rc->n_tasks, 2, "woken when the answers left, the clock unmoved");
    h_async_free(&a);
    h_async_free(&b);
    h_async_free(&c);
}

/* On PostgreSQL a fetch queued before its connection's cancel, and taken
 * after it, claims nothing: it is answered CANCELLED and its task stays
 * for a worker who will read it (a peer that pipelines long polls and
 * hangs up must not take, turn after turn, the work others wait for). A
 * fetch of the same owner queued after the cancel is served. */
Test(r7_longpoll, a_fetch_taken_after_its_connection_was_cancelled_claims_nothing)
{
    if (!h_store_is_pg())
        cr_skip_test("the embedded actor runs each request before the next is queued");
    h_submit("t", "p", NULL);
    engine_request req = {.op = ENGINE_OP_FETCH, .owner = 77};
    req.u.fetch = (engine_fetch_args){.worker_id = "gone", .topics = T, .n_topics = 1};
    h_async a, b;
    engine_hold(H.e, true);
    h_exec_async(&req, &a);
    cr_assert_eq(engine_cancel(H.e, 77), 0);
    req.u.fetch.worker_id = "after"; /* the same owner, after its cancel */
    h_exec_async(&req, &b);
    engine_hold(H.e, false);
    engine_reply *r = h_async_wait(&a);
    h_expect_code(r, ENGINE_CODE_CANCELLED);
    cr_assert_eq(r->n_tasks, 0);
    h_async_free(&a);
    r = h_async_wait(&b);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 1, "queued after the cancel: served");
    h_async_free(&b);
}

#ifdef BERTH_WITH_PG
/* On PostgreSQL a long poll rung (here by another replica's submit) after
 * its connection's cancel was queued, and before the cancel was applied,
 * claims nothing: a flood of long polls from peers that hang up would
 * otherwise be rung, oldest first, by every task honest workers wait for. */
Test(r7_longpoll, a_waiter_rung_after_its_connection_was_cancelled_claims_nothing)
{
    if (!h_store_is_pg())
        cr_skip_test("the embedded actor applies a cancel before it rings anyone again");
    /* The test's clock past the database's own, which stamps the SQL
     * submit below: that task is fetchable at once. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t real_ms = (uint64_t)now.tv_sec * 1000 + 60000;
    if (h_now() < real_ms)
        h_advance(real_ms - h_now());
    engine_request req = {.op = ENGINE_OP_FETCH, .owner = 88};
    req.u.fetch = (engine_fetch_args){
        .worker_id = "gone", .topics = T, .n_topics = 1, .has_wait_ms = true, .wait_ms = 30000};
    h_async a;
    h_exec_async(&req, &a);
    for (int i = 0; h_stats().waiting_fetches != 1; i++) {
        cr_assert_lt(i, 500, "the fetch never waited");
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    engine_hold(H.e, true); /* the cancel stays queued */
    cr_assert_eq(engine_cancel(H.e, 88), 0);
    PGconn *c = pgtmp_connect(H.store_uri);
    pgtmp_exec(c, "SELECT berth.submit('t', '\\x00'::bytea)");
    PQfinish(c);
    engine_reply *r = h_async_wait(&a);
    h_expect_code(r, ENGINE_CODE_CANCELLED);
    cr_assert_eq(r->n_tasks, 0);
    h_async_free(&a);
    engine_hold(H.e, false);
    r = h_fetch("w", "t", 1, 60000);
    cr_assert_eq(r->n_tasks, 1, "the task is there for a worker who reads it");
    engine_reply_free(r);
}
#endif
