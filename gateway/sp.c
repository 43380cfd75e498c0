/*
 * sp.c — see sp.h. The loop, a connection's life and its framing, with
 * the answers the commit thread writes: the one file past 1,000 lines,
 * because every function here reads or writes a connection's private
 * state under the LOCKING rules of sp.h, and spreading them over files
 * would mean a header exposing that state to code that must not touch
 * it. What needs no connection's internals lives beside it: the
 * listeners (listeners.c), the TLS handshake thread (handshake.c), the
 * memory budget (budget.c) and the deadline lists (deadline.c).
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "gateway/sp.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "gateway/budget.h"
#include "gateway/convert.h"
#include "gateway/deadline.h"
#include "gateway/handshake.h"
#include "gateway/listeners.h"
#include "gateway/operate.h"
#include "gateway/tls.h"
#include "gateway/wakeup.h"
#include "proto/sp_wire.h"
#include "store/err.h"

#define SP_TTL           8 /* backtrace words (hops and the id), as nng's REP */
#define SP_BACKTRACE_MAX (4 * SP_TTL)
#define SP_OUT_MAX       (256u << 20) /* answers queued for a reader that does not read */
#define SP_IN_KEEP       (64u << 10)  /* input buffer kept between frames; more is freed */
#define SP_HELLO_MS      10000        /* a peer's header must arrive within this (as nng's) */

typedef struct sp_conn {
    struct gw_sp *s;
    int fd;
    gw_tls_conn *tls;            /* tls+tcp://: every byte each way goes through it (under mu) */
    uint64_t owner;              /* the engine's name for its requests (never reused) */
    atomic_int refs;             /* the loop's while registered, one per request in the engine */
    atomic_size_t held;          /* in_cap + out_cap: its part of the memory budget */
    struct sp_conn *prev, *next; /* s->conns (loop thread) */

    /* loop thread only */
    uint8_t hello[SP_HEADER_LEN];
    size_t hello_got;
    gw_deadline hello_by; /* in s->hello until its header is in */
    gw_deadline frame;    /* in s->frames while a frame is half read */
    gw_deadline idle;     /* in s->idle once its header is in: by its last read */
    uint8_t *in;
    size_t in_len, in_cap;
    bool starved;   /* not read: over its share of the memory budget (also under mu) */
    bool hup;       /* its peer has hung up: what is left to read is its last */
    gw_hs_entry hs; /* tls+tcp://: its handshake (handshake.h) */

    pthread_mutex_t mu; /* guards what follows */
    bool closed;        /* nothing more is sent; fd closed */
    bool ending;        /* shut down: nothing more is sent; the loop sees the end */
    uint8_t *out;       /* bytes the socket did not take yet */
    size_t out_len, out_off, out_cap;
    uint32_t inflight;
    bool paused; /* not read: SP_INFLIGHT_MAX in the engine */
    bool full;   /* not read: its peer leaves over SP_OUT_PAUSE of answers unread */
    bool resume_listed;
    struct sp_conn *resume_next;
} sp_conn;

typedef struct sp_req {
    sp_conn *c;
    uint8_t bt[SP_BACKTRACE_MAX];
    size_t bt_len;
    void *call; /* the codec's call, in mem */
    _Alignas(max_align_t) unsigned char mem[];
} sp_req;

struct gw_sp {
    engine *e;
    const gw_codec *codec; /* the surface's (operate.h) */
    const void *codec_ctx;
    size_t max_msg;
    uint64_t owners; /* connections accepted: each one's engine owner id (loop thread) */
    gw_listener l;   /* the listening socket, its URL and its kind (listeners.h) */
    int efd, wake;   /* the loop's epoll and eventfd */
    pthread_t thread;
    bool started, stopped; /* the loop thread (the thread that starts and stops it) */
    sp_conn *conns;
    gw_deadlines hello;  /* awaiting their header (SP_HELLO_MS; loop thread) */
    gw_deadlines frames; /* a frame begun, not all in (frame_ms; loop thread) */
    gw_deadlines idle;   /* the others, by their last read (idle_ms; loop thread) */
    uint64_t frame_ms;   /* a frame must be in whole this long after it began */
    uint32_t n_conns;    /* open connections (loop thread) */
    atomic_uint open;    /* n_conns, for the commit thread */
    gw_budget budget;    /* every connection's buffers (budget.h) */
    uint32_t n_starved;  /* connections not read for the budget (loop thread) */
    uint32_t max_conns;  /* more are closed as they come */
    uint64_t idle_ms;    /* 0: never closed for idleness */
    int spare;           /* a descriptor kept to accept-and-close at EMFILE */
    sp_conn *dead;       /* closed this batch of events: freed after it */
    pthread_mutex_t mu;  /* guards resume and closing */
    sp_conn *resume;     /* unpaused: the loop reads them again */
    bool closing;
    gw_handshake *hs; /* tls+tcp://: the handshake thread (handshake.h); else NULL */
};

/* ---- connections ---- */

