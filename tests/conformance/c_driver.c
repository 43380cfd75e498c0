/*
 * c_driver.c — the conformance suite's driver for the C client
 * (tools/clients/c/client.h, tools/clients/c/worker.h).
 *
 *   berth-conformance-c OPERATE_URL [scenarios.json]
 *
 * Runs every scenario against the berthd at OPERATE_URL; prints one line
 * per scenario and exits non-zero if any failed. See scenarios.json for the
 * format and the results each step must produce. Results are cJSON trees;
 * a task carries what answering it takes (its lock token and worker) in
 * fields the expectations never name ("_lock_token", "_worker_id").
 * Everything a step builds is released when the step ends.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/clients/c/client.h"
#include "tools/clients/c/worker.h"

#define WORKER_ID "conformance-c"

/* ---- what a step allocates, freed when it ends ---- */

typedef struct kept {
    struct kept *next;
    max_align_t data[];
} kept;
static kept *step_mem;

static void *keep(size_t n)
{
    kept *k = calloc(1, sizeof(*k) + n);
    if (k == NULL) {
        fprintf(stderr, "berth-conformance-c: out of memory\n");
        exit(2);
    }
    k->next = step_mem;
    step_mem = k;
    return k->data;
}

static void keep_free(void)
{
    while (step_mem != NULL) {
        kept *next = step_mem->next;
        free(step_mem);
        step_mem = next;
    }
}

static char fail_why[1024];

static bool failf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fail_why, sizeof(fail_why), fmt, ap);
    va_end(ap);
    return false;
}

/* ---- scenario values ---- */

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool num(const cJSON *o, const char *k, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v))
        return false;
    *out = (uint64_t)v->valuedouble;
    return true;
}

/* path into v ("a.0.b"; "#": a length): a new tree, or NULL if absent. */
static cJSON *lookup(const cJSON *v, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL;
    for (char *part = strtok_r(buf, ".", &save); part != NULL && v != NULL;
         part = strtok_r(NULL, ".", &save)) {
        if (strcmp(part, "#") == 0)
            return cJSON_CreateNumber(cJSON_GetArraySize(v));
        v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(part))
                             : cJSON_GetObjectItemCaseSensitive(v, part);
    }
    return v != NULL ? cJSON_Duplicate(v, true) : NULL;
}

static bool ref_missing; /* resolve() met a "$name.path" no result has */

/* v with every "$name.path" replaced by that earlier result: a new tree. */
static cJSON *resolve(const cJSON *v, const cJSON *vars)
{
    if (cJSON_IsString(v) && v->valuestring[0] == '$') {
        const char *ref = v->valuestring + 1, *dot = strchr(ref, '.');
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(dot ? (size_t)(dot - ref) : strlen(ref)), ref);
        const cJSON *base = cJSON_GetObjectItemCaseSensitive(vars, name);
        cJSON *got = base == NULL ? NULL : dot ? lookup(base, dot + 1) : cJSON_Duplicate(base, 1);
        ref_missing |= got == NULL;
        return got != NULL ? got : cJSON_CreateNull();
    }
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        cJSON *out = cJSON_IsArray(v) ? cJSON_CreateArray() : cJSON_CreateObject();
        const cJSON *x;
        cJSON_ArrayForEach(x, v)
        {
            cJSON *r = resolve(x, vars);
            if (cJSON_IsArray(v))
                cJSON_AddItemToArray(out, r);
            else
                cJSON_AddItemToObject(out, x->string, r);
        }
        return out;
    }
    return cJSON_Duplicate(v, true);
}

/* ---- requests from scenario arguments ---- */

static ProtobufCBinaryData bytes_of(const char *s)
{
    return (ProtobufCBinaryData){s ? strlen(s) : 0, (uint8_t *)(s ? s : "")};
}

#define HEADERS(T, ENTRY, INIT)                                                                    \
    static void T##_headers(const cJSON *h, size_t *n, ENTRY ***out)                               \
    {                                                                                              \
        *n = (size_t)cJSON_GetArraySize(h);                                                        \
        *out = keep(*n * sizeof(**out) + 1);                                                       \
        size_t i = 0;                                                                              \
        const cJSON *x;                                                                            \
        cJSON_ArrayForEach(x, h)                                                                   \
        {                                                                                          \
            ENTRY *e = keep(sizeof(*e));                                                           \
            *e = (ENTRY)INIT;                                                                      \
            e->key = x->string;                                                                    \
            e->value = cJSON_IsString(x) ? x->valuestring : "";                                    \
            (*out)[i++] = e;                                                                       \
        }                                                                                          \
    }
