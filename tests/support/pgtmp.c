/*
 * pgtmp.c — see pgtmp.h. Runs on the Criterion runner's thread (start,
 * stop), in a forked watchdog, and in the test processes (createdb).
 * Child programs are run with fork + execv (no shell), output appended to
 * DIR/setup.log, every inherited descriptor above stderr closed first so
 * the postmaster holds none of the runner's pipes.
 */
#define _XOPEN_SOURCE   700
#define _DEFAULT_SOURCE /* SOCK_CLOEXEC */
#include "tests/support/pgtmp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "pg/pgconn.h"
#include "store/err.h"

#ifndef PGTMP_BINDIR
#define PGTMP_BINDIR "/usr/lib/postgresql/15/bin"
#endif

/* The runner's cluster (one per test binary). */
static struct {
    bool started;
    bool as_postgres; /* root: initdb and pg_ctl run as `postgres` */
    char dir[64];     /* /tmp/berth-pg-XXXXXX */
    char data[96];    /* dir/data */
    char log[96];     /* dir/setup.log: initdb's and pg_ctl's output */
    int port;
    pid_t watchdog;
    int watchdog_fd; /* write end; EOF on the read end wakes the watchdog */
} C = {.watchdog_fd = -1};

static const char *bindir(void)
{
    const char *b = getenv("BERTH_PG_BINDIR");
    return b != NULL && b[0] != '\0' ? b : PGTMP_BINDIR;
}

static void close_from(int lowest)
{
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = lowest; fd < max; fd++)
        close(fd);
}

/* Runs BINDIR/prog args... (as postgres when root), waits: its exit status,
 * or -1. NULL-terminated args. */
static int run(const char *prog, const char *const *args)
{
    char path[256];
    const char *argv[24];
    int n = 0;
    snprintf(path, sizeof path, "%s/%s", bindir(), prog);
    if (C.as_postgres) {
        argv[n++] = "/usr/sbin/runuser";
        argv[n++] = "-u";
        argv[n++] = "postgres";
        argv[n++] = "--";
    }
    argv[n++] = path;
    for (int i = 0; args[i] != NULL && n < 23; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int out = open(C.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in >= 0)
            dup2(in, 0);
        if (out >= 0) {
            dup2(out, 1);
            dup2(out, 2);
        }
        close_from(3);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* Stops the postmaster if its pid file is there, then removes the dir. */
static void teardown(void)
{
    char pidfile[128];
    snprintf(pidfile, sizeof pidfile, "%s/postmaster.pid", C.data);
    if (access(pidfile, F_OK) == 0) {
        const char *args[] = {"-D", C.data, "-m", "immediate", "-w", "-t", "30", "stop", NULL};
        run("pg_ctl", args);
    }
    if (C.dir[0] != '\0')
        nftw(C.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The watchdog: a child in its own session (a signal to the runner's
 * process group does not reach it), reading until the runner's end of the
 * pipe closes, which the kernel does however the runner ends. */
static int watchdog_start(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        char b;
        ssize_t got;
        setsid();
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        if (fds[0] != 3) {
            dup2(fds[0], 3);
            fds[0] = 3;
        }
        close_from(4);
        do
            got = read(fds[0], &b, 1);
        while (got != 0 && (got > 0 || errno == EINTR));
        teardown();
        _exit(0);
    }
    close(fds[0]);
    C.watchdog = pid;
    C.watchdog_fd = fds[1];
    return 0;
}

int pgtmp_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof a;
    int port = -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(s);
    return port;
}

static int fail(const char *fmt, const char *what)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, what);
    fprintf(stderr, "pgtmp: %s\n", msg);
    setenv(PGTMP_ENV_ERROR, msg, 1);
    return -1;
}

/* pg_ctl start on C.port: its exit status. fsync and the rest off unless
 * the binary asked for a durable cluster. */
