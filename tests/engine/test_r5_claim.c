/* R5 lock expiry is in the claim predicate; FIFO by fetchable instant. */
#include <inttypes.h>
#include <string.h>

#include "tests/support/harness.h"

TestSuite(r5_claim, .init = h_setup, .fini = h_teardown);

Test(r5_claim, a_task_is_fetchable_the_instant_its_lock_expires)
{
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 1000, NULL, NULL);
    h_advance(999);
    engine_reply *r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 0, "still locked at 999 ms");
    engine_reply_free(r);
    h_advance(1);
    r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 1, "fetchable at exactly 1000 ms, no sweep needed");
    cr_assert_str_eq(r->tasks[0].id, id);
    cr_assert_eq(r->tasks[0].attempt, 2);
    engine_reply_free(r);
}

Test(r5_claim, expiry_is_a_property_of_time_not_of_a_background_job)
{
    h_submit("t", "p", NULL);
    h_fetch_one("w1", "t", 1000, NULL, NULL);
    cr_assert_eq(h_stats().locked, 1);
    /* Move the clock without running any turn: the predicate alone decides. */
    engine_manual_clock_advance(&H.clock, 1000);
    engine_stats s = h_stats();
    cr_assert_eq(s.locked, 0);
    cr_assert_eq(s.ready, 1);
}

Test(r5_claim, claims_take_the_oldest_first)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR], c[ENGINE_ID_STR];
    h_submit("t", "a", a);
    h_advance(1);
    h_submit("t", "b", b);
    h_submit("t", "c", c);
    engine_reply *r = h_fetch("w", "t", 3, 0);
    cr_assert_eq(r->n_tasks, 3);
    cr_assert_str_eq(r->tasks[0].id, a);
    cr_assert_str_eq(r->tasks[1].id, b);
    cr_assert_str_eq(r->tasks[2].id, c);
    engine_reply_free(r);
}

Test(r5_claim, order_is_by_fetchable_instant_across_topics)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR], c[ENGINE_ID_STR];
    h_submit("x", "1", a);
    h_advance(1);
    h_submit("y", "2", b);
    h_advance(1);
    h_submit("x", "3", c);
    const char *topics[] = {"y", "x"};
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){.worker_id = "w",
                                      .topics = topics,
                                      .n_topics = 2,
                                      .has_max_tasks = true,
                                      .max_tasks = 3,
                                      .has_wait_ms = true};
    engine_reply *r = h_exec(&req);
    cr_assert_eq(r->n_tasks, 3);
    cr_assert_str_eq(r->tasks[0].id, a);
    cr_assert_str_eq(r->tasks[1].id, b);
    cr_assert_str_eq(r->tasks[2].id, c);
    engine_reply_free(r);
}

Test(r5_claim, an_expired_lock_queues_at_its_expiry_instant)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR];
    h_submit("t", "a", a);
    h_fetch_one("w1", "t", 500, NULL, NULL); /* a: fetchable again at +500 */
    h_advance(100);
    h_submit("t", "b", b); /* b: fetchable at +100 */
    h_advance(400);
    engine_reply *r = h_fetch("w2", "t", 2, 0);
    cr_assert_eq(r->n_tasks, 2);
    cr_assert_str_eq(r->tasks[0].id, b, "b became fetchable first");
    cr_assert_str_eq(r->tasks[1].id, a);
    engine_reply_free(r);
}

Test(r5_claim, a_claim_takes_at_most_max_tasks_and_locks_each)
{
    for (int i = 0; i < 5; i++)
        h_submit("t", "p", NULL);
    engine_reply *r = h_fetch("w", "t", 2, 700);
    cr_assert_eq(r->n_tasks, 2);
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(r->tasks[i].lock_expires_at_ms, H_T0 + 700);
        cr_assert_eq(strlen(r->tasks[i].lock_token), 32);
    }
    cr_assert_str_neq(r->tasks[0].lock_token, r->tasks[1].lock_token, "fresh token per claim");
    engine_reply_free(r);
    engine_stats s = h_stats();
    cr_assert_eq(s.locked, 2);
    cr_assert_eq(s.ready, 3);
}

