/*
 * berth-bench — load for berthd, with proof that nothing was lost.
 *
 *   berth-bench (--operate URL | --spawn) (--tasks N | --duration S)
 *               [--producers P] [--workers W] [--submit-batch B]
 *               [--fetch-batch F] [--complete-batch C] [--payload BYTES]
 *               [--topics K] [--lock-ms MS] [--json] [--csv FILE]
 *               [--client direct|nng] [--calls] [--push [--admin URL]]
 *               [--priorities K] [--delay-ms D] [--no-fused] [--preload N]
 *               [--rate TASKS_PER_S] [--tls-ca FILE]
 *
 * P producer threads submit (submit_batch when B > 1), W worker threads
 * long-poll fetch up to F tasks and complete them with their next fetch
 * (the client library's worker loop: one round trip per batch), or with
 * --no-fused in requests of their own (complete_batch of up to C, or
 * complete when C is 1) between fetches. Each payload carries its task's index, so the bench checks
 * that every task was completed exactly once: a task never completed is a loss, a second successful
 * completion a duplicate; either, or any refused request, makes the exit status non-zero. Latency
 * is per task, submit acknowledged → complete acknowledged (e2e), and per fetch, sent → answered.
 *
 * --priorities K spreads the tasks over priorities 0 to K-1; --delay-ms D
 * delays every other task by 0 to D ms (spread evenly by its index). The
 * e2e latency of a delayed task includes its delay.
 *
 * --rate R offers R tasks/s in all, open loop, for "what is p99 at the
 * load I run": batch i is due at i * B / R s and its tasks' e2e latency
 * runs from then, so a late send is not hidden. Over direct connections
 * one thread sends every batch at its due time over the P connections in
 * turn, never waiting for an answer, and another reads the answers (a
 * slow answer delays no other submit; two threads, not P, compete with
 * berthd for the machine). Over nng each producer sends on time unless
 * its previous submit is unanswered. The report adds submit_late_ms (due
 * → sent) and fetched_ms (due → in a worker's hands; without --rate, from
 * the submit's answer).
 *
 * --preload N first submits N tasks to the topic bench-backlog, which no
 * worker fetches, then runs the scenario beside that backlog, and reports
 * the spawned berthd's resident memory and data directory after the
 * preload and at the end.
 *
 * --calls: the producers are callers. Each makes one call at a time and
 * awaits it; workers answer each call with a result that names it (its
 * index, then 'R'). The bench checks that every call was resolved once,
 * with its own result, and reports calls/s and the call latency: call
 * accepted → await answered with the outcome.
 *
 * --push: the bench serves a push receiver (an nng REP socket, W threads
 * answering DELIVERED) and deploys the topics as push channels to it (the
 * deployment "bench", through the admin surface), then submits as usual;
 * there are no workers. It reports deliveries/s and the latency from the
 * submit's send to the receipt (a push may arrive before the submit's
 * answer does), and checks that every task was received exactly once.
 *
 * --spawn starts the berthd found beside this binary on a temp directory
 * (under $TMPDIR, /tmp by default) and free ports, and stops it
 * afterwards. Every submit it makes is fsynced by berthd before it is
 * acknowledged: this measures durable work.
 *
 * Producers and workers reach a tcp:// URL over direct connections
 * (client.h: SP's TCP mapping with blocking calls, one connection per
 * thread, like beanstalk-bench's plain sockets); --client nng uses nng's
 * REQ socket, whose threads cost the shared machine more per round trip.
 * Any other URL goes through nng's REQ socket; on tls+tcp:// berthd's
 * certificate is checked against --tls-ca FILE (default: the system's
 * CAs) and the URL's host.
 *
 * Output: a table (a progress line on stderr when it is a terminal), or one
 * JSON object with --json. --csv writes a per-second series (see
 * tools/bench/plot-bench.gp).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "berth/v1/push.pb-c.h"
#include "tools/clients/c/client.h"
#include "tools/bench/samples.h"
#include "tools/bench/spawn.h"
#include "tools/clients/c/worker.h"

#define MAX_TOPICS    64
#define BACKLOG_TOPIC "bench-backlog"

typedef struct cfg {
    const char *operate;
    bool spawn;
    uint64_t tasks;    /* 0: run for duration_s */
    double duration_s; /* 0: run until `tasks` are done */
    uint32_t producers, workers, submit_batch, fetch_batch, complete_batch, topics;
    uint32_t priorities; /* 0: every task at the default */
    uint64_t delay_ms;   /* every other task delayed by up to this */
    uint32_t payload;
    uint64_t lock_ms;
    bool json;
    const char *csv;
    bool nng_client;  /* --client nng: nng's REQ socket, not a direct connection */
    bool calls;       /* --calls: producers call and await; workers answer */
    bool push;        /* --push: the topics are push channels to the bench's receiver */
    bool separate;    /* --no-fused: completions in requests of their own, not on fetches */
    uint64_t preload; /* tasks submitted to BACKLOG_TOPIC (never fetched) before the run */
    double rate;      /* --rate: tasks/s offered in all, open loop; 0: flat out */
    const char *admin;
    const char *tls_ca; /* tls+tcp://: the CAs berthd's certificate is checked against */
} cfg;

/* Shared state. Per-task arrays are indexed by the task's number, which
 * its payload carries: written by one producer, then by the one worker
 * whose completion succeeded. */
static cfg C;
static uint64_t cap;                  /* task slots */
static _Atomic uint64_t *submit_ns;   /* submit acknowledged (0: not submitted) */
static _Atomic uint64_t *done_ns;     /* completion acknowledged */
static _Atomic uint64_t *fetched_ns;  /* first handed to a worker */
static atomic_uint *completions;      /* successful completions per task */
static _Atomic uint64_t *resolved_ns; /* --calls: the await that saw its outcome answered */
static atomic_uint_fast64_t next_task, submitted, completed, errors, duplicates;
static atomic_uint_fast64_t resolved, wrong_results;
static atomic_bool producers_done, stop_all;
static spawned_berthd spawned; /* --spawn */
static uint64_t t0_ns;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Submit acknowledged → completion acknowledged. A worker can complete a
 * task before its producer has read the submit's answer: that counts as 0. */
static uint64_t e2e_ns(uint64_t i)
{
    return done_ns[i] > submit_ns[i] ? done_ns[i] - submit_ns[i] : 0;
}

/* Each producer and worker has its own connection. A tcp:// URL is reached
 * directly (see client.h), so the load costs the machine about what
 * beanstalk-bench's plain sockets cost it; --client nng uses nng's REQ
 * socket instead. */
static int open_client(bc **c, char *err, size_t errlen)
{
    if (!C.nng_client && strncmp(C.operate, "tcp://", 6) == 0)
        return bc_open_direct(C.operate, c, err, errlen);
    if (strncmp(C.operate, "tls+", 4) == 0) {
        bc_tls tls = {.ca_file = C.tls_ca};
        return bc_open_tls(C.operate, &tls, c, err, errlen);
    }
    return bc_open(C.operate, c, err, errlen);
}

