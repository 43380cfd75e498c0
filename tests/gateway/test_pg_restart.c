/* PostgreSQL restarted under berthd (pg/README.md §4 "Halt and
 * reconnect"): a real berthd on --store, a throwaway cluster restarted
 * with pg_ctl restart -m fast and -m immediate while clients submit and a
 * worker fetches and completes. Meanwhile every answer is OK or
 * UNAVAILABLE and comes within its timeout; berthd serves again by itself
 * within seconds of PostgreSQL being back; every submit answered OK is in
 * the database afterwards, every one answered "nothing was kept" is not
 * (those that "may or may not have been kept" may be either); a long poll
 * waiting across the restart ends by its wait (empty, UNAVAILABLE, or with
 * a task submitted once the database is back); berthd runs throughout and
 * stops with 0 on SIGTERM.
 *
 * The cluster runs durable (PGTMP_DURABLE: fsync and synchronous_commit
 * on), so that a crash of PostgreSQL (-m immediate) keeps what it
 * committed. A restart breaks every connection to the cluster: each test
 * holds it alone (pgtmp_exclusive) whatever --jobs says. */
#define _GNU_SOURCE /* strnlen, nanosleep */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"
#include "tests/support/pgtmp.h"
#define PGTMP_DURABLE
#include "tests/support/pgtmp_hooks.h"
#include "tests/support/timing.h"

static daemon_proc D;
static char URI[256];

static bool PG_DOWN; /* a test stopped the cluster: started again whatever happens */

static void teardown(void)
{
    if (D.dir[0] != '\0')
        d_cleanup(&D);
    if (PG_DOWN)
        pgtmp_start();
    PG_DOWN = false;
}

TestSuite(pg_restart, .fini = teardown, .timeout = 90);

/* berthd is still the process the test started, then stops with 0. */
static void alive(const char *when);
#define PTest(name)                                                                                \
    static void pg_restart_##name##_body(void);                                                    \
    Test(pg_restart, name)                                                                         \
    {                                                                                              \
        pg_restart_##name##_body();                                                                \
        alive("at the end of the test");                                                           \
        d_stop(&D);                                                                                \
    }                                                                                              \
    static void pg_restart_##name##_body(void)

/* ---- time ---- */

static double ms_between(uint64_t from_us, uint64_t to_us)
{
    return ((double)to_us - (double)from_us) / 1000.0;
}

/* ---- the cluster and berthd ---- */

static void alive(const char *when)
{
    int status = 0;
    cr_assert_gt(D.pid, 0, "berthd is not running %s", when);
    pid_t w = waitpid(D.pid, &status, WNOHANG);
    if (w == D.pid) {
        D.pid = 0;
        cr_assert_fail("berthd exited %s: %s %d (stderr: %s)", when,
                       WIFEXITED(status) ? "status" : "signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), D.stderr_path);
    }
    cr_assert_eq(w, 0, "waitpid: berthd %d", (int)D.pid);
}

/* The cluster for this test alone, a fresh database on it, durable, and
 * berthd on that database. */
static void setup(const char *name)
{
    char db[64];
    pgtmp_exclusive();
    snprintf(db, sizeof db, "pgr_%s", name);
    pgtmp_createdb(db, URI, sizeof URI);
    PGconn *c = pgtmp_connect(URI);
    cr_assert_eq(pgtmp_one_long(c, "SELECT (current_setting('fsync') = 'on' AND "
                                   "current_setting('synchronous_commit') = 'on')::int"),
                 1, "the cluster is not durable: what a crash loses proves nothing");
    PQfinish(c);
    d_start_store(&D, URI, NULL);
}

/* ---- requests ---- */

/* A call's transport bound; how late past its wait a long poll may end;
 * how long after the database is back berthd may take to serve (its
 * reconnect backoff's ceiling, ENGINE_REOPEN_BACKOFF_MAX_MS, and a
 * connection's setup). */
enum { CALL_TIMEOUT_MS = 8000, MARGIN_MS = 2000, ENGINE_BACKOFF_BOUND_MS = 6500 };

typedef enum { A_OK, A_DOUBT, A_NOT_KEPT, A_OTHER, A_TRANSPORT } answer_kind;

/* What an answer says: OK, UNAVAILABLE in doubt ("may or may not have been
 * kept") or not kept, another code, or no answer at all. */
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

static Berth__V1__Response *submit(bc *c, const char *topic, const char *payload, const char *key,
                                   int *rv)
{
    Berth__V1__SubmitRequest s = BERTH__V1__SUBMIT_REQUEST__INIT;
    s.topic = (char *)topic;
    s.has_payload = 1;
    s.payload.data = (uint8_t *)payload;
    s.payload.len = strlen(payload);
    s.idempotency_key = (char *)key;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_SUBMIT;
    req.submit = &s;
    Berth__V1__Response *r = NULL;
    *rv = bc_call(c, &req, CALL_TIMEOUT_MS, &r);
    return r;
}

/* ---- the load: submitters, and a worker fetching and completing ---- */

enum { SUBMITTERS = 3, MAX_SUBMITS = 40000, TOPIC_MAX = 16, HELD_MAX = 64 };
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
    atomic_uint_fast64_t last_ok_start_us;
    char doubt_msg[256], not_kept_msg[256], other_msg[256];
} submitter;

