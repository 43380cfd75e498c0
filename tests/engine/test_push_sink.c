/* Push sinks (R4 for pushes, ARCHITECTURE.md, "Wire"): sent once durable, answered
 * DELIVERED, RETRY or REJECT, timed out, bounded in flight, and calls
 * resolved by what receivers answer. The receiver is the harness. */
#include <stdio.h>
#include <string.h>

#include "store/records.h"
#include "tests/support/harness.h"

#define RECEIVER "nng+req://127.0.0.1:9"
#define TIMEOUT  1000
#define GRACE    1000 /* relay.c's, for the sync before a send */

static void deploy_hooks(void)
{
    engine_channel cs[] = {
        {.name = "mail", .transport = RECEIVER},
        {.name = "ask", .transport = RECEIVER, .reply_max_bytes = 8},
    };
    engine_request req = {.op = ENGINE_OP_DEPLOY};
    req.u.deploy.id = "hooks";
    req.u.deploy.channels = cs;
    req.u.deploy.n_channels = 2;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_str_eq(r->deployments[0].channels[0].transport, RECEIVER);
    engine_reply_free(r);
}

static void setup(void)
{
    h_setup();
    H.o.delivery_attempts = 3;
    H.o.delivery_backoff_initial_ms = 100;
    H.o.delivery_backoff_max_ms = 400;
    H.o.push_timeout_ms = TIMEOUT;
    H.o.push_inflight_max = 2;
    h_push_on();
    h_reopen();
    deploy_hooks();
}

TestSuite(push, .init = setup, .fini = h_teardown);

static void ack_ok(size_t i, int outcome, const char *code, const engine_result *res)
{
    engine_reply *r = h_push_ack(i, outcome, code, res);
    h_expect_ok(r);
    engine_reply_free(r);
}

static char *call_id(const char *topic, const char *payload, const engine_retry_policy *retry,
                     char id[ENGINE_ID_STR])
{
    engine_request req = {.op = ENGINE_OP_CALL};
    req.u.call.request = (engine_submit_args){
        .topic = topic, .payload = (const uint8_t *)payload, .payload_len = strlen(payload)};
    req.u.call.retry = retry;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    memcpy(id, r->submitted[0].id, ENGINE_ID_STR);
    engine_reply_free(r);
    return id;
}

static engine_reply *await_now(const char *id)
{
    engine_request req = {.op = ENGINE_OP_AWAIT_CALL};
    req.u.await_call = (engine_await_args){.instance_id = id, .has_wait_ms = true, .wait_ms = 0};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    return r;
}

Test(push, a_delivery_is_sent_once_its_submit_is_durable_and_ends_when_delivered)
{
    char id[ENGINE_ID_STR];
    if (h_store_is_pg()) { /* the send follows the COMMIT of the turn that claimed it */
        h_submit("mail", "hello", id);
    } else {
        engine_durable before;
        engine_durability(H.e, &before);
        engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 1);
        engine_request req = {.op = ENGINE_OP_SUBMIT};
        req.u.submit = (engine_submit_args){
            .topic = "mail", .payload = (const uint8_t *)"hello", .payload_len = 5};
        h_async a;
        h_exec_async(&req, &a);
        h_wait_durability(before.appended + 1, 1);
        cr_assert_eq(h_pushes(), 0, "nothing is sent that the store could still lose");
        engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 0);
        engine_reply *r = h_async_wait(&a);
        h_expect_ok(r);
        memcpy(id, r->submitted[0].id, ENGINE_ID_STR);
        h_async_free(&a);
    }
    cr_assert_eq(h_pushes(), 1);
    const h_push *p = &H.pushes[0];
    cr_assert_str_eq(p->id, id);
    cr_assert_str_eq(p->transport, RECEIVER);
    cr_assert_str_eq(p->topic, "mail");
    cr_assert_str_eq(p->payload, "hello");
    cr_assert_eq(p->attempt, 1);
    cr_assert_str_eq(p->instance_id, "");
    cr_assert_eq(h_stats().outbox_pending, 1, "in flight: still an outbox row");
    cr_assert_eq(h_stats().tasks, 0, "a push channel parks nothing");
    ack_ok(0, ENGINE_PUSH_DELIVERED, NULL, NULL);
    cr_assert_eq(h_stats().outbox_pending, 0);
    h_advance(TIMEOUT + GRACE + 1);
    cr_assert_eq(h_pushes(), 1, "delivered: never sent again");
}