static void count_error(const char *what, const Berth__V1__Response *r, int rv)
{
    uint64_t n = atomic_fetch_add(&errors, 1);
    if (n < 5)
        fprintf(stderr, "berth-bench: %s: %s\n", what,
                r ? (r->status && r->status->message ? r->status->message : "?") : bc_strerror(rv));
}

/* A thread's own connection, or NULL (counted as an error, told). */
static bc *thread_client(void)
{
    bc *c;
    char err[256];
    if (open_client(&c, err, sizeof(err)) == BC_OK)
        return c;
    fprintf(stderr, "berth-bench: %s\n", err);
    atomic_fetch_add(&errors, 1);
    return NULL;
}

/* ---- producers ---- */

/* Each submit's round trip, and with --rate how late it was sent (a
 * producer behind a slow submit, or not scheduled in time, sends late). */
static samples submit_wait, submit_late;
static pthread_mutex_t submit_wait_mu = PTHREAD_MUTEX_INITIALIZER;

static void sleep_until(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void topic_name(char *out, size_t len, uint64_t task)
{
    snprintf(out, len, "bench-%" PRIu64, task % C.topics);
}

/* A producer's request under construction: room for a batch of items. */
typedef struct submit_buf {
    uint8_t *payloads;
    char (*topics)[32];
    uint64_t *idx;
    Berth__V1__SubmitRequest *items, **ip;
    Berth__V1__SubmitBatchRequest sb;
    Berth__V1__Request req;
} submit_buf;

static bool submit_buf_init(submit_buf *b)
{
    uint32_t B = C.submit_batch;
    b->payloads = calloc(B, C.payload);
    b->topics = calloc(B, sizeof(*b->topics));
    b->idx = calloc(B, sizeof(*b->idx));
    b->items = calloc(B, sizeof(*b->items));
    b->ip = calloc(B, sizeof(*b->ip));
    if (b->payloads == NULL || b->topics == NULL || b->idx == NULL || b->items == NULL ||
        b->ip == NULL)
        return false;
    memset(b->payloads, 'p', (size_t)B * C.payload);
    return true;
}

static void submit_buf_free(submit_buf *b)
{
    free(b->payloads);
    free(b->topics);
    free(b->idx);
    free(b->items);
    free(b->ip);
}

/* Fills b->req with the submits of tasks first .. first + n - 1. */
static const Berth__V1__Request *submit_buf_fill(submit_buf *b, uint64_t first, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        b->idx[i] = first + i;
        uint8_t *p = b->payloads + (size_t)i * C.payload;
        memcpy(p, &b->idx[i], sizeof(b->idx[i]));
        topic_name(b->topics[i], sizeof(b->topics[i]), b->idx[i]);
        Berth__V1__SubmitRequest *it = &b->items[i];
        berth__v1__submit_request__init(it);
        it->topic = b->topics[i];
        it->has_payload = 1;
        it->payload.data = p;
        it->payload.len = C.payload;
        if (C.priorities > 0) {
            it->has_priority = 1;
            it->priority = (uint32_t)(b->idx[i] % C.priorities);
        }
        if (C.delay_ms > 0 && b->idx[i] % 2 == 1) {
            it->has_delay_ms = 1;
            it->delay_ms = (b->idx[i] * 2654435761u) % (C.delay_ms + 1);
        }
        b->ip[i] = it;
    }
    berth__v1__request__init(&b->req);
    berth__v1__submit_batch_request__init(&b->sb);
    if (C.submit_batch == 1) {
        b->req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        b->req.submit = &b->items[0];
    } else {
        b->sb.n_items = n;
        b->sb.items = b->ip;
        b->req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
        b->req.submit_batch = &b->sb;
    }
    return &b->req;
}

/* A submit of tasks first .. first + n - 1 was answered OK. */
static void submit_acked(uint64_t first, uint32_t n, uint64_t intended, uint64_t sent,
                         uint64_t acked)
{
    /* A push can reach the receiver before the submit's answer reaches
     * its producer: --push measures from the send. */
    uint64_t at = intended ? intended : C.push ? sent : acked;
    for (uint32_t i = 0; i < n; i++)
        atomic_store(&submit_ns[first + i], at);
    pthread_mutex_lock(&submit_wait_mu);
    sample_add(&submit_wait, acked - sent);
    if (intended > 0)
        sample_add(&submit_late, sent - intended);
    pthread_mutex_unlock(&submit_wait_mu);
    atomic_fetch_add(&submitted, n);
}

/* The next batch of task numbers, or false when there are no more. */
static bool next_batch(uint64_t deadline, uint64_t *first, uint32_t *n)
{
    if (atomic_load(&stop_all) || now_ns() >= deadline)
        return false;
    *first = atomic_fetch_add(&next_task, C.submit_batch);
    uint64_t limit = C.tasks ? C.tasks : cap;
    if (*first >= limit)
        return false;
    *n = (uint32_t)(limit - *first < C.submit_batch ? limit - *first : C.submit_batch);
    return true;
}

/* --rate: batch `first` is due at t0 + first / rate, late or not. */
static uint64_t due_ns(uint64_t first)
{
    return t0_ns + (uint64_t)((double)first * 1e9 / C.rate);
}

/* --rate over direct connections: the open-loop producer below. */
static bool open_loop(void)
{
    return C.rate > 0 && !C.calls && !C.nng_client && strncmp(C.operate, "tcp://", 6) == 0;
}

static void *producer(void *arg)
{
    (void)arg;
    bc *c = thread_client();
    submit_buf b = {0};
    if (c == NULL || !submit_buf_init(&b)) {
        submit_buf_free(&b);
        if (c != NULL)
            bc_close(c);
        return NULL;
    }
    uint64_t deadline = C.duration_s > 0 ? t0_ns + (uint64_t)(C.duration_s * 1e9) : UINT64_MAX;
    uint64_t first;
    uint32_t n;
    while (next_batch(deadline, &first, &n)) {
        /* --rate without a direct connection: each producer sends on time
         * unless its previous submit is still unanswered; the latency runs
         * from the due time all the same, so a stall is not hidden. */
        uint64_t intended = C.rate > 0 ? due_ns(first) : 0;
        if (intended > 0)
            sleep_until(intended);
        const Berth__V1__Request *req = submit_buf_fill(&b, first, n);
        Berth__V1__Response *r = NULL;
        uint64_t sent = now_ns();
        int rv = bc_call(c, req, 30000, &r);
        if (rv != BC_OK || r->status == NULL || r->status->code != BERTH__V1__CODE__OK)
            count_error("submit", r, rv);
        else
            submit_acked(first, n, intended, sent, now_ns());
        if (r != NULL)
            berth__v1__response__free_unpacked(r, NULL);
    }
    submit_buf_free(&b);
    bc_close(c);
    return NULL;
}

/* ---- the open-loop producer (--rate over direct connections) ----
 *
 * One thread sends every batch at its due time over --producers
 * connections in turn, never waiting for an answer; a second reads the
 * answers. A slow answer delays no other submit, and two threads, not
 * one per connection, compete with berthd for the machine. */

#define OPEN_RING 65536u /* submits in flight at most */