static atomic_bool STOP;  /* the submitters stop */
static atomic_bool DRAIN; /* they have: the worker takes what is left, then stops */

static void *submit_loop(void *arg)
{
    submitter *s = arg;
    while (!atomic_load(&STOP) && s->n < MAX_SUBMITS) {
        char key[32];
        snprintf(key, sizeof key, "t%d-%d", s->k, s->n);
        rec *r = &s->r[s->n++];
        int rv;
        r->start_us = mono_us();
        Berth__V1__Response *resp = submit(s->c, LOAD_TOPIC, key, key, &rv);
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
            atomic_store(&s->last_ok_start_us, r->start_us);
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
    char (*done)[33]; /* completed: answered OK, or NOT_FOUND after a complete in doubt */
    size_t n_done, cap_done;
    size_t fetched, calls, unavailable, doubt, gone_after_doubt;
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
    static held h[HELD_MAX];
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
            items[i].worker_id = "w";
            items[i].lock_token = h[i].token;
            ip[i] = &items[i];
        }
        char *topics[] = {LOAD_TOPIC};
        Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
        f.completes = ip;
        f.n_completes = nh;
        f.worker_id = "w";
        f.n_topics = 1;
        f.topics = topics;
        f.has_max_tasks = 1;
        f.max_tasks = TOPIC_MAX;
        f.has_lock_ms = 1;
        f.lock_ms = 60000;
        f.has_wait_ms = 1;
        f.wait_ms = stopping ? 0 : 200;
        Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
        req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
        req.fetch = &f;
        Berth__V1__Response *r = NULL;
        uint64_t t0 = mono_us();
        int rv = bc_call(w->c, &req, (int)f.wait_ms + CALL_TIMEOUT_MS, &r);
        uint64_t took = mono_us() - t0;
        w->calls++;
        if (took > w->max_call_us)
            w->max_call_us = took;
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
            w->unavailable++;
            if (k == A_DOUBT) {
                w->doubt++;
                for (size_t i = 0; i < nh; i++)
                    h[i].doubt = true;
            }
            berth__v1__response__free_unpacked(r, NULL);
            sleep_ms(10);
            continue;
        }
        if (r->fetch == NULL || r->fetch->n_complete_statuses != nh) {
            snprintf(w->bad, sizeof w->bad, "a fetch completing %zu answered %zu statuses", nh,
                     r->fetch ? r->fetch->n_complete_statuses : 0);
            berth__v1__response__free_unpacked(r, NULL);
            break;
        }
        size_t keep = 0;
        for (size_t i = 0; i < nh; i++) {
            const Berth__V1__Status *st = r->fetch->complete_statuses[i];
            if (st->code == BERTH__V1__CODE__OK) {
                worker_done(w, h[i].id);
            } else if (st->code == BERTH__V1__CODE__NOT_FOUND && h[i].doubt) {
                worker_done(w, h[i].id); /* the complete in doubt was kept */
                w->gone_after_doubt++;
            } else if (st->code == BERTH__V1__CODE__UNAVAILABLE) {
                h[keep] = h[i];
                h[keep++].doubt |= st->message != NULL && strstr(st->message, "may or may not");
            } else {
                snprintf(w->bad, sizeof w->bad, "completing %s%s: code %d: %s", h[i].id,
                         h[i].doubt ? " (once in doubt)" : "", (int)st->code,
                         st->message ? st->message : "");
                break;
            }
        }
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