Test(push, retry_backs_off_on_the_outbox_curve_then_poisons_and_an_operator_re_arms)
{
    char id[ENGINE_ID_STR];
    h_submit("mail", "m", id);
    ack_ok(0, ENGINE_PUSH_RETRY, "BUSY", NULL);
    h_advance(99);
    cr_assert_eq(h_pushes(), 1, "not before the pause");
    h_advance(1);
    cr_assert_eq(h_pushes(), 2);
    cr_assert_eq(H.pushes[1].attempt, 2);
    cr_assert_str_eq(H.pushes[1].id, id, "the same delivery, the same key");
    ack_ok(1, ENGINE_PUSH_RETRY, "BUSY", NULL);
    h_advance(200);
    cr_assert_eq(h_pushes(), 3);
    ack_ok(2, ENGINE_PUSH_RETRY, "BUSY", NULL); /* the third failed attempt: poisoned */
    engine_stats s = h_stats();
    cr_assert_eq(s.poisoned, 1);
    cr_assert_eq(s.outbox_pending, 0);
    cr_assert_eq(h_events(ENGINE_EVENT_DELIVERY_POISONED), 1);
    h_advance(10000);
    cr_assert_eq(h_pushes(), 3);
    engine_request list = {.op = ENGINE_OP_LIST_INCIDENTS};
    list.u.list_incidents.open_only = true;
    engine_reply *r = h_exec(&list);
    h_expect_ok(r);
    cr_assert_eq(r->n_incidents, 1);
    cr_assert_str_eq(r->incidents[0].subject_id, id);
    cr_assert(r->incidents[0].open);
    engine_reply_free(r);

    engine_request req = {.op = ENGINE_OP_RETRY_DELIVERY};
    req.u.retry_delivery.id = id;
    r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    r = h_exec(&list);
    cr_assert_eq(r->n_incidents, 0, "re-armed: closed");
    engine_reply_free(r);
    cr_assert_eq(h_pushes(), 4, "re-armed: sent again");
    cr_assert_eq(H.pushes[3].attempt, 1);
    ack_ok(3, ENGINE_PUSH_DELIVERED, NULL, NULL);
    cr_assert_eq(h_stats().poisoned, 0);
}

Test(push, no_answer_is_a_failed_attempt_and_a_late_answer_is_ignored)
{
    h_submit("mail", "m", NULL);
    h_advance(TIMEOUT + GRACE - 1);
    cr_assert_eq(h_pushes(), 1);
    h_advance(1); /* the deadline: attempt 1 failed, back off 100 ms */
    h_advance(100);
    cr_assert_eq(h_pushes(), 2);
    ack_ok(0, ENGINE_PUSH_DELIVERED, NULL, NULL); /* the first send's answer, late */
    cr_assert_eq(h_stats().outbox_pending, 1, "an answer to an ended send changes nothing");
    ack_ok(1, ENGINE_PUSH_DELIVERED, NULL, NULL);
    cr_assert_eq(h_stats().outbox_pending, 0);
}

Test(push, a_channel_has_push_inflight_max_sends_unanswered_and_the_rest_go_in_order)
{
    for (int i = 0; i < 5; i++) {
        char p[8];
        snprintf(p, sizeof(p), "%d", i);
        h_submit("mail", p, NULL);
    }
    cr_assert_eq(h_pushes(), 2);
    cr_assert_str_eq(H.pushes[0].payload, "0");
    cr_assert_str_eq(H.pushes[1].payload, "1");
    cr_assert_eq(h_stats().outbox_pending, 5, "waiting ones are pending too");
    h_submit("ask", "other channel", NULL); /* its own lane */
    cr_assert_eq(h_pushes(), 3);
    ack_ok(1, ENGINE_PUSH_DELIVERED, NULL, NULL);
    cr_assert_eq(h_pushes(), 4);
    cr_assert_str_eq(H.pushes[3].payload, "2");
    ack_ok(0, ENGINE_PUSH_RETRY, "BUSY", NULL); /* a slot frees: 3 goes; 0 backs off */
    cr_assert_eq(h_pushes(), 5);
    cr_assert_str_eq(H.pushes[4].payload, "3");
    ack_ok(3, ENGINE_PUSH_DELIVERED, NULL, NULL);
    cr_assert_eq(h_pushes(), 6);
    cr_assert_str_eq(H.pushes[5].payload, "4");
    h_advance(100); /* 0's pause ends; the lane is full: it waits its turn */
    cr_assert_eq(h_pushes(), 6);
    ack_ok(4, ENGINE_PUSH_DELIVERED, NULL, NULL);
    cr_assert_eq(h_pushes(), 7);
    cr_assert_str_eq(H.pushes[6].payload, "0");
}

