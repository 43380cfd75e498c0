/* admin.c — see admin.h. begin() runs on the server's thread (nng's, or
 * berth's own loop), encode() on the engine's commit thread. The
 * AdminResponse is encoded as the operate Response is (convert.h
 * ENVELOPES): a table of each method's member and its fill. */
#include "gateway/admin.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stddef.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <sodium.h>

#include "berth/v1/admin.pb-c.h"
#include "gateway/convert.h"
#include "gateway/text.h"
#include "store/err.h"

struct gw_admin {
    uint8_t *key; /* NULL: no key file, loopback trust */
    size_t key_len;
    uint64_t skew_ms;
    char who[32];
};

/* ---- settings ---- */

static int load_key(gw_admin *a, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "admin-key-file: cannot read %s", path);
        return BERTH_EINVAL;
    }
    uint8_t buf[4097];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    while (n > 0 && isspace(buf[n - 1]))
        n--;
    if (n < GW_ADMIN_KEY_MIN || n >= sizeof(buf)) {
        snprintf(err, errlen, "admin-key-file: %s holds %zu bytes of key; it needs %d to 4096",
                 path, n, GW_ADMIN_KEY_MIN);
        sodium_memzero(buf, sizeof(buf));
        return BERTH_EINVAL;
    }
    a->key = sodium_malloc(n);
    if (a->key == NULL) {
        snprintf(err, errlen, "out of memory");
        return BERTH_ENOMEM;
    }
    memcpy(a->key, buf, n);
    a->key_len = n;
    sodium_memzero(buf, sizeof(buf));
    /* Keyed, so that the logs it appears in cannot test guesses of a
     * key that is a passphrase. */
    static const char label[] = "berth admin fingerprint";
    uint8_t h[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, a->key, a->key_len);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, sizeof(label) - 1);
    crypto_auth_hmacsha256_final(&st, h);
    char hex[17];
    sodium_bin2hex(hex, sizeof(hex), h, 8);
    snprintf(a->who, sizeof(a->who), "key:%s", hex);
    return BERTH_OK;
}

/* Whether host (a numeric address, its port after a colon, IPv6 in
 * brackets) is a loopback address; with names_ok, "localhost" too. */
