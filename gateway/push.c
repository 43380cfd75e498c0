/*
 * push.c — see push.h.
 *
 * One thread ("berth-push") owns every receiver's connection and every
 * delivery in flight; gw_push_send() only encodes the Delivery and hands
 * it over (a list under `in_mu`, an eventfd), so the commit thread that
 * calls it never waits on the network or on a lock held across I/O.
 *
 * A RECEIVER is one connection, dialled when a delivery first needs it
 * and again after it fails (100 ms, doubling to 5 s, as nng's dialer):
 * connect, the TLS handshake on nng+req+tls://, the SP headers (REQ
 * each way), then frames. Each delivery is one request with an id of its
 * own, pipelined on the connection. A FLIGHT is one delivery from its
 * hand-over to its end, which is exactly one ENGINE_OP_PUSH_ACK: the
 * receiver's answer, or a RETRY saying why (no answer within the timeout,
 * the connection failed with it unanswered, the receiver cannot be
 * reached or its answer cannot be read). The flight, with its decoded
 * answer, belongs to that engine request until the engine's done() frees
 * it. An answer whose id is no flight's (it came after its timeout) is
 * dropped, as nng's REQ socket drops it.
 *
 * (This replaced nng's REQ socket, whose TCP and TLS transports in
 * 1.5.2 can lose a receive when a receiver resets with answers in flight,
 * after which nng never frees a closed connection nor dials that receiver
 * again: BENCHMARKS.md "Hostile clients".)
 */
#define _GNU_SOURCE
#include "gateway/push.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "berth/v1/push.pb-c.h"
#include "gateway/tls.h"
#include "gateway/wakeup.h"
#include "proto/sp_wire.h"
#include "store/err.h"

#define GW_PUSH_SYSTEM_CA "/etc/ssl/certs/ca-certificates.crt"
/* A delivery's headers: a submit's (64 at most), and a call's two. */
#define GW_PUSH_HEADERS_MAX 80
#define REDIAL_FIRST_MS     100
#define REDIAL_MAX_MS       5000
#define DIAL_MS             10000       /* connect, TLS handshake and SP headers, at most */
#define OUT_MIN             (64u << 20) /* a receiver's unsent bytes: past the larger of this */
#define OUT_MESSAGES        4           /* and this many largest messages, it is dropped */

typedef enum { R_DOWN, R_CONNECTING, R_HANDSHAKE, R_HELLO, R_READY } rstate;

typedef struct flight {
    struct flight *next, *prev;   /* in its receiver's queue or sent list */
    struct flight *tnext, *tprev; /* in p->timeouts (every flight, by deadline) */
    struct receiver *r;
    gw_push *p;
    engine *e;
    uint8_t *frame; /* SP frame: length (after ipc's type byte), id, Delivery */
    size_t frame_len;
    uint32_t req_id; /* 0 until sent */
    uint64_t deadline_ms;
    char id[ENGINE_ID_STR];
    char *transport; /* until it reaches its receiver */
    Berth__V1__DeliveryAck *ack;
    engine_header *hs;
    engine_result res;
    engine_request req;
    char why[256];
} flight;

typedef struct flist {
    flight *head, *tail;
} flist;

typedef struct receiver {
    gw_push *p;
    char *transport; /* as the channel declares it */
    char why[200];   /* why it cannot be dialled at all ("": it can) */
    bool ipc, tls;
    char host[256], port[16], path[108];
    rstate state;
    int fd;
    gw_tls_conn *tc;
    uint64_t redial_at_ms; /* R_DOWN: not before this */
    uint64_t ready_by_ms;  /* dialled: its SP header due by then (DIAL_MS) */
    uint64_t backoff_ms;
    uint8_t hello[SP_HEADER_LEN];
    size_t hello_got;
    uint8_t *out; /* bytes for the socket */
    size_t out_len, out_off, out_cap;
    uint8_t *in; /* a frame being read */
    size_t in_len, in_cap;
    uint32_t next_id;
    bool again;  /* TLS holds answers decrypted: read on without an event */
    flist queue; /* waiting for the connection */
    flist sent;  /* sent, unanswered */
} receiver;