/* Column 0 of every row of sql, sorted, in a calloc'd array of 33-byte
 * ids (*n of them). */
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

/* ---- one restart under load ---- */

static void under_load(const char *mode)
{
    static submitter s[SUBMITTERS];
    static worker w;
    pthread_t ts[SUBMITTERS], tw;
    atomic_store(&STOP, false);
    atomic_store(&DRAIN, false);
    for (int i = 0; i < SUBMITTERS; i++) {
        memset(&s[i], 0, sizeof s[i]);
        s[i].k = i;
        s[i].c = d_client(&D);
        s[i].r = calloc(MAX_SUBMITS, sizeof(rec));
        cr_assert_not_null(s[i].r);
        cr_assert_eq(pthread_create(&ts[i], NULL, submit_loop, &s[i]), 0);
    }
    memset(&w, 0, sizeof w);
    w.c = d_client(&D);
    w.cap_done = (size_t)SUBMITTERS * MAX_SUBMITS;
    w.done = calloc(w.cap_done, 33);
    cr_assert_not_null(w.done);
    cr_assert_eq(pthread_create(&tw, NULL, work_loop, &w), 0);

    sleep_ms(1000); /* served before */
    uint64_t restart_us = mono_us();
    long pg_ctl_ms = pgtmp_restart(mode);
    uint64_t back_us = mono_us();
    alive("while PostgreSQL restarted");
    /* berthd serves again by itself: a submit begun after PostgreSQL was
     * back answered OK. */
    bool served = false;
    while (!served && mono_us() < back_us + 10000000) {
        for (int i = 0; i < SUBMITTERS; i++)
            served |= atomic_load(&s[i].last_ok_start_us) >= back_us;
        if (!served)
            sleep_ms(5);
    }
    if (served)
        sleep_ms(1000); /* and goes on serving */
    atomic_store(&STOP, true);
    for (int i = 0; i < SUBMITTERS; i++)
        pthread_join(ts[i], NULL);
    atomic_store(&DRAIN, true);
    pthread_join(tw, NULL);
    for (int i = 0; i < SUBMITTERS; i++)
        bc_close(s[i].c);
    bc_close(w.c);
    alive("after the load");

    /* The answers. */
    int count[5] = {0}, slow = 0;
    uint64_t max_unavailable_us = 0;
    uint64_t max_us = 0, first_bad_us = UINT64_MAX, last_bad_us = 0, first_ok_after_us = UINT64_MAX;
    int bad_before = 0, before = 0;
    for (int i = 0; i < SUBMITTERS; i++)
        for (int j = 0; j < s[i].n; j++) {
            const rec *r = &s[i].r[j];
            count[r->kind]++;
            before += r->end_us < restart_us;
            uint64_t took = r->end_us - r->start_us;
            if (took > max_us)
                max_us = took;
            slow += took > 100000;
            if (r->kind != A_OK) {
                if (took > max_unavailable_us)
                    max_unavailable_us = took;
                if (r->end_us < first_bad_us)
                    first_bad_us = r->end_us;
                if (r->end_us > last_bad_us)
                    last_bad_us = r->end_us;
                bad_before += r->end_us < restart_us;
            }
        }
    for (int i = 0; i < SUBMITTERS; i++)
        for (int j = 0; j < s[i].n; j++)
            if (s[i].r[j].kind == A_OK && s[i].r[j].start_us > last_bad_us &&
                s[i].r[j].end_us < first_ok_after_us)
                first_ok_after_us = s[i].r[j].end_us;
    int unavailable = count[A_DOUBT] + count[A_NOT_KEPT];
    fprintf(stderr,
            "pg_restart -m %s: pg_ctl restart took %ld ms; %d submits (%d before it): %d OK, %d "
            "UNAVAILABLE (%d in doubt, %d not kept), %d other, %d without an answer; slowest "
            "%.1f ms (UNAVAILABLE: %.1f ms), %d over 100 ms\n",
            mode, pg_ctl_ms, count[0] + count[1] + count[2] + count[3] + count[4], before,
            count[A_OK], unavailable, count[A_DOUBT], count[A_NOT_KEPT], count[A_OTHER],
            count[A_TRANSPORT], max_us / 1000.0, max_unavailable_us / 1000.0, slow);
    if (unavailable > 0)
        fprintf(stderr,
                "pg_restart -m %s: UNAVAILABLE from %+.0f to %+.0f ms of pg_ctl's start (it "
                "returned at %+.0f ms); OK again at %+.0f ms, %.0f ms after PostgreSQL was back\n",
                mode, ms_between(restart_us, first_bad_us), ms_between(restart_us, last_bad_us),
                ms_between(restart_us, back_us), ms_between(restart_us, first_ok_after_us),
                ms_between(back_us, first_ok_after_us));
    for (int i = 0; i < SUBMITTERS; i++) {
        if (s[i].doubt_msg[0] != '\0')
            fprintf(stderr, "pg_restart -m %s:   in doubt: %s\n", mode, s[i].doubt_msg);
        if (s[i].not_kept_msg[0] != '\0')
            fprintf(stderr, "pg_restart -m %s:   not kept: %s\n", mode, s[i].not_kept_msg);
    }
    fprintf(stderr,
            "pg_restart -m %s: the worker: %zu fetches, %zu UNAVAILABLE (%zu in doubt), %zu "
            "tasks fetched, %zu completed (%zu found gone after a complete in doubt); slowest "
            "call %.1f ms\n",
            mode, w.calls, w.unavailable, w.doubt, w.fetched, w.n_done, w.gone_after_doubt,
            w.max_call_us / 1000.0);
    for (int i = 0; i < SUBMITTERS; i++)
        cr_assert_str_eq(s[i].other_msg, "",
                         "submitter %d: an answer neither OK nor UNAVAILABLE: %s", i,
                         s[i].other_msg);
    cr_assert_eq(count[A_OTHER] + count[A_TRANSPORT], 0);
    cr_assert_str_eq(w.bad, "", "the worker: %s", w.bad);
    cr_assert_gt(before, 0, "nothing was served before the restart");
    cr_assert_eq(bad_before, 0, "UNAVAILABLE before PostgreSQL was restarted");
    cr_assert_gt(unavailable + w.unavailable, 0, "berthd never noticed the restart");
    cr_assert(served,
              "berthd did not serve again within 10 s of PostgreSQL being back (stderr: %s)",
              D.stderr_path);
    cr_assert_lt(ms_between(back_us, last_bad_us), (double)ENGINE_BACKOFF_BOUND_MS,
                 "UNAVAILABLE still %.0f ms after PostgreSQL was back",
                 ms_between(back_us, last_bad_us));
    cr_assert_neq(first_ok_after_us, UINT64_MAX, "no OK after the last UNAVAILABLE");
    cr_assert_lt(ms_between(back_us, first_ok_after_us), (double)ENGINE_BACKOFF_BOUND_MS,
                 "OK again only %.0f ms after PostgreSQL was back",
                 ms_between(back_us, first_ok_after_us));

    /* The database: every key answered OK names its task, which is there
     * or was completed; no key answered "nothing was kept" is there. */
    PGconn *c = pgtmp_connect(URI);
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
    size_t n_tasks, n_key_ids;
    char(*tasks)[33] = ids_of(
        c, "SELECT replace(id::text, '-', '') FROM berth.tasks WHERE topic = '" LOAD_TOPIC "'",
        &n_tasks);
    char(*key_ids)[33] =
        ids_of(c,
               "SELECT replace(id::text, '-', '') FROM berth.submit_keys WHERE kind = 's' AND "
               "topic = '" LOAD_TOPIC "'",
               &n_key_ids);
    long unclaimed = pgtmp_one_long(c, "SELECT count(*) FROM berth.tasks WHERE topic = '" LOAD_TOPIC
                                       "' AND lock_expires_at IS NULL");
    PQfinish(c);
    qsort(w.done, w.n_done, 33, cmp_id);
    int lost = 0, ghosts = 0, doubt_kept = 0, orphans = 0;
    char lost_ex[128] = "", ghost_ex[128] = "";
    for (int i = 0; i < SUBMITTERS; i++)
        for (int j = 0; j < s[i].n; j++) {
            const rec *r = &s[i].r[j];
            if (r->kind == A_OK && (!r->kept || (!has_id(tasks, n_tasks, r->id) &&
                                                 !has_id(w.done, w.n_done, r->id)))) {
                if (lost++ == 0)
                    snprintf(lost_ex, sizeof lost_ex, "t%d-%d (task %s, key %s)", i, j, r->id,
                             r->kept ? "kept" : "gone");
            } else if (r->kind == A_NOT_KEPT && r->kept) {
                if (ghosts++ == 0)
                    snprintf(ghost_ex, sizeof ghost_ex, "t%d-%d", i, j);
            }
            doubt_kept += r->kind == A_DOUBT && r->kept;
        }
    for (size_t i = 0; i < n_tasks; i++)
        orphans += !has_id(key_ids, n_key_ids, tasks[i]);
    fprintf(stderr,
            "pg_restart -m %s: afterwards %zu keys, %zu tasks left (%ld never fetched: the "
            "others locked by fetches whose answers were lost); of %d submits in doubt %d were "
            "kept; %d acknowledged lost, %d not kept but there\n",
            mode, n_key_ids, n_tasks, unclaimed, count[A_DOUBT], doubt_kept, lost, ghosts);
    cr_assert_eq(lost, 0, "%d submits answered OK are not in the database, e.g. %s", lost, lost_ex);
    cr_assert_eq(ghosts, 0, "%d submits answered \"nothing was kept\" were kept, e.g. %s", ghosts,
                 ghost_ex);
    cr_assert_eq(stray_keys, 0, "%d keys nobody submitted", stray_keys);
    cr_assert_eq(orphans, 0, "%d tasks without their submit's key", orphans);
    cr_assert_eq(unclaimed, 0, "%ld tasks the worker's last fetches did not find", unclaimed);
    free(tasks);
    free(key_ids);
    free(w.done);
    for (int i = 0; i < SUBMITTERS; i++)
        free(s[i].r);
}

