/* api.c — see api.h. */
#include "gateway/api.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "berth/v1/admin.pb-c.h"
#include "gateway/json.h"

/* ---- names: the wire's own (proto/berth/v1), one source for both ---- */

static const char *enum_name(const ProtobufCEnumDescriptor *d, int v, const char *unknown)
{
    const ProtobufCEnumValue *e = protobuf_c_enum_descriptor_get_value(d, v);
    return e != NULL && v != 0 ? e->name : unknown;
}

int gw_api_status(engine_code code)
{
    switch (code) {
    case ENGINE_CODE_OK:
        return 200;
    case ENGINE_CODE_INVALID_ARGUMENT:
        return 400;
    case ENGINE_CODE_UNAUTHENTICATED:
        return 401;
    case ENGINE_CODE_NOT_FOUND:
        return 404;
    case ENGINE_CODE_FAILED_PRECONDITION:
    case ENGINE_CODE_ABORTED:
        return 409;
    case ENGINE_CODE_RESOURCE_EXHAUSTED:
        return 429;
    case ENGINE_CODE_UNAVAILABLE:
    case ENGINE_CODE_CANCELLED:
        return 503;
    default:
        return 500;
    }
}

static const char *state_name(engine_task_state s)
{
    return enum_name(&berth__v1__task_info__state__descriptor, (int)s, "UNKNOWN");
}

static int bad(FILE *f, const char *message)
{
    gw_api_refusal(f, "INVALID_ARGUMENT", message);
    return 400;
}

/* ---- the request ---- */

static int hexval(int c)
{
    return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

/* Decodes s[0..n) (percent escapes; '+' as a space in a query) into
 * *at, advancing it; NULL if it is not well-formed, holds a NUL or
 * does not fit before end. */
static char *decode(const char *s, size_t n, bool query, char **at, const char *end)
{
    char *out = *at, *w = out;
    for (size_t i = 0; i < n; i++) {
        if (w + 1 >= end)
            return NULL;
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return NULL; /* fewer than two digits follow */
            int a = hexval((unsigned char)s[i + 1]), b = hexval((unsigned char)s[i + 2]);
            if (a < 0 || b < 0)
                return NULL;
            c = a * 16 + b;
            i += 2;
        } else if (c == '+' && query) {
            c = ' ';
        }
        if (c == 0)
            return NULL;
        *w++ = (char)c;
    }
    *w++ = '\0';
    *at = w;
    return out;
}

static bool parse_u32(const char *s, uint32_t *out)
{
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

typedef struct query {
    const char *topic, *state, *after, *limit, *open;
} query;

/* The query's parameters: each known one at most once, nothing else. */
static int parse_query(const char *q, query *out, char **at, const char *end, FILE *f)
{
    memset(out, 0, sizeof(*out));
    while (q != NULL && *q != '\0') {
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', n);
        if (n > 0) {
            size_t kn = eq ? (size_t)(eq - q) : n;
            const char *v = eq ? decode(eq + 1, n - kn - 1, true, at, end) : NULL;
            if (eq == NULL || v == NULL)
                return bad(f, "the query is not name=value pairs, percent-encoded");
            static const char *const names[] = {"topic", "state", "after", "limit", "open"};
            const char **slot[] = {&out->topic, &out->state, &out->after, &out->limit, &out->open};
            size_t k = 0;
            while (k < 5 && !(strlen(names[k]) == kn && memcmp(names[k], q, kn) == 0))
                k++;
            if (k == 5)
                return bad(f, "the query names a parameter no endpoint takes "
                              "(topic, state, after, limit, open)");
            if (*slot[k] != NULL)
                return bad(f, "the query names a parameter twice");
            *slot[k] = v;
        }
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

static int take_limit(const query *qy, uint32_t *limit, FILE *f)
{
    *limit = 0;
    if (qy->limit == NULL)
        return 0;
    if (!parse_u32(qy->limit, limit) || *limit == 0)
        return bad(f, "limit: a whole number from 1 (omit it for the default)");
    return 0;
}

/* {"retries": N} or nothing: a retry's new failure budget. */
static int take_retries(const char *body, size_t len, engine_request *r, FILE *f)
{
    char buf[128];
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)body[i])) {
            if (n + 1 >= sizeof(buf))
                return bad(f, "the body is {\"retries\": N} or empty");
            buf[n++] = body[i];
        }
    buf[n] = '\0';
    if (n == 0 || strcmp(buf, "{}") == 0)
        return 0;
    static const char head[] = "{\"retries\":";
    if (strncmp(buf, head, sizeof(head) - 1) != 0 || buf[n - 1] != '}')
        return bad(f, "the body is {\"retries\": N} or empty");
    buf[n - 1] = '\0';
    uint32_t v;
    if (!parse_u32(buf + sizeof(head) - 1, &v))
        return bad(f, "retries: a whole number from 0");
    r->u.retry_terminal.has_retries = true;
    r->u.retry_terminal.retries = v;
    return 0;
}

