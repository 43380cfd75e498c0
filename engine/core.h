/*
 * core.h — the engine's types: the objects it keeps in memory, the turn in
 * flight, and the engine itself. Types only: no function is declared here,
 * so every engine file may include it without depending on another.
 *
 * MEMORY IS DERIVED FROM THE STORE
 *   RocksDB holds the truth. Memory holds what the hot paths need: every
 *   task's lock state and its place in its topic's ready index, every
 *   pending delivery's place in the outbox due index, and the waiting
 *   fetches. Payloads stay on disk beyond the body cache. recover.c
 *   rebuilds memory from the column families at open, again after a
 *   failed turn, which is how a failed turn leaves memory matching disk,
 *   and when a halted engine reopens its store.
 *
 * THREADS
 *   Everything here belongs to the engine thread, except the failpoint
 *   counters (any thread), the histograms (observed on the commit thread
 *   too) and the fetch budget (fetch_inflight, fetch_blocked: the commit
 *   thread gives back what answers held). The actor's queue and the
 *   commit thread's pipeline are opaque here (struct actor in actor.c,
 *   struct committer in commit.c): no handler can reach them.
 */
#ifndef BERTH_ENGINE_CORE_H
#define BERTH_ENGINE_CORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/backend.h"
#include "engine/heap.h"
#include "engine/hist.h"
#include "engine/idtab.h"
#include "engine/table.h"
#include "engine/tcounts.h"
#include "engine/mem.h"
#include "store/keys.h"
#include "store/records.h"
#include "store/store.h"

#define container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

/* After a failed write the relay and timers pause, and requests that
 * would write are answered UNAVAILABLE at once (those that only read
 * still run), for a pause doubling from the first to the last value, so a
 * full disk is not a busy loop. */
#define ENGINE_STORE_BACKOFF_MIN_MS 50
#define ENGINE_STORE_BACKOFF_MAX_MS 2000

struct waiter;

struct deployment;
struct delivery;

/* A push channel's deliveries on their way (relay.c): how many are sent
 * and unanswered, and those waiting for one of them to end, oldest first
 * (out of the due index meanwhile). */
typedef struct push_lane {
    uint32_t inflight;
    struct delivery *head, *tail;
} push_lane;

/* A channel as a deployment declares it (owned by its deployment, which
 * is never freed while the engine runs: pointers to it stay valid). */
typedef struct channel {
    char *name;
    char *transport; /* "pull", or a push receiver's URI */
    push_lane *lane; /* a push channel's; NULL for pull */
    uint64_t reply_max_bytes;
    char **content_types;
    size_t n_content_types;
    struct deployment *dep; /* its declarer */
} channel;

/* A version of a deployment (deploy.c). What it holds is counted as it
 * changes, so the retirement gate (R14) never scans: it retires when
 * held() is zero. e->implicit is the deployment of undeclared topics
 * (number 0): it has no row and never drains. */
typedef struct deployment {
    uint32_t number; /* its row's key; Body.deployment */
    char *id;
    uint32_t version;
    engine_deployment_state state;
    uint64_t created_at_ms;
    uint64_t retired_at_ms;
    channel *chans;
    size_t n_chans;
    uint64_t n_deliveries; /* outbox rows, poisoned ones included */
    uint64_t n_poisoned;
    uint64_t n_tasks; /* task rows, terminal ones included */
    uint64_t n_terminal;
    uint64_t n_backoff;   /* live calls in BACKOFF */
    uint64_t n_retrying;  /* live calls with an attempt left (BACKOFF ones too):
                             they may re-drive into it */
    uint64_t n_instances; /* live calls (each points at its declaration) */
    bool draining_listed; /* in e->draining: the gate looks at it each turn */
    struct deployment *draining_next;
} deployment;

/* Who takes new work for a channel name: at most one LIVE declarer, and
 * how many draining deployments declare it too (e->routes, rebuilt from
 * the deployments whenever one changes state). */
typedef struct route {
    const char *name; /* the key: the name of one of its declarations */
    const channel *live;
    uint32_t n_draining;
} route;

typedef struct wait_link {
    struct waiter *w;
    struct wait_link *prev, *next;
} wait_link;

