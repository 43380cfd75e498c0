/* R4 one retry machinery: a failed park backs off on the outbox curve and
 * is poisoned at the attempt ceiling, with an incident. */
#include <string.h>

#include "tests/support/harness.h"

static void setup(void)
{
    h_setup();
    H.o.delivery_attempts = 3;
    H.o.delivery_backoff_initial_ms = 100;
    H.o.delivery_backoff_max_ms = 1000;
    h_reopen();
}

TestSuite(r4_park_retry, .init = setup, .fini = h_teardown);

Test(r4_park_retry, a_failed_park_backs_off_on_the_outbox_curve)
{
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 2);
    h_submit("t", "p", NULL); /* attempt 1 fails: due in 100 ms */
    h_advance(99);
    cr_assert_eq(h_stats().outbox_pending, 1);
    h_advance(1); /* attempt 2 fails: due in 200 ms */
    cr_assert_eq(h_stats().outbox_pending, 1);
    h_advance(199);
    cr_assert_eq(h_stats().tasks, 0, "not before the doubled pause");
    h_advance(1); /* attempt 3 parks */
    engine_stats s = h_stats();
    cr_assert_eq(s.tasks, 1);
    cr_assert_eq(s.outbox_pending, 0);
    cr_assert_eq(s.poisoned, 0);
}

Test(r4_park_retry, attempts_are_durable)
{
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 2);
    h_submit("t", "p", NULL);
    h_advance(100); /* second failure: attempts = 2 on disk */
    h_reopen();
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    h_advance(200); /* third failure reaches the ceiling of 3 */
    cr_assert_eq(h_stats().poisoned, 1, "attempts before the restart counted");
}

Test(r4_park_retry, at_the_ceiling_the_delivery_is_poisoned_with_an_incident)
{
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 100);
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_advance(100);
    h_advance(200);
    engine_stats s = h_stats();
    cr_assert_eq(s.poisoned, 1);
    cr_assert_eq(s.outbox_pending, 0, "a poisoned delivery is out of the due index");
    cr_assert_eq(s.tasks, 0);
    cr_assert_eq(h_events(ENGINE_EVENT_DELIVERY_POISONED), 1);
    engine_request req = {.op = ENGINE_OP_LIST_INCIDENTS};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->n_incidents, 1);
    cr_assert_eq(r->incidents[0].kind, 1 /* STORE_INCIDENT_DELIVERY_POISONED */);
    cr_assert_str_eq(r->incidents[0].subject_id, id);
    cr_assert_str_eq(r->incidents[0].topic, "t");
    cr_assert_str_eq(r->incidents[0].error.code, "DELIVERY_POISONED");
    engine_reply_free(r);
    h_advance(100000);
    cr_assert_eq(h_stats().tasks, 0, "poisoned deliveries are not retried by themselves");
}

Test(r4_park_retry, poisoned_deliveries_survive_a_restart_and_can_be_retried)
{
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 3);
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_advance(100);
    h_advance(200);
    h_reopen();
    cr_assert_eq(h_stats().poisoned, 1);
    engine_request req = {.op = ENGINE_OP_RETRY_DELIVERY};
    req.u.retry_delivery.id = id;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    engine_tick(H.e);
    engine_stats s = h_stats();
    cr_assert_eq(s.poisoned, 0);
    cr_assert_eq(s.tasks, 1, "retried by the operator, it parks");
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
}

Test(r4_park_retry, a_failed_park_write_is_a_failed_attempt)
{
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    h_submit("t", "p", NULL); /* attempts 1 */
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    h_advance(100); /* the park's write fails: attempts 2, written next turn */
    h_reopen();
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    h_advance(10000); /* attempts 3: the ceiling */
    cr_assert_eq(h_stats().poisoned, 1, "the failed write counted as an attempt, durably");
}

Test(r4_park_retry, retry_delivery_refuses_a_delivery_that_is_not_poisoned)
{
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    engine_request req = {.op = ENGINE_OP_RETRY_DELIVERY};
    req.u.retry_delivery.id = id;
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_FAILED_PRECONDITION);
    engine_reply_free(r);
}

Test(r4_park_retry, poisoning_after_a_failed_write_still_publishes_its_event)
{
    H.o.delivery_attempts = 2;
    h_reopen();
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    h_submit("t", "p", NULL); /* attempt 1 */
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    h_advance(100); /* attempt 2's write fails: poisoned in the accounting */
    cr_assert_eq(h_events(ENGINE_EVENT_DELIVERY_POISONED), 0, "not before it is kept");
    h_advance(50);
    cr_assert_eq(h_stats().poisoned, 1);
    cr_assert_eq(h_events(ENGINE_EVENT_DELIVERY_POISONED), 1,
                 "published with the write that kept it");
}

Test(r4_park_retry, a_poisoning_event_outlives_the_delivery_it_came_from)
{
    /* A turn's events are published after its sync; meanwhile the next
     * turn may free the delivery the event's message came from (here a
     * failed write reloads the state). The event carries its own copy. */
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 100);
    h_submit("t", "p", NULL); /* attempt 1 fails */
    h_advance(100);           /* attempt 2 fails */
    engine_durable d;
    engine_durability(H.e, &d);
    engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 1);
    engine_manual_clock_advance(&H.clock, 200);
    engine_request tick = {.op = ENGINE_OP_TICK};
    h_async a, b;
    h_exec_async(&tick, &a); /* attempt 3: poisoned, its event waits for the sync */
    h_wait_durability(d.appended + 1, 1);
    engine_durability(H.e, &d);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_request sub = {.op = ENGINE_OP_SUBMIT};
    sub.u.submit.topic = "other";
    h_exec_async(&sub, &b); /* its write fails: every delivery is freed and reloaded */
    h_wait_turns(d.turns + 1);
    engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 0);
    h_expect_code(h_async_wait(&b), ENGINE_CODE_UNAVAILABLE);
    h_expect_ok(h_async_wait(&a));
    h_async_free(&a);
    h_async_free(&b);
    cr_assert_eq(h_events(ENGINE_EVENT_DELIVERY_POISONED), 1);
    for (size_t i = 0; i < H.n_ev; i++)
        if (H.ev[i].kind == ENGINE_EVENT_DELIVERY_POISONED)
            cr_assert_str_eq(H.ev[i].message, "park failed: failpoint");
}
