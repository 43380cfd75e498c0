/*
 * beanstalk-bench — drives beanstalkd the way berth-bench drives berthd,
 * so that the two can be compared in one session on one machine.
 *
 *   beanstalk-bench (--addr HOST:PORT | --spawn-binlog | --spawn-memory)
 *                   --tasks N [--producers P] [--workers W] [--payload BYTES]
 *                   [--rate JOBS_PER_S] [--json]
 *
 * P connections `put` jobs, W connections `reserve` and `delete` them:
 * beanstalkd's protocol has no batching, so this is its best shape.
 * --spawn-binlog starts `beanstalkd -b DIR -f 0` (binlog, fsync after
 * every write: durable like berth); --spawn-memory starts it without a
 * binlog. Each payload carries its job's index; every job must be deleted
 * exactly once, else the exit status is non-zero. Latency is per job, put
 * acknowledged → delete acknowledged. The JSON has berth-bench's fields.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char host[64] = "127.0.0.1";
static int port;
static uint64_t n_tasks;
static uint32_t producers = 8, workers = 8, payload = 100;
static bool json;
static double rate; /* --rate: jobs/s offered in all, open loop; 0: flat out */
static _Atomic uint64_t *put_ns, *done_ns;
static atomic_uint *deletes;
static atomic_uint_fast64_t next_task, completed, errors;
static uint64_t t0_ns;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A buffered line reader over one connection. */
typedef struct conn {
    int fd;
    char buf[65536];
    size_t len;
} conn;

static bool send_all(conn *c, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = write(c->fd, s, n);
        if (w <= 0)
            return false;
        s += w;
        n -= (size_t)w;
    }
    return true;
}

/* Reads until n bytes are buffered. */
static bool fill(conn *c, size_t n)
{
    while (c->len < n) {
        ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
        if (r <= 0)
            return false;
        c->len += (size_t)r;
    }
    return true;
}

/* One "\r\n"-terminated line into out (without the terminator). */
static bool read_line(conn *c, char *out, size_t outlen)
{
    for (;;) {
        char *e = memmem(c->buf, c->len, "\r\n", 2);
        if (e != NULL) {
            size_t n = (size_t)(e - c->buf);
            snprintf(out, outlen, "%.*s", (int)n, c->buf);
            memmove(c->buf, e + 2, c->len - n - 2);
            c->len -= n + 2;
            return true;
        }
        if (!fill(c, c->len + 1))
            return false;
    }
}