/* ---- the memory budget (budget.h) ---- */

/* May c's buffers grow by n bytes? */
static bool conn_may_grow(const sp_conn *c, size_t n)
{
    return gw_budget_may_grow(&c->s->budget, atomic_load(&c->held), n, atomic_load(&c->s->open));
}

static void conn_grew(sp_conn *c, size_t n)
{
    gw_budget_take(&c->s->budget, &c->held, n);
}

static void conn_shrank(sp_conn *c, size_t n)
{
    gw_budget_give_back(&c->s->budget, &c->held, n);
}

static void conn_unref(sp_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    conn_shrank(c, atomic_load(&c->held));
    pthread_mutex_destroy(&c->mu);
    gw_tls_conn_free(c->tls);
    free(c->in);
    free(c->out);
    free(c);
}

/* epoll interest from the connection's state; c->mu held. */
static void conn_arm(sp_conn *c)
{
    /* EPOLLRDHUP: a paused connection (not read) still hears its peer go. */
    struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = c};
    c->full = c->out_len - c->out_off > SP_OUT_PAUSE;
    if (!c->paused && !c->full && !c->starved)
        ev.events |= EPOLLIN;
    if (c->out_len > c->out_off)
        ev.events |= EPOLLOUT;
    epoll_ctl(c->s->efd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Loop thread. */
static void conn_close(sp_conn *c)
{
    gw_sp *s = c->s;
    gw_deadline_clear(&s->hello, &c->hello_by);
    gw_deadline_clear(&s->frames, &c->frame);
    gw_deadline_clear(&s->idle, &c->idle);
    s->n_conns--;
    if (c->starved)
        s->n_starved--;
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    atomic_fetch_sub(&s->open, 1); /* (after: whoever sees it sees `closed` too) */
    epoll_ctl(s->efd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    bool waiting = c->inflight > 0;
    pthread_mutex_unlock(&c->mu);
    /* Its long polls must not go on claiming tasks nobody will read. (If
     * the engine is closing, it answers them anyway.) */
    if (waiting)
        (void)engine_cancel(s->e, c->owner);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    /* Events later in this batch may still name c: the loop's reference
     * is dropped after the batch. */
    c->next = s->dead;
    s->dead = c;
}

/* Sends what is queued; c->mu held. False: the connection failed. */
static bool conn_flush(sp_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n =
            send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (n <= 0)
            return false;
        c->out_off += (size_t)n;
    }
    c->out_off = c->out_len = 0;
    if (c->out_cap > SP_IN_KEEP) { /* after a surge */
        free(c->out);
        c->out = NULL;
        conn_shrank(c, c->out_cap);
        c->out_cap = 0;
    }
    return true;
}

/* Room for n more bytes of answers; c->mu held. False: a reader this far
 * behind (SP_OUT_MAX, or over its share of the budget), or no memory. */
static bool out_reserve(sp_conn *c, size_t n)
{
    if (c->out_off > 0) { /* drop what was sent */
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
    }
    if (c->out_len + n > SP_OUT_MAX)
        return false;
    if (c->out_len + n <= c->out_cap)
        return true;
    size_t cap = c->out_cap ? c->out_cap : 4096;
    while (cap < c->out_len + n)
        cap *= 2;
    if (!conn_may_grow(c, cap - c->out_cap))
        return false;
    uint8_t *o = realloc(c->out, cap);
    if (o == NULL)
        return false;
    conn_grew(c, cap - c->out_cap);
    c->out = o;
    c->out_cap = cap;
    return true;
}

/* What TLS sends, queued in order with the rest; c->mu held. */
static bool tls_out(void *arg, const uint8_t *p, size_t n)
{
    sp_conn *c = arg;
    if (!out_reserve(c, n))
        return false;
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    return true;
}

/* Ends the connection from the commit thread (c->mu held): the peer sees
 * it at once, and the loop sees the end and closes it. */
static void conn_end(sp_conn *c)
{
    c->ending = true;
    shutdown(c->fd, SHUT_RDWR);
}

/* Puts c on the list the loop runs again (resume_all): its frames, and on
 * tls+tcp:// what TLS holds decrypted; c->mu held. */
static void resume_later(sp_conn *c)
{
    gw_sp *s = c->s;
    if (c->resume_listed)
        return;
    c->resume_listed = true;
    atomic_fetch_add(&c->refs, 1); /* the list's */
    pthread_mutex_lock(&s->mu);
    c->resume_next = s->resume;
    s->resume = c;
    pthread_mutex_unlock(&s->mu);
    gw_wakeup_ring(s->wake);
}

/* ---- answers (the commit thread, or the loop for refusals) ---- */

static void req_answer(sp_req *r, nng_msg *m)
{
    sp_conn *c = r->c;
    gw_sp *s = c->s;
    uint8_t head[9] = {1}; /* (ipc://: the message type, 1) */
    uint64_t len = r->bt_len + (m ? nng_msg_len(m) : 0);
    for (int i = 0; i < 8; i++)
        head[s->l.lead + i] = (uint8_t)(len >> (56 - 8 * i));
    size_t head_len = s->l.lead + 8u;
    pthread_mutex_lock(&c->mu);
    if (!c->closed && !c->ending && m == NULL) {
        /* No answer could be made (no memory to encode it). Clients turn
         * the REQ resend off, so a silent drop would leave this one
         * waiting for good: close the connection, which it sees at once,
         * and the loop sees the end. */
        conn_end(c);
    } else if (!c->closed && !c->ending) {
        size_t body = nng_msg_len(m), total = head_len + r->bt_len + body, sent = 0;
        struct iovec iov[3] = {{head, head_len}, {r->bt, r->bt_len}, {nng_msg_body(m), body}};
        if (c->tls != NULL) {
            /* Encrypted into the queue (a connection that fails stays
             * failed: TLS does not resume a record cut short), then sent. */
            if (!gw_tls_writev(c->tls, iov, 3) || !conn_flush(c))
                conn_end(c);
            sent = total;
        } else if (c->out_len == c->out_off) { /* nothing queued: try the socket now */
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 3};
            ssize_t n;
            do
                n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
            while (n < 0 && errno == EINTR);
            if (n > 0)
                sent = (size_t)n;
        }
        if (sent < total && out_reserve(c, total - sent)) {
            const uint8_t *parts[3] = {head, r->bt, nng_msg_body(m)};
            size_t lens[3] = {head_len, r->bt_len, body}, skip = sent;
            for (int i = 0; i < 3; i++) {
                size_t k = skip < lens[i] ? skip : lens[i];
                skip -= k;
                memcpy(c->out + c->out_len, parts[i] + k, lens[i] - k);
                c->out_len += lens[i] - k;
            }
        } else if (sent < total) {
            conn_end(c); /* a reader this far behind, or no memory */
        }
    }
    c->inflight--;
    /* Read again once half the window is free, not on every answer. */
    bool resume = c->paused && c->inflight <= SP_INFLIGHT_MAX / 2 && !c->closed;
    if (!c->closed && (c->out_len > c->out_off || resume)) {
        bool was_full = c->full;
        conn_arm(c);
        /* (tls+tcp:// sends from here: its peer may have read enough for
         * the connection to be read again, which the loop then learns
         * from no event of its own) */
        if (resume || (was_full && !c->full))
            resume_later(c);
    }
    pthread_mutex_unlock(&c->mu);
    if (m != NULL)
        nng_msg_free(m);
    c->s->codec->fini(r->call);
    free(r);
    conn_unref(c);
}

