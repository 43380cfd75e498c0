/*
 * pgactor.c — see pgactor.h: the thread, its queue, its waiting fetches,
 * its connections. pgops.c plans and answers each turn.
 *
 * THE LOOP
 *   Read the doorbells the listener brought, answer the waits whose
 *   deadline passed, ring the topics whose learnt instant came; then, if
 *   an engine connection (a lane) is free, start ONE turn on it with what
 *   is queued (up to turn_max_requests) and the waiting fetches and
 *   awaits that were rung (each claims or reads again), with housekeeping
 *   (pgcall.h) when it is due. Turns run on PGACTOR_LANES connections at
 *   once, each answered when its own COMMIT returns; requests queued while
 *   every lane is busy wait and share the next turn. While other
 *   replicas are heard (a doorbell of theirs within PGACTOR_SIBLINGS_MS),
 *   a lane waits PGACTOR_GATHER_US after its last turn before it starts
 *   the next, so that more requests share it: the database serves every
 *   replica, and each turn costs it a transaction whatever it carries (as
 *   PostgreSQL's own commit_delay, with commit_siblings). Nothing to do:
 *   poll() the wake-up eventfd, the listener's and the busy lanes'
 *   sockets until the earliest deadline or learnt instant. With a manual
 *   clock (tests) only a request, a doorbell or a result wakes it: tests
 *   move the clock and call engine_tick(), answered once no turn is in
 *   flight.
 *
 * SUBSCRIBE BEFORE QUERY (R7 across replicas, pg/README.md §5.2)
 *   A doorbell, whether a notification from another replica or a commit
 *   of this one's other lane, rings the waiting fetches on its topic AND
 *   the fetches of turns still in flight: one whose claim comes back empty
 *   after being rung claims again instead of waiting. So a park that
 *   committed after a claim's snapshot is never missed. A listener that
 *   lost its connection rings every waiter once it listens again.
 *
 * WHEN THE DATABASE FAILS
 *   A turn that did not commit answers its requests UNAVAILABLE
 *   (retryable), saying whether they may have been kept (a connection
 *   lost during COMMIT) or were not; a deadlock or lock timeout re-runs
 *   the turn once. A lost connection is reopened after
 *   ENGINE_REOPEN_BACKOFF_MIN_MS, doubling to PGACTOR_RECONNECT_MAX_MS; meanwhile every
 *   request is answered UNAVAILABLE at once and waiting fetches wait on.
 */
#include "pg/pgactor.h"

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/hist.h"
#include "engine/mem.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/tcounts.h"
#include "pg/pgconn.h"
#include "pg/pgdeploy.h"
#include "pg/pgguard.h"
#include "pg/pglisten.h"
#include "pg/pgops.h"
#include "pg/pgrelay.h"
#include "pg/pgschema.h"
#include "pg/pgstmt.h"
#include "pg/pgturn.h"
#include "store/err.h"
#include "store/keys.h"

#define TURN_TIMEOUT_MS 30000 /* a turn longer than this: the connection is given up */
/* Reading the deployments again blocks the thread (one round trip, after
 * a change of them): longer than this, the connection is given up (and
 * reopened), as a reconnect's try blocks it at most a second. */
#define DEPS_READ_WAIT_MS 1000
#define CONTENDED_MS      25 /* fetchable rows another replica was taking: look again */
/* Housekeeping (the calls' timers, retention, key expiry) runs when the
 * database says the next is due, when a doorbell announces a timer, and
 * at least this often (what other replicas left that no doorbell told). */
#define HOUSEKEEPING_EVERY_MS 60000
/* After a housekeeping turn that failed: the embedded store's pause after
 * a failed write (ENGINE_STORE_BACKOFF_MIN_MS). */
#define HOUSEKEEPING_RETRY_MS 50
/* THE LOOP's gathering: how long after its last turn a lane waits before
 * the next while other replicas are heard, and for how long after the last
 * doorbell of another replica it counts as heard. With three replicas
 * sharing this machine's database S1 went from about 2,100 to 2,800
 * tasks/s (BENCHMARKS.md, "On PostgreSQL"); 300 us and more lost again. */
#define PGACTOR_GATHER_US 150
/* After a one-round turn failed on a call's task (pgguard.h, ONE ROUND):
 * how long completions take the two rounds before one is tried again. */
#define PGACTOR_TWO_ROUNDS_MS 1000
/* A lost engine connection is tried again 100 ms later, doubling up to
 * this (the embedded store's reopen goes to 5 s): a primary that failed
 * over is back within this of its standby's promotion, and a try costs
 * the database a connection attempt per host. */
#define PGACTOR_RECONNECT_MAX_MS 1000
#define PGACTOR_SIBLINGS_MS      1000
/* The relay (pgrelay.h) looks at least this often while the copy holds a
 * push channel: for what no doorbell told (a replica that died with sends
 * in flight, a backoff another replica set). */
#define RELAY_EVERY_MS 5000

typedef struct watch {
    char *topic;
    uint64_t due_ms; /* engine clock: ring it then; UINT64_MAX none */
    /* Known empty: a claim found nothing fetchable and nothing that others
     * were taking, and no doorbell rang since, while the listener was up.
     * A new fetch naming only such topics waits (or answers empty) without
     * a transaction (pg/README.md §5.4). */
    bool empty;
} watch;

/* An engine connection and the turn in flight on it. */
/* Owners cancelled lately that the actor remembers (a power of two). */
#define PGACTOR_CLOSED_SLOTS 4096

typedef struct lane {
    PGconn *conn; /* NULL while down */
    uint64_t reconnect_at_ms, reconnect_backoff_ms;
    pgops_turn *turn; /* in flight, or NULL */
    pgreq *list;      /* its requests */
    int attempt;      /* 1: a re-run after a deadlock or lock timeout */
    uint64_t now_ms;  /* the clock when it was planned */
    uint64_t rings;   /* the replica's rings when it was planned */
    uint64_t deadline_mono_ms;
    uint64_t started_us; /* monotonic: its first statement sent */
    bool housekeeping;   /* the turn in flight is one */
    bool gate;           /* ... the gate alone (pgdeploy.h, THE GATE) */
    bool relay;          /* ... a relay due (pgops_how's relay) */
    /* The push channels its turn may claim on, with their room (names
     * copied: the copy of the deployments may be read again meanwhile). */
    VEC(pgrelay_chan) chans;
    char *chan_names;
} lane;

/* A send of this replica, unanswered: a channel's room is push_inflight_max
 * less these (pgrelay.h). It leaves when its answer is taken, or at its
 * deadline. */
typedef struct flight {
    uint8_t id[BERTH_ID_LEN];
    uint64_t flight;
    uint32_t deployment;
    char *topic;
    uint64_t deadline_ms; /* engine clock */
} flight;

typedef struct pgactor {
    struct engine_front front;
    engine_options o;
    char *uri;
    engine_clock clock;
    bool manual;
    pgstmt_table stmts;
    lane lanes[PGACTOR_LANES];
    pglisten listen; /* doorbells in and out */
    uint64_t listen_retry_at_ms;
    char down_why[256];

    pthread_t thread;
    pthread_mutex_t mu; /* the queue, stopping, held */
    int efd;
    pgreq *q_head, *q_tail;
    bool stopping, joined, held;
    /* Owners cancelled lately (engine_cancel: a connection that closed),
     * by a hash of the owner, a newer one taking an older one's slot, each
     * with its cancel's place in the queue: the fetches it queued before
     * are answered CANCELLED when taken, and claim nothing. Without it a
     * peer that pipelines long polls and hangs up takes, turn after turn,
     * the work honest workers wait for (it comes back only when released). */
    struct {
        uint64_t owner, seq;
    } closed[PGACTOR_CLOSED_SLOTS];
    uint64_t seq; /* requests queued, ever */

    VEC(pgreq *) waiters;
    VEC(watch) watches;
    uint64_t rings; /* doorbells rung, ever: a turn that saw none may call a topic empty */
    uint64_t sibling_mono_ms;     /* another replica's last doorbell (0: none yet) */
    uint64_t turn_end_us;         /* the last turn's end (monotonic us) */
    uint64_t two_rounds_until_ms; /* monotonic: completions take two rounds until then */
    uint64_t hk_due_ms;           /* engine clock: the next housekeeping turn */
    bool hk_known; /* ... due for work it knows of (not the boot's, not the periodic one) */
    bool hk_running;
    engine_recovery recovery;
    /* The deployments as the replica last read them (pgdeploy.h, THE COPY):
     * read again before the next turn once stale (a d: doorbell, a change
     * of this replica's, a turn that found the database's epoch newer). */
    pgdeploys deps;
    bool deps_stale;
    bool gate_running;
    /* The relay: the sends unanswered, and when a relay turn is next due
     * (engine clock; UINT64_MAX: none). */
    VEC(flight) flights;
    uint64_t relay_due_ms;
    bool relay_running;
    size_t push_chans;           /* the copy's push channels (of deployments not retired) */
    bool hearing;                /* the doorbells being read are another replica's */
    uint64_t gate_due_mono_ms;   /* the next gate-only turn, while one drains */
    uint64_t deps_retry_mono_ms; /* a read that failed: the next not before */
    engine_stats counters;       /* the replica's own: turns, waits, failed commits */
    hist task_latency, fetch_wait, commit_batch, fsync; /* METRICS' histograms */
    tcounts topics; /* the replica's counters per topic (its own acts, as the embedded store's) */
    /* METRICS' gauges from the database, as the last STATS-like read left
     * them (ENGINE_GAUGES_MAX_AGE_MS at most: older, METRICS reads again) */
    struct {
        bool valid;
        uint64_t mono_ms;
        engine_stats s; /* tasks, ready ... terminal, topics, instances_* */
        engine_topic_stats *topics;
        char **names;
        size_t n;
    } gauges;
    _Atomic uint64_t turns, committed;
    _Atomic int fp_write; /* ENGINE_FP_STORE_WRITE: turns left to fail */
    _Atomic int fp_sync;  /* ENGINE_FP_STORE_SYNC: turns left to lose at COMMIT */
} pgactor;

