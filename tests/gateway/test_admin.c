/* The admin surface over a real socket (R11, R16, ARCHITECTURE.md, "Wire"): its
 * methods, its credentials, its boot rules, and the CLI on it. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <sodium.h>

#include "tests/support/daemon.h"
#include "tests/support/raw.h"

static daemon_proc D;
static bc *C, *A; /* operate, admin */
static char key_path[64];
static const char KEY[] = "0123456789abcdef0123456789abcdef-test-key";

static void setup(void)
{
    snprintf(key_path, sizeof(key_path), "/tmp/berth-admin-key-XXXXXX");
    int fd = mkstemp(key_path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, KEY, strlen(KEY)), (ssize_t)strlen(KEY));
    cr_assert_eq(write(fd, "\n", 1), 1); /* trailing whitespace is not key */
    close(fd);
    static const char *extra[] = {"--retries", "1", "--admin-key-file", NULL, NULL};
    extra[3] = key_path;
    d_start(&D, extra);
    C = d_client(&D);
    char err[256];
    cr_assert_eq(bc_open(D.admin, &A, err, sizeof(err)), BC_OK, "%s", err);
}

static void teardown(void)
{
    bc_close(C);
    bc_close(A);
    d_cleanup(&D);
    unlink(key_path);
}

TestSuite(admin, .init = setup, .fini = teardown, .timeout = 120);

/* ---- helpers ---- */

static Berth__V1__AdminResponse *admin_with(Berth__V1__AdminRequest *req, const char *key)
{
    Berth__V1__AdminResponse *r = NULL;
    int rv = bc_admin_call(A, req, (const uint8_t *)key, key ? strlen(key) : 0, 10000, &r);
    cr_assert_eq(rv, BC_OK, "admin call: %s", bc_strerror(rv));
    cr_assert_not_null(r->status);
    return r;
}

static Berth__V1__AdminResponse *admin(Berth__V1__AdminRequest *req)
{
    return admin_with(req, KEY);
}

#define a_expect_code(r, c)                                                                        \
    cr_assert_eq((int)(r)->status->code, (int)(c), "status %d (%s), expected %d",                  \
                 (int)(r)->status->code, (r)->status->message ? (r)->status->message : "",         \
                 (int)(c))

static void a_free(Berth__V1__AdminResponse *r)
{
    berth__v1__admin_response__free_unpacked(r, NULL);
}

static Berth__V1__AdminResponse *get_task(const char *id)
{
    Berth__V1__GetTaskRequest g = BERTH__V1__GET_TASK_REQUEST__INIT;
    g.id = (char *)id;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_GET_TASK;
    req.get_task = &g;
    return admin(&req);
}

static Berth__V1__AdminResponse *by_id(Berth__V1__AdminRequest__MethodCase m, const char *id,
                                       const char *key)
{
    Berth__V1__RetryTerminalRequest rt = BERTH__V1__RETRY_TERMINAL_REQUEST__INIT;
    Berth__V1__DiscardTerminalRequest dt = BERTH__V1__DISCARD_TERMINAL_REQUEST__INIT;
    Berth__V1__RetryDeliveryRequest rd = BERTH__V1__RETRY_DELIVERY_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = m;
    rt.id = dt.id = rd.id = (char *)id;
    req.retry_terminal = &rt; /* one member of the oneof is read: the one m names */
    if (m == BERTH__V1__ADMIN_REQUEST__METHOD_DISCARD_TERMINAL)
        req.discard_terminal = &dt;
    if (m == BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_DELIVERY)
        req.retry_delivery = &rd;
    return admin_with(&req, key);
}

/* A task of topic made terminal (the daemon's failure budget is 1): its id. */
static char *terminal_task(const char *topic, const char *payload)
{
    Berth__V1__Response *s = w_submit(C, topic, payload, NULL);
    w_expect_code(s, BERTH__V1__CODE__OK);
    char *id = strdup(s->submit->id);
    w_free(s);
    Berth__V1__Response *f = w_fetch(C, "w", topic, 1, 60000, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, 1);
    Berth__V1__Error e = BERTH__V1__ERROR__INIT;
    e.code = "DISK_FULL";
    e.message = "the printer's disk is full";
    Berth__V1__FailRequest fr = BERTH__V1__FAIL_REQUEST__INIT;
    fr.task_id = id;
    fr.worker_id = "w";
    fr.lock_token = f->fetch->tasks[0]->lock_token;
    fr.error = &e;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
    req.fail = &fr;
    Berth__V1__Response *r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert(r->fail->terminal);
    w_free(r);
    w_free(f);
    return id;
}

/* ---- methods ---- */

