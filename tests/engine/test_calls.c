/* Calls (engine/README.md, "Calls", R9, R12, R13): a caller awaits a worker's answer, and
 * its own retry policy is a second budget beside the worker's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/support/harness.h"

TestSuite(calls, .init = h_setup, .fini = h_teardown);

/* Past the store's pause after a failed write (ENGINE_STORE_BACKOFF_MIN_MS). */
#define ENGINE_STORE_BACKOFF_FOR_TESTS 50

/* ---- helpers ---- */

/* Runs req and asserts it answered OK. */
static void exec_ok(const engine_request *req)
{
    engine_reply *r = h_exec(req);
    h_expect_ok(r);
    engine_reply_free(r);
}

static engine_reply *call_req(const char *topic, const char *payload, const char *key,
                              const engine_retry_policy *retry)
{
    engine_request req = {.op = ENGINE_OP_CALL};
    req.u.call.request = (engine_submit_args){
        .topic = topic,
        .payload = (const uint8_t *)payload,
        .payload_len = strlen(payload),
        .idempotency_key = key,
    };
    req.u.call.retry = retry;
    return h_exec(&req);
}

/* A call that must be accepted; its instance id goes to id. */
static void call_ok(const char *topic, const char *payload, const engine_retry_policy *retry,
                    char id[ENGINE_ID_STR])
{
    engine_reply *r = call_req(topic, payload, NULL, retry);
    h_expect_ok(r);
    cr_assert_eq(r->n_submitted, 1);
    cr_assert_not(r->submitted[0].duplicate);
    memcpy(id, r->submitted[0].id, ENGINE_ID_STR);
    engine_reply_free(r);
}

static engine_retry_policy policy(uint64_t timeout_ms, uint32_t attempts, uint64_t backoff_ms)
{
    return (engine_retry_policy){.has_timeout_ms = true,
                                 .timeout_ms = timeout_ms,
                                 .has_max_attempts = true,
                                 .max_attempts = attempts,
                                 .has_initial_backoff_ms = true,
                                 .initial_backoff_ms = backoff_ms};
}

static engine_reply *await_now(const char *id)
{
    engine_request req = {.op = ENGINE_OP_AWAIT_CALL};
    req.u.await_call = (engine_await_args){.instance_id = id, .has_wait_ms = true, .wait_ms = 0};
    return h_exec(&req);
}

static void await_async(const char *id, uint64_t wait_ms, h_async *a)
{
    engine_request req = {.op = ENGINE_OP_AWAIT_CALL};
    req.u.await_call =
        (engine_await_args){.instance_id = id, .has_wait_ms = true, .wait_ms = wait_ms};
    h_exec_async(&req, a);
    engine_tick(H.e); /* served: answered or waiting */
}

/* The call's state now (asserts the await is OK). */
static engine_instance_state state_of(const char *id, uint32_t *attempt)
{
    engine_reply *r = await_now(id);
    h_expect_ok(r);
    cr_assert_str_eq(r->instance.id, id);
    engine_instance_state s = r->instance.state;
    if (attempt != NULL)
        *attempt = r->instance.attempt;
    engine_reply_free(r);
    return s;
}

static engine_reply *complete_with(const char *task, const char *worker, const char *token,
                                   const char *result)
{
    engine_request req = {.op = ENGINE_OP_COMPLETE};
    engine_header h = {"x-answer", "yes"};
    engine_result res = {.payload = (const uint8_t *)result,
                         .payload_len = result ? strlen(result) : 0,
                         .content_type = "text/plain",
                         .headers = &h,
                         .n_headers = 1};
    req.u.complete.guard = (engine_guard){task, worker, token};
    req.u.complete.result = result ? &res : NULL;
    return h_exec(&req);
}

/* The header of a fetched task, or NULL. */
static const char *header(const engine_task *t, const char *name)
{
    for (size_t i = 0; i < t->n_headers; i++)
        if (strcmp(t->headers[i].name, name) == 0)
            return t->headers[i].value;
    return NULL;
}

/* Fetches the one task of topic t and checks it belongs to call id at
 * attempt n. */
static void fetch_attempt(const char *id, uint32_t n, uint64_t lock_ms, char task[ENGINE_ID_STR],
                          char token[ENGINE_ID_STR])
{
    engine_reply *r = h_fetch("w", "t", 10, lock_ms);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 1, "one task of the call, got %zu", r->n_tasks);
    cr_assert_str_eq(r->tasks[0].instance_id, id);
    cr_assert_str_eq(header(&r->tasks[0], "berth-instance-id"), id);
    char want[16];
    snprintf(want, sizeof(want), "%u", n);
    cr_assert_str_eq(header(&r->tasks[0], "berth-attempt"), want);
    memcpy(task, r->tasks[0].id, ENGINE_ID_STR);
    memcpy(token, r->tasks[0].lock_token, ENGINE_ID_STR);
    engine_reply_free(r);
}

