/* An operator's pages of tasks (admin list_tasks): every task there from
 * the first page to the last is listed exactly once, however tasks come
 * and go in between; filters; bounds. */
#include <stdio.h>
#include <string.h>

#include "tests/support/harness.h"

TestSuite(listing, .init = h_setup, .fini = h_teardown);

#define MAX_IDS 20000

typedef struct seen {
    char id[ENGINE_ID_STR];
    int times;
} seen;

static seen S[MAX_IDS];
static size_t n_seen;

static void saw(const char *id)
{
    for (size_t i = 0; i < n_seen; i++)
        if (strcmp(S[i].id, id) == 0) {
            S[i].times++;
            return;
        }
    cr_assert_lt(n_seen, MAX_IDS);
    snprintf(S[n_seen].id, sizeof(S[n_seen].id), "%s", id);
    S[n_seen++].times = 1;
}

static int times_seen(const char *id)
{
    for (size_t i = 0; i < n_seen; i++)
        if (strcmp(S[i].id, id) == 0)
            return S[i].times;
    return 0;
}

static engine_reply *page(const char *topic, engine_task_state state, uint32_t limit,
                          const char *after)
{
    engine_request req = {.op = ENGINE_OP_LIST_TASKS};
    req.u.list_tasks.topic = topic;
    req.u.list_tasks.state = state;
    req.u.list_tasks.limit = limit;
    req.u.list_tasks.after = after;
    return h_exec(&req);
}

/* Lists everything (filters as given), calling between() after each page. */
static size_t list_all(const char *topic, engine_task_state state, uint32_t limit,
                       void (*between)(int page))
{
    char after[24] = "";
    size_t pages = 0;
    for (;;) {
        engine_reply *r = page(topic, state, limit, after[0] ? after : NULL);
        h_expect_ok(r);
        cr_assert_leq(r->n_infos, limit);
        for (size_t i = 0; i < r->n_infos; i++)
            saw(r->infos[i].id);
        pages++;
        bool last = r->next[0] == '\0';
        snprintf(after, sizeof(after), "%s", r->next);
        engine_reply_free(r);
        if (last)
            return pages;
        if (between)
            between((int)pages);
        cr_assert_lt(pages, 100000, "the listing ends");
    }
}

static char ids[400][ENGINE_ID_STR];

static void churn(int pg)
{
    /* Between pages: complete two tasks (one listed, one not yet) and
     * submit a new one. */
    char id[ENGINE_ID_STR];
    h_submit("t", "new", id);
    engine_task t;
    char token[ENGINE_ID_STR];
    for (int k = 0; k < 2; k++) {
        h_fetch_one("w", "churn", 0, &t, token);
        engine_reply_free(h_complete(t.id, "w", token));
    }
    (void)pg;
}

Test(listing, each_task_there_throughout_is_listed_once_while_tasks_come_and_go)
{
    for (int i = 0; i < 300; i++)
        h_submit(i % 3 ? "t" : "churn", "p", ids[i]);
    size_t pages = list_all(NULL, 0, 37, churn);
    cr_assert_gt(pages, 5);
    int stayed = 0;
    for (int i = 0; i < 300; i++) {
        engine_reply *g = h_get_task(ids[i]);
        bool there = g->status.code == ENGINE_CODE_OK;
        engine_reply_free(g);
        int n = times_seen(ids[i]);
        cr_assert_leq(n, 1, "task %d listed %d times", i, n);
        if (there) {
            cr_assert_eq(n, 1, "task %d, there throughout, listed %d times", i, n);
            stayed++;
        }
    }
    cr_assert_gt(stayed, 150);
    for (size_t i = 0; i < n_seen; i++)
        cr_assert_eq(S[i].times, 1, "%s listed %d times", S[i].id, S[i].times);
}

