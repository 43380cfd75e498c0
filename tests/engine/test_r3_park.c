/* R3 ownership transfer: the pull sink parks in the batch that deletes
 * the outbox row. */
#include <string.h>

#include "tests/support/harness.h"

TestSuite(r3_ownership, .init = h_setup, .fini = h_teardown);

Test(r3_ownership, a_submit_is_parked_in_its_own_turn)
{
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    engine_stats s = h_stats();
    cr_assert_eq(s.tasks, 1);
    cr_assert_eq(s.ready, 1);
    cr_assert_eq(s.outbox_pending, 0, "ownership moved from outbox row to task row");
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_PARKED), 1);
    engine_reply *r = h_get_task(id);
    h_expect_ok(r);
    cr_assert_eq(r->task.state, ENGINE_TASK_READY);
    cr_assert_eq(r->task.payload_bytes, 1);
    engine_reply_free(r);
}

Test(r3_ownership, a_delayed_park_moves_the_row_exactly_once)
{
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    char id[ENGINE_ID_STR];
    h_submit("t", "p", id);
    engine_stats s = h_stats();
    cr_assert_eq(s.outbox_pending, 1, "a failed park leaves the delivery in the outbox");
    cr_assert_eq(s.tasks, 0);
    h_reopen(); /* the outbox row is on disk */
    cr_assert_eq(h_stats().outbox_pending, 1);
    h_advance(H.o.delivery_backoff_initial_ms);
    s = h_stats();
    cr_assert_eq(s.outbox_pending, 0);
    cr_assert_eq(s.tasks, 1);
    h_reopen(); /* the outbox row is gone from disk, the task row is there */
    s = h_stats();
    cr_assert_eq(s.outbox_pending, 0);
    cr_assert_eq(s.tasks, 1);
    engine_reply *r = h_fetch("w", "t", 10, 0);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_str_eq(r->tasks[0].id, id, "the task id is the delivery id");
    engine_reply_free(r);
}

Test(r3_ownership, a_park_whose_write_fails_stays_in_the_outbox)
{
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    h_submit("t", "p", NULL); /* outbox row written, park retried later */
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    h_advance(H.o.delivery_backoff_initial_ms); /* park attempted; its write fails */
    engine_stats s = h_stats();
    cr_assert_eq(s.tasks, 0, "no task row without its commit");
    cr_assert_eq(s.outbox_pending, 1);
    h_reopen();
    s = h_stats();
    cr_assert_eq(s.tasks, 0);
    cr_assert_eq(s.outbox_pending, 1, "and the outbox row was never deleted");
}
