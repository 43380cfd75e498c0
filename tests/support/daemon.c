/* daemon.c — see daemon.h. */
#define _XOPEN_SOURCE 700
#include "tests/support/daemon.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static void build_argv(const daemon_proc *d, const char **argv)
{
    int n = 0;
    argv[n++] = BERTHD_PATH;
    argv[n++] = d->store[0] != '\0' ? "--store" : "--data";
    argv[n++] = d->store[0] != '\0' ? d->store : d->dir;
    argv[n++] = "--operate";
    argv[n++] = "tcp://127.0.0.1:0";
    argv[n++] = "--events";
    argv[n++] = "tcp://127.0.0.1:0";
    argv[n++] = "--admin";
    argv[n++] = "tcp://127.0.0.1:0";
    argv[n++] = "--metrics";
    argv[n++] = "http://127.0.0.1:0";
    /* The wire suite runs twice: on berth's own tcp:// server, and with
     * this set on nng's REP socket. */
    if (getenv("BERTH_TEST_OPERATE_NNG") != NULL)
        argv[n++] = "--operate-nng";
    for (int i = 0; i < d->n_extra; i++)
        argv[n++] = d->extra[i];
    argv[n] = NULL;
}

/* Reads the readiness line from fd within 20 s. */
static bool read_ready(int fd, char *line, size_t len)
{
    size_t n = 0;
    time_t end = time(NULL) + 20;
    while (n + 1 < len && time(NULL) < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t got = read(fd, line + n, 1);
        if (got <= 0)
            return false;
        if (line[n] == '\n') {
            line[n] = '\0';
            return true;
        }
        n++;
    }
    return false;
}

static void spawn(daemon_proc *d)
{
    int out[2];
    cr_assert_eq(pipe(out), 0);
    const char *argv[48];
    build_argv(d, argv);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        int err = open(d->stderr_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (err >= 0)
            dup2(err, STDERR_FILENO);
        close(out[0]);
        execv(argv[0], (char **)argv);
        _exit(127);
    }
    close(out[1]);
    char line[512];
    bool ok = read_ready(out[0], line, sizeof(line));
    close(out[0]);
    if (!ok) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        cr_assert_fail("berthd did not become ready (see %s)", d->stderr_path);
    }
    d->pid = pid;
    const char *o = strstr(line, "operate="), *e = strstr(line, "events="),
               *a = strstr(line, "admin=");
    cr_assert(o && e && a, "readiness line: %s", line);
    sscanf(o, "operate=%127s", d->operate);
    sscanf(e, "events=%127s", d->events);
    sscanf(a, "admin=%127s", d->admin);
    const char *mu = strstr(line, "metrics=");
    if (mu != NULL)
        sscanf(mu, "metrics=%127s", d->metrics);
}

#ifdef BERTH_WITH_PG
#include <criterion/hooks.h>

#include "tests/support/pgtmp.h"

/* BERTH_TEST_STORE=pg: d_start() runs berthd on a fresh database of the
 * binary's throwaway cluster, which the runner starts here (harness.c's
 * hooks are linked only into a binary that drives the engine itself). */
static bool store_is_pg(void)
{
    const char *s = getenv("BERTH_TEST_STORE");
    return s != NULL && strcmp(s, "pg") == 0;
}

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    if (store_is_pg())
        pgtmp_runner_start();
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    if (store_is_pg())
        pgtmp_runner_stop();
}
#endif

void d_start(daemon_proc *d, const char *const *extra)
{
#ifdef BERTH_WITH_PG
    if (store_is_pg()) {
        static int n;
        char name[48], uri[256];
        snprintf(name, sizeof name, "d_%d_%d", (int)getpid(), n++);
        pgtmp_createdb(name, uri, sizeof uri);
        d_start_store(d, uri, extra);
        return;
    }
#endif
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "/tmp/berthd-test-XXXXXX");
    cr_assert_not_null(mkdtemp(d->dir));
    snprintf(d->stderr_path, sizeof(d->stderr_path), "%s.stderr", d->dir);
    for (; extra != NULL && *extra != NULL; extra++)
        d->extra[d->n_extra++] = *extra;
    spawn(d);
}

