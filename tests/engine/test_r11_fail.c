/* R11 the failure budget: backoff, explicit pauses and budgets, terminal. */
#include <stdio.h>
#include <string.h>

#include "tests/support/harness.h"

TestSuite(r11_failure_budget, .init = h_setup, .fini = h_teardown);

static char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];

static bool fetchable(void)
{
    engine_reply *r = h_fetch("w", "t", 1, 60000);
    bool got = r->n_tasks == 1;
    if (got)
        memcpy(tok, r->tasks[0].lock_token, ENGINE_ID_STR);
    engine_reply_free(r);
    return got;
}

Test(r11_failure_budget, failures_back_off_exponentially)
{
    h_submit("t", "p", id);
    cr_assert(fetchable());
    uint64_t want[] = {1000, 2000};
    for (int i = 0; i < 2; i++) {
        engine_reply *r = h_fail(id, "w", tok, "E");
        h_expect_ok(r);
        cr_assert_not(r->terminal);
        cr_assert_eq(r->retries_left, 2 - i);
        cr_assert_eq(r->available_at_ms, h_now() + want[i]);
        engine_reply_free(r);
        h_advance(want[i] - 1);
        cr_assert_not(fetchable(), "not before the pause ends");
        h_advance(1);
        cr_assert(fetchable());
    }
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_FAILED), 2);
}

Test(r11_failure_budget, the_pause_is_capped)
{
    H.o.backoff_initial_ms = 1000;
    H.o.backoff_max_ms = 1500;
    H.o.retries = 10;
    h_reopen();
    h_submit("t", "p", id);
    cr_assert(fetchable());
    engine_reply_free(h_fail(id, "w", tok, "E"));
    h_advance(1000);
    cr_assert(fetchable());
    engine_reply *r = h_fail(id, "w", tok, "E");
    cr_assert_eq(r->available_at_ms, h_now() + 1500, "2000 capped at 1500");
    engine_reply_free(r);
}

Test(r11_failure_budget, jitter_shortens_a_pause_within_its_bound)
{
    H.o.backoff_jitter = 0.5;
    H.o.retries = 100;
    h_reopen();
    h_submit("t", "p", id);
    bool varied = false;
    uint64_t base = 1000;
    for (int i = 0; i<20; i++, base = base * 2> 600000 ? 600000 : base * 2) {
        cr_assert(fetchable());
        engine_reply *r = h_fail(id, "w", tok, "E");
        uint64_t pause = r->available_at_ms - h_now();
        engine_reply_free(r);
        cr_assert_leq(pause, base, "failure %d: %lu over %lu", i + 1, (unsigned long)pause,
                      (unsigned long)base);
        cr_assert_geq(pause, base / 2, "failure %d: %lu under half of %lu", i + 1,
                      (unsigned long)pause, (unsigned long)base);
        varied |= pause != base;
        h_advance(pause);
    }
    cr_assert(varied, "twenty pauses all at the full curve: no jitter");
}

Test(r11_failure_budget, a_worker_may_choose_the_pause_and_the_budget)
{
    h_submit("t", "p", id);
    cr_assert(fetchable());
    engine_request req = {.op = ENGINE_OP_FAIL};
    req.u.fail.guard = (engine_guard){id, "w", tok};
    req.u.fail.has_retry_in_ms = true;
    req.u.fail.retry_in_ms = 0;
    req.u.fail.has_retries_left = true;
    req.u.fail.retries_left = 7;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->retries_left, 7);
    engine_reply_free(r);
    cr_assert(fetchable(), "retry_in_ms 0: fetchable at once");
    engine_reply *g = h_get_task(id);
    cr_assert_eq(g->task.retries_left, 7);
    cr_assert_eq(g->task.failures, 1);
    engine_reply_free(g);
}

