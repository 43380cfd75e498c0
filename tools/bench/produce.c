/*
 * produce.c — berth-bench's producers: what submits the tasks (or makes
 * the calls) and records, in the ledger (bench.h), when each submit was
 * acknowledged. Three shapes:
 *
 *   closed loop  --producers threads, each with its own connection,
 *                one submit (or submit_batch) at a time; with --rate
 *                over nng each sends on time unless its last is unanswered
 *   open loop    --rate over direct connections: one thread sends every
 *                batch at its due time over the connections in turn,
 *                another reads the answers
 *   callers      --calls: each thread makes one call at a time and
 *                awaits its outcome, checking it is its own
 *
 * and --preload, a backlog on BACKLOG_TOPIC submitted before the run.
 * main (bench.c) calls bench_preload() then bench_produce(), on its own thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench/bench.h"

/* ---- producers ---- */

/* A producer behind a slow submit, or not scheduled in time, sends late. */
samples bench_submit_wait, bench_submit_late;
static pthread_mutex_t submit_wait_mu = PTHREAD_MUTEX_INITIALIZER;

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
    uint32_t B = bench_cfg.submit_batch;
    b->payloads = calloc(B, bench_cfg.payload);
    b->topics = calloc(B, sizeof(*b->topics));
    b->idx = calloc(B, sizeof(*b->idx));
    b->items = calloc(B, sizeof(*b->items));
    b->ip = calloc(B, sizeof(*b->ip));
    if (b->payloads == NULL || b->topics == NULL || b->idx == NULL || b->items == NULL ||
        b->ip == NULL)
        return false;
    memset(b->payloads, 'p', (size_t)B * bench_cfg.payload);
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
        uint8_t *p = b->payloads + (size_t)i * bench_cfg.payload;
        memcpy(p, &b->idx[i], sizeof(b->idx[i]));
        bench_topic_name(b->topics[i], sizeof(b->topics[i]), b->idx[i]);
        Berth__V1__SubmitRequest *it = &b->items[i];
        berth__v1__submit_request__init(it);
        it->topic = b->topics[i];
        it->has_payload = 1;
        it->payload.data = p;
        it->payload.len = bench_cfg.payload;
        if (bench_cfg.priorities > 0) {
            it->has_priority = 1;
            it->priority = (uint32_t)(b->idx[i] % bench_cfg.priorities);
        }
        if (bench_cfg.delay_ms > 0 && b->idx[i] % 2 == 1) {
            it->has_delay_ms = 1;
            it->delay_ms = (b->idx[i] * 2654435761u) % (bench_cfg.delay_ms + 1);
        }
        b->ip[i] = it;
    }
    berth__v1__request__init(&b->req);
    berth__v1__submit_batch_request__init(&b->sb);
    if (bench_cfg.submit_batch == 1) {
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
    uint64_t at = intended ? intended : bench_cfg.push ? sent : acked;
    for (uint32_t i = 0; i < n; i++)
        atomic_store(&bench_submit_ns[first + i], at);
    pthread_mutex_lock(&submit_wait_mu);
    samples_add(&bench_submit_wait, acked - sent);
    if (intended > 0)
        samples_add(&bench_submit_late, sent - intended);
    pthread_mutex_unlock(&submit_wait_mu);
    atomic_fetch_add(&bench_submitted, n);
}

/* The next batch of task numbers, or false when there are no more. */
static bool next_batch(uint64_t deadline, uint64_t *first, uint32_t *n)
{
    if (atomic_load(&bench_stop_all) || bench_now_ns() >= deadline)
        return false;
    *first = atomic_fetch_add(&bench_next_task, bench_cfg.submit_batch);
    uint64_t limit = bench_cfg.tasks ? bench_cfg.tasks : bench_task_cap;
    if (*first >= limit)
        return false;
    *n = (uint32_t)(limit - *first < bench_cfg.submit_batch ? limit - *first
                                                            : bench_cfg.submit_batch);
    return true;
}

/* --rate: batch `first` is due at t0 + first / rate, late or not. */
static uint64_t due_ns(uint64_t first)
{
    return bench_t0_ns + (uint64_t)((double)first * 1e9 / bench_cfg.rate);
}

/* --rate over direct connections: the open-loop producer below. */
static bool open_loop(void)
{
    return bench_cfg.rate > 0 && !bench_cfg.calls && !bench_cfg.nng_client &&
           strncmp(bench_cfg.operate, "tcp://", 6) == 0;
}

