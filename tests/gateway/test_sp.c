#define _GNU_SOURCE /* prlimit */
/* berthd's own tcp:// server (gateway/sp.c) against raw sockets: what an
 * nng client would never send, many requests on one connection, and
 * answers bigger than the socket takes at once. */
#define _XOPEN_SOURCE 700
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
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
#include "tests/support/daemon.h"
#include "tests/support/raw.h"

static daemon_proc D;

static void setup(void)
{
    d_start(&D, NULL);
}

static void teardown(void)
{
    d_cleanup(&D);
}

TestSuite(sp, .init = setup, .fini = teardown, .timeout = 120);

static int raw_connect_d(void)
{
    return raw_connect(D.operate);
}

static int raw_req_d(void)
{
    return raw_req(D.operate);
}

/* Writes n fetches of one task each on topic, waiting wait_ms, all at
 * once: request ids first_id, first_id + 1, ... */
static void write_long_polls(int fd, uint32_t n, const char *topic, uint32_t first_id,
                             uint64_t wait_ms)
{
    uint8_t body[128];
    size_t bl = raw_pack_fetch(body, topic, 1, wait_ms);
    uint8_t *all = malloc(n * (12 + bl));
    size_t len = 0;
    for (uint32_t i = 0; i < n; i++)
        len += raw_frame(all + len, first_id + i, body, bl);
    raw_write_all(fd, all, len);
    free(all);
}

/* The peer closed the connection (recv sees its end within 10 s). */
static void expect_closed(int fd)
{
    char b[64];
    ssize_t r;
    while ((r = recv(fd, b, sizeof(b), 0)) > 0)
        ;
    cr_assert(r == 0 || (r < 0 && errno == ECONNRESET), "closed, not timed out");
}

/* Another client is served normally; on PostgreSQL, berthd still holds
 * its two database connections (its engine connection and its listener)
 * and no more, whatever the peers did. */