Test(r11_failure_budget, at_the_budget_the_task_is_terminal_with_its_error_and_incident)
{
    h_submit("t", "p", id);
    for (int i = 0; i < 3; i++) {
        h_advance(600000);
        cr_assert(fetchable());
        engine_request req = {.op = ENGINE_OP_FAIL};
        req.u.fail.guard = (engine_guard){id, "w", tok};
        req.u.fail.error = (engine_error){"E_UPSTREAM", "upstream down", "{\"try\":1}"};
        engine_reply *r = h_exec(&req);
        h_expect_ok(r);
        cr_assert_eq(r->terminal, i == 2);
        engine_reply_free(r);
    }
    h_advance(100000000);
    cr_assert_not(fetchable(), "terminal: never fetchable by itself");
    engine_reply *g = h_get_task(id);
    cr_assert_eq(g->task.state, ENGINE_TASK_TERMINAL);
    cr_assert_str_eq(g->task.last_error.code, "E_UPSTREAM");
    cr_assert_str_eq(g->task.last_error.details, "{\"try\":1}");
    engine_reply_free(g);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_TERMINAL), 1);
    engine_request req = {.op = ENGINE_OP_LIST_INCIDENTS};
    engine_reply *r = h_exec(&req);
    cr_assert_eq(r->n_incidents, 1);
    cr_assert_eq(r->incidents[0].kind, 2 /* TASK_TERMINAL */);
    cr_assert_str_eq(r->incidents[0].subject_id, id);
    cr_assert_str_eq(r->incidents[0].error.code, "E_UPSTREAM");
    engine_reply_free(r);
    engine_stats s = h_stats();
    cr_assert_eq(s.terminal, 1);
    cr_assert_eq(s.ready, 0);
}

Test(r11_failure_budget, retries_left_zero_is_terminal_at_once)
{
    h_submit("t", "p", id);
    cr_assert(fetchable());
    engine_request req = {.op = ENGINE_OP_FAIL};
    req.u.fail.guard = (engine_guard){id, "w", tok};
    req.u.fail.has_retries_left = true;
    req.u.fail.retries_left = 0;
    engine_reply *r = h_exec(&req);
    cr_assert(r->terminal);
    engine_reply_free(r);
}

Test(r11_failure_budget, an_operator_retry_makes_a_terminal_task_fetchable)
{
    H.o.retries = 1;
    h_reopen();
    h_submit("t", "p", id);
    cr_assert(fetchable());
    engine_reply_free(h_fail(id, "w", tok, "E"));
    cr_assert_not(fetchable());
    engine_request req = {.op = ENGINE_OP_RETRY_TERMINAL};
    req.u.retry_terminal.id = id;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert(fetchable());
    engine_reply *g = h_get_task(id);
    cr_assert_eq(g->task.retries_left, 1, "the budget is given back");
    engine_reply_free(g);
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_FAILED_PRECONDITION);
    engine_reply_free(r);
}

/* An incident is a record: it stays, and says whether what it recorded
 * still holds (open) until a retry or a discard closes it. */
static engine_reply *incidents(bool open_only, uint32_t limit, const char *after)
{
    engine_request req = {.op = ENGINE_OP_LIST_INCIDENTS};
    req.u.list_incidents.open_only = open_only;
    req.u.list_incidents.limit = limit;
    req.u.list_incidents.after_id = after;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    return r;
}