Test(listing, pages_filter_by_topic_and_state)
{
    char a[4][ENGINE_ID_STR], b[ENGINE_ID_STR];
    for (int i = 0; i < 4; i++)
        h_submit("a", "p", a[i]);
    h_submit("b", "p", b);
    engine_task t;
    char token[ENGINE_ID_STR];
    h_fetch_one("w", "a", 60000, &t, token); /* a[0] locked */
    h_fetch_one("w", "a", 60000, &t, token); /* a[1]: failed, backing off */
    engine_reply_free(h_fail(t.id, "w", token, "X"));
    h_fetch_one("w", "a", 60000, &t, token); /* a[2]: terminal */
    engine_request f = {.op = ENGINE_OP_FAIL};
    f.u.fail.guard = (engine_guard){t.id, "w", token};
    f.u.fail.has_retries_left = true;
    f.u.fail.retries_left = 0;
    engine_reply_free(h_exec(&f));

    struct {
        engine_task_state s;
        const char *id;
    } want[] = {{ENGINE_TASK_LOCKED, a[0]},
                {ENGINE_TASK_BACKOFF, a[1]},
                {ENGINE_TASK_TERMINAL, a[2]},
                {ENGINE_TASK_READY, a[3]}};
    for (int i = 0; i < 4; i++) {
        engine_reply *r = page("a", want[i].s, 10, NULL);
        h_expect_ok(r);
        cr_assert_eq(r->n_infos, 1, "state %d", want[i].s);
        cr_assert_str_eq(r->infos[0].id, want[i].id);
        cr_assert_eq(r->infos[0].state, want[i].s);
        cr_assert_str_eq(r->infos[0].topic, "a");
        engine_reply_free(r);
    }
    engine_reply *r = page(NULL, ENGINE_TASK_READY, 10, NULL);
    cr_assert_eq(r->n_infos, 2, "a[3] and b");
    engine_reply_free(r);
    r = page("b", 0, 10, NULL);
    cr_assert_eq(r->n_infos, 1);
    cr_assert_str_eq(r->infos[0].id, b);
    cr_assert_str_eq(r->next, "", "the last page");
    engine_reply_free(r);
    r = page("none", 0, 10, NULL);
    h_expect_ok(r);
    cr_assert_eq(r->n_infos, 0);
    engine_reply_free(r);
}

Test(listing, a_page_starts_after_its_token_even_when_that_task_has_gone)
{
    char id[6][ENGINE_ID_STR];
    for (int i = 0; i < 6; i++)
        h_submit("t", "p", id[i]);
    engine_reply *r = page(NULL, 0, 3, NULL);
    cr_assert_eq(r->n_infos, 3);
    cr_assert_str_eq(r->infos[2].id, id[2]);
    char next[24];
    snprintf(next, sizeof(next), "%s", r->next);
    engine_reply_free(r);
    /* id[2] goes. */
    engine_task t;
    char token[ENGINE_ID_STR];
    for (int i = 0; i < 3; i++) {
        h_fetch_one("w", "t", 0, &t, token);
        engine_reply_free(h_complete(t.id, "w", token));
    }
    r = page(NULL, 0, 3, next);
    h_expect_ok(r);
    cr_assert_eq(r->n_infos, 3);
    cr_assert_str_eq(r->infos[0].id, id[3]);
    engine_reply_free(r);
    /* A task id still there is a start too. */
    r = page(NULL, 0, 3, id[4]);
    cr_assert_eq(r->n_infos, 1);
    cr_assert_str_eq(r->infos[0].id, id[5]);
    engine_reply_free(r);
}

Test(listing, bounds_are_refused_naming_the_field)
{
    engine_reply *r = page(NULL, 0, 1001, NULL);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "limit");
    cr_assert_eq(r->status.limit, 1000);
    engine_reply_free(r);
    r = page(NULL, 0, 10, "0123456789abcdef0123456789abcdef"); /* no such task */
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "after_id");
    engine_reply_free(r);
    r = page(NULL, 0, 10, "s12");
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    engine_reply_free(r);
    r = page(NULL, (engine_task_state)9, 10, NULL);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "state");
    engine_reply_free(r);
}

Test(listing, a_page_looks_at_a_bounded_number_of_tasks)
{
    /* 700 tasks on "x", then 1 on "y": a page of 2 filtered to "y" looks
     * at 128 entries at most and says where it stopped. */
    for (int i = 0; i < 700; i++)
        h_submit("x", "p", NULL);
    char y[ENGINE_ID_STR];
    h_submit("y", "p", y);
    engine_reply *r = page("y", 0, 2, NULL);
    h_expect_ok(r);
    cr_assert_eq(r->n_infos, 0);
    cr_assert_neq(r->next[0], '\0', "not the last page");
    engine_reply_free(r);
    size_t pages = list_all("y", 0, 2, NULL);
    cr_assert_geq(pages, 6);
    cr_assert_eq(times_seen(y), 1);
}

