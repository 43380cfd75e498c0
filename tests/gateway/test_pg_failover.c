/* A primary that fails over under berthd (README.md, "High
 * availability"; pg/README.md, "Multi-host URIs"): a pg_auto_failover
 * formation (tools/pg-ha.sh: a monitor, a primary, two standbys, one of
 * them synchronous), two berthd replicas on its multi-host URI, producers
 * submitting and workers fetching and completing through both, each call
 * with a timeout. The primary is then made really gone (its supervisor,
 * postmaster and backends killed -9, then its address silent: connects
 * there wait rather than being refused, as for a host that vanished) and
 * the monitor promotes a standby.
 *
 * Meanwhile every answer is OK or UNAVAILABLE and comes within its
 * timeout, and neither replica exits. Each serves again by itself on the
 * promoted standby, listener included. Afterwards, on the new primary,
 * every submit answered OK is there or was completed, every completion
 * answered OK stays done (its task is not there again), and no submit
 * answered "nothing was kept" is there; those "in doubt" may be either
 * and are counted. The figures (time from the kill to the first OK,
 * submits and completions per second before and after, acknowledged / in
 * doubt / lost) go to stderr, for BENCHMARKS.md.
 *
 * The formation holds fixed paths and four ports: the suite has one test,
 * which removes what a killed run of it left behind before starting.
 * BERTH_TEST_FAILOVER_KEEP=1 leaves the formation up afterwards, for a
 * look at its logs (tools/pg-ha.sh -d DIR -p PORT down removes it). */
#define _GNU_SOURCE /* strnlen, nanosleep */
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "pg/pgconn.h"
#include "store/err.h"
#include "tests/support/daemon.h"
#include "tests/support/pgtmp.h"
#include "tests/support/timing.h"

#ifndef BERTH_PG_HA_SCRIPT
#error "BERTH_PG_HA_SCRIPT: the path of tools/pg-ha.sh (CMakeLists.txt)"
#endif

#define HA_DIR "/tmp/berth-failover-test"

enum { REPLICAS = 2 };
static daemon_proc D[REPLICAS];
static char URI[256];
static int HA_PORT; /* the monitor's; the nodes' the three after it */

/* ---- time ---- */

/* -1 for an instant that never came (UINT64_MAX). */
static double ms_between(uint64_t from_us, uint64_t to_us)
{
    return to_us == UINT64_MAX ? -1 : ((double)to_us - (double)from_us) / 1000.0;
}

/* ---- the formation ---- */

/* Runs tools/pg-ha.sh with cmd; its first line of output in out (may be
 * NULL). Returns its exit status. */
