/* Declared channels over the wire: R10's intake validation, strict topics. */
#include <string.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"

static daemon_proc D;
static bc *C;

static void setup(void)
{
    static const char *const extra[] = {
        "--channel",         "orders,reply-max-bytes=8,content-types=application/json|text/csv",
        "--channel",         "open",
        "--strict-channels", NULL};
    d_start(&D, extra);
    C = d_client(&D);
}

static void teardown(void)
{
    bc_close(C);
    d_cleanup(&D);
}

TestSuite(channels, .init = setup, .fini = teardown, .timeout = 60);

static Berth__V1__Response *complete_with(const Berth__V1__Task *t, const char *payload,
                                          const char *ct)
{
    Berth__V1__Result res = BERTH__V1__RESULT__INIT;
    res.has_payload = 1;
    res.payload.data = (uint8_t *)payload;
    res.payload.len = strlen(payload);
    res.content_type = (char *)ct;
    Berth__V1__CompleteRequest cr = BERTH__V1__COMPLETE_REQUEST__INIT;
    cr.task_id = t->id;
    cr.worker_id = "w";
    cr.lock_token = t->lock_token;
    cr.result = &res;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE;
    req.complete = &cr;
    return w_call(C, &req, 0);
}

static void expect_rejected(Berth__V1__Response *r)
{
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_str_eq(r->status->engine_code, "VALIDATION_REJECTED");
    cr_assert(r->status->has_retryable);
    cr_assert_not(r->status->retryable, "a validation reject never helps to retry");
}

DTest(channels, intake_refusals_carry_the_engine_code_and_retryable)
{
    w_free(w_submit(C, "orders", "p", NULL));
    Berth__V1__Response *f = w_fetch(C, "w", "orders", 1, 60000, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    const Berth__V1__Task *t = f->fetch->tasks[0];

    Berth__V1__Response *r = complete_with(t, "123456789", "application/json");
    expect_rejected(r);
    cr_assert_str_eq(r->status->field, "result.payload");
    cr_assert_eq(r->status->limit, 8);
    w_free(r);
    expect_rejected(r = complete_with(t, "{}", "text/plain"));
    w_free(r);
    r = complete_with(t, "a,b", "text/csv");
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    w_free(f);
}

DTest(channels, strict_channels_refuse_undeclared_topics)
{
    Berth__V1__Response *r = w_submit(C, "undeclared", "p", NULL);
    w_expect_code(r, BERTH__V1__CODE__NOT_FOUND);
    w_free(r);
    r = w_submit(C, "open", "p", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
}
