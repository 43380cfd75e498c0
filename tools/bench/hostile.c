/*
 * berth-hostile — hostile clients against berthd, while honest ones measure.
 *
 *   berth-hostile (--operate URL --pid PID | --spawn [-- BERTHD-ARGS...])
 *                 [--attack NAME[,NAME...] | --attack all] [--seconds S]
 *                 [--settle S] [--json]
 *
 * Runs each attack named (all of them by default, in the order given) for
 * --seconds (default 20) against one berthd. For each attack:
 *
 *   1. its preparation, if it has one (unread-answers preloads big tasks);
 *   2. RSS before: berthd's VmRSS, read from /proc/PID/status;
 *   3. honest load starts: one producer submitting one small task at a
 *      time on topic "honest" (at most 64 ahead of the worker, so that
 *      the honest backlog is not what RSS measures), one worker fetching
 *      it (max_tasks 1,
 *      wait_ms 1000) and completing it, each on its own direct connection
 *      (client.h) with a 5 s receive timeout;
 *   4. the attack runs for --seconds, then stops; honest load goes on for
 *      one more second, then stops;
 *   5. after --settle seconds (default 60) with nothing running, RSS after.
 *
 * Reported per attack: the honest calls (round trips) that began while the
 * attack ran or in the second after it, their latency p50/p99/max in ms,
 * and the errors among them — an answer other than OK, a transport failure,
 * or a call unanswered within 5 s, whose wait counts as its latency; the
 * honest tasks submitted, completed, and fetched again (attempt > 1: an
 * earlier claim, say a dead connection's, lapsed) in that window; RSS
 * before, its peak during that window (sampled every 100 ms) and after
 * the settle, in MiB; and what the attackers did (connections, failed
 * dials, connections berthd closed under them, bytes sent). A table, or
 * one JSON object with --json. The numbers are for a reader to judge: the
 * exit status is 0 unless the tool itself failed.
 *
 * ATTACKS
 *
 * Attackers are plain sockets speaking SP's TCP mapping (proto/sp_wire.h)
 * by hand, blocking or poll-driven, a few threads each: the machine they
 * share with berthd may have two cores, and an attacker that burns them
 * measures the machine, not berthd.
 *
 *   none              no attacker: the control, the honest load alone
 *                     (what RSS does under it is not an attack's doing).
 *   longpoll-flood    3 threads: connect, SP header (berthd's is read),
 *                     256 pipelined fetches of "honest" with wait_ms
 *                     30000, close at once; again. Waits of dead
 *                     connections must neither pile up nor claim honest
 *                     tasks.
 *   unread-answers    preloads 600 tasks of 1 MiB on "big" (before RSS
 *                     before), then 16 connections pipeline 1024 fetches
 *                     each (max_tasks 8, wait_ms 0, lock_ms = --seconds)
 *                     and never read; a connection berthd closes is opened
 *                     again. Answers nobody reads must stay bounded.
 *   partial-frames    200 connections, each: SP header, a frame announcing
 *                     16 MiB, 16 MiB - 1 bytes of it, then held; a
 *                     connection berthd closes (its frame deadline) starts
 *                     again.
 *   held-connections  5000 connections (fewer if the descriptor limit is
 *                     lower), SP header sent, idle; reopened when closed.
 *   connect-flood     4 threads connecting and closing at once, as fast as
 *                     they can; two send the SP header first, two do not.
 *   garbage           3 threads: connect, then at random a valid header
 *                     and 1-4 frames of random bytes under 64 KiB (with a
 *                     request id), a bad header, or random bytes; close
 *                     (half the valid ones after a half-close and reading
 *                     until berthd closes).
 *
 * --spawn starts the berthd found beside this binary on a temp directory
 * and free ports (arguments after "--" are passed to it, e.g.
 * --operate-nng, or --store URI for a replica on PostgreSQL, which then
 * takes no data directory), and stops it afterwards. With --operate and --pid the
 * berthd is someone else's: the big tasks unread-answers preloaded are
 * fetched and completed at the end.
 *
 * This file is main: the options, berthd (spawned or given) and its RSS,
 * each attack's run, and the report. The honest load is in honest.c, the
 * attackers and their table in attacks.c; what all three read (the
 * settings, the target) is in target.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench/attacks.h"
#include "tools/bench/honest.h"
#include "tools/bench/spawn.h"
#include "tools/bench/target.h"
#include "tools/clients/c/client.h"

#define RSS_EVERY_MS 100
#define MAX_RUN      64   /* attacks one run may name */
#define RUN          (-1) /* parse_options: go on */