typedef struct open_slot {
    uint64_t first, intended, sent;
    uint32_t n;
} open_slot;

static struct {
    bc **conns;
    open_slot ring[OPEN_RING];
    atomic_uint_fast64_t sent, answered;
    atomic_bool sending_done;
} open_p;

static void *open_sender(void *arg)
{
    (void)arg;
    submit_buf b = {0};
    uint64_t deadline = C.duration_s > 0 ? t0_ns + (uint64_t)(C.duration_s * 1e9) : UINT64_MAX;
    uint64_t first;
    uint32_t n;
    if (!submit_buf_init(&b)) {
        atomic_fetch_add(&errors, 1);
        atomic_store(&stop_all, true);
    }
    while (!atomic_load(&stop_all) && next_batch(deadline, &first, &n)) {
        uint64_t k = atomic_load(&open_p.sent);
        while (k - atomic_load(&open_p.answered) >= OPEN_RING && !atomic_load(&stop_all))
            sleep_until(now_ns() + 100000);
        uint64_t intended = due_ns(first);
        sleep_until(intended);
        const Berth__V1__Request *req = submit_buf_fill(&b, first, n);
        open_p.ring[k % OPEN_RING] = (open_slot){first, intended, now_ns(), n};
        /* The id names the slot (OPEN_RING divides 2^31). */
        uint32_t id = 0x80000000u | (uint32_t)(k & 0x7fffffffu);
        atomic_store(&open_p.sent, k + 1); /* (the slot is written first) */
        if (bc_send(open_p.conns[k % C.producers], req, id) != BC_OK) {
            count_error("submit (open loop)", NULL, BC_EUNREACHABLE);
            atomic_store(&stop_all, true);
        }
    }
    submit_buf_free(&b);
    atomic_store(&open_p.sending_done, true);
    return NULL;
}

static void *open_receiver(void *arg)
{
    (void)arg;
    uint32_t P = C.producers;
    struct pollfd *fds = calloc(P, sizeof(*fds));
    if (fds == NULL) {
        atomic_fetch_add(&errors, 1);
        atomic_store(&stop_all, true);
        return NULL;
    }
    for (uint32_t j = 0; j < P; j++)
        fds[j] = (struct pollfd){.fd = bc_fd(open_p.conns[j]), .events = POLLIN};
    while (!atomic_load(&stop_all) &&
           !(atomic_load(&open_p.sending_done) &&
             atomic_load(&open_p.answered) == atomic_load(&open_p.sent))) {
        int ready = poll(fds, P, 100);
        for (uint32_t j = 0; ready > 0 && j < P; j++) {
            if (fds[j].revents == 0)
                continue;
            uint32_t id;
            Berth__V1__Response *r = NULL;
            int rv = bc_recv(open_p.conns[j], &id, &r);
            uint64_t acked = now_ns();
            if (rv != BC_OK) {
                count_error("submit (open loop)", NULL, rv);
                atomic_store(&stop_all, true);
                break;
            }
            const open_slot *s = &open_p.ring[(id & 0x7fffffffu) % OPEN_RING];
            if (r->status == NULL || r->status->code != BERTH__V1__CODE__OK)
                count_error("submit", r, rv);
            else
                submit_acked(s->first, s->n, s->intended, s->sent, acked);
            berth__v1__response__free_unpacked(r, NULL);
            atomic_fetch_add(&open_p.answered, 1);
        }
    }
    free(fds);
    return NULL;
}

/* Runs the open-loop producer to its end; false if it could not start. */
static bool open_produce(void)
{
    open_p.conns = calloc(C.producers, sizeof(*open_p.conns));
    if (open_p.conns == NULL)
        return false;
    bool ok = true;
    for (uint32_t j = 0; j < C.producers && ok; j++)
        ok = (open_p.conns[j] = thread_client()) != NULL;
    pthread_t snd, rcv;
    if (ok) {
        pthread_create(&rcv, NULL, open_receiver, NULL);
        pthread_create(&snd, NULL, open_sender, NULL);
        pthread_join(snd, NULL);
        pthread_join(rcv, NULL);
    }
    for (uint32_t j = 0; j < C.producers; j++)
        if (open_p.conns[j] != NULL)
            bc_close(open_p.conns[j]);
    free(open_p.conns);
    return ok;
}

/* ---- callers (--calls) ---- */

/* Awaits call id until it has ended; true when it resolved with the result
 * a worker gives call `index` (its index, then 'R'). */
static bool await_outcome(bc *c, const char *id, uint64_t index)
{
    for (;;) {
        Berth__V1__AwaitCallRequest w = BERTH__V1__AWAIT_CALL_REQUEST__INIT;
        w.instance_id = (char *)id;
        w.has_wait_ms = 1;
        w.wait_ms = 20000;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_AWAIT_CALL;
        req.await_call = &w;
        Berth__V1__Response *r = NULL;
        int rv = bc_call(c, &req, 30000, &r);
        if (rv != BC_OK || r->status == NULL || r->status->code != BERTH__V1__CODE__OK ||
            r->await_call == NULL || r->await_call->instance == NULL) {
            count_error("await_call", r, rv);
            if (r != NULL)
                berth__v1__response__free_unpacked(r, NULL);
            return false;
        }
        const Berth__V1__Instance *in = r->await_call->instance;
        int state = in->state;
        bool own = in->result != NULL && in->result->payload.len == sizeof(index) + 1 &&
                   memcmp(in->result->payload.data, &index, sizeof(index)) == 0 &&
                   in->result->payload.data[sizeof(index)] == 'R';
        berth__v1__response__free_unpacked(r, NULL);
        if (state == BERTH__V1__INSTANCE__STATE__RESOLVED) {
            if (!own)
                atomic_fetch_add(&wrong_results, 1);
            return own;
        }
        if (state == BERTH__V1__INSTANCE__STATE__FAILED) {
            count_error("a call failed", NULL, BC_OK);
            return false;
        }
    }
}

static void *caller(void *arg)
{
    (void)arg;
    bc *c = thread_client();
    if (c == NULL)
        return NULL;
    uint8_t *payload = malloc(C.payload);
    memset(payload, 'p', C.payload);
    uint64_t deadline = C.duration_s > 0 ? t0_ns + (uint64_t)(C.duration_s * 1e9) : UINT64_MAX;
    while (!atomic_load(&stop_all) && now_ns() < deadline) {
        uint64_t index = atomic_fetch_add(&next_task, 1);
        if (index >= (C.tasks ? C.tasks : cap))
            break;
        char topic[32];
        topic_name(topic, sizeof(topic), index);
        memcpy(payload, &index, sizeof(index));
        Berth__V1__CallRequest call = BERTH__V1__CALL_REQUEST__INIT;
        call.topic = topic;
        call.has_payload = 1;
        call.payload.data = payload;
        call.payload.len = C.payload;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
        req.call = &call;
        Berth__V1__Response *r = NULL;
        int rv = bc_call(c, &req, 30000, &r);
        if (rv != BC_OK || r->status == NULL || r->status->code != BERTH__V1__CODE__OK ||
            r->call == NULL || r->call->instance_id == NULL) {
            count_error("call", r, rv);
            if (r != NULL)
                berth__v1__response__free_unpacked(r, NULL);
            continue;
        }
        char id[33];
        snprintf(id, sizeof(id), "%s", r->call->instance_id);
        berth__v1__response__free_unpacked(r, NULL);
        atomic_store(&submit_ns[index], now_ns());
        atomic_fetch_add(&submitted, 1);
        if (await_outcome(c, id, index)) {
            atomic_store(&resolved_ns[index], now_ns());
            atomic_fetch_add(&resolved, 1);
        }
    }
    free(payload);
    bc_close(c);
    return NULL;
}

