/*
 * berth-hostile — hostile clients against berthd, while honest ones measure.
 *
 *   berth-hostile (--operate URL --pid PID | --spawn [-- BERTHD-ARGS...])
 *                 [--attack NAME[,NAME...] | --attack all] [--seconds S]
 *                 [--settle S] [--json]
 *
 * Runs each attack named (all of them by default, in the order given) for
 * --seconds (default 20) against one berthd. For each attack:
 *
 *   1. its preparation, if it has one (unread-answers preloads big tasks);
 *   2. RSS before: berthd's VmRSS, read from /proc/PID/status;
 *   3. honest load starts: one producer submitting one small task at a
 *      time on topic "honest" (at most 64 ahead of the worker, so that
 *      the honest backlog is not what RSS measures), one worker fetching
 *      it (max_tasks 1,
 *      wait_ms 1000) and completing it, each on its own direct connection
 *      (client.h) with a 5 s receive timeout;
 *   4. the attack runs for --seconds, then stops; honest load goes on for
 *      one more second, then stops;
 *   5. after --settle seconds (default 60) with nothing running, RSS after.
 *
 * Reported per attack: the honest calls (round trips) that began while the
 * attack ran or in the second after it, their latency p50/p99/max in ms,
 * and the errors among them — an answer other than OK, a transport failure,
 * or a call unanswered within 5 s, whose wait counts as its latency; the
 * honest tasks submitted, completed, and fetched again (attempt > 1: an
 * earlier claim, say a dead connection's, lapsed) in that window; RSS
 * before, its peak during that window (sampled every 100 ms) and after
 * the settle, in MiB; and what the attackers did (connections, failed
 * dials, connections berthd closed under them, bytes sent). A table, or
 * one JSON object with --json. The numbers are for a reader to judge: the
 * exit status is 0 unless the tool itself failed.
 *
 * ATTACKS
 *
 * Attackers are plain sockets speaking SP's TCP mapping (proto/sp_wire.h)
 * by hand, blocking or poll-driven, a few threads each: the machine they
 * share with berthd may have two cores, and an attacker that burns them
 * measures the machine, not berthd.
 *
 *   none              no attacker: the control, the honest load alone
 *                     (what RSS does under it is not an attack's doing).
 *   longpoll-flood    3 threads: connect, SP header (berthd's is read),
 *                     256 pipelined fetches of "honest" with wait_ms
 *                     30000, close at once; again. Waits of dead
 *                     connections must neither pile up nor claim honest
 *                     tasks.
 *   unread-answers    preloads 600 tasks of 1 MiB on "big" (before RSS
 *                     before), then 16 connections pipeline 1024 fetches
 *                     each (max_tasks 8, wait_ms 0, lock_ms = --seconds)
 *                     and never read; a connection berthd closes is opened
 *                     again. Answers nobody reads must stay bounded.
 *   partial-frames    200 connections, each: SP header, a frame announcing
 *                     16 MiB, 16 MiB - 1 bytes of it, then held; a
 *                     connection berthd closes (its frame deadline) starts
 *                     again.
 *   held-connections  5000 connections (fewer if the descriptor limit is
 *                     lower), SP header sent, idle; reopened when closed.
 *   connect-flood     4 threads connecting and closing at once, as fast as
 *                     they can; two send the SP header first, two do not.
 *   garbage           3 threads: connect, then at random a valid header
 *                     and 1-4 frames of random bytes under 64 KiB (with a
 *                     request id), a bad header, or random bytes; close
 *                     (half the valid ones after a half-close and reading
 *                     until berthd closes).
 *
 * --spawn starts the berthd found beside this binary on a temp directory
 * and free ports (arguments after "--" are passed to it, e.g.
 * --operate-nng), and stops it afterwards. With --operate and --pid the
 * berthd is someone else's: the big tasks unread-answers preloaded are
 * fetched and completed at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/sp_wire.h"
#include "tools/clients/c/client.h"
#include "tools/bench/samples.h"
#include "tools/bench/spawn.h"

#define HONEST_TIMEOUT_MS 5000 /* an honest call unanswered this long is an error */
#define HONEST_WARMUP_MS  500  /* honest load runs this long before an attack, unmeasured */
#define HONEST_TAIL_MS    1000 /* and this long after it, measured */
#define RSS_EVERY_MS      100
#define DIAL_TIMEOUT_MS   2000 /* an attacker's connect, and its blocking reads */

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