DTest(admin, an_operator_finds_a_terminal_task_retries_it_and_it_completes)
{
    int ev = raw_sub(D.events);
    char *id = terminal_task("printing", "page 1");

    Berth__V1__AdminResponse *r = get_task(id);
    a_expect_code(r, BERTH__V1__CODE__OK);
    const Berth__V1__TaskInfo *t = r->get_task->task;
    cr_assert_str_eq(t->id, id);
    cr_assert_str_eq(t->topic, "printing");
    cr_assert_eq(t->state, BERTH__V1__TASK_INFO__STATE__TERMINAL);
    cr_assert_str_eq(t->last_error->code, "DISK_FULL");
    cr_assert_str_eq(t->last_error->message, "the printer's disk is full");
    cr_assert_eq(t->retries_left, 0);
    cr_assert_eq(t->payload_bytes, 6);
    cr_assert_str_eq(t->worker_id, "w");
    a_free(r);

    /* Only a terminal task is retried or discarded; unknown ids are not found. */
    Berth__V1__Response *s = w_submit(C, "printing", "page 2", NULL);
    char *live = strdup(s->submit->id);
    w_free(s);
    r = by_id(BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL, live, KEY);
    a_expect_code(r, BERTH__V1__CODE__FAILED_PRECONDITION);
    a_free(r);
    r = by_id(BERTH__V1__ADMIN_REQUEST__METHOD_DISCARD_TERMINAL, live, KEY);
    a_expect_code(r, BERTH__V1__CODE__FAILED_PRECONDITION);
    a_free(r);
    r = by_id(BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL, "0123456789abcdef0123456789abcdef",
              KEY);
    a_expect_code(r, BERTH__V1__CODE__NOT_FOUND);
    a_free(r);
    r = by_id(BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL, "nope", KEY);
    a_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    a_free(r);

    struct timespec pause = {0, 200 * 1000000L};
    nanosleep(&pause, NULL); /* the subscription is up */
    Berth__V1__RetryTerminalRequest rt = BERTH__V1__RETRY_TERMINAL_REQUEST__INIT;
    rt.id = id;
    rt.has_retries = 1;
    rt.retries = 2;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL;
    req.retry_terminal = &rt;
    r = admin(&req);
    a_expect_code(r, BERTH__V1__CODE__OK);
    a_free(r);
    r = get_task(id);
    cr_assert_eq(r->get_task->task->state, BERTH__V1__TASK_INFO__STATE__READY);
    cr_assert_eq(r->get_task->task->retries_left, 2);
    a_free(r);
    size_t n;
    uint8_t *m = raw_event(ev, "task.retried.", &n);
    cr_assert_str_eq((const char *)m, "task.retried.printing", "a retried task is published");
    free(m);
    close(ev);
    char line[128];
    snprintf(line, sizeof(line), "retry_terminal %s", id);
    cr_assert(d_stderr_has(&D, line), "the change is logged on berthd's stderr");
    cr_assert(d_stderr_has(&D, "admin: key:"), "with the key's fingerprint, never the key");
    cr_assert_not(d_stderr_has(&D, KEY));

    /* ...and a worker completes it. */
    Berth__V1__Response *f = w_fetch(C, "w2", "printing", 10, 60000, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, 2);
    for (size_t i = 0; i < f->fetch->n_tasks; i++) {
        Berth__V1__Response *c =
            w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, f->fetch->tasks[i]->id, "w2",
                      f->fetch->tasks[i]->lock_token);
        w_expect_code(c, BERTH__V1__CODE__OK);
        w_free(c);
    }
    w_free(f);
    r = get_task(id);
    a_expect_code(r, BERTH__V1__CODE__NOT_FOUND);
    a_free(r);
    free(id);
    free(live);
}

DTest(admin, a_discarded_terminal_task_is_gone)
{
    char *id = terminal_task("discards", "x");
    Berth__V1__AdminResponse *r = by_id(BERTH__V1__ADMIN_REQUEST__METHOD_DISCARD_TERMINAL, id, KEY);
    a_expect_code(r, BERTH__V1__CODE__OK);
    a_free(r);
    r = get_task(id);
    a_expect_code(r, BERTH__V1__CODE__NOT_FOUND);
    a_free(r);
    char line[128];
    snprintf(line, sizeof(line), "discard_terminal %s", id);
    cr_assert(d_stderr_has(&D, line));
    free(id);
}

