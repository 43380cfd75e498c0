/* R1 durable accept, submit validation, R18 bounded payloads. */
#include <string.h>
#include <time.h>

#include "tests/support/harness.h"

TestSuite(r1_durable_accept, .init = h_setup, .fini = h_teardown);

Test(r1_durable_accept, an_acknowledged_submit_survives_a_restart)
{
    char id[ENGINE_ID_STR];
    h_submit("orders", "hello", id);
    h_reopen();
    engine_reply *r = h_fetch("w1", "orders", 10, 0);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_str_eq(r->tasks[0].id, id);
    cr_assert_eq(r->tasks[0].payload_len, 5);
    cr_assert_eq(memcmp(r->tasks[0].payload, "hello", 5), 0);
    engine_reply_free(r);
}

Test(r1_durable_accept, a_failed_write_answers_unavailable_and_keeps_nothing)
{
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply *r = h_submit_key("orders", "x", NULL);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(r->status.retryable);
    cr_assert_eq(r->n_submitted, 0, "no id is handed out for work that was not kept");
    engine_reply_free(r);
    engine_reply *f = h_fetch("w1", "orders", 10, 0);
    cr_assert_eq(f->n_tasks, 0, "memory must match disk after a failed write");
    engine_reply_free(f);
    h_reopen();
    f = h_fetch("w1", "orders", 10, 0);
    cr_assert_eq(f->n_tasks, 0);
    engine_reply_free(f);
    cr_assert_eq(h_stats().tasks, 0);
}

Test(r1_durable_accept, the_write_after_a_failed_one_is_kept)
{
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply_free(h_submit_key("orders", "lost", NULL));
    h_advance(50); /* the store's backoff after a failed write */
    char id[ENGINE_ID_STR];
    h_submit("orders", "kept", id);
    h_reopen();
    engine_reply *f = h_fetch("w1", "orders", 10, 0);
    cr_assert_eq(f->n_tasks, 1);
    cr_assert_str_eq(f->tasks[0].id, id);
    engine_reply_free(f);
}

/* A write whose outcome is unknown (a sync that failed; on PostgreSQL the
 * connection lost with COMMIT on the wire) is never answered OK: it is
 * UNAVAILABLE, "may or may not", with no id; the store serves again by
 * itself, and the producer's retry under its key leaves the task there
 * once, whichever way it went. */
Test(r1_durable_accept, a_write_in_doubt_answers_unavailable_and_its_retry_by_key_keeps_it_once)
{
    char kept[ENGINE_ID_STR];
    h_submit("orders", "kept", kept);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_SYNC, 1);
    engine_reply *r = h_submit_key("orders", "doubt", "k1");
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert(r->status.retryable);
    cr_assert(strstr(r->status.message, "may or may not have been kept"), "%s", r->status.message);
    cr_assert_eq(r->n_submitted, 0, "no id for a submit that may not exist");
    engine_reply_free(r);

    /* The embedded store reopens on its clock, a replica reconnects on
     * real time: retry as a producer would. */
    for (int i = 0;; i++) {
        h_advance(ENGINE_REOPEN_BACKOFF_MIN_MS);
        r = h_submit_key("orders", "doubt", "k1");
        if (r->status.code == ENGINE_CODE_OK)
            break;
        h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
        cr_assert(i < 250, "the store never served again: %s", r->status.message);
        engine_reply_free(r);
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
    cr_assert_eq(r->n_submitted, 1);
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 2, "the submit in doubt is there once");
    h_reopen();
    cr_assert_eq(h_stats().tasks, 2);
    engine_reply *f = h_fetch("w1", "orders", 10, 0);
    cr_assert_eq(f->n_tasks, 2);
    cr_assert(strcmp(f->tasks[0].id, kept) == 0 || strcmp(f->tasks[1].id, kept) == 0);
    engine_reply_free(f);
}

Test(r1_durable_accept, submit_batch_is_all_or_nothing)
{
    engine_submit_args items[3] = {
        {.topic = "a", .payload = (const uint8_t *)"1", .payload_len = 1},
        {.topic = "a", .payload = (const uint8_t *)"2", .payload_len = 1},
        {.topic = "bad topic", .payload = (const uint8_t *)"3", .payload_len = 1},
    };
    engine_request req = {.op = ENGINE_OP_SUBMIT_BATCH};
    req.u.submit_batch.items = items;
    req.u.submit_batch.n = 3;
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "items[2].topic");
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 0, "one bad item keeps every item out");

    items[2].topic = "a";
    r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->n_submitted, 3);
    cr_assert_str_neq(r->submitted[0].id, r->submitted[1].id);
    engine_reply_free(r);
    h_reopen();
    cr_assert_eq(h_stats().tasks, 3);
}

