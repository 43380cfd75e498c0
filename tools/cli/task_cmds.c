/*
 * task_cmds.c — berth's commands for tasks on the operate surface: submit
 * one; fetch (claim) some, optionally completing held ones in the same
 * round trip; and what a worker holding a task does with it: complete,
 * fail, refuse, extend its lock, release it.
 *
 * fetch prints one tab-separated line per task (id, lock token, topic,
 * attempt, payload) so that a shell loop can read it; --json prints one
 * object. berth.c's command table runs these.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli/cli.h"

static int need(const char *what, const char *v)
{
    if (v == NULL) {
        fprintf(stderr, "berth: %s is required (see --help)\n", what);
        return EX_USAGE;
    }
    return EX_OK;
}

int cmd_submit(opts *o)
{
    if (o->npos < 1 || o->npos > 2) {
        fprintf(stderr, "berth submit: TOPIC [PAYLOAD | -]\n");
        return EX_USAGE;
    }
    size_t len;
    uint8_t *payload = cli_read_arg(o->npos == 2 ? o->pos[1] : NULL, &len);
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
    int ex = CLI_WHEN_INTO(o, &s);
    if (ex != EX_OK) {
        free(payload);
        return ex;
    }
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    req.submit = &s;
    Berth__V1__Response *r;
    ex = cli_call(o, &req, 0, &r);
    free(payload);
    if (ex != EX_OK)
        return ex;
    const Berth__V1__SubmitResponse *sr = r->submit;
    if (o->json) {
        printf("{\"id\":");
        cli_json_cstr(stdout, sr ? sr->id : NULL);
        printf(",\"duplicate\":%s}\n", sr && sr->duplicate ? "true" : "false");
    } else {
        printf("%s%s\n", sr && sr->id ? sr->id : "", sr && sr->duplicate ? " (duplicate)" : "");
    }
    berth__v1__response__free_unpacked(r, NULL);
    return EX_OK;
}

/* ---- fetch ---- */

static void print_task_json(const Berth__V1__Task *t)
{
    printf("{\"id\":");
    cli_json_cstr(stdout, t->id);
    printf(",\"topic\":");
    cli_json_cstr(stdout, t->topic);
    printf(",\"attempt\":%u,\"retries_left\":%u,\"lock_token\":", t->attempt, t->retries_left);
    cli_json_cstr(stdout, t->lock_token);
    printf(",\"lock_expires_at_ms\":%" PRIu64 ",\"created_at_ms\":%" PRIu64
           ",\"priority\":%u,\"available_at_ms\":%" PRIu64,
           t->lock_expires_at_ms, t->created_at_ms, t->priority, t->available_at_ms);
    if (t->content_type) {
        printf(",\"content_type\":");
        cli_json_cstr(stdout, t->content_type);
    }
    if (t->instance_id) {
        printf(",\"instance_id\":");
        cli_json_cstr(stdout, t->instance_id);
    }
    printf(",\"headers\":{");
    for (size_t i = 0; i < t->n_headers; i++) {
        if (i)
            putchar(',');
        cli_json_cstr(stdout, t->headers[i]->key);
        putchar(':');
        cli_json_cstr(stdout, t->headers[i]->value);
    }
    putchar('}');
    cli_print_payload_json("payload", t->payload);
    putchar('}');
}

/* One line a task: id, lock token, topic, attempt, then the payload on
 * the same line (tabs and newlines as spaces), or base64 when not text. */
static void print_task_line(const Berth__V1__Task *t)
{
    printf("%s\t%s\t%s\t%u\t", t->id, t->lock_token, t->topic, t->attempt);
    if (cli_is_text(t->payload.data, t->payload.len)) {
        for (size_t k = 0; k < t->payload.len; k++) {
            char c = (char)t->payload.data[k];
            putchar(c == '\n' || c == '\t' ? ' ' : c);
        }
    } else {
        char *b64 = cli_base64(t->payload.data, t->payload.len);
        printf("base64:%s", b64 ? b64 : "");
        free(b64);
    }
    putchar('\n');
}

/* A fetch's answer; cs: the completions it carried, in order. */
static void print_fetched(const opts *o, const Berth__V1__FetchResponse *fr,
                          const Berth__V1__CompleteRequest *cs)
{
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
            cli_print_status_json(stdout, fr->complete_statuses[i]);
        }
        printf("]}\n");
        return;
    }
    for (size_t i = 0; i < nst; i++) {
        const Berth__V1__Status *st = fr->complete_statuses[i];
        if (st->code != BERTH__V1__CODE__OK)
            fprintf(stderr, "berth fetch: completing %s: %s: %s [verdict %s]\n", cs[i].task_id,
                    cli_code_name(st->code), st->message ? st->message : "",
                    st->has_verdict && st->verdict ? cli_verdict_name(st->verdict) : "none");
    }
    if (isatty(STDOUT_FILENO))
        printf("# id\tlock_token\ttopic\tattempt\tpayload\n");
    for (size_t i = 0; i < n; i++)
        print_task_line(fr->tasks[i]);
}

