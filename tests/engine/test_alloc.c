/* Out of memory, everywhere: the n-th allocation of a workload fails, for
 * every n. Every request then gets an error or a correct answer, the
 * whole-state checks (BERTH_CHECKS builds) hold after every turn, and
 * nothing acknowledged is lost nor anything refused kept. */
#include <stdio.h>
#include <string.h>

#include "tests/support/harness.h"

TestSuite(alloc_failure, .init = h_setup, .fini = h_teardown, .timeout = 300);

enum { BATCH = 3, MAX_IDS = 1 + BATCH };

typedef struct script {
    char topic[32];
    char ids[MAX_IDS][ENGINE_ID_STR]; /* acknowledged submits */
    bool completed[MAX_IDS];          /* and acknowledged completions */
    size_t n_ids;
    bool keyed; /* the keyed submit was acknowledged */
    size_t errors;
    h_async wait; /* a fetch that waits, woken by the batch */
    bool waiting;
} script;

/* engine_exec_sync, which may find no memory to queue the request. */
static engine_reply *try_exec(const engine_request *req, script *s)
{
    engine_reply *r = engine_exec_sync(H.e, req);
    if (r == NULL)
        s->errors++;
    return r;
}

static bool ok(engine_reply *r, script *s)
{
    if (r == NULL)
        return false;
    if (r->status.code == ENGINE_CODE_OK)
        return true;
    /* An error is a clear one: never OK with nothing in it. */
    cr_assert(r->status.code == ENGINE_CODE_UNAVAILABLE ||
                  r->status.code == ENGINE_CODE_RESOURCE_EXHAUSTED,
              "unexpected status %d: %s", r->status.code, r->status.message);
    cr_assert(r->status.retryable, "%s", r->status.message);
    cr_assert_neq(r->status.message[0], '\0');
    s->errors++;
    return false;
}

static void add_id(script *s, const char *id)
{
    cr_assert_lt(s->n_ids, MAX_IDS);
    memcpy(s->ids[s->n_ids++], id, ENGINE_ID_STR);
}

static void run_script(script *s)
{
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit = (engine_submit_args){.topic = s->topic,
                                        .payload = (const uint8_t *)"keyed",
                                        .payload_len = 5,
                                        .idempotency_key = "k"};
    engine_reply *r = try_exec(&req, s);
    if (ok(r, s)) {
        cr_assert_eq(r->n_submitted, 1);
        cr_assert_not(r->submitted[0].duplicate);
        add_id(s, r->submitted[0].id);
        s->keyed = true;
    }
    engine_reply_free(r);

    const char *topics[] = {s->topic};
    req = (engine_request){.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){.worker_id = "w",
                                      .topics = topics,
                                      .n_topics = 1,
                                      .has_max_tasks = true,
                                      .max_tasks = 10,
                                      .has_wait_ms = true};
    engine_reply *f = try_exec(&req, s);
    if (ok(f, s)) {
        /* OK means the work there is: never OK with nothing for want of
         * memory. (A park that found none is retried by the outbox.) */
        if (f->n_tasks < s->n_ids) {
            engine_request st = {.op = ENGINE_OP_STATS};
            engine_reply *sr = try_exec(&st, s);
            if (sr != NULL && sr->status.code == ENGINE_CODE_OK)
                cr_assert_eq(f->n_tasks + sr->stats.outbox_pending, s->n_ids,
                             "fetch OK with %zu of %zu tasks, %llu not parked", f->n_tasks,
                             s->n_ids, (unsigned long long)sr->stats.outbox_pending);
            engine_reply_free(sr);
        }
        for (size_t i = 0; i < f->n_tasks; i++) {
            cr_assert_str_eq(f->tasks[i].id, s->ids[0]);
            cr_assert_eq(f->tasks[i].payload_len, 5);
            cr_assert_eq(memcmp(f->tasks[i].payload, "keyed", 5), 0);
            engine_request c = {.op = ENGINE_OP_COMPLETE};
            c.u.complete.guard = (engine_guard){f->tasks[i].id, "w", f->tasks[i].lock_token};
            engine_reply *cr = try_exec(&c, s);
            if (ok(cr, s))
                s->completed[0] = true;
            engine_reply_free(cr);
        }
    }
    engine_reply_free(f);

    static const char *wtopics[1];
    wtopics[0] = s->topic;
    req = (engine_request){.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){.worker_id = "lp",
                                      .topics = wtopics,
                                      .n_topics = 1,
                                      .has_max_tasks = true,
                                      .max_tasks = 10,
                                      .has_wait_ms = true,
                                      .wait_ms = 30000};
    if (h_exec_async_try(&req, &s->wait) == 0)
        s->waiting = true;
    else
        s->errors++;

    engine_submit_args items[BATCH];
    for (size_t i = 0; i < BATCH; i++)
        items[i] = (engine_submit_args){
            .topic = s->topic, .payload = (const uint8_t *)"item", .payload_len = 4};
    req = (engine_request){.op = ENGINE_OP_SUBMIT_BATCH};
    req.u.submit_batch.items = items;
    req.u.submit_batch.n = BATCH;
    r = try_exec(&req, s);
    if (ok(r, s)) {
        cr_assert_eq(r->n_submitted, BATCH);
        for (size_t i = 0; i < BATCH; i++)
            add_id(s, r->submitted[i].id);
    }
    engine_reply_free(r);
}