/* ---- berthd's RSS ---- */

static _Atomic long rss_peak_kb = -1; /* highest sample since the last reset */
static atomic_bool sampler_stop;
static atomic_bool reaped; /* the spawned berthd exited, and its pid is free for reuse */

/* VmRSS in KiB, or -1 when berthd is gone. */
static long rss_kb(void)
{
    char path[64], line[256];
    if (atomic_load(&reaped))
        return -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)target_cfg.pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static double mib(long kb)
{
    return kb < 0 ? -1 : (double)kb / 1024.0;
}

static void *sampler(void *arg)
{
    (void)arg;
    while (!atomic_load(&sampler_stop)) {
        long kb = rss_kb(), peak = atomic_load(&rss_peak_kb);
        while (kb > peak && !atomic_compare_exchange_weak(&rss_peak_kb, &peak, kb))
            ;
        sleep_ms(RSS_EVERY_MS);
    }
    return NULL;
}

/* ---- berthd for --spawn ---- */

static spawned_berthd spawn; /* --spawn's berthd */
static pid_t spawned;        /* its pid while it is ours to stop */
static int reaped_status;    /* the wait status, once reaped */

/* Whether berthd went away: a spawned one that exited (reaped here), or
 * a pid whose status cannot be read. */
static bool berthd_gone(void)
{
    if (spawned > 0 && !atomic_load(&reaped) &&
        waitpid(spawned, &reaped_status, WNOHANG) == spawned)
        atomic_store(&reaped, true);
    return rss_kb() < 0;
}

/* How a wait status reads, or "" when there is none (not our berthd, or
 * still running). */
static const char *describe_status(char *out, size_t len)
{
    out[0] = '\0';
    if (!atomic_load(&reaped))
        return out;
    if (WIFEXITED(reaped_status))
        snprintf(out, len, "exited %d", WEXITSTATUS(reaped_status));
    else if (WIFSIGNALED(reaped_status))
        snprintf(out, len, "killed by signal %d (%s)", WTERMSIG(reaped_status),
                 strsignal(WTERMSIG(reaped_status)));
    return out;
}

/* Stops the spawned berthd (SIGTERM; SIGKILL after 30 s); false unless it
 * exited 0. */
static bool stop_berthd(void)
{
    if (spawned <= 0)
        return true;
    int status = reaped_status;
    uint64_t give_up = now_ns() + 30000000000u;
    if (!atomic_load(&reaped))
        kill(spawned, SIGTERM);
    while (!atomic_load(&reaped) && waitpid(spawned, &status, WNOHANG) == 0) {
        if (now_ns() > give_up) {
            fprintf(stderr, "berth-hostile: berthd ignored SIGTERM for 30 s: killing it\n");
            kill(spawned, SIGKILL);
            waitpid(spawned, &status, 0);
            break;
        }
        sleep_ms(20);
    }
    spawned = 0;
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean)
        fprintf(stderr, "berth-hostile: berthd did not exit cleanly (status %d)\n", status);
    spawn_cleanup(&spawn, "berth-hostile");
    return clean;
}

/* ---- one attack ---- */

typedef struct result {
    const attack *a;
    uint64_t calls, errors;        /* honest, begun during the attack or its tail */
    uint64_t submitted, completed; /* honest tasks, in the same window */
    uint64_t again;                /* of those fetched, how many with attempt > 1 */
    pct lat;
    long rss_before_kb, rss_peak_kb, rss_after_kb; /* -1: berthd gone */
    uint64_t conns, dial_fail, closed, sent;       /* the attackers' */
} result;

/* A thread that could not start ends the run: berthd stopped, exit 1. */
static void thread_failed(int rv)
{
    fprintf(stderr, "berth-hostile: pthread_create: %s\n", strerror(rv));
    stop_berthd();
    exit(1);
}

static void start_thread(pthread_t *th, void *(*fn)(void *), void *arg)
{
    int rv = pthread_create(th, NULL, fn, arg);
    if (rv != 0)
        thread_failed(rv);
}

/* The honest load's and the attackers' numbers into res. */
static void tally(result *res, honest h[2])
{
    samples all = {0};
    for (int i = 0; i < 2; i++) {
        for (size_t k = 0; k < h[i].lat.n; k++)
            samples_add(&all, (uint64_t)h[i].lat.v[k] * 1000);
        res->errors += h[i].errors;
        free(h[i].lat.v);
    }
    res->calls = all.n;
    res->lat = samples_percentiles(&all);
    free(all.v);
    res->submitted = h[0].tasks;
    res->completed = h[1].tasks;
    res->again = h[1].again;
    res->conns = atomic_load(&attacks_counts.conns);
    res->dial_fail = atomic_load(&attacks_counts.dial_fail);
    res->closed = atomic_load(&attacks_counts.closed);
    res->sent = atomic_load(&attacks_counts.sent);
}