static const engine_backend pgactor_backend;

static uint64_t now_ms(const pgactor *a)
{
    return a->clock.now_ms(a->clock.ctx);
}

/* ---- answering ---- */

static void answer(pgactor *a, pgreq *p)
{
    /* A fetch's wait, from its arrival to its answer (the embedded
     * store's, on the engine's clock). */
    if (p->req.op == ENGINE_OP_FETCH && p->reply->status.code == ENGINE_CODE_OK) {
        uint64_t now = now_ms(a);
        hist_observe(&a->fetch_wait,
                     now > p->arrived_ms ? (double)(now - p->arrived_ms) / 1000.0 : 0);
    }
    p->done(p->arg, p->reply);
    free(p);
}

/* Answered st and nothing else (a turn that did not commit). */
static void answer_status(pgactor *a, pgreq *p, const engine_status *st)
{
    engine_reply *r = p->reply;
    r->status = *st;
    r->n_submitted = r->n_tasks = r->n_statuses = r->n_topic_stats = 0;
    answer(a, p);
}

/* ---- doorbells ---- */

static bool names(const pgreq *p, const char *topic)
{
    if (p->req.op != ENGINE_OP_FETCH)
        return false;
    for (size_t i = 0; i < p->req.u.fetch.n_topics; i++)
        if (strcmp(p->req.u.fetch.topics[i], topic) == 0)
            return true;
    return false;
}

/* Rings the waiters on topic (NULL: all waiters, awaits too), and the
 * fetches of turns in flight: what they claimed may predate the park
 * (subscribe before query). */
static void ring(void *ctx, const char *topic)
{
    pgactor *a = ctx;
    a->rings++;
    for (size_t i = 0; i < a->watches.n; i++)
        if (topic == NULL || strcmp(a->watches.v[i].topic, topic) == 0)
            a->watches.v[i].empty = false;
    for (size_t i = 0; i < a->waiters.n; i++) {
        pgreq *p = a->waiters.v[i];
        if (topic == NULL || names(p, topic))
            p->rung = true;
    }
    for (size_t l = 0; l < PGACTOR_LANES; l++)
        for (pgreq *p = a->lanes[l].list; p != NULL; p = p->next)
            if (topic == NULL ? p->req.op == ENGINE_OP_FETCH || p->req.op == ENGINE_OP_AWAIT_CALL
                              : names(p, topic))
                p->rung = true;
}

/* Rings the awaits of the call id (hex) names, waiting or in flight: the
 * call changed (an end, a backoff, a next attempt). */
static void ring_call(pgactor *a, const char *hex)
{
    uint8_t id[BERTH_ID_LEN];
    if (store_id_parse(hex, id) != BERTH_OK)
        return;
    for (size_t i = 0; i < a->waiters.n; i++) {
        pgreq *p = a->waiters.v[i];
        if (p->req.op == ENGINE_OP_AWAIT_CALL && memcmp(p->call_id, id, BERTH_ID_LEN) == 0)
            p->rung = true;
    }
    for (size_t l = 0; l < PGACTOR_LANES; l++)
        for (pgreq *p = a->lanes[l].list; p != NULL; p = p->next)
            if (p->req.op == ENGINE_OP_AWAIT_CALL && memcmp(p->call_id, id, BERTH_ID_LEN) == 0)
                p->rung = true;
}

/* A call's timer (or an end's retention) comes in in_ms: housekeeping then. */
static void timer_in(pgactor *a, uint64_t in_ms)
{
    uint64_t at = now_ms(a) + in_ms;
    if (at < a->hk_due_ms) {
        a->hk_due_ms = at;
        a->hk_known = true;
    }
}

static watch *watch_of(pgactor *a, const char *topic, bool make)
{
    for (size_t i = 0; i < a->watches.n; i++)
        if (strcmp(a->watches.v[i].topic, topic) == 0)
            return &a->watches.v[i];
    if (!make)
        return NULL;
    watch *w = VEC_ADD(&a->watches);
    if (w == NULL)
        return NULL;
    w->topic = mem_strdup(topic);
    w->due_ms = UINT64_MAX;
    if (w->topic == NULL) {
        a->watches.n--;
        return NULL;
    }
    return w;
}

static void later(void *ctx, const char *topic, uint64_t in_ms)
{
    pgactor *a = ctx;
    watch *w = watch_of(a, topic, false);
    bool waited = false;
    for (size_t i = 0; i < a->waiters.n && !waited && w == NULL; i++)
        waited = names(a->waiters.v[i], topic);
    if (w == NULL && !waited)
        return; /* nobody here waits on it nor knows it empty: a claim will learn it */
    if (w == NULL && (w = watch_of(a, topic, true)) == NULL)
        return;
    uint64_t at = now_ms(a) + in_ms;
    if (at < w->due_ms)
        w->due_ms = at; /* (known empty until then, if it was) */
}

/* "p:a;t:b+500;r:<call id>;i:+300;p:*" (pgplan_notify_add writes them),
 * from another replica or from this one's own turn. */
static void doorbells(void *ctx, const char *payload)
{
    pgactor *a = ctx;
    char buf[8192];
    snprintf(buf, sizeof buf, "%s", payload);
    for (char *save = NULL, *rec = strtok_r(buf, ";", &save); rec != NULL;
         rec = strtok_r(NULL, ";", &save)) {
        if (strncmp(rec, "p:", 2) == 0) {
            ring(a, strcmp(rec + 2, "*") == 0 ? NULL : rec + 2); /* p:*, awaits too */
        } else if (strncmp(rec, "r:", 2) == 0) {
            ring_call(a, rec + 2);
        } else if (strcmp(rec, "d:") == 0) {
            a->deps_stale = true; /* another replica changed the deployments */
        } else if (strcmp(rec, "o:") == 0 && a->hearing) {
            a->relay_due_ms = 0; /* deliveries wait: look (this replica's own claimed already) */
        } else if (strncmp(rec, "i:+", 3) == 0) {
            timer_in(a, strtoull(rec + 3, NULL, 10));
        } else if (strncmp(rec, "t:", 2) == 0) {
            char *plus = strrchr(rec, '+');
            if (plus != NULL) {
                *plus = '\0';
                later(a, rec + 2, strtoull(plus + 1, NULL, 10));
            }
        }
    }
}

/* ---- connections ---- */

static bool any_up_but(const pgactor *a, const lane *but)
{
    for (size_t i = 0; i < PGACTOR_LANES; i++)
        if (&a->lanes[i] != but && a->lanes[i].conn != NULL)
            return true;
    return false;
}

static void down(pgactor *a, lane *l, const char *why)
{
    if (l->conn != NULL) {
        a->counters.halts++;
        if (!any_up_but(a, l))
            fprintf(stderr,
                    "berthd: the database is unreachable (%s); answering UNAVAILABLE "
                    "and reconnecting\n",
                    why);
    }
    pgconn_close(l->conn);
    l->conn = NULL;
    snprintf(a->down_why, sizeof a->down_why, "%s", why);
    if (l->reconnect_backoff_ms == 0)
        l->reconnect_backoff_ms = ENGINE_REOPEN_BACKOFF_MIN_MS;
    l->reconnect_at_ms = pgturn_mono_ms() + l->reconnect_backoff_ms;
    l->reconnect_backoff_ms *= 2;
    if (l->reconnect_backoff_ms > PGACTOR_RECONNECT_MAX_MS)
        l->reconnect_backoff_ms = PGACTOR_RECONNECT_MAX_MS;
}

