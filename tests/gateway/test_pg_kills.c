/* Three replicas on one PostgreSQL database under mixed load (submits,
 * fetches and completions, calls and their answers, deliveries to a push
 * receiver this process serves), one replica killed
 * -9 and started again every few seconds, round the three. Clients go to
 * another replica when theirs fails, as an application would: a submit
 * or call is retried under its idempotency key until it is answered, a
 * completion that got no answer is not retried (its task comes back when
 * the lock runs out, if it was not kept).
 *
 * Afterwards: every acknowledged submit was completed (or its completion
 * was cut off by a kill and may have been kept), no task was offered
 * after its completion was acknowledged, none was completed twice, a
 * completion refused came only after its lock ran out, and every
 * acknowledged call resolved with its own result, and every acknowledged
 * push delivery reached the receiver and left the outbox. Re-offers (a
 * lock that ran out under a worker whose replica died, or whose fetch
 * answer the kill cut off) and deliveries sent again (a send in flight on
 * a replica killed, or whose answer the kill cut off: at least once,
 * under the same key) are counted, never an error; sends again are at
 * most what the killed replicas may have had in flight.
 *
 * BERTH_SOAK_SECONDS (20) and BERTH_SOAK_KILL_EVERY_S (4) set the run;
 * BENCHMARKS.md's ten-minute run is 600 and 60. The figures go to stderr
 * as one "soak:" line. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"
#include "tests/support/pgtmp.h"
#include "tests/support/pgtmp_hooks.h"
#include "tests/support/receiver.h"
#include "tests/support/timing.h"

enum {
    REPLICAS = 3,
    PRODUCERS = 2,
    WORKERS = 3,
    CALLERS = 1,
    ANSWERERS = 1,
    PUSHERS = 1,
    MAX_TASKS = 1 << 21,
    MAX_CALLS = 1 << 19,
    MAX_PUSHES = 1 << 20,
    LOCK_MS = 3000,
    PUSH_TIMEOUT_MS = 2000,
    PUSH_INFLIGHT = 64, /* berthd's default --push-inflight-max */
};

static daemon_proc R[REPLICAS];
static char URI[256];

static void teardown(void)
{
    for (int i = 0; i < REPLICAS; i++)
        if (R[i].dir[0] != '\0')
            d_cleanup(&R[i]);
}

TestSuite(pg_kills, .fini = teardown, .timeout = 1200);

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v != NULL && atol(v) > 0 ? atol(v) : dflt;
}

/* ---- which replicas serve, and where (a restart takes new ports) ---- */

typedef struct replica {
    pthread_mutex_t mu;
    bool up;
    unsigned gen;
    char url[128];
} replica;

static replica UP[REPLICAS];

/* A client thread's connections: one per replica, opened again when that
 * replica was restarted; `at` is the one it uses now. Direct connections
 * (SP over TCP, blocking): a killed replica's calls fail at once, where
 * nng's REQ would wait out its timeout for a pipe to come back. */
typedef struct links {
    bc *c[REPLICAS];
    unsigned gen[REPLICAS];
    int at;
} links;

/* The client to use now, or NULL (that replica is down: try the next). */
static bc *link_get(links *l)
{
    int k = l->at;
    char url[128];
    pthread_mutex_lock(&UP[k].mu);
    bool up = UP[k].up, stale = l->c[k] == NULL || l->gen[k] != UP[k].gen;
    snprintf(url, sizeof url, "%s", UP[k].url);
    unsigned gen = UP[k].gen;
    pthread_mutex_unlock(&UP[k].mu);
    if (!up) {
        l->at = (k + 1) % REPLICAS;
        return NULL;
    }
    if (stale) {
        if (l->c[k] != NULL)
            bc_close(l->c[k]);
        l->c[k] = NULL;
        char err[256];
        if (bc_open_direct(url, &l->c[k], err, sizeof err) != BC_OK) {
            l->c[k] = NULL;
            l->at = (k + 1) % REPLICAS;
            return NULL;
        }
        l->gen[k] = gen;
    }
    return l->c[k];
}

