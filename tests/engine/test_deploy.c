/* Deployments (R14, R15): versions, routes, strict channels, and the
 * retirement gate kept by counters, with the manual clock. */
#include <stdio.h>
#include <string.h>

#include "tests/support/harness.h"

static void setup(void)
{
    h_setup();
    H.o.retries = 1; /* one failure makes a task terminal */
    H.o.delivery_attempts = 2;
    H.o.delivery_backoff_initial_ms = 100;
    H.o.delivery_backoff_max_ms = 100;
    h_reopen();
}

TestSuite(deploy, .init = setup, .fini = h_teardown);

static engine_reply *deploy_req(const char *id, const engine_channel *cs, size_t n)
{
    engine_request req = {.op = ENGINE_OP_DEPLOY};
    req.u.deploy.id = id;
    req.u.deploy.channels = cs;
    req.u.deploy.n_channels = n;
    return h_exec(&req);
}

/* Deploys id declaring the pull channels named (NULL-terminated); returns
 * the version made. */
static uint32_t deploy(const char *id, const char *const *names)
{
    engine_channel cs[8];
    size_t n = 0;
    for (; names[n] != NULL; n++)
        cs[n] = (engine_channel){.name = names[n]};
    engine_reply *r = deploy_req(id, cs, n);
    h_expect_ok(r);
    cr_assert_eq(r->n_deployments, 1);
    cr_assert_str_eq(r->deployments[0].id, id);
    uint32_t v = r->deployments[0].version;
    engine_reply_free(r);
    return v;
}

static engine_reply *retire(const char *id)
{
    engine_request req = {.op = ENGINE_OP_RETIRE};
    req.u.retire.id = id;
    return h_exec(&req);
}

/* The version v of id as list_deployments shows it (asserts it is there). */
static engine_deployment shown(const char *id, uint32_t v)
{
    engine_request req = {.op = ENGINE_OP_LIST_DEPLOYMENTS};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    for (size_t i = 0; i < r->n_deployments; i++)
        if (strcmp(r->deployments[i].id, id) == 0 && r->deployments[i].version == v) {
            engine_deployment d = r->deployments[i];
            d.id = NULL; /* (the strings go with the reply) */
            d.channels = NULL;
            engine_reply_free(r);
            return d;
        }
    cr_assert_fail("deployment %s version %u is not listed", id, v);
    return (engine_deployment){0};
}

static engine_reply *submit(const char *topic)
{
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit =
        (engine_submit_args){.topic = topic, .payload = (const uint8_t *)"p", .payload_len = 1};
    return h_exec(&req);
}

static engine_reply *call(const char *topic, const engine_retry_policy *retry)
{
    engine_request req = {.op = ENGINE_OP_CALL};
    req.u.call.request =
        (engine_submit_args){.topic = topic, .payload = (const uint8_t *)"q", .payload_len = 1};
    req.u.call.retry = retry;
    return h_exec(&req);
}

static void complete_one(const char *topic)
{
    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", topic, 0, &t, token);
    engine_reply *r = h_complete(t.id, "w", token);
    h_expect_ok(r);
    engine_reply_free(r);
}

Test(deploy, without_deployments_every_topic_is_a_pull_channel)
{
    h_submit("anything", "p", NULL);
    h_advance(0);
    complete_one("anything");
    engine_request req = {.op = ENGINE_OP_LIST_DEPLOYMENTS};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->n_deployments, 0);
    engine_reply_free(r);
}

Test(deploy, a_deployment_is_live_and_counts_what_its_channels_hold)
{
    cr_assert_eq(deploy("shop", (const char *[]){"orders", "refunds", NULL}), 1);
    h_submit("orders", "p", NULL);
    h_submit("orders", "p", NULL);
    h_submit("elsewhere", "p", NULL); /* undeclared: the implicit deployment's */
    h_advance(0);
    engine_deployment d = shown("shop", 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_LIVE);
    cr_assert_eq(d.tasks, 2);
    cr_assert_eq(d.pending_deliveries, 0);
    complete_one("orders");
    cr_assert_eq(shown("shop", 1).tasks, 1);
}