PTest(under_load_a_fast_restart_is_answered_unavailable_and_loses_nothing_acknowledged)
{
    setup("fast");
    under_load("fast");
}

PTest(under_load_an_immediate_restart_is_answered_unavailable_and_loses_nothing_acknowledged)
{
    setup("immediate");
    under_load("immediate");
}

/* ---- a long poll across the restart ---- */

typedef struct poller {
    bc *c;
    const char *topic;
    long wait_ms;
    pthread_t th;
    int rv;
    uint64_t start_us, end_us;
    Berth__V1__Response *r;
} poller;

static void *poll_run(void *arg)
{
    poller *p = arg;
    char *topics[] = {(char *)p->topic};
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    f.worker_id = "poller";
    f.n_topics = 1;
    f.topics = topics;
    f.has_max_tasks = 1;
    f.max_tasks = 1;
    f.has_wait_ms = 1;
    f.wait_ms = (uint64_t)p->wait_ms;
    Berth__V1__Request req = BERTH__V1__REQUEST__INIT;
    req.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    req.fetch = &f;
    p->start_us = mono_us();
    /* The transport's bound is far past the wait: what ends the call
     * before it is berthd. */
    p->rv = bc_call(p->c, &req, (int)p->wait_ms + 15000, &p->r);
    p->end_us = mono_us();
    return NULL;
}

