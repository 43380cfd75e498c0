/*
 * server.h — the operate surface: a tcp://, tls+tcp:// or ipc:// URL is
 * served by berth's own server (sp.h) unless `nng` is set; every other URL
 * (ws://), and those with `nng` (a mode kept to compare with), by an nng
 * REP socket served asynchronously on contexts, as follows. (nng 1.5.2's
 * TCP and TLS transports can lose a pipe's receive when its peer hangs up
 * with requests in flight, and then never let any closed pipe go: see
 * BENCHMARKS.md "Hostile clients". berth's own server has no such path.)
 *
 * Each context runs one request at a time through the states of its
 * callback: RECV (decode, check, hand to the engine) → ENGINE (nothing runs:
 * the request waits in the engine, a long poll as data, holding no thread)
 * → SEND (encoded by the engine's commit thread) → RECV.
 * Parked long polls hold their contexts, so the pool grows: whenever the
 * last idle context takes a request, a new one starts receiving, up to
 * contexts_max. Completions and submits keep flowing while every worker
 * long-polls.
 *
 * Every request gets an answer: malformed protobuf, an empty envelope, an
 * unknown method and a message over max_message_bytes are answered with a
 * Status, and the connection stays up. The socket's hard receive limit is
 * twice max_message_bytes; a message over that is dropped by nng with its
 * connection (the memory bound). Past max_connections a new connection is
 * closed as soon as nng has it (after the SP headers are exchanged).
 */
#ifndef BERTH_GATEWAY_SERVER_H
#define BERTH_GATEWAY_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "engine/engine.h"

typedef struct gw_server gw_server;

typedef struct gw_server_options {
    const char *url;
    size_t max_message_bytes;
    uint32_t contexts;           /* receiving at start */
    uint32_t contexts_max;       /* the pool's ceiling */
    nng_tls_config *tls;         /* for tls+tcp:// with `nng`; NULL otherwise */
    const struct gw_tls *sp_tls; /* for tls+tcp:// on berth's own server (tls.h) */
    bool nng;                    /* every URL through nng (else sp.c serves tcp, tls, ipc) */
    uint32_t max_connections;    /* both servers: more are closed as they come (0: no limit) */
    uint64_t idle_timeout_ms;
    uint64_t frame_timeout_ms;
    uint64_t buffers_max_bytes;
    /* Another surface (admin.h): its codec, served by whichever server
     * the URL takes (berth's own for tcp://, tls+tcp:// and ipc:// unless
     * `nng` is set). NULL: the operate surface. */
    const struct gw_codec *codec;
    const void *codec_ctx;
    const char *name; /* in messages: "operate" when NULL */
} gw_server_options;

/* The socket (berth's own server's, or nng's REP socket), bound for
 * berth's own (sp.h), not yet serving. o is copied; its strings must
 * outlive the server. */
int gw_server_open(engine *e, const gw_server_options *o, gw_server **out, char *err,
                   size_t errlen);
/* Serves: berth's own server starts its loop; nng's socket starts its
 * contexts receiving and listens on the URL. */
int gw_server_start(gw_server *s, char *err, size_t errlen);
/* The URL bound (a tcp port 0 resolved). */
const char *gw_server_url(const gw_server *s);
/* Stops serving, in bounded time: answers owed go out (2 s at most), every
 * context is stopped and closed, and no request reaches the engine after
 * it returns. Call after engine_stop(); the engine may then be closed.
 * Idempotent. */
void gw_server_stop(gw_server *s);
/* gw_server_stop(), then closes the socket and frees everything (NULL: a
 * no-op). nng's
 * socket close waits for its pipes, and a pipe whose peer left it stuck
 * may keep it waiting (berthd bounds that wait: gateway/main.c). */
void gw_server_close(gw_server *s);

#endif