typedef struct topic {
    char *name; /* owned; the key in e->topics */
    size_t name_len;
    engine_topic_counters *tc; /* its counters in e->tcounts ("_other"'s past the bound) */
    /* Its non-terminal tasks (R5), each in one of two orders: `ready`,
     * those fetchable when last placed, most urgent first (priority, then
     * fetchable instant, then seq); `later`, the others (delayed, backing
     * off, locked) by the instant they become fetchable. A claim first
     * moves the front of `later` that has become fetchable into `ready`
     * (state_topic_front), so a task is fetchable the instant its time
     * comes: nothing sweeps. Both arrays have room for every task of the
     * topic, so a move never allocates. */
    heap ready, later;
    /* For the gauges (metrics): its tasks under a live lock by the lock's
     * end, and those backing off by the backoff's end. Entries whose
     * instant has passed are dropped when the gauges are read (a lock that
     * ran out is a ready task, with nobody to tell). The delayed ones are
     * the tasks never fetched in `later` (a delayed task is in no gauge
     * heap): reading the gauges first moves what has come due out of
     * `later`. */
    heap locked, backoff;
    uint64_t n_later_unfetched;
    uint64_t n_terminal;   /* its terminal tasks (not in ready) */
    uint64_t n_deliveries; /* its outbox rows */
    wait_link *waiters;    /* fetches waiting on it, oldest first */
    wait_link *waiters_tail;
    size_t n_waiters;
    struct topic *watch_prev, *watch_next; /* in e->watched while n_waiters > 0 */
    bool rung;                             /* doorbell rang this turn */
    struct topic *rung_next;
    size_t stats_slot; /* its place in a stats reply being built */
    bool idle_listed;  /* in e->idle: freed at the end of the turn if unused */
    struct topic *idle_next;
} topic;

/* A task's place in its topic's locked or backoff heap, for the gauges
 * (state.c): in one only while it is locked or backing off. */
typedef struct gauge {
    heap_node n;
    heap *in; /* NULL: in neither */
} gauge;

/* What only a task that has been claimed carries: its lock, its failure
 * budget and its last error. Allocated at its first claim (or at load,
 * from its state row) and freed with the task. A task without one was
 * never claimed: no lock, claims and failures 0, retries_left the
 * engine's budget, no error (state.h: state_run, state_task_run). */
typedef struct task_run {
    uint64_t available_at_ms;    /* not fetchable before (its delay, a backoff's end) */
    uint64_t lock_expires_at_ms; /* the lock is live while now < this */
    uint32_t claims;             /* fetches so far */
    uint32_t retries_left;
    uint32_t failures;
    bool has_lock; /* lock_token and worker_id are set */
    uint8_t lock_token[BERTH_ID_LEN];
    char *worker_id;                            /* owned */
    char *err_code, *err_message, *err_details; /* last failure, owned */
    gauge gauge;
} task_run;

typedef struct task {
    /* persisted: tasks CF, Body (immutable) and TaskState */
    uint8_t id[BERTH_ID_LEN];
    topic *topic;
    uint64_t created_at_ms; /* submit accepted */
    uint8_t *body;          /* the encoded Body, owned, while the body cache has room;
                               NULL: read it from the store */
    const channel *chan;    /* its channel's declaration; NULL: the implicit one */
    task_run *run;          /* NULL until it is first claimed */
    uint32_t body_bytes;    /* encoded Body size, for a fetch's byte budget */
    uint32_t priority;      /* lower first (Body.priority) */
    bool has_instance;      /* a call's task: its completion correlates */
    bool terminal;
    /* in memory only */
    bool later;      /* its place is in topic->later, not ->ready */
    bool recent;     /* its body is held as recent (state.c), not kept */
    uint32_t lpos;   /* its entry in e->listing.v */
    heap_node ready; /* in topic->ready or ->later unless terminal; .at = fetchable
                        instant (and .prio = priority in ready); .seq = its sequence
                        (Body.seq: FIFO tiebreak and row key). Until its first claim
                        .at is also its available_at (its delay's end), which
                        then moves into its run (state_task_available_at). */
} task;

typedef struct delivery {
    /* persisted: outbox CF, Body and DeliveryState */
    uint8_t id[BERTH_ID_LEN];
    topic *topic;
    uint64_t seq;
    uint64_t created_at_ms;
    uint32_t attempts; /* failed sink attempts */
    bool poisoned;
    bool has_instance; /* a call's request: its instance */
    uint8_t instance_id[BERTH_ID_LEN];
    const channel *chan;    /* its channel's declaration (Body.deployment); NULL: implicit */
    uint32_t priority;      /* Body.priority, for its task */
    uint64_t not_before_ms; /* Body.not_before_ms: its task's delay, a push's first send */
    char *err_message;      /* last sink failure, owned */
    /* in memory only */
    bool has_state_row;
    heap_node due;   /* in e->outbox unless poisoned or waiting; .at = next attempt, or
                        while in flight the deadline of its answer */
    bool inflight;   /* sent to a push receiver, unanswered */
    bool waiting;    /* in its push lane, for a free slot */
    bool admitted;   /* ... and given one: sent before the others waiting */
    uint64_t flight; /* which send an answer must name */
    struct delivery *wait_prev, *wait_next;
    uint8_t *body; /* encoded Body while fresh, owned */
    size_t body_len;
    bool fresh;       /* submitted this turn: its outbox row is not written yet */
    size_t fresh_idx; /* its slot in e->t.fresh while fresh */
} delivery;