HEADERS(submit, Berth__V1__SubmitRequest__HeadersEntry,
        BERTH__V1__SUBMIT_REQUEST__HEADERS_ENTRY__INIT)
HEADERS(result, Berth__V1__Result__HeadersEntry, BERTH__V1__RESULT__HEADERS_ENTRY__INIT)

static Berth__V1__SubmitRequest *submit_of(const cJSON *s)
{
    Berth__V1__SubmitRequest *m = keep(sizeof(*m));
    berth__v1__submit_request__init(m);
    m->topic = (char *)str(s, "topic");
    m->has_payload = 1;
    m->payload = bytes_of(str(s, "payload"));
    submit_headers(cJSON_GetObjectItemCaseSensitive(s, "headers"), &m->n_headers, &m->headers);
    m->content_type = (char *)str(s, "content_type");
    m->idempotency_key = (char *)str(s, "idempotency_key");
    uint64_t v;
    if ((m->has_delay_ms = num(s, "delay_ms", &v)))
        m->delay_ms = v;
    if ((m->has_not_before_ms = num(s, "not_before_ms", &v)))
        m->not_before_ms = v;
    if ((m->has_priority = num(s, "priority", &v)))
        m->priority = (uint32_t)v;
    return m;
}

/* A result argument: a string (the payload) or {payload, content_type, headers}. */
static Berth__V1__Result *result_of(const cJSON *r)
{
    if (r == NULL || cJSON_IsNull(r))
        return NULL;
    Berth__V1__Result *m = keep(sizeof(*m));
    berth__v1__result__init(m);
    m->has_payload = 1;
    if (cJSON_IsString(r)) {
        m->payload = bytes_of(r->valuestring);
        return m;
    }
    m->payload = bytes_of(str(r, "payload"));
    m->content_type = (char *)str(r, "content_type");
    result_headers(cJSON_GetObjectItemCaseSensitive(r, "headers"), &m->n_headers, &m->headers);
    return m;
}

/* task_id, worker_id, lock_token of a task argument, into a guarded request. */
#define GUARD(m, task)                                                                             \
    do {                                                                                           \
        (m)->task_id = (char *)str(task, "id");                                                    \
        (m)->worker_id = (char *)str(task, "_worker_id");                                          \
        (m)->lock_token = (char *)str(task, "_lock_token");                                        \
    } while (0)

static Berth__V1__CompleteRequest *complete_of(const cJSON *item)
{
    Berth__V1__CompleteRequest *m = keep(sizeof(*m));
    berth__v1__complete_request__init(m);
    GUARD(m, cJSON_GetObjectItemCaseSensitive(item, "task"));
    m->result = result_of(cJSON_GetObjectItemCaseSensitive(item, "result"));
    return m;
}

static Berth__V1__Error *error_of(const cJSON *e)
{
    Berth__V1__Error *m = keep(sizeof(*m));
    berth__v1__error__init(m);
    m->code = (char *)str(e, "code");
    m->message = (char *)str(e, "message");
    m->details = (char *)str(e, "details");
    return m;
}

/* ---- results as the suite sees them ---- */

static const char *enum_name(const ProtobufCEnumDescriptor *d, int v)
{
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(d, v);
    return ev != NULL ? ev->name : "?";
}

static cJSON *show_status(const Berth__V1__Status *st)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "code", enum_name(&berth__v1__code__descriptor, (int)st->code));
    if (st->has_verdict && st->verdict != 0)
        cJSON_AddStringToObject(
            o, "verdict", enum_name(&berth__v1__status__verdict__descriptor, (int)st->verdict));
    else
        cJSON_AddNullToObject(o, "verdict");
    if (st->field != NULL)
        cJSON_AddStringToObject(o, "field", st->field);
    else
        cJSON_AddNullToObject(o, "field");
    if (st->has_limit)
        cJSON_AddNumberToObject(o, "limit", (double)st->limit);
    else
        cJSON_AddNullToObject(o, "limit");
    cJSON_AddStringToObject(o, "message", st->message ? st->message : "");
    return o;
}

