/*
 * worker.c — a minimal berth worker: long-poll, work, complete (or fail),
 * in a loop. The shape every worker has, in any language with protobuf
 * and an nng binding:
 *
 *   fetch(topics, max_tasks, wait_ms, completes)  → tasks, each locked for you
 *   for each task: do the work, then complete it with the next fetch
 *                  (its `completes`), or fail(...) to be retried later,
 *                  or refuse(...) to end it
 *   a verdict on a completion (LOCK_LOST, LOCK_HELD, TERMINAL, NOT_FOUND)
 *   means: stop working on that task; never retry the completion.
 *
 * The loop is the client library's (tools/clients/c/worker.h): one round trip per
 * batch of tasks, the completions of one batch riding on the fetch of the
 * next.
 *
 * A task that belongs to a call (Task.instance_id is set) is answered the
 * same way: the completion's result is what the caller's await_call
 * returns. This example answers calls with their payload in upper case;
 * a refuse(...) would answer with an error instead.
 *
 *   berth-worker-example [--operate URL] [--worker ID] TOPIC...
 */
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/clients/c/client.h"
#include "tools/clients/c/worker.h"

static atomic_bool stopping;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stopping, true);
}

typedef struct example {
    uint8_t *answer; /* the last call's answer (the loop copies it) */
} example;

/* The work: a call gets an answer (its payload in upper case); a task's
 * completion carries none (the original payload is re-delivered). */
static void work(void *ctx, const Berth__V1__Task *t, bc_work *out)
{
    example *x = ctx;
    printf("%s %s%s%s attempt %u: %.*s\n", t->topic, t->id, t->instance_id ? " call " : "",
           t->instance_id ? t->instance_id : "", t->attempt, (int)t->payload.len,
           (const char *)t->payload.data);
    fflush(stdout);
    if (t->instance_id == NULL)
        return; /* complete, no result */
    free(x->answer);
    if ((x->answer = malloc(t->payload.len + 1)) == NULL) {
        out->outcome = BC_FAIL; /* retried later */
        out->code = "OUT_OF_MEMORY";
        return;
    }
    for (size_t i = 0; i < t->payload.len; i++)
        x->answer[i] = (uint8_t)toupper(t->payload.data[i]);
    out->has_result = true;
    out->result = x->answer;
    out->result_len = t->payload.len;
    out->content_type = t->content_type;
}

static void on_status(void *ctx, const char *task_id, const Berth__V1__Status *st)
{
    (void)ctx;
    if (st == NULL)
        fprintf(stderr, "%s: berthd unreachable; its lock will lapse\n", task_id ? task_id : "");
    else if (st->code != BERTH__V1__CODE__OK)
        fprintf(stderr, "%s refused: %s\n", task_id ? task_id : "", st->message ? st->message : "");
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
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    example x = {0};
    bc_worker w = {.worker_id = worker,
                   .topics = topics,
                   .n_topics = n,
                   .max_tasks = 10,
                   .wait_ms = 20000, /* the long poll: answered at once when work is parked */
                   .work = work,
                   .on_status = on_status,
                   .ctx = &x,
                   .stop = &stopping};
    int rv = bc_worker_run(c, &w); /* until a signal: then its last completions go */
    free(x.answer);
    bc_close(c);
    free(topics);
    return rv == BC_OK ? 0 : 3;
}