/* A task claimed for a connection that is gone, handed back. */
typedef struct sp_giveback {
    engine_request req;
    char id[ENGINE_ID_STR], token[ENGINE_ID_STR];
    char worker[]; /* (its NUL too) */
} sp_giveback;

static void giveback_done(void *arg, engine_reply *r)
{
    engine_reply_free(r);
    free(arg);
}

/* A fetch answered after its connection went (closed, or shut down for
 * falling behind): nobody saw the lock tokens, so its tasks are released
 * now rather than when their locks run out. */
static void give_back(sp_req *r, const engine_reply *reply)
{
    const char *worker = ((gw_operate *)r->call)->ereq.u.fetch.worker_id;
    size_t wl = worker != NULL ? strlen(worker) : 0;
    for (size_t i = 0; i < reply->n_tasks; i++) {
        sp_giveback *g = malloc(sizeof(*g) + wl + 1);
        if (g == NULL)
            return; /* their locks run out as usual */
        memcpy(g->id, reply->tasks[i].id, sizeof(g->id));
        memcpy(g->token, reply->tasks[i].lock_token, sizeof(g->token));
        memcpy(g->worker, worker != NULL ? worker : "", wl + 1);
        g->req = (engine_request){.op = ENGINE_OP_RELEASE};
        g->req.u.release = (engine_guard){g->id, g->worker, g->token};
        if (engine_exec(r->c->s->e, &g->req, giveback_done, g) != BERTH_OK)
            free(g);
    }
}

static void req_done(void *arg, engine_reply *reply)
{
    sp_req *r = arg;
    nng_msg *m = NULL;
    const gw_codec *codec = r->c->s->codec;
    if (reply->op == ENGINE_OP_FETCH && reply->n_tasks > 0 && codec == &gw_operate_codec) {
        pthread_mutex_lock(&r->c->mu);
        bool gone = r->c->closed || r->c->ending;
        pthread_mutex_unlock(&r->c->mu);
        if (gone)
            give_back(r, reply);
    }
    if (codec->encode(r->call, reply, &m) != BERTH_OK)
        m = NULL; /* closes the connection (req_answer) */
    engine_reply_free(reply);
    req_answer(r, m);
}

/* ---- requests (loop thread) ---- */

/* One frame: the backtrace, then the Request. False: a protocol error,
 * and the connection closes. As nng's REP does: a frame that ends before
 * its request id is garbage (closed); one whose backtrace runs past
 * SP_TTL words is dropped unanswered, and the connection goes on. */
