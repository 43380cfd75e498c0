/*
 * report.c — berth-bench's verdict: the ledger (bench.h) tallied once the
 * run is over, as a table or one JSON object, in the shape of the run
 * (tasks, --calls or --push); --csv's per-second series; the progress line
 * while it runs; and the spawned berthd's memory and data directory.
 *
 * A task submitted and never completed is lost; a second successful
 * completion is a duplicate; either, a refused request, or a call
 * unresolved or answered with another's result makes the exit status 1.
 * main (bench.c) calls bench_report() after every thread has ended.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/bench/bench.h"

/* Submit acknowledged → completion acknowledged. A worker can complete a
 * task before its producer has read the submit's answer: that counts as 0. */
static uint64_t e2e_ns(uint64_t i)
{
    return bench_done_ns[i] > bench_submit_ns[i] ? bench_done_ns[i] - bench_submit_ns[i] : 0;
}

/* ---- the spawned berthd's footprint ---- */

static uint64_t du_total; /* bytes, summed by du_one */

static int du_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)path;
    (void)f;
    if (flag == FTW_F)
        du_total += (uint64_t)st->st_blocks * 512;
    return 0;
}

void bench_measure(double *rss_mib, double *data_mib)
{
    *rss_mib = *data_mib = -1;
    if (bench_spawned.pid <= 0)
        return;
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)bench_spawned.pid);
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss_mib = atof(line + 6) / 1024.0;
    if (f != NULL)
        fclose(f);
    du_total = 0;
    if (nftw(bench_spawned.dir, du_one, 16, FTW_PHYS) == 0)
        *data_mib = (double)du_total / (1024.0 * 1024.0);
}

double bench_preload_secs, bench_rss_preloaded, bench_data_preloaded, bench_rss_end,
    bench_data_end; /* s, MiB */

static void write_csv(const char *path, uint64_t n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "berth-bench: cannot write %s: %s\n", path, strerror(errno));
        return;
    }
    uint64_t last = 0;
    for (uint64_t i = 0; i < n; i++)
        if (bench_done_ns[i] > last)
            last = bench_done_ns[i];
    size_t secs = last > bench_t0_ns ? (size_t)((last - bench_t0_ns) / 1000000000u) + 1 : 1;
    samples *per = calloc(secs, sizeof(*per));
    uint64_t *subs = calloc(secs, sizeof(*subs));
    for (uint64_t i = 0; i < n; i++) {
        if (bench_submit_ns[i] > bench_t0_ns) {
            size_t s = (size_t)((bench_submit_ns[i] - bench_t0_ns) / 1000000000u);
            if (s < secs)
                subs[s]++;
        }
        if (bench_done_ns[i] == 0)
            continue;
        size_t s = (size_t)((bench_done_ns[i] - bench_t0_ns) / 1000000000u);
        samples_add(&per[s], e2e_ns(i));
    }
    fprintf(f, "second,submitted_per_s,completed_per_s,e2e_p50_ms,e2e_p99_ms\n");
    for (size_t s = 0; s < secs; s++) {
        pct p = samples_percentiles(&per[s]);
        fprintf(f, "%zu,%" PRIu64 ",%zu,%.3f,%.3f\n", s + 1, subs[s], per[s].n, p.p50, p.p99);
        free(per[s].v);
    }
    free(per);
    free(subs);
    fclose(f);
}

void *bench_progress(void *arg)
{
    (void)arg;
    uint64_t last = 0;
    while (!atomic_load(&bench_stop_all)) {
        struct timespec one = {1, 0};
        nanosleep(&one, NULL);
        uint64_t c = atomic_load(&bench_completed);
        fprintf(stderr,
                "\r%6.0fs  submitted %" PRIu64 "  completed %" PRIu64 "  (%" PRIu64 "/s)   ",
                (double)(bench_now_ns() - bench_t0_ns) / 1e9, atomic_load(&bench_submitted), c,
                c - last);
        last = c;
    }
    fprintf(stderr, "\r%*s\r", 72, "");
    return NULL;
}

/* ---- the tally ---- */