static int engine_conn(pgactor *a, lane *l, uint64_t wait_ms, char *err, size_t errlen)
{
    PGconn *c;
    int rv = pgconn_open(a->uri, "berthd", wait_ms, &c, err, errlen);
    if (rv != BERTH_OK)
        return rv;
    if ((rv = pgconn_exec(c,
                          "SET plan_cache_mode = force_generic_plan; SET lock_timeout = '5s'; "
                          "SET statement_timeout = '10s'; "
                          "SET idle_in_transaction_session_timeout = '30s'",
                          "session settings", err, errlen)) != BERTH_OK ||
        (rv = pgturn_enter(c, err, errlen)) != BERTH_OK ||
        (rv = pgstmt_prepare_all(c, &a->stmts, err, errlen)) != BERTH_OK) {
        pgconn_close(c);
        return rv;
    }
    l->conn = c;
    l->reconnect_backoff_ms = 0;
    return BERTH_OK;
}

static bool any_up(const pgactor *a)
{
    for (size_t i = 0; i < PGACTOR_LANES; i++)
        if (a->lanes[i].conn != NULL)
            return true;
    return false;
}

/* Lanes down and due are reopened (each try waits up to a second); the
 * listener once an engine connection is up. */
static void reconnect(pgactor *a)
{
    char err[512];
    uint64_t now = pgturn_mono_ms();
    for (size_t i = 0; i < PGACTOR_LANES; i++) {
        lane *l = &a->lanes[i];
        if (l->conn != NULL || l->turn != NULL || now < l->reconnect_at_ms)
            continue;
        /* One attempt (up to PGCONN_ATTEMPT_MIN_MS for a host that does
         * not answer; a refusal is at once), the lane's backoff between
         * attempts: the thread goes on answering meanwhile. */
        if (engine_conn(a, l, 1, err, sizeof err) != BERTH_OK) {
            down(a, l, err);
            for (size_t k = 0; k < PGACTOR_LANES; k++) /* the others would fare no better now */
                if (a->lanes[k].conn == NULL && a->lanes[k].reconnect_at_ms < l->reconnect_at_ms)
                    a->lanes[k].reconnect_at_ms = l->reconnect_at_ms;
            return;
        }
        if (!any_up_but(a, l))
            fprintf(stderr, "berthd: the database is reachable again\n");
        a->counters.reopens++;
        ring(a, NULL); /* while it was down, claims failed: every waiter looks again */
    }
    if (a->listen.conn == NULL && any_up(a) && now >= a->listen_retry_at_ms) {
        if (pglisten_open(&a->listen, a->uri, 1, err, sizeof err) == BERTH_OK) {
            ring(a, NULL);  /* doorbells were missed meanwhile: every waiter looks again */
            timer_in(a, 0); /* ... and the timers they announced */
        } else
            a->listen_retry_at_ms = now + ENGINE_REOPEN_BACKOFF_MIN_MS;
    }
}

/* A notification from this replica's own connections. */
static bool ours(void *ctx, int pid)
{
    const pgactor *a = ctx;
    if (a->listen.conn != NULL && PQbackendPID(a->listen.conn) == pid)
        return true;
    for (size_t i = 0; i < PGACTOR_LANES; i++)
        if (a->lanes[i].conn != NULL && PQbackendPID(a->lanes[i].conn) == pid)
            return true;
    return false;
}

/* Another replica's doorbell. */
static void heard(void *ctx, const char *payload)
{
    pgactor *a = ctx;
    a->sibling_mono_ms = pgturn_mono_ms();
    a->hearing = true;
    doorbells(ctx, payload);
    a->hearing = false;
}

/* Reads what the listener brought; a lost listener is reopened later. */
static void drain_listener(pgactor *a)
{
    (void)pglisten_drain(&a->listen, ours, heard, a);
}

/* ---- waits ---- */

static uint32_t owner_waiting(const pgactor *a, uint64_t owner)
{
    uint32_t n = 0;
    for (size_t i = 0; i < a->waiters.n; i++)
        n += a->waiters.v[i]->req.owner == owner;
    return n;
}

static void wait_remove(pgactor *a, size_t i)
{
    a->waiters.v[i] = a->waiters.v[--a->waiters.n];
}

/* Answers the waits past their deadline (as they stand: what completions
 * they carried, no task) and those of a cancelled owner. */
static void waits_end(pgactor *a, uint64_t now, bool cancel, uint64_t owner)
{
    for (size_t i = 0; i < a->waiters.n;) {
        pgreq *p = a->waiters.v[i];
        if (cancel ? p->req.owner == owner : p->deadline_ms <= now) {
            wait_remove(a, i);
            if (cancel) {
                reply_status(&p->reply->status, ENGINE_CODE_CANCELLED,
                             "the fetch's connection closed");
                a->counters.waits_cancelled++;
            }
            answer(a, p);
        } else {
            i++;
        }
    }
}

static void ring_due(pgactor *a, uint64_t now)
{
    for (size_t i = 0; i < a->watches.n; i++)
        if (a->watches.v[i].due_ms <= now) {
            a->watches.v[i].due_ms = UINT64_MAX;
            ring(a, a->watches.v[i].topic);
        }
}

static size_t closed_slot(uint64_t owner)
{
    owner ^= owner >> 33;
    owner *= 0xff51afd7ed558ccdULL;
    owner ^= owner >> 33;
    return (size_t)(owner & (PGACTOR_CLOSED_SLOTS - 1));
}

/* A fetch its owner's cancel came after (under a->mu). Its completions
 * are kept all the same: only a fetch that carries none, or whose
 * completions a turn applied already (a waiter), is dropped. */
static bool closed_fetch(const pgactor *a, const pgreq *p)
{
    if (p->req.op != ENGINE_OP_FETCH || p->req.owner == 0 ||
        (p->req.u.fetch.n_completes > 0 && !p->completes_done))
        return false;
    size_t k = closed_slot(p->req.owner);
    return a->closed[k].owner == p->req.owner && p->seq < a->closed[k].seq;
}

/* The waiters rung since their last claim join the turn, ahead of the
 * requests new to it (they came first: claims go to a turn's fetches in
 * their order, and a flood of new fetches must not overtake a worker who
 * has been waiting), but for those whose connection's cancel is queued
 * already:
 * answered CANCELLED, they claim nothing (a flood of long polls from
 * peers that hang up would otherwise be rung, oldest first, by every
 * task honest workers wait for). */
static void take_rung(pgactor *a, pgreq **head, pgreq **tail)
{
    pgreq *gone = NULL, *first = NULL, *last = NULL;
    size_t kept = 0; /* (the others keep their order) */
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->waiters.n; i++) {
        pgreq *p = a->waiters.v[i];
        if (!p->rung) {
            a->waiters.v[kept++] = p;
            continue;
        }
        p->rung = false;
        p->next = NULL;
        if (closed_fetch(a, p)) {
            p->next = gone;
            gone = p;
            continue;
        }
        if (last)
            last->next = p;
        else
            first = p;
        last = p;
    }
    a->waiters.n = kept;
    pthread_mutex_unlock(&a->mu);
    if (first != NULL) {
        last->next = *head;
        *head = first;
        if (*tail == NULL)
            *tail = last;
    }
    for (pgreq *p = gone, *next; p != NULL; p = next) {
        next = p->next;
        reply_status(&p->reply->status, ENGINE_CODE_CANCELLED, "the fetch's connection closed");
        a->counters.waits_cancelled++;
        answer(a, p);
    }
}

/* A fetch that claimed nothing, an await whose call is live: it waits
 * (may_wait, a slot), or is answered. */
static void park_or_answer(pgactor *a, pgreq *p, uint64_t now)
{
    engine_reply *r = p->reply;
    bool more = p->req.op == ENGINE_OP_AWAIT_CALL ? p->live : r->n_tasks == 0;
    if (r->status.code != ENGINE_CODE_OK || !more || !p->may_wait ||
        (p->deadline_ms != 0 && p->deadline_ms <= now)) {
        answer(a, p);
        return;
    }
    if (p->deadline_ms == 0) {
        engine_status st = {0};
        if (!rules_wait_may(&a->o, a->waiters.n, p->req.owner != 0, owner_waiting(a, p->req.owner),
                            &st)) {
            a->counters.waits_refused++;
            r->status = st;
            answer(a, p);
            return;
        }
        p->deadline_ms = now + p->wait_ms;
    }
    p->completes_done = true; /* (rung stays: a ring during its claim sends it back) */
    pgreq **slot = VEC_ADD(&a->waiters);
    if (slot == NULL) {
        answer(a, p);
        return;
    }
    *slot = p;
}

