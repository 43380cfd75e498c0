#define _GNU_SOURCE /* memmem, nftw */
/* berthd as a process: durability across kill -9, restarts, boot refusal,
 * clean shutdown. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "gateway/sp.h"
#include "tests/support/daemon.h"
#include "proto/sp_wire.h"
#include "tests/support/raw.h"

static daemon_proc D;

static void teardown(void)
{
    d_cleanup(&D);
}

TestSuite(process, .fini = teardown, .timeout = 120);

Test(process, kill_9_right_after_acknowledged_submits_loses_none)
{
    d_start(&D, NULL);
    bc *c = d_client(&D);
    enum { N = 300 };
    static char ids[N][33];
    for (int i = 0; i < N; i++) {
        Berth__V1__Response *r = w_submit(c, "durable", "payload", NULL);
        w_expect_code(r, BERTH__V1__CODE__OK);
        memcpy(ids[i], r->submit->id, 33);
        w_free(r);
    }
    bc_close(c);
    cr_assert_eq(d_signal(&D, SIGKILL), 128 + SIGKILL); /* no chance to flush anything */
    d_restart(&D);
    c = d_client(&D);
    Berth__V1__Response *f = w_fetch(c, "w", "durable", 1000, 0, 0);
    w_expect_code(f, BERTH__V1__CODE__OK);
    cr_assert_eq(f->fetch->n_tasks, N, "every acknowledged submit survived kill -9");
    /* berthd says what it rebuilt, and how long that took. */
    char log[8192] = "";
    FILE *lf = fopen(D.stderr_path, "r");
    cr_assert_not_null(lf);
    size_t got = fread(log, 1, sizeof(log) - 1, lf);
    log[got] = '\0';
    fclose(lf);
    const char *line = strstr(log, "berthd: recovered 300 tasks, 0 deliveries and 0 calls in ");
    cr_assert_not_null(line, "%s", log);
    cr_assert_not_null(strstr(line, "ms (store opened in "), "%s", line);
    for (int i = 0; i < N; i++) {
        bool found = false;
        for (size_t k = 0; k < f->fetch->n_tasks && !found; k++)
            found = strcmp(f->fetch->tasks[k]->id, ids[i]) == 0;
        cr_assert(found, "task %s lost", ids[i]);
    }
    w_free(f);
    bc_close(c);
}

/* Submitters that keep going until berthd dies under them; each keeps
 * the ids berthd acknowledged. */
enum { STREAM_THREADS = 4, STREAM_MAX = 4000 };
typedef struct stream {
    bc *c;
    char (*ids)[33];
    int n;
} stream;

static void *stream_submits(void *arg)
{
    stream *st = arg;
    static char payload[1024];
    memset(payload, 'p', sizeof(payload) - 1);
    while (st->n < STREAM_MAX) {
        Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
        s.topic = "stream";
        s.has_payload = 1;
        s.payload.data = (uint8_t *)payload;
        s.payload.len = sizeof(payload) - 1;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        req.submit = &s;
        Berth__V1__Response *r = NULL;
        if (bc_call(st->c, &req, 2000, &r) != BC_OK)
            break; /* berthd is gone */
        bool ok = r->status != NULL && r->status->code == BERTH__V1__CODE__OK && r->submit;
        if (ok) {
            memcpy(st->ids[st->n], r->submit->id, 33);
            __atomic_store_n(&st->n, st->n + 1, __ATOMIC_RELEASE);
        }
        berth__v1__response__free_unpacked(r, NULL);
        if (!ok)
            break;
    }
    return NULL;
}

Test(process, a_backlog_survives_kill_9_and_each_task_is_fetched_once)
{
    d_start(&D, NULL);
    bc *c = d_client(&D);
    enum { N = 5000, B = 500 };
    static char payload[B][16];
    Berth__V1__SubmitRequest items[B], *ip[B];
    for (int k = 0; k < N / B; k++) {
        for (int i = 0; i < B; i++) {
            berth__v1__submit_request__init(&items[i]);
            snprintf(payload[i], sizeof(payload[i]), "%d", k * B + i);
            items[i].topic = "backlog";
            items[i].has_payload = 1;
            items[i].payload.data = (uint8_t *)payload[i];
            items[i].payload.len = strlen(payload[i]);
            ip[i] = &items[i];
        }
        Berth__V1__SubmitBatchRequest sb = BERTH__V1__SUBMIT_BATCH_REQUEST__INIT;
        sb.items = ip;
        sb.n_items = B;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT_BATCH;
        req.submit_batch = &sb;
        Berth__V1__Response *r = w_call(c, &req, 0);
        w_expect_code(r, BERTH__V1__CODE__OK);
        w_free(r);
    }
    bc_close(c);
    cr_assert_eq(d_signal(&D, SIGKILL), 128 + SIGKILL);
    d_restart(&D);
    c = d_client(&D);
    static bool seen[N];
    int fetched = 0;
    for (;;) {
        Berth__V1__Response *f = w_fetch(c, "w", "backlog", 1000, 60000, 0);
        w_expect_code(f, BERTH__V1__CODE__OK);
        size_t n = f->fetch->n_tasks;
        for (size_t i = 0; i < n; i++) {
            const Berth__V1__Task *t = f->fetch->tasks[i];
            char num[16];
            cr_assert_lt(t->payload.len, sizeof(num), "a payload nobody sent");
            snprintf(num, sizeof(num), "%.*s", (int)t->payload.len, (const char *)t->payload.data);
            int k = atoi(num);
            cr_assert(k >= 0 && k < N, "a payload nobody sent: %s", num);
            cr_assert_not(seen[k], "task %d fetched twice", k);
            seen[k] = true;
            fetched++;
        }
        w_free(f);
        if (n == 0)
            break;
    }
    cr_assert_eq(fetched, N, "every task of the backlog, once");
    bc_close(c);
}

typedef struct holder {
    bc *c;
    atomic_bool stop;
} holder;

