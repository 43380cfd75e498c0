/* Push channels over real sockets: berthd dials a REP receiver that this
 * process serves, and its answers drive deliveries and calls. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>

#include "berth/v1/push.pb-c.h"
#include "proto/sp_wire.h"
#include "tests/support/daemon.h"
#include "tests/support/raw.h"
#include "tests/support/receiver.h"

static daemon_proc D;
static bc *C, *A; /* operate, admin */

static void setup(void)
{
    static const char *const extra[] = {"--push-timeout-ms",
                                        "1000",
                                        "--delivery-attempts",
                                        "3",
                                        "--delivery-backoff-initial-ms",
                                        "100",
                                        "--delivery-backoff-max-ms",
                                        "200",
                                        NULL};
    d_start(&D, extra);
    C = d_client(&D);
    char err[256];
    cr_assert_eq(bc_open(D.admin, &A, err, sizeof(err)), BC_OK, "%s", err);
}

static void teardown(void)
{
    bc_close(C);
    bc_close(A);
    d_cleanup(&D);
}

TestSuite(push, .init = setup, .fini = teardown, .timeout = 120);

/* ---- admin ---- */

static Berth__V1__AdminResponse *admin(Berth__V1__AdminRequest *req)
{
    Berth__V1__AdminResponse *r = NULL;
    cr_assert_eq(bc_admin_call(A, req, NULL, 0, 10000, &r), BC_OK);
    cr_assert_not_null(r->status);
    return r;
}

/* Deploys id with channel pushed to a receiver on port of loopback. */
static void deploy(const char *id, const char *channel, int port)
{
    char transport[64];
    snprintf(transport, sizeof(transport), "nng+req://127.0.0.1:%d", port);
    d_deploy(&D, id, channel, transport);
}

static uint64_t outbox_pending(void)
{
    Berth__V1__StatsRequest s = BERTH__V1__STATS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_STATS;
    req.stats = &s;
    Berth__V1__AdminResponse *r = admin(&req);
    uint64_t n = r->stats->outbox_pending;
    berth__v1__admin_response__free_unpacked(r, NULL);
    return n;
}