struct gw_push {
    gw_push_options o;
    pthread_t thread;
    bool started;
    int efd, wake;
    gw_tls *tls;           /* the client side, made on the first nng+req+tls:// receiver */
    pthread_mutex_t in_mu; /* guards incoming and stopping */
    flight *incoming;
    bool stopping;
    /* the thread's */
    receiver *rx;
    size_t n_rx;
    bool again;                       /* some receiver's `again` is set */
    flight *timeouts, *timeouts_tail; /* every flight not yet ended, oldest first */
};

/* ---- ends ---- */

static void flight_free(flight *f)
{
    if (f->ack != NULL)
        berth__v1__delivery_ack__free_unpacked(f->ack, NULL);
    free(f->frame);
    free(f->transport);
    free(f->hs);
    free(f);
}

static void flight_done(void *arg, engine_reply *reply)
{
    engine_reply_free(reply);
    flight_free(arg);
}

static void flist_add(flist *l, flight *f)
{
    f->next = NULL;
    f->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = f;
    else
        l->head = f;
    l->tail = f;
}

static void flist_remove(flist *l, flight *f)
{
    if (f->prev != NULL)
        f->prev->next = f->next;
    else
        l->head = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    else
        l->tail = f->prev;
    f->next = f->prev = NULL;
}

/* The flight's end (thread): out of every list here, then its answer to
 * the engine, which frees it (or, stopping, nothing: the engine sends it
 * again at its next start). */
static void finish(flight *f)
{
    gw_push *p = f->p;
    if (f->r != NULL)
        flist_remove(f->req_id != 0 ? &f->r->sent : &f->r->queue, f);
    if (f->tprev != NULL)
        f->tprev->tnext = f->tnext;
    else
        p->timeouts = f->tnext;
    if (f->tnext != NULL)
        f->tnext->tprev = f->tprev;
    else
        p->timeouts_tail = f->tprev;
    pthread_mutex_lock(&p->in_mu);
    bool stopping = p->stopping;
    pthread_mutex_unlock(&p->in_mu);
    if (stopping || engine_exec(f->e, &f->req, flight_done, f) != BERTH_OK)
        flight_free(f);
}

static void retry(flight *f, const char *fmt, const char *what)
{
    snprintf(f->why, sizeof(f->why), fmt, what);
    f->req.u.push_ack.outcome = ENGINE_PUSH_RETRY;
    f->req.u.push_ack.error = (engine_error){.code = "PUSH_FAILED", .message = f->why};
    finish(f);
}

/* The receiver's answer, as the engine takes it. */
static void answered(flight *f, const uint8_t *body, size_t len)
{
    f->ack = berth__v1__delivery_ack__unpack(NULL, len, body);
    if (f->ack == NULL) {
        retry(f, "%s", "the receiver's answer is not a berth.v1.DeliveryAck");
        return;
    }
    const Berth__V1__DeliveryAck *a = f->ack;
    struct engine_push_ack *out = &f->req.u.push_ack;
    switch (a->has_outcome ? a->outcome : 0) {
    case BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED:
        out->outcome = ENGINE_PUSH_DELIVERED;
        break;
    case BERTH__V1__DELIVERY_ACK__OUTCOME__REJECT:
        out->outcome = ENGINE_PUSH_REJECT;
        break;
    case BERTH__V1__DELIVERY_ACK__OUTCOME__RETRY:
        out->outcome = ENGINE_PUSH_RETRY;
        break;
    default:
        retry(f, "%s", "the receiver's answer has no outcome");
        return;
    }
    if (a->error != NULL)
        out->error = (engine_error){a->error->code, a->error->message, a->error->details};
    if (out->outcome == ENGINE_PUSH_DELIVERED && a->result != NULL) {
        const Berth__V1__Result *r = a->result;
        if (r->n_headers > 0 && (f->hs = calloc(r->n_headers, sizeof(*f->hs))) == NULL) {
            retry(f, "%s", "out of memory reading the receiver's answer");
            return;
        }
        for (size_t i = 0; i < r->n_headers; i++)
            f->hs[i] = (engine_header){r->headers[i]->key ? r->headers[i]->key : "",
                                       r->headers[i]->value ? r->headers[i]->value : ""};
        f->res = (engine_result){
            .payload = r->has_payload ? r->payload.data : (const uint8_t *)"",
            .payload_len = r->has_payload ? r->payload.len : 0,
            .content_type = r->content_type,
            .headers = f->hs,
            .n_headers = r->n_headers,
        };
        out->result = &f->res;
    }
    finish(f);
}

