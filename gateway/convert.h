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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "berth/v1/operate.pb-c.h"
#include "engine/engine.h"

/* A bump allocator for one request's scratch memory; gw_arena_reset()
 * frees everything at once. */
typedef struct gw_arena {
    struct gw_chunk *head;
} gw_arena;

void *gw_arena_alloc(gw_arena *a, size_t n);
void gw_arena_reset(gw_arena *a);
/* n zeroed items of size bytes, and the array of pointers to them (as
 * protobuf-c's repeated message fields take them); NULL when n is 0, or
 * with *ok false when there is no memory. */
void **gw_arena_array(gw_arena *a, size_t n, size_t size, bool *ok);

/* 0, or BERTH_EINVAL with the reason in st (a method this build does not
 * serve, an empty envelope, an argument that cannot be mapped). */
int gw_request_from_wire(const Berth__V1__Request *in, engine_request *out, gw_arena *a,
                         engine_status *st);

/* A Status on the wire for st (its strings are st's). */
void gw_status_to_wire(const engine_status *st, Berth__V1__Status *w);

/* ENVELOPES (Response, AdminResponse: a status and a oneof `method`
 * whose members are numbered as its cases). One way to encode, for both
 * surfaces: */
/* The method member numbered `field` of an unpacked envelope. */
const void *gw_member(const ProtobufCMessage *env, uint32_t field);
/* m packed into a new message the caller owns. */
int gw_pack(const ProtobufCMessage *m, nng_msg **out);
/* The envelope of type d: st as its status and, unless field is 0,
 * member as its method member numbered field; packed. */
int gw_encode_envelope(const ProtobufCMessageDescriptor *d, const engine_status *st, uint32_t field,
                       void *member, nng_msg **out);
/* How one method's OK reply fills its member, which the caller made
 * (from the arena) and initialised; false: no memory. req is the request
 * answered (NULL where no fill needs it). */
typedef bool (*gw_fill_fn)(void *member, const engine_reply *r, const engine_request *req,
                           gw_arena *a);
typedef struct gw_method_out {
    engine_op op;
    uint32_t field;  /* its member of the envelope */
    gw_fill_fn fill; /* NULL: the member is empty */
} gw_method_out;
/* The envelope of type d for r: a failure carries its status alone, and
 * so does an op without a method (m NULL); otherwise m's member, filled
 * (out of memory: a RESOURCE_EXHAUSTED envelope). */
int gw_encode_method(const ProtobufCMessageDescriptor *d, const gw_method_out *m,
                     const engine_request *req, const engine_reply *r, gw_arena *a, nng_msg **out);

/* The Response for an engine reply. */
int gw_encode_reply(const engine_reply *r, gw_arena *a, nng_msg **out);
/* A Response that carries only a status (refusals before the engine). */
int gw_encode_status(const engine_status *st, nng_msg **out);

#endif
