/*
 * operate.h — one operate request from its bytes to the engine, whatever
 * transport carried it (server.c: nng's REP sockets; sp.c: berth's own
 * server); and the codec interface every surface (operate, admin.h)
 * gives the servers.
 *
 * gw_operate_begin() decodes the bytes (a protobuf-c allocator bounded to
 * 16x the message and 4 MiB, so a small message of many empty items
 * cannot make berthd allocate without bound), maps them onto an
 * engine_request and hands it to the engine. When it returns BERTH_OK the
 * engine owns the request until done() (engine.h); otherwise *st holds
 * the Status to answer with. gw_operate_fini() frees what the decode and
 * the answer's encoding took, and leaves the struct as gw_operate_init()
 * did: it can carry another request.
 */
#ifndef BERTH_GATEWAY_OPERATE_H
#define BERTH_GATEWAY_OPERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "gateway/convert.h"

typedef struct gw_decode_budget {
    ProtobufCAllocator a;
    size_t used, cap; /* bytes the decode took, and may take */
    bool over;        /* the decode asked for more than cap */
} gw_decode_budget;

/* One operate request (embedded: gw_operate_init / gw_operate_fini). */
typedef struct gw_operate {
    /* Set before gw_operate_begin() by a transport whose peer has hung
     * up: a fetch is not run (it would claim tasks nobody can read), nor
     * an await (it would wait for nobody), and the begin returns
     * GW_OPERATE_DROPPED, with nothing to answer. */
    bool peer_gone;
    gw_decode_budget budget;
    Berth__V1__Request *req; /* unpacked; ereq points into it */
    engine_request ereq;
    gw_arena arena;
} gw_operate;

void gw_operate_init(gw_operate *c);
/* owner: the connection that sent it (engine_request.owner), whose waits
 * engine_cancel() ends when it closes: GW_OWNER_SP | a counter for
 * berth's own server, an nng pipe id for nng's. */
#define GW_OWNER_SP        (1ull << 63)
#define GW_OPERATE_DROPPED 1
int gw_operate_begin(gw_operate *c, engine *e, uint64_t owner, const void *data, size_t len,
                     size_t max_msg, engine_done_fn done, void *arg, engine_status *st);
void gw_operate_fini(gw_operate *c);

/* A surface's codec: how a server turns the bytes of one request into an
 * engine request (begin) and the engine's reply into the bytes of the
 * answer (encode), for its own envelope. server.c and sp.c serve any
 * codec; each request is held in call_size bytes, set up by init; fini
 * frees what it took and leaves it as init did (reused by nng's contexts). */
typedef struct gw_codec {
    size_t call_size;
    void (*init)(void *call);
    /* As gw_operate_begin(); ctx is the server's codec_ctx. */
    int (*begin)(const void *ctx, void *call, engine *e, uint64_t owner, const void *data,
                 size_t len, size_t max_msg, engine_done_fn done, void *arg, engine_status *st);
    int (*encode)(void *call, const engine_reply *r, nng_msg **out);
    int (*encode_status)(const engine_status *st, nng_msg **out);
    void (*fini)(void *call);
} gw_codec;

/* The operate surface's: Request in, Response out (gw_operate). */
extern const gw_codec gw_operate_codec;

#endif
