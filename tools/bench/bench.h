/*
 * bench.h — what the files of berth-bench share: its options, the ledger
 * of every task (when it was submitted, fetched, completed, and how many
 * times), the run's counters, and the entry points of its parts:
 *
 *   bench.c    main: options, berthd for --spawn, the run's steps
 *   ledger.c   the options, ledger and counters, and the calls to berthd
 *              every thread makes
 *   produce.c  the producers (closed loop, open loop with --rate,
 *              callers with --calls) and --preload
 *   consume.c  the workers (fused or --no-fused) and the push receiver
 *   report.c   the tally, its table or JSON, --csv, the progress line
 *
 * bench_cfg is written by main before any thread starts and only read after. The
 * per-task arrays are indexed by the task's number, which its payload
 * carries: written by one producer, then by the one worker whose
 * completion succeeded; the counters are atomics any thread bumps.
 */
#ifndef BERTH_TOOLS_BENCH_H
#define BERTH_TOOLS_BENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/bench/samples.h"
#include "tools/bench/spawn.h"
#include "tools/clients/c/client.h"

#define MAX_TOPICS    64
#define BACKLOG_TOPIC "bench-backlog"

typedef struct cfg {
    const char *operate;
    bool spawn;
    uint64_t tasks;    /* 0: run for duration_s */
    double duration_s; /* 0: run until `tasks` are done */
    uint32_t producers, workers, submit_batch, fetch_batch, complete_batch, topics;
    uint32_t priorities; /* 0: every task at the default */
    uint64_t delay_ms;   /* every other task delayed by up to this */
    uint32_t payload;
    uint64_t lock_ms;
    bool json;
    const char *csv;
    bool nng_client;  /* --client nng: nng's REQ socket, not a direct connection */
    bool calls;       /* --calls: producers call and await; workers answer */
    bool push;        /* --push: the topics are push channels to the bench's receiver */
    bool separate;    /* --no-fused: completions in requests of their own, not on fetches */
    uint64_t preload; /* tasks submitted to BACKLOG_TOPIC (never fetched) before the run */
    double rate;      /* --rate: tasks/s offered in all, open loop; 0: flat out */
    const char *admin;
    const char *tls_ca; /* tls+tcp://: the CAs berthd's certificate is checked against */
} cfg;

extern cfg bench_cfg;

/* ---- ledger.c: the ledger and the counters ---- */

extern uint64_t bench_task_cap;              /* task slots */
extern _Atomic uint64_t *bench_submit_ns;    /* submit acknowledged (0: not submitted) */
extern _Atomic uint64_t *bench_done_ns;      /* completion acknowledged */
extern _Atomic uint64_t *bench_fetched_ns;   /* first handed to a worker */
extern atomic_uint *bench_completions;       /* successful completions per task */
extern _Atomic uint64_t *bench_resolved_ns;  /* --calls: the await that saw its outcome answered */
extern atomic_uint_fast64_t bench_next_task; /* the next task number to submit */
extern atomic_uint_fast64_t bench_submitted, bench_completed, bench_errors, bench_duplicates;
extern atomic_uint_fast64_t bench_resolved, bench_wrong_results; /* --calls */
extern atomic_bool bench_producers_done, bench_stop_all;
extern spawned_berthd bench_spawned; /* --spawn */
extern uint64_t bench_t0_ns;         /* the run's start (after --preload) */

/* ---- ledger.c: what every part uses ---- */

uint64_t bench_now_ns(void); /* CLOCK_MONOTONIC */
void bench_sleep_until(uint64_t ns);
/* Counts an error, and tells the first few on stderr: r's message, or
 * bc_strerror(rv) when there is no answer. */
void bench_count_error(const char *what, const Berth__V1__Response *r, int rv);
/* A thread's own connection to berthd, or NULL (counted as an error, told). */
bc *bench_thread_client(void);
/* One round trip on c: the answer if it is OK and, when has is not NULL,
 * has(answer) holds (the caller frees it); else NULL, the error counted. */
Berth__V1__Response *bench_round_trip(bc *c, const Berth__V1__Request *req, int timeout_ms,
                                      const char *what, bool (*has)(const Berth__V1__Response *r));
void bench_topic_name(char *out, size_t len, uint64_t task); /* the topic of task number task */
/* Producers done, and every task submitted completed (or failed). */
bool bench_all_done(void);

/* ---- produce.c ---- */

/* Submits --preload tasks to BACKLOG_TOPIC; nothing without --preload. */
void bench_preload(void);
/* Runs the producers (or callers) to their end: the open-loop sender when
 * --rate goes over direct connections, else --producers threads. */
void bench_produce(void);
/* Each submit's round trip, and with --rate how late it was sent. */
extern samples bench_submit_wait, bench_submit_late;

/* ---- consume.c ---- */

typedef struct worker {
    int id;
    samples fetch_wait; /* each fetch's round trip */
    pthread_t th;
} worker;

/* A worker's thread (arg: its worker), fetching and completing until
 * bench_stop_all or bench_all_done(). */
void *bench_worker_main(void *arg);
/* --push: one receiver thread answering berthd's deliveries. */
void *bench_receiver_main(void *arg);
/* Listens for berthd and deploys the topics as push channels to it. */
bool bench_push_setup(void);

/* ---- report.c ---- */

/* The spawned berthd's resident memory and data directory, in MiB (-1:
 * not known: berthd was not spawned). */
void bench_measure(double *rss_mib, double *data_mib);
extern double bench_preload_secs, bench_rss_preloaded, bench_data_preloaded, bench_rss_end,
    bench_data_end;
/* The progress line's thread (stderr a terminal), until bench_stop_all. */
void *bench_progress(void *arg);
/* Tallies the ledger, prints the report (table or JSON, and --csv), and
 * returns the exit status: 1 when anything was lost, duplicated, refused
 * or unresolved. ws: the workers; produced: when producing ended. */
int bench_report(const worker *ws, uint64_t produced);

#endif