typedef struct totals {
    uint64_t slots;      /* task numbers handed out, at most bench_task_cap */
    uint64_t n;          /* tasks (calls) whose submit was acknowledged */
    uint64_t lost;       /* of those, never completed */
    uint64_t unresolved; /* --calls: of those, never seen resolved */
    uint64_t unacked;    /* completed, though no answer acknowledged their submit */
    uint64_t errs, dups, wrong;
    uint64_t last_done;         /* the last completion (or resolution), ns */
    double secs;                /* t0 → last_done */
    double submit_secs;         /* t0 → the producers' end */
    pct pe, pf, pc, ps, pl, ph; /* e2e, fetch wait, call, submit wait, submit late, fetched */
} totals;

/* Reads the ledger: what was lost, and the latencies per task. */
static void tally_tasks(totals *t, samples *e2e, samples *cl, samples *fe)
{
    t->n = atomic_load(&bench_submitted);
    t->slots = atomic_load(&bench_next_task) < bench_task_cap ? atomic_load(&bench_next_task)
                                                              : bench_task_cap;
    t->last_done = bench_t0_ns;
    for (uint64_t i = 0; i < t->slots; i++) {
        if (bench_submit_ns[i] == 0) {
            /* Never acknowledged: not ours to find. But one completed
             * when no submit failed means the bench lost track of it. */
            t->unacked += bench_completions[i] > 0;
            continue;
        }
        if (bench_cfg.calls && bench_resolved_ns[i] == 0)
            t->unresolved++;
        else if (bench_cfg.calls)
            samples_add(cl, bench_resolved_ns[i] - bench_submit_ns[i]);
        if (bench_completions[i] == 0) {
            t->lost++;
            continue;
        }
        samples_add(e2e, e2e_ns(i));
        if (bench_fetched_ns[i] != 0)
            samples_add(fe, bench_fetched_ns[i] > bench_submit_ns[i]
                                ? bench_fetched_ns[i] - bench_submit_ns[i]
                                : 0);
        if (bench_done_ns[i] > t->last_done)
            t->last_done = bench_done_ns[i];
        if (bench_cfg.calls && bench_resolved_ns[i] > t->last_done)
            t->last_done = bench_resolved_ns[i];
    }
}

static void tally(totals *t, const worker *ws, uint64_t produced)
{
    samples e2e = {0}, fw = {0}, cl = {0}, fe = {0};
    tally_tasks(t, &e2e, &cl, &fe);
    for (uint32_t i = 0; i < bench_cfg.workers; i++) {
        for (size_t k = 0; k < ws[i].fetch_wait.n; k++)
            samples_add(&fw, (uint64_t)ws[i].fetch_wait.v[k] * 1000);
        free(ws[i].fetch_wait.v);
    }
    t->secs = (double)(t->last_done - bench_t0_ns) / 1e9;
    t->submit_secs = (double)(produced - bench_t0_ns) / 1e9;
    t->pe = samples_percentiles(&e2e);
    t->pf = samples_percentiles(&fw);
    t->pc = samples_percentiles(&cl);
    t->ps = samples_percentiles(&bench_submit_wait);
    t->pl = samples_percentiles(&bench_submit_late);
    t->ph = samples_percentiles(&fe);
    free(e2e.v);
    free(fe.v);
    free(fw.v);
    free(cl.v);
}

/* ---- printing ---- */