/* Keeps one fetch waiting on "quiet" until told to stop. */
static void *long_poll(void *arg)
{
    holder *h = arg;
    while (!atomic_load(&h->stop))
        w_free(w_fetch(h->c, "holder", "quiet", 1, 0, 30000));
    return NULL;
}

Test(process, a_fetch_refused_after_its_completions_says_how_they_went)
{
    d_start(&D, (const char *const[]){"--waits-max", "1", NULL});
    bc *c = d_client(&D);
    holder h = {.c = d_client(&D)};
    pthread_t th;
    pthread_create(&th, NULL, long_poll, &h); /* the one wait allowed */
    for (int i = 0; i < 1000 && d_waiting_fetches(&D) == 0; i++) {
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
    cr_assert_eq(d_waiting_fetches(&D), 1);
    w_free(w_submit(c, "work", "p", NULL));
    Berth__V1__Response *f = w_fetch(c, "w", "work", 1, 60000, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    const char *id = f->fetch->tasks[0]->id, *token = f->fetch->tasks[0]->lock_token;
    /* It would wait: refused, the holder has the one wait. */
    Berth__V1__Response *r = w_fetch_completing(c, "w", "quiet", 2000, &id, &token, 1);
    w_expect_code(r, BERTH__V1__CODE__RESOURCE_EXHAUSTED);
    cr_assert_not_null(r->fetch, "the refusal still carries the completions' statuses");
    cr_assert_eq(r->fetch->n_complete_statuses, 1);
    cr_assert_eq(r->fetch->complete_statuses[0]->code, BERTH__V1__CODE__OK);
    w_free(r);
    w_free(f);
    atomic_store(&h.stop, true);
    w_free(w_submit(c, "quiet", "wake", NULL)); /* ends the holder's wait */
    pthread_join(th, NULL);
    bc_close(h.c);
    bc_close(c);
}

Test(process, kill_9_in_a_stream_of_submits_loses_none_acknowledged)
{
    /* Several MiB of WAL, so the kill lands well past the first chunks of
     * zeros written ahead of the log (store/options.cc), with appends and
     * syncs in flight. */
    d_start(&D, NULL);
    stream st[STREAM_THREADS];
    pthread_t th[STREAM_THREADS];
    for (int i = 0; i < STREAM_THREADS; i++) {
        st[i] = (stream){.c = d_client(&D), .ids = calloc(STREAM_MAX, 33)};
        pthread_create(&th[i], NULL, stream_submits, &st[i]);
    }
    for (int waited = 0; waited < 20000; waited += 10) {
        int acked = 0;
        for (int i = 0; i < STREAM_THREADS; i++)
            acked += __atomic_load_n(&st[i].n, __ATOMIC_ACQUIRE);
        if (acked >= 3000)
            break;
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
    cr_assert_eq(d_signal(&D, SIGKILL), 128 + SIGKILL);
    int acked = 0;
    for (int i = 0; i < STREAM_THREADS; i++) {
        pthread_join(th[i], NULL);
        bc_close(st[i].c);
        acked += st[i].n;
    }
    cr_assert_geq(acked, 3000, "the stream was killed in flight, not before");

    d_restart(&D);
    bc *c = d_client(&D);
    size_t cap = STREAM_THREADS * STREAM_MAX, n = 0;
    char(*got)[33] = calloc(cap, 33);
    for (;;) {
        Berth__V1__Response *f = w_fetch(c, "w", "stream", 1000, 600000, 0);
        w_expect_code(f, BERTH__V1__CODE__OK);
        size_t k = f->fetch->n_tasks;
        for (size_t j = 0; j < k && n < cap; j++)
            memcpy(got[n++], f->fetch->tasks[j]->id, 33);
        w_free(f);
        if (k == 0)
            break;
    }
    bc_close(c);
    cr_assert_geq(n, (size_t)acked, "%zu tasks after the restart, %d acknowledged", n, acked);
    for (int i = 0; i < STREAM_THREADS; i++)
        for (int a = 0; a < st[i].n; a++) {
            bool found = false;
            for (size_t j = 0; j < n && !found; j++)
                found = strcmp(got[j], st[i].ids[a]) == 0;
            cr_assert(found, "acknowledged task %s lost", st[i].ids[a]);
        }
    free(got);
    for (int i = 0; i < STREAM_THREADS; i++)
        free(st[i].ids);
}

Test(process, a_live_lock_survives_kill_9)
{
    d_start(&D, NULL);
    bc *c = d_client(&D);
    w_free(w_submit(c, "locked", "p", NULL));
    Berth__V1__Response *f = w_fetch(c, "w1", "locked", 1, 600000, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    char *id = strdup(f->fetch->tasks[0]->id), *tok = strdup(f->fetch->tasks[0]->lock_token);
    w_free(f);
    bc_close(c);
    d_signal(&D, SIGKILL);
    d_restart(&D);
    c = d_client(&D);
    f = w_fetch(c, "w2", "locked", 1, 0, 0);
    cr_assert_eq(f->fetch->n_tasks, 0, "the lock survived the crash");
    w_free(f);
    Berth__V1__Response *r = w_guarded(c, BERTH__V1__REQUEST__METHOD_COMPLETE, id, "w1", tok);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    bc_close(c);
    free(id);
    free(tok);
}

static void *waiter(void *arg)
{
    bc *c = d_client(&D);
    *(Berth__V1__Response **)arg = w_fetch(c, "w", "none", 1, 0, 20000);
    bc_close(c);
    return NULL;
}

Test(process, sigterm_answers_waiting_fetches_and_exits_cleanly)
{
    d_start(&D, NULL);
    Berth__V1__Response *r = NULL;
    pthread_t th;
    pthread_create(&th, NULL, waiter, &r);
    struct timespec pause = {0, 300 * 1000000L};
    nanosleep(&pause, NULL);
    bc *c = d_client(&D);
    w_free(w_submit(c, "kept", "p", NULL));
    bc_close(c);
    cr_assert_eq(d_signal(&D, SIGTERM), 0, "SIGTERM exits 0");
    pthread_join(th, NULL);
    w_expect_code(r, BERTH__V1__CODE__UNAVAILABLE);
    cr_assert(r->status->retryable);
    w_free(r);
    d_restart(&D); /* the store was closed cleanly and reopens */
    c = d_client(&D);
    Berth__V1__Response *f = w_fetch(c, "w", "kept", 10, 0, 0);
    cr_assert_eq(f->fetch->n_tasks, 1);
    w_free(f);
    bc_close(c);
}

static void expect_refused(const char *const *flags, const char *names)
{
    char err[1024];
    int status = d_refused(flags, err, sizeof(err));
    cr_assert_eq(status, 2, "exit %d, expected 2 (stderr: %s)", status, err);
    cr_assert(strstr(err, names) != NULL, "the message names %s: %s", names, err);
}

Test(process, contradictory_settings_are_refused_at_boot)
{
    memset(&D, 0, sizeof(D));
    expect_refused((const char *const[]){"--lock-default-ms", "7200000", NULL}, "lock-default-ms");
    expect_refused((const char *const[]){"--lock-default-ms", "0", NULL}, "lock-default-ms");
    expect_refused((const char *const[]){"--wait-default-ms", "40000", NULL}, "wait-default-ms");
    expect_refused((const char *const[]){"--batch-default", "2000", NULL}, "batch-default");
    expect_refused(
        (const char *const[]){"--wait-max-ms", "60000", "--wait-default-ms", "1000", NULL},
        "wait-max-ms");
    expect_refused((const char *const[]){"--lock-max-ms", "ten", NULL}, "lock-max-ms");
    expect_refused((const char *const[]){"--no-such-flag", "1", NULL}, "no-such-flag");
    expect_refused((const char *const[]){"--max-connections", "4000000000", NULL},
                   "max-connections");
    expect_refused((const char *const[]){"--waits-max", "0", NULL}, "waits-max");
    expect_refused((const char *const[]){"--call-timeout-max-ms", "0", NULL},
                   "call-timeout-max-ms");
    expect_refused((const char *const[]){"--call-attempts-max", "0", NULL}, "call-attempts-max");
    expect_refused((const char *const[]){"--priority-max", "10", NULL}, "priority-default");
    expect_refused((const char *const[]){"--delay-max-ms", "2000000000000", NULL}, "delay-max-ms");
    expect_refused((const char *const[]){"--instance-retention-ms", "0", NULL},
                   "instance-retention-ms");
    expect_refused((const char *const[]){"--buffers-max-bytes", "1048576", NULL},
                   "buffers-max-bytes");
    expect_refused((const char *const[]){"--channel", "x,reply-max-bytes=ten", NULL}, "channel");
    expect_refused((const char *const[]){"--channel", "a", "--channel", "a", NULL}, "twice");
}

Test(process, environment_twins_configure_like_flags)
{
    setenv("BERTH_LOCK_DEFAULT_MS", "7200000", 1);
    memset(&D, 0, sizeof(D));
    char err[1024];
    int status = d_refused(NULL, err, sizeof(err));
    unsetenv("BERTH_LOCK_DEFAULT_MS");
    cr_assert_eq(status, 2);
    cr_assert(strstr(err, "lock-default-ms") != NULL, "%s", err);
}

Test(process, a_config_file_configures_and_flags_win_over_it)
{
    char path[] = "/tmp/berthd-conf-XXXXXX";
    int fd = mkstemp(path);
    const char conf[] = "# bounds\nbatch-default = 3\nbatch-max = 5\n";
    cr_assert_eq(write(fd, conf, sizeof(conf) - 1), (ssize_t)(sizeof(conf) - 1));
    close(fd);
    d_start(&D, (const char *const[]){"--config", path, "--batch-max", "4", NULL});
    bc *c = d_client(&D);
    for (int i = 0; i < 6; i++)
        w_free(w_submit(c, "cfg", "p", NULL));
    Berth__V1__Response *f = w_fetch(c, "w", "cfg", 0, 0, 0);
    cr_assert_eq(f->fetch->n_tasks, 3, "batch-default from the file");
    w_free(f);
    f = w_fetch(c, "w", "cfg", 5, 0, 0);
    w_expect_code(f, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_eq(f->status->limit, 4, "batch-max from the flag, over the file's 5");
    w_free(f);
    bc_close(c);
    unlink(path);
}

Test(process, the_priority_settings_bound_and_default_a_submit_s_priority)
{
    d_start(&D, (const char *const[]){"--priority-max", "10", "--priority-default", "5", NULL});
    bc *c = d_client(&D);
    Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
    s.topic = "prio";
    s.has_priority = 1;
    s.priority = 11;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    req.submit = &s;
    Berth__V1__Response *r = w_call(c, &req, 0);
    w_expect_code(r, BERTH__V1__CODE__INVALID_ARGUMENT);
    cr_assert_str_eq(r->status->field, "priority");
    cr_assert_eq(r->status->limit, 10);
    w_free(r);
    s.priority = 10;
    w_free(w_call(c, &req, 0));
    w_free(w_submit(c, "prio", "p", NULL));
    Berth__V1__Response *f = w_fetch(c, "w", "prio", 2, 0, 0);
    cr_assert_eq(f->fetch->n_tasks, 2);
    cr_assert_eq(f->fetch->tasks[0]->priority, 5, "the operator's default goes first");
    cr_assert_eq(f->fetch->tasks[1]->priority, 10);
    w_free(f);
    bc_close(c);
}

static int ipc_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* ipc:// (berth's own server; with BERTH_TEST_OPERATE_NNG, nng's REP, held
 * to the same): nng's IPC client is served (each message's length preceded
 * by a byte holding 1), a frame of another type closes the connection, a
 * stale socket file is replaced, a live one is another server's and
 * refused, and the file goes when berthd stops. */
Test(process, operate_over_ipc_speaks_nngs_ipc_mapping)
{
    char dir[] = "/tmp/berth-ipc-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[96], url[128];
    snprintf(path, sizeof(path), "%s/operate.sock", dir);
    snprintf(url, sizeof(url), "ipc://%s", path);
    /* A socket file whose listener is gone. */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert_eq(bind(stale, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(stale);

    d_start(&D, (const char *const[]){"--operate", url, NULL});
    cr_assert_str_eq(D.operate, url);

    /* nng's REQ socket over IPC: a round trip of every shape. */
    bc *c;
    char err[256];
    cr_assert_eq(bc_open(D.operate, &c, err, sizeof(err)), BC_OK, "%s", err);
    Berth__V1__Response *r = w_submit(c, "over-ipc", "p", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    r = w_fetch(c, "w", "over-ipc", 1, 0, 2000);
    w_expect_code(r, BERTH__V1__CODE__OK);
    cr_assert_eq(r->fetch->n_tasks, 1);
    Berth__V1__Response *done =
        w_guarded(c, BERTH__V1__REQUEST__METHOD_COMPLETE, r->fetch->tasks[0]->id, "w",
                  r->fetch->tasks[0]->lock_token);
    w_expect_code(done, BERTH__V1__CODE__OK);
    w_free(done);
    w_free(r);
    bc_close(c);

    /* A frame whose type byte is not 1 is not nng's IPC: the connection
     * closes. */
    int fd = ipc_connect(path);
    cr_assert_geq(fd, 0);
    uint8_t hello[SP_HEADER_LEN], peer[SP_HEADER_LEN];
    sp_header(hello, SP_PROTO_REQ0);
    cr_assert_eq(write(fd, hello, sizeof(hello)), (ssize_t)sizeof(hello));
    cr_assert_eq(read(fd, peer, sizeof(peer)), (ssize_t)sizeof(peer));
    uint8_t bad[9 + 4] = {2, 0, 0, 0, 0, 0, 0, 0, 4, 0x80, 0, 0, 1};
    cr_assert_eq(write(fd, bad, sizeof(bad)), (ssize_t)sizeof(bad));
    uint8_t b;
    /* (Closed with bytes of ours unread, a Unix socket reads ECONNRESET.) */
    ssize_t got = read(fd, &b, 1);
    cr_assert(got == 0 || (got < 0 && errno == ECONNRESET),
              "the connection stays open after a frame of type 2 (%zd, %s)", got, strerror(errno));
    close(fd);

    /* The path is in use by a live server: a second berthd is refused. (It
     * opens its store before it listens: one of its own, in dir.) */
    char second[96];
    snprintf(second, sizeof(second), "%s/second", dir);
    int status = d_refused((const char *const[]){"--data", second, "--operate", url, NULL}, err,
                           sizeof(err));
    cr_assert_neq(status, 0);
    cr_assert_not_null(strstr(err, "cannot listen"), "%s", err);
    /* A file that is not a socket is never removed to make room. */
    char plain[112], plain_url[144];
    snprintf(plain, sizeof(plain), "%s/not-a-socket", dir);
    snprintf(plain_url, sizeof(plain_url), "ipc://%s", plain);
    FILE *f = fopen(plain, "w");
    cr_assert_not_null(f);
    fputs("keep me", f);
    fclose(f);
    status = d_refused((const char *const[]){"--data", second, "--operate", plain_url, NULL}, err,
                       sizeof(err));
    cr_assert_neq(status, 0);
    cr_assert_not_null(strstr(err, "cannot listen"), "%s", err);
    cr_assert_eq(access(plain, F_OK), 0, "berthd removed a file that was not a socket");
    unlink(plain);

    d_stop(&D);
    cr_assert_neq(access(path, F_OK), 0, "the socket file outlived berthd");
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* A self-signed certificate for localhost in a new directory dir (a
 * mkdtemp template): dir/cert.pem, dir/key.pem. */
static void make_cert(char *dir, char cert[96], char key[96])
{
    cr_assert_not_null(mkdtemp(dir));
    char cmd[1024];
    snprintf(cert, 96, "%s/cert.pem", dir);
    snprintf(key, 96, "%s/key.pem", dir);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
             "-addext subjectAltName=DNS:localhost -keyout %s -out %s >/dev/null 2>&1",
             key, cert);
    cr_assert_eq(system(cmd), 0, "openssl could not make a test certificate");
}

/* D on tls+tcp://, with a certificate made in dir (as make_cert). */
static void start_tls(char *dir, char cert[96])
{
    char key[96];
    make_cert(dir, cert, key);
    d_start(&D, (const char *const[]){"--operate", "tls+tcp://127.0.0.1:0", "--tls-cert", cert,
                                      "--tls-key", key, NULL});
}

/* berthd's descriptors, once back to `before` or fewer (2 s at most). */
static int fds_back_to(int before)
{
    int now = d_open_fds(&D);
    for (int tries = 0; tries < 40 && now > before; tries++) {
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
        now = d_open_fds(&D);
    }
    return now;
}

static void rm_dir(const char *dir)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(process, operate_over_tls_with_a_verified_certificate)
{
    char dir[] = "/tmp/berth-tls-XXXXXX", cert[96];
    start_tls(dir, cert);
    cr_assert(strncmp(D.operate, "tls+tcp://", 10) == 0, "%s", D.operate);

    bc *c;
    char err[256];
    bc_tls tls = {.ca_file = cert, .server_name = "localhost"};
    cr_assert_eq(bc_open_tls(D.operate, &tls, &c, err, sizeof(err)), BC_OK, "%s", err);
    Berth__V1__Response *r = w_submit(c, "secure", "p", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    bc_close(c);

    /* Told no name, a client checks the URL's host (127.0.0.1), which this
     * certificate (for localhost) does not carry: refused. */
    bc_tls by_url = {.ca_file = cert};
    cr_assert_eq(bc_open_tls(D.operate, &by_url, &c, err, sizeof(err)), BC_EUNREACHABLE,
                 "a certificate for another host than the URL's was accepted");
    /* A client that checks for another name must not get through: the
     * handshake fails and the dial with it. */
    bc_tls wrong = {.ca_file = cert, .server_name = "not-this-host"};
    cr_assert_eq(bc_open_tls(D.operate, &wrong, &c, err, sizeof(err)), BC_EUNREACHABLE,
                 "a certificate for the wrong name was accepted");
    /* Without a CA the system's bundle is used, which does not know this
     * self-signed certificate: refused. Only an explicit opt-out skips it. */
    cr_assert_eq(bc_open_tls(D.operate, NULL, &c, err, sizeof(err)), BC_EUNREACHABLE,
                 "an unverified server was accepted by default");
    bc_tls insecure = {.insecure = true};
    cr_assert_eq(bc_open_tls(D.operate, &insecure, &c, err, sizeof(err)), BC_OK, "%s", err);
    bc_close(c);
    rm_dir(dir);
}

/* A client of D's tls+tcp:// URL, the certificate not checked. */
static bc *tls_client(void)
{
    bc *c;
    char err[256];
    bc_tls insecure = {.insecure = true};
    cr_assert_eq(bc_open_tls(D.operate, &insecure, &c, err, sizeof(err)), BC_OK, "%s", err);
    return c;
}

/* An nng REQ socket dialled to a tls+tcp:// URL, the certificate not
 * checked (these tests are about the bytes, not the name). */
static nng_socket tls_req(const char *url)
{
    nng_tls_config *cfg;
    cr_assert_eq(nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT), 0);
    cr_assert_eq(nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE), 0);
    nng_socket s;
    nng_dialer d;
    cr_assert_eq(nng_req0_open(&s), 0);
    cr_assert_eq(nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE), 0);
    cr_assert_eq(nng_dialer_create(&d, s, url), 0);
    cr_assert_eq(nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg), 0);
    int rv = nng_dialer_start(d, 0);
    nng_tls_config_free(cfg); /* (the dialer holds its own reference) */
    cr_assert_eq(rv, 0, "dial %s: %s", url, nng_strerror(rv));
    return s;
}

/* n requests on their own contexts of s, sent at once (pipelined on its
 * one connection), and each one's Response (free_unpacked). */
static void tls_pipeline(nng_socket s, const uint8_t *const *bodies, const size_t *lens, int n,
                         Berth__V1__Response **answers)
{
    nng_ctx ctx[64];
    nng_aio *aio[64];
    cr_assert(n <= 64);
    for (int i = 0; i < n; i++) {
        nng_msg *m;
        cr_assert_eq(nng_ctx_open(&ctx[i], s), 0);
        cr_assert_eq(nng_aio_alloc(&aio[i], NULL, NULL), 0);
        nng_aio_set_timeout(aio[i], 10000);
        cr_assert_eq(nng_msg_alloc(&m, 0), 0);
        cr_assert_eq(nng_msg_append(m, bodies[i], lens[i]), 0);
        nng_aio_set_msg(aio[i], m);
        nng_ctx_send(ctx[i], aio[i]);
    }
    for (int i = 0; i < n; i++) {
        nng_aio_wait(aio[i]);
        cr_assert_eq(nng_aio_result(aio[i]), 0, "send %d: %s", i,
                     nng_strerror(nng_aio_result(aio[i])));
        nng_ctx_recv(ctx[i], aio[i]);
    }
    for (int i = 0; i < n; i++) {
        nng_aio_wait(aio[i]);
        int rv = nng_aio_result(aio[i]);
        cr_assert_eq(rv, 0, "answer %d: %s", i, nng_strerror(rv));
        nng_msg *m = nng_aio_get_msg(aio[i]);
        answers[i] = berth__v1__response__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
        cr_assert_not_null(answers[i]);
        nng_msg_free(m);
        nng_ctx_close(ctx[i]);
        nng_aio_free(aio[i]);
    }
}

/* tls+tcp:// on berth's own server: requests pipelined on one connection
 * are each answered, answers many TLS records long (a fetch of 64 tasks of
 * 40 KB) too, and a peer that speaks no TLS is let go without an answer. */
Test(process, operate_over_tls_answers_pipelined_and_large_requests)
{
    char dir[] = "/tmp/berth-tls-XXXXXX", cert[96];
    start_tls(dir, cert);
    enum { N = 64, PAYLOAD = 40000 };
    static uint8_t payload[PAYLOAD], packed[N][PAYLOAD + 256];
    const uint8_t *bodies[N];
    size_t lens[N];
    for (int i = 0; i < N; i++) {
        memset(payload, 'a' + i % 26, sizeof(payload));
        Berth__V1__SubmitRequest sr = BERTH__V1__SUBMIT_REQUEST__INIT;
        sr.topic = "tls-big";
        sr.has_payload = true;
        sr.payload = (ProtobufCBinaryData){sizeof(payload), payload};
        Berth__V1__Request r = BERTH__V1__REQUEST__INIT;
        r.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        r.submit = &sr;
        lens[i] = berth__v1__request__pack(&r, packed[i]);
        bodies[i] = packed[i];
    }
    nng_socket s = tls_req(D.operate);
    Berth__V1__Response *answers[N];
    tls_pipeline(s, bodies, lens, N, answers);
    for (int i = 0; i < N; i++) {
        w_expect_code(answers[i], BERTH__V1__CODE__OK);
        berth__v1__response__free_unpacked(answers[i], NULL);
    }
    uint8_t fetch[128];
    const uint8_t *fb[1] = {fetch};
    size_t fl[1];
    fl[0] = raw_pack_fetch(fetch, "tls-big", N, 0);
    Berth__V1__Response *got;
    tls_pipeline(s, fb, fl, 1, &got);
    w_expect_code(got, BERTH__V1__CODE__OK);
    cr_assert_eq(got->fetch->n_tasks, N);
    int seen[26] = {0};
    for (size_t i = 0; i < got->fetch->n_tasks; i++) {
        ProtobufCBinaryData p = got->fetch->tasks[i]->payload;
        cr_assert_eq(p.len, PAYLOAD);
        for (size_t k = 0; k < p.len; k++)
            cr_assert_eq(p.data[k], p.data[0], "a payload came back changed");
        seen[p.data[0] - 'a']++;
    }
    for (int i = 0; i < 26; i++)
        cr_assert_eq(seen[i], N / 26 + (i < N % 26), "payload %c", 'a' + i);
    berth__v1__response__free_unpacked(got, NULL);
    nng_close(s);

    /* Plaintext SP to the TLS port: no handshake, so no answer, and the
     * connection is closed. */
    int fd = raw_connect(D.operate);
    uint8_t plain[SP_HEADER_LEN + 256];
    sp_header(plain, SP_PROTO_REQ0);
    size_t pl = SP_HEADER_LEN + raw_frame(plain + SP_HEADER_LEN, 1, fetch, fl[0]);
    cr_assert_eq(send(fd, plain, pl, MSG_NOSIGNAL), (ssize_t)pl);
    char x;
    ssize_t n = recv(fd, &x, 1, 0);
    cr_assert(n == 0 || (n < 0 && errno == ECONNRESET), "a plaintext peer was answered");
    close(fd);
    bc *c = tls_client();
    Berth__V1__Response *r = w_submit(c, "after", "x", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    bc_close(c);
    d_stop(&D);
    rm_dir(dir);
}

/* tls+tcp://: handshakes run on a thread of their own. A peer that never
 * finishes its handshake (one says nothing, one sends half a record
 * header) is closed once the 10 s it has for it are up, and others shake
 * hands and are served meanwhile. */
Test(process, operate_over_tls_closes_a_peer_that_never_shakes_hands)
{
    if (getenv("BERTH_TEST_OPERATE_NNG") != NULL)
        cr_skip_test("nng's TLS keeps a peer that never shakes hands open past 20 s");
    char dir[] = "/tmp/berth-tls-XXXXXX", cert[96];
    start_tls(dir, cert);
    int before = d_open_fds(&D);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int mute = raw_connect(D.operate), half = raw_connect(D.operate);
    static const uint8_t record[3] = {0x16, 0x03, 0x01}; /* a handshake record, cut short */
    raw_write_all(half, record, sizeof(record));
    struct timeval tv = {.tv_sec = 20};
    setsockopt(mute, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(half, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (int i = 0; i < 3; i++) {
        bc *c = tls_client();
        Berth__V1__Response *r = w_submit(c, "meanwhile", "x", NULL);
        w_expect_code(r, BERTH__V1__CODE__OK);
        w_free(r);
        bc_close(c);
    }
    int fds[2] = {mute, half};
    for (int i = 0; i < 2; i++) {
        char x;
        ssize_t n = recv(fds[i], &x, 1, 0);
        cr_assert(n == 0 || (n < 0 && errno == ECONNRESET), "peer %d: not closed (%zd, %s)", i, n,
                  strerror(errno));
        close(fds[i]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert_geq(waited, 9.0, "closed after %.1f s: before the 10 s timeout", waited);
    int now = fds_back_to(before);
    cr_assert_leq(now, before, "%d descriptors kept", now - before);
    d_stop(&D);
    rm_dir(dir);
}

/* TLS settings berthd cannot serve are refused at boot (exit 2), with a
 * message that names the file and the problem. */
Test(process, tls_settings_that_cannot_serve_are_refused_at_boot)
{
    char dir[] = "/tmp/berth-tls-XXXXXX", cert[96], key[96];
    make_cert(dir, cert, key);
    char other[] = "/tmp/berth-tls-XXXXXX", other_cert[96], other_key[96];
    make_cert(other, other_cert, other_key);
    char data[128], missing[128];
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(missing, sizeof(missing), "%s/missing.pem", dir);
    struct {
        const char *cert, *key, *says, *names;
    } cases[] = {
        {cert, other_key, "is not the key of certificate", other_key},
        {missing, key, "No such file", missing},
        {key, key, "TLS certificate", key}, /* a key where the certificate goes */
        {cert, cert, "TLS key", cert},
        {NULL, NULL, "needs tls-cert and tls-key", "tls+tcp://127.0.0.1:0"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[512];
        const char *flags[] = {"--data",
                               data,
                               "--operate",
                               "tls+tcp://127.0.0.1:0",
                               cases[i].cert ? "--tls-cert" : NULL,
                               cases[i].cert,
                               "--tls-key",
                               cases[i].key,
                               NULL};
        int status = d_refused(flags, err, sizeof(err));
        cr_assert_eq(status, 2, "case %zu: exit %d (%s)", i, status, err);
        cr_assert_not_null(strstr(err, cases[i].says), "case %zu: %s", i, err);
        cr_assert_not_null(strstr(err, cases[i].names), "case %zu names %s: %s", i, cases[i].names,
                           err);
    }
    rm_dir(dir);
    rm_dir(other);
}

/* A TLS connection with more long polls than berthd runs at once (256):
 * it stops reading at 256 and reads on as they are answered. The last
 * 16 KiB come in one TLS record that begins inside the 256th long poll:
 * berthd reads that record in part (its buffer holds the start of the
 * 256th) and stops, so TLS holds the rest decrypted, with nothing left on
 * the socket to wake the connection. It must be read when the connection
 * is read again. Every long poll gets its task. */
Test(process, operate_over_tls_reads_on_after_too_many_long_polls)
{
    if (getenv("BERTH_TEST_OPERATE_NNG") != NULL)
        cr_skip_test("nng's REP reads on and answers past waits-per-connection at once");
    char dir[] = "/tmp/berth-tls-XXXXXX", cert[96];
    start_tls(dir, cert);
    enum { RECORD = 16384, MAX = 400 };
    char topic[200];
    memset(topic, 't', sizeof(topic) - 1);
    topic[sizeof(topic) - 1] = '\0';
    uint8_t fetch[512];
    size_t fl = raw_pack_fetch(fetch, topic, 1, 20000);
    static uint8_t frames[MAX * 600];
    size_t frame = raw_frame(frames, 1, fetch, fl);
    uint32_t n = SP_INFLIGHT_MAX + (uint32_t)(RECORD / frame);
    size_t len = 0;
    for (uint32_t i = 0; i < n; i++)
        len += raw_frame(frames + len, 1 + i, fetch, fl);
    size_t split = len - RECORD;
    cr_assert(split > (SP_INFLIGHT_MAX - 1) * frame && split < SP_INFLIGHT_MAX * frame,
              "the last record begins inside the 256th long poll");
    raw_tls *t = raw_tls_req(D.operate);
    raw_tls_write(t, frames, split);
    raw_tls_write(t, frames + split, RECORD);
    bc *c = tls_client();
    for (uint32_t i = 0; i < n; i++) {
        Berth__V1__Response *r = w_submit(c, topic, "x", NULL);
        w_expect_code(r, BERTH__V1__CODE__OK);
        w_free(r);
    }
    bc_close(c);
    bool seen[MAX + 1] = {false};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id;
        Berth__V1__Response *r = raw_tls_answer(t, &id);
        cr_assert(id >= 1 && id <= n && !seen[id], "answer id %u", id);
        seen[id] = true;
        w_expect_code(r, BERTH__V1__CODE__OK);
        cr_assert_eq(r->fetch->n_tasks, 1, "long poll %u answered without its task", id);
        berth__v1__response__free_unpacked(r, NULL);
    }
    raw_tls_hang_up(t);
    d_stop(&D);
    rm_dir(dir);
}

/* nng 1.5.2's TCP and TLS transports can lose a pipe's receive when its
 * peer hangs up with requests in flight, and then never let a closed pipe
 * go (BENCHMARKS.md "Hostile clients"): with --operate-nng this leaks
 * descriptors for good. tls+tcp:// is berth's own server now: every
 * connection of a flood of peers that pipeline and hang up is let go, and
 * others are served. */
Test(process, operate_over_tls_lets_go_of_peers_that_pipeline_and_hang_up)
{
    if (getenv("BERTH_TEST_OPERATE_NNG") != NULL)
        cr_skip_test("nng's REP keeps such pipes (the reason tls+tcp:// is not served by it)");
    char dir[] = "/tmp/berth-tls-XXXXXX", cert[96];
    start_tls(dir, cert);
    int before = d_open_fds(&D);
    enum { ROUNDS = 100, PER = 64 };
    uint8_t fetch[128];
    size_t fl = raw_pack_fetch(fetch, "flood", 1, 0);
    static uint8_t frames[PER * 256];
    size_t len = 0;
    for (uint32_t i = 0; i < PER; i++)
        len += raw_frame(frames + len, 1 + i, fetch, fl);
    for (int round = 0; round < ROUNDS; round++) {
        raw_tls *t = raw_tls_req(D.operate);
        raw_tls_write(t, frames, len);
        raw_tls_hang_up(t);
    }
    int now = fds_back_to(before);
    cr_assert_leq(now, before, "%d descriptors kept of %d connections", now - before, ROUNDS);
    bc *c = tls_client();
    Berth__V1__Response *r = w_submit(c, "after", "x", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    bc_close(c);
    d_stop(&D);
    rm_dir(dir);
}

/* nng's REP socket (--operate-nng) under a flood of clients that pipeline
 * requests and hang up: others are still served, and SIGTERM stops
 * berthd within d_stop's bound, exiting 0. (nng's socket close waits
 * for pipes such peers leave stuck; berthd closes its store first and
 * does not wait for them past a bound.) */
Test(process, operate_nng_stops_in_bounded_time_after_a_flood_of_peers_that_hang_up)
{
    static const char *const extra[] = {"--operate-nng", NULL};
    d_start(&D, extra);
    uint8_t body[128], f[256];
    size_t bl = raw_pack_fetch(body, "flood", 1, 0);
    for (int round = 0; round < 400; round++) {
        int fd = raw_req(D.operate);
        for (uint32_t i = 0; i < 64; i++)
            raw_write_all(fd, f, raw_frame(f, 1 + i, body, bl));
        close(fd);
    }
    bc *c = d_client(&D);
    Berth__V1__Response *r = w_submit(c, "after", "x", NULL);
    w_expect_code(r, BERTH__V1__CODE__OK);
    w_free(r);
    bc_close(c);
    d_stop(&D); /* SIGTERM: exit 0 within 15 s */
}

Test(process, operate_nng_closes_connections_past_max_connections)
{
    static const char *const extra[] = {"--operate-nng", "--max-connections", "2", NULL};
    d_start(&D, extra);
    int a = raw_req(D.operate), b = raw_req(D.operate);
    raw_round_trip(a, 1);
    raw_round_trip(b, 2);
    int c = raw_req(D.operate); /* the headers are exchanged before nng adds it */
    char x;
    ssize_t n = recv(c, &x, 1, 0);
    cr_assert(n == 0 || (n < 0 && errno == ECONNRESET), "the third is closed, not served");
    close(c);
    raw_round_trip(a, 3); /* the others go on */
    close(a);
    /* Room again once one left (nng lets it go on its own time). */
    bool served = false;
    for (int tries = 0; tries < 100 && !served; tries++) {
        nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
        c = raw_req(D.operate);
        uint8_t body[128], f[256];
        size_t bl = raw_pack_fetch(body, "none", 1, 0);
        size_t fl = raw_frame(f, 4, body, bl);
        uint8_t head[8];
        if (send(c, f, fl, MSG_NOSIGNAL) != (ssize_t)fl) {
            close(c);
            continue;
        }
        served = recv(c, head, sizeof(head), MSG_WAITALL) == (ssize_t)sizeof(head);
        close(c);
    }
    cr_assert(served, "no room again after a connection left");
    close(b);
    d_stop(&D);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

Test(process, a_corrupted_data_directory_is_refused_at_boot_naming_the_problem)
{
    char dir[] = "/tmp/berth-corrupt-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof(path), "%s/CURRENT", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("garbage\n", f);
    fclose(f);
    char err[1024];
    int status = d_refused((const char *const[]){"--data", dir, NULL}, err, sizeof(err));
    cr_assert_eq(status, 1, "exit %d (stderr: %s)", status, err);
    cr_assert(strstr(err, dir) != NULL && strstr(err, "Corruption") != NULL, "%s", err);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* Flips a bit of the first WAL record of dir holding marker; true if one did. */
static bool damage_wal(const char *dir, const char *marker)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    bool done = false;
    for (struct dirent *e; !done && (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".log") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r+b");
        cr_assert_not_null(f);
        static char buf[4 << 20];
        size_t len = fread(buf, 1, sizeof(buf), f);
        char *at = memmem(buf, len, marker, strlen(marker));
        if (at != NULL) {
            fseek(f, (long)(at - buf) + 3, SEEK_SET);
            fputc(at[3] ^ 1, f);
            done = true;
        }
        fclose(f);
    }
    closedir(d);
    return done;
}

Test(process, a_wal_damaged_before_its_end_is_refused_at_boot_never_cut_short)
{
    d_start(&D, NULL);
    bc *c = d_client(&D);
    const char *payloads[] = {"before", "DAMAGED-RECORD-MARKER", "after-1", "after-2"};
    for (size_t i = 0; i < 4; i++) {
        Berth__V1__Response *r = w_submit(c, "wal", payloads[i], NULL);
        w_expect_code(r, BERTH__V1__CODE__OK);
        w_free(r);
    }
    bc_close(c);
    cr_assert_eq(d_signal(&D, SIGKILL), 128 + SIGKILL); /* the WAL is all there is */
    cr_assert(damage_wal(D.dir, "DAMAGED-RECORD-MARKER"), "no WAL record to damage");
    /* Acknowledged writes follow the damage: opening would drop them. */
    char err[2048];
    int status = d_refused((const char *const[]){"--data", D.dir, NULL}, err, sizeof(err));
    cr_assert_eq(status, 1, "exit %d (stderr: %s)", status, err);
    cr_assert(strstr(err, D.dir) != NULL && strstr(err, "Corruption") != NULL, "%s", err);
}

/* ---- a full disk, over the wire ---- */

static char full_mnt[] = "/tmp/berth-full-XXXXXX";

static void full_teardown(void)
{
    d_cleanup(&D);
    umount2(full_mnt, MNT_DETACH);
    rmdir(full_mnt);
}

/* Writes zeros to path until the file system is full. */
static void fill_up(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    static char zeros[1 << 16];
    while (write(fd, zeros, sizeof(zeros)) > 0)
        ;
    close(fd);
}

/* The payload of the i-th task: its index, then filler. */
static void full_payload(char *p, size_t len, int i)
{
    memset(p, 'a' + i % 26, len - 1);
    p[len - 1] = '\0';
    snprintf(p, 16, "%08d", i);
    p[8] = ':';
}

Test(disk, a_full_disk_answers_unavailable_then_serves_again_once_it_has_room,
     .fini = full_teardown, .timeout = 120)
{
    cr_assert_not_null(mkdtemp(full_mnt));
    if (mount("tmpfs", full_mnt, "tmpfs", 0, "size=24m") != 0)
        cr_skip_test("cannot mount a small file system here (%s): run as root", strerror(errno));
    char data[64], filler[64];
    snprintf(data, sizeof(data), "%s/d", full_mnt);
    snprintf(filler, sizeof(filler), "%s/filler", full_mnt);
    d_start(&D, (const char *const[]){"--data", data, NULL});
    bc *c = d_client(&D);

    /* Acknowledged submits until the disk is full; never an OK after a
     * refusal, and every refusal UNAVAILABLE, retryable. */
    enum { N = 4000, LEN = 16 << 10 };
    static bool acked[N];
    static char p[LEN];
    fill_up(filler);
    int i = 0, refused = 0;
    for (; i < N && refused < 3; i++) {
        full_payload(p, sizeof(p), i);
        Berth__V1__Response *r = w_submit(c, "full", p, NULL);
        if (r->status->code == BERTH__V1__CODE__OK) {
            cr_assert_eq(refused, 0, "an OK after the disk was found full");
            acked[i] = true;
        } else {
            w_expect_code(r, BERTH__V1__CODE__UNAVAILABLE);
            cr_assert(r->status->retryable);
            refused++;
        }
        w_free(r);
    }
    cr_assert_eq(refused, 3, "the disk never filled up");

    /* Room again: it serves without a restart. */
    cr_assert_eq(unlink(filler), 0);
    bool served = false;
    for (int tries = 0; tries < 300 && !served; tries++) {
        full_payload(p, sizeof(p), i);
        Berth__V1__Response *r = w_submit(c, "full", p, NULL);
        served = r->status->code == BERTH__V1__CODE__OK;
        if (served)
            acked[i++] = true;
        else
            w_expect_code(r, BERTH__V1__CODE__UNAVAILABLE);
        w_free(r);
        if (!served)
            nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    cr_assert(served, "still refusing 15 s after the disk had room");

    /* Every acknowledged task is there, whole, after a kill -9 too. */
    bc_close(c);
    cr_assert_eq(d_signal(&D, SIGKILL), 128 + SIGKILL);
    d_restart(&D);
    c = d_client(&D);
    static bool seen[N];
    for (;;) {
        Berth__V1__Response *f = w_fetch(c, "w", "full", 200, 0, 0);
        w_expect_code(f, BERTH__V1__CODE__OK);
        size_t n = f->fetch->n_tasks;
        for (size_t k = 0; k < n; k++) {
            const Berth__V1__Task *t = f->fetch->tasks[k];
            int at = atoi((const char *)t->payload.data);
            cr_assert(at >= 0 && at < i, "a task of no submit: %d", at);
            full_payload(p, sizeof(p), at);
            cr_assert(t->payload.len == LEN - 1 && memcmp(t->payload.data, p, LEN - 1) == 0,
                      "task %d's payload is not what was submitted", at);
            seen[at] = true;
        }
        w_free(f);
        if (n == 0)
            break;
    }
    for (int k = 0; k < i; k++)
        cr_assert(!acked[k] || seen[k], "acknowledged task %d lost", k);
    bc_close(c);
    d_stop(&D);
}