/* ---- a turn ---- */

static void turn_failed(pgactor *a, pgreq *list, const engine_status *st)
{
    uint64_t now = now_ms(a);
    for (pgreq *p = list, *next; p != NULL; p = next) {
        next = p->next;
        if (!p->settled && ((p->req.op == ENGINE_OP_FETCH && p->completes_done) ||
                            (p->req.op == ENGINE_OP_AWAIT_CALL && p->deadline_ms != 0))) {
            /* A waiter's claim (or read) failed: whatever rang it may be
             * there still. It waits on, rung: it looks again once a lane
             * serves (an await answers its last read at its deadline). */
            p->rung = true;
            park_or_answer(a, p, now);
        } else if (p->settled) {
            answer(a, p);
        } else {
            answer_status(a, p, st);
        }
    }
}

static void outcome_status(const pgturn *t, engine_status *st)
{
    char why[600];
    switch (t->outcome) {
    case PGTURN_IN_DOUBT:
        snprintf(why, sizeof why,
                 "the database connection was lost during COMMIT (%.200s): the request may or may "
                 "not have been kept",
                 t->message);
        break;
    case PGTURN_LOST_BEFORE_COMMIT:
        snprintf(why, sizeof why,
                 "the database connection was lost (%.200s): nothing of the request was kept",
                 t->message);
        break;
    default:
        snprintf(why, sizeof why, "the database refused the turn (%.200s%s%s): nothing was kept",
                 t->message, t->sqlstate[0] ? ", SQLSTATE " : "", t->sqlstate);
        break;
    }
    reply_unavailable(st, why);
}

static void housekeeping_done(pgactor *a, lane *l, uint64_t next_in_ms);
static void gate_done(pgactor *a, lane *l);
static void refuse_all(pgactor *a, pgreq *list);

/* ---- the relay (pgrelay.h) ---- */

static uint64_t min_u64(uint64_t x, uint64_t y)
{
    return x < y ? x : y;
}

static uint32_t unanswered(const pgactor *a, uint32_t deployment, const char *topic)
{
    uint32_t n = 0;
    for (size_t i = 0; i < a->flights.n; i++)
        n += a->flights.v[i].deployment == deployment && strcmp(a->flights.v[i].topic, topic) == 0;
    return n;
}

/* What the turns in flight on the other lanes may claim on a channel. */
static uint32_t reserved(const pgactor *a, const lane *l, uint32_t deployment, const char *topic)
{
    uint32_t n = 0;
    for (size_t k = 0; k < PGACTOR_LANES; k++) {
        const lane *o = &a->lanes[k];
        bool claims = o != l && o->turn != NULL && pgrelay_claims(o->turn);
        for (size_t i = 0; claims && i < o->chans.n; i++)
            if (o->chans.v[i].deployment == deployment && strcmp(o->chans.v[i].topic, topic) == 0)
                n += o->chans.v[i].room;
    }
    return n;
}

/* The name of channel k of d when it is a push channel the relay serves
 * (its deployment not retired), else NULL. */
static const char *push_chan(const pgactor *a, const pgdep *d, size_t k)
{
    const char *name = d->decl.channels[k].name;
    return d->state != ENGINE_DEPLOYMENT_RETIRED && pgdeploy_push(&a->deps, d->number, name) != NULL
               ? name
               : NULL;
}

/* The push channels of the copy (of deployments live or draining), each
 * with the room this replica has on it, into l (none without a push_fn:
 * a replica that cannot send claims nothing). False: out of memory (the
 * turn claims nothing). */
static bool chans_make(pgactor *a, lane *l)
{
    l->chans.n = 0;
    free(l->chan_names);
    l->chan_names = NULL;
    if (a->o.push_fn == NULL)
        return true;
    size_t bytes = 0;
    for (size_t i = 0; i < a->deps.v.n; i++)
        for (size_t k = 0; k < a->deps.v.v[i].decl.n_channels; k++)
            if (push_chan(a, &a->deps.v.v[i], k) != NULL)
                bytes += strlen(a->deps.v.v[i].decl.channels[k].name) + 1;
    if (bytes == 0)
        return true;
    char *at = l->chan_names = mem_calloc(1, bytes);
    if (at == NULL)
        return false;
    for (size_t i = 0; i < a->deps.v.n; i++) {
        const pgdep *d = &a->deps.v.v[i];
        for (size_t k = 0; k < d->decl.n_channels; k++) {
            const char *name = push_chan(a, d, k);
            if (name == NULL)
                continue;
            uint32_t busy = unanswered(a, d->number, name) + reserved(a, l, d->number, name);
            pgrelay_chan *c = VEC_ADD(&l->chans);
            if (c == NULL)
                return false;
            size_t len = strlen(name) + 1;
            memcpy(at, name, len);
            *c = (pgrelay_chan){
                .topic = at,
                .deployment = d->number,
                .room = busy < a->o.push_inflight_max ? a->o.push_inflight_max - busy : 0};
            at += len;
        }
    }
    return true;
}

/* A send the turn claimed: kept as unanswered, then pushed. One the
 * transport does not take is left to its deadline (a failed attempt). */
static void push_one(void *ctx, const engine_push_delivery *d, uint32_t deployment)
{
    pgactor *a = ctx;
    flight *f = VEC_ADD(&a->flights);
    if (f != NULL) {
        *f = (flight){.flight = d->flight,
                      .deployment = deployment,
                      .topic = mem_strdup(d->topic),
                      .deadline_ms = now_ms(a) + a->o.push_timeout_ms + RULES_PUSH_GRACE_MS};
        (void)store_id_parse(d->id, f->id);
        if (f->topic == NULL)
            a->flights.n--;
    }
    if (a->o.push_fn != NULL)
        (void)a->o.push_fn(a->o.push_ctx, (engine *)(void *)a, d);
}

static void flight_drop(pgactor *a, size_t i)
{
    free(a->flights.v[i].topic);
    a->flights.v[i] = a->flights.v[--a->flights.n];
}

/* An answer taken: its send is no longer unanswered here. */
static void flight_answered(pgactor *a, const pgreq *p)
{
    uint8_t id[BERTH_ID_LEN];
    if (p->req.u.push_ack.id == NULL || store_id_parse(p->req.u.push_ack.id, id) != BERTH_OK)
        return;
    for (size_t i = 0; i < a->flights.n; i++)
        if (a->flights.v[i].flight == p->req.u.push_ack.flight &&
            memcmp(a->flights.v[i].id, id, BERTH_ID_LEN) == 0) {
            flight_drop(a, i);
            return;
        }
}

/* Sends past their deadline free their room, and a relay turn takes
 * them (as failed attempts) now. */
static void flights_expire(pgactor *a, uint64_t now)
{
    for (size_t i = 0; i < a->flights.n;)
        if (a->flights.v[i].deadline_ms <= now) {
            flight_drop(a, i);
            a->relay_due_ms = min_u64(a->relay_due_ms, now);
        } else {
            i++;
        }
}

/* A turn of l ended (committed: t; else NULL): its sends pushed, and when
 * the relay is next due. */
static void relay_done(pgactor *a, lane *l, const pgops_turn *t)
{
    if (l->relay) {
        l->relay = false;
        a->relay_running = false;
    }
    if (t != NULL && !pgrelay_claims(t))
        return; /* the turn did not relay */
    if (t != NULL)
        pgrelay_each_send(t, &a->deps, push_one, a);
    uint64_t next = t != NULL ? pgrelay_next_in(t) : HOUSEKEEPING_RETRY_MS;
    if (next != UINT64_MAX)
        a->relay_due_ms = min_u64(a->relay_due_ms, l->now_ms + next);
    if (l->chans.n > 0)
        a->relay_due_ms = min_u64(a->relay_due_ms, l->now_ms + RELAY_EVERY_MS);
}

/* Reads the deployments again on l's connection, waiting for the answer
 * (one round trip, after a change of them only). False: not read (the
 * copy stays stale; a turn routed by it fails BR002 and is answered
 * UNAVAILABLE). */
