/* /metrics and /healthz (ARCHITECTURE.md, "Operating"): the families by their names, and
 * counters that move by exactly what was done. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"

static daemon_proc D;
static bc *C;

static void setup(void)
{
    static const char *const extra[] = {"--retries", "1", "--channel", "declared", NULL};
    d_start(&D, extra);
    C = d_client(&D);
}

static void teardown(void)
{
    bc_close(C);
    d_cleanup(&D);
}

TestSuite(metrics, .init = setup, .fini = teardown, .timeout = 60);

/* GET path from D's metrics URL: the status and the body (malloc'd). */
static int http_get(const char *path, char **body)
{
    return d_http_get(&D, path, body);
}

/* The value of the line that starts with `series ` (or -1). */
static double value(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return atof(p + n + 1);
    return -1;
}

static double scrape(const char *series)
{
    char *body;
    cr_assert_eq(http_get("/metrics", &body), 200);
    double v = value(body, series);
    free(body);
    return v;
}

DTest(metrics, healthz_and_every_family_by_name)
{
    char *body;
    cr_assert_eq(http_get("/healthz", &body), 200);
    cr_assert_str_eq(body, "ok\n");
    free(body);
    w_free(w_submit(C, "fam", "x", NULL)); /* so that per-topic families have a line */
    cr_assert_eq(http_get("/metrics", &body), 200);
    static const char *const families[][2] = {
        {"berth_tasks_submitted_total", "counter"},
        {"berth_tasks_fetched_total", "counter"},
        {"berth_tasks_completed_total", "counter"},
        {"berth_tasks_failed_total", "counter"},
        {"berth_tasks_terminal_total", "counter"},
        {"berth_tasks_refused_total", "counter"},
        {"berth_calls_total", "counter"},
        {"berth_deliveries_total", "counter"},
        {"berth_waiting_fetches", "gauge"},
        {"berth_outbox_pending", "gauge"},
        {"berth_deliveries_poisoned", "gauge"},
        {"berth_body_reads_total", "counter"},
        {"berth_instances", "gauge"},
        {"berth_deployments", "gauge"},
        {"berth_task_latency_seconds", "histogram"},
        {"berth_fetch_wait_seconds", "histogram"},
        {"berth_commit_batch_requests", "histogram"},
        {"berth_fsync_seconds", "histogram"},
    };
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        char type[128];
        snprintf(type, sizeof(type), "# TYPE %s %s\n", families[i][0], families[i][1]);
        cr_assert(strstr(body, type) != NULL, "missing: %s", type);
    }
    cr_assert(strstr(body, "berth_fsync_seconds_bucket{le=\"+Inf\"}") != NULL);
    cr_assert(value(body, "berth_fsync_seconds_count") >= 1, "the submit was synced");
    cr_assert(value(body, "berth_commit_batch_requests_count") >= 1);
    free(body);
    cr_assert_eq(http_get("/nothing", &body), 404);
    free(body);
}

