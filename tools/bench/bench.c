/*
 * berth-bench — load for berthd, with proof that nothing was lost.
 *
 *   berth-bench (--operate URL[,URL...] | --spawn) (--tasks N | --duration S)
 *               [--producers P] [--workers W] [--submit-batch B]
 *               [--fetch-batch F] [--complete-batch C] [--payload BYTES]
 *               [--topics K] [--lock-ms MS] [--json] [--csv FILE]
 *               [--client direct|nng] [--calls] [--push [--admin URL]]
 *               [--priorities K] [--delay-ms D] [--no-fused] [--preload N]
 *               [--rate TASKS_PER_S] [--tls-ca FILE]
 *
 * P producer threads submit (submit_batch when B > 1), W worker threads
 * long-poll fetch up to F tasks and complete them with their next fetch
 * (the client library's worker loop: one round trip per batch), or with
 * --no-fused in requests of their own (complete_batch of up to C, or
 * complete when C is 1) between fetches. Each payload carries its task's index, so the bench checks
 * that every task was completed exactly once: a task never completed is a loss, a second successful
 * completion a duplicate; either, or any refused request, makes the exit status non-zero. Latency
 * is per task, submit acknowledged → complete acknowledged (e2e), and per fetch, sent → answered.
 *
 * --priorities K spreads the tasks over priorities 0 to K-1; --delay-ms D
 * delays every other task by 0 to D ms (spread evenly by its index). The
 * e2e latency of a delayed task includes its delay.
 *
 * --rate R offers R tasks/s in all, open loop, for "what is p99 at the
 * load I run": batch i is due at i * B / R s and its tasks' e2e latency
 * runs from then, so a late send is not hidden. Over direct connections
 * one thread sends every batch at its due time over the P connections in
 * turn, never waiting for an answer, and another reads the answers (a
 * slow answer delays no other submit; two threads, not P, compete with
 * berthd for the machine). Over nng each producer sends on time unless
 * its previous submit is unanswered. The report adds submit_late_ms (due
 * → sent) and fetched_ms (due → in a worker's hands; without --rate, from
 * the submit's answer).
 *
 * --preload N first submits N tasks to the topic bench-backlog, which no
 * worker fetches, then runs the scenario beside that backlog, and reports
 * the spawned berthd's resident memory and data directory after the
 * preload and at the end.
 *
 * --calls: the producers are callers. Each makes one call at a time and
 * awaits it; workers answer each call with a result that names it (its
 * index, then 'R'). The bench checks that every call was resolved once,
 * with its own result, and reports calls/s and the call latency: call
 * accepted → await answered with the outcome.
 *
 * --push: the bench serves a push receiver (an nng REP socket, W threads
 * answering DELIVERED) and deploys the topics as push channels to it (the
 * deployment "bench", through the admin surface), then submits as usual;
 * there are no workers. It reports deliveries/s and the latency from the
 * submit's send to the receipt (a push may arrive before the submit's
 * answer does), and checks that every task was received exactly once.
 *
 * --spawn starts the berthd found beside this binary on a temp directory
 * (under $TMPDIR, /tmp by default) and free ports, and stops it
 * afterwards. Every submit it makes is fsynced by berthd before it is
 * acknowledged: this measures durable work.
 *
 * Producers and workers reach a tcp:// URL over direct connections
 * (client.h: SP's TCP mapping with blocking calls, one connection per
 * thread, like beanstalk-bench's plain sockets); --client nng uses nng's
 * REQ socket, whose threads cost the shared machine more per round trip.
 * Any other URL goes through nng's REQ socket; on tls+tcp:// berthd's
 * certificate is checked against --tls-ca FILE (default: the system's
 * CAs) and the URL's host.
 *
 * Output: a table (a progress line on stderr when it is a terminal), or one
 * JSON object with --json. --csv writes a per-second series (see
 * tools/bench/plot-bench.gp).
 *
 * This file is main: the options, berthd for --spawn, and the run's
 * steps. The producers are in produce.c, the workers and the push
 * receiver in consume.c, the tally and its report in report.c, what they
 * all share in ledger.c; bench.h declares it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench/bench.h"

#define RUN (-1) /* parse_options: go on */