static bool deps_reload(pgactor *a, lane *l)
{
    pgturn_stmt st = {.name = "deployments_read"};
    pgturn t = {.conn = l->conn, .stmts = &st, .n = 1};
    (void)pgturn_run(&t, pgturn_mono_ms() + DEPS_READ_WAIT_MS);
    bool ok = t.outcome == PGTURN_COMMITTED && st.result != NULL &&
              pgdeploy_load(&a->deps, st.result) == BERTH_OK;
    pgturn_clear_results(&t);
    if (t.broken)
        down(a, l, t.message);
    if (ok) {
        a->deps_stale = false;
        if (a->deps.n_draining == 0)
            a->gate_due_mono_ms = 0;
        a->push_chans = 0;
        for (size_t i = 0; i < a->deps.v.n; i++)
            for (size_t k = 0; k < a->deps.v.v[i].decl.n_channels; k++)
                a->push_chans += push_chan(a, &a->deps.v.v[i], k) != NULL;
    }
    return ok;
}

/* Plans the lane's requests and puts the turn on the wire. A turn that
 * needs nothing of the database ends at once. */
static void turn_start(pgactor *a, lane *l)
{
    if (a->deps_stale && !deps_reload(a, l) && l->conn == NULL) {
        refuse_all(a, l->list);
        l->list = NULL;
        if (l->housekeeping)
            housekeeping_done(a, l, HOUSEKEEPING_RETRY_MS);
        if (l->gate)
            gate_done(a, l);
        if (l->relay)
            relay_done(a, l, NULL);
        return;
    }
    a->counters.turns = a->committed;
    a->counters.waiting_fetches = a->waiters.n;
    /* ENGINE_FP_STORE_WRITE fails a turn that writes: one with requests,
     * or housekeeping due for work it knows of (a timer, a retention),
     * as the embedded engine's timers fail with their turn; not the boot's
     * or the periodic look, which would take it from the requests'. */
    bool fail = a->fp_write > 0 && (l->list != NULL || (l->housekeeping && a->hk_known));
    if (!chans_make(a, l))
        l->chans.n = 0;
    pgops_turn *t;
    pgops_how how = {.now_ms = l->now_ms,
                     .manual = a->manual,
                     .fail = fail,
                     .notify_in_turn = a->listen.conn == NULL,
                     .housekeeping = l->housekeeping,
                     .one_round = l->attempt == 0 && pgturn_mono_ms() >= a->two_rounds_until_ms,
                     /* one turn in flight per lane: the budget shared out */
                     .fetch_budget = a->o.fetch_inflight_max_bytes / PGACTOR_LANES,
                     .topics = &a->topics,
                     .task_latency = &a->task_latency,
                     .deps = &a->deps,
                     .gate_wait = l->gate,
                     .chans = l->chans.v,
                     .n_chans = l->chans.n,
                     .relay = l->relay};
    if (pgops_plan(&a->o, &a->counters, l->list, &how, l->conn, &t) != BERTH_OK) {
        engine_status st;
        reply_no_memory(&st);
        turn_failed(a, l->list, &st);
        l->list = NULL;
        return;
    }
    l->turn = t;
    pgturn *pt = pgops_pgturn(t);
    if (pgops_empty(t)) {
        pt->outcome = PGTURN_COMMITTED; /* nothing asked of the database */
        return;
    }
    a->turns++;
    if (fail)
        a->fp_write--;
    if (!fail && a->fp_sync > 0 && l->list != NULL) {
        a->fp_sync--;
        pt->cut_after_commit = true;
    }
    l->deadline_mono_ms = pgturn_mono_ms() + TURN_TIMEOUT_MS;
    l->started_us = pgturn_mono_us();
    if (pgturn_start(pt) != BERTH_OK && pt->outcome == PGTURN_PENDING) {
        pt->outcome = PGTURN_ABORTED;
        snprintf(pt->message, sizeof pt->message, "a malformed turn");
    }
}

/* A housekeeping turn ended: the next is due next_in_ms after the
 * instant the turn ran at (UINT64_MAX: nothing waits), at the latest
 * HOUSEKEEPING_EVERY_MS after it. */
static void housekeeping_done(pgactor *a, lane *l, uint64_t next_in_ms)
{
    l->housekeeping = false;
    a->hk_running = false;
    bool known = next_in_ms <= HOUSEKEEPING_EVERY_MS;
    if (!known)
        next_in_ms = HOUSEKEEPING_EVERY_MS;
    uint64_t at = l->now_ms + next_in_ms;
    if (at < a->hk_due_ms) { /* (a timer announced meanwhile may be sooner) */
        a->hk_due_ms = at;
        a->hk_known = known;
    }
}

/* ---- METRICS ---- */

static void gauges_free(pgactor *a)
{
    for (size_t i = 0; i < a->gauges.n; i++)
        free(a->gauges.names[i]);
    free(a->gauges.names);
    free(a->gauges.topics);
    a->gauges.names = NULL;
    a->gauges.topics = NULL;
    a->gauges.n = 0;
    a->gauges.valid = false;
}

/* The database's counts in r (a STATS or METRICS read of a turn) become
 * the cache. */
static void gauges_keep(pgactor *a, const engine_reply *r)
{
    gauges_free(a);
    size_t n = r->n_topic_stats;
    a->gauges.topics = n ? calloc(n, sizeof(*a->gauges.topics)) : NULL;
    a->gauges.names = n ? calloc(n, sizeof(*a->gauges.names)) : NULL;
    if (n && (a->gauges.topics == NULL || a->gauges.names == NULL)) {
        gauges_free(a);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        a->gauges.topics[i] = r->topic_stats[i];
        a->gauges.names[i] = strdup(r->topic_stats[i].topic ? r->topic_stats[i].topic : "");
        if (a->gauges.names[i] == NULL) {
            a->gauges.n = i;
            gauges_free(a);
            return;
        }
        a->gauges.topics[i].topic = a->gauges.names[i];
        a->gauges.n = i + 1;
    }
    a->gauges.s = r->stats;
    a->gauges.mono_ms = pgturn_mono_ms();
    a->gauges.valid = true;
}

static bool gauges_fresh(const pgactor *a)
{
    return a->gauges.valid && pgturn_mono_ms() - a->gauges.mono_ms <= ENGINE_GAUGES_MAX_AGE_MS;
}

/* METRICS: the replica's own counters and histograms, and the database's
 * gauges (read by a turn: from_db; else the cache's, which is fresh). */
static void metrics(pgactor *a, engine_reply *r, bool from_db)
{
    engine_stats db = from_db ? r->stats : a->gauges.s;
    r->stats = a->counters;
    r->stats.tasks = db.tasks;
    r->stats.ready = db.ready;
    r->stats.locked = db.locked;
    r->stats.backoff = db.backoff;
    r->stats.delayed = db.delayed;
    r->stats.terminal = db.terminal;
    r->stats.topics = db.topics;
    r->stats.instances_waiting = db.instances_waiting;
    r->stats.instances_backoff = db.instances_backoff;
    r->stats.deployments_live = db.deployments_live;
    r->stats.deployments_draining = db.deployments_draining;
    r->stats.deployments_retired = db.deployments_retired;
    r->stats.outbox_pending = db.outbox_pending;
    r->stats.poisoned = db.poisoned;
    r->stats.turns = r->stats.syncs = a->committed;
    r->stats.waiting_fetches = a->waiters.n;
    if (!from_db && a->gauges.n > 0) {
        r->topic_stats = reply_mem(r, a->gauges.n * sizeof(*r->topic_stats));
        if (r->topic_stats == NULL) {
            reply_no_memory(&r->status);
            return;
        }
        for (size_t i = 0; i < a->gauges.n; i++) {
            size_t len = strlen(a->gauges.names[i]) + 1;
            char *name = reply_mem(r, len);
            if (name == NULL) {
                reply_no_memory(&r->status);
                return;
            }
            memcpy(name, a->gauges.names[i], len);
            r->topic_stats[i] = a->gauges.topics[i];
            r->topic_stats[i].topic = name;
        }
        r->n_topic_stats = a->gauges.n;
    }
    if (tcounts_read(&a->topics, r) != BERTH_OK) {
        reply_reset(r);
        reply_no_memory(&r->status);
        return;
    }
    r->metrics.shared = true;
    hist_read(&a->task_latency, &r->metrics.task_latency);
    hist_read(&a->fetch_wait, &r->metrics.fetch_wait);
    hist_read(&a->commit_batch, &r->metrics.commit_batch);
    hist_read(&a->fsync, &r->metrics.fsync);
}

/* A gate-only turn ended: the next in PGDEPLOY_GATE_EVERY_MS, while the
 * copy shows a deployment draining. */
static void gate_done(pgactor *a, lane *l)
{
    l->gate = false;
    a->gate_running = false;
    a->gate_due_mono_ms = pgturn_mono_ms() + PGDEPLOY_GATE_EVERY_MS;
}

