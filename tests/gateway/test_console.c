/* The console's HTTP surface against a real berthd (gateway/console.h): its
 * files and headers, the JSON API against what the admin surface says, and
 * its posture: loopback without a key (and a Host that names loopback),
 * every request signed with one, changes only from the console's own page.
 * (tests/console/ drives the page itself in a real browser.) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <sodium.h>

#include "gateway/console.h"
#include "tests/support/daemon.h"
#include "tests/support/raw.h"

static daemon_proc D;
static bc *C;

static const char KEY[] = "console-test-key-0123456789abcdef0123456789";

static void start(const char *const *extra)
{
    d_start(&D, extra);
    C = d_client(&D);
}

static void setup(void)
{
    start(NULL);
}

static void teardown(void)
{
    bc_close(C);
    d_cleanup(&D);
}

TestSuite(console, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers ---- */

static bool has_header(const char *head, const char *line)
{
    return strstr(head, line) != NULL;
}

static void no_cors(const char *head)
{
    cr_assert_null(strstr(head, "Access-Control-Allow"), "%s", head);
}

static cJSON *parse(const char *body)
{
    cJSON *j = cJSON_Parse(body);
    cr_assert_not_null(j, "not JSON: %s", body);
    return j;
}

/* GET path: the status; the parsed body in *out (NULL: freed). */
static int get_json(const char *path, const char *headers, cJSON **out)
{
    char *head, *body;
    int st = d_http(&D, "GET", path, headers, NULL, &head, &body);
    no_cors(head);
    cr_assert(has_header(head, "Cache-Control: no-store"), "%s", head);
    cJSON *j = parse(body);
    free(head);
    free(body);
    if (out)
        *out = j;
    else
        cJSON_Delete(j);
    return st;
}

static const char *code_of(const cJSON *j)
{
    const cJSON *c = cJSON_GetObjectItem(j, "code");
    return cJSON_IsString(c) ? c->valuestring : "";
}

static double num(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(j, k);
    cr_assert(cJSON_IsNumber(v), "no number %s", k);
    return v->valuedouble;
}

static const char *str(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(j, k);
    cr_assert(cJSON_IsString(v), "no string %s", k);
    return v->valuestring;
}

/* The headers a change from the console's own page carries. */
static const char OWN[] = "Content-Type: application/json\r\nX-Berth-Console: 1\r\n";

static int post(const char *path, const char *headers, const char *body, cJSON **out)
{
    char *head, *b;
    int st = d_http(&D, "POST", path, headers, body, &head, &b);
    no_cors(head);
    cJSON *j = parse(b);
    free(head);
    free(b);
    if (out)
        *out = j;
    else
        cJSON_Delete(j);
    return st;
}

/* A task of topic (the first one ready there) failed with its budget
 * spent: terminal. Its id. */
static char *terminal_task(const char *topic)
{
    free(w_submit_id(C, topic, "p"));
    Berth__V1__Response *f = w_fetch(C, "w", topic, 1, 60000, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    char *id = strdup(f->fetch->tasks[0]->id);
    Berth__V1__Error e = BERTH__V1__ERROR__INIT;
    e.code = "BROKEN";
    e.message = "<img src=x onerror=alert(1)>";
    Berth__V1__FailRequest fr = BERTH__V1__FAIL_REQUEST__INIT;
    fr.task_id = id;
    fr.worker_id = "w";
    fr.lock_token = f->fetch->tasks[0]->lock_token;
    fr.error = &e;
    fr.has_retries_left = 1;
    fr.retries_left = 0;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
    req.fail = &fr;
    Berth__V1__Response *r = w_call(C, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert(r->fail->terminal);
    w_free(r);
    w_free(f);
    return id;
}

static const char *task_state(const char *id)
{
    static char state[32];
    char path[128];
    snprintf(path, sizeof(path), "/api/v1/tasks/%s", id);
    cJSON *j;
    cr_assert_eq(get_json(path, NULL, &j), 200);
    snprintf(state, sizeof(state), "%s", str(cJSON_GetObjectItem(j, "task"), "state"));
    cJSON_Delete(j);
    return state;
}

/* `berth --json stats` through the admin surface. */
static cJSON *cli_stats(void)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --admin %s --json stats", BERTH_CLI_PATH, D.admin);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s", out);
    return parse(out);
}