static bool conn_request(sp_conn *c, const uint8_t *p, size_t len)
{
    const gw_codec *codec = c->s->codec;
    sp_req *r = calloc(1, sizeof(*r) + codec->call_size);
    if (r == NULL)
        return false; /* no memory to serve it: closing tells the client at once */
    /* The backtrace: 4-byte hops up to the request id, the one with its
     * high bit set. */
    for (;;) {
        if (r->bt_len == SP_BACKTRACE_MAX) {
            free(r);
            return true; /* past the TTL: dropped */
        }
        if (len - r->bt_len < 4) {
            free(r);
            return false;
        }
        memcpy(r->bt + r->bt_len, p + r->bt_len, 4);
        r->bt_len += 4;
        if (p[r->bt_len - 4] & 0x80)
            break;
    }
    r->call = r->mem;
    codec->init(r->call);
    r->c = c;
    atomic_fetch_add(&c->refs, 1);
    pthread_mutex_lock(&c->mu);
    c->inflight++;
    pthread_mutex_unlock(&c->mu);
    engine_status st;
    if (codec == &gw_operate_codec)
        ((gw_operate *)r->call)->peer_gone = c->hup;
    int rv = codec->begin(c->s->codec_ctx, r->call, c->s->e, c->owner, p + r->bt_len,
                          len - r->bt_len, c->s->max_msg, req_done, r, &st);
    if (rv == GW_OPERATE_DROPPED) {
        pthread_mutex_lock(&c->mu);
        c->inflight--;
        pthread_mutex_unlock(&c->mu);
        codec->fini(r->call);
        free(r);
        conn_unref(c);
    } else if (rv != BERTH_OK) {
        nng_msg *m = NULL;
        if (codec->encode_status(&st, &m) != BERTH_OK)
            m = NULL;
        req_answer(r, m);
    }
    return true;
}

/* Not read for the budget (sp.h) until the total is back under 3/4 of
 * it; loop thread. */
static void conn_starve(sp_conn *c)
{
    if (c->starved)
        return;
    pthread_mutex_lock(&c->mu);
    c->starved = true;
    conn_arm(c);
    pthread_mutex_unlock(&c->mu);
    c->s->n_starved++;
}

/* c's input buffer to cap bytes; false when the budget or the allocator
 * says no (with the budget, the connection is starved, not failed). */
static bool conn_in_grow(sp_conn *c, size_t cap, bool *starved)
{
    *starved = false;
    if (!conn_may_grow(c, cap - c->in_cap)) {
        conn_starve(c);
        *starved = true;
        return false;
    }
    uint8_t *in = realloc(c->in, cap);
    if (in == NULL)
        return false;
    conn_grew(c, cap - c->in_cap);
    c->in = in;
    c->in_cap = cap;
    return true;
}

/* Runs the complete frames read; stops while too many are in the engine
 * or too many answers wait for the peer. False: the connection must
 * close. */
static bool conn_frames(sp_conn *c)
{
    size_t off = 0;
    bool ok = true, checked = false;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        bool window = c->inflight >= SP_INFLIGHT_MAX;
        if (window && !c->paused) {
            c->paused = true;
            conn_arm(c);
        }
        bool full = window || c->full;
        pthread_mutex_unlock(&c->mu);
        size_t head = c->s->l.lead + 8u;
        if (full || c->in_len - off < head)
            break;
        if (c->s->l.lead > 0 && c->in[off] != 1) {
            ok = false; /* ipc://: not a message (nng's IPC mapping has no other type) */
            break;
        }
        uint64_t len = 0;
        for (size_t i = c->s->l.lead; i < head; i++)
            len = len << 8 | c->in[off + i];
        if (len > 2 * c->s->max_msg + SP_BACKTRACE_MAX) {
            ok = false; /* over the memory bound, as nng's receive limit */
            break;
        }
        if (c->in_len - off - head < len) {
            bool starved = false;
            if (head + len > c->in_cap && off == 0 && !conn_in_grow(c, head + len, &starved))
                ok = starved; /* starved: read on later, as room frees up */
            break;
        }
        /* Pipelined requests: has the peer hung up since epoll said it
         * had something? (A peer that writes many fetches and closes at
         * once is gone before most of them run.) Once per batch, so a
         * request at a time costs nothing more. */
        if (off > 0 && !checked && !c->hup) {
            struct pollfd pf = {.fd = c->fd, .events = POLLRDHUP};
            c->hup = poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP)) != 0;
            checked = true;
        }
        if (!conn_request(c, c->in + off + head, (size_t)len)) {
            ok = false;
            break;
        }
        off += head + len;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    /* A frame begun must be in whole within frame_ms of its first byte
     * (bytes our own pause holds back are not late): a peer cannot hold
     * a partial frame, and its buffer, open at its pace. */
    if (off > 0 || c->in_len == 0 || c->paused)
        gw_deadline_clear(&c->s->frames, &c->frame);
    if (ok && c->in_len > 0 && !c->paused && c->frame.at_ms == 0 && c->s->frame_ms > 0)
        gw_deadline_set(&c->s->frames, &c->frame, engine_monotonic_ms() + c->s->frame_ms);
    if (c->in_len == 0 && c->in_cap > SP_IN_KEEP) { /* after a big frame */
        free(c->in);
        c->in = NULL;
        conn_shrank(c, c->in_cap);
        c->in_cap = 0;
    }
    return ok;
}