/* Its replica failed it: the next one, after a breath. */
static void link_fail(links *l)
{
    l->at = (l->at + 1) % REPLICAS;
    sleep_ms(20);
}

static void link_close(links *l)
{
    for (int k = 0; k < REPLICAS; k++)
        if (l->c[k] != NULL)
            bc_close(l->c[k]);
}

/* The request's answer when it is one (OK or a refusal), NULL when the
 * transport failed or the replica was unavailable: try elsewhere. */
static Berth__V1__Response *ask(links *l, Berth__V1__Request *req, int timeout_ms)
{
    bc *c = link_get(l);
    if (c == NULL)
        return NULL;
    Berth__V1__Response *r = NULL;
    if (bc_call(c, req, timeout_ms, &r) != BC_OK || r == NULL || r->status == NULL) {
        if (r != NULL)
            berth__v1__response__free_unpacked(r, NULL);
        link_fail(l);
        return NULL;
    }
    if (r->status->code == BERTH__V1__CODE__UNAVAILABLE) {
        berth__v1__response__free_unpacked(r, NULL);
        link_fail(l);
        return NULL;
    }
    return r;
}

/* ---- the ledger ---- */

typedef struct ledger {
    pthread_mutex_t mu;
    int sent;
    bool acked[MAX_TASKS];
    uint8_t completed[MAX_TASKS]; /* completions answered OK */
    bool cut[MAX_TASKS];          /* a completion got no answer: may have been kept */
    uint8_t offered[MAX_TASKS];   /* fetches that handed it out */
    int reoffered, offered_after_complete, foreign, refused_early, refused_late, retried_submits;
    int calls_sent, calls_retried;
    bool call_acked[MAX_CALLS];
    char call_id[MAX_CALLS][33];
    int answers_cut;
    int push_sent, pushes_retried;
    bool push_acked[MAX_PUSHES];
} ledger;

static ledger L;
static atomic_bool STOP_MAKING, STOP_TAKING;

/* What a producer submits: to topic, payloads prefix-N under keys key-N,
 * counted in *sent, acknowledged in acked[N]. */
typedef struct stream {
    const char *topic, *prefix, *key;
    int *sent, *retried, max;
    bool *acked;
} stream;

static void produce(const stream *st, int at)
{
    links l = {.at = at % REPLICAS};
    while (!atomic_load(&STOP_MAKING)) {
        pthread_mutex_lock(&L.mu);
        int n = *st->sent < st->max ? (*st->sent)++ : -1;
        pthread_mutex_unlock(&L.mu);
        if (n < 0)
            break;
        char payload[32], key[32];
        snprintf(payload, sizeof payload, "%s%d", st->prefix, n);
        snprintf(key, sizeof key, "%s%d", st->key, n);
        Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
        s.topic = (char *)st->topic;
        s.has_payload = 1;
        s.payload = (ProtobufCBinaryData){strlen(payload), (uint8_t *)payload};
        s.idempotency_key = key;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        req.submit = &s;
        for (int tries = 0; !atomic_load(&STOP_MAKING); tries++) {
            Berth__V1__Response *r = ask(&l, &req, 2000);
            if (r == NULL)
                continue; /* under the same key: kept once whichever way it went */
            bool ok = r->status->code == BERTH__V1__CODE__OK && r->submit != NULL;
            pthread_mutex_lock(&L.mu);
            st->acked[n] = ok;
            *st->retried += tries > 0;
            if (!ok)
                L.foreign++; /* a refusal of a plain submit: counted as wrong */
            pthread_mutex_unlock(&L.mu);
            berth__v1__response__free_unpacked(r, NULL);
            break;
        }
    }
    link_close(&l);
}

static void *producer(void *arg)
{
    static const stream tasks = {"soak",    "task-", "k-", &L.sent, &L.retried_submits,
                                 MAX_TASKS, L.acked};
    produce(&tasks, (int)(intptr_t)arg);
    return NULL;
}