/* ---- options ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: berth-bench (--operate URL[,URL...] | --spawn) (--tasks N | --duration S)\n"
               "                   [--producers P] [--workers W] [--submit-batch B]\n"
               "                   [--fetch-batch F] [--complete-batch C] [--payload BYTES]\n"
               "                   [--topics K] [--lock-ms MS] [--json] [--csv FILE]\n"
               "                   [--client direct|nng] [--calls] [--push [--admin URL]]\n"
               "                   [--priorities K] [--delay-ms D] [--no-fused] [--preload N]\n"
               "                   [--rate TASKS_PER_S] [--tls-ca FILE]\n");
}

static bool num(const char *s, uint64_t *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0';
}

/* Reads the options into bench_cfg: RUN, or the exit status (--help: 0, a bad
 * option: 2, told). */
static int parse_options(int argc, char **argv)
{
    bench_cfg = (cfg){.producers = 8,
                      .workers = 8,
                      .submit_batch = 1,
                      .fetch_batch = 1,
                      .complete_batch = 1,
                      .topics = 1,
                      .payload = 100,
                      .lock_ms = 60000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n = 0;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--spawn") == 0) {
            bench_cfg.spawn = true;
        } else if (strcmp(a, "--json") == 0) {
            bench_cfg.json = true;
        } else if (strcmp(a, "--calls") == 0) {
            bench_cfg.calls = true;
        } else if (strcmp(a, "--push") == 0) {
            bench_cfg.push = true;
        } else if (strcmp(a, "--no-fused") == 0) {
            bench_cfg.separate = true;
        } else if (strcmp(a, "--preload") == 0 && num(v, &n)) {
            bench_cfg.preload = n, i++;
        } else if (strcmp(a, "--rate") == 0 && v && atof(v) > 0) {
            bench_cfg.rate = atof(v), i++;
        } else if (strcmp(a, "--admin") == 0 && v) {
            bench_cfg.admin = argv[++i];
        } else if (strcmp(a, "--tls-ca") == 0 && v) {
            bench_cfg.tls_ca = argv[++i];
        } else if (strcmp(a, "--operate") == 0 && v) {
            bench_cfg.operate = v, i++;
        } else if (strcmp(a, "--client") == 0 && v &&
                   (strcmp(v, "direct") == 0 || strcmp(v, "nng") == 0)) {
            bench_cfg.nng_client = strcmp(v, "nng") == 0, i++;
        } else if (strcmp(a, "--csv") == 0 && v) {
            bench_cfg.csv = v, i++;
        } else if (strcmp(a, "--duration") == 0 && v) {
            bench_cfg.duration_s = atof(v), i++;
        } else if (num(v, &n) && n > 0) {
            i++;
            if (strcmp(a, "--tasks") == 0)
                bench_cfg.tasks = n;
            else if (strcmp(a, "--producers") == 0)
                bench_cfg.producers = (uint32_t)n;
            else if (strcmp(a, "--workers") == 0)
                bench_cfg.workers = (uint32_t)n;
            else if (strcmp(a, "--submit-batch") == 0)
                bench_cfg.submit_batch = (uint32_t)n;
            else if (strcmp(a, "--fetch-batch") == 0)
                bench_cfg.fetch_batch = (uint32_t)n;
            else if (strcmp(a, "--complete-batch") == 0)
                bench_cfg.complete_batch = (uint32_t)n;
            else if (strcmp(a, "--payload") == 0)
                bench_cfg.payload = (uint32_t)n;
            else if (strcmp(a, "--topics") == 0 && n <= MAX_TOPICS)
                bench_cfg.topics = (uint32_t)n;
            else if (strcmp(a, "--lock-ms") == 0)
                bench_cfg.lock_ms = n;
            else if (strcmp(a, "--priorities") == 0 && n <= UINT32_MAX)
                bench_cfg.priorities = (uint32_t)n;
            else if (strcmp(a, "--delay-ms") == 0)
                bench_cfg.delay_ms = n;
            else {
                fprintf(stderr, "berth-bench: unknown or out-of-range option %s\n", a);
                return 2;
            }
        } else {
            fprintf(stderr, "berth-bench: bad argument %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if ((bench_cfg.operate == NULL) == !bench_cfg.spawn ||
        (bench_cfg.tasks == 0) == (bench_cfg.duration_s <= 0)) {
        usage(stderr);
        return 2;
    }
    if (bench_cfg.payload < 8)
        bench_cfg.payload = 8; /* room for the task index */
    return RUN;
}

/* ---- berthd for --spawn ---- */

/* Stops the spawned berthd; false unless it exited 0. */
static bool stop_berthd(void)
{
    if (bench_spawned.pid <= 0)
        return true;
    kill(bench_spawned.pid, SIGTERM);
    int status = 0;
    waitpid(bench_spawned.pid, &status, 0);
    bench_spawned.pid = 0;
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean)
        fprintf(stderr, "berth-bench: berthd did not exit cleanly (status %d)\n", status);
    spawn_cleanup(&bench_spawned, "berth-bench");
    return clean;
}