static void run_attack(const attack *a, result *res, uint64_t *attack_end_ns)
{
    atomic_store(&attacks_counts.conns, 0);
    atomic_store(&attacks_counts.dial_fail, 0);
    atomic_store(&attacks_counts.closed, 0);
    atomic_store(&attacks_counts.sent, 0);
    *res = (result){.a = a};

    if (a->prepare != NULL) {
        fprintf(stderr, "berth-hostile: %s: preparing\n", a->name);
        if (a->prepare() != 0)
            fprintf(stderr, "berth-hostile: %s: preparation incomplete; attacking anyway\n",
                    a->name);
    }
    fprintf(stderr, "berth-hostile: %s: %.0f s attack, then %.0f s settle\n", a->name,
            target_cfg.seconds, target_cfg.settle_s);
    res->rss_before_kb = rss_kb();

    honest h[2];
    int rv = honest_start(h, a->name);
    if (rv != 0)
        thread_failed(rv);
    sleep_ms(HONEST_WARMUP_MS);

    atomic_store(&rss_peak_kb, rss_kb());
    honest_record(true);
    atomic_store(&attacks_stop, false);
    pthread_t th[a->threads > 0 ? a->threads : 1];
    for (int i = 0; i < a->threads; i++)
        start_thread(&th[i], a->run, (void *)(intptr_t)i);
    sleep_ms((uint64_t)(target_cfg.seconds * 1000));
    atomic_store(&attacks_stop, true);
    for (int i = 0; i < a->threads; i++)
        pthread_join(th[i], NULL);
    *attack_end_ns = now_ns();
    sleep_ms(HONEST_TAIL_MS);
    honest_record(false);
    honest_stop(h);
    long last = rss_kb(), peak = atomic_load(&rss_peak_kb);
    res->rss_peak_kb = last > peak ? last : peak;
    tally(res, h);

    sleep_ms((uint64_t)(target_cfg.settle_s * 1000));
    res->rss_after_kb = rss_kb();
}

/* ---- report ---- */

static void print_rss_json(const char *name, long kb, bool comma)
{
    if (kb < 0)
        printf("\"%s\":null%s", name, comma ? "," : "");
    else
        printf("\"%s\":%.1f%s", name, mib(kb), comma ? "," : "");
}