DTest(admin, incidents_come_in_pages)
{
    char *ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = terminal_task("incidents", "x");
    Berth__V1__ListIncidentsRequest l = BERTH__V1__LIST_INCIDENTS_REQUEST__INIT;
    l.has_limit = 2;
    l.limit = 2;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_INCIDENTS;
    req.list_incidents = &l;
    Berth__V1__AdminResponse *r = admin(&req);
    a_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->list_incidents->n_incidents, 2);
    cr_assert_str_eq(r->list_incidents->incidents[0]->subject_id, ids[0]);
    cr_assert_str_eq(r->list_incidents->incidents[1]->subject_id, ids[1]);
    cr_assert_eq(r->list_incidents->incidents[0]->kind, BERTH__V1__INCIDENT__KIND__TASK_TERMINAL);
    cr_assert_str_eq(r->list_incidents->incidents[0]->error->code, "DISK_FULL");
    char after[40];
    snprintf(after, sizeof(after), "%s", r->list_incidents->incidents[1]->id);
    a_free(r);
    l.after_id = after;
    r = admin(&req);
    cr_assert_eq(r->list_incidents->n_incidents, 1);
    cr_assert_str_eq(r->list_incidents->incidents[0]->subject_id, ids[2]);
    a_free(r);
    l.has_limit = 1;
    l.limit = 1001;
    r = admin(&req);
    a_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_str_eq(r->status->field, "limit");
    cr_assert_eq(r->status->limit, 1000);
    a_free(r);
    for (int i = 0; i < 3; i++)
        free(ids[i]);
}

DTest(admin, stats_count_by_topic_and_state)
{
    char *t = terminal_task("stat-a", "x");
    free(t);
    w_free(w_submit(C, "stat-a", "y", NULL));
    w_free(w_submit(C, "stat-b", "z", NULL));
    Berth__V1__StatsRequest sr = BERTH__V1__STATS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_STATS;
    req.stats = &sr;
    Berth__V1__AdminResponse *r = admin(&req);
    a_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->stats->tasks, 3);
    int seen = 0;
    for (size_t i = 0; i < r->stats->n_topics; i++) {
        const Berth__V1__TopicStats *ts = r->stats->topics[i];
        if (strcmp(ts->topic, "stat-a") == 0) {
            cr_assert_eq(ts->ready, 1);
            cr_assert_eq(ts->terminal, 1);
            cr_assert_eq(ts->locked, 0);
            seen++;
        } else if (strcmp(ts->topic, "stat-b") == 0) {
            cr_assert_eq(ts->ready, 1);
            seen++;
        }
    }
    cr_assert_eq(seen, 2);
    a_free(r);
}

static Berth__V1__AdminResponse *deploy(const char *id, Berth__V1__ChannelDecl **cs, size_t n)
{
    Berth__V1__DeployRequest d = BERTH__V1__DEPLOY_REQUEST__INIT;
    d.id = (char *)id;
    d.channels = cs;
    d.n_channels = n;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DEPLOY;
    req.deploy = &d;
    return admin(&req);
}

/* Version v of id as list_deployments shows it (freed with *keep). */
static const Berth__V1__Deployment *listed(const char *id, uint32_t v,
                                           Berth__V1__AdminResponse **keep)
{
    Berth__V1__ListDeploymentsRequest l = BERTH__V1__LIST_DEPLOYMENTS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_DEPLOYMENTS;
    req.list_deployments = &l;
    *keep = admin(&req);
    a_expect_code(*keep, BERTH__V1__CODE__OK);
    for (size_t i = 0; i < (*keep)->list_deployments->n_deployments; i++) {
        const Berth__V1__Deployment *d = (*keep)->list_deployments->deployments[i];
        if (strcmp(d->id, id) == 0 && d->version == v)
            return d;
    }
    cr_assert_fail("%s version %u is not listed", id, v);
    return NULL;
}