static size_t ready_tasks(void)
{
    engine_reply *r = h_fetch("peek", "t", 100, 1);
    size_t n = r->n_tasks;
    engine_reply_free(r);
    return n;
}

/* ---- the call's life ---- */

Test(calls, a_call_is_kept_and_parks_a_task_that_names_its_instance)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "question", NULL, id);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(h_stats().calls, 1);
    h_reopen(); /* OK meant kept (R1) */
    uint32_t attempt;
    cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(attempt, 1);
    fetch_attempt(id, 1, 0, task, token);
    cr_assert_eq(h_stats().instances_waiting, 1);
}

Test(calls, a_completion_resolves_the_call_with_its_result)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "question", NULL, id);
    fetch_attempt(id, 1, 0, task, token);
    h_advance(5);
    engine_reply *r = complete_with(task, "w", token, "answer");
    h_expect_ok(r);
    engine_reply_free(r);
    r = await_now(id);
    h_expect_ok(r);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert(r->instance.has_result);
    cr_assert_not(r->instance.has_error);
    cr_assert_eq(r->instance.result.payload_len, 6);
    cr_assert_eq(memcmp(r->instance.result.payload, "answer", 6), 0);
    cr_assert_str_eq(r->instance.result.content_type, "text/plain");
    cr_assert_eq(r->instance.result.n_headers, 1);
    cr_assert_str_eq(r->instance.result.headers[0].value, "yes");
    cr_assert_eq(r->instance.created_at_ms, H_T0);
    cr_assert_eq(r->instance.resolved_at_ms, H_T0 + 5);
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_INSTANCE_RESOLVED), 1);
    engine_stats s = h_stats();
    cr_assert_eq(s.instances_waiting, 0);
    cr_assert_eq(s.calls_resolved, 1);
    cr_assert_eq(s.tasks, 0, "the task went with its completion");
    h_reopen(); /* the outcome was kept with it */
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_RESOLVED);
}

Test(calls, a_completion_without_a_result_resolves_with_the_request_payload)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "question", NULL, id);
    fetch_attempt(id, 1, 0, task, token);
    engine_reply_free(complete_with(task, "w", token, NULL));
    engine_reply *r = await_now(id);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert(r->instance.has_result);
    cr_assert_eq(r->instance.result.payload_len, 8);
    cr_assert_eq(memcmp(r->instance.result.payload, "question", 8), 0);
    engine_reply_free(r);
}

Test(calls, a_refusal_resolves_the_call_with_the_worker_s_error)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "question", NULL, id);
    fetch_attempt(id, 1, 0, task, token);
    engine_request req = {.op = ENGINE_OP_REFUSE};
    req.u.refuse.guard = (engine_guard){task, "w", token};
    req.u.refuse.error = (engine_error){.code = "NO_SUCH_USER", .message = "user 7 is unknown"};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    r = await_now(id);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert_not(r->instance.has_result);
    cr_assert(r->instance.has_error);
    cr_assert_str_eq(r->instance.error.code, "NO_SUCH_USER");
    cr_assert_str_eq(r->instance.error.message, "user 7 is unknown");
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_REFUSED), 1);
    cr_assert_eq(h_stats().tasks, 0);
}

Test(calls, a_worker_s_failures_never_touch_the_call)
{
    /* R13: the task's budget runs out; the call still waits. */
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "question", NULL, id);
    for (int i = 0; i < 3; i++) {
        fetch_attempt(id, 1, 0, task, token);
        engine_reply *r = h_fail(task, "w", token, "FLAKY");
        h_expect_ok(r);
        cr_assert_eq(r->terminal, i == 2);
        engine_reply_free(r);
        h_advance(3600000);
    }
    uint32_t attempt;
    cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(attempt, 1);
    cr_assert_eq(h_stats().terminal, 1);
    cr_assert_eq(h_events(ENGINE_EVENT_INSTANCE_RESOLVED), 0);
}

Test(calls, an_idempotency_key_returns_the_first_call)
{
    engine_reply *a = call_req("t", "q", "order-1", NULL);
    h_expect_ok(a);
    engine_reply *b = call_req("t", "q", "order-1", NULL);
    h_expect_ok(b);
    cr_assert(b->submitted[0].duplicate);
    cr_assert_str_eq(b->submitted[0].id, a->submitted[0].id);
    engine_reply_free(b);
    h_reopen();
    b = call_req("t", "q", "order-1", NULL);
    cr_assert(b->submitted[0].duplicate);
    cr_assert_str_eq(b->submitted[0].id, a->submitted[0].id);
    engine_reply_free(b);
    /* A submit's keys are another space: the same key makes a task. */
    b = h_submit_key("t", "q", "order-1");
    h_expect_ok(b);
    cr_assert_not(b->submitted[0].duplicate);
    engine_reply_free(b);
    engine_reply_free(a);
    cr_assert_eq(h_stats().instances_waiting, 1);
    cr_assert_eq(ready_tasks(), 2);
}

