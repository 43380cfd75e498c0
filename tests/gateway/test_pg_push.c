/* Push channels across replicas of berthd on one PostgreSQL database
 * (pg/pgrelay.h): real berthd processes and a receiver this process
 * serves. Deliveries submitted through three replicas each reach the
 * receiver once, with each replica's sends in flight bounded by its own
 * --push-inflight-max; a replica killed -9 with a send in flight leaves it
 * to another once its deadline passed (at least once, under the same
 * key); a call submitted through one replica is answered by the receiver
 * and awaited through another.
 *
 * One cluster for the binary (pgtmp; its runner hooks come with
 * pgtmp_hooks.h); each test makes its own database. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"
#include "tests/support/pgtmp.h"
#include "tests/support/pgtmp_hooks.h"
#include "tests/support/receiver.h"
#include "tests/support/timing.h"

enum { REPLICAS = 3 };
static daemon_proc R[REPLICAS];
static bc *C[REPLICAS];
static char URI[256];
static PGconn *SQL;

static void teardown(void)
{
    for (int i = 0; i < REPLICAS; i++) {
        if (C[i] != NULL)
            bc_close(C[i]);
        C[i] = NULL;
        if (R[i].dir[0] != '\0')
            d_cleanup(&R[i]);
    }
    if (SQL != NULL)
        PQfinish(SQL);
    SQL = NULL;
}

TestSuite(pg_push, .fini = teardown, .timeout = 90);

/* A fresh database, n replicas on it with the extra flags, and a client
 * of each. */
static void start(const char *name, int n, const char *const *extra)
{
    char db[64], err[256];
    snprintf(db, sizeof db, "push_%s", name);
    pgtmp_createdb(db, URI, sizeof URI);
    SQL = pgtmp_connect(URI);
    for (int i = 0; i < n; i++) {
        d_start_store(&R[i], URI, extra);
        cr_assert_eq(bc_open(R[i].operate, &C[i], err, sizeof err), BC_OK, "%s", err);
    }
}

/* Deploys id through replica d: channel pushed to the receiver on port. */
static void deploy_push(const daemon_proc *d, const char *id, const char *channel, int port)
{
    char transport[64];
    snprintf(transport, sizeof transport, "nng+req://127.0.0.1:%d", port);
    d_deploy(d, id, channel, transport);
}

/* Waits up to ms for sql's count to be want; returns the last count. */
static long count_until(const char *sql, long want, int ms)
{
    long n = -1;
    for (int i = 0; i < ms / 10 && (n = pgtmp_one_long(SQL, sql)) != want; i++)
        sleep_ms(10);
    return n;
}

Test(pg_push, deliveries_through_three_replicas_reach_the_receiver_once_each_bounded_per_replica)
{
    static const char *const extra[] = {"--push-inflight-max", "2", "--push-timeout-ms", "5000",
                                        NULL};
    receiver r;
    receiver_start(&r, 0, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    r.delay_ms = 10; /* sends queue behind each answer */
    start("spread", 3, extra);
    deploy_push(&R[0], "hooks", "mail", r.port);
    enum { N = 60 };
    char *ids[N];
    long most = 0;
    for (int i = 0; i < N; i++) {
        char p[16];
        snprintf(p, sizeof p, "m%d", i);
        ids[i] = w_submit_id(C[i % REPLICAS], "mail", p);
        long now =
            pgtmp_one_long(SQL, "SELECT count(*) FROM berth.outbox WHERE flight IS NOT NULL");
        most = now > most ? now : most;
    }
    for (int i = 0; i < 2000 && pgtmp_one_long(SQL, "SELECT count(*) FROM berth.outbox") > 0; i++) {
        long now =
            pgtmp_one_long(SQL, "SELECT count(*) FROM berth.outbox WHERE flight IS NOT NULL");
        most = now > most ? now : most;
        sleep_ms(5);
    }
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.outbox"), 0, "all delivered");
    cr_assert_leq(most, 2 * REPLICAS, "in flight at once: %ld, over 2 a replica", most);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(seen_times(&r, ids[i]), 1, "delivery %d sent %d times", i,
                     seen_times(&r, ids[i]));
        free(ids[i]);
    }
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.inbox"), N,
                 "each answer counted once");
    fprintf(stderr, "pg_push: %d deliveries through 3 replicas, at most %ld in flight at once\n", N,
            most);
    receiver_stop(&r);
    for (int i = 0; i < REPLICAS; i++)
        d_stop(&R[i]);
}