Test(listing, many_tasks_gone_are_tidied_and_the_order_holds)
{
    /* Thousands come and go (the entries of the gone are tidied between
     * turns), a few stay; a restart rebuilds the order from the store. */
    char keep[12][ENGINE_ID_STR];
    for (int round = 0; round < 12; round++) {
        h_submit("t", "keep", keep[round]);
        engine_request b = {.op = ENGINE_OP_SUBMIT_BATCH};
        static engine_submit_args items[1000];
        for (int i = 0; i < 1000; i++)
            items[i] = (engine_submit_args){.topic = "gone", .payload_len = 0};
        b.u.submit_batch.items = items;
        b.u.submit_batch.n = 1000;
        engine_reply_free(h_exec(&b));
        engine_reply *f = h_fetch("w", "gone", 1000, 0);
        engine_request c = {.op = ENGINE_OP_COMPLETE_BATCH};
        static engine_complete_args done[1000];
        for (size_t i = 0; i < f->n_tasks; i++)
            done[i].guard = (engine_guard){f->tasks[i].id, "w", f->tasks[i].lock_token};
        c.u.complete_batch.items = done;
        c.u.complete_batch.n = f->n_tasks;
        engine_reply_free(h_exec(&c));
        engine_reply_free(f);
        for (int k = 0; k < 3; k++)
            engine_tick(H.e);
    }
    list_all(NULL, 0, 2, NULL);
    cr_assert_eq(n_seen, 12);
    for (int i = 0; i < 12; i++)
        cr_assert_eq(times_seen(keep[i]), 1);
    h_reopen();
    n_seen = 0;
    list_all(NULL, 0, 3, NULL);
    cr_assert_eq(n_seen, 12);
}

Test(listing, an_older_delivery_parked_late_takes_its_place)
{
    h_skip_on_pg("a submit writes its task on PostgreSQL: none is parked late");
    char first[ENGINE_ID_STR], later[ENGINE_ID_STR];
    engine_failpoint_set(H.e, ENGINE_FP_PARK, 1);
    h_submit("t", "p", first); /* its park fails: parked a second later */
    h_submit("t", "p", later);
    h_advance(H.o.delivery_backoff_max_ms);
    engine_reply *r = page(NULL, 0, 10, NULL);
    cr_assert_eq(r->n_infos, 2);
    cr_assert_str_eq(r->infos[0].id, first, "by submission, not by park");
    cr_assert_str_eq(r->infos[1].id, later);
    engine_reply_free(r);
}

/* GET_TASK shows what the task carries (headers, content type, the start
 * of its payload, cut at ENGINE_TASK_INFO_PAYLOAD_MAX); a listing does
 * not (it would read every body on the page). */
Test(listing, get_task_shows_the_headers_and_the_start_of_the_payload)
{
    static uint8_t big[ENGINE_TASK_INFO_PAYLOAD_MAX + 904];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 7);
    const engine_header hs[] = {{"x-trace", "<script>1</script>"}, {"x-second", "b"}};
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit = (engine_submit_args){.topic = "t",
                                        .payload = big,
                                        .payload_len = sizeof(big),
                                        .headers = hs,
                                        .n_headers = 2,
                                        .content_type = "application/octet-stream"};
    engine_reply *s = h_exec(&req);
    h_expect_ok(s);
    char id[ENGINE_ID_STR], small[ENGINE_ID_STR];
    snprintf(id, sizeof(id), "%s", s->submitted[0].id);
    engine_reply_free(s);
    h_submit("t", "short", small);

    engine_reply *r = h_get_task(id);
    h_expect_ok(r);
    cr_assert_eq(r->task.payload_bytes, sizeof(big));
    cr_assert_eq(r->task.payload_shown, ENGINE_TASK_INFO_PAYLOAD_MAX);
    cr_assert_eq(memcmp(r->task.payload, big, ENGINE_TASK_INFO_PAYLOAD_MAX), 0);
    cr_assert_eq(r->task.n_headers, 2);
    cr_assert_str_eq(r->task.headers[0].name, "x-trace");
    cr_assert_str_eq(r->task.headers[0].value, "<script>1</script>");
    cr_assert_str_eq(r->task.headers[1].name, "x-second");
    cr_assert_str_eq(r->task.content_type, "application/octet-stream");
    engine_reply_free(r);

    r = h_get_task(small);
    h_expect_ok(r);
    cr_assert_eq(r->task.payload_shown, 5);
    cr_assert_eq(memcmp(r->task.payload, "short", 5), 0);
    cr_assert_eq(r->task.n_headers, 0);
    cr_assert_null(r->task.content_type);
    engine_reply_free(r);

    r = page(NULL, 0, 10, NULL);
    h_expect_ok(r);
    cr_assert_eq(r->n_infos, 2);
    for (size_t i = 0; i < 2; i++) {
        cr_assert_null(r->infos[i].payload);
        cr_assert_eq(r->infos[i].n_headers, 0);
        cr_assert_gt(r->infos[i].payload_bytes, 0);
    }
    engine_reply_free(r);
}
