/* Restart: close and reopen keeps every kind of state. */
#include <string.h>

#include "tests/support/harness.h"

TestSuite(restart, .init = h_setup, .fini = h_teardown);

Test(restart, a_live_lock_is_still_honoured)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 60000, NULL, tok);
    h_reopen();
    engine_reply *r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 0, "the lock survived the restart");
    engine_reply_free(r);
    r = h_complete(id, "w1", tok);
    h_expect_ok(r);
    engine_reply_free(r);
}

Test(restart, a_lock_still_expires_at_its_instant)
{
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 1000, NULL, NULL);
    h_reopen();
    h_advance(999);
    engine_reply *r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 0);
    engine_reply_free(r);
    h_advance(1);
    r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_eq(r->tasks[0].attempt, 2, "the claim count survived too");
    engine_reply_free(r);
}

Test(restart, a_backing_off_task_keeps_its_pause)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w", "t", 0, NULL, tok);
    engine_reply_free(h_fail(id, "w", tok, "E"));
    h_reopen();
    h_advance(999);
    engine_reply *r = h_fetch("w", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 0);
    engine_reply_free(r);
    h_advance(1);
    r = h_fetch("w", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_eq(r->tasks[0].retries_left, 2);
    engine_reply_free(r);
}

Test(restart, a_terminal_task_stays_terminal_with_its_error)
{
    H.o.retries = 1;
    h_reopen();
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w", "t", 0, NULL, tok);
    engine_reply_free(h_fail(id, "w", tok, "E_GONE"));
    h_reopen();
    engine_reply *g = h_get_task(id);
    h_expect_ok(g);
    cr_assert_eq(g->task.state, ENGINE_TASK_TERMINAL);
    cr_assert_str_eq(g->task.last_error.code, "E_GONE");
    engine_reply_free(g);
    h_advance(100000000);
    engine_reply *r = h_fetch("w", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 0);
    engine_reply_free(r);
    cr_assert_eq(h_stats().terminal, 1);
}

Test(restart, pending_deliveries_keep_their_attempts_and_due_time)
{
    h_skip_on_pg("push channels come with deployments on PostgreSQL");
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    h_submit("t", "p", NULL); /* attempt 1 failed: due at +1000 */
    h_reopen();
    cr_assert_eq(h_stats().outbox_pending, 1);
    h_advance(999);
    cr_assert_eq(h_stats().tasks, 0, "the backoff survived");
    h_advance(1);
    cr_assert_eq(h_stats().tasks, 1);
}

Test(restart, fifo_order_survives_and_new_work_queues_behind)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR], c[ENGINE_ID_STR];
    h_submit("t", "a", a);
    h_submit("t", "b", b);
    h_reopen();
    h_submit("t", "c", c);
    engine_reply *r = h_fetch("w", "t", 3, 0);
    cr_assert_eq(r->n_tasks, 3);
    cr_assert_str_eq(r->tasks[0].id, a);
    cr_assert_str_eq(r->tasks[1].id, b);
    cr_assert_str_eq(r->tasks[2].id, c);
    engine_reply_free(r);
}

Test(restart, incidents_survive)
{
    H.o.retries = 1;
    h_reopen();
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w", "t", 0, NULL, tok);
    engine_reply_free(h_fail(id, "w", tok, "E"));
    h_reopen();
    h_submit("t", "q", id);
    h_fetch_one("w", "t", 0, NULL, tok);
    engine_reply_free(h_fail(id, "w", tok, "E"));
    engine_request req = {.op = ENGINE_OP_LIST_INCIDENTS};
    engine_reply *r = h_exec(&req);
    cr_assert_eq(r->n_incidents, 2, "the second incident did not overwrite the first");
    cr_assert_str_neq(r->incidents[0].id, r->incidents[1].id);
    engine_reply_free(r);
}

Test(restart, a_reopened_store_serves_many_tasks)
{
    engine_submit_args items[200];
    for (int i = 0; i < 200; i++)
        items[i] = (engine_submit_args){.topic = i % 2 ? "odd" : "even"};
    engine_request req = {.op = ENGINE_OP_SUBMIT_BATCH};
    req.u.submit_batch.items = items;
    req.u.submit_batch.n = 200;
    engine_reply_free(h_exec(&req));
    engine_reply *f = h_fetch("w", "odd", 30, 5000);
    cr_assert_eq(f->n_tasks, 30);
    engine_reply_free(f);
    h_reopen();
    engine_stats s = h_stats();
    cr_assert_eq(s.tasks, 200);
    cr_assert_eq(s.locked, 30);
    cr_assert_eq(s.ready, 170);
}