/* How the poll ended: "empty", "UNAVAILABLE", or "the task". */
static const char *poll_ended(poller *p, const char *id)
{
    double took = ms_between(p->start_us, p->end_us);
    cr_assert_eq(p->rv, BC_OK, "the long poll on %s got no answer in %.0f ms: %s", p->topic, took,
                 bc_strerror(p->rv));
    cr_assert_leq(took, (double)(p->wait_ms + MARGIN_MS),
                  "the long poll on %s (wait %ld ms) answered after %.0f ms", p->topic, p->wait_ms,
                  took);
    answer_kind k = kind_of(p->rv, p->r);
    cr_assert(k == A_OK || k == A_DOUBT || k == A_NOT_KEPT, "the long poll on %s: code %d: %s",
              p->topic, p->r->status ? (int)p->r->status->code : -1, message_of(p->rv, p->r));
    if (k != A_OK)
        return "UNAVAILABLE";
    if (p->r->fetch == NULL || p->r->fetch->n_tasks == 0)
        return "empty";
    cr_assert_eq(p->r->fetch->n_tasks, 1);
    cr_assert_not_null(id, "the long poll on %s got a task nobody submitted", p->topic);
    cr_assert_str_eq(p->r->fetch->tasks[0]->id, id);
    return "the task";
}

