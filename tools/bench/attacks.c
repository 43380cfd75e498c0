/*
 * attacks.c — berth-hostile's attackers and their table (attacks.h; the
 * header of hostile.c says what each attack does and why).
 *
 * Attackers are plain sockets speaking SP's TCP mapping (proto/sp_wire.h)
 * by hand, blocking or poll-driven, a few threads each: the machine they
 * share with berthd may have two cores, and an attacker that burns them
 * measures the machine, not berthd. Each runs until attacks_stop and
 * counts what it did in attacks_counts. run_attack (hostile.c) starts them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include "proto/sp_wire.h"
#include "tools/bench/attacks.h"
#include "tools/bench/target.h"
#include "tools/clients/c/client.h"

#define DIAL_TIMEOUT_MS 2000 /* an attacker's connect, and its blocking reads */

#define BIG_TASKS      600
#define BIG_PAYLOAD    (1u << 20) /* berthd's default payload ceiling */
#define BIG_BATCH      7          /* 7 MiB a submit_batch: under the 8 MiB message limit */
#define UNREAD_CONNS   16
#define UNREAD_FETCHES 1024 /* pipelined per connection */
#define LONGPOLL_BURST 256  /* fetches per connection: berthd's waits-per-connection */
#define PARTIAL_CONNS  200
#define PARTIAL_FRAME  (16u << 20) /* the announced length: twice berthd's default message limit */
#define HELD_CONNS     5000
#define GARBAGE_MAX    (64u << 10)

static void put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) {
        perror("berth-hostile");
        exit(1);
    }
    return p;
}

/* ---- attackers: raw sockets ---- */

atomic_bool attacks_stop;
atk_counts attacks_counts;

static bool send_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        atomic_fetch_add(&attacks_counts.sent, (uint64_t)w);
        p += w, len -= (size_t)w;
    }
    return true;
}

/* A blocking connection to berthd, with DIAL_TIMEOUT_MS on the connect
 * and on every read and write; the SP header sent first when hello. -1 on
 * failure (counted). */