/* ---- the files ---- */

static const char CSP[] = "Content-Security-Policy: default-src 'none'; script-src 'self'; "
                          "style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri "
                          "'none'; form-action 'none'; frame-ancestors 'none'\r\n";

DTest(console, the_page_is_served_with_its_policy_and_an_etag)
{
    static const char *const files[][2] = {
        {"/console/", "Content-Type: text/html; charset=utf-8\r\n"},
        {"/console/console.js", "Content-Type: text/javascript; charset=utf-8\r\n"},
        {"/console/console.css", "Content-Type: text/css; charset=utf-8\r\n"},
    };
    char etag[64] = "";
    for (size_t i = 0; i < 3; i++) {
        char *head, *body;
        cr_assert_eq(d_http(&D, "GET", files[i][0], NULL, NULL, &head, &body), 200, "%s",
                     files[i][0]);
        cr_assert(has_header(head, files[i][1]), "%s", head);
        cr_assert(has_header(head, CSP), "%s", head);
        cr_assert(has_header(head, "X-Content-Type-Options: nosniff\r\n"));
        cr_assert(has_header(head, "Referrer-Policy: no-referrer\r\n"));
        no_cors(head);
        const char *e = strstr(head, "ETag: ");
        cr_assert_not_null(e);
        sscanf(e + 6, "%63[^\r]", etag);
        cr_assert_gt(strlen(body), 100);
        free(head);
        free(body);
    }
    char cond[128], *head;
    snprintf(cond, sizeof(cond), "If-None-Match: %s\r\n", etag);
    cr_assert_eq(d_http(&D, "GET", "/console/console.js", cond, NULL, NULL, NULL), 304);
    cr_assert_eq(d_http(&D, "GET", "/console/nothing.js", NULL, NULL, NULL, NULL), 404);
    cr_assert_eq(d_http(&D, "GET", "/console", NULL, NULL, &head, NULL), 302);
    cr_assert(has_header(head, "Location: /console/\r\n"), "%s", head);
    free(head);
    /* The script builds its DOM from text: nothing in it parses markup. */
    char *js;
    cr_assert_eq(d_http(&D, "GET", "/console/console.js", NULL, NULL, NULL, &js), 200);
    static const char *const never[] = {"innerHTML",      "outerHTML", "insertAdjacentHTML",
                                        "document.write", "eval(",     "new Function"};
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
        cr_assert_null(strstr(js, never[i]), "console.js uses %s", never[i]);
    free(js);
}

/* ---- reads ---- */

DTest(console, the_overview_counts_what_stats_counts)
{
    free(w_submit_id(C, "orders", "a"));
    free(w_submit_id(C, "orders", "b"));
    free(w_submit_id(C, "mail", "c"));
    free(terminal_task("mail"));
    Berth__V1__Response *f = w_fetch(C, "w", "orders", 1, 60000, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    w_free(f);
    cJSON *o;
    cr_assert_eq(get_json("/api/v1/overview", NULL, &o), 200);
    cJSON *stats = cli_stats();
    const cJSON *topics = cJSON_GetObjectItem(o, "topics");
    const cJSON *want = cJSON_GetObjectItem(stats, "topics");
    cr_assert_eq(cJSON_GetArraySize(topics), cJSON_GetArraySize(want));
    const cJSON *w;
    cJSON_ArrayForEach(w, want)
    {
        const cJSON *t = NULL, *c;
        cJSON_ArrayForEach(c, topics) if (strcmp(str(c, "topic"), str(w, "topic")) == 0) t = c;
        cr_assert_not_null(t, "%s", str(w, "topic"));
        static const char *const k[] = {"ready",   "delayed",  "locked",
                                        "backoff", "terminal", "waiting_fetches"};
        for (size_t i = 0; i < 6; i++)
            cr_assert_eq(num(t, k[i]), num(w, k[i]), "%s %s", str(w, "topic"), k[i]);
    }
    cr_assert_eq(num(o, "outbox_pending"), num(stats, "outbox_pending"));
    cr_assert_eq(num(o, "deliveries_poisoned"), num(stats, "poisoned"));
    /* the counters: 4 submitted, 2 fetched, 1 terminal */
    double submitted = 0, fetched = 0, terminal = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(o, "counters"))
    {
        submitted += num(c, "submitted");
        fetched += num(c, "fetched");
        terminal += num(c, "terminal");
    }
    cr_assert_eq(submitted, 4);
    cr_assert_eq(fetched, 2);
    cr_assert_eq(terminal, 1);
    const cJSON *h = cJSON_GetObjectItem(o, "fsync_seconds");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(h, "counts")),
                 cJSON_GetArraySize(cJSON_GetObjectItem(h, "bounds")) + 1);
    cr_assert_gt(num(h, "count"), 0);
    cJSON_Delete(o);
    cJSON_Delete(stats);
}

