/* One round trip per task: a fetch that carries completions applies them
 * first, in the same turn, each with its own status, then claims; a
 * completed task is never handed back in the same answer; a fetch that
 * waits has applied them before it waits. */
#include <string.h>

#include "tests/support/harness.h"

TestSuite(fused, .init = h_setup, .fini = h_teardown);

typedef struct held {
    char id[ENGINE_ID_STR], token[ENGINE_ID_STR];
} held;

static held take(const char *worker, uint64_t lock_ms)
{
    held h;
    engine_task t;
    h_fetch_one(worker, "t", lock_ms, &t, h.token);
    memcpy(h.id, t.id, ENGINE_ID_STR);
    return h;
}

static engine_complete_args done(const held *h, const char *worker)
{
    return (engine_complete_args){.guard = {h->id, worker, h->token}};
}

/* A fetch of "t" by w carrying the completions cs. */
static engine_request fused(const engine_complete_args *cs, size_t n, uint32_t max,
                            uint64_t wait_ms)
{
    static const char *const T[] = {"t"};
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){.worker_id = "w",
                                      .topics = T,
                                      .n_topics = 1,
                                      .has_max_tasks = true,
                                      .max_tasks = max,
                                      .has_wait_ms = true,
                                      .wait_ms = wait_ms,
                                      .completes = cs,
                                      .n_completes = n};
    return req;
}

static bool exists(const char *id)
{
    engine_reply *r = h_get_task(id);
    bool found = r->status.code == ENGINE_CODE_OK;
    engine_reply_free(r);
    return found;
}

Test(fused, completes_first_then_claims_and_never_hands_a_completed_task_back)
{
    h_submit("t", "a", NULL);
    h_submit("t", "b", NULL);
    held a = take("w", 60000), b = take("w", 60000);
    h_submit("t", "c", NULL);
    engine_complete_args cs[] = {done(&a, "w"), done(&b, "w")};
    engine_request req = fused(cs, 2, 10, 0);
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->n_statuses, 2);
    for (size_t i = 0; i < 2; i++)
        cr_assert_eq(r->statuses[i].code, ENGINE_CODE_OK, "completion %zu: %s", i,
                     r->statuses[i].message);
    cr_assert_eq(r->n_tasks, 1, "only c is fetchable");
    cr_assert_eq(memcmp(r->tasks[0].payload, "c", 1), 0);
    engine_reply_free(r);
    cr_assert_not(exists(a.id));
    cr_assert_not(exists(b.id));
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_COMPLETED), 2);
}

Test(fused, each_completion_has_its_own_verdict_and_none_stops_the_fetch)
{
    H.o.retries = 1;
    h_reopen();
    h_submit("t", "ok", NULL);
    h_submit("t", "lost", NULL);
    h_submit("t", "held", NULL);
    h_submit("t", "terminal", NULL);
    held ok = take("w", 60000), lost = take("w", 1000), other = take("other", 60000),
         term = take("w", 60000);
    held notfound = ok;
    memcpy(notfound.id, "0123456789abcdef0123456789abcdef", ENGINE_ID_STR);
    engine_request f = {.op = ENGINE_OP_FAIL};
    f.u.fail.guard = (engine_guard){term.id, "w", term.token};
    f.u.fail.error = (engine_error){.code = "E"};
    engine_reply_free(h_exec(&f)); /* the one retry spent: terminal */
    h_advance(1000);               /* lost's lock runs out */
    h_submit("t", "next", NULL);
    held theirs = other; /* other's task, claimed by another worker */
    engine_complete_args cs[] = {done(&ok, "w"), done(&lost, "w"), done(&theirs, "w"),
                                 done(&term, "w"), done(&notfound, "w")};
    engine_request req = fused(cs, 5, 10, 0);
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->n_statuses, 5);
    const engine_verdict want[] = {ENGINE_VERDICT_NONE, ENGINE_VERDICT_LOCK_LOST,
                                   ENGINE_VERDICT_LOCK_HELD, ENGINE_VERDICT_TERMINAL,
                                   ENGINE_VERDICT_NOT_FOUND};
    for (size_t i = 0; i < 5; i++)
        cr_assert_eq(r->statuses[i].verdict, want[i], "completion %zu: verdict %d (%s)", i,
                     r->statuses[i].verdict, r->statuses[i].message);
    cr_assert_eq(r->statuses[0].code, ENGINE_CODE_OK);
    /* The fetch went on: "lost" (fetchable again) and "next". */
    cr_assert_eq(r->n_tasks, 2);
    engine_reply_free(r);
    cr_assert_not(exists(ok.id));
    cr_assert(exists(lost.id) && exists(other.id) && exists(term.id));
}