Test(deploy, deploying_the_same_channels_again_changes_nothing)
{
    cr_assert_eq(deploy("shop", (const char *[]){"orders", NULL}), 1);
    cr_assert_eq(deploy("shop", (const char *[]){"orders", NULL}), 1);
    engine_request req = {.op = ENGINE_OP_LIST_DEPLOYMENTS};
    engine_reply *r = h_exec(&req);
    cr_assert_eq(r->n_deployments, 1);
    engine_reply_free(r);
}

Test(deploy, a_new_version_drains_the_one_before_which_keeps_serving_what_it_holds)
{
    deploy("shop", (const char *[]){"orders", "legacy", NULL});
    h_submit("legacy", "p", NULL);
    h_submit("orders", "p", NULL);
    h_advance(0);
    cr_assert_eq(deploy("shop", (const char *[]){"orders", NULL}), 2);
    cr_assert_eq(shown("shop", 1).state, ENGINE_DEPLOYMENT_DRAINING);
    cr_assert_eq(shown("shop", 2).state, ENGINE_DEPLOYMENT_LIVE);

    /* legacy is declared only by the draining version: nothing new. */
    engine_reply *r = submit("legacy");
    h_expect_code(r, ENGINE_CODE_FAILED_PRECONDITION);
    cr_assert_str_eq(r->status.field, "topic");
    engine_reply_free(r);
    r = call("legacy", NULL);
    h_expect_code(r, ENGINE_CODE_FAILED_PRECONDITION);
    engine_reply_free(r);
    /* orders goes to version 2. */
    h_submit("orders", "p", NULL);
    h_advance(0);
    cr_assert_eq(shown("shop", 2).tasks, 1);
    cr_assert_eq(shown("shop", 1).tasks, 2);

    /* What version 1 holds is served (R2); workers name topics (R15). */
    complete_one("legacy");
    cr_assert_eq(shown("shop", 1).state, ENGINE_DEPLOYMENT_DRAINING);
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 0);
    complete_one("orders"); /* the oldest: version 1's */
    engine_deployment v1 = shown("shop", 1);
    cr_assert_eq(v1.state, ENGINE_DEPLOYMENT_RETIRED);
    cr_assert_eq(v1.retired_at_ms, h_now());
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 1);
    cr_assert_str_eq(H.ev[H.n_ev - 1].topic, "shop", "the event names the deployment");
    cr_assert_eq(shown("shop", 2).state, ENGINE_DEPLOYMENT_LIVE);
}

Test(deploy, retiring_what_holds_nothing_retires_it_at_once)
{
    deploy("idle", (const char *[]){"quiet", NULL});
    engine_reply *r = retire("idle");
    h_expect_ok(r);
    cr_assert_eq(r->deployments[0].state, ENGINE_DEPLOYMENT_RETIRED);
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 1);
    r = retire("idle"); /* again: it is what it is */
    h_expect_ok(r);
    cr_assert_eq(r->deployments[0].state, ENGINE_DEPLOYMENT_RETIRED);
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 1);
    r = retire("never-deployed");
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
    /* A retired channel is undeclared again: the implicit deployment's. */
    r = submit("quiet");
    h_expect_ok(r);
    engine_reply_free(r);
}

/* The gate: a pending delivery, a task and a call between attempts hold a
 * draining deployment; a terminal task and a poisoned delivery do not. */
