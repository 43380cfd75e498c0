/* client.c — see client.h. */
#include "tools/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

struct bc {
    nng_socket sock;
    nng_tls_config *tls;
};

const char *bc_strerror(int rv)
{
    switch (rv) {
    case BC_OK:
        return "ok";
    case BC_EUNREACHABLE:
        return "berthd is unreachable";
    case BC_EPROTO:
        return "berthd's answer is not a berth response";
    case BC_ENOMEM:
        return "out of memory";
    case BC_EINVAL:
        return "invalid argument";
    }
    return "unknown error";
}

int bc_open_tls(const char *url, const bc_tls *tls, bc **out, char *err, size_t errlen)
{
    *out = NULL;
    bc *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return BC_ENOMEM;
    nng_dialer d;
    int rv = nng_req0_open(&c->sock);
    if (rv == 0)
        rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if (rv == 0)
        rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, BC_RECV_MAX);
    if (rv == 0)
        rv = nng_dialer_create(&d, c->sock, url);
    if (rv == 0 && strncmp(url, "tls+", 4) == 0) {
        rv = nng_tls_config_alloc(&c->tls, NNG_TLS_MODE_CLIENT);
        const char *ca = tls != NULL && tls->ca_file != NULL ? tls->ca_file : BC_SYSTEM_CA;
        if (rv == 0 && tls != NULL && tls->insecure) {
            rv = nng_tls_config_auth_mode(c->tls, NNG_TLS_AUTH_MODE_NONE);
        } else if (rv == 0) {
            rv = nng_tls_config_ca_file(c->tls, ca);
            if (rv == 0)
                rv = nng_tls_config_auth_mode(c->tls, NNG_TLS_AUTH_MODE_REQUIRED);
        }
        if (rv == 0 && tls != NULL && tls->server_name != NULL)
            rv = nng_tls_config_server_name(c->tls, tls->server_name);
        if (rv == 0)
            rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, c->tls);
    }
    if (rv == 0)
        rv = nng_dialer_start(d, 0);
    if (rv != 0) {
        if (err != NULL)
            snprintf(err, errlen, "%s: %s", url, nng_strerror(rv));
        bc_close(c);
        return BC_EUNREACHABLE;
    }
    *out = c;
    return BC_OK;
}

int bc_open(const char *url, bc **out, char *err, size_t errlen)
{
    return bc_open_tls(url, NULL, out, err, errlen);
}

void bc_close(bc *c)
{
    if (c == NULL)
        return;
    nng_close(c->sock);
    if (c->tls != NULL)
        nng_tls_config_free(c->tls);
    free(c);
}

int bc_call_raw(bc *c, const void *buf, size_t len, int timeout_ms, Berth__V1__Response **out)
{
    *out = NULL;
    nng_ctx ctx;
    nng_aio *aio;
    nng_msg *msg;
    if (nng_ctx_open(&ctx, c->sock) != 0)
        return BC_EUNREACHABLE;
    if (nng_aio_alloc(&aio, NULL, NULL) != 0) {
        nng_ctx_close(ctx);
        return BC_ENOMEM;
    }
    nng_aio_set_timeout(aio, timeout_ms > 0 ? timeout_ms : 10000);
    int rv = BC_ENOMEM;
    if (nng_msg_alloc(&msg, 0) != 0 || nng_msg_append(msg, buf, len) != 0)
        goto done;
    nng_aio_set_msg(aio, msg);
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio) != 0) {
        nng_msg_free(msg);
        rv = BC_EUNREACHABLE;
        goto done;
    }
    nng_ctx_recv(ctx, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio) != 0) {
        rv = BC_EUNREACHABLE;
        goto done;
    }
    msg = nng_aio_get_msg(aio);
    *out = berth__v1__response__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
    nng_msg_free(msg);
    rv = *out != NULL ? BC_OK : BC_EPROTO;
done:
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    return rv;
}

int bc_call(bc *c, const Berth__V1__Request *req, int timeout_ms, Berth__V1__Response **out)
{
    size_t n = berth__v1__request__get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL)
        return BC_ENOMEM;
    berth__v1__request__pack(req, buf);
    int rv = bc_call_raw(c, buf, n, timeout_ms, out);
    free(buf);
    return rv;
}