static cJSON *status_or_null(const Berth__V1__Status *st)
{
    return st == NULL || !st->has_code || st->code == BERTH__V1__CODE__OK ? cJSON_CreateNull()
                                                                          : show_status(st);
}

static cJSON *text(ProtobufCBinaryData b)
{
    char *s = keep(b.len + 1);
    memcpy(s, b.data, b.len);
    return cJSON_CreateString(s);
}

static cJSON *show_task(const Berth__V1__Task *t, const char *worker_id)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", t->id);
    cJSON_AddStringToObject(o, "topic", t->topic);
    cJSON_AddItemToObject(o, "payload", text(t->payload));
    cJSON *h = cJSON_AddObjectToObject(o, "headers");
    for (size_t i = 0; i < t->n_headers; i++)
        cJSON_AddStringToObject(h, t->headers[i]->key, t->headers[i]->value);
    if (t->content_type != NULL)
        cJSON_AddStringToObject(o, "content_type", t->content_type);
    else
        cJSON_AddNullToObject(o, "content_type");
    if (t->instance_id != NULL)
        cJSON_AddStringToObject(o, "instance_id", t->instance_id);
    else
        cJSON_AddNullToObject(o, "instance_id");
    cJSON_AddNumberToObject(o, "attempt", t->attempt);
    cJSON_AddNumberToObject(o, "retries_left", t->retries_left);
    cJSON_AddNumberToObject(o, "priority", t->priority);
    cJSON_AddStringToObject(o, "_lock_token", t->lock_token);
    cJSON_AddStringToObject(o, "_worker_id", worker_id);
    return o;
}

/* ---- steps ---- */

typedef struct run {
    bc *c;
    cJSON *vars;
} run;

/* Sends req; *got is the result (or {refused}); false if berthd did not answer. */
static bool round_trip(run *r, Berth__V1__Request *req, uint64_t wait_ms,
                       Berth__V1__Response **resp, cJSON **got)
{
    int rv = bc_call(r->c, req, (int)(10000 + wait_ms), resp);
    if (rv != BC_OK)
        return failf("no answer: %s", bc_strerror(rv));
    const Berth__V1__Status *st = (*resp)->status;
    if (st != NULL && st->has_code && st->code != BERTH__V1__CODE__OK) {
        *got = cJSON_CreateObject();
        cJSON_AddItemToObject(*got, "refused", show_status(st));
    }
    return true;
}

typedef struct loop_state {
    uint32_t *seen;
    uint64_t count, distinct, handled;
    atomic_bool stop, over;
} loop_state;

/* The loop's deadline: stopped after 120 s whatever it found. */
static void *loop_deadline(void *arg)
{
    loop_state *s = arg;
    for (int i = 0; i < 1200 && !atomic_load(&s->over); i++) {
        struct timespec t = {0, 100 * 1000000L};
        nanosleep(&t, NULL);
    }
    atomic_store(&s->stop, true);
    return NULL;
}

static void loop_work(void *ctx, const Berth__V1__Task *t, bc_work *out)
{
    loop_state *s = ctx;
    char buf[32];
    snprintf(buf, sizeof(buf), "%.*s", (int)t->payload.len, (const char *)t->payload.data);
    uint64_t i = strtoull(buf, NULL, 10);
    s->handled++;
    if (i < s->count && s->seen[i]++ == 0 && ++s->distinct == s->count)
        atomic_store(&s->stop, true);
    out->outcome = BC_COMPLETE;
}

