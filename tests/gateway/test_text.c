/* Strings over the wire are text: a NUL byte inside a string
 * (gateway/text.c), or bytes that are not UTF-8 (engine/check.c), are
 * INVALID_ARGUMENT naming the field, and nothing of the request is
 * applied. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"

static daemon_proc D;
static bc *C;

static void setup(void)
{
    d_start(&D, NULL);
    C = d_client(&D);
}

static void teardown(void)
{
    bc_close(C);
    d_cleanup(&D);
}

TestSuite(text, .init = setup, .fini = teardown, .timeout = 120);

/* Packs req and replaces every byte `marker` of the packed message by
 * `with`: strings with a NUL or a bad byte that protobuf-c cannot write. */
static Berth__V1__Response *send_patched(Berth__V1__Request *req, char marker, uint8_t with)
{
    size_t n = berth__v1__request__get_packed_size(req);
    uint8_t *buf = malloc(n);
    berth__v1__request__pack(req, buf);
    size_t hits = 0;
    for (size_t i = 0; i < n; i++)
        if (buf[i] == (uint8_t)marker) {
            buf[i] = with;
            hits++;
        }
    cr_assert_gt(hits, 0, "the marker is not in the message");
    Berth__V1__Response *r;
    int rv = bc_call_raw(C, buf, n, 10000, &r);
    free(buf);
    cr_assert_eq(rv, BC_OK, "%s", bc_strerror(rv));
    return r;
}

static void expect_field(Berth__V1__Response *r, const char *field)
{
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_not_null(r->status->field);
    cr_assert_str_eq(r->status->field, field, "%s", r->status->message);
    w_free(r);
}

static Berth__V1__Response *submit_patched(const char *topic, const char *key, uint8_t with)
{
    Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
    s.topic = (char *)topic;
    s.idempotency_key = (char *)key;
    s.has_payload = 1;
    s.payload = (ProtobufCBinaryData){1, (uint8_t *)"p"};
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    req.submit = &s;
    return send_patched(&req, '~', with);
}

static size_t ready_on(const char *topic)
{
    Berth__V1__Response *r = w_fetch(C, "count", topic, 100, 0, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    size_t n = r->fetch->n_tasks;
    w_free(r);
    return n;
}

DTest(text, keys_that_differ_after_a_nul_never_collide)
{
    /* "order-1\0A" and "order-1\0B" were one key: the second submit was
     * answered duplicate and its payload lost. Now neither is a key. */
    expect_field(submit_patched("orders", "order-1~A", 0), "idempotency_key");
    expect_field(submit_patched("orders", "order-1~B", 0), "idempotency_key");
    expect_field(submit_patched("orders", "~X", 0), "idempotency_key");
    cr_assert_eq(ready_on("orders"), 0, "nothing was kept");
    Berth__V1__Response *r = w_submit(C, "orders", "p", "order-1");
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_not(r->submit->duplicate, "the plain key was never taken");
    w_free(r);
}

DTest(text, a_topic_with_a_nul_is_not_another_topic)
{
    expect_field(submit_patched("nul~evil", NULL, 0), "topic");
    cr_assert_eq(ready_on("nul"), 0);
}

DTest(text, a_lock_token_with_junk_after_a_nul_is_refused)
{
    Berth__V1__Response *s = w_submit(C, "t", "p", NULL);
    w_expect_code(s, BERTH__V1__CODE__OK);
    w_free(s);
    Berth__V1__Response *f = w_fetch(C, "w", "t", 1, 60000, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    Berth__V1__Task *t = f->fetch->tasks[0];
    char token[64];
    snprintf(token, sizeof(token), "%s~junk", t->lock_token);
    Berth__V1__CompleteRequest c = BERTH__V1__COMPLETE_REQUEST__INIT;
    c.task_id = t->id;
    c.worker_id = "w";
    c.lock_token = token;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE;
    req.complete = &c;
    expect_field(send_patched(&req, '~', 0), "lock_token");
    /* The task is still the worker's, and the true token completes it. */
    Berth__V1__Response *ok =
        w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "w", t->lock_token);
    w_expect_code(ok, BERTH__V1__CODE__OK);
    w_free(ok);
    w_free(f);
}

DTest(text, bytes_that_are_not_utf8_are_refused_with_their_field)
{
    expect_field(submit_patched("orders", "key~", 0xff), "idempotency_key");

    char *topics[] = {"t"};
    Berth__V1__FetchRequest fr = BERTH__V1__FETCH_REQUEST__INIT;
    fr.worker_id = "w~";
    fr.n_topics = 1;
    fr.topics = topics;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &fr;
    expect_field(send_patched(&req, '~', 0xc3), "worker_id");

    /* Deep inside: a header value of the second item of a batch. */
    Berth__V1__SubmitRequest__HeadersEntry h = BERTH__V1__SUBMIT_REQUEST__HEADERS_ENTRY__INIT;
    h.key = "x-trace";
    h.value = "v~";
    Berth__V1__SubmitRequest__HeadersEntry *hs[] = {&h};
    Berth__V1__SubmitRequest items[2] = {BERTH__V1__SUBMIT_REQUEST__INIT,
                                         BERTH__V1__SUBMIT_REQUEST__INIT};
    Berth__V1__SubmitRequest *ip[] = {&items[0], &items[1]};
    items[0].topic = items[1].topic = "batch";
    items[1].n_headers = 1;
    items[1].headers = hs;
    Berth__V1__SubmitBatchRequest b = BERTH__V1__SUBMIT_BATCH_REQUEST__INIT;
    b.n_items = 2;
    b.items = ip;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
    req.submit_batch = &b;
    expect_field(send_patched(&req, '~', 0x80), "items[1].headers");
    expect_field(send_patched(&req, '~', 0), "items[1].headers[0].value");
    cr_assert_eq(ready_on("batch"), 0, "all or nothing: the first item was not kept");
}

DTest(text, a_fail_error_message_must_be_text)
{
    Berth__V1__Response *s = w_submit(C, "t", "p", NULL);
    w_free(s);
    Berth__V1__Response *f = w_fetch(C, "w", "t", 1, 60000, 0);
    Berth__V1__Task *t = f->fetch->tasks[0];
    Berth__V1__Error err = BERTH__V1__ERROR__INIT;
    err.code = "E";
    err.message = "broke ~ here";
    Berth__V1__FailRequest fr = BERTH__V1__FAIL_REQUEST__INIT;
    fr.task_id = t->id;
    fr.worker_id = "w";
    fr.lock_token = t->lock_token;
    fr.error = &err;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
    req.fail = &fr;
    expect_field(send_patched(&req, '~', 0xfe), "error.message");
    w_free(f);
}