static void still_serving(void)
{
    bc *c = d_client(&D);
    Berth__V1__Response *r = w_submit(c, "after", "x", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    bc_close(c);
    int conns = d_store_connections(&D);
    if (conns >= 0)
        cr_assert_eq(conns, 2, "berthd holds %d database connections", conns);
}

/* berthd closes fd (and only fd) after what was written on it. */
static void expect_only_it_closed(int fd)
{
    expect_closed(fd);
    close(fd);
    still_serving();
}

DTest(sp, a_peer_that_is_not_a_req_socket_is_disconnected)
{
    int fd = raw_connect_d();
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    raw_write_all(fd, http, strlen(http));
    uint8_t hello[8];
    raw_read_all(fd, hello, sizeof(hello)); /* berthd's header went out first */
    expect_only_it_closed(fd);
}

DTest(sp, a_frame_over_the_memory_bound_closes_only_its_connection)
{
    int fd = raw_req_d();
    uint8_t h[8] = {0, 0, 1, 0, 0, 0, 0, 0}; /* 2^40 bytes announced */
    raw_write_all(fd, h, sizeof(h));
    expect_only_it_closed(fd);
}

DTest(sp, a_frame_without_a_request_id_closes_its_connection)
{
    int fd = raw_req_d();
    uint8_t f[12] = {0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 1}; /* high bit clear: a hop, no id */
    raw_write_all(fd, f, sizeof(f));
    expect_only_it_closed(fd);
}

DTest(sp, garbage_in_a_well_framed_request_is_answered_with_a_status)
{
    int fd = raw_req_d();
    uint8_t f[64];
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    raw_write_all(fd, f, raw_frame(f, 7, junk, sizeof(junk)));
    uint32_t id;
    Berth__V1__Response *r = raw_answer(fd, &id);
    cr_assert_eq(id, 7);
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    berth__v1__response__free_unpacked(r, NULL);
    close(fd);
}

DTest(sp, more_requests_than_one_connection_may_have_in_flight_are_all_answered)
{
    /* 300 long polls written at once: berthd stops reading this connection
     * at SP_INFLIGHT_MAX (256) in the engine and reads on as they end. */
    enum { N = 300 };
    int fd = raw_req_d();
    write_long_polls(fd, N, "nothing-here", 1000, 300);
    static bool seen[N];
    for (int i = 0; i < N; i++) {
        uint32_t id;
        Berth__V1__Response *r = raw_answer(fd, &id);
        cr_assert(id >= 1000 && id < 1000 + N, "id %u", id);
        cr_assert_not(seen[id - 1000], "answered twice: %u", id);
        seen[id - 1000] = true;
        w_expect_code(r, BERTH__V1__CODE__OK);
        cr_assert_eq(r->fetch->n_tasks, 0);
        berth__v1__response__free_unpacked(r, NULL);
    }
    close(fd);
}

DTest(sp, an_answer_bigger_than_the_socket_takes_reaches_a_slow_reader_whole)
{
    /* 7 MB: more than the kernel's socket buffers hold while the reader
     * sleeps, so berthd's send stops part-way and the loop finishes it. */
    enum { TASKS = 7, PAYLOAD = 1000000 };
    bc *c = d_client(&D);
    char *p = malloc(PAYLOAD + 1);
    memset(p, 'p', PAYLOAD);
    p[PAYLOAD] = '\0';
    for (int i = 0; i < TASKS; i++) {
        Berth__V1__Response *r = w_submit(c, "big", p, NULL);
        w_expect_code(r, BERTH__V1__CODE__OK);
        w_free(r);
    }
    bc_close(c);
    free(p);
    int fd = raw_req_d();
    uint8_t body[128], f[160];
    size_t bl = raw_pack_fetch(body, "big", TASKS, 0);
    raw_write_all(fd, f, raw_frame(f, 9, body, bl));
    nanosleep(&(struct timespec){.tv_nsec = 300 * 1000000L}, NULL); /* not reading yet */
    uint32_t id;
    Berth__V1__Response *r = raw_answer(fd, &id);
    cr_assert_eq(id, 9);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->fetch->n_tasks, TASKS);
    for (int i = 0; i < TASKS; i++)
        cr_assert_eq(r->fetch->tasks[i]->payload.len, PAYLOAD);
    berth__v1__response__free_unpacked(r, NULL);
    close(fd);
    still_serving();
}

DTest(sp, a_client_gone_while_its_fetch_waits_costs_nothing)
{
    int fd = raw_req_d();
    uint8_t body[128], f[160];
    size_t bl = raw_pack_fetch(body, "nothing-here", 1, 200);
    raw_write_all(fd, f, raw_frame(f, 3, body, bl));
    close(fd);
    nanosleep(&(struct timespec){.tv_nsec = 400 * 1000000L}, NULL); /* the wait ends */
    still_serving();
}

