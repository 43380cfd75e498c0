/*
 * honest.c — berth-hostile's honest load, which measures berthd while it
 * is attacked: one producer submitting one small task at a time on topic
 * "honest" (at most HONEST_BACKLOG_MAX ahead of the worker, so that what
 * berthd holds after an attack is not the honest backlog), and one worker
 * fetching it (max_tasks 1, wait_ms 1000) and completing it, each on its
 * own direct connection with a HONEST_TIMEOUT_MS receive timeout.
 *
 * The calls that begin while recording count: their latency, and as
 * errors an answer other than OK, a transport failure, or a timeout
 * (whose wait counts as its latency). run_attack (hostile.c) starts,
 * records and stops it around each attack.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

#include "tools/bench/honest.h"
#include "tools/bench/target.h"
#include "tools/clients/c/client.h"

static atomic_bool honest_stopping, recording;
/* All the honest tasks submitted and completed (the producer's bound). */
static atomic_uint_fast64_t honest_submitted, honest_completed;
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
    if (*c == NULL && bc_open_direct(target_cfg.operate, c, NULL, 0) != BC_OK)
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
        samples_add(&h->lat, now_ns() - t);
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
    while (!atomic_load(&honest_stopping)) {
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
    while (!atomic_load(&honest_stopping)) {
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

int honest_start(honest h[2], const char *name)
{
    attack_name = name;
    atomic_store(&honest_errors_shown, 0);
    h[0] = (honest){.worker = false};
    h[1] = (honest){.worker = true};
    atomic_store(&honest_stopping, false);
    atomic_store(&recording, false);
    int rv = 0;
    for (int i = 0; i < 2 && rv == 0; i++)
        rv = pthread_create(&h[i].th, NULL, h[i].worker ? honest_worker : honest_producer, &h[i]);
    return rv;
}

void honest_record(bool on)
{
    atomic_store(&recording, on);
}

void honest_stop(honest h[2])
{
    atomic_store(&honest_stopping, true);
    for (int i = 0; i < 2; i++)
        pthread_join(h[i].th, NULL);
}
