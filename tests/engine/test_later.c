/* Delayed and prioritised tasks: a fetch takes the most urgent fetchable
 * task first, then the one fetchable longest; a delay holds a task back
 * to the millisecond, wakes a long poll at its instant, survives a
 * restart, and starts a call's attempt timeout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/err.h"
#include "tests/support/harness.h"

TestSuite(later, .init = h_setup, .fini = h_teardown);

typedef struct when {
    bool has_priority;
    uint32_t priority;
    bool has_delay;
    uint64_t delay_ms;
    bool has_at;
    uint64_t at_ms;
} when;

static engine_submit_args args(const char *topic, const char *payload, when w)
{
    return (engine_submit_args){.topic = topic,
                                .payload = (const uint8_t *)payload,
                                .payload_len = strlen(payload),
                                .has_priority = w.has_priority,
                                .priority = w.priority,
                                .has_delay_ms = w.has_delay,
                                .delay_ms = w.delay_ms,
                                .has_not_before_ms = w.has_at,
                                .not_before_ms = w.at_ms};
}

static engine_reply *submit_when(const char *topic, const char *payload, when w)
{
    engine_request req = {.op = ENGINE_OP_SUBMIT};
    req.u.submit = args(topic, payload, w);
    return h_exec(&req);
}

/* Submits and asserts OK; the id goes to id (may be NULL). */
static void submit_ok(const char *topic, const char *payload, when w, char *id)
{
    engine_reply *r = submit_when(topic, payload, w);
    h_expect_ok(r);
    if (id != NULL)
        memcpy(id, r->submitted[0].id, ENGINE_ID_STR);
    engine_reply_free(r);
}

#define PRIO(p)  ((when){.has_priority = true, .priority = (p)})
#define DELAY(d) ((when){.has_delay = true, .delay_ms = (d)})
#define AT(t)    ((when){.has_at = true, .at_ms = (t)})
#define PD(p, d) ((when){.has_priority = true, .priority = (p), .has_delay = true, .delay_ms = (d)})
#define NOW      ((when){0})

/* The payload of the one task a fetch of topic claims now, or "" (none). */
static const char *next(const char *topic)
{
    static char got[64];
    engine_reply *r = h_fetch("w", topic, 1, 60000);
    h_expect_ok(r);
    snprintf(got, sizeof(got), "%.*s", r->n_tasks ? (int)r->tasks[0].payload_len : 0,
             r->n_tasks ? (const char *)r->tasks[0].payload : "");
    engine_reply_free(r);
    return got;
}

Test(later, the_most_urgent_priority_first_then_the_oldest)
{
    submit_ok("t", "a5", PRIO(5), NULL);
    h_advance(1);
    submit_ok("t", "b1", PRIO(1), NULL);
    h_advance(1);
    submit_ok("t", "c5", PRIO(5), NULL);
    h_advance(1);
    submit_ok("t", "d1", PRIO(1), NULL);
    submit_ok("t", "e0", PRIO(0), NULL);
    const char *want[] = {"e0", "b1", "d1", "a5", "c5", ""};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert_str_eq(next("t"), want[i], "fetch %zu", i);
}

Test(later, the_default_priority_is_1024_and_a_fetched_task_shows_its_own)
{
    submit_ok("t", "default", NOW, NULL);
    submit_ok("t", "late", PRIO(1025), NULL);
    submit_ok("t", "soon", PRIO(1023), NULL);
    engine_reply *r = h_fetch("w", "t", 3, 0);
    cr_assert_eq(r->n_tasks, 3);
    const char *want[] = {"soon", "default", "late"};
    const uint32_t prio[] = {1023, 1024, 1025};
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(memcmp(r->tasks[i].payload, want[i], strlen(want[i])), 0, "task %zu", i);
        cr_assert_eq(r->tasks[i].priority, prio[i]);
        cr_assert_eq(r->tasks[i].available_at_ms, H_T0);
    }
    engine_reply_free(r);
}

Test(later, a_delay_is_honoured_to_the_millisecond)
{
    char id[ENGINE_ID_STR];
    submit_ok("t", "d", DELAY(1000), id);
    cr_assert_eq(h_events(ENGINE_EVENT_TASK_PARKED), 1, "parked at once, delay or not");
    engine_reply *g = h_get_task(id);
    h_expect_ok(g);
    cr_assert_eq(g->task.state, ENGINE_TASK_DELAYED);
    cr_assert_eq(g->task.available_at_ms, H_T0 + 1000);
    engine_reply_free(g);
    engine_stats s = h_stats();
    cr_assert_eq(s.delayed, 1);
    cr_assert_eq(s.ready, 0);
    h_advance(999);
    cr_assert_str_eq(next("t"), "", "not before its instant");
    h_advance(1);
    cr_assert_eq(h_stats().ready, 1);
    engine_reply *r = h_fetch("w", "t", 1, 0);
    cr_assert_eq(r->n_tasks, 1, "fetchable at exactly 1000 ms");
    cr_assert_eq(r->tasks[0].available_at_ms, H_T0 + 1000);
    engine_reply_free(r);
}

