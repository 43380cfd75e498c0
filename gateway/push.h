/*
 * push.h — the push transport: sends the engine's deliveries to push
 * channels' receivers over berth's own SP REQ client (it speaks nng's REQ
 * protocol itself, on a thread and an epoll of its own, without libnng's
 * sockets: any nng REP socket is a receiver), and hands their answers back
 * (proto/berth/v1/push.proto).
 *
 * A receiver is named by its channel's transport: nng+req://HOST:PORT
 * (TCP), nng+req+ipc:///PATH (nng's IPC mapping) and
 * nng+req+tls://HOST:PORT (TLS; the receiver's certificate must chain to
 * --push-tls-ca, or the system's CAs, and name HOST). One connection per
 * receiver, dialled on first use and again after it fails, every delivery
 * in flight pipelined on it with an id of its own (the engine bounds them
 * per channel). Nothing here blocks the caller: gw_push_send() hands the
 * encoded delivery to the sender's thread, and the answer (or a RETRY
 * saying why: no answer within the timeout, the connection failed with it
 * unanswered, the receiver could not be reached) goes to the engine as
 * ENGINE_OP_PUSH_ACK.
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

/* The sender's epoll and table of receivers, not yet sending: what
 * gw_push_send() hands it waits for gw_push_start(). */
int gw_push_open(const gw_push_options *o, gw_push **out, char *err, size_t errlen);
/* Starts the sender's thread. */
int gw_push_start(gw_push *p, char *err, size_t errlen);
/* engine_push_fn: ctx is the gw_push. */
int gw_push_send(void *ctx, engine *e, const engine_push_delivery *d);
/* Sends nothing more, gives up every delivery in flight (the engine,
 * stopped first, sends each again when it next opens) and joins the
 * sender's thread. Call after engine_stop(), before engine_close().
 * Idempotent. */
void gw_push_stop(gw_push *p);
/* gw_push_stop(), then closes the connections and frees it. Nothing here
 * waits on a peer. NULL is a no-op. */
void gw_push_close(gw_push *p);

#endif