void d_start_store(daemon_proc *d, const char *uri, const char *const *extra)
{
    memset(d, 0, sizeof(*d));
    cr_assert_lt(strlen(uri), sizeof(d->store), "store URI too long: %s", uri);
    snprintf(d->store, sizeof(d->store), "%s", uri);
    snprintf(d->dir, sizeof(d->dir), "/tmp/berthd-test-XXXXXX");
    cr_assert_not_null(mkdtemp(d->dir));
    snprintf(d->stderr_path, sizeof(d->stderr_path), "%s.stderr", d->dir);
    for (; extra != NULL && *extra != NULL; extra++)
        d->extra[d->n_extra++] = *extra;
    spawn(d);
}

int d_store_connections(const daemon_proc *d)
{
#ifdef BERTH_WITH_PG
    if (d->store[0] != '\0') {
        PGconn *c = pgtmp_connect(d->store);
        long n = pgtmp_one_long(c, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                   "current_database() AND pid <> pg_backend_pid()");
        PQfinish(c);
        return (int)n;
    }
#endif
    (void)d;
    return -1;
}

void d_restart(daemon_proc *d)
{
    spawn(d);
}

int d_signal(daemon_proc *d, int sig)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    int status = 0;
    waitpid(d->pid, &status, 0);
    d->pid = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int rm_one(const char *p, const struct stat *s, int f, struct FTW *w)
{
    (void)s, (void)f, (void)w;
    return remove(p);
}

void d_stop(daemon_proc *d)
{
    /* Stopped as an operator would; it must exit 0 (under the sanitizers
     * that also means: nothing leaked). */
    if (d->pid <= 0)
        return;
    int status = 0;
    kill(d->pid, SIGTERM);
    struct timespec tick = {0, 10 * 1000000L};
    for (int i = 0; i < 1500 && waitpid(d->pid, &status, WNOHANG) == 0; i++)
        nanosleep(&tick, NULL);
    if (waitpid(d->pid, &status, WNOHANG) == 0) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, &status, 0);
    }
    d->pid = 0;
    status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (status != 0) {
        char tail[2048] = "";
        FILE *f = fopen(d->stderr_path, "r");
        if (f != NULL) {
            size_t n = fread(tail, 1, sizeof(tail) - 1, f);
            tail[n] = '\0';
            fclose(f);
        }
        cr_assert_fail("berthd exited %d on SIGTERM; stderr:\n%s", status, tail);
    }
}

void d_cleanup(daemon_proc *d)
{
    d_stop(d); /* (from a .fini its verdict is printed, not counted) */
    nftw(d->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    unlink(d->stderr_path);
}

static int refused(const char *store_flag, const char *store, const char *const *flags, char *err,
                   size_t errlen)
{
    char path[] = "/tmp/berthd-refused-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *argv[48];
    int n = 0;
    argv[n++] = BERTHD_PATH;
    argv[n++] = store_flag;
    argv[n++] = store;
    for (; flags != NULL && *flags != NULL && n < 47; flags++)
        argv[n++] = *flags;
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, STDERR_FILENO);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        execv(argv[0], (char **)argv);
        _exit(127);
    }
    int status = 0;
    /* It must refuse, not serve: kill it after 10 s if it started. */
    struct timespec tick = {0, 10 * 1000000L};
    for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; i++)
        nanosleep(&tick, NULL);
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    ssize_t got = pread(fd, err, errlen - 1, 0);
    err[got > 0 ? got : 0] = '\0';
    close(fd);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int d_refused(const char *const *flags, char *err, size_t errlen)
{
    return refused("--data", "/tmp/berthd-refused-never-created", flags, err, errlen);
}

int d_refused_store(const char *uri, const char *const *flags, char *err, size_t errlen)
{
    return refused("--store", uri, flags, err, errlen);
}

