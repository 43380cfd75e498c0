/*
 * records.c — protobuf codecs for the store's records (see records.h).
 *
 * Encoding builds the generated message on the stack with borrowed
 * pointers (the casts drop const only because protobuf-c's structs are not
 * const-correct; nothing is written through them) and packs it into the
 * caller's reusable buffer. Decoding keeps the unpacked message as the
 * record's owner and points the plain struct into it: one allocation per
 * decode, no copies.
 */
#include "store/records.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "berth/v1/store.pb-c.h"
#include "store/err.h"

typedef Berth__V1__Store__StoredError pb_error;

void store_buf_fini(store_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

static int buf_reserve(store_buf *b, size_t n)
{
    if (n <= b->cap)
        return BERTH_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (p == NULL)
        return BERTH_ENOMEM;
    b->data = p;
    b->cap = cap;
    return BERTH_OK;
}

static int pack(const ProtobufCMessage *m, store_buf *out)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    int rv = buf_reserve(out, n ? n : 1);
    if (rv != BERTH_OK)
        return rv;
    out->len = protobuf_c_message_pack(m, out->data);
    return BERTH_OK;
}

/* Fills *pb from e; returns pb, or NULL when e carries nothing. */
static pb_error *error_to_pb(const store_error *e, pb_error *pb)
{
    if (e->code == NULL && e->message == NULL && e->details == NULL)
        return NULL;
    berth__v1__store__stored_error__init(pb);
    pb->code = (char *)e->code;
    pb->message = (char *)e->message;
    pb->details = (char *)e->details;
    return pb;
}

static void error_from_pb(const pb_error *pb, store_error *e)
{
    memset(e, 0, sizeof(*e));
    if (pb != NULL) {
        e->code = pb->code;
        e->message = pb->message;
        e->details = pb->details;
    }
}

/* Sets an optional field of a message being encoded, and marks it
 * present. */
#define PB_SET(m, field, value)                                                                    \
    do {                                                                                           \
        (m).has_##field = 1;                                                                       \
        (m).field = (value);                                                                       \
    } while (0)

/* Borrowed bytes as a bytes field. */
static ProtobufCBinaryData bytes_to_pb(const void *p, size_t len)
{
    return (ProtobufCBinaryData){.len = len, .data = (uint8_t *)p};
}

static ProtobufCBinaryData id_to_pb(const uint8_t id[BERTH_ID_LEN])
{
    return bytes_to_pb(id, BERTH_ID_LEN);
}

/* A decode that fails after unpacking: the message goes, rv comes back. */
static int unpacked_fail(ProtobufCMessage *m, int rv)
{
    protobuf_c_message_free_unpacked(m, NULL);
    return rv;
}

/* What every *_clear() does: the decoded message (owner) and the array
 * its decode put beside it (beside, or NULL) are freed, and the record r,
 * of size bytes, zeroed. A record built by hand (owner NULL) is only
 * zeroed. */
static void record_clear(void *r, size_t size, void *owner, const void *beside)
{
    if (owner != NULL) {
        free((void *)beside);
        protobuf_c_message_free_unpacked(owner, NULL);
    }
    memset(r, 0, size);
}

static bool id_from_pb(ProtobufCBinaryData d, uint8_t out[BERTH_ID_LEN])
{
    if (d.len != BERTH_ID_LEN)
        return false;
    memcpy(out, d.data, BERTH_ID_LEN);
    return true;
}

typedef Berth__V1__Store__Header pb_header;

/* Header messages for encoding: on the stack for a few, else allocated
 * (freed by headers_fini). */
typedef struct pb_headers {
    pb_header stack[8], *v;
    pb_header *stack_p[8], **p;
} pb_headers;

static int headers_to_pb(const store_header *h, size_t n, pb_headers *out)
{
    out->v = out->stack;
    out->p = out->stack_p;
    if (n > 8) {
        out->v = malloc(n * sizeof(*out->v));
        out->p = malloc(n * sizeof(*out->p));
        if (out->v == NULL || out->p == NULL) {
            free(out->v);
            free(out->p);
            return BERTH_ENOMEM;
        }
    }
    for (size_t i = 0; i < n; i++) {
        berth__v1__store__header__init(&out->v[i]);
        out->v[i].name = (char *)h[i].name;
        out->v[i].value = (char *)h[i].value;
        out->p[i] = &out->v[i];
    }
    return BERTH_OK;
}

