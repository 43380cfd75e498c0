/*
 * convert.c — see convert.h. Decodes on nng's threads and encodes on the
 * engine's commit thread, never on the engine's actor thread: the engine
 * only hands over a finished reply.
 *
 * The generated structs are not const-correct; the casts that drop const
 * below only let protobuf-c read engine memory while packing.
 */
#include "gateway/convert.h"

#include <assert.h>
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

/* What a SubmitRequest and a CallRequest share (their headers are of
 * different generated types, converted by the caller). */
#define SUBMIT_FROM(m, s)                                                                          \
    do {                                                                                           \
        (s)->topic = (m)->topic;                                                                   \
        (s)->payload = (m)->has_payload ? (m)->payload.data : NULL;                                \
        (s)->payload_len = (m)->has_payload ? (m)->payload.len : 0;                                \
        (s)->n_headers = (m)->n_headers;                                                           \
        (s)->content_type = (m)->content_type;                                                     \
        (s)->idempotency_key = (m)->idempotency_key;                                               \
        WHEN_FROM(m, s);                                                                           \
    } while (0)

static void submit_from(const Berth__V1__SubmitRequest *m, engine_submit_args *s, gw_arena *a,
                        bool *ok)
{
    SUBMIT_FROM(m, s);
    s->headers = submit_headers(m->headers, m->n_headers, a, ok);
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
    SUBMIT_FROM(m, s);
    s->headers = call_headers(m->headers, m->n_headers, a, ok);
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

/* One method's member onto its engine request (op already set): each
 * takes the member's own generated type. */
static void map_submit(const void *m, engine_request *out, gw_arena *a, bool *ok)
{
    submit_from(m, &out->u.submit, a, ok);
}

static void map_submit_batch(const void *member, engine_request *out, gw_arena *a, bool *ok)
{
    const Berth__V1__SubmitBatchRequest *m = member;
    engine_submit_args *items = NULL;
    if (m->n_items > 0 && (items = gw_arena_alloc(a, m->n_items * sizeof(*items))) == NULL)
        *ok = false;
    for (size_t i = 0; *ok && i < m->n_items; i++)
        submit_from(m->items[i], &items[i], a, ok);
    out->u.submit_batch.items = items;
    out->u.submit_batch.n = m->n_items;
}

static void map_fetch(const void *member, engine_request *out, gw_arena *a, bool *ok)
{
    const Berth__V1__FetchRequest *m = member;
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
        .completes = completes_from(m->completes, m->n_completes, a, ok),
        .n_completes = m->n_completes,
    };
}

static void map_complete(const void *m, engine_request *out, gw_arena *a, bool *ok)
{
    complete_from(m, &out->u.complete, a, ok);
}

static void map_complete_batch(const void *member, engine_request *out, gw_arena *a, bool *ok)
{
    const Berth__V1__CompleteBatchRequest *m = member;
    out->u.complete_batch.items = completes_from(m->items, m->n_items, a, ok);
    out->u.complete_batch.n = m->n_items;
}

static void map_fail(const void *member, engine_request *out, gw_arena *a, bool *ok)
{
    (void)a, (void)ok;
    const Berth__V1__FailRequest *m = member;
    out->u.fail = (engine_fail_args){
        .guard = guard_from(m->task_id, m->worker_id, m->lock_token),
        .error = error_from(m->error),
        .has_retry_in_ms = m->has_retry_in_ms,
        .retry_in_ms = m->retry_in_ms,
        .has_retries_left = m->has_retries_left,
        .retries_left = m->retries_left,
    };
}

static void map_refuse(const void *member, engine_request *out, gw_arena *a, bool *ok)
{
    (void)a, (void)ok;
    const Berth__V1__RefuseRequest *m = member;
    out->u.refuse.guard = guard_from(m->task_id, m->worker_id, m->lock_token);
    out->u.refuse.error = error_from(m->error);
}

static void map_extend_lock(const void *member, engine_request *out, gw_arena *a, bool *ok)
{
    (void)a, (void)ok;
    const Berth__V1__ExtendLockRequest *m = member;
    out->u.extend.guard = guard_from(m->task_id, m->worker_id, m->lock_token);
    out->u.extend.has_lock_ms = m->has_lock_ms;
    out->u.extend.lock_ms = m->lock_ms;
}