static int map_get(char **seg, size_t nseg, const query *qy, gw_api_req *out, FILE *f)
{
    engine_request *r = &out->req;
    bool plain = qy->topic == NULL && qy->state == NULL && qy->after == NULL && qy->limit == NULL &&
                 qy->open == NULL;
    if (nseg == 1 && strcmp(seg[0], "overview") == 0 && plain) {
        r->op = ENGINE_OP_METRICS;
    } else if (nseg == 1 && strcmp(seg[0], "deployments") == 0 && plain) {
        r->op = ENGINE_OP_LIST_DEPLOYMENTS;
    } else if (nseg == 2 && strcmp(seg[0], "tasks") == 0 && plain) {
        r->op = ENGINE_OP_GET_TASK;
        r->u.get_task.id = seg[1];
    } else if (nseg == 1 && strcmp(seg[0], "incidents") == 0) {
        if (qy->topic != NULL || qy->state != NULL)
            return bad(f, "incidents take after, limit and open only");
        r->op = ENGINE_OP_LIST_INCIDENTS;
        r->u.list_incidents.after_id = qy->after;
        if (qy->open != NULL && strcmp(qy->open, "true") != 0 && strcmp(qy->open, "false") != 0)
            return bad(f, "open: true (only those still open) or false");
        r->u.list_incidents.open_only = qy->open != NULL && strcmp(qy->open, "true") == 0;
        return take_limit(qy, &r->u.list_incidents.limit, f);
    } else if (nseg == 1 && strcmp(seg[0], "tasks") == 0) {
        if (qy->open != NULL)
            return bad(f, "tasks take topic, state, after and limit only");
        r->op = ENGINE_OP_LIST_TASKS;
        r->u.list_tasks.topic = qy->topic;
        r->u.list_tasks.after = qy->after;
        if (qy->state != NULL) {
            engine_task_state s = 1;
            while (s <= ENGINE_TASK_DELAYED && strcasecmp(qy->state, state_name(s)) != 0)
                s++;
            if (s > ENGINE_TASK_DELAYED)
                return bad(f, "state: one of ready, locked, backoff, terminal, delayed");
            r->u.list_tasks.state = s;
        }
        return take_limit(qy, &r->u.list_tasks.limit, f);
    } else if (!plain) {
        return bad(f, "this endpoint takes no query");
    } else {
        gw_api_refusal(f, "NOT_FOUND", "no such endpoint (README.md, \"The console's API\")");
        return 404;
    }
    return 0;
}

static int map_post(char **seg, size_t nseg, const char *body, size_t len, gw_api_req *out, FILE *f)
{
    engine_request *r = &out->req;
    out->change = true;
    if (nseg == 3 && strcmp(seg[0], "tasks") == 0 && strcmp(seg[2], "retry") == 0) {
        r->op = ENGINE_OP_RETRY_TERMINAL;
        r->u.retry_terminal.id = seg[1];
        return take_retries(body, len, r, f);
    }
    bool empty = true;
    for (size_t i = 0; i < len; i++)
        empty = empty && isspace((unsigned char)body[i]);
    if (!empty && !(len >= 2 && body[0] == '{' && body[len - 1] == '}'))
        return bad(f, "this change takes no body (or {})");
    if (nseg == 3 && strcmp(seg[0], "tasks") == 0 && strcmp(seg[2], "discard") == 0) {
        r->op = ENGINE_OP_DISCARD_TERMINAL;
        r->u.discard_terminal.id = seg[1];
    } else if (nseg == 3 && strcmp(seg[0], "deliveries") == 0 && strcmp(seg[2], "retry") == 0) {
        r->op = ENGINE_OP_RETRY_DELIVERY;
        r->u.retry_delivery.id = seg[1];
    } else {
        gw_api_refusal(f, "NOT_FOUND", "no such endpoint (README.md, \"The console's API\")");
        return 404;
    }
    return 0;
}