static void headers_fini(pb_headers *h)
{
    if (h->v != h->stack) {
        free(h->v);
        free(h->p);
    }
}

/* Header pointers for a decoded record: one array beside the message,
 * freed with it (NULL for none). */
static int headers_from_pb(pb_header *const *h, size_t n, store_header **out)
{
    *out = NULL;
    if (n == 0)
        return BERTH_OK;
    store_header *hs = calloc(n, sizeof(*hs));
    if (hs == NULL)
        return BERTH_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        hs[i].name = h[i]->name ? h[i]->name : "";
        hs[i].value = h[i]->value ? h[i]->value : "";
    }
    *out = hs;
    return BERTH_OK;
}

/* ---- Body ---- */

int store_body_encode(const store_body *r, store_buf *out)
{
    Berth__V1__Store__Body m = BERTH__V1__STORE__BODY__INIT;
    pb_headers hs;
    if (headers_to_pb(r->headers, r->n_headers, &hs) != BERTH_OK)
        return BERTH_ENOMEM;
    m.topic = (char *)r->topic;
    PB_SET(m, payload, bytes_to_pb(r->payload, r->payload_len));
    m.n_headers = r->n_headers;
    m.headers = hs.p;
    m.content_type = (char *)r->content_type;
    if (r->has_instance) {
        PB_SET(m, instance_id, id_to_pb(r->instance_id));
        PB_SET(m, call_attempt, r->call_attempt);
    }
    PB_SET(m, id, id_to_pb(r->id));
    PB_SET(m, seq, r->seq);
    PB_SET(m, created_at_ms, r->created_at_ms);
    m.has_deployment = r->deployment != 0;
    m.deployment = r->deployment;
    m.has_priority = r->priority != STORE_PRIORITY_ABSENT;
    m.priority = r->priority;
    m.has_not_before_ms = r->not_before_ms != 0;
    m.not_before_ms = r->not_before_ms;
    int rv = pack(&m.base, out);
    headers_fini(&hs);
    return rv;
}

int store_body_decode(const void *buf, size_t len, store_body *out)
{
    memset(out, 0, sizeof(*out));
    Berth__V1__Store__Body *m = berth__v1__store__body__unpack(NULL, len, buf);
    if (m == NULL)
        return BERTH_ECORRUPT;
    if (m->topic == NULL || !m->has_id || !id_from_pb(m->id, out->id) ||
        (m->has_instance_id && !id_from_pb(m->instance_id, out->instance_id)))
        return unpacked_fail(&m->base, BERTH_ECORRUPT);
    store_header *hs;
    if (headers_from_pb(m->headers, m->n_headers, &hs) != BERTH_OK)
        return unpacked_fail(&m->base, BERTH_ENOMEM);
    out->topic = m->topic;
    out->payload = m->payload.data;
    out->payload_len = m->payload.len;
    out->headers = hs;
    out->n_headers = m->n_headers;
    out->content_type = m->content_type;
    out->has_instance = m->has_instance_id;
    out->call_attempt = m->call_attempt;
    out->seq = m->seq;
    out->created_at_ms = m->created_at_ms;
    out->deployment = m->deployment;
    out->priority = m->has_priority ? m->priority : STORE_PRIORITY_ABSENT;
    out->not_before_ms = m->not_before_ms;
    out->owner = m;
    return BERTH_OK;
}

/* ---- a Body read in place (store_body_peek) ---- */

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

typedef struct wire {
    const uint8_t *p, *end;
} wire;