DTest(admin, a_new_version_drains_the_old_which_retires_with_an_event)
{
    int ev = raw_sub(D.events);
    Berth__V1__ChannelDecl orders = BERTH__V1__CHANNEL_DECL__INIT, legacy = orders;
    orders.name = "orders";
    orders.has_reply_max_bytes = 1;
    orders.reply_max_bytes = 64;
    legacy.name = "legacy";
    legacy.transport = "pull";
    Berth__V1__ChannelDecl *v1[] = {&orders, &legacy}, *v2[] = {&orders};
    Berth__V1__AdminResponse *r = deploy("shop", v1, 2);
    a_expect_code(r, BERTH__V1__CODE__OK);
    const Berth__V1__Deployment *d = r->deploy->deployment;
    cr_assert_eq(d->version, 1);
    cr_assert_eq(d->state, BERTH__V1__DEPLOYMENT__STATE__LIVE);
    cr_assert_eq(d->n_channels, 2);
    cr_assert_eq(d->channels[0]->reply_max_bytes, 64);
    cr_assert_str_eq(d->channels[1]->transport, "pull");
    a_free(r);
    Berth__V1__ChannelDecl smtp = BERTH__V1__CHANNEL_DECL__INIT, *bad[] = {&smtp};
    smtp.name = "mail";
    smtp.transport = "smtp://mail.example";
    r = deploy("shop", bad, 1);
    a_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_str_eq(r->status->field, "channels[0].transport");
    a_free(r);

    Berth__V1__Response *s = w_submit(C, "legacy", "old work", NULL);
    w_expect_code(s, BERTH__V1__CODE__OK);
    w_free(s);
    struct timespec pause = {0, 200 * 1000000L};
    nanosleep(&pause, NULL); /* parked, and the subscription is up */

    r = deploy("shop", v2, 1);
    a_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->deploy->deployment->version, 2);
    a_free(r);
    d = listed("shop", 1, &r);
    cr_assert_eq(d->state, BERTH__V1__DEPLOYMENT__STATE__DRAINING);
    cr_assert_eq(d->tasks, 1);
    cr_assert(d->has_calls_retrying, "what holds it is on the wire, calls too");
    cr_assert_eq(d->calls_retrying, 0);
    a_free(r);
    s = w_submit(C, "legacy", "new work", NULL);
    w_expect_code(s, BERTH__V1__CODE__FAILED_PRECONDITION);
    cr_assert_str_eq(s->status->field, "topic");
    w_free(s);

    /* The draining version's task is served; done, the version retires. */
    Berth__V1__Response *f = w_fetch(C, "w", "legacy", 1, 60000, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, 1);
    Berth__V1__Response *c = w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE,
                                       f->fetch->tasks[0]->id, "w", f->fetch->tasks[0]->lock_token);
    w_expect_code(c, BERTH__V1__CODE__OK);
    w_free(c);
    w_free(f);
    size_t n;
    uint8_t *m = raw_event(ev, "deployment.retired.", &n);
    cr_assert_str_eq((const char *)m, "deployment.retired.shop");
    size_t sl = strlen((const char *)m);
    Berth__V1__Event *e = berth__v1__event__unpack(NULL, n - sl - 1, m + sl + 1);
    cr_assert_not_null(e);
    cr_assert_str_eq(e->deployment_id, "shop");
    cr_assert_eq(e->deployment_version, 1);
    berth__v1__event__free_unpacked(e, NULL);
    free(m);
    close(ev);
    d = listed("shop", 1, &r);
    cr_assert_eq(d->state, BERTH__V1__DEPLOYMENT__STATE__RETIRED);
    cr_assert(d->has_retired_at_ms);
    cr_assert_eq(d->tasks, 0);
    a_free(r);
    d = listed("shop", 2, &r);
    cr_assert_eq(d->state, BERTH__V1__DEPLOYMENT__STATE__LIVE);
    a_free(r);
    cr_assert(d_stderr_has(&D, "deploy shop"), "the change is logged on berthd's stderr");

    /* Retire: version 2 holds nothing, so it retires at once. */
    Berth__V1__RetireRequest rt = BERTH__V1__RETIRE_REQUEST__INIT;
    rt.id = "shop";
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETIRE;
    req.retire = &rt;
    r = admin(&req);
    a_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->retire->deployment->version, 2);
    cr_assert_eq(r->retire->deployment->state, BERTH__V1__DEPLOYMENT__STATE__RETIRED);
    a_free(r);
    rt.id = "nobody";
    r = admin(&req);
    a_expect_code(r, BERTH__V1__CODE__NOT_FOUND);
    a_free(r);
}

static Berth__V1__AdminResponse *list(const char *topic, int state, uint32_t limit,
                                      const char *after)
{
    Berth__V1__ListTasksRequest l = BERTH__V1__LIST_TASKS_REQUEST__INIT;
    l.topic = (char *)topic;
    l.has_state = state != 0;
    l.state = (Berth__V1__TaskInfo__State)state;
    l.has_limit = limit != 0;
    l.limit = limit;
    l.after_id = (char *)after;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_TASKS;
    req.list_tasks = &l;
    return admin(&req);
}