static bool worker_loop(run *r, const char *topic, uint64_t count, uint64_t lock_ms, cJSON **got)
{
    for (uint64_t first = 0; first < count; first += 100) {
        uint64_t n = count - first < 100 ? count - first : 100;
        Berth__V1__SubmitRequest **items = keep(n * sizeof(*items));
        for (uint64_t i = 0; i < n; i++) {
            char *p = keep(24);
            snprintf(p, 24, "%" PRIu64, first + i);
            cJSON *s = cJSON_CreateObject();
            cJSON_AddStringToObject(s, "topic", topic);
            items[i] = submit_of(s);
            items[i]->topic = (char *)topic;
            items[i]->payload = bytes_of(p);
            cJSON_Delete(s);
        }
        Berth__V1__SubmitBatchRequest sb = BERTH__V1__SUBMIT_BATCH_REQUEST__INIT;
        sb.n_items = n;
        sb.items = items;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
        req.submit_batch = &sb;
        Berth__V1__Response *resp = NULL;
        int rv = bc_call(r->c, &req, 10000, &resp);
        bool ok = rv == BC_OK && resp->status != NULL && resp->status->code == BERTH__V1__CODE__OK;
        if (resp != NULL)
            berth__v1__response__free_unpacked(resp, NULL);
        if (!ok)
            return failf("worker_loop: a submit_batch failed");
    }
    loop_state s = {.seen = keep(count * sizeof(uint32_t)), .count = count};
    atomic_init(&s.stop, false);
    atomic_init(&s.over, false);
    pthread_t deadline;
    pthread_create(&deadline, NULL, loop_deadline, &s);
    char *topics[] = {(char *)topic};
    bc_worker w = {.worker_id = WORKER_ID,
                   .topics = topics,
                   .n_topics = 1,
                   .max_tasks = 50,
                   .lock_ms = lock_ms,
                   .wait_ms = 500,
                   .work = loop_work,
                   .ctx = &s,
                   .stop = &s.stop};
    int rv = bc_worker_run(r->c, &w);
    atomic_store(&s.over, true);
    pthread_join(deadline, NULL);
    if (rv != BC_OK)
        return failf("worker_loop: the worker loop failed");
    /* Past every lock: a task whose completion was lost is fetchable again. */
    struct timespec past = {(time_t)((lock_ms + 300) / 1000),
                            (long)((lock_ms + 300) % 1000) * 1000000L};
    nanosleep(&past, NULL);
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    f.worker_id = WORKER_ID;
    f.n_topics = 1;
    f.topics = topics;
    f.has_max_tasks = f.has_wait_ms = 1;
    f.max_tasks = 1000;
    f.wait_ms = 0;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &f;
    Berth__V1__Response *resp = NULL;
    if (bc_call(r->c, &req, 10000, &resp) != BC_OK || resp->fetch == NULL) {
        if (resp != NULL)
            berth__v1__response__free_unpacked(resp, NULL);
        return failf("worker_loop: the last fetch failed");
    }
    *got = cJSON_CreateObject();
    cJSON_AddNumberToObject(*got, "handled", (double)s.handled);
    cJSON_AddNumberToObject(*got, "distinct", (double)s.distinct);
    cJSON_AddNumberToObject(*got, "left", (double)resp->fetch->n_tasks);
    berth__v1__response__free_unpacked(resp, NULL);
    return true;
}

