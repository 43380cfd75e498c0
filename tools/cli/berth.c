/*
 * berth — the command line for berthd's operate surface and events.
 *
 *   berth [--operate URL] [--json] COMMAND [ARGS]    (berth COMMAND --help)
 *
 * Output is for people by default and for scripts with --json (one JSON
 * object on stdout). fetch prints one tab-separated line per task
 * (id, lock token, topic, attempt, payload), so a shell loop can read it.
 *
 * Exit codes (stable):
 *   0  OK
 *   1  internal error
 *   2  usage error
 *   3  berthd refused the request (the status is printed); for a call
 *      awaited: it ended refused by its worker, or FAILED
 *   4  berthd is unreachable, or did not answer in time
 *   5  an awaited call has not ended yet (await it again)
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <sodium.h>

#include "tools/clients/c/client.h"
#include "tools/cli/top.h"
#include "tools/clients/c/when.h"

enum {
    EX_OK = 0,
    EX_INTERNAL = 1,
    EX_USAGE = 2,
    EX_REFUSED = 3,
    EX_UNREACHABLE = 4,
    EX_PENDING = 5
};

#define MAX_HEADERS 64

typedef struct opts {
    const char *operate;
    const char *events;
    const char *admin, *admin_key_file, *metrics;
    bool json;
    int timeout_ms;
    /* command arguments */
    const char *pos[256];
    int npos;
    const char *worker, *token, *content_type, *key, *result, *code, *message, *details;
    const char *delay, *at; /* a submit's or call's --delay DURATION, --at RFC3339 */
    bool has_priority;
    uint64_t priority;
    const char *tls_ca, *tls_server_name;
    bool tls_insecure;
    const char *hnames[MAX_HEADERS], *hvalues[MAX_HEADERS];
    int nheaders;
    bool has_max, has_lock, has_wait, has_retry_in, has_retries_left, has_count;
    uint64_t max, lock_ms, wait_ms, retry_in_ms, retries_left, count;
    bool help;
    /* call */
    bool has_timeout, has_attempts, await;
    uint64_t timeout_arg, attempts;
    /* admin */
    const char *after, *topic, *state;
    const char *channels[256]; /* deploy: --channel, repeatable */
    int nchannels;
    char *completes[256]; /* fetch: --complete ID:TOKEN, repeatable (cut in place) */
    int ncompletes;
    bool has_retries, has_limit;
    uint64_t retries, limit;
} opts;

typedef struct command {
    const char *name;
    int (*run)(opts *o);
    const char *usage;
} command;

/* ---- output helpers ---- */

static void json_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_cstr(FILE *f, const char *s)
{
    if (s == NULL)
        fputs("null", f);
    else
        json_str(f, s, strlen(s));
}