/* gone_during: the attack during which berthd went away, or NULL. */
static void report(const result *res, int n, int berthd_clean, const char *gone_during)
{
    char how[96];
    describe_status(how, sizeof(how));
    if (target_cfg.json) {
        printf("{\"operate\":\"%s\",\"pid\":%d,\"seconds\":%.3f,\"settle_seconds\":%.3f,"
               "\"honest_timeout_ms\":%d,\"attacks\":[",
               target_cfg.operate, (int)target_cfg.pid, target_cfg.seconds, target_cfg.settle_s,
               HONEST_TIMEOUT_MS);
        for (int i = 0; i < n; i++) {
            const result *r = &res[i];
            printf("%s{\"name\":\"%s\",\"honest\":{\"calls\":%" PRIu64 ",\"errors\":%" PRIu64
                   ",\"latency_ms\":{\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
                   "\"tasks_submitted\":%" PRIu64 ",\"tasks_completed\":%" PRIu64
                   ",\"tasks_fetched_again\":%" PRIu64 "},"
                   "\"rss_mib\":{",
                   i ? "," : "", r->a->name, r->calls, r->errors, r->lat.p50, r->lat.p99,
                   r->lat.max, r->submitted, r->completed, r->again);
            print_rss_json("before", r->rss_before_kb, true);
            print_rss_json("peak", r->rss_peak_kb, true);
            print_rss_json("after", r->rss_after_kb, false);
            printf("},\"attackers\":{\"threads\":%d,\"connections\":%" PRIu64
                   ",\"dial_failures\":%" PRIu64 ",\"closed_by_berthd\":%" PRIu64
                   ",\"sent_bytes\":%" PRIu64 "}}",
                   r->a->threads, r->conns, r->dial_fail, r->closed, r->sent);
        }
        printf("]");
        if (gone_during != NULL)
            printf(",\"berthd_gone_during\":\"%s\",\"berthd_status\":\"%s\"", gone_during, how);
        if (berthd_clean >= 0)
            printf(",\"berthd_exited_cleanly\":%s", berthd_clean ? "true" : "false");
        printf("}\n");
        return;
    }
    printf("berth-hostile: berthd pid %d at %s; %.0f s per attack, %.0f s settle; honest: 1 "
           "producer, 1 worker, %d s timeout\n",
           (int)target_cfg.pid, target_cfg.operate, target_cfg.seconds, target_cfg.settle_s,
           HONEST_TIMEOUT_MS / 1000);
    printf("%-16s %7s %6s %9s %9s %9s %11s %7s %7s %14s  %s\n", "attack", "calls", "errors",
           "p50 ms", "p99 ms", "max ms", "RSS before", "peak", "after", "tasks s/c/a", "attackers");
    for (int i = 0; i < n; i++) {
        const result *r = &res[i];
        char rss[3][16], tasks[64];
        long kb[3] = {r->rss_before_kb, r->rss_peak_kb, r->rss_after_kb};
        for (int k = 0; k < 3; k++)
            if (kb[k] < 0)
                snprintf(rss[k], sizeof(rss[k]), "gone");
            else
                snprintf(rss[k], sizeof(rss[k]), "%.1f", mib(kb[k]));
        snprintf(tasks, sizeof(tasks), "%" PRIu64 "/%" PRIu64 "/%" PRIu64, r->submitted,
                 r->completed, r->again);
        printf("%-16s %7" PRIu64 " %6" PRIu64 " %9.3f %9.3f %9.3f %11s %7s %7s %14s  "
               "%" PRIu64 " conns, %" PRIu64 " failed, %" PRIu64 " closed, %.1f MiB sent\n",
               r->a->name, r->calls, r->errors, r->lat.p50, r->lat.p99, r->lat.max, rss[0], rss[1],
               rss[2], tasks, r->conns, r->dial_fail, r->closed, (double)r->sent / (1u << 20));
    }
    printf("RSS in MiB: before the attack, its peak, after the settle. calls, errors, latency "
           "and tasks:\nhonest, begun during the attack or the %d ms after it; tasks "
           "submitted/completed/fetched\nagain (attempt > 1: an earlier claim lapsed or was "
           "released). The producer keeps\nat most %d tasks ahead of the worker.\n",
           HONEST_TAIL_MS, HONEST_BACKLOG_MAX);
    if (gone_during != NULL)
        printf("berthd went away during %s%s%s; no attack was run after it\n", gone_during,
               how[0] ? ": " : "", how);
    else if (berthd_clean == 0)
        printf("berthd did not exit cleanly\n");
}

/* ---- main ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: berth-hostile (--operate URL --pid PID | --spawn [-- BERTHD-ARGS...])\n"
               "                     [--attack NAME[,NAME...] | --attack all] [--seconds S]\n"
               "                     [--settle S] [--json]\n"
               "attacks:");
    for (size_t i = 0; i < attacks_table_len; i++)
        fprintf(f, " %s", attacks_table[i].name);
    fprintf(f, "\n");
}

static bool num(const char *s, double *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && *end == '\0';
}

/* Adds the attacks of a NAME[,NAME...] list (or "all") to order[]. */
static bool parse_attacks(const char *list, int *order, int *n)
{
    char buf[512];
    if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
        return false;
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < attacks_table_len; i++) {
            if (strcmp(name, "all") != 0 && strcmp(name, attacks_table[i].name) != 0)
                continue;
            if (*n == MAX_RUN)
                return false;
            order[(*n)++] = (int)i;
            found = true;
        }
        if (!found) {
            fprintf(stderr, "berth-hostile: no attack named %s\n", name);
            return false;
        }
    }
    return true;
}

/* Resolves tcp://HOST:PORT for the attackers. */
static bool resolve(const char *url)
{
    char err[300];
    socklen_t len;
    if (bc_tcp_address(url, &target_addr, &len, err, sizeof(err)) != BC_OK) {
        fprintf(stderr, "berth-hostile: the attackers need tcp://host:port: %s\n", err);
        return false;
    }
    target_addr_len = len;
    return true;
}

/* Reads the options into target_cfg and the attacks to run into order: RUN, or
 * the exit status (--help: 0, a bad option: 2, told). */