/* A call's instance while it lives (WAITING, BACKOFF), and to the end of
 * the turn that ends it. Ended instances live in the store only (their
 * 'E' rows), for their retention. */
typedef struct instance {
    /* persisted: instances CF, 'L' row (Instance) */
    uint8_t id[BERTH_ID_LEN];
    char *topic;         /* owned */
    const channel *chan; /* its requests' channel (Instance.deployment) */
    engine_instance_state state;
    uint32_t attempt;
    uint64_t created_at_ms;
    bool has_current; /* the attempt's delivery, then task: same id */
    uint8_t current[BERTH_ID_LEN];
    bool has_retry;
    uint64_t timeout_ms;
    uint32_t max_attempts;
    uint64_t initial_backoff_ms;
    uint64_t max_backoff_ms;
    double multiplier;
    char **non_retryable; /* owned */
    size_t n_non_retryable;
    uint8_t *request; /* the request's encoded Body while a re-drive may need it, owned */
    size_t request_len;
    uint8_t *dedup_key; /* its submit_keys row, owned */
    size_t dedup_key_len;
    /* in memory only */
    heap_node timer;       /* in e->timers while it has one; .at = when it fires */
    struct waiter *awaits; /* await_call requests waiting for it */
    bool ended;            /* this turn: its 'E' row is in the batch */
    uint8_t *ended_row;    /* ... and here, encoded, until the turn is written */
    size_t ended_row_len;
} instance;

/* A queued request, from engine_exec() until done(). */
typedef struct pending {
    engine_request req;
    engine_done_fn done;
    void *arg;
    engine_reply *reply;
    struct waiter *waiter; /* set while a fetch waits */
    uint64_t charged;      /* task bodies its answer holds (e->fetch_inflight) */
    uint64_t arrived_ms;   /* when its turn took it (fetch wait metrics) */
    struct pending *next;
} pending;

/* A submit key written this turn, in e->t.keys (or deleted: gone). */
typedef struct turn_key {
    struct turn_key *next;
    bool gone; /* deleted this turn: whatever the store still says, no key */
    uint8_t id[BERTH_ID_LEN];
    size_t len;
    uint8_t key[];
} turn_key;

typedef struct berth_id_bytes {
    uint8_t b[BERTH_ID_LEN];
} berth_id_bytes;

/* A push send staged by the turn (relay.c), made by the commit thread
 * once the turn is durable: the encoded Body and what goes with it, owned. */
typedef struct staged_push {
    uint8_t *body;
    size_t body_len;
    char *transport;
    uint64_t flight;
    uint32_t attempt;
} staged_push;

/* What the turn in flight has done, to answer or undo after its write
 * (turn.h). */
typedef struct turn {
    uint64_t now_ms;
    pending *answered, *answered_tail; /* replies staged this turn */
    VEC(engine_event) events;          /* staged, published after the sync */
    topic *rung;                       /* doorbells rung this turn */
    VEC(delivery *) fresh;             /* submitted this turn, outbox row not yet written */
    VEC(berth_id_bytes) parked;        /* parked from the outbox on disk */
    VEC(instance *) ended;             /* instances ended this turn, freed after it */
    VEC(struct staged_push) pushes;    /* sent once the turn is durable (commit.c) */
    /* Fetches that applied completions and then began to wait this turn:
     * if the turn is undone, so are their completions, and they are
     * answered with its failure rather than left waiting (claim.c). */
    VEC(pending *) fused_waits;
    /* Counted into e->counters once the turn is written (an undone turn
     * counts nothing). */
    struct {
        uint64_t calls, calls_resolved, calls_failed, calls_timed_out, instances_dropped;
    } count;
    table keys; /* submit keys written this turn → their delivery
                   (the store sees them only once the turn is written) */
    struct turn_key *key_list;
    /* The first failure that left the turn half-applied (turn_fail): the
     * turn is undone as a failed write and its requests answered with it. */
    bool failed;
    engine_code fail_code;
    char fail_why[200];
    bool halt; /* turn_halt: answer nothing more; the engine stops serving */
} turn;