/* ---- receivers ---- */

/* A push transport's address: nng+req://HOST:PORT (tcp),
 * nng+req+tls://HOST:PORT, nng+req+ipc:///PATH. False: r->why says. */
static bool parse_transport(receiver *r)
{
    const char *t = r->transport, *rest;
    if (strncmp(t, "nng+req+ipc://", 14) == 0) {
        rest = t + 14;
        if (rest[0] == '\0' || strlen(rest) >= sizeof(r->path))
            goto bad;
        r->ipc = true;
        snprintf(r->path, sizeof(r->path), "%s", rest);
        return true;
    }
    if (strncmp(t, "nng+req+tls://", 14) == 0) {
        r->tls = true;
        rest = t + 14;
    } else if (strncmp(t, "nng+req://", 10) == 0) {
        rest = t + 10;
    } else {
        goto bad;
    }
    if (!sp_host_port(rest, r->host, sizeof(r->host), r->port, sizeof(r->port)) ||
        r->host[0] == '\0' || r->port[0] == '\0')
        goto bad;
    return true;
bad:
    snprintf(r->why, sizeof(r->why),
             "cannot dial %.100s: not nng+req://HOST:PORT, nng+req+tls://HOST:PORT or "
             "nng+req+ipc:///PATH",
             t);
    return false;
}

static uint8_t lead(const receiver *r)
{
    return r->ipc ? 1 : 0; /* nng's IPC mapping: a type byte before each length */
}

/* n more bytes for the socket. False: no memory, or a receiver that
 * reads this far behind (its connection is dropped). */
static bool out_add(receiver *r, const uint8_t *b, size_t n)
{
    if (r->out_off > 0) { /* drop what was sent */
        memmove(r->out, r->out + r->out_off, r->out_len - r->out_off);
        r->out_len -= r->out_off;
        r->out_off = 0;
    }
    size_t most = OUT_MESSAGES * r->p->o.max_message_bytes;
    if (r->out_len + n > (most > OUT_MIN ? most : OUT_MIN))
        return false;
    if (r->out_len + n > r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap : 4096;
        while (cap < r->out_len + n)
            cap *= 2;
        uint8_t *o = realloc(r->out, cap);
        if (o == NULL)
            return false;
        r->out = o;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, b, n);
    r->out_len += n;
    return true;
}

static bool tls_out(void *arg, const uint8_t *b, size_t n)
{
    return out_add(arg, b, n);
}

/* Bytes for the peer: through TLS on nng+req+tls://. */
static bool put(receiver *r, const uint8_t *b, size_t n)
{
    if (r->tc == NULL)
        return out_add(r, b, n);
    struct iovec iov = {(void *)b, n};
    return gw_tls_writev(r->tc, &iov, 1);
}

/* Up to n bytes from the peer: > 0, 0 nothing now, -1 gone or failed. */
static ssize_t take(receiver *r, void *b, size_t n)
{
    if (r->tc != NULL)
        return gw_tls_read(r->tc, b, n);
    for (;;) {
        ssize_t got = recv(r->fd, b, n, 0);
        if (got > 0)
            return got;
        if (got < 0 && errno == EINTR)
            continue;
        return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    }
}

static void arm(receiver *r)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = r};
    if (r->state == R_CONNECTING || r->out_len > r->out_off)
        ev.events |= EPOLLOUT;
    epoll_ctl(r->p->efd, EPOLL_CTL_MOD, r->fd, &ev);
}

