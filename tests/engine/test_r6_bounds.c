/* R6 bounds are rejections, never clamps. */
#include <string.h>

#include "tests/support/harness.h"
#include "store/err.h"

TestSuite(r6_bounds, .init = h_setup, .fini = h_teardown);

static engine_reply *fetch_with(bool has_max, uint32_t max, bool has_lock, uint64_t lock,
                                bool has_wait, uint64_t wait)
{
    static const char *topics[] = {"t"};
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){.worker_id = "w",
                                      .topics = topics,
                                      .n_topics = 1,
                                      .has_max_tasks = has_max,
                                      .max_tasks = max,
                                      .has_lock_ms = has_lock,
                                      .lock_ms = lock,
                                      .has_wait_ms = has_wait,
                                      .wait_ms = wait};
    return h_exec(&req);
}

static void expect_bound(engine_reply *r, const char *field, uint64_t limit)
{
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, field);
    cr_assert(r->status.has_limit);
    cr_assert_eq(r->status.limit, limit);
    engine_reply_free(r);
}

Test(r6_bounds, max_tasks_over_the_ceiling_is_rejected_with_field_value_and_limit)
{
    engine_reply *r = fetch_with(true, 1001, false, 0, true, 0);
    cr_assert(strstr(r->status.message, "1001") != NULL, "value sent: %s", r->status.message);
    cr_assert(strstr(r->status.message, "1000") != NULL, "ceiling: %s", r->status.message);
    expect_bound(r, "max_tasks", 1000);
}

Test(r6_bounds, lock_ms_over_the_ceiling_is_rejected)
{
    expect_bound(fetch_with(false, 0, true, 3600001, true, 0), "lock_ms", 3600000);
}

Test(r6_bounds, wait_ms_over_the_ceiling_is_rejected)
{
    expect_bound(fetch_with(false, 0, false, 0, true, 30001), "wait_ms", 30000);
}

Test(r6_bounds, zero_lock_and_zero_batch_are_rejected)
{
    engine_reply *r = fetch_with(false, 0, true, 0, true, 0);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "lock_ms");
    engine_reply_free(r);
    r = fetch_with(true, 0, false, 0, true, 0);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "max_tasks");
    engine_reply_free(r);
}

Test(r6_bounds, a_rejected_fetch_claims_nothing)
{
    h_submit("t", "p", NULL);
    engine_reply_free(fetch_with(true, 5000, false, 0, true, 0));
    cr_assert_eq(h_stats().locked, 0);
}

Test(r6_bounds, omitted_bounds_take_the_defaults_not_the_ceilings)
{
    for (int i = 0; i < 15; i++)
        h_submit("t", "p", NULL);
    engine_reply *r = fetch_with(false, 0, false, 0, true, 0);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 10, "batch default, not 1000");
    cr_assert_eq(r->tasks[0].lock_expires_at_ms, H_T0 + 30000, "lock default, not 1 h");
    engine_reply_free(r);
}

Test(r6_bounds, omitted_wait_waits_the_default)
{
    static const char *topics[] = {"t"};
    static engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){.worker_id = "w", .topics = topics, .n_topics = 1};
    h_async a;
    h_exec_async(&req, &a);
    engine_tick(H.e);
    h_advance(9999);
    cr_assert_null(h_async_peek(&a), "still waiting before the default wait");
    cr_assert_eq(h_stats().waiting_fetches, 1);
    h_advance(1);
    engine_reply *r = h_async_wait(&a);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 0);
    h_async_free(&a);
}

Test(r6_bounds, extend_lock_bounds)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w", "t", 1000, NULL, tok);
    engine_request req = {.op = ENGINE_OP_EXTEND_LOCK};
    req.u.extend = (engine_extend_args){{id, "w", tok}, true, 3600001};
    expect_bound(h_exec(&req), "lock_ms", 3600000);
    req.u.extend.lock_ms = 0;
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    engine_reply_free(r);
    req.u.extend.has_lock_ms = false;
    r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->lock_expires_at_ms, H_T0 + 30000, "omitted: the default lock from now");
    engine_reply_free(r);
}

Test(r6_bounds, fail_bounds)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w", "t", 1000, NULL, tok);
    engine_request req = {.op = ENGINE_OP_FAIL};
    req.u.fail.guard = (engine_guard){id, "w", tok};
    req.u.fail.has_retry_in_ms = true;
    req.u.fail.retry_in_ms = 3600001;
    expect_bound(h_exec(&req), "retry_in_ms", 3600000);
    req.u.fail.has_retry_in_ms = false;
    req.u.fail.has_retries_left = true;
    req.u.fail.retries_left = 101;
    expect_bound(h_exec(&req), "retries_left", 100);
    engine_reply *g = h_get_task(id);
    cr_assert_eq(g->task.failures, 0, "a rejected fail changes nothing");
    cr_assert_eq(g->task.state, ENGINE_TASK_LOCKED);
    engine_reply_free(g);
}

static int open_with(void (*tweak)(engine_options *), char *err, size_t len)
{
    h_close();
    engine_options o = H.o;
    tweak(&o);
    engine *e = NULL;
    int rv = engine_open(&o, &e, err, len);
    engine_close(e);
    return rv;
}

static void lock_over(engine_options *o)
{
    o->lock_default_ms = o->lock_max_ms + 1;
}
static void lock_zero(engine_options *o)
{
    o->lock_default_ms = 0;
}
static void wait_over(engine_options *o)
{
    o->wait_default_ms = o->wait_max_ms + 1;
}
static void batch_over(engine_options *o)
{
    o->batch_default = o->batch_max + 1;
}
static void lock_max_huge(engine_options *o)
{
    o->lock_max_ms = 1ull << 62; /* now + this would wrap */
}

Test(r6_bounds, the_engine_refuses_to_open_with_contradictory_defaults)
{
    char err[256];
    cr_assert_eq(open_with(lock_over, err, sizeof(err)), BERTH_EINVAL);
    cr_assert(strstr(err, "lock-default-ms") != NULL, "names the setting: %s", err);
    cr_assert_eq(open_with(lock_zero, err, sizeof(err)), BERTH_EINVAL);
    cr_assert(strstr(err, "lock-default-ms") != NULL, "%s", err);
    cr_assert_eq(open_with(wait_over, err, sizeof(err)), BERTH_EINVAL);
    cr_assert(strstr(err, "wait-default-ms") != NULL, "%s", err);
    cr_assert_eq(open_with(batch_over, err, sizeof(err)), BERTH_EINVAL);
    cr_assert(strstr(err, "batch-default") != NULL, "%s", err);
    cr_assert_eq(open_with(lock_max_huge, err, sizeof(err)), BERTH_EINVAL);
    cr_assert(strstr(err, "lock-max-ms") != NULL, "%s", err);
    h_open();
}

Test(r6_bounds, fetch_names_at_least_one_topic_and_a_worker)
{
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){.worker_id = "w", .n_topics = 0};
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "topics");
    engine_reply_free(r);
    static const char *topics[] = {"t"};
    req.u.fetch = (engine_fetch_args){.worker_id = "", .topics = topics, .n_topics = 1};
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "worker_id");
    engine_reply_free(r);
}
