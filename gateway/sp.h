/*
 * sp.h — berth's own server for the operate (and admin) surface on tcp://,
 * tls+tcp:// and ipc://.
 *
 * It speaks what an nng REQ socket speaks to a REP socket over TCP (the
 * scalability protocols' TCP mapping): an 8-byte header each way
 * ("\0SP\0", the protocol number, two zero bytes), then frames of a
 * 64-bit big-endian length and the message, whose header is the request's
 * backtrace (4-byte words, the last with its high bit set), echoed in the
 * answer. Over ipc:// (a Unix socket: nng's IPC mapping) each frame's
 * length is preceded by one byte, the message type, which is always 1
 * (another closes the connection). Clients cannot tell it from nng's REP.
 * An ipc:// socket file left by a listener that is gone is replaced; one
 * that answers is another server's, and starting fails. The file is
 * removed at close. Over tls+tcp:// (nng's TLS mapping) the same bytes go
 * through TLS (tls.h): the handshake first, then the headers and frames as
 * over tcp://. Handshakes run on a thread of their own at a lower priority
 * (nice 10) than the loop: each is a private-key operation, and a flood of
 * new connections must not stall the ones open. A peer has 10 s for its
 * handshake, then 10 s for its SP header.
 *
 * One thread runs an epoll loop: it accepts, reads frames and hands each
 * request to the engine (gateway/call.h). The engine's commit thread
 * writes each answer straight to its socket; only what the socket does
 * not take at once is left to the loop. Compared with nng's REP this saves
 * two thread hand-offs and most of the locking per request.
 *
 * Limits, as with nng's socket: a frame over twice max_message_bytes
 * closes its connection (the memory bound); one up to that size is
 * answered with a Status. A connection with SP_INFLIGHT_MAX requests in
 * the engine is not read until one is answered, and one whose peer leaves
 * more than 256 MiB of answers unread is closed. A peer that has not sent
 * its 8-byte header 10 s after connecting is closed (nng's negotiation
 * timeout); once it has, an idle connection stays open. As with nng's REP,
 * a frame that ends before its request id closes its connection, and one
 * whose backtrace runs past 8 words (nng's TTL) is dropped unanswered. A
 * connection that closes ends its waiting fetches (engine_cancel), and
 * the fetches read after its peer hung up are not run: they would claim
 * tasks for nobody (its other last requests are).
 *
 * Descriptors: past max_connections a new connection is accepted and
 * closed at once, and so is one that finds berthd out of descriptors (a
 * spare one is let go for it): it hears "no" at once instead of timing
 * out in the backlog, and the connections already open are served at
 * full speed. A connection with nothing in the engine that sends nothing
 * for idle_timeout_ms is closed, and so is one that takes longer than
 * frame_timeout_ms to send a frame it began.
 *
 * Memory: what the connections hold, requests read in part and answers
 * their peers have not read, is one budget (buffers_max_bytes). A
 * connection is not read while more than SP_OUT_PAUSE bytes of its answers
 * wait for its peer. Within the budget any connection's buffers may grow;
 * past it, only those of a connection under its share (the budget over
 * the connections open): a connection over its share that needs more room
 * to read is not read until the total is back under 3/4 of the budget
 * (and its frame deadline runs on), and one whose answers would not fit
 * is closed. So the total stays under twice the budget, the connections
 * that hold little are served on, and memory freed after a surge is given
 * back to the system.
 */
#ifndef BERTH_GATEWAY_SP_H
#define BERTH_GATEWAY_SP_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

#define SP_INFLIGHT_MAX 256
#define SP_OUT_PAUSE    (16u << 20) /* answers unread past which a connection is not read */

typedef struct gw_sp gw_sp;

typedef struct gw_sp_limits {
    size_t max_message_bytes;
    uint32_t max_connections;   /* more are accepted and closed at once */
    uint64_t idle_timeout_ms;   /* a connection not read for this long, with
                                   nothing in the engine, is closed; 0: never */
    uint64_t frame_timeout_ms;  /* a frame begun must be in whole this long after
                                   its first byte, or its connection is closed;
                                   0: never */
    uint64_t buffers_max_bytes; /* the memory budget (above); 0: SIZE_MAX */
    /* tls+tcp://: the certificate and key (tls.h); unused by other URLs. */
    const struct gw_tls *tls;
    /* The surface it serves (call.h): NULL is the operate surface's. */
    const struct gw_codec *codec;
    const void *codec_ctx;
} gw_sp_limits;

/* url: tcp://HOST:PORT or tls+tcp://HOST:PORT (HOST may be empty or '*'
 * for every address, or [v6]; PORT may be 0), or ipc://PATH. */
int gw_sp_start(engine *e, const char *url, const gw_sp_limits *lim, gw_sp **out, char *err,
                size_t errlen);
const char *gw_sp_url(const gw_sp *s);
/* Connections open now (any thread). One that closed has answered its
 * last requests as closed: their claimed tasks are handed back. */
unsigned gw_sp_connections(const gw_sp *s);
/* Call after engine_stop(): answers already handed to sockets are
 * flushed (2 s at most), then every connection closes. */
void gw_sp_close(gw_sp *s);

/* Hands memory the allocator keeps free back to the system (tcmalloc's
 * page heap when berthd links it, else glibc's malloc_trim): after a
 * flood of clients has gone, and after recovery, whose growing tables
 * leave their outgrown arrays behind. */
void gw_memory_release(void);

#endif