/* What TLS queued is sent; c->mu held. False: the connection failed. */
static bool tls_sent(sp_conn *c)
{
    if (c->out_len == c->out_off)
        return true;
    if (!conn_flush(c))
        return false;
    conn_arm(c);
    return true;
}

/* Reads up to n bytes (through TLS on tls+tcp://): > 0 read, 0 nothing
 * now, -1 the peer hung up or the connection failed. Loop thread. */
static ssize_t conn_recv(sp_conn *c, void *buf, size_t n)
{
    if (c->tls == NULL) {
        for (;;) {
            ssize_t r = recv(c->fd, buf, n, 0);
            if (r > 0)
                return r;
            if (r < 0 && errno == EINTR)
                continue;
            return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
        }
    }
    pthread_mutex_lock(&c->mu);
    ssize_t r = gw_tls_read(c->tls, buf, n);
    if (!tls_sent(c)) /* (what reading made TLS say: an alert) */
        r = -1;
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* Decrypted bytes no read took: the socket says nothing of them. */
static bool tls_pending(sp_conn *c)
{
    if (c->tls == NULL)
        return false;
    pthread_mutex_lock(&c->mu);
    bool some = gw_tls_pending(c->tls) > 0;
    pthread_mutex_unlock(&c->mu);
    return some;
}

/* Loop thread: the connection is run again soon (resume_all). */
static void conn_again(sp_conn *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->closed)
        resume_later(c);
    pthread_mutex_unlock(&c->mu);
}

static bool conn_hello(sp_conn *c)
{
    while (c->hello_got < SP_HEADER_LEN) {
        ssize_t n = conn_recv(c, c->hello + c->hello_got, SP_HEADER_LEN - c->hello_got);
        if (n == 0)
            return true;
        if (n < 0)
            return false;
        c->hello_got += (size_t)n;
    }
    uint8_t want[SP_HEADER_LEN];
    sp_header(want, SP_PROTO_REQ0);
    return memcmp(c->hello, want, SP_HEADER_LEN) == 0;
}

/* Not read for now: paused, full or starved. Loop thread; `full` is
 * also written by the commit thread (conn_arm), hence the lock. */
static bool conn_held(sp_conn *c)
{
    pthread_mutex_lock(&c->mu);
    bool held = c->paused || c->full || c->starved;
    pthread_mutex_unlock(&c->mu);
    return held;
}

/* hup: the peer has hung up (EPOLLRDHUP). Its last requests are still
 * run (a completion it sent before it went counts) except fetches: their
 * answers cannot reach it, and they would claim tasks for nobody. */
static void conn_read(sp_conn *c, bool hup)
{
    c->hup = c->hup || hup;
    if (c->hello_got < SP_HEADER_LEN) {
        if (!conn_hello(c)) {
            conn_close(c);
            return;
        }
        if (c->hello_got < SP_HEADER_LEN)
            return;
        gw_deadline_clear(&c->s->hello, &c->hello_by);
    }
    uint64_t now = engine_monotonic_ms();
    if (c->s->idle_ms > 0)
        gw_deadline_set(&c->s->idle, &c->idle, now + c->s->idle_ms);
    /* A bounded number of reads: epoll (level-triggered) brings the
     * connection back, after the others. */
    for (int reads = 0; reads < 16; reads++) {
        if (c->in_len == c->in_cap) {
            bool starved;
            if (!conn_in_grow(c, c->in_cap ? c->in_cap * 2 : 16384, &starved)) {
                if (!starved)
                    conn_close(c);
                return;
            }
        }
        size_t want = c->in_cap - c->in_len;
        ssize_t n = conn_recv(c, c->in + c->in_len, want);
        if (n == 0)
            break;
        if (n < 0) {
            conn_close(c);
            return;
        }
        c->in_len += (size_t)n;
        if (!conn_frames(c)) {
            conn_close(c);
            return;
        }
        if (conn_held(c))
            return;
        if ((size_t)n < want && c->tls == NULL)
            break; /* drained for now: no recv just to see EAGAIN */
    }
}

static bool conn_reading(sp_conn *c)
{
    return c->fd >= 0 && !conn_held(c);
}

static void conn_readable(sp_conn *c, bool hup)
{
    conn_read(c, hup);
    /* What TLS decrypted past what was read waits for no event: the
     * connection is run again after the others. (A connection not read
     * now is run again when it is: resume_all, budget_check,
     * conn_writable.) */
    if (c->tls != NULL && conn_reading(c) && tls_pending(c))
        conn_again(c);
}