static void poll_across(const char *mode)
{
    enum { WAIT_MS = 8000 };
    bc *c = d_client(&D);
    char quiet[32], bell[32];
    snprintf(quiet, sizeof quiet, "quiet-%s", mode);
    snprintf(bell, sizeof bell, "bell-%s", mode);
    static poller pq, pb;
    pq = (poller){.c = c, .topic = quiet, .wait_ms = WAIT_MS};
    pb = (poller){.c = c, .topic = bell, .wait_ms = WAIT_MS};
    cr_assert_eq(pthread_create(&pq.th, NULL, poll_run, &pq), 0);
    cr_assert_eq(pthread_create(&pb.th, NULL, poll_run, &pb), 0);
    for (int i = 0; i < 2500 && d_waiting_fetches(&D) < 2; i++)
        sleep_ms(2);
    cr_assert_eq(d_waiting_fetches(&D), 2, "the long polls never waited in berthd");
    long pg_ctl_ms = pgtmp_restart(mode);
    uint64_t back_us = mono_us();
    alive("while PostgreSQL restarted");
    /* Once berthd serves again, a task for the second poll. */
    int tries = 0, rv = BC_OK;
    char *id = NULL;
    uint64_t submitted_us = 0;
    while (id == NULL && mono_us() < back_us + 10000000) {
        /* (One key: a retry after an answer in doubt is the same task.) */
        Berth__V1__Response *r = submit(c, bell, "after", bell, &rv);
        tries++;
        answer_kind k = kind_of(rv, r);
        cr_assert(k == A_OK || k == A_DOUBT || k == A_NOT_KEPT, "a submit: %d: %s",
                  rv == BC_OK && r->status ? (int)r->status->code : rv, message_of(rv, r));
        if (k == A_OK) {
            id = strdup(r->submit->id);
            submitted_us = mono_us();
        }
        berth__v1__response__free_unpacked(r, NULL);
        if (id == NULL)
            sleep_ms(20);
    }
    cr_assert_not_null(id, "berthd did not serve again within 10 s of PostgreSQL being back");
    pthread_join(pq.th, NULL);
    pthread_join(pb.th, NULL);
    const char *q = poll_ended(&pq, NULL), *b = poll_ended(&pb, id);
    fprintf(stderr,
            "pg_restart long poll, -m %s: pg_ctl restart took %ld ms; served again %.0f ms after "
            "PostgreSQL was back (%d submits); the quiet poll ended %s after %.0f ms, the other "
            "%s after %.0f ms (%.0f ms after its task's submit)\n",
            mode, pg_ctl_ms, ms_between(back_us, submitted_us), tries, q,
            ms_between(pq.start_us, pq.end_us), b, ms_between(pb.start_us, pb.end_us),
            ms_between(submitted_us, pb.end_us));
    if (strcmp(q, "empty") == 0)
        cr_assert_geq(ms_between(pq.start_us, pq.end_us), WAIT_MS - 50.0,
                      "the quiet poll ended empty before its wait");
    /* The task was not lost to a poll that ended without it. */
    if (strcmp(b, "the task") != 0) {
        Berth__V1__Response *f = w_fetch(c, "poller", bell, 1, 0, 0);
        w_expect_code(f, BERTH__V1__CODE__OK);
        cr_assert_eq(f->fetch->n_tasks, 1, "the task submitted after the restart is gone");
        cr_assert_str_eq(f->fetch->tasks[0]->id, id);
        w_free(f);
    }
    berth__v1__response__free_unpacked(pq.r, NULL);
    berth__v1__response__free_unpacked(pb.r, NULL);
    free(id);
    bc_close(c);
}

PTest(a_long_poll_waiting_across_restarts_ends_by_its_wait)
{
    setup("poll");
    poll_across("fast");
    poll_across("immediate");
}

/* ---- a database down for seconds ---- */

/* pg/README.md §4: while the engine connection is down "the actor keeps
 * answering UNAVAILABLE at once", the reconnect driven by its poll(). */
