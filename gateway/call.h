/*
 * call.h — one operate request from its bytes to the engine, whatever
 * transport carried it (server.c: nng's REP sockets; sp.c: berth's own
 * TCP server).
 *
 * gw_call_start() decodes the bytes (a protobuf-c allocator bounded to
 * 16x the message and 4 MiB, so a small message of many empty items
 * cannot make berthd allocate without bound), maps them onto an
 * engine_request and hands it to the engine. When it returns BERTH_OK the
 * engine owns the call until done() (engine.h); otherwise *st holds the
 * Status to answer with. gw_call_release() frees what the decode and the
 * answer's encoding took; the call can then carry another request.
 */
#ifndef BERTH_GATEWAY_CALL_H
#define BERTH_GATEWAY_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "gateway/convert.h"

typedef struct gw_decode_budget {
    ProtobufCAllocator a;
    size_t used, cap;
    bool over;
} gw_decode_budget;

typedef struct gw_call {
    /* Set before gw_call_start() by a transport whose peer has hung up:
     * a fetch is not run (it would claim tasks nobody can read), nor an
     * await (it would wait for nobody), and the start returns
     * GW_CALL_DROPPED, with nothing to answer. */
    bool peer_gone;
    gw_decode_budget budget;
    Berth__V1__Request *req; /* unpacked; ereq points into it */
    engine_request ereq;
    gw_arena arena;
} gw_call;

void gw_call_init(gw_call *c);
/* owner: the connection that sent it (engine_request.owner), whose waits
 * engine_cancel() ends when it closes: GW_OWNER_SP | a counter for
 * berth's own server, an nng pipe id for nng's. */
#define GW_OWNER_SP     (1ull << 63)
#define GW_CALL_DROPPED 1
int gw_call_start(gw_call *c, engine *e, uint64_t owner, const void *data, size_t len,
                  size_t max_msg, engine_done_fn done, void *arg, engine_status *st);
void gw_call_release(gw_call *c);

/* A surface's codec: how a server turns the bytes of one request into an
 * engine request (start) and the engine's reply into the bytes of the
 * answer (encode), for its own envelope. server.c serves any codec on
 * nng's REP sockets; each context holds one call of call_size bytes. */
typedef struct gw_codec {
    size_t call_size;
    void (*init)(void *call);
    /* As gw_call_start(); ctx is the server's codec_ctx. */
    int (*start)(const void *ctx, void *call, engine *e, uint64_t owner, const void *data,
                 size_t len, size_t max_msg, engine_done_fn done, void *arg, engine_status *st);
    int (*encode)(void *call, const engine_reply *r, nng_msg **out);
    int (*encode_status)(const engine_status *st, nng_msg **out);
    void (*release)(void *call);
} gw_codec;

/* The operate surface's: Request in, Response out (gw_call). */
extern const gw_codec gw_operate_codec;

#endif