static bool host_loopback(const char *host, bool names_ok)
{
    const char *colon = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
    if (colon != NULL && host[0] == '[')
        colon++;
    size_t n = colon ? (size_t)(colon - host) : strlen(host);
    char h[64];
    if (n < 2 || n >= sizeof(h) || memchr(host, '@', n) != NULL)
        return false;
    memcpy(h, host, n);
    h[n] = '\0';
    if (names_ok && strcasecmp(h, "localhost") == 0)
        return true;
    struct in_addr v4;
    struct in6_addr v6;
    if (inet_pton(AF_INET, h, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    if (h[0] == '[' && h[n - 1] == ']') {
        h[n - 1] = '\0';
        return inet_pton(AF_INET6, h + 1, &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
    }
    return false;
}

/* Whether url can only be reached from this machine: ipc:// or
 * abstract://, or tcp:// / tls+tcp:// on a numeric loopback address (a
 * name could resolve anywhere; ws:// is reachable from any web page the
 * operator's browser opens). */
static bool loopback_only(const char *url)
{
    if (strncmp(url, "ipc://", 6) == 0 || strncmp(url, "abstract://", 11) == 0)
        return true;
    if (strncmp(url, "tcp://", 6) == 0)
        return host_loopback(url + 6, false);
    if (strncmp(url, "tls+tcp://", 10) == 0)
        return host_loopback(url + 10, false);
    return false;
}

bool gw_admin_loopback_http(const char *url)
{
    return strncmp(url, "http://", 7) == 0 && host_loopback(url + 7, false);
}

bool gw_admin_loopback_host(const char *host)
{
    return host != NULL && host_loopback(host, true);
}

int gw_admin_open(const char *url, const char *key_file, uint64_t skew_ms, gw_admin **out,
                  char *err, size_t errlen)
{
    *out = NULL;
    if (key_file == NULL && !loopback_only(url)) {
        snprintf(err, errlen,
                 "admin %s is not loopback or ipc://: set admin-key-file, or bind the admin "
                 "surface to 127.0.0.1",
                 url);
        return BERTH_EINVAL;
    }
    gw_admin *a = sodium_init() < 0 ? NULL : calloc(1, sizeof(*a));
    if (a == NULL) {
        snprintf(err, errlen, "out of memory, or libsodium failed to initialise");
        return BERTH_ENOMEM;
    }
    a->skew_ms = skew_ms;
    snprintf(a->who, sizeof(a->who), "loopback");
    if (key_file != NULL) {
        int rv = load_key(a, key_file, err, errlen);
        if (rv != BERTH_OK) {
            free(a);
            return rv;
        }
        if (!loopback_only(url) && strncmp(url, "tls+tcp://", 10) != 0)
            fprintf(stderr,
                    "berthd: warning: admin %s is not TLS: whoever sees a request can send it "
                    "again within admin-skew-ms; prefer tls+tcp://\n",
                    url);
    }
    *out = a;
    return BERTH_OK;
}

void gw_admin_close(gw_admin *a)
{
    if (a == NULL)
        return;
    if (a->key != NULL)
        sodium_free(a->key);
    free(a);
}

const char *gw_admin_who(const gw_admin *a)
{
    return a->who;
}

/* ---- credentials ---- */

static bool varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *at < len; shift += 7) {
        uint8_t b = p[(*at)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* Whether field number f of AdminRequest is a member of `method`. */
static bool is_method(uint32_t f)
{
    const ProtobufCFieldDescriptor *d =
        protobuf_c_message_descriptor_get_field(&berth__v1__admin_request__descriptor, f);
    return d != NULL && (d->flags & PROTOBUF_C_FIELD_FLAG_ONEOF);
}

/* The method field of an encoded AdminRequest, as encoded (key, length,
 * bytes): false unless there is exactly one. */
static bool method_bytes(const uint8_t *p, size_t len, const uint8_t **m, size_t *mlen)
{
    size_t at = 0;
    int found = 0;
    while (at < len) {
        size_t start = at;
        uint64_t key, n = 0;
        if (!varint(p, len, &at, &key))
            return false;
        switch (key & 7) {
        case 0:
            if (!varint(p, len, &at, &n))
                return false;
            break;
        case 1:
            at += 8;
            break;
        case 2:
            if (!varint(p, len, &at, &n) || n > len - at)
                return false;
            at += n;
            break;
        case 5:
            at += 4;
            break;
        default:
            return false;
        }
        if (at > len)
            return false;
        if (is_method((uint32_t)(key >> 3))) {
            found++;
            *m = p + start;
            *mlen = at - start;
        }
    }
    return found == 1;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int unauthenticated(engine_status *st, const char *why)
{
    memset(st, 0, sizeof(*st));
    st->code = ENGINE_CODE_UNAUTHENTICATED;
    snprintf(st->message, sizeof(st->message), "%s", why);
    return BERTH_EINVAL;
}

/* NULL if mac is HMAC-SHA256(key, ts_ms as 8 big-endian bytes || msg)
 * and ts_ms is within the skew of berthd's clock; else why not. */
static const char *verify(const gw_admin *a, uint64_t ts_ms, const uint8_t *msg, size_t len,
                          const uint8_t *mac, size_t mac_len)
{
    uint64_t now = now_ms();
    uint64_t skew = now > ts_ms ? now - ts_ms : ts_ms - now;
    if (skew > a->skew_ms)
        return "credentials: ts_ms is too far from berthd's clock (admin-skew-ms)";
    if (mac_len != crypto_auth_hmacsha256_BYTES || msg == NULL)
        return "credentials do not match";
    uint8_t ts[8], want[crypto_auth_hmacsha256_BYTES];
    for (int i = 0; i < 8; i++)
        ts[i] = (uint8_t)(ts_ms >> (56 - 8 * i));
    crypto_auth_hmacsha256_state h;
    crypto_auth_hmacsha256_init(&h, a->key, a->key_len);
    crypto_auth_hmacsha256_update(&h, ts, sizeof(ts));
    crypto_auth_hmacsha256_update(&h, msg, len);
    crypto_auth_hmacsha256_final(&h, want);
    if (crypto_verify_32(want, mac) != 0)
        return "credentials do not match";
    return NULL;
}

bool gw_admin_keyed(const gw_admin *a)
{
    return a->key != NULL;
}

const char *gw_admin_verify(const gw_admin *a, uint64_t ts_ms, const void *msg, size_t len,
                            const uint8_t mac[32])
{
    return verify(a, ts_ms, msg, len, mac, crypto_auth_hmacsha256_BYTES);
}

/* OK, or UNAUTHENTICATED: nothing of the request is looked at before. */
static int authenticate(const gw_admin *a, const Berth__V1__AdminRequest *req, const uint8_t *data,
                        size_t len, engine_status *st)
{
    if (a->key == NULL)
        return BERTH_OK;
    const Berth__V1__Credentials *c = req->credentials;
    if (c == NULL || !c->has_ts_ms || !c->has_auth)
        return unauthenticated(st, "credentials are required (ts_ms and auth)");
    const uint8_t *m = NULL;
    size_t mlen = 0;
    if (!method_bytes(data, len, &m, &mlen))
        m = NULL;
    const char *why = verify(a, c->ts_ms, m, mlen, c->auth.data, c->auth.len);
    return why == NULL ? BERTH_OK : unauthenticated(st, why);
}

/* ---- the codec ---- */

/* One admin request (the codec's call). */
typedef struct gw_admin_call {
    Berth__V1__AdminRequest *req; /* unpacked; ereq points into it */
    engine_request ereq;
    const gw_admin *a;
    gw_arena arena;
} gw_admin_call;

static void call_init(void *call)
{
    memset(call, 0, sizeof(gw_admin_call));
}

static int refuse(engine_status *st, engine_code code, const char *why)
{
    memset(st, 0, sizeof(*st));
    st->code = code;
    snprintf(st->message, sizeof(st->message), "%s", why);
    return BERTH_EINVAL;
}

/* A deploy's declarations as the engine takes them (borrowing the
 * strings of the decoded request). */
static int map_deploy(const Berth__V1__DeployRequest *d, engine_request *out, gw_arena *a,
                      engine_status *st)
{
    out->op = ENGINE_OP_DEPLOY;
    out->u.deploy.id = d->id ? d->id : "";
    if (d->n_channels > ENGINE_DEPLOY_CHANNELS_MAX) {
        refuse(st, ENGINE_CODE_INVALID_ARGUMENT, "channels: over the ceiling");
        snprintf(st->field, sizeof(st->field), "channels");
        st->has_limit = true;
        st->limit = ENGINE_DEPLOY_CHANNELS_MAX;
        return BERTH_EINVAL;
    }
    engine_channel *cs = d->n_channels ? gw_arena_alloc(a, d->n_channels * sizeof(*cs)) : NULL;
    if (d->n_channels > 0 && cs == NULL)
        return refuse(st, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t i = 0; i < d->n_channels; i++) {
        const Berth__V1__ChannelDecl *c = d->channels[i];
        cs[i] = (engine_channel){
            .name = c->name ? c->name : "",
            .transport = c->transport,
            .reply_max_bytes = c->reply_max_bytes,
            .content_types = (const char *const *)c->content_types,
            .n_content_types = c->n_content_types,
        };
    }
    out->u.deploy.channels = cs;
    out->u.deploy.n_channels = d->n_channels;
    return BERTH_OK;
}

/* The engine request for the method, or BERTH_EINVAL with the status. */
static int request_map(const Berth__V1__AdminRequest *m, engine_request *out, gw_arena *a,
                       engine_status *st)
{
    memset(out, 0, sizeof(*out));
    switch (m->method_case) {
    case BERTH__V1__ADMIN_REQUEST__METHOD_GET_TASK:
        out->op = ENGINE_OP_GET_TASK;
        out->u.get_task.id = m->get_task->id ? m->get_task->id : "";
        return BERTH_OK;
    case BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL:
        out->op = ENGINE_OP_RETRY_TERMINAL;
        out->u.retry_terminal.id = m->retry_terminal->id ? m->retry_terminal->id : "";
        out->u.retry_terminal.has_retries = m->retry_terminal->has_retries;
        out->u.retry_terminal.retries = m->retry_terminal->retries;
        return BERTH_OK;
    case BERTH__V1__ADMIN_REQUEST__METHOD_DISCARD_TERMINAL:
        out->op = ENGINE_OP_DISCARD_TERMINAL;
        out->u.discard_terminal.id = m->discard_terminal->id ? m->discard_terminal->id : "";
        return BERTH_OK;
    case BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_DELIVERY:
        out->op = ENGINE_OP_RETRY_DELIVERY;
        out->u.retry_delivery.id = m->retry_delivery->id ? m->retry_delivery->id : "";
        return BERTH_OK;
    case BERTH__V1__ADMIN_REQUEST__METHOD_LIST_INCIDENTS:
        out->op = ENGINE_OP_LIST_INCIDENTS;
        if (m->list_incidents->has_limit && m->list_incidents->limit == 0) {
            refuse(st, ENGINE_CODE_INVALID_ARGUMENT,
                   "limit: 0 lists nothing; omit it for the "
                   "default");
            snprintf(st->field, sizeof(st->field), "limit");
            return BERTH_EINVAL;
        }
        out->u.list_incidents.limit = m->list_incidents->limit;
        out->u.list_incidents.after_id = m->list_incidents->after_id;
        out->u.list_incidents.open_only = m->list_incidents->open_only;
        return BERTH_OK;
    case BERTH__V1__ADMIN_REQUEST__METHOD_STATS:
        out->op = ENGINE_OP_STATS;
        return BERTH_OK;
    case BERTH__V1__ADMIN_REQUEST__METHOD_CHECKPOINT:
        out->op = ENGINE_OP_CHECKPOINT;
        out->u.checkpoint.dir = m->checkpoint->dir;
        return BERTH_OK;
    case BERTH__V1__ADMIN_REQUEST__METHOD_LIST_TASKS: {
        const Berth__V1__ListTasksRequest *l = m->list_tasks;
        out->op = ENGINE_OP_LIST_TASKS;
        if (l->has_limit && l->limit == 0) {
            refuse(st, ENGINE_CODE_INVALID_ARGUMENT,
                   "limit: 0 lists nothing; omit it for the default");
            snprintf(st->field, sizeof(st->field), "limit");
            return BERTH_EINVAL;
        }
        out->u.list_tasks.topic = l->topic;
        out->u.list_tasks.state = l->has_state ? (engine_task_state)l->state : 0;
        out->u.list_tasks.limit = l->limit;
        out->u.list_tasks.after = l->after_id;
        return BERTH_OK;
    }
    case BERTH__V1__ADMIN_REQUEST__METHOD_DEPLOY:
        return map_deploy(m->deploy, out, a, st);
    case BERTH__V1__ADMIN_REQUEST__METHOD_RETIRE:
        out->op = ENGINE_OP_RETIRE;
        out->u.retire.id = m->retire->id ? m->retire->id : "";
        return BERTH_OK;
    case BERTH__V1__ADMIN_REQUEST__METHOD_LIST_DEPLOYMENTS:
        out->op = ENGINE_OP_LIST_DEPLOYMENTS;
        return BERTH_OK;
    default:
        return refuse(st, ENGINE_CODE_INVALID_ARGUMENT, "the request names no method");
    }
}

static int call_begin(const void *ctx, void *call, engine *e, uint64_t owner, const void *data,
                      size_t len, size_t max_msg, engine_done_fn done, void *arg, engine_status *st)
{
    gw_admin_call *c = call;
    c->a = ctx;
    memset(st, 0, sizeof(*st));
    if (len > max_msg) {
        refuse(st, ENGINE_CODE_RESOURCE_EXHAUSTED, "request: over the admin surface's ceiling");
        st->has_limit = true;
        st->limit = max_msg;
        snprintf(st->field, sizeof(st->field), "request");
        return BERTH_EINVAL;
    }
    c->req = berth__v1__admin_request__unpack(NULL, len, data);
    if (c->req == NULL)
        return refuse(st, ENGINE_CODE_INVALID_ARGUMENT,
                      "the request is not a berth.v1.AdminRequest (malformed protobuf)");
    int rv = authenticate(c->a, c->req, data, len, st);
    if (rv == BERTH_OK)
        rv = gw_text_check(&berth__v1__admin_request__descriptor, data, len, true, st);
    if (rv == BERTH_OK)
        rv = request_map(c->req, &c->ereq, &c->arena, st);
    if (rv != BERTH_OK)
        return rv;
    c->ereq.owner = owner;
    if (engine_exec(e, &c->ereq, done, arg) != BERTH_OK) {
        refuse(st, ENGINE_CODE_UNAVAILABLE, "berthd is shutting down");
        st->engine_code = ENGINE_EC_ENGINE_UNAVAILABLE;
        st->retryable = true;
        return BERTH_ECLOSED;
    }
    return BERTH_OK;
}

static int status_encode(const engine_status *st, nng_msg **out)
{
    return gw_encode_envelope(&berth__v1__admin_response__descriptor, st, 0, NULL, out);
}

static Berth__V1__Error *error_to_wire(const engine_error *e, Berth__V1__Error *w)
{
    if (e->code == NULL && e->message == NULL && e->details == NULL)
        return NULL;
    berth__v1__error__init(w);
    w->code = (char *)e->code;
    w->message = (char *)e->message;
    w->details = (char *)e->details;
    return w;
}

static void task_info_to_wire(const engine_task_info *t, Berth__V1__TaskInfo *w,
                              Berth__V1__Error *err)
{
    w->id = (char *)t->id;
    w->topic = (char *)t->topic;
    w->has_state = 1;
    w->state = (Berth__V1__TaskInfo__State)t->state;
    w->worker_id = (char *)t->worker_id;
    w->has_lock_expires_at_ms = t->worker_id != NULL;
    w->lock_expires_at_ms = t->lock_expires_at_ms;
    w->has_available_at_ms = 1;
    w->available_at_ms = t->available_at_ms;
    w->has_attempt = 1;
    w->attempt = t->attempt;
    w->has_retries_left = 1;
    w->retries_left = t->retries_left;
    w->last_error = error_to_wire(&t->last_error, err);
    w->has_created_at_ms = 1;
    w->created_at_ms = t->created_at_ms;
    w->has_payload_bytes = 1;
    w->payload_bytes = (uint32_t)t->payload_bytes;
    w->has_priority = 1;
    w->priority = t->priority;
}

/* d as the wire shows it, its arrays from a; false: no memory. */
static bool deployment_to_wire(const engine_deployment *d, Berth__V1__Deployment *w, gw_arena *a)
{
    berth__v1__deployment__init(w);
    w->id = (char *)d->id;
    w->has_version = w->has_state = w->has_created_at_ms = 1;
    w->version = d->version;
    w->state = (Berth__V1__Deployment__State)d->state;
    w->created_at_ms = d->created_at_ms;
    w->has_retired_at_ms = d->retired_at_ms != 0;
    w->retired_at_ms = d->retired_at_ms;
    w->has_pending_deliveries = w->has_tasks = w->has_calls_backing_off = 1;
    w->has_terminal_tasks = w->has_poisoned_deliveries = w->has_calls_retrying = 1;
    w->pending_deliveries = d->pending_deliveries;
    w->tasks = d->tasks;
    w->calls_backing_off = d->calls_backing_off;
    w->terminal_tasks = d->terminal_tasks;
    w->poisoned_deliveries = d->poisoned_deliveries;
    w->calls_retrying = d->calls_retrying;
    size_t n = d->n_channels;
    Berth__V1__ChannelDecl *v = n ? gw_arena_alloc(a, n * sizeof(*v)) : NULL;
    Berth__V1__ChannelDecl **p = n ? gw_arena_alloc(a, n * sizeof(*p)) : NULL;
    if (n > 0 && (v == NULL || p == NULL))
        return false;
    for (size_t i = 0; i < n; i++) {
        const engine_channel *c = &d->channels[i];
        berth__v1__channel_decl__init(&v[i]);
        v[i].name = (char *)c->name;
        v[i].transport = (char *)c->transport;
        v[i].has_reply_max_bytes = c->reply_max_bytes != 0;
        v[i].reply_max_bytes = c->reply_max_bytes;
        v[i].n_content_types = c->n_content_types;
        v[i].content_types = (char **)c->content_types;
        p[i] = &v[i];
    }
    w->n_channels = n;
    w->channels = p;
    return true;
}

/* The operator's changes, each with the member of its request that names
 * what it changed: the line it leaves on stderr once it is durable. */
static const struct {
    engine_op op;
    const char *what;
    size_t id; /* offsetof the engine_request's const char * naming it */
} changes[] = {
    {ENGINE_OP_RETRY_TERMINAL, "retry_terminal", offsetof(engine_request, u.retry_terminal.id)},
    {ENGINE_OP_DISCARD_TERMINAL, "discard_terminal",
     offsetof(engine_request, u.discard_terminal.id)},
    {ENGINE_OP_RETRY_DELIVERY, "retry_delivery", offsetof(engine_request, u.retry_delivery.id)},
    {ENGINE_OP_CHECKPOINT, "checkpoint", offsetof(engine_request, u.checkpoint.dir)},
    {ENGINE_OP_DEPLOY, "deploy", offsetof(engine_request, u.deploy.id)},
    {ENGINE_OP_RETIRE, "retire", offsetof(engine_request, u.retire.id)},
};

void gw_admin_log_change(const gw_admin *a, const char *via, const engine_request *req)
{
    for (size_t k = 0; k < sizeof(changes) / sizeof(changes[0]); k++)
        if (changes[k].op == req->op) {
            const char *id = *(const char *const *)((const char *)req + changes[k].id);
            fprintf(stderr, "berthd: admin: %s%s%s %s %s\n", via ? via : "", via ? " " : "", a->who,
                    changes[k].what, id);
            return;
        }
}

/* The fill of each method's member (the reply is OK): false, no memory. */

/* The deployment a deploy or a retire answers with (NULL: none). */
static bool one_deployment(const engine_reply *r, Berth__V1__Deployment **out, gw_arena *a)
{
    *out = NULL;
    if (r->n_deployments == 0)
        return true;
    *out = gw_arena_alloc(a, sizeof(**out));
    return *out != NULL && deployment_to_wire(&r->deployments[0], *out, a);
}

static bool fill_deploy(void *member, const engine_reply *r, const engine_request *req, gw_arena *a)
{
    (void)req;
    return one_deployment(r, &((Berth__V1__DeployResponse *)member)->deployment, a);
}

static bool fill_retire(void *member, const engine_reply *r, const engine_request *req, gw_arena *a)
{
    (void)req;
    return one_deployment(r, &((Berth__V1__RetireResponse *)member)->deployment, a);
}

static bool fill_list_deployments(void *member, const engine_reply *r, const engine_request *req,
                                  gw_arena *a)
{
    (void)req;
    Berth__V1__ListDeploymentsResponse *w = member;
    bool ok = true;
    size_t n = r->n_deployments;
    w->deployments =
        (Berth__V1__Deployment **)gw_arena_array(a, n, sizeof(Berth__V1__Deployment), &ok);
    for (size_t i = 0; ok && i < n; i++)
        ok = deployment_to_wire(&r->deployments[i], w->deployments[i], a);
    w->n_deployments = ok ? n : 0;
    return ok;
}

static bool fill_get_task(void *member, const engine_reply *r, const engine_request *req,
                          gw_arena *a)
{
    (void)req;
    Berth__V1__GetTaskResponse *w = member;
    Berth__V1__TaskInfo *info = gw_arena_alloc(a, sizeof(*info));
    Berth__V1__Error *err = gw_arena_alloc(a, sizeof(*err));
    if (info == NULL || err == NULL)
        return false;
    berth__v1__task_info__init(info);
    berth__v1__error__init(err);
    task_info_to_wire(&r->task, info, err);
    w->task = info;
    return true;
}

/* n wire items of `size` bytes, each with an Error beside it (errs). */
static void **with_errors(gw_arena *a, size_t n, size_t size, Berth__V1__Error **errs, bool *ok)
{
    void **p = gw_arena_array(a, n, size, ok);
    *errs = *ok && n > 0 ? gw_arena_alloc(a, n * sizeof(**errs)) : NULL;
    if (n > 0 && *errs == NULL)
        *ok = false;
    return p;
}

static bool fill_list_tasks(void *member, const engine_reply *r, const engine_request *req,
                            gw_arena *a)
{
    (void)req;
    Berth__V1__ListTasksResponse *w = member;
    bool ok = true;
    size_t n = r->n_infos;
    Berth__V1__Error *errs;
    w->tasks = (Berth__V1__TaskInfo **)with_errors(a, n, sizeof(Berth__V1__TaskInfo), &errs, &ok);
    for (size_t i = 0; ok && i < n; i++) {
        berth__v1__task_info__init(w->tasks[i]);
        task_info_to_wire(&r->infos[i], w->tasks[i], &errs[i]);
    }
    w->n_tasks = ok ? n : 0;
    if (r->next[0] != '\0')
        w->next_after_id = (char *)r->next;
    return ok;
}

static bool fill_checkpoint(void *member, const engine_reply *r, const engine_request *req,
                            gw_arena *a)
{
    (void)r, (void)a;
    ((Berth__V1__CheckpointResponse *)member)->dir = (char *)req->u.checkpoint.dir;
    return true;
}

static bool fill_list_incidents(void *member, const engine_reply *r, const engine_request *req,
                                gw_arena *a)
{
    (void)req;
    Berth__V1__ListIncidentsResponse *w = member;
    bool ok = true;
    size_t n = r->n_incidents;
    Berth__V1__Error *errs;
    w->incidents =
        (Berth__V1__Incident **)with_errors(a, n, sizeof(Berth__V1__Incident), &errs, &ok);
    for (size_t i = 0; ok && i < n; i++) {
        const engine_incident *in = &r->incidents[i];
        Berth__V1__Incident *v = w->incidents[i];
        berth__v1__incident__init(v);
        v->id = (char *)in->id;
        v->has_kind = 1;
        v->kind = (Berth__V1__Incident__Kind)in->kind;
        v->subject_id = (char *)in->subject_id;
        v->topic = (char *)in->topic;
        v->error = error_to_wire(&in->error, &errs[i]);
        v->has_at_ms = 1;
        v->at_ms = in->at_ms;
        v->has_open = 1;
        v->open = in->open;
    }
    w->n_incidents = ok ? n : 0;
    if (r->next_incident[0] != '\0')
        w->next_after_id = (char *)r->next_incident;
    return ok;
}

static void topic_stats_to_wire(const engine_topic_stats *t, Berth__V1__TopicStats *v)
{
    berth__v1__topic_stats__init(v);
    v->topic = (char *)t->topic;
    v->has_ready = v->has_locked = v->has_backoff = v->has_terminal = 1;
    v->has_delayed = 1;
    v->delayed = t->delayed;
    v->ready = t->ready;
    v->locked = t->locked;
    v->backoff = t->backoff;
    v->terminal = t->terminal;
    v->has_waiting_fetches = 1;
    v->waiting_fetches = t->waiting_fetches;
}

static bool fill_stats(void *member, const engine_reply *r, const engine_request *req, gw_arena *a)
{
    (void)req;
    Berth__V1__StatsResponse *w = member;
    const engine_stats *s = &r->stats;
    w->has_outbox_pending = 1;
    w->outbox_pending = s->outbox_pending;
    w->has_poisoned = 1;
    w->poisoned = s->poisoned;
    w->has_tasks = 1;
    w->tasks = s->tasks;
    w->has_waiting_fetches = 1;
    w->waiting_fetches = s->waiting_fetches;
    bool ok = true;
    size_t n = r->n_topic_stats;
    w->topics = (Berth__V1__TopicStats **)gw_arena_array(a, n, sizeof(Berth__V1__TopicStats), &ok);
    for (size_t i = 0; ok && i < n; i++)
        topic_stats_to_wire(&r->topic_stats[i], w->topics[i]);
    w->n_topics = ok ? n : 0;
    return ok;
}

/* Each admin method's member of AdminResponse; NULL fill: an empty one. */
static const gw_method_out admin_methods[] = {
    {ENGINE_OP_DEPLOY, BERTH__V1__ADMIN_RESPONSE__METHOD_DEPLOY, fill_deploy},
    {ENGINE_OP_RETIRE, BERTH__V1__ADMIN_RESPONSE__METHOD_RETIRE, fill_retire},
    {ENGINE_OP_LIST_DEPLOYMENTS, BERTH__V1__ADMIN_RESPONSE__METHOD_LIST_DEPLOYMENTS,
     fill_list_deployments},
    {ENGINE_OP_GET_TASK, BERTH__V1__ADMIN_RESPONSE__METHOD_GET_TASK, fill_get_task},
    {ENGINE_OP_LIST_TASKS, BERTH__V1__ADMIN_RESPONSE__METHOD_LIST_TASKS, fill_list_tasks},
    {ENGINE_OP_RETRY_TERMINAL, BERTH__V1__ADMIN_RESPONSE__METHOD_RETRY_TERMINAL, NULL},
    {ENGINE_OP_DISCARD_TERMINAL, BERTH__V1__ADMIN_RESPONSE__METHOD_DISCARD_TERMINAL, NULL},
    {ENGINE_OP_RETRY_DELIVERY, BERTH__V1__ADMIN_RESPONSE__METHOD_RETRY_DELIVERY, NULL},
    {ENGINE_OP_CHECKPOINT, BERTH__V1__ADMIN_RESPONSE__METHOD_CHECKPOINT, fill_checkpoint},
    {ENGINE_OP_LIST_INCIDENTS, BERTH__V1__ADMIN_RESPONSE__METHOD_LIST_INCIDENTS,
     fill_list_incidents},
    {ENGINE_OP_STATS, BERTH__V1__ADMIN_RESPONSE__METHOD_STATS, fill_stats},
};

static int reply_encode(void *call, const engine_reply *r, nng_msg **out)
{
    gw_admin_call *c = call;
    if (r->status.code == ENGINE_CODE_OK)
        gw_admin_log_change(c->a, NULL, &c->ereq);
    size_t k = 0, n = sizeof(admin_methods) / sizeof(admin_methods[0]);
    while (k < n && admin_methods[k].op != r->op)
        k++;
    return gw_encode_method(&berth__v1__admin_response__descriptor,
                            k < n ? &admin_methods[k] : NULL, &c->ereq, r, &c->arena, out);
}

static void call_fini(void *call)
{
    gw_admin_call *c = call;
    if (c->req != NULL)
        berth__v1__admin_request__free_unpacked(c->req, NULL);
    c->req = NULL;
    gw_arena_reset(&c->arena);
}

const gw_codec gw_admin_codec = {
    .call_size = sizeof(gw_admin_call),
    .init = call_init,
    .begin = call_begin,
    .encode = reply_encode,
    .encode_status = status_encode,
    .fini = call_fini,
};
