/*
 * berth-bench — load for berthd, with proof that nothing was lost.
 *
 *   berth-bench (--operate URL | --spawn) (--tasks N | --duration S)
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
    fprintf(f, "usage: berth-bench (--operate URL | --spawn) (--tasks N | --duration S)\n"
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

/* Reads the options into C: RUN, or the exit status (--help: 0, a bad
 * option: 2, told). */
static int parse_options(int argc, char **argv)
{
    C = (cfg){.producers = 8,
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
            C.spawn = true;
        } else if (strcmp(a, "--json") == 0) {
            C.json = true;
        } else if (strcmp(a, "--calls") == 0) {
            C.calls = true;
        } else if (strcmp(a, "--push") == 0) {
            C.push = true;
        } else if (strcmp(a, "--no-fused") == 0) {
            C.separate = true;
        } else if (strcmp(a, "--preload") == 0 && num(v, &n)) {
            C.preload = n, i++;
        } else if (strcmp(a, "--rate") == 0 && v && atof(v) > 0) {
            C.rate = atof(v), i++;
        } else if (strcmp(a, "--admin") == 0 && v) {
            C.admin = argv[++i];
        } else if (strcmp(a, "--tls-ca") == 0 && v) {
            C.tls_ca = argv[++i];
        } else if (strcmp(a, "--operate") == 0 && v) {
            C.operate = v, i++;
        } else if (strcmp(a, "--client") == 0 && v &&
                   (strcmp(v, "direct") == 0 || strcmp(v, "nng") == 0)) {
            C.nng_client = strcmp(v, "nng") == 0, i++;
        } else if (strcmp(a, "--csv") == 0 && v) {
            C.csv = v, i++;
        } else if (strcmp(a, "--duration") == 0 && v) {
            C.duration_s = atof(v), i++;
        } else if (num(v, &n) && n > 0) {
            i++;
            if (strcmp(a, "--tasks") == 0)
                C.tasks = n;
            else if (strcmp(a, "--producers") == 0)
                C.producers = (uint32_t)n;
            else if (strcmp(a, "--workers") == 0)
                C.workers = (uint32_t)n;
            else if (strcmp(a, "--submit-batch") == 0)
                C.submit_batch = (uint32_t)n;
            else if (strcmp(a, "--fetch-batch") == 0)
                C.fetch_batch = (uint32_t)n;
            else if (strcmp(a, "--complete-batch") == 0)
                C.complete_batch = (uint32_t)n;
            else if (strcmp(a, "--payload") == 0)
                C.payload = (uint32_t)n;
            else if (strcmp(a, "--topics") == 0 && n <= MAX_TOPICS)
                C.topics = (uint32_t)n;
            else if (strcmp(a, "--lock-ms") == 0)
                C.lock_ms = n;
            else if (strcmp(a, "--priorities") == 0 && n <= UINT32_MAX)
                C.priorities = (uint32_t)n;
            else if (strcmp(a, "--delay-ms") == 0)
                C.delay_ms = n;
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
    if ((C.operate == NULL) == !C.spawn || (C.tasks == 0) == (C.duration_s <= 0)) {
        usage(stderr);
        return 2;
    }
    if (C.payload < 8)
        C.payload = 8; /* room for the task index */
    return RUN;
}

/* ---- berthd for --spawn ---- */

/* Stops the spawned berthd; false unless it exited 0. */
static bool stop_berthd(void)
{
    if (spawned.pid <= 0)
        return true;
    kill(spawned.pid, SIGTERM);
    int status = 0;
    waitpid(spawned.pid, &status, 0);
    spawned.pid = 0;
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean)
        fprintf(stderr, "berth-bench: berthd did not exit cleanly (status %d)\n", status);
    spawn_cleanup(&spawned, "berth-bench");
    return clean;
}

/* Starts berthd for --spawn; the admin URL's default otherwise. */
static bool start_berthd(void)
{
    if (C.spawn) {
        if (spawn_berthd(&spawned, "berth-bench", NULL) != 0)
            return false;
        C.operate = spawned.url;
        C.admin = spawned.admin;
    }
    if (C.admin == NULL)
        C.admin = "tcp://127.0.0.1:7451";
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
    task_cap = C.tasks ? C.tasks : (64u << 20);
    submit_ns = lazy_array(task_cap * 8);
    done_ns = lazy_array(task_cap * 8);
    fetched_ns = lazy_array(task_cap * 8);
    completions = lazy_array(task_cap * sizeof(*completions));
    resolved_ns = lazy_array(task_cap * 8);
    if (submit_ns == MAP_FAILED || done_ns == MAP_FAILED || fetched_ns == MAP_FAILED ||
        completions == MAP_FAILED || resolved_ns == MAP_FAILED) {
        perror("berth-bench: mmap");
        return false;
    }
    return true;
}

/* Waits until everything submitted is completed; a loss would keep the
 * workers looking, so the wait is bounded. */
static void drain(void)
{
    uint64_t drain_end = now_ns() + (C.lock_ms + 30000) * 1000000u;
    while (!all_done() && now_ns() < drain_end) {
        struct timespec tick = {0, 20 * 1000000L};
        nanosleep(&tick, NULL);
    }
}

/* The run: workers (or push receivers) and producers, to the drain's
 * end. *produced: when the producers ended. 0, or 1 when it could not
 * start (told). */
static int run(worker *ws, uint64_t *produced)
{
    t0_ns = now_ns();
    pthread_t prog;
    bool tty = isatty(STDERR_FILENO);
    if (tty)
        pthread_create(&prog, NULL, progress, NULL);
    if (C.push && (C.calls || !push_setup())) {
        if (C.calls)
            fprintf(stderr, "berth-bench: --push and --calls do not go together\n");
        return 1;
    }
    for (uint32_t i = 0; i < C.workers; i++) {
        ws[i].id = (int)i;
        pthread_create(&ws[i].th, NULL, C.push ? receiver_main : worker_main, &ws[i]);
    }
    produce();
    *produced = now_ns();
    atomic_store(&producers_done, true);
    drain();
    atomic_store(&stop_all, true);
    for (uint32_t i = 0; i < C.workers; i++)
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
    preload();
    worker *ws = calloc(C.workers, sizeof(*ws));
    uint64_t produced = 0;
    if (run(ws, &produced) != 0) {
        stop_berthd();
        return 1;
    }
    measure(&rss_end, &data_end);
    if (!stop_berthd())
        atomic_fetch_add(&errors, 1);
    ex = report(ws, produced);
    free(ws);
    return ex;
}
