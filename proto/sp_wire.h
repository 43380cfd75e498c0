/*
 * sp_wire.h — the scalability protocols' TCP mapping, as nng speaks it
 * (DESIGN §5): what a client without libnng writes, and what berthd's own
 * tcp:// server (gateway/sp.c) and berth's direct client (tools/client.c)
 * speak. Declared once, here.
 *
 *   connect   each side sends SP_HEADER_LEN bytes: 00 'S' 'P' 00, its
 *             protocol number (16 bits, big endian), 00 00
 *   message   a 64-bit big-endian length, then that many bytes
 *   REQ/REP   a request begins with its backtrace: 32-bit big-endian
 *             words, the last (the request id) with its high bit set;
 *             the answer begins with the same words
 */
#ifndef BERTH_PROTO_SP_WIRE_H
#define BERTH_PROTO_SP_WIRE_H

#include <stdint.h>

#define SP_HEADER_LEN    8
#define SP_PROTO_REQ0    0x0030
#define SP_PROTO_REP0    0x0031
#define SP_PROTO_PUB0    0x0020
#define SP_PROTO_SUB0    0x0021
#define SP_LENGTH_LEN    8           /* the length before every message */
#define SP_REQUEST_ID_HI 0x80000000u /* the high bit of a request id */

/* The header a peer of protocol `proto` sends on connect. */
static inline void sp_header(uint8_t out[SP_HEADER_LEN], uint16_t proto)
{
    out[0] = 0, out[1] = 'S', out[2] = 'P', out[3] = 0;
    out[4] = (uint8_t)(proto >> 8), out[5] = (uint8_t)proto;
    out[6] = 0, out[7] = 0;
}

#endif
