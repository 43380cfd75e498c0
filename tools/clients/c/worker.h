/*
 * worker.h — the worker loop of the C client: long-poll, hand each task to
 * a handler, and send its completion with the next fetch (one round trip
 * and one sync per batch of tasks, ARCHITECTURE.md, "Wire": fetch may carry completes).
 *
 *   bc_worker w = {.worker_id = "w1", .topics = topics, .n_topics = 1,
 *                  .work = handle, .ctx = &state, .stop = &stopping};
 *   bc_worker_run(c, &w);
 *
 * The handler decides, per task, to complete it (with a result, or none:
 * the original payload is re-delivered), fail it (retried later on the
 * task's failure budget) or refuse it (ended, with an error). Completions
 * ride on the next fetch; a failure or a refusal is sent at once. Each
 * completion's status reaches on_status (a verdict means: stop working on
 * that task, never complete it again). When *stop turns true the loop
 * sends the completions it holds (complete_batch) and returns.
 *
 * A fetch that carries completions does not wait (wait_ms 0): it answers
 * their statuses at once, with whatever work is there; the next fetch,
 * carrying none, long-polls. Under load every fetch brings work, so a
 * batch of tasks costs one round trip; when work is scarce, completions
 * are still acknowledged without delay.
 */
#ifndef BERTH_TOOLS_WORKER_H
#define BERTH_TOOLS_WORKER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/clients/c/client.h"

typedef enum bc_outcome {
    BC_COMPLETE = 0,
    BC_FAIL,
    BC_REFUSE,
} bc_outcome;

/* What the handler decided for one task (zeroed before each call: a
 * completion without a result). Pointers must stay valid until the
 * handler's next call (the loop copies what it keeps). */
typedef struct bc_work {
    bc_outcome outcome;
    bool has_result; /* COMPLETE with a result */
    const void *result;
    size_t result_len;
    const char *content_type;
    const char *code, *message; /* FAIL, REFUSE: the error */
} bc_work;

typedef struct bc_worker {
    const char *worker_id;
    char *const *topics;
    size_t n_topics;
    uint32_t max_tasks; /* 0: berthd's default */
    uint64_t lock_ms;   /* 0: berthd's default */
    uint64_t wait_ms;   /* the long poll; 0: berthd's default */
    int timeout_ms;     /* per round trip (0: wait_ms + 10 s) */
    bool separate;      /* complete in a request of its own before each fetch */
    void (*work)(void *ctx, const Berth__V1__Task *t, bc_work *out);
    /* The status of each completion, failure and refusal sent (NULL when
     * its fate is unknown: the round trip failed; its lock will lapse). */
    void (*on_status)(void *ctx, const char *task_id, const Berth__V1__Status *st);
    /* Each fetch's round trip, in ns (optional). */
    void (*on_fetch)(void *ctx, uint64_t ns);
    void *ctx;
    const atomic_bool *stop; /* optional */
} bc_worker;

/* Runs until *stop (BC_OK) or berthd refuses a fetch for a reason other
 * than its completions (BC_EINVAL, the status printed on stderr). A round
 * trip that fails is retried after a pause. */
int bc_worker_run(bc *c, const bc_worker *w);

#endif