/* --calls: calls/s and the call latency (accepted -> outcome). */
static void print_calls(const totals *t)
{
    uint64_t n = t->n, lost = t->lost, errs = t->errs, dups = t->dups;
    double secs = t->secs;
    uint64_t unresolved = t->unresolved, wrong = t->wrong;
    pct pc = t->pc;
    if (bench_cfg.json) {
        printf("{\"mode\":\"calls\",\"calls\":%" PRIu64 ",\"seconds\":%.3f,\"calls_per_s\":%.1f,"
               "\"call_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"errors\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicates\":%" PRIu64
               ",\"unresolved\":%" PRIu64 ",\"wrong_results\":%" PRIu64 ","
               "\"callers\":%u,\"workers\":%u,\"fetch_batch\":%u,\"complete_batch\":%u,"
               "\"payload\":%u,\"topics\":%u}\n",
               n, secs, secs > 0 ? (double)(n - unresolved) / secs : 0, pc.p50, pc.p90, pc.p99,
               pc.max, errs, lost, dups, unresolved, wrong, bench_cfg.producers, bench_cfg.workers,
               bench_cfg.fetch_batch, bench_cfg.complete_batch, bench_cfg.payload,
               bench_cfg.topics);
        return;
    }
    printf("berth-bench --calls: %u callers, %u workers (fetch %u, complete %u), "
           "%u-byte payloads, %u topic(s)\n",
           bench_cfg.producers, bench_cfg.workers, bench_cfg.fetch_batch, bench_cfg.complete_batch,
           bench_cfg.payload, bench_cfg.topics);
    printf("  calls          %12" PRIu64 "\n", n);
    printf("  seconds        %12.3f\n", secs);
    printf("  calls/s        %12.1f\n", secs > 0 ? (double)(n - unresolved) / secs : 0);
    printf("  call ms        p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (accepted -> outcome)\n",
           pc.p50, pc.p90, pc.p99, pc.max);
    printf("  errors %" PRIu64 "  lost %" PRIu64 "  duplicates %" PRIu64 "  unresolved %" PRIu64
           "  wrong results %" PRIu64 "\n",
           errs, lost, dups, unresolved, wrong);
}

/* --push: deliveries/s and the latency from the submit's send to the receipt. */
static void print_push(const totals *t)
{
    uint64_t n = t->n, lost = t->lost, errs = t->errs, dups = t->dups;
    double secs = t->secs, submit_secs = t->submit_secs;
    pct pe = t->pe;
    if (bench_cfg.json) {
        printf("{\"mode\":\"push\",\"deliveries\":%" PRIu64 ",\"seconds\":%.3f,"
               "\"deliveries_per_s\":%.1f,\"submit_per_s\":%.1f,"
               "\"receipt_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"errors\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicates\":%" PRIu64 ","
               "\"producers\":%u,\"receivers\":%u,\"submit_batch\":%u,\"payload\":%u,"
               "\"topics\":%u}\n",
               n, secs, secs > 0 ? (double)(n - lost) / secs : 0,
               submit_secs > 0 ? n / submit_secs : 0, pe.p50, pe.p90, pe.p99, pe.max, errs, lost,
               dups, bench_cfg.producers, bench_cfg.workers, bench_cfg.submit_batch,
               bench_cfg.payload, bench_cfg.topics);
        return;
    }
    printf("berth-bench --push: %u producers (batch %u), %u receiver threads, "
           "%u-byte payloads, %u channel(s)\n",
           bench_cfg.producers, bench_cfg.submit_batch, bench_cfg.workers, bench_cfg.payload,
           bench_cfg.topics);
    printf("  deliveries     %12" PRIu64 "\n", n);
    printf("  seconds        %12.3f\n", secs);
    printf("  deliveries/s   %12.1f   (submit %0.1f/s)\n", secs > 0 ? (double)(n - lost) / secs : 0,
           submit_secs > 0 ? n / submit_secs : 0);
    printf("  receipt ms     p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (submit sent -> "
           "received)\n",
           pe.p50, pe.p90, pe.p99, pe.max);
    printf("  errors %" PRIu64 "  lost %" PRIu64 "  duplicates %" PRIu64 "\n", errs, lost, dups);
}