static int start_server(void)
{
    char opts[512], logfile[128];
    const char *fsync = getenv(PGTMP_ENV_FSYNC);
    const char *durable = fsync != NULL && strcmp(fsync, "on") == 0 ? "on" : "off";
    snprintf(logfile, sizeof logfile, "%s/server.log", C.dir);
    snprintf(opts, sizeof opts,
             "-c listen_addresses=127.0.0.1 -p %d -c unix_socket_directories=%s "
             "-c fsync=%s -c synchronous_commit=%s -c full_page_writes=%s "
             "-c max_connections=100",
             C.port, C.dir, durable, durable, durable);
    const char *sargs[] = {"-D", C.data, "-l", logfile, "-o", opts,
                           "-w", "-t",   "60", "start", NULL};
    return run("pg_ctl", sargs);
}

int pgtmp_runner_start(void)
{
    if (C.started)
        return 0; /* another hook of the same runner started it */
    unsetenv(PGTMP_ENV_URI);
    unsetenv(PGTMP_ENV_ERROR);
    unsetenv(PGTMP_ENV_DIR);
    snprintf(C.dir, sizeof C.dir, "/tmp/berth-pg-XXXXXX");
    if (mkdtemp(C.dir) == NULL) {
        C.dir[0] = '\0';
        return fail("mkdtemp: %s", strerror(errno));
    }
    snprintf(C.data, sizeof C.data, "%s/data", C.dir);
    snprintf(C.log, sizeof C.log, "%s/setup.log", C.dir);
    C.started = true;
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (pw == NULL)
            return fail("running as root needs the `postgres` user (%s)", "package postgresql-15");
        if (chown(C.dir, pw->pw_uid, pw->pw_gid) != 0)
            return fail("chown of the cluster dir: %s", strerror(errno));
        C.as_postgres = true;
    }
    if (watchdog_start() != 0)
        return fail("cannot start the watchdog: %s", strerror(errno));

    char initdb[128];
    snprintf(initdb, sizeof initdb, "%s/initdb", bindir());
    if (access(initdb, X_OK) != 0)
        return fail("%s is missing: install postgresql-15 (tools/install-deps.sh)", initdb);
    const char *iargs[] = {"-D",
                           C.data,
                           "-A",
                           "trust",
                           "-U",
                           "berth",
                           "-E",
                           "UTF8",
                           "--locale=C",
                           "--no-sync",
                           "--no-instructions",
                           NULL};
    if (run("initdb", iargs) != 0)
        return fail("initdb failed: see %s", C.log);

    /* A port free a moment ago may be taken meanwhile: three tries. */
    for (int tries = 0; tries < 3; tries++) {
        C.port = pgtmp_free_port();
        if (C.port > 0 && start_server() == 0) {
            char uri[128];
            snprintf(uri, sizeof uri, "postgresql://berth@127.0.0.1:%d", C.port);
            setenv(PGTMP_ENV_URI, uri, 1);
            setenv(PGTMP_ENV_DIR, C.dir, 1);
            return 0;
        }
    }
    return fail("pg_ctl start failed: see %s/server.log", C.dir);
}

void pgtmp_runner_stop(void)
{
    if (!C.started)
        return;
    C.started = false;
    teardown();
    if (C.watchdog_fd >= 0) {
        close(C.watchdog_fd); /* the watchdog finds nothing left to do */
        C.watchdog_fd = -1;
        waitpid(C.watchdog, NULL, 0);
    }
}

static void quiet(void *arg, const char *message)
{
    (void)arg, (void)message; /* "database ... does not exist, skipping" */
}