typedef struct cfg {
    const char *operate;
    pid_t pid; /* berthd's, for its RSS */
    bool spawn;
    char **berthd_args; /* after "--", for --spawn */
    int n_berthd_args;
    double seconds, settle_s;
    bool json;
} cfg;

static cfg C;
static struct sockaddr_storage target; /* C.operate, resolved, for the attackers */
static socklen_t target_len;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

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

/* ---- berthd's RSS ---- */

static _Atomic long rss_peak_kb = -1; /* highest sample since the last reset */
static atomic_bool sampler_stop;
static atomic_bool reaped; /* the spawned berthd exited, and its pid is free for reuse */

/* VmRSS in KiB, or -1 when berthd is gone. */
static long rss_kb(void)
{
    char path[64], line[256];
    if (atomic_load(&reaped))
        return -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)C.pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static double mib(long kb)
{
    return kb < 0 ? -1 : (double)kb / 1024.0;
}

static void *sampler(void *arg)
{
    (void)arg;
    while (!atomic_load(&sampler_stop)) {
        long kb = rss_kb(), peak = atomic_load(&rss_peak_kb);
        while (kb > peak && !atomic_compare_exchange_weak(&rss_peak_kb, &peak, kb))
            ;
        sleep_ms(RSS_EVERY_MS);
    }
    return NULL;
}

/* ---- honest load ---- */

typedef struct honest {
    pthread_t th;
    bool worker;
    samples lat;     /* calls begun while recording */
    uint64_t errors; /* among them */
    uint64_t tasks;  /* submitted (producer) or completed (worker) among them */
    uint64_t again;  /* worker: tasks fetched with attempt > 1 (an earlier claim lapsed) */
} honest;

static atomic_bool honest_stop, recording;
/* All the honest tasks submitted and completed: the producer keeps at most
 * HONEST_BACKLOG_MAX ahead of the worker, so that what berthd holds after
 * an attack is not the honest load's own backlog. */
static atomic_uint_fast64_t honest_submitted, honest_completed;
#define HONEST_BACKLOG_MAX 64
static atomic_uint honest_errors_shown; /* per attack: the first few are printed */
static const char *attack_name = "";

static void honest_note(const char *what, const Berth__V1__Response *r, int rv)
{
    if (atomic_fetch_add(&honest_errors_shown, 1) >= 3)
        return;
    const char *why = "not OK";
    if (r == NULL)
        why = bc_strerror(rv);
    else if (r->status != NULL && r->status->message != NULL)
        why = r->status->message;
    fprintf(stderr, "berth-hostile: %s: honest %s: %s\n", attack_name, what, why);
}

/* One honest call on *c, dialled first when it is NULL (the dial's time is
 * the call's). A transport failure or timeout drops the connection, so the
 * next call starts afresh, and berthd forgets what the old one waited for. */
static int honest_call(bc **c, const Berth__V1__Request *req, Berth__V1__Response **out)
{
    *out = NULL;
    if (*c == NULL && bc_open_direct(C.operate, c, NULL, 0) != BC_OK)
        return BC_EUNREACHABLE;
    int rv = bc_call(*c, req, HONEST_TIMEOUT_MS, out);
    if (rv != BC_OK) {
        bc_close(*c);
        *c = NULL;
    }
    return rv;
}

/* Times one call and records it if it began while recording. Returns the
 * answer if it is OK (the caller frees it), else NULL. */
static Berth__V1__Response *honest_round_trip(honest *h, bc **c, const Berth__V1__Request *req,
                                              const char *what)
{
    bool rec = atomic_load(&recording);
    uint64_t t = now_ns();
    Berth__V1__Response *r = NULL;
    int rv = honest_call(c, req, &r);
    bool ok = rv == BC_OK && r->status != NULL && r->status->code == BERTH__V1__CODE__OK;
    if (rec) {
        sample_add(&h->lat, now_ns() - t);
        if (!ok) {
            h->errors++;
            honest_note(what, r, rv);
        }
    }
    if (!ok) {
        if (r != NULL)
            berth__v1__response__free_unpacked(r, NULL);
        if (rv != BC_OK)
            sleep_ms(20); /* a berthd refusing connections at once is not spun on */
        return NULL;
    }
    return r;
}