Test(r11_failure_budget, an_incident_stays_recorded_and_says_whether_it_is_still_open)
{
    H.o.retries = 1;
    h_reopen();
    h_submit("t", "p", id);
    cr_assert(fetchable());
    engine_reply_free(h_fail(id, "w", tok, "E"));
    engine_reply *r = incidents(false, 0, NULL);
    cr_assert_eq(r->n_incidents, 1);
    cr_assert(r->incidents[0].open);
    cr_assert_str_eq(r->next_incident, "", "the records have ended");
    engine_reply_free(r);

    engine_request retry = {.op = ENGINE_OP_RETRY_TERMINAL};
    retry.u.retry_terminal.id = id;
    engine_reply_free(h_exec(&retry));
    r = incidents(false, 0, NULL);
    cr_assert_eq(r->n_incidents, 1, "the record stays");
    cr_assert_not(r->incidents[0].open, "retried: closed");
    engine_reply_free(r);
    r = incidents(true, 0, NULL);
    cr_assert_eq(r->n_incidents, 0);
    engine_reply_free(r);

    /* Terminal again: a second record. Open says what holds of the task
     * now, so both records say so (a reader shows a subject once). */
    cr_assert(fetchable());
    engine_reply_free(h_fail(id, "w", tok, "E"));
    r = incidents(false, 1, NULL);
    cr_assert_eq(r->n_incidents, 1);
    cr_assert(r->incidents[0].open);
    char next[ENGINE_ID_STR];
    snprintf(next, sizeof(next), "%s", r->next_incident);
    cr_assert_str_eq(next, r->incidents[0].id, "a full page: the next starts after its last");
    engine_reply_free(r);
    r = incidents(false, 1, next);
    cr_assert_eq(r->n_incidents, 1);
    cr_assert(r->incidents[0].open);
    engine_reply_free(r);
    r = incidents(true, 0, NULL);
    cr_assert_eq(r->n_incidents, 2);
    cr_assert_str_eq(r->incidents[1].subject_id, id);
    engine_reply_free(r);

    engine_request discard = {.op = ENGINE_OP_DISCARD_TERMINAL};
    discard.u.discard_terminal.id = id;
    engine_reply_free(h_exec(&discard));
    h_reopen();
    r = incidents(true, 0, NULL);
    cr_assert_eq(r->n_incidents, 0, "discarded: closed, after a restart too");
    engine_reply_free(r);
    r = incidents(false, 0, NULL);
    cr_assert_eq(r->n_incidents, 2);
    engine_reply_free(r);
}

/* Open only, past many closed records: pages come back short, but their
 * next leads to the open one. */
Test(r11_failure_budget, open_incidents_are_found_past_many_closed_ones)
{
    h_skip_on_pg("PostgreSQL filters in the statement: its pages are never short");
    H.o.retries = 1;
    h_reopen();
    engine_request retry = {.op = ENGINE_OP_RETRY_TERMINAL};
    for (int i = 0; i < 150; i++) {
        h_submit("t", "p", id);
        cr_assert(fetchable());
        engine_reply_free(h_fail(id, "w", tok, "E"));
        retry.u.retry_terminal.id = id;
        if (i < 149)
            engine_reply_free(h_exec(&retry)); /* closed; the last stays open */
        h_advance(1);
        while (fetchable()) /* (take the retried one out of the way) */
            engine_reply_free(h_complete(id, "w", tok));
    }
    char after[ENGINE_ID_STR] = "";
    int pages = 0, found = 0;
    do {
        engine_reply *r = incidents(true, 1, after[0] ? after : NULL);
        found += (int)r->n_incidents;
        snprintf(after, sizeof(after), "%s", r->next_incident);
        engine_reply_free(r);
        pages++;
    } while (after[0] != '\0' && pages < 100);
    cr_assert_eq(found, 1);
    cr_assert_gt(pages, 2, "each page looked at a bounded number of records");
}

Test(r11_failure_budget, an_operator_may_discard_a_terminal_task)
{
    H.o.retries = 1;
    h_reopen();
    h_submit("t", "p", id);
    cr_assert(fetchable());
    engine_request req = {.op = ENGINE_OP_DISCARD_TERMINAL};
    req.u.discard_terminal.id = id;
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_FAILED_PRECONDITION);
    engine_reply_free(r);
    engine_reply_free(h_fail(id, "w", tok, "E"));
    r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_DISCARDED), 1);
    h_reopen();
    cr_assert_eq(h_stats().tasks, 0);
}

