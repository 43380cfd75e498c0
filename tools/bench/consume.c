/*
 * consume.c — what takes berth-bench's tasks off berthd and records, in
 * the ledger (bench.h), when each was fetched and completed, and how many
 * times: the workers, each a thread with its own connection, or with
 * --push the receiver threads berthd delivers to.
 *
 * A worker completes what it fetched on its next fetch (the client
 * library's loop, tools/clients/c/worker.h: one round trip per batch),
 * or with --no-fused in requests of their own between fetches
 * (complete_batch of up to --complete-batch, or complete when it is 1).
 * With --calls its result names the call: the call's index, then 'R'.
 * main (bench.c) starts the threads; they end on bench_stop_all or bench_all_done().
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "berth/v1/push.pb-c.h"
#include "tools/bench/bench.h"
#include "tools/clients/c/worker.h"

/* ---- the ledger's side of a worker ---- */

typedef struct pending_completion {
    uint64_t task;
    char id[33];
    char token[33];
    uint8_t answer[9]; /* --calls: the result, the call's index then 'R' */
} pending_completion;

static void record_completion(uint64_t task, uint64_t at)
{
    unsigned prev = atomic_fetch_add(&bench_completions[task], 1);
    if (prev > 0) {
        atomic_fetch_add(&bench_duplicates, 1);
        return;
    }
    atomic_store(&bench_done_ns[task], at);
    atomic_fetch_add(&bench_completed, 1);
}

/* The task number a task's payload carries; false (an error, counted)
 * when it carries none in range. */
static bool task_index(const Berth__V1__Task *task, uint64_t *index)
{
    if (task->payload.len < sizeof(*index)) {
        bench_count_error("a task without its index", NULL, BC_OK);
        return false;
    }
    memcpy(index, task->payload.data, sizeof(*index));
    if (*index >= bench_task_cap) {
        bench_count_error("a task index out of range", NULL, BC_OK);
        return false;
    }
    return true;
}

/* A worker holds task number index (the first time counts): pc is its
 * completion to come. */
static void take(pending_completion *pc, uint64_t index, const Berth__V1__Task *task)
{
    uint64_t none = 0;
    atomic_compare_exchange_strong(&bench_fetched_ns[index], &none, bench_now_ns());
    pc->task = index;
    snprintf(pc->id, sizeof(pc->id), "%s", task->id);
    memcpy(pc->answer, &index, sizeof(index));
    pc->answer[sizeof(index)] = 'R';
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
    if (!task_index(task, &index))
        return;
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
    pending_completion *pc = &f->v[f->head + f->n++];
    take(pc, index, task);
    if (bench_cfg.calls) {
        out->has_result = true;
        out->result = pc->answer;
        out->result_len = sizeof(pc->answer);
    }
}

static void fused_status(void *ctx, const char *task_id, const Berth__V1__Status *st)
{
    fused *f = ctx;
    uint64_t at = bench_now_ns();
    /* In order: the first waiting one, unless a task without its index
     * was skipped. */
    for (size_t i = 0; i < f->n; i++) {
        pending_completion *pc = &f->v[f->head + i];
        if (strcmp(pc->id, task_id ? task_id : "") != 0)
            continue;
        if (st != NULL && st->code == BERTH__V1__CODE__OK)
            record_completion(pc->task, at);
        else
            bench_count_error("completion", NULL, BC_OK);
        f->v[f->head + i] = f->v[f->head]; /* (the head takes its place: found by id) */
        f->head++;
        f->n--;
        return;
    }
}

static void fused_fetch(void *ctx, uint64_t ns)
{
    fused *f = ctx;
    samples_add(&f->w->fetch_wait, ns);
    atomic_store(&f->stop, atomic_load(&bench_stop_all) || bench_all_done());
}

static void fused_main(worker *w, bc *c, const char *wid, char *const *topics)
{
    fused f = {.w = w};
    bc_worker bw = {.worker_id = wid,
                    .topics = topics,
                    .n_topics = bench_cfg.topics,
                    .max_tasks = bench_cfg.fetch_batch,
                    .lock_ms = bench_cfg.lock_ms,
                    .wait_ms = 200, /* short: the loop also watches for the end */
                    .timeout_ms = 30000,
                    .work = fused_work,
                    .on_status = fused_status,
                    .on_fetch = fused_fetch,
                    .ctx = &f,
                    .stop = &f.stop};
    atomic_store(&f.stop, atomic_load(&bench_stop_all) || bench_all_done());
    if (bc_worker_run(c, &bw) != BC_OK)
        bench_count_error("the worker loop", NULL, BC_EINVAL);
    free(f.v);
}