static void committed(pgactor *a, lane *l)
{
    pgops_turn *t = l->turn;
    a->committed += !pgops_empty(t);
    if (!pgops_empty(t)) {
        size_t n = 0;
        for (const pgreq *p = l->list; p != NULL; p = p->next)
            n++;
        hist_observe(&a->commit_batch, (double)n);
    }
    if (pgops_notify(t) != NULL)
        pglisten_ring(&a->listen, pgops_notify(t));
    pgops_answer(t, doorbells, a);
    if (pgops_deploys_changed(t)) { /* read them again; the other replicas too */
        a->deps_stale = true;
        if (a->listen.conn != NULL)
            pglisten_ring(&a->listen, "d:");
    }
    if (l->gate)
        gate_done(a, l);
    const engine_stats *d = pgops_delta(t);
    a->counters.calls += d->calls;
    a->counters.calls_resolved += d->calls_resolved;
    a->counters.calls_failed += d->calls_failed;
    a->counters.calls_timed_out += d->calls_timed_out;
    a->counters.instances_dropped += d->instances_dropped;
    if (l->housekeeping)
        housekeeping_done(a, l, pgops_housekeeping_next(t));
    relay_done(a, l, t);
    size_t nd;
    const pgops_topic_due *due = pgops_dues(t, &nd);
    uint64_t at = now_ms(a);
    bool quiet = a->rings == l->rings && a->listen.conn != NULL; /* nothing rang meanwhile */
    for (size_t i = 0; i < nd; i++) {
        watch *w = watch_of(a, due[i].topic, true);
        uint64_t when = due[i].contended ? at + CONTENDED_MS
                        : due[i].known   ? at + due[i].next_in_ms
                                         : UINT64_MAX;
        if (w != NULL && when < w->due_ms)
            w->due_ms = when;
        if (w != NULL)
            w->empty = quiet && !due[i].contended;
    }
    pgops_free(t);
    l->turn = NULL;
    pgreq *list = l->list;
    l->list = NULL;
    for (pgreq *p = list, *next; p != NULL; p = next) {
        next = p->next;
        if ((p->req.op == ENGINE_OP_FETCH || p->req.op == ENGINE_OP_AWAIT_CALL) && !p->settled) {
            p->rung |= p->deferred; /* it claims in the next turn, if it may wait */
            park_or_answer(a, p, at);
        } else {
            bool counted = p->req.op == ENGINE_OP_METRICS || p->req.op == ENGINE_OP_STATS;
            if (counted && p->reply->status.code == ENGINE_CODE_OK) {
                gauges_keep(a, p->reply); /* STATS reads what METRICS' gauges show */
                if (p->req.op == ENGINE_OP_METRICS)
                    metrics(a, p->reply, true);
            }
            answer(a, p);
        }
    }
}

/* The lane's turn is over: answered, re-run once (a deadlock, a lock
 * timeout), or refused. */
static void turn_end(pgactor *a, lane *l)
{
    pgturn *pt = pgops_pgturn(l->turn);
    if (pt->outcome == PGTURN_COMMITTED) {
        /* berth_fsync_seconds: what makes a turn durable here is its
         * transaction, first statement to COMMIT's answer. */
        if (!pgops_empty(l->turn))
            hist_observe(&a->fsync, (double)(pgturn_mono_us() - l->started_us) / 1e6);
        committed(a, l);
        return;
    }
    /* A one-round turn a completion could not be decided in (a call's
     * task): again in two rounds, and so for a while (calls are in use). */
    bool undecided = pt->outcome == PGTURN_ABORTED && strcmp(pt->sqlstate, PGGUARD_UNDECIDED) == 0;
    /* Planned with deployments older than the database's: read them, and
     * plan the same requests anew (pgdeploy.h, THE COPY). */
    bool stale = pt->outcome == PGTURN_ABORTED && strcmp(pt->sqlstate, PGDEPLOY_STALE) == 0;
    if (undecided)
        a->two_rounds_until_ms = pgturn_mono_ms() + PGACTOR_TWO_ROUNDS_MS;
    else if (stale)
        a->deps_stale = true;
    else
        a->counters.commits_failed++;
    bool rerun =
        pt->outcome == PGTURN_ABORTED && (pt->rerunnable || undecided || stale) && l->attempt == 0;
    engine_status st;
    outcome_status(pt, &st);
    if (pt->broken)
        down(a, l, pt->message);
    pgops_free(l->turn);
    l->turn = NULL;
    if (!rerun || l->conn == NULL) {
        if (l->housekeeping)
            housekeeping_done(a, l, HOUSEKEEPING_RETRY_MS);
        if (l->gate)
            gate_done(a, l);
        if (l->relay)
            relay_done(a, l, NULL);
        turn_failed(a, l->list, &st);
        l->list = NULL;
        return;
    }
    for (pgreq *p = l->list; p != NULL; p = p->next) { /* the same requests, planned anew */
        if (stale && !p->completes_done && p->req.op != ENGINE_OP_AWAIT_CALL)
            p->settled = false; /* a refusal by the routes is looked at again */
        if (!p->settled && !p->completes_done) {
            reply_reset(p->reply);
            memset(&p->reply->status, 0, sizeof p->reply->status);
        }
    }
    l->attempt = 1;
    turn_start(a, l);
}

/* Drives every lane's turn as far as it goes without blocking; true when
 * a turn ended (a lane may be free, waiters rung: look again before
 * sleeping). */
static bool lanes_advance(pgactor *a)
{
    bool ended = false;
    for (size_t i = 0; i < PGACTOR_LANES; i++) {
        lane *l = &a->lanes[i];
        while (l->turn != NULL) {
            pgturn *pt = pgops_pgturn(l->turn);
            if (pt->outcome == PGTURN_PENDING && !pgturn_advance(pt)) {
                if (pgturn_mono_ms() < l->deadline_mono_ms)
                    break;
                pgturn_give_up(pt, "no answer from the database within the turn's deadline");
            }
            turn_end(a, l); /* (a re-run starts a new turn on it) */
            a->turn_end_us = pgturn_mono_us();
            ended = true;
        }
    }
    return ended;
}

static lane *free_lane(pgactor *a)
{
    for (size_t i = 0; i < PGACTOR_LANES; i++)
        if (a->lanes[i].conn != NULL && a->lanes[i].turn == NULL)
            return &a->lanes[i];
    return NULL;
}

static bool busy(const pgactor *a)
{
    for (size_t i = 0; i < PGACTOR_LANES; i++)
        if (a->lanes[i].turn != NULL)
            return true;
    return false;
}

/* ---- the thread ---- */

static uint64_t next_instant(const pgactor *a)
{
    uint64_t due = UINT64_MAX;
    for (size_t i = 0; i < a->waiters.n; i++)
        if (a->waiters.v[i]->deadline_ms < due)
            due = a->waiters.v[i]->deadline_ms;
    for (size_t i = 0; i < a->watches.n; i++)
        if (a->watches.v[i].due_ms < due)
            due = a->watches.v[i].due_ms;
    if (!a->hk_running && a->hk_due_ms < due)
        due = a->hk_due_ms;
    if (!a->relay_running && a->push_chans > 0 && a->relay_due_ms < due)
        due = a->relay_due_ms;
    for (size_t i = 0; i < a->flights.n; i++)
        due = min_u64(due, a->flights.v[i].deadline_ms);
    return due;
}

/* Waits for a request, a doorbell, a turn's results, or the next instant
 * (a deadline, a topic's due instant, a reconnect, a turn's deadline). */
static void sleep_a_while(pgactor *a)
{
    int timeout = -1;
    uint64_t due = next_instant(a);
    if (!a->manual && due != UINT64_MAX) {
        uint64_t now = now_ms(a);
        timeout = due <= now ? 0 : due - now > 60000 ? 60000 : (int)(due - now);
    }
    uint64_t m = pgturn_mono_ms();
    struct pollfd fds[2 + PGACTOR_LANES] = {
        {.fd = a->efd, .events = POLLIN},
        {.fd = a->listen.conn ? PQsocket(a->listen.conn) : -1, .events = POLLIN}};
    for (size_t i = 0; i < PGACTOR_LANES; i++) {
        const lane *l = &a->lanes[i];
        uint64_t at = l->turn != NULL   ? l->deadline_mono_ms
                      : l->conn == NULL ? l->reconnect_at_ms
                                        : UINT64_MAX;
        if (a->listen.conn == NULL && l->conn != NULL && l->turn == NULL)
            at =
                a->listen_retry_at_ms > m ? a->listen_retry_at_ms : m; /* the listener's next try */
        if (l->conn != NULL && l->turn == NULL && a->deps.n_draining > 0 && !a->gate_running &&
            a->gate_due_mono_ms < at)
            at = a->gate_due_mono_ms > m ? a->gate_due_mono_ms : m; /* the gate's next turn */
        if (at != UINT64_MAX) {
            int t = at <= m ? 0 : at - m > 60000 ? 60000 : (int)(at - m);
            if (timeout < 0 || t < timeout)
                timeout = t;
        }
        fds[2 + i].fd = -1;
        if (l->turn != NULL && pgops_pgturn(l->turn)->outcome == PGTURN_PENDING) {
            fds[2 + i].fd = PQsocket(l->conn);
            fds[2 + i].events = pgturn_events(pgops_pgturn(l->turn));
        }
    }
    uint64_t silent = pglisten_deadline(&a->listen); /* a silent listener is given up on */
    uint64_t bells = pglisten_send_at(&a->listen);   /* gathered doorbells leave */
    if (bells < silent)
        silent = bells;
    if (silent != UINT64_MAX) {
        int t = silent <= m ? 0 : (int)(silent - m);
        if (timeout < 0 || t < timeout)
            timeout = t;
    }
    (void)poll(fds, 2 + PGACTOR_LANES, timeout);
    uint64_t v;
    if (fds[0].revents & POLLIN)
        (void)!read(a->efd, &v, sizeof v);
}