static void conn_writable(sp_conn *c)
{
    pthread_mutex_lock(&c->mu);
    bool was_full = c->full;
    bool ok = conn_flush(c);
    if (ok)
        conn_arm(c);
    bool drained = was_full && !c->full;
    pthread_mutex_unlock(&c->mu);
    /* Its peer read: the frames buffered meanwhile run now. */
    if (!ok || (drained && !conn_frames(c)))
        conn_close(c);
    else if (drained && c->tls != NULL)
        conn_again(c); /* and what TLS holds decrypted */
}

/* Under 3/4 of the budget again: the starved connections are read again
 * (epoll brings them back), and after a surge the memory it took goes
 * back to the system. */
static void budget_check(gw_sp *s)
{
    if (!gw_budget_settle(&s->budget))
        return;
    for (sp_conn *c = s->conns; c != NULL && s->n_starved > 0; c = c->next) {
        if (!c->starved)
            continue;
        pthread_mutex_lock(&c->mu);
        c->starved = false;
        conn_arm(c);
        if (c->tls != NULL)
            resume_later(c); /* what TLS holds decrypted is read too */
        pthread_mutex_unlock(&c->mu);
        s->n_starved--;
    }
}

static void reap(gw_sp *s)
{
    while (s->dead != NULL) {
        sp_conn *c = s->dead;
        s->dead = c->next;
        conn_unref(c);
    }
}

/* Loop thread: an accepted connection, not served: let go. */
static void conn_drop(gw_sp *s, sp_conn *c)
{
    s->n_conns--;
    atomic_fetch_sub(&s->open, 1);
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    close(c->fd);
    c->fd = -1;
    pthread_mutex_unlock(&c->mu);
    conn_unref(c);
}

/* Loop thread: c is served from now on; its SP header is due within
 * SP_HELLO_MS (on tls+tcp://, of the end of its handshake, which had as
 * long). */
static void conn_adopt(gw_sp *s, sp_conn *c)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (epoll_ctl(s->efd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        conn_drop(s, c);
        return;
    }
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    gw_deadline_set(&s->hello, &c->hello_by, engine_monotonic_ms() + SP_HELLO_MS);
    pthread_mutex_lock(&c->mu);
    if (c->out_len > c->out_off)
        conn_arm(c); /* (what its handshake left to send) */
    pthread_mutex_unlock(&c->mu);
}

/* ---- TLS handshakes (tls+tcp://: handshake.h) ---- */

/* Handshake thread (c->mu held): what TLS queued is sent. */
static bool hs_flush(void *conn, bool *more)
{
    sp_conn *c = conn;
    bool ok = conn_flush(c);
    *more = c->out_len > c->out_off;
    return ok;
}

/* Handshake thread (c->mu held): the handshake is done; our SP header,
 * under TLS. */
static bool hs_up(void *conn)
{
    sp_conn *c = conn;
    uint8_t hello[SP_HEADER_LEN];
    sp_header(hello, SP_PROTO_REP0);
    struct iovec iov = {hello, sizeof(hello)};
    return gw_tls_writev(c->tls, &iov, 1);
}

/* Handshake thread: the loop takes what is handed back (hs_adopt). */
static void hs_finished(void *arg)
{
    gw_sp *s = arg;
    gw_wakeup_ring(s->wake);
}

/* Loop thread: the connections whose handshake ended are served, or let
 * go. */
static void hs_adopt(gw_sp *s)
{
    if (s->hs == NULL)
        return;
    gw_hs_entry *list = gw_handshake_take(s->hs);
    while (list != NULL) {
        sp_conn *c = list->conn;
        list = list->next;
        if (c->hs.failed)
            conn_drop(s, c);
        else
            conn_adopt(s, c);
    }
}

/* Out of descriptors: the spare one is let go to accept the waiting peer
 * and close it at once, so that it hears "no" now rather than time out in
 * the backlog, and the loop never sleeps on it. */
static bool accept_and_refuse(gw_sp *s)
{
    if (s->spare < 0)
        return false;
    close(s->spare);
    int fd = accept(s->l.fd, NULL, NULL);
    if (fd >= 0)
        close(fd);
    s->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0;
}

/* Loop thread: a connection accepted on fd is served (its handshake
 * first on tls+tcp://), or let go. */