/* Deliveries to the push channel soakhook (its receiver answers). */
static void *pusher(void *arg)
{
    static const stream pushes = {"soakhook",        "push-",    "p-",        &L.push_sent,
                                  &L.pushes_retried, MAX_PUSHES, L.push_acked};
    produce(&pushes, (int)(intptr_t)arg);
    return NULL;
}

/* The index a payload names, or -1 if it is not one a producer sent. */
static int index_of(const ProtobufCBinaryData *p, const char *prefix, int sent)
{
    char s[32];
    size_t pl = strlen(prefix);
    if (p->len <= pl || p->len >= sizeof s)
        return -1;
    memcpy(s, p->data, p->len);
    s[p->len] = '\0';
    char *end;
    long n = strncmp(s, prefix, pl) == 0 ? strtol(s + pl, &end, 10) : -1;
    return n >= 0 && n < sent && *end == '\0' ? (int)n : -1;
}

static void *worker(void *arg)
{
    links l = {.at = (int)(intptr_t)arg % REPLICAS};
    while (!atomic_load(&STOP_TAKING)) {
        bc *c = link_get(&l);
        if (c == NULL)
            continue;
        Berth__V1__Response *f = w_fetch_or_null(c, "soak-w", "soak", 10, LOCK_MS, 100);
        if (f == NULL || f->status->code != BERTH__V1__CODE__OK || f->fetch == NULL) {
            if (f == NULL || f->status->code == BERTH__V1__CODE__UNAVAILABLE)
                link_fail(&l);
            if (f != NULL)
                w_free(f);
            continue;
        }
        uint64_t got = mono_ms();
        for (size_t i = 0; i < f->fetch->n_tasks; i++) {
            Berth__V1__Task *t = f->fetch->tasks[i];
            pthread_mutex_lock(&L.mu);
            int n = index_of(&t->payload, "task-", L.sent);
            if (n < 0) {
                L.foreign++;
            } else {
                L.offered_after_complete += L.completed[n] > 0;
                L.reoffered += L.offered[n] > 0;
                L.offered[n]++;
            }
            pthread_mutex_unlock(&L.mu);
            /* Completed wherever the worker is now: any replica takes it. */
            bc *cc = link_get(&l);
            Berth__V1__Response *r = cc ? w_guarded_or_null(cc, BERTH__V1__REQUEST__METHOD_COMPLETE,
                                                            t->id, "soak-w", t->lock_token)
                                        : NULL;
            pthread_mutex_lock(&L.mu);
            if (n >= 0 && (r == NULL || r->status->code == BERTH__V1__CODE__UNAVAILABLE)) {
                L.cut[n] = true;
            } else if (n >= 0 && r->status->code == BERTH__V1__CODE__OK) {
                L.completed[n]++;
            } else if (n >= 0) {
                /* Refused: only a lock that ran out may be, or a task a
                 * completion cut off before had completed. */
                if (mono_ms() - got + 50 >= LOCK_MS || L.cut[n])
                    L.refused_late++;
                else
                    L.refused_early++;
            }
            pthread_mutex_unlock(&L.mu);
            if (r == NULL || r->status->code == BERTH__V1__CODE__UNAVAILABLE)
                link_fail(&l);
            if (r != NULL)
                w_free(r);
        }
        w_free(f);
    }
    link_close(&l);
    return NULL;
}

static void *caller(void *arg)
{
    links l = {.at = (int)(intptr_t)arg % REPLICAS};
    while (!atomic_load(&STOP_MAKING)) {
        pthread_mutex_lock(&L.mu);
        int n = L.calls_sent < MAX_CALLS ? L.calls_sent++ : -1;
        pthread_mutex_unlock(&L.mu);
        if (n < 0)
            break;
        char payload[32], key[32];
        snprintf(payload, sizeof payload, "call-%d", n);
        snprintf(key, sizeof key, "c-%d", n);
        Berth__V1__CallRequest cr = BERTH__V1__CALL_REQUEST__INIT;
        cr.topic = "soakcalls";
        cr.has_payload = 1;
        cr.payload = (ProtobufCBinaryData){strlen(payload), (uint8_t *)payload};
        cr.idempotency_key = key;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
        req.call = &cr;
        for (int tries = 0; !atomic_load(&STOP_MAKING); tries++) {
            Berth__V1__Response *r = ask(&l, &req, 2000);
            if (r == NULL)
                continue;
            pthread_mutex_lock(&L.mu);
            if (r->status->code == BERTH__V1__CODE__OK && r->call != NULL) {
                L.call_acked[n] = true;
                snprintf(L.call_id[n], sizeof L.call_id[n], "%s", r->call->instance_id);
            } else {
                L.foreign++;
            }
            L.calls_retried += tries > 0;
            pthread_mutex_unlock(&L.mu);
            berth__v1__response__free_unpacked(r, NULL);
            break;
        }
    }
    link_close(&l);
    return NULL;
}

