/*
 * console.c — see console.h. Handlers run on nng's HTTP threads: they
 * check the request, hand one engine request over and return; the answer
 * is written on the engine's commit thread, which finishes the exchange
 * (as gateway/metrics.c does). Nothing here blocks an nng thread.
 */
#include "gateway/console.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <sodium.h>

#include "console/files.h"
#include "gateway/api.h"
#include "store/err.h"

struct gw_console {
    engine *e;
    const gw_admin *admin; /* borrowed: the key, the skew, the log line */
    bool loopback;         /* the listener is on a loopback address */
    atomic_bool stopping;  /* gw_console_stop(): nothing more reaches the engine */
    atomic_int inflight;   /* API requests between their start and their answer */
};

typedef struct job {
    gw_api_req q;
    nng_aio *aio;
    gw_console *c;
} job;

static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src "
                          "'self' data:; connect-src 'self'; base-uri 'none'; form-action "
                          "'none'; frame-ancestors 'none'";

/* Answers the exchange: status, the console's headers, and body. */
static void finish(nng_aio *aio, uint16_t status, const char *type, const void *body, size_t len,
                   const char *etag)
{
    nng_http_res *res;
    if (nng_http_res_alloc(&res) != 0) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    int rv = nng_http_res_set_status(res, status);
    if (rv == 0 && type != NULL)
        rv = nng_http_res_set_header(res, "Content-Type", type);
    if (rv == 0)
        rv = nng_http_res_set_header(res, "Content-Security-Policy", csp);
    if (rv == 0)
        rv = nng_http_res_set_header(res, "X-Content-Type-Options", "nosniff");
    if (rv == 0)
        rv = nng_http_res_set_header(res, "Referrer-Policy", "no-referrer");
    if (rv == 0)
        rv = nng_http_res_set_header(res, "X-Frame-Options", "DENY");
    if (rv == 0)
        rv = nng_http_res_set_header(res, "Cache-Control", etag ? "no-cache" : "no-store");
    if (rv == 0 && etag != NULL)
        rv = nng_http_res_set_header(res, "ETag", etag);
    if (rv == 0 && len > 0)
        rv = nng_http_res_copy_data(res, body, len);
    if (rv != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static const char json_type[] = "application/json; charset=utf-8";

/* A refusal of berthd's own, as JSON. */
static void refuse(nng_aio *aio, uint16_t status, const char *code, const char *message)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL) {
        finish(aio, 503, "text/plain; charset=utf-8", "out of memory\n", 14, NULL);
        return;
    }
    gw_api_refusal(f, code, message);
    fclose(f);
    finish(aio, status, json_type, buf, len, NULL);
    free(buf);
}

/* Whether this request may be served at all (the posture without a
 * key); else it is refused here. */
static bool reachable(gw_console *c, nng_aio *aio, nng_http_req *req)
{
    if (gw_admin_keyed(c->admin))
        return true;
    if (!c->loopback) {
        refuse(aio, 403, "PERMISSION_DENIED",
               "the console is served without admin-key-file only on a loopback --metrics "
               "address: give berthd an admin-key-file");
        return false;
    }
    if (!gw_admin_loopback_host(nng_http_req_get_header(req, "Host"))) {
        refuse(aio, 403, "PERMISSION_DENIED",
               "without admin-key-file the console answers only to Host 127.0.0.1, [::1] or "
               "localhost");
        return false;
    }
    return true;
}

