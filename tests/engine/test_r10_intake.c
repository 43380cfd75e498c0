/* R10 intake validation is real; refusals carry the engine's code. */
#include <string.h>

#include "tests/support/harness.h"

static const char *const json_only[] = {"application/json"};
static const engine_channel chans[] = {
    {.name = "strict", .reply_max_bytes = 8, .content_types = json_only, .n_content_types = 1},
};

static void setup(void)
{
    h_setup();
    H.o.channels = chans;
    H.o.n_channels = 1;
    h_reopen();
}

TestSuite(r10_intake, .init = setup, .fini = h_teardown);

static char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];

static engine_reply *complete_with(const char *payload, const char *ct, const engine_header *hs,
                                   size_t nh)
{
    engine_result res = {.payload = (const uint8_t *)payload,
                         .payload_len = strlen(payload),
                         .content_type = ct,
                         .headers = hs,
                         .n_headers = nh};
    engine_request req = {.op = ENGINE_OP_COMPLETE};
    req.u.complete = (engine_complete_args){{id, "w", tok}, &res};
    return h_exec(&req);
}

static void expect_rejected(engine_reply *r)
{
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.engine_code, ENGINE_EC_VALIDATION_REJECTED);
    cr_assert_not(r->status.retryable, "a validation reject never helps to retry");
    engine_reply_free(r);
}

Test(r10_intake, a_reply_over_the_channel_ceiling_is_rejected)
{
    h_submit("strict", "p", id);
    h_fetch_one("w", "strict", 60000, NULL, tok);
    engine_reply *r = complete_with("123456789", "application/json", NULL, 0);
    cr_assert_str_eq(r->status.field, "result.payload");
    cr_assert_eq(r->status.limit, 8);
    expect_rejected(r);
}

Test(r10_intake, a_content_type_the_channel_does_not_accept_is_rejected)
{
    h_submit("strict", "p", id);
    h_fetch_one("w", "strict", 60000, NULL, tok);
    expect_rejected(complete_with("{}", "text/plain", NULL, 0));
    expect_rejected(complete_with("{}", NULL, NULL, 0));
    engine_reply *r = complete_with("{}", "application/json", NULL, 0);
    h_expect_ok(r);
    engine_reply_free(r);
}

Test(r10_intake, a_worker_cannot_set_reserved_headers)
{
    h_submit("open", "p", id);
    h_fetch_one("w", "open", 60000, NULL, tok);
    engine_header hs[] = {{"berth-instance", "forged"}};
    expect_rejected(complete_with("x", NULL, hs, 1));
}

Test(r10_intake, a_refused_completion_keeps_the_task_locked_for_the_grace_window)
{
    h_submit("strict", "p", id);
    h_fetch_one("w", "strict", 60000, NULL, tok);
    h_advance(10);
    expect_rejected(complete_with("too long for the channel", "application/json", NULL, 0));
    engine_reply *g = h_get_task(id);
    cr_assert_eq(g->task.state, ENGINE_TASK_LOCKED);
    cr_assert_eq(g->task.lock_expires_at_ms, h_now() + H.o.lock_default_ms,
                 "re-taken for the grace window");
    engine_reply_free(g);
    engine_reply *f = h_fetch("w2", "strict", 1, 0);
    cr_assert_eq(f->n_tasks, 0);
    engine_reply_free(f);
    h_advance(H.o.lock_default_ms);
    f = h_fetch("w2", "strict", 1, 0);
    cr_assert_eq(f->n_tasks, 1, "fetchable once the grace window ends");
    engine_reply_free(f);
}

Test(r10_intake, the_holder_may_complete_again_with_a_valid_reply)
{
    h_submit("strict", "p", id);
    h_fetch_one("w", "strict", 60000, NULL, tok);
    expect_rejected(complete_with("too long for the channel", "application/json", NULL, 0));
    engine_reply *r = complete_with("{}", "application/json", NULL, 0);
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 0);
}

Test(r10_intake, an_unreadable_task_is_engine_unavailable_and_retryable)
{
    /* With no body cache a completion without a result reads the parked
     * payload from the store, and that read fails. */
    H.o.body_cache_bytes = 0;
    h_reopen();
    h_submit("open", "p", id);
    h_fetch_one("w", "open", 60000, NULL, tok);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_READ, 1);
    engine_reply *r = h_complete(id, "w", tok);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert_str_eq(r->status.engine_code, ENGINE_EC_ENGINE_UNAVAILABLE);
    cr_assert(r->status.retryable, "a transient store failure may succeed later");
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 1, "the task stays");
    r = h_get_task(id);
    cr_assert_eq(r->task.state, ENGINE_TASK_LOCKED, "still the worker's: it may try again");
    engine_reply_free(r);
    r = h_complete(id, "w", tok);
    h_expect_ok(r);
    engine_reply_free(r);
}

Test(r10_intake, completing_without_a_result_redelivers_the_payload_through_validation)
{
    /* The original payload (9 bytes) is over the strict channel's reply
     * ceiling: re-delivered unchanged, it faces the same checks. */
    h_submit("strict", "123456789", id);
    h_fetch_one("w", "strict", 60000, NULL, tok);
    engine_reply *r = h_complete(id, "w", tok);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.engine_code, ENGINE_EC_VALIDATION_REJECTED);
    engine_reply_free(r);
}

Test(r10_intake, a_task_parked_in_this_lifetime_completes_without_reading_the_store)
{
    /* Its body is in memory: a failing store read cannot get in the way. */
    h_submit("open", "p", id);
    h_fetch_one("w", "open", 60000, NULL, tok);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_READ, 1);
    engine_reply *r = h_complete(id, "w", tok);
    h_expect_ok(r);
    engine_reply_free(r);
}