static void conn_accepted(gw_sp *s, int fd)
{
    int one = 1;
    if (s->l.lead == 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    sp_conn *c = calloc(1, sizeof(*c));
    uint8_t hello[SP_HEADER_LEN];
    sp_header(hello, SP_PROTO_REP0);
    /* (tls+tcp://: the header goes once the handshake is done) */
    if (c == NULL ||
        (s->l.tls != NULL ? (c->tls = gw_tls_conn_alloc(s->l.tls, fd, tls_out, c)) == NULL
                          : send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != sizeof(hello))) {
        free(c);
        close(fd);
        return;
    }
    c->s = s;
    c->fd = fd;
    c->owner = GW_OWNER_SP | ++s->owners;
    atomic_init(&c->refs, 1);
    atomic_init(&c->held, 0);
    pthread_mutex_init(&c->mu, NULL);
    c->hello_by.owner = c->frame.owner = c->idle.owner = c;
    s->n_conns++;
    atomic_fetch_add(&s->open, 1);
    if (s->hs == NULL) {
        conn_adopt(s, c);
        return;
    }
    /* The loop has it back once its handshake is done (hs_adopt). */
    c->hs = (gw_hs_entry){.conn = c, .fd = fd, .tls = c->tls, .mu = &c->mu};
    c->hs.due_ms = engine_monotonic_ms() + SP_HELLO_MS;
    gw_handshake_give(s->hs, &c->hs);
}

static void accept_all(gw_sp *s)
{
    for (;;) {
        int fd = accept(s->l.fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue; /* that peer is gone; others may wait */
            if ((errno == EMFILE || errno == ENFILE) && accept_and_refuse(s))
                continue;
            if (errno == ENOMEM || errno == ENOBUFS) {
                /* The kernel is short of memory: pause rather than spin. */
                struct timespec pause = {0, 10 * 1000000L};
                nanosleep(&pause, NULL);
            }
            return;
        }
        if (s->n_conns >= s->max_conns) {
            close(fd); /* --max-connections: the ones already open go on */
            continue;
        }
        conn_accepted(s, fd);
    }
}

/* Closes the connections whose header is late, whose frame is late, or
 * that were read last idle_ms ago with nothing in the engine (a long poll
 * in flight is not idleness); returns the epoll timeout until the next
 * deadline (-1: none). */
static int deadlines_expire(gw_sp *s)
{
    uint64_t now = engine_monotonic_ms();
    while (s->hello.head != NULL && s->hello.head->at_ms <= now)
        conn_close(s->hello.head->owner);
    while (s->frames.head != NULL && s->frames.head->at_ms <= now)
        conn_close(s->frames.head->owner);
    for (uint32_t n = s->n_conns; n > 0 && s->idle.head != NULL && s->idle.head->at_ms <= now;
         n--) {
        sp_conn *c = s->idle.head->owner;
        pthread_mutex_lock(&c->mu);
        bool busy = c->inflight > 0 || c->out_len > c->out_off;
        pthread_mutex_unlock(&c->mu);
        if (busy)
            gw_deadline_set(&s->idle, &c->idle, now + s->idle_ms);
        else
            conn_close(c);
    }
    return gw_wait_min(
        gw_wait_min(gw_deadline_wait(&s->hello, now), gw_deadline_wait(&s->frames, now)),
        gw_deadline_wait(&s->idle, now));
}

/* Connections unpaused by their answers: run their buffered frames. */
static void resume_all(gw_sp *s)
{
    pthread_mutex_lock(&s->mu);
    sp_conn *list = s->resume;
    s->resume = NULL;
    pthread_mutex_unlock(&s->mu);
    while (list != NULL) {
        sp_conn *c = list;
        list = c->resume_next;
        pthread_mutex_lock(&c->mu);
        c->resume_listed = false;
        bool closed = c->closed;
        if (c->inflight <= SP_INFLIGHT_MAX / 2)
            c->paused = false;
        if (!closed)
            conn_arm(c);
        pthread_mutex_unlock(&c->mu);
        if (!closed && !conn_frames(c))
            conn_close(c);
        else if (!closed && conn_reading(c) && tls_pending(c))
            conn_readable(c, false);
        conn_unref(c);
    }
}

static bool all_flushed(gw_sp *s)
{
    for (sp_conn *c = s->conns; c != NULL; c = c->next) {
        pthread_mutex_lock(&c->mu);
        bool pending = c->out_len > c->out_off;
        pthread_mutex_unlock(&c->mu);
        if (pending)
            return false;
    }
    return true;
}

static void *loop_main(void *arg)
{
    gw_sp *s = arg;
    struct epoll_event evs[64];
    prctl(PR_SET_NAME, "berth-operate", 0, 0, 0);
    struct timespec deadline = {0, 0};
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool closing = s->closing;
        pthread_mutex_unlock(&s->mu);
        if (closing) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (deadline.tv_sec == 0) {
                deadline = now;
                deadline.tv_sec += 2;
                epoll_ctl(s->efd, EPOLL_CTL_DEL, s->l.fd, NULL);
            }
            if (all_flushed(s) || now.tv_sec > deadline.tv_sec ||
                (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec))
                break;
        }
        int wait_ms = deadlines_expire(s);
        reap(s);
        budget_check(s);
        if (closing)
            wait_ms = 10;
        int n = epoll_wait(s->efd, evs, 64, wait_ms);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &s->l) {
                accept_all(s);
            } else if (p == &s->wake) {
                gw_wakeup_drain(s->wake);
                hs_adopt(s);
                resume_all(s);
            } else {
                sp_conn *c = p;
                if (c->fd < 0)
                    continue; /* closed earlier in this batch */
                if (evs[i].events & (EPOLLERR | EPOLLHUP) && !(evs[i].events & EPOLLIN)) {
                    conn_close(c);
                    continue;
                }
                if (evs[i].events & EPOLLRDHUP && !(evs[i].events & EPOLLIN)) {
                    /* The peer is gone while it is not read (paused): as
                     * nng, its pipe ends; answers in the engine are
                     * dropped when they come. (A read connection sees the
                     * end after its last bytes, below.) */
                    conn_close(c);
                    continue;
                }
                if (evs[i].events & EPOLLOUT)
                    conn_writable(c);
                if (c->fd >= 0 && evs[i].events & EPOLLIN)
                    conn_readable(c, evs[i].events & EPOLLRDHUP);
            }
        }
        reap(s);
    }
    while (s->conns != NULL)
        conn_close(s->conns);
    reap(s);
    resume_all(s); /* drops the resume list's references (all closed now) */
    return NULL;
}

