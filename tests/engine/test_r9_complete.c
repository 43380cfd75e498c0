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

/* The completion's dispatch and its task's delete are one batch: a write
 * that fails keeps neither, so the worker still holds the task, exactly
 * as before, and may complete it again. */
Test(r9_complete, dispatch_and_delete_are_one_batch_a_failed_write_keeps_neither)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    engine_task before;
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 5000, &before, tok);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply *r = h_complete(id, "w1", tok);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(r->status.retryable);
    cr_assert_str_eq(r->status.engine_code, ENGINE_EC_ENGINE_UNAVAILABLE);
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_COMPLETED), 0, "nothing was dispatched");

    r = h_get_task(id);
    h_expect_ok(r);
    cr_assert_eq(r->task.state, ENGINE_TASK_LOCKED, "the task was not deleted");
    cr_assert_str_eq(r->task.worker_id, "w1");
    cr_assert_eq(r->task.lock_expires_at_ms, before.lock_expires_at_ms,
                 "not even the grace window's re-take was kept");
    engine_reply_free(r);

    h_advance(50); /* the store's backoff after a failed write */
    r = h_complete(id, "w1", tok);
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_COMPLETED), 1);
    h_reopen();
    r = h_get_task(id);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
}

/* Once a completion is kept, its task is gone with it: a repeat (a worker
 * that never heard the answer and tries again, here after a restart) finds
 * no task, and the result is never dispatched twice. */
Test(r9_complete, a_kept_completion_is_never_dispatched_again)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", 5000, NULL, tok);
    engine_reply *r = h_complete(id, "w1", tok);
    h_expect_ok(r);
    cr_assert_not(r->duplicate);
    engine_reply_free(r);
    h_reopen();
    r = h_complete(id, "w1", tok);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    cr_assert_eq(r->status.verdict, ENGINE_VERDICT_NOT_FOUND);
    engine_reply_free(r);
    h_advance(H.o.lock_default_ms);
    r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 0, "nothing is re-offered");
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_COMPLETED), 1);
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
