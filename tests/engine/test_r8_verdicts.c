/* R8 zero rows affected is never success: exactly one of four verdicts. */
#include <stdio.h>
#include <string.h>

#include "tests/support/harness.h"

TestSuite(r8_verdicts, .init = h_setup, .fini = h_teardown);

static char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];

static void one_locked(uint64_t lock_ms)
{
    h_submit("t", "p", id);
    h_fetch_one("w1", "t", lock_ms, NULL, tok);
}

static void expect_verdict(engine_reply *r, engine_verdict v)
{
    cr_assert_eq(r->status.verdict, v, "verdict %d, expected %d (%s)", r->status.verdict, v,
                 r->status.message);
    cr_assert_neq(r->status.code, ENGINE_CODE_OK);
    cr_assert_eq(r->lock_expires_at_ms, 0, "a refused request grants nothing");
    cr_assert_not(r->terminal);
    engine_reply_free(r);
}

/* What a guarded request could change, as an operator reads it. */
typedef struct snapshot {
    engine_task_state state;
    char worker[64];
    uint64_t lock_expires_at_ms, available_at_ms;
    uint32_t attempt, retries_left, failures;
    char last_error[64];
} snapshot;

static snapshot snap(const char *task_id)
{
    engine_reply *r = h_get_task(task_id);
    h_expect_ok(r);
    snapshot s = {.state = r->task.state,
                  .lock_expires_at_ms = r->task.lock_expires_at_ms,
                  .available_at_ms = r->task.available_at_ms,
                  .attempt = r->task.attempt,
                  .retries_left = r->task.retries_left,
                  .failures = r->task.failures};
    snprintf(s.worker, sizeof(s.worker), "%s", r->task.worker_id ? r->task.worker_id : "");
    snprintf(s.last_error, sizeof(s.last_error), "%s",
             r->task.last_error.code ? r->task.last_error.code : "");
    engine_reply_free(r);
    return s;
}

static void expect_unchanged(const char *task_id, const snapshot *before)
{
    snapshot now = snap(task_id);
    cr_assert_eq(now.state, before->state);
    cr_assert_str_eq(now.worker, before->worker);
    cr_assert_eq(now.lock_expires_at_ms, before->lock_expires_at_ms);
    cr_assert_eq(now.available_at_ms, before->available_at_ms);
    cr_assert_eq(now.attempt, before->attempt);
    cr_assert_eq(now.retries_left, before->retries_left);
    cr_assert_eq(now.failures, before->failures);
    cr_assert_str_eq(now.last_error, before->last_error);
}

static const engine_op guarded[] = {ENGINE_OP_COMPLETE, ENGINE_OP_FAIL, ENGINE_OP_REFUSE,
                                    ENGINE_OP_EXTEND_LOCK, ENGINE_OP_RELEASE};

Test(r8_verdicts, lock_lost_after_expiry_for_every_guarded_request)
{
    one_locked(1000);
    h_advance(1000);
    snapshot before = snap(id);
    cr_assert_eq(before.state, ENGINE_TASK_READY);
    for (size_t i = 0; i < 5; i++) {
        expect_verdict(h_guarded(guarded[i], id, "w1", tok), ENGINE_VERDICT_LOCK_LOST);
        expect_unchanged(id, &before);
    }
}

Test(r8_verdicts, lock_lost_after_release)
{
    one_locked(60000);
    engine_reply *r = h_guarded(ENGINE_OP_RELEASE, id, "w1", tok);
    h_expect_ok(r);
    engine_reply_free(r);
    expect_verdict(h_complete(id, "w1", tok), ENGINE_VERDICT_LOCK_LOST);
}

Test(r8_verdicts, lock_held_when_another_claim_has_it)
{
    one_locked(1000);
    h_advance(1000);
    char tok2[ENGINE_ID_STR];
    h_fetch_one("w2", "t", 60000, NULL, tok2);
    snapshot before = snap(id);
    cr_assert_eq(before.state, ENGINE_TASK_LOCKED);
    cr_assert_str_eq(before.worker, "w2");
    for (size_t i = 0; i < 5; i++) {
        expect_verdict(h_guarded(guarded[i], id, "w1", tok), ENGINE_VERDICT_LOCK_HELD);
        expect_unchanged(id, &before); /* w2's lock is untouched */
    }
    engine_reply *r = h_complete(id, "w2", tok2);
    h_expect_ok(r);
    engine_reply_free(r);
}