Test(deploy, the_gate_counts_deliveries_tasks_and_backing_off_calls_not_terminal_or_poisoned)
{
    h_skip_on_pg("a pull channel's work is a task at once on PostgreSQL: no delivery waits "
                 "to be parked (ENGINE_FP_PARK), none is poisoned");
    deploy("d", (const char *[]){"t", "c", NULL});
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    h_submit("t", "stuck", NULL); /* the park fails once: a pending delivery */
    h_submit("t", "work", NULL);
    engine_retry_policy p = {.has_timeout_ms = true,
                             .timeout_ms = 1000,
                             .has_max_attempts = true,
                             .max_attempts = 2,
                             .has_initial_backoff_ms = true,
                             .initial_backoff_ms = 500};
    engine_reply *r = call("c", &p);
    h_expect_ok(r);
    engine_reply_free(r);
    h_advance(0);
    engine_deployment d = shown("d", 1);
    cr_assert_eq(d.pending_deliveries, 1);
    cr_assert_eq(d.tasks, 2);

    r = retire("d");
    h_expect_ok(r);
    cr_assert_eq(r->deployments[0].state, ENGINE_DEPLOYMENT_DRAINING);
    engine_reply_free(r);

    /* The work task fails for good: terminal, it no longer holds. */
    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", "t", 0, &t, token);
    cr_assert_eq(t.payload_len, 4);
    engine_reply_free(h_fail(t.id, "w", token, "BROKEN"));
    d = shown("d", 1);
    cr_assert_eq(d.terminal_tasks, 1);
    cr_assert_eq(d.tasks, 1);

    /* The stuck delivery fails its second attempt: poisoned. The call
     * times out and backs off: its task is withdrawn, and the call holds
     * the deployment between its attempts. */
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 100);
    h_advance(1000);
    d = shown("d", 1);
    cr_assert_eq(d.poisoned_deliveries, 1);
    cr_assert_eq(d.pending_deliveries, 0);
    cr_assert_eq(d.calls_backing_off, 1);
    cr_assert_eq(d.tasks, 0);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_DRAINING);
    /* The re-driven call's request waits to park. */
    h_advance(500);
    d = shown("d", 1);
    cr_assert_eq(d.calls_backing_off, 0);
    cr_assert_eq(d.pending_deliveries, 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_DRAINING);
    /* ... which is poisoned too: the call fails, and nothing holds it. */
    h_advance(100);
    d = shown("d", 1);
    cr_assert_eq(d.pending_deliveries, 0);
    cr_assert_eq(d.poisoned_deliveries, 2);
    cr_assert_eq(d.terminal_tasks, 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_RETIRED);
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 1);
}

/* The call's state now, by an await that does not wait. */
static engine_instance_state call_state(const char *id, uint32_t *attempt)
{
    engine_request req = {.op = ENGINE_OP_AWAIT_CALL};
    req.u.await_call = (engine_await_args){.instance_id = id, .has_wait_ms = true, .wait_ms = 0};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    engine_instance_state s = r->instance.state;
    if (attempt != NULL)
        *attempt = r->instance.attempt;
    engine_reply_free(r);
    return s;
}

/* A call with an attempt left has not given up: its request poisoned, it
 * backs off (told the turn after) and re-drives into its deployment, which
 * must not have retired meanwhile. */
Test(deploy, a_call_with_an_attempt_left_holds_its_deployment_past_a_poisoned_request)
{
    h_skip_on_pg("a pull channel's work is a task at once on PostgreSQL: no delivery waits "
                 "to be parked (ENGINE_FP_PARK), none is poisoned");
    deploy("d", (const char *[]){"c", NULL});
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 100); /* every park fails */
    engine_retry_policy p = {.has_timeout_ms = true,
                             .timeout_ms = 10000,
                             .has_max_attempts = true,
                             .max_attempts = 3,
                             .has_initial_backoff_ms = true,
                             .initial_backoff_ms = 500};
    engine_reply *r = call("c", &p);
    h_expect_ok(r);
    char id[ENGINE_ID_STR];
    snprintf(id, sizeof(id), "%s", r->submitted[0].id);
    engine_reply_free(r);
    r = retire("d");
    h_expect_ok(r);
    cr_assert_eq(r->deployments[0].state, ENGINE_DEPLOYMENT_DRAINING);
    engine_reply_free(r);

    /* The request's second park fails: poisoned. The call still has two
     * attempts: the deployment drains on. */
    h_advance(100);
    engine_deployment d = shown("d", 1);
    cr_assert_eq(d.poisoned_deliveries, 1);
    cr_assert_eq(d.pending_deliveries, 0);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_DRAINING, "retired under a call with attempts left");
    cr_assert_eq(d.calls_retrying, 1, "what holds it is shown");
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 0);
    cr_assert_eq(call_state(id, NULL), ENGINE_INSTANCE_BACKOFF);
    cr_assert_eq(shown("d", 1).calls_backing_off, 1);

    /* The backoff's end re-drives into the draining deployment; the
     * request parks now, and its completion resolves the call. */
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 0);
    h_advance(500);
    uint32_t attempt;
    cr_assert_eq(call_state(id, &attempt), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(attempt, 2);
    d = shown("d", 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_DRAINING);
    cr_assert_eq(d.tasks, 1);
    cr_assert_eq(d.calls_retrying, 1);
    complete_one("c");
    cr_assert_eq(call_state(id, NULL), ENGINE_INSTANCE_RESOLVED);
    d = shown("d", 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_RETIRED);
    cr_assert_eq(d.tasks, 0);
    cr_assert_eq(d.calls_retrying, 0);
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 1);
}