Test(push, reject_ends_a_task_with_the_refused_event)
{
    h_submit("mail", "m", NULL);
    ack_ok(0, ENGINE_PUSH_REJECT, "NO_SUCH_MAILBOX", NULL);
    cr_assert_eq(h_stats().outbox_pending, 0);
    cr_assert_eq(h_stats().poisoned, 0);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_REFUSED), 1);
    cr_assert_str_eq(H.ev[H.n_ev - 1].code, "NO_SUCH_MAILBOX");
}

Test(push, calls_are_resolved_by_what_the_receiver_answers)
{
    engine_retry_policy p = {.has_timeout_ms = true,
                             .timeout_ms = 60000,
                             .non_retryable_codes = (const char *const[]){"FATAL"},
                             .n_non_retryable_codes = 1};
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR], c[ENGINE_ID_STR], d[ENGINE_ID_STR];
    call_id("ask", "q1", &p, a);
    call_id("ask", "q2", &p, b);
    cr_assert_eq(h_pushes(), 2);
    cr_assert_str_eq(H.pushes[0].instance_id, a);
    cr_assert_str_eq(H.pushes[0].header_attempt, "1", "a call's request names its attempt");
    engine_result res = {.payload = (const uint8_t *)"42", .payload_len = 2};
    ack_ok(0, ENGINE_PUSH_DELIVERED, NULL, &res);
    ack_ok(1, ENGINE_PUSH_DELIVERED, NULL, NULL);
    engine_reply *r = await_now(a);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert_eq(r->instance.result.payload_len, 2);
    cr_assert_eq(memcmp(r->instance.result.payload, "42", 2), 0);
    engine_reply_free(r);
    r = await_now(b);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert_eq(memcmp(r->instance.result.payload, "q2", 2), 0, "taken without a result");
    engine_reply_free(r);

    call_id("ask", "q3", &p, c);
    call_id("ask", "q4", &p, d);
    ack_ok(2, ENGINE_PUSH_REJECT, "NOPE", NULL);
    ack_ok(3, ENGINE_PUSH_REJECT, "FATAL", NULL);
    r = await_now(c);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED, "a rejection is an outcome");
    cr_assert_str_eq(r->instance.error.code, "NOPE");
    engine_reply_free(r);
    r = await_now(d);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_FAILED, "its policy says FATAL ends it");
    cr_assert_str_eq(r->instance.error.code, "FATAL");
    engine_reply_free(r);
    cr_assert_eq(h_stats().outbox_pending, 0);
}

/* A call's request poisoned (RETRY past delivery_attempts) is a failed
 * attempt of its call, told in the turn after: FAILED without an attempt
 * left, else backed off and re-driven as a fresh request. */
Test(push, a_call_s_poisoned_request_fails_its_attempt)
{
    char a[ENGINE_ID_STR], b[ENGINE_ID_STR];
    engine_retry_policy p = {.has_timeout_ms = true,
                             .timeout_ms = 3600000,
                             .has_max_attempts = true,
                             .max_attempts = 2,
                             .has_initial_backoff_ms = true,
                             .initial_backoff_ms = 500};
    call_id("ask", "once", NULL, a);
    call_id("ask", "twice", &p, b);
    cr_assert_eq(h_pushes(), 2);
    for (size_t k = 0; k < 3; k++) { /* three RETRYs: poisoned */
        ack_ok(2 * k, ENGINE_PUSH_RETRY, "BUSY", NULL);
        ack_ok(2 * k + 1, ENGINE_PUSH_RETRY, "BUSY", NULL);
        if (k < 2)
            h_advance(400);
    }
    cr_assert_eq(h_pushes(), 6);
    engine_tick(H.e); /* the calls hear of it */
    engine_reply *r = await_now(a);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_FAILED);
    cr_assert_str_eq(r->instance.error.code, "DELIVERY_POISONED");
    engine_reply_free(r);
    r = await_now(b);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_BACKOFF, "an attempt is left (%d %s)",
                 r->instance.state, r->instance.error.code ? r->instance.error.code : "-");
    engine_reply_free(r);
    cr_assert_eq(h_stats().poisoned, 2, "the requests stay, for the operator");
    h_advance(500); /* the re-drive: a fresh request */
    cr_assert_eq(h_stats().poisoned, 2, "the re-drive leaves the poisoned request alone");
    cr_assert_eq(h_pushes(), 7);
    cr_assert_str_eq(H.pushes[6].instance_id, b);
    cr_assert_str_eq(H.pushes[6].header_attempt, "2");
    engine_result res = {.payload = (const uint8_t *)"ok", .payload_len = 2};
    ack_ok(6, ENGINE_PUSH_DELIVERED, NULL, &res);
    r = await_now(b);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert_eq(r->instance.attempt, 2);
    engine_reply_free(r);
}