static int ha(const char *cmd, char *out, size_t len)
{
    char line[512];
    snprintf(line, sizeof line, "%s -d %s -p %d %s", BERTH_PG_HA_SCRIPT, HA_DIR, HA_PORT, cmd);
    FILE *p = popen(line, "r");
    cr_assert_not_null(p, "popen %s", line);
    if (out != NULL && len > 0) {
        out[0] = '\0';
        char buf[512];
        bool first = true;
        while (fgets(buf, sizeof buf, p) != NULL)
            if (first) {
                size_t n = strcspn(buf, "\n");
                n = n < len - 1 ? n : len - 1;
                memcpy(out, buf, n);
                out[n] = '\0';
                first = false;
            }
    } else {
        char buf[512];
        while (fgets(buf, sizeof buf, p) != NULL)
            ;
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static bool port_free(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (s >= 0)
        close(s);
    return ok;
}

/* Four ports in a row nobody listens on, the formation's. */
static int free_ports(void)
{
    for (int base = 6540; base < 7540; base += 10) {
        bool ok = true;
        for (int i = 0; i < 4 && ok; i++)
            ok = port_free(base + i);
        if (ok)
            return base;
    }
    cr_assert_fail("no four free ports in a row from 6540");
    return -1;
}

/* The killed primary's address, as a vanished host looks to a client: a
 * connect there neither succeeds nor is refused, it waits (a listener
 * whose queue is full drops SYNs), as for a machine powered off or cut
 * off. A dead postmaster on a live host would refuse at once, which
 * libpq's walk of a URI's hosts passes over by itself; a silent first
 * host it would wait on for as long as the caller lets it. */
enum { HOLE_HELD = 4 };
static int HOLE[1 + HOLE_HELD] = {-1, -1, -1, -1, -1};

static void hole_close(void)
{
    for (int i = 0; i < 1 + HOLE_HELD; i++)
        if (HOLE[i] >= 0) {
            close(HOLE[i]);
            HOLE[i] = -1;
        }
}

static bool hole_open(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 0) != 0) {
        if (l >= 0)
            close(l);
        return false;
    }
    HOLE[0] = l;
    for (int i = 1; i <= HOLE_HELD; i++) { /* the queue, filled and never accepted */
        HOLE[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (HOLE[i] >= 0)
            (void)connect(HOLE[i], (struct sockaddr *)&a, sizeof a);
    }
    return true;
}

static void teardown(void)
{
    hole_close();
    for (int i = 0; i < REPLICAS; i++)
        if (D[i].dir[0] != '\0')
            d_cleanup(&D[i]);
    const char *keep = getenv("BERTH_TEST_FAILOVER_KEEP");
    if (HA_PORT != 0 && (keep == NULL || strcmp(keep, "1") != 0))
        (void)ha("down", NULL, 0);
}

TestSuite(pg_failover, .fini = teardown, .timeout = 240);

static void alive(int i, const char *when)
{
    int status = 0;
    cr_assert_gt(D[i].pid, 0, "berthd %d is not running %s", i, when);
    pid_t w = waitpid(D[i].pid, &status, WNOHANG);
    if (w == D[i].pid) {
        D[i].pid = 0;
        cr_assert_fail("berthd %d exited %s: %s %d (stderr: %s)", i, when,
                       WIFEXITED(status) ? "status" : "signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                       D[i].stderr_path);
    }
    cr_assert_eq(w, 0, "waitpid: berthd %d", (int)D[i].pid);
}

/* ---- requests ---- */

/* A call's transport bound; how long after the kill both replicas must
 * serve again (the monitor's detection and promotion, seconds with
 * tools/pg-ha.sh's timeouts, and berthd's reconnect backoff, at most
 * ENGINE_REOPEN_BACKOFF_MAX_MS). */
enum { CALL_TIMEOUT_MS = 8000, SERVE_AGAIN_BOUND_MS = 45000 };

typedef enum { A_OK, A_DOUBT, A_NOT_KEPT, A_OTHER, A_TRANSPORT } answer_kind;

static answer_kind kind_of(int rv, const Berth__V1__Response *r)
{
    if (rv != BC_OK)
        return A_TRANSPORT;
    if (r->status == NULL)
        return A_OTHER;
    if (r->status->code == BERTH__V1__CODE__OK)
        return A_OK;
    if (r->status->code != BERTH__V1__CODE__UNAVAILABLE)
        return A_OTHER;
    return r->status->message != NULL && strstr(r->status->message, "may or may not") != NULL
               ? A_DOUBT
               : A_NOT_KEPT;
}

static const char *message_of(int rv, const Berth__V1__Response *r)
{
    if (rv != BC_OK)
        return bc_strerror(rv);
    return r->status == NULL ? "(no status)" : r->status->message ? r->status->message : "";
}

/* ---- the rates: OK answers per slot of time since the load began ---- */

enum { SLOT_MS = 100, SLOTS = 3000 };
static uint64_t T0_US;
static atomic_uint SUBMITTED[SLOTS], COMPLETED[SLOTS];

static void count_at(atomic_uint *v, uint64_t at_us, unsigned n)
{
    uint64_t s = (at_us - T0_US) / (SLOT_MS * 1000);
    if (s < SLOTS)
        atomic_fetch_add(&v[s], n);
}

/* Per second over [from, to). */
static double rate(atomic_uint *v, uint64_t from_us, uint64_t to_us)
{
    uint64_t a = (from_us - T0_US) / (SLOT_MS * 1000), b = (to_us - T0_US) / (SLOT_MS * 1000);
    unsigned long n = 0;
    for (uint64_t s = a; s < b && s < SLOTS; s++)
        n += atomic_load(&v[s]);
    return b > a ? (double)n * 1000.0 / (double)((b - a) * SLOT_MS) : 0;
}

/* ---- the load: producers, and workers fetching and completing ---- */

enum { SUBMITTERS = 4, WORKERS = 2, MAX_SUBMITS = 60000, TOPIC_MAX = 16, HELD_MAX = 64 };
#define LOAD_TOPIC "load"

typedef struct rec {
    uint8_t kind; /* answer_kind */
    bool kept;    /* its key is in the database afterwards */
    char id[33];  /* answered OK: the task's id */
    uint64_t start_us, end_us;
} rec;

typedef struct submitter {
    int k;
    bc *c;
    rec *r; /* MAX_SUBMITS */
    int n;
    uint64_t first_bad_us;              /* its first answer not OK */
    _Atomic uint64_t first_ok_after_us; /* the first OK to a submit begun after that */
    char doubt_msg[256], not_kept_msg[256], other_msg[256];
} submitter;

/* tools/pg-ha.sh kill-primary had returned; a worker's first OK counts
 * from its first answer not OK after it. */
static _Atomic uint64_t KILL_US = UINT64_MAX;

static atomic_bool STOP;  /* the submitters stop */
static atomic_bool DRAIN; /* they have: the workers take what is left, then stop */

static void *submit_loop(void *arg)
{
    submitter *s = arg;
    while (!atomic_load(&STOP) && s->n < MAX_SUBMITS) {
        char key[32];
        snprintf(key, sizeof key, "t%d-%d", s->k, s->n);
        rec *r = &s->r[s->n++];
        Berth__V1__SubmitRequest sr = BERTH__V1__SUBMIT_REQUEST__INIT;
        sr.topic = LOAD_TOPIC;
        sr.has_payload = 1;
        sr.payload.data = (uint8_t *)key;
        sr.payload.len = strlen(key);
        sr.idempotency_key = key;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
        req.submit = &sr;
        Berth__V1__Response *resp = NULL;
        r->start_us = mono_us();
        int rv = bc_call(s->c, &req, CALL_TIMEOUT_MS, &resp);
        r->end_us = mono_us();
        r->kind = (uint8_t)kind_of(rv, resp);
        if (r->kind == A_OK && (resp->submit == NULL || resp->submit->id == NULL ||
                                (resp->submit->has_duplicate && resp->submit->duplicate))) {
            r->kind = A_OTHER; /* a key used once is never a duplicate */
            snprintf(s->other_msg, sizeof s->other_msg, "%s: OK without a new task", key);
        }
        char *why = r->kind == A_DOUBT      ? s->doubt_msg
                    : r->kind == A_NOT_KEPT ? s->not_kept_msg
                    : r->kind != A_OK       ? s->other_msg
                                            : NULL;
        if (why != NULL && why[0] == '\0')
            snprintf(why, 256, "%s: code %d: %s", key,
                     rv == BC_OK && resp->status ? (int)resp->status->code : -1,
                     message_of(rv, resp));
        if (r->kind == A_OK) {
            snprintf(r->id, sizeof r->id, "%s", resp->submit->id);
            count_at(SUBMITTED, r->end_us, 1);
            if (s->first_bad_us != 0 && r->start_us >= s->first_bad_us &&
                atomic_load(&s->first_ok_after_us) == 0)
                atomic_store(&s->first_ok_after_us, r->end_us);
        } else if (s->first_bad_us == 0) {
            s->first_bad_us = r->end_us;
        }
        if (resp != NULL)
            berth__v1__response__free_unpacked(resp, NULL);
        if (r->kind != A_OK)
            sleep_ms(10); /* as a client retrying would */
    }
    return NULL;
}

typedef struct held {
    char id[33], token[33];
    bool doubt; /* a complete of it was answered "may or may not have been kept" */
} held;

typedef struct worker {
    bc *c;
    char wid[8];
    held h[HELD_MAX];
    char (*done)[33]; /* completed: answered OK, or NOT_FOUND after a complete in doubt */
    size_t n_done, cap_done;
    size_t fetched, calls, unavailable, doubt, doubt_tasks, gone_after_doubt;
    uint64_t first_bad_us;      /* its first answer not OK after KILL_US */
    uint64_t first_ok_after_us; /* the first OK to a fetch begun after that */
    uint64_t max_call_us;
    char bad[512];
} worker;

static void worker_done(worker *w, const char *id)
{
    if (w->n_done < w->cap_done) {
        size_t len = strnlen(id, 32);
        memcpy(w->done[w->n_done], id, len);
        w->done[w->n_done++][len] = '\0';
    }
}

static void *work_loop(void *arg)
{
    worker *w = arg;
    held *h = w->h;
    size_t nh = 0;
    uint64_t stop_at = 0;
    bool empty = false; /* the last fetch answered OK found nothing */
    for (;;) {
        /* Once the load stops: what is left fetched and completed, no
         * waiting, within 10 s. */
        bool stopping = atomic_load(&DRAIN);
        if (stopping && stop_at == 0)
            stop_at = mono_us() + 10000000;
        if (stopping && ((nh == 0 && empty) || mono_us() > stop_at))
            break;
        Berth__V1__CompleteRequest items[HELD_MAX], *ip[HELD_MAX];
        for (size_t i = 0; i < nh; i++) {
            berth__v1__complete_request__init(&items[i]);
            items[i].task_id = h[i].id;
            items[i].worker_id = w->wid;
            items[i].lock_token = h[i].token;
            ip[i] = &items[i];
        }
        char *topics[] = {LOAD_TOPIC};
        Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
        f.completes = ip;
        f.n_completes = nh;
        f.worker_id = w->wid;
        f.n_topics = 1;
        f.topics = topics;
        f.has_max_tasks = 1;
        f.max_tasks = TOPIC_MAX;
        f.has_lock_ms = 1;
        f.lock_ms = 120000;
        f.has_wait_ms = 1;
        f.wait_ms = stopping ? 0 : 200;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
        req.fetch = &f;
        Berth__V1__Response *r = NULL;
        uint64_t t0 = mono_us();
        int rv = bc_call(w->c, &req, (int)f.wait_ms + CALL_TIMEOUT_MS, &r);
        uint64_t t1 = mono_us();
        w->calls++;
        if (t1 - t0 > w->max_call_us)
            w->max_call_us = t1 - t0;
        answer_kind k = kind_of(rv, r);
        if (k == A_TRANSPORT || k == A_OTHER) {
            snprintf(w->bad, sizeof w->bad, "a fetch completing %zu: %s %d: %s", nh,
                     k == A_TRANSPORT ? "no answer" : "code",
                     rv == BC_OK && r->status ? (int)r->status->code : rv, message_of(rv, r));
            if (r != NULL)
                berth__v1__response__free_unpacked(r, NULL);
            break;
        }
        if (k != A_OK) {
            if (w->first_bad_us == 0 && t0 >= atomic_load(&KILL_US))
                w->first_bad_us = t1;
            w->unavailable++;
            if (k == A_DOUBT) {
                w->doubt++;
                for (size_t i = 0; i < nh; i++) {
                    w->doubt_tasks += !h[i].doubt;
                    h[i].doubt = true;
                }
            }
            berth__v1__response__free_unpacked(r, NULL);
            sleep_ms(10);
            continue;
        }
        if (w->first_bad_us != 0 && t0 >= w->first_bad_us && w->first_ok_after_us == 0)
            w->first_ok_after_us = t1;
        if (r->fetch == NULL || r->fetch->n_complete_statuses != nh) {
            snprintf(w->bad, sizeof w->bad, "a fetch completing %zu answered %zu statuses", nh,
                     r->fetch ? r->fetch->n_complete_statuses : 0);
            berth__v1__response__free_unpacked(r, NULL);
            break;
        }
        size_t keep = 0;
        unsigned completed = 0;
        for (size_t i = 0; i < nh; i++) {
            const Berth__V1__Status *st = r->fetch->complete_statuses[i];
            if (st->code == BERTH__V1__CODE__OK) {
                worker_done(w, h[i].id);
                completed++;
            } else if (st->code == BERTH__V1__CODE__NOT_FOUND && h[i].doubt) {
                worker_done(w, h[i].id); /* the complete in doubt was kept */
                w->gone_after_doubt++;
            } else if (st->code == BERTH__V1__CODE__UNAVAILABLE) {
                h[keep] = h[i];
                if (st->message != NULL && strstr(st->message, "may or may not") &&
                    !h[keep].doubt) {
                    h[keep].doubt = true;
                    w->doubt_tasks++;
                }
                keep++;
            } else {
                snprintf(w->bad, sizeof w->bad, "completing %s%s: code %d: %s", h[i].id,
                         h[i].doubt ? " (once in doubt)" : "", (int)st->code,
                         st->message ? st->message : "");
                break;
            }
        }
        count_at(COMPLETED, t1, completed);
        if (w->bad[0] != '\0') {
            berth__v1__response__free_unpacked(r, NULL);
            break;
        }
        nh = keep;
        empty = r->fetch->n_tasks == 0;
        if (nh + r->fetch->n_tasks > HELD_MAX)
            snprintf(w->bad, sizeof w->bad, "%zu tasks held, %zu more fetched", nh,
                     r->fetch->n_tasks);
        for (size_t i = 0; i < r->fetch->n_tasks && nh < HELD_MAX; i++) {
            snprintf(h[nh].id, 33, "%s", r->fetch->tasks[i]->id);
            snprintf(h[nh].token, 33, "%s", r->fetch->tasks[i]->lock_token);
            h[nh++].doubt = false;
            w->fetched++;
        }
        berth__v1__response__free_unpacked(r, NULL);
        if (w->bad[0] != '\0')
            break;
    }
    if (w->bad[0] == '\0' && (nh != 0 || !empty))
        snprintf(w->bad, sizeof w->bad,
                 "%zu tasks still held 10 s after the load stopped (the last fetch found %s)", nh,
                 empty ? "none" : "more");
    return NULL;
}

/* ---- checking against the database ---- */

static int cmp_id(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

static char (*ids_of(PGconn *c, const char *sql, size_t *n))[33]
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
    *n = (size_t)PQntuples(r);
    char(*v)[33] = calloc(*n + 1, 33);
    cr_assert_not_null(v);
    for (size_t i = 0; i < *n; i++)
        snprintf(v[i], 33, "%s", PQgetvalue(r, (int)i, 0));
    PQclear(r);
    qsort(v, *n, 33, cmp_id);
    return v;
}

static bool has_id(char (*v)[33], size_t n, const char *id)
{
    return bsearch(id, v, n, 33, cmp_id) != NULL;
}

/* Both replicas' connections (a lane and a listener each) are on the
 * promoted primary. */
static bool on_new_primary(long *lanes, long *listeners)
{
    char err[512];
    PGconn *c = NULL;
    *lanes = *listeners = -1;
    if (pgconn_open(URI, "berth-tests", 2000, &c, err, sizeof err) != BERTH_OK)
        return false; /* no primary: the asserts on serving say more */
    *lanes = pgtmp_one_long(c, "SELECT count(*) FROM pg_stat_activity WHERE "
                               "application_name = 'berthd' AND datname = 'berth'");
    *listeners = pgtmp_one_long(c, "SELECT count(*) FROM pg_stat_activity WHERE "
                                   "application_name = 'berthd listener' AND datname = 'berth'");
    PQfinish(c);
    return *lanes == REPLICAS && *listeners == REPLICAS;
}

/* ---- the drill ---- */

Test(pg_failover, a_primary_killed_under_load_fails_over_and_loses_nothing_acknowledged)
{
    static submitter s[SUBMITTERS];
    static worker w[WORKERS];
    pthread_t ts[SUBMITTERS], tw[WORKERS];
    char killed[128] = "", promoted[128] = "";
    uint64_t test_us = mono_us();

    /* What a killed run left, then the formation. */
    HA_PORT = free_ports();
    (void)ha("down", NULL, 0);
    int st = ha("up", URI, sizeof URI);
    cr_assert_eq(st, 0, "tools/pg-ha.sh up failed (%d): see " HA_DIR "/*.log", st);
    cr_assert(strncmp(URI, "postgresql://", 13) == 0, "tools/pg-ha.sh up printed \"%s\"", URI);
    uint64_t formed_us = mono_us();
    PGconn *c = pgtmp_connect(URI);
    cr_assert_eq(pgtmp_one_long(c, "SELECT (current_setting('fsync') = 'on' AND "
                                   "current_setting('synchronous_commit') = 'on' AND "
                                   "current_setting('synchronous_standby_names') <> '')::int"),
                 1,
                 "the primary is not durable with a synchronous standby: the drill proves "
                 "nothing");
    PQfinish(c);
    for (int i = 0; i < REPLICAS; i++)
        d_start_store(&D[i], URI, NULL);

    /* The load, spread over both replicas. */
    atomic_store(&STOP, false);
    atomic_store(&DRAIN, false);
    T0_US = mono_us();
    for (int i = 0; i < SUBMITTERS; i++) {
        memset(&s[i], 0, sizeof s[i]);
        s[i].k = i;
        s[i].c = d_client(&D[i % REPLICAS]);
        s[i].r = calloc(MAX_SUBMITS, sizeof(rec));
        cr_assert_not_null(s[i].r);
        cr_assert_eq(pthread_create(&ts[i], NULL, submit_loop, &s[i]), 0);
    }
    for (int i = 0; i < WORKERS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        snprintf(w[i].wid, sizeof w[i].wid, "w%d", i);
        w[i].c = d_client(&D[i % REPLICAS]);
        w[i].cap_done = (size_t)SUBMITTERS * MAX_SUBMITS;
        w[i].done = calloc(w[i].cap_done, 33);
        cr_assert_not_null(w[i].done);
        cr_assert_eq(pthread_create(&tw[i], NULL, work_loop, &w[i]), 0);
    }

    sleep_ms(4000); /* served before */
    uint64_t before_us = mono_us();
    st = ha("kill-primary", killed, sizeof killed);
    uint64_t kill_us = mono_us();
    atomic_store(&KILL_US, kill_us);
    cr_assert_eq(st, 0, "tools/pg-ha.sh kill-primary failed (%d)", st);
    const char *sp = strchr(killed, ' ');
    int killed_port = sp != NULL ? atoi(sp + 1) : 0;
    cr_assert_gt(killed_port, 0, "kill-primary printed \"%s\"", killed);
    bool silent = false; /* the port is free once the postmaster is gone */
    for (int i = 0; i < 200 && !(silent = hole_open(killed_port)); i++)
        sleep_ms(10);
    cr_assert(silent, "the killed primary's port %d stayed taken", killed_port);
    st = ha("wait-primary", promoted, sizeof promoted);
    uint64_t promoted_us = mono_us();
    cr_assert_eq(st, 0, "no standby was promoted (%d): see " HA_DIR "/*.log", st);
    for (int i = 0; i < REPLICAS; i++)
        alive(i, "while the primary failed over");

    /* Each replica serves again by itself: a submit through it begun
     * after one of its submitters was answered UNAVAILABLE (berthd had
     * seen the primary gone) answered OK. */
    uint64_t first_ok_us[REPLICAS] = {UINT64_MAX, UINT64_MAX};
    for (;;) {
        bool all = true;
        for (int i = 0; i < SUBMITTERS; i++) {
            uint64_t t = atomic_load(&s[i].first_ok_after_us);
            if (t != 0 && t < first_ok_us[i % REPLICAS])
                first_ok_us[i % REPLICAS] = t;
        }
        for (int i = 0; i < REPLICAS; i++)
            all &= first_ok_us[i] != UINT64_MAX;
        if (all || mono_us() > kill_us + SERVE_AGAIN_BOUND_MS * 1000ull)
            break;
        sleep_ms(20);
    }
    uint64_t served_us = first_ok_us[0] > first_ok_us[1] ? first_ok_us[0] : first_ok_us[1];
    if (served_us != UINT64_MAX)
        sleep_ms(4000); /* and goes on serving */
    uint64_t after_end_us = mono_us();
    atomic_store(&STOP, true);
    for (int i = 0; i < SUBMITTERS; i++)
        pthread_join(ts[i], NULL);
    atomic_store(&DRAIN, true);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(tw[i], NULL);
    for (int i = 0; i < SUBMITTERS; i++)
        bc_close(s[i].c);
    for (int i = 0; i < WORKERS; i++)
        bc_close(w[i].c);
    for (int i = 0; i < REPLICAS; i++)
        alive(i, "after the load");

    /* Connections: both replicas' lanes and listeners on the new primary. */
    long lanes = 0, listeners = 0;
    uint64_t conn_deadline = mono_us() + 10000000;
    while (!on_new_primary(&lanes, &listeners) && mono_us() < conn_deadline)
        sleep_ms(200);

    /* The answers. */
    int count[5] = {0}, bad_before = 0, before = 0;
    uint64_t max_us = 0, first_bad_us = UINT64_MAX, last_bad_us = 0;
    for (int i = 0; i < SUBMITTERS; i++)
        for (int j = 0; j < s[i].n; j++) {
            const rec *r = &s[i].r[j];
            count[r->kind]++;
            before += r->end_us < before_us;
            if (r->end_us - r->start_us > max_us)
                max_us = r->end_us - r->start_us;
            if (r->kind != A_OK) {
                first_bad_us = r->end_us < first_bad_us ? r->end_us : first_bad_us;
                last_bad_us = r->end_us > last_bad_us ? r->end_us : last_bad_us;
                bad_before += r->end_us < before_us;
            }
        }
    uint64_t last_bad_at[REPLICAS] = {0};
    for (int i = 0; i < SUBMITTERS; i++)
        for (int j = 0; j < s[i].n; j++)
            if (s[i].r[j].kind != A_OK && s[i].r[j].end_us > last_bad_at[i % REPLICAS])
                last_bad_at[i % REPLICAS] = s[i].r[j].end_us;
    uint64_t first_ok_us_any = first_ok_us[0] < first_ok_us[1] ? first_ok_us[0] : first_ok_us[1];
    size_t w_calls = 0, w_unavailable = 0, w_doubt = 0, w_doubt_tasks = 0, w_fetched = 0,
           w_done = 0, w_gone = 0;
    uint64_t w_first_ok_us = UINT64_MAX, w_max_us = 0;
    for (int i = 0; i < WORKERS; i++) {
        w_calls += w[i].calls;
        w_unavailable += w[i].unavailable;
        w_doubt += w[i].doubt;
        w_doubt_tasks += w[i].doubt_tasks;
        w_fetched += w[i].fetched;
        w_done += w[i].n_done;
        w_gone += w[i].gone_after_doubt;
        if (w[i].first_ok_after_us != 0 && w[i].first_ok_after_us < w_first_ok_us)
            w_first_ok_us = w[i].first_ok_after_us;
        w_max_us = w[i].max_call_us > w_max_us ? w[i].max_call_us : w_max_us;
    }
    int unavailable = count[A_DOUBT] + count[A_NOT_KEPT];
    fprintf(stderr,
            "pg_failover: formation up in %.1f s; killed %s; promoted %s %.0f ms after the kill; "
            "first OK after the outage at %+.0f ms (-1: never; replica 0 %+.0f, replica 1 %+.0f; a "
            "worker's "
            "fetch %+.0f); UNAVAILABLE from %+.0f to %+.0f ms\n",
            ms_between(test_us, formed_us) / 1000.0, killed, promoted,
            ms_between(kill_us, promoted_us), ms_between(kill_us, first_ok_us_any),
            ms_between(kill_us, first_ok_us[0]), ms_between(kill_us, first_ok_us[1]),
            ms_between(kill_us, w_first_ok_us), ms_between(kill_us, first_bad_us),
            ms_between(kill_us, last_bad_us));
    fprintf(stderr,
            "pg_failover: both replicas served again %.0f ms after the promoted standby was "
            "seen taking writes; their last UNAVAILABLE at %+.0f and %+.0f ms\n",
            ms_between(promoted_us, served_us), ms_between(kill_us, last_bad_at[0]),
            ms_between(kill_us, last_bad_at[1]));
    for (int i = 0; i < REPLICAS; i++) { /* what berthd said of it */
        FILE *f = fopen(D[i].stderr_path, "r");
        char line[512];
        while (f != NULL && fgets(line, sizeof line, f) != NULL)
            if (strstr(line, "database") != NULL)
                fprintf(stderr, "pg_failover:   berthd %d: %s", i, line);
        if (f != NULL)
            fclose(f);
    }
    fprintf(stderr,
            "pg_failover: before the kill %.0f submits/s and %.0f completions/s; after it "
            "(from 1 s past the first OK) %.0f and %.0f\n",
            rate(SUBMITTED, before_us - 3000000, before_us),
            rate(COMPLETED, before_us - 3000000, before_us),
            served_us != UINT64_MAX ? rate(SUBMITTED, served_us + 1000000, after_end_us) : 0,
            served_us != UINT64_MAX ? rate(COMPLETED, served_us + 1000000, after_end_us) : 0);
    fprintf(stderr,
            "pg_failover: %d submits: %d OK, %d UNAVAILABLE (%d in doubt, %d not kept), %d "
            "other, %d without an answer; slowest %.1f ms\n",
            count[0] + count[1] + count[2] + count[3] + count[4], count[A_OK], unavailable,
            count[A_DOUBT], count[A_NOT_KEPT], count[A_OTHER], count[A_TRANSPORT], max_us / 1000.0);
    for (int i = 0; i < SUBMITTERS; i++) {
        if (s[i].doubt_msg[0] != '\0')
            fprintf(stderr, "pg_failover:   in doubt: %s\n", s[i].doubt_msg);
        if (s[i].not_kept_msg[0] != '\0')
            fprintf(stderr, "pg_failover:   not kept: %s\n", s[i].not_kept_msg);
    }
    fprintf(stderr,
            "pg_failover: the workers: %zu fetches, %zu UNAVAILABLE (%zu in doubt, holding %zu "
            "completions), %zu tasks fetched, %zu completed (%zu found gone after a complete in "
            "doubt); slowest call %.1f ms; on the new primary %ld lanes, %ld listeners\n",
            w_calls, w_unavailable, w_doubt, w_doubt_tasks, w_fetched, w_done, w_gone,
            w_max_us / 1000.0, lanes, listeners);
    for (int i = 0; i < REPLICAS; i++)
        cr_assert_neq(first_ok_us[i], UINT64_MAX,
                      "replica %d did not serve again within %d s of the kill (stderr: %s)", i,
                      SERVE_AGAIN_BOUND_MS / 1000, D[i].stderr_path);
    for (int i = 0; i < SUBMITTERS; i++)
        cr_assert_str_eq(s[i].other_msg, "",
                         "submitter %d: an answer neither OK nor UNAVAILABLE: %s", i,
                         s[i].other_msg);
    cr_assert_eq(count[A_OTHER] + count[A_TRANSPORT], 0);
    for (int i = 0; i < WORKERS; i++)
        cr_assert_str_eq(w[i].bad, "", "worker %d: %s", i, w[i].bad);
    cr_assert_gt(before, 0, "nothing was served before the kill");
    cr_assert_eq(bad_before, 0, "UNAVAILABLE before the kill");
    cr_assert_gt(unavailable + (int)w_unavailable, 0, "berthd never noticed the kill");
    cr_assert(lanes == REPLICAS && listeners == REPLICAS,
              "on the new primary %ld berthd lanes and %ld listeners, %d of each expected", lanes,
              listeners, REPLICAS);

    /* The database, on the new primary: every key answered OK names its
     * task, which is there or was completed; no task completed with an
     * OK is there again; no key answered "nothing was kept" is there. */
    c = pgtmp_connect(URI);
    cr_assert_eq(pgtmp_one_long(c, "SELECT pg_is_in_recovery()::int"), 0);
    PGresult *keys = PQexec(c, "SELECT key, replace(id::text, '-', '') FROM berth.submit_keys "
                               "WHERE kind = 's' AND topic = '" LOAD_TOPIC "'");
    cr_assert_eq(PQresultStatus(keys), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    int stray_keys = 0;
    for (int row = 0; row < PQntuples(keys); row++) {
        int k = -1, j = -1;
        if (sscanf(PQgetvalue(keys, row, 0), "t%d-%d", &k, &j) != 2 || k < 0 || k >= SUBMITTERS ||
            j < 0 || j >= s[k].n) {
            stray_keys++;
            continue;
        }
        rec *r = &s[k].r[j];
        r->kept = true;
        if (r->kind == A_OK)
            cr_assert_str_eq(PQgetvalue(keys, row, 1), r->id,
                             "key %s: answered task %s, the database holds %s",
                             PQgetvalue(keys, row, 0), r->id, PQgetvalue(keys, row, 1));
    }
    PQclear(keys);
    size_t n_tasks;
    char(*tasks)[33] = ids_of(
        c, "SELECT replace(id::text, '-', '') FROM berth.tasks WHERE topic = '" LOAD_TOPIC "'",
        &n_tasks);
    long unclaimed = pgtmp_one_long(c, "SELECT count(*) FROM berth.tasks WHERE topic = '" LOAD_TOPIC
                                       "' AND lock_expires_at IS NULL");
    PQfinish(c);
    size_t n_done = 0;
    char(*done)[33] = calloc(w_done + 1, 33);
    cr_assert_not_null(done);
    for (int i = 0; i < WORKERS; i++) {
        memcpy(done[n_done], w[i].done, w[i].n_done * 33);
        n_done += w[i].n_done;
    }
    qsort(done, n_done, 33, cmp_id);
    int lost = 0, ghosts = 0, doubt_kept = 0, undone = 0;
    char lost_ex[128] = "", ghost_ex[128] = "", undone_ex[40] = "";
    for (int i = 0; i < SUBMITTERS; i++)
        for (int j = 0; j < s[i].n; j++) {
            const rec *r = &s[i].r[j];
            if (r->kind == A_OK &&
                (!r->kept || (!has_id(tasks, n_tasks, r->id) && !has_id(done, n_done, r->id)))) {
                if (lost++ == 0)
                    snprintf(lost_ex, sizeof lost_ex, "t%d-%d (task %s, key %s)", i, j, r->id,
                             r->kept ? "kept" : "gone");
            } else if (r->kind == A_NOT_KEPT && r->kept) {
                if (ghosts++ == 0)
                    snprintf(ghost_ex, sizeof ghost_ex, "t%d-%d", i, j);
            }
            doubt_kept += r->kind == A_DOUBT && r->kept;
        }
    for (size_t i = 0; i < n_done; i++)
        if (has_id(tasks, n_tasks, done[i]) && undone++ == 0)
            snprintf(undone_ex, sizeof undone_ex, "%s", done[i]);
    fprintf(stderr,
            "pg_failover: acknowledged %d submits and %zu completions; in doubt %d submits (%d "
            "kept) and %zu completions; lost %d submits and %d completions; %d not kept but "
            "there; %zu tasks left (%ld never fetched); the test took %.1f s\n",
            count[A_OK], n_done - w_gone, count[A_DOUBT], doubt_kept, w_doubt_tasks, lost, undone,
            ghosts, n_tasks, unclaimed, ms_between(test_us, mono_us()) / 1000.0);
    cr_assert_eq(lost, 0, "%d submits answered OK are not in the database, e.g. %s", lost, lost_ex);
    cr_assert_eq(undone, 0, "%d tasks whose completion was answered OK are back, e.g. %s", undone,
                 undone_ex);
    cr_assert_eq(ghosts, 0, "%d submits answered \"nothing was kept\" were kept, e.g. %s", ghosts,
                 ghost_ex);
    cr_assert_eq(stray_keys, 0, "%d keys nobody submitted", stray_keys);
    cr_assert_eq(unclaimed, 0, "%ld tasks the workers' last fetches did not find", unclaimed);
    free(tasks);
    free(done);
    for (int i = 0; i < WORKERS; i++)
        free(w[i].done);
    for (int i = 0; i < SUBMITTERS; i++)
        free(s[i].r);
    for (int i = 0; i < REPLICAS; i++)
        d_stop(&D[i]);
}