Test(later, an_instant_is_absolute_and_one_already_past_is_now)
{
    submit_ok("t", "future", AT(H_T0 + 5000), NULL);
    submit_ok("t", "past", AT(H_T0 - 5000), NULL);
    cr_assert_str_eq(next("t"), "past");
    cr_assert_str_eq(next("t"), "");
    h_advance(4999);
    cr_assert_str_eq(next("t"), "");
    h_advance(1);
    cr_assert_str_eq(next("t"), "future");
}

Test(later, a_delayed_task_wakes_a_long_poll_at_its_instant)
{
    static const char *const T[] = {"t"};
    submit_ok("t", "d", DELAY(2500), NULL);
    h_async a;
    h_fetch_async("w", T, 1, 30000, &a);
    h_advance(2499);
    cr_assert_null(h_async_peek(&a));
    /* Nothing submits or rings: the turn at the instant wakes it (with
     * the system clock the actor sleeps until the topic's next instant). */
    h_advance(1);
    engine_reply *r = h_async_wait(&a);
    cr_assert_eq(r->n_tasks, 1);
    cr_assert_eq(memcmp(r->tasks[0].payload, "d", 1), 0);
    h_async_free(&a);
}

Test(later, a_delayed_urgent_task_goes_before_older_ones_once_fetchable)
{
    submit_ok("t", "old9", PRIO(9), NULL);
    submit_ok("t", "urgent", PD(1, 500), NULL);
    submit_ok("t", "new9", PRIO(9), NULL);
    h_advance(500);
    cr_assert_str_eq(next("t"), "urgent");
    cr_assert_str_eq(next("t"), "old9");
    cr_assert_str_eq(next("t"), "new9");
}

Test(later, a_fetch_of_several_topics_takes_the_most_urgent_across_them)
{
    static const char *const T[] = {"a", "b"};
    submit_ok("a", "a7", PRIO(7), NULL);
    submit_ok("b", "b3", PRIO(3), NULL);
    submit_ok("a", "a3", PRIO(3), NULL);
    engine_request req = {.op = ENGINE_OP_FETCH};
    req.u.fetch = (engine_fetch_args){
        .worker_id = "w", .topics = T, .n_topics = 2, .has_max_tasks = true, .max_tasks = 3};
    engine_reply *r = h_exec(&req);
    cr_assert_eq(r->n_tasks, 3);
    const char *want[] = {"b3", "a3", "a7"};
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(memcmp(r->tasks[i].payload, want[i], 2), 0, "task %zu", i);
    engine_reply_free(r);
}

Test(later, a_restart_keeps_delays_and_priorities)
{
    submit_ok("t", "p9", PRIO(9), NULL);
    submit_ok("t", "p2d", PD(2, 3000), NULL);
    submit_ok("t", "p4", PRIO(4), NULL);
    h_reopen();
    cr_assert_eq(h_stats().delayed, 1);
    cr_assert_str_eq(next("t"), "p4");
    h_advance(2999);
    h_reopen();
    cr_assert_str_eq(next("t"), "p9");
    cr_assert_str_eq(next("t"), "");
    h_advance(1);
    cr_assert_str_eq(next("t"), "p2d");
}

Test(later, a_call_s_attempt_times_out_from_when_it_is_fetchable)
{
    engine_retry_policy p = {.has_timeout_ms = true, .timeout_ms = 1000};
    engine_request req = {.op = ENGINE_OP_CALL};
    req.u.call.request = args("t", "q", DELAY(5000));
    req.u.call.retry = &p;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    char id[ENGINE_ID_STR];
    memcpy(id, r->submitted[0].id, ENGINE_ID_STR);
    engine_reply_free(r);
    engine_request aw = {.op = ENGINE_OP_AWAIT_CALL};
    aw.u.await_call = (engine_await_args){.instance_id = id, .has_wait_ms = true, .wait_ms = 0};
    h_advance(5999);
    r = h_exec(&aw);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_WAITING, "1 s from fetchable, not accepted");
    engine_reply_free(r);
    h_advance(1);
    r = h_exec(&aw);
    cr_assert_eq(r->instance.state, ENGINE_INSTANCE_FAILED);
    cr_assert_str_eq(r->instance.error.code, "TIMEOUT");
    engine_reply_free(r);
}