static void refuse_all(pgactor *a, pgreq *list)
{
    engine_status st;
    char why[400];
    snprintf(why, sizeof why, "the database is unreachable (%s); berthd reconnects by itself",
             a->down_why);
    reply_unavailable(&st, why);
    turn_failed(a, list, &st);
}

/* Up to turn_max_requests queued requests, in order: taken only while a
 * lane is free (or none is up: they are refused at once). */
static pgreq *take_queue(pgactor *a, bool *stopping)
{
    pgreq *head = NULL, *tail = NULL;
    pthread_mutex_lock(&a->mu);
    *stopping = a->stopping;
    if (!a->held && (free_lane(a) != NULL || !any_up(a) || a->stopping)) {
        uint32_t n = 0;
        while (a->q_head != NULL && (n++ < a->o.turn_max_requests || a->stopping)) {
            pgreq *p = a->q_head;
            a->q_head = p->next;
            p->next = NULL;
            p->closed = closed_fetch(a, p);
            if (tail)
                tail->next = p;
            else
                head = p;
            tail = p;
        }
        if (a->q_head == NULL)
            a->q_tail = NULL;
    }
    pthread_mutex_unlock(&a->mu);
    return head;
}

/* A new fetch without completions naming only topics known empty, while
 * the listener is up: it waits (or answers empty) without a transaction. */
static bool known_empty(pgactor *a, const pgreq *p)
{
    const engine_fetch_args *f = &p->req.u.fetch;
    if (p->req.op != ENGINE_OP_FETCH || f->n_completes > 0 || a->listen.conn == NULL ||
        f->n_topics == 0 || a->o.strict_channels) /* (strict: a turn checks its routes) */
        return false;
    for (size_t i = 0; i < f->n_topics; i++) {
        const watch *w = f->topics[i] ? watch_of(a, f->topics[i], false) : NULL;
        if (w == NULL || !w->empty)
            return false;
    }
    return true;
}

/* Cancels are applied and ticks set aside; the rest is returned, in order. */
static pgreq *sort_out(pgactor *a, pgreq *head, uint64_t now, pgreq **ticks, pgreq **tail)
{
    pgreq *list = NULL;
    *tail = NULL;
    for (pgreq *p = head, *next; p != NULL; p = next) {
        next = p->next;
        p->next = NULL;
        p->arrived_ms = now;
        if (p->closed) {
            reply_status(&p->reply->status, ENGINE_CODE_CANCELLED, "the fetch's connection closed");
            a->counters.waits_cancelled++;
            answer(a, p);
        } else if (p->req.op == ENGINE_OP_CANCEL) {
            waits_end(a, now, true, p->req.u.cancel.owner);
            answer(a, p);
        } else if (p->req.op == ENGINE_OP_METRICS && gauges_fresh(a)) {
            metrics(a, p->reply, false);
            answer(a, p);
        } else if (known_empty(a, p)) {
            if (!pgops_fetch_check(&a->o, &a->deps, p))
                answer(a, p);
            else
                park_or_answer(a, p, now);
        } else if (p->req.op == ENGINE_OP_TICK) {
            p->next = *ticks;
            *ticks = p;
        } else {
            if (p->req.op == ENGINE_OP_PUSH_ACK)
                flight_answered(a, p);
            if (*tail)
                (*tail)->next = p;
            else
                list = p;
            *tail = p;
        }
    }
    return list;
}

static void closing(pgactor *a, pgreq *rest)
{
    while (busy(a)) { /* the turns in flight finish and are answered */
        lanes_advance(a);
        if (busy(a))
            sleep_a_while(a);
    }
    engine_status st;
    reply_unavailable(&st, "the engine is closing");
    turn_failed(a, rest, &st);
    for (size_t i = 0; i < a->waiters.n; i++)
        answer_status(a, a->waiters.v[i], &st);
    a->waiters.n = 0;
}

/* THE LOOP's gathering: a turn just ended; while other replicas are
 * heard, the next waits out PGACTOR_GATHER_US (as one lane, no turn is in
 * flight meanwhile). */
static void gather(pgactor *a)
{
    if (busy(a) || a->sibling_mono_ms == 0 ||
        pgturn_mono_ms() - a->sibling_mono_ms > PGACTOR_SIBLINGS_MS)
        return;
    uint64_t until = a->turn_end_us + PGACTOR_GATHER_US, now = pgturn_mono_us();
    if (now < until) {
        struct timespec ts = {0, (long)(until - now) * 1000};
        nanosleep(&ts, NULL);
    }
}

static void *pgactor_main(void *arg)
{
    pgactor *a = arg;
    prctl(PR_SET_NAME, "berth-pg", 0, 0, 0);
    pgreq *ticks = NULL;
    for (;;) {
        if (lanes_advance(a))
            gather(a);
        bool stopping;
        pgreq *head = take_queue(a, &stopping);
        if (stopping) {
            pgreq *tail;
            pgreq *rest = sort_out(a, head, now_ms(a), &ticks, &tail);
            for (pgreq *p = ticks, *next; p != NULL; p = next) {
                next = p->next;
                answer(a, p);
            }
            closing(a, rest);
            return NULL;
        }
        reconnect(a);
        drain_listener(a);
        uint64_t now = now_ms(a);
        waits_end(a, now, false, 0);
        ring_due(a, now);
        flights_expire(a, now);
        pgreq *tail;
        pgreq *list = sort_out(a, head, now, &ticks, &tail);
        lane *l = free_lane(a);
        if (l != NULL)
            take_rung(a, &list, &tail);
        bool hk = l != NULL && !a->hk_running && a->hk_due_ms <= now;
        bool rl = l != NULL && !a->relay_running && a->relay_due_ms <= now && a->push_chans > 0 &&
                  !a->deps_stale;
        bool started = list != NULL || hk || rl;
        if (started && l != NULL) {
            l->list = list;
            l->now_ms = now;
            l->rings = a->rings;
            l->attempt = 0;
            l->housekeeping = hk;
            a->hk_running |= hk;
            if (hk)
                a->hk_due_ms = UINT64_MAX; /* the turn says when the next is due */
            l->relay = rl;
            a->relay_running |= rl;
            if (rl)
                a->relay_due_ms = UINT64_MAX;
            turn_start(a, l);
        } else if (list != NULL) {
            refuse_all(a, list);
        }
        /* The deployments: read again when another replica changed them
         * (the view follows at once, not at the next request), and the
         * gate alone while one drains (pgdeploy.h, THE GATE). */
        lane *g = free_lane(a);
        if (g != NULL && a->deps_stale && !started && pgturn_mono_ms() >= a->deps_retry_mono_ms) {
            if (!deps_reload(a, g))
                a->deps_retry_mono_ms = pgturn_mono_ms() + HOUSEKEEPING_RETRY_MS;
            started = true;
        }
        g = free_lane(a);
        if (g != NULL && a->deps.n_draining > 0 && !a->gate_running && !a->deps_stale &&
            pgturn_mono_ms() >= a->gate_due_mono_ms) {
            g->list = NULL;
            g->now_ms = now;
            g->rings = a->rings;
            g->attempt = 0;
            g->housekeeping = false;
            g->gate = true;
            a->gate_running = true;
            turn_start(a, g);
            started = true;
        }
        /* A turn that ends here freed its lane after the queue was looked
         * at, and may have rung waiters: the loop goes round again rather
         * than sleep on them (nothing else would wake it). */
        bool ended = lanes_advance(a);
        if (ended)
            gather(a);
        if (!busy(a) && ticks != NULL) { /* a tick: every turn it caused has run */
            for (pgreq *p = ticks, *next; p != NULL; p = next) {
                next = p->next;
                answer(a, p);
            }
            ticks = NULL;
            continue;
        }
        if (!started && !ended)
            sleep_a_while(a);
    }
}

