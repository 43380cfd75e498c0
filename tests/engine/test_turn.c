/* Group commit: one write per turn, answered after the sync that covers
 * it; a failed write undoes the turn, a failed sync halts the engine. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "store/err.h"
#include "tests/support/harness.h"

TestSuite(group_commit, .init = h_setup, .fini = h_teardown);

enum { N = 25 };
static h_async a[N];
static engine_request subs[N];

static void queue_submits(int n)
{
    for (int i = 0; i < n; i++) {
        subs[i] = (engine_request){.op = ENGINE_OP_SUBMIT};
        subs[i].u.submit.topic = "t";
        h_exec_async(&subs[i], &a[i]);
    }
}

Test(group_commit, requests_queued_together_share_one_synced_write)
{
    uint64_t before = h_stats().turns;
    engine_hold(H.e, true);
    queue_submits(N);
    engine_hold(H.e, false);
    for (int i = 0; i < N; i++) {
        h_expect_ok(h_async_wait(&a[i]));
        h_async_free(&a[i]);
    }
    cr_assert_eq(h_stats().turns - before, 1, "%d submits, one write", N);
    cr_assert_eq(h_stats().tasks, N);
}

Test(group_commit, a_turn_takes_at_most_turn_max_requests)
{
    H.o.turn_max_requests = 10;
    h_reopen();
    uint64_t before = h_stats().turns;
    engine_hold(H.e, true);
    queue_submits(N);
    engine_hold(H.e, false);
    for (int i = 0; i < N; i++) {
        h_expect_ok(h_async_wait(&a[i]));
        h_async_free(&a[i]);
    }
    cr_assert_eq(h_stats().turns - before, 3, "25 requests by 10: three turns");
}

Test(group_commit, a_failed_write_answers_every_request_of_its_turn_unavailable)
{
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    engine_hold(H.e, true);
    queue_submits(5);
    static const char *T[] = {"t"};
    engine_request fetch = {.op = ENGINE_OP_FETCH};
    fetch.u.fetch =
        (engine_fetch_args){.worker_id = "w", .topics = T, .n_topics = 1, .has_wait_ms = true};
    h_async f;
    h_exec_async(&fetch, &f);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    size_t events = H.n_ev;
    engine_hold(H.e, false);
    for (int i = 0; i < 5; i++) {
        engine_reply *r = h_async_wait(&a[i]);
        h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
        cr_assert(r->status.retryable);
        h_async_free(&a[i]);
    }
    engine_reply *r = h_async_wait(&f);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert_eq(r->n_tasks, 0, "no task handed out by a turn that did not commit");
    h_async_free(&f);
    cr_assert_eq(H.n_ev, events, "a failed turn publishes no events");
    engine_stats s = h_stats();
    cr_assert_eq(s.tasks, 1, "memory matches disk");
    cr_assert_eq(s.ready, 1, "the claim was undone");
    cr_assert_eq(s.commits_failed, 1);
}

Test(group_commit, a_turn_with_nothing_to_write_does_not_write)
{
    uint64_t before = h_stats().turns;
    engine_reply_free(h_fetch("w", "t", 1, 0));
    engine_tick(H.e);
    cr_assert_eq(h_stats().turns, before);
}

Test(group_commit, unknown_requests_are_refused_not_fatal)
{
    engine_request req = {.op = (engine_op)999};
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_UNIMPLEMENTED);
    engine_reply_free(r);
    h_submit("t", "p", NULL);
}

static void never_called(void *arg, engine_reply *r)
{
    (void)arg;
    engine_reply_free(r);
    cr_assert_fail("done() called for a request that was not queued");
}

Test(group_commit, requests_after_stop_are_not_queued)
{
    engine_stop(H.e);
    engine_request req = {.op = ENGINE_OP_TICK};
    cr_assert_eq(engine_exec(H.e, &req, never_called, NULL), BERTH_ECLOSED);
    cr_assert_null(engine_exec_sync(H.e, &req), "not queued: no reply");
}

Test(group_commit, a_turn_reads_back_what_it_has_not_written_yet)
{
    /* Two submits with one key, and a claim of a task parked in the same
     * turn with no room in the body cache: the store has seen none of it. */
    H.o.body_cache_bytes = 0;
    h_reopen();
    static const char *T[] = {"t"};
    engine_request fetch = {.op = ENGINE_OP_FETCH};
    fetch.u.fetch = (engine_fetch_args){
        .worker_id = "w", .topics = T, .n_topics = 1, .has_wait_ms = true, .wait_ms = 30000};
    engine_request s1 = {.op = ENGINE_OP_SUBMIT}, s2 = {.op = ENGINE_OP_SUBMIT};
    s1.u.submit = (engine_submit_args){
        .topic = "t", .payload = (const uint8_t *)"body", .payload_len = 4, .idempotency_key = "k"};
    s2.u.submit = s1.u.submit;
    h_async f, a1, a2;
    uint64_t before = h_stats().turns;
    engine_hold(H.e, true);
    h_exec_async(&fetch, &f);
    h_exec_async(&s1, &a1);
    h_exec_async(&s2, &a2);
    engine_hold(H.e, false);
    engine_reply *r1 = h_async_wait(&a1), *r2 = h_async_wait(&a2), *rf = h_async_wait(&f);
    cr_assert_eq(h_stats().turns - before, 1, "all in one turn");
    h_expect_ok(r2);
    cr_assert(r2->submitted[0].duplicate);
    cr_assert_str_eq(r1->submitted[0].id, r2->submitted[0].id);
    cr_assert_eq(rf->n_tasks, 1);
    cr_assert_eq(rf->tasks[0].payload_len, 4);
    cr_assert_eq(memcmp(rf->tasks[0].payload, "body", 4), 0);
    h_async_free(&a1);
    h_async_free(&a2);
    h_async_free(&f);
    cr_assert_eq(h_stats().tasks, 1);
}