/* A varint of at most 10 bytes (bits past 64 dropped, as protobuf-c). */
static bool wire_varint(wire *w, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned i = 0; i < 10 && w->p < w->end; i++) {
        uint8_t b = *w->p++;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if ((b & 0x80) == 0) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* A field's tag as protobuf-c reads it: at most 5 bytes, the number kept
 * in 32 bits, refused only when its first byte has no number bits. */
static bool wire_tag(wire *w, uint32_t *num, unsigned *type)
{
    const uint8_t *p = w->p;
    size_t max = w->end - p < 5 ? (size_t)(w->end - p) : 5;
    if (max == 0 || (p[0] & 0xf8) == 0)
        return false;
    *type = p[0] & 7;
    uint32_t tag = (p[0] & 0x7f) >> 3;
    unsigned shift = 4;
    for (size_t i = 0; i < max; i++) {
        if (i > 0) {
            tag |= (uint32_t)(p[i] & 0x7f) << shift;
            shift += 7;
        }
        if ((p[i] & 0x80) == 0) {
            *num = tag;
            w->p += i + 1;
            return true;
        }
    }
    return false;
}

/* The next field's number and wire type, and for a length-delimited one
 * its bytes (a length of at most 5 bytes and 2^31 - 1, as protobuf-c
 * reads it); false at a malformed one. */
static bool wire_field(wire *w, uint32_t *num, unsigned *type, wire *val)
{
    uint64_t n;
    if (!wire_tag(w, num, type))
        return false;
    switch (*type) {
    case WIRE_VARINT:
        return wire_varint(w, &n);
    case WIRE_I64:
    case WIRE_I32: {
        size_t k = *type == WIRE_I64 ? 8 : 4;
        if ((size_t)(w->end - w->p) < k)
            return false;
        w->p += k;
        return true;
    }
    case WIRE_LEN: {
        wire h = {w->p, w->end - w->p > 5 ? w->p + 5 : w->end};
        if (!wire_varint(&h, &n) || n > INT_MAX || n > (uint64_t)(w->end - h.p))
            return false;
        val->p = h.p;
        val->end = h.p + n;
        w->p = val->end;
        return true;
    }
    default: /* groups, and the wire types that do not exist */
        return false;
    }
}

/* A varint field's value: the field is read again from its start. */
static uint64_t varint_at(const uint8_t *start, const uint8_t *end)
{
    wire w = {start, end};
    uint32_t num;
    unsigned type;
    uint64_t v = 0;
    (void)wire_tag(&w, &num, &type);
    (void)wire_varint(&w, &v);
    return v;
}

/* A Header message: its two fields are strings, the rest unknown. */
static bool header_ok(wire w)
{
    while (w.p < w.end) {
        uint32_t num;
        unsigned type;
        wire val;
        if (!wire_field(&w, &num, &type, &val))
            return false;
        if ((num == 1 || num == 2) && type != WIRE_LEN)
            return false;
    }
    return true;
}

int store_body_peek(const void *buf, size_t len, store_body_meta *out)
{
    memset(out, 0, sizeof(*out));
    out->priority = STORE_PRIORITY_ABSENT;
    wire w = {buf, (const uint8_t *)buf + len}, topic = {0}, id = {0}, inst = {0};
    bool has_topic = false, has_id = false;
    while (w.p < w.end) {
        const uint8_t *start = w.p;
        uint32_t num;
        unsigned type;
        wire val;
        if (!wire_field(&w, &num, &type, &val))
            return BERTH_ECORRUPT;
        /* The type each known field must have: strings, bytes and the
         * header messages are length-delimited, the rest varints. */
        bool is_len = (num >= 1 && num <= 5) || num == 9;
        if (num >= 1 && num <= 12 && type != (is_len ? WIRE_LEN : WIRE_VARINT))
            return BERTH_ECORRUPT;
        switch (num) {
        case 1:
            topic = val;
            has_topic = true;
            break;
        case 3:
            if (!header_ok(val))
                return BERTH_ECORRUPT;
            break;
        case 5:
            inst = val;
            out->has_instance = true;
            break;
        case 7:
            out->seq = varint_at(start, w.p);
            break;
        case 8:
            out->created_at_ms = varint_at(start, w.p);
            break;
        case 9:
            id = val;
            has_id = true;
            break;
        case 10:
            out->deployment = (uint32_t)varint_at(start, w.p);
            break;
        case 11:
            out->priority = (uint32_t)varint_at(start, w.p);
            break;
        case 12:
            out->not_before_ms = varint_at(start, w.p);
            break;
        default: /* payload, content type, call attempt; unknown fields */
            break;
        }
    }
    if (!has_topic || !has_id || id.end - id.p != BERTH_ID_LEN ||
        (out->has_instance && inst.end - inst.p != BERTH_ID_LEN))
        return BERTH_ECORRUPT;
    memcpy(out->id, id.p, BERTH_ID_LEN);
    if (out->has_instance)
        memcpy(out->instance_id, inst.p, BERTH_ID_LEN);
    out->topic = (const char *)topic.p;
    out->topic_len = topic.p ? strnlen(out->topic, (size_t)(topic.end - topic.p)) : 0;
    return BERTH_OK;
}

void store_body_clear(store_body *r)
{
    record_clear(r, sizeof(*r), r->owner, r->headers);
}

/* ---- TaskState ---- */

int store_task_state_encode(const store_task_state *r, store_buf *out)
{
    Berth__V1__Store__TaskState m = BERTH__V1__STORE__TASK_STATE__INIT;
    pb_error e;
    PB_SET(m, available_at_ms, r->available_at_ms);
    m.worker_id = (char *)r->worker_id;
    if (r->has_lock_token)
        PB_SET(m, lock_token, id_to_pb(r->lock_token));
    PB_SET(m, lock_expires_at_ms, r->lock_expires_at_ms);
    PB_SET(m, claims, r->claims);
    PB_SET(m, retries_left, r->retries_left);
    PB_SET(m, failures, r->failures);
    PB_SET(m, terminal, r->terminal);
    m.last_error = error_to_pb(&r->last_error, &e);
    return pack(&m.base, out);
}

int store_task_state_decode(const void *buf, size_t len, store_task_state *out)
{
    memset(out, 0, sizeof(*out));
    Berth__V1__Store__TaskState *m = berth__v1__store__task_state__unpack(NULL, len, buf);
    if (m == NULL)
        return BERTH_ECORRUPT;
    if (m->has_lock_token && !id_from_pb(m->lock_token, out->lock_token))
        return unpacked_fail(&m->base, BERTH_ECORRUPT);
    out->available_at_ms = m->available_at_ms;
    out->worker_id = m->worker_id;
    out->has_lock_token = m->has_lock_token;
    out->lock_expires_at_ms = m->lock_expires_at_ms;
    out->claims = m->claims;
    out->retries_left = m->retries_left;
    out->failures = m->failures;
    out->terminal = m->terminal;
    error_from_pb(m->last_error, &out->last_error);
    out->owner = m;
    return BERTH_OK;
}

void store_task_state_clear(store_task_state *r)
{
    record_clear(r, sizeof(*r), r->owner, NULL);
}

/* ---- DeliveryState ---- */

int store_delivery_state_encode(const store_delivery_state *r, store_buf *out)
{
    Berth__V1__Store__DeliveryState m = BERTH__V1__STORE__DELIVERY_STATE__INIT;
    pb_error e;
    PB_SET(m, attempts, r->attempts);
    PB_SET(m, next_attempt_at_ms, r->next_attempt_at_ms);
    PB_SET(m, poisoned, r->poisoned);
    m.last_error = error_to_pb(&r->last_error, &e);
    return pack(&m.base, out);
}

int store_delivery_state_decode(const void *buf, size_t len, store_delivery_state *out)
{
    memset(out, 0, sizeof(*out));
    Berth__V1__Store__DeliveryState *m = berth__v1__store__delivery_state__unpack(NULL, len, buf);
    if (m == NULL)
        return BERTH_ECORRUPT;
    out->attempts = m->attempts;
    out->next_attempt_at_ms = m->next_attempt_at_ms;
    out->poisoned = m->poisoned;
    error_from_pb(m->last_error, &out->last_error);
    out->owner = m;
    return BERTH_OK;
}

void store_delivery_state_clear(store_delivery_state *r)
{
    record_clear(r, sizeof(*r), r->owner, NULL);
}

/* ---- Incident ---- */

int store_incident_encode(const store_incident *r, store_buf *out)
{
    Berth__V1__Store__Incident m = BERTH__V1__STORE__INCIDENT__INIT;
    pb_error e;
    PB_SET(m, kind, (Berth__V1__Store__Incident__Kind)r->kind);
    PB_SET(m, subject_id, id_to_pb(r->subject_id));
    m.topic = (char *)r->topic;
    m.error = error_to_pb(&r->error, &e);
    PB_SET(m, at_ms, r->at_ms);
    return pack(&m.base, out);
}

int store_incident_decode(const void *buf, size_t len, store_incident *out)
{
    memset(out, 0, sizeof(*out));
    Berth__V1__Store__Incident *m = berth__v1__store__incident__unpack(NULL, len, buf);
    if (m == NULL)
        return BERTH_ECORRUPT;
    if (!m->has_subject_id || !id_from_pb(m->subject_id, out->subject_id))
        return unpacked_fail(&m->base, BERTH_ECORRUPT);
    out->kind = m->kind;
    out->topic = m->topic;
    error_from_pb(m->error, &out->error);
    out->at_ms = m->at_ms;
    out->owner = m;
    return BERTH_OK;
}

void store_incident_clear(store_incident *r)
{
    record_clear(r, sizeof(*r), r->owner, NULL);
}

/* ---- Instance ---- */

int store_instance_encode(const store_instance *r, store_buf *out)
{
    Berth__V1__Store__Instance m = BERTH__V1__STORE__INSTANCE__INIT;
    pb_error e;
    pb_headers hs;
    if (headers_to_pb(r->result_headers, r->n_result_headers, &hs) != BERTH_OK)
        return BERTH_ENOMEM;
    PB_SET(m, id, id_to_pb(r->id));
    PB_SET(m, state, (Berth__V1__Store__Instance__State)r->state);
    m.topic = (char *)r->topic;
    PB_SET(m, attempt, r->attempt);
    PB_SET(m, created_at_ms, r->created_at_ms);
    m.has_timer_at_ms = r->timer_at_ms != 0;
    m.timer_at_ms = r->timer_at_ms;
    if (r->has_current)
        PB_SET(m, current_id, id_to_pb(r->current_id));
    if (r->has_retry) {
        PB_SET(m, has_retry, 1);
        PB_SET(m, timeout_ms, r->timeout_ms);
        PB_SET(m, max_attempts, r->max_attempts);
        PB_SET(m, initial_backoff_ms, r->initial_backoff_ms);
        PB_SET(m, max_backoff_ms, r->max_backoff_ms);
        PB_SET(m, multiplier, r->multiplier);
        m.n_non_retryable_codes = r->n_non_retryable_codes;
        m.non_retryable_codes = (char **)r->non_retryable_codes;
    }
    if (r->request != NULL)
        PB_SET(m, request, bytes_to_pb(r->request, r->request_len));
    if (r->dedup_key != NULL)
        PB_SET(m, dedup_key, bytes_to_pb(r->dedup_key, r->dedup_key_len));
    m.has_ended_at_ms = r->ended_at_ms != 0;
    m.ended_at_ms = r->ended_at_ms;
    if (r->has_result) {
        PB_SET(m, has_result, 1);
        PB_SET(m, result_payload, bytes_to_pb(r->result_payload, r->result_payload_len));
        m.result_content_type = (char *)r->result_content_type;
        m.n_result_headers = r->n_result_headers;
        m.result_headers = hs.p;
    }
    m.error = error_to_pb(&r->error, &e);
    m.has_deployment = r->deployment != 0;
    m.deployment = r->deployment;
    int rv = pack(&m.base, out);
    headers_fini(&hs);
    return rv;
}

int store_instance_decode(const void *buf, size_t len, store_instance *out)
{
    memset(out, 0, sizeof(*out));
    Berth__V1__Store__Instance *m = berth__v1__store__instance__unpack(NULL, len, buf);
    if (m == NULL)
        return BERTH_ECORRUPT;
    if (!m->has_id || !id_from_pb(m->id, out->id) || m->topic == NULL ||
        (int)m->state < STORE_INSTANCE_WAITING || (int)m->state > STORE_INSTANCE_FAILED ||
        (m->has_current_id && !id_from_pb(m->current_id, out->current_id)))
        return unpacked_fail(&m->base, BERTH_ECORRUPT);
    store_header *hs;
    if (headers_from_pb(m->result_headers, m->n_result_headers, &hs) != BERTH_OK)
        return unpacked_fail(&m->base, BERTH_ENOMEM);
    out->state = m->state;
    out->topic = m->topic;
    out->attempt = m->attempt;
    out->created_at_ms = m->created_at_ms;
    out->timer_at_ms = m->has_timer_at_ms ? m->timer_at_ms : 0;
    out->has_current = m->has_current_id;
    out->has_retry = m->has_retry;
    out->timeout_ms = m->timeout_ms;
    out->max_attempts = m->max_attempts;
    out->initial_backoff_ms = m->initial_backoff_ms;
    out->max_backoff_ms = m->max_backoff_ms;
    out->multiplier = m->multiplier;
    out->non_retryable_codes = (const char *const *)m->non_retryable_codes;
    out->n_non_retryable_codes = m->n_non_retryable_codes;
    if (m->has_request) {
        out->request = m->request.data;
        out->request_len = m->request.len;
    }
    if (m->has_dedup_key) {
        out->dedup_key = m->dedup_key.data;
        out->dedup_key_len = m->dedup_key.len;
    }
    out->ended_at_ms = m->ended_at_ms;
    out->has_result = m->has_result;
    out->result_payload = m->result_payload.data;
    out->result_payload_len = m->result_payload.len;
    out->result_content_type = m->result_content_type;
    out->result_headers = hs;
    out->n_result_headers = m->n_result_headers;
    error_from_pb(m->error, &out->error);
    out->deployment = m->deployment;
    out->owner = m;
    return BERTH_OK;
}

void store_instance_clear(store_instance *r)
{
    record_clear(r, sizeof(*r), r->owner, r->result_headers);
}

/* ---- Deployment ---- */

int store_deployment_encode(const store_deployment *r, store_buf *out)
{
    Berth__V1__Store__Deployment m = BERTH__V1__STORE__DEPLOYMENT__INIT;
    Berth__V1__Store__Channel *cs = calloc(r->n_channels ? r->n_channels : 1, sizeof(*cs));
    Berth__V1__Store__Channel **cp = calloc(r->n_channels ? r->n_channels : 1, sizeof(*cp));
    int rv = BERTH_ENOMEM;
    if (cs == NULL || cp == NULL)
        goto done;
    for (size_t i = 0; i < r->n_channels; i++) {
        const store_channel *c = &r->channels[i];
        berth__v1__store__channel__init(&cs[i]);
        cs[i].name = (char *)c->name;
        cs[i].transport = (char *)c->transport;
        cs[i].has_reply_max_bytes = c->reply_max_bytes != 0;
        cs[i].reply_max_bytes = c->reply_max_bytes;
        cs[i].n_content_types = c->n_content_types;
        cs[i].content_types = (char **)c->content_types;
        cp[i] = &cs[i];
    }
    m.id = (char *)r->id;
    PB_SET(m, version, r->version);
    PB_SET(m, state, (Berth__V1__Store__Deployment__State)r->state);
    m.n_channels = r->n_channels;
    m.channels = cp;
    PB_SET(m, created_at_ms, r->created_at_ms);
    m.has_retired_at_ms = r->retired_at_ms != 0;
    m.retired_at_ms = r->retired_at_ms;
    rv = pack(&m.base, out);
done:
    free(cs);
    free(cp);
    return rv;
}

int store_deployment_decode(const void *buf, size_t len, store_deployment *out)
{
    memset(out, 0, sizeof(*out));
    Berth__V1__Store__Deployment *m = berth__v1__store__deployment__unpack(NULL, len, buf);
    if (m == NULL)
        return BERTH_ECORRUPT;
    bool ok = m->id != NULL && m->has_version && (int)m->state >= STORE_DEPLOYMENT_LIVE &&
              (int)m->state <= STORE_DEPLOYMENT_RETIRED;
    for (size_t i = 0; ok && i < m->n_channels; i++)
        ok = m->channels[i]->name != NULL;
    store_channel *cs = ok ? calloc(m->n_channels ? m->n_channels : 1, sizeof(*cs)) : NULL;
    if (cs == NULL)
        return unpacked_fail(&m->base, ok ? BERTH_ENOMEM : BERTH_ECORRUPT);
    for (size_t i = 0; i < m->n_channels; i++) {
        const Berth__V1__Store__Channel *c = m->channels[i];
        cs[i] = (store_channel){
            .name = c->name,
            .transport = c->transport,
            .reply_max_bytes = c->reply_max_bytes,
            .content_types = (const char *const *)c->content_types,
            .n_content_types = c->n_content_types,
        };
    }
    out->id = m->id;
    out->version = m->version;
    out->state = (int)m->state;
    out->channels = cs;
    out->n_channels = m->n_channels;
    out->created_at_ms = m->created_at_ms;
    out->retired_at_ms = m->retired_at_ms;
    out->owner = m;
    return BERTH_OK;
}

void store_deployment_clear(store_deployment *r)
{
    record_clear(r, sizeof(*r), r->owner, r->channels);
}