Test(calls, a_call_and_its_duplicate_in_one_turn_make_one_call)
{
    engine_hold(H.e, true);
    engine_request req = {.op = ENGINE_OP_CALL};
    req.u.call.request = (engine_submit_args){.topic = "t", .idempotency_key = "k"};
    h_async a, b;
    h_exec_async(&req, &a);
    h_exec_async(&req, &b);
    engine_hold(H.e, false);
    engine_reply *ra = h_async_wait(&a), *rb = h_async_wait(&b);
    h_expect_ok(ra);
    h_expect_ok(rb);
    cr_assert_not(ra->submitted[0].duplicate);
    cr_assert(rb->submitted[0].duplicate);
    cr_assert_str_eq(ra->submitted[0].id, rb->submitted[0].id);
    h_async_free(&a);
    h_async_free(&b);
    cr_assert_eq(h_stats().instances_waiting, 1);
}

/* ---- await_call ---- */

Test(calls, an_await_waits_and_the_completion_wakes_it)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "q", NULL, id);
    h_async a;
    await_async(id, 30000, &a);
    cr_assert_null(h_async_peek(&a));
    cr_assert_eq(h_stats().waiting_fetches, 1);
    fetch_attempt(id, 1, 0, task, token);
    engine_reply_free(complete_with(task, "w", token, "done"));
    engine_reply *r = h_async_wait(&a); /* no clock movement: the end alone wakes it */
    h_expect_ok(r);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert_eq(memcmp(r->instance.result.payload, "done", 4), 0);
    h_async_free(&a);
    cr_assert_eq(h_stats().waiting_fetches, 0);
}

Test(calls, an_await_ends_ok_at_wait_ms_with_the_call_as_it_stands)
{
    char id[ENGINE_ID_STR];
    call_ok("t", "q", NULL, id);
    h_async a;
    await_async(id, 5000, &a);
    h_advance(4999);
    cr_assert_null(h_async_peek(&a));
    h_advance(1);
    engine_reply *r = h_async_wait(&a);
    h_expect_ok(r);
    cr_assert_str_eq(r->instance.id, id);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_WAITING);
    cr_assert_eq(r->instance.attempt, 1);
    cr_assert_not(r->instance.has_result);
    h_async_free(&a);
}

Test(calls, an_await_of_an_ended_call_answers_at_once)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "q", NULL, id);
    fetch_attempt(id, 1, 0, task, token);
    engine_reply_free(complete_with(task, "w", token, "r"));
    h_async a;
    await_async(id, 30000, &a);
    engine_reply *r = h_async_wait(&a);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    h_async_free(&a);
}

Test(calls, an_await_in_the_turn_that_ends_the_call_sees_the_end)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "q", NULL, id);
    fetch_attempt(id, 1, 0, task, token);
    engine_hold(H.e, true);
    engine_request c = {.op = ENGINE_OP_COMPLETE};
    c.u.complete.guard = (engine_guard){task, "w", token};
    engine_request w = {.op = ENGINE_OP_AWAIT_CALL};
    w.u.await_call = (engine_await_args){.instance_id = id, .has_wait_ms = true, .wait_ms = 0};
    h_async ac, aw;
    h_exec_async(&c, &ac);
    h_exec_async(&w, &aw);
    engine_hold(H.e, false);
    h_expect_ok(h_async_wait(&ac));
    engine_reply *r = h_async_wait(&aw);
    h_expect_ok(r);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert_eq(memcmp(r->instance.result.payload, "q", 1), 0);
    h_async_free(&ac);
    h_async_free(&aw);
}

Test(calls, an_unknown_or_malformed_id_is_refused)
{
    engine_reply *r = await_now("0123456789abcdef0123456789abcdef");
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
    r = await_now("nope");
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "instance_id");
    engine_reply_free(r);
    engine_request req = {.op = ENGINE_OP_AWAIT_CALL};
    req.u.await_call = (engine_await_args){
        .instance_id = "0123456789abcdef0123456789abcdef", .has_wait_ms = true, .wait_ms = 30001};
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "wait_ms");
    cr_assert_eq(r->status.limit, 30000);
    engine_reply_free(r);
}

Test(calls, awaits_are_bounded_per_connection_and_cancelled_with_it)
{
    H.o.waits_per_owner_max = 2;
    h_reopen();
    char id[ENGINE_ID_STR];
    call_ok("t", "q", NULL, id);
    engine_request req = {.op = ENGINE_OP_AWAIT_CALL, .owner = 7};
    req.u.await_call = (engine_await_args){.instance_id = id, .has_wait_ms = true, .wait_ms = 9000};
    h_async a[3];
    for (int i = 0; i < 3; i++) {
        h_exec_async(&req, &a[i]);
        engine_tick(H.e);
    }
    engine_reply *r = h_async_wait(&a[2]);
    h_expect_code(r, ENGINE_CODE_RESOURCE_EXHAUSTED);
    cr_assert(r->status.retryable);
    cr_assert_eq(engine_cancel(H.e, 7), 0);
    engine_tick(H.e);
    for (int i = 0; i < 2; i++) {
        h_expect_code(h_async_wait(&a[i]), ENGINE_CODE_CANCELLED);
        h_async_free(&a[i]);
    }
    h_async_free(&a[2]);
}