/* ---- workers ---- */

typedef struct worker {
    int id;
    samples fetch_wait;
    pthread_t th;
} worker;

typedef struct pending_completion {
    uint64_t task;
    char id[33];
    char token[33];
    uint8_t answer[9]; /* --calls: the result, the call's index then 'R' */
} pending_completion;

/* A worker holds task: the first time counts. */
static void record_fetched(uint64_t task)
{
    uint64_t none = 0;
    atomic_compare_exchange_strong(&fetched_ns[task], &none, now_ns());
}

static void record_completion(uint64_t task, uint64_t at)
{
    unsigned prev = atomic_fetch_add(&completions[task], 1);
    if (prev > 0) {
        atomic_fetch_add(&duplicates, 1);
        return;
    }
    atomic_store(&done_ns[task], at);
    atomic_fetch_add(&completed, 1);
}

static void flush(bc *c, const char *wid, pending_completion *pc, size_t n)
{
    if (n == 0)
        return;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    Berth__V1__CompleteRequest items[n], *ip[n];
    Berth__V1__Result results[n];
    for (size_t i = 0; i < n; i++) {
        berth__v1__complete_request__init(&items[i]);
        items[i].task_id = pc[i].id;
        items[i].worker_id = (char *)wid;
        items[i].lock_token = pc[i].token;
        if (C.calls) {
            berth__v1__result__init(&results[i]);
            results[i].has_payload = 1;
            results[i].payload.data = pc[i].answer;
            results[i].payload.len = sizeof(pc[i].answer);
            items[i].result = &results[i];
        }
        ip[i] = &items[i];
    }
    Berth__V1__CompleteBatchRequest cb = BERTH__V1__COMPLETE_BATCH_REQUEST__INIT;
    if (C.complete_batch == 1) {
        req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE;
        req.complete = &items[0];
    } else {
        cb.n_items = n;
        cb.items = ip;
        req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE_BATCH;
        req.complete_batch = &cb;
    }
    Berth__V1__Response *r = NULL;
    int rv = bc_call(c, &req, 30000, &r);
    uint64_t at = now_ns();
    if (rv != BC_OK || r->status == NULL || r->status->code != BERTH__V1__CODE__OK) {
        count_error("complete", r, rv);
    } else if (C.complete_batch == 1) {
        record_completion(pc[0].task, at);
    } else {
        for (size_t i = 0; i < n && i < r->complete_batch->n_statuses; i++) {
            if (r->complete_batch->statuses[i]->code == BERTH__V1__CODE__OK)
                record_completion(pc[i].task, at);
            else
                count_error("complete_batch item", NULL, BC_OK);
        }
    }
    if (r != NULL)
        berth__v1__response__free_unpacked(r, NULL);
}

static bool all_done(void)
{
    return atomic_load(&producers_done) &&
           atomic_load(&completed) + atomic_load(&errors) >= atomic_load(&submitted);
}

/* ---- --preload: a backlog nobody fetches ---- */

static atomic_uint_fast64_t preloaded;

static void *preloader(void *arg)
{
    (void)arg;
    bc *c = thread_client();
    if (c == NULL)
        return NULL;
    enum { B = 1000 }; /* berthd's default --batch-max */
    uint8_t *payload = calloc(1, C.payload);
    Berth__V1__SubmitRequest items[B], *ip[B];
    for (size_t i = 0; i < B; i++) {
        berth__v1__submit_request__init(&items[i]);
        items[i].topic = BACKLOG_TOPIC;
        items[i].has_payload = 1;
        items[i].payload.data = payload;
        items[i].payload.len = C.payload;
        ip[i] = &items[i];
    }
    memset(payload, 'b', C.payload);
    for (;;) {
        uint64_t first = atomic_fetch_add(&preloaded, B);
        if (first >= C.preload)
            break;
        Berth__V1__SubmitBatchRequest sb = BERTH__V1__SUBMIT_BATCH_REQUEST__INIT;
        sb.n_items = C.preload - first < B ? C.preload - first : B;
        sb.items = ip;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
        req.submit_batch = &sb;
        Berth__V1__Response *r = NULL;
        int rv = bc_call(c, &req, 60000, &r);
        if (rv != BC_OK || r->status == NULL || r->status->code != BERTH__V1__CODE__OK)
            count_error("preload", r, rv);
        if (r != NULL)
            berth__v1__response__free_unpacked(r, NULL);
    }
    free(payload);
    bc_close(c);
    return NULL;
}

static uint64_t du_total;

static int du_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)path;
    (void)f;
    if (flag == FTW_F)
        du_total += (uint64_t)st->st_blocks * 512;
    return 0;
}

/* The spawned berthd's resident memory and data directory, in MiB (-1:
 * not known: berthd was not spawned). */
static void measure(double *rss_mib, double *data_mib)
{
    *rss_mib = *data_mib = -1;
    if (spawned.pid <= 0)
        return;
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)spawned.pid);
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss_mib = atof(line + 6) / 1024.0;
    if (f != NULL)
        fclose(f);
    du_total = 0;
    if (nftw(spawned.dir, du_one, 16, FTW_PHYS) == 0)
        *data_mib = (double)du_total / (1024.0 * 1024.0);
}

static double preload_secs, rss_preloaded, data_preloaded, rss_end, data_end;

static void preload(void)
{
    if (C.preload == 0)
        return;
    uint64_t t = now_ns();
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, preloader, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    preload_secs = (double)(now_ns() - t) / 1e9;
    measure(&rss_preloaded, &data_preloaded);
    fprintf(stderr,
            "berth-bench: preloaded %" PRIu64 " tasks in %.1f s: berthd RSS %.0f MiB, data %.0f "
            "MiB\n",
            C.preload, preload_secs, rss_preloaded, data_preloaded);
}

/* ---- the fused worker: the client library's loop (tools/clients/c/worker.h) ---- */

/* A worker's completions on their way, in the order they were handed to
 * the loop (statuses come back in that order). */
typedef struct fused {
    worker *w;
    pending_completion *v;
    size_t head, n, cap;
    atomic_bool stop;
} fused;