DTest(console, a_task_shows_its_payload_as_text_or_hex_and_never_its_lock)
{
    char *id = w_submit_id(C, "orders", "<script>alert(1)</script> é");
    Berth__V1__Response *f = w_fetch(C, "w", "orders", 1, 60000, 0);
    char token[64];
    snprintf(token, sizeof(token), "%s", f->fetch->tasks[0]->lock_token);
    w_free(f);
    char path[128], *body;
    snprintf(path, sizeof(path), "/api/v1/tasks/%s", id);
    cr_assert_eq(d_http(&D, "GET", path, NULL, NULL, NULL, &body), 200);
    cr_assert_null(strstr(body, token), "the lock token is never shown");
    cr_assert_null(strstr(body, "<"), "markup is escaped even inside JSON: %s", body);
    cJSON *j = parse(body);
    const cJSON *t = cJSON_GetObjectItem(j, "task");
    cr_assert_str_eq(str(t, "state"), "LOCKED");
    cr_assert_str_eq(str(t, "worker_id"), "w");
    const cJSON *p = cJSON_GetObjectItem(t, "payload");
    cr_assert_str_eq(str(p, "encoding"), "text");
    cr_assert_str_eq(str(p, "text"), "<script>alert(1)</script> é");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(p, "cut")));
    cJSON_Delete(j);
    free(body);
    free(id);

    /* Not UTF-8: hex. Past 4 KiB: cut, and says so. */
    Berth__V1__SubmitRequest sr = BERTH__V1__SUBMIT_REQUEST__INIT;
    static uint8_t bin[5000];
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (uint8_t)(0xff - i % 7);
    sr.topic = "bin";
    sr.has_payload = 1;
    sr.payload.data = bin;
    sr.payload.len = sizeof(bin);
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    req.submit = &sr;
    Berth__V1__Response *s = w_call(C, &req, 0);
    w_expect_code(s, BERTH__V1__CODE__OK);
    snprintf(path, sizeof(path), "/api/v1/tasks/%s", s->submit->id);
    w_free(s);
    cr_assert_eq(get_json(path, NULL, &j), 200);
    p = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "task"), "payload");
    cr_assert_str_eq(str(p, "encoding"), "hex");
    cr_assert_eq(strlen(str(p, "hex")), 2 * 4096);
    cr_assert_eq(strncmp(str(p, "hex"), "fffefdfcfbfaf9ff", 16), 0);
    cr_assert_eq(num(p, "size"), 5000);
    cr_assert_eq(num(p, "shown"), 4096);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(p, "cut")));
    cJSON_Delete(j);
}

DTest(console, tasks_are_listed_in_pages_with_their_filters)
{
    for (int i = 0; i < 5; i++)
        free(w_submit_id(C, "orders", "x"));
    free(w_submit_id(C, "mail", "y"));
    cJSON *j;
    cr_assert_eq(get_json("/api/v1/tasks?topic=orders&state=ready&limit=3", NULL, &j), 200);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tasks")), 3);
    char next[64];
    snprintf(next, sizeof(next), "%s", str(j, "next_after"));
    cJSON_Delete(j);
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/tasks?topic=orders&limit=3&after=%s", next);
    cr_assert_eq(get_json(path, NULL, &j), 200);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tasks")), 2);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "next_after")));
    cJSON_Delete(j);
    cr_assert_eq(get_json("/api/v1/tasks?state=LOCKED", NULL, &j), 200);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tasks")), 0);
    cJSON_Delete(j);
}