/* Sends what is queued. False: the connection failed. */
static bool flush(receiver *r)
{
    while (r->out_off < r->out_len) {
        ssize_t n =
            send(r->fd, r->out + r->out_off, r->out_len - r->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0)
            return false;
        r->out_off += (size_t)n;
    }
    arm(r);
    return true;
}

/* The next dial of r, later each time it fails (REDIAL_MAX_MS at most). */
static void back_off(receiver *r, uint64_t now)
{
    r->backoff_ms = r->backoff_ms ? r->backoff_ms * 2 : REDIAL_FIRST_MS;
    if (r->backoff_ms > REDIAL_MAX_MS)
        r->backoff_ms = REDIAL_MAX_MS;
    r->redial_at_ms = now + r->backoff_ms;
}

/* The connection failed or ended: its unanswered deliveries are retried
 * (they may have been acted on: the key says so to the receiver). The
 * queued ones wait for the next connection, dialled after a backoff,
 * unless this one never got as far as the SP headers: then the receiver
 * cannot be reached now, and they are retried too, saying why. */
static void drop(receiver *r, const char *why)
{
    gw_push *p = r->p;
    bool unreached = r->state != R_READY && r->state != R_DOWN;
    if (r->fd >= 0) {
        epoll_ctl(p->efd, EPOLL_CTL_DEL, r->fd, NULL);
        close(r->fd);
    }
    r->fd = -1;
    gw_tls_conn_free(r->tc);
    r->tc = NULL;
    r->state = R_DOWN;
    r->out_len = r->out_off = r->in_len = r->hello_got = 0;
    free(r->out);
    free(r->in);
    r->out = r->in = NULL;
    r->out_cap = r->in_cap = 0;
    back_off(r, engine_monotonic_ms());
    while (r->sent.head != NULL)
        retry(r->sent.head, "the push receiver's connection failed: %s", why);
    char dial_why[220];
    snprintf(dial_why, sizeof(dial_why), "cannot dial %.100s: %s", r->transport, why);
    while (unreached && r->queue.head != NULL)
        retry(r->queue.head, "%s", dial_why);
}

/* Sends the queued deliveries on a ready connection. */
static bool send_queued(receiver *r)
{
    while (r->queue.head != NULL) {
        flight *f = r->queue.head;
        flist_remove(&r->queue, f);
        r->next_id = (r->next_id + 1) & ~SP_REQUEST_ID_HI;
        if (r->next_id == 0)
            r->next_id = 1;
        f->req_id = r->next_id;
        size_t at = lead(r) + SP_LENGTH_LEN;
        uint32_t id = f->req_id | SP_REQUEST_ID_HI;
        for (int i = 0; i < 4; i++)
            f->frame[at + (size_t)i] = (uint8_t)(id >> (24 - 8 * i));
        flist_add(&r->sent, f);
        if (!put(r, f->frame, f->frame_len))
            return false;
    }
    return true;
}

/* The client's TLS, read at the first TLS dial (and again at the next
 * while it cannot be read: a CA file put in place later is taken). */
static bool tls_of(gw_push *p, char *why, size_t len)
{
    if (p->tls != NULL)
        return true;
    const char *ca = p->o.tls_ca_file ? p->o.tls_ca_file : GW_PUSH_SYSTEM_CA;
    if (gw_tls_client_open(ca, &p->tls, why, len) != BERTH_OK && why[0] == '\0')
        snprintf(why, len, "cannot read %s", ca);
    return p->tls != NULL;
}