static void fused_work(void *ctx, const Berth__V1__Task *task, bc_work *out)
{
    fused *f = ctx;
    uint64_t index;
    if (task->payload.len < sizeof(index)) {
        count_error("a task without its index", NULL, BC_OK);
        return;
    }
    memcpy(&index, task->payload.data, sizeof(index));
    if (index >= cap) {
        count_error("a task index out of range", NULL, BC_OK);
        return;
    }
    if (f->head + f->n == f->cap) { /* (compacted first; grown if still full) */
        if (f->n > 0 && f->head > 0)
            memmove(f->v, f->v + f->head, f->n * sizeof(*f->v));
        f->head = 0;
        if (f->n == f->cap) {
            size_t c = f->cap ? f->cap * 2 : 256;
            pending_completion *v = realloc(f->v, c * sizeof(*v));
            if (v == NULL)
                abort();
            f->v = v;
            f->cap = c;
        }
    }
    record_fetched(index);
    pending_completion *pc = &f->v[f->head + f->n++];
    pc->task = index;
    snprintf(pc->id, sizeof(pc->id), "%s", task->id);
    memcpy(pc->answer, &index, sizeof(index));
    pc->answer[sizeof(index)] = 'R';
    if (C.calls) {
        out->has_result = true;
        out->result = pc->answer;
        out->result_len = sizeof(pc->answer);
    }
}

static void fused_status(void *ctx, const char *task_id, const Berth__V1__Status *st)
{
    fused *f = ctx;
    uint64_t at = now_ns();
    /* In order: the first waiting one, unless a task without its index
     * was skipped. */
    for (size_t i = 0; i < f->n; i++) {
        pending_completion *pc = &f->v[f->head + i];
        if (strcmp(pc->id, task_id ? task_id : "") != 0)
            continue;
        if (st != NULL && st->code == BERTH__V1__CODE__OK)
            record_completion(pc->task, at);
        else
            count_error("completion", NULL, BC_OK);
        f->v[f->head + i] = f->v[f->head]; /* (the head takes its place: found by id) */
        f->head++;
        f->n--;
        return;
    }
}

static void fused_fetch(void *ctx, uint64_t ns)
{
    fused *f = ctx;
    sample_add(&f->w->fetch_wait, ns);
    atomic_store(&f->stop, atomic_load(&stop_all) || all_done());
}

static void fused_main(worker *w, bc *c, const char *wid, char *const *topics)
{
    fused f = {.w = w};
    bc_worker bw = {.worker_id = wid,
                    .topics = topics,
                    .n_topics = C.topics,
                    .max_tasks = C.fetch_batch,
                    .lock_ms = C.lock_ms,
                    .wait_ms = 200, /* short: the loop also watches for the end */
                    .timeout_ms = 30000,
                    .work = fused_work,
                    .on_status = fused_status,
                    .on_fetch = fused_fetch,
                    .ctx = &f,
                    .stop = &f.stop};
    atomic_store(&f.stop, atomic_load(&stop_all) || all_done());
    if (bc_worker_run(c, &bw) != BC_OK)
        count_error("the worker loop", NULL, BC_EINVAL);
    free(f.v);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    char wid[32];
    snprintf(wid, sizeof(wid), "bench-worker-%d", w->id);
    bc *c = thread_client();
    if (c == NULL)
        return NULL;
    char *topics[MAX_TOPICS];
    char names[MAX_TOPICS][32];
    for (uint32_t k = 0; k < C.topics; k++) {
        snprintf(names[k], sizeof(names[k]), "bench-%u", k);
        topics[k] = names[k];
    }
    if (!C.separate) {
        fused_main(w, c, wid, topics);
        bc_close(c);
        return NULL;
    }
    pending_completion *pc = calloc(C.complete_batch, sizeof(*pc));
    size_t npc = 0;
    while (!atomic_load(&stop_all) && !all_done()) {
        Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
        f.worker_id = wid;
        f.n_topics = C.topics;
        f.topics = topics;
        f.has_max_tasks = 1;
        f.max_tasks = C.fetch_batch;
        f.has_lock_ms = 1;
        f.lock_ms = C.lock_ms;
        f.has_wait_ms = 1;
        f.wait_ms = 200; /* short: the loop also watches for the end */
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
        req.fetch = &f;
        Berth__V1__Response *r = NULL;
        uint64_t t = now_ns();
        int rv = bc_call(c, &req, 30000, &r);
        sample_add(&w->fetch_wait, now_ns() - t);
        if (rv != BC_OK || r->status == NULL || r->status->code != BERTH__V1__CODE__OK) {
            count_error("fetch", r, rv);
            if (r != NULL)
                berth__v1__response__free_unpacked(r, NULL);
            continue;
        }
        for (size_t i = 0; i < r->fetch->n_tasks; i++) {
            const Berth__V1__Task *task = r->fetch->tasks[i];
            uint64_t index;
            if (task->payload.len < sizeof(index)) {
                count_error("a task without its index", NULL, BC_OK);
                continue;
            }
            memcpy(&index, task->payload.data, sizeof(index));
            if (index >= cap) {
                count_error("a task index out of range", NULL, BC_OK);
                continue;
            }
            record_fetched(index);
            pc[npc].task = index;
            memcpy(pc[npc].answer, &index, sizeof(index));
            pc[npc].answer[sizeof(index)] = 'R';
            snprintf(pc[npc].id, sizeof(pc[npc].id), "%s", task->id);
            snprintf(pc[npc].token, sizeof(pc[npc].token), "%s", task->lock_token);
            if (++npc == C.complete_batch) {
                flush(c, wid, pc, npc);
                npc = 0;
            }
        }
        berth__v1__response__free_unpacked(r, NULL);
        /* Nothing more came in this fetch: do not sit on a partial batch. */
        flush(c, wid, pc, npc);
        npc = 0;
    }
    free(pc);
    bc_close(c);
    return NULL;
}

/* ---- the push receiver (--push) ---- */

static nng_socket push_sock;

/* One receiver thread: its own context of the REP socket. */
static void *receiver_main(void *arg)
{
    (void)arg;
    nng_ctx ctx;
    nng_aio *aio;
    if (nng_ctx_open(&ctx, push_sock) != 0 || nng_aio_alloc(&aio, NULL, NULL) != 0) {
        atomic_fetch_add(&errors, 1);
        return NULL;
    }
    Berth__V1__DeliveryAck ack = BERTH__V1__DELIVERY_ACK__INIT;
    ack.has_outcome = 1;
    ack.outcome = BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED;
    uint8_t out[16];
    size_t out_len = berth__v1__delivery_ack__pack(&ack, out);
    while (!atomic_load(&stop_all) && !all_done()) {
        nng_aio_set_timeout(aio, 200);
        nng_ctx_recv(ctx, aio);
        nng_aio_wait(aio);
        if (nng_aio_result(aio) != 0)
            continue;
        nng_msg *m = nng_aio_get_msg(aio);
        Berth__V1__Delivery *d = berth__v1__delivery__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
        uint64_t at = now_ns(), i = 0;
        if (d != NULL && d->payload.len >= sizeof(i)) {
            memcpy(&i, d->payload.data, sizeof(i));
            if (i < cap) {
                if (atomic_fetch_add(&completions[i], 1) == 0) {
                    atomic_store(&done_ns[i], at);
                    atomic_fetch_add(&completed, 1);
                } else {
                    atomic_fetch_add(&duplicates, 1);
                }
            }
        }
        if (d != NULL)
            berth__v1__delivery__free_unpacked(d, NULL);
        nng_msg_clear(m);
        if (nng_msg_append(m, out, out_len) != 0) {
            nng_msg_free(m);
            continue;
        }
        nng_aio_set_msg(aio, m);
        nng_aio_set_timeout(aio, 5000);
        nng_ctx_send(ctx, aio);
        nng_aio_wait(aio);
        if (nng_aio_result(aio) != 0)
            nng_msg_free(nng_aio_get_msg(aio));
    }
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    return NULL;
}

