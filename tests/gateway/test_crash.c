/* Crash cycles: berthd killed -9 at random moments under load, 20 times
 * on one store. Across all of them no acknowledged submit is lost, no
 * acknowledged completion is offered again, and every payload handed out
 * is one a producer sent, whole. (A request whose answer the kill cut off
 * may go either way.) */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>
#include <sodium.h>

#include "tests/support/daemon.h"

static daemon_proc D;

static void teardown(void)
{
    d_cleanup(&D);
}

TestSuite(crash, .fini = teardown, .timeout = 300);

enum { CYCLES = 20, PRODUCERS = 2, WORKERS = 2, MAX_TASKS = 20000 };

/* What the clients know, across every cycle. Payloads are "task-N": N
 * indexes these arrays. */
typedef struct ledger {
    pthread_mutex_t mu;
    int sent;                   /* payloads handed to a submit so far */
    bool acked[MAX_TASKS];      /* its submit was answered OK */
    bool completed[MAX_TASKS];  /* a complete of it was answered OK */
    bool cut[MAX_TASKS];        /* a complete of it got no answer: may have been kept */
    char id[MAX_TASKS][33];     /* the id its acknowledged submit returned */
    int offered_after_complete; /* fetched again after an acknowledged complete */
    int foreign;                /* a payload no producer sent, or not whole */
} ledger;

static ledger L;

typedef struct client {
    bc *c;
    volatile bool *stop;
} client;

static void *producer(void *arg)
{
    client *cl = arg;
    while (!*cl->stop) {
        pthread_mutex_lock(&L.mu);
        int n = L.sent < MAX_TASKS ? L.sent++ : -1;
        pthread_mutex_unlock(&L.mu);
        if (n < 0)
            break;
        char payload[32];
        snprintf(payload, sizeof(payload), "task-%d", n);
        Berth__V1__Response *r = NULL;
        Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
        s.topic = "crash";
        s.has_payload = 1;
        s.payload = (ProtobufCBinaryData){strlen(payload), (uint8_t *)payload};
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        req.submit = &s;
        if (bc_call(cl->c, &req, 2000, &r) != BC_OK)
            break; /* berthd is gone */
        if (r->status && r->status->code == BERTH__V1__CODE__OK && r->submit) {
            pthread_mutex_lock(&L.mu);
            L.acked[n] = true;
            memcpy(L.id[n], r->submit->id, 33);
            pthread_mutex_unlock(&L.mu);
        }
        berth__v1__response__free_unpacked(r, NULL);
    }
    return NULL;
}

/* The index a payload names, or -1 if it is not one a producer sent. */
static int index_of(const ProtobufCBinaryData *p)
{
    char s[32];
    if (p->len < 6 || p->len >= sizeof(s))
        return -1;
    memcpy(s, p->data, p->len);
    s[p->len] = '\0';
    char *end;
    long n = strncmp(s, "task-", 5) == 0 ? strtol(s + 5, &end, 10) : -1;
    pthread_mutex_lock(&L.mu);
    bool sent = n >= 0 && n < L.sent && *end == '\0';
    pthread_mutex_unlock(&L.mu);
    return sent ? (int)n : -1;
}

/* Fetches and completes what it gets; returns false once berthd is gone. */
static bool work_once(bc *c, uint64_t wait_ms)
{
    Berth__V1__Response *f = w_fetch_or_null(c, "cw", "crash", 10, 1000, (long)wait_ms);
    if (f == NULL)
        return false;
    if (f->status->code != BERTH__V1__CODE__OK || f->fetch == NULL) {
        w_free(f);
        return true;
    }
    for (size_t i = 0; i < f->fetch->n_tasks; i++) {
        Berth__V1__Task *t = f->fetch->tasks[i];
        int n = index_of(&t->payload);
        pthread_mutex_lock(&L.mu);
        if (n < 0)
            L.foreign++;
        else if (L.completed[n])
            L.offered_after_complete++;
        pthread_mutex_unlock(&L.mu);
        Berth__V1__Response *r =
            w_guarded_or_null(c, BERTH__V1__REQUEST__METHOD_COMPLETE, t->id, "cw", t->lock_token);
        if (r == NULL) {
            if (n >= 0) {
                pthread_mutex_lock(&L.mu);
                L.cut[n] = true;
                pthread_mutex_unlock(&L.mu);
            }
            w_free(f);
            return false;
        }
        if (n >= 0 && r->status->code == BERTH__V1__CODE__OK) {
            pthread_mutex_lock(&L.mu);
            L.completed[n] = true;
            pthread_mutex_unlock(&L.mu);
        }
        w_free(r);
    }
    w_free(f);
    return true;
}

