/*
 * honest.h — berth-hostile's honest load (honest.c): a producer and a
 * worker that measure berthd while it is attacked. hostile.c drives it.
 */
#ifndef BERTH_TOOLS_BENCH_HONEST_H
#define BERTH_TOOLS_BENCH_HONEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/bench/samples.h"

#define HONEST_TIMEOUT_MS  5000 /* an honest call unanswered this long is an error */
#define HONEST_WARMUP_MS   500  /* honest load runs this long before an attack, unmeasured */
#define HONEST_TAIL_MS     1000 /* and this long after it, measured */
#define HONEST_BACKLOG_MAX 64   /* honest tasks the producer keeps ahead of the worker at most */

typedef struct honest {
    pthread_t th;
    bool worker;
    samples lat;     /* calls begun while recording */
    uint64_t errors; /* among them */
    uint64_t tasks;  /* submitted (producer) or completed (worker) among them */
    uint64_t again;  /* worker: tasks fetched with attempt > 1 (an earlier claim lapsed) */
} honest;

/* Starts the honest producer (h[0]) and worker (h[1]), not recording;
 * name: the attack's, in what they tell on stderr. 0, or pthread_create's
 * error (the caller ends the process). */
int honest_start(honest h[2], const char *name);
/* Whether the calls that begin from now on are measured. */
void honest_record(bool on);
/* Stops the honest load and waits for it. */
void honest_stop(honest h[2]);

#endif
