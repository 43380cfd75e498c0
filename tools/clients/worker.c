/*
 * worker.c — a minimal berth worker: long-poll, work, complete (or fail),
 * in a loop. The shape every worker has, in any language with protobuf
 * and an nng binding:
 *
 *   fetch(topics, max_tasks, wait_ms)  → tasks, each locked for you
 *   for each task: do the work, then complete(id, worker, lock_token)
 *                  or fail(...) to be retried later, or refuse(...) to end it
 *   a verdict on complete (LOCK_LOST, LOCK_HELD, TERMINAL, NOT_FOUND) means:
 *   stop working on that task; never retry the completion.
 *
 * A task that belongs to a call (Task.instance_id is set) is answered the
 * same way: the completion's result is what the caller's await_call
 * returns. This example answers calls with their payload in upper case;
 * a refuse(...) would answer with an error instead.
 *
 *   berth-worker-example [--operate URL] [--worker ID] TOPIC...
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/client.h"

/* The work: a call gets an answer (its payload in upper case); a task's
 * completion carries none (the original payload is re-delivered). */
static int complete(bc *c, const char *worker, const Berth__V1__Task *t)
{
    Berth__V1__CompleteRequest cr = BERTH__V1__COMPLETE_REQUEST__INIT;
    cr.task_id = t->id;
    cr.worker_id = (char *)worker;
    cr.lock_token = t->lock_token;
    Berth__V1__Result res = BERTH__V1__RESULT__INIT;
    uint8_t *answer = NULL;
    if (t->instance_id != NULL && (answer = malloc(t->payload.len + 1)) != NULL) {
        for (size_t i = 0; i < t->payload.len; i++)
            answer[i] = (uint8_t)toupper(t->payload.data[i]);
        res.has_payload = 1;
        res.payload.data = answer;
        res.payload.len = t->payload.len;
        res.content_type = t->content_type;
        cr.result = &res;
    }
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE;
    req.complete = &cr;
    Berth__V1__Response *r;
    int rv = bc_call(c, &req, 0, &r);
    free(answer);
    if (rv != BC_OK)
        return rv; /* unknown outcome: the lock will lapse and the task return */
    if (r->status->code != BERTH__V1__CODE__OK)
        fprintf(stderr, "complete %s refused: %s\n", t->id, r->status->message);
    berth__v1__response__free_unpacked(r, NULL);
    return BC_OK;
}

int main(int argc, char **argv)
{
    const char *url = "tcp://127.0.0.1:7450", *worker = "example-worker";
    char **topics = calloc((size_t)argc, sizeof(*topics));
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--operate") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--worker") == 0 && i + 1 < argc)
            worker = argv[++i];
        else
            topics[n++] = argv[i];
    }
    if (n == 0) {
        fprintf(stderr, "usage: berth-worker-example [--operate URL] [--worker ID] TOPIC...\n");
        return 2;
    }
    bc *c;
    char err[256];
    if (bc_open(url, &c, err, sizeof(err)) != BC_OK) {
        fprintf(stderr, "%s\n", err);
        return 4;
    }
    for (;;) {
        Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
        f.worker_id = (char *)worker;
        f.topics = topics;
        f.n_topics = n;
        f.has_max_tasks = 1;
        f.max_tasks = 10;
        f.has_wait_ms = 1;
        f.wait_ms = 20000; /* the long poll: answered at once when work is parked */
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
        req.fetch = &f;
        Berth__V1__Response *r;
        if (bc_call(c, &req, 30000, &r) != BC_OK) {
            fprintf(stderr, "berthd unreachable; retrying\n");
            continue;
        }
        if (r->status->code != BERTH__V1__CODE__OK) {
            fprintf(stderr, "fetch refused: %s\n", r->status->message);
            berth__v1__response__free_unpacked(r, NULL);
            return 3;
        }
        for (size_t i = 0; i < r->fetch->n_tasks; i++) {
            const Berth__V1__Task *t = r->fetch->tasks[i];
            printf("%s %s%s%s attempt %u: %.*s\n", t->topic, t->id, t->instance_id ? " call " : "",
                   t->instance_id ? t->instance_id : "", t->attempt, (int)t->payload.len,
                   (const char *)t->payload.data);
            fflush(stdout);
            complete(c, worker, t); /* the work would happen before this */
        }
        berth__v1__response__free_unpacked(r, NULL);
    }
}