/* ---- the backend ---- */

static int pgactor_enqueue(engine *e, const engine_request *req, engine_done_fn done, void *arg)
{
    pgactor *a = (pgactor *)(void *)e;
    pgreq *p = mem_calloc(1, sizeof(*p));
    if (p == NULL || (p->reply = reply_alloc(req->op)) == NULL) {
        free(p);
        return BERTH_ENOMEM;
    }
    p->req = *req;
    p->done = done;
    p->arg = arg;
    pthread_mutex_lock(&a->mu);
    if (a->stopping) {
        pthread_mutex_unlock(&a->mu);
        engine_reply_free(p->reply);
        free(p);
        return BERTH_ECLOSED;
    }
    p->seq = ++a->seq;
    if (req->op == ENGINE_OP_CANCEL && req->u.cancel.owner != 0) {
        size_t k = closed_slot(req->u.cancel.owner);
        a->closed[k].owner = req->u.cancel.owner;
        a->closed[k].seq = p->seq;
    }
    if (a->q_tail)
        a->q_tail->next = p;
    else
        a->q_head = p;
    a->q_tail = p;
    pthread_mutex_unlock(&a->mu);
    uint64_t one = 1;
    (void)!write(a->efd, &one, sizeof one);
    return BERTH_OK;
}

static void pgactor_stop(engine *e)
{
    pgactor *a = (pgactor *)(void *)e;
    pthread_mutex_lock(&a->mu);
    bool join = !a->joined;
    a->stopping = true;
    a->joined = true;
    pthread_mutex_unlock(&a->mu);
    uint64_t one = 1;
    (void)!write(a->efd, &one, sizeof one);
    if (join)
        pthread_join(a->thread, NULL);
}

static void pgactor_free(engine *e)
{
    pgactor *a = (pgactor *)(void *)e;
    for (size_t i = 0; i < PGACTOR_LANES; i++) {
        pgconn_close(a->lanes[i].conn);
        VEC_FREE(&a->lanes[i].chans);
        free(a->lanes[i].chan_names);
    }
    for (size_t i = 0; i < a->flights.n; i++)
        free(a->flights.v[i].topic);
    VEC_FREE(&a->flights);
    pglisten_fini(&a->listen);
    pgstmt_fini(&a->stmts);
    pgdeploy_fini(&a->deps);
    gauges_free(a);
    tcounts_fini(&a->topics);
    for (size_t i = 0; i < a->watches.n; i++)
        free(a->watches.v[i].topic);
    VEC_FREE(&a->watches);
    VEC_FREE(&a->waiters);
    if (a->efd >= 0)
        close(a->efd);
    pthread_mutex_destroy(&a->mu);
    free(a->uri);
    free(a);
}

/* ENGINE_FP_STORE_WRITE: the next n turns that write fail in the
 * database (a statement that divides by zero), keeping nothing.
 * ENGINE_FP_STORE_SYNC: the next n turns with requests lose their
 * connection once COMMIT is on the wire (pgturn's cut_after_commit): kept,
 * answered as in doubt, the lane reconnects. The others have no meaning
 * on PostgreSQL (the embedded store's reads, syncs held, parks). */
static void pgactor_failpoint_set(engine *e, engine_failpoint fp, int n)
{
    pgactor *a = (pgactor *)(void *)e;
    if (fp == ENGINE_FP_STORE_WRITE)
        a->fp_write = n;
    else if (fp == ENGINE_FP_STORE_SYNC)
        a->fp_sync = n;
}

static void pgactor_hold(engine *e, bool hold)
{
    pgactor *a = (pgactor *)(void *)e;
    pthread_mutex_lock(&a->mu);
    a->held = hold;
    pthread_mutex_unlock(&a->mu);
    uint64_t one = 1;
    (void)!write(a->efd, &one, sizeof one);
}

static void pgactor_recovery_get(const engine *e, engine_recovery *out)
{
    *out = ((const pgactor *)(const void *)e)->recovery;
}

static void pgactor_durability(engine *e, engine_durable *out)
{
    pgactor *a = (pgactor *)(void *)e;
    *out = (engine_durable){.turns = a->turns, .appended = a->committed, .synced = a->committed};
}

static const engine_backend pgactor_backend = {
    .enqueue = pgactor_enqueue,
    .stop = pgactor_stop,
    .free = pgactor_free,
    .failpoint_set = pgactor_failpoint_set,
    .hold = pgactor_hold,
    .recovery_get = pgactor_recovery_get,
    .durability = pgactor_durability,
};

/* The bounds berth.submit() (sql/003_submit.sql, 006_deploy.sql) checks a
 * submit made in SQL against, and whether channels are strict: this
 * berthd's, the last to boot's for every replica. */
static int settings_write(PGconn *c, const engine_options *o, char *err, size_t errlen)
{
    char json[512];
    snprintf(json, sizeof json,
             "{\"payload_max_bytes\": %u, \"delay_max_ms\": %" PRIu64
             ", \"priority_default\": %u, \"priority_max\": %u, \"retries\": %u, "
             "\"dedup_horizon_ms\": %" PRIu64 ", \"strict_channels\": %s}",
             o->payload_max_bytes, o->delay_max_ms, o->priority_default, o->priority_max,
             o->retries, o->dedup_horizon_ms, o->strict_channels ? "true" : "false");
    const char *params[1] = {json};
    return pgconn_command(c,
                          "INSERT INTO berth.meta (key, value) VALUES ('settings', $1) "
                          "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                          1, params, "writing berth.meta 'settings'", err, errlen);
}

int pgactor_open(const engine_options *o, engine **out, char *err, size_t errlen)
{
    *out = NULL;
    pgactor *a = mem_calloc(1, sizeof(*a));
    if (a == NULL) {
        snprintf(err, errlen, "out of memory");
        return BERTH_ENOMEM;
    }
    a->front.vt = &pgactor_backend;
    a->o = *o;
    a->o.data_dir = NULL;
    a->o.channels = NULL;
    a->uri = mem_strdup(o->store_uri);
    a->o.store_uri = a->uri;
    a->manual = o->clock.now_ms != NULL;
    a->clock = a->manual ? o->clock : engine_clock_system();
    a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    hist_init(&a->task_latency, HIST_SECONDS);
    hist_init(&a->fetch_wait, HIST_SECONDS);
    hist_init(&a->commit_batch, HIST_SIZES);
    hist_init(&a->fsync, HIST_SECONDS);
    pthread_mutex_init(&a->mu, NULL);
    uint64_t t0 = engine_monotonic_ms();
    PGconn *mig = NULL;
    a->deps_stale = true; /* read before the first turn */
    int rv = a->uri == NULL || a->efd < 0 || tcounts_init(&a->topics, a->o.metrics_topics_max) ||
                     pgdeploy_init(&a->deps) != BERTH_OK
                 ? BERTH_ENOMEM
                 : BERTH_OK;
    if (rv != BERTH_OK)
        snprintf(err, errlen, "out of memory");
    if (rv == BERTH_OK)
        rv = pgconn_open(a->uri, "berthd", PGACTOR_CONNECT_WAIT_MS, &mig, err, errlen);
    if (rv == BERTH_OK)
        rv = pgschema_migrate(mig, NULL, err, errlen);
    if (rv == BERTH_OK)
        rv = settings_write(mig, o, err, errlen);
    pgconn_close(mig);
    if (rv == BERTH_OK)
        rv = pgstmt_load(&a->stmts, err, errlen);
    for (size_t i = 0; i < PGACTOR_LANES && rv == BERTH_OK; i++)
        rv = engine_conn(a, &a->lanes[i], PGACTOR_CONNECT_WAIT_MS, err, errlen);
    if (rv == BERTH_OK)
        rv = pglisten_open(&a->listen, a->uri, PGACTOR_CONNECT_WAIT_MS, err, errlen);
    if (rv == BERTH_OK && pthread_create(&a->thread, NULL, pgactor_main, a) != 0) {
        snprintf(err, errlen, "cannot start the engine thread");
        rv = BERTH_ENOMEM;
    }
    if (rv != BERTH_OK) {
        a->joined = true;
        pgactor_free((engine *)(void *)a);
        return rv;
    }
    a->recovery.store_ms = engine_monotonic_ms() - t0;
    *out = (engine *)(void *)a;
    return BERTH_OK;
}
