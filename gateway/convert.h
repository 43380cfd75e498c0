/*
 * convert.h — the operate wire (proto/berth/v1/operate.proto) to engine
 * requests, and engine replies back to the wire. The only gateway code
 * that reads or builds the generated message types.
 *
 * OWNERSHIP
 *   gw_request_from_wire() fills an engine_request whose pointers reach
 *   into the unpacked Request and into the arena: both must live until the
 *   engine answers. gw_encode_*() build the Response in the arena and pack
 *   it into a new nng message the caller owns.
 */
#ifndef BERTH_GATEWAY_CONVERT_H
#define BERTH_GATEWAY_CONVERT_H

#include <stddef.h>

#include <nng/nng.h>

#include "berth/v1/operate.pb-c.h"
#include "engine/engine.h"

/* A bump allocator for one request's scratch memory; gw_arena_reset()
 * releases everything at once. */
typedef struct gw_arena {
    struct gw_chunk *head;
} gw_arena;

void *gw_arena_alloc(gw_arena *a, size_t n);
void gw_arena_reset(gw_arena *a);

/* 0, or BERTH_EINVAL with the reason in st (a method this build does not
 * serve, an empty envelope, an argument that cannot be mapped). */
int gw_request_from_wire(const Berth__V1__Request *in, engine_request *out, gw_arena *a,
                         engine_status *st);

/* A Status on the wire for st (its strings are st's). */
void gw_status_to_wire(const engine_status *st, Berth__V1__Status *w);
/* The Response for an engine reply. */
int gw_encode_reply(const engine_reply *r, gw_arena *a, nng_msg **out);
/* A Response that carries only a status (refusals before the engine). */
int gw_encode_status(const engine_status *st, nng_msg **out);

#endif