int gw_api_map(const char *method, const char *uri, const void *body, size_t len, gw_api_req *out,
               FILE *f)
{
    memset(out, 0, sizeof(*out));
    if (strlen(uri) >= GW_API_URI_MAX)
        return bad(f, "the request's target is too long");
    const char *q = strchr(uri, '?');
    size_t plen = q ? (size_t)(q - uri) : strlen(uri);
    char *at = out->buf;
    const char *end = out->buf + sizeof(out->buf);
    /* The path's segments, each decoded on its own ("%2F" stays in one). */
    char *seg[4];
    size_t nseg = 0;
    for (size_t i = 0; i < plen;) {
        const char *slash = memchr(uri + i, '/', plen - i);
        size_t n = slash ? (size_t)(slash - (uri + i)) : plen - i;
        if (n == 0 || nseg == 4) {
            gw_api_refusal(f, "NOT_FOUND", "no such endpoint (README.md, \"The console's API\")");
            return 404;
        }
        seg[nseg] = decode(uri + i, n, false, &at, end);
        if (seg[nseg] == NULL)
            return bad(f, "the path is not well-formed percent-encoding");
        nseg++;
        i += n + 1;
    }
    query qy;
    int rv = parse_query(q ? q + 1 : NULL, &qy, &at, end, f);
    if (rv != 0)
        return rv;
    if (strcmp(method, "GET") == 0)
        return map_get(seg, nseg, &qy, out, f);
    if (strcmp(method, "POST") == 0) {
        if (q != NULL)
            return bad(f, "a change takes no query");
        return map_post(seg, nseg, body, len, out, f);
    }
    gw_api_refusal(f, "INVALID_ARGUMENT", "the API answers GET and POST only");
    return 405;
}

/* ---- the answer ----
 *
 * An object is opened by its first member (first()), and every member
 * after it is written with the comma before it (str(), num(), flag(),
 * error_obj()). */

/* {"key":"s" */
static void first(FILE *f, const char *key, const char *s)
{
    fputc('{', f);
    gw_json_key(f, key);
    gw_json_str(f, s);
}

/* ,"key":"s" */
static void str(FILE *f, const char *key, const char *s)
{
    fputc(',', f);
    gw_json_key(f, key);
    gw_json_str(f, s);
}

/* ,"key":N */
static void num(FILE *f, const char *key, uint64_t v)
{
    fputc(',', f);
    gw_json_key(f, key);
    fprintf(f, "%" PRIu64, v);
}

/* ,"key":true|false */
static void flag(FILE *f, const char *key, bool v)
{
    fputc(',', f);
    gw_json_key(f, key);
    fputs(v ? "true" : "false", f);
}

/* ,"key":{"code","message","details"}, or null when it has none */
static void error_obj(FILE *f, const char *key, const engine_error *e)
{
    fputc(',', f);
    gw_json_key(f, key);
    if (e->code == NULL && e->message == NULL && e->details == NULL) {
        fputs("null", f);
        return;
    }
    first(f, "code", e->code);
    str(f, "message", e->message);
    str(f, "details", e->details);
    fputc('}', f);
}

void gw_api_refusal(FILE *f, const char *code, const char *message)
{
    first(f, "code", code);
    str(f, "message", message);
    fputs("}\n", f);
}

/* ,"content_type":...,"headers":[...],"payload":{...} of GET_TASK. */
static void task_body(FILE *f, const engine_task_info *t)
{
    str(f, "content_type", t->content_type);
    fputs(",\"headers\":[", f);
    for (size_t i = 0; i < t->n_headers; i++) {
        if (i)
            fputc(',', f);
        first(f, "name", t->headers[i].name);
        str(f, "value", t->headers[i].value);
        fputc('}', f);
    }
    fputs("],\"payload\":", f);
    /* A cut may split a character: text is judged on the bytes shown,
     * up to three bytes of a sequence the cut split left out. */
    size_t n = t->payload_shown, whole = n;
    if (n < t->payload_bytes)
        for (size_t back = 0; back < 3 && whole > 0 && !gw_json_utf8(t->payload, whole); back++)
            whole--;
    bool text = gw_json_utf8(t->payload, whole);
    first(f, "encoding", text ? "text" : "hex");
    fputc(',', f);
    gw_json_key(f, text ? "text" : "hex");
    if (text) {
        gw_json_strn(f, t->payload, whole);
        n = whole;
    } else {
        gw_json_hex(f, t->payload, n);
    }
    num(f, "size", t->payload_bytes);
    num(f, "shown", n);
    flag(f, "cut", n < t->payload_bytes);
    fputc('}', f);
}