static void map_release(const void *member, engine_request *out, gw_arena *a, bool *ok)
{
    (void)a, (void)ok;
    const Berth__V1__ReleaseRequest *m = member;
    out->u.release = guard_from(m->task_id, m->worker_id, m->lock_token);
}

static void map_call(const void *m, engine_request *out, gw_arena *a, bool *ok)
{
    call_from(m, &out->u.call, a, ok);
}

static void map_await_call(const void *member, engine_request *out, gw_arena *a, bool *ok)
{
    (void)a, (void)ok;
    const Berth__V1__AwaitCallRequest *m = member;
    out->u.await_call = (engine_await_args){
        .instance_id = m->instance_id,
        .has_wait_ms = m->has_wait_ms,
        .wait_ms = m->wait_ms,
    };
}

/* A Request that names no method this build knows. */
static int no_method(const Berth__V1__Request *in, engine_status *st)
{
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

/* ---- envelopes: one way to encode ---- */

const void *gw_member(const ProtobufCMessage *env, uint32_t field)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(env->descriptor, field);
    return *(void *const *)((const char *)env + f->offset);
}

int gw_pack(const ProtobufCMessage *m, nng_msg **out)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    if (nng_msg_alloc(out, n) != 0)
        return BERTH_ENOMEM;
    protobuf_c_message_pack(m, nng_msg_body(*out));
    return BERTH_OK;
}

/* Room for an envelope on the stack: a Response or an AdminResponse is a
 * header, a status pointer and a oneof (a case and a pointer). */
#define ENVELOPE_MAX 256

int gw_encode_envelope(const ProtobufCMessageDescriptor *d, const engine_status *st, uint32_t field,
                       void *member, nng_msg **out)
{
    _Alignas(max_align_t) unsigned char buf[ENVELOPE_MAX];
    assert(d->sizeof_message <= sizeof(buf));
    ProtobufCMessage *env = (ProtobufCMessage *)buf;
    protobuf_c_message_init(d, env);
    Berth__V1__Status w;
    gw_status_to_wire(st, &w);
    const ProtobufCFieldDescriptor *sf =
        protobuf_c_message_descriptor_get_field_by_name(d, "status");
    *(Berth__V1__Status **)((char *)env + sf->offset) = &w;
    if (field != 0) {
        const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, field);
        assert(f != NULL && (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF));
        *(void **)((char *)env + f->offset) = member;
        *(uint32_t *)((char *)env + f->quantifier_offset) = field;
    }
    return gw_pack(env, out);
}

/* The envelope that says encoding ran out of memory. */
static int encode_oom(const ProtobufCMessageDescriptor *d, nng_msg **out)
{
    engine_status oom = {.code = ENGINE_CODE_RESOURCE_EXHAUSTED};
    snprintf(oom.message, sizeof(oom.message), "out of memory encoding the response");
    return gw_encode_envelope(d, &oom, 0, NULL, out);
}

int gw_encode_method(const ProtobufCMessageDescriptor *d, const gw_method_out *m,
                     const engine_request *req, const engine_reply *r, gw_arena *a, nng_msg **out)
{
    if (r->status.code != ENGINE_CODE_OK || m == NULL)
        return gw_encode_envelope(d, &r->status, 0, NULL, out); /* a failure carries no payload */
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, m->field);
    const ProtobufCMessageDescriptor *md = f->descriptor;
    void *member = gw_arena_alloc(a, md->sizeof_message);
    if (member == NULL)
        return encode_oom(d, out);
    protobuf_c_message_init(md, member);
    if (m->fill != NULL && !m->fill(member, r, req, a))
        return encode_oom(d, out);
    return gw_encode_envelope(d, &r->status, m->field, member, out);
}