/* An entry of the listing order (listing.c), 8 bytes: the task (its
 * sequence is in it), or once the task has gone, its sequence as
 * seq << 1 | 1 (a task's address is even). */
typedef struct list_entry {
    uintptr_t v;
} list_entry;

struct actor;
struct committer;

struct engine {
    struct engine_front front; /* first: engine.h's functions call through it */
    engine_options o;          /* copied; o.channels is not used after open */
    engine_clock clock;
    store *store;
    store_batch *batch;
    store_buf buf; /* encode scratch */

    struct actor *actor;      /* the request queue and the thread (actor.c) */
    struct committer *commit; /* the commit thread (commit.c) */

    /* state: engine thread only */
    idtab tasks;      /* id → task */
    idtab deliveries; /* id → delivery */
    table topics;     /* name → topic */
    /* Deployments (deploy.c): every version known, by number (the
     * implicit one apart), the routes of the channel names that a
     * deployment which is not retired declares, and those draining. */
    VEC(deployment *) deps;
    deployment implicit;
    table routes; /* name → route */
    deployment *draining;
    heap outbox;        /* pending deliveries by next attempt */
    heap waits;         /* waiting fetches and awaits by deadline */
    table owners;       /* owner id (8 bytes) → its waiting requests (wait.c) */
    tcounts tcounts;    /* the topics' counters: they outlive the topics' structs */
    hist task_latency;  /* submit accepted -> completed, seconds */
    hist fetch_wait;    /* a fetch's arrival -> its answer, seconds */
    hist fsync;         /* one store sync, seconds (the commit thread's) */
    hist commit_batch;  /* requests one sync made durable (the commit thread's) */
    table instances;    /* id → live instance */
    heap timers;        /* live instances by their timer (a timeout, a re-drive) */
    uint64_t n_backoff; /* live instances in BACKOFF */
    /* Every task by sequence, for listing (listing.c): entries of tasks
     * that are gone stay, emptied, until tidied; [tidy_wr, tidy_rd) is a
     * hole while a tidy is under way. */
    struct {
        list_entry *v;
        size_t n, cap;
        size_t n_dead;
        size_t tidy_rd, tidy_wr;
        bool tidying;
    } listing;
    /* Calls' request deliveries poisoned, their calls not yet told (the
     * next turn tells them; rebuilt at load from the poisoned deliveries
     * that are a live call's attempt in flight). */
    VEC(berth_id_bytes) calls_poisoned;
    /* Ended instances leave in the order their retention began (the
     * timers family): when the first of them is due to go if known,
     * UINT64_MAX if none, 0 if the store must be read to know; and the key
     * of the last one dropped, where the next read starts (past the
     * tombstones). */
    uint64_t retention_due_ms;
    uint8_t retention_cursor[STORE_RETENTION_KEY_LEN];
    topic *watched; /* topics with waiters */
    topic *idle;    /* topics that may have lost their last user this turn */
    uint64_t next_seq;
    uint64_t flight_seq; /* push sends so far: never reset, so a stale answer never matches */
    /* Task bodies in fetch answers not yet handed over (the commit thread
     * takes them off); a claim that would pass the budget stops and notes
     * where it stood, so the actor does not spin on fronts it cannot take
     * until answers have left (claim.c). */
    atomic_uint_fast64_t fetch_inflight;
    atomic_bool fetch_blocked;
    uint64_t fetch_blocked_at;
    uint64_t n_poisoned;
    uint64_t n_waiters;
    /* The body cache (state.c): bodies kept from park to the task's end
     * while 7/8 of --body-cache-bytes has room, then the most recently
     * parked ones in the last 1/8, oldest out first: */
    uint64_t body_cache_used; /* bytes of bodies kept to the task's end */
    uint64_t recent_used;     /* bytes of bodies held as recent */
    struct {
        berth_id_bytes *v; /* their tasks, oldest first, from head (a ring; some gone) */
        size_t cap, head, n;
    } recent;
    uint8_t rand_pool[4096]; /* CSPRNG output, drawn from in order */
    size_t rand_used;
    uint64_t write_retry_at_ms; /* relay and timers pause until then */
    uint64_t write_backoff_ms;
    bool halted;
    char halt_why[256];    /* what halted it (turn_halt) */
    uint64_t reopen_at_ms; /* while halted: the next try to reopen the store */
    uint64_t reopen_backoff_ms;
    uint64_t syncs_past; /* syncs made before the last reopen */
    turn t;
    engine_stats counters;    /* turns, commits_failed */
    engine_recovery recovery; /* set by engine_open, read-only after */

    atomic_int fp_park; /* ENGINE_FP_PARK: parks left to fail */
};

#endif