/* The call's task goes terminal: the call times out and re-drives later,
 * so with an attempt left it holds the deployment (across a restart too);
 * on its last attempt it no longer does. */
Test(deploy, a_call_with_an_attempt_left_holds_its_deployment_past_a_terminal_task)
{
    deploy("d", (const char *[]){"c", NULL});
    engine_retry_policy p = {.has_timeout_ms = true,
                             .timeout_ms = 1000,
                             .has_max_attempts = true,
                             .max_attempts = 2,
                             .has_initial_backoff_ms = true,
                             .initial_backoff_ms = 500};
    engine_reply *r = call("c", &p);
    h_expect_ok(r);
    char id[ENGINE_ID_STR];
    snprintf(id, sizeof(id), "%s", r->submitted[0].id);
    engine_reply_free(r);
    engine_reply_free(retire("d"));

    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", "c", 0, &t, token);
    engine_reply_free(h_fail(t.id, "w", token, "BROKEN"));
    engine_deployment d = shown("d", 1);
    cr_assert_eq(d.terminal_tasks, 1);
    cr_assert_eq(d.tasks, 0);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_DRAINING, "retired under a call with attempts left");
    cr_assert_eq(d.calls_retrying, 1, "what holds it is shown");
    h_reopen(); /* what holds it is rebuilt at open */
    cr_assert_eq(shown("d", 1).state, ENGINE_DEPLOYMENT_DRAINING);
    cr_assert_eq(shown("d", 1).calls_retrying, 1);

    /* The timeout withdraws the terminal task and backs off; the backoff's
     * end re-drives the last attempt into the draining deployment. */
    h_advance(1000);
    cr_assert_eq(call_state(id, NULL), ENGINE_INSTANCE_BACKOFF);
    d = shown("d", 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_DRAINING);
    cr_assert_eq(d.terminal_tasks, 0);
    h_advance(500);
    uint32_t attempt;
    cr_assert_eq(call_state(id, &attempt), ENGINE_INSTANCE_WAITING);
    cr_assert_eq(attempt, 2);
    d = shown("d", 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_DRAINING);
    cr_assert_eq(d.tasks, 1);
    cr_assert_eq(d.calls_retrying, 0, "its last attempt: no attempt left");
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 0);

    /* The last attempt's task goes terminal too: nothing is left to
     * re-drive, and the deployment retires while the call waits out its
     * timeout, which then fails it. */
    h_fetch_one("w", "c", 0, &t, token);
    engine_reply_free(h_fail(t.id, "w", token, "BROKEN"));
    d = shown("d", 1);
    cr_assert_eq(d.terminal_tasks, 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_RETIRED);
    cr_assert_eq(call_state(id, NULL), ENGINE_INSTANCE_WAITING);
    h_advance(1000);
    cr_assert_eq(call_state(id, NULL), ENGINE_INSTANCE_FAILED);
    cr_assert_eq(shown("d", 1).state, ENGINE_DEPLOYMENT_RETIRED);
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 1);
}

/* Without a retry policy a call whose task is terminal waits for an
 * operator (R2, R11): that does not hold its deployment. */
Test(deploy, a_call_without_a_retry_policy_does_not_hold_its_deployment_past_a_terminal_task)
{
    deploy("d", (const char *[]){"c", NULL});
    engine_reply *r = call("c", NULL);
    h_expect_ok(r);
    char id[ENGINE_ID_STR];
    snprintf(id, sizeof(id), "%s", r->submitted[0].id);
    engine_reply_free(r);
    engine_reply_free(retire("d"));
    cr_assert_eq(shown("d", 1).state, ENGINE_DEPLOYMENT_DRAINING);
    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", "c", 0, &t, token);
    engine_reply_free(h_fail(t.id, "w", token, "BROKEN"));
    cr_assert_eq(shown("d", 1).state, ENGINE_DEPLOYMENT_RETIRED);
    cr_assert_eq(call_state(id, NULL), ENGINE_INSTANCE_WAITING);
    h_reopen();
    cr_assert_eq(shown("d", 1).state, ENGINE_DEPLOYMENT_RETIRED);
}