/* Starts a connection (non-blocking). False: r->why says why not now. */
static bool dial(receiver *r, char *why, size_t len)
{
    gw_push *p = r->p;
    int fd = -1;
    if (r->ipc) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, r->path, strlen(r->path));
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
            errno != EINPROGRESS && errno != EAGAIN) {
            snprintf(why, len, "cannot dial ipc://%s: %s", r->path, strerror(errno));
            close(fd);
            return false;
        }
    } else {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
        struct addrinfo *ai = NULL;
        int g = getaddrinfo(r->host, r->port, &hints, &ai);
        if (g != 0) {
            snprintf(why, len, "cannot dial %.120s: %s", r->host, gai_strerror(g));
            return false;
        }
        int saved = 0;
        for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
            fd =
                socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
            if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
                saved = errno;
                close(fd);
                fd = -1;
            }
        }
        freeaddrinfo(ai);
        if (fd < 0) {
            snprintf(why, len, "cannot dial %.120s:%s: %s", r->host, r->port,
                     strerror(saved ? saved : EINVAL));
            return false;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (fd < 0) {
        snprintf(why, len, "cannot open a socket: %s", strerror(errno));
        return false;
    }
    if (r->tls && (!tls_of(p, why, len) ||
                   (r->tc = gw_tls_conn_client_alloc(p->tls, fd, r->host, tls_out, r)) == NULL)) {
        if (why[0] == '\0')
            snprintf(why, len, "out of memory");
        close(fd);
        return false;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = r};
    if (epoll_ctl(p->efd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        snprintf(why, len, "cannot watch a socket: %s", strerror(errno));
        gw_tls_conn_free(r->tc);
        r->tc = NULL;
        close(fd);
        return false;
    }
    r->fd = fd;
    r->state = R_CONNECTING;
    r->ready_by_ms = engine_monotonic_ms() + DIAL_MS;
    return true;
}

/* Dials r for its queued deliveries; one that cannot start fails them,
 * saying why, and the next waits a backoff. */
static void redial(receiver *r, uint64_t now)
{
    char why[200] = "";
    if (dial(r, why, sizeof(why)))
        return;
    back_off(r, now);
    while (r->queue.head != NULL)
        retry(r->queue.head, "%s", why);
}

/* Our SP header goes out (after the handshake on TLS). */
static bool hello(receiver *r)
{
    uint8_t h[SP_HEADER_LEN];
    sp_header(h, SP_PROTO_REQ0);
    r->state = R_HELLO;
    return put(r, h, sizeof(h)) && flush(r);
}

/* Reads answers; false: the connection must go (why set). */
static bool read_answers(receiver *r, const char **why)
{
    gw_push *p = r->p;
    size_t head = lead(r) + SP_LENGTH_LEN;
    for (int reads = 0; reads < 64; reads++) {
        if (r->state == R_HELLO) {
            ssize_t n = take(r, r->hello + r->hello_got, SP_HEADER_LEN - r->hello_got);
            if (n <= 0) {
                *why = "it hung up";
                return n == 0;
            }
            r->hello_got += (size_t)n;
            if (r->hello_got < SP_HEADER_LEN)
                continue;
            uint8_t want[SP_HEADER_LEN];
            sp_header(want, SP_PROTO_REP0);
            if (memcmp(r->hello, want, SP_HEADER_LEN) != 0) {
                *why = "it is not an nng REP socket";
                return false;
            }
            r->state = R_READY;
            r->backoff_ms = 0;
            if (!send_queued(r) || !flush(r)) {
                *why = "cannot send to it";
                return false;
            }
            continue;
        }
        /* The frame's head, then its whole length. */
        size_t want = head;
        if (r->in_len >= head) {
            uint64_t len = 0;
            for (size_t i = lead(r); i < head; i++)
                len = len << 8 | r->in[i];
            if (len < 4 || len > p->o.max_message_bytes + 64) {
                *why = "its answer is over max-message-bytes or has no id";
                return false;
            }
            want = head + (size_t)len;
        }
        if (want > r->in_cap) {
            uint8_t *in = realloc(r->in, want);
            if (in == NULL) {
                *why = "out of memory";
                return false;
            }
            r->in = in;
            r->in_cap = want;
        }
        if (r->in_len < want) {
            ssize_t n = take(r, r->in + r->in_len, want - r->in_len);
            if (n < 0) {
                *why = "it hung up";
                return false;
            }
            if (n == 0)
                return true;
            r->in_len += (size_t)n;
            continue;
        }
        if (want == head)
            continue; /* (the length is in: read the rest) */
        if (lead(r) > 0 && r->in[0] != 1) {
            *why = "its frame is not a message";
            return false;
        }
        uint32_t id = (uint32_t)r->in[head] << 24 | (uint32_t)r->in[head + 1] << 16 |
                      (uint32_t)r->in[head + 2] << 8 | r->in[head + 3];
        if ((id & SP_REQUEST_ID_HI) == 0) {
            *why = "its answer has no request id";
            return false;
        }
        id &= ~SP_REQUEST_ID_HI;
        for (flight *f = r->sent.head; f != NULL; f = f->next)
            if (f->req_id == id) {
                answered(f, r->in + head + 4, want - head - 4);
                break;
            } /* none: an answer after its timeout, dropped */
        r->in_len = 0;
        if (r->in_cap > (64u << 10)) { /* after a big answer */
            free(r->in);
            r->in = NULL;
            r->in_cap = 0;
        }
    }
    /* Reads left: what TLS decrypted wakes no epoll. */
    if (r->tc != NULL && gw_tls_pending(r->tc) > 0)
        r->again = p->again = true;
    return true;
}

/* What the socket said, for r. */
static void on_event(receiver *r, uint32_t events)
{
    const char *why = "it hung up";
    if (r->state == R_CONNECTING) {
        int err = 0;
        socklen_t el = sizeof(err);
        if (getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            drop(r, strerror(err ? err : errno));
            return;
        }
        if (!(events & (EPOLLOUT | EPOLLIN)))
            return;
        r->state = r->tls ? R_HANDSHAKE : R_HELLO;
        if (!r->tls && !hello(r)) {
            drop(r, "cannot send to it");
            return;
        }
    }
    if (r->state == R_HANDSHAKE) {
        int h = gw_tls_handshake(r->tc);
        if (h < 0 || !flush(r)) {
            drop(r, "the TLS handshake failed (its certificate, or its name)");
            return;
        }
        if (h == 0)
            return;
        if (!hello(r)) {
            drop(r, "cannot send to it");
            return;
        }
    }
    if ((events & EPOLLOUT) && !flush(r)) {
        drop(r, "cannot send to it");
        return;
    }
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !read_answers(r, &why)) {
        drop(r, why);
        return;
    }
    if (r->state == R_READY && (!send_queued(r) || !flush(r)))
        drop(r, "cannot send to it");
}

