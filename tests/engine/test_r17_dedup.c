/* R17 submit dedup inside the horizon. */
#include <string.h>

#include "tests/support/harness.h"

TestSuite(r17_submit_dedup, .init = h_setup, .fini = h_teardown);

static void submit_id(const char *topic, const char *key, char *id, bool *dup)
{
    engine_reply *r = h_submit_key(topic, "p", key);
    h_expect_ok(r);
    memcpy(id, r->submitted[0].id, ENGINE_ID_STR);
    *dup = r->submitted[0].duplicate;
    engine_reply_free(r);
}

Test(r17_submit_dedup, a_repeated_key_returns_the_original_id_and_creates_nothing)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR];
    bool dup;
    submit_id("t", "order-42", a, &dup);
    cr_assert_not(dup);
    submit_id("t", "order-42", b, &dup);
    cr_assert(dup);
    cr_assert_str_eq(a, b);
    cr_assert_eq(h_stats().tasks, 1);
}

Test(r17_submit_dedup, the_key_is_remembered_after_the_task_is_done)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    bool dup;
    submit_id("t", "k", a, &dup);
    h_fetch_one("w", "t", 0, NULL, tok);
    engine_reply_free(h_complete(a, "w", tok));
    submit_id("t", "k", b, &dup);
    cr_assert(dup);
    cr_assert_eq(h_stats().tasks, 0, "a producer retry does not redo finished work");
}

Test(r17_submit_dedup, keys_are_scoped_by_topic)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR];
    bool dup;
    submit_id("x", "k", a, &dup);
    submit_id("y", "k", b, &dup);
    cr_assert_not(dup);
    cr_assert_str_neq(a, b);
}

Test(r17_submit_dedup, a_repeat_inside_one_batch_is_deduplicated)
{
    engine_submit_args items[2] = {{.topic = "t", .idempotency_key = "same"},
                                   {.topic = "t", .idempotency_key = "same"}};
    engine_request req = {.op = ENGINE_OP_SUBMIT_BATCH};
    req.u.submit_batch.items = items;
    req.u.submit_batch.n = 2;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_not(r->submitted[0].duplicate);
    cr_assert(r->submitted[1].duplicate);
    cr_assert_str_eq(r->submitted[0].id, r->submitted[1].id);
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 1);
}

Test(r17_submit_dedup, keys_survive_a_restart)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR];
    bool dup;
    submit_id("t", "k", a, &dup);
    h_reopen();
    submit_id("t", "k", b, &dup);
    cr_assert(dup);
    cr_assert_str_eq(a, b);
}

Test(r17_submit_dedup, past_the_horizon_a_key_creates_new_work)
{
    H.o.dedup_horizon_ms = 60000;
    h_reopen();
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR];
    bool dup;
    submit_id("t", "k", a, &dup);
    h_advance(59999);
    submit_id("t", "k", b, &dup);
    cr_assert(dup);
    h_advance(1);
    submit_id("t", "k", b, &dup);
    cr_assert_not(dup);
    cr_assert_str_neq(a, b);
    cr_assert_eq(h_stats().tasks, 2);
}

Test(r17_submit_dedup, a_key_whose_write_failed_was_never_taken)
{
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply *r = h_submit_key("t", "p", "k");
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    h_advance(50); /* the store's backoff after a failed write */
    char a[ENGINE_ID_STR];
    bool dup;
    submit_id("t", "k", a, &dup);
    cr_assert_not(dup, "the retry of a failed submit is a first submit");
    cr_assert_eq(h_stats().tasks, 1);
}

Test(r17_submit_dedup, idempotency_keys_are_bounded)
{
    char key[BERTH_IDEM_KEY_MAX + 2];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    engine_reply *r = h_submit_key("t", "p", key);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "idempotency_key");
    engine_reply_free(r);
}
