/*
 * handshake.h — the TLS handshakes of berth's own server (tls+tcp://, sp.h),
 * on a thread of their own at a lower priority (nice 10) than the loop: a
 * handshake is a private-key operation (~10 ms with RSA 2048), and a flood
 * of new connections must not stall the ones open.
 *
 * The loop hands each accepted connection over (gw_handshake_give): its
 * descriptor, its TLS state and its lock, in a gw_hs_entry embedded in
 * the connection. The handshake thread runs the handshake as far as the
 * peer's bytes go, on an epoll of its own, each step under the
 * connection's lock; once it is done, ops->up() queues the server's first
 * bytes under TLS. An entry whose handshake is done, failed, or is not
 * done by due_ms is handed back (failed set accordingly) and
 * ops->finished() wakes the loop, which takes them (gw_handshake_take):
 * from then on the handshake thread never touches the entry again. The
 * descriptor stays the server's: the handshake thread never closes it.
 *
 * Lifecycle: open (epoll, eventfd), start (the thread), stop (the thread
 * joined; every entry it had, or that was given after, is handed back as
 * failed), close (after stop; NULL is a no-op).
 */
#ifndef BERTH_GATEWAY_HANDSHAKE_H
#define BERTH_GATEWAY_HANDSHAKE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/deadline.h"
#include "gateway/tls.h"

typedef struct gw_handshake gw_handshake;

/* One connection's handshake, embedded in it. The server fills the first
 * five fields before gw_handshake_give(). */
typedef struct gw_hs_entry {
    void *conn;          /* the server's connection, passed to the ops */
    int fd;              /* its socket (non-blocking) */
    gw_tls_conn *tls;    /* its TLS state */
    pthread_mutex_t *mu; /* its lock: held over every step */
    uint64_t due_ms;     /* monotonic: failed if not done by then */
    bool failed;         /* when handed back: failed or late */
    /* the handshake thread's */
    bool over;                /* handed back: later events of its batch are ignored */
    gw_deadline due;          /* in its deadline list */
    struct gw_hs_entry *next; /* in the given or the handed-back list */
} gw_hs_entry;

typedef struct gw_handshake_ops {
    /* Sends what TLS queued; *more: the socket did not take it all.
     * False: the connection failed. The connection's lock is held. */
    bool (*flush)(void *conn, bool *more);
    /* The handshake is done: queue the first bytes under TLS. False: the
     * connection failed. The connection's lock is held. */
    bool (*up)(void *conn);
    /* Entries were handed back: gw_handshake_take() has them. Handshake
     * thread; must not block. */
    void (*finished)(void *arg);
    void *arg;
} gw_handshake_ops;

int gw_handshake_open(const gw_handshake_ops *ops, gw_handshake **out, char *err, size_t errlen);
int gw_handshake_start(gw_handshake *h, char *err, size_t errlen);
/* Loop thread: e's handshake begins. */
void gw_handshake_give(gw_handshake *h, gw_hs_entry *e);
/* The entries handed back since the last take, linked by `next` (NULL:
 * none). Any thread. */
gw_hs_entry *gw_handshake_take(gw_handshake *h);
void gw_handshake_stop(gw_handshake *h);
void gw_handshake_close(gw_handshake *h);

#endif