Test(push, a_result_intake_refuses_is_an_incident_and_the_call_waits)
{
    char a[ENGINE_ID_STR];
    call_id("ask", "q", NULL, a);
    engine_result big = {.payload = (const uint8_t *)"nine byte", .payload_len = 9};
    ack_ok(0, ENGINE_PUSH_DELIVERED, NULL, &big); /* over ask's ceiling of 8 */
    engine_reply *r = await_now(a);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_WAITING);
    engine_reply_free(r);
    cr_assert_eq(h_stats().outbox_pending, 0, "the delivery itself ended");
    engine_request req = {.op = ENGINE_OP_LIST_INCIDENTS};
    r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->n_incidents, 1);
    cr_assert_eq(r->incidents[0].kind, STORE_INCIDENT_RESULT_REFUSED);
    cr_assert_str_eq(r->incidents[0].subject_id, H.pushes[0].id);
    cr_assert_str_eq(r->incidents[0].error.code, "VALIDATION_REJECTED");
    cr_assert_not(r->incidents[0].open, "nothing for an operator to do: the call goes on");
    engine_reply_free(r);
}

Test(push, a_restart_sends_again_what_was_in_flight)
{
    char id[ENGINE_ID_STR];
    h_submit("mail", "m", id);
    cr_assert_eq(h_pushes(), 1);
    h_reopen();
    h_advance(0);
    if (h_store_is_pg()) {
        /* Across replicas a send in flight is another's until its deadline:
         * a restarted replica sends it again once that passed (a failed
         * attempt, backed off). */
        cr_assert_eq(h_pushes(), 1);
        h_advance(TIMEOUT + GRACE);
        h_advance(100);
    }
    cr_assert_eq(h_pushes(), 2);
    cr_assert_str_eq(H.pushes[1].id, id, "at least once, under the same key");
    cr_assert_neq(H.pushes[1].flight, H.pushes[0].flight);
    ack_ok(0, ENGINE_PUSH_DELIVERED, NULL, NULL); /* to the send before the restart */
    cr_assert_eq(h_stats().outbox_pending, 1);
    ack_ok(1, ENGINE_PUSH_DELIVERED, NULL, NULL);
    cr_assert_eq(h_stats().outbox_pending, 0);
}

Test(push, a_draining_deployment_waits_for_its_deliveries_in_flight)
{
    h_submit("mail", "m", NULL);
    engine_request req = {.op = ENGINE_OP_RETIRE};
    req.u.retire.id = "hooks";
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->deployments[0].state, ENGINE_DEPLOYMENT_DRAINING);
    cr_assert_eq(r->deployments[0].pending_deliveries, 1);
    engine_reply_free(r);
    ack_ok(0, ENGINE_PUSH_DELIVERED, NULL, NULL);
    cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), 1);
}

Test(push, a_call_s_timeout_withdraws_its_request_in_flight)
{
    engine_retry_policy p = {.has_timeout_ms = true,
                             .timeout_ms = 500,
                             .has_max_attempts = true,
                             .max_attempts = 2,
                             .has_initial_backoff_ms = true,
                             .initial_backoff_ms = 100};
    char a[ENGINE_ID_STR];
    call_id("ask", "q", &p, a);
    h_advance(500); /* the attempt times out: its delivery is withdrawn */
    cr_assert_eq(h_stats().outbox_pending, 0);
    ack_ok(0, ENGINE_PUSH_DELIVERED, NULL, NULL); /* late: the delivery is gone */
    h_advance(100);                               /* the re-drive */
    cr_assert_eq(h_pushes(), 2);
    cr_assert_str_eq(H.pushes[1].header_attempt, "2");
    cr_assert_str_neq(H.pushes[1].id, H.pushes[0].id, "a fresh request, a fresh key");
    engine_result res = {.payload = (const uint8_t *)"ok", .payload_len = 2};
    ack_ok(1, ENGINE_PUSH_DELIVERED, NULL, &res);
    engine_reply *r = await_now(a);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_RESOLVED);
    cr_assert_eq(r->instance.attempt, 2);
    engine_reply_free(r);
}