DTest(console, bad_requests_get_a_clear_error)
{
    static const struct {
        const char *method, *path;
        int status;
        const char *code;
    } cases[] = {
        {"GET", "/api/v1/nothing", 404, "NOT_FOUND"},
        {"GET", "/api/v1/tasks?colour=red", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks?limit=0", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks?limit=-1", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks?limit=1000000", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks?state=stuck", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks?topic=a&topic=b", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks?topic=%zz", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks?topic=a%00b", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks/not-an-id", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks/0123456789abcdef0123456789abcdef", 404, "NOT_FOUND"},
        {"GET", "/api/v1/overview?x=1", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/incidents?state=ready", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/incidents?open=maybe", 400, "INVALID_ARGUMENT"},
        {"GET", "/api/v1/tasks?open=true", 400, "INVALID_ARGUMENT"},
        {"PUT", "/api/v1/overview", 405, "INVALID_ARGUMENT"},
        {"DELETE", "/api/v1/tasks/0123456789abcdef0123456789abcdef", 405, "INVALID_ARGUMENT"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *body;
        int st = d_http(&D, cases[i].method, cases[i].path, NULL, NULL, NULL, &body);
        cr_assert_eq(st, cases[i].status, "%s %s: %d %s", cases[i].method, cases[i].path, st, body);
        cJSON *j = parse(body);
        cr_assert_str_eq(code_of(j), cases[i].code, "%s", body);
        cJSON_Delete(j);
        free(body);
    }
    /* A target past GW_API_URI_MAX, a body past 1 KiB. */
    char path[1400] = "/api/v1/tasks?topic=";
    memset(path + strlen(path), 'a', 1300);
    path[sizeof(path) - 1] = '\0';
    cr_assert_eq(d_http(&D, "GET", path, NULL, NULL, NULL, NULL), 400);
    char big[1200];
    memset(big, ' ', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    big[0] = '{', big[sizeof(big) - 2] = '}';
    int st = d_http(&D, "POST", "/api/v1/tasks/0123456789abcdef0123456789abcdef/retry", OWN, big,
                    NULL, NULL);
    cr_assert(st == 400 || st == 413, "%d", st);
    /* berthd is still there */
    cr_assert_eq(get_json("/api/v1/overview", NULL, NULL), 200);
}

/* ---- changes ---- */

DTest(console, retry_and_discard_change_only_what_the_own_page_asks)
{
    int ev = raw_sub(D.events);
    char *id = terminal_task("mail");
    cJSON *j;
    cr_assert_eq(get_json("/api/v1/incidents", NULL, &j), 200);
    const cJSON *in = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "incidents"), 0);
    cr_assert_not_null(in);
    cr_assert_str_eq(str(in, "kind"), "TASK_TERMINAL");
    cr_assert_str_eq(str(in, "subject_id"), id);
    cr_assert_str_eq(str(cJSON_GetObjectItem(in, "error"), "message"),
                     "<img src=x onerror=alert(1)>");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(in, "open")));
    cJSON_Delete(j);

    char path[128];
    snprintf(path, sizeof(path), "/api/v1/tasks/%s/retry", id);
    /* What another origin could send: a form (no custom header, a form's
     * content type), a fetch without the header, one with a foreign
     * Origin. Each is refused, and the task stays terminal. */
    static const char *const forged[] = {
        "Content-Type: application/x-www-form-urlencoded\r\nOrigin: http://evil.example\r\n",
        "Content-Type: text/plain\r\n",
        "Content-Type: application/json\r\n",
        "Content-Type: application/json\r\nX-Berth-Console: 1\r\nOrigin: http://evil.example\r\n",
        "Content-Type: application/json\r\nX-Berth-Console: 1\r\nOrigin: null\r\n",
        "Content-Type: application/json\r\nX-Berth-Console: 1\r\nOrigin: https://evil.example\r\n",
        "Content-Type: text/plain\r\nX-Berth-Console: 1\r\n",
    };
    for (size_t i = 0; i < sizeof(forged) / sizeof(forged[0]); i++) {
        cr_assert_eq(post(path, forged[i], "{}", &j), 403, "%s", forged[i]);
        cr_assert_str_eq(code_of(j), "PERMISSION_DENIED");
        cJSON_Delete(j);
    }
    cr_assert_str_eq(task_state(id), "TERMINAL");

    /* The page's own: with its Origin (the Host), a new budget. */
    char own[1200];
    snprintf(own, sizeof(own), "%sOrigin: %s\r\n", OWN, D.metrics);
    cr_assert_eq(post(path, own, "{\"retries\": 2}", &j), 200);
    cr_assert_str_eq(code_of(j), "OK");
    cJSON_Delete(j);
    cr_assert_str_eq(task_state(id), "READY");
    cr_assert_eq(get_json("/api/v1/incidents?open=true", NULL, &j), 200);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "incidents")), 0, "retried: closed");
    cJSON_Delete(j);
    cr_assert_eq(get_json("/api/v1/incidents?open=false&limit=5", NULL, &j), 200);
    in = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "incidents"), 0);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(in, "open")), "the record stays, closed");
    cJSON_Delete(j);
    char line[160];
    snprintf(line, sizeof(line), "berthd: admin: console loopback retry_terminal %s", id);
    cr_assert(d_stderr_has(&D, line), "the change is logged as the admin surface's");
    size_t n;
    uint8_t *m = raw_event(ev, "task.retried.", &n);
    cr_assert_str_eq((const char *)m, "task.retried.mail", "and published as theirs are");
    free(m);
    close(ev);
    snprintf(path, sizeof(path), "/api/v1/tasks/%s", id);
    cr_assert_eq(get_json(path, NULL, &j), 200);
    cr_assert_eq(num(cJSON_GetObjectItem(j, "task"), "retries_left"), 2);
    cJSON_Delete(j);

    /* Not terminal any more: discard is refused, as the admin surface refuses it. */
    snprintf(path, sizeof(path), "/api/v1/tasks/%s/discard", id);
    cr_assert_eq(post(path, OWN, NULL, &j), 409);
    cr_assert_str_eq(code_of(j), "FAILED_PRECONDITION");
    cJSON_Delete(j);

    char *other = terminal_task("mail2");
    snprintf(path, sizeof(path), "/api/v1/tasks/%s/discard", other);
    /* (behind a proxy that speaks TLS, the page's origin is https://) */
    snprintf(own, sizeof(own), "%sOrigin: https://%s\r\n", OWN, D.metrics + strlen("http://"));
    cr_assert_eq(post(path, own, "", NULL), 200);
    snprintf(path, sizeof(path), "/api/v1/tasks/%s", other);
    cr_assert_eq(get_json(path, NULL, NULL), 404);
    snprintf(path, sizeof(path), "/api/v1/deliveries/%s/retry", other);
    cr_assert_eq(post(path, OWN, NULL, &j), 404);
    cJSON_Delete(j);
    snprintf(path, sizeof(path), "/api/v1/tasks/%s/retry", other);
    cr_assert_eq(post(path, OWN, "{\"retries\": \"many\"}", &j), 400);
    cJSON_Delete(j);
    free(id);
    free(other);
}