Test(pg_push, a_send_in_flight_on_a_replica_killed_goes_again_from_another_after_its_deadline)
{
    static const char *const extra[] = {"--push-timeout-ms", "300", NULL};
    receiver r;
    receiver_start(&r, 0, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    atomic_store(&r.hold, true); /* the first send gets no answer */
    start("killed", 2, extra);
    deploy_push(&R[0], "hooks", "mail", r.port);
    char *id = w_submit_id(C[0], "mail", "once");
    wait_seen(&r, 1);
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.outbox WHERE flight IS NOT NULL"),
                 1, "marked in flight before it was sent");
    bc_close(C[0]);
    C[0] = NULL;
    cr_assert_eq(d_signal(&R[0], SIGKILL), 128 + SIGKILL);
    uint64_t killed = mono_ms();
    atomic_store(&r.hold, false);
    /* The other replica finds the deadline passed (300 ms and the grace)
     * at its next look, and sends it again under the same key. */
    long left = count_until("SELECT count(*) FROM berth.outbox", 0, 20000);
    cr_assert_eq(left, 0, "delivered by the replica left");
    cr_assert_eq(seen_times(&r, id), 2, "at least once: sent again, the same delivery");
    cr_assert_eq(pgtmp_one_long(SQL, "SELECT count(*) FROM berth.inbox"), 1);
    fprintf(stderr, "pg_push: sent again %llu ms after the kill\n",
            (unsigned long long)(mono_ms() - killed));
    free(id);
    receiver_stop(&r);
    d_stop(&R[1]);
}

Test(pg_push, a_call_through_one_replica_is_answered_by_the_receiver_and_awaited_through_another)
{
    receiver r;
    receiver_start(&r, 0, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    r.result = "42";
    start("call", 2, NULL);
    deploy_push(&R[1], "hooks", "ask", r.port);
    Berth__V1__CallRequest q = BERTH__V1__CALL_REQUEST__INIT;
    q.topic = "ask";
    q.has_payload = 1;
    q.payload = (ProtobufCBinaryData){2, (uint8_t *)"q?"};
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
    req.call = &q;
    Berth__V1__Response *c = w_call(C[0], &req, 0);
    w_expect_code(c, BERTH__V1__CODE__OK);
    char *id = strdup(c->call->instance_id);
    w_free(c);

    Berth__V1__AwaitCallRequest w = BERTH__V1__AWAIT_CALL_REQUEST__INIT;
    w.instance_id = id;
    w.has_wait_ms = 1;
    w.wait_ms = 10000;
    Berth__V1__Request aw = BERTH__V1__REQUEST__INIT;
    aw.method_case = BERTH__V1__REQUEST__METHOD_AWAIT_CALL;
    aw.await_call = &w;
    Berth__V1__Response *a = w_call(C[1], &aw, 15000);
    w_expect_code(a, BERTH__V1__CODE__OK);
    Berth__V1__Instance *in = a->await_call->instance;
    cr_assert_eq(in->state, BERTH__V1__INSTANCE__STATE__RESOLVED);
    cr_assert_not_null(in->result);
    cr_assert_eq(in->result->payload.len, 2);
    cr_assert_eq(memcmp(in->result->payload.data, "42", 2), 0);
    w_free(a);
    cr_assert_str_eq(r.seen[0].instance_id, id);
    free(id);
    receiver_stop(&r);
    for (int i = 0; i < 2; i++)
        d_stop(&R[i]);
}