static void *honest_producer(void *arg)
{
    honest *h = arg;
    bc *c = NULL;
    char payload[32];
    uint64_t n = 0;
    while (!atomic_load(&honest_stop)) {
        if (atomic_load(&honest_submitted) - atomic_load(&honest_completed) >= HONEST_BACKLOG_MAX) {
            sleep_ms(1);
            continue;
        }
        int len = snprintf(payload, sizeof(payload), "honest-%" PRIu64, n++);
        Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
        s.topic = "honest";
        s.has_payload = 1;
        s.payload.data = (uint8_t *)payload;
        s.payload.len = (size_t)len;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        req.submit = &s;
        bool rec = atomic_load(&recording);
        Berth__V1__Response *r = honest_round_trip(h, &c, &req, "submit");
        if (r != NULL) {
            h->tasks += rec;
            atomic_fetch_add(&honest_submitted, 1);
            berth__v1__response__free_unpacked(r, NULL);
        }
    }
    bc_close(c);
    return NULL;
}

static void *honest_worker(void *arg)
{
    honest *h = arg;
    bc *c = NULL;
    char *topics[] = {"honest"};
    while (!atomic_load(&honest_stop)) {
        Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
        f.worker_id = "honest-worker";
        f.n_topics = 1;
        f.topics = topics;
        f.has_max_tasks = 1;
        f.max_tasks = 1;
        f.has_wait_ms = 1;
        f.wait_ms = 1000;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
        req.fetch = &f;
        Berth__V1__Response *r = honest_round_trip(h, &c, &req, "fetch");
        if (r == NULL || r->fetch == NULL || r->fetch->n_tasks == 0) {
            if (r != NULL)
                berth__v1__response__free_unpacked(r, NULL);
            continue;
        }
        const Berth__V1__Task *t = r->fetch->tasks[0];
        if (t->attempt > 1 && atomic_load(&recording))
            h->again++;
        Berth__V1__CompleteRequest cr = BERTH__V1__COMPLETE_REQUEST__INIT;
        cr.task_id = t->id;
        cr.worker_id = "honest-worker";
        cr.lock_token = t->lock_token;
        Berth__V1__Request creq = BERTH__V1__REQUEST__INIT;
        creq.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE;
        creq.complete = &cr;
        bool rec = atomic_load(&recording);
        Berth__V1__Response *done = honest_round_trip(h, &c, &creq, "complete");
        if (done != NULL) {
            h->tasks += rec;
            atomic_fetch_add(&honest_completed, 1);
            berth__v1__response__free_unpacked(done, NULL);
        }
        berth__v1__response__free_unpacked(r, NULL);
    }
    bc_close(c);
    return NULL;
}

/* ---- attackers: raw sockets ---- */

static atomic_bool attack_stop;
static struct {
    atomic_uint_fast64_t conns;     /* connections made */
    atomic_uint_fast64_t dial_fail; /* connects (or headers) that failed */
    atomic_uint_fast64_t closed;    /* connections berthd closed under a holder */
    atomic_uint_fast64_t sent;      /* bytes */
} atk;

static bool send_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        atomic_fetch_add(&atk.sent, (uint64_t)w);
        p += w, len -= (size_t)w;
    }
    return true;
}

/* A blocking connection to berthd, with DIAL_TIMEOUT_MS on the connect
 * and on every read and write; the SP header sent first when hello. -1 on
 * failure (counted). */