Test(r5_claim, a_fresh_claim_gets_a_fresh_token)
{
    h_submit("t", "p", NULL);
    char t1[ENGINE_ID_STR], t2[ENGINE_ID_STR];
    h_fetch_one("w", "t", 100, NULL, t1);
    h_advance(100);
    h_fetch_one("w", "t", 100, NULL, t2);
    cr_assert_str_neq(t1, t2);
}

Test(r5_claim, other_topics_are_not_claimed)
{
    h_submit("a", "p", NULL);
    engine_reply *r = h_fetch("w", "b", 10, 0);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 0);
    engine_reply_free(r);
}

Test(r5_claim, a_fetch_stays_under_its_byte_budget_but_always_brings_one)
{
    H.o.payload_max_bytes = 290;
    H.o.fetch_max_bytes = 300;
    h_reopen();
    char p100[101], p290[291];
    memset(p100, 'x', 100);
    p100[100] = '\0';
    memset(p290, 'y', 290);
    p290[290] = '\0';
    for (int i = 0; i < 5; i++)
        h_submit("t", p100, NULL);
    engine_reply *r = h_fetch("w", "t", 10, 0);
    cr_assert_eq(r->n_tasks, 2, "about 115 bytes a task: two fit in 300, three do not");
    engine_reply_free(r);
    h_submit("big", p290, NULL);
    h_submit("big", p290, NULL);
    r = h_fetch("w", "big", 10, 0);
    cr_assert_eq(r->n_tasks, 1, "one task always comes, even near the budget");
    engine_reply_free(r);
    r = h_fetch("w", "t", 10, 0);
    cr_assert_eq(r->n_tasks, 2, "the rest waits for the next fetch, in order");
    engine_reply_free(r);
}

/* A backlog nobody fetches fills the kept part of the body cache; the
 * tasks of a topic that is served still come from memory (the recent
 * part), and the backlog's bodies past the kept part from the store. */
Test(r5_claim, a_backlog_that_fills_the_body_cache_leaves_recent_bodies_in_memory)
{
    h_skip_on_pg("the body cache is the embedded store's: bodies stay in the database");
    H.o.body_cache_bytes = 8 * 200; /* kept: 1,400 bytes, under ten of these bodies; recent: 200 */
    h_reopen();
    char payload[101];
    memset(payload, 'p', 100);
    payload[100] = '\0';
    for (int i = 0; i < 30; i++)
        h_submit("backlog", payload, NULL);
    uint64_t before = h_stats().body_reads;
    for (int i = 0; i < 20; i++) {
        h_submit("live", payload, NULL); /* (as big: no room left in the kept part) */
        engine_reply *r = h_fetch("w", "live", 1, 0);
        cr_assert_eq(r->n_tasks, 1);
        cr_assert_eq(memcmp(r->tasks[0].payload, payload, 100), 0);
        engine_reply *c = h_complete(r->tasks[0].id, "w", r->tasks[0].lock_token);
        h_expect_ok(c);
        engine_reply_free(c);
        engine_reply_free(r);
    }
    cr_assert_eq(h_stats().body_reads, before, "a live task's body was read from the store");
    /* The backlog: its first bodies kept, the rest read back. */
    engine_reply *r = h_fetch("w", "backlog", 30, 0);
    cr_assert_eq(r->n_tasks, 30);
    uint64_t reads = h_stats().body_reads - before;
    cr_assert(reads >= 15 && reads < 30, "%" PRIu64 " of 30 backlog bodies read from the store",
              reads);
    engine_reply_free(r);
}

Test(r5_claim, bodies_past_the_memory_cache_are_read_from_the_store)
{
    H.o.body_cache_bytes = 150; /* room for about one body */
    h_reopen();
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR];
    h_submit("t", "first payload", a);
    h_submit("t", "second payload", b);
    engine_reply *r = h_fetch("w", "t", 2, 0);
    cr_assert_eq(r->n_tasks, 2);
    cr_assert_eq(r->tasks[0].payload_len, 13);
    cr_assert_eq(memcmp(r->tasks[0].payload, "first payload", 13), 0);
    cr_assert_eq(r->tasks[1].payload_len, 14);
    cr_assert_eq(memcmp(r->tasks[1].payload, "second payload", 14), 0);
    for (int i = 0; i < 2; i++) {
        engine_reply *c = h_complete(r->tasks[i].id, "w", r->tasks[i].lock_token);
        h_expect_ok(c);
        engine_reply_free(c);
    }
    engine_reply_free(r);
}