/* ---- open, start, stop, close ---- */

/* The loop's epoll: the listener and the eventfd in it. */
static int loop_open(gw_sp *s, char *err, size_t errlen)
{
    struct epoll_event l = {.events = EPOLLIN, .data.ptr = &s->l};
    if (gw_wakeup_open(&s->efd, &s->wake) != 0 ||
        epoll_ctl(s->efd, EPOLL_CTL_ADD, s->l.fd, &l) != 0) {
        snprintf(err, errlen, "cannot open the operate server: %s", strerror(errno));
        return BERTH_EIO;
    }
    return BERTH_OK;
}

int gw_sp_open(engine *e, const char *url, const gw_sp_limits *lim, gw_sp **out, char *err,
               size_t errlen)
{
    *out = NULL;
    gw_sp *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return BERTH_ENOMEM;
    s->e = e;
    s->codec = lim->codec ? lim->codec : &gw_operate_codec;
    s->codec_ctx = lim->codec_ctx;
    s->max_conns = lim->max_connections;
    s->idle_ms = lim->idle_timeout_ms;
    s->frame_ms = lim->frame_timeout_ms;
    gw_budget_init(&s->budget, lim->buffers_max_bytes);
    s->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    /* (frames up to twice this, plus a backtrace, must fit a size_t) */
    s->max_msg = lim->max_message_bytes < SIZE_MAX / 4 ? lim->max_message_bytes : SIZE_MAX / 4;
    s->l.fd = s->efd = s->wake = -1;
    atomic_init(&s->open, 0);
    pthread_mutex_init(&s->mu, NULL);
    gw_handshake_ops ops = {.flush = hs_flush, .up = hs_up, .finished = hs_finished, .arg = s};
    int rv = gw_listener_open(&s->l, url, lim->tls, err, errlen);
    if (rv == BERTH_OK)
        rv = loop_open(s, err, errlen);
    if (rv == BERTH_OK && s->l.tls != NULL)
        rv = gw_handshake_open(&ops, &s->hs, err, errlen);
    if (rv != BERTH_OK) {
        gw_sp_close(s);
        return rv;
    }
    *out = s;
    return BERTH_OK;
}

int gw_sp_start(gw_sp *s, char *err, size_t errlen)
{
    if (s->hs != NULL && gw_handshake_start(s->hs, err, errlen) != BERTH_OK)
        return BERTH_EIO;
    int rv = pthread_create(&s->thread, NULL, loop_main, s);
    if (rv != 0) {
        snprintf(err, errlen, "cannot start the operate server: %s", strerror(rv));
        gw_handshake_stop(s->hs);
        return BERTH_EIO;
    }
    s->started = true;
    return BERTH_OK;
}

unsigned gw_sp_connections(const gw_sp *s)
{
    return atomic_load(&s->open);
}

const char *gw_sp_url(const gw_sp *s)
{
    return s->l.url;
}

void gw_sp_stop(gw_sp *s)
{
    if (s == NULL || s->stopped)
        return;
    s->stopped = true;
    pthread_mutex_lock(&s->mu);
    s->closing = true;
    pthread_mutex_unlock(&s->mu);
    /* The handshakes in flight fail, and go to the loop, which lets them go. */
    gw_handshake_stop(s->hs);
    if (s->started) {
        gw_wakeup_ring(s->wake);
        pthread_join(s->thread, NULL);
    }
    /* Handed back after the loop's last look (or with no loop): let go. */
    for (gw_hs_entry *list = s->hs ? gw_handshake_take(s->hs) : NULL; list != NULL;) {
        sp_conn *c = list->conn;
        list = list->next;
        close(c->fd);
        conn_unref(c);
    }
}

void gw_sp_close(gw_sp *s)
{
    if (s == NULL)
        return;
    gw_sp_stop(s);
    gw_handshake_close(s->hs);
    if (s->spare >= 0)
        close(s->spare);
    gw_listener_close(&s->l);
    gw_wakeup_close(&s->efd, &s->wake);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
