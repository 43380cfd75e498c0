/* rules.h on its own: the decisions a store asks of plain views, with no
 * engine running. The suites of the rules prove them through the engine;
 * these pin what another store relies on: the same verdicts, wording and
 * arithmetic from the view alone. */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "engine/rules.h"

#define ID  "0123456789abcdef0123456789abcdef"
#define TOK "fedcba9876543210fedcba9876543210"

static engine_status st;
static uint8_t id[BERTH_ID_LEN], token[BERTH_ID_LEN], other[BERTH_ID_LEN];
static const engine_guard g = {.task_id = ID, .worker_id = "w1", .lock_token = TOK};

static void setup(void)
{
    memset(&st, 0, sizeof(st));
    cr_assert(rules_guard_parse(&g, id, token, &st));
    memcpy(other, token, sizeof(other));
    other[0] ^= 1;
}

TestSuite(rules, .init = setup);

/* A live lock held by w1 with TOK, expiring at 2000; the test changes it. */
static rules_lock held(void)
{
    return (rules_lock){.found = true,
                        .has_lock = true,
                        .lock_token = token,
                        .worker_id = "w1",
                        .lock_expires_at_ms = 2000};
}

static void verdict(const rules_lock *lk, uint64_t now, engine_code code, engine_verdict v,
                    const char *message)
{
    memset(&st, 0, sizeof(st));
    cr_assert_not(rules_guard(lk, &g, token, now, &st));
    cr_assert_eq(st.code, code);
    cr_assert_eq(st.verdict, v);
    cr_assert_str_eq(st.message, message);
}

Test(rules, the_holder_of_the_live_lock_matches)
{
    rules_lock lk = held();
    cr_assert(rules_guard(&lk, &g, token, 1999, &st));
    cr_assert_eq(st.code, ENGINE_CODE_OK);
}

Test(rules, the_four_verdicts_from_the_lock_view_alone)
{
    rules_lock lk = held();
    verdict(&lk, 2000, ENGINE_CODE_ABORTED, ENGINE_VERDICT_LOCK_LOST,
            "task " ID ": the lock expired or was released; the task is fetchable again");
    lk.has_lock = false;
    verdict(&lk, 1000, ENGINE_CODE_ABORTED, ENGINE_VERDICT_LOCK_LOST,
            "task " ID ": the lock expired or was released; the task is fetchable again");
    lk = held();
    lk.worker_id = "w2";
    verdict(&lk, 1000, ENGINE_CODE_ABORTED, ENGINE_VERDICT_LOCK_HELD,
            "task " ID " is held by another claim");
    lk = held();
    lk.lock_token = other;
    verdict(&lk, 1000, ENGINE_CODE_ABORTED, ENGINE_VERDICT_LOCK_HELD,
            "task " ID " is held by another claim");
    lk = held();
    lk.terminal = true;
    verdict(&lk, 1000, ENGINE_CODE_FAILED_PRECONDITION, ENGINE_VERDICT_TERMINAL,
            "task " ID " is terminal: its failure budget is spent");
    lk = (rules_lock){.found = false};
    verdict(&lk, 1000, ENGINE_CODE_NOT_FOUND, ENGINE_VERDICT_NOT_FOUND, "no task " ID);
}