DTest(metrics, counters_move_by_exactly_what_was_done)
{
    for (int i = 0; i < 5; i++)
        w_free(w_submit(C, "count", "x", NULL));
    Berth__V1__Response *f = w_fetch(C, "w", "count", 10, 60000, 0);
    cr_assert_eq(f->fetch->n_tasks, 5);
    Berth__V1__Task **t = f->fetch->tasks;
    for (int i = 0; i < 2; i++)
        w_free(w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, t[i]->id, "w", t[i]->lock_token));
    w_free(w_guarded(C, BERTH__V1__REQUEST__METHOD_REFUSE, t[2]->id, "w", t[2]->lock_token));
    w_free(w_guarded(C, BERTH__V1__REQUEST__METHOD_FAIL, t[3]->id, "w", t[3]->lock_token));
    w_free(f);
    Berth__V1__Response *again = w_fetch(C, "w", "count", 10, 60000, 0); /* none fetchable */
    cr_assert_eq(again->fetch->n_tasks, 0);
    w_free(again);

    char *body;
    cr_assert_eq(http_get("/metrics", &body), 200);
    cr_assert_eq(value(body, "berth_tasks_submitted_total{topic=\"count\"}"), 5);
    cr_assert_eq(value(body, "berth_tasks_fetched_total{topic=\"count\"}"), 5);
    cr_assert_eq(value(body, "berth_tasks_completed_total{topic=\"count\"}"), 2);
    cr_assert_eq(value(body, "berth_tasks_refused_total{topic=\"count\"}"), 1);
    cr_assert_eq(value(body, "berth_tasks_failed_total{topic=\"count\"}"), 1);
    cr_assert_eq(value(body, "berth_tasks_terminal_total{topic=\"count\"}"), 1,
                 "--retries 1: the failure spent the budget");
    cr_assert_eq(value(body, "berth_deliveries_total{channel=\"count\",outcome=\"delivered\"}"), 5);
    cr_assert_eq(value(body, "berth_task_latency_seconds_count"), 2, "two completions");
    cr_assert_eq(value(body, "berth_fetch_wait_seconds_count"), 2, "two fetches answered");
    cr_assert_eq(value(body, "berth_tasks{topic=\"count\",state=\"locked\"}"), 1, "t[4] is held");
    cr_assert_eq(value(body, "berth_tasks{topic=\"count\",state=\"terminal\"}"), 1);
    cr_assert_eq(value(body, "berth_tasks{topic=\"count\",state=\"ready\"}"), 0);
    cr_assert_eq(value(body, "berth_tasks{topic=\"count\",state=\"backoff\"}"), 0);
    cr_assert_eq(value(body, "berth_tasks{topic=\"count\",state=\"delayed\"}"), 0);
    free(body);

    /* A delayed task is counted as such until its instant. */
    Berth__V1__SubmitRequest later = BERTH__V1__SUBMIT_REQUEST__INIT;
    later.topic = "count";
    later.has_delay_ms = 1;
    later.delay_ms = 3600000;
    Berth__V1__Request lr = BERTH__V1__REQUEST__INIT;
    lr.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    lr.submit = &later;
    w_free(w_call(C, &lr, 0));
    cr_assert_eq(http_get("/metrics", &body), 200);
    cr_assert_eq(value(body, "berth_tasks{topic=\"count\",state=\"delayed\"}"), 1);
    cr_assert_eq(value(body, "berth_tasks{topic=\"count\",state=\"ready\"}"), 0);
    free(body);

    /* A call, resolved. */
    Berth__V1__CallRequest c = BERTH__V1__CALL_REQUEST__INIT;
    c.topic = "count-calls";
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
    req.call = &c;
    w_free(w_call(C, &req, 0));
    cr_assert_eq(scrape("berth_calls_total{state=\"accepted\"}"), 1);
    cr_assert_eq(scrape("berth_instances{state=\"waiting\"}"), 1);
    f = w_fetch(C, "w", "count-calls", 1, 60000, 0);
    w_free(w_guarded(C, BERTH__V1__REQUEST__METHOD_COMPLETE, f->fetch->tasks[0]->id, "w",
                     f->fetch->tasks[0]->lock_token));
    w_free(f);
    cr_assert_eq(scrape("berth_calls_total{state=\"resolved\"}"), 1);
    cr_assert_eq(scrape("berth_instances{state=\"waiting\"}"), 0);
    /* --channel declared: the deployment "boot", live */
    cr_assert_eq(scrape("berth_deployments{state=\"live\"}"), 1);
    cr_assert_eq(scrape("berth_deployments{state=\"retired\"}"), 0);
}

Test(metrics_bound, past_metrics_topics_max_topics_share_one_series)
{
    /* Series per topic are bounded: a client inventing topic names cannot
     * grow /metrics (nor berthd's memory) without end. */
    static const char *const extra[] = {"--metrics-topics-max", "2", NULL};
    d_start(&D, extra);
    C = d_client(&D);
    const char *topics[] = {"t1", "t2", "t3", "t4", "t3"};
    for (int i = 0; i < 5; i++)
        w_free(w_submit(C, topics[i], "x", NULL));
    char *body;
    cr_assert_eq(http_get("/metrics", &body), 200);
    cr_assert_eq(value(body, "berth_tasks_submitted_total{topic=\"t1\"}"), 1);
    cr_assert_eq(value(body, "berth_tasks_submitted_total{topic=\"t2\"}"), 1);
    cr_assert_eq(value(body, "berth_tasks_submitted_total{topic=\"_other\"}"), 3);
    cr_assert_eq(value(body, "berth_tasks_submitted_total{topic=\"t3\"}"), -1);
    free(body);
    bc_close(C);
    d_stop(&D);
    d_cleanup(&D);
}

DTest(metrics, berth_top_shows_topics_and_rates)
{
    w_free(w_submit(C, "topped", "x", NULL));
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s top --metrics %s --count 2 2>/dev/null", BERTH_CLI_PATH,
             D.metrics);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char out[8192];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    cr_assert_eq(WEXITSTATUS(status), 0, "%s", out);
    cr_assert(strstr(out, "topped") != NULL, "%s", out);
    cr_assert(strstr(out, "done/s") != NULL, "%s", out);
    cr_assert(strstr(out, "fsync p50") != NULL, "%s", out);
    snprintf(cmd, sizeof(cmd), "%s top --metrics http://127.0.0.1:1 --count 1 >/dev/null 2>&1",
             BERTH_CLI_PATH);
    cr_assert_eq(WEXITSTATUS(system(cmd)), 4, "unreachable: exit 4");
}