/* Tasks/s and the latencies of submit, fetch and e2e. */
static void print_tasks(const totals *t)
{
    uint64_t n = t->n, lost = t->lost, errs = t->errs, dups = t->dups;
    double secs = t->secs, submit_secs = t->submit_secs;
    pct pe = t->pe, pf = t->pf, ps = t->ps, pl = t->pl, ph = t->ph;
    if (bench_cfg.json) {
        printf("{\"tasks\":%" PRIu64 ",\"seconds\":%.3f,\"tasks_per_s\":%.1f,\"submit_per_s\":%.1f,"
               "\"e2e_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"fetch_wait_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"submit_wait_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"submit_late_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"fetched_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"errors\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicates\":%" PRIu64 ","
               "\"producers\":%u,\"workers\":%u,\"submit_batch\":%u,\"fetch_batch\":%u,"
               "\"complete_batch\":%u,\"payload\":%u,\"topics\":%u,\"priorities\":%u,"
               "\"delay_ms\":%" PRIu64 ",\"shape\":\"%s\",\"preload\":%" PRIu64
               ",\"preload_s\":%.1f,\"rss_mib\":{\"preloaded\":%.1f,\"end\":%.1f},"
               "\"data_mib\":{\"preloaded\":%.1f,\"end\":%.1f},\"rate\":%.1f}\n",
               n, secs, secs > 0 ? (double)(n - lost) / secs : 0,
               submit_secs > 0 ? n / submit_secs : 0, pe.p50, pe.p90, pe.p99, pe.max, pf.p50,
               pf.p90, pf.p99, pf.max, ps.p50, ps.p90, ps.p99, ps.max, pl.p50, pl.p90, pl.p99,
               pl.max, ph.p50, ph.p90, ph.p99, ph.max, errs, lost, dups, bench_cfg.producers,
               bench_cfg.workers, bench_cfg.submit_batch, bench_cfg.fetch_batch,
               bench_cfg.complete_batch, bench_cfg.payload, bench_cfg.topics, bench_cfg.priorities,
               bench_cfg.delay_ms, bench_cfg.separate ? "separate" : "fused", bench_cfg.preload,
               bench_preload_secs, bench_rss_preloaded, bench_rss_end, bench_data_preloaded,
               bench_data_end, bench_cfg.rate);
        return;
    }
    printf("berth-bench: %u producers (batch %u), %u workers (fetch %u, complete %s), "
           "%u-byte payloads, %u topic(s), %u priorities, half delayed up to %" PRIu64 " ms\n",
           bench_cfg.producers, bench_cfg.submit_batch, bench_cfg.workers, bench_cfg.fetch_batch,
           bench_cfg.separate ? "separately" : "on the next fetch", bench_cfg.payload,
           bench_cfg.topics, bench_cfg.priorities, bench_cfg.delay_ms);
    printf("  tasks          %12" PRIu64 "\n", n);
    printf("  seconds        %12.3f\n", secs);
    printf("  tasks/s        %12.1f   (submit %0.1f/s)\n", secs > 0 ? (double)(n - lost) / secs : 0,
           submit_secs > 0 ? n / submit_secs : 0);
    printf("  e2e ms         p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", pe.p50, pe.p90, pe.p99,
           pe.max);
    printf("  fetched ms     p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (as e2e, to the "
           "worker's hands)\n",
           ph.p50, ph.p90, ph.p99, ph.max);
    printf("  fetch wait ms  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", pf.p50, pf.p90, pf.p99,
           pf.max);
    printf("  submit wait ms p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (sent -> answered)\n", ps.p50,
           ps.p90, ps.p99, ps.max);
    if (bench_cfg.rate > 0)
        printf("  submit late ms p50 %.3f  p90 %.3f  p99 %.3f  max %.3f   (due -> sent)\n", pl.p50,
               pl.p90, pl.p99, pl.max);
    printf("  errors %" PRIu64 "  lost %" PRIu64 "  duplicates %" PRIu64 "\n", errs, lost, dups);
}

int bench_report(const worker *ws, uint64_t produced)
{
    totals t = {0};
    tally(&t, ws, produced);
    if (bench_cfg.csv != NULL)
        write_csv(bench_cfg.csv, t.slots);
    if (t.unacked > 0 && atomic_load(&bench_errors) == 0) {
        fprintf(stderr,
                "berth-bench: %" PRIu64 " tasks completed whose submit no answer acknowledged\n",
                t.unacked);
        atomic_fetch_add(&bench_errors, t.unacked);
    }
    t.errs = atomic_load(&bench_errors);
    t.dups = atomic_load(&bench_duplicates);
    t.wrong = atomic_load(&bench_wrong_results);
    if (bench_cfg.calls)
        print_calls(&t);
    else if (bench_cfg.push)
        print_push(&t);
    else
        print_tasks(&t);
    if (t.lost || t.dups || t.errs || t.unresolved || t.wrong) {
        fprintf(stderr,
                "berth-bench: FAILED: %" PRIu64 " lost, %" PRIu64 " duplicate, %" PRIu64
                " errors, %" PRIu64 " calls unresolved, %" PRIu64 " with another's result\n",
                t.lost, t.dups, t.errs, t.unresolved, t.wrong);
        return 1;
    }
    return 0;
}