static int atk_dial(bool hello)
{
    int fd = socket(target.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        atomic_fetch_add(&atk.dial_fail, 1);
        return -1;
    }
    struct timeval tv = {DIAL_TIMEOUT_MS / 1000, (DIAL_TIMEOUT_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t h[SP_HEADER_LEN];
    sp_header(h, SP_PROTO_REQ0);
    if (connect(fd, (struct sockaddr *)&target, target_len) != 0 ||
        (hello && !send_all(fd, h, sizeof(h)))) {
        close(fd);
        atomic_fetch_add(&atk.dial_fail, 1);
        return -1;
    }
    atomic_fetch_add(&atk.conns, 1);
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
    while (!atomic_load(&attack_stop)) {
        int fd = atk_dial(true);
        if (fd < 0) {
            sleep_ms(1);
            continue;
        }
        uint8_t peer[SP_HEADER_LEN];
        if (recv(fd, peer, sizeof(peer), MSG_WAITALL) != (ssize_t)sizeof(peer))
            atomic_fetch_add(&atk.closed, 1);
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
    if (bc_open_direct(C.operate, &c, err, sizeof(err)) != BC_OK) {
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
    atomic_fetch_add(&atk.closed, 1);
}

/* unread-answers: UNREAD_CONNS connections pipeline UNREAD_FETCHES
 * fetches of "big" each (locks of --seconds, so what they claim stays
 * claimed while the attack runs) and never read an answer. POLLIN is
 * never asked for: it would always be ready. POLLRDHUP, POLLHUP or
 * POLLERR says berthd closed one. */
static void *atk_unread(void *arg)
{
    (void)arg;
    uint64_t lock_ms = C.seconds < 1 ? 1000 : (uint64_t)(C.seconds * 1000);
    size_t len;
    uint8_t *frames = fetch_frames("big", 8, 0, lock_ms, UNREAD_FETCHES, &len);
    pconn conns[UNREAD_CONNS];
    struct pollfd pfd[UNREAD_CONNS];
    int at[UNREAD_CONNS]; /* pfd[k] is conns[at[k]] */
    for (int i = 0; i < UNREAD_CONNS; i++)
        conns[i] = (pconn){.fd = -1};
    while (!atomic_load(&attack_stop)) {
        uint64_t now = now_ns();
        int n = 0;
        for (int i = 0; i < UNREAD_CONNS; i++) {
            pconn *c = &conns[i];
            if (c->fd < 0 && now >= c->reopen_ns) {
                c->fd = atk_dial_nonblocking(true);
                c->off = 0;
                c->reopen_ns = now + REOPEN_NS;
            }
            if (c->fd < 0)
                continue;
            pfd[n] =
                (struct pollfd){.fd = c->fd, .events = POLLRDHUP | (c->off < len ? POLLOUT : 0)};
            at[n++] = i;
        }
        if (poll(pfd, (nfds_t)n, 100) <= 0)
            continue;
        now = now_ns();
        for (int k = 0; k < n; k++) {
            pconn *c = &conns[at[k]];
            if (pfd[k].revents & (POLLERR | POLLHUP | POLLRDHUP)) {
                pconn_closed(c, now);
            } else if (pfd[k].revents & POLLOUT) {
                ssize_t w = send(c->fd, frames + c->off, len - c->off, MSG_NOSIGNAL);
                if (w > 0) {
                    c->off += (size_t)w;
                    atomic_fetch_add(&atk.sent, (uint64_t)w);
                } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                    pconn_closed(c, now);
                }
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
    while (!atomic_load(&attack_stop)) {
        uint64_t now = now_ns();
        int m = 0;
        for (int i = 0; i < n && !atomic_load(&attack_stop); i++) {
            pconn *c = &conns[i];
            if (c->fd < 0 && now >= c->reopen_ns) {
                c->fd = atk_dial_nonblocking(false);
                c->off = 0;
                c->reopen_ns = now + REOPEN_NS;
            }
            if (c->fd < 0)
                continue;
            short ev = POLLIN | POLLRDHUP;
            pfd[m] = (struct pollfd){.fd = c->fd,
                                     .events = ev | (c->off < PARTIAL_STREAM ? POLLOUT : 0)};
            at[m++] = i;
        }
        if (poll(pfd, (nfds_t)m, 100) <= 0)
            continue;
        now = now_ns();
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
            ssize_t w = send(c->fd, p, l, MSG_NOSIGNAL);
            if (w > 0) {
                c->off += (size_t)w;
                atomic_fetch_add(&atk.sent, (uint64_t)w);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                pconn_closed(c, now);
            }
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
    while (!atomic_load(&attack_stop)) {
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
                atomic_fetch_add(&atk.closed, 1);
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
    while (!atomic_load(&attack_stop)) {
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
    while (!atomic_load(&attack_stop)) {
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
            while (recv(fd, scratch, sizeof(scratch), 0) > 0 && !atomic_load(&attack_stop))
                ;
        }
        close(fd);
    }
    free(pool);
    return NULL;
}

typedef struct attack {
    const char *name;
    int threads;
    void *(*run)(void *arg); /* arg: the thread's index, as intptr_t */
    int (*prepare)(void);    /* before RSS before; NULL: nothing to prepare */
} attack;

static const attack attacks[] = {
    {"none", 0, NULL, NULL}, /* the control: the honest load alone */
    {"longpoll-flood", 3, atk_longpoll, NULL},
    {"unread-answers", 1, atk_unread, prepare_unread},
    {"partial-frames", PARTIAL_THREADS, atk_partial, NULL},
    {"held-connections", 1, atk_held, NULL},
    {"connect-flood", 4, atk_connect, NULL},
    {"garbage", 3, atk_garbage, NULL},
};
#define N_ATTACKS (sizeof(attacks) / sizeof(attacks[0]))
#define MAX_RUN   64 /* attacks one run may name */

/* ---- berthd for --spawn ---- */

static spawned_berthd spawn; /* --spawn's berthd */
static pid_t spawned;        /* its pid while it is ours to stop */
static int reaped_status;    /* the wait status, once reaped */

/* Whether berthd went away: a spawned one that exited (reaped here), or
 * a pid whose status cannot be read. */
static bool berthd_gone(void)
{
    if (spawned > 0 && !atomic_load(&reaped) &&
        waitpid(spawned, &reaped_status, WNOHANG) == spawned)
        atomic_store(&reaped, true);
    return rss_kb() < 0;
}

/* How a wait status reads, or "" when there is none (not our berthd, or
 * still running). */
static const char *describe_status(char *out, size_t len)
{
    out[0] = '\0';
    if (!atomic_load(&reaped))
        return out;
    if (WIFEXITED(reaped_status))
        snprintf(out, len, "exited %d", WEXITSTATUS(reaped_status));
    else if (WIFSIGNALED(reaped_status))
        snprintf(out, len, "killed by signal %d (%s)", WTERMSIG(reaped_status),
                 strsignal(WTERMSIG(reaped_status)));
    return out;
}

/* Stops the spawned berthd (SIGTERM; SIGKILL after 30 s); false unless it
 * exited 0. */
static bool stop_berthd(void)
{
    if (spawned <= 0)
        return true;
    int status = reaped_status;
    uint64_t give_up = now_ns() + 30000000000u;
    if (!atomic_load(&reaped))
        kill(spawned, SIGTERM);
    while (!atomic_load(&reaped) && waitpid(spawned, &status, WNOHANG) == 0) {
        if (now_ns() > give_up) {
            fprintf(stderr, "berth-hostile: berthd ignored SIGTERM for 30 s: killing it\n");
            kill(spawned, SIGKILL);
            waitpid(spawned, &status, 0);
            break;
        }
        sleep_ms(20);
    }
    spawned = 0;
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean)
        fprintf(stderr, "berth-hostile: berthd did not exit cleanly (status %d)\n", status);
    spawn_cleanup(&spawn, "berth-hostile");
    return clean;
}

/* With --operate the berthd is someone else's: fetch and complete as many
 * "big" tasks as unread-answers submitted, waiting out the locks its
 * attackers took (until locks_free_ns). */
static void cleanup_big(uint64_t locks_free_ns)
{
    bc *c;
    if (big_submitted == 0 || bc_open_direct(C.operate, &c, NULL, 0) != BC_OK)
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

/* ---- one attack ---- */

typedef struct result {
    const attack *a;
    uint64_t calls, errors;        /* honest, begun during the attack or its tail */
    uint64_t submitted, completed; /* honest tasks, in the same window */
    uint64_t again;                /* of those fetched, how many with attempt > 1 */
    pct lat;
    long rss_before_kb, rss_peak_kb, rss_after_kb; /* -1: berthd gone */
    uint64_t conns, dial_fail, closed, sent;       /* the attackers' */
} result;

static void start_thread(pthread_t *th, void *(*fn)(void *), void *arg)
{
    int rv = pthread_create(th, NULL, fn, arg);
    if (rv != 0) {
        fprintf(stderr, "berth-hostile: pthread_create: %s\n", strerror(rv));
        stop_berthd();
        exit(1);
    }
}

static void run_attack(const attack *a, result *res, uint64_t *attack_end_ns)
{
    attack_name = a->name;
    atomic_store(&honest_errors_shown, 0);
    atomic_store(&atk.conns, 0);
    atomic_store(&atk.dial_fail, 0);
    atomic_store(&atk.closed, 0);
    atomic_store(&atk.sent, 0);
    *res = (result){.a = a};

    if (a->prepare != NULL) {
        fprintf(stderr, "berth-hostile: %s: preparing\n", a->name);
        if (a->prepare() != 0)
            fprintf(stderr, "berth-hostile: %s: preparation incomplete; attacking anyway\n",
                    a->name);
    }
    fprintf(stderr, "berth-hostile: %s: %.0f s attack, then %.0f s settle\n", a->name, C.seconds,
            C.settle_s);
    res->rss_before_kb = rss_kb();

    honest h[2] = {{.worker = false}, {.worker = true}};
    atomic_store(&honest_stop, false);
    atomic_store(&recording, false);
    for (int i = 0; i < 2; i++)
        start_thread(&h[i].th, h[i].worker ? honest_worker : honest_producer, &h[i]);
    sleep_ms(HONEST_WARMUP_MS);

    atomic_store(&rss_peak_kb, rss_kb());
    atomic_store(&recording, true);
    atomic_store(&attack_stop, false);
    pthread_t th[a->threads > 0 ? a->threads : 1];
    for (int i = 0; i < a->threads; i++)
        start_thread(&th[i], a->run, (void *)(intptr_t)i);
    sleep_ms((uint64_t)(C.seconds * 1000));
    atomic_store(&attack_stop, true);
    for (int i = 0; i < a->threads; i++)
        pthread_join(th[i], NULL);
    *attack_end_ns = now_ns();
    sleep_ms(HONEST_TAIL_MS);
    atomic_store(&recording, false);
    atomic_store(&honest_stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(h[i].th, NULL);
    long last = rss_kb(), peak = atomic_load(&rss_peak_kb);
    res->rss_peak_kb = last > peak ? last : peak;

    samples all = {0};
    for (int i = 0; i < 2; i++) {
        for (size_t k = 0; k < h[i].lat.n; k++)
            sample_add(&all, (uint64_t)h[i].lat.v[k] * 1000);
        res->errors += h[i].errors;
        free(h[i].lat.v);
    }
    res->calls = all.n;
    res->lat = percentiles(&all);
    free(all.v);
    res->submitted = h[0].tasks;
    res->completed = h[1].tasks;
    res->again = h[1].again;
    res->conns = atomic_load(&atk.conns);
    res->dial_fail = atomic_load(&atk.dial_fail);
    res->closed = atomic_load(&atk.closed);
    res->sent = atomic_load(&atk.sent);

    sleep_ms((uint64_t)(C.settle_s * 1000));
    res->rss_after_kb = rss_kb();
}

/* ---- report ---- */

static void print_rss_json(const char *name, long kb, bool comma)
{
    if (kb < 0)
        printf("\"%s\":null%s", name, comma ? "," : "");
    else
        printf("\"%s\":%.1f%s", name, mib(kb), comma ? "," : "");
}

/* gone_during: the attack during which berthd went away, or NULL. */
static void report(const result *res, int n, int berthd_clean, const char *gone_during)
{
    char how[96];
    describe_status(how, sizeof(how));
    if (C.json) {
        printf("{\"operate\":\"%s\",\"pid\":%d,\"seconds\":%.3f,\"settle_seconds\":%.3f,"
               "\"honest_timeout_ms\":%d,\"attacks\":[",
               C.operate, (int)C.pid, C.seconds, C.settle_s, HONEST_TIMEOUT_MS);
        for (int i = 0; i < n; i++) {
            const result *r = &res[i];
            printf("%s{\"name\":\"%s\",\"honest\":{\"calls\":%" PRIu64 ",\"errors\":%" PRIu64
                   ",\"latency_ms\":{\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
                   "\"tasks_submitted\":%" PRIu64 ",\"tasks_completed\":%" PRIu64
                   ",\"tasks_fetched_again\":%" PRIu64 "},"
                   "\"rss_mib\":{",
                   i ? "," : "", r->a->name, r->calls, r->errors, r->lat.p50, r->lat.p99,
                   r->lat.max, r->submitted, r->completed, r->again);
            print_rss_json("before", r->rss_before_kb, true);
            print_rss_json("peak", r->rss_peak_kb, true);
            print_rss_json("after", r->rss_after_kb, false);
            printf("},\"attackers\":{\"threads\":%d,\"connections\":%" PRIu64
                   ",\"dial_failures\":%" PRIu64 ",\"closed_by_berthd\":%" PRIu64
                   ",\"sent_bytes\":%" PRIu64 "}}",
                   r->a->threads, r->conns, r->dial_fail, r->closed, r->sent);
        }
        printf("]");
        if (gone_during != NULL)
            printf(",\"berthd_gone_during\":\"%s\",\"berthd_status\":\"%s\"", gone_during, how);
        if (berthd_clean >= 0)
            printf(",\"berthd_exited_cleanly\":%s", berthd_clean ? "true" : "false");
        printf("}\n");
        return;
    }
    printf("berth-hostile: berthd pid %d at %s; %.0f s per attack, %.0f s settle; honest: 1 "
           "producer, 1 worker, %d s timeout\n",
           (int)C.pid, C.operate, C.seconds, C.settle_s, HONEST_TIMEOUT_MS / 1000);
    printf("%-16s %7s %6s %9s %9s %9s %11s %7s %7s %14s  %s\n", "attack", "calls", "errors",
           "p50 ms", "p99 ms", "max ms", "RSS before", "peak", "after", "tasks s/c/a", "attackers");
    for (int i = 0; i < n; i++) {
        const result *r = &res[i];
        char rss[3][16], tasks[64];
        long kb[3] = {r->rss_before_kb, r->rss_peak_kb, r->rss_after_kb};
        for (int k = 0; k < 3; k++)
            if (kb[k] < 0)
                snprintf(rss[k], sizeof(rss[k]), "gone");
            else
                snprintf(rss[k], sizeof(rss[k]), "%.1f", mib(kb[k]));
        snprintf(tasks, sizeof(tasks), "%" PRIu64 "/%" PRIu64 "/%" PRIu64, r->submitted,
                 r->completed, r->again);
        printf("%-16s %7" PRIu64 " %6" PRIu64 " %9.3f %9.3f %9.3f %11s %7s %7s %14s  "
               "%" PRIu64 " conns, %" PRIu64 " failed, %" PRIu64 " closed, %.1f MiB sent\n",
               r->a->name, r->calls, r->errors, r->lat.p50, r->lat.p99, r->lat.max, rss[0], rss[1],
               rss[2], tasks, r->conns, r->dial_fail, r->closed, (double)r->sent / (1u << 20));
    }
    printf("RSS in MiB: before the attack, its peak, after the settle. calls, errors, latency "
           "and tasks:\nhonest, begun during the attack or the %d ms after it; tasks "
           "submitted/completed/fetched\nagain (attempt > 1: an earlier claim lapsed or was "
           "released). The producer keeps\nat most %d tasks ahead of the worker.\n",
           HONEST_TAIL_MS, HONEST_BACKLOG_MAX);
    if (gone_during != NULL)
        printf("berthd went away during %s%s%s; no attack was run after it\n", gone_during,
               how[0] ? ": " : "", how);
    else if (berthd_clean == 0)
        printf("berthd did not exit cleanly\n");
}

/* ---- main ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: berth-hostile (--operate URL --pid PID | --spawn [-- BERTHD-ARGS...])\n"
               "                     [--attack NAME[,NAME...] | --attack all] [--seconds S]\n"
               "                     [--settle S] [--json]\n"
               "attacks:");
    for (size_t i = 0; i < N_ATTACKS; i++)
        fprintf(f, " %s", attacks[i].name);
    fprintf(f, "\n");
}

static bool num(const char *s, double *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && *end == '\0';
}

/* Adds the attacks of a NAME[,NAME...] list (or "all") to order[]. */
static bool parse_attacks(const char *list, int *order, int *n)
{
    char buf[512];
    if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
        return false;
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < N_ATTACKS; i++) {
            if (strcmp(name, "all") != 0 && strcmp(name, attacks[i].name) != 0)
                continue;
            if (*n == MAX_RUN)
                return false;
            order[(*n)++] = (int)i;
            found = true;
        }
        if (!found) {
            fprintf(stderr, "berth-hostile: no attack named %s\n", name);
            return false;
        }
    }
    return true;
}

/* Resolves tcp://HOST:PORT for the attackers. */
static bool resolve(const char *url)
{
    char err[300];
    socklen_t len;
    if (bc_tcp_address(url, &target, &len, err, sizeof(err)) != BC_OK) {
        fprintf(stderr, "berth-hostile: the attackers need tcp://host:port: %s\n", err);
        return false;
    }
    target_len = len;
    return true;
}

int main(int argc, char **argv)
{
    C = (cfg){.seconds = 20, .settle_s = 60};
    int order[MAX_RUN], n_order = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d = 0;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--") == 0) {
            C.berthd_args = argv + i + 1;
            C.n_berthd_args = argc - i - 1;
            break;
        } else if (strcmp(a, "--spawn") == 0) {
            C.spawn = true;
        } else if (strcmp(a, "--json") == 0) {
            C.json = true;
        } else if (strcmp(a, "--operate") == 0 && v) {
            C.operate = v, i++;
        } else if (strcmp(a, "--attack") == 0 && v) {
            if (!parse_attacks(v, order, &n_order)) {
                usage(stderr);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--pid") == 0 && num(v, &d) && d >= 1 && d <= INT32_MAX) {
            C.pid = (pid_t)d, i++;
        } else if (strcmp(a, "--seconds") == 0 && num(v, &d) && d > 0) {
            C.seconds = d, i++;
        } else if (strcmp(a, "--settle") == 0 && num(v, &d)) {
            C.settle_s = d, i++;
        } else {
            fprintf(stderr, "berth-hostile: bad argument %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (C.spawn == (C.operate != NULL) || (C.operate != NULL) != (C.pid != 0) ||
        (C.n_berthd_args > 0 && !C.spawn)) {
        usage(stderr);
        return 2;
    }
    if (n_order == 0)
        parse_attacks("all", order, &n_order);

    /* Writes to a connection berthd closed fail with EPIPE, not a signal
     * (the client library writes with writev). */
    signal(SIGPIPE, SIG_IGN);
    /* held-connections needs thousands of descriptors; a spawned berthd
     * inherits the limit too. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)HELD_CONNS + 200) {
            held_target = rl.rlim_cur > 300 ? (int)rl.rlim_cur - 200 : 100;
            fprintf(stderr, "berth-hostile: RLIMIT_NOFILE is %llu: holding %d connections\n",
                    (unsigned long long)rl.rlim_cur, held_target);
        }
    }

    if (C.spawn) {
        int rv = spawn_berthd(&spawn, "berth-hostile", (const char *const *)C.berthd_args);
        spawned = spawn.pid;
        if (rv != 0) {
            stop_berthd();
            return 1;
        }
        C.operate = spawn.url;
        C.pid = spawned;
    }
    if (!resolve(C.operate) || rss_kb() < 0) {
        if (rss_kb() < 0)
            fprintf(stderr, "berth-hostile: cannot read /proc/%d/status\n", (int)C.pid);
        stop_berthd();
        return 1;
    }

    pthread_t samp;
    start_thread(&samp, sampler, NULL);
    result res[MAX_RUN];
    uint64_t unread_end_ns = 0;
    int ran = 0;
    const char *gone_during = NULL;
    for (int i = 0; i < n_order && gone_during == NULL; i++) {
        uint64_t end_ns;
        run_attack(&attacks[order[i]], &res[i], &end_ns);
        ran++;
        if (attacks[order[i]].run == atk_unread)
            unread_end_ns = end_ns;
        if (berthd_gone()) {
            gone_during = attacks[order[i]].name;
            fprintf(stderr, "berth-hostile: berthd went away during %s: %d attack(s) not run\n",
                    gone_during, n_order - ran);
        }
    }
    atomic_store(&sampler_stop, true);
    pthread_join(samp, NULL);

    int berthd_clean = -1; /* not ours */
    if (C.spawn) {
        berthd_clean = stop_berthd();
    } else if (unread_end_ns > 0 && gone_during == NULL) {
        cleanup_big(unread_end_ns + (uint64_t)((C.seconds + 2) * 1e9));
    }
    report(res, ran, berthd_clean, gone_during);
    return 0;
}