static void *worker(void *arg)
{
    client *cl = arg;
    while (!*cl->stop && work_once(cl->c, 50))
        ;
    return NULL;
}

/* `cycles` times: berthd (restarted after the first) under the load of
 * PRODUCERS `make` threads and WORKERS `take` threads, each with its own
 * client, is killed -9 at a random moment 50 ms to 50 + spread_ms ms in. */
static void kill_cycles(int cycles, void *(*make)(void *), void *(*take)(void *),
                        uint32_t spread_ms)
{
    for (int cycle = 0; cycle < cycles; cycle++) {
        if (cycle > 0)
            d_restart(&D);
        volatile bool stop = false;
        client cs[PRODUCERS + WORKERS];
        pthread_t th[PRODUCERS + WORKERS];
        for (int i = 0; i < PRODUCERS + WORKERS; i++) {
            cs[i] = (client){d_client(&D), &stop};
            pthread_create(&th[i], NULL, i < PRODUCERS ? make : take, &cs[i]);
        }
        struct timespec t = {0, (long)(50 + randombytes_uniform(spread_ms)) * 1000000L};
        nanosleep(&t, NULL);
        cr_assert_eq(d_signal(&D, SIGKILL), 128 + SIGKILL);
        stop = true;
        for (int i = 0; i < PRODUCERS + WORKERS; i++) {
            pthread_join(th[i], NULL);
            bc_close(cs[i].c);
        }
    }
}

DTest(crash, twenty_kills_under_load_lose_nothing_acknowledged)
{
    d_start(&D, NULL);
    pthread_mutex_init(&L.mu, NULL);
    kill_cycles(CYCLES, producer, worker, 250);

    /* Once more, and drain: locks of the last cycle run out (1 s). */
    d_restart(&D);
    bc *c = d_client(&D);
    for (int quiet = 0; quiet < 3;) {
        int before = 0, after = 0;
        pthread_mutex_lock(&L.mu);
        for (int n = 0; n < L.sent; n++)
            before += L.completed[n];
        pthread_mutex_unlock(&L.mu);
        cr_assert(work_once(c, 700));
        pthread_mutex_lock(&L.mu);
        for (int n = 0; n < L.sent; n++)
            after += L.completed[n];
        pthread_mutex_unlock(&L.mu);
        quiet = after == before ? quiet + 1 : 0;
    }
    bc_close(c);

    int acked = 0;
    for (int n = 0; n < L.sent; n++) {
        acked += L.acked[n];
        cr_assert(!L.acked[n] || L.completed[n] || L.cut[n], "acknowledged task-%d (%s) was lost",
                  n, L.id[n]);
    }
    cr_assert_eq(L.offered_after_complete, 0,
                 "a task was offered after its completion was acknowledged");
    cr_assert_eq(L.foreign, 0, "a payload no producer sent");
    cr_assert_gt(acked, 100, "the load ran: %d acknowledged submits", acked);
}

/* ---- calls under kill -9 ----
 * Callers make calls (half of them with a retry policy whose timeouts and
 * re-drives run across the kills), workers answer each with its payload
 * and '!'. After the kills and a drain, every acknowledged call has
 * resolved, with its own result, and none has failed. */

enum { CALL_CYCLES = 10, MAX_CALLS = 10000 };

typedef struct call_ledger {
    pthread_mutex_t mu;
    int sent;
    bool acked[MAX_CALLS];
    char id[MAX_CALLS][33];
    int foreign;
} call_ledger;