/* ---- the separate worker (--no-fused) ---- */

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
        if (bench_cfg.calls) {
            berth__v1__result__init(&results[i]);
            results[i].has_payload = 1;
            results[i].payload.data = pc[i].answer;
            results[i].payload.len = sizeof(pc[i].answer);
            items[i].result = &results[i];
        }
        ip[i] = &items[i];
    }
    Berth__V1__CompleteBatchRequest cb = BERTH__V1__COMPLETE_BATCH_REQUEST__INIT;
    if (bench_cfg.complete_batch == 1) {
        req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE;
        req.complete = &items[0];
    } else {
        cb.n_items = n;
        cb.items = ip;
        req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE_BATCH;
        req.complete_batch = &cb;
    }
    Berth__V1__Response *r = bench_round_trip(c, &req, 30000, "complete", NULL);
    uint64_t at = bench_now_ns();
    if (r == NULL)
        return;
    if (bench_cfg.complete_batch == 1) {
        record_completion(pc[0].task, at);
    } else {
        for (size_t i = 0; i < n && i < r->complete_batch->n_statuses; i++) {
            if (r->complete_batch->statuses[i]->code == BERTH__V1__CODE__OK)
                record_completion(pc[i].task, at);
            else
                bench_count_error("complete_batch item", NULL, BC_OK);
        }
    }
    berth__v1__response__free_unpacked(r, NULL);
}

static void separate_main(worker *w, bc *c, char *wid, char **topics)
{
    pending_completion *pc = calloc(bench_cfg.complete_batch, sizeof(*pc));
    size_t npc = 0;
    while (!atomic_load(&bench_stop_all) && !bench_all_done()) {
        Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
        f.worker_id = wid;
        f.n_topics = bench_cfg.topics;
        f.topics = topics;
        f.has_max_tasks = 1;
        f.max_tasks = bench_cfg.fetch_batch;
        f.has_lock_ms = 1;
        f.lock_ms = bench_cfg.lock_ms;
        f.has_wait_ms = 1;
        f.wait_ms = 200; /* short: the loop also watches for the end */
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
        req.fetch = &f;
        uint64_t t = bench_now_ns();
        Berth__V1__Response *r = bench_round_trip(c, &req, 30000, "fetch", NULL);
        samples_add(&w->fetch_wait, bench_now_ns() - t);
        if (r == NULL)
            continue;
        for (size_t i = 0; i < r->fetch->n_tasks; i++) {
            const Berth__V1__Task *task = r->fetch->tasks[i];
            uint64_t index;
            if (!task_index(task, &index))
                continue;
            take(&pc[npc], index, task);
            snprintf(pc[npc].token, sizeof(pc[npc].token), "%s", task->lock_token);
            if (++npc == bench_cfg.complete_batch) {
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
}

void *bench_worker_main(void *arg)
{
    worker *w = arg;
    char wid[32];
    snprintf(wid, sizeof(wid), "bench-worker-%d", w->id);
    bc *c = bench_thread_client();
    if (c == NULL)
        return NULL;
    char *topics[MAX_TOPICS];
    char names[MAX_TOPICS][32];
    for (uint32_t k = 0; k < bench_cfg.topics; k++) {
        snprintf(names[k], sizeof(names[k]), "bench-%u", k);
        topics[k] = names[k];
    }
    if (bench_cfg.separate)
        separate_main(w, c, wid, topics);
    else
        fused_main(w, c, wid, topics);
    bc_close(c);
    return NULL;
}

/* ---- the push receiver (--push) ---- */

static nng_socket push_sock;

/* One receiver thread: its own context of the REP socket. */
void *bench_receiver_main(void *arg)
{
    (void)arg;
    nng_ctx ctx;
    nng_aio *aio;
    if (nng_ctx_open(&ctx, push_sock) != 0 || nng_aio_alloc(&aio, NULL, NULL) != 0) {
        atomic_fetch_add(&bench_errors, 1);
        return NULL;
    }
    Berth__V1__DeliveryAck ack = BERTH__V1__DELIVERY_ACK__INIT;
    ack.has_outcome = 1;
    ack.outcome = BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED;
    uint8_t out[16];
    size_t out_len = berth__v1__delivery_ack__pack(&ack, out);
    while (!atomic_load(&bench_stop_all) && !bench_all_done()) {
        nng_aio_set_timeout(aio, 200);
        nng_ctx_recv(ctx, aio);
        nng_aio_wait(aio);
        if (nng_aio_result(aio) != 0)
            continue;
        nng_msg *m = nng_aio_get_msg(aio);
        Berth__V1__Delivery *d = berth__v1__delivery__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
        uint64_t at = bench_now_ns(), i = 0;
        if (d != NULL && d->payload.len >= sizeof(i)) {
            memcpy(&i, d->payload.data, sizeof(i));
            if (i < bench_task_cap)
                record_completion(i, at);
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

bool bench_push_setup(void)
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
    for (uint32_t k = 0; k < bench_cfg.topics; k++) {
        berth__v1__channel_decl__init(&decl[k]);
        bench_topic_name(names[k], sizeof(names[k]), k);
        decl[k].name = names[k];
        decl[k].transport = transport;
        dp[k] = &decl[k];
    }
    Berth__V1__DeployRequest d = BERTH__V1__DEPLOY_REQUEST__INIT;
    d.id = "bench";
    d.channels = dp;
    d.n_channels = bench_cfg.topics;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DEPLOY;
    req.deploy = &d;
    bc *a;
    char err[256];
    Berth__V1__AdminResponse *r = NULL;
    if (bc_open(bench_cfg.admin, &a, err, sizeof(err)) != BC_OK) {
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