/* The receiver of transport, made on first use. */
static receiver *receiver_of(gw_push *p, const char *transport)
{
    for (size_t i = 0; i < p->n_rx; i++)
        if (strcmp(p->rx[i].transport, transport) == 0)
            return &p->rx[i];
    if (p->n_rx == p->o.receivers_max)
        return NULL;
    receiver *r = &p->rx[p->n_rx];
    memset(r, 0, sizeof(*r));
    if ((r->transport = strdup(transport)) == NULL)
        return NULL;
    r->p = p;
    r->fd = -1;
    p->n_rx++;
    (void)parse_transport(r);
    return r;
}

/* ---- the thread ---- */

/* New flights to their receivers (or ended at once, saying why). */
static void take_incoming(gw_push *p, bool stopping)
{
    pthread_mutex_lock(&p->in_mu);
    flight *in = p->incoming;
    p->incoming = NULL;
    pthread_mutex_unlock(&p->in_mu);
    flight *list = NULL; /* oldest first */
    while (in != NULL) {
        flight *f = in;
        in = f->next;
        f->next = list;
        list = f;
    }
    while (list != NULL) {
        flight *f = list;
        list = f->next;
        f->next = NULL;
        f->tprev = p->timeouts_tail;
        if (p->timeouts_tail != NULL)
            p->timeouts_tail->tnext = f;
        else
            p->timeouts = f;
        p->timeouts_tail = f;
        receiver *r = receiver_of(p, f->transport);
        if (r == NULL) {
            char why[120];
            snprintf(why, sizeof(why), "more than %zu push receivers (or no memory)",
                     p->o.receivers_max);
            retry(f, "%s", why);
            continue;
        }
        if (r->why[0] != '\0') {
            retry(f, "%s", r->why);
            continue;
        }
        f->r = r;
        flist_add(&r->queue, f);
        uint64_t now = engine_monotonic_ms();
        if (r->state == R_DOWN && now >= r->redial_at_ms && !stopping)
            redial(r, now);
        else if (r->state == R_READY && (!send_queued(r) || !flush(r)))
            drop(r, "cannot send to it");
    }
}