Test(deploy, an_operator_s_retry_of_a_retired_deployment_s_work_drains_it_again)
{
    deploy("d", (const char *[]){"t", NULL});
    h_submit("t", "p", NULL);
    h_advance(0);
    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", "t", 0, &t, token);
    engine_reply_free(h_fail(t.id, "w", token, "BROKEN"));
    engine_reply_free(retire("d"));
    cr_assert_eq(shown("d", 1).state, ENGINE_DEPLOYMENT_RETIRED);

    engine_request req = {.op = ENGINE_OP_RETRY_TERMINAL};
    req.u.retry_terminal.id = t.id;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    engine_deployment d = shown("d", 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_DRAINING);
    cr_assert_eq(d.tasks, 1);
    cr_assert_eq(d.retired_at_ms, 0);
    complete_one("t");
    cr_assert_eq(shown("d", 1).state, ENGINE_DEPLOYMENT_RETIRED);
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 2);
}

Test(deploy, a_channel_has_one_live_declarer)
{
    deploy("a", (const char *[]){"x", NULL});
    engine_channel cs[] = {{.name = "y"}, {.name = "x"}};
    engine_reply *r = deploy_req("b", cs, 2);
    h_expect_code(r, ENGINE_CODE_FAILED_PRECONDITION);
    cr_assert_str_eq(r->status.field, "channels[1].name");
    cr_assert(strstr(r->status.message, "a") != NULL);
    engine_reply_free(r);
    engine_reply_free(retire("a"));
    cr_assert_eq(deploy("b", (const char *[]){"y", "x", NULL}), 1, "free once a has retired");
}

Test(deploy, declarations_are_checked_and_bounded)
{
    engine_reply *r = deploy_req("", (engine_channel[]){{.name = "x"}}, 1);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "id");
    engine_reply_free(r);
    r = deploy_req("d", NULL, 0);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "channels");
    engine_reply_free(r);
    r = deploy_req("d", (engine_channel[]){{.name = "x"}, {.name = "x"}}, 2);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "channels[1].name");
    engine_reply_free(r);
    r = deploy_req("d", (engine_channel[]){{.name = "bad topic"}}, 1);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    engine_reply_free(r);
    r = deploy_req("d", (engine_channel[]){{.name = "x", .transport = "smtp://mail"}}, 1);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "channels[0].transport");
    engine_reply_free(r);
    r = deploy_req(
        "d", (engine_channel[]){{.name = "x", .reply_max_bytes = H.o.payload_max_bytes + 1ull}}, 1);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "channels[0].reply_max_bytes");
    cr_assert(r->status.has_limit);
    cr_assert_eq(r->status.limit, H.o.payload_max_bytes);
    engine_reply_free(r);
    const char *types[ENGINE_CHANNEL_TYPES_MAX + 1];
    for (size_t i = 0; i <= ENGINE_CHANNEL_TYPES_MAX; i++)
        types[i] = "text/plain";
    r = deploy_req(
        "d",
        (engine_channel[]){
            {.name = "x", .content_types = types, .n_content_types = ENGINE_CHANNEL_TYPES_MAX + 1}},
        1);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_eq(r->status.limit, ENGINE_CHANNEL_TYPES_MAX);
    engine_reply_free(r);
    engine_request req = {.op = ENGINE_OP_LIST_DEPLOYMENTS};
    r = h_exec(&req);
    cr_assert_eq(r->n_deployments, 0, "nothing refused was kept");
    engine_reply_free(r);
}

/* A completion is checked against the declaration of its own task's
 * deployment, not the newest. */
Test(deploy, intake_checks_a_reply_against_its_own_deployment_s_declaration)
{
    engine_reply *r = deploy_req("d", (engine_channel[]){{.name = "t", .reply_max_bytes = 4}}, 1);
    h_expect_ok(r);
    engine_reply_free(r);
    h_submit("t", "p", NULL);
    h_advance(0);
    r = deploy_req("d", (engine_channel[]){{.name = "t", .reply_max_bytes = 100}}, 1);
    h_expect_ok(r);
    cr_assert_eq(r->deployments[0].version, 2);
    engine_reply_free(r);
    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", "t", 0, &t, token);
    engine_result res = {.payload = (const uint8_t *)"twelve bytes", .payload_len = 12};
    engine_request req = {.op = ENGINE_OP_COMPLETE};
    req.u.complete = (engine_complete_args){.guard = {t.id, "w", token}, .result = &res};
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_eq(r->status.limit, 4, "version 1's ceiling");
    engine_reply_free(r);
}