Test(later, listing_shows_delayed_tasks_as_such)
{
    char id[ENGINE_ID_STR];
    submit_ok("t", "d", DELAY(100), id);
    submit_ok("t", "r", NOW, NULL);
    engine_request req = {.op = ENGINE_OP_LIST_TASKS};
    req.u.list_tasks.state = ENGINE_TASK_DELAYED;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    cr_assert_eq(r->n_infos, 1);
    cr_assert_str_eq(r->infos[0].id, id);
    cr_assert_eq(r->infos[0].priority, 1024);
    engine_reply_free(r);
    h_advance(100);
    r = h_exec(&req);
    cr_assert_eq(r->n_infos, 0, "ready at its instant");
    engine_reply_free(r);
}

/* ---- bounds (R6) ---- */

static void expect_refused(when w, const char *field, uint64_t limit)
{
    engine_reply *r = submit_when("t", "x", w);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, field, "%s", r->status.message);
    if (limit != 0) {
        cr_assert(r->status.has_limit);
        cr_assert_eq(r->status.limit, limit);
    }
    engine_reply_free(r);
}

Test(later, bounds_are_rejections_naming_the_field)
{
    uint64_t max = H.o.delay_max_ms;
    cr_assert_eq(max, 30ull * 24 * 3600 * 1000, "30 days by default");
    expect_refused((when){.has_delay = true, .delay_ms = 1, .has_at = true, .at_ms = H_T0},
                   "delay_ms", 0);
    expect_refused(DELAY(max + 1), "delay_ms", max);
    expect_refused(AT(H_T0 + max + 1), "not_before_ms", H_T0 + max);
    submit_ok("t", "edge", DELAY(max), NULL);
    submit_ok("t", "edge", AT(H_T0 + max), NULL);
    cr_assert_eq(h_stats().tasks, 2);

    h_close();
    H.o.priority_max = 10;
    H.o.priority_default = 5;
    h_open();
    expect_refused(PRIO(11), "priority", 10);
    submit_ok("t", "p10", PRIO(10), NULL);
    submit_ok("t", "p0", PRIO(0), NULL);
    submit_ok("t", "def", NOW, NULL);
    cr_assert_str_eq(next("t"), "p0");
    cr_assert_str_eq(next("t"), "def", "the operator's default, 5");
    cr_assert_str_eq(next("t"), "p10");
}

Test(later, a_batch_item_over_a_bound_is_named_and_nothing_is_kept)
{
    engine_submit_args items[] = {args("t", "a", PD(1, 10)), args("t", "b", DELAY(1ull << 50))};
    engine_request req = {.op = ENGINE_OP_SUBMIT_BATCH};
    req.u.submit_batch.items = items;
    req.u.submit_batch.n = 2;
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "items[1].delay_ms");
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 0);
    items[1] = args("t", "b", PRIO(0));
    r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    cr_assert_str_eq(next("t"), "b");
    cr_assert_str_eq(next("t"), "");
    h_advance(10);
    cr_assert_str_eq(next("t"), "a");
}

Test(later, a_default_over_its_ceiling_refuses_to_start)
{
    engine_options o;
    engine_options_default(&o);
    o.priority_max = 1023;
    char msg[256];
    cr_assert_eq(engine_options_check(&o, msg, sizeof(msg)), BERTH_EINVAL);
    cr_assert(strstr(msg, "priority-default") != NULL, "%s", msg);
}

/* ---- a push waits out its delay before it is sent ---- */

Test(later, a_delayed_push_is_not_sent_before_its_instant)
{
    h_push_on();
    h_reopen();
    engine_channel c = {.name = "mail", .transport = "nng+req://127.0.0.1:9"};
    engine_request req = {.op = ENGINE_OP_DEPLOY};
    req.u.deploy.id = "hooks";
    req.u.deploy.channels = &c;
    req.u.deploy.n_channels = 1;
    engine_reply *r = h_exec(&req);
    h_expect_ok(r);
    engine_reply_free(r);
    submit_ok("mail", "later", DELAY(700), NULL);
    submit_ok("mail", "now", NOW, NULL);
    h_wait_durability(0, 0);
    h_advance(0);
    cr_assert_eq(h_pushes(), 1);
    cr_assert_str_eq(H.pushes[0].payload, "now");
    h_advance(699);
    cr_assert_eq(h_pushes(), 1, "not before its instant");
    h_advance(1);
    h_advance(0);
    cr_assert_eq(h_pushes(), 2);
    cr_assert_str_eq(H.pushes[1].payload, "later");
}

/* ---- priority, delay, backoff and lock expiry interleaved ---- */

#define M_TASKS 48

