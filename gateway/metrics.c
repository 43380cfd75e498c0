/*
 * metrics.c — see metrics.h. Handlers run on nng's HTTP threads and only
 * hand a METRICS request to the engine; its answer is formatted on the
 * engine's commit thread, which finishes the HTTP exchange.
 */
#include "gateway/metrics.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "store/err.h"

struct gw_metrics {
    engine *e;
    atomic_bool stopping; /* gw_metrics_stop(): no scrape reaches the engine */
    atomic_int busy;      /* scrapes between their start and their answer */
    nng_http_server *srv;
    nng_http_handler *metrics, *health;
    bool started;  /* the HTTP server serves */
    char url[160]; /* as given; once started, a port 0 resolved */
};

typedef struct job {
    engine_request req;
    nng_aio *aio;
    bool health;
    struct gw_metrics *m;
} job;

static void finish(nng_aio *aio, uint16_t status, const char *body, size_t len)
{
    nng_http_res *res;
    if (nng_http_res_alloc(&res) != 0) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_http_res_set_status(res, status);
    nng_http_res_set_header(res, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    if (nng_http_res_copy_data(res, body, len) != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

/* A label value, escaped as the exposition format wants. */
static void label(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', f);
        if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

typedef uint64_t (*topic_field)(const engine_topic_counters *c);

#define FIELD(fn, member)                                                                          \
    static uint64_t fn(const engine_topic_counters *c)                                             \
    {                                                                                              \
        return c->member;                                                                          \
    }
FIELD(f_submitted, submitted)
FIELD(f_fetched, fetched)
FIELD(f_completed, completed)
FIELD(f_failed, failed)
FIELD(f_terminal, terminal)
FIELD(f_refused, refused)

static void per_topic(FILE *f, const engine_metrics *m, const char *name, const char *help,
                      topic_field get)
{
    family(f, name, "counter", help);
    for (size_t i = 0; i < m->n_topics; i++) {
        fprintf(f, "%s{topic=\"", name);
        label(f, m->topics[i].topic);
        fprintf(f, "\"} %" PRIu64 "\n", get(&m->topics[i]));
    }
}

static void histogram(FILE *f, const char *name, const char *help, const engine_histogram *h)
{
    family(f, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        fprintf(f, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, h->bounds[i], cum);
    }
    cum += h->counts[h->n_bounds];
    fprintf(f, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
    fprintf(f, "%s_sum %.6f\n%s_count %" PRIu64 "\n", name, h->sum, name, h->count);
}

static void exposition(FILE *f, const engine_reply *r)
{
    const engine_metrics *m = &r->metrics;
    const engine_stats *s = &r->stats;
    per_topic(f, m, "berth_tasks_submitted_total", "Tasks accepted (submits and calls).",
              f_submitted);
    per_topic(f, m, "berth_tasks_fetched_total", "Tasks claimed by a fetch.", f_fetched);
    per_topic(f, m, "berth_tasks_completed_total", "Tasks completed.", f_completed);
    per_topic(f, m, "berth_tasks_failed_total", "Failures reported by workers.", f_failed);
    per_topic(f, m, "berth_tasks_terminal_total", "Tasks whose failure budget ran out.",
              f_terminal);
    per_topic(f, m, "berth_tasks_refused_total", "Tasks refused by workers.", f_refused);
    family(f, "berth_calls_total", "counter", "Calls accepted, and calls ended by how.");
    fprintf(f,
            "berth_calls_total{state=\"accepted\"} %" PRIu64 "\n"
            "berth_calls_total{state=\"resolved\"} %" PRIu64 "\n"
            "berth_calls_total{state=\"failed\"} %" PRIu64 "\n",
            s->calls, s->calls_resolved, s->calls_failed);
    family(f, "berth_deliveries_total", "counter", "Deliveries handed to a sink, by outcome.");
    for (size_t i = 0; i < m->n_topics; i++) {
        static const char *const outcome[] = {"delivered", "retried", "poisoned", "rejected"};
        const uint64_t v[] = {m->topics[i].delivered, m->topics[i].retried, m->topics[i].poisoned,
                              m->topics[i].rejected};
        for (int k = 0; k < 4; k++) {
            fprintf(f, "berth_deliveries_total{channel=\"");
            label(f, m->topics[i].topic);
            fprintf(f, "\",outcome=\"%s\"} %" PRIu64 "\n", outcome[k], v[k]);
        }
    }
    /* On a shared store, the gauges of tasks, calls, the outbox and the
     * deployments are the cluster's, the same on every replica:
     * scope="cluster" says not to sum them over replicas (everything else
     * here is the replica's own). */
    const char *scope = m->shared ? ",scope=\"cluster\"" : "";
    family(f, "berth_tasks", "gauge",
           m->shared ? "Tasks by topic and state, of the whole cluster (at most 1 s old)."
                     : "Tasks by topic and state.");
    for (size_t i = 0; i < r->n_topic_stats; i++) {
        const engine_topic_stats *t = &r->topic_stats[i];
        static const char *const state[] = {"ready", "locked", "backoff", "terminal", "delayed"};
        const uint64_t v[] = {t->ready, t->locked, t->backoff, t->terminal, t->delayed};
        for (int k = 0; k < 5; k++) {
            fprintf(f, "berth_tasks{topic=\"");
            label(f, t->topic);
            fprintf(f, "\",state=\"%s\"%s} %" PRIu64 "\n", state[k], scope, v[k]);
        }
    }
    family(f, "berth_waiting_fetches", "gauge", "Long polls (fetches and awaits) waiting.");
    fprintf(f, "berth_waiting_fetches %" PRIu64 "\n", s->waiting_fetches);
    /* (the cluster's too, on a shared store: the outbox and the
     * deployments are the database's) */
    const char *only = m->shared ? "{scope=\"cluster\"}" : "";
    family(f, "berth_outbox_pending", "gauge", "Deliveries not yet handed to their sink.");
    fprintf(f, "berth_outbox_pending%s %" PRIu64 "\n", only, s->outbox_pending);
    family(f, "berth_deliveries_poisoned", "gauge", "Deliveries poisoned, kept for an operator.");
    fprintf(f, "berth_deliveries_poisoned%s %" PRIu64 "\n", only, s->poisoned);
    family(f, "berth_body_reads_total", "counter",
           "Task bodies read back from the store, not found in the body cache.");
    fprintf(f, "berth_body_reads_total %" PRIu64 "\n", s->body_reads);
    family(f, "berth_deployments", "gauge", "Deployment versions, by state.");
    fprintf(f,
            "berth_deployments{state=\"live\"%s} %" PRIu64 "\n"
            "berth_deployments{state=\"draining\"%s} %" PRIu64 "\n"
            "berth_deployments{state=\"retired\"%s} %" PRIu64 "\n",
            scope, s->deployments_live, scope, s->deployments_draining, scope,
            s->deployments_retired);
    family(f, "berth_instances", "gauge",
           m->shared ? "Calls in flight, by state, of the whole cluster (at most 1 s old)."
                     : "Calls in flight, by state.");
    fprintf(f,
            "berth_instances{state=\"waiting\"%s} %" PRIu64 "\n"
            "berth_instances{state=\"backoff\"%s} %" PRIu64 "\n",
            scope, s->instances_waiting, scope, s->instances_backoff);
    histogram(f, "berth_task_latency_seconds", "Submit accepted to completion.", &m->task_latency);
    histogram(f, "berth_fetch_wait_seconds", "A fetch's arrival to its answer.", &m->fetch_wait);
    histogram(f, "berth_commit_batch_requests", "Requests one sync made durable.",
              &m->commit_batch);
    histogram(f, "berth_fsync_seconds", "One sync of the store's log.", &m->fsync);
}

static void engine_answered(void *arg, engine_reply *r)
{
    job *j = arg;
    gw_metrics *m = j->m;
    if (r->status.code != ENGINE_CODE_OK) {
        char body[400];
        int n = snprintf(body, sizeof(body), "unavailable: %s\n", r->status.message);
        finish(j->aio, 503, body, (size_t)n < sizeof(body) ? (size_t)n : sizeof(body) - 1);
    } else if (j->health) {
        finish(j->aio, 200, "ok\n", 3);
    } else {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (f == NULL) {
            finish(j->aio, 503, "out of memory\n", 14);
        } else {
            exposition(f, r);
            fclose(f);
            finish(j->aio, 200, buf, len);
        }
        free(buf);
    }
    engine_reply_free(r);
    free(j);
    atomic_fetch_sub(&m->busy, 1);
}

static void handle(nng_aio *aio, bool health)
{
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    gw_metrics *m = nng_http_handler_get_data(h);
    atomic_fetch_add(&m->busy, 1);
    job *j = atomic_load(&m->stopping) ? NULL : calloc(1, sizeof(*j));
    if (j == NULL) {
        if (atomic_load(&m->stopping))
            finish(aio, 503, "unavailable: berthd is stopping\n", 32);
        else
            finish(aio, 503, "out of memory\n", 14);
        atomic_fetch_sub(&m->busy, 1);
        return;
    }
    j->req.op = ENGINE_OP_METRICS;
    j->aio = aio;
    j->health = health;
    j->m = m;
    if (engine_exec(m->e, &j->req, engine_answered, j) != BERTH_OK) {
        free(j);
        finish(aio, 503, "unavailable: berthd is stopping\n", 32);
        atomic_fetch_sub(&m->busy, 1);
    }
}

static void on_metrics(nng_aio *aio)
{
    handle(aio, false);
}

static void on_health(nng_aio *aio)
{
    handle(aio, true);
}

int gw_metrics_open(engine *e, const char *url, gw_metrics **out, char *err, size_t errlen)
{
    *out = NULL;
    gw_metrics *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return BERTH_ENOMEM;
    }
    m->e = e;
    snprintf(m->url, sizeof(m->url), "%s", url);
    nng_url *u = NULL;
    int rv = nng_url_parse(&u, url);
    if (rv == 0 && strcmp(u->u_scheme, "http") != 0)
        rv = NNG_EINVAL;
    if (rv == 0)
        rv = nng_http_server_hold(&m->srv, u);
    if (rv == 0)
        rv = nng_http_handler_alloc(&m->metrics, "/metrics", on_metrics);
    if (rv == 0)
        rv = nng_http_handler_set_data(m->metrics, m, NULL);
    if (rv == 0)
        rv = nng_http_server_add_handler(m->srv, m->metrics);
    if (rv == 0)
        rv = nng_http_handler_alloc(&m->health, "/healthz", on_health);
    if (rv == 0)
        rv = nng_http_handler_set_data(m->health, m, NULL);
    if (rv == 0)
        rv = nng_http_server_add_handler(m->srv, m->health);
    if (u != NULL)
        nng_url_free(u);
    if (rv != 0) {
        snprintf(err, errlen, "metrics %s: %s (an http://HOST:PORT URL)", url, nng_strerror(rv));
        gw_metrics_close(m);
        return BERTH_EINVAL;
    }
    *out = m;
    return BERTH_OK;
}

int gw_metrics_start(gw_metrics *m, char *err, size_t errlen)
{
    int rv = nng_http_server_start(m->srv);
    if (rv != 0) {
        snprintf(err, errlen, "metrics %s: %s (an http://HOST:PORT URL)", m->url, nng_strerror(rv));
        return BERTH_EINVAL;
    }
    m->started = true;
    nng_url *u = NULL;
    nng_sockaddr sa;
    if (nng_http_server_get_addr(m->srv, &sa) == 0 && sa.s_family == NNG_AF_INET &&
        nng_url_parse(&u, m->url) == 0)
        snprintf(m->url, sizeof(m->url), "http://%s:%u", u->u_hostname,
                 (unsigned)ntohs(sa.s_in.sa_port));
    if (u != NULL)
        nng_url_free(u);
    return BERTH_OK;
}

nng_http_server *gw_metrics_http(gw_metrics *m)
{
    return m->srv;
}

const char *gw_metrics_url(const gw_metrics *m)
{
    return m->url;
}

void gw_metrics_stop(gw_metrics *m)
{
    if (m == NULL)
        return;
    atomic_store(&m->stopping, true);
    /* After engine_stop() the engine answers at once: this is short. */
    struct timespec tick = {0, 5 * 1000000L};
    for (int i = 0; i < 2000 && atomic_load(&m->busy) > 0; i++)
        nanosleep(&tick, NULL);
}

void gw_metrics_close(gw_metrics *m)
{
    if (m == NULL)
        return;
    if (m->srv != NULL) {
        if (m->started)
            nng_http_server_stop(m->srv);
        nng_http_server_release(m->srv); /* frees the handlers it holds */
    } else {
        if (m->metrics)
            nng_http_handler_free(m->metrics);
        if (m->health)
            nng_http_handler_free(m->health);
    }
    free(m);
}