/* Flights past their deadline end (all: every one). Returns the epoll
 * timeout until the next deadline or redial (-1: none). */
static int expire(gw_push *p, bool all)
{
    uint64_t now = engine_monotonic_ms();
    while (p->timeouts != NULL && (all || p->timeouts->deadline_ms <= now))
        retry(p->timeouts, "%s", all ? "berthd is stopping" : "no answer within push-timeout-ms");
    uint64_t next = p->timeouts != NULL ? p->timeouts->deadline_ms : UINT64_MAX;
    for (size_t i = 0; i < p->n_rx && !all; i++) {
        receiver *r = &p->rx[i];
        if (r->state != R_DOWN && r->state != R_READY) { /* dialled, not ready yet */
            if (now >= r->ready_by_ms)
                drop(r, "no SP header from it within 10 s");
            else if (r->ready_by_ms < next)
                next = r->ready_by_ms;
        }
        if (r->state != R_DOWN || r->queue.head == NULL)
            continue;
        if (now >= r->redial_at_ms)
            redial(r, now);
        else if (r->redial_at_ms < next)
            next = r->redial_at_ms;
    }
    if (next == UINT64_MAX)
        return -1;
    return next <= now ? 0 : next - now > 60000 ? 60000 : (int)(next - now) + 1;
}

static void *push_main(void *arg)
{
    gw_push *p = arg;
    prctl(PR_SET_NAME, "berth-push", 0, 0, 0);
    struct epoll_event evs[64];
    for (;;) {
        pthread_mutex_lock(&p->in_mu);
        bool stopping = p->stopping;
        pthread_mutex_unlock(&p->in_mu);
        take_incoming(p, stopping);
        int wait = expire(p, stopping);
        if (stopping)
            break;
        int n = epoll_wait(p->efd, evs, 64, p->again ? 0 : wait);
        if (p->again) {
            p->again = false;
            for (size_t i = 0; i < p->n_rx; i++)
                if (p->rx[i].again) {
                    p->rx[i].again = false;
                    if (p->rx[i].fd >= 0)
                        on_event(&p->rx[i], EPOLLIN);
                }
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &p->wake) {
                gw_wakeup_drain(p->wake);
            } else {
                receiver *r = evs[i].data.ptr;
                if (r->fd >= 0)
                    on_event(r, evs[i].events);
            }
        }
    }
    for (size_t i = 0; i < p->n_rx; i++)
        if (p->rx[i].fd >= 0)
            drop(&p->rx[i], "berthd is stopping");
    return NULL;
}

/* ---- the surface ---- */

int gw_push_open(const gw_push_options *o, gw_push **out, char *err, size_t errlen)
{
    *out = NULL;
    gw_push *p = calloc(1, sizeof(*p));
    if (p == NULL ||
        (p->rx = calloc(o->receivers_max ? o->receivers_max : 1, sizeof(receiver))) == NULL) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return BERTH_ENOMEM;
    }
    p->o = *o;
    pthread_mutex_init(&p->in_mu, NULL);
    if (gw_wakeup_open(&p->efd, &p->wake) != 0) {
        snprintf(err, errlen, "cannot open the push sender: %s", strerror(errno));
        gw_push_close(p);
        return BERTH_EIO;
    }
    *out = p;
    return BERTH_OK;
}

int gw_push_start(gw_push *p, char *err, size_t errlen)
{
    int rv = pthread_create(&p->thread, NULL, push_main, p);
    if (rv != 0) {
        snprintf(err, errlen, "cannot start the push sender: %s", strerror(rv));
        return BERTH_EIO;
    }
    p->started = true;
    return BERTH_OK;
}

/* The Delivery d, encoded into a frame for a receiver (its id filled in
 * when it is sent); NULL: no memory. */
