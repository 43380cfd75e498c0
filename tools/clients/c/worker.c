/* worker.c — see worker.h. */
#include "tools/clients/c/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A completion held for the next fetch, its bytes owned, with room for
 * the request that carries it. */
typedef struct held {
    char id[40], token[40];
    bool has_result;
    uint8_t *result;
    size_t result_len;
    char *content_type;
    Berth__V1__CompleteRequest req;
    Berth__V1__Result res;
} held;

typedef struct loop {
    bc *c;
    const bc_worker *w;
    held *v;
    Berth__V1__CompleteRequest **ip; /* the held ones' requests, as a message lists them */
    size_t n, cap;
} loop;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int timeout_of(const bc_worker *w)
{
    if (w->timeout_ms > 0)
        return w->timeout_ms;
    /* berthd's wait, and some: its default (wait_ms 0) stays under nng's
     * 60 s REQ resend (ARCHITECTURE.md, "Pitfalls"). */
    uint64_t wait = w->wait_ms ? w->wait_ms : 60000;
    return wait > 3600000 ? 3610000 : (int)wait + 10000;
}

static void status(const loop *l, const char *id, const Berth__V1__Status *st)
{
    if (l->w->on_status != NULL)
        l->w->on_status(l->w->ctx, id, st);
}

static void forget(loop *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].result);
        free(l->v[i].content_type);
    }
    l->n = 0;
}

/* Every held completion's fate, told (st NULL: unknown), then dropped. */
static void tell_all(loop *l, const Berth__V1__Status *st)
{
    for (size_t i = 0; i < l->n; i++)
        status(l, l->v[i].id, st);
    forget(l);
}

/* Keeps t's completion for the next request. False: no memory (the task's
 * lock will lapse and it comes back). */
static bool hold(loop *l, const Berth__V1__Task *t, const bc_work *out)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        held *v = realloc(l->v, cap * sizeof(*v));
        if (v != NULL)
            l->v = v;
        Berth__V1__CompleteRequest **ip = v ? realloc(l->ip, cap * sizeof(*ip)) : NULL;
        if (ip == NULL)
            return false;
        l->ip = ip;
        l->cap = cap;
    }
    held *h = &l->v[l->n];
    memset(h, 0, sizeof(*h));
    snprintf(h->id, sizeof(h->id), "%s", t->id ? t->id : "");
    snprintf(h->token, sizeof(h->token), "%s", t->lock_token ? t->lock_token : "");
    if (out->has_result) {
        h->has_result = true;
        h->result_len = out->result_len;
        h->result = malloc(out->result_len ? out->result_len : 1);
        h->content_type = out->content_type ? strdup(out->content_type) : NULL;
        if (h->result == NULL || (out->content_type && h->content_type == NULL)) {
            free(h->result);
            free(h->content_type);
            return false;
        }
        if (out->result_len > 0)
            memcpy(h->result, out->result, out->result_len);
    }
    l->n++;
    return true;
}

/* The held completions as CompleteRequests, in l->ip (built in place:
 * the held array may have moved since the last time). */
static void requests(loop *l)
{
    for (size_t i = 0; i < l->n; i++) {
        held *h = &l->v[i];
        berth__v1__complete_request__init(&h->req);
        h->req.task_id = h->id;
        h->req.worker_id = (char *)l->w->worker_id;
        h->req.lock_token = h->token;
        if (h->has_result) {
            berth__v1__result__init(&h->res);
            h->res.has_payload = 1;
            h->res.payload.data = h->result;
            h->res.payload.len = h->result_len;
            h->res.content_type = h->content_type;
            h->req.result = &h->res;
        }
        l->ip[i] = &h->req;
    }
}

/* Sends the held completions in a complete_batch of their own. */
static void flush(loop *l)
{
    if (l->n == 0)
        return;
    requests(l);
    Berth__V1__CompleteBatchRequest cb = BERTH__V1__COMPLETE_BATCH_REQUEST__INIT;
    cb.items = l->ip;
    cb.n_items = l->n;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE_BATCH;
    req.complete_batch = &cb;
    Berth__V1__Response *r = NULL;
    int rv = bc_call(l->c, &req, timeout_of(l->w), &r);
    if (rv != BC_OK || r->status == NULL) {
        tell_all(l, NULL);
    } else if (r->status->code != BERTH__V1__CODE__OK || r->complete_batch == NULL) {
        tell_all(l, r->status);
    } else {
        for (size_t i = 0; i < l->n; i++)
            status(l, l->v[i].id,
                   i < r->complete_batch->n_statuses ? r->complete_batch->statuses[i] : NULL);
        forget(l);
    }
    if (r != NULL)
        berth__v1__response__free_unpacked(r, NULL);
}

