/*
 * rpc.c — berth's round trips to berthd: one request on a connection of
 * its own to the operate or the admin surface (over TLS when the URL says
 * so), and what each way of failing means as an exit code: unreachable or
 * timed out 4, a malformed answer 1, a refusal 3 (printed here, so that
 * every command tells one the same way). Admin requests are signed with
 * the key file named, and the key is wiped once sent.
 */
#include <stdlib.h>

#include <sodium.h>

#include "tools/cli/cli.h"

int cli_call(const opts *o, Berth__V1__Request *req, int timeout_ms, Berth__V1__Response **out)
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
        int ex = cli_refused(o, (*out)->status);
        berth__v1__response__free_unpacked(*out, NULL);
        *out = NULL;
        return ex;
    }
    return EX_OK;
}

/* Sends an admin request (signed with the key file, if one is named) and
 * returns its answer in *out, or the exit code of what went wrong. */
static int call_admin(const opts *o, Berth__V1__AdminRequest *req, int timeout_ms,
                      Berth__V1__AdminResponse **out)
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
    int rv = bc_admin_call(c, req, key, keylen, timeout_ms, out);
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
        int ex = (*out)->status ? cli_refused(o, (*out)->status) : EX_INTERNAL;
        berth__v1__admin_response__free_unpacked(*out, NULL);
        *out = NULL;
        return ex;
    }
    return EX_OK;
}

int cli_admin_run(const opts *o, Berth__V1__AdminRequest *req, int timeout_ms, cli_admin_show show,
                  const char *done)
{
    Berth__V1__AdminResponse *r;
    int ex = call_admin(o, req, timeout_ms > 0 ? timeout_ms : o->timeout_ms, &r);
    if (ex != EX_OK)
        return ex;
    ex = show != NULL ? show(o, r) : cli_print_ok(o, done, NULL);
    berth__v1__admin_response__free_unpacked(r, NULL);
    return ex;
}