static call_ledger CL;

static void *caller(void *arg)
{
    client *cl = arg;
    while (!*cl->stop) {
        pthread_mutex_lock(&CL.mu);
        int n = CL.sent < MAX_CALLS ? CL.sent++ : -1;
        pthread_mutex_unlock(&CL.mu);
        if (n < 0)
            break;
        char payload[32];
        snprintf(payload, sizeof(payload), "call-%d", n);
        Berth__V1__RetryPolicy p = BERTH__V1__RETRY_POLICY__INIT;
        p.has_timeout_ms = 1;
        p.timeout_ms = 400;
        p.has_max_attempts = 1;
        p.max_attempts = 100;
        p.has_initial_backoff_ms = 1;
        p.initial_backoff_ms = 20;
        p.has_max_backoff_ms = 1;
        p.max_backoff_ms = 200;
        Berth__V1__CallRequest c = BERTH__V1__CALL_REQUEST__INIT;
        c.topic = "crashcalls";
        c.has_payload = 1;
        c.payload = (ProtobufCBinaryData){strlen(payload), (uint8_t *)payload};
        c.retry = n % 2 ? &p : NULL;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
        req.call = &c;
        Berth__V1__Response *r = NULL;
        if (bc_call(cl->c, &req, 2000, &r) != BC_OK)
            break; /* berthd is gone */
        if (r->status && r->status->code == BERTH__V1__CODE__OK && r->call) {
            pthread_mutex_lock(&CL.mu);
            CL.acked[n] = true;
            memcpy(CL.id[n], r->call->instance_id, 33);
            pthread_mutex_unlock(&CL.mu);
        }
        berth__v1__response__free_unpacked(r, NULL);
    }
    return NULL;
}

/* Answers what it fetches; false once berthd is gone. */
static bool answer_once(bc *c, uint64_t wait_ms)
{
    Berth__V1__Response *f = w_fetch_or_null(c, "cw", "crashcalls", 10, 1000, (long)wait_ms);
    if (f == NULL)
        return false;
    bool alive = true;
    for (size_t i = 0;
         alive && f->status->code == BERTH__V1__CODE__OK && f->fetch && i < f->fetch->n_tasks;
         i++) {
        Berth__V1__Task *t = f->fetch->tasks[i];
        char answer[48];
        int n = snprintf(answer, sizeof(answer), "%.*s!", (int)t->payload.len,
                         (const char *)t->payload.data);
        if (strncmp(answer, "call-", 5) != 0 || t->instance_id == NULL) {
            pthread_mutex_lock(&CL.mu);
            CL.foreign++;
            pthread_mutex_unlock(&CL.mu);
        }
        Berth__V1__Response *r = w_answer_or_null(c, t, "cw", answer, (size_t)n);
        if (r == NULL)
            alive = false;
        else
            w_free(r);
    }
    w_free(f);
    return alive;
}

static void *answerer(void *arg)
{
    client *cl = arg;
    while (!*cl->stop && answer_once(cl->c, 50))
        ;
    return NULL;
}

/* The call as it stands: RESOLVED with its own result (1), still going
 * (0), or anything else (-1, with why). */
static int call_outcome(bc *c, int n, char *why, size_t len)
{
    Berth__V1__AwaitCallRequest w = BERTH__V1__AWAIT_CALL_REQUEST__INIT;
    w.instance_id = CL.id[n];
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
        int k = snprintf(want, sizeof(want), "call-%d!", n);
        if (in->state == BERTH__V1__INSTANCE__STATE__WAITING ||
            in->state == BERTH__V1__INSTANCE__STATE__BACKOFF)
            out = 0;
        else if (in->state == BERTH__V1__INSTANCE__STATE__RESOLVED && in->result &&
                 in->result->payload.len == (size_t)k &&
                 memcmp(in->result->payload.data, want, (size_t)k) == 0)
            out = 1;
        else
            snprintf(why, len, "state %d, error %s", in->state,
                     in->error && in->error->code ? in->error->code : "-");
    }
    w_free(r);
    return out;
}