/* ---- posture ---- */

DTest(console, without_a_key_only_a_loopback_host_is_answered)
{
    /* A page of another name made to resolve to 127.0.0.1 sends its own
     * name as Host: refused, files and API alike. */
    static const char *const hosts[] = {"Host: evil.example:7453\r\n", "Host: 10.1.2.3\r\n",
                                        "Host: 127.0.0.1.evil.example\r\n"};
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(d_http(&D, "GET", "/api/v1/overview", hosts[i], NULL, NULL, NULL), 403);
        cr_assert_eq(d_http(&D, "GET", "/console/", hosts[i], NULL, NULL, NULL), 403);
    }
    cr_assert_eq(
        d_http(&D, "GET", "/api/v1/overview", "Host: localhost:7453\r\n", NULL, NULL, NULL), 200);
    cr_assert_eq(d_http(&D, "GET", "/api/v1/overview", "Host: [::1]:7453\r\n", NULL, NULL, NULL),
                 200);
    /* /metrics is as it was. */
    cr_assert_eq(d_http(&D, "GET", "/metrics", hosts[0], NULL, NULL, NULL), 200);
}

/* HMAC-SHA256(KEY, ts ‖ method \n target \n body) as the page signs. */
static void sign(char *out, size_t len, uint64_t ts, const char *method, const char *target,
                 const char *body, const char *key)
{
    uint8_t t[8], mac[32];
    for (int i = 0; i < 8; i++)
        t[i] = (uint8_t)(ts >> (56 - 8 * i));
    crypto_auth_hmacsha256_state h;
    crypto_auth_hmacsha256_init(&h, (const uint8_t *)key, strlen(key));
    crypto_auth_hmacsha256_update(&h, t, 8);
    crypto_auth_hmacsha256_update(&h, (const uint8_t *)method, strlen(method));
    crypto_auth_hmacsha256_update(&h, (const uint8_t *)"\n", 1);
    crypto_auth_hmacsha256_update(&h, (const uint8_t *)target, strlen(target));
    crypto_auth_hmacsha256_update(&h, (const uint8_t *)"\n", 1);
    crypto_auth_hmacsha256_update(&h, (const uint8_t *)body, strlen(body));
    crypto_auth_hmacsha256_final(&h, mac);
    char hex[65];
    sodium_bin2hex(hex, sizeof(hex), mac, 32);
    snprintf(out, len, "X-Berth-Ts: %" PRIu64 "\r\nX-Berth-Auth: %s\r\n", ts, hex);
}