DTest(sp, a_peer_silent_past_the_header_timeout_is_closed_an_idle_one_is_not)
{
    int mute = raw_connect_d();    /* never sends its header */
    int partial = raw_connect_d(); /* sends half of it */
    int idle = raw_req_d();        /* a whole header, then nothing for a while */
    static const uint8_t half[4] = {0, 'S', 'P', 0};
    raw_write_all(partial, half, sizeof(half));
    struct timeval tv = {.tv_sec = 20};
    setsockopt(mute, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(partial, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint8_t hello[8];
    raw_read_all(mute, hello, sizeof(hello)); /* berthd's header went out at once */
    expect_closed(mute);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert_geq(waited, 9.0, "closed after %.1f s: before the 10 s timeout", waited);
    raw_read_all(partial, hello, sizeof(hello));
    expect_closed(partial);
    close(mute);
    close(partial);

    /* The idle connection had its header in: still served. */
    uint8_t f[256], body[128];
    raw_write_all(idle, f, raw_frame(f, 9, body, raw_pack_fetch(body, "sp-idle", 1, 0)));
    uint32_t id;
    Berth__V1__Response *r = raw_answer(idle, &id);
    cr_assert_eq(id, 9);
    w_expect_code(r, BERTH__V1__CODE__OK);
    berth__v1__response__free_unpacked(r, NULL);
    close(idle);
}

DTest(sp, a_peer_that_leaves_while_its_connection_is_paused_is_let_go_at_once)
{
    int before = d_open_fds(&D);
    /* 300 long polls of 20 s: berthd stops reading at 256 in the engine. */
    enum { N = 300 };
    int fd = raw_req_d();
    write_long_polls(fd, N, "paused-and-gone", 1, 20000);
    struct timespec t = {0, 200 * 1000000L};
    nanosleep(&t, NULL);
    cr_assert_eq(d_open_fds(&D), before + 1, "the connection is open while paused");
    close(fd);
    int now = before + 1;
    for (int waited = 0; waited < 3000 && now != before; waited += 50) {
        struct timespec s = {0, 50 * 1000000L};
        nanosleep(&s, NULL);
        now = d_open_fds(&D);
    }
    cr_assert_eq(now, before, "closed when its peer left, not when its 20 s polls end");
    still_serving();
}

DTest(sp, a_connection_serves_small_requests_after_a_big_one)
{
    /* The input buffer grows to the big frame and is let go after it. */
    int fd = raw_req_d();
    static uint8_t payload[200 << 10];
    memset(payload, 'b', sizeof(payload));
    const size_t sizes[] = {sizeof(payload), 10, sizeof(payload), 10};
    for (uint32_t k = 0; k < 4; k++) {
        Berth__V1__SubmitRequest sr = BERTH__V1__SUBMIT_REQUEST__INIT;
        sr.topic = "sp-big";
        sr.has_payload = 1;
        sr.payload.data = payload;
        sr.payload.len = sizes[k];
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        req.submit = &sr;
        size_t bl = berth__v1__request__get_packed_size(&req);
        uint8_t *body = malloc(bl), *f = malloc(12 + bl);
        berth__v1__request__pack(&req, body);
        raw_write_all(fd, f, raw_frame(f, 50 + k, body, bl));
        free(body);
        free(f);
        uint32_t id;
        Berth__V1__Response *r = raw_answer(fd, &id);
        cr_assert_eq(id, 50 + k);
        w_expect_code(r, BERTH__V1__CODE__OK);
        berth__v1__response__free_unpacked(r, NULL);
    }
    close(fd);
}

/* A frame whose backtrace has `hops` words before its request id. */
static size_t frame_hops(uint8_t *out, int hops, uint32_t id, const uint8_t *body, size_t len)
{
    uint64_t n = 4u * (uint64_t)(hops + 1) + len;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(n >> (56 - 8 * i));
    size_t at = 8;
    for (int h = 0; h < hops; h++, at += 4)
        memcpy(out + at, (uint8_t[]){0, 0, 0, (uint8_t)(h + 1)}, 4);
    id |= 0x80000000u;
    for (int i = 0; i < 4; i++)
        out[at + i] = (uint8_t)(id >> (24 - 8 * i));
    memcpy(out + at + 4, body, len);
    return at + 4 + len;
}

/* As nng's REP: a request whose backtrace holds up to 8 words (7 hops and
 * its id: nng's TTL of 8) is answered, the backtrace echoed; a longer one
 * is dropped unanswered, and its connection goes on. (Run against both operate
 * servers: gateway_test_sp_ttl_nng.) */
DTest(sp, a_backtrace_past_the_ttl_is_dropped_and_the_connection_goes_on)
{
    int fd = raw_req_d();
    uint8_t body[128], f[256];
    size_t bl = raw_pack_fetch(body, "ttl", 1, 0);
    raw_write_all(fd, f, frame_hops(f, 7, 1, body, bl)); /* 7 hops: answered */
    uint8_t h[8 + 32];
    raw_read_all(fd, h, sizeof(h));
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n = n << 8 | h[i];
    cr_assert_eq(memcmp(h + 8, f + 8, 32), 0, "the whole backtrace comes back");
    uint8_t *rest = malloc(n - 32);
    raw_read_all(fd, rest, n - 32);
    free(rest);

    raw_write_all(fd, f, frame_hops(f, 8, 2, body, bl)); /* 8 hops: dropped */
    raw_write_all(fd, f, raw_frame(f, 3, body, bl));     /* the connection still serves */
    uint32_t id;
    Berth__V1__Response *r = raw_answer(fd, &id);
    cr_assert_eq(id, 3, "the first answer is the third request's: the second was dropped");
    w_expect_code(r, BERTH__V1__CODE__OK);
    berth__v1__response__free_unpacked(r, NULL);
    close(fd);
}

/* ---- descriptors: connection limits, idle connections, exhaustion ---- */

static void restart_with(const char *const *extra)
{
    d_cleanup(&D);
    d_start(&D, extra);
}

/* What a new connection hears: its SP header, or the end (at once). */
typedef enum hears { HEARS_HEADER, HEARS_CLOSED, HEARS_NOTHING } hears;

static hears connect_and_listen(int *out_fd)
{
    int fd = raw_connect_d();
    uint8_t req[SP_HEADER_LEN], got[SP_HEADER_LEN];
    sp_header(req, SP_PROTO_REQ0);
    send(fd, req, sizeof(req), MSG_NOSIGNAL);
    size_t n = 0;
    ssize_t r = 1;
    while (n < sizeof(got) && (r = recv(fd, got + n, sizeof(got) - n, 0)) > 0)
        n += (size_t)r;
    if (n == sizeof(got)) {
        *out_fd = fd;
        return HEARS_HEADER;
    }
    close(fd);
    *out_fd = -1;
    return r == 0 || (r < 0 && errno == ECONNRESET) ? HEARS_CLOSED : HEARS_NOTHING;
}

DTest(sp, past_max_connections_a_new_one_is_closed_at_once_and_the_others_go_on)
{
    static const char *const extra[] = {"--max-connections", "2", NULL};
    restart_with(extra);
    int a, b, c;
    cr_assert_eq(connect_and_listen(&a), HEARS_HEADER);
    cr_assert_eq(connect_and_listen(&b), HEARS_HEADER);
    cr_assert_eq(connect_and_listen(&c), HEARS_CLOSED, "the third is closed, not kept waiting");
    raw_round_trip(a, 1);
    raw_round_trip(b, 2);
    close(a);
    struct timespec t = {0, 100 * 1000000L};
    nanosleep(&t, NULL); /* sequencing only: let berthd see a go */
    cr_assert_eq(connect_and_listen(&c), HEARS_HEADER, "room again once one left");
    raw_round_trip(c, 3);
    close(b);
    close(c);
}

DTest(sp, an_idle_connection_is_closed_and_one_waiting_on_a_long_poll_is_not)
{
    static const char *const extra[] = {"--idle-timeout-ms", "300", NULL};
    restart_with(extra);
    int idle, polling;
    cr_assert_eq(connect_and_listen(&idle), HEARS_HEADER);
    cr_assert_eq(connect_and_listen(&polling), HEARS_HEADER);
    uint8_t body[128], f[256];
    size_t bl = raw_pack_fetch(body, "slow", 1, 1500); /* five idle timeouts long */
    raw_write_all(polling, f, raw_frame(f, 9, body, bl));
    expect_closed(idle);
    close(idle);
    uint32_t id;
    Berth__V1__Response *r = raw_answer(polling, &id); /* answered at its deadline */
    cr_assert_eq(id, 9);
    w_expect_code(r, BERTH__V1__CODE__OK);
    berth__v1__response__free_unpacked(r, NULL);
    close(polling);
}

DTest(sp, out_of_descriptors_new_connections_are_closed_at_once_and_the_others_go_on)
{
    int held;
    cr_assert_eq(connect_and_listen(&held), HEARS_HEADER);
    /* berthd may open four more descriptors, no more. */
    struct rlimit before, low;
    cr_assert_eq(prlimit(D.pid, RLIMIT_NOFILE, NULL, &before), 0);
    low.rlim_cur = (rlim_t)d_open_fds(&D) + 4;
    low.rlim_max = before.rlim_max; /* (raising a hard limit back needs a privilege) */
    cr_assert_eq(prlimit(D.pid, RLIMIT_NOFILE, &low, NULL), 0);
    int fds[24], served = 0, closed = 0;
    for (int i = 0; i < 24; i++) {
        hears h = connect_and_listen(&fds[i]);
        cr_assert_neq(h, HEARS_NOTHING, "connection %d was left hanging", i);
        served += h == HEARS_HEADER;
        closed += h == HEARS_CLOSED;
        raw_round_trip(held, 100 + (uint32_t)i); /* the one already open is served */
    }
    cr_assert_gt(closed, 0, "the limit was reached");
    for (int i = 0; i < 24; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    cr_assert_eq(prlimit(D.pid, RLIMIT_NOFILE, &before, NULL), 0);
    raw_round_trip(held, 200);
    close(held);
    still_serving();
    (void)served;
}

DTest(sp, a_frame_begun_must_be_in_whole_in_time_however_slowly_it_trickles)
{
    static const char *const extra[] = {"--frame-timeout-ms", "300", NULL};
    restart_with(extra);
    /* A request sent in two halves 100 ms apart is served. */
    int ok = raw_req_d();
    uint8_t body[128], f[256];
    size_t bl = raw_pack_fetch(body, "slow", 1, 0), fl = raw_frame(f, 5, body, bl);
    raw_write_all(ok, f, fl / 2);
    struct timespec t = {0, 100 * 1000000L};
    nanosleep(&t, NULL);
    raw_write_all(ok, f + fl / 2, fl - fl / 2);
    uint32_t id;
    Berth__V1__Response *r = raw_answer(ok, &id);
    cr_assert_eq(id, 5);
    berth__v1__response__free_unpacked(r, NULL);

    /* One that trickles a byte every 50 ms never gets its frame in: each
     * byte is news, but the frame's deadline runs from its first. */
    int slow = raw_req_d();
    bool closed = false;
    for (size_t i = 0; i < fl && !closed; i++) {
        closed = send(slow, f + i, 1, MSG_NOSIGNAL) != 1;
        struct timespec tick = {0, 50 * 1000000L};
        nanosleep(&tick, NULL);
    }
    if (!closed)
        expect_closed(slow);
    close(slow);
    raw_round_trip(ok, 6); /* the well-behaved one goes on */
    close(ok);
}

/* berthd's resident memory, in bytes. */
static size_t rss_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t kb = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %zu kB", &kb) == 1)
            break;
    fclose(f);
    return kb << 10;
}

/* Sends what the socket takes of p within ~200 ms; returns how much. */
static size_t send_some(int fd, const uint8_t *p, size_t n)
{
    size_t sent = 0;
    for (int idle = 0; sent < n && idle < 20;) {
        ssize_t w = send(fd, p + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            sent += (size_t)w;
            idle = 0;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            idle++;
            nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
        } else {
            break; /* closed */
        }
    }
    return sent;
}

DTest(sp, partial_frames_past_the_memory_budget_are_not_read_and_others_are_served)
{
    static const char *const extra[] = {"--buffers-max-bytes", "33554432", "--frame-timeout-ms",
                                        "3000", NULL};
    restart_with(extra);
    still_serving();
    size_t base = rss_of(D.pid);
    /* Twelve peers each begin a 16 MiB request and stop 1 byte short:
     * 192 MiB if berthd read it all. */
    enum { PEERS = 12, FRAME = 16 << 20 };
    uint8_t *frame = calloc(1, 8 + FRAME);
    for (int i = 0; i < 8; i++)
        frame[i] = (uint8_t)((uint64_t)FRAME >> (56 - 8 * i));
    int fds[PEERS];
    size_t offered = 0;
    for (int i = 0; i < PEERS; i++) {
        fds[i] = raw_req_d();
        offered += send_some(fds[i], frame, 8 + FRAME - 1);
        still_serving(); /* a peer holding little is served throughout */
    }
    size_t peak = rss_of(D.pid);
    cr_assert_lt(peak - base, (size_t)(96u << 20),
                 "RSS grew by %zu MiB under %zu MiB of partial frames (budget 32 MiB)",
                 (peak - base) >> 20, offered >> 20);
    cr_assert_lt(offered, (size_t)PEERS * (8 + FRAME - 1), "berthd read it all");
    /* They are closed at their frame deadline, however little was read. */
    for (int i = 0; i < PEERS; i++) {
        expect_closed(fds[i]);
        close(fds[i]);
    }
    free(frame);
    still_serving();
}

DTest(sp, a_peer_that_leaves_its_answers_unread_past_its_share_is_closed)
{
    static const char *const extra[] = {"--buffers-max-bytes", "33554432", NULL};
    restart_with(extra);
    /* 48 tasks of 1 MiB. */
    bc *c = d_client(&D);
    static char payload[1 << 20];
    memset(payload, 'b', sizeof(payload) - 1);
    for (int i = 0; i < 48; i++) {
        Berth__V1__Response *r = w_submit(c, "big", payload, NULL);
        w_expect_code(r, BERTH__V1__CODE__OK);
        w_free(r);
    }
    /* One peer asks for all of them, one at a time, and reads nothing. */
    int fd = raw_req_d();
    write_long_polls(fd, 48, "big", 1, 0);
    struct timespec t = {2, 0};
    nanosleep(&t, NULL); /* sequencing only: berthd answers before the peer reads */
    /* Its answers pass the budget: it is closed, having had fewer than
     * all (what it had, it can still read: the socket's buffers). */
    uint32_t answers = 0;
    for (;;) {
        uint8_t h[8];
        ssize_t r = recv(fd, h, sizeof(h), MSG_WAITALL);
        if (r != (ssize_t)sizeof(h))
            break;
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | h[i];
        uint8_t *body = malloc(len);
        r = recv(fd, body, len, MSG_WAITALL);
        free(body);
        if (r != (ssize_t)len)
            break;
        answers++;
    }
    cr_assert_lt(answers, 48, "all %u answers were kept for a peer that did not read", answers);
    close(fd);
    Berth__V1__Response *r = w_submit(c, "after", "x", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    bc_close(c);
}

DTest(sp, fetches_from_a_peer_that_has_hung_up_claim_nothing)
{
    bc *c = d_client(&D);
    Berth__V1__Response *r = w_submit(c, "gone", "for an honest worker", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    /* Sixteen fetches and the hang-up reach berthd together: it is
     * stopped while the peer writes and closes. */
    int fd = raw_req_d();
    raw_round_trip(fd, 99); /* berthd is done with its header: nothing of it is pending */
    cr_assert_eq(kill(D.pid, SIGSTOP), 0);
    int status;
    cr_assert_eq(waitpid(D.pid, &status, WUNTRACED), D.pid); /* stopped, every thread */
    cr_assert(WIFSTOPPED(status));
    write_long_polls(fd, 16, "gone", 1, 30000);
    close(fd);
    cr_assert_eq(kill(D.pid, SIGCONT), 0);
    struct timespec t = {0, 200 * 1000000L};
    nanosleep(&t, NULL); /* sequencing only: berthd reads them first */
    Berth__V1__Response *f = w_fetch(c, "w", "gone", 1, 0, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, 1, "the task was claimed for a peer that had gone");
    cr_assert_eq(f->fetch->tasks[0]->attempt, 1);
    w_free(f);
    bc_close(c);
}
