/* R8 zero rows affected is never success: exactly one of four verdicts. */
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
    cr_assert_eq(r->n_tasks, 0, "a failure carries no payload");
    engine_reply_free(r);
}

static const engine_op guarded[] = {ENGINE_OP_COMPLETE, ENGINE_OP_FAIL, ENGINE_OP_REFUSE,
                                    ENGINE_OP_EXTEND_LOCK, ENGINE_OP_RELEASE};

Test(r8_verdicts, lock_lost_after_expiry_for_every_guarded_request)
{
    one_locked(1000);
    h_advance(1000);
    for (size_t i = 0; i < 5; i++)
        expect_verdict(h_guarded(guarded[i], id, "w1", tok), ENGINE_VERDICT_LOCK_LOST);
    engine_reply *g = h_get_task(id);
    cr_assert_eq(g->task.state, ENGINE_TASK_READY, "nothing was applied");
    engine_reply_free(g);
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
    for (size_t i = 0; i < 5; i++)
        expect_verdict(h_guarded(guarded[i], id, "w1", tok), ENGINE_VERDICT_LOCK_HELD);
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
    expect_verdict(h_complete(id, "w1", wrong), ENGINE_VERDICT_LOCK_HELD);
    expect_verdict(h_complete(id, "w2", tok), ENGINE_VERDICT_LOCK_HELD);
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
    for (size_t i = 0; i < 5; i++)
        expect_verdict(h_guarded(guarded[i], id, "w1", tok), ENGINE_VERDICT_TERMINAL);
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

Test(r8_verdicts, verdicts_map_to_status_codes)
{
    one_locked(1000);
    engine_reply *r = h_complete(id, "w1", "0123456789abcdef0123456789abcdef");
    h_expect_code(r, ENGINE_CODE_ABORTED);
    engine_reply_free(r);
    r = h_complete("0123456789abcdef0123456789abcdef", "w1", tok);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
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