static int parse_options(int argc, char **argv, int *order, int *n)
{
    target_cfg = (cfg){.seconds = 20, .settle_s = 60};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d = 0;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--") == 0) {
            target_cfg.berthd_args = argv + i + 1;
            target_cfg.n_berthd_args = argc - i - 1;
            break;
        } else if (strcmp(a, "--spawn") == 0) {
            target_cfg.spawn = true;
        } else if (strcmp(a, "--json") == 0) {
            target_cfg.json = true;
        } else if (strcmp(a, "--operate") == 0 && v) {
            target_cfg.operate = v, i++;
        } else if (strcmp(a, "--attack") == 0 && v) {
            if (!parse_attacks(v, order, n)) {
                usage(stderr);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--pid") == 0 && num(v, &d) && d >= 1 && d <= INT32_MAX) {
            target_cfg.pid = (pid_t)d, i++;
        } else if (strcmp(a, "--seconds") == 0 && num(v, &d) && d > 0) {
            target_cfg.seconds = d, i++;
        } else if (strcmp(a, "--settle") == 0 && num(v, &d)) {
            target_cfg.settle_s = d, i++;
        } else {
            fprintf(stderr, "berth-hostile: bad argument %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (target_cfg.spawn == (target_cfg.operate != NULL) ||
        (target_cfg.operate != NULL) != (target_cfg.pid != 0) ||
        (target_cfg.n_berthd_args > 0 && !target_cfg.spawn)) {
        usage(stderr);
        return 2;
    }
    if (*n == 0)
        parse_attacks("all", order, n);
    return RUN;
}

/* Starts berthd for --spawn, and finds the one the attackers and the RSS
 * sampler look at; false (told) when they cannot. */
static bool start_berthd(void)
{
    if (target_cfg.spawn) {
        int rv = spawn_berthd(&spawn, "berth-hostile", (const char *const *)target_cfg.berthd_args);
        spawned = spawn.pid;
        if (rv != 0)
            return false;
        target_cfg.operate = spawn.url;
        target_cfg.pid = spawned;
    }
    if (!resolve(target_cfg.operate) || rss_kb() < 0) {
        if (rss_kb() < 0)
            fprintf(stderr, "berth-hostile: cannot read /proc/%d/status\n", (int)target_cfg.pid);
        return false;
    }
    return true;
}

/* The attacks named, in order, until berthd goes away. Returns how many
 * ran; *gone_during: the attack during which berthd went away, or NULL;
 * *cleanup and *cleanup_end_ns: the last that left tasks behind, and when
 * it ended. */
static int run_attacks(const int *order, int n_order, result *res, const char **gone_during,
                       const attack **cleanup, uint64_t *cleanup_end_ns)
{
    int ran = 0;
    *gone_during = NULL;
    for (int i = 0; i < n_order && *gone_during == NULL; i++) {
        uint64_t end_ns;
        run_attack(&attacks_table[order[i]], &res[i], &end_ns);
        ran++;
        if (attacks_table[order[i]].cleanup != NULL) {
            *cleanup = &attacks_table[order[i]];
            *cleanup_end_ns = end_ns;
        }
        if (berthd_gone()) {
            *gone_during = attacks_table[order[i]].name;
            fprintf(stderr, "berth-hostile: berthd went away during %s: %d attack(s) not run\n",
                    *gone_during, n_order - ran);
        }
    }
    return ran;
}

int main(int argc, char **argv)
{
    int order[MAX_RUN], n_order = 0;
    int ex = parse_options(argc, argv, order, &n_order);
    if (ex != RUN)
        return ex;
    /* Writes to a connection berthd closed fail with EPIPE, not a signal
     * (the client library writes with writev). */
    signal(SIGPIPE, SIG_IGN);
    attacks_fit_fd_limit();
    if (!start_berthd()) {
        stop_berthd();
        return 1;
    }

    pthread_t samp;
    start_thread(&samp, sampler, NULL);
    result res[MAX_RUN];
    const char *gone_during;
    const attack *cleanup = NULL;
    uint64_t cleanup_end_ns = 0;
    int ran = run_attacks(order, n_order, res, &gone_during, &cleanup, &cleanup_end_ns);
    atomic_store(&sampler_stop, true);
    pthread_join(samp, NULL);

    int berthd_clean = -1; /* not ours */
    if (target_cfg.spawn)
        berthd_clean = stop_berthd();
    else if (cleanup != NULL && gone_during == NULL)
        cleanup->cleanup(cleanup_end_ns + (uint64_t)((target_cfg.seconds + 2) * 1e9));
    report(res, ran, berthd_clean, gone_during);
    return 0;
}