/* ---- the caller's budget ---- */

Test(calls, a_timeout_backs_off_then_re_drives_the_next_attempt)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_retry_policy p = policy(1000, 3, 500);
    call_ok("t", "q", &p, id);
    h_advance(999);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_WAITING);
    h_advance(1);
    uint32_t attempt;
    cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_BACKOFF);
    cr_assert_eq(attempt, 1);
    cr_assert_eq(ready_tasks(), 0, "the dead attempt's unclaimed task was withdrawn");
    cr_assert_eq(h_stats().instances_backoff, 1);
    h_advance(499);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
    h_advance(1);
    cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(attempt, 2);
    fetch_attempt(id, 2, 0, task, token);
    engine_reply_free(complete_with(task, "w", token, "second"));
    engine_reply *r = await_now(id);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert_eq(r->instance.attempt, 2);
    engine_reply_free(r);
}

Test(calls, the_backoff_grows_by_the_multiplier)
{
    char id[ENGINE_ID_STR];
    engine_retry_policy p = policy(100, 4, 200);
    p.has_multiplier = true;
    p.multiplier = 3.0;
    call_ok("t", "q", &p, id);
    uint64_t pauses[] = {200, 600, 1800};
    for (int i = 0; i < 3; i++) {
        h_advance(100); /* the timeout */
        cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
        h_advance(pauses[i] - 1);
        cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF, "pause %d", i);
        h_advance(1);
        cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_WAITING, "pause %d", i);
    }
}

Test(calls, attempts_spent_fail_the_call_with_timeout)
{
    char id[ENGINE_ID_STR];
    engine_retry_policy p = policy(1000, 2, 100);
    call_ok("t", "q", &p, id);
    h_advance(1000);
    h_advance(100);
    h_advance(1000);
    engine_reply *r = await_now(id);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_FAILED);
    cr_assert(r->instance.has_error);
    cr_assert_str_eq(r->instance.error.code, "TIMEOUT");
    cr_assert_eq(r->instance.attempt, 2);
    engine_reply_free(r);
    cr_assert_eq(ready_tasks(), 0);
    engine_stats s = h_stats();
    cr_assert_eq(s.calls_failed, 1);
    cr_assert_eq(s.calls_timed_out, 2);
    cr_assert_eq(h_events(ENGINE_EVENT_INSTANCE_RESOLVED), 1);
}

Test(calls, a_timeout_fires_even_if_no_worker_ever_comes)
{
    /* R13 the other way round; and one attempt is the default. */
    char id[ENGINE_ID_STR];
    engine_retry_policy p = {.has_timeout_ms = true, .timeout_ms = 60000};
    call_ok("t", "q", &p, id);
    h_advance(60000);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_FAILED);
}

Test(calls, a_reply_in_the_backoff_is_refused_retry_pending)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_retry_policy p = policy(1000, 3, 5000);
    call_ok("t", "q", &p, id);
    fetch_attempt(id, 1, 60000, task, token);
    h_advance(1000);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
    engine_reply *r = complete_with(task, "w", token, "late");
    h_expect_code(r, ENGINE_CODE_FAILED_PRECONDITION);
    cr_assert_str_eq(r->status.engine_code, "RETRY_PENDING");
    cr_assert_not(r->status.retryable);
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 1, "a held task stays; its refused reply changed nothing");
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
}

Test(calls, a_late_reply_after_the_re_drive_resolves_the_call)
{
    char id[ENGINE_ID_STR], task1[ENGINE_ID_STR], token1[ENGINE_ID_STR];
    engine_retry_policy p = policy(1000, 3, 500);
    call_ok("t", "q", &p, id);
    fetch_attempt(id, 1, 60000, task1, token1); /* a slow worker holds attempt 1 */
    h_advance(1000);
    h_advance(500); /* attempt 2 is parked */
    uint32_t attempt;
    cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(attempt, 2);
    cr_assert_eq(h_stats().tasks, 2);
    engine_reply *r = complete_with(task1, "w", token1, "first");
    h_expect_ok(r);
    engine_reply_free(r);
    r = await_now(id);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert_eq(memcmp(r->instance.result.payload, "first", 5), 0);
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 0, "attempt 2, unclaimed, is not needed any more");
}