/* A failure or a refusal, sent at once. */
static void end_one(loop *l, const Berth__V1__Task *t, const bc_work *out)
{
    Berth__V1__Error err = BERTH__V1__ERROR__INIT;
    err.code = (char *)(out->code ? out->code : "WORKER_ERROR");
    err.message = (char *)out->message;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    Berth__V1__FailRequest f = BERTH__V1__FAIL_REQUEST__INIT;
    Berth__V1__RefuseRequest rf = BERTH__V1__REFUSE_REQUEST__INIT;
    if (out->outcome == BC_FAIL) {
        f.task_id = t->id;
        f.worker_id = (char *)l->w->worker_id;
        f.lock_token = t->lock_token;
        f.error = &err;
        req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
        req.fail = &f;
    } else {
        rf.task_id = t->id;
        rf.worker_id = (char *)l->w->worker_id;
        rf.lock_token = t->lock_token;
        rf.error = &err;
        req.method_case = BERTH__V1__REQUEST__METHOD_REFUSE;
        req.refuse = &rf;
    }
    Berth__V1__Response *r = NULL;
    int rv = bc_call(l->c, &req, timeout_of(l->w), &r);
    status(l, t->id, rv == BC_OK ? r->status : NULL);
    if (r != NULL)
        berth__v1__response__free_unpacked(r, NULL);
}

/* One fetch, carrying the held completions unless the worker sends them
 * separately. 1: go on; 0: berthd refused the fetch for good. */
static int fetch_once(loop *l)
{
    const bc_worker *w = l->w;
    if (w->separate)
        flush(l);
    size_t n = l->n;
    requests(l);
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    f.worker_id = (char *)w->worker_id;
    f.topics = (char **)w->topics;
    f.n_topics = w->n_topics;
    f.has_max_tasks = w->max_tasks > 0;
    f.max_tasks = w->max_tasks;
    f.has_lock_ms = w->lock_ms > 0;
    f.lock_ms = w->lock_ms;
    /* A fetch that carries completions does not wait: their statuses come
     * back at once, and the next fetch, carrying none, long-polls. */
    f.has_wait_ms = n > 0 || w->wait_ms > 0;
    f.wait_ms = n > 0 ? 0 : w->wait_ms;
    f.completes = l->ip;
    f.n_completes = n;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &f;
    Berth__V1__Response *r = NULL;
    uint64_t t0 = now_ns();
    int rv = bc_call(l->c, &req, timeout_of(w), &r);
    if (w->on_fetch != NULL)
        w->on_fetch(w->ctx, now_ns() - t0);
    int go_on = 1;
    if (rv != BC_OK || r->status == NULL) {
        tell_all(l, NULL); /* applied or not: their locks settle it */
        pause_ms(100);
    } else if (r->status->code != BERTH__V1__CODE__OK) {
        /* A failed fetch says how its completions went when they were
         * applied (it failed after them); without that, none was, and
         * they are still ours: sent again (retryable), or by the final
         * flush when the loop ends. */
        if (r->fetch != NULL && r->fetch->n_complete_statuses == n && n > 0) {
            for (size_t i = 0; i < n; i++)
                status(l, l->v[i].id, r->fetch->complete_statuses[i]);
            forget(l);
        }
        if (!r->status->retryable) {
            fprintf(stderr, "berth worker: fetch refused: %s\n",
                    r->status->message ? r->status->message : "");
            go_on = 0;
        } else {
            pause_ms(100);
        }
    } else if (r->fetch == NULL) {
        tell_all(l, NULL); /* not a fetch's answer: their fate is unknown */
        pause_ms(100);
    } else {
        for (size_t i = 0; i < n; i++)
            status(l, l->v[i].id,
                   i < r->fetch->n_complete_statuses ? r->fetch->complete_statuses[i] : NULL);
        forget(l);
        for (size_t i = 0; i < r->fetch->n_tasks; i++) {
            const Berth__V1__Task *t = r->fetch->tasks[i];
            bc_work out;
            memset(&out, 0, sizeof(out));
            w->work(w->ctx, t, &out);
            if (out.outcome == BC_COMPLETE) {
                if (!hold(l, t, &out))
                    status(l, t->id, NULL);
            } else {
                end_one(l, t, &out);
            }
        }
    }
    if (r != NULL)
        berth__v1__response__free_unpacked(r, NULL);
    return go_on;
}

int bc_worker_run(bc *c, const bc_worker *w)
{
    loop l = {.c = c, .w = w};
    int rv = BC_OK;
    while (w->stop == NULL || !atomic_load(w->stop)) {
        if (!fetch_once(&l)) {
            rv = BC_EINVAL;
            break;
        }
    }
    flush(&l);
    free(l.v);
    free(l.ip);
    return rv;
}