DTest(admin, list_tasks_shows_every_state_and_pages_through_all)
{
    char *terminal = terminal_task("lt", "t");
    Berth__V1__Response *s = w_submit(C, "lt", "locked", NULL);
    w_free(s);
    Berth__V1__Response *f = w_fetch(C, "w", "lt", 1, 60000, 0); /* locked */
    char *locked = strdup(f->fetch->tasks[0]->id);
    w_free(f);
    w_free(w_submit(C, "lt", "backoff", NULL));
    f = w_fetch(C, "w", "lt", 1, 60000, 0);
    char *backoff = strdup(f->fetch->tasks[0]->id);
    Berth__V1__FailRequest fr = BERTH__V1__FAIL_REQUEST__INIT;
    fr.task_id = backoff;
    fr.worker_id = "w";
    fr.lock_token = f->fetch->tasks[0]->lock_token;
    fr.has_retries_left = 1;
    fr.retries_left = 1;
    fr.has_retry_in_ms = 1;
    fr.retry_in_ms = 600000;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
    req.fail = &fr;
    Berth__V1__Response *r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    w_free(f);
    s = w_submit(C, "lt", "ready", NULL);
    char *ready = strdup(s->submit->id);
    w_free(s);

    struct {
        int state;
        const char *id;
    } want[] = {{BERTH__V1__TASK_INFO__STATE__READY, ready},
                {BERTH__V1__TASK_INFO__STATE__LOCKED, locked},
                {BERTH__V1__TASK_INFO__STATE__BACKOFF, backoff},
                {BERTH__V1__TASK_INFO__STATE__TERMINAL, terminal}};
    for (int i = 0; i < 4; i++) {
        Berth__V1__AdminResponse *a = list("lt", want[i].state, 10, NULL);
        a_expect_code(a, BERTH__V1__CODE__OK);
        cr_assert_eq(a->list_tasks->n_tasks, 1, "state %d", want[i].state);
        cr_assert_str_eq(a->list_tasks->tasks[0]->id, want[i].id);
        cr_assert_eq(a->list_tasks->tasks[0]->state, want[i].state);
        a_free(a);
    }
    /* One at a time, following next_after_id: each once, in submission order. */
    const char *order[] = {terminal, locked, backoff, ready};
    char after[40] = "";
    for (int i = 0; i < 4; i++) {
        Berth__V1__AdminResponse *a = list(NULL, 0, 1, after[0] ? after : NULL);
        a_expect_code(a, BERTH__V1__CODE__OK);
        cr_assert_eq(a->list_tasks->n_tasks, 1);
        cr_assert_str_eq(a->list_tasks->tasks[0]->id, order[i], "page %d", i);
        if (i < 3)
            cr_assert_not_null(a->list_tasks->next_after_id);
        else
            cr_assert_null(a->list_tasks->next_after_id, "the last page says so");
        snprintf(after, sizeof(after), "%s",
                 a->list_tasks->next_after_id ? a->list_tasks->next_after_id : "");
        a_free(a);
    }
    Berth__V1__AdminResponse *a = list(NULL, 0, 1001, NULL);
    a_expect_code(a, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_str_eq(a->status->field, "limit");
    a_free(a);
    free(terminal);
    free(locked);
    free(backoff);
    free(ready);
}

DTest(admin, pages_over_tasks_that_change_between_pages_list_each_one_there_throughout_once)
{
    enum { N = 60 };
    static char ids[N][33];
    for (int i = 0; i < N; i++) {
        Berth__V1__Response *r = w_submit(C, "churn", "x", NULL);
        snprintf(ids[i], sizeof(ids[i]), "%s", r->submit->id);
        w_free(r);
    }
    static int seen[N];
    char after[40] = "";
    int pages = 0;
    for (;;) {
        Berth__V1__AdminResponse *a = list("churn", 0, 7, after[0] ? after : NULL);
        a_expect_code(a, BERTH__V1__CODE__OK);
        for (size_t k = 0; k < a->list_tasks->n_tasks; k++)
            for (int i = 0; i < N; i++)
                if (strcmp(a->list_tasks->tasks[k]->id, ids[i]) == 0)
                    seen[i]++;
        bool last = a->list_tasks->next_after_id == NULL;
        snprintf(after, sizeof(after), "%s", last ? "" : a->list_tasks->next_after_id);
        a_free(a);
        if (last)
            break;
        pages++;
        /* Between pages: one of the oldest completes, a new one comes. */
        Berth__V1__Response *f = w_fetch(C, "w", "churn", 1, 60000, 0);
        w_free(w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, f->fetch->tasks[0]->id, "w",
                         f->fetch->tasks[0]->lock_token));
        w_free(f);
        w_free(w_submit(C, "churn", "new", NULL));
    }
    cr_assert_gt(pages, 5);
    int there = 0;
    for (int i = 0; i < N; i++) {
        cr_assert_leq(seen[i], 1, "task %d listed %d times", i, seen[i]);
        Berth__V1__AdminResponse *g = get_task(ids[i]);
        if (g->status->code == BERTH__V1__CODE__OK) {
            cr_assert_eq(seen[i], 1, "task %d, there throughout, listed %d times", i, seen[i]);
            there++;
        }
        a_free(g);
    }
    cr_assert_gt(there, 40);
}

/* ---- backups ---- */

typedef struct feeder {
    bc *c;
    volatile bool stop;
    int acked;
} feeder;