Test(calls, a_reply_to_an_ended_call_is_absorbed)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_retry_policy p = policy(1000, 1, 100);
    call_ok("t", "q", &p, id);
    fetch_attempt(id, 1, 60000, task, token);
    h_advance(1000);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_FAILED);
    engine_reply *r = complete_with(task, "w", token, "too late");
    h_expect_ok(r); /* the worker is done with it either way */
    engine_reply_free(r);
    r = await_now(id);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_FAILED);
    cr_assert_str_eq(r->instance.error.code, "TIMEOUT");
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 0);
    cr_assert_eq(h_events(ENGINE_EVENT_INSTANCE_RESOLVED), 1);
}

Test(calls, both_budgets_in_one_call)
{
    /* Workers fail attempt 1 twice (the task's budget); the call's timeout
     * re-drives regardless (the call's budget); attempt 2 answers. */
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_retry_policy p = policy(10000, 3, 1000);
    call_ok("t", "q", &p, id);
    for (int i = 0; i < 2; i++) {
        fetch_attempt(id, 1, 0, task, token);
        engine_request req = {.op = ENGINE_OP_FAIL};
        req.u.fail.guard = (engine_guard){task, "w", token};
        req.u.fail.error = (engine_error){.code = "FLAKY"};
        req.u.fail.has_retry_in_ms = true;
        req.u.fail.retry_in_ms = 100;
        exec_ok(&req);
        h_advance(100);
        uint32_t attempt;
        cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_WAITING);
        cr_assert_eq(attempt, 1, "a worker's failure is not the call's attempt");
    }
    h_advance(10000 - 200); /* the timeout, from the call's acceptance */
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
    cr_assert_eq(h_stats().tasks, 0, "attempt 1, failed twice and unheld, was withdrawn");
    h_advance(1000);
    fetch_attempt(id, 2, 0, task, token);
    engine_reply_free(complete_with(task, "w", token, "ok"));
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_RESOLVED);
}

Test(calls, a_poisoned_request_fails_the_call)
{
    h_skip_on_pg("a pull channel's call is a task at once on PostgreSQL: no park fails (the "
                 "push suite poisons a call's request there)");
    H.o.delivery_attempts = 2;
    h_reopen();
    char id[ENGINE_ID_STR];
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 2);
    call_ok("t", "q", NULL, id);
    h_advance(H.o.delivery_backoff_max_ms);
    engine_reply *r = await_now(id);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_FAILED);
    cr_assert_str_eq(r->instance.error.code, "DELIVERY_POISONED");
    engine_reply_free(r);
    engine_stats s = h_stats();
    cr_assert_eq(s.poisoned, 1, "the delivery stays, for the operator");
    cr_assert_eq(s.instances_waiting, 0);
}

Test(calls, discarding_a_call_s_terminal_task_fails_the_call)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "q", NULL, id);
    fetch_attempt(id, 1, 0, task, token);
    engine_request req = {.op = ENGINE_OP_FAIL};
    req.u.fail.guard = (engine_guard){task, "w", token};
    req.u.fail.error = (engine_error){.code = "BROKEN"};
    req.u.fail.has_retries_left = true;
    req.u.fail.retries_left = 0;
    engine_reply *r = h_exec(&req);
    cr_assert(r->terminal);
    engine_reply_free(r);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_WAITING, "terminal: kept for an operator");
    engine_request d = {.op = ENGINE_OP_DISCARD_TERMINAL};
    d.u.discard_terminal.id = task;
    exec_ok(&d);
    r = await_now(id);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_FAILED);
    cr_assert_str_eq(r->instance.error.code, "DISCARDED");
    engine_reply_free(r);
}

Test(calls, an_operator_s_retry_of_a_call_s_terminal_task_lets_it_resolve)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "q", NULL, id);
    fetch_attempt(id, 1, 0, task, token);
    engine_request req = {.op = ENGINE_OP_FAIL};
    req.u.fail.guard = (engine_guard){task, "w", token};
    req.u.fail.has_retries_left = true;
    req.u.fail.retries_left = 0;
    engine_reply_free(h_exec(&req));
    engine_request rt = {.op = ENGINE_OP_RETRY_TERMINAL};
    rt.u.retry_terminal.id = task;
    exec_ok(&rt);
    fetch_attempt(id, 1, 0, task, token);
    engine_reply_free(complete_with(task, "w", token, "at last"));
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_RESOLVED);
}

/* ---- restarts and retention ---- */

Test(calls, timers_survive_a_restart_and_fire_once)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_retry_policy p = policy(1000, 3, 500);
    call_ok("t", "q", &p, id);
    h_reopen();
    h_advance(1000);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
    h_reopen();
    cr_assert_eq(h_stats().instances_backoff, 1);
    h_advance(500);
    h_reopen();
    h_advance(1);
    uint32_t attempt;
    cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(attempt, 2, "the re-drive fired once");
    cr_assert_eq(h_stats().tasks, 1, "one task for the one attempt");
    fetch_attempt(id, 2, 0, task, token);
    engine_reply_free(complete_with(task, "w", token, "x"));
    h_reopen();
    h_advance(100000);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_RESOLVED, "no timer outlived its call");
    cr_assert_eq(h_stats().calls_timed_out, 0, "counted since the last open");
}