int cmd_fetch(opts *o)
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
    Berth__V1__CompleteRequest cs[MAX_LIST], *cp[MAX_LIST];
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
    int ex = cli_call(o, &req, timeout, &r);
    if (ex != EX_OK)
        return ex;
    print_fetched(o, r->fetch, cs);
    berth__v1__response__free_unpacked(r, NULL);
    return EX_OK;
}

/* ---- what a worker does with a task it holds ---- */

static int guard_args(const opts *o, const char *cmd)
{
    if (o->npos != 1 || o->worker == NULL || o->token == NULL) {
        fprintf(stderr, "berth %s: TASK_ID --worker ID --token TOKEN (see --help)\n", cmd);
        return EX_USAGE;
    }
    return EX_OK;
}

/* Names the task a worker holds (TASK_ID --worker ID --token TOKEN) in m,
 * any request on a held task: they share the three fields. */
#define HELD_TASK(o, m)                                                                            \
    ((m)->task_id = (char *)(o)->pos[0], (m)->worker_id = (char *)(o)->worker,                     \
     (m)->lock_token = (char *)(o)->token)

/* Sends a request whose answer says only that it was done; prints what. */
static int send_done(const opts *o, Berth__V1__Request *req, const char *what)
{
    Berth__V1__Response *r;
    int ex = cli_call(o, req, 0, &r);
    if (ex != EX_OK)
        return ex;
    berth__v1__response__free_unpacked(r, NULL);
    return cli_print_ok(o, what, NULL);
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

int cmd_complete(opts *o)
{
    if (guard_args(o, "complete") != EX_OK)
        return EX_USAGE;
    Berth__V1__CompleteRequest c = BERTH__V1__COMPLETE_REQUEST__INIT;
    Berth__V1__Result res = BERTH__V1__RESULT__INIT;
    HELD_TASK(o, &c);
    size_t len = 0;
    uint8_t *data = cli_read_arg(o->result, &len);
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
    int ex = cli_call(o, &req, 0, &r);
    free(data);
    if (ex != EX_OK)
        return ex;
    bool dup = r->complete && r->complete->duplicate;
    berth__v1__response__free_unpacked(r, NULL);
    return cli_print_ok(o, dup ? "completed (duplicate, absorbed)" : "completed",
                        dup ? "\"duplicate\":true" : "\"duplicate\":false");
}

int cmd_fail(opts *o)
{
    if (guard_args(o, "fail") != EX_OK)
        return EX_USAGE;
    Berth__V1__FailRequest f = BERTH__V1__FAIL_REQUEST__INIT;
    Berth__V1__Error e;
    HELD_TASK(o, &f);
    f.error = error_arg(o, &e);
    f.has_retry_in_ms = o->has_retry_in;
    f.retry_in_ms = o->retry_in_ms;
    f.has_retries_left = o->has_retries_left;
    f.retries_left = (uint32_t)o->retries_left;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FAIL;
    req.fail = &f;
    Berth__V1__Response *r;
    int ex = cli_call(o, &req, 0, &r);
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
    return cli_print_ok(o, human, js);
}

int cmd_refuse(opts *o)
{
    if (guard_args(o, "refuse") != EX_OK)
        return EX_USAGE;
    Berth__V1__RefuseRequest f = BERTH__V1__REFUSE_REQUEST__INIT;
    Berth__V1__Error e;
    HELD_TASK(o, &f);
    f.error = error_arg(o, &e);
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_REFUSE;
    req.refuse = &f;
    return send_done(o, &req, "refused");
}

int cmd_extend(opts *o)
{
    if (guard_args(o, "extend") != EX_OK)
        return EX_USAGE;
    Berth__V1__ExtendLockRequest f = BERTH__V1__EXTEND_LOCK_REQUEST__INIT;
    HELD_TASK(o, &f);
    f.has_lock_ms = o->has_lock;
    f.lock_ms = o->lock_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_EXTEND_LOCK;
    req.extend_lock = &f;
    Berth__V1__Response *r;
    int ex = cli_call(o, &req, 0, &r);
    if (ex != EX_OK)
        return ex;
    uint64_t at = r->extend_lock ? r->extend_lock->lock_expires_at_ms : 0;
    berth__v1__response__free_unpacked(r, NULL);
    char human[96], js[96];
    snprintf(human, sizeof(human), "lock expires at %" PRIu64, at);
    snprintf(js, sizeof(js), "\"lock_expires_at_ms\":%" PRIu64, at);
    return cli_print_ok(o, human, js);
}

int cmd_release(opts *o)
{
    if (guard_args(o, "release") != EX_OK)
        return EX_USAGE;
    Berth__V1__ReleaseRequest f = BERTH__V1__RELEASE_REQUEST__INIT;
    HELD_TASK(o, &f);
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_RELEASE;
    req.release = &f;
    return send_done(o, &req, "released");
}