/* Starts berthd for --spawn; the admin URL's default otherwise. */
static bool start_berthd(void)
{
    if (bench_cfg.spawn) {
        if (spawn_berthd(&bench_spawned, "berth-bench", NULL) != 0)
            return false;
        bench_cfg.operate = bench_spawned.url;
        bench_cfg.admin = bench_spawned.admin;
    }
    if (bench_cfg.admin == NULL)
        bench_cfg.admin = "tcp://127.0.0.1:7451";
    return true;
}

/* ---- the run ---- */

/* An array of bytes, zeroed, mapped lazily: only touched pages cost memory. */
static void *lazy_array(size_t bytes)
{
    return mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                -1, 0);
}

/* The ledger's arrays; false (told) when they cannot be mapped. */
static bool map_ledger(void)
{
    /* Task slots: N, or for a timed run more than any run can reach. */
    bench_task_cap = bench_cfg.tasks ? bench_cfg.tasks : (64u << 20);
    bench_submit_ns = lazy_array(bench_task_cap * 8);
    bench_done_ns = lazy_array(bench_task_cap * 8);
    bench_fetched_ns = lazy_array(bench_task_cap * 8);
    bench_completions = lazy_array(bench_task_cap * sizeof(*bench_completions));
    bench_resolved_ns = lazy_array(bench_task_cap * 8);
    if (bench_submit_ns == MAP_FAILED || bench_done_ns == MAP_FAILED ||
        bench_fetched_ns == MAP_FAILED || bench_completions == MAP_FAILED ||
        bench_resolved_ns == MAP_FAILED) {
        perror("berth-bench: mmap");
        return false;
    }
    return true;
}

/* Waits until everything submitted is completed; a loss would keep the
 * workers looking, so the wait is bounded. */
static void drain(void)
{
    uint64_t drain_end = bench_now_ns() + (bench_cfg.lock_ms + 30000) * 1000000u;
    while (!bench_all_done() && bench_now_ns() < drain_end) {
        struct timespec tick = {0, 20 * 1000000L};
        nanosleep(&tick, NULL);
    }
}

/* The run: workers (or push receivers) and producers, to the drain's
 * end. *produced: when the producers ended. 0, or 1 when it could not
 * start (told). */
static int run(worker *ws, uint64_t *produced)
{
    bench_t0_ns = bench_now_ns();
    pthread_t prog;
    bool tty = isatty(STDERR_FILENO);
    if (tty)
        pthread_create(&prog, NULL, bench_progress, NULL);
    if (bench_cfg.push && (bench_cfg.calls || !bench_push_setup())) {
        if (bench_cfg.calls)
            fprintf(stderr, "berth-bench: --push and --calls do not go together\n");
        return 1;
    }
    for (uint32_t i = 0; i < bench_cfg.workers; i++) {
        ws[i].id = (int)i;
        pthread_create(&ws[i].th, NULL, bench_cfg.push ? bench_receiver_main : bench_worker_main,
                       &ws[i]);
    }
    bench_produce();
    *produced = bench_now_ns();
    atomic_store(&bench_producers_done, true);
    drain();
    atomic_store(&bench_stop_all, true);
    for (uint32_t i = 0; i < bench_cfg.workers; i++)
        pthread_join(ws[i].th, NULL);
    if (tty)
        pthread_join(prog, NULL);
    return 0;
}

int main(int argc, char **argv)
{
    int ex = parse_options(argc, argv);
    if (ex != RUN)
        return ex;
    if (!start_berthd() || !map_ledger()) {
        stop_berthd();
        return 1;
    }
    bench_preload();
    worker *ws = calloc(bench_cfg.workers, sizeof(*ws));
    uint64_t produced = 0;
    if (run(ws, &produced) != 0) {
        stop_berthd();
        return 1;
    }
    bench_measure(&bench_rss_end, &bench_data_end);
    if (!stop_berthd())
        atomic_fetch_add(&bench_errors, 1);
    ex = bench_report(ws, produced);
    free(ws);
    return ex;
}