static void *feed(void *arg)
{
    feeder *f = arg;
    while (!f->stop) {
        Berth__V1__Response *r = w_submit(f->c, "backup", "during", NULL);
        f->acked += r->status->code == BERTH__V1__CODE__OK;
        w_free(r);
    }
    return NULL;
}

static Berth__V1__AdminResponse *checkpoint(const char *dir)
{
    Berth__V1__CheckpointRequest c = BERTH__V1__CHECKPOINT_REQUEST__INIT;
    c.dir = (char *)dir;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_CHECKPOINT;
    req.checkpoint = &c;
    return admin(&req);
}

DTest(admin, a_checkpoint_taken_while_berthd_serves_holds_every_acknowledged_task)
{
    enum { N = 300 };
    static char ids[N][33];
    for (int i = 0; i < N; i++) {
        Berth__V1__Response *r = w_submit(C, "backup", "before", NULL);
        w_expect_code(r, BERTH__V1__CODE__OK);
        snprintf(ids[i], sizeof(ids[i]), "%s", r->submit->id);
        w_free(r);
    }
    feeder f = {.c = d_client(&D)};
    pthread_t th;
    pthread_create(&th, NULL, feed, &f);
    char parent[] = "/tmp/berth-backup-XXXXXX", dir[96];
    cr_assert_not_null(mkdtemp(parent));
    snprintf(dir, sizeof(dir), "%s/cp", parent);
    Berth__V1__AdminResponse *r = checkpoint(dir);
    a_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_str_eq(r->checkpoint->dir, dir);
    a_free(r);
    f.stop = true;
    pthread_join(th, NULL);
    bc_close(f.c);
    cr_assert_gt(f.acked, 0, "berthd served while it checkpointed");
    char line[160];
    snprintf(line, sizeof(line), "checkpoint %s", dir);
    cr_assert(d_stderr_has(&D, line));

    r = checkpoint(dir);
    a_expect_code(r, BERTH__V1__CODE__FAILED_PRECONDITION); /* not over what is there */
    a_free(r);
    r = checkpoint("relative/dir");
    a_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_str_eq(r->status->field, "dir");
    a_free(r);

    /* Restored: another berthd on the copy serves every task acknowledged
     * before the checkpoint was asked for. */
    daemon_proc R;
    const char *extra[] = {"--data", dir, NULL};
    d_start(&R, extra);
    bc *rc = d_client(&R);
    static bool found[N];
    int n = 0;
    for (;;) {
        Berth__V1__Response *fr = w_fetch(rc, "w", "backup", 1000, 60000, 0);
        w_expect_code(fr, BERTH__V1__CODE__OK);
        size_t got = fr->fetch->n_tasks;
        for (size_t k = 0; k < got; k++)
            for (int i = 0; i < N; i++)
                if (!found[i] && strcmp(fr->fetch->tasks[k]->id, ids[i]) == 0) {
                    found[i] = true;
                    n++;
                }
        w_free(fr);
        if (got == 0)
            break;
    }
    cr_assert_eq(n, N, "%d of the %d acknowledged before the checkpoint", n, N);
    bc_close(rc);
    d_stop(&R);
    d_cleanup(&R);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", parent);
    cr_assert_eq(system(cmd), 0);
}

/* ---- credentials ---- */

static Berth__V1__AdminResponse *send_raw(const uint8_t *buf, size_t len)
{
    nng_socket s;
    cr_assert_eq(nng_req0_open(&s), 0);
    cr_assert_eq(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000), 0);
    cr_assert_eq(nng_dial(s, D.admin, NULL, 0), 0);
    cr_assert_eq(nng_send(s, (void *)buf, len, 0), 0);
    char *out = NULL;
    size_t n = 0;
    cr_assert_eq(nng_recv(s, &out, &n, NNG_FLAG_ALLOC), 0);
    Berth__V1__AdminResponse *r = berth__v1__admin_response__unpack(NULL, n, (uint8_t *)out);
    nng_free(out, n);
    nng_close(s);
    cr_assert_not_null(r);
    return r;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