static void *answerer(void *arg)
{
    links l = {.at = (int)(intptr_t)arg % REPLICAS};
    while (!atomic_load(&STOP_TAKING)) {
        bc *c = link_get(&l);
        if (c == NULL)
            continue;
        Berth__V1__Response *f = w_fetch_or_null(c, "soak-a", "soakcalls", 10, LOCK_MS, 100);
        if (f == NULL || f->status->code != BERTH__V1__CODE__OK || f->fetch == NULL) {
            if (f == NULL || f->status->code == BERTH__V1__CODE__UNAVAILABLE)
                link_fail(&l);
            if (f != NULL)
                w_free(f);
            continue;
        }
        for (size_t i = 0; i < f->fetch->n_tasks; i++) {
            Berth__V1__Task *t = f->fetch->tasks[i];
            char answer[48];
            int n = snprintf(answer, sizeof answer, "%.*s!", (int)t->payload.len,
                             (const char *)t->payload.data);
            bc *cc = link_get(&l);
            Berth__V1__Response *r =
                cc ? w_answer_or_null(cc, t, "soak-a", answer, (size_t)n) : NULL;
            if (r == NULL || r->status->code == BERTH__V1__CODE__UNAVAILABLE) {
                pthread_mutex_lock(&L.mu);
                L.answers_cut++;
                pthread_mutex_unlock(&L.mu);
                link_fail(&l);
            }
            if (r != NULL)
                w_free(r);
        }
        w_free(f);
    }
    link_close(&l);
    return NULL;
}

/* ---- the run ---- */

static void mark(int k, bool up)
{
    pthread_mutex_lock(&UP[k].mu);
    UP[k].up = up;
    if (up) {
        UP[k].gen++;
        snprintf(UP[k].url, sizeof UP[k].url, "%s", R[k].operate);
    }
    pthread_mutex_unlock(&UP[k].mu);
}

/* What is left to settle: acknowledged tasks neither completed nor cut,
 * acknowledged calls not resolved. */
static int unsettled_tasks(void)
{
    int left = 0;
    pthread_mutex_lock(&L.mu);
    for (int n = 0; n < L.sent; n++)
        left += L.acked[n] && !L.completed[n] && !L.cut[n];
    pthread_mutex_unlock(&L.mu);
    return left;
}

/* The call as it stands: RESOLVED with its own result (1), still going
 * (0), or anything else (-1, with why). */
static int call_outcome(bc *c, int n, char *why, size_t len)
{
    Berth__V1__AwaitCallRequest w = BERTH__V1__AWAIT_CALL_REQUEST__INIT;
    w.instance_id = L.call_id[n];
    w.has_wait_ms = 1;
    w.wait_ms = 0;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_AWAIT_CALL;
    req.await_call = &w;
    Berth__V1__Response *r = w_call(c, &req, 0);
    int out = -1;
    if (r->status->code != BERTH__V1__CODE__OK) {
        snprintf(why, len, "await: %s", r->status->message);
    } else {
        const Berth__V1__Instance *in = r->await_call->instance;
        char want[48];
        int k = snprintf(want, sizeof want, "call-%d!", n);
        if (in->state == BERTH__V1__INSTANCE__STATE__WAITING ||
            in->state == BERTH__V1__INSTANCE__STATE__BACKOFF)
            out = 0;
        else if (in->state == BERTH__V1__INSTANCE__STATE__RESOLVED && in->result &&
                 in->result->payload.len == (size_t)k &&
                 memcmp(in->result->payload.data, want, (size_t)k) == 0)
            out = 1;
        else
            snprintf(why, len, "state %d", (int)in->state);
    }
    w_free(r);
    return out;
}