static int atk_dial(bool hello)
{
    int fd = socket(target_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        atomic_fetch_add(&attacks_counts.dial_fail, 1);
        return -1;
    }
    struct timeval tv = {DIAL_TIMEOUT_MS / 1000, (DIAL_TIMEOUT_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t h[SP_HEADER_LEN];
    sp_header(h, SP_PROTO_REQ0);
    if (connect(fd, (struct sockaddr *)&target_addr, target_addr_len) != 0 ||
        (hello && !send_all(fd, h, sizeof(h)))) {
        close(fd);
        atomic_fetch_add(&attacks_counts.dial_fail, 1);
        return -1;
    }
    atomic_fetch_add(&attacks_counts.conns, 1);
    return fd;
}

/* A frame: the 64-bit length, the request id (high bit set), the body. */
static size_t frame_put(uint8_t *out, uint32_t id, const uint8_t *body, size_t len)
{
    put_be(out, 4 + (uint64_t)len, SP_LENGTH_LEN);
    put_be(out + SP_LENGTH_LEN, id | SP_REQUEST_ID_HI, 4);
    memcpy(out + SP_LENGTH_LEN + 4, body, len);
    return SP_LENGTH_LEN + 4 + len;
}

/* n framed fetches of topic, ids 0..n-1 (0 for max_tasks or lock_ms:
 * omitted). Returns a malloc'd buffer of *len bytes. */
static uint8_t *fetch_frames(const char *topic, uint32_t max_tasks, uint64_t wait_ms,
                             uint64_t lock_ms, uint32_t n, size_t *len)
{
    char *topics[] = {(char *)topic};
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    f.worker_id = "hostile";
    f.n_topics = 1;
    f.topics = topics;
    f.has_max_tasks = max_tasks > 0;
    f.max_tasks = max_tasks;
    f.has_wait_ms = 1;
    f.wait_ms = wait_ms;
    f.has_lock_ms = lock_ms > 0;
    f.lock_ms = lock_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &f;
    size_t body_len = berth__v1__request__get_packed_size(&req);
    uint8_t *body = xcalloc(1, body_len);
    berth__v1__request__pack(&req, body);
    size_t frame = SP_LENGTH_LEN + 4 + body_len;
    uint8_t *out = xcalloc(n, frame);
    *len = 0;
    for (uint32_t i = 0; i < n; i++)
        *len += frame_put(out + *len, i, body, body_len);
    free(body);
    return out;
}

/* longpoll-flood: each connection parks LONGPOLL_BURST long polls and dies.
 * berthd's header is read first: closing with it unread would make the
 * close a reset, which may discard the fetches before berthd reads them.
 * This way the connection ends as that of a client process that exits. */
static void *atk_longpoll(void *arg)
{
    (void)arg;
    size_t len;
    uint8_t *frames = fetch_frames("honest", 0, 30000, 0, LONGPOLL_BURST, &len);
    while (!atomic_load(&attacks_stop)) {
        int fd = atk_dial(true);
        if (fd < 0) {
            sleep_ms(1);
            continue;
        }
        uint8_t peer[SP_HEADER_LEN];
        if (recv(fd, peer, sizeof(peer), MSG_WAITALL) != (ssize_t)sizeof(peer))
            atomic_fetch_add(&attacks_counts.closed, 1);
        else
            send_all(fd, frames, len);
        close(fd);
    }
    free(frames);
    return NULL;
}

/* unread-answers, preparation: BIG_TASKS tasks of BIG_PAYLOAD bytes on
 * "big". How many were submitted, for the clean-up of --operate. */
static uint64_t big_submitted;

static int prepare_unread(void)
{
    bc *c;
    char err[256];
    if (bc_open_direct(target_cfg.operate, &c, err, sizeof(err)) != BC_OK) {
        fprintf(stderr, "berth-hostile: %s\n", err);
        return -1;
    }
    uint8_t *payload = xcalloc(1, BIG_PAYLOAD);
    memset(payload, 'b', BIG_PAYLOAD);
    Berth__V1__SubmitRequest items[BIG_BATCH], *ip[BIG_BATCH];
    for (int i = 0; i < BIG_BATCH; i++) {
        berth__v1__submit_request__init(&items[i]);
        items[i].topic = "big";
        items[i].has_payload = 1;
        items[i].payload.data = payload;
        items[i].payload.len = BIG_PAYLOAD;
        ip[i] = &items[i];
    }
    int rv = 0;
    for (uint64_t done = 0; done < BIG_TASKS;) {
        Berth__V1__SubmitBatchRequest sb = BERTH__V1__SUBMIT_BATCH_REQUEST__INIT;
        sb.n_items = BIG_TASKS - done < BIG_BATCH ? BIG_TASKS - done : BIG_BATCH;
        sb.items = ip;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
        req.submit_batch = &sb;
        Berth__V1__Response *r = NULL;
        int crv = bc_call(c, &req, 60000, &r);
        bool ok = crv == BC_OK && r->status != NULL && r->status->code == BERTH__V1__CODE__OK;
        if (!ok)
            fprintf(stderr, "berth-hostile: unread-answers: preloading: %s\n",
                    r != NULL && r->status != NULL && r->status->message != NULL
                        ? r->status->message
                        : bc_strerror(crv));
        if (r != NULL)
            berth__v1__response__free_unpacked(r, NULL);
        if (!ok) {
            rv = -1;
            break;
        }
        done += sb.n_items;
        big_submitted += sb.n_items;
    }
    free(payload);
    bc_close(c);
    return rv;
}

/* With --operate the berthd is someone else's: fetch and complete as many
 * "big" tasks as unread-answers submitted, waiting out the locks its
 * attackers took (until locks_free_ns). */
static void cleanup_big(uint64_t locks_free_ns)
{
    bc *c;
    if (big_submitted == 0 || bc_open_direct(target_cfg.operate, &c, NULL, 0) != BC_OK)
        return;
    char *topics[] = {"big"};
    uint64_t removed = 0;
    while (removed < big_submitted) {
        Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
        f.worker_id = "hostile-cleanup";
        f.n_topics = 1;
        f.topics = topics;
        f.has_max_tasks = 1;
        f.max_tasks = BIG_BATCH;
        f.has_wait_ms = 1;
        f.wait_ms = 1000;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
        req.fetch = &f;
        Berth__V1__Response *r = NULL;
        if (bc_call(c, &req, 30000, &r) != BC_OK || r->status == NULL ||
            r->status->code != BERTH__V1__CODE__OK) {
            if (r != NULL)
                berth__v1__response__free_unpacked(r, NULL);
            break;
        }
        size_t n = r->fetch != NULL ? r->fetch->n_tasks : 0;
        if (n == 0 && now_ns() > locks_free_ns) {
            berth__v1__response__free_unpacked(r, NULL);
            break;
        }
        Berth__V1__CompleteRequest items[BIG_BATCH], *ip[BIG_BATCH];
        for (size_t i = 0; i < n && i < BIG_BATCH; i++) {
            berth__v1__complete_request__init(&items[i]);
            items[i].task_id = r->fetch->tasks[i]->id;
            items[i].worker_id = "hostile-cleanup";
            items[i].lock_token = r->fetch->tasks[i]->lock_token;
            ip[i] = &items[i];
        }
        Berth__V1__CompleteBatchRequest cb = BERTH__V1__COMPLETE_BATCH_REQUEST__INIT;
        cb.n_items = n < BIG_BATCH ? n : BIG_BATCH;
        cb.items = ip;
        Berth__V1__Request creq = BERTH__V1__REQUEST__INIT;
        creq.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE_BATCH;
        creq.complete_batch = &cb;
        Berth__V1__Response *done = NULL;
        if (n > 0 && bc_call(c, &creq, 30000, &done) == BC_OK && done->complete_batch != NULL)
            for (size_t i = 0; i < done->complete_batch->n_statuses; i++)
                removed += done->complete_batch->statuses[i]->code == BERTH__V1__CODE__OK;
        if (done != NULL)
            berth__v1__response__free_unpacked(done, NULL);
        berth__v1__response__free_unpacked(r, NULL);
    }
    bc_close(c);
    fprintf(stderr, "berth-hostile: removed %" PRIu64 " of the %" PRIu64 " big tasks preloaded\n",
            removed, big_submitted);
}

/* A non-blocking connection, for the attackers that drive many with poll. */
static int atk_dial_nonblocking(bool hello)
{
    int fd = atk_dial(hello);
    if (fd >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A connection driven by poll: what of its stream is sent, and when to
 * open it again after berthd closed it. */
typedef struct pconn {
    int fd; /* -1: closed */
    size_t off;
    uint64_t reopen_ns;
} pconn;

#define REOPEN_NS (100u * 1000000u) /* a closed connection is reopened this much later */

static void pconn_closed(pconn *c, uint64_t now)
{
    close(c->fd);
    c->fd = -1;
    c->reopen_ns = now + REOPEN_NS;
    atomic_fetch_add(&attacks_counts.closed, 1);
}

/* Reopens the closed connections of conns[0..n) that are due (the SP
 * header sent first when hello), and lists the open ones in pfd for
 * events, and POLLOUT while fewer than len bytes of their stream are
 * sent; at[k] is pfd[k]'s connection. Returns how many are listed. */
static int pconn_poll_set(pconn *conns, int n, bool hello, short events, size_t len,
                          struct pollfd *pfd, int *at)
{
    uint64_t now = now_ns();
    int m = 0;
    for (int i = 0; i < n && !atomic_load(&attacks_stop); i++) {
        pconn *c = &conns[i];
        if (c->fd < 0 && now >= c->reopen_ns) {
            c->fd = atk_dial_nonblocking(hello);
            c->off = 0;
            c->reopen_ns = now + REOPEN_NS;
        }
        if (c->fd < 0)
            continue;
        pfd[m] = (struct pollfd){.fd = c->fd, .events = events | (c->off < len ? POLLOUT : 0)};
        at[m++] = i;
    }
    return m;
}

/* Sends what it can of the l bytes at p on c; a connection berthd closed
 * is counted and closed. */
static void pconn_send(pconn *c, const uint8_t *p, size_t l, uint64_t now)
{
    ssize_t w = send(c->fd, p, l, MSG_NOSIGNAL);
    if (w > 0) {
        c->off += (size_t)w;
        atomic_fetch_add(&attacks_counts.sent, (uint64_t)w);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        pconn_closed(c, now);
    }
}

/* unread-answers: UNREAD_CONNS connections pipeline UNREAD_FETCHES
 * fetches of "big" each (locks of --seconds, so what they claim stays
 * claimed while the attack runs) and never read an answer. POLLIN is
 * never asked for: it would always be ready. POLLRDHUP, POLLHUP or
 * POLLERR says berthd closed one. */
static void *atk_unread(void *arg)
{
    (void)arg;
    uint64_t lock_ms = target_cfg.seconds < 1 ? 1000 : (uint64_t)(target_cfg.seconds * 1000);
    size_t len;
    uint8_t *frames = fetch_frames("big", 8, 0, lock_ms, UNREAD_FETCHES, &len);
    pconn conns[UNREAD_CONNS];
    struct pollfd pfd[UNREAD_CONNS];
    int at[UNREAD_CONNS]; /* pfd[k] is conns[at[k]] */
    for (int i = 0; i < UNREAD_CONNS; i++)
        conns[i] = (pconn){.fd = -1};
    while (!atomic_load(&attacks_stop)) {
        int n = pconn_poll_set(conns, UNREAD_CONNS, true, POLLRDHUP, len, pfd, at);
        if (poll(pfd, (nfds_t)n, 100) <= 0)
            continue;
        uint64_t now = now_ns();
        for (int k = 0; k < n; k++) {
            pconn *c = &conns[at[k]];
            if (pfd[k].revents & (POLLERR | POLLHUP | POLLRDHUP)) {
                pconn_closed(c, now);
            } else if (pfd[k].revents & POLLOUT) {
                pconn_send(c, frames + c->off, len - c->off, now);
            }
        }
    }
    for (int i = 0; i < UNREAD_CONNS; i++)
        if (conns[i].fd >= 0)
            close(conns[i].fd);
    free(frames);
    return NULL;
}

/* partial-frames: each connection's stream is the SP header, a frame
 * length of PARTIAL_FRAME, a request id, then zeros: the frame's body one
 * byte short. Each of PARTIAL_THREADS drives its share of the connections;
 * berthd's 8-byte header is read and dropped, and a connection berthd
 * closes starts again. */
#define PARTIAL_THREADS 2
#define PARTIAL_CHUNK   (256u << 10)
#define PARTIAL_STREAM  ((size_t)SP_HEADER_LEN + SP_LENGTH_LEN + PARTIAL_FRAME - 1)

static void *atk_partial(void *arg)
{
    (void)arg;
    int n = PARTIAL_CONNS / PARTIAL_THREADS;
    uint8_t *head = xcalloc(1, PARTIAL_CHUNK); /* the stream's first chunk */
    uint8_t *zeros = xcalloc(1, PARTIAL_CHUNK);
    sp_header(head, SP_PROTO_REQ0);
    put_be(head + SP_HEADER_LEN, PARTIAL_FRAME, SP_LENGTH_LEN);
    put_be(head + SP_HEADER_LEN + SP_LENGTH_LEN, 1 | SP_REQUEST_ID_HI, 4);
    pconn *conns = xcalloc((size_t)n, sizeof(*conns));
    struct pollfd *pfd = xcalloc((size_t)n, sizeof(*pfd));
    int *at = xcalloc((size_t)n, sizeof(*at));
    for (int i = 0; i < n; i++)
        conns[i] = (pconn){.fd = -1};
    while (!atomic_load(&attacks_stop)) {
        int m = pconn_poll_set(conns, n, false, POLLIN | POLLRDHUP, PARTIAL_STREAM, pfd, at);
        if (poll(pfd, (nfds_t)m, 100) <= 0)
            continue;
        uint64_t now = now_ns();
        for (int k = 0; k < m; k++) {
            pconn *c = &conns[at[k]];
            short re = pfd[k].revents;
            if (re & (POLLIN | POLLRDHUP)) {
                uint8_t scratch[64];
                ssize_t r = recv(c->fd, scratch, sizeof(scratch), MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                    pconn_closed(c, now);
                    continue;
                }
            }
            if (re & (POLLERR | POLLHUP)) {
                pconn_closed(c, now);
                continue;
            }
            if (!(re & POLLOUT) || c->off >= PARTIAL_STREAM)
                continue;
            const uint8_t *p = c->off < PARTIAL_CHUNK ? head + c->off : zeros;
            size_t l = c->off < PARTIAL_CHUNK ? PARTIAL_CHUNK - c->off : PARTIAL_CHUNK;
            if (l > PARTIAL_STREAM - c->off)
                l = PARTIAL_STREAM - c->off;
            pconn_send(c, p, l, now);
        }
    }
    for (int i = 0; i < n; i++)
        if (conns[i].fd >= 0)
            close(conns[i].fd);
    free(head);
    free(zeros);
    free(conns);
    free(pfd);
    free(at);
    return NULL;
}

/* held-connections: held_target connections, opened a few hundred at a
 * time between polls (so the stop is heard), header sent, then idle. What
 * berthd sends (its header) is read and dropped; one it closes is opened
 * again on the next round. */
static int held_target = HELD_CONNS; /* lowered to fit RLIMIT_NOFILE */

static void *atk_held(void *arg)
{
    (void)arg;
    int n = held_target;
    int *fds = xcalloc((size_t)n, sizeof(*fds));
    int *at = xcalloc((size_t)n, sizeof(*at));
    struct pollfd *pfd = xcalloc((size_t)n, sizeof(*pfd));
    for (int i = 0; i < n; i++)
        fds[i] = -1;
    int next = 0; /* where the search for closed slots goes on */
    while (!atomic_load(&attacks_stop)) {
        int budget = 250, open_failed = 0;
        for (int seen = 0; seen < n && budget > 0 && !open_failed; seen++, next = (next + 1) % n) {
            if (fds[next] >= 0)
                continue;
            budget--;
            fds[next] = atk_dial(true);
            open_failed = fds[next] < 0;
        }
        if (open_failed)
            sleep_ms(10);
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (fds[i] < 0)
                continue;
            pfd[m] = (struct pollfd){.fd = fds[i], .events = POLLIN | POLLRDHUP};
            at[m++] = i;
        }
        /* While connections are still being opened, only look. */
        if (poll(pfd, (nfds_t)m, budget < 250 ? 0 : 100) <= 0)
            continue;
        for (int k = 0; k < m; k++) {
            if (pfd[k].revents == 0)
                continue;
            uint8_t scratch[64];
            ssize_t r = recv(pfd[k].fd, scratch, sizeof(scratch), MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                (pfd[k].revents & (POLLERR | POLLHUP))) {
                close(fds[at[k]]);
                fds[at[k]] = -1;
                atomic_fetch_add(&attacks_counts.closed, 1);
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    free(at);
    free(pfd);
    return NULL;
}

/* connect-flood: connect, close, again; even threads send the header. */
static void *atk_connect(void *arg)
{
    bool hello = (intptr_t)arg % 2 == 0;
    while (!atomic_load(&attacks_stop)) {
        int fd = atk_dial(hello);
        if (fd < 0)
            sleep_ms(1); /* out of ports or descriptors: let them come back */
        else
            close(fd);
    }
    return NULL;
}

/* xorshift64*: cheap randomness; the attack needs no more. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Du;
}

/* garbage: per connection, one of
 *   0  valid header, 1-4 frames of random bytes under GARBAGE_MAX with a
 *      request id; half-close and read until berthd closes (1 s at most)
 *   1  the same, closed at once
 *   2  a bad header (random, or "\0SP\0" with another protocol), then
 *      random bytes
 *   3  random bytes only
 * Bodies are cut from a pool of random bytes at random offsets. */
static void *atk_garbage(void *arg)
{
    uint64_t seed = now_ns() ^ ((uint64_t)(intptr_t)arg + 1) * 0x9E3779B97F4A7C15u;
    uint8_t *pool = xcalloc(2, GARBAGE_MAX);
    for (size_t i = 0; i < 2 * GARBAGE_MAX; i += 8) {
        uint64_t r = rnd(&seed);
        memcpy(pool + i, &r, 8);
    }
    while (!atomic_load(&attacks_stop)) {
        int mode = (int)(rnd(&seed) % 4);
        int fd = atk_dial(mode <= 1);
        if (fd < 0) {
            sleep_ms(1);
            continue;
        }
        bool ok = true;
        if (mode <= 1) {
            int frames = 1 + (int)(rnd(&seed) % 4);
            for (int f = 0; f < frames && ok; f++) {
                size_t body = rnd(&seed) % (GARBAGE_MAX - 4);
                uint8_t head[SP_LENGTH_LEN + 4];
                put_be(head, 4 + body, SP_LENGTH_LEN);
                put_be(head + SP_LENGTH_LEN, (uint32_t)rnd(&seed) | SP_REQUEST_ID_HI, 4);
                ok = send_all(fd, head, sizeof(head)) &&
                     send_all(fd, pool + rnd(&seed) % GARBAGE_MAX, body);
            }
        } else if (mode == 2) {
            uint8_t h[SP_HEADER_LEN];
            uint64_t r = rnd(&seed);
            if (r & 1) {
                memcpy(h, &r, sizeof(h));
            } else {
                uint16_t proto = (uint16_t)(r >> 8);
                sp_header(h, proto == SP_PROTO_REQ0 ? SP_PROTO_PUB0 : proto);
            }
            ok = send_all(fd, h, sizeof(h)) &&
                 send_all(fd, pool + rnd(&seed) % GARBAGE_MAX, rnd(&seed) % 1024);
        } else {
            ok = send_all(fd, pool + rnd(&seed) % GARBAGE_MAX, 1 + rnd(&seed) % GARBAGE_MAX);
        }
        if (ok && mode == 0 && shutdown(fd, SHUT_WR) == 0) {
            struct timeval tv = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
            uint8_t scratch[4096];
            while (recv(fd, scratch, sizeof(scratch), 0) > 0 && !atomic_load(&attacks_stop))
                ;
        }
        close(fd);
    }
    free(pool);
    return NULL;
}

/* ---- the table ---- */

const attack attacks_table[] = {
    {"none", 0, NULL, NULL, NULL}, /* the control: the honest load alone */
    {"longpoll-flood", 3, atk_longpoll, NULL, NULL},
    {"unread-answers", 1, atk_unread, prepare_unread, cleanup_big},
    {"partial-frames", PARTIAL_THREADS, atk_partial, NULL, NULL},
    {"held-connections", 1, atk_held, NULL, NULL},
    {"connect-flood", 4, atk_connect, NULL, NULL},
    {"garbage", 3, atk_garbage, NULL, NULL},
};
const size_t attacks_table_len = sizeof(attacks_table) / sizeof(attacks_table[0]);

/* ---- the process ---- */

void attacks_fit_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)HELD_CONNS + 200) {
        held_target = rl.rlim_cur > 300 ? (int)rl.rlim_cur - 200 : 100;
        fprintf(stderr, "berth-hostile: RLIMIT_NOFILE is %llu: holding %d connections\n",
                (unsigned long long)rl.rlim_cur, held_target);
    }
}