DTest(admin, requests_without_the_right_credentials_change_nothing)
{
    char *id = terminal_task("guarded", "x");
    Berth__V1__RetryTerminalRequest rt = BERTH__V1__RETRY_TERMINAL_REQUEST__INIT;
    rt.id = id;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL;
    req.retry_terminal = &rt;
    uint8_t buf[4096];

    /* None. */
    size_t n = bc_admin_sign(&req, NULL, 0, 0, buf, sizeof(buf));
    Berth__V1__AdminResponse *r = send_raw(buf, n);
    a_expect_code(r, BERTH__V1__CODE__UNAUTHENTICATED);
    a_free(r);
    /* Another key. */
    const char *other = "ffffffffffffffffffffffffffffffffffffffff";
    r = admin_with(&req, other);
    a_expect_code(r, BERTH__V1__CODE__UNAUTHENTICATED);
    a_free(r);
    /* Stale: further from berthd's clock than the skew (300 s by default). */
    n = bc_admin_sign(&req, (const uint8_t *)KEY, strlen(KEY), wall_ms() - 301000, buf,
                      sizeof(buf));
    r = send_raw(buf, n);
    a_expect_code(r, BERTH__V1__CODE__UNAUTHENTICATED);
    a_free(r);
    /* The right MAC over another method: signed for discard, sent as retry. */
    Berth__V1__AdminRequest disc = req;
    Berth__V1__DiscardTerminalRequest dt = BERTH__V1__DISCARD_TERMINAL_REQUEST__INIT;
    dt.id = id;
    disc.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DISCARD_TERMINAL;
    disc.discard_terminal = &dt;
    n = bc_admin_sign(&disc, (const uint8_t *)KEY, strlen(KEY), wall_ms(), buf, sizeof(buf));
    cr_assert_eq(buf[0], (8u << 3) | 2, "the method's key leads: field 8 is discard");
    buf[0] = (7u << 3) | 2; /* field 7: retry_terminal, the same body */
    r = send_raw(buf, n);
    a_expect_code(r, BERTH__V1__CODE__UNAUTHENTICATED);
    a_free(r);

    r = get_task(id);
    cr_assert_eq(r->get_task->task->state, BERTH__V1__TASK_INFO__STATE__TERMINAL,
                 "nothing was processed");
    a_free(r);

    /* Right, and the same bytes again within the skew: both served. */
    n = bc_admin_sign(&req, (const uint8_t *)KEY, strlen(KEY), wall_ms(), buf, sizeof(buf));
    r = send_raw(buf, n);
    a_expect_code(r, BERTH__V1__CODE__OK);
    a_free(r);
    r = send_raw(buf, n);
    a_expect_code(r, BERTH__V1__CODE__FAILED_PRECONDITION); /* replayed: served, not terminal now */
    a_free(r);
    free(id);
}

DTest(admin, each_socket_refuses_the_other_s_envelope)
{
    /* An admin request on the operate socket. */
    Berth__V1__GetTaskRequest g = BERTH__V1__GET_TASK_REQUEST__INIT;
    g.id = "0123456789abcdef0123456789abcdef";
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_GET_TASK;
    req.get_task = &g;
    uint8_t buf[4096];
    size_t n = bc_admin_sign(&req, (const uint8_t *)KEY, strlen(KEY), wall_ms(), buf, sizeof(buf));
    Berth__V1__Response *r = NULL;
    cr_assert_eq(bc_call_raw(C, buf, n, 10000, &r), BC_OK);
    cr_assert_neq(r->status->code, BERTH__V1__CODE__OK);
    w_free(r);
    /* An operate request on the admin socket. */
    Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
    s.topic = "t";
    Berth__V1__Request op = BERTH__V1__REQUEST__INIT;
    op.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    op.submit = &s;
    n = berth__v1__request__pack(&op, buf);
    Berth__V1__AdminResponse *a = send_raw(buf, n);
    cr_assert_neq(a->status->code, BERTH__V1__CODE__OK);
    a_free(a);
    /* Garbage. */
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0x0f};
    a = send_raw(junk, sizeof(junk));
    a_expect_code(a, BERTH__V1__CODE__INVALID_ARGUMENT);
    a_free(a);
}

Test(admin_boot, connections_held_idle_cannot_lock_operators_out)
{
    /* The admin surface takes 64 connections; 64 held idle are closed
     * once the idle timeout passes, and an operator gets in. */
    static const char *extra[] = {"--idle-timeout-ms", "400", NULL};
    d_start(&D, extra);
    int held[64];
    for (int i = 0; i < 64; i++)
        held[i] = raw_req(D.admin);
    struct timespec pause = {1, 600 * 1000000L}; /* the timeout and a reaper's round */
    nanosleep(&pause, NULL);
    char err[256];
    cr_assert_eq(bc_open(D.admin, &A, err, sizeof(err)), BC_OK, "%s", err);
    Berth__V1__StatsRequest sr = BERTH__V1__STATS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_STATS;
    req.stats = &sr;
    Berth__V1__AdminResponse *r = admin_with(&req, NULL);
    a_expect_code(r, BERTH__V1__CODE__OK);
    a_free(r);
    for (int i = 0; i < 64; i++) {
        char b;
        cr_assert_eq(read(held[i], &b, 1), 0, "idle connection %d was closed", i);
        close(held[i]);
    }
    bc_close(A);
    d_stop(&D);
    d_cleanup(&D);
}

/* ---- boot ---- */