static void wait_outbox_empty(void)
{
    for (int i = 0; i < 500 && outbox_pending() > 0; i++) {
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
    cr_assert_eq(outbox_pending(), 0);
}

/* ---- tests ---- */

DTest(push, a_delivery_retried_then_delivered_carries_its_key_each_time)
{
    receiver r;
    receiver_start(&r, 0, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    atomic_store(&r.retries, 1);
    deploy("hooks", "mail", r.port);
    char *id = w_submit_id(C, "mail", "hello");
    wait_seen(&r, 2);
    wait_outbox_empty();
    cr_assert_str_eq(r.seen[0].id, id);
    cr_assert_str_eq(r.seen[0].key, id, "the idempotency key is the delivery's id");
    cr_assert_str_eq(r.seen[1].key, id);
    cr_assert_str_eq(r.seen[0].payload, "hello");
    cr_assert_eq(r.seen[0].attempt, 1);
    cr_assert_eq(r.seen[1].attempt, 2);
    receiver_stop(&r);
    free(id);
}

DTest(push, a_receiver_that_is_down_poisons_the_delivery_and_an_operator_retries_it)
{
    /* A port nobody listens on: take one, then let it go. */
    receiver probe;
    receiver_start(&probe, 0, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    int port = probe.port;
    receiver_stop(&probe);
    nng_close(probe.sock); /* nothing was ever sent to it */
    int ev = raw_sub(D.events);
    struct timespec pause = {0, 200 * 1000000L};
    nanosleep(&pause, NULL);
    deploy("hooks", "late", port);
    char *id = w_submit_id(C, "late", "p");
    /* Three attempts of 1 s each without an answer, 100 and 200 ms apart. */
    size_t n;
    uint8_t *m = raw_event(ev, "delivery.poisoned.", &n);
    cr_assert_str_eq((const char *)m, "delivery.poisoned.late");
    free(m);
    close(ev);

    receiver r;
    receiver_start(&r, port, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    /* (Retried at once: the delivery waits for berthd's redial, which
     * backs off up to 5 s, rather than spend its attempt on it.) */
    Berth__V1__RetryDeliveryRequest rd = BERTH__V1__RETRY_DELIVERY_REQUEST__INIT;
    rd.id = id;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_DELIVERY;
    req.retry_delivery = &rd;
    Berth__V1__AdminResponse *a = admin(&req);
    cr_assert_eq(a->status->code, BERTH__V1__CODE__OK, "%s", a->status->message);
    berth__v1__admin_response__free_unpacked(a, NULL);
    wait_seen(&r, 1);
    wait_outbox_empty();
    cr_assert_str_eq(r.seen[0].id, id);
    receiver_stop(&r);
    free(id);
}

DTest(push, a_call_is_resolved_by_the_receiver_s_result)
{
    receiver r;
    receiver_start(&r, 0, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    r.result = "42";
    deploy("hooks", "ask", r.port);
    Berth__V1__CallRequest c = BERTH__V1__CALL_REQUEST__INIT;
    c.topic = "ask";
    c.has_payload = 1;
    c.payload.data = (uint8_t *)"6*7?";
    c.payload.len = 4;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
    req.call = &c;
    Berth__V1__Response *resp = w_call(C, &req, 0);
    w_expect_code(resp, BERTH__V1__CODE__OK);
    char *id = strdup(resp->call->instance_id);
    w_free(resp);
    Berth__V1__AwaitCallRequest w = BERTH__V1__AWAIT_CALL_REQUEST__INIT;
    w.instance_id = id;
    w.has_wait_ms = 1;
    w.wait_ms = 10000;
    req.method_case = BERTH__V1__REQUEST__METHOD_AWAIT_CALL;
    req.await_call = &w;
    resp = w_call(C, &req, 20000);
    w_expect_code(resp, BERTH__V1__CODE__OK);
    cr_assert_eq(resp->await_call->instance->state, BERTH__V1__INSTANCE__STATE__RESOLVED);
    cr_assert_eq(resp->await_call->instance->result->payload.len, 2);
    cr_assert_eq(memcmp(resp->await_call->instance->result->payload.data, "42", 2), 0);
    w_free(resp);
    cr_assert_str_eq(r.seen[0].instance_id, id);
    receiver_stop(&r);
    free(id);
}

DTest(push, retire_drains_what_is_in_flight_then_retires_with_the_event)
{
    receiver r;
    receiver_start(&r, 0, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    r.delay_ms = 500; /* each answer takes half a second */
    int ev = raw_sub(D.events);
    struct timespec pause = {0, 200 * 1000000L};
    nanosleep(&pause, NULL);
    deploy("hooks", "slow", r.port);
    free(w_submit_id(C, "slow", "p"));
    wait_seen(&r, 1);
    Berth__V1__RetireRequest rt = BERTH__V1__RETIRE_REQUEST__INIT;
    rt.id = "hooks";
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETIRE;
    req.retire = &rt;
    Berth__V1__AdminResponse *a = admin(&req);
    cr_assert_eq(a->status->code, BERTH__V1__CODE__OK);
    cr_assert_eq(a->retire->deployment->state, BERTH__V1__DEPLOYMENT__STATE__DRAINING,
                 "a delivery in flight holds it");
    berth__v1__admin_response__free_unpacked(a, NULL);
    size_t n;
    uint8_t *m = raw_event(ev, "deployment.retired.", &n);
    cr_assert_str_eq((const char *)m, "deployment.retired.hooks");
    free(m);
    close(ev);
    receiver_stop(&r);
}

DTest(push, a_receiver_that_cannot_be_dialled_says_why)
{
    Berth__V1__ChannelDecl c = BERTH__V1__CHANNEL_DECL__INIT, *cs[] = {&c};
    c.name = "nowhere";
    c.transport = "nng+req://no-port-given";
    Berth__V1__DeployRequest d = BERTH__V1__DEPLOY_REQUEST__INIT;
    d.id = "bad";
    d.channels = cs;
    d.n_channels = 1;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DEPLOY;
    req.deploy = &d;
    Berth__V1__AdminResponse *r = admin(&req);
    cr_assert_eq(r->status->code, BERTH__V1__CODE__OK);
    berth__v1__admin_response__free_unpacked(r, NULL);
    free(w_submit_id(C, "nowhere", "p"));
    /* Three attempts, answered at once, 100 and 200 ms apart: poisoned. */
    Berth__V1__ListIncidentsRequest li = BERTH__V1__LIST_INCIDENTS_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_INCIDENTS;
    req.list_incidents = &li;
    for (int i = 0; i < 300; i++) {
        r = admin(&req);
        if (r->list_incidents->n_incidents > 0)
            break;
        berth__v1__admin_response__free_unpacked(r, NULL);
        r = NULL;
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
    cr_assert_not_null(r, "the delivery was not poisoned");
    const Berth__V1__Incident *in = r->list_incidents->incidents[0];
    cr_assert_eq(in->kind, BERTH__V1__INCIDENT__KIND__DELIVERY_POISONED);
    cr_assert(strstr(in->error->message, "cannot dial") != NULL, "%s", in->error->message);
    berth__v1__admin_response__free_unpacked(r, NULL);
}

DTest(push, receivers_over_ipc_and_over_tls_with_a_verified_certificate)
{
    /* ipc */
    char path[64], url[96], transport[128];
    snprintf(path, sizeof(path), "/tmp/berth-push-%d.sock", (int)getpid());
    snprintf(url, sizeof(url), "ipc://%s", path);
    receiver ipc;
    receiver_start_at(&ipc, url, NULL, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    snprintf(transport, sizeof(transport), "nng+req+ipc://%s", path);
    d_deploy(&D, "local", "by-ipc", transport);
    free(w_submit_id(C, "by-ipc", "over ipc"));
    wait_seen(&ipc, 1);
    cr_assert_str_eq(ipc.seen[0].payload, "over ipc");
    receiver_stop(&ipc);

    /* tls: berthd checks the receiver's certificate against --push-tls-ca */
    char dir[] = "/tmp/berth-push-tls-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[1024], cert[96], key[96], both[96];
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(both, sizeof(both), "%s/both.pem", dir);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
             "-addext subjectAltName=DNS:localhost -keyout %s -out %s >/dev/null 2>&1 && "
             "cat %s %s > %s",
             key, cert, cert, key, both);
    cr_assert_eq(system(cmd), 0, "openssl could not make a test certificate");
    bc_close(C);
    bc_close(A);
    d_cleanup(&D);
    d_start(&D, (const char *const[]){"--push-tls-ca", cert, "--push-timeout-ms", "500",
                                      "--delivery-attempts", "2", "--delivery-backoff-initial-ms",
                                      "100", "--delivery-backoff-max-ms", "100", NULL});
    C = d_client(&D);
    char err[256];
    cr_assert_eq(bc_open(D.admin, &A, err, sizeof(err)), BC_OK, "%s", err);
    nng_tls_config *tls;
    cr_assert_eq(nng_tls_config_alloc(&tls, NNG_TLS_MODE_SERVER), 0);
    cr_assert_eq(nng_tls_config_cert_key_file(tls, both, NULL), 0);
    receiver sec;
    receiver_start_at(&sec, "tls+tcp://127.0.0.1:0", tls,
                      BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    snprintf(transport, sizeof(transport), "nng+req+tls://localhost:%d", sec.port);
    d_deploy(&D, "secure", "by-tls", transport);
    free(w_submit_id(C, "by-tls", "over tls"));
    wait_seen(&sec, 1);
    cr_assert_str_eq(sec.seen[0].payload, "over tls");
    wait_outbox_empty();
    /* The same receiver by its address: the certificate (for localhost)
     * does not name 127.0.0.1, so nothing reaches it, and the delivery is
     * poisoned after its two attempts. */
    snprintf(transport, sizeof(transport), "nng+req+tls://127.0.0.1:%d", sec.port);
    d_deploy(&D, "by-address", "by-ip", transport);
    free(w_submit_id(C, "by-ip", "not to an unverified name"));
    Berth__V1__ListIncidentsRequest li = BERTH__V1__LIST_INCIDENTS_REQUEST__INIT;
    Berth__V1__AdminRequest lreq = BERTH__V1__ADMIN_REQUEST__INIT;
    lreq.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_INCIDENTS;
    lreq.list_incidents = &li;
    Berth__V1__AdminResponse *lr = NULL;
    for (int i = 0; i < 1000 && lr == NULL; i++) {
        lr = admin(&lreq);
        if (lr->list_incidents->n_incidents == 0) {
            berth__v1__admin_response__free_unpacked(lr, NULL);
            lr = NULL;
            struct timespec t = {0, 10 * 1000000L};
            nanosleep(&t, NULL);
        }
    }
    cr_assert_not_null(lr, "the delivery to an unverified name was not poisoned");
    berth__v1__admin_response__free_unpacked(lr, NULL);
    cr_assert_eq(seen_count(&sec), 1, "a delivery went to a receiver whose name was not verified");
    receiver_stop(&sec);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", dir, path);
    cr_assert_eq(system(cmd), 0);
}

/* ---- receivers that misbehave, on plain sockets ---- */

typedef enum {
    RAW_RESET,  /* reads three deliveries, answers a length and resets */
    RAW_SILENT, /* never sends its SP header; holds each connection */
    RAW_DEAF,   /* sends its SP header, then reads nothing */
} raw_mode;

typedef struct resetter {
    raw_mode mode;
    int lfd, port;
    atomic_bool stop;
    atomic_int conns;
    atomic_bool peer_closed; /* (RAW_DEAF) berthd ended the connection */
    pthread_t th;
} resetter;

static bool recv_all(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* RAW_SILENT and RAW_DEAF: accepts and holds each connection until
 * berthd ends it (seen with POLLRDHUP, nothing read) or the test stops. */
static void *holder_main(void *arg)
{
    resetter *r = arg;
    struct pollfd pf[17] = {{.fd = r->lfd, .events = POLLIN}};
    nfds_t n = 1;
    while (!atomic_load(&r->stop)) {
        if (poll(pf, n, 100) <= 0)
            continue;
        for (nfds_t i = n - 1; i >= 1; i--) {
            if (pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
                atomic_store(&r->peer_closed, true);
                close(pf[i].fd);
                pf[i] = pf[--n];
            }
        }
        if (!(pf[0].revents & POLLIN))
            continue;
        int fd = accept(r->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&r->conns, 1);
        if (r->mode == RAW_DEAF) {
            uint8_t head[SP_HEADER_LEN];
            sp_header(head, SP_PROTO_REP0);
            (void)!send(fd, head, sizeof(head), MSG_NOSIGNAL);
        }
        if (n < sizeof(pf) / sizeof(pf[0]))
            pf[n++] = (struct pollfd){.fd = fd, .events = POLLRDHUP};
        else
            close(fd);
    }
    for (nfds_t i = 1; i < n; i++)
        close(pf[i].fd);
    return NULL;
}

/* RAW_RESET, each connection: the SP headers, three deliveries read, then
 * an answer's length and backtrace without its body, and a reset. */
static void *resetter_main(void *arg)
{
    resetter *r = arg;
    while (!atomic_load(&r->stop)) {
        struct pollfd pf = {.fd = r->lfd, .events = POLLIN};
        if (poll(&pf, 1, 100) != 1)
            continue;
        int fd = accept(r->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        struct timeval tv = {.tv_sec = 2};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        uint8_t head[SP_HEADER_LEN], bt[4] = {0};
        sp_header(head, SP_PROTO_REP0);
        bool ok = send(fd, head, sizeof(head), MSG_NOSIGNAL) == (ssize_t)sizeof(head) &&
                  recv_all(fd, head, sizeof(head));
        for (int i = 0; ok && i < 3; i++) {
            uint8_t len[8];
            ok = recv_all(fd, len, sizeof(len));
            uint64_t n = 0;
            for (int k = 0; ok && k < 8; k++)
                n = n << 8 | len[k];
            uint8_t *body = ok && n >= 4 && n < (1u << 20) ? malloc(n) : NULL;
            ok = body != NULL && recv_all(fd, body, n);
            if (ok)
                memcpy(bt, body, 4);
            free(body);
        }
        if (ok) {
            uint8_t answer[12] = {0, 0, 0, 0, 0, 0, 0, 100};
            memcpy(answer + 8, bt, 4);
            (void)!send(fd, answer, sizeof(answer), MSG_NOSIGNAL);
        }
        struct linger reset = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        close(fd);
        atomic_fetch_add(&r->conns, 1);
    }
    return NULL;
}

/* A push receiver that resets connections with answers in flight. With
 * nng 1.5.2's REQ socket as the sender, this left nng unable to free a
 * closed connection again (its one reaper waits for good; BENCHMARKS.md
 * "Hostile clients"): its dialer never dialled the receiver again, closed
 * connections kept their descriptors, and nng's HTTP server waited for
 * that reaper at SIGTERM, so with /metrics scraped meanwhile berthd never
 * exited. berth's own sender dials again each time, keeps no descriptor,
 * and berthd stops, exiting 0. */
/* A raw receiver on a port of loopback, served by a thread. */
static void raw_start(resetter *r, raw_mode mode)
{
    memset(r, 0, sizeof(*r));
    r->mode = mode;
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    cr_assert_eq(bind(r->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(r->lfd, 64), 0);
    cr_assert_eq(getsockname(r->lfd, (struct sockaddr *)&a, &al), 0);
    r->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&r->th, NULL, mode == RAW_RESET ? resetter_main : holder_main, r),
                 0);
}

static void raw_stop(resetter *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->th, NULL);
    close(r->lfd);
}

DTest(push, berthd_stops_in_bounded_time_after_a_receiver_resets_with_answers_in_flight)
{
    resetter r;
    raw_start(&r, RAW_RESET);
    deploy("hooks", "resets", r.port);
    for (int i = 0; i < 2000; i++)
        free(w_submit_id(C, "resets", "x"));
    int before = d_open_fds(&D);
    for (int i = 0; i < 600 && atomic_load(&r.conns) < 20; i++)
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    cr_assert_geq(atomic_load(&r.conns), 20, "berthd stopped dialling the receiver after %d",
                  atomic_load(&r.conns));
    /* A scrape: one connection nng's HTTP server must let go of at close. */
    int m = raw_connect(D.metrics);
    static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    raw_write_all(m, get, sizeof(get) - 1);
    char buf[4096];
    ssize_t n, total = 0;
    while ((n = recv(m, buf, sizeof(buf), 0)) > 0)
        total += n;
    cr_assert_gt(total, 0, "no answer from /metrics");
    close(m);
    raw_stop(&r);
    /* (at most one connection of berthd's is open or on its way) */
    int now = d_open_fds(&D);
    for (int i = 0; i < 100 && now > before + 1; i++) {
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
        now = d_open_fds(&D);
    }
    cr_assert_leq(now, before + 1, "%d descriptors kept after %d connections", now - before,
                  atomic_load(&r.conns));
    d_stop(&D); /* SIGTERM: exit 0 within 15 s */
}

/* A receiver that accepts and never sends its SP header: berthd gives the
 * connection 10 s, then lets it go, and the next delivery dials again
 * (before, every later delivery waited on that connection for good). */
DTest(push, a_receiver_that_never_sends_its_header_is_dialled_again)
{
    resetter r;
    raw_start(&r, RAW_SILENT);
    deploy("hooks", "silent", r.port);
    free(w_submit_id(C, "silent", "first"));
    for (int i = 0; i < 100 && atomic_load(&r.conns) < 1; i++)
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    cr_assert_eq(atomic_load(&r.conns), 1);
    for (int i = 0; i < 300 && !atomic_load(&r.peer_closed); i++)
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    cr_assert(atomic_load(&r.peer_closed), "berthd kept a connection that never said it was SP");
    free(w_submit_id(C, "silent", "second"));
    for (int i = 0; i < 100 && atomic_load(&r.conns) < 2; i++)
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    cr_assert_eq(atomic_load(&r.conns), 2, "berthd did not dial the receiver again");
    raw_stop(&r);
}

/* A receiver that takes the connection and reads nothing: berthd queues
 * what the socket does not take up to a bound (64 MiB, or 4 messages of
 * max-message-bytes), then ends the connection and dials again, rather
 * than grow for
 * every attempt of every delivery. */
DTest(push, a_receiver_that_reads_nothing_is_let_go_at_a_bound)
{
    resetter r;
    raw_start(&r, RAW_DEAF);
    deploy("hooks", "deaf", r.port);
    static char big[600 * 1024];
    memset(big, 'x', sizeof(big) - 1);
    /* 64 in flight, a second a try, three tries: ~200 frames of 600 KB. */
    for (int i = 0; i < 70; i++)
        free(w_submit_id(C, "deaf", big));
    /* Its end cannot reach a peer that reads nothing (the FIN waits behind
     * the unread bytes): the sign is berthd dialling again. */
    for (int i = 0; i < 600 && atomic_load(&r.conns) < 2; i++)
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    cr_assert_geq(atomic_load(&r.conns), 2,
                  "berthd kept queueing for a receiver that reads nothing");
    raw_stop(&r);
}