Test(deploy, strict_channels_take_only_what_a_deployment_declares)
{
    H.o.strict_channels = true;
    h_reopen();
    engine_reply *r = submit("t");
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
    r = h_fetch("w", "t", 1, 0);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
    deploy("d", (const char *[]){"t", NULL});
    r = submit("t");
    h_expect_ok(r);
    engine_reply_free(r);
    h_advance(0);
    engine_reply_free(retire("d"));
    r = h_fetch("w", "t", 1, 0); /* draining: its work is still served */
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 1);
    engine_reply_free(r);
    r = submit("t");
    h_expect_code(r, ENGINE_CODE_FAILED_PRECONDITION);
    engine_reply_free(r);
}

/* Every step of a deployment's life is one write: a restart after any of
 * them finds the same states and counts (memory is rebuilt from disk). */
Test(deploy, a_restart_after_every_step_keeps_states_and_counts)
{
    deploy("d", (const char *[]){"t", NULL});
    h_reopen();
    cr_assert_eq(shown("d", 1).state, ENGINE_DEPLOYMENT_LIVE);
    h_submit("t", "a", NULL);
    h_submit("t", "b", NULL);
    h_reopen(); /* written as deliveries or tasks: either way held */
    h_advance(0);
    cr_assert_eq(shown("d", 1).tasks, 2);
    deploy("d", (const char *[]){"t", "u", NULL});
    h_reopen();
    cr_assert_eq(shown("d", 1).state, ENGINE_DEPLOYMENT_DRAINING);
    cr_assert_eq(shown("d", 1).tasks, 2);
    cr_assert_eq(shown("d", 2).state, ENGINE_DEPLOYMENT_LIVE);
    complete_one("t");
    h_reopen();
    cr_assert_eq(shown("d", 1).tasks, 1);
    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", "t", 0, &t, token);
    engine_reply_free(h_fail(t.id, "w", token, "BROKEN"));
    h_reopen();
    engine_deployment v1 = shown("d", 1);
    cr_assert_eq(v1.state, ENGINE_DEPLOYMENT_RETIRED);
    cr_assert_eq(v1.terminal_tasks, 1);
    cr_assert_eq(v1.tasks, 0);
    /* Version 2 takes new work for t after the restart too. */
    h_submit("t", "c", NULL);
    h_advance(0);
    cr_assert_eq(shown("d", 2).tasks, 1);
}

Test(deploy, channels_given_at_open_are_a_deployment)
{
    engine_channel cs[] = {{.name = "boot-topic", .reply_max_bytes = 64}};
    H.o.channels = cs;
    H.o.n_channels = 1;
    h_reopen();
    h_reopen();
    engine_deployment d = shown(ENGINE_BOOT_DEPLOYMENT, 1);
    cr_assert_eq(d.state, ENGINE_DEPLOYMENT_LIVE, "the same channels at each open: one version");
    cs[0].reply_max_bytes = 128;
    h_reopen();
    h_advance(0); /* the first turn's gate retires version 1, holding nothing */
    cr_assert_eq(shown(ENGINE_BOOT_DEPLOYMENT, 1).state, ENGINE_DEPLOYMENT_RETIRED);
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 1);
    cr_assert_eq(shown(ENGINE_BOOT_DEPLOYMENT, 2).state, ENGINE_DEPLOYMENT_LIVE);
    H.o.channels = NULL;
    H.o.n_channels = 0;
    h_reopen();
    cr_assert_eq(shown(ENGINE_BOOT_DEPLOYMENT, 2).state, ENGINE_DEPLOYMENT_LIVE,
                 "without channels at open, the deployment stays as it was");
}

/* Versions are kept up to ENGINE_DEPLOYMENTS_MAX; past it, retired ones
 * that hold nothing and have a newer version are forgotten, oldest first,
 * so deploys go on succeeding, and what still holds work is kept. */