static uint64_t now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

static void keyed(const char *metrics)
{
    teardown();
    static char path[128];
    snprintf(path, sizeof(path), "/tmp/berth-console-key-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "%s\n", KEY);
    fclose(f);
    static const char *extra[8];
    int n = 0;
    extra[n++] = "--admin-key-file";
    extra[n++] = path;
    if (metrics != NULL) {
        extra[n++] = "--metrics";
        extra[n++] = metrics;
    }
    extra[n] = NULL;
    start(extra);
}

DTest(console, with_a_key_every_request_is_signed)
{
    keyed(NULL);
    char h[256], hs[512];
    const char *target = "/api/v1/overview";
    cJSON *j;
    cr_assert_eq(get_json(target, NULL, &j), 401);
    cr_assert_str_eq(code_of(j), "UNAUTHENTICATED");
    cJSON_Delete(j);
    sign(h, sizeof(h), now_ms(), "GET", target, "", "another-key-0123456789abcdef0123456789");
    cr_assert_eq(get_json(target, h, NULL), 401, "a wrong key");
    sign(h, sizeof(h), now_ms() - 400000, "GET", target, "", KEY);
    cr_assert_eq(get_json(target, h, NULL), 401, "older than admin-skew-ms");
    sign(h, sizeof(h), now_ms(), "GET", "/api/v1/deployments", "", KEY);
    cr_assert_eq(get_json(target, h, NULL), 401, "signed for another path");
    sign(h, sizeof(h), now_ms(), "GET", target, "", KEY);
    cr_assert_eq(get_json(target, h, NULL), 200);
    /* A Host of any name is fine with a key: the signature is the proof. */
    snprintf(hs, sizeof(hs), "Host: berth.example\r\n%s", h);
    cr_assert_eq(get_json(target, hs, NULL), 200);
    /* The page itself holds no data: served to anyone who reaches it. */
    cr_assert_eq(d_http(&D, "GET", "/console/", NULL, NULL, NULL, NULL), 200);

    /* A change: signed over its body too, and from the own page. */
    char *id = terminal_task("mail");
    char path[128];
    snprintf(path, sizeof(path), "/api/v1/tasks/%s/retry", id);
    const char *body = "{\"retries\":1}";
    sign(h, sizeof(h), now_ms(), "POST", path, "{\"retries\":9}", KEY);
    snprintf(hs, sizeof(hs), "%s%s", OWN, h);
    cr_assert_eq(post(path, hs, body, NULL), 401, "signed over another body");
    sign(h, sizeof(h), now_ms(), "POST", path, body, KEY);
    cr_assert_eq(post(path, h, body, NULL), 403, "signed, but not from the console's page");
    snprintf(hs, sizeof(hs), "%s%s", OWN, h);
    cr_assert_eq(post(path, hs, body, NULL), 200);
    cr_assert(d_stderr_has(&D, "berthd: admin: console key:"));
    free(id);
}

DTest(console, a_listener_open_to_the_network_needs_a_key)
{
    teardown();
    static const char *const open_[] = {"--metrics", "http://0.0.0.0:0", NULL};
    start(open_);
    cr_assert_eq(d_http(&D, "GET", "/api/v1/overview", NULL, NULL, NULL, NULL), 403);
    cr_assert_eq(d_http(&D, "GET", "/console/", NULL, NULL, NULL, NULL), 403);
    cr_assert_eq(d_http(&D, "GET", "/metrics", NULL, NULL, NULL, NULL), 200);
    cr_assert(d_stderr_has(&D, "the console is not served on http://0.0.0.0:0"));

    keyed("http://0.0.0.0:0");
    char h[256];
    sign(h, sizeof(h), now_ms(), "GET", "/api/v1/overview", "", KEY);
    cr_assert_eq(get_json("/api/v1/overview", h, NULL), 200);
    cr_assert_eq(get_json("/api/v1/overview", NULL, NULL), 401);
}

DTest(console, console_false_serves_neither_page_nor_api)
{
    teardown();
    static const char *const off[] = {"--console=false", NULL};
    start(off);
    cr_assert_eq(d_http(&D, "GET", "/api/v1/overview", NULL, NULL, NULL, NULL), 404);
    cr_assert_eq(d_http(&D, "GET", "/console/", NULL, NULL, NULL, NULL), 404);
    cr_assert_eq(d_http(&D, "GET", "/metrics", NULL, NULL, NULL, NULL), 200);
}

#ifdef BERTH_WITH_PG
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "tests/support/pgtmp.h"

/* A request sent on a connection of its own, its answer not read yet. */
static int send_get(const char *path)
{
    unsigned port = 0;
    cr_assert_eq(sscanf(D.metrics, "http://127.0.0.1:%u", &port), 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[256];
    int n =
        snprintf(req, sizeof(req),
                 "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n", path, port);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    return fd;
}

/* Its status once it comes within ms; 0 if none came. */
static int status_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) != 1)
        return 0;
    char buf[64] = "";
    ssize_t got = read(fd, buf, sizeof(buf) - 1);
    int st = 0;
    if (got > 0)
        sscanf(buf, "HTTP/1.1 %d", &st);
    return st;
}

