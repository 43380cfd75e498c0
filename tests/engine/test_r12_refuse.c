/* R12 refusal is final. */
#include <string.h>

#include "tests/support/harness.h"

TestSuite(r12_refuse, .init = h_setup, .fini = h_teardown);

Test(r12_refuse, a_refusal_ends_the_task_with_an_event_carrying_the_code)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w", "t", 0, NULL, tok);
    engine_request req = {.op = ENGINE_OP_REFUSE};
    req.u.refuse = (engine_refuse_args){{id, "w", tok}, {"E_BAD_ORDER", "no such order", NULL}};
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_REFUSED), 1);
    bool found = false;
    for (size_t i = 0; i < H.n_ev; i++)
        if (H.ev[i].kind == ENGINE_EVENT_TASK_REFUSED) {
            cr_assert_str_eq(H.ev[i].code, "E_BAD_ORDER");
            cr_assert_str_eq(H.ev[i].id, id);
            cr_assert_str_eq(H.ev[i].topic, "t");
            found = true;
        }
    cr_assert(found);
    h_advance(100000000);
    engine_reply *f = h_fetch("w", "t", 1, 0);
    cr_assert_eq(f->n_tasks, 0, "a refused task never comes back");
    engine_reply_free(f);
    h_reopen();
    cr_assert_eq(h_stats().tasks, 0);
    cr_assert_eq(h_stats().terminal, 0, "refusal is not a terminal failure");
}

Test(r12_refuse, only_the_lock_holder_can_refuse)
{
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("t", "p", id);
    h_fetch_one("w", "t", 0, NULL, tok);
    engine_reply *r = h_guarded(ENGINE_OP_REFUSE, id, "other", tok);
    cr_assert_eq(r->status.verdict, ENGINE_VERDICT_LOCK_HELD);
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 1);
}