Test(r11_failure_budget, a_retry_wakes_a_waiting_fetch_and_both_acts_are_published)
{
    H.o.retries = 1;
    h_reopen();
    h_submit("t", "p", id);
    cr_assert(fetchable());
    engine_reply_free(h_fail(id, "w", tok, "E"));
    static const char *T[] = {"t"};
    h_async a;
    h_fetch_async("w2", T, 1, 30000, &a);
    cr_assert_null(h_async_peek(&a), "nothing fetchable: it waits");
    engine_request req = {.op = ENGINE_OP_RETRY_TERMINAL};
    req.u.retry_terminal.id = id;
    req.u.retry_terminal.has_retries = true;
    req.u.retry_terminal.retries = 3;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    r = h_async_wait(&a);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, 1, "the retry rang the waiting fetch");
    cr_assert_str_eq(r->tasks[0].id, id);
    h_async_free(&a);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_RETRIED), 1);
    engine_reply *g = h_get_task(id);
    cr_assert_eq(g->task.retries_left, 3, "the budget the operator gave");
    engine_reply_free(g);

    /* Over the ceiling, an id that is none, a task that is not there. */
    req.u.retry_terminal.retries = H.o.retries_max + 1;
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "retries");
    engine_reply_free(r);
    req.u.retry_terminal.has_retries = false;
    req.u.retry_terminal.id = "nope";
    r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    engine_reply_free(r);
    engine_request d = {.op = ENGINE_OP_DISCARD_TERMINAL};
    d.u.discard_terminal.id = "0123456789abcdef0123456789abcdef";
    r = h_exec(&d);
    h_expect_code(r, ENGINE_CODE_NOT_FOUND);
    engine_reply_free(r);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_DISCARDED), 0);
}

Test(r11_failure_budget, a_failed_worker_loses_its_lock)
{
    h_submit("t", "p", id);
    cr_assert(fetchable());
    char old[ENGINE_ID_STR];
    memcpy(old, tok, sizeof(old));
    engine_reply_free(h_fail(id, "w", tok, "E"));
    engine_reply *r = h_complete(id, "w", old);
    cr_assert_eq(r->status.verdict, ENGINE_VERDICT_LOCK_LOST);
    engine_reply_free(r);
}

Test(r11_failure_budget, error_fields_are_bounded)
{
    h_submit("t", "p", id);
    cr_assert(fetchable());
    static char big[70000];
    memset(big, 'x', sizeof(big) - 1);
    engine_request req = {.op = ENGINE_OP_FAIL};
    req.u.fail.guard = (engine_guard){id, "w", tok};
    req.u.fail.error.details = big;
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "error.details");
    engine_reply_free(r);
}

/* Many failures in one turn (a hundred workers giving up at once, or a
 * gateway releasing what it could not hand over) are all kept, each with
 * its error: the turn's statement of them grows as it must. */
Test(r11_failure_budget, a_hundred_failures_in_one_turn_are_all_kept)
{
    enum { N = 100 };
    static char ids[N][ENGINE_ID_STR], toks[N][ENGINE_ID_STR];
    for (int i = 0; i < N; i++)
        h_submit("many", "p", NULL);
    int got = 0;
    while (got < N) {
        engine_reply *f = h_fetch("w", "many", 100, 60000);
        cr_assert_gt(f->n_tasks, 0);
        for (size_t k = 0; k < f->n_tasks; k++, got++) {
            memcpy(ids[got], f->tasks[k].id, ENGINE_ID_STR);
            memcpy(toks[got], f->tasks[k].lock_token, ENGINE_ID_STR);
        }
        engine_reply_free(f);
    }
    static engine_request reqs[N];
    static h_async a[N];
    static char messages[N][96];
    engine_hold(H.e, true);
    for (int i = 0; i < N; i++) {
        snprintf(messages[i], sizeof messages[i], "worker %d gave up on this one for a reason", i);
        reqs[i] = (engine_request){.op = ENGINE_OP_FAIL};
        reqs[i].u.fail.guard = (engine_guard){ids[i], "w", toks[i]};
        reqs[i].u.fail.error = (engine_error){.code = "E_GAVE_UP", .message = messages[i]};
        h_exec_async(&reqs[i], &a[i]);
    }
    engine_hold(H.e, false);
    for (int i = 0; i < N; i++) {
        engine_reply *r = h_async_wait(&a[i]);
        h_expect_ok(r);
        h_async_free(&a[i]);
    }
    cr_assert_eq(h_stats().backoff, N, "every failure kept");
    engine_reply *t = h_get_task(ids[N - 1]);
    h_expect_ok(t);
    cr_assert_str_eq(t->task.last_error.message, messages[N - 1]);
    engine_reply_free(t);
}