/* "/" and "/console": to the page. */
static void on_root(nng_aio *aio)
{
    nng_http_res *res;
    if (nng_http_res_alloc(&res) != 0) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_http_res_set_status(res, 302);
    if (nng_http_res_set_header(res, "Location", "/console/") != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

/* ---- the files ---- */

static void on_file(nng_aio *aio)
{
    nng_http_req *req = nng_aio_get_input(aio, 0);
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    gw_console *c = nng_http_handler_get_data(h);
    if (!reachable(c, aio, req))
        return;
    const char *uri = nng_http_req_get_uri(req);
    size_t n = strcspn(uri, "?#");
    if (n == 8) { /* "/console" */
        on_root(aio);
        return;
    }
    static const char prefix[] = "/console/";
    const char *name = NULL;
    if (n >= sizeof(prefix) - 1 && strncmp(uri, prefix, sizeof(prefix) - 1) == 0)
        name = uri + sizeof(prefix) - 1, n -= sizeof(prefix) - 1;
    if (name != NULL && n == 0)
        name = "index.html", n = strlen(name);
    for (size_t i = 0; name != NULL && i < console_n_files; i++) {
        const console_file *cf = &console_files[i];
        if (strlen(cf->name) != n || strncmp(cf->name, name, n) != 0)
            continue;
        const char *inm = nng_http_req_get_header(req, "If-None-Match");
        if (inm != NULL && strcmp(inm, console_etag) == 0)
            finish(aio, 304, NULL, NULL, 0, console_etag);
        else
            finish(aio, 200, cf->type, cf->data, cf->len, console_etag);
        return;
    }
    finish(aio, 404, "text/plain; charset=utf-8", "not found\n", 10, NULL);
}

/* ---- the API ---- */

/* Whether the request carries the key's signature (when there is a key);
 * else it is answered 401 here. */
static bool signed_by_key(gw_console *c, nng_aio *aio, nng_http_req *req, const void *body,
                          size_t len)
{
    if (!gw_admin_keyed(c->admin))
        return true;
    const char *ts = nng_http_req_get_header(req, "X-Berth-Ts");
    const char *auth = nng_http_req_get_header(req, "X-Berth-Auth");
    const char *why = "credentials are required (X-Berth-Ts and X-Berth-Auth)";
    uint8_t mac[32];
    size_t mac_len = 0;
    char *end = NULL;
    unsigned long long ts_ms = ts != NULL && *ts >= '0' && *ts <= '9' ? strtoull(ts, &end, 10) : 0;
    if (ts != NULL && auth != NULL) {
        why = "credentials do not match";
        if (end != NULL && *end == '\0' && strlen(auth) == 64 &&
            sodium_hex2bin(mac, sizeof(mac), auth, 64, NULL, &mac_len, NULL) == 0 &&
            mac_len == sizeof(mac)) {
            const char *method = nng_http_req_get_method(req);
            const char *uri = nng_http_req_get_uri(req);
            size_t ml = strlen(method), ul = strlen(uri);
            char *msg = malloc(ml + ul + len + 2);
            if (msg == NULL) {
                refuse(aio, 503, "UNAVAILABLE", "out of memory");
                return false;
            }
            memcpy(msg, method, ml);
            msg[ml] = '\n';
            memcpy(msg + ml + 1, uri, ul);
            msg[ml + 1 + ul] = '\n';
            if (len > 0)
                memcpy(msg + ml + ul + 2, body, len);
            why = gw_admin_verify(c->admin, ts_ms, msg, ml + ul + 2 + len, mac);
            free(msg);
        }
    }
    if (why == NULL)
        return true;
    refuse(aio, 401, "UNAUTHENTICATED", why);
    return false;
}

/* Whether origin is http:// or https:// (a proxy in front that speaks
 * TLS) and then host. */
static bool same_origin(const char *origin, const char *host)
{
    if (host == NULL)
        return false;
    if (strncmp(origin, "http://", 7) == 0)
        return strcasecmp(origin + 7, host) == 0;
    if (strncmp(origin, "https://", 8) == 0)
        return strcasecmp(origin + 8, host) == 0;
    return false;
}

/* A change must come from the console's own page (CSRF): else 403. */
static bool own_page(nng_aio *aio, nng_http_req *req)
{
    const char *mark = nng_http_req_get_header(req, "X-Berth-Console");
    const char *type = nng_http_req_get_header(req, "Content-Type");
    const char *origin = nng_http_req_get_header(req, "Origin");
    const char *host = nng_http_req_get_header(req, "Host");
    const char *why = NULL;
    if (mark == NULL || strcmp(mark, "1") != 0)
        why = "a change needs the header X-Berth-Console: 1";
    else if (type == NULL || strncasecmp(type, "application/json", 16) != 0)
        why = "a change is sent as Content-Type: application/json";
    else if (origin != NULL && !same_origin(origin, host))
        why = "a change's Origin must be the console's own";
    if (why == NULL)
        return true;
    refuse(aio, 403, "PERMISSION_DENIED", why);
    return false;
}

static void engine_answered(void *arg, engine_reply *r)
{
    job *j = arg;
    gw_console *c = j->c;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL) {
        refuse(j->aio, 503, "UNAVAILABLE", "out of memory");
    } else {
        int status = gw_api_answer(&j->q, r, f);
        fclose(f);
        if (status == 200 && j->q.change)
            gw_admin_log_change(c->admin, "console", &j->q.req);
        finish(j->aio, (uint16_t)status, json_type, buf, len, NULL);
    }
    free(buf);
    engine_reply_free(r);
    free(j);
    atomic_fetch_sub(&c->inflight, 1);
}

static void on_api(nng_aio *aio)
{
    nng_http_req *req = nng_aio_get_input(aio, 0);
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    gw_console *c = nng_http_handler_get_data(h);
    void *body = NULL;
    size_t len = 0;
    nng_http_req_get_data(req, &body, &len);
    if (!reachable(c, aio, req) || !signed_by_key(c, aio, req, body, len))
        return;
    const char *method = nng_http_req_get_method(req);
    if (strcmp(method, "POST") == 0 && !own_page(aio, req))
        return;
    if (atomic_fetch_add(&c->inflight, 1) >= GW_CONSOLE_INFLIGHT_MAX || atomic_load(&c->stopping)) {
        atomic_fetch_sub(&c->inflight, 1);
        refuse(aio, 503, "UNAVAILABLE",
               atomic_load(&c->stopping) ? "berthd is stopping"
                                         : "too many console requests at once; try again");
        return;
    }
    job *j = calloc(1, sizeof(*j));
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = j != NULL ? open_memstream(&buf, &blen) : NULL;
    if (f == NULL) {
        free(j);
        atomic_fetch_sub(&c->inflight, 1);
        refuse(aio, 503, "UNAVAILABLE", "out of memory");
        return;
    }
    static const char prefix[] = "/api/v1/";
    const char *uri = nng_http_req_get_uri(req);
    int status = strncmp(uri, prefix, sizeof(prefix) - 1) != 0
                     ? 404
                     : gw_api_map(method, uri + sizeof(prefix) - 1, body, len, &j->q, f);
    if (status == 404 && strncmp(uri, prefix, sizeof(prefix) - 1) != 0)
        gw_api_refusal(f, "NOT_FOUND", "no such endpoint (README.md, \"The console's API\")");
    fclose(f);
    if (status != 0) {
        finish(aio, (uint16_t)status, json_type, buf, blen, NULL);
        free(buf);
        free(j);
        atomic_fetch_sub(&c->inflight, 1);
        return;
    }
    free(buf);
    j->aio = aio;
    j->c = c;
    if (engine_exec(c->e, &j->q.req, engine_answered, j) != BERTH_OK) {
        free(j);
        atomic_fetch_sub(&c->inflight, 1);
        refuse(aio, 503, "UNAVAILABLE", "berthd is stopping");
    }
}

static int add(nng_http_server *srv, gw_console *c, const char *path, void (*cb)(nng_aio *),
               bool tree, const char *method, size_t body_max)
{
    nng_http_handler *h;
    int rv = nng_http_handler_alloc(&h, path, cb);
    if (rv != 0)
        return rv;
    if (rv == 0 && tree)
        rv = nng_http_handler_set_tree(h);
    if (rv == 0)
        rv = nng_http_handler_set_method(h, method);
    if (rv == 0)
        rv = nng_http_handler_collect_body(h, true, body_max);
    if (rv == 0)
        rv = nng_http_handler_set_data(h, c, NULL);
    if (rv == 0)
        rv = nng_http_server_add_handler(srv, h);
    if (rv != 0)
        nng_http_handler_free(h);
    return rv;
}

int gw_console_open(engine *e, nng_http_server *srv, const char *url, const gw_admin *admin,
                    gw_console **out, char *err, size_t errlen)
{
    *out = NULL;
    gw_console *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return BERTH_ENOMEM;
    }
    c->e = e;
    c->admin = admin;
    c->loopback = gw_admin_loopback_http(url);
    /* (nng drops a path's trailing '/': "/console" is the tree, and
     * on_file sends "/console" itself to "/console/") */
    int rv = add(srv, c, "/console", on_file, true, "GET", 0);
    if (rv == 0)
        rv = add(srv, c, "/", on_root, false, "GET", 0);
    if (rv == 0)
        rv = add(srv, c, "/api/v1", on_api, true, NULL, GW_CONSOLE_BODY_MAX);
    if (rv != 0) {
        snprintf(err, errlen, "console on %s: %s", url, nng_strerror(rv));
        free(c); /* (the server frees the handlers it holds) */
        return BERTH_EINVAL;
    }
    if (!gw_admin_keyed(admin) && !c->loopback)
        fprintf(stderr,
                "berthd: the console is not served on %s: it is not a loopback address and "
                "there is no admin-key-file (its paths answer 403)\n",
                url);
    *out = c;
    return BERTH_OK;
}

void gw_console_stop(gw_console *c)
{
    if (c == NULL)
        return;
    atomic_store(&c->stopping, true);
    struct timespec tick = {0, 5 * 1000000L};
    for (int i = 0; i < 2000 && atomic_load(&c->inflight) > 0; i++)
        nanosleep(&tick, NULL);
}

void gw_console_close(gw_console *c)
{
    free(c);
}