void pgtmp_createdb(const char *name, char *uri, size_t len)
{
    char err[512], sql[256], admin[160];
    const char *base = getenv(PGTMP_ENV_URI);
    if (base == NULL)
        cr_assert_fail("the test cluster did not start: %s",
                       getenv(PGTMP_ENV_ERROR) != NULL ? getenv(PGTMP_ENV_ERROR)
                                                       : "no ReportHook(PRE_ALL) called pgtmp");
    for (const char *p = name; *p != '\0'; p++)
        cr_assert((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_',
                  "database name %s: [a-z0-9_] only", name);
    snprintf(admin, sizeof admin, "%s/postgres", base);
    PGconn *c = NULL;
    int rv = pgconn_open(admin, "berth-tests", 10000, &c, err, sizeof err);
    cr_assert_eq(rv, BERTH_OK, "%s", err);
    PQsetNoticeProcessor(c, quiet, NULL);
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", name);
    rv = pgconn_exec(c, sql, "dropping the test database", err, sizeof err);
    cr_assert_eq(rv, BERTH_OK, "%s", err);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    rv = pgconn_exec(c, sql, "creating the test database", err, sizeof err);
    cr_assert_eq(rv, BERTH_OK, "%s", err);
    pgconn_close(c);
    snprintf(uri, len, "%s/%s", base, name);
}

PGconn *pgtmp_connect(const char *uri)
{
    char err[1024];
    PGconn *c = NULL;
    int rv = pgconn_open(uri, "berth-tests", 10000, &c, err, sizeof err);
    cr_assert_eq(rv, BERTH_OK, "%s", err);
    return c;
}

void pgtmp_exec(PGconn *c, const char *sql)
{
    char err[1024];
    int rv = pgconn_exec(c, sql, sql, err, sizeof err);
    cr_assert_eq(rv, BERTH_OK, "%s", err);
}

long pgtmp_one_long(PGconn *c, const char *sql)
{
    char err[1024];
    PGresult *r = NULL;
    int rv = pgconn_query(c, sql, 0, NULL, sql, &r, err, sizeof err);
    cr_assert_eq(rv, BERTH_OK, "%s", err);
    cr_assert_gt(PQntuples(r), 0, "%s: no row", sql);
    long v = PQgetisnull(r, 0, 0) ? 0 : strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* In a test process: the runner's cluster, from the environment. */
static void cluster_of_runner(void)
{
    const char *dir = getenv(PGTMP_ENV_DIR);
    if (getenv(PGTMP_ENV_URI) == NULL || dir == NULL)
        cr_assert_fail("the test cluster did not start: %s",
                       getenv(PGTMP_ENV_ERROR) != NULL ? getenv(PGTMP_ENV_ERROR)
                                                       : "no ReportHook(PRE_ALL) called pgtmp");
    cr_assert_lt(strlen(dir), sizeof C.dir, "%s: too long", dir);
    snprintf(C.dir, sizeof C.dir, "%s", dir);
    snprintf(C.data, sizeof C.data, "%s/data", C.dir);
    snprintf(C.log, sizeof C.log, "%s/setup.log", C.dir);
    C.as_postgres = geteuid() == 0;
    const char *colon = strrchr(getenv(PGTMP_ENV_URI), ':');
    C.port = colon != NULL ? atoi(colon + 1) : 0;
}

static long ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1000L + (t1.tv_nsec - t0->tv_nsec) / 1000000L;
}

long pgtmp_restart(const char *mode)
{
    cluster_of_runner();
    char logfile[128];
    snprintf(logfile, sizeof logfile, "%s/server.log", C.dir);
    /* No -o: pg_ctl restarts it with the options it runs with
     * (DATA/postmaster.opts), its port and settings unchanged. */
    const char *args[] = {"-D", C.data, "-m", mode,      "-l", logfile,
                          "-w", "-t",   "60", "restart", NULL};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rv = run("pg_ctl", args);
    cr_assert_eq(rv, 0, "pg_ctl restart -m %s exited %d: see %s and %s", mode, rv, C.log, logfile);
    return ms_since(&t0);
}

void pgtmp_exclusive(void)
{
    char path[128];
    cluster_of_runner();
    snprintf(path, sizeof path, "%s/exclusive.lock", C.dir);
    /* Left open (not inherited by what the test starts): the lock goes
     * with the process. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    while (flock(fd, LOCK_EX) != 0)
        cr_assert_eq(errno, EINTR, "flock %s: %s", path, strerror(errno));
}

long pgtmp_stop(const char *mode)
{
    cluster_of_runner();
    const char *args[] = {"-D", C.data, "-m", mode, "-w", "-t", "60", "stop", NULL};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rv = run("pg_ctl", args);
    cr_assert_eq(rv, 0, "pg_ctl stop -m %s exited %d: see %s", mode, rv, C.log);
    return ms_since(&t0);
}

long pgtmp_start(void)
{
    cluster_of_runner();
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rv = start_server();
    cr_assert_eq(rv, 0, "pg_ctl start exited %d: see %s and %s/server.log", rv, C.log, C.dir);
    return ms_since(&t0);
}
