/*
 * ledger.c — what every part of berth-bench shares: the options (C), the
 * ledger of every task and the run's counters (bench.h says who writes
 * what), and the calls each thread makes to reach berthd and to count
 * what went wrong. Called from every thread; C is read-only once main
 * has parsed it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tools/bench/bench.h"

cfg C;

/* The ledger and the counters (bench.h says who writes what). */
uint64_t task_cap;
_Atomic uint64_t *submit_ns, *done_ns, *fetched_ns, *resolved_ns;
atomic_uint *completions;
atomic_uint_fast64_t next_task, submitted, completed, errors, duplicates;
atomic_uint_fast64_t resolved, wrong_results;
atomic_bool producers_done, stop_all;
spawned_berthd spawned;
uint64_t t0_ns;

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sleep_until(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

void topic_name(char *out, size_t len, uint64_t task)
{
    snprintf(out, len, "bench-%" PRIu64, task % C.topics);
}

/* ---- connections ---- */

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

void count_error(const char *what, const Berth__V1__Response *r, int rv)
{
    uint64_t n = atomic_fetch_add(&errors, 1);
    if (n < 5)
        fprintf(stderr, "berth-bench: %s: %s\n", what,
                r ? (r->status && r->status->message ? r->status->message : "?") : bc_strerror(rv));
}

bc *thread_client(void)
{
    bc *c;
    char err[256];
    if (open_client(&c, err, sizeof(err)) == BC_OK)
        return c;
    fprintf(stderr, "berth-bench: %s\n", err);
    atomic_fetch_add(&errors, 1);
    return NULL;
}

Berth__V1__Response *round_trip(bc *c, const Berth__V1__Request *req, int timeout_ms,
                                const char *what, bool (*has)(const Berth__V1__Response *r))
{
    Berth__V1__Response *r = NULL;
    int rv = bc_call(c, req, timeout_ms, &r);
    if (rv == BC_OK && r->status != NULL && r->status->code == BERTH__V1__CODE__OK &&
        (has == NULL || has(r)))
        return r;
    count_error(what, r, rv);
    if (r != NULL)
        berth__v1__response__free_unpacked(r, NULL);
    return NULL;
}

bool all_done(void)
{
    return atomic_load(&producers_done) &&
           atomic_load(&completed) + atomic_load(&errors) >= atomic_load(&submitted);
}
