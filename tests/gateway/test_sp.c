/* berthd's own tcp:// server (gateway/sp.c) against raw sockets: what an
 * nng client would never send, many requests on one connection, and
 * answers bigger than the socket takes at once. */
#define _XOPEN_SOURCE 700
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "proto/sp_wire.h"
#include "tests/support/daemon.h"

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

static int raw_connect(void)
{
    const char *colon = strrchr(D.operate, ':');
    cr_assert_not_null(colon, "%s", D.operate);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void read_all(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);
        cr_assert_gt(r, 0, "the connection ended or timed out after %zu of %zu bytes", got, n);
        got += (size_t)r;
    }
}

static void write_all(int fd, const void *p, size_t n)
{
    cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Connects and exchanges the SP headers as a REQ peer. */
static int raw_req(void)
{
    int fd = raw_connect();
    uint8_t req[SP_HEADER_LEN], rep[SP_HEADER_LEN];
    sp_header(req, SP_PROTO_REQ0);
    sp_header(rep, SP_PROTO_REP0);
    write_all(fd, req, sizeof(req));
    uint8_t got[8];
    read_all(fd, got, sizeof(got));
    cr_assert_eq(memcmp(got, rep, sizeof(rep)), 0, "berthd answers as a REP peer");
    return fd;
}

/* A frame: 64-bit length, the request id (high bit set), the body. */
static size_t frame(uint8_t *out, uint32_t id, const uint8_t *body, size_t len)
{
    uint64_t n = 4 + len;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(n >> (56 - 8 * i));
    id |= 0x80000000u;
    for (int i = 0; i < 4; i++)
        out[8 + i] = (uint8_t)(id >> (24 - 8 * i));
    memcpy(out + 12, body, len);
    return 12 + len;
}

/* Reads one answer: its request id, and its Response. */
static Berth__V1__Response *answer(int fd, uint32_t *id)
{
    uint8_t h[12];
    read_all(fd, h, sizeof(h));
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n = n << 8 | h[i];
    cr_assert_geq(n, 4);
    *id =
        ((uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11]) & 0x7fffffffu;
    uint8_t *body = malloc(n - 4 + 1);
    read_all(fd, body, n - 4);
    Berth__V1__Response *r = berth__v1__response__unpack(NULL, n - 4, body);
    free(body);
    cr_assert_not_null(r, "the answer is a Response");
    return r;
}

static size_t pack_fetch(uint8_t *out, const char *topic, uint32_t max, uint64_t wait_ms)
{
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    char *topics[] = {(char *)topic};
    f.worker_id = "raw";
    f.topics = topics;
    f.n_topics = 1;
    f.has_max_tasks = true;
    f.max_tasks = max;
    f.has_wait_ms = true;
    f.wait_ms = wait_ms;
    Berth__V1__Request r = BERTH__V1__REQUEST__INIT;
    r.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    r.fetch = &f;
    return berth__v1__request__pack(&r, out);
}

/* Writes n fetches of one task each on topic, waiting wait_ms, all at
 * once: request ids first_id, first_id + 1, ... */
static void write_long_polls(int fd, uint32_t n, const char *topic, uint32_t first_id,
                             uint64_t wait_ms)
{
    uint8_t body[128];
    size_t bl = pack_fetch(body, topic, 1, wait_ms);
    uint8_t *all = malloc(n * (12 + bl));
    size_t len = 0;
    for (uint32_t i = 0; i < n; i++)
        len += frame(all + len, first_id + i, body, bl);
    write_all(fd, all, len);
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

/* Another client is served normally. */
static void still_serving(void)
{
    bc *c = d_client(&D);
    Berth__V1__Response *r = w_submit(c, "after", "x", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    bc_close(c);
}

/* berthd closes fd (and only fd) after what was written on it. */
static void expect_only_it_closed(int fd)
{
    expect_closed(fd);
    close(fd);
    still_serving();
}

Test(sp, a_peer_that_is_not_a_req_socket_is_disconnected)
{
    int fd = raw_connect();
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    write_all(fd, http, strlen(http));
    uint8_t hello[8];
    read_all(fd, hello, sizeof(hello)); /* berthd's header went out first */
    expect_only_it_closed(fd);
}

Test(sp, a_frame_over_the_memory_bound_closes_only_its_connection)
{
    int fd = raw_req();
    uint8_t h[8] = {0, 0, 1, 0, 0, 0, 0, 0}; /* 2^40 bytes announced */
    write_all(fd, h, sizeof(h));
    expect_only_it_closed(fd);
}

Test(sp, a_frame_without_a_request_id_closes_its_connection)
{
    int fd = raw_req();
    uint8_t f[12] = {0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 1}; /* high bit clear: a hop, no id */
    write_all(fd, f, sizeof(f));
    expect_only_it_closed(fd);
}

Test(sp, garbage_in_a_well_framed_request_is_answered_with_a_status)
{
    int fd = raw_req();
    uint8_t f[64];
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    write_all(fd, f, frame(f, 7, junk, sizeof(junk)));
    uint32_t id;
    Berth__V1__Response *r = answer(fd, &id);
    cr_assert_eq(id, 7);
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    berth__v1__response__free_unpacked(r, NULL);
    close(fd);
}

Test(sp, more_requests_than_one_connection_may_have_in_flight_are_all_answered)
{
    /* 300 long polls written at once: berthd stops reading this connection
     * at SP_INFLIGHT_MAX (256) in the engine and reads on as they end. */
    enum { N = 300 };
    int fd = raw_req();
    write_long_polls(fd, N, "nothing-here", 1000, 300);
    static bool seen[N];
    for (int i = 0; i < N; i++) {
        uint32_t id;
        Berth__V1__Response *r = answer(fd, &id);
        cr_assert(id >= 1000 && id < 1000 + N, "id %u", id);
        cr_assert_not(seen[id - 1000], "answered twice: %u", id);
        seen[id - 1000] = true;
        w_expect_code(r, BERTH__V1__CODE__OK);
        cr_assert_eq(r->fetch->n_tasks, 0);
        berth__v1__response__free_unpacked(r, NULL);
    }
    close(fd);
}

Test(sp, an_answer_bigger_than_the_socket_takes_reaches_a_slow_reader_whole)
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
    int fd = raw_req();
    uint8_t body[128], f[160];
    size_t bl = pack_fetch(body, "big", TASKS, 0);
    write_all(fd, f, frame(f, 9, body, bl));
    nanosleep(&(struct timespec){.tv_nsec = 300 * 1000000L}, NULL); /* not reading yet */
    uint32_t id;
    Berth__V1__Response *r = answer(fd, &id);
    cr_assert_eq(id, 9);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->fetch->n_tasks, TASKS);
    for (int i = 0; i < TASKS; i++)
        cr_assert_eq(r->fetch->tasks[i]->payload.len, PAYLOAD);
    berth__v1__response__free_unpacked(r, NULL);
    close(fd);
    still_serving();
}

Test(sp, a_client_gone_while_its_fetch_waits_costs_nothing)
{
    int fd = raw_req();
    uint8_t body[128], f[160];
    size_t bl = pack_fetch(body, "nothing-here", 1, 200);
    write_all(fd, f, frame(f, 3, body, bl));
    close(fd);
    nanosleep(&(struct timespec){.tv_nsec = 400 * 1000000L}, NULL); /* the wait ends */
    still_serving();
}

Test(sp, a_peer_silent_past_the_header_timeout_is_closed_an_idle_one_is_not)
{
    int mute = raw_connect();    /* never sends its header */
    int partial = raw_connect(); /* sends half of it */
    int idle = raw_req();        /* a whole header, then nothing for a while */
    static const uint8_t half[4] = {0, 'S', 'P', 0};
    write_all(partial, half, sizeof(half));
    struct timeval tv = {.tv_sec = 20};
    setsockopt(mute, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(partial, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint8_t hello[8];
    read_all(mute, hello, sizeof(hello)); /* berthd's header went out at once */
    expect_closed(mute);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert_geq(waited, 9.0, "closed after %.1f s: before the 10 s timeout", waited);
    read_all(partial, hello, sizeof(hello));
    expect_closed(partial);
    close(mute);
    close(partial);

    /* The idle connection had its header in: still served. */
    uint8_t f[256], body[128];
    write_all(idle, f, frame(f, 9, body, pack_fetch(body, "sp-idle", 1, 0)));
    uint32_t id;
    Berth__V1__Response *r = answer(idle, &id);
    cr_assert_eq(id, 9);
    w_expect_code(r, BERTH__V1__CODE__OK);
    berth__v1__response__free_unpacked(r, NULL);
    close(idle);
}

static int open_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

Test(sp, a_peer_that_leaves_while_its_connection_is_paused_is_let_go_at_once)
{
    int before = open_fds(D.pid);
    /* 300 long polls of 20 s: berthd stops reading at 256 in the engine. */
    enum { N = 300 };
    int fd = raw_req();
    write_long_polls(fd, N, "paused-and-gone", 1, 20000);
    struct timespec t = {0, 200 * 1000000L};
    nanosleep(&t, NULL);
    cr_assert_eq(open_fds(D.pid), before + 1, "the connection is open while paused");
    close(fd);
    int now = before + 1;
    for (int waited = 0; waited < 3000 && now != before; waited += 50) {
        struct timespec s = {0, 50 * 1000000L};
        nanosleep(&s, NULL);
        now = open_fds(D.pid);
    }
    cr_assert_eq(now, before, "closed when its peer left, not when its 20 s polls end");
    still_serving();
}

Test(sp, a_connection_serves_small_requests_after_a_big_one)
{
    /* The input buffer grows to the big frame and is let go after it. */
    int fd = raw_req();
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
        write_all(fd, f, frame(f, 50 + k, body, bl));
        free(body);
        free(f);
        uint32_t id;
        Berth__V1__Response *r = answer(fd, &id);
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
Test(sp, a_backtrace_past_the_ttl_is_dropped_and_the_connection_goes_on)
{
    int fd = raw_req();
    uint8_t body[128], f[256];
    size_t bl = pack_fetch(body, "ttl", 1, 0);
    write_all(fd, f, frame_hops(f, 7, 1, body, bl)); /* 7 hops: answered */
    uint8_t h[8 + 32];
    read_all(fd, h, sizeof(h));
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n = n << 8 | h[i];
    cr_assert_eq(memcmp(h + 8, f + 8, 32), 0, "the whole backtrace comes back");
    uint8_t *rest = malloc(n - 32);
    read_all(fd, rest, n - 32);
    free(rest);

    write_all(fd, f, frame_hops(f, 8, 2, body, bl)); /* 8 hops: dropped */
    write_all(fd, f, frame(f, 3, body, bl));         /* the connection still serves */
    uint32_t id;
    Berth__V1__Response *r = answer(fd, &id);
    cr_assert_eq(id, 3, "the first answer is the third request's: the second was dropped");
    w_expect_code(r, BERTH__V1__CODE__OK);
    berth__v1__response__free_unpacked(r, NULL);
    close(fd);
}