Test(admin_boot, a_non_loopback_admin_without_a_key_is_refused)
{
    char err[1024];
    int status =
        d_refused((const char *const[]){"--admin", "tcp://0.0.0.0:0", NULL}, err, sizeof(err));
    cr_assert_eq(status, 2, "exit %d (stderr: %s)", status, err);
    cr_assert(strstr(err, "admin-key-file") != NULL, "%s", err);
    /* Loopback by number only: a name could resolve anywhere, and ws:// is
     * open to any web page. */
    const char *not_loopback[] = {"tcp://127.0.0.1.example.net:7451", "tcp://localhost:0",
                                  "ws://127.0.0.1:0", "tcp://user@127.0.0.1:0"};
    for (size_t i = 0; i < 4; i++) {
        status =
            d_refused((const char *const[]){"--admin", not_loopback[i], NULL}, err, sizeof(err));
        cr_assert_eq(status, 2, "%s: exit %d (stderr: %s)", not_loopback[i], status, err);
    }
    char path[] = "/tmp/berth-short-key-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_eq(write(fd, "short\n", 6), 6);
    close(fd);
    status = d_refused((const char *const[]){"--admin-key-file", path, NULL}, err, sizeof(err));
    unlink(path);
    cr_assert_eq(status, 2, "exit %d (stderr: %s)", status, err);
    cr_assert(strstr(err, "admin-key-file") != NULL, "%s", err);
}

Test(admin_boot, loopback_without_a_key_trusts_the_machine)
{
    d_start(&D, NULL);
    char err[256];
    cr_assert_eq(bc_open(D.admin, &A, err, sizeof(err)), BC_OK, "%s", err);
    Berth__V1__StatsRequest sr = BERTH__V1__STATS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_STATS;
    req.stats = &sr;
    Berth__V1__AdminResponse *r = admin_with(&req, NULL);
    a_expect_code(r, BERTH__V1__CODE__OK);
    a_free(r);
    bc_close(A);
    d_stop(&D);
    d_cleanup(&D);
}

/* ---- the CLI ---- */

static int cli(char *out, size_t len, const char *fmt, ...)
{
    char args[1024], cmd[1600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "%s --admin %s --admin-key-file %s %s 2>/dev/null", BERTH_CLI_PATH,
             D.admin, key_path, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

DTest(admin, the_cli_tends_terminal_tasks)
{
    char out[8192];
    char *id = terminal_task("cli", "hello");
    cr_assert_eq(cli(out, sizeof(out), "admin task %s", id), 0);
    cr_assert(strstr(out, "TERMINAL") != NULL, "%s", out);
    cr_assert(strstr(out, "DISK_FULL") != NULL, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "--json admin task %s", id), 0);
    cr_assert(strstr(out, "\"state\":\"TERMINAL\"") != NULL, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "--json admin incidents --limit 5"), 0);
    cr_assert(strstr(out, id) != NULL, "%s", out);
    cr_assert(strstr(out, "\"open\":true") != NULL, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "--json admin incidents --open"), 0);
    cr_assert(strstr(out, id) != NULL, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "--json stats"), 0);
    cr_assert(strstr(out, "\"topic\":\"cli\"") != NULL, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "--json admin tasks --state terminal --topic cli"), 0);
    cr_assert(strstr(out, id) != NULL, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "admin tasks --state ready"), 0);
    cr_assert(strstr(out, id) == NULL, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "admin tasks --state sleepy"), 2);
    cr_assert_eq(cli(out, sizeof(out), "admin retry %s --retries 3", id), 0);
    cr_assert_eq(cli(out, sizeof(out), "--json admin incidents --open"), 0);
    cr_assert(strstr(out, id) == NULL, "retried: no longer open: %s", out);
    cr_assert_eq(cli(out, sizeof(out), "admin incidents"), 0);
    cr_assert(strstr(out, "task_terminal\tclosed\t") != NULL, "the record stays: %s", out);
    cr_assert_eq(cli(out, sizeof(out), "admin retry %s", id), 3, "not terminal now: exit 3");
    cr_assert_eq(cli(out, sizeof(out), "admin discard %s", id), 3);
    cr_assert_eq(cli(out, sizeof(out), "admin frobnicate"), 2);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --admin %s admin task %s 2>/dev/null >/dev/null", BERTH_CLI_PATH,
             D.admin, id);
    cr_assert_eq(WEXITSTATUS(system(cmd)), 3, "no key: UNAUTHENTICATED, exit 3");
    snprintf(cmd, sizeof(cmd), "%s --admin tcp://127.0.0.1:1 stats 2>/dev/null >/dev/null",
             BERTH_CLI_PATH);
    cr_assert_eq(WEXITSTATUS(system(cmd)), 4);
    free(id);
}