/* Valid UTF-8 with no control bytes but tab and newline: printable as text. */
static bool is_text(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n || (c < 0x20 && c != '\n' && c != '\t'))
            return false;
        for (size_t k = 1; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

static char *base64(const uint8_t *p, size_t n)
{
    size_t len = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(len);
    if (out != NULL)
        sodium_bin2base64(out, len, p, n, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

static const char *code_name(int code)
{
    static const char *names[] = {"OK",
                                  "CANCELLED",
                                  "UNKNOWN",
                                  "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED",
                                  "NOT_FOUND",
                                  "ALREADY_EXISTS",
                                  "PERMISSION_DENIED",
                                  "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION",
                                  "ABORTED",
                                  "OUT_OF_RANGE",
                                  "UNIMPLEMENTED",
                                  "INTERNAL",
                                  "UNAVAILABLE",
                                  "DATA_LOSS",
                                  "UNAUTHENTICATED"};
    return code >= 0 && code <= 16 ? names[code] : "?";
}

static const char *verdict_name(int v)
{
    static const char *names[] = {"", "LOCK_LOST", "LOCK_HELD", "TERMINAL", "NOT_FOUND"};
    return v >= 0 && v <= 4 ? names[v] : "?";
}

static void print_status_json(FILE *f, const Berth__V1__Status *s)
{
    fprintf(f, "{\"code\":%d,\"code_name\":\"%s\",\"message\":", s->code, code_name(s->code));
    json_cstr(f, s->message);
    if (s->has_verdict && s->verdict)
        fprintf(f, ",\"verdict\":\"%s\"", verdict_name(s->verdict));
    if (s->engine_code != NULL) {
        fputs(",\"engine_code\":", f);
        json_cstr(f, s->engine_code);
    }
    if (s->has_retryable)
        fprintf(f, ",\"retryable\":%s", s->retryable ? "true" : "false");
    if (s->field != NULL) {
        fputs(",\"field\":", f);
        json_cstr(f, s->field);
    }
    if (s->has_limit)
        fprintf(f, ",\"limit\":%" PRIu64, s->limit);
    fputc('}', f);
}

/* Prints a refusal; returns the exit code for it. */
static int refused(const opts *o, const Berth__V1__Status *s)
{
    if (o->json) {
        fputs("{\"status\":", stdout);
        print_status_json(stdout, s);
        fputs("}\n", stdout);
        return EX_REFUSED;
    }
    fprintf(stderr, "berth: %s: %s", code_name(s->code), s->message ? s->message : "");
    if (s->has_verdict && s->verdict)
        fprintf(stderr, " [verdict %s]", verdict_name(s->verdict));
    if (s->field != NULL)
        fprintf(stderr, " [field %s", s->field);
    if (s->field != NULL && s->has_limit)
        fprintf(stderr, ", limit %" PRIu64, s->limit);
    if (s->field != NULL)
        fputc(']', stderr);
    if (s->engine_code != NULL)
        fprintf(stderr, " [%s, %s]", s->engine_code,
                s->retryable ? "retryable" : "retrying will not help");
    fputc('\n', stderr);
    return EX_REFUSED;
}

/* ---- calling berthd ---- */

static int call(const opts *o, Berth__V1__Request *req, int timeout_ms, Berth__V1__Response **out)
{
    bc *c;
    char err[256];
    bc_tls tls = {o->tls_ca, o->tls_server_name, o->tls_insecure};
    if (bc_open_tls(o->operate, &tls, &c, err, sizeof(err)) != BC_OK) {
        fprintf(stderr, "berth: cannot reach berthd: %s\n", err);
        return EX_UNREACHABLE;
    }
    int rv = bc_call(c, req, timeout_ms > 0 ? timeout_ms : o->timeout_ms, out);
    bc_close(c);
    if (rv != BC_OK) {
        fprintf(stderr, "berth: %s (%s)\n", bc_strerror(rv), o->operate);
        return rv == BC_EPROTO ? EX_INTERNAL : EX_UNREACHABLE;
    }
    if ((*out)->status == NULL) {
        fprintf(stderr, "berth: the answer carries no status\n");
        berth__v1__response__free_unpacked(*out, NULL);
        return EX_INTERNAL;
    }
    if ((*out)->status->code != BERTH__V1__CODE__OK) {
        int ex = refused(o, (*out)->status);
        berth__v1__response__free_unpacked(*out, NULL);
        *out = NULL;
        return ex;
    }
    return EX_OK;
}

/* Reads all of stdin when the argument is "-". */
static uint8_t *read_arg(const char *arg, size_t *len)
{
    if (arg == NULL) {
        *len = 0;
        return NULL;
    }
    if (strcmp(arg, "-") != 0) {
        *len = strlen(arg);
        return (uint8_t *)strdup(arg);
    }
    size_t cap = 65536, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf != NULL && (got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (b == NULL)
                free(buf);
            buf = b;
        }
    }
    *len = n;
    return buf;
}

static int need(const char *what, const char *v)
{
    if (v == NULL) {
        fprintf(stderr, "berth: %s is required (see --help)\n", what);
        return EX_USAGE;
    }
    return EX_OK;
}

/* ---- commands ---- */

/* When and how urgently (--delay, --at, --priority), checked here so
 * that a typo is a usage error, not a request. */
typedef struct when {
    bool has_delay, has_at, has_priority;
    uint64_t delay_ms, at_ms;
    uint32_t priority;
} when;

static int when_of(const opts *o, when *w)
{
    char err[200];
    memset(w, 0, sizeof(*w));
    if (o->delay != NULL && o->at != NULL) {
        fprintf(stderr, "berth: give --delay or --at, not both\n");
        return EX_USAGE;
    }
    if (o->delay != NULL &&
        !(w->has_delay = when_duration_ms(o->delay, &w->delay_ms, err, sizeof(err)))) {
        fprintf(stderr, "berth: --delay %s\n", err);
        return EX_USAGE;
    }
    if (o->at != NULL && !(w->has_at = when_instant_ms(o->at, &w->at_ms, err, sizeof(err)))) {
        fprintf(stderr, "berth: --at %s\n", err);
        return EX_USAGE;
    }
    if (o->has_priority && o->priority > UINT32_MAX) {
        fprintf(stderr, "berth: --priority is at most %" PRIu32 "\n", UINT32_MAX);
        return EX_USAGE;
    }
    w->has_priority = o->has_priority;
    w->priority = (uint32_t)o->priority;
    return EX_OK;
}

/* when_of() into a SubmitRequest or a CallRequest m (the same fields);
 * EX_OK or the usage error, printed. */
#define WHEN_INTO(o, m)                                                                            \
    when_into(o, &(m)->has_delay_ms, &(m)->delay_ms, &(m)->has_not_before_ms, &(m)->not_before_ms, \
              &(m)->has_priority, &(m)->priority)

static int when_into(const opts *o, protobuf_c_boolean *has_delay, uint64_t *delay,
                     protobuf_c_boolean *has_at, uint64_t *at, protobuf_c_boolean *has_priority,
                     uint32_t *priority)
{
    when w;
    int ex = when_of(o, &w);
    *has_delay = w.has_delay;
    *delay = w.delay_ms;
    *has_at = w.has_at;
    *at = w.at_ms;
    *has_priority = w.has_priority;
    *priority = w.priority;
    return ex;
}

static int cmd_submit(opts *o)
{
    if (o->npos < 1 || o->npos > 2) {
        fprintf(stderr, "berth submit: TOPIC [PAYLOAD | -]\n");
        return EX_USAGE;
    }
    size_t len;
    uint8_t *payload = read_arg(o->npos == 2 ? o->pos[1] : NULL, &len);
    Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
    Berth__V1__SubmitRequest__HeadersEntry hs[MAX_HEADERS], *hp[MAX_HEADERS];
    for (int i = 0; i < o->nheaders; i++) {
        berth__v1__submit_request__headers_entry__init(&hs[i]);
        hs[i].key = (char *)o->hnames[i];
        hs[i].value = (char *)o->hvalues[i];
        hp[i] = &hs[i];
    }
    s.topic = (char *)o->pos[0];
    s.has_payload = 1;
    s.payload.data = payload;
    s.payload.len = len;
    s.n_headers = (size_t)o->nheaders;
    s.headers = hp;
    s.content_type = (char *)o->content_type;
    s.idempotency_key = (char *)o->key;
    int ex = WHEN_INTO(o, &s);
    if (ex != EX_OK) {
        free(payload);
        return ex;
    }
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    req.submit = &s;
    Berth__V1__Response *r;
    ex = call(o, &req, 0, &r);
    free(payload);
    if (ex != EX_OK)
        return ex;
    const Berth__V1__SubmitResponse *sr = r->submit;
    if (o->json) {
        printf("{\"id\":");
        json_cstr(stdout, sr ? sr->id : NULL);
        printf(",\"duplicate\":%s}\n", sr && sr->duplicate ? "true" : "false");
    } else {
        printf("%s%s\n", sr && sr->id ? sr->id : "", sr && sr->duplicate ? " (duplicate)" : "");
    }
    berth__v1__response__free_unpacked(r, NULL);
    return EX_OK;
}

static void print_task_json(const Berth__V1__Task *t)
{
    printf("{\"id\":");
    json_cstr(stdout, t->id);
    printf(",\"topic\":");
    json_cstr(stdout, t->topic);
    printf(",\"attempt\":%u,\"retries_left\":%u,\"lock_token\":", t->attempt, t->retries_left);
    json_cstr(stdout, t->lock_token);
    printf(",\"lock_expires_at_ms\":%" PRIu64 ",\"created_at_ms\":%" PRIu64
           ",\"priority\":%u,\"available_at_ms\":%" PRIu64,
           t->lock_expires_at_ms, t->created_at_ms, t->priority, t->available_at_ms);
    if (t->content_type) {
        printf(",\"content_type\":");
        json_cstr(stdout, t->content_type);
    }
    if (t->instance_id) {
        printf(",\"instance_id\":");
        json_cstr(stdout, t->instance_id);
    }
    printf(",\"headers\":{");
    for (size_t i = 0; i < t->n_headers; i++) {
        if (i)
            putchar(',');
        json_cstr(stdout, t->headers[i]->key);
        putchar(':');
        json_cstr(stdout, t->headers[i]->value);
    }
    putchar('}');
    if (is_text(t->payload.data, t->payload.len)) {
        printf(",\"payload\":");
        json_str(stdout, (const char *)t->payload.data, t->payload.len);
    }
    char *b64 = base64(t->payload.data, t->payload.len);
    printf(",\"payload_base64\":");
    json_cstr(stdout, b64 ? b64 : "");
    free(b64);
    putchar('}');
}

/* ---- calls ---- */

static const char *instance_state_name(int s)
{
    static const char *const names[] = {"UNSPECIFIED", "WAITING", "BACKOFF", "RESOLVED", "FAILED"};
    return s >= 0 && s <= 4 ? names[s] : "UNKNOWN";
}

static void print_payload_json(const char *name, ProtobufCBinaryData p)
{
    if (is_text(p.data, p.len)) {
        printf(",\"%s\":", name);
        json_str(stdout, (const char *)p.data, p.len);
    }
    char *b64 = base64(p.data, p.len);
    printf(",\"%s_base64\":", name);
    json_cstr(stdout, b64 ? b64 : "");
    free(b64);
}

/* Prints a call as it stands; the exit code says how it ended. */
static int print_instance(const opts *o, const Berth__V1__Instance *in)
{
    bool ended = in->state == BERTH__V1__INSTANCE__STATE__RESOLVED ||
                 in->state == BERTH__V1__INSTANCE__STATE__FAILED;
    int ex = !ended ? EX_PENDING : in->result != NULL ? EX_OK : EX_REFUSED;
    const Berth__V1__Error *err = in->error;
    if (o->json) {
        printf("{\"instance\":{\"id\":");
        json_cstr(stdout, in->id);
        printf(",\"state\":\"%s\",\"attempt\":%u,\"created_at_ms\":%" PRIu64,
               instance_state_name(in->state), in->attempt, in->created_at_ms);
        if (in->has_resolved_at_ms)
            printf(",\"resolved_at_ms\":%" PRIu64, in->resolved_at_ms);
        if (in->result != NULL) {
            printf(",\"result\":{\"content_type\":");
            json_cstr(stdout, in->result->content_type);
            print_payload_json("payload", in->result->payload);
            putchar('}');
        }
        if (err != NULL) {
            printf(",\"error\":{\"code\":");
            json_cstr(stdout, err->code);
            printf(",\"message\":");
            json_cstr(stdout, err->message);
            printf(",\"details\":");
            json_cstr(stdout, err->details);
            putchar('}');
        }
        printf("}}\n");
        return ex;
    }
    if (in->result != NULL) {
        fwrite(in->result->payload.data, 1, in->result->payload.len, stdout);
        if (isatty(STDOUT_FILENO))
            putchar('\n');
    } else if (err != NULL) {
        fprintf(stderr, "berth: call %s %s: %s%s%s\n", in->id ? in->id : "",
                instance_state_name(in->state), err->code ? err->code : "",
                err->code && err->message ? ": " : "", err->message ? err->message : "");
    } else {
        fprintf(stderr, "berth: call %s is %s (attempt %u): await it again\n", in->id ? in->id : "",
                instance_state_name(in->state), in->attempt);
    }
    return ex;
}

static int await_instance(opts *o, const char *id)
{
    Berth__V1__AwaitCallRequest w = BERTH__V1__AWAIT_CALL_REQUEST__INIT;
    w.instance_id = (char *)id;
    w.has_wait_ms = o->has_wait;
    w.wait_ms = o->wait_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_AWAIT_CALL;
    req.await_call = &w;
    Berth__V1__Response *r;
    /* berthd answers by wait_ms (its default when omitted is at most 30 s). */
    int ex = call(o, &req, (int)(o->has_wait ? o->wait_ms : 30000) + o->timeout_ms, &r);
    if (ex != EX_OK)
        return ex;
    if (r->await_call == NULL || r->await_call->instance == NULL) {
        fprintf(stderr, "berth: the answer carries no instance\n");
        berth__v1__response__free_unpacked(r, NULL);
        return EX_INTERNAL;
    }
    ex = print_instance(o, r->await_call->instance);
    berth__v1__response__free_unpacked(r, NULL);
    return ex;
}

static int cmd_call(opts *o)
{
    if (o->npos < 1 || o->npos > 2) {
        fprintf(stderr, "berth call: TOPIC [PAYLOAD | -]\n");
        return EX_USAGE;
    }
    if (o->has_attempts && !o->has_timeout) {
        fprintf(stderr, "berth call: --attempts needs --timeout-ms (each attempt's timeout)\n");
        return EX_USAGE;
    }
    if (o->has_wait && !o->await) {
        fprintf(stderr, "berth call: --wait-ms goes with --await\n");
        return EX_USAGE;
    }
    size_t len;
    uint8_t *payload = read_arg(o->npos == 2 ? o->pos[1] : NULL, &len);
    Berth__V1__CallRequest c = BERTH__V1__CALL_REQUEST__INIT;
    Berth__V1__CallRequest__HeadersEntry hs[MAX_HEADERS], *hp[MAX_HEADERS];
    for (int i = 0; i < o->nheaders; i++) {
        berth__v1__call_request__headers_entry__init(&hs[i]);
        hs[i].key = (char *)o->hnames[i];
        hs[i].value = (char *)o->hvalues[i];
        hp[i] = &hs[i];
    }
    Berth__V1__RetryPolicy retry = BERTH__V1__RETRY_POLICY__INIT;
    retry.has_timeout_ms = 1;
    retry.timeout_ms = o->timeout_arg;
    retry.has_max_attempts = o->has_attempts;
    retry.max_attempts = (uint32_t)o->attempts;
    c.topic = (char *)o->pos[0];
    c.has_payload = 1;
    c.payload.data = payload;
    c.payload.len = len;
    c.n_headers = (size_t)o->nheaders;
    c.headers = hp;
    c.content_type = (char *)o->content_type;
    c.idempotency_key = (char *)o->key;
    c.retry = o->has_timeout ? &retry : NULL;
    int wex = WHEN_INTO(o, &c);
    if (wex != EX_OK) {
        free(payload);
        return wex;
    }
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
    req.call = &c;
    Berth__V1__Response *r;
    int ex = call(o, &req, 0, &r);
    free(payload);
    if (ex != EX_OK)
        return ex;
    const Berth__V1__CallResponse *cr = r->call;
    char *id = strdup(cr && cr->instance_id ? cr->instance_id : "");
    bool dup = cr && cr->duplicate;
    berth__v1__response__free_unpacked(r, NULL);
    if (id == NULL)
        return EX_INTERNAL;
    if (o->await) {
        ex = await_instance(o, id);
    } else if (o->json) {
        printf("{\"instance_id\":");
        json_cstr(stdout, id);
        printf(",\"duplicate\":%s}\n", dup ? "true" : "false");
    } else {
        printf("%s%s\n", id, dup ? " (duplicate)" : "");
    }
    free(id);
    return ex;
}

static int cmd_await(opts *o)
{
    if (o->npos != 1) {
        fprintf(stderr, "berth await: INSTANCE_ID\n");
        return EX_USAGE;
    }
    return await_instance(o, o->pos[0]);
}

static int cmd_fetch(opts *o)
{
    if (o->npos < 1 || need("--worker", o->worker) != EX_OK) {
        fprintf(stderr, "berth fetch: TOPIC... --worker ID\n");
        return EX_USAGE;
    }
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    f.worker_id = (char *)o->worker;
    f.n_topics = (size_t)o->npos;
    f.topics = (char **)o->pos;
    f.has_max_tasks = o->has_max;
    f.max_tasks = (uint32_t)o->max;
    f.has_lock_ms = o->has_lock;
    f.lock_ms = o->lock_ms;
    f.has_wait_ms = o->has_wait;
    f.wait_ms = o->wait_ms;
    /* --complete ID:TOKEN: completed by this fetch, before it claims. */
    Berth__V1__CompleteRequest cs[256], *cp[256];
    for (int i = 0; i < o->ncompletes; i++) {
        char *colon = strchr(o->completes[i], ':');
        if (colon == NULL) {
            fprintf(stderr, "berth fetch: --complete ID:TOKEN (a task's id and lock token)\n");
            return EX_USAGE;
        }
        *colon = '\0';
        berth__v1__complete_request__init(&cs[i]);
        cs[i].task_id = o->completes[i];
        cs[i].worker_id = (char *)o->worker;
        cs[i].lock_token = colon + 1;
        cp[i] = &cs[i];
    }
    f.completes = cp;
    f.n_completes = (size_t)o->ncompletes;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &f;
    /* Wait for the server's own deadline, and some. Omitted: its default
     * (at most its ceiling, 30 s unless configured higher). */
    uint64_t wait = o->has_wait ? o->wait_ms : 60000;
    int timeout = wait > 3600000 ? 3610000 : (int)wait + 10000; /* the server rejects it anyway */
    Berth__V1__Response *r;
    int ex = call(o, &req, timeout, &r);
    if (ex != EX_OK)
        return ex;
    const Berth__V1__FetchResponse *fr = r->fetch;
    size_t n = fr ? fr->n_tasks : 0;
    size_t nst = fr ? fr->n_complete_statuses : 0;
    if (o->json) {
        printf("{\"tasks\":[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                putchar(',');
            print_task_json(fr->tasks[i]);
        }
        printf("],\"complete_statuses\":[");
        for (size_t i = 0; i < nst; i++) {
            if (i)
                putchar(',');
            print_status_json(stdout, fr->complete_statuses[i]);
        }
        printf("]}\n");
    } else {
        for (size_t i = 0; i < nst; i++) {
            const Berth__V1__Status *st = fr->complete_statuses[i];
            if (st->code != BERTH__V1__CODE__OK)
                fprintf(stderr, "berth fetch: completing %s: %s: %s [verdict %s]\n", cs[i].task_id,
                        code_name(st->code), st->message ? st->message : "",
                        st->has_verdict && st->verdict ? verdict_name(st->verdict) : "none");
        }
        if (isatty(STDOUT_FILENO))
            printf("# id\tlock_token\ttopic\tattempt\tpayload\n");
        for (size_t i = 0; i < n; i++) {
            const Berth__V1__Task *t = fr->tasks[i];
            printf("%s\t%s\t%s\t%u\t", t->id, t->lock_token, t->topic, t->attempt);
            if (is_text(t->payload.data, t->payload.len)) {
                for (size_t k = 0; k < t->payload.len; k++) {
                    char c = (char)t->payload.data[k];
                    putchar(c == '\n' || c == '\t' ? ' ' : c);
                }
            } else {
                char *b64 = base64(t->payload.data, t->payload.len);
                printf("base64:%s", b64 ? b64 : "");
                free(b64);
            }
            putchar('\n');
        }
    }
    berth__v1__response__free_unpacked(r, NULL);
    return EX_OK;
}

static int guard_args(const opts *o, const char *cmd)
{
    if (o->npos != 1 || o->worker == NULL || o->token == NULL) {
        fprintf(stderr, "berth %s: TASK_ID --worker ID --token TOKEN (see --help)\n", cmd);
        return EX_USAGE;
    }
    return EX_OK;
}

static Berth__V1__Error *error_arg(const opts *o, Berth__V1__Error *e)
{
    if (o->code == NULL && o->message == NULL && o->details == NULL)
        return NULL;
    berth__v1__error__init(e);
    e->code = (char *)o->code;
    e->message = (char *)o->message;
    e->details = (char *)o->details;
    return e;
}

static int print_ok(const opts *o, const char *what, const char *extra_json)
{
    if (o->json)
        printf("{\"ok\":true%s%s}\n", extra_json ? "," : "", extra_json ? extra_json : "");
    else
        printf("%s\n", what);
    return EX_OK;
}

static int cmd_complete(opts *o)
{
    if (guard_args(o, "complete") != EX_OK)
        return EX_USAGE;
    Berth__V1__CompleteRequest c = BERTH__V1__COMPLETE_REQUEST__INIT;
    Berth__V1__Result res = BERTH__V1__RESULT__INIT;
    c.task_id = (char *)o->pos[0];
    c.worker_id = (char *)o->worker;
    c.lock_token = (char *)o->token;
    size_t len = 0;
    uint8_t *data = read_arg(o->result, &len);
    if (o->result != NULL || o->content_type != NULL) {
        res.has_payload = 1;
        res.payload.data = data;
        res.payload.len = len;
        res.content_type = (char *)o->content_type;
        c.result = &res;
    }
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE;
    req.complete = &c;
    Berth__V1__Response *r;
    int ex = call(o, &req, 0, &r);
    free(data);
    if (ex != EX_OK)
        return ex;
    bool dup = r->complete && r->complete->duplicate;
    berth__v1__response__free_unpacked(r, NULL);
    return print_ok(o, dup ? "completed (duplicate, absorbed)" : "completed",
                    dup ? "\"duplicate\":true" : "\"duplicate\":false");
}

static int cmd_fail(opts *o)
{
    if (guard_args(o, "fail") != EX_OK)
        return EX_USAGE;
    Berth__V1__FailRequest f = BERTH__V1__FAIL_REQUEST__INIT;
    Berth__V1__Error e;
    f.task_id = (char *)o->pos[0];
    f.worker_id = (char *)o->worker;
    f.lock_token = (char *)o->token;
    f.error = error_arg(o, &e);
    f.has_retry_in_ms = o->has_retry_in;
    f.retry_in_ms = o->retry_in_ms;
    f.has_retries_left = o->has_retries_left;
    f.retries_left = (uint32_t)o->retries_left;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
    req.fail = &f;
    Berth__V1__Response *r;
    int ex = call(o, &req, 0, &r);
    if (ex != EX_OK)
        return ex;
    const Berth__V1__FailResponse *fr = r->fail;
    char human[160], js[160];
    if (fr && fr->terminal) {
        snprintf(human, sizeof(human), "failed: terminal (kept for an operator)");
        snprintf(js, sizeof(js), "\"terminal\":true,\"retries_left\":0");
    } else {
        snprintf(human, sizeof(human), "failed: %u retries left, fetchable at %" PRIu64,
                 fr ? fr->retries_left : 0, fr ? fr->available_at_ms : 0);
        snprintf(js, sizeof(js),
                 "\"terminal\":false,\"retries_left\":%u,\"available_at_ms\":%" PRIu64,
                 fr ? fr->retries_left : 0, fr ? fr->available_at_ms : 0);
    }
    berth__v1__response__free_unpacked(r, NULL);
    return print_ok(o, human, js);
}

static int cmd_refuse(opts *o)
{
    if (guard_args(o, "refuse") != EX_OK)
        return EX_USAGE;
    Berth__V1__RefuseRequest f = BERTH__V1__REFUSE_REQUEST__INIT;
    Berth__V1__Error e;
    f.task_id = (char *)o->pos[0];
    f.worker_id = (char *)o->worker;
    f.lock_token = (char *)o->token;
    f.error = error_arg(o, &e);
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_REFUSE;
    req.refuse = &f;
    Berth__V1__Response *r;
    int ex = call(o, &req, 0, &r);
    if (ex != EX_OK)
        return ex;
    berth__v1__response__free_unpacked(r, NULL);
    return print_ok(o, "refused", NULL);
}

static int cmd_extend(opts *o)
{
    if (guard_args(o, "extend") != EX_OK)
        return EX_USAGE;
    Berth__V1__ExtendLockRequest f = BERTH__V1__EXTEND_LOCK_REQUEST__INIT;
    f.task_id = (char *)o->pos[0];
    f.worker_id = (char *)o->worker;
    f.lock_token = (char *)o->token;
    f.has_lock_ms = o->has_lock;
    f.lock_ms = o->lock_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_EXTEND_LOCK;
    req.extend_lock = &f;
    Berth__V1__Response *r;
    int ex = call(o, &req, 0, &r);
    if (ex != EX_OK)
        return ex;
    uint64_t at = r->extend_lock ? r->extend_lock->lock_expires_at_ms : 0;
    berth__v1__response__free_unpacked(r, NULL);
    char human[96], js[96];
    snprintf(human, sizeof(human), "lock expires at %" PRIu64, at);
    snprintf(js, sizeof(js), "\"lock_expires_at_ms\":%" PRIu64, at);
    return print_ok(o, human, js);
}

static int cmd_release(opts *o)
{
    if (guard_args(o, "release") != EX_OK)
        return EX_USAGE;
    Berth__V1__ReleaseRequest f = BERTH__V1__RELEASE_REQUEST__INIT;
    f.task_id = (char *)o->pos[0];
    f.worker_id = (char *)o->worker;
    f.lock_token = (char *)o->token;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_RELEASE;
    req.release = &f;
    Berth__V1__Response *r;
    int ex = call(o, &req, 0, &r);
    if (ex != EX_OK)
        return ex;
    berth__v1__response__free_unpacked(r, NULL);
    return print_ok(o, "released", NULL);
}

static volatile sig_atomic_t stop_watch;

static void on_sigint(int sig)
{
    (void)sig;
    stop_watch = 1;
}

static int cmd_watch(opts *o)
{
    nng_socket s;
    int rv = nng_sub0_open(&s);
    if (rv == 0)
        rv = nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 200);
    for (int i = 0; rv == 0 && i < o->npos; i++)
        rv = nng_socket_set(s, NNG_OPT_SUB_SUBSCRIBE, o->pos[i], strlen(o->pos[i]));
    if (rv == 0 && o->npos == 0)
        rv = nng_socket_set(s, NNG_OPT_SUB_SUBSCRIBE, "", 0);
    if (rv == 0)
        rv = nng_dial(s, o->events, NULL, 0);
    if (rv != 0) {
        fprintf(stderr, "berth: cannot watch %s: %s\n", o->events, nng_strerror(rv));
        nng_close(s);
        return EX_UNREACHABLE;
    }
    if (!o->json && isatty(STDERR_FILENO))
        fprintf(stderr, "watching %s (Ctrl-C to stop)\n", o->events);
    signal(SIGINT, on_sigint);
    signal(SIGTERM, on_sigint);
    uint64_t seen = 0;
    while (!stop_watch && (!o->has_count || seen < o->count)) {
        nng_msg *m;
        if (nng_recvmsg(s, &m, 0) != 0)
            continue;
        const char *body = nng_msg_body(m);
        size_t len = nng_msg_len(m), sl = strnlen(body, len);
        Berth__V1__Event *ev =
            sl < len ? berth__v1__event__unpack(NULL, len - sl - 1, (const uint8_t *)body + sl + 1)
                     : NULL;
        if (o->json) {
            printf("{\"subject\":");
            json_str(stdout, body, sl);
            if (ev != NULL) {
                printf(",\"topic\":");
                json_cstr(stdout, ev->topic);
                printf(",\"task_id\":");
                json_cstr(stdout, ev->task_id);
                printf(",\"at_ms\":%" PRIu64, ev->at_ms);
                if (ev->has_retries_left)
                    printf(",\"retries_left\":%u", ev->retries_left);
                if (ev->error != NULL) {
                    printf(",\"error\":{\"code\":");
                    json_cstr(stdout, ev->error->code);
                    printf(",\"message\":");
                    json_cstr(stdout, ev->error->message);
                    putchar('}');
                }
            }
            printf("}\n");
        } else {
            printf("%.*s\t%s", (int)sl, body, ev && ev->task_id ? ev->task_id : "");
            if (ev != NULL && ev->error != NULL)
                printf("\t%s\t%s", ev->error->code ? ev->error->code : "",
                       ev->error->message ? ev->error->message : "");
            putchar('\n');
        }
        fflush(stdout);
        if (ev != NULL)
            berth__v1__event__free_unpacked(ev, NULL);
        nng_msg_free(m);
        seen++;
    }
    /* Not closed: the process ends here, and with libnng 1.5.2 closing a
     * SUB socket while an event is arriving can wait forever for a receive
     * that never completes (berthd publishes every event to every
     * subscriber, so one is often arriving). */
    return EX_OK;
}

/* ---- the admin surface ---- */

/* Sends an admin request (signed with the key file, if one is named) and
 * returns its answer in *out, or the exit code of what went wrong. */
static int admin_call(const opts *o, Berth__V1__AdminRequest *req, Berth__V1__AdminResponse **out)
{
    uint8_t *key = NULL;
    size_t keylen = 0;
    char err[256];
    if (o->admin_key_file != NULL &&
        bc_admin_key_load(o->admin_key_file, &key, &keylen, err, sizeof(err)) != BC_OK) {
        fprintf(stderr, "berth: %s\n", err);
        return EX_USAGE;
    }
    bc *c;
    bc_tls tls = {o->tls_ca, o->tls_server_name, o->tls_insecure};
    if (bc_open_tls(o->admin, &tls, &c, err, sizeof(err)) != BC_OK) {
        fprintf(stderr, "berth: cannot reach berthd's admin surface: %s\n", err);
        free(key);
        return EX_UNREACHABLE;
    }
    int rv = bc_admin_call(c, req, key, keylen, o->timeout_ms, out);
    bc_close(c);
    if (key != NULL) {
        sodium_memzero(key, keylen);
        free(key);
    }
    if (rv != BC_OK) {
        fprintf(stderr, "berth: %s (%s)\n", bc_strerror(rv), o->admin);
        return rv == BC_EPROTO ? EX_INTERNAL : EX_UNREACHABLE;
    }
    if ((*out)->status == NULL || (*out)->status->code != BERTH__V1__CODE__OK) {
        int ex = (*out)->status ? refused(o, (*out)->status) : EX_INTERNAL;
        berth__v1__admin_response__free_unpacked(*out, NULL);
        *out = NULL;
        return ex;
    }
    return EX_OK;
}

static const char *task_state_name(int s)
{
    static const char *const names[] = {"UNSPECIFIED", "READY",    "LOCKED",
                                        "BACKOFF",     "TERMINAL", "DELAYED"};
    return s >= 0 && s <= 5 ? names[s] : "UNKNOWN";
}

static void print_error_json(const char *name, const Berth__V1__Error *e)
{
    if (e == NULL)
        return;
    printf(",\"%s\":{\"code\":", name);
    json_cstr(stdout, e->code);
    printf(",\"message\":");
    json_cstr(stdout, e->message);
    printf(",\"details\":");
    json_cstr(stdout, e->details);
    putchar('}');
}

static void print_task_info_json(const Berth__V1__TaskInfo *t)
{
    printf("{\"id\":");
    json_cstr(stdout, t->id);
    printf(",\"topic\":");
    json_cstr(stdout, t->topic);
    printf(",\"state\":\"%s\",\"worker_id\":", task_state_name(t->state));
    json_cstr(stdout, t->worker_id);
    printf(",\"lock_expires_at_ms\":%" PRIu64 ",\"available_at_ms\":%" PRIu64
           ",\"attempt\":%u,\"retries_left\":%u,\"created_at_ms\":%" PRIu64 ",\"payload_bytes\":%u"
           ",\"priority\":%u",
           t->lock_expires_at_ms, t->available_at_ms, t->attempt, t->retries_left, t->created_at_ms,
           t->payload_bytes, t->priority);
    print_error_json("last_error", t->last_error);
    putchar('}');
}

static void print_task_info(const opts *o, const Berth__V1__TaskInfo *t)
{
    if (o->json) {
        printf("{\"task\":");
        print_task_info_json(t);
        printf("}\n");
        return;
    }
    printf("id             %s\ntopic          %s\nstate          %s\n", t->id ? t->id : "",
           t->topic ? t->topic : "", task_state_name(t->state));
    printf("attempt        %u\nretries left   %u\npayload bytes  %u\npriority       %u\n",
           t->attempt, t->retries_left, t->payload_bytes, t->priority);
    printf("available at   %" PRIu64 " (Unix ms)\n", t->available_at_ms);
    if (t->worker_id)
        printf("worker         %s (lock until %" PRIu64 ")\n", t->worker_id, t->lock_expires_at_ms);
    if (t->last_error)
        printf("last error     %s: %s\n", t->last_error->code ? t->last_error->code : "",
               t->last_error->message ? t->last_error->message : "");
}

static int admin_id_op(opts *o, const char *sub)
{
    if (o->npos != 2) {
        fprintf(stderr, "berth admin %s: ID\n", sub);
        return EX_USAGE;
    }
    const char *id = o->pos[1];
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    Berth__V1__GetTaskRequest get = BERTH__V1__GET_TASK_REQUEST__INIT;
    Berth__V1__RetryTerminalRequest retry = BERTH__V1__RETRY_TERMINAL_REQUEST__INIT;
    Berth__V1__DiscardTerminalRequest discard = BERTH__V1__DISCARD_TERMINAL_REQUEST__INIT;
    Berth__V1__RetryDeliveryRequest redeliver = BERTH__V1__RETRY_DELIVERY_REQUEST__INIT;
    const char *done;
    if (strcmp(sub, "task") == 0) {
        get.id = (char *)id;
        req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_GET_TASK;
        req.get_task = &get;
        done = NULL;
    } else if (strcmp(sub, "retry") == 0) {
        retry.id = (char *)id;
        retry.has_retries = o->has_retries;
        retry.retries = (uint32_t)o->retries;
        req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL;
        req.retry_terminal = &retry;
        done = "retried: fetchable again";
    } else if (strcmp(sub, "discard") == 0) {
        discard.id = (char *)id;
        req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DISCARD_TERMINAL;
        req.discard_terminal = &discard;
        done = "discarded";
    } else {
        redeliver.id = (char *)id;
        req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_DELIVERY;
        req.retry_delivery = &redeliver;
        done = "re-armed: delivered again";
    }
    Berth__V1__AdminResponse *r;
    int ex = admin_call(o, &req, &r);
    if (ex != EX_OK)
        return ex;
    if (done != NULL)
        print_ok(o, done, NULL);
    else if (r->get_task && r->get_task->task)
        print_task_info(o, r->get_task->task);
    berth__v1__admin_response__free_unpacked(r, NULL);
    return EX_OK;
}

static int admin_incidents(opts *o)
{
    Berth__V1__ListIncidentsRequest l = BERTH__V1__LIST_INCIDENTS_REQUEST__INIT;
    l.has_limit = o->has_limit;
    l.limit = (uint32_t)o->limit;
    l.after_id = (char *)o->after;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_INCIDENTS;
    req.list_incidents = &l;
    Berth__V1__AdminResponse *r;
    int ex = admin_call(o, &req, &r);
    if (ex != EX_OK)
        return ex;
    static const char *const kinds[] = {"?", "delivery_poisoned", "task_terminal"};
    const Berth__V1__ListIncidentsResponse *li = r->list_incidents;
    size_t n = li ? li->n_incidents : 0;
    if (o->json)
        printf("{\"incidents\":[");
    for (size_t i = 0; i < n; i++) {
        const Berth__V1__Incident *in = li->incidents[i];
        const char *kind = in->kind >= 0 && in->kind <= 2 ? kinds[in->kind] : "?";
        if (o->json) {
            printf("%s{\"id\":", i ? "," : "");
            json_cstr(stdout, in->id);
            printf(",\"kind\":\"%s\",\"subject_id\":", kind);
            json_cstr(stdout, in->subject_id);
            printf(",\"topic\":");
            json_cstr(stdout, in->topic);
            printf(",\"at_ms\":%" PRIu64, in->at_ms);
            print_error_json("error", in->error);
            putchar('}');
        } else {
            printf("%s\t%s\t%s\t%s\t%s\t%s\n", in->id ? in->id : "", kind,
                   in->subject_id ? in->subject_id : "", in->topic ? in->topic : "",
                   in->error && in->error->code ? in->error->code : "",
                   in->error && in->error->message ? in->error->message : "");
        }
    }
    if (o->json)
        printf("]}\n");
    berth__v1__admin_response__free_unpacked(r, NULL);
    return EX_OK;
}

static int admin_tasks(opts *o)
{
    Berth__V1__ListTasksRequest l = BERTH__V1__LIST_TASKS_REQUEST__INIT;
    l.has_limit = o->has_limit;
    l.limit = (uint32_t)o->limit;
    l.after_id = (char *)o->after;
    l.topic = (char *)o->topic;
    if (o->state != NULL) {
        int s = 0;
        for (int k = 1; k <= 5 && s == 0; k++)
            if (strcasecmp(o->state, task_state_name(k)) == 0)
                s = k;
        if (s == 0) {
            fprintf(stderr, "berth admin tasks: --state is ready, delayed, locked, backoff or "
                            "terminal\n");
            return EX_USAGE;
        }
        l.has_state = 1;
        l.state = (Berth__V1__TaskInfo__State)s;
    }
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_TASKS;
    req.list_tasks = &l;
    Berth__V1__AdminResponse *r;
    int ex = admin_call(o, &req, &r);
    if (ex != EX_OK)
        return ex;
    const Berth__V1__ListTasksResponse *lt = r->list_tasks;
    size_t n = lt ? lt->n_tasks : 0;
    const char *next = lt ? lt->next_after_id : NULL;
    if (o->json) {
        printf("{\"tasks\":[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                putchar(',');
            print_task_info_json(lt->tasks[i]);
        }
        printf("],\"next_after_id\":");
        json_cstr(stdout, next);
        printf("}\n");
    } else {
        for (size_t i = 0; i < n; i++) {
            const Berth__V1__TaskInfo *t = lt->tasks[i];
            printf("%s\t%s\t%s\t%u\t%u\t%s\n", t->id ? t->id : "", t->topic ? t->topic : "",
                   task_state_name(t->state), t->attempt, t->retries_left,
                   t->last_error && t->last_error->code ? t->last_error->code : "");
        }
        if (next != NULL)
            fprintf(stderr, "more: berth admin tasks ... --after %s\n", next);
    }
    berth__v1__admin_response__free_unpacked(r, NULL);
    return EX_OK;
}

static int admin_checkpoint(opts *o)
{
    if (o->npos != 2) {
        fprintf(stderr, "berth admin checkpoint: DIR (absolute, on berthd's machine, new)\n");
        return EX_USAGE;
    }
    Berth__V1__CheckpointRequest c = BERTH__V1__CHECKPOINT_REQUEST__INIT;
    c.dir = (char *)o->pos[1];
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_CHECKPOINT;
    req.checkpoint = &c;
    Berth__V1__AdminResponse *r;
    /* A checkpoint flushes and links the store's files: give it time. */
    int saved = o->timeout_ms;
    o->timeout_ms = saved < 120000 ? 120000 : saved;
    int ex = admin_call(o, &req, &r);
    o->timeout_ms = saved;
    if (ex != EX_OK)
        return ex;
    if (o->json) {
        printf("{\"ok\":true,\"dir\":");
        json_cstr(stdout, r->checkpoint ? r->checkpoint->dir : NULL);
        printf("}\n");
    } else {
        printf("checkpoint in %s: berthd --data %s serves it\n", o->pos[1], o->pos[1]);
    }
    berth__v1__admin_response__free_unpacked(r, NULL);
    return EX_OK;
}

static const char *deployment_state_name(Berth__V1__Deployment__State s)
{
    switch (s) {
    case BERTH__V1__DEPLOYMENT__STATE__LIVE:
        return "live";
    case BERTH__V1__DEPLOYMENT__STATE__DRAINING:
        return "draining";
    case BERTH__V1__DEPLOYMENT__STATE__RETIRED:
        return "retired";
    default:
        return "unknown";
    }
}

static void print_deployment_json(const Berth__V1__Deployment *d)
{
    printf("{\"id\":");
    json_cstr(stdout, d->id);
    printf(",\"version\":%u,\"state\":\"%s\",\"created_at_ms\":%" PRIu64, d->version,
           deployment_state_name(d->state), d->created_at_ms);
    if (d->has_retired_at_ms)
        printf(",\"retired_at_ms\":%" PRIu64, d->retired_at_ms);
    printf(",\"pending_deliveries\":%" PRIu64 ",\"tasks\":%" PRIu64
           ",\"calls_backing_off\":%" PRIu64 ",\"terminal_tasks\":%" PRIu64
           ",\"poisoned_deliveries\":%" PRIu64 ",\"channels\":[",
           d->pending_deliveries, d->tasks, d->calls_backing_off, d->terminal_tasks,
           d->poisoned_deliveries);
    for (size_t i = 0; i < d->n_channels; i++) {
        const Berth__V1__ChannelDecl *c = d->channels[i];
        printf("%s{\"name\":", i ? "," : "");
        json_cstr(stdout, c->name);
        printf(",\"transport\":");
        json_cstr(stdout, c->transport);
        if (c->has_reply_max_bytes)
            printf(",\"reply_max_bytes\":%" PRIu64, c->reply_max_bytes);
        printf(",\"content_types\":[");
        for (size_t k = 0; k < c->n_content_types; k++) {
            printf("%s", k ? "," : "");
            json_cstr(stdout, c->content_types[k]);
        }
        printf("]}");
    }
    printf("]}");
}

static void print_deployment_row(const Berth__V1__Deployment *d)
{
    printf("%-20s %7u %-9s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 "  ",
           d->id ? d->id : "", d->version, deployment_state_name(d->state), d->pending_deliveries,
           d->tasks, d->calls_backing_off, d->terminal_tasks, d->poisoned_deliveries);
    for (size_t i = 0; i < d->n_channels; i++)
        printf("%s%s(%s)", i ? "," : "", d->channels[i]->name ? d->channels[i]->name : "",
               d->channels[i]->transport ? d->channels[i]->transport : "pull");
    putchar('\n');
}

static void print_deployment_header(void)
{
    printf("%-20s %7s %-9s %8s %8s %8s %8s %8s  %s\n", "DEPLOYMENT", "VERSION", "STATE", "PENDING",
           "TASKS", "BACKOFF", "TERMINAL", "POISONED", "CHANNELS");
}

static bool parse_u64(const char *s, uint64_t *out);

/* A deploy's or a retire's answer: the version it concerns. */
static void print_deployment_answer(const opts *o, const Berth__V1__Deployment *dep,
                                    const char *verb)
{
    if (o->json) {
        printf("{\"deployment\":");
        if (dep)
            print_deployment_json(dep);
        else
            printf("null");
        printf("}\n");
        return;
    }
    if (dep == NULL)
        return;
    printf("%s%s version %u: %s", verb, dep->id, dep->version, deployment_state_name(dep->state));
    if (dep->state == BERTH__V1__DEPLOYMENT__STATE__DRAINING)
        printf(" (holds %" PRIu64 " deliveries, %" PRIu64 " tasks, %" PRIu64
               " calls backing off; it retires when all are done)",
               dep->pending_deliveries, dep->tasks, dep->calls_backing_off);
    putchar('\n');
}

/* One --channel of a deploy: NAME[,transport=T][,reply-max-bytes=N]
 * [,content-types=A|B]; the strings stay in spec (cut in place). */
static bool parse_channel(char *spec, Berth__V1__ChannelDecl *c, char **types, size_t max_types)
{
    berth__v1__channel_decl__init(c);
    c->content_types = types;
    char *save = NULL;
    for (char *part = strtok_r(spec, ",", &save); part != NULL; part = strtok_r(NULL, ",", &save)) {
        if (c->name == NULL) {
            c->name = part;
        } else if (strncmp(part, "transport=", 10) == 0) {
            c->transport = part + 10;
        } else if (strncmp(part, "reply-max-bytes=", 16) == 0) {
            if (!parse_u64(part + 16, &c->reply_max_bytes))
                return false;
            c->has_reply_max_bytes = 1;
        } else if (strncmp(part, "content-types=", 14) == 0) {
            char *tsave = NULL;
            for (char *t = strtok_r(part + 14, "|", &tsave); t != NULL;
                 t = strtok_r(NULL, "|", &tsave)) {
                if (c->n_content_types == max_types)
                    return false;
                types[c->n_content_types++] = t;
            }
        } else {
            return false;
        }
    }
    return c->name != NULL;
}

static int admin_deploy(opts *o)
{
    enum { TYPES_MAX = 64 };
    if (o->npos != 2 || o->nchannels == 0) {
        fprintf(stderr, "berth admin deploy: ID --channel "
                        "NAME[,transport=pull][,reply-max-bytes=N][,content-types=A|B] ...\n");
        return EX_USAGE;
    }
    static char specs[256][512];
    static char *types[256][TYPES_MAX];
    static Berth__V1__ChannelDecl decls[256];
    Berth__V1__ChannelDecl *ptrs[256];
    for (int i = 0; i < o->nchannels; i++) {
        snprintf(specs[i], sizeof(specs[i]), "%s", o->channels[i]);
        if (strlen(o->channels[i]) >= sizeof(specs[i]) ||
            !parse_channel(specs[i], &decls[i], types[i], TYPES_MAX)) {
            fprintf(stderr,
                    "berth admin deploy: --channel \"%s\" is not "
                    "NAME[,transport=T][,reply-max-bytes=N][,content-types=A|B]\n",
                    o->channels[i]);
            return EX_USAGE;
        }
        ptrs[i] = &decls[i];
    }
    Berth__V1__DeployRequest d = BERTH__V1__DEPLOY_REQUEST__INIT;
    d.id = (char *)o->pos[1];
    d.n_channels = (size_t)o->nchannels;
    d.channels = ptrs;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DEPLOY;
    req.deploy = &d;
    Berth__V1__AdminResponse *r;
    int ex = admin_call(o, &req, &r);
    if (ex != EX_OK)
        return ex;
    print_deployment_answer(o, r->deploy ? r->deploy->deployment : NULL, "deployed ");
    berth__v1__admin_response__free_unpacked(r, NULL);
    return EX_OK;
}

static int admin_retire(opts *o)
{
    if (o->npos != 2) {
        fprintf(stderr, "berth admin retire: ID\n");
        return EX_USAGE;
    }
    Berth__V1__RetireRequest rt = BERTH__V1__RETIRE_REQUEST__INIT;
    rt.id = (char *)o->pos[1];
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETIRE;
    req.retire = &rt;
    Berth__V1__AdminResponse *r;
    int ex = admin_call(o, &req, &r);
    if (ex != EX_OK)
        return ex;
    print_deployment_answer(o, r->retire ? r->retire->deployment : NULL, "");
    berth__v1__admin_response__free_unpacked(r, NULL);
    return EX_OK;
}

static int admin_deployments(opts *o)
{
    Berth__V1__ListDeploymentsRequest l = BERTH__V1__LIST_DEPLOYMENTS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_DEPLOYMENTS;
    req.list_deployments = &l;
    Berth__V1__AdminResponse *r;
    int ex = admin_call(o, &req, &r);
    if (ex != EX_OK)
        return ex;
    const Berth__V1__ListDeploymentsResponse *ld = r->list_deployments;
    size_t n = ld ? ld->n_deployments : 0;
    if (o->json) {
        printf("{\"deployments\":[");
        for (size_t i = 0; i < n; i++) {
            printf("%s", i ? "," : "");
            print_deployment_json(ld->deployments[i]);
        }
        printf("]}\n");
    } else {
        print_deployment_header();
        for (size_t i = 0; i < n; i++)
            print_deployment_row(ld->deployments[i]);
        if (n == 0)
            printf("(none: every topic is a pull channel of the implicit deployment)\n");
    }
    berth__v1__admin_response__free_unpacked(r, NULL);
    return EX_OK;
}

static int cmd_admin(opts *o)
{
    const char *sub = o->npos > 0 ? o->pos[0] : "";
    if (strcmp(sub, "task") == 0 || strcmp(sub, "retry") == 0 || strcmp(sub, "discard") == 0 ||
        strcmp(sub, "retry-delivery") == 0)
        return admin_id_op(o, sub);
    if (strcmp(sub, "incidents") == 0)
        return admin_incidents(o);
    if (strcmp(sub, "checkpoint") == 0)
        return admin_checkpoint(o);
    if (strcmp(sub, "tasks") == 0)
        return admin_tasks(o);
    if (strcmp(sub, "deploy") == 0)
        return admin_deploy(o);
    if (strcmp(sub, "retire") == 0)
        return admin_retire(o);
    if (strcmp(sub, "deployments") == 0)
        return admin_deployments(o);
    fprintf(stderr, "berth admin: task|retry|discard|incidents|retry-delivery|tasks|checkpoint|"
                    "deploy|retire|deployments (see berth admin --help)\n");
    return EX_USAGE;
}

static int cmd_stats(opts *o)
{
    Berth__V1__StatsRequest s = BERTH__V1__STATS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_STATS;
    req.stats = &s;
    Berth__V1__AdminResponse *r;
    int ex = admin_call(o, &req, &r);
    if (ex != EX_OK)
        return ex;
    const Berth__V1__StatsResponse *st = r->stats;
    if (st == NULL) {
        berth__v1__admin_response__free_unpacked(r, NULL);
        return EX_INTERNAL;
    }
    if (o->json) {
        printf("{\"tasks\":%" PRIu64 ",\"outbox_pending\":%" PRIu64 ",\"poisoned\":%" PRIu64
               ",\"waiting_fetches\":%" PRIu64 ",\"topics\":[",
               st->tasks, st->outbox_pending, st->poisoned, st->waiting_fetches);
        for (size_t i = 0; i < st->n_topics; i++) {
            const Berth__V1__TopicStats *t = st->topics[i];
            printf("%s{\"topic\":", i ? "," : "");
            json_cstr(stdout, t->topic);
            printf(",\"ready\":%" PRIu64 ",\"delayed\":%" PRIu64 ",\"locked\":%" PRIu64
                   ",\"backoff\":%" PRIu64 ",\"terminal\":%" PRIu64 ",\"waiting_fetches\":%" PRIu64
                   "}",
                   t->ready, t->delayed, t->locked, t->backoff, t->terminal, t->waiting_fetches);
        }
        printf("]}\n");
    } else {
        printf("%-32s %10s %10s %10s %10s %10s %8s\n", "topic", "ready", "delayed", "locked",
               "backoff", "terminal", "waiting");
        for (size_t i = 0; i < st->n_topics; i++) {
            const Berth__V1__TopicStats *t = st->topics[i];
            printf("%-32s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
                   " %8" PRIu64 "\n",
                   t->topic ? t->topic : "", t->ready, t->delayed, t->locked, t->backoff,
                   t->terminal, t->waiting_fetches);
        }
        printf("tasks %" PRIu64 "  outbox pending %" PRIu64 "  poisoned %" PRIu64
               "  waiting fetches %" PRIu64 "\n",
               st->tasks, st->outbox_pending, st->poisoned, st->waiting_fetches);
    }
    berth__v1__admin_response__free_unpacked(r, NULL);
    return EX_OK;
}

static int cmd_top(opts *o)
{
    return berth_top(o->metrics, o->has_count ? (long)o->count : 0, isatty(STDOUT_FILENO));
}

static const command commands[] = {
    {"submit", cmd_submit,
     "berth submit TOPIC [PAYLOAD | -] [--header NAME=VALUE]... [--content-type CT] [--key KEY]\n"
     "             [--delay DURATION | --at TIME] [--priority N]\n"
     "  Hands berthd a task; prints its id once it is on disk. '-' reads the payload from\n"
     "  stdin. --key is an idempotency key: a repeat returns the original id. --delay 10m\n"
     "  (ms, s, m, h, d; 1h30m) or --at 2026-12-24T18:00:00Z (RFC 3339) holds it back\n"
     "  until then; --priority N: lower is fetched first (default 1024).\n"},
    {"call", cmd_call,
     "berth call TOPIC [PAYLOAD | -] [--timeout-ms MS [--attempts N]] [--await [--wait-ms MS]]\n"
     "           [--header NAME=VALUE]... [--content-type CT] [--key KEY]\n"
     "           [--delay DURATION | --at TIME] [--priority N]\n"
     "  Hands berthd a call and prints its instance id once it is on disk; with --await,\n"
     "  waits for its outcome and prints the worker's result (exit 0), its refusal or the\n"
     "  call's failure (exit 3), or that it still waits (exit 5). --timeout-ms is each\n"
     "  attempt's timeout: past it the call is tried again, up to N attempts in all.\n"
     "  --delay, --at and --priority as for submit (a timeout runs from --delay's end).\n"},
    {"await", cmd_await,
     "berth await INSTANCE_ID [--wait-ms MS]\n"
     "  Waits up to MS for a call to end and prints it as berth call --await does.\n"},
    {"fetch", cmd_fetch,
     "berth fetch TOPIC... --worker ID [--max N] [--lock-ms MS] [--wait-ms MS]\n"
     "            [--complete ID:TOKEN]...\n"
     "  Claims up to N tasks and locks each; waits up to MS for work (long poll).\n"
     "  Prints one line per task: id, lock token, topic, attempt, payload (tab-separated).\n"
     "  --complete first completes a task you hold (no result), in the same round trip;\n"
     "  a completion refused is told on stderr (--json: complete_statuses).\n"},
    {"complete", cmd_complete,
     "berth complete TASK_ID --worker ID --token TOKEN [--result DATA | -] [--content-type CT]\n"
     "  Completes a task you hold. Without --result the original payload is re-delivered.\n"},
    {"fail", cmd_fail,
     "berth fail TASK_ID --worker ID --token TOKEN [--code C] [--message M] [--details D]\n"
     "                   [--retry-in-ms MS] [--retries-left N]\n"
     "  Reports a failure: retried after a growing pause, terminal when the budget is spent.\n"},
    {"refuse", cmd_refuse,
     "berth refuse TASK_ID --worker ID --token TOKEN [--code C] [--message M] [--details D]\n"
     "  Ends a task for good (a refusal is final).\n"},
    {"extend", cmd_extend,
     "berth extend TASK_ID --worker ID --token TOKEN [--lock-ms MS]\n"
     "  Extends your lock to MS from now.\n"},
    {"release", cmd_release,
     "berth release TASK_ID --worker ID --token TOKEN\n"
     "  Gives a task back: fetchable at once, no failure counted.\n"},
    {"admin", cmd_admin,
     "berth admin task ID | retry ID [--retries N] | discard ID | retry-delivery ID\n"
     "            | incidents [--limit N] [--after ID] | checkpoint DIR\n"
     "            | tasks [--topic T] [--state ready|delayed|locked|backoff|terminal] [--limit N]\n"
     "                    [--after NEXT]\n"
     "            | deploy ID --channel NAME[,transport=pull][,reply-max-bytes=N]\n"
     "                                  [,content-types=A|B] [--channel ...]\n"
     "            | retire ID | deployments\n"
     "            [--admin URL] [--admin-key-file FILE]\n"
     "  The operator's surface: a task's state and last error; re-offer a terminal task\n"
     "  (with a fresh failure budget, or N); discard one; re-arm a poisoned delivery;\n"
     "  incidents, oldest first, in pages; a consistent copy of the store (a backup);\n"
     "  deploy a new version of a deployment's channels (the version before drains);\n"
     "  retire one (it drains, then retires once it holds nothing pending); list them.\n"},
    {"stats", cmd_stats,
     "berth stats [--admin URL] [--admin-key-file FILE]\n"
     "  Tasks by topic and state, the outbox, waiting fetches.\n"},
    {"top", cmd_top,
     "berth top [--metrics URL] [--count N]\n"
     "  A live view, every second: tasks by topic and state, completions and failures per\n"
     "  second, waiting fetches, the outbox, the store's fsync p50/p99 (from /metrics).\n"},
    {"watch", cmd_watch,
     "berth watch [SUBJECT_PREFIX...] [--events URL] [--count N]\n"
     "  Prints events (task.parked.<topic>, task.completed.<topic>, ...) as they happen.\n"},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f,
            "usage: berth [--operate URL] [--events URL] [--admin URL] [--admin-key-file FILE]\n"
            "             [--json] [--timeout-ms MS]\n"
            "             [--tls-ca FILE] [--tls-server-name NAME] [--tls-insecure] COMMAND ...\n\n"
            "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %s", commands[i].usage);
    fprintf(f, "\nenvironment: BERTH_OPERATE, BERTH_EVENTS, BERTH_ADMIN, BERTH_ADMIN_KEY_FILE,\n"
               "BERTH_METRICS\n"
               "exit codes: 0 ok, 1 internal error, 2 usage, 3 refused by berthd (or a call\n"
               "ended refused or failed), 4 berthd unreachable, 5 an awaited call still waits\n");
}