Test(calls, an_ended_call_is_dropped_when_its_retention_ends)
{
    H.o.instance_retention_ms = 10000;
    h_reopen();
    char task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_reply *c = call_req("t", "q", "k", NULL);
    h_expect_ok(c);
    char id[ENGINE_ID_STR];
    memcpy(id, c->submitted[0].id, ENGINE_ID_STR);
    engine_reply_free(c);
    fetch_attempt(id, 1, 0, task, token);
    engine_reply_free(complete_with(task, "w", token, "r"));
    h_advance(9999);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_RESOLVED);
    h_reopen(); /* where ended calls stand is read back from the store */
    h_advance(1);
    engine_reply *r = await_now(id);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
    cr_assert_eq(h_stats().instances_dropped, 1);
    /* Its key went with it: the same key is a new call. */
    c = call_req("t", "q", "k", NULL);
    h_expect_ok(c);
    cr_assert_not(c->submitted[0].duplicate);
    cr_assert_str_neq(c->submitted[0].id, id);
    engine_reply_free(c);
}

Test(calls, retention_drops_in_bounded_batches)
{
    H.o.instance_retention_ms = 1000;
    H.o.timers_max_per_turn = 3;
    h_reopen();
    char ids[10][ENGINE_ID_STR];
    engine_retry_policy p = policy(10, 1, 10);
    for (int i = 0; i < 10; i++)
        call_ok("t", "q", &p, ids[i]);
    h_advance(10); /* all time out, three a turn: FAILED */
    /* The actor goes on while timers are due; a stats request may be
     * served by any of those turns, so look until all ten are counted. */
    for (int i = 0; i < 20 && h_stats().calls_failed < 10; i++)
        engine_tick(H.e);
    cr_assert_eq(h_stats().calls_failed, 10);
    uint64_t turns = h_stats().turns;
    h_advance(1000); /* three a turn: the actor goes on while some are due */
    for (int i = 0; i < 20 && h_stats().instances_dropped < 10; i++)
        engine_tick(H.e);
    engine_stats s = h_stats();
    cr_assert_eq(s.instances_dropped, 10);
    cr_assert_geq(s.turns - turns, 4, "10 drops, 3 a turn: %llu turns",
                  (unsigned long long)(s.turns - turns));
    for (int i = 0; i < 10; i++) {
        engine_reply *r = await_now(ids[i]);
        h_expect_code(r, ENGINE_CODE_NOT_FOUND);
        engine_reply_free(r);
    }
}

/* ---- bounds (R6) ---- */

static void expect_policy_refused(engine_retry_policy p, const char *field, uint64_t limit)
{
    engine_reply *r = call_req("t", "q", NULL, &p);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, field, "field %s, expected %s", r->status.field, field);
    if (limit != 0) {
        cr_assert(r->status.has_limit);
        cr_assert_eq(r->status.limit, limit);
    }
    engine_reply_free(r);
}

Test(calls, a_retry_policy_over_its_bounds_is_refused_naming_the_field)
{
    expect_policy_refused((engine_retry_policy){.has_max_attempts = true, .max_attempts = 2},
                          "retry.timeout_ms", 0);
    expect_policy_refused(policy(0, 1, 100), "retry.timeout_ms", 0);
    expect_policy_refused(policy(604800001, 1, 100), "retry.timeout_ms", 604800000);
    expect_policy_refused(policy(1000, 0, 100), "retry.max_attempts", 0);
    expect_policy_refused(policy(1000, 101, 100), "retry.max_attempts", 100);
    engine_retry_policy p = policy(1000, 2, 100);
    p.has_multiplier = true;
    p.multiplier = 0.5;
    expect_policy_refused(p, "retry.multiplier", 0);
    p.multiplier = 10.5;
    expect_policy_refused(p, "retry.multiplier", 0);
    p.multiplier = NAN;
    expect_policy_refused(p, "retry.multiplier", 0);
    p = policy(1000, 2, 5000);
    p.has_max_backoff_ms = true;
    p.max_backoff_ms = 1000;
    expect_policy_refused(p, "retry.initial_backoff_ms", 1000);
    p = policy(1000, 2, 100);
    p.has_max_backoff_ms = true;
    p.max_backoff_ms = 600001;
    expect_policy_refused(p, "retry.max_backoff_ms", 600000);
    cr_assert_eq(h_stats().calls, 0, "nothing was kept");
    cr_assert_eq(ready_tasks(), 0);
}

Test(calls, a_call_is_checked_as_a_submit_is)
{
    engine_request req = {.op = ENGINE_OP_CALL};
    engine_header h = {"berth-instance-id", "0123456789abcdef0123456789abcdef"};
    req.u.call.request = (engine_submit_args){.topic = "t", .headers = &h, .n_headers = 1};
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT); /* R10: reserved */
    engine_reply_free(r);
    req.u.call.request = (engine_submit_args){.topic = ""};
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    engine_reply_free(r);
}

