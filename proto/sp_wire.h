/*
 * sp_wire.h — the scalability protocols' TCP mapping, as nng speaks it
 * (ARCHITECTURE.md, "Wire"): what a client without libnng writes, and what berthd's own
 * tcp://, tls+tcp:// and ipc:// server (gateway/sp.c, its listeners in
 * gateway/listeners.c), its push sender (gateway/push.c) and berth's
 * direct client (tools/clients/c/client.c) speak. Declared once, here.
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* An address as nng's tcp:// and tls+tcp:// URLs write it after their
 * scheme, HOST:PORT, split: HOST may be empty, or [v6] (the brackets are
 * removed). False: no ':', or a part longer than its buffer. */
static inline bool sp_host_port(const char *hp, char *host, size_t hostlen, char *port,
                                size_t portlen)
{
    const char *colon = strrchr(hp, ':');
    if (colon == NULL)
        return false;
    size_t hl = (size_t)(colon - hp);
    if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') {
        hp++;
        hl -= 2;
    }
    if (hl >= hostlen || strlen(colon + 1) >= portlen)
        return false;
    memcpy(host, hp, hl);
    host[hl] = '\0';
    memcpy(port, colon + 1, strlen(colon + 1) + 1);
    return true;
}

#endif