PTest(a_database_down_for_seconds_is_answered_unavailable_at_once_and_long_polls_end_by_their_wait)
{
    enum { DOWN_MS = 4000, WAIT_MS = 3000, AT_ONCE_MS = 500, LATE_MS = 1000 };
    setup("down");
    bc *c = d_client(&D);
    static poller p;
    p = (poller){.c = c, .topic = "quiet", .wait_ms = WAIT_MS};
    cr_assert_eq(pthread_create(&p.th, NULL, poll_run, &p), 0);
    for (int i = 0; i < 2500 && d_waiting_fetches(&D) < 1; i++)
        sleep_ms(2);
    cr_assert_eq(d_waiting_fetches(&D), 1, "the long poll never waited in berthd");
    PG_DOWN = true;
    long stop_ms = pgtmp_stop("fast");
    uint64_t down_us = mono_us();
    int n = 0, rv, doubt = 0;
    uint64_t slowest_us = 0;
    double slowest_at_ms = 0;
    while (mono_us() < down_us + DOWN_MS * 1000ull) {
        uint64_t t0 = mono_us();
        Berth__V1__Response *r = submit(c, "down", "x", NULL, &rv);
        uint64_t took = mono_us() - t0;
        answer_kind k = kind_of(rv, r);
        cr_assert(k == A_DOUBT || k == A_NOT_KEPT, "a submit %.0f ms into the outage: code %d: %s",
                  ms_between(down_us, t0), rv == BC_OK && r->status ? (int)r->status->code : rv,
                  message_of(rv, r));
        doubt += k == A_DOUBT;
        berth__v1__response__free_unpacked(r, NULL);
        if (took > slowest_us) {
            slowest_us = took;
            slowest_at_ms = ms_between(down_us, t0);
        }
        n++;
        sleep_ms(50);
    }
    alive("while PostgreSQL was down");
    char *body;
    int health = d_http_get(&D, "/healthz", &body); /* seconds after its last read */
    cr_assert_eq(health, 503, "/healthz while PostgreSQL was down: %d %s", health, body);
    free(body);
    long start_ms = pgtmp_start();
    PG_DOWN = false;
    uint64_t back_us = mono_us(), served_us = 0;
    while (served_us == 0 && mono_us() < back_us + 10000000) {
        Berth__V1__Response *r = submit(c, "down", "y", "after", &rv);
        if (kind_of(rv, r) == A_OK)
            served_us = mono_us();
        if (r != NULL)
            berth__v1__response__free_unpacked(r, NULL);
        if (served_us == 0)
            sleep_ms(20);
    }
    pthread_join(p.th, NULL);
    const char *ended = poll_ended(&p, NULL);
    double waited = ms_between(p.start_us, p.end_us);
    fprintf(stderr,
            "pg_restart down %d ms: pg_ctl stop %ld ms, start %ld ms; %d submits meanwhile, all "
            "UNAVAILABLE (%d in doubt), the slowest %.0f ms (begun %.0f ms into the outage); the "
            "long poll (wait %d ms) ended %s after %.0f ms; served again %.0f ms after "
            "PostgreSQL was back\n",
            DOWN_MS, stop_ms, start_ms, n, doubt, slowest_us / 1000.0, slowest_at_ms, WAIT_MS,
            ended, waited, served_us ? ms_between(back_us, served_us) : -1.0);
    cr_assert_neq(served_us, 0, "berthd did not serve again within 10 s of PostgreSQL being back");
    health = d_http_get(&D, "/healthz", &body);
    cr_assert_eq(health, 200, "/healthz once PostgreSQL was back: %d %s", health, body);
    free(body);
    cr_assert_lt(ms_between(back_us, served_us), ENGINE_BACKOFF_BOUND_MS);
    cr_assert_leq(waited, (double)(WAIT_MS + LATE_MS), "the long poll ended %.0f ms past its wait",
                  waited - WAIT_MS);
    cr_assert_leq(slowest_us / 1000.0, (double)AT_ONCE_MS,
                  "UNAVAILABLE took %.0f ms (begun %.0f ms into the outage)", slowest_us / 1000.0,
                  slowest_at_ms);
    berth__v1__response__free_unpacked(p.r, NULL);
    bc_close(c);
}