static bool parse_u64(const char *s, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

int main(int argc, char **argv)
{
    if (sodium_init() < 0)
        return EX_INTERNAL;
    opts o = {
        .operate = getenv("BERTH_OPERATE"), .events = getenv("BERTH_EVENTS"), .timeout_ms = 10000};
    if (o.operate == NULL)
        o.operate = "tcp://127.0.0.1:7450";
    if (o.events == NULL)
        o.events = "tcp://127.0.0.1:7452";
    o.admin = getenv("BERTH_ADMIN") ? getenv("BERTH_ADMIN") : "tcp://127.0.0.1:7451";
    o.admin_key_file = getenv("BERTH_ADMIN_KEY_FILE");
    o.metrics = getenv("BERTH_METRICS") ? getenv("BERTH_METRICS") : "http://127.0.0.1:7453";
    const command *cmd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define STR_OPT(flag, field)                                                                       \
    if (strcmp(a, flag) == 0) {                                                                    \
        if (v == NULL)                                                                             \
            goto missing;                                                                          \
        o.field = v;                                                                               \
        i++;                                                                                       \
        continue;                                                                                  \
    }
#define NUM_OPT(flag, field, has)                                                                  \
    if (strcmp(a, flag) == 0) {                                                                    \
        if (!parse_u64(v, &o.field))                                                               \
            goto badnum;                                                                           \
        o.has = true;                                                                              \
        i++;                                                                                       \
        continue;                                                                                  \
    }
        STR_OPT("--operate", operate)
        STR_OPT("--admin", admin)
        STR_OPT("--metrics", metrics)
        STR_OPT("--admin-key-file", admin_key_file)
        STR_OPT("--after", after)
        if (strcmp(a, "--channel") == 0) {
            if (v == NULL)
                goto missing;
            if (o.nchannels == (int)(sizeof(o.channels) / sizeof(o.channels[0]))) {
                fprintf(stderr, "berth: too many --channel\n");
                return EX_USAGE;
            }
            o.channels[o.nchannels++] = v;
            i++;
            continue;
        }
        if (strcmp(a, "--complete") == 0) {
            if (v == NULL)
                goto missing;
            if (o.ncompletes == (int)(sizeof(o.completes) / sizeof(o.completes[0]))) {
                fprintf(stderr, "berth: too many --complete\n");
                return EX_USAGE;
            }
            o.completes[o.ncompletes++] = argv[i + 1];
            i++;
            continue;
        }
        STR_OPT("--topic", topic)
        STR_OPT("--state", state)
        NUM_OPT("--retries", retries, has_retries)
        NUM_OPT("--limit", limit, has_limit)
        STR_OPT("--events", events)
        STR_OPT("--worker", worker)
        STR_OPT("--token", token)
        STR_OPT("--content-type", content_type)
        STR_OPT("--key", key)
        STR_OPT("--delay", delay)
        STR_OPT("--at", at)
        NUM_OPT("--priority", priority, has_priority)
        STR_OPT("--result", result)
        STR_OPT("--code", code)
        STR_OPT("--message", message)
        STR_OPT("--details", details)
        STR_OPT("--tls-ca", tls_ca)
        STR_OPT("--tls-server-name", tls_server_name)
        NUM_OPT("--max", max, has_max)
        NUM_OPT("--lock-ms", lock_ms, has_lock)
        NUM_OPT("--wait-ms", wait_ms, has_wait)
        NUM_OPT("--retry-in-ms", retry_in_ms, has_retry_in)
        NUM_OPT("--retries-left", retries_left, has_retries_left)
        NUM_OPT("--count", count, has_count)
        NUM_OPT("--attempts", attempts, has_attempts)
        if (strcmp(a, "--await") == 0) {
            o.await = true;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            o.json = true;
            continue;
        }
        if (strcmp(a, "--tls-insecure") == 0) {
            o.tls_insecure = true;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            o.help = true;
            continue;
        }
        if (strcmp(a, "--timeout-ms") == 0) {
            /* How long to wait for berthd; for a call, each attempt's timeout. */
            if (!parse_u64(v, &o.timeout_arg))
                goto badnum;
            o.has_timeout = true;
            i++;
            continue;
        }
        if (strcmp(a, "--header") == 0) {
            const char *eq = v ? strchr(v, '=') : NULL;
            if (eq == NULL || eq == v || o.nheaders == MAX_HEADERS) {
                fprintf(stderr, "berth: --header takes NAME=VALUE\n");
                return EX_USAGE;
            }
            o.hnames[o.nheaders] = strndup(v, (size_t)(eq - v));
            o.hvalues[o.nheaders++] = eq + 1;
            i++;
            continue;
        }
        if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "berth: unknown option %s (see berth --help)\n", a);
            return EX_USAGE;
        }
        if (cmd == NULL) {
            for (size_t k = 0; k < N_COMMANDS; k++)
                if (strcmp(a, commands[k].name) == 0)
                    cmd = &commands[k];
            if (cmd == NULL) {
                fprintf(stderr, "berth: unknown command \"%s\" (see berth --help)\n", a);
                return EX_USAGE;
            }
            continue;
        }
        if (o.npos == (int)(sizeof(o.pos) / sizeof(o.pos[0]))) {
            fprintf(stderr, "berth: too many arguments\n");
            return EX_USAGE;
        }
        o.pos[o.npos++] = a;
        continue;
    missing:
        fprintf(stderr, "berth: %s needs a value\n", a);
        return EX_USAGE;
    badnum:
        fprintf(stderr, "berth: %s needs a number, got \"%s\"\n", a, v ? v : "");
        return EX_USAGE;
    }
    if ((o.has_max && o.max > UINT32_MAX) || (o.has_retries_left && o.retries_left > UINT32_MAX) ||
        (o.has_retries && o.retries > UINT32_MAX) || (o.has_limit && o.limit > UINT32_MAX)) {
        fprintf(stderr, "berth: --max, --limit, --retries and --retries-left take at most %u\n",
                UINT32_MAX);
        return EX_USAGE;
    }
    if (o.has_attempts && o.attempts > UINT32_MAX) {
        fprintf(stderr, "berth: --attempts takes at most %u\n", UINT32_MAX);
        return EX_USAGE;
    }
    if (o.has_timeout && (cmd == NULL || cmd->run != cmd_call)) {
        if (o.timeout_arg == 0 || o.timeout_arg > 3600000) {
            fprintf(stderr, "berth: --timeout-ms takes 1 to 3600000\n");
            return EX_USAGE;
        }
        o.timeout_ms = (int)o.timeout_arg;
    }
    if (cmd == NULL) {
        usage(o.help ? stdout : stderr);
        return o.help ? EX_OK : EX_USAGE;
    }
    if (o.help) {
        fputs(cmd->usage, stdout);
        return EX_OK;
    }
    return cmd->run(&o);
}