Test(fused, completions_over_the_batch_ceiling_are_refused_and_none_is_applied)
{
    H.o.batch_max = 2;
    H.o.batch_default = 2;
    h_reopen();
    h_submit("t", "a", NULL);
    held a = take("w", 60000);
    engine_complete_args cs[] = {done(&a, "w"), done(&a, "w"), done(&a, "w")};
    engine_request req = fused(cs, 3, 1, 0);
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "completes");
    cr_assert(r->status.has_limit);
    cr_assert_eq(r->status.limit, 2);
    cr_assert_eq(r->n_statuses, 0);
    engine_reply_free(r);
    cr_assert(exists(a.id), "nothing applied");

    /* A fetch whose own bounds are wrong applies nothing either. */
    engine_request bad = fused(cs, 1, 3, 0);
    r = h_exec(&bad);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "max_tasks");
    engine_reply_free(r);
    cr_assert(exists(a.id));
}

Test(fused, a_fetch_that_waits_has_applied_its_completions_and_says_so_at_the_end)
{
    h_submit("t", "a", NULL);
    held a = take("w", 60000);
    engine_complete_args cs[] = {done(&a, "w")};
    engine_request req = fused(cs, 1, 1, 5000);
    h_async w;
    h_exec_async(&req, &w);
    h_advance(0);
    cr_assert_null(h_async_peek(&w), "nothing to claim: it waits");
    cr_assert_not(exists(a.id), "completed before the wait");
    cr_assert_eq(h_stats().waiting_fetches, 1);
    h_advance(5000);
    engine_reply *r = h_async_wait(&w);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 0, "the wait ended empty");
    cr_assert_eq(r->n_statuses, 1, "and still says how the completion went");
    cr_assert_eq(r->statuses[0].code, ENGINE_CODE_OK);
    h_async_free(&w);
    h_reopen();
    cr_assert_not(exists(a.id), "durably");
}

Test(fused, a_fetch_without_completions_answers_no_statuses)
{
    h_submit("t", "a", NULL);
    engine_request req = fused(NULL, 0, 1, 0);
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_eq(r->n_statuses, 0);
    engine_reply_free(r);
}

Test(fused, a_fetch_that_waits_in_a_turn_that_is_undone_is_answered_with_its_failure)
{
    h_submit("t", "a", NULL);
    held a = take("w", 60000);
    engine_complete_args cs[] = {done(&a, "w")};
    engine_request req = fused(cs, 1, 1, 30000);
    engine_failpoint_set(H.e, ENGINE_FP_STORE_WRITE, 1);
    h_async w;
    h_exec_async(&req, &w);
    engine_reply *r = h_async_wait(&w);
    h_expect_code(r, ENGINE_CODE_UNAVAILABLE);
    cr_assert_eq(r->n_statuses, 0, "its completions were undone: it says none");
    h_async_free(&w);
    cr_assert(exists(a.id), "still there, still held");
    cr_assert_eq(h_stats().waiting_fetches, 0, "and it no longer waits");
}

Test(fused, a_fetch_refused_after_its_completions_still_answers_their_statuses)
{
    H.o.waits_max = 1;
    h_reopen();
    static const char *const T[] = {"t"};
    h_async other;
    h_fetch_async("other", T, 1, 30000, &other); /* the one wait allowed */
    h_submit("u", "a", NULL);
    held a;
    engine_task t;
    h_fetch_one("w", "u", 60000, &t, a.token);
    memcpy(a.id, t.id, ENGINE_ID_STR);
    engine_complete_args cs[] = {done(&a, "w")};
    engine_request req = fused(cs, 1, 1, 1000); /* would wait on "t": refused */
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_RESOURCE_EXHAUSTED);
    cr_assert_eq(r->n_statuses, 1, "the completion was applied before the refusal");
    cr_assert_eq(r->statuses[0].code, ENGINE_CODE_OK);
    engine_reply_free(r);
    cr_assert_not(exists(a.id));
    h_advance(30000);
    h_expect_ok(h_async_wait(&other)); /* (its reply comes after the sync) */
    h_async_free(&other);
}