Test(r1_durable_accept, submit_batch_fails_whole_when_its_write_fails)
{
    engine_submit_args items[2] = {{.topic = "a"}, {.topic = "a"}};
    engine_request req = {.op = ENGINE_OP_SUBMIT_BATCH};
    req.u.submit_batch.items = items;
    req.u.submit_batch.n = 2;
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    engine_reply_free(r);
    h_reopen();
    cr_assert_eq(h_stats().tasks, 0);
}

Test(r1_durable_accept, submit_batch_over_the_batch_ceiling_is_rejected)
{
    H.o.batch_max = 2;
    H.o.batch_default = 1;
    h_reopen();
    engine_submit_args items[3] = {{.topic = "a"}, {.topic = "a"}, {.topic = "a"}};
    engine_request req = {.op = ENGINE_OP_SUBMIT_BATCH};
    req.u.submit_batch.items = items;
    req.u.submit_batch.n = 3;
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "items");
    cr_assert(r->status.has_limit);
    cr_assert_eq(r->status.limit, 2);
    engine_reply_free(r);
    req.u.submit_batch.n = 0;
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    engine_reply_free(r);
}

TestSuite(submit_checks, .init = h_setup, .fini = h_teardown);

Test(submit_checks, a_payload_over_its_ceiling_names_field_and_limit)
{
    H.o.payload_max_bytes = 4;
    h_reopen();
    engine_reply *r = h_submit_key("t", "12345", NULL);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "payload");
    cr_assert_eq(r->status.limit, 4);
    cr_assert(strstr(r->status.message, "5") != NULL, "the value sent: %s", r->status.message);
    engine_reply_free(r);
    r = h_submit_key("t", "1234", NULL);
    h_expect_ok(r);
    engine_reply_free(r);
}

Test(submit_checks, topics_must_be_named_plainly)
{
    const char *bad[] = {"", "has space", "semi;colon", "\x01"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        engine_reply *r = h_submit_key(bad[i], "x", NULL);
        h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
        cr_assert_str_eq(r->status.field, "topic");
        engine_reply_free(r);
    }
    char longname[BERTH_TOPIC_MAX + 2];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    engine_reply *r = h_submit_key(longname, "x", NULL);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    engine_reply_free(r);
    r = h_submit_key("orders.v2:eu/archive-1_x", "x", NULL);
    h_expect_ok(r);
    engine_reply_free(r);
}

Test(submit_checks, reserved_headers_cannot_be_set_by_a_producer)
{
    engine_header hs[] = {{"trace", "1"}, {"Berth-Instance", "x"}};
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit = (engine_submit_args){.topic = "t", .headers = hs, .n_headers = 2};
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "headers");
    cr_assert(strstr(r->status.message, "reserved") != NULL);
    engine_reply_free(r);
    req.u.submit.n_headers = 1;
    r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
}

Test(submit_checks, headers_and_content_type_reach_the_worker)
{
    engine_header hs[] = {{"trace", "abc"}, {"tenant", "7"}};
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit = (engine_submit_args){.topic = "t",
                                        .headers = hs,
                                        .n_headers = 2,
                                        .content_type = "application/json",
                                        .payload = (const uint8_t *)"{}",
                                        .payload_len = 2};
    engine_reply_free(h_exec(&req));
    engine_reply *r = h_fetch("w", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 1);
    const engine_task *t = &r->tasks[0];
    cr_assert_str_eq(t->content_type, "application/json");
    cr_assert_eq(t->n_headers, 2);
    cr_assert_str_eq(t->headers[0].name, "trace");
    cr_assert_str_eq(t->headers[0].value, "abc");
    cr_assert_str_eq(t->topic, "t");
    cr_assert_eq(t->attempt, 1);
    cr_assert_eq(t->retries_left, 3);
    cr_assert_eq(t->created_at_ms, H_T0);
    cr_assert_str_eq(t->instance_id, "");
    engine_reply_free(r);
}

Test(submit_checks, strict_channels_refuse_undeclared_topics)
{
    h_skip_on_pg("declared channels come with deployments on PostgreSQL");
    static const engine_channel chans[] = {{.name = "declared"}};
    H.o.channels = chans;
    H.o.n_channels = 1;
    H.o.strict_channels = true;
    h_reopen();
    engine_reply *r = h_submit_key("undeclared", "x", NULL);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
    r = h_submit_key("declared", "x", NULL);
    h_expect_ok(r);
    engine_reply_free(r);
    r = h_fetch("w", "undeclared", 1, 0);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
}