/* whole: GET_TASK's, with the body. */
static void task_info(FILE *f, const engine_task_info *t, bool whole)
{
    first(f, "id", t->id);
    str(f, "topic", t->topic);
    str(f, "state", state_name(t->state));
    num(f, "attempt", t->attempt);
    num(f, "failures", t->failures);
    num(f, "retries_left", t->retries_left);
    str(f, "worker_id", t->worker_id);
    num(f, "lock_expires_at_ms", t->lock_expires_at_ms);
    num(f, "available_at_ms", t->available_at_ms);
    num(f, "created_at_ms", t->created_at_ms);
    num(f, "priority", t->priority);
    num(f, "payload_bytes", t->payload_bytes);
    error_obj(f, "last_error", &t->last_error);
    if (whole)
        task_body(f, t);
    fputc('}', f);
}

static void histogram(FILE *f, const char *key, const engine_histogram *h)
{
    gw_json_key(f, key);
    fputs("{\"bounds\":[", f);
    for (size_t i = 0; i < h->n_bounds; i++)
        fprintf(f, "%s%.9g", i ? "," : "", h->bounds[i]);
    fputs("],\"counts\":[", f);
    for (size_t i = 0; i <= h->n_bounds; i++)
        fprintf(f, "%s%" PRIu64, i ? "," : "", h->counts[i]);
    fprintf(f, "],\"count\":%" PRIu64 ",\"sum\":%.6f}", h->count, h->sum);
}

static void overview(FILE *f, const engine_reply *r)
{
    const engine_metrics *m = &r->metrics;
    const engine_stats *s = &r->stats;
    fprintf(f, "{\"shared\":%s,", m->shared ? "true" : "false");
    gw_json_key(f, "topics");
    fputc('[', f);
    for (size_t i = 0; i < r->n_topic_stats; i++) {
        const engine_topic_stats *t = &r->topic_stats[i];
        if (i)
            fputc(',', f);
        first(f, "topic", t->topic);
        fprintf(f,
                ",\"ready\":%" PRIu64 ",\"delayed\":%" PRIu64 ",\"locked\":%" PRIu64
                ",\"backoff\":%" PRIu64 ",\"terminal\":%" PRIu64 ",\"waiting_fetches\":%" PRIu64
                "}",
                t->ready, t->delayed, t->locked, t->backoff, t->terminal, t->waiting_fetches);
    }
    fputs("],", f);
    gw_json_key(f, "counters");
    fputc('[', f);
    for (size_t i = 0; i < m->n_topics; i++) {
        const engine_topic_counters *c = &m->topics[i];
        if (i)
            fputc(',', f);
        first(f, "topic", c->topic);
        fprintf(f,
                ",\"submitted\":%" PRIu64 ",\"fetched\":%" PRIu64 ",\"completed\":%" PRIu64
                ",\"failed\":%" PRIu64 ",\"terminal\":%" PRIu64 ",\"refused\":%" PRIu64
                ",\"delivered\":%" PRIu64 ",\"retried\":%" PRIu64 ",\"poisoned\":%" PRIu64
                ",\"rejected\":%" PRIu64 "}",
                c->submitted, c->fetched, c->completed, c->failed, c->terminal, c->refused,
                c->delivered, c->retried, c->poisoned, c->rejected);
    }
    fputs("],", f);
    fprintf(f,
            "\"waiting_fetches\":%" PRIu64 ",\"outbox_pending\":%" PRIu64
            ",\"deliveries_poisoned\":%" PRIu64 ",",
            s->waiting_fetches, s->outbox_pending, s->poisoned);
    fprintf(f,
            "\"calls\":{\"accepted\":%" PRIu64 ",\"resolved\":%" PRIu64 ",\"failed\":%" PRIu64
            ",\"waiting\":%" PRIu64 ",\"backoff\":%" PRIu64 "},",
            s->calls, s->calls_resolved, s->calls_failed, s->instances_waiting,
            s->instances_backoff);
    fprintf(f,
            "\"deployments\":{\"live\":%" PRIu64 ",\"draining\":%" PRIu64 ",\"retired\":%" PRIu64
            "},",
            s->deployments_live, s->deployments_draining, s->deployments_retired);
    fprintf(f, "\"store\":{\"halts\":%" PRIu64 ",\"reopens\":%" PRIu64 "},", s->halts, s->reopens);
    histogram(f, "task_latency_seconds", &m->task_latency);
    fputc(',', f);
    histogram(f, "fetch_wait_seconds", &m->fetch_wait);
    fputc(',', f);
    histogram(f, "fsync_seconds", &m->fsync);
    fputc(',', f);
    histogram(f, "commit_batch_requests", &m->commit_batch);
    fputs("}\n", f);
}