Test(r8_verdicts, lock_held_for_a_wrong_token_or_worker)
{
    one_locked(60000);
    char wrong[ENGINE_ID_STR];
    memcpy(wrong, tok, sizeof(wrong));
    wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
    snapshot before = snap(id);
    for (size_t i = 0; i < 5; i++) {
        expect_verdict(h_guarded(guarded[i], id, "w1", wrong), ENGINE_VERDICT_LOCK_HELD);
        expect_verdict(h_guarded(guarded[i], id, "w2", tok), ENGINE_VERDICT_LOCK_HELD);
        expect_unchanged(id, &before);
    }
    engine_reply *r = h_complete(id, "w1", tok);
    h_expect_ok(r);
    engine_reply_free(r);
}

Test(r8_verdicts, terminal_when_the_budget_is_spent)
{
    H.o.retries = 1;
    h_reopen();
    one_locked(60000);
    engine_reply *r = h_fail(id, "w1", tok, "E");
    h_expect_ok(r);
    cr_assert(r->terminal);
    engine_reply_free(r);
    snapshot before = snap(id);
    cr_assert_eq(before.state, ENGINE_TASK_TERMINAL);
    cr_assert_str_eq(before.last_error, "E");
    for (size_t i = 0; i < 5; i++) {
        expect_verdict(h_guarded(guarded[i], id, "w1", tok), ENGINE_VERDICT_TERMINAL);
        expect_unchanged(id, &before); /* kept for an operator, as it was */
    }
    h_advance(H.o.lock_default_ms);
    r = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 0, "a terminal task is never fetchable");
    engine_reply_free(r);
}

Test(r8_verdicts, not_found_for_an_unknown_or_finished_task)
{
    expect_verdict(
        h_complete("0123456789abcdef0123456789abcdef", "w1", "0123456789abcdef0123456789abcdef"),
        ENGINE_VERDICT_NOT_FOUND);
    one_locked(60000);
    engine_reply *r = h_complete(id, "w1", tok);
    h_expect_ok(r);
    engine_reply_free(r);
    for (size_t i = 0; i < 5; i++)
        expect_verdict(h_guarded(guarded[i], id, "w1", tok), ENGINE_VERDICT_NOT_FOUND);
}

static void expect_code(engine_reply *r, engine_verdict v, engine_code c)
{
    cr_assert_eq(r->status.verdict, v, "%s", r->status.message);
    h_expect_code(r, c);
    engine_reply_free(r);
}

Test(r8_verdicts, every_verdict_maps_to_its_status_code)
{
    H.o.retries = 1;
    h_reopen();
    one_locked(1000);
    /* LOCK_HELD: a live lock that is not the caller's. */
    expect_code(h_complete(id, "w1", "0123456789abcdef0123456789abcdef"), ENGINE_VERDICT_LOCK_HELD,
                ENGINE_CODE_ABORTED);
    /* NOT_FOUND: no such task. */
    expect_code(h_complete("0123456789abcdef0123456789abcdef", "w1", tok), ENGINE_VERDICT_NOT_FOUND,
                ENGINE_CODE_NOT_FOUND);
    /* LOCK_LOST: the lock ran out. */
    h_advance(1000);
    expect_code(h_complete(id, "w1", tok), ENGINE_VERDICT_LOCK_LOST, ENGINE_CODE_ABORTED);
    /* TERMINAL: the budget is spent. */
    char tok2[ENGINE_ID_STR];
    h_fetch_one("w1", "t", 60000, NULL, tok2);
    engine_reply_free(h_fail(id, "w1", tok2, "E"));
    expect_code(h_complete(id, "w1", tok2), ENGINE_VERDICT_TERMINAL,
                ENGINE_CODE_FAILED_PRECONDITION);
}

Test(r8_verdicts, malformed_ids_and_tokens_are_invalid_arguments_not_verdicts)
{
    one_locked(1000);
    engine_reply *r = h_complete("not-an-id", "w1", tok);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "task_id");
    cr_assert_eq(r->status.verdict, ENGINE_VERDICT_NONE);
    engine_reply_free(r);
    r = h_complete(id, "w1", "short");
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "lock_token");
    engine_reply_free(r);
    r = h_complete(id, NULL, tok);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "worker_id");
    engine_reply_free(r);
}

Test(r8_verdicts, the_holder_can_extend_and_then_complete_late)
{
    one_locked(1000);
    h_advance(900);
    engine_request req = {.op = ENGINE_OP_EXTEND_LOCK};
    req.u.extend = (engine_extend_args){{id, "w1", tok}, true, 5000};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->lock_expires_at_ms, h_now() + 5000);
    engine_reply_free(r);
    h_advance(4000); /* past the first lock, inside the extension */
    engine_reply *f = h_fetch("w2", "t", 1, 0);
    cr_assert_eq(f->n_tasks, 0, "an extended lock keeps others out");
    engine_reply_free(f);
    r = h_complete(id, "w1", tok);
    h_expect_ok(r);
    engine_reply_free(r);
}