/* Runs one step (its arguments resolved in a); *got is its result. */
static bool do_step(run *r, const cJSON *a, cJSON **got)
{
    const char *op = str(a, "do");
    const cJSON *task = cJSON_GetObjectItemCaseSensitive(a, "task");
    uint64_t v = 0;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    uint64_t wait_ms = 0;
    *got = NULL;
    if (strcmp(op, "sleep") == 0) {
        num(a, "ms", &v);
        struct timespec ts = {(time_t)(v / 1000), (long)(v % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        *got = cJSON_CreateObject();
        return true;
    } else if (strcmp(op, "worker_loop") == 0) {
        uint64_t lock_ms = 0;
        num(a, "count", &v);
        num(a, "lock_ms", &lock_ms);
        return worker_loop(r, str(a, "topic"), v, lock_ms, got);
    } else if (strcmp(op, "submit") == 0) {
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        req.submit = submit_of(a);
    } else if (strcmp(op, "submit_batch") == 0) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(a, "items");
        Berth__V1__SubmitBatchRequest *m = keep(sizeof(*m));
        berth__v1__submit_batch_request__init(m);
        m->n_items = (size_t)cJSON_GetArraySize(items);
        m->items = keep(m->n_items * sizeof(*m->items) + 1);
        size_t i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, items) m->items[i++] = submit_of(x);
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
        req.submit_batch = m;
    } else if (strcmp(op, "call") == 0) {
        Berth__V1__CallRequest *m = keep(sizeof(*m));
        berth__v1__call_request__init(m);
        const Berth__V1__SubmitRequest *s = submit_of(a);
        m->topic = s->topic;
        m->has_payload = 1;
        m->payload = s->payload;
        const cJSON *retry = cJSON_GetObjectItemCaseSensitive(a, "retry");
        if (retry != NULL) {
            m->retry = keep(sizeof(*m->retry));
            berth__v1__retry_policy__init(m->retry);
            if ((m->retry->has_timeout_ms = num(retry, "timeout_ms", &v)))
                m->retry->timeout_ms = v;
            if ((m->retry->has_max_attempts = num(retry, "max_attempts", &v)))
                m->retry->max_attempts = (uint32_t)v;
        }
        req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
        req.call = m;
    } else if (strcmp(op, "await_call") == 0) {
        Berth__V1__AwaitCallRequest *m = keep(sizeof(*m));
        berth__v1__await_call_request__init(m);
        m->instance_id = (char *)str(a, "instance_id");
        if ((m->has_wait_ms = num(a, "wait_ms", &v)))
            m->wait_ms = wait_ms = v;
        req.method_case = BERTH__V1__REQUEST__METHOD_AWAIT_CALL;
        req.await_call = m;
    } else if (strcmp(op, "fetch") == 0) {
        Berth__V1__FetchRequest *m = keep(sizeof(*m));
        berth__v1__fetch_request__init(m);
        m->worker_id = (char *)(str(a, "worker_id") ? str(a, "worker_id") : WORKER_ID);
        const cJSON *topics = cJSON_GetObjectItemCaseSensitive(a, "topics"), *x;
        m->n_topics = (size_t)cJSON_GetArraySize(topics);
        m->topics = keep(m->n_topics * sizeof(char *) + 1);
        size_t i = 0;
        cJSON_ArrayForEach(x, topics) m->topics[i++] = x->valuestring;
        if ((m->has_max_tasks = num(a, "max_tasks", &v)))
            m->max_tasks = (uint32_t)v;
        if ((m->has_lock_ms = num(a, "lock_ms", &v)))
            m->lock_ms = v;
        if ((m->has_wait_ms = num(a, "wait_ms", &v)))
            m->wait_ms = wait_ms = v;
        const cJSON *completes = cJSON_GetObjectItemCaseSensitive(a, "completes");
        m->n_completes = (size_t)cJSON_GetArraySize(completes);
        m->completes = keep(m->n_completes * sizeof(*m->completes) + 1);
        i = 0;
        cJSON_ArrayForEach(x, completes) m->completes[i++] = complete_of(x);
        req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
        req.fetch = m;
    } else if (strcmp(op, "complete") == 0) {
        req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE;
        req.complete = complete_of(a);
    } else if (strcmp(op, "complete_batch") == 0) {
        Berth__V1__CompleteBatchRequest *m = keep(sizeof(*m));
        berth__v1__complete_batch_request__init(m);
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(a, "items"), *x;
        m->n_items = (size_t)cJSON_GetArraySize(items);
        m->items = keep(m->n_items * sizeof(*m->items) + 1);
        size_t i = 0;
        cJSON_ArrayForEach(x, items) m->items[i++] = complete_of(x);
        req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE_BATCH;
        req.complete_batch = m;
    } else if (strcmp(op, "fail") == 0) {
        Berth__V1__FailRequest *m = keep(sizeof(*m));
        berth__v1__fail_request__init(m);
        GUARD(m, task);
        m->error = error_of(cJSON_GetObjectItemCaseSensitive(a, "error"));
        if ((m->has_retry_in_ms = num(a, "retry_in_ms", &v)))
            m->retry_in_ms = v;
        if ((m->has_retries_left = num(a, "retries_left", &v)))
            m->retries_left = (uint32_t)v;
        req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
        req.fail = m;
    } else if (strcmp(op, "refuse") == 0) {
        Berth__V1__RefuseRequest *m = keep(sizeof(*m));
        berth__v1__refuse_request__init(m);
        GUARD(m, task);
        m->error = error_of(cJSON_GetObjectItemCaseSensitive(a, "error"));
        req.method_case = BERTH__V1__REQUEST__METHOD_REFUSE;
        req.refuse = m;
    } else if (strcmp(op, "extend_lock") == 0) {
        Berth__V1__ExtendLockRequest *m = keep(sizeof(*m));
        berth__v1__extend_lock_request__init(m);
        GUARD(m, task);
        if ((m->has_lock_ms = num(a, "lock_ms", &v)))
            m->lock_ms = v;
        req.method_case = BERTH__V1__REQUEST__METHOD_EXTEND_LOCK;
        req.extend_lock = m;
    } else if (strcmp(op, "release") == 0) {
        Berth__V1__ReleaseRequest *m = keep(sizeof(*m));
        berth__v1__release_request__init(m);
        GUARD(m, task);
        req.method_case = BERTH__V1__REQUEST__METHOD_RELEASE;
        req.release = m;
    } else {
        return failf("unknown step %s", op);
    }

    Berth__V1__Response *resp = NULL;
    if (!round_trip(r, &req, wait_ms, &resp, got))
        return false;
    if (*got != NULL) { /* refused */
        berth__v1__response__free_unpacked(resp, NULL);
        return true;
    }
    cJSON *o = *got = cJSON_CreateObject();
    switch (resp->method_case) {
    case BERTH__V1__RESPONSE__METHOD_SUBMIT:
        cJSON_AddStringToObject(o, "id", resp->submit->id);
        cJSON_AddBoolToObject(o, "duplicate", resp->submit->duplicate);
        break;
    case BERTH__V1__RESPONSE__METHOD_SUBMIT_BATCH: {
        cJSON *items = cJSON_AddArrayToObject(o, "items");
        for (size_t i = 0; i < resp->submit_batch->n_items; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "id", resp->submit_batch->items[i]->id);
            cJSON_AddBoolToObject(x, "duplicate", resp->submit_batch->items[i]->duplicate);
            cJSON_AddItemToArray(items, x);
        }
        break;
    }
    case BERTH__V1__RESPONSE__METHOD_CALL:
        cJSON_AddStringToObject(o, "instance_id", resp->call->instance_id);
        cJSON_AddBoolToObject(o, "duplicate", resp->call->duplicate);
        break;
    case BERTH__V1__RESPONSE__METHOD_AWAIT_CALL: {
        const Berth__V1__Instance *in = resp->await_call->instance;
        cJSON_AddStringToObject(o, "state",
                                enum_name(&berth__v1__instance__state__descriptor, (int)in->state));
        cJSON_AddNumberToObject(o, "attempt", in->attempt);
        if (in->result != NULL) {
            cJSON *res = cJSON_AddObjectToObject(o, "result");
            cJSON_AddItemToObject(res, "payload", text(in->result->payload));
            if (in->result->content_type != NULL)
                cJSON_AddStringToObject(res, "content_type", in->result->content_type);
            else
                cJSON_AddNullToObject(res, "content_type");
            cJSON *h = cJSON_AddObjectToObject(res, "headers");
            for (size_t i = 0; i < in->result->n_headers; i++)
                cJSON_AddStringToObject(h, in->result->headers[i]->key,
                                        in->result->headers[i]->value);
        } else {
            cJSON_AddNullToObject(o, "result");
        }
        if (in->error != NULL) {
            cJSON *err = cJSON_AddObjectToObject(o, "error");
            cJSON_AddStringToObject(err, "code", in->error->code ? in->error->code : "");
            cJSON_AddStringToObject(err, "message", in->error->message ? in->error->message : "");
        } else {
            cJSON_AddNullToObject(o, "error");
        }
        break;
    }
    case BERTH__V1__RESPONSE__METHOD_FETCH: {
        cJSON *tasks = cJSON_AddArrayToObject(o, "tasks");
        for (size_t i = 0; i < resp->fetch->n_tasks; i++)
            cJSON_AddItemToArray(tasks, show_task(resp->fetch->tasks[i], req.fetch->worker_id));
        cJSON *errs = cJSON_AddArrayToObject(o, "complete_errors");
        for (size_t i = 0; i < resp->fetch->n_complete_statuses; i++)
            cJSON_AddItemToArray(errs, status_or_null(resp->fetch->complete_statuses[i]));
        break;
    }
    case BERTH__V1__RESPONSE__METHOD_COMPLETE_BATCH: {
        cJSON *errs = cJSON_AddArrayToObject(o, "errors");
        for (size_t i = 0; i < resp->complete_batch->n_statuses; i++)
            cJSON_AddItemToArray(errs, status_or_null(resp->complete_batch->statuses[i]));
        break;
    }
    case BERTH__V1__RESPONSE__METHOD_FAIL:
        cJSON_AddBoolToObject(o, "terminal", resp->fail->terminal);
        cJSON_AddNumberToObject(o, "retries_left", resp->fail->retries_left);
        break;
    case BERTH__V1__RESPONSE__METHOD_EXTEND_LOCK:
        cJSON_AddNumberToObject(o, "lock_expires_at_ms",
                                (double)resp->extend_lock->lock_expires_at_ms);
        break;
    default: /* complete, refuse, release: nothing to show */
        break;
    }
    berth__v1__response__free_unpacked(resp, NULL);
    return true;
}

