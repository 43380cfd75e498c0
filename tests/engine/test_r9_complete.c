/* R9 dispatch, then delete; the duplicate after a crash is absorbed. */
#include <string.h>

#include "tests/support/harness.h"

TestSuite(r9_complete, .init = h_setup, .fini = h_teardown);

Test(r9_complete, a_completion_deletes_the_task_durably)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w", "t", 0, NULL, tok);
    engine_reply *r = h_complete(id, "w", tok);
    h_expect_ok(r);
    cr_assert_not(r->duplicate);
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_COMPLETED), 1);
    r = h_get_task(id);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
    h_reopen();
    cr_assert_eq(h_stats().tasks, 0);
}

Test(r9_complete, a_completion_with_a_result_is_accepted)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w", "t", 0, NULL, tok);
    engine_header hs[] = {{"x-result", "1"}};
    engine_result res = {.payload = (const uint8_t *)"done",
                         .payload_len = 4,
                         .content_type = "text/plain",
                         .headers = hs,
                         .n_headers = 1};
    engine_request req = {.op = ENGINE_OP_COMPLETE};
    req.u.complete = (engine_complete_args){{id, "w", tok}, &res};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 0);
}

Test(r9_complete, a_crash_between_dispatch_and_delete_re_offers_and_absorbs)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 5000, NULL, tok);
    engine_failpoint_set(H.e, ENGINE_FP_CRASH_AFTER_DISPATCH, 1);
    engine_reply *r = h_complete(id, "w1", tok);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE); /* the worker never heard back */
    engine_reply_free(r);
    r = h_fetch("w2", "t", 1, 0);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE); /* the process is "dead" */
    engine_reply_free(r);
    h_reopen();

    /* The dispatch is on disk, the task too, locked for the grace window. */
    r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 0, "still locked by the re-taken grace window");
    engine_reply_free(r);
    h_advance(H.o.lock_default_ms);
    r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 1, "re-offered: at-least-once, never lost");
    cr_assert_str_eq(r->tasks[0].id, id);
    engine_reply *c = h_complete(id, "w2", r->tasks[0].lock_token);
    h_expect_ok(c);
    cr_assert(c->duplicate, "the second completion is absorbed by inbox dedup");
    engine_reply_free(c);
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 0, "and the task is gone");
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_COMPLETED), 1);
}

Test(r9_complete, without_the_crash_the_delete_follows_the_dispatch)
{
    /* Control for the test above: the same steps with no failpoint leave
     * nothing to re-offer. */
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 5000, NULL, tok);
    engine_reply_free(h_complete(id, "w1", tok));
    h_reopen();
    h_advance(H.o.lock_default_ms);
    engine_reply *r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 0);
    engine_reply_free(r);
}

Test(r9_complete, a_halted_engine_answers_everything_unavailable)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 5000, NULL, tok);
    engine_failpoint_set(H.e, ENGINE_FP_CRASH_AFTER_DISPATCH, 1);
    engine_reply_free(h_complete(id, "w1", tok));
    engine_reply *r = h_submit_key("t", "x", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
}

Test(r9_complete, complete_batch_answers_each_item_in_order)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR];
    h_submit("t", "1", a);
    h_submit("t", "2", b);
    engine_reply *f = h_fetch("w", "t", 2, 0);
    cr_assert_eq(f->n_tasks, 2);
    engine_complete_args items[3] = {
        {{f->tasks[0].id, "w", f->tasks[0].lock_token}, NULL},
        {{"0123456789abcdef0123456789abcdef", "w", f->tasks[1].lock_token}, NULL},
        {{f->tasks[1].id, "w", f->tasks[1].lock_token}, NULL},
    };
    engine_request req = {.op = ENGINE_OP_COMPLETE_BATCH};
    req.u.complete_batch.items = items;
    req.u.complete_batch.n = 3;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->n_statuses, 3);
    cr_assert_eq(r->statuses[0].code, ENGINE_CODE_OK);
    cr_assert_eq(r->statuses[1].verdict, ENGINE_VERDICT_NOT_FOUND);
    cr_assert_eq(r->statuses[2].code, ENGINE_CODE_OK);
    engine_reply_free(r);
    engine_reply_free(f);
    cr_assert_eq(h_stats().tasks, 0);
}

Test(r9_complete, complete_batch_bounds)
{
    engine_request req = {.op = ENGINE_OP_COMPLETE_BATCH};
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    engine_reply_free(r);
    static engine_complete_args many[1001];
    req.u.complete_batch.items = many;
    req.u.complete_batch.n = 1001;
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_eq(r->status.limit, 1000);
    engine_reply_free(r);
}

Test(r9_complete, a_halting_engine_answers_its_waiting_fetches)
{
    static const char *T[] = {"idle"};
    h_async a;
    h_fetch_async("w2", T, 1, 30000, &a);
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 5000, NULL, tok);
    engine_failpoint_set(H.e, ENGINE_FP_CRASH_AFTER_DISPATCH, 1);
    engine_reply_free(h_complete(id, "w1", tok));
    engine_reply *r = h_async_wait(&a);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    h_async_free(&a);
}
