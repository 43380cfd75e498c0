/*
 * ledger.c — what every part of berth-bench shares: the options (bench_cfg), the
 * ledger of every task and the run's counters (bench.h says who writes
 * what), and the calls each thread makes to reach berthd and to count
 * what went wrong. Called from every thread; bench_cfg is read-only once main
 * has parsed it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tools/bench/bench.h"

cfg bench_cfg;

/* The ledger and the counters (bench.h says who writes what). */
uint64_t bench_task_cap;
_Atomic uint64_t *bench_submit_ns, *bench_done_ns, *bench_fetched_ns, *bench_resolved_ns;
atomic_uint *bench_completions;
atomic_uint_fast64_t bench_next_task, bench_submitted, bench_completed, bench_errors,
    bench_duplicates;
atomic_uint_fast64_t bench_resolved, bench_wrong_results;
atomic_bool bench_producers_done, bench_stop_all;
spawned_berthd bench_spawned;
uint64_t bench_t0_ns;

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_sleep_until(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

void bench_topic_name(char *out, size_t len, uint64_t task)
{
    snprintf(out, len, "bench-%" PRIu64, task % bench_cfg.topics);
}

/* ---- connections ---- */

/* Each producer and worker has its own connection. A tcp:// URL is reached
 * directly (see client.h), so the load costs the machine about what
 * beanstalk-bench's plain sockets cost it; --client nng uses nng's REQ
 * socket instead. --operate may list several URLs, comma-separated
 * (berthd replicas sharing one database): connections take them in turn. */
static int open_client(bc **c, char *err, size_t errlen)
{
    static atomic_uint next;
    char url[512];
    const char *list = bench_cfg.operate;
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    unsigned k = atomic_fetch_add(&next, 1) % (unsigned)n;
    const char *from = list;
    for (unsigned i = 0; i < k; i++)
        from = strchr(from, ',') + 1;
    size_t len = strcspn(from, ",");
    snprintf(url, sizeof url, "%.*s", (int)len, from);
    if (!bench_cfg.nng_client && strncmp(url, "tcp://", 6) == 0)
        return bc_open_direct(url, c, err, errlen);
    if (strncmp(url, "tls+", 4) == 0) {
        bc_tls tls = {.ca_file = bench_cfg.tls_ca};
        return bc_open_tls(url, &tls, c, err, errlen);
    }
    return bc_open(url, c, err, errlen);
}

void bench_count_error(const char *what, const Berth__V1__Response *r, int rv)
{
    uint64_t n = atomic_fetch_add(&bench_errors, 1);
    if (n < 5)
        fprintf(stderr, "berth-bench: %s: %s\n", what,
                r ? (r->status && r->status->message ? r->status->message : "?") : bc_strerror(rv));
}

bc *bench_thread_client(void)
{
    bc *c;
    char err[256];
    if (open_client(&c, err, sizeof(err)) == BC_OK)
        return c;
    fprintf(stderr, "berth-bench: %s\n", err);
    atomic_fetch_add(&bench_errors, 1);
    return NULL;
}

Berth__V1__Response *bench_round_trip(bc *c, const Berth__V1__Request *req, int timeout_ms,
                                      const char *what, bool (*has)(const Berth__V1__Response *r))
{
    Berth__V1__Response *r = NULL;
    int rv = bc_call(c, req, timeout_ms, &r);
    if (rv == BC_OK && r->status != NULL && r->status->code == BERTH__V1__CODE__OK &&
        (has == NULL || has(r)))
        return r;
    bench_count_error(what, r, rv);
    if (r != NULL)
        berth__v1__response__free_unpacked(r, NULL);
    return NULL;
}

bool bench_all_done(void)
{
    return atomic_load(&bench_producers_done) &&
           atomic_load(&bench_completed) + atomic_load(&bench_errors) >=
               atomic_load(&bench_submitted);
}
