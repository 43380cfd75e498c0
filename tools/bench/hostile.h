/*
 * hostile.h — what the files of berth-hostile share:
 *
 *   hostile.c  main: options, berthd (spawned or given), RSS, each
 *              attack's run, and the report
 *   honest.c   the honest load that measures berthd while it is attacked
 *   attacks.c  the attackers, raw sockets speaking SP by hand, and their
 *              table
 *
 * C and target are written by main before any thread starts and only
 * read after; the flags and counters are atomics. hostile.c calls the
 * other two, never they it (but for reading C and target).
 */
#ifndef BERTH_TOOLS_HOSTILE_H
#define BERTH_TOOLS_HOSTILE_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include "tools/bench/samples.h"

#define HONEST_TIMEOUT_MS  5000 /* an honest call unanswered this long is an error */
#define HONEST_WARMUP_MS   500  /* honest load runs this long before an attack, unmeasured */
#define HONEST_TAIL_MS     1000 /* and this long after it, measured */
#define HONEST_BACKLOG_MAX 64   /* honest tasks the producer keeps ahead of the worker at most */

typedef struct cfg {
    const char *operate;
    pid_t pid; /* berthd's, for its RSS */
    bool spawn;
    char **berthd_args; /* after "--", for --spawn */
    int n_berthd_args;
    double seconds, settle_s;
    bool json;
} cfg;

extern cfg C;
extern struct sockaddr_storage target; /* C.operate, resolved, for the attackers */
extern socklen_t target_len;

/* ---- time, for every part (inline: hostile.c calls the others, not
 * they it) ---- */

static inline uint64_t now_ns(void) /* CLOCK_MONOTONIC */
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- honest.c ---- */

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

/* ---- attacks.c ---- */

typedef struct attack {
    const char *name;
    int threads;
    void *(*run)(void *arg); /* arg: the thread's index, as intptr_t */
    int (*prepare)(void);    /* before RSS before; NULL: nothing to prepare */
    /* With --operate, what the attack left on someone else's berthd,
     * removed once nothing holds it (until_ns: when its locks are free);
     * NULL: it leaves nothing. */
    void (*cleanup)(uint64_t until_ns);
} attack;

extern const attack attacks[];
extern const size_t n_attacks;

/* What the attackers did; run_attack resets and reads it. */
typedef struct atk_counts {
    atomic_uint_fast64_t conns;     /* connections made */
    atomic_uint_fast64_t dial_fail; /* connects (or headers) that failed */
    atomic_uint_fast64_t closed;    /* connections berthd closed under a holder */
    atomic_uint_fast64_t sent;      /* bytes */
} atk_counts;

extern atk_counts atk;
extern atomic_bool attack_stop; /* set: every attacker thread returns */

/* held-connections needs thousands of descriptors: raises RLIMIT_NOFILE
 * to its hard limit (a spawned berthd inherits it too), and holds fewer
 * connections when that is still too low (told). */
void attacks_fit_fd_limit(void);

#endif