Test(calls, a_failed_write_keeps_nothing_of_a_call)
{
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply *r = call_req("t", "q", "k", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(r->status.retryable);
    engine_reply_free(r);
    cr_assert_eq(h_stats().instances_waiting, 0);
    h_advance(5000); /* past the store's backoff */
    r = call_req("t", "q", "k", NULL);
    h_expect_ok(r);
    cr_assert_not(r->submitted[0].duplicate, "the first call's key was not kept either");
    engine_reply_free(r);
}

/* ---- every write of a call's life is all or nothing ----
 * Each step is one batch: a write that fails keeps none of it, and the
 * step happens once when it is tried again. */

Test(calls, a_failed_write_of_the_answer_keeps_the_call_waiting_and_its_task_held)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "q", NULL, id);
    fetch_attempt(id, 1, 0, task, token);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply *r = complete_with(task, "w", token, "a");
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(h_stats().tasks, 1);
    h_advance(ENGINE_STORE_BACKOFF_FOR_TESTS);
    r = complete_with(task, "w", token, "a"); /* the worker still holds it */
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_RESOLVED);
    engine_stats s = h_stats();
    cr_assert_eq(s.calls_resolved, 1, "resolved once");
    cr_assert_eq(h_events(ENGINE_EVENT_INSTANCE_RESOLVED), 1);
}

Test(calls, a_failed_write_of_a_timeout_or_a_re_drive_happens_once_later)
{
    char id[ENGINE_ID_STR];
    engine_retry_policy p = policy(1000, 3, 500);
    call_ok("t", "q", &p, id);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    h_advance(1000); /* the timeout's turn fails */
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(h_stats().tasks, 1, "the attempt was not withdrawn");
    h_advance(ENGINE_STORE_BACKOFF_FOR_TESTS); /* tried again */
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
    cr_assert_eq(h_stats().calls_timed_out, 1);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    h_advance(500); /* the re-drive's turn fails */
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
    cr_assert_eq(h_stats().tasks, 0);
    h_advance(ENGINE_STORE_BACKOFF_FOR_TESTS);
    uint32_t attempt;
    cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(attempt, 2);
    cr_assert_eq(h_stats().tasks, 1, "one task for attempt 2");
    h_reopen();
    cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(attempt, 2);
    cr_assert_eq(h_stats().tasks, 1);
}

Test(calls, a_failed_write_of_a_drop_drops_later)
{
    H.o.instance_retention_ms = 100;
    h_reopen();
    char id[ENGINE_ID_STR];
    engine_retry_policy p = policy(10, 1, 10);
    call_ok("t", "q", &p, id);
    h_advance(10);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_FAILED);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    h_advance(100); /* the drop's turn fails */
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_FAILED);
    cr_assert_eq(h_stats().instances_dropped, 0);
    h_advance(ENGINE_STORE_BACKOFF_FOR_TESTS);
    engine_reply *r = await_now(id);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
    cr_assert_eq(h_stats().instances_dropped, 1);
}

Test(calls, an_await_waiting_through_a_failed_write_is_answered_and_can_await_again)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    call_ok("t", "q", NULL, id);
    h_async a;
    await_async(id, 20000, &a);
    fetch_attempt(id, 1, 0, task, token);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply *r = complete_with(task, "w", token, "a");
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    if (!h_store_is_pg()) {
        r = h_async_wait(&a);
        h_expect_code(r, ENGINE_CODE_UNAVAILABLE); /* memory was reloaded under it */
        cr_assert(r->status.retryable);
        h_async_free(&a);
    } else { /* the database lost nothing it had: the await waits on */
        cr_assert_null(h_async_peek(&a));
    }
    h_advance(ENGINE_STORE_BACKOFF_FOR_TESTS);
    if (!h_store_is_pg())
        await_async(id, 20000, &a);
    engine_reply_free(complete_with(task, "w", token, "a"));
    r = h_async_wait(&a);
    h_expect_ok(r);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    h_async_free(&a);
}

/* ---- a poisoned request is a failed attempt ---- */

Test(calls, a_poisoned_request_with_attempts_left_backs_off_and_re_drives)
{
    h_skip_on_pg("a pull channel's call is a task at once on PostgreSQL: no park fails (the "
                 "push suite poisons a call's request there)");
    H.o.delivery_attempts = 2;
    h_reopen();
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_retry_policy p = policy(3600000, 2, 500);
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 2);
    call_ok("t", "q", &p, id);
    h_advance(H.o.delivery_backoff_max_ms); /* poisoned: the call hears of it next turn */
    engine_tick(H.e);
    uint32_t attempt;
    cr_assert_eq(state_of(id, &attempt), ENGINE_INSTANCE_BACKOFF);
    cr_assert_eq(attempt, 1);
    cr_assert_eq(h_stats().poisoned, 1, "the poisoned request stays for the operator");
    h_advance(500);
    fetch_attempt(id, 2, 0, task, token);
    engine_reply_free(complete_with(task, "w", token, "made it"));
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_RESOLVED);
}

