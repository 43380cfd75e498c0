/*
 * call_cmds.c — berth call and berth await: hand berthd a call (a task
 * whose worker's result its caller waits for) and await its outcome.
 *
 * An awaited call's exit code says how it ended: 0 resolved with a
 * result (printed as it is, bytes), 3 refused by its worker or FAILED,
 * 5 not ended yet (await it again). berth.c's command table runs these.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli/cli.h"

/* Prints a call as it stands; the exit code says how it ended. */
static int print_instance(const opts *o, const Berth__V1__Instance *in)
{
    bool ended = in->state == BERTH__V1__INSTANCE__STATE__RESOLVED ||
                 in->state == BERTH__V1__INSTANCE__STATE__FAILED;
    int ex = !ended ? EX_PENDING : in->result != NULL ? EX_OK : EX_REFUSED;
    const Berth__V1__Error *err = in->error;
    if (o->json) {
        printf("{\"instance\":{\"id\":");
        cli_json_cstr(stdout, in->id);
        printf(",\"state\":\"%s\",\"attempt\":%u,\"created_at_ms\":%" PRIu64,
               cli_instance_state_name(in->state), in->attempt, in->created_at_ms);
        if (in->has_resolved_at_ms)
            printf(",\"resolved_at_ms\":%" PRIu64, in->resolved_at_ms);
        if (in->result != NULL) {
            printf(",\"result\":{\"content_type\":");
            cli_json_cstr(stdout, in->result->content_type);
            cli_print_payload_json("payload", in->result->payload);
            putchar('}');
        }
        cli_print_error_json("error", err);
        printf("}}\n");
        return ex;
    }
    if (in->result != NULL) {
        fwrite(in->result->payload.data, 1, in->result->payload.len, stdout);
        if (isatty(STDOUT_FILENO))
            putchar('\n');
    } else if (err != NULL) {
        fprintf(stderr, "berth: call %s %s: %s%s%s\n", in->id ? in->id : "",
                cli_instance_state_name(in->state), err->code ? err->code : "",
                err->code && err->message ? ": " : "", err->message ? err->message : "");
    } else {
        fprintf(stderr, "berth: call %s is %s (attempt %u): await it again\n", in->id ? in->id : "",
                cli_instance_state_name(in->state), in->attempt);
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
    int ex = cli_call(o, &req, (int)(o->has_wait ? o->wait_ms : 30000) + o->timeout_ms, &r);
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

static int call_args(const opts *o)
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
    return EX_OK;
}

/* Sends the call; EX_OK with its instance id (malloc'd) in *id. */
static int send_call(opts *o, char **id, bool *dup)
{
    size_t len;
    uint8_t *payload = cli_read_arg(o->npos == 2 ? o->pos[1] : NULL, &len);
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
    int ex = CLI_WHEN_INTO(o, &c);
    if (ex != EX_OK) {
        free(payload);
        return ex;
    }
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
    req.call = &c;
    Berth__V1__Response *r;
    ex = cli_call(o, &req, 0, &r);
    free(payload);
    if (ex != EX_OK)
        return ex;
    const Berth__V1__CallResponse *cr = r->call;
    *id = strdup(cr && cr->instance_id ? cr->instance_id : "");
    *dup = cr && cr->duplicate;
    berth__v1__response__free_unpacked(r, NULL);
    return *id == NULL ? EX_INTERNAL : EX_OK;
}

int cmd_call(opts *o)
{
    int ex = call_args(o);
    if (ex != EX_OK)
        return ex;
    char *id;
    bool dup;
    ex = send_call(o, &id, &dup);
    if (ex != EX_OK)
        return ex;
    if (o->await) {
        ex = await_instance(o, id);
    } else if (o->json) {
        printf("{\"instance_id\":");
        cli_json_cstr(stdout, id);
        printf(",\"duplicate\":%s}\n", dup ? "true" : "false");
    } else {
        printf("%s%s\n", id, dup ? " (duplicate)" : "");
    }
    free(id);
    return ex;
}

int cmd_await(opts *o)
{
    if (o->npos != 1) {
        fprintf(stderr, "berth await: INSTANCE_ID\n");
        return EX_USAGE;
    }
    return await_instance(o, o->pos[0]);
}
