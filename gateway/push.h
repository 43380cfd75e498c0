/*
 * push.h — the push transport: sends the engine's deliveries to push
 * channels' receivers over nng REQ sockets and hands their answers back
 * (proto/berth/v1/push.proto).
 *
 * A receiver is named by its channel's transport: nng+req://HOST:PORT is
 * tcp://HOST:PORT, nng+req+ipc:///PATH is ipc:///PATH and
 * nng+req+tls://HOST:PORT is tls+tcp://HOST:PORT (the receiver's
 * certificate is checked against --push-tls-ca, or the system's CAs). One
 * socket per receiver, dialled on first use and redialled by nng; each
 * delivery in flight has its own context, so many are in flight at once
 * (the engine bounds them per channel). Nothing here blocks the caller:
 * gw_push_send() starts the send, and the answer (or a RETRY when none
 * came within the timeout, or the receiver could not be reached) goes to
 * the engine as ENGINE_OP_PUSH_ACK.
 */
#ifndef BERTH_GATEWAY_PUSH_H
#define BERTH_GATEWAY_PUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

typedef struct gw_push gw_push;

typedef struct gw_push_options {
    uint64_t timeout_ms;      /* from the send to the answer */
    size_t max_message_bytes; /* an answer's ceiling (a call's result) */
    const char *tls_ca_file;  /* NULL: the system's CAs */
    size_t receivers_max;     /* distinct receivers (sockets) at most */
} gw_push_options;

int gw_push_open(const gw_push_options *o, gw_push **out, char *err, size_t errlen);
/* engine_push_fn: ctx is the gw_push. */
int gw_push_send(void *ctx, engine *e, const engine_push_delivery *d);
/* Sends nothing more, and waits until no delivery is in flight here (each
 * one unanswered is given up: the engine, stopped first, sends it again
 * when it next opens). Call after engine_stop(), before engine_close(). */
void gw_push_stop(gw_push *p);
/* Closes the sockets, waiting ms at most (nng can wait for ever on a
 * socket whose peer left a pipe stuck); false: it did not finish (the
 * caller should not wait either). NULL is a no-op. */
bool gw_push_close(gw_push *p, int ms);

#endif