Test(push, without_a_push_transport_a_push_channel_cannot_be_deployed)
{
    H.o.push_fn = NULL;
    h_reopen(); /* (hooks is deployed already: its sends are left to their deadlines) */
    engine_channel cs[] = {{.name = "other", .transport = "nng+req+ipc:///tmp/x"}};
    engine_request req = {.op = ENGINE_OP_DEPLOY};
    req.u.deploy.id = "more";
    req.u.deploy.channels = cs;
    req.u.deploy.n_channels = 1;
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "channels[0].transport");
    engine_reply_free(r);
    cs[0].transport = "nng+req://";
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT); /* a scheme with no receiver */
    engine_reply_free(r);
}

/* The gate in every order: a task completed, a task gone terminal, a push
 * delivered and a push poisoned, the four finished in each of the 24
 * orders, each with a deployment of its own. It retires when the last of
 * the four ends, never before, whatever the order. */
Test(push, the_gate_retires_after_the_last_holder_in_every_order)
{
    H.o.delivery_attempts = 1; /* one RETRY poisons */
    H.o.retries = 1;           /* one failure makes a task terminal */
    h_reopen();
    int perm[4] = {0, 1, 2, 3};
    for (int n = 0; n < 24; n++) {
        char id[16], pull[16], push[16];
        snprintf(id, sizeof(id), "d%d", n);
        snprintf(pull, sizeof(pull), "pull%d", n);
        snprintf(push, sizeof(push), "push%d", n);
        engine_channel cs[] = {{.name = pull}, {.name = push, .transport = RECEIVER}};
        engine_request req = {.op = ENGINE_OP_DEPLOY};
        req.u.deploy.id = id;
        req.u.deploy.channels = cs;
        req.u.deploy.n_channels = 2;
        engine_reply *r = h_exec(&req);
        h_expect_ok(r);
        engine_reply_free(r);
        size_t first = h_pushes();
        h_submit(pull, "a", NULL);
        h_submit(pull, "b", NULL);
        h_submit(push, "c", NULL);
        h_submit(push, "d", NULL);
        cr_assert_eq(h_pushes(), first + 2);
        engine_task ta, tb;
        char tok_a[ENGINE_ID_STR], tok_b[ENGINE_ID_STR];
        h_fetch_one("w", pull, 0, &ta, tok_a);
        h_fetch_one("w", pull, 0, &tb, tok_b);
        engine_request rt = {.op = ENGINE_OP_RETIRE};
        rt.u.retire.id = id;
        r = h_exec(&rt);
        cr_assert_eq(r->deployments[0].state, ENGINE_DEPLOYMENT_DRAINING);
        engine_reply_free(r);
        size_t retired_before = h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED);
        for (int k = 0; k < 4; k++) {
            switch (perm[k]) {
            case 0:
                engine_reply_free(h_complete(ta.id, "w", tok_a));
                break;
            case 1:
                engine_reply_free(h_fail(tb.id, "w", tok_b, "BROKEN"));
                break;
            case 2:
                engine_reply_free(h_push_ack(first, ENGINE_PUSH_DELIVERED, NULL, NULL));
                break;
            case 3:
                engine_reply_free(h_push_ack(first + 1, ENGINE_PUSH_RETRY, "BUSY", NULL));
                break;
            }
            cr_assert_eq(h_events(ENGINE_EVENT_DEPLOYMENT_RETIRED), retired_before + (k == 3),
                         "order %d, step %d", n, k);
        }
        /* the next permutation (lexicographic) */
        int i = 2;
        while (i >= 0 && perm[i] > perm[i + 1])
            i--;
        if (i < 0)
            break;
        int j = 3;
        while (perm[j] < perm[i])
            j--;
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        for (int a = i + 1, b = 3; a < b; a++, b--) {
            t = perm[a];
            perm[a] = perm[b];
            perm[b] = t;
        }
    }
}