Test(rules, malformed_fields_are_invalid_arguments_not_verdicts)
{
    engine_guard bad = g;
    bad.lock_token = "nope";
    cr_assert_not(rules_guard_parse(&bad, id, token, &st));
    cr_assert_eq(st.code, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_eq(st.verdict, ENGINE_VERDICT_NONE);
    cr_assert_str_eq(st.field, "lock_token");
    bad = g;
    bad.task_id = "nope";
    memset(&st, 0, sizeof(st));
    cr_assert_not(rules_guard_parse(&bad, id, token, &st));
    cr_assert_str_eq(st.message, "task_id: not a task id (32 hex digits)");
    cr_assert_str_eq(st.field, "task_id");
}

Test(rules, a_failure_spends_the_budget_then_is_terminal)
{
    engine_options o;
    engine_options_default(&o);
    o.backoff_jitter = 0;
    engine_fail_args a = {.error = {.code = "E", .message = "m"}};
    rules_fail_in in;
    cr_assert(rules_fail_check(&o, &a, &in, &st));
    rules_fail_out f;
    rules_fail_outcome(&o, &a, &in, 1, 2, 5000, &f);
    cr_assert_eq(f.failures, 2);
    cr_assert_eq(f.retries_left, 1);
    cr_assert_not(f.terminal);
    cr_assert_eq(f.pause_ms, 2 * o.backoff_initial_ms, "the second failure doubles the pause");
    cr_assert_eq(f.available_at_ms, 5000 + f.pause_ms);
    rules_fail_outcome(&o, &a, &in, 2, 1, 5000, &f);
    cr_assert(f.terminal);
    cr_assert_eq(f.retries_left, 0);
    cr_assert_eq(f.available_at_ms, 0);

    a.has_retry_in_ms = true;
    a.retry_in_ms = 0;
    a.has_retries_left = true;
    a.retries_left = 5;
    cr_assert(rules_fail_check(&o, &a, &in, &st));
    rules_fail_outcome(&o, &a, &in, 0, 1, 5000, &f);
    cr_assert_eq(f.retries_left, 5, "the worker sets the budget");
    cr_assert_eq(f.pause_ms, 0, "and the pause");
    cr_assert_eq(f.available_at_ms, 5000);

    a.retry_in_ms = o.retry_max_ms + 1;
    cr_assert_not(rules_fail_check(&o, &a, &in, &st));
    cr_assert_str_eq(st.field, "retry_in_ms");
    cr_assert(st.has_limit);
}

Test(rules, correlation_absorbs_refuses_in_backoff_and_resolves)
{
    rules_call c = {.found = false};
    cr_assert_eq(rules_correlate(&c, 1, &st), RULES_CORR_ABSORB);
    c = (rules_call){.found = true, .ended = true};
    cr_assert_eq(rules_correlate(&c, 1, &st), RULES_CORR_ABSORB);
    c = (rules_call){.found = true, .state = ENGINE_INSTANCE_WAITING, .attempt = 2};
    cr_assert_eq(rules_correlate(&c, 2, &st), RULES_CORR_RESOLVE);
    cr_assert_eq(rules_correlate(&c, 1, &st), RULES_CORR_RESOLVE_WITHDRAW);
    cr_assert_eq(st.code, ENGINE_CODE_OK);
    c.state = ENGINE_INSTANCE_BACKOFF;
    cr_assert_eq(rules_correlate(&c, 2, &st), RULES_CORR_RETRY_PENDING);
    cr_assert_eq(st.code, ENGINE_CODE_FAILED_PRECONDITION);
    cr_assert_str_eq(st.engine_code, ENGINE_EC_RETRY_PENDING);
    cr_assert_not(st.retryable);
    cr_assert_str_eq(st.message, "the call's attempt 2 timed out and its next attempt is pending: "
                                 "this reply cannot resolve it");
}

Test(rules, a_call_s_failed_attempt_backs_off_until_none_is_left)
{
    rules_policy p = {.timeout_ms = 500,
                      .max_attempts = 2,
                      .initial_backoff_ms = 100,
                      .max_backoff_ms = 1000,
                      .multiplier = 3.0};
    rules_call_next n;
    rules_call_failed_attempt(&p, 1, 7000, 0, &n);
    cr_assert_not(n.fail);
    cr_assert_eq(n.retry_at_ms, 7100);
    rules_call_failed_attempt(&p, 2, 7000, 0, &n);
    cr_assert(n.fail);
    char buf[160];
    engine_error err;
    rules_call_timeout(&p, 2, buf, sizeof(buf), &err);
    cr_assert_str_eq(err.code, ENGINE_EC_TIMEOUT);
    cr_assert_str_eq(err.message, "attempt 2 of 2 timed out after 500 ms; no attempt is left");
}

Test(rules, a_call_s_task_carries_its_call_in_reserved_headers)
{
    store_header h = {"k", "v"};
    store_body b = {
        .topic = "t", .headers = &h, .n_headers = 1, .has_instance = true, .call_attempt = 3};
    memcpy(b.instance_id, token, BERTH_ID_LEN);
    engine_reply *r = reply_alloc(ENGINE_OP_FETCH);
    engine_header *hs;
    char *call;
    cr_assert(rules_task_mem(r, &b, &hs, &call));
    rules_task_view v = {.id = id,
                         .body = &b,
                         .attempt = 1,
                         .retries_left = 3,
                         .lock_token = token,
                         .lock_expires_at_ms = 9};
    engine_task et;
    rules_task_answer(&et, &v, hs, call);
    cr_assert_str_eq(et.id, ID);
    cr_assert_str_eq(et.lock_token, TOK);
    cr_assert_str_eq(et.instance_id, TOK);
    cr_assert_eq(et.n_headers, 3);
    cr_assert_str_eq(et.headers[1].name, ENGINE_HEADER_INSTANCE);
    cr_assert_str_eq(et.headers[1].value, TOK);
    cr_assert_str_eq(et.headers[2].name, ENGINE_HEADER_ATTEMPT);
    cr_assert_str_eq(et.headers[2].value, "3");
    engine_reply_free(r);
}

Test(rules, waits_are_bounded_in_all_and_per_connection)
{
    engine_options o;
    engine_options_default(&o);
    cr_assert(rules_wait_may(&o, 0, true, 0, &st));
    cr_assert_not(rules_wait_may(&o, o.waits_max, false, 0, &st));
    cr_assert_eq(st.code, ENGINE_CODE_RESOURCE_EXHAUSTED);
    cr_assert(st.retryable);
    memset(&st, 0, sizeof(st));
    cr_assert_not(rules_wait_may(&o, 1, true, o.waits_per_owner_max, &st));
    cr_assert_str_eq(st.engine_code, ENGINE_EC_ENGINE_UNAVAILABLE);
}