typedef struct model_task {
    char id[ENGINE_ID_STR];
    char payload[16];
    uint32_t prio;
    uint64_t seq;
    uint64_t available, lock_expires;
    uint32_t retries_left;
    bool gone; /* completed or terminal */
    bool held; /* by the model's worker, with token */
    char token[ENGINE_ID_STR];
} model_task;

static uint64_t m_fetchable(const model_task *t)
{
    return t->available > t->lock_expires ? t->available : t->lock_expires;
}

/* The task the model says a claim takes now, or NULL. */
static model_task *m_next(model_task *m, size_t n, uint64_t now)
{
    model_task *best = NULL;
    for (size_t i = 0; i < n; i++) {
        model_task *t = &m[i];
        if (t->gone || m_fetchable(t) > now)
            continue;
        if (best == NULL || t->prio < best->prio ||
            (t->prio == best->prio &&
             (m_fetchable(t) < m_fetchable(best) ||
              (m_fetchable(t) == m_fetchable(best) && t->seq < best->seq))))
            best = t;
    }
    return best;
}

Test(later, every_claim_takes_the_task_a_model_of_the_order_names)
{
    model_task m[M_TASKS];
    unsigned seed = 12345;
    for (int round = 0; round < 3; round++) {
        size_t n = 0;
        for (int step = 0; step < 600; step++) {
            uint64_t now = h_now();
            int op = rand_r(&seed) % 10;
            if (op < 3 && n < M_TASKS) {
                model_task *t = &m[n];
                memset(t, 0, sizeof(*t));
                t->prio = (uint32_t)(rand_r(&seed) % 4);
                uint64_t delay = rand_r(&seed) % 3 == 0 ? (uint64_t)(rand_r(&seed) % 2000) : 0;
                snprintf(t->payload, sizeof(t->payload), "r%d-%zu", round, n);
                submit_ok("m", t->payload, PD(t->prio, delay), t->id);
                t->seq = (uint64_t)round * 1000 + n;
                t->available = now + delay;
                t->lock_expires = 0;
                t->retries_left = 3;
                n++;
            } else if (op < 6) {
                uint64_t lock = 1 + (uint64_t)(rand_r(&seed) % 1500);
                engine_reply *r = h_fetch("w", "m", 1, lock);
                h_expect_ok(r);
                model_task *want = m_next(m, n, now);
                if (want == NULL) {
                    cr_assert_eq(r->n_tasks, 0, "step %d: the model has nothing fetchable", step);
                } else {
                    cr_assert_eq(r->n_tasks, 1, "step %d: the model expects %s", step,
                                 want->payload);
                    cr_assert_str_eq(r->tasks[0].id, want->id, "step %d: took %.*s, not %s", step,
                                     (int)r->tasks[0].payload_len,
                                     (const char *)r->tasks[0].payload, want->payload);
                    want->lock_expires = now + lock;
                    want->held = true;
                    memcpy(want->token, r->tasks[0].lock_token, ENGINE_ID_STR);
                }
                engine_reply_free(r);
            } else if (op < 8) {
                /* The worker ends one of its live claims: fails or completes. */
                for (size_t i = 0; i < n; i++) {
                    model_task *t = &m[i];
                    if (t->gone || !t->held || t->lock_expires <= now)
                        continue;
                    t->held = false;
                    engine_reply *r;
                    if (op == 6) {
                        uint64_t pause = (uint64_t)(rand_r(&seed) % 1200);
                        engine_request req = {.op = ENGINE_OP_FAIL};
                        req.u.fail.guard = (engine_guard){t->id, "w", t->token};
                        req.u.fail.error = (engine_error){.code = "E"};
                        req.u.fail.has_retry_in_ms = true;
                        req.u.fail.retry_in_ms = pause;
                        r = h_exec(&req);
                        t->available = now + pause;
                        t->lock_expires = now;
                        t->gone = --t->retries_left == 0;
                    } else {
                        r = h_complete(t->id, "w", t->token);
                        t->gone = true;
                    }
                    h_expect_ok(r);
                    engine_reply_free(r);
                    break;
                }
            } else {
                h_advance((uint64_t)(rand_r(&seed) % 400));
            }
        }
        /* Everything left is a wrong place waiting to be found: drain it. */
        h_advance(10000);
        for (model_task *want; (want = m_next(m, n, h_now())) != NULL;) {
            engine_reply *r = h_fetch("w", "m", 1, 60000);
            cr_assert_eq(r->n_tasks, 1);
            cr_assert_str_eq(r->tasks[0].id, want->id, "drain: not %s", want->payload);
            engine_reply *c = h_complete(want->id, "w", r->tasks[0].lock_token);
            h_expect_ok(c);
            engine_reply_free(c);
            engine_reply_free(r);
            want->gone = true;
        }
        cr_assert_str_eq(next("m"), "");
    }
}