/* Listens for berthd and deploys the topics as push channels to it. */
static bool push_setup(void)
{
    nng_listener l;
    int port = 0;
    if (nng_rep0_open(&push_sock) != 0 || nng_listen(push_sock, "tcp://127.0.0.1:0", &l, 0) != 0 ||
        nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) != 0) {
        fprintf(stderr, "berth-bench: cannot listen for pushes\n");
        return false;
    }
    char transport[64];
    snprintf(transport, sizeof(transport), "nng+req://127.0.0.1:%d", port);
    Berth__V1__ChannelDecl decl[MAX_TOPICS], *dp[MAX_TOPICS];
    char names[MAX_TOPICS][32];
    for (uint32_t k = 0; k < C.topics; k++) {
        berth__v1__channel_decl__init(&decl[k]);
        topic_name(names[k], sizeof(names[k]), k);
        decl[k].name = names[k];
        decl[k].transport = transport;
        dp[k] = &decl[k];
    }
    Berth__V1__DeployRequest d = BERTH__V1__DEPLOY_REQUEST__INIT;
    d.id = "bench";
    d.channels = dp;
    d.n_channels = C.topics;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DEPLOY;
    req.deploy = &d;
    bc *a;
    char err[256];
    Berth__V1__AdminResponse *r = NULL;
    if (bc_open(C.admin, &a, err, sizeof(err)) != BC_OK) {
        fprintf(stderr, "berth-bench: %s\n", err);
        return false;
    }
    int rv = bc_admin_call(a, &req, NULL, 0, 10000, &r);
    bc_close(a);
    bool ok = rv == BC_OK && r->status != NULL && r->status->code == BERTH__V1__CODE__OK;
    if (!ok)
        fprintf(stderr, "berth-bench: deploying the push channels failed: %s\n",
                rv != BC_OK ? bc_strerror(rv)
                            : (r->status && r->status->message ? r->status->message : "?"));
    if (r != NULL)
        berth__v1__admin_response__free_unpacked(r, NULL);
    return ok;
}

/* ---- berthd for --spawn ---- */

/* Stops the spawned berthd; false unless it exited 0. */
static bool stop_berthd(void)
{
    if (spawned.pid <= 0)
        return true;
    kill(spawned.pid, SIGTERM);
    int status = 0;
    waitpid(spawned.pid, &status, 0);
    spawned.pid = 0;
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean)
        fprintf(stderr, "berth-bench: berthd did not exit cleanly (status %d)\n", status);
    spawn_cleanup(&spawned, "berth-bench");
    return clean;
}

/* ---- report ---- */

static void write_csv(const char *path, uint64_t n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "berth-bench: cannot write %s: %s\n", path, strerror(errno));
        return;
    }
    uint64_t last = 0;
    for (uint64_t i = 0; i < n; i++)
        if (done_ns[i] > last)
            last = done_ns[i];
    size_t secs = last > t0_ns ? (size_t)((last - t0_ns) / 1000000000u) + 1 : 1;
    samples *per = calloc(secs, sizeof(*per));
    uint64_t *subs = calloc(secs, sizeof(*subs));
    for (uint64_t i = 0; i < n; i++) {
        if (submit_ns[i] > t0_ns) {
            size_t s = (size_t)((submit_ns[i] - t0_ns) / 1000000000u);
            if (s < secs)
                subs[s]++;
        }
        if (done_ns[i] == 0)
            continue;
        size_t s = (size_t)((done_ns[i] - t0_ns) / 1000000000u);
        sample_add(&per[s], e2e_ns(i));
    }
    fprintf(f, "second,submitted_per_s,completed_per_s,e2e_p50_ms,e2e_p99_ms\n");
    for (size_t s = 0; s < secs; s++) {
        pct p = percentiles(&per[s]);
        fprintf(f, "%zu,%" PRIu64 ",%zu,%.3f,%.3f\n", s + 1, subs[s], per[s].n, p.p50, p.p99);
        free(per[s].v);
    }
    free(per);
    free(subs);
    fclose(f);
}

static void *progress(void *arg)
{
    (void)arg;
    uint64_t last = 0;
    while (!atomic_load(&stop_all)) {
        struct timespec one = {1, 0};
        nanosleep(&one, NULL);
        uint64_t c = atomic_load(&completed);
        fprintf(stderr,
                "\r%6.0fs  submitted %" PRIu64 "  completed %" PRIu64 "  (%" PRIu64 "/s)   ",
                (double)(now_ns() - t0_ns) / 1e9, atomic_load(&submitted), c, c - last);
        last = c;
    }
    fprintf(stderr, "\r%*s\r", 72, "");
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: berth-bench (--operate URL | --spawn) (--tasks N | --duration S)\n"
               "                   [--producers P] [--workers W] [--submit-batch B]\n"
               "                   [--fetch-batch F] [--complete-batch C] [--payload BYTES]\n"
               "                   [--topics K] [--lock-ms MS] [--json] [--csv FILE]\n"
               "                   [--client direct|nng] [--calls] [--push [--admin URL]]\n"
               "                   [--priorities K] [--delay-ms D] [--no-fused] [--preload N]\n"
               "                   [--rate TASKS_PER_S] [--tls-ca FILE]\n");
}

static bool num(const char *s, uint64_t *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0';
}