static uint8_t *encode(const engine_push_delivery *d, bool ipc, size_t *len)
{
    Berth__V1__Delivery m = BERTH__V1__DELIVERY__INIT;
    Berth__V1__Delivery__HeadersEntry hv[GW_PUSH_HEADERS_MAX], *hp[GW_PUSH_HEADERS_MAX];
    size_t nh = d->n_headers < GW_PUSH_HEADERS_MAX ? d->n_headers : GW_PUSH_HEADERS_MAX;
    for (size_t i = 0; i < nh; i++) {
        berth__v1__delivery__headers_entry__init(&hv[i]);
        hv[i].key = (char *)d->headers[i].name;
        hv[i].value = (char *)d->headers[i].value;
        hp[i] = &hv[i];
    }
    m.id = (char *)d->id;
    m.topic = (char *)d->topic;
    m.has_payload = 1;
    m.payload.data = (uint8_t *)d->payload;
    m.payload.len = d->payload_len;
    m.n_headers = nh;
    m.headers = hp;
    m.content_type = (char *)d->content_type;
    if (d->instance_id[0] != '\0')
        m.instance_id = (char *)d->instance_id;
    m.has_attempt = 1;
    m.attempt = d->attempt;
    m.idempotency_key = (char *)d->id;
    m.has_created_at_ms = 1;
    m.created_at_ms = d->created_at_ms;
    size_t body = berth__v1__delivery__get_packed_size(&m);
    size_t head = (ipc ? 1u : 0u) + SP_LENGTH_LEN;
    uint8_t *frame = malloc(head + 4 + body);
    if (frame == NULL)
        return NULL;
    uint64_t n = 4 + body;
    frame[0] = 1; /* (ipc://: the message type) */
    for (size_t i = 0; i < SP_LENGTH_LEN; i++)
        frame[head - SP_LENGTH_LEN + i] = (uint8_t)(n >> (56 - 8 * i));
    berth__v1__delivery__pack(&m, frame + head + 4);
    *len = head + 4 + body;
    return frame;
}

int gw_push_send(void *ctx, engine *e, const engine_push_delivery *d)
{
    gw_push *p = ctx;
    flight *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return BERTH_ENOMEM;
    f->p = p;
    f->e = e;
    memcpy(f->id, d->id, ENGINE_ID_STR);
    f->req.op = ENGINE_OP_PUSH_ACK;
    f->req.u.push_ack.id = f->id;
    f->req.u.push_ack.flight = d->flight;
    f->deadline_ms = engine_monotonic_ms() + p->o.timeout_ms;
    f->frame = encode(d, strncmp(d->transport, "nng+req+ipc://", 14) == 0, &f->frame_len);
    f->transport = strdup(d->transport);
    if (f->frame == NULL || f->transport == NULL) {
        flight_free(f);
        return BERTH_ENOMEM;
    }
    pthread_mutex_lock(&p->in_mu);
    if (p->stopping) { /* the engine sends it again at its next start */
        pthread_mutex_unlock(&p->in_mu);
        flight_free(f);
        return BERTH_EIO;
    }
    f->next = p->incoming;
    p->incoming = f;
    pthread_mutex_unlock(&p->in_mu);
    gw_wakeup_ring(p->wake);
    return BERTH_OK;
}

void gw_push_stop(gw_push *p)
{
    if (p == NULL || !p->started)
        return;
    pthread_mutex_lock(&p->in_mu);
    p->stopping = true;
    pthread_mutex_unlock(&p->in_mu);
    gw_wakeup_ring(p->wake);
    pthread_join(p->thread, NULL); /* it ends every flight first */
    p->started = false;
}

void gw_push_close(gw_push *p)
{
    if (p == NULL)
        return;
    gw_push_stop(p);
    for (flight *f = p->incoming; f != NULL;) { /* (sent after the thread ended: none) */
        flight *next = f->next;
        flight_free(f);
        f = next;
    }
    for (size_t i = 0; i < p->n_rx; i++) {
        free(p->rx[i].transport);
        free(p->rx[i].out);
        free(p->rx[i].in);
    }
    gw_tls_close(p->tls);
    gw_wakeup_close(&p->efd, &p->wake);
    free(p->rx);
    pthread_mutex_destroy(&p->in_mu);
    free(p);
}