int d_peer_ports(const daemon_proc *d, int port, int *ports, int max)
{
    /* The inodes of its sockets, then /proc/net/tcp's lines for them. */
    enum { INODES_MAX = 1024 };
    static unsigned long inodes[INODES_MAX];
    int n_inodes = 0, n = 0;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
    DIR *dir = opendir(path);
    cr_assert_not_null(dir, "%s: %s", path, strerror(errno));
    for (struct dirent *e; (e = readdir(dir)) != NULL && n_inodes < INODES_MAX;) {
        char fd_path[320], link[64];
        snprintf(fd_path, sizeof(fd_path), "%s/%s", path, e->d_name);
        ssize_t len = readlink(fd_path, link, sizeof(link) - 1);
        if (len <= 0)
            continue;
        link[len] = '\0';
        unsigned long inode;
        if (sscanf(link, "socket:[%lu]", &inode) == 1)
            inodes[n_inodes++] = inode;
    }
    closedir(dir);
    snprintf(path, sizeof(path), "/proc/%d/net/tcp", (int)d->pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    char line[512];
    while (fgets(line, sizeof(line), f) != NULL && n < max) {
        unsigned local_port, remote_port;
        unsigned long inode;
        /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
        if (sscanf(line, " %*d: %*x:%x %*x:%x %*x %*x:%*x %*x:%*x %*x %*u %*u %lu", &local_port,
                   &remote_port, &inode) != 3 ||
            (int)remote_port != port)
            continue;
        for (int i = 0; i < n_inodes; i++)
            if (inodes[i] == inode) {
                ports[n++] = (int)local_port;
                break;
            }
    }
    fclose(f);
    return n;
}

bc *d_client(const daemon_proc *d)
{
    bc *c;
    char err[256];
    cr_assert_eq(bc_open(d->operate, &c, err, sizeof(err)), BC_OK, "%s", err);
    return c;
}

Berth__V1__Response *w_call(bc *c, Berth__V1__Request *req, int timeout_ms)
{
    Berth__V1__Response *r;
    int rv = bc_call(c, req, timeout_ms, &r);
    cr_assert_eq(rv, BC_OK, "call failed: %s", bc_strerror(rv));
    cr_assert_not_null(r->status, "every response carries a status");
    return r;
}

void d_deploy(const daemon_proc *d, const char *id, const char *channel, const char *transport)
{
    Berth__V1__ChannelDecl c = BERTH__V1__CHANNEL_DECL__INIT, *cs[] = {&c};
    c.name = (char *)channel;
    c.transport = (char *)transport;
    Berth__V1__DeployRequest dr = BERTH__V1__DEPLOY_REQUEST__INIT;
    dr.id = (char *)id;
    dr.channels = cs;
    dr.n_channels = 1;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DEPLOY;
    req.deploy = &dr;
    bc *a;
    char err[256];
    cr_assert_eq(bc_open(d->admin, &a, err, sizeof err), BC_OK, "%s", err);
    Berth__V1__AdminResponse *r = NULL;
    cr_assert_eq(bc_admin_call(a, &req, NULL, 0, 10000, &r), BC_OK);
    cr_assert_not_null(r->status);
    cr_assert_eq(r->status->code, BERTH__V1__CODE__OK, "%s", r->status->message);
    berth__v1__admin_response__free_unpacked(r, NULL);
    bc_close(a);
}

Berth__V1__Response *w_submit(bc *c, const char *topic, const char *payload, const char *key)
{
    Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
    s.topic = (char *)topic;
    if (payload != NULL) {
        s.has_payload = 1;
        s.payload.data = (uint8_t *)payload;
        s.payload.len = strlen(payload);
    }
    s.idempotency_key = (char *)key;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    req.submit = &s;
    return w_call(c, &req, 0);
}

/* The call, or NULL when the transport failed (berthd gone). */
static Berth__V1__Response *call_or_null(bc *c, Berth__V1__Request *req, int timeout_ms)
{
    Berth__V1__Response *r;
    if (bc_call(c, req, timeout_ms, &r) != BC_OK)
        return NULL;
    cr_assert_not_null(r->status, "every response carries a status");
    return r;
}

typedef Berth__V1__Response *(*call_fn)(bc *c, Berth__V1__Request *req, int timeout_ms);

static Berth__V1__Response *fetch_with(call_fn call, bc *c, const char *worker, const char *topic,
                                       uint32_t max, uint64_t lock_ms, long wait_ms,
                                       const char *const *ids, const char *const *tokens, size_t n)
{
    char *topics[] = {(char *)topic};
    Berth__V1__CompleteRequest *items = n ? calloc(n, sizeof(*items)) : NULL;
    Berth__V1__CompleteRequest **ip = n ? calloc(n, sizeof(*ip)) : NULL;
    for (size_t i = 0; i < n; i++) {
        berth__v1__complete_request__init(&items[i]);
        items[i].task_id = (char *)ids[i];
        items[i].worker_id = (char *)worker;
        items[i].lock_token = (char *)tokens[i];
        ip[i] = &items[i];
    }
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    f.completes = ip;
    f.n_completes = n;
    f.worker_id = (char *)worker;
    f.n_topics = 1;
    f.topics = topics;
    f.has_max_tasks = max != 0;
    f.max_tasks = max;
    f.has_lock_ms = lock_ms != 0;
    f.lock_ms = lock_ms;
    f.has_wait_ms = wait_ms >= 0;
    f.wait_ms = wait_ms >= 0 ? (uint64_t)wait_ms : 0;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &f;
    Berth__V1__Response *r = call(c, &req, wait_ms > 0 ? (int)wait_ms + 15000 : 45000);
    free(items);
    free(ip);
    return r;
}

Berth__V1__Response *w_fetch(bc *c, const char *worker, const char *topic, uint32_t max,
                             uint64_t lock_ms, long wait_ms)
{
    return fetch_with(w_call, c, worker, topic, max, lock_ms, wait_ms, NULL, NULL, 0);
}

Berth__V1__Response *w_fetch_or_null(bc *c, const char *worker, const char *topic, uint32_t max,
                                     uint64_t lock_ms, long wait_ms)
{
    return fetch_with(call_or_null, c, worker, topic, max, lock_ms, wait_ms, NULL, NULL, 0);
}

Berth__V1__Response *w_fetch_completing(bc *c, const char *worker, const char *topic, long wait_ms,
                                        const char *const *ids, const char *const *tokens, size_t n)
{
    return fetch_with(w_call, c, worker, topic, 0, 0, wait_ms, ids, tokens, n);
}

Berth__V1__Response *w_fetch_completing_or_null(bc *c, const char *worker, const char *topic,
                                                long wait_ms, const char *const *ids,
                                                const char *const *tokens, size_t n)
{
    return fetch_with(call_or_null, c, worker, topic, 0, 0, wait_ms, ids, tokens, n);
}

int d_open_fds(const daemon_proc *d)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
    DIR *dir = opendir(path);
    cr_assert_not_null(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

uint64_t d_waiting_fetches(const daemon_proc *d)
{
    bc *a;
    char err[256];
    cr_assert_eq(bc_open(d->admin, &a, err, sizeof(err)), BC_OK, "%s", err);
    Berth__V1__StatsRequest s = BERTH__V1__STATS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_STATS;
    req.stats = &s;
    Berth__V1__AdminResponse *r = NULL;
    cr_assert_eq(bc_admin_call(a, &req, NULL, 0, 10000, &r), BC_OK);
    uint64_t n = r->stats ? r->stats->waiting_fetches : 0;
    berth__v1__admin_response__free_unpacked(r, NULL);
    bc_close(a);
    return n;
}

static Berth__V1__Response *guarded_with(call_fn call, bc *c, Berth__V1__Request__MethodCase m,
                                         const char *id, const char *worker, const char *token)
{
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    Berth__V1__CompleteRequest comp = BERTH__V1__COMPLETE_REQUEST__INIT;
    Berth__V1__FailRequest fail = BERTH__V1__FAIL_REQUEST__INIT;
    Berth__V1__RefuseRequest ref = BERTH__V1__REFUSE_REQUEST__INIT;
    Berth__V1__ExtendLockRequest ext = BERTH__V1__EXTEND_LOCK_REQUEST__INIT;
    Berth__V1__ReleaseRequest rel = BERTH__V1__RELEASE_REQUEST__INIT;
    req.method_case = m;
    switch (m) {
    case BERTH__V1__REQUEST__METHOD_COMPLETE:
        comp.task_id = (char *)id, comp.worker_id = (char *)worker, comp.lock_token = (char *)token;
        req.complete = &comp;
        break;
    case BERTH__V1__REQUEST__METHOD_FAIL:
        fail.task_id = (char *)id, fail.worker_id = (char *)worker, fail.lock_token = (char *)token;
        req.fail = &fail;
        break;
    case BERTH__V1__REQUEST__METHOD_REFUSE:
        ref.task_id = (char *)id, ref.worker_id = (char *)worker, ref.lock_token = (char *)token;
        req.refuse = &ref;
        break;
    case BERTH__V1__REQUEST__METHOD_EXTEND_LOCK:
        ext.task_id = (char *)id, ext.worker_id = (char *)worker, ext.lock_token = (char *)token;
        req.extend_lock = &ext;
        break;
    case BERTH__V1__REQUEST__METHOD_RELEASE:
        rel.task_id = (char *)id, rel.worker_id = (char *)worker, rel.lock_token = (char *)token;
        req.release = &rel;
        break;
    default:
        cr_assert_fail("not a guarded method");
    }
    return call(c, &req, 0);
}

Berth__V1__Response *w_guarded(bc *c, Berth__V1__Request__MethodCase m, const char *id,
                               const char *worker, const char *token)
{
    return guarded_with(w_call, c, m, id, worker, token);
}

Berth__V1__Response *w_guarded_or_null(bc *c, Berth__V1__Request__MethodCase m, const char *id,
                                       const char *worker, const char *token)
{
    return guarded_with(call_or_null, c, m, id, worker, token);
}

static Berth__V1__Response *answer_with(call_fn call, bc *c, const Berth__V1__Task *t,
                                        const char *worker, const void *result, size_t len)
{
    Berth__V1__Result res = BERTH__V1__RESULT__INIT;
    res.has_payload = 1;
    res.payload = (ProtobufCBinaryData){len, (uint8_t *)result};
    Berth__V1__CompleteRequest comp = BERTH__V1__COMPLETE_REQUEST__INIT;
    comp.task_id = t->id;
    comp.worker_id = (char *)worker;
    comp.lock_token = t->lock_token;
    comp.result = &res;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_COMPLETE;
    req.complete = &comp;
    return call(c, &req, 0);
}

Berth__V1__Response *w_answer(bc *c, const Berth__V1__Task *t, const char *worker,
                              const void *result, size_t len)
{
    return answer_with(w_call, c, t, worker, result, len);
}

Berth__V1__Response *w_answer_or_null(bc *c, const Berth__V1__Task *t, const char *worker,
                                      const void *result, size_t len)
{
    return answer_with(call_or_null, c, t, worker, result, len);
}

void w_free(Berth__V1__Response *r)
{
    berth__v1__response__free_unpacked(r, NULL);
}

char *w_submit_id(bc *c, const char *topic, const char *payload)
{
    Berth__V1__Response *r = w_submit(c, topic, payload, NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    char *id = strdup(r->submit->id);
    w_free(r);
    return id;
}

bool d_stderr_has(const daemon_proc *d, const char *needle)
{
    FILE *f = fopen(d->stderr_path, "r");
    cr_assert_not_null(f);
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

int d_http(const daemon_proc *d, const char *method, const char *path, const char *headers,
           const char *body, char **head_out, char **body_out)
{
    unsigned port = 0;
    if (sscanf(d->metrics, "http://127.0.0.1:%u", &port) != 1)
        cr_assert_eq(sscanf(d->metrics, "http://0.0.0.0:%u", &port), 1, "%s", d->metrics);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    size_t blen = body ? strlen(body) : 0;
    size_t cap0 = strlen(method) + strlen(path) + (headers ? strlen(headers) : 0) + blen + 200;
    char *req = malloc(cap0);
    int n;
    if (headers != NULL && strncasecmp(headers, "Host:", 5) == 0)
        n = snprintf(req, cap0,
                     "%s %s HTTP/1.1\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     method, path, headers, blen, body ? body : "");
    else
        n = snprintf(req, cap0,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n%sContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     method, path, port, headers ? headers : "", blen, body ? body : "");
    cr_assert_gt(n, 0);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    free(req);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while ((got = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)got;
        if (len + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    close(fd);
    buf[len] = '\0';
    int status = 0;
    cr_assert_eq(sscanf(buf, "HTTP/1.1 %d", &status), 1, "%s", buf);
    char *b = strstr(buf, "\r\n\r\n");
    if (body_out != NULL)
        *body_out = strdup(b ? b + 4 : "");
    if (b != NULL)
        b[2] = '\0'; /* (the head keeps its last line's CRLF) */
    if (head_out != NULL)
        *head_out = strdup(buf);
    free(buf);
    return status;
}

int d_http_get(const daemon_proc *d, const char *path, char **body)
{
    return d_http(d, "GET", path, NULL, NULL, NULL, body);
}