/* At most GW_CONSOLE_INFLIGHT_MAX console requests wait on the engine; the
 * rest are answered 503 at once. (PostgreSQL: a lock taken by the test
 * holds the engine's reads there, deterministically.) */
DTest(console, past_its_bound_in_flight_a_request_is_refused_at_once)
{
    if (D.store[0] == '\0') {
        teardown(); /* (a skipped test runs no .fini: berthd would outlive it) */
        cr_skip_test("needs berthd on PostgreSQL (BERTH_TEST_STORE=pg)");
    }
    PGconn *c = pgtmp_connect(D.store);
    pgtmp_exec(c, "BEGIN");
    pgtmp_exec(c, "LOCK TABLE berth.tasks IN ACCESS EXCLUSIVE MODE");
    enum { N = GW_CONSOLE_INFLIGHT_MAX + 16 };
    int fds[N], status[N];
    for (int i = 0; i < N; i++)
        fds[i] = send_get("/api/v1/tasks?limit=1");
    int refused = 0, waiting = 0;
    for (int i = 0; i < N; i++) {
        status[i] = status_within(fds[i], i == 0 ? 2000 : 100);
        refused += status[i] == 503;
        waiting += status[i] == 0;
    }
    cr_assert_eq(waiting, GW_CONSOLE_INFLIGHT_MAX, "%d wait on the engine", waiting);
    cr_assert_eq(refused, N - GW_CONSOLE_INFLIGHT_MAX);
    pgtmp_exec(c, "COMMIT");
    for (int i = 0; i < N; i++) {
        if (status[i] == 0)
            cr_assert_eq(status_within(fds[i], 10000), 200, "answered once the engine is free");
        close(fds[i]);
    }
    PQfinish(c);
    cr_assert_eq(get_json("/api/v1/overview", NULL, NULL), 200);
}
#endif