static void consume(conn *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

static void *producer(void *arg)
{
    (void)arg;
    conn *c = calloc(1, sizeof(*c));
    c->fd = dial();
    char *msg = malloc(payload + 128), line[256];
    while (c->fd >= 0) {
        uint64_t i = atomic_fetch_add(&next_task, 1);
        if (i >= n_tasks)
            break;
        /* --rate: job i is due at t0 + i / rate, and its latency runs
         * from then (open loop, as berth-bench's). */
        uint64_t intended = rate > 0 ? t0_ns + (uint64_t)((double)i * 1e9 / rate) : 0;
        if (intended > 0) {
            struct timespec ts = {(time_t)(intended / 1000000000u), (long)(intended % 1000000000u)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
        }
        int h = snprintf(msg, 128, "put 0 0 120 %u\r\n", payload);
        memset(msg + h, 'p', payload);
        memcpy(msg + h, &i, sizeof(i));
        memcpy(msg + h + payload, "\r\n", 2);
        if (!send_all(c, msg, (size_t)h + payload + 2) || !read_line(c, line, sizeof(line)) ||
            strncmp(line, "INSERTED", 8) != 0) {
            atomic_fetch_add(&errors, 1);
            break;
        }
        atomic_store(&put_ns[i], intended ? intended : now_ns());
    }
    if (c->fd < 0)
        atomic_fetch_add(&errors, 1);
    else
        close(c->fd);
    free(msg);
    free(c);
    return NULL;
}

static void *worker(void *arg)
{
    (void)arg;
    conn *c = calloc(1, sizeof(*c));
    c->fd = dial();
    char line[256], cmd[64];
    while (c->fd >= 0 && atomic_load(&completed) + atomic_load(&errors) < n_tasks) {
        /* A short timeout so the loop sees the end. */
        if (!send_all(c, "reserve-with-timeout 1\r\n", 24) || !read_line(c, line, sizeof(line))) {
            atomic_fetch_add(&errors, 1);
            break;
        }
        if (strncmp(line, "TIMED_OUT", 9) == 0 || strncmp(line, "DEADLINE_SOON", 13) == 0)
            continue;
        unsigned long long id;
        unsigned bytes;
        if (sscanf(line, "RESERVED %llu %u", &id, &bytes) != 2 || !fill(c, bytes + 2)) {
            atomic_fetch_add(&errors, 1);
            break;
        }
        uint64_t index;
        memcpy(&index, c->buf, sizeof(index));
        consume(c, bytes + 2);
        int n = snprintf(cmd, sizeof(cmd), "delete %llu\r\n", id);
        if (!send_all(c, cmd, (size_t)n) || !read_line(c, line, sizeof(line)) ||
            strcmp(line, "DELETED") != 0 || index >= n_tasks) {
            atomic_fetch_add(&errors, 1);
            break;
        }
        if (atomic_fetch_add(&deletes[index], 1) == 0) {
            atomic_store(&done_ns[index], now_ns());
            atomic_fetch_add(&completed, 1);
        }
    }
    if (c->fd >= 0)
        close(c->fd);
    free(c);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static pid_t spawned;
static char dir[64];

static bool spawn(bool binlog)
{
    port = 20000 + (int)(getpid() % 20000);
    snprintf(dir, sizeof(dir), "/tmp/beanstalk-bench-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return false;
    char p[16];
    snprintf(p, sizeof(p), "%d", port);
    spawned = fork();
    if (spawned == 0) {
        if (binlog)
            execlp("beanstalkd", "beanstalkd", "-l", "127.0.0.1", "-p", p, "-b", dir, "-f", "0",
                   (char *)NULL);
        else
            execlp("beanstalkd", "beanstalkd", "-l", "127.0.0.1", "-p", p, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) { /* wait until it listens */
        int fd = dial();
        if (fd >= 0) {
            close(fd);
            return true;
        }
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
    return false;
}

static void stop(void)
{
    if (spawned > 0) {
        kill(spawned, SIGTERM);
        waitpid(spawned, NULL, 0);
    }
    if (dir[0] != '\0') {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "beanstalk-bench: could not remove %s\n", dir);
    }
}

int main(int argc, char **argv)
{
    int mode = 0; /* 1 binlog, 2 memory */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(a, "--spawn-binlog") == 0)
            mode = 1;
        else if (strcmp(a, "--spawn-memory") == 0)
            mode = 2;
        else if (strcmp(a, "--json") == 0)
            json = true;
        else if (strcmp(a, "--addr") == 0 && sscanf(v, "%63[^:]:%d", host, &port) == 2)
            i++;
        else if (strcmp(a, "--tasks") == 0)
            n_tasks = strtoull(v, NULL, 10), i++;
        else if (strcmp(a, "--producers") == 0)
            producers = (uint32_t)atoi(v), i++;
        else if (strcmp(a, "--workers") == 0)
            workers = (uint32_t)atoi(v), i++;
        else if (strcmp(a, "--payload") == 0)
            payload = (uint32_t)atoi(v), i++;
        else if (strcmp(a, "--rate") == 0 && atof(v) > 0)
            rate = atof(v), i++;
        else {
            fprintf(stderr, "usage: beanstalk-bench (--addr HOST:PORT | --spawn-binlog | "
                            "--spawn-memory) --tasks N [--producers P] [--workers W] "
                            "[--payload BYTES] [--rate JOBS_PER_S] [--json]\n");
            return 2;
        }
    }
    if (n_tasks == 0 || producers == 0 || workers == 0 || (mode == 0 && port == 0))
        return 2;
    if (payload < 8)
        payload = 8;
    if (mode != 0 && !spawn(mode == 1)) {
        fprintf(stderr, "beanstalk-bench: beanstalkd did not start\n");
        stop();
        return 1;
    }
    put_ns = calloc(n_tasks, sizeof(*put_ns));
    done_ns = calloc(n_tasks, sizeof(*done_ns));
    deletes = calloc(n_tasks, sizeof(*deletes));
    pthread_t *th = calloc(producers + workers, sizeof(*th));
    t0_ns = now_ns();
    for (uint32_t i = 0; i < workers; i++)
        pthread_create(&th[i], NULL, worker, NULL);
    for (uint32_t i = 0; i < producers; i++)
        pthread_create(&th[workers + i], NULL, producer, NULL);
    for (uint32_t i = 0; i < producers; i++)
        pthread_join(th[workers + i], NULL);
    uint64_t produced = now_ns();
    for (uint32_t i = 0; i < workers; i++)
        pthread_join(th[i], NULL);
    stop();

    uint64_t *e2e = calloc(n_tasks, sizeof(*e2e)), n = 0, lost = 0, dups = 0, last = t0_ns;
    for (uint64_t i = 0; i < n_tasks; i++) {
        if (deletes[i] == 0) {
            lost++;
            continue;
        }
        dups += deletes[i] - 1;
        e2e[n++] = done_ns[i] - put_ns[i];
        if (done_ns[i] > last)
            last = done_ns[i];
    }
    qsort(e2e, n, sizeof(*e2e), cmp_u64);
#define P(q) (n ? e2e[(size_t)((q) * (double)(n - 1))] / 1e6 : 0)
    double secs = (double)(last - t0_ns) / 1e9, psecs = (double)(produced - t0_ns) / 1e9;
    if (json)
        printf("{\"tasks\":%" PRIu64 ",\"seconds\":%.3f,\"tasks_per_s\":%.1f,\"submit_per_s\":%.1f,"
               "\"e2e_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},"
               "\"errors\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicates\":%" PRIu64 "}\n",
               n_tasks, secs, n / secs, n_tasks / psecs, P(0.5), P(0.9), P(0.99), P(1.0),
               (uint64_t)atomic_load(&errors), lost, dups);
    else
        printf("beanstalkd %s: %" PRIu64 " jobs in %.3f s: %.1f jobs/s; e2e ms p50 %.3f p99 "
               "%.3f; errors %" PRIu64 " lost %" PRIu64 "\n",
               mode == 1   ? "-b -f 0"
               : mode == 2 ? "in memory"
                           : host,
               n_tasks, secs, n / secs, P(0.5), P(0.99), (uint64_t)atomic_load(&errors), lost);
    return lost || dups || atomic_load(&errors) ? 1 : 0;
}
