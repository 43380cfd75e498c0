/*
 * convert.c — see convert.h. Decodes on nng's threads and encodes on the
 * engine's commit thread, never on the engine's actor thread: the engine
 * only hands over a finished reply.
 *
 * The generated structs are not const-correct; the casts that drop const
 * below only let protobuf-c read engine memory while packing.
 */
#include "gateway/convert.h"

#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/err.h"

typedef struct gw_chunk {
    struct gw_chunk *next;
    size_t used, cap;
    max_align_t data[];
} gw_chunk;

void *gw_arena_alloc(gw_arena *a, size_t n)
{
    n = (n + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
    gw_chunk *c = a->head;
    if (c == NULL || c->cap - c->used < n) {
        size_t cap = n > 4096 ? n : 4096;
        c = malloc(sizeof(*c) + cap);
        if (c == NULL)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void gw_arena_reset(gw_arena *a)
{
    gw_chunk *c = a->head;
    while (c != NULL) {
        gw_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

/* ---- wire → engine ---- */

/* Each map<string,string> field has its own generated entry type: one
 * converter per type, sharing the copy. */
#define HEADERS_FROM(fn, entry_type)                                                               \
    static const engine_header *fn(entry_type *const *e, size_t n, gw_arena *a, bool *ok)          \
    {                                                                                              \
        if (n == 0)                                                                                \
            return NULL;                                                                           \
        engine_header *hs = gw_arena_alloc(a, n * sizeof(*hs));                                    \
        if (hs == NULL) {                                                                          \
            *ok = false;                                                                           \
            return NULL;                                                                           \
        }                                                                                          \
        for (size_t i = 0; i < n; i++) {                                                           \
            hs[i].name = e[i]->key ? e[i]->key : "";                                               \
            hs[i].value = e[i]->value ? e[i]->value : "";                                          \
        }                                                                                          \
        return hs;                                                                                 \
    }

HEADERS_FROM(submit_headers, Berth__V1__SubmitRequest__HeadersEntry)
HEADERS_FROM(result_headers, Berth__V1__Result__HeadersEntry)
HEADERS_FROM(call_headers, Berth__V1__CallRequest__HeadersEntry)

/* When and how urgently: the same fields in a SubmitRequest and a
 * CallRequest. */
#define WHEN_FROM(m, s)                                                                            \
    do {                                                                                           \
        (s)->has_not_before_ms = (m)->has_not_before_ms;                                           \
        (s)->not_before_ms = (m)->not_before_ms;                                                   \
        (s)->has_delay_ms = (m)->has_delay_ms;                                                     \
        (s)->delay_ms = (m)->delay_ms;                                                             \
        (s)->has_priority = (m)->has_priority;                                                     \
        (s)->priority = (m)->priority;                                                             \
    } while (0)

static void submit_from(const Berth__V1__SubmitRequest *m, engine_submit_args *s, gw_arena *a,
                        bool *ok)
{
    s->topic = m->topic;
    s->payload = m->has_payload ? m->payload.data : NULL;
    s->payload_len = m->has_payload ? m->payload.len : 0;
    s->headers = submit_headers(m->headers, m->n_headers, a, ok);
    s->n_headers = m->n_headers;
    s->content_type = m->content_type;
    s->idempotency_key = m->idempotency_key;
    WHEN_FROM(m, s);
}

static engine_guard guard_from(const char *task_id, const char *worker_id, const char *token)
{
    return (engine_guard){task_id, worker_id, token};
}

static engine_error error_from(const Berth__V1__Error *e)
{
    if (e == NULL)
        return (engine_error){0};
    return (engine_error){e->code, e->message, e->details};
}

static void complete_from(const Berth__V1__CompleteRequest *m, engine_complete_args *c, gw_arena *a,
                          bool *ok)
{
    c->guard = guard_from(m->task_id, m->worker_id, m->lock_token);
    c->result = NULL;
    if (m->result == NULL)
        return;
    engine_result *r = gw_arena_alloc(a, sizeof(*r));
    if (r == NULL) {
        *ok = false;
        return;
    }
    r->payload = m->result->has_payload ? m->result->payload.data : NULL;
    r->payload_len = m->result->has_payload ? m->result->payload.len : 0;
    r->content_type = m->result->content_type;
    r->headers = result_headers(m->result->headers, m->result->n_headers, a, ok);
    r->n_headers = m->result->n_headers;
    c->result = r;
}

static engine_complete_args *completes_from(Berth__V1__CompleteRequest *const *m, size_t n,
                                            gw_arena *a, bool *ok)
{
    engine_complete_args *items = NULL;
    if (n > 0 && (items = gw_arena_alloc(a, n * sizeof(*items))) == NULL)
        *ok = false;
    for (size_t i = 0; *ok && i < n; i++)
        complete_from(m[i], &items[i], a, ok);
    return items;
}

static void call_from(const Berth__V1__CallRequest *m, engine_call_args *c, gw_arena *a, bool *ok)
{
    engine_submit_args *s = &c->request;
    s->topic = m->topic;
    s->payload = m->has_payload ? m->payload.data : NULL;
    s->payload_len = m->has_payload ? m->payload.len : 0;
    s->headers = call_headers(m->headers, m->n_headers, a, ok);
    s->n_headers = m->n_headers;
    s->content_type = m->content_type;
    s->idempotency_key = m->idempotency_key;
    WHEN_FROM(m, s);
    c->retry = NULL;
    const Berth__V1__RetryPolicy *p = m->retry;
    if (p == NULL)
        return;
    engine_retry_policy *r = gw_arena_alloc(a, sizeof(*r));
    if (r == NULL) {
        *ok = false;
        return;
    }
    *r = (engine_retry_policy){
        .has_timeout_ms = p->has_timeout_ms,
        .timeout_ms = p->timeout_ms,
        .has_max_attempts = p->has_max_attempts,
        .max_attempts = p->max_attempts,
        .has_initial_backoff_ms = p->has_initial_backoff_ms,
        .initial_backoff_ms = p->initial_backoff_ms,
        .has_max_backoff_ms = p->has_max_backoff_ms,
        .max_backoff_ms = p->max_backoff_ms,
        .has_multiplier = p->has_multiplier,
        .multiplier = p->multiplier,
        .non_retryable_codes = (const char *const *)p->non_retryable_codes,
        .n_non_retryable_codes = p->n_non_retryable_codes,
    };
    c->retry = r;
}

int gw_request_from_wire(const Berth__V1__Request *in, engine_request *out, gw_arena *a,
                         engine_status *st)
{
    memset(out, 0, sizeof(*out));
    memset(st, 0, sizeof(*st));
    bool ok = true;
    switch (in->method_case) {
    case BERTH__V1__REQUEST__METHOD_SUBMIT:
        out->op = ENGINE_OP_SUBMIT;
        submit_from(in->submit, &out->u.submit, a, &ok);
        break;
    case BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH: {
        const Berth__V1__SubmitBatchRequest *m = in->submit_batch;
        out->op = ENGINE_OP_SUBMIT_BATCH;
        engine_submit_args *items = NULL;
        if (m->n_items > 0 && (items = gw_arena_alloc(a, m->n_items * sizeof(*items))) == NULL)
            ok = false;
        for (size_t i = 0; ok && i < m->n_items; i++)
            submit_from(m->items[i], &items[i], a, &ok);
        out->u.submit_batch.items = items;
        out->u.submit_batch.n = m->n_items;
        break;
    }
    case BERTH__V1__REQUEST__METHOD_FETCH: {
        const Berth__V1__FetchRequest *m = in->fetch;
        out->op = ENGINE_OP_FETCH;
        out->u.fetch = (engine_fetch_args){
            .worker_id = m->worker_id,
            .topics = (const char *const *)m->topics,
            .n_topics = m->n_topics,
            .has_max_tasks = m->has_max_tasks,
            .max_tasks = m->max_tasks,
            .has_lock_ms = m->has_lock_ms,
            .lock_ms = m->lock_ms,
            .has_wait_ms = m->has_wait_ms,
            .wait_ms = m->wait_ms,
            .completes = completes_from(m->completes, m->n_completes, a, &ok),
            .n_completes = m->n_completes,
        };
        break;
    }
    case BERTH__V1__REQUEST__METHOD_COMPLETE:
        out->op = ENGINE_OP_COMPLETE;
        complete_from(in->complete, &out->u.complete, a, &ok);
        break;
    case BERTH__V1__REQUEST__METHOD_COMPLETE_BATCH: {
        const Berth__V1__CompleteBatchRequest *m = in->complete_batch;
        out->op = ENGINE_OP_COMPLETE_BATCH;
        out->u.complete_batch.items = completes_from(m->items, m->n_items, a, &ok);
        out->u.complete_batch.n = m->n_items;
        break;
    }
    case BERTH__V1__REQUEST__METHOD_FAIL: {
        const Berth__V1__FailRequest *m = in->fail;
        out->op = ENGINE_OP_FAIL;
        out->u.fail = (engine_fail_args){
            .guard = guard_from(m->task_id, m->worker_id, m->lock_token),
            .error = error_from(m->error),
            .has_retry_in_ms = m->has_retry_in_ms,
            .retry_in_ms = m->retry_in_ms,
            .has_retries_left = m->has_retries_left,
            .retries_left = m->retries_left,
        };
        break;
    }
    case BERTH__V1__REQUEST__METHOD_REFUSE: {
        const Berth__V1__RefuseRequest *m = in->refuse;
        out->op = ENGINE_OP_REFUSE;
        out->u.refuse.guard = guard_from(m->task_id, m->worker_id, m->lock_token);
        out->u.refuse.error = error_from(m->error);
        break;
    }
    case BERTH__V1__REQUEST__METHOD_EXTEND_LOCK: {
        const Berth__V1__ExtendLockRequest *m = in->extend_lock;
        out->op = ENGINE_OP_EXTEND_LOCK;
        out->u.extend.guard = guard_from(m->task_id, m->worker_id, m->lock_token);
        out->u.extend.has_lock_ms = m->has_lock_ms;
        out->u.extend.lock_ms = m->lock_ms;
        break;
    }
    case BERTH__V1__REQUEST__METHOD_RELEASE: {
        const Berth__V1__ReleaseRequest *m = in->release;
        out->op = ENGINE_OP_RELEASE;
        out->u.release = guard_from(m->task_id, m->worker_id, m->lock_token);
        break;
    }
    case BERTH__V1__REQUEST__METHOD_CALL:
        out->op = ENGINE_OP_CALL;
        call_from(in->call, &out->u.call, a, &ok);
        break;
    case BERTH__V1__REQUEST__METHOD_AWAIT_CALL: {
        const Berth__V1__AwaitCallRequest *m = in->await_call;
        out->op = ENGINE_OP_AWAIT_CALL;
        out->u.await_call = (engine_await_args){
            .instance_id = m->instance_id,
            .has_wait_ms = m->has_wait_ms,
            .wait_ms = m->wait_ms,
        };
        break;
    }
    default:
        if (in->base.n_unknown_fields > 0) {
            st->code = ENGINE_CODE_UNIMPLEMENTED;
            snprintf(st->message, sizeof(st->message),
                     "unknown method (Request field %u): this server does not know it",
                     in->base.unknown_fields[0].tag);
        } else {
            st->code = ENGINE_CODE_INVALID_ARGUMENT;
            snprintf(st->message, sizeof(st->message), "the request names no method");
        }
        return BERTH_EINVAL;
    }
    if (!ok) {
        st->code = ENGINE_CODE_RESOURCE_EXHAUSTED;
        snprintf(st->message, sizeof(st->message), "out of memory");
        return BERTH_ENOMEM;
    }
    return BERTH_OK;
}

/* ---- engine → wire ---- */

void gw_status_to_wire(const engine_status *st, Berth__V1__Status *w)
{
    berth__v1__status__init(w);
    w->has_code = 1;
    w->code = (Berth__V1__Code)st->code;
    if (st->message[0] != '\0')
        w->message = (char *)st->message;
    if (st->verdict != ENGINE_VERDICT_NONE) {
        w->has_verdict = 1;
        w->verdict = (Berth__V1__Status__Verdict)st->verdict;
    }
    if (st->engine_code != NULL)
        w->engine_code = (char *)st->engine_code;
    if (st->engine_code != NULL || st->code == ENGINE_CODE_UNAVAILABLE) {
        w->has_retryable = 1;
        w->retryable = st->retryable;
    }
    if (st->field[0] != '\0')
        w->field = (char *)st->field;
    if (st->has_limit) {
        w->has_limit = 1;
        w->limit = st->limit;
    }
}

static int pack(const Berth__V1__Response *resp, nng_msg **out)
{
    size_t n = berth__v1__response__get_packed_size(resp);
    if (nng_msg_alloc(out, n) != 0)
        return BERTH_ENOMEM;
    berth__v1__response__pack(resp, nng_msg_body(*out));
    return BERTH_OK;
}

int gw_encode_status(const engine_status *st, nng_msg **out)
{
    Berth__V1__Response resp = BERTH__V1__RESPONSE__INIT;
    Berth__V1__Status w;
    gw_status_to_wire(st, &w);
    resp.status = &w;
    return pack(&resp, out);
}

static void *alloc_n(gw_arena *a, size_t n, size_t size, bool *ok)
{
    if (n == 0)
        return NULL;
    void *p = gw_arena_alloc(a, n * size);
    if (p == NULL)
        *ok = false;
    return p;
}

/* The reply's statuses (a complete_batch's, a fused fetch's). */
static Berth__V1__Status **statuses_to_wire(const engine_reply *r, gw_arena *a, bool *ok)
{
    Berth__V1__Status *sts = alloc_n(a, r->n_statuses, sizeof(*sts), ok);
    Berth__V1__Status **p = alloc_n(a, r->n_statuses, sizeof(*p), ok);
    for (size_t i = 0; *ok && i < r->n_statuses; i++) {
        gw_status_to_wire(&r->statuses[i], &sts[i]);
        p[i] = &sts[i];
    }
    return p;
}

static Berth__V1__Task *task_to_wire(const engine_task *t, gw_arena *a, bool *ok)
{
    Berth__V1__Task *w = gw_arena_alloc(a, sizeof(*w));
    if (w == NULL) {
        *ok = false;
        return NULL;
    }
    berth__v1__task__init(w);
    w->id = (char *)t->id;
    w->topic = (char *)t->topic;
    w->has_payload = 1;
    w->payload.data = (uint8_t *)t->payload;
    w->payload.len = t->payload_len;
    Berth__V1__Task__HeadersEntry *hs = alloc_n(a, t->n_headers, sizeof(*hs), ok);
    w->headers = alloc_n(a, t->n_headers, sizeof(*w->headers), ok);
    if (!*ok)
        return NULL;
    for (size_t i = 0; i < t->n_headers; i++) {
        berth__v1__task__headers_entry__init(&hs[i]);
        hs[i].key = (char *)t->headers[i].name;
        hs[i].value = (char *)t->headers[i].value;
        w->headers[i] = &hs[i];
    }
    w->n_headers = t->n_headers;
    w->content_type = (char *)t->content_type;
    if (t->instance_id[0] != '\0')
        w->instance_id = (char *)t->instance_id;
    w->has_attempt = 1;
    w->attempt = t->attempt;
    w->has_retries_left = 1;
    w->retries_left = t->retries_left;
    w->lock_token = (char *)t->lock_token;
    w->has_lock_expires_at_ms = 1;
    w->lock_expires_at_ms = t->lock_expires_at_ms;
    w->has_created_at_ms = 1;
    w->created_at_ms = t->created_at_ms;
    w->has_priority = 1;
    w->priority = t->priority;
    w->has_available_at_ms = 1;
    w->available_at_ms = t->available_at_ms;
    return w;
}

static void instance_to_wire(const engine_instance *i, Berth__V1__Instance *w,
                             Berth__V1__Result *res, Berth__V1__Error *err, gw_arena *a, bool *ok)
{
    w->id = (char *)i->id;
    w->has_state = 1;
    w->state = (Berth__V1__Instance__State)i->state;
    w->has_attempt = 1;
    w->attempt = i->attempt;
    w->has_created_at_ms = 1;
    w->created_at_ms = i->created_at_ms;
    if (i->resolved_at_ms != 0) {
        w->has_resolved_at_ms = 1;
        w->resolved_at_ms = i->resolved_at_ms;
    }
    if (i->has_result) {
        res->has_payload = 1;
        res->payload.data = (uint8_t *)i->result.payload;
        res->payload.len = i->result.payload_len;
        res->content_type = (char *)i->result.content_type;
        size_t n = i->result.n_headers;
        Berth__V1__Result__HeadersEntry *hs = alloc_n(a, n, sizeof(*hs), ok);
        res->headers = alloc_n(a, n, sizeof(*res->headers), ok);
        if (!*ok)
            return;
        for (size_t k = 0; k < n; k++) {
            berth__v1__result__headers_entry__init(&hs[k]);
            hs[k].key = (char *)i->result.headers[k].name;
            hs[k].value = (char *)i->result.headers[k].value;
            res->headers[k] = &hs[k];
        }
        res->n_headers = n;
        w->result = res;
    }
    if (i->has_error) {
        err->code = (char *)i->error.code;
        err->message = (char *)i->error.message;
        err->details = (char *)i->error.details;
        w->error = err;
    }
}

int gw_encode_reply(const engine_reply *r, gw_arena *a, nng_msg **out)
{
    Berth__V1__Response resp = BERTH__V1__RESPONSE__INIT;
    Berth__V1__Status st;
    gw_status_to_wire(&r->status, &st);
    resp.status = &st;
    if (r->status.code != ENGINE_CODE_OK && r->op == ENGINE_OP_FETCH && r->n_statuses > 0) {
        /* A fetch that failed after applying its completions still says
         * how each went: they are kept, whatever became of the claim. */
        bool ok = true;
        Berth__V1__FetchResponse fetch = BERTH__V1__FETCH_RESPONSE__INIT;
        fetch.complete_statuses = statuses_to_wire(r, a, &ok);
        fetch.n_complete_statuses = ok ? r->n_statuses : 0;
        resp.method_case = BERTH__V1__RESPONSE__METHOD_FETCH;
        resp.fetch = &fetch;
        return pack(&resp, out);
    }
    if (r->status.code != ENGINE_CODE_OK)
        return pack(&resp, out); /* a failure carries no payload */

    bool ok = true;
    /* Method members live on the stack; their arrays in the arena. */
    Berth__V1__SubmitResponse sub = BERTH__V1__SUBMIT_RESPONSE__INIT;
    Berth__V1__SubmitBatchResponse subb = BERTH__V1__SUBMIT_BATCH_RESPONSE__INIT;
    Berth__V1__FetchResponse fetch = BERTH__V1__FETCH_RESPONSE__INIT;
    Berth__V1__CompleteResponse comp = BERTH__V1__COMPLETE_RESPONSE__INIT;
    Berth__V1__CompleteBatchResponse compb = BERTH__V1__COMPLETE_BATCH_RESPONSE__INIT;
    Berth__V1__FailResponse fail = BERTH__V1__FAIL_RESPONSE__INIT;
    Berth__V1__RefuseResponse ref = BERTH__V1__REFUSE_RESPONSE__INIT;
    Berth__V1__ExtendLockResponse ext = BERTH__V1__EXTEND_LOCK_RESPONSE__INIT;
    Berth__V1__ReleaseResponse rel = BERTH__V1__RELEASE_RESPONSE__INIT;
    Berth__V1__CallResponse call = BERTH__V1__CALL_RESPONSE__INIT;
    Berth__V1__AwaitCallResponse awaitr = BERTH__V1__AWAIT_CALL_RESPONSE__INIT;
    Berth__V1__Instance inst = BERTH__V1__INSTANCE__INIT;
    Berth__V1__Result res = BERTH__V1__RESULT__INIT;
    Berth__V1__Error err = BERTH__V1__ERROR__INIT;

    switch (r->op) {
    case ENGINE_OP_SUBMIT:
        resp.method_case = BERTH__V1__RESPONSE__METHOD_SUBMIT;
        resp.submit = &sub;
        if (r->n_submitted == 1) {
            sub.id = (char *)r->submitted[0].id;
            sub.has_duplicate = 1;
            sub.duplicate = r->submitted[0].duplicate;
        }
        break;
    case ENGINE_OP_SUBMIT_BATCH: {
        resp.method_case = BERTH__V1__RESPONSE__METHOD_SUBMIT_BATCH;
        resp.submit_batch = &subb;
        Berth__V1__SubmitResponse *items = alloc_n(a, r->n_submitted, sizeof(*items), &ok);
        subb.items = alloc_n(a, r->n_submitted, sizeof(*subb.items), &ok);
        for (size_t i = 0; ok && i < r->n_submitted; i++) {
            berth__v1__submit_response__init(&items[i]);
            items[i].id = (char *)r->submitted[i].id;
            items[i].has_duplicate = 1;
            items[i].duplicate = r->submitted[i].duplicate;
            subb.items[i] = &items[i];
        }
        subb.n_items = ok ? r->n_submitted : 0;
        break;
    }
    case ENGINE_OP_FETCH:
        resp.method_case = BERTH__V1__RESPONSE__METHOD_FETCH;
        resp.fetch = &fetch;
        fetch.tasks = alloc_n(a, r->n_tasks, sizeof(*fetch.tasks), &ok);
        for (size_t i = 0; ok && i < r->n_tasks; i++)
            fetch.tasks[i] = task_to_wire(&r->tasks[i], a, &ok);
        fetch.n_tasks = ok ? r->n_tasks : 0;
        fetch.complete_statuses = statuses_to_wire(r, a, &ok);
        fetch.n_complete_statuses = ok ? r->n_statuses : 0;
        break;
    case ENGINE_OP_COMPLETE:
        resp.method_case = BERTH__V1__RESPONSE__METHOD_COMPLETE;
        resp.complete = &comp;
        comp.has_duplicate = 1;
        comp.duplicate = r->duplicate;
        break;
    case ENGINE_OP_COMPLETE_BATCH: {
        resp.method_case = BERTH__V1__RESPONSE__METHOD_COMPLETE_BATCH;
        resp.complete_batch = &compb;
        compb.statuses = statuses_to_wire(r, a, &ok);
        compb.n_statuses = ok ? r->n_statuses : 0;
        break;
    }
    case ENGINE_OP_FAIL:
        resp.method_case = BERTH__V1__RESPONSE__METHOD_FAIL;
        resp.fail = &fail;
        fail.has_terminal = 1;
        fail.terminal = r->terminal;
        fail.has_retries_left = 1;
        fail.retries_left = r->retries_left;
        if (!r->terminal) {
            fail.has_available_at_ms = 1;
            fail.available_at_ms = r->available_at_ms;
        }
        break;
    case ENGINE_OP_REFUSE:
        resp.method_case = BERTH__V1__RESPONSE__METHOD_REFUSE;
        resp.refuse = &ref;
        break;
    case ENGINE_OP_EXTEND_LOCK:
        resp.method_case = BERTH__V1__RESPONSE__METHOD_EXTEND_LOCK;
        resp.extend_lock = &ext;
        ext.has_lock_expires_at_ms = 1;
        ext.lock_expires_at_ms = r->lock_expires_at_ms;
        break;
    case ENGINE_OP_RELEASE:
        resp.method_case = BERTH__V1__RESPONSE__METHOD_RELEASE;
        resp.release = &rel;
        break;
    case ENGINE_OP_CALL:
        resp.method_case = BERTH__V1__RESPONSE__METHOD_CALL;
        resp.call = &call;
        if (r->n_submitted == 1) {
            call.instance_id = (char *)r->submitted[0].id;
            call.has_duplicate = 1;
            call.duplicate = r->submitted[0].duplicate;
        }
        break;
    case ENGINE_OP_AWAIT_CALL:
        resp.method_case = BERTH__V1__RESPONSE__METHOD_AWAIT_CALL;
        resp.await_call = &awaitr;
        awaitr.instance = &inst;
        instance_to_wire(&r->instance, &inst, &res, &err, a, &ok);
        break;
    default:
        break;
    }
    if (!ok) {
        engine_status oom = {.code = ENGINE_CODE_RESOURCE_EXHAUSTED};
        snprintf(oom.message, sizeof(oom.message), "out of memory encoding the response");
        return gw_encode_status(&oom, out);
    }
    return pack(&resp, out);
}