int main(int argc, char **argv)
{
    C = (cfg){.producers = 8,
              .workers = 8,
              .submit_batch = 1,
              .fetch_batch = 1,
              .complete_batch = 1,
              .topics = 1,
              .payload = 100,
              .lock_ms = 60000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n = 0;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--spawn") == 0) {
            C.spawn = true;
        } else if (strcmp(a, "--json") == 0) {
            C.json = true;
        } else if (strcmp(a, "--calls") == 0) {
            C.calls = true;
        } else if (strcmp(a, "--push") == 0) {
            C.push = true;
        } else if (strcmp(a, "--no-fused") == 0) {
            C.separate = true;
        } else if (strcmp(a, "--preload") == 0 && num(v, &n)) {
            C.preload = n, i++;
        } else if (strcmp(a, "--rate") == 0 && v && atof(v) > 0) {
            C.rate = atof(v), i++;
        } else if (strcmp(a, "--admin") == 0 && v) {
            C.admin = argv[++i];
        } else if (strcmp(a, "--tls-ca") == 0 && v) {
            C.tls_ca = argv[++i];
        } else if (strcmp(a, "--operate") == 0 && v) {
            C.operate = v, i++;
        } else if (strcmp(a, "--client") == 0 && v &&
                   (strcmp(v, "direct") == 0 || strcmp(v, "nng") == 0)) {
            C.nng_client = strcmp(v, "nng") == 0, i++;
        } else if (strcmp(a, "--csv") == 0 && v) {
            C.csv = v, i++;
        } else if (strcmp(a, "--duration") == 0 && v) {
            C.duration_s = atof(v), i++;
        } else if (num(v, &n) && n > 0) {
            i++;
            if (strcmp(a, "--tasks") == 0)
                C.tasks = n;
            else if (strcmp(a, "--producers") == 0)
                C.producers = (uint32_t)n;
            else if (strcmp(a, "--workers") == 0)
                C.workers = (uint32_t)n;
            else if (strcmp(a, "--submit-batch") == 0)
                C.submit_batch = (uint32_t)n;
            else if (strcmp(a, "--fetch-batch") == 0)
                C.fetch_batch = (uint32_t)n;
            else if (strcmp(a, "--complete-batch") == 0)
                C.complete_batch = (uint32_t)n;
            else if (strcmp(a, "--payload") == 0)
                C.payload = (uint32_t)n;
            else if (strcmp(a, "--topics") == 0 && n <= MAX_TOPICS)
                C.topics = (uint32_t)n;
            else if (strcmp(a, "--lock-ms") == 0)
                C.lock_ms = n;
            else if (strcmp(a, "--priorities") == 0 && n <= UINT32_MAX)
                C.priorities = (uint32_t)n;
            else if (strcmp(a, "--delay-ms") == 0)
                C.delay_ms = n;
            else {
                fprintf(stderr, "berth-bench: unknown or out-of-range option %s\n", a);
                return 2;
            }
        } else {
            fprintf(stderr, "berth-bench: bad argument %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if ((C.operate == NULL) == !C.spawn || (C.tasks == 0) == (C.duration_s <= 0)) {
        usage(stderr);
        return 2;
    }
    if (C.payload < 8)
        C.payload = 8; /* room for the task index */

    if (C.spawn) {
        if (spawn_berthd(&spawned, "berth-bench", NULL) != 0) {
            stop_berthd();
            return 1;
        }
        C.operate = spawned.url;
        C.admin = spawned.admin;
    }
    if (C.admin == NULL)
        C.admin = "tcp://127.0.0.1:7451";
    /* Task slots: N, or for a timed run more than any run can reach; the
     * mapping is lazy, only touched pages cost memory. */
    cap = C.tasks ? C.tasks : (64u << 20);
    submit_ns = mmap(NULL, cap * 8, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    done_ns = mmap(NULL, cap * 8, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    fetched_ns = mmap(NULL, cap * 8, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    completions = mmap(NULL, cap * sizeof(*completions), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    resolved_ns = mmap(NULL, cap * 8, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (submit_ns == MAP_FAILED || done_ns == MAP_FAILED || fetched_ns == MAP_FAILED ||
        completions == MAP_FAILED || resolved_ns == MAP_FAILED) {
        perror("berth-bench: mmap");
        stop_berthd();
        return 1;
    }

    preload();
    t0_ns = now_ns();
    pthread_t *pt = calloc(C.producers, sizeof(*pt)), prog;
    worker *ws = calloc(C.workers, sizeof(*ws));
    bool tty = isatty(STDERR_FILENO);
    if (tty)
        pthread_create(&prog, NULL, progress, NULL);
    if (C.push && (C.calls || !push_setup())) {
        if (C.calls)
            fprintf(stderr, "berth-bench: --push and --calls do not go together\n");
        stop_berthd();
        return 1;
    }
    for (uint32_t i = 0; i < C.workers; i++) {
        ws[i].id = (int)i;
        pthread_create(&ws[i].th, NULL, C.push ? receiver_main : worker_main, &ws[i]);
    }
    if (open_loop()) {
        if (!open_produce())
            atomic_store(&stop_all, true);
    } else {
        for (uint32_t i = 0; i < C.producers; i++)
            pthread_create(&pt[i], NULL, C.calls ? caller : producer, NULL);
        for (uint32_t i = 0; i < C.producers; i++)
            pthread_join(pt[i], NULL);
    }
    uint64_t produced_ns = now_ns();
    atomic_store(&producers_done, true);
    /* Drain: workers stop when everything submitted is completed; a loss
     * would keep them looking, so the drain is bounded. */
    uint64_t drain_end = now_ns() + (C.lock_ms + 30000) * 1000000u;
    while (!all_done() && now_ns() < drain_end) {
        struct timespec tick = {0, 20 * 1000000L};
        nanosleep(&tick, NULL);
    }
    atomic_store(&stop_all, true);
    for (uint32_t i = 0; i < C.workers; i++)
        pthread_join(ws[i].th, NULL);
    if (tty)
        pthread_join(prog, NULL);
    measure(&rss_end, &data_end);
    if (!stop_berthd())
        atomic_fetch_add(&errors, 1);

    uint64_t n = atomic_load(&submitted), lost = 0;
    uint64_t slots = atomic_load(&next_task) < cap ? atomic_load(&next_task) : cap;
    samples e2e = {0}, fw = {0}, cl = {0}, fe = {0};
    uint64_t last_done = t0_ns, unresolved = 0, unacked = 0;
    for (uint64_t i = 0; i < slots; i++) {
        if (submit_ns[i] == 0) {
            /* Never acknowledged: not ours to find. But one completed
             * when no submit failed means the bench lost track of it. */
            unacked += completions[i] > 0;
            continue;
        }
        if (C.calls && resolved_ns[i] == 0)
            unresolved++;
        else if (C.calls)
            sample_add(&cl, resolved_ns[i] - submit_ns[i]);
        if (completions[i] == 0) {
            lost++;
            continue;
        }
        sample_add(&e2e, e2e_ns(i));
        if (fetched_ns[i] != 0)
            sample_add(&fe, fetched_ns[i] > submit_ns[i] ? fetched_ns[i] - submit_ns[i] : 0);
        if (done_ns[i] > last_done)
            last_done = done_ns[i];
        if (C.calls && resolved_ns[i] > last_done)
            last_done = resolved_ns[i];
    }
    for (uint32_t i = 0; i < C.workers; i++) {
        for (size_t k = 0; k < ws[i].fetch_wait.n; k++)
            sample_add(&fw, (uint64_t)ws[i].fetch_wait.v[k] * 1000);
        free(ws[i].fetch_wait.v);
    }
    if (C.csv != NULL)
        write_csv(C.csv, slots);
    double secs = (double)(last_done - t0_ns) / 1e9;
    double submit_secs = (double)(produced_ns - t0_ns) / 1e9;
    pct pe = percentiles(&e2e), pf = percentiles(&fw), pc = percentiles(&cl),
        ps = percentiles(&submit_wait), pl = percentiles(&submit_late), ph = percentiles(&fe);
    if (unacked > 0 && atomic_load(&errors) == 0) {
        fprintf(stderr,
                "berth-bench: %" PRIu64 " tasks completed whose submit no answer acknowledged\n",
                unacked);
        atomic_fetch_add(&errors, unacked);
    }
    uint64_t errs = atomic_load(&errors), dups = atomic_load(&duplicates);
    uint64_t wrong = atomic_load(&wrong_results);
    if (C.json && C.calls) {
        printf("{\"mode\":\"calls\",\"calls\":%" PRIu64 ",\"seconds\":%.3f,\"calls_per_s\":%.1f,"
               "\"call_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"errors\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicates\":%" PRIu64
               ",\"unresolved\":%" PRIu64 ",\"wrong_results\":%" PRIu64 ","
               "\"callers\":%u,\"workers\":%u,\"fetch_batch\":%u,\"complete_batch\":%u,"
               "\"payload\":%u,\"topics\":%u}\n",
               n, secs, secs > 0 ? (double)(n - unresolved) / secs : 0, pc.p50, pc.p90, pc.p99,
               pc.max, errs, lost, dups, unresolved, wrong, C.producers, C.workers, C.fetch_batch,
               C.complete_batch, C.payload, C.topics);
    } else if (C.calls) {
        printf("berth-bench --calls: %u callers, %u workers (fetch %u, complete %u), "
               "%u-byte payloads, %u topic(s)\n",
               C.producers, C.workers, C.fetch_batch, C.complete_batch, C.payload, C.topics);
        printf("  calls          %12" PRIu64 "\n", n);
        printf("  seconds        %12.3f\n", secs);
        printf("  calls/s        %12.1f\n", secs > 0 ? (double)(n - unresolved) / secs : 0);
        printf("  call ms        p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (accepted -> outcome)\n",
               pc.p50, pc.p90, pc.p99, pc.max);
        printf("  errors %" PRIu64 "  lost %" PRIu64 "  duplicates %" PRIu64 "  unresolved %" PRIu64
               "  wrong results %" PRIu64 "\n",
               errs, lost, dups, unresolved, wrong);
    } else if (C.json && C.push) {
        printf("{\"mode\":\"push\",\"deliveries\":%" PRIu64 ",\"seconds\":%.3f,"
               "\"deliveries_per_s\":%.1f,\"submit_per_s\":%.1f,"
               "\"receipt_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"errors\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicates\":%" PRIu64 ","
               "\"producers\":%u,\"receivers\":%u,\"submit_batch\":%u,\"payload\":%u,"
               "\"topics\":%u}\n",
               n, secs, secs > 0 ? (double)(n - lost) / secs : 0,
               submit_secs > 0 ? n / submit_secs : 0, pe.p50, pe.p90, pe.p99, pe.max, errs, lost,
               dups, C.producers, C.workers, C.submit_batch, C.payload, C.topics);
    } else if (C.push) {
        printf("berth-bench --push: %u producers (batch %u), %u receiver threads, "
               "%u-byte payloads, %u channel(s)\n",
               C.producers, C.submit_batch, C.workers, C.payload, C.topics);
        printf("  deliveries     %12" PRIu64 "\n", n);
        printf("  seconds        %12.3f\n", secs);
        printf("  deliveries/s   %12.1f   (submit %0.1f/s)\n",
               secs > 0 ? (double)(n - lost) / secs : 0, submit_secs > 0 ? n / submit_secs : 0);
        printf("  receipt ms     p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (submit sent -> "
               "received)\n",
               pe.p50, pe.p90, pe.p99, pe.max);
        printf("  errors %" PRIu64 "  lost %" PRIu64 "  duplicates %" PRIu64 "\n", errs, lost,
               dups);
    } else if (C.json) {
        printf("{\"tasks\":%" PRIu64 ",\"seconds\":%.3f,\"tasks_per_s\":%.1f,\"submit_per_s\":%.1f,"
               "\"e2e_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"fetch_wait_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"submit_wait_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"submit_late_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"fetched_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"errors\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicates\":%" PRIu64 ","
               "\"producers\":%u,\"workers\":%u,\"submit_batch\":%u,\"fetch_batch\":%u,"
               "\"complete_batch\":%u,\"payload\":%u,\"topics\":%u,\"priorities\":%u,"
               "\"delay_ms\":%" PRIu64 ",\"shape\":\"%s\",\"preload\":%" PRIu64
               ",\"preload_s\":%.1f,\"rss_mib\":{\"preloaded\":%.1f,\"end\":%.1f},"
               "\"data_mib\":{\"preloaded\":%.1f,\"end\":%.1f},\"rate\":%.1f}\n",
               n, secs, secs > 0 ? (double)(n - lost) / secs : 0,
               submit_secs > 0 ? n / submit_secs : 0, pe.p50, pe.p90, pe.p99, pe.max, pf.p50,
               pf.p90, pf.p99, pf.max, ps.p50, ps.p90, ps.p99, ps.max, pl.p50, pl.p90, pl.p99,
               pl.max, ph.p50, ph.p90, ph.p99, ph.max, errs, lost, dups, C.producers, C.workers,
               C.submit_batch, C.fetch_batch, C.complete_batch, C.payload, C.topics, C.priorities,
               C.delay_ms, C.separate ? "separate" : "fused", C.preload, preload_secs,
               rss_preloaded, rss_end, data_preloaded, data_end, C.rate);
    } else {
        printf("berth-bench: %u producers (batch %u), %u workers (fetch %u, complete %s), "
               "%u-byte payloads, %u topic(s), %u priorities, half delayed up to %" PRIu64 " ms\n",
               C.producers, C.submit_batch, C.workers, C.fetch_batch,
               C.separate ? "separately" : "on the next fetch", C.payload, C.topics, C.priorities,
               C.delay_ms);
        printf("  tasks          %12" PRIu64 "\n", n);
        printf("  seconds        %12.3f\n", secs);
        printf("  tasks/s        %12.1f   (submit %0.1f/s)\n",
               secs > 0 ? (double)(n - lost) / secs : 0, submit_secs > 0 ? n / submit_secs : 0);
        printf("  e2e ms         p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", pe.p50, pe.p90, pe.p99,
               pe.max);
        printf("  fetched ms     p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (as e2e, to the "
               "worker's hands)\n",
               ph.p50, ph.p90, ph.p99, ph.max);
        printf("  fetch wait ms  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", pf.p50, pf.p90, pf.p99,
               pf.max);
        printf("  submit wait ms p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (sent -> answered)\n",
               ps.p50, ps.p90, ps.p99, ps.max);
        if (C.rate > 0)
            printf("  submit late ms p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (due -> sent)\n",
                   pl.p50, pl.p90, pl.p99, pl.max);
        printf("  errors %" PRIu64 "  lost %" PRIu64 "  duplicates %" PRIu64 "\n", errs, lost,
               dups);
    }
    free(e2e.v);
    free(fe.v);
    free(fw.v);
    free(cl.v);
    free(pt);
    free(ws);
    if (lost || dups || errs || unresolved || wrong) {
        fprintf(stderr,
                "berth-bench: FAILED: %" PRIu64 " lost, %" PRIu64 " duplicate, %" PRIu64
                " errors, %" PRIu64 " calls unresolved, %" PRIu64 " with another's result\n",
                lost, dups, errs, unresolved, wrong);
        return 1;
    }
    return 0;
}