DTest(crash, calls_survive_kills_and_each_resolves_with_its_own_result)
{
    d_start(&D, NULL);
    pthread_mutex_init(&CL.mu, NULL);
    kill_cycles(CALL_CYCLES, caller, answerer, 450);

    /* Drain: answer until every acknowledged call has ended (a call whose
     * task a killed worker held waits for its lock or its timeout). */
    d_restart(&D);
    bc *c = d_client(&D);
    int acked = 0;
    for (int n = 0; n < CL.sent; n++)
        acked += CL.acked[n];
    cr_assert_gt(acked, 50, "the load ran: %d acknowledged calls", acked);
    for (int n = 0, rounds = 0; n < CL.sent;) {
        char why[300] = "";
        int o = CL.acked[n] ? call_outcome(c, n, why, sizeof(why)) : 1;
        cr_assert_geq(o, 0, "call-%d (%s): %s", n, CL.id[n], why);
        if (o == 1) {
            n++;
            rounds = 0;
            continue;
        }
        cr_assert_lt(rounds++, 600, "call-%d (%s) never ended", n, CL.id[n]);
        cr_assert(answer_once(c, 100));
    }
    bc_close(c);
    cr_assert_eq(CL.foreign, 0, "a task that is not a call's, or a payload nobody sent");
}

/* ---- a fused fetch's completions, applied before it waits ---- */

typedef struct waiting_fetch {
    bc *c;
    const char *id, *token;
    int rv; /* the round trip's: the kill cuts it off */
} waiting_fetch;

static void *fetch_carrying(void *arg)
{
    waiting_fetch *wf = arg;
    Berth__V1__Response *r =
        w_fetch_completing_or_null(wf->c, "w", "fused", 25000, &wf->id, &wf->token, 1);
    wf->rv = r != NULL ? BC_OK : BC_EUNREACHABLE;
    if (r != NULL)
        w_free(r);
    return NULL;
}

DTest(crash, a_fetch_s_completions_survive_a_kill_while_it_waits)
{
    d_start(&D, NULL);
    bc *c = d_client(&D), *w = d_client(&D), *a;
    char err[256];
    w_free(w_submit(c, "fused", "done-before-the-wait", NULL));
    Berth__V1__Response *f = w_fetch(c, "w", "fused", 1, 60000, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    waiting_fetch wf = {
        .c = w, .id = f->fetch->tasks[0]->id, .token = f->fetch->tasks[0]->lock_token};
    pthread_t th;
    pthread_create(&th, NULL, fetch_carrying, &wf);
    /* The fetch waits (nothing else to claim): its completion was in the
     * turn before, and stats is answered after that turn's sync. */
    for (int i = 0; i < 500 && d_waiting_fetches(&D) == 0; i++) {
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
    cr_assert_eq(d_waiting_fetches(&D), 1);
    d_signal(&D, SIGKILL);
    pthread_join(th, NULL);
    cr_assert_neq(wf.rv, BC_OK, "the kill cut the waiting fetch off");
    char id[33];
    snprintf(id, sizeof(id), "%s", wf.id);
    bc_close(w);
    bc_close(c);
    w_free(f);

    d_restart(&D);
    cr_assert_eq(bc_open(D.admin, &a, err, sizeof(err)), BC_OK, "%s", err);
    Berth__V1__GetTaskRequest g = BERTH__V1__GET_TASK_REQUEST__INIT;
    g.id = id;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_GET_TASK;
    req.get_task = &g;
    Berth__V1__AdminResponse *r = NULL;
    cr_assert_eq(bc_admin_call(a, &req, NULL, 0, 10000, &r), BC_OK);
    cr_assert_eq(r->status->code, BERTH__V1__CODE__NOT_FOUND,
                 "completed for good before the wait (status %d: %s)", r->status->code,
                 r->status->message);
    berth__v1__admin_response__free_unpacked(r, NULL);
    bc_close(a);
}