/* With the seam disarmed: exactly what was acknowledged is there. */
static void verify(script *s)
{
    engine_reply *r = h_get_task("0123456789abcdef0123456789abcdef");
    bool halted = r->status.code == ENGINE_CODE_UNAVAILABLE;
    engine_reply_free(r);
    if (halted)
        h_reopen();   /* a reload that found no memory halts; a restart recovers */
    h_advance(60000); /* past locks, grace windows, waits and the store's backoff */
    if (s->waiting) {
        /* Woken by the batch, or answered at its deadline: its tasks are
         * acknowledged ones, their locks now run out. */
        engine_reply *w = h_async_wait(&s->wait);
        if (ok(w, s))
            for (size_t i = 0; i < w->n_tasks; i++) {
                bool known = false;
                for (size_t j = 0; j < s->n_ids; j++)
                    known |= strcmp(w->tasks[i].id, s->ids[j]) == 0;
                cr_assert(known, "the waiting fetch got %s, never acknowledged", w->tasks[i].id);
            }
        h_async_free(&s->wait);
    }

    size_t live = 0;
    for (size_t i = 0; i < s->n_ids; i++) {
        r = h_get_task(s->ids[i]);
        h_expect_code(r, s->completed[i] ? ENGINE_CODE_NOT_FOUND : ENGINE_CODE_OK);
        engine_reply_free(r);
        live += !s->completed[i];
    }
    /* Nothing refused was kept: the topic holds the acknowledged, no more. */
    r = h_fetch("v", s->topic, 100, 0);
    h_expect_ok(r);
    cr_assert_eq(r->n_tasks, live, "%zu tasks on %s, %zu acknowledged and not completed",
                 r->n_tasks, s->topic, live);
    for (size_t i = 0; i < r->n_tasks; i++)
        engine_reply_free(h_complete(r->tasks[i].id, "v", r->tasks[i].lock_token));
    engine_reply_free(r);
    /* The key names the acknowledged submit, and only it. */
    r = h_submit_key(s->topic, "again", "k");
    h_expect_ok(r);
    cr_assert_eq(r->submitted[0].duplicate, s->keyed);
    if (s->keyed)
        cr_assert_str_eq(r->submitted[0].id, s->ids[0]);
    engine_reply_free(r);
}

Test(alloc_failure, every_allocation_of_submit_fetch_complete_fails_once)
{
    H.o.lock_default_ms = 1000;
    h_reopen();
    size_t n, failed_runs = 0;
    for (n = 1; n < 10000; n++) {
        script s = {0};
        snprintf(s.topic, sizeof(s.topic), "t%zu", n);
        engine_fault_alloc(n);
        run_script(&s);
        bool fired = engine_fault_alloc_fired();
        engine_fault_alloc(0);
        verify(&s);
        if (!fired)
            break; /* the whole script ran within n - 1 allocations */
        failed_runs += s.errors > 0;
    }
    cr_assert_lt(n, 10000, "the walk did not end");
    cr_assert_gt(n, 20, "the script makes allocations: %zu", n);
    cr_assert_gt(failed_runs, 0, "some failure reached a client");
    cr_log_info("%zu allocations walked, %zu runs answered an error", n - 1, failed_runs);
}