void **gw_arena_array(gw_arena *a, size_t n, size_t size, bool *ok)
{
    if (n == 0)
        return NULL;
    char *items = gw_arena_alloc(a, n * size);
    void **p = gw_arena_alloc(a, n * sizeof(*p));
    if (items == NULL || p == NULL) {
        *ok = false;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        p[i] = items + i * size;
    return p;
}

/* ---- operate replies ---- */

int gw_encode_status(const engine_status *st, nng_msg **out)
{
    return gw_encode_envelope(&berth__v1__response__descriptor, st, 0, NULL, out);
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
    Berth__V1__Status **p =
        (Berth__V1__Status **)gw_arena_array(a, r->n_statuses, sizeof(Berth__V1__Status), ok);
    for (size_t i = 0; *ok && i < r->n_statuses; i++)
        gw_status_to_wire(&r->statuses[i], p[i]);
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

/* The fill of each method's member (the reply is OK): false, no memory. */

/* A submit's or a call's id, and whether it was a duplicate. */
static void submitted_to_wire(const engine_reply *r, char **id, protobuf_c_boolean *has_duplicate,
                              protobuf_c_boolean *duplicate)
{
    if (r->n_submitted != 1)
        return;
    *id = (char *)r->submitted[0].id;
    *has_duplicate = 1;
    *duplicate = r->submitted[0].duplicate;
}

static bool fill_submit(void *member, const engine_reply *r, const engine_request *req, gw_arena *a)
{
    (void)req, (void)a;
    Berth__V1__SubmitResponse *w = member;
    submitted_to_wire(r, &w->id, &w->has_duplicate, &w->duplicate);
    return true;
}

static bool fill_submit_batch(void *member, const engine_reply *r, const engine_request *req,
                              gw_arena *a)
{
    (void)req;
    Berth__V1__SubmitBatchResponse *w = member;
    bool ok = true;
    w->items = (Berth__V1__SubmitResponse **)gw_arena_array(a, r->n_submitted,
                                                            sizeof(Berth__V1__SubmitResponse), &ok);
    for (size_t i = 0; ok && i < r->n_submitted; i++) {
        berth__v1__submit_response__init(w->items[i]);
        w->items[i]->id = (char *)r->submitted[i].id;
        w->items[i]->has_duplicate = 1;
        w->items[i]->duplicate = r->submitted[i].duplicate;
    }
    w->n_items = ok ? r->n_submitted : 0;
    return ok;
}

static bool fill_fetch(void *member, const engine_reply *r, const engine_request *req, gw_arena *a)
{
    (void)req;
    Berth__V1__FetchResponse *w = member;
    bool ok = true;
    w->tasks = alloc_n(a, r->n_tasks, sizeof(*w->tasks), &ok);
    for (size_t i = 0; ok && i < r->n_tasks; i++)
        w->tasks[i] = task_to_wire(&r->tasks[i], a, &ok);
    w->n_tasks = ok ? r->n_tasks : 0;
    w->complete_statuses = statuses_to_wire(r, a, &ok);
    w->n_complete_statuses = ok ? r->n_statuses : 0;
    return ok;
}

static bool fill_complete(void *member, const engine_reply *r, const engine_request *req,
                          gw_arena *a)
{
    (void)req, (void)a;
    Berth__V1__CompleteResponse *w = member;
    w->has_duplicate = 1;
    w->duplicate = r->duplicate;
    return true;
}

static bool fill_complete_batch(void *member, const engine_reply *r, const engine_request *req,
                                gw_arena *a)
{
    (void)req;
    Berth__V1__CompleteBatchResponse *w = member;
    bool ok = true;
    w->statuses = statuses_to_wire(r, a, &ok);
    w->n_statuses = ok ? r->n_statuses : 0;
    return ok;
}

static bool fill_fail(void *member, const engine_reply *r, const engine_request *req, gw_arena *a)
{
    (void)req, (void)a;
    Berth__V1__FailResponse *w = member;
    w->has_terminal = 1;
    w->terminal = r->terminal;
    w->has_retries_left = 1;
    w->retries_left = r->retries_left;
    if (!r->terminal) {
        w->has_available_at_ms = 1;
        w->available_at_ms = r->available_at_ms;
    }
    return true;
}

static bool fill_extend_lock(void *member, const engine_reply *r, const engine_request *req,
                             gw_arena *a)
{
    (void)req, (void)a;
    Berth__V1__ExtendLockResponse *w = member;
    w->has_lock_expires_at_ms = 1;
    w->lock_expires_at_ms = r->lock_expires_at_ms;
    return true;
}

static bool fill_call(void *member, const engine_reply *r, const engine_request *req, gw_arena *a)
{
    (void)req, (void)a;
    Berth__V1__CallResponse *w = member;
    submitted_to_wire(r, &w->instance_id, &w->has_duplicate, &w->duplicate);
    return true;
}

static bool fill_await_call(void *member, const engine_reply *r, const engine_request *req,
                            gw_arena *a)
{
    (void)req;
    Berth__V1__AwaitCallResponse *w = member;
    Berth__V1__Instance *inst = gw_arena_alloc(a, sizeof(*inst));
    Berth__V1__Result *res = gw_arena_alloc(a, sizeof(*res));
    Berth__V1__Error *err = gw_arena_alloc(a, sizeof(*err));
    if (inst == NULL || res == NULL || err == NULL)
        return false;
    berth__v1__instance__init(inst);
    berth__v1__result__init(res);
    berth__v1__error__init(err);
    bool ok = true;
    w->instance = inst;
    instance_to_wire(&r->instance, inst, res, err, a, &ok);
    return ok;
}

/* ---- the operate methods ---- */

/* Each operate method, one row: its member of Request (numbered as its
 * method_case), how that maps onto an engine request, and the reply's
 * engine op, member of Response and fill (NULL: an empty member). A new
 * method is one row. */
typedef struct operate_method {
    uint32_t field;
    void (*map)(const void *member, engine_request *out, gw_arena *a, bool *ok);
    gw_method_out out;
} operate_method;

/* clang-format off */
#define OPERATE(NAME, name, fill)                                                      \
    {BERTH__V1__REQUEST__METHOD_##NAME, map_##name,                                    \
     {ENGINE_OP_##NAME, BERTH__V1__RESPONSE__METHOD_##NAME, fill}}
/* clang-format on */

static const operate_method operate_methods[] = {
    OPERATE(SUBMIT, submit, fill_submit),
    OPERATE(SUBMIT_BATCH, submit_batch, fill_submit_batch),
    OPERATE(FETCH, fetch, fill_fetch),
    OPERATE(COMPLETE, complete, fill_complete),
    OPERATE(COMPLETE_BATCH, complete_batch, fill_complete_batch),
    OPERATE(FAIL, fail, fill_fail),
    OPERATE(REFUSE, refuse, NULL),
    OPERATE(EXTEND_LOCK, extend_lock, fill_extend_lock),
    OPERATE(RELEASE, release, NULL),
    OPERATE(CALL, call, fill_call),
    OPERATE(AWAIT_CALL, await_call, fill_await_call),
};
#define N_OPERATE_METHODS (sizeof(operate_methods) / sizeof(operate_methods[0]))

int gw_request_from_wire(const Berth__V1__Request *in, engine_request *out, gw_arena *a,
                         engine_status *st)
{
    memset(out, 0, sizeof(*out));
    memset(st, 0, sizeof(*st));
    const operate_method *m = operate_methods;
    while (m < operate_methods + N_OPERATE_METHODS && m->field != (uint32_t)in->method_case)
        m++;
    if (m == operate_methods + N_OPERATE_METHODS)
        return no_method(in, st);
    const void *member = gw_member(&in->base, m->field);
    bool ok = true;
    out->op = m->out.op;
    m->map(member, out, a, &ok);
    if (!ok) {
        st->code = ENGINE_CODE_RESOURCE_EXHAUSTED;
        snprintf(st->message, sizeof(st->message), "out of memory");
        return BERTH_ENOMEM;
    }
    return BERTH_OK;
}

int gw_encode_reply(const engine_reply *r, gw_arena *a, nng_msg **out)
{
    const ProtobufCMessageDescriptor *d = &berth__v1__response__descriptor;
    if (r->status.code != ENGINE_CODE_OK && r->op == ENGINE_OP_FETCH && r->n_statuses > 0) {
        /* A fetch that failed after applying its completions still says
         * how each went: they are kept, whatever became of the claim. */
        bool ok = true;
        Berth__V1__FetchResponse fetch = BERTH__V1__FETCH_RESPONSE__INIT;
        fetch.complete_statuses = statuses_to_wire(r, a, &ok);
        fetch.n_complete_statuses = ok ? r->n_statuses : 0;
        return gw_encode_envelope(d, &r->status, BERTH__V1__RESPONSE__METHOD_FETCH, &fetch, out);
    }
    const operate_method *m = operate_methods;
    while (m < operate_methods + N_OPERATE_METHODS && m->out.op != r->op)
        m++;
    return gw_encode_method(d, m < operate_methods + N_OPERATE_METHODS ? &m->out : NULL, NULL, r, a,
                            out);
}
