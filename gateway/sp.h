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
 * Listening sockets, and what an ipc:// socket file left behind becomes,
 * are listeners.h's. Over tls+tcp:// (nng's TLS mapping) the same bytes go
 * through TLS (tls.h): the handshake first, then the headers and frames as
 * over tcp://. Handshakes run on a thread of their own at a lower
 * priority than the loop (handshake.h). A peer has 10 s for its
 * handshake, then 10 s for its SP header.
 *
 * One thread runs an epoll loop: it accepts, reads frames and hands each
 * request to the engine (operate.h). The engine's commit thread
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
 * their peers have not read, is one budget (buffers_max_bytes; budget.h).
 * A connection is not read while more than SP_OUT_PAUSE bytes of its
 * answers wait for its peer. Within the budget any connection's buffers
 * may grow; past it, only those of a connection under its share: one over
 * its share that needs more room to read is not read until the total is
 * back under 3/4 of the budget (and its frame deadline runs on), and one
 * whose answers would not fit is closed.
 *
 * LOCKING
 *   Each connection has a lock (mu) over what two threads share: its
 *   output queue, its TLS state, its flags and its descriptor's life. The
 *   loop thread reads, accepts and closes; the engine's commit thread
 *   writes answers (so does the loop, for refusals); the handshake thread
 *   has a tls+tcp:// connection until its handshake is done. The writes
 *   to the socket (send, sendmsg; on tls+tcp:// the encryption before
 *   them, and the reads that mbed TLS does with recv) are made with the
 *   lock held, on purpose, for these reasons:
 *   - The descriptor's life: the loop closes it under the lock (`closed`)
 *     and the next accept may reuse its number at once. A write outside
 *     the lock could land on the connection that reused it: a stranger's
 *     socket would get another client's answer.
 *   - Order on the stream: an answer is written whole, or its rest is
 *     queued before any later answer, and what the loop flushes on
 *     EPOLLOUT comes first. Two writers outside a lock could interleave
 *     frames, and the peer would read garbage.
 *   - TLS: one mbed TLS context per connection, which is not safe for a
 *     read (the loop) beside a write (the commit thread), and whose
 *     records must be encrypted in the order they are sent.
 *   Every socket call is non-blocking (MSG_DONTWAIT, O_NONBLOCK): it
 *   copies into the kernel's buffer or returns at once, so the lock is
 *   held for a copy, never for the peer. Taking the bytes under the lock
 *   with a "writer busy" flag and writing outside it would need the close
 *   deferred to the writer, the loop's flush kept out meanwhile and TLS
 *   serialized by a lock of its own: the same exclusion, spread over
 *   three mechanisms, for a section that never waits.
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
    /* The surface it serves (operate.h): NULL is the operate surface's. */
    const struct gw_codec *codec;
    const void *codec_ctx;
} gw_sp_limits;

/* Binds url (listeners.h) and makes the server ready, not serving:
 * connections wait in the backlog until gw_sp_start(). */
int gw_sp_open(engine *e, const char *url, const gw_sp_limits *lim, gw_sp **out, char *err,
               size_t errlen);
/* Starts the loop (and the handshake thread): it serves from now on. */
int gw_sp_start(gw_sp *s, char *err, size_t errlen);
/* The URL bound (a tcp port 0 resolved). */
const char *gw_sp_url(const gw_sp *s);
/* Connections open now (any thread). One that closed has answered its
 * last requests as closed: their claimed tasks are handed back. */
unsigned gw_sp_connections(const gw_sp *s);
/* Call after engine_stop(): answers already handed to sockets are
 * flushed (2 s at most), then every connection closes and the threads
 * are joined. Idempotent. */
void gw_sp_stop(gw_sp *s);
/* gw_sp_stop(), then closes the listener (an ipc:// socket file is
 * removed) and frees it. NULL is a no-op. */
void gw_sp_close(gw_sp *s);

#endif