static bool step(run *r, const cJSON *s)
{
    cJSON *a = cJSON_CreateObject();
    const cJSON *x;
    cJSON_ArrayForEach(x, s)
    {
        if (strcmp(x->string, "expect") != 0 && strcmp(x->string, "as") != 0)
            cJSON_AddItemToObject(a, x->string, resolve(x, r->vars));
    }
    cJSON *got = NULL;
    const char *op = str(s, "do");
    bool ok = !ref_missing || failf("%s: an argument names a result that has no such path", op);
    ref_missing = false;
    ok = ok && do_step(r, a, &got);
    const cJSON *expect = cJSON_GetObjectItemCaseSensitive(s, "expect");
    if (ok) {
        bool may_refuse = false;
        cJSON_ArrayForEach(x, expect) may_refuse |= strncmp(x->string, "refused.", 8) == 0;
        const cJSON *refused = cJSON_GetObjectItemCaseSensitive(got, "refused");
        if (refused != NULL && !may_refuse) {
            char *j = cJSON_PrintUnformatted(refused);
            ok = failf("%s: refused: %s", op, j);
            free(j);
        }
    }
    cJSON_ArrayForEach(x, expect)
    {
        if (!ok)
            break;
        cJSON *want = resolve(x, r->vars), *have = lookup(got, x->string);
        if (have == NULL || ref_missing) {
            ok = failf("%s: no %s in the result, or a reference to nothing", op, x->string);
            ref_missing = false;
        } else if (!cJSON_Compare(have, want, true)) {
            char *h = cJSON_PrintUnformatted(have), *w = cJSON_PrintUnformatted(want);
            ok = failf("%s: %s is %s, not %s", op, x->string, h, w);
            free(h);
            free(w);
        }
        cJSON_Delete(want);
        cJSON_Delete(have);
    }
    const char *as = str(s, "as");
    if (ok && as != NULL && got != NULL) {
        cJSON_DeleteItemFromObjectCaseSensitive(r->vars, as);
        cJSON_AddItemToObject(r->vars, as, got);
        got = NULL;
    }
    cJSON_Delete(got);
    cJSON_Delete(a);
    keep_free();
    return ok;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s != NULL && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s != NULL)
        s[n] = '\0';
    fclose(f);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: berth-conformance-c OPERATE_URL [scenarios.json]\n");
        return 2;
    }
    const char *path = argc > 2 ? argv[2] : BERTH_CONFORMANCE_SCENARIOS;
    char *text_ = slurp(path);
    cJSON *suite = text_ ? cJSON_Parse(text_) : NULL;
    free(text_);
    if (suite == NULL) {
        fprintf(stderr, "berth-conformance-c: cannot read %s\n", path);
        return 2;
    }
    bc *c;
    char err[256];
    if (bc_open(argv[1], &c, err, sizeof(err)) != BC_OK) {
        fprintf(stderr, "berth-conformance-c: %s\n", err);
        cJSON_Delete(suite);
        return 2;
    }
    const cJSON *scenarios = cJSON_GetObjectItemCaseSensitive(suite, "scenarios"), *sc;
    int total = 0, failed = 0;
    srand((unsigned)time(NULL) ^ (unsigned)clock());
    cJSON_ArrayForEach(sc, scenarios)
    {
        run r = {.c = c, .vars = cJSON_CreateObject()};
        char topic[48];
        snprintf(topic, sizeof(topic), "conf-c-%08x%04x", (unsigned)rand(), (unsigned)total);
        cJSON_AddStringToObject(r.vars, "T", topic);
        bool ok = true;
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(sc, "steps"))
        {
            if (!(ok = step(&r, s)))
                break;
        }
        total++;
        if (ok) {
            printf("ok      %s\n", str(sc, "name"));
        } else {
            failed++;
            printf("FAILED  %s: %s\n", str(sc, "name"), fail_why);
        }
        fflush(stdout);
        cJSON_Delete(r.vars);
    }
    printf("c: %d of %d passed\n", total - failed, total);
    bc_close(c);
    cJSON_Delete(suite);
    return failed ? 1 : 0;
}