Test(calls, a_request_poisoned_by_a_failed_turn_s_accounting_fails_the_call_once_written)
{
    h_skip_on_pg("a pull channel's call is a task at once on PostgreSQL: no park fails (the "
                 "push suite poisons a call's request there)");
    H.o.delivery_attempts = 2;
    h_reopen();
    char id[ENGINE_ID_STR];
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    call_ok("t", "q", NULL, id); /* the first park fails: attempt 1 of 2 */
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    h_advance(H.o.delivery_backoff_initial_ms); /* the park's turn fails: attempt 2, poisoned */
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_WAITING, "not before it is written");
    h_advance(ENGINE_STORE_BACKOFF_FOR_TESTS);
    engine_tick(H.e);
    engine_reply *r = await_now(id);
    h_expect_ok(r);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_FAILED);
    cr_assert_str_eq(r->instance.error.code, "DELIVERY_POISONED");
    engine_reply_free(r);
    h_reopen();
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_FAILED);
}

Test(calls, a_call_whose_poisoned_request_it_never_heard_of_hears_after_a_restart)
{
    h_skip_on_pg("a pull channel's call is a task at once on PostgreSQL: no park fails (the "
                 "push suite poisons a call's request there)");
    H.o.delivery_attempts = 2;
    h_reopen();
    char id[ENGINE_ID_STR];
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    call_ok("t", "q", NULL, id);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    h_advance(H.o.delivery_backoff_initial_ms);
    h_reopen(); /* closing writes the poisoning; the call was not told yet */
    engine_tick(H.e);
    engine_tick(H.e);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_FAILED);
}

/* ---- what a re-drive and an operator leave alone ---- */

Test(calls, a_re_drive_withdraws_the_dead_attempt_s_task_once_nobody_holds_it)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_retry_policy p = policy(1000, 3, 1000);
    call_ok("t", "q", &p, id);
    fetch_attempt(id, 1, 1500, task, token); /* held past the timeout, not past the backoff */
    h_advance(1000);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
    cr_assert_eq(h_stats().tasks, 1, "held at the timeout: it stays");
    h_advance(1000); /* the re-drive: the lock ran out at 1500 */
    cr_assert_eq(h_stats().tasks, 1, "only attempt 2's task");
    fetch_attempt(id, 2, 0, task, token);
}

Test(calls, discarding_the_dead_attempt_s_task_in_a_backoff_leaves_the_call_to_re_drive)
{
    char id[ENGINE_ID_STR], task[ENGINE_ID_STR], token[ENGINE_ID_STR];
    engine_retry_policy p = policy(1000, 3, 5000);
    call_ok("t", "q", &p, id);
    fetch_attempt(id, 1, 60000, task, token);
    h_advance(1000);
    engine_request req = {.op = ENGINE_OP_FAIL};
    req.u.fail.guard = (engine_guard){task, "w", token};
    req.u.fail.has_retries_left = true;
    req.u.fail.retries_left = 0;
    engine_reply_free(h_exec(&req)); /* terminal */
    engine_request d = {.op = ENGINE_OP_DISCARD_TERMINAL};
    d.u.discard_terminal.id = task;
    exec_ok(&d);
    cr_assert_eq(state_of(id, NULL), ENGINE_INSTANCE_BACKOFF);
    h_advance(5000);
    fetch_attempt(id, 2, 0, task, token);
}

Test(calls, a_key_dropped_at_the_start_of_a_turn_is_free_for_a_call_later_in_it)
{
    H.o.instance_retention_ms = 1000;
    h_reopen();
    engine_retry_policy p = policy(10, 1, 10);
    engine_request req = {.op = ENGINE_OP_CALL};
    req.u.call.request = (engine_submit_args){.topic = "t", .idempotency_key = "k"};
    req.u.call.retry = &p;
    engine_reply *r = h_exec(&req);
    char first[ENGINE_ID_STR];
    memcpy(first, r->submitted[0].id, ENGINE_ID_STR);
    engine_reply_free(r);
    h_advance(10); /* FAILED: its retention starts */
    engine_hold(H.e, true);
    engine_manual_clock_advance(&H.clock, 1000); /* no turn yet */
    h_async a;
    h_exec_async(&req, &a);
    engine_hold(H.e, false); /* one turn: the drop, then the call */
    r = h_async_wait(&a);
    h_expect_ok(r);
    cr_assert_not(r->submitted[0].duplicate, "the key went with the dropped call");
    cr_assert_str_neq(r->submitted[0].id, first);
    h_async_free(&a);
}