Test(deploy, deploys_go_on_past_the_cap_and_what_holds_work_is_kept)
{
    deploy("old", (const char *[]){"held", NULL});
    h_submit("held", "p", NULL);
    h_advance(0);
    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", "held", 0, &t, token);
    engine_reply_free(h_fail(t.id, "w", token, "BROKEN")); /* terminal: kept */
    deploy("old", (const char *[]){"other", NULL});        /* version 1 retires, holding it */
    h_advance(0);
    cr_assert_eq(shown("old", 1).state, ENGINE_DEPLOYMENT_RETIRED);
    for (int i = 0; i < ENGINE_DEPLOYMENTS_MAX + 100; i++)
        deploy("churn", (const char *[]){i % 2 ? "a" : "b", NULL});
    engine_request req = {.op = ENGINE_OP_LIST_DEPLOYMENTS};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_leq(r->n_deployments, ENGINE_DEPLOYMENTS_MAX);
    engine_reply_free(r);
    cr_assert_eq(shown("old", 1).terminal_tasks, 1, "a version that holds work is kept");
    cr_assert_eq(shown("churn", ENGINE_DEPLOYMENTS_MAX + 100).state, ENGINE_DEPLOYMENT_LIVE);
    h_reopen(); /* what was forgotten is gone from the store too */
    r = h_exec(&req);
    cr_assert_leq(r->n_deployments, ENGINE_DEPLOYMENTS_MAX);
    engine_reply_free(r);
    cr_assert_eq(shown("old", 1).terminal_tasks, 1);
}

/* A producer's retry of a submit or a call accepted before is answered
 * "duplicate" with the original id (R17), even once its channel takes
 * nothing new; a new key is refused. */
Test(deploy, a_repeat_of_an_accepted_submit_is_a_duplicate_on_a_draining_channel)
{
    deploy("d", (const char *[]){"t", NULL});
    engine_reply *first = h_submit_key("t", "p", "order-1");
    h_expect_ok(first);
    engine_request req = {.op = ENGINE_OP_CALL};
    req.u.call.request = (engine_submit_args){.topic = "t", .idempotency_key = "ask-1"};
    engine_reply *call1 = h_exec(&req);
    h_expect_ok(call1);
    engine_reply_free(retire("d"));

    engine_reply *again = h_submit_key("t", "p", "order-1");
    h_expect_ok(again);
    cr_assert(again->submitted[0].duplicate);
    cr_assert_str_eq(again->submitted[0].id, first->submitted[0].id);
    engine_reply *call2 = h_exec(&req);
    h_expect_ok(call2);
    cr_assert(call2->submitted[0].duplicate);
    cr_assert_str_eq(call2->submitted[0].id, call1->submitted[0].id);
    engine_reply *fresh = h_submit_key("t", "p", "order-2");
    h_expect_code(fresh, ENGINE_CODE_FAILED_PRECONDITION);
    engine_reply_free(first);
    engine_reply_free(again);
    engine_reply_free(call1);
    engine_reply_free(call2);
    engine_reply_free(fresh);
}

/* A deploy and a listing sent together share a turn: the listing shows
 * the version just made (on PostgreSQL too, where the deploy decides
 * between the turn's rounds). */
Test(deploy, a_listing_in_the_same_turn_as_a_deploy_shows_it)
{
    engine_hold(H.e, true);
    engine_request d = {.op = ENGINE_OP_DEPLOY};
    d.u.deploy.id = "d";
    d.u.deploy.channels = (engine_channel[]){{.name = "t"}};
    d.u.deploy.n_channels = 1;
    engine_request l = {.op = ENGINE_OP_LIST_DEPLOYMENTS};
    h_async a, b;
    h_exec_async(&d, &a);
    h_exec_async(&l, &b);
    engine_hold(H.e, false);
    h_expect_ok(h_async_wait(&a));
    engine_reply *r = h_async_wait(&b); /* (a's and b's to free) */
    h_expect_ok(r);
    cr_assert_eq(r->n_deployments, 1);
    cr_assert_str_eq(r->deployments[0].id, "d");
    cr_assert_eq(r->deployments[0].state, ENGINE_DEPLOYMENT_LIVE);
    h_async_free(&a);
    h_async_free(&b);
}