/* How many times the receiver took each push-N (counts[N], sent of them). */
static void push_counts(receiver *r, int *counts, int sent)
{
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_seen; i++) {
        ProtobufCBinaryData p = {strlen(r->seen[i].payload), (uint8_t *)r->seen[i].payload};
        int n = index_of(&p, "push-", sent);
        if (n >= 0)
            counts[n]++;
    }
    pthread_mutex_unlock(&r->mu);
}

/* Acknowledged deliveries the receiver has not taken yet. */
static int undelivered(receiver *r)
{
    pthread_mutex_lock(&L.mu);
    int sent = L.push_sent, left = 0;
    pthread_mutex_unlock(&L.mu);
    int *counts = calloc((size_t)sent + 1, sizeof *counts);
    cr_assert_not_null(counts);
    push_counts(r, counts, sent);
    for (int n = 0; n < sent; n++)
        left += L.push_acked[n] && counts[n] == 0;
    free(counts);
    return left;
}

Test(pg_kills, three_replicas_under_mixed_load_with_one_killed_at_a_time_lose_nothing)
{
    long seconds = env_long("BERTH_SOAK_SECONDS", 20),
         every_s = env_long("BERTH_SOAK_KILL_EVERY_S", 4);
    receiver rcv;
    receiver_start(&rcv, 0, BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED);
    atomic_store(&rcv.retries, 20); /* the first answers: RETRY (backed off, sent again) */
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%d", PUSH_TIMEOUT_MS);
    const char *const extra[] = {"--push-timeout-ms", timeout, NULL};
    pgtmp_createdb("pg_kills", URI, sizeof URI);
    for (int k = 0; k < REPLICAS; k++) {
        pthread_mutex_init(&UP[k].mu, NULL);
        d_start_store(&R[k], URI, extra);
        mark(k, true);
    }
    char transport[64];
    snprintf(transport, sizeof transport, "nng+req://127.0.0.1:%d", rcv.port);
    d_deploy(&R[0], "soakhooks", "soakhook", transport);
    pthread_mutex_init(&L.mu, NULL);
    enum { THREADS = PRODUCERS + WORKERS + CALLERS + ANSWERERS + PUSHERS };
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        void *(*fn)(void *) = i < PRODUCERS                                   ? producer
                              : i < PRODUCERS + WORKERS                       ? worker
                              : i < PRODUCERS + WORKERS + CALLERS             ? caller
                              : i < PRODUCERS + WORKERS + CALLERS + ANSWERERS ? answerer
                                                                              : pusher;
        pthread_create(&th[i], NULL, fn, (void *)(intptr_t)i);
    }

    uint64_t t0 = mono_ms(), next_kill = t0 + (uint64_t)every_s * 1000;
    int kills = 0;
    while (mono_ms() < t0 + (uint64_t)seconds * 1000) {
        sleep_ms(50);
        if (mono_ms() < next_kill)
            continue;
        int k = kills++ % REPLICAS;
        mark(k, false);
        cr_assert_eq(d_signal(&R[k], SIGKILL), 128 + SIGKILL);
        sleep_ms(200);
        d_restart(&R[k]);
        mark(k, true);
        next_kill += (uint64_t)every_s * 1000;
    }
    atomic_store(&STOP_MAKING, true);
    uint64_t load_ms = mono_ms() - t0;

    /* Drain: the workers go on until every acknowledged task is settled
     * (locks cut off by the last kill run out after LOCK_MS). */
    uint64_t drain_until = mono_ms() + 4 * LOCK_MS + 10000;
    while (unsettled_tasks() > 0 && mono_ms() < drain_until)
        sleep_ms(100);
    bc *c = d_client(&R[0]);
    char why[200];
    for (int n = 0; n < L.calls_sent; n++) {
        if (!L.call_acked[n])
            continue;
        int o;
        while ((o = call_outcome(c, n, why, sizeof why)) == 0 && mono_ms() < drain_until)
            sleep_ms(100);
        cr_assert_eq(o, 1, "acknowledged call-%d (%s) did not resolve with its result: %s", n,
                     L.call_id[n], o == 0 ? "still going" : why);
    }
    bc_close(c);
    /* Deliveries: every acknowledged one reaches the receiver (a send a
     * kill stranded goes again after its deadline) and leaves the outbox. */
    PGconn *sql = pgtmp_connect(URI);
    long outbox = -1;
    while ((undelivered(&rcv) > 0 ||
            (outbox = pgtmp_one_long(sql, "SELECT count(*) FROM berth.outbox")) > 0) &&
           mono_ms() < drain_until + 2 * (PUSH_TIMEOUT_MS + 6000))
        sleep_ms(100);
    outbox = pgtmp_one_long(sql, "SELECT count(*) FROM berth.outbox");
    PQfinish(sql);
    atomic_store(&STOP_TAKING, true);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    int *counts = calloc((size_t)L.push_sent + 1, sizeof *counts);
    cr_assert_not_null(counts);
    push_counts(&rcv, counts, L.push_sent);
    int pushes = 0, pushes_seen = 0, sent_again = 0;
    for (int n = 0; n < L.push_sent; n++) {
        pushes += L.push_acked[n];
        pushes_seen += counts[n] > 0;
        sent_again += counts[n] > 1 ? counts[n] - 1 : 0;
        cr_assert(!L.push_acked[n] || counts[n] > 0,
                  "acknowledged push-%d never reached the receiver", n);
    }
    free(counts);
    receiver_stop(&rcv);

    int acked = 0, completed = 0, cut_only = 0, twice = 0, calls = 0;
    for (int n = 0; n < L.sent; n++) {
        acked += L.acked[n];
        completed += L.completed[n] > 0;
        twice += L.completed[n] > 1;
        cut_only += L.acked[n] && !L.completed[n] && L.cut[n];
        cr_assert(!L.acked[n] || L.completed[n] || L.cut[n], "acknowledged task-%d was lost", n);
    }
    for (int n = 0; n < L.calls_sent; n++)
        calls += L.call_acked[n];
    fprintf(stderr,
            "soak: %.0f s, %d kills; tasks acknowledged %d (%.0f/s), completed %d, completion cut "
            "off %d, submits retried %d, re-offered %d, refused after the lock %d; calls "
            "acknowledged %d, retried %d, answers cut off %d; deliveries acknowledged %d, "
            "received %d, sent again %d (%d answered RETRY), submits retried %d\n",
            (double)load_ms / 1000, kills, acked, acked * 1000.0 / (double)load_ms, completed,
            cut_only, L.retried_submits, L.reoffered, L.refused_late, calls, L.calls_retried,
            L.answers_cut, pushes, pushes_seen, sent_again, 20, L.pushes_retried);
    cr_assert_eq(outbox, 0, "deliveries left in the outbox");
    cr_assert_leq(sent_again, 20 + kills * PUSH_INFLIGHT,
                  "sent again more than RETRY answers and the killed replicas' sends in flight");
    cr_assert_gt(pushes, 10, "the deliveries ran: %d acknowledged", pushes);
    cr_assert_eq(twice, 0, "a task completed twice");
    cr_assert_eq(L.offered_after_complete, 0,
                 "a task offered after its completion was acknowledged");
    cr_assert_eq(L.refused_early, 0, "a completion refused while its lock held");
    cr_assert_eq(L.foreign, 0, "a payload no producer sent, or a refused submit or call");
    cr_assert_gt(kills, 0, "no replica was killed");
    cr_assert_gt(acked, 100, "the load ran: %d acknowledged submits", acked);
    cr_assert_gt(calls, 10, "the calls ran: %d acknowledged", calls);
    for (int k = 0; k < REPLICAS; k++)
        d_stop(&R[k]);
}