Test(group_commit, after_a_failed_write_writes_are_refused_until_the_store_backoff_ends)
{
    h_submit("t", "before", NULL);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply *r = h_submit_key("t", "fails", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    uint64_t failed = h_stats().commits_failed;

    h_advance(49);
    r = h_submit_key("t", "refused", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(r->status.retryable);
    engine_reply_free(r);
    r = h_fetch("w", "t", 1, 0);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    cr_assert_eq(h_stats().commits_failed, failed, "refused at once: no write tried, no reload");
    cr_assert_eq(h_stats().ready, 1, "reads are served; nothing was applied");

    /* A second failure doubles the backoff. */
    h_advance(1);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply_free(h_submit_key("t", "fails again", NULL));
    h_advance(99);
    r = h_submit_key("t", "refused", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    h_advance(1);
    h_submit("t", "kept", NULL);
    cr_assert_eq(h_stats().tasks, 2);
}

Test(group_commit, answers_wait_for_their_sync_while_the_next_turns_run)
{
    engine_durable d;
    engine_durability(H.e, &d);
    uint64_t base = d.appended;
    uint64_t syncs = h_stats().syncs;
    engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 1);
    queue_submits(1);
    h_wait_durability(base + 1, 1);
    cr_assert_null(h_async_peek(&a[0]), "answered before its sync");

    /* A read of the unsynced submit waits for that sync too; the engine
     * meanwhile runs the next turn and writes it. */
    engine_request st = {.op = ENGINE_OP_STATS};
    h_async stats;
    h_exec_async(&st, &stats);
    subs[1] = (engine_request){.op = ENGINE_OP_SUBMIT};
    subs[1].u.submit.topic = "t";
    h_exec_async(&subs[1], &a[1]);
    h_wait_durability(base + 2, 1);
    cr_assert_null(h_async_peek(&stats), "a read answered before what it saw is on disk");
    cr_assert_null(h_async_peek(&a[1]));
    engine_durability(H.e, &d);
    cr_assert_eq(d.synced, base, "nothing is durable while the sync is held");

    engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 0);
    h_expect_ok(h_async_wait(&a[0]));
    h_expect_ok(h_async_wait(&a[1]));
    engine_reply *r = h_async_wait(&stats);
    h_expect_ok(r);
    cr_assert_eq(r->stats.tasks, 1, "the stats saw the first submit only");
    h_async_free(&stats);
    for (int i = 0; i < 2; i++)
        h_async_free(&a[i]);
    engine_durability(H.e, &d);
    cr_assert_eq(d.synced, base + 2);
    cr_assert_leq(h_stats().syncs - syncs, 2, "one sync per turn at most");
}

Test(group_commit, a_failed_sync_halts_the_engine_and_answers_unavailable)
{
    char kept[ENGINE_ID_STR];
    h_submit("t", "kept", kept);
    static const char *T[] = {"other"};
    h_async f;
    h_fetch_async("w", T, 1, 30000, &f);
    cr_assert_null(h_async_peek(&f), "waiting");

    engine_failpoint_set(H.e, ENGINE_FP_STORE_SYNC, 1);
    engine_reply *r = h_submit_key("t", "unknown", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(r->status.retryable);
    cr_assert(strstr(r->status.message, "may or may not have been kept"), "%s", r->status.message);
    cr_assert_eq(r->n_submitted, 0, "no id for a submit that may not exist");
    engine_reply_free(r);

    r = h_async_wait(&f);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    h_async_free(&f);
    r = h_submit_key("t", "after", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    r = h_get_task(kept);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);

    /* A restart recovers what the disk holds and serves again. */
    h_reopen();
    r = h_get_task(kept);
    h_expect_ok(r);
    engine_reply_free(r);
    h_submit("t", "after the restart", NULL);
}

/* Halts the engine with a failed sync while `kept` is on disk. */
static void halt_with(const char *kept_payload, char *kept)
{
    h_submit("t", kept_payload, kept);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_SYNC, 1);
    engine_reply *r = h_submit_key("t", "unknown", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    /* The engine has seen it (at this instant: the clock stands still). */
    r = h_get_task(kept);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(strstr(r->status.message, "halted"), "%s", r->status.message);
    engine_reply_free(r);
}

Test(group_commit, a_halted_engine_reopens_its_store_and_serves_again)
{
    char kept[ENGINE_ID_STR];
    halt_with("kept", kept);
    /* Until the first try, everything is UNAVAILABLE, saying why. */
    h_advance(ENGINE_REOPEN_BACKOFF_MIN_MS - 1);
    engine_reply *r = h_get_task(kept);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(r->status.retryable);
    cr_assert(strstr(r->status.message, "halted") && strstr(r->status.message, "sync"), "%s",
              r->status.message);
    engine_reply_free(r);

    /* Then the store is reopened and memory reloaded, as a restart. */
    h_advance(1);
    r = h_get_task(kept);
    h_expect_ok(r);
    engine_reply_free(r);
    engine_stats s = h_stats();
    cr_assert_eq(s.halts, 1);
    cr_assert_eq(s.reopens, 1);
    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", "t", 0, &t, token);
    cr_assert_str_eq(t.id, kept, "the task acknowledged before the halt");
    char again[ENGINE_ID_STR];
    h_submit("t", "after", again);
    r = h_get_task(again);
    h_expect_ok(r);
    engine_reply_free(r);

    /* And it can halt and come back again. */
    halt_with("kept too", kept);
    h_advance(ENGINE_REOPEN_BACKOFF_MIN_MS);
    r = h_get_task(kept);
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert_eq(h_stats().reopens, 2);
}

Test(group_commit, a_data_directory_that_went_away_is_never_replaced_by_an_empty_store)
{
    char kept[ENGINE_ID_STR], away[80];
    halt_with("kept", kept);
    snprintf(away, sizeof(away), "%s.away", H.dir);
    cr_assert_eq(rename(H.dir, away), 0); /* the disk is unmounted, say */

    h_advance(ENGINE_REOPEN_BACKOFF_MIN_MS);
    engine_reply *r = h_get_task(kept);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(strstr(r->status.message, "no store in"), "%s", r->status.message);
    engine_reply_free(r);
    r = h_submit_key("t", "refused", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    struct stat st;
    cr_assert_neq(stat(H.dir, &st), 0, "no empty store was made in its place");

    /* It backs off (doubling), and serves once the directory is back. */
    cr_assert_eq(rename(away, H.dir), 0);
    h_advance(2 * ENGINE_REOPEN_BACKOFF_MIN_MS - 1);
    r = h_get_task(kept);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    h_advance(1);
    r = h_get_task(kept);
    h_expect_ok(r);
    engine_reply_free(r);
}