static void incident(FILE *f, const engine_incident *in)
{
    first(f, "id", in->id);
    str(f, "kind", enum_name(&berth__v1__incident__kind__descriptor, in->kind, "UNKNOWN"));
    str(f, "subject_id", in->subject_id);
    str(f, "topic", in->topic);
    error_obj(f, "error", &in->error);
    num(f, "at_ms", in->at_ms);
    flag(f, "open", in->open);
    fputc('}', f);
}

static void deployment(FILE *f, const engine_deployment *d)
{
    first(f, "id", d->id);
    num(f, "version", d->version);
    str(f, "state", enum_name(&berth__v1__deployment__state__descriptor, (int)d->state, "UNKNOWN"));
    fputs(",\"channels\":[", f);
    for (size_t i = 0; i < d->n_channels; i++) {
        const engine_channel *c = &d->channels[i];
        if (i)
            fputc(',', f);
        first(f, "name", c->name);
        str(f, "transport", c->transport ? c->transport : "pull");
        num(f, "reply_max_bytes", c->reply_max_bytes);
        fputs(",\"content_types\":[", f);
        for (size_t k = 0; k < c->n_content_types; k++) {
            if (k)
                fputc(',', f);
            gw_json_str(f, c->content_types[k]);
        }
        fputs("]}", f);
    }
    fprintf(f,
            "],\"created_at_ms\":%" PRIu64 ",\"retired_at_ms\":%" PRIu64
            ",\"pending_deliveries\":%" PRIu64 ",\"tasks\":%" PRIu64 ",\"calls_retrying\":%" PRIu64
            ",\"calls_backing_off\":%" PRIu64 ",\"terminal_tasks\":%" PRIu64
            ",\"poisoned_deliveries\":%" PRIu64 "}",
            d->created_at_ms, d->retired_at_ms, d->pending_deliveries, d->tasks, d->calls_retrying,
            d->calls_backing_off, d->terminal_tasks, d->poisoned_deliveries);
}

int gw_api_answer(const gw_api_req *q, const engine_reply *r, FILE *f)
{
    const engine_status *st = &r->status;
    if (st->code != ENGINE_CODE_OK) {
        first(f, "code", enum_name(&berth__v1__code__descriptor, (int)st->code, "INTERNAL"));
        str(f, "message", st->message);
        if (st->field[0] != '\0')
            str(f, "field", st->field);
        if (st->engine_code != NULL)
            str(f, "engine_code", st->engine_code);
        flag(f, "retryable", st->retryable);
        fputs("}\n", f);
        return gw_api_status(st->code);
    }
    switch (q->req.op) {
    case ENGINE_OP_METRICS:
        overview(f, r);
        break;
    case ENGINE_OP_LIST_TASKS:
        fputs("{\"tasks\":[", f);
        for (size_t i = 0; i < r->n_infos; i++) {
            if (i)
                fputc(',', f);
            task_info(f, &r->infos[i], false);
        }
        fputc(']', f);
        str(f, "next_after", r->next[0] != '\0' ? r->next : NULL);
        fputs("}\n", f);
        break;
    case ENGINE_OP_GET_TASK:
        fputs("{\"task\":", f);
        task_info(f, &r->task, true);
        fputs("}\n", f);
        break;
    case ENGINE_OP_LIST_INCIDENTS:
        fputs("{\"incidents\":[", f);
        for (size_t i = 0; i < r->n_incidents; i++) {
            if (i)
                fputc(',', f);
            incident(f, &r->incidents[i]);
        }
        fputc(']', f);
        str(f, "next_after", r->next_incident[0] != '\0' ? r->next_incident : NULL);
        fputs("}\n", f);
        break;
    case ENGINE_OP_LIST_DEPLOYMENTS:
        fputs("{\"deployments\":[", f);
        for (size_t i = 0; i < r->n_deployments; i++) {
            if (i)
                fputc(',', f);
            deployment(f, &r->deployments[i]);
        }
        fputs("]}\n", f);
        break;
    default: /* the changes: their outcome is the status */
        fputs("{\"code\":\"OK\"}\n", f);
        break;
    }
    return 200;
}