static void *producer(void *arg)
{
    (void)arg;
    bc *c = bench_thread_client();
    submit_buf b = {0};
    if (c == NULL || !submit_buf_init(&b)) {
        submit_buf_free(&b);
        if (c != NULL)
            bc_close(c);
        return NULL;
    }
    uint64_t deadline = bench_cfg.duration_s > 0
                            ? bench_t0_ns + (uint64_t)(bench_cfg.duration_s * 1e9)
                            : UINT64_MAX;
    uint64_t first;
    uint32_t n;
    while (next_batch(deadline, &first, &n)) {
        /* --rate without a direct connection: each producer sends on time
         * unless its previous submit is still unanswered; the latency runs
         * from the due time all the same, so a stall is not hidden. */
        uint64_t intended = bench_cfg.rate > 0 ? due_ns(first) : 0;
        if (intended > 0)
            bench_sleep_until(intended);
        const Berth__V1__Request *req = submit_buf_fill(&b, first, n);
        uint64_t sent = bench_now_ns();
        Berth__V1__Response *r = bench_round_trip(c, req, 30000, "submit", NULL);
        if (r != NULL) {
            submit_acked(first, n, intended, sent, bench_now_ns());
            berth__v1__response__free_unpacked(r, NULL);
        }
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
    uint64_t deadline = bench_cfg.duration_s > 0
                            ? bench_t0_ns + (uint64_t)(bench_cfg.duration_s * 1e9)
                            : UINT64_MAX;
    uint64_t first;
    uint32_t n;
    if (!submit_buf_init(&b)) {
        atomic_fetch_add(&bench_errors, 1);
        atomic_store(&bench_stop_all, true);
    }
    while (!atomic_load(&bench_stop_all) && next_batch(deadline, &first, &n)) {
        uint64_t k = atomic_load(&open_p.sent);
        while (k - atomic_load(&open_p.answered) >= OPEN_RING && !atomic_load(&bench_stop_all))
            bench_sleep_until(bench_now_ns() + 100000);
        uint64_t intended = due_ns(first);
        bench_sleep_until(intended);
        const Berth__V1__Request *req = submit_buf_fill(&b, first, n);
        open_p.ring[k % OPEN_RING] = (open_slot){first, intended, bench_now_ns(), n};
        /* The id names the slot (OPEN_RING divides 2^31). */
        uint32_t id = 0x80000000u | (uint32_t)(k & 0x7fffffffu);
        atomic_store(&open_p.sent, k + 1); /* (the slot is written first) */
        if (bc_send(open_p.conns[k % bench_cfg.producers], req, id) != BC_OK) {
            bench_count_error("submit (open loop)", NULL, BC_EUNREACHABLE);
            atomic_store(&bench_stop_all, true);
        }
    }
    submit_buf_free(&b);
    atomic_store(&open_p.sending_done, true);
    return NULL;
}

static void *open_receiver(void *arg)
{
    (void)arg;
    uint32_t P = bench_cfg.producers;
    struct pollfd *fds = calloc(P, sizeof(*fds));
    if (fds == NULL) {
        atomic_fetch_add(&bench_errors, 1);
        atomic_store(&bench_stop_all, true);
        return NULL;
    }
    for (uint32_t j = 0; j < P; j++)
        fds[j] = (struct pollfd){.fd = bc_fd(open_p.conns[j]), .events = POLLIN};
    while (!atomic_load(&bench_stop_all) &&
           !(atomic_load(&open_p.sending_done) &&
             atomic_load(&open_p.answered) == atomic_load(&open_p.sent))) {
        int ready = poll(fds, P, 100);
        for (uint32_t j = 0; ready > 0 && j < P; j++) {
            if (fds[j].revents == 0)
                continue;
            uint32_t id;
            Berth__V1__Response *r = NULL;
            int rv = bc_recv(open_p.conns[j], &id, &r);
            uint64_t acked = bench_now_ns();
            if (rv != BC_OK) {
                bench_count_error("submit (open loop)", NULL, rv);
                atomic_store(&bench_stop_all, true);
                break;
            }
            const open_slot *s = &open_p.ring[(id & 0x7fffffffu) % OPEN_RING];
            if (r->status == NULL || r->status->code != BERTH__V1__CODE__OK)
                bench_count_error("submit", r, rv);
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
    open_p.conns = calloc(bench_cfg.producers, sizeof(*open_p.conns));
    if (open_p.conns == NULL)
        return false;
    bool ok = true;
    for (uint32_t j = 0; j < bench_cfg.producers && ok; j++)
        ok = (open_p.conns[j] = bench_thread_client()) != NULL;
    pthread_t snd, rcv;
    if (ok) {
        pthread_create(&rcv, NULL, open_receiver, NULL);
        pthread_create(&snd, NULL, open_sender, NULL);
        pthread_join(snd, NULL);
        pthread_join(rcv, NULL);
    }
    for (uint32_t j = 0; j < bench_cfg.producers; j++)
        if (open_p.conns[j] != NULL)
            bc_close(open_p.conns[j]);
    free(open_p.conns);
    return ok;
}

/* ---- callers (--calls) ---- */

static bool has_instance(const Berth__V1__Response *r)
{
    return r->await_call != NULL && r->await_call->instance != NULL;
}

static bool has_instance_id(const Berth__V1__Response *r)
{
    return r->call != NULL && r->call->instance_id != NULL;
}

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
        Berth__V1__Response *r = bench_round_trip(c, &req, 30000, "await_call", has_instance);
        if (r == NULL)
            return false;
        const Berth__V1__Instance *in = r->await_call->instance;
        int state = in->state;
        bool own = in->result != NULL && in->result->payload.len == sizeof(index) + 1 &&
                   memcmp(in->result->payload.data, &index, sizeof(index)) == 0 &&
                   in->result->payload.data[sizeof(index)] == 'R';
        berth__v1__response__free_unpacked(r, NULL);
        if (state == BERTH__V1__INSTANCE__STATE__RESOLVED) {
            if (!own)
                atomic_fetch_add(&bench_wrong_results, 1);
            return own;
        }
        if (state == BERTH__V1__INSTANCE__STATE__FAILED) {
            bench_count_error("a call failed", NULL, BC_OK);
            return false;
        }
    }
}

static void *caller(void *arg)
{
    (void)arg;
    bc *c = bench_thread_client();
    if (c == NULL)
        return NULL;
    uint8_t *payload = malloc(bench_cfg.payload);
    memset(payload, 'p', bench_cfg.payload);
    uint64_t deadline = bench_cfg.duration_s > 0
                            ? bench_t0_ns + (uint64_t)(bench_cfg.duration_s * 1e9)
                            : UINT64_MAX;
    while (!atomic_load(&bench_stop_all) && bench_now_ns() < deadline) {
        uint64_t index = atomic_fetch_add(&bench_next_task, 1);
        if (index >= (bench_cfg.tasks ? bench_cfg.tasks : bench_task_cap))
            break;
        char topic[32];
        bench_topic_name(topic, sizeof(topic), index);
        memcpy(payload, &index, sizeof(index));
        Berth__V1__CallRequest call = BERTH__V1__CALL_REQUEST__INIT;
        call.topic = topic;
        call.has_payload = 1;
        call.payload.data = payload;
        call.payload.len = bench_cfg.payload;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_CALL;
        req.call = &call;
        Berth__V1__Response *r = bench_round_trip(c, &req, 30000, "call", has_instance_id);
        if (r == NULL)
            continue;
        char id[33];
        snprintf(id, sizeof(id), "%s", r->call->instance_id);
        berth__v1__response__free_unpacked(r, NULL);
        atomic_store(&bench_submit_ns[index], bench_now_ns());
        atomic_fetch_add(&bench_submitted, 1);
        if (await_outcome(c, id, index)) {
            atomic_store(&bench_resolved_ns[index], bench_now_ns());
            atomic_fetch_add(&bench_resolved, 1);
        }
    }
    free(payload);
    bc_close(c);
    return NULL;
}

/* ---- --preload: a backlog nobody fetches ---- */

static atomic_uint_fast64_t preloaded;

static void *preloader(void *arg)
{
    (void)arg;
    bc *c = bench_thread_client();
    if (c == NULL)
        return NULL;
    enum { B = 1000 }; /* berthd's default --batch-max */
    uint8_t *payload = calloc(1, bench_cfg.payload);
    Berth__V1__SubmitRequest items[B], *ip[B];
    for (size_t i = 0; i < B; i++) {
        berth__v1__submit_request__init(&items[i]);
        items[i].topic = BACKLOG_TOPIC;
        items[i].has_payload = 1;
        items[i].payload.data = payload;
        items[i].payload.len = bench_cfg.payload;
        ip[i] = &items[i];
    }
    memset(payload, 'b', bench_cfg.payload);
    for (;;) {
        uint64_t first = atomic_fetch_add(&preloaded, B);
        if (first >= bench_cfg.preload)
            break;
        Berth__V1__SubmitBatchRequest sb = BERTH__V1__SUBMIT_BATCH_REQUEST__INIT;
        sb.n_items = bench_cfg.preload - first < B ? bench_cfg.preload - first : B;
        sb.items = ip;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
        req.submit_batch = &sb;
        Berth__V1__Response *r = bench_round_trip(c, &req, 60000, "preload", NULL);
        if (r != NULL)
            berth__v1__response__free_unpacked(r, NULL);
    }
    free(payload);
    bc_close(c);
    return NULL;
}

void bench_preload(void)
{
    if (bench_cfg.preload == 0)
        return;
    uint64_t t = bench_now_ns();
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, preloader, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    bench_preload_secs = (double)(bench_now_ns() - t) / 1e9;
    bench_measure(&bench_rss_preloaded, &bench_data_preloaded);
    fprintf(stderr,
            "berth-bench: preloaded %" PRIu64 " tasks in %.1f s: berthd RSS %.0f MiB, data %.0f "
            "MiB\n",
            bench_cfg.preload, bench_preload_secs, bench_rss_preloaded, bench_data_preloaded);
}

/* ---- the producers' run ---- */

void bench_produce(void)
{
    if (open_loop()) {
        if (!open_produce())
            atomic_store(&bench_stop_all, true);
        return;
    }
    pthread_t *pt = calloc(bench_cfg.producers, sizeof(*pt));
    for (uint32_t i = 0; i < bench_cfg.producers; i++)
        pthread_create(&pt[i], NULL, bench_cfg.calls ? caller : producer, NULL);
    for (uint32_t i = 0; i < bench_cfg.producers; i++)
        pthread_join(pt[i], NULL);
    free(pt);
}
