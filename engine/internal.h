/*
 * internal.h — the engine's state, shared by its .c files. Engine thread
 * only, except the request queue (e->mu) and the failpoint counters.
 *
 * MEMORY IS DERIVED FROM THE STORE
 *   RocksDB holds the truth. Memory holds what the hot paths need: every
 *   task's lock state and its place in its topic's ready index, every
 *   pending delivery's place in the outbox due index, and the waiting
 *   fetches. Payloads stay on disk (a claim reads the body). recover.c
 *   rebuilds memory from the column families at open, and again after a
 *   failed write, which is how a failed turn leaves memory matching disk.
 *
 * A TURN (actor.c)
 *   relay (park what came due) → requests → relay (park this turn's
 *   submits, ring doorbells) → wake waiting fetches → expire waits → ONE
 *   write (appended) → hand answers and events to the commit thread, which
 *   syncs and then releases them (commit.c).
 *   Everything a turn changes in memory is written into e->batch by the
 *   same code that changed it; nothing is answered before the sync.
 */
#ifndef BERTH_ENGINE_INTERNAL_H
#define BERTH_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>

#include "engine/engine.h"
#include "engine/heap.h"
#include "engine/table.h"
#include "store/err.h"
#include "store/keys.h"
#include "store/records.h"
#include "store/store.h"

#define container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

/* Input limits that are not operator settings. */
#define ENGINE_WORKER_ID_MAX     128
#define ENGINE_HEADERS_MAX       64
#define ENGINE_HEADER_NAME_MAX   128
#define ENGINE_HEADER_VALUE_MAX  4096
#define ENGINE_CONTENT_TYPE_MAX  256
#define ENGINE_ERROR_CODE_MAX    128
#define ENGINE_ERROR_TEXT_MAX    4096 /* message */
#define ENGINE_ERROR_DETAILS_MAX 65536
#define ENGINE_RESERVED_PREFIX   "berth-"

/* After a failed write the relay and timers pause (requests still run),
 * doubling from the first to the last value, so a full disk is not a busy
 * loop. */
#define ENGINE_STORE_BACKOFF_MIN_MS 50
#define ENGINE_STORE_BACKOFF_MAX_MS 2000

struct waiter;

/* A declared channel (a deep copy of engine_channel). */
typedef struct channel {
    char *name;
    uint64_t reply_max_bytes;
    char **content_types;
    size_t n_content_types;
} channel;

typedef struct wait_link {
    struct waiter *w;
    struct wait_link *prev, *next;
} wait_link;

typedef struct topic {
    char *name; /* owned; the key in e->topics */
    size_t name_len;
    const channel *chan;   /* its declaration, NULL: the defaults */
    heap ready;            /* its non-terminal tasks by fetchable instant (R5) */
    uint64_t n_terminal;   /* its terminal tasks (not in ready) */
    uint64_t n_deliveries; /* its outbox rows */
    wait_link *waiters;    /* fetches waiting on it, oldest first */
    wait_link *waiters_tail;
    size_t n_waiters;
    struct topic *watch_prev, *watch_next; /* in e->watched while n_waiters > 0 */
    bool rung;                             /* doorbell rang this turn */
    struct topic *rung_next;
    bool idle_listed; /* in e->idle: freed at the end of the turn if unused */
    struct topic *idle_next;
} topic;

typedef struct task {
    /* persisted: tasks CF, Body (immutable) and TaskState */
    uint8_t id[BERTH_ID_LEN];
    topic *topic;
    uint64_t seq;                /* FIFO tiebreak (Body.seq) */
    uint64_t created_at_ms;      /* submit accepted */
    uint32_t body_bytes;         /* encoded Body size, for a fetch's byte budget */
    uint8_t *body;               /* the encoded Body, owned, while the body cache has room;
                                    NULL: read it from the store */
    bool has_instance;           /* a call's task: its completion correlates */
    bool recovered;              /* loaded at open: the inbox may hold its key */
    uint64_t available_at_ms;    /* not fetchable before (backoff end) */
    uint64_t lock_expires_at_ms; /* the lock is live while now < this */
    bool has_lock;               /* lock_token and worker_id are set */
    uint8_t lock_token[BERTH_ID_LEN];
    char *worker_id; /* owned */
    uint32_t claims; /* fetches so far */
    uint32_t retries_left;
    uint32_t failures;
    bool terminal;
    char *err_code, *err_message, *err_details; /* last failure, owned */
    /* in memory only */
    heap_node ready; /* in topic->ready unless terminal; .at = fetchable instant */
} task;

typedef struct delivery {
    /* persisted: outbox CF, Body and DeliveryState */
    uint8_t id[BERTH_ID_LEN];
    topic *topic;
    uint64_t seq;
    uint64_t created_at_ms;
    uint32_t attempts; /* failed sink attempts */
    bool poisoned;
    char *err_message; /* last sink failure, owned */
    /* in memory only */
    bool has_state_row;
    heap_node due; /* in e->outbox unless poisoned; .at = next attempt */
    uint8_t *body; /* encoded Body while fresh, owned */
    size_t body_len;
    bool fresh;       /* submitted this turn: its outbox row is not written yet */
    size_t fresh_idx; /* its slot in e->t.fresh while fresh */
} delivery;

/* A queued request, from engine_exec() until done(). */
typedef struct pending {
    engine_request req;
    engine_done_fn done;
    void *arg;
    engine_reply *reply;
    struct waiter *waiter; /* set while a fetch waits */
    struct pending *next;
} pending;

/* A fetch waiting for work: linked into each of its topics, and into the
 * deadline heap. Waiting is data, not a thread. */
typedef struct waiter {
    pending *p;
    topic **topics;
    size_t n_topics;
    wait_link *links; /* one per topic */
    heap_node deadline;
    uint32_t max_tasks;
    uint64_t lock_ms;
} waiter;

/* A submit key written this turn, in e->t.keys. */
typedef struct turn_key {
    struct turn_key *next;
    uint8_t id[BERTH_ID_LEN];
    size_t len;
    uint8_t key[];
} turn_key;

/* What the turn in flight has done, to answer or undo after the write. */
typedef struct turn {
    uint64_t now_ms;
    pending *answered, *answered_tail; /* replies staged this turn */
    engine_event *events;
    size_t n_events, cap_events;
    topic *rung;      /* doorbells rung this turn */
    delivery **fresh; /* submitted this turn, outbox row not yet written */
    size_t n_fresh, cap_fresh;
    uint8_t (*parked)[BERTH_ID_LEN]; /* parked from the outbox on disk */
    size_t n_parked, cap_parked;
    table keys; /* submit keys written this turn → their delivery (the
                   store sees them only once the turn is written) */
    struct turn_key *key_list;
    uint8_t (*evict)[BERTH_ID_LEN]; /* tasks whose body is over the cache budget */
    size_t n_evict, cap_evict;
    bool halt;  /* crash failpoint: commit what is there, then halt */
    bool abort; /* a request failed half-applied: undo the turn as a failed write */
} turn;

/* The commit thread (commit.c). */
typedef struct committer {
    pthread_t thread;
    pthread_mutex_t mu; /* guards the queue and `stopping` */
    pthread_cond_t cv;
    struct sealed *head, *tail; /* turns appended, not yet answered */
    bool stopping;
    bool started;
    pthread_mutex_t sync_mu;       /* one sync at a time */
    atomic_uint_fast64_t turns;    /* turns finished (engine thread writes) */
    atomic_uint_fast64_t appended; /* turns appended (engine thread writes) */
    atomic_uint_fast64_t synced;   /* of those, known durable */
    atomic_uint_fast64_t syncs;    /* store syncs done */
    atomic_bool failed;            /* a sync failed: nothing is durable any more */
    char why[256];                 /* its error, set before `failed` */
} committer;

struct engine {
    engine_options o; /* copied; o.channels is not used after open */
    engine_clock clock;
    store *store;
    store_batch *batch;
    store_buf buf; /* encode scratch */

    pthread_t thread;
    pthread_mutex_t mu; /* guards the queue and `stopping` */
    pthread_cond_t cv;
    pending *q_head, *q_tail;
    bool stopping;
    bool joined; /* the actor thread has been joined */
    bool held;   /* engine_hold(): take no request until released */

    /* state: engine thread only */
    table tasks;      /* id → task */
    table deliveries; /* id → delivery */
    table topics;     /* name → topic */
    table channels;   /* name → channel */
    channel *chans;
    size_t n_chans;
    heap outbox;    /* pending deliveries by next attempt */
    heap waits;     /* waiting fetches by deadline */
    topic *watched; /* topics with waiters */
    topic *idle;    /* topics that may have lost their last user this turn */
    uint64_t next_seq;
    uint64_t n_poisoned;
    uint64_t n_waiters;
    uint64_t body_cache_used; /* bytes of task bodies held in memory */
    uint8_t rand_pool[4096];  /* CSPRNG output, drawn from in order */
    size_t rand_used;
    uint64_t write_retry_at_ms; /* relay and timers pause until then */
    uint64_t write_backoff_ms;
    bool halted;
    turn t;
    engine_stats counters; /* turns, commits_failed */
    committer commit;

    atomic_int fp_park;
    atomic_int fp_crash;
};

/* ---- actor.c ---- */
uint64_t engine_now(engine *e);
/* Stages p's reply to be answered after this turn's write. */
void turn_answer(engine *e, pending *p);
/* Stages an event (its error strings are copied). */
void turn_event(engine *e, engine_event_kind kind, const topic *t, const uint8_t id[BERTH_ID_LEN],
                const engine_error *err, uint32_t retries_left);
/* Frees the strings the events own. */
void events_free(engine_event *v, size_t n);
/* Rings t's doorbell: its waiting fetches look again this turn (R7). */
void doorbell_ring(engine *e, topic *t);
bool failpoint_take(atomic_int *n);

/* ---- commit.c: the commit thread ---- */
int commit_start(engine *e);
/* Answers every turn handed over (syncing first), then stops the thread. */
void commit_stop(engine *e);
/* The turn's batch was appended to the store. */
void commit_appended(engine *e);
/* Hands the turn's staged answers (and its events, with_events) to the
 * commit thread, which releases them once every append so far is durable.
 * The turn's lists are empty after. */
void commit_turn(engine *e, bool with_events);
/* A sync failed: the engine must halt. */
bool commit_failed(engine *e);
const char *commit_failure(engine *e);

/* ---- reply.c ---- */
engine_reply *reply_alloc(engine_op op);
/* Memory released with the reply. NULL on allocation failure. */
void *reply_mem(engine_reply *r, size_t n);
char *reply_strdup(engine_reply *r, const char *s);
/* A store_body whose decoded memory is released with the reply. */
store_body *reply_body(engine_reply *r);
/* Releases everything a reply holds except the reply itself, keeping op. */
void reply_reset(engine_reply *r);
__attribute__((format(printf, 3, 4))) void status_set(engine_status *st, engine_code code,
                                                      const char *fmt, ...);
/* R6: INVALID_ARGUMENT naming the field, the value sent and the ceiling. */
void status_over_ceiling(engine_status *st, const char *field, uint64_t value, uint64_t limit);
void status_unavailable(engine_status *st, const char *what);

/* ---- check.c: input validation ---- */
bool check_topic(const char *s, const char *field, engine_status *st);
bool check_headers(const engine_header *h, size_t n, const char *field, engine_status *st);
bool check_text(const char *s, size_t max, bool required, const char *field, engine_status *st);
bool check_error(const engine_error *err, engine_status *st);
/* A bound of R6: omitted → default; 0 when zero_ok is false, or over the
 * ceiling → INVALID_ARGUMENT. */
bool check_bound(bool has, uint64_t value, uint64_t def, uint64_t max, bool zero_ok,
                 const char *field, uint64_t *out, engine_status *st);
/* A pause for the n-th failure (n >= 1): initial doubling to max, cut by
 * up to jitter. */
uint64_t engine_backoff(uint64_t initial_ms, uint64_t max_ms, uint32_t n, double jitter);

/* ---- state.c: objects, their rows and indexes ---- */
topic *topic_get(engine *e, const char *name, size_t len, bool create);
/* A topic lives while a task, a delivery or a waiting fetch names it:
 * topic_maybe_idle() notes one that may have lost its last; the end of
 * the turn frees it if so (never sooner: the turn's events name it).
 * topics_reap(e, true) looks at every topic (after a reload). */
void topic_maybe_idle(engine *e, topic *tp);
void topics_reap(engine *e, bool all);
const channel *channel_find(engine *e, const char *name);
/* The instant t becomes fetchable: max(available_at, lock_expires_at). */
static inline uint64_t task_fetchable_at(const task *t)
{
    return t->available_at_ms > t->lock_expires_at_ms ? t->available_at_ms : t->lock_expires_at_ms;
}
/* Re-keys t in its topic's ready index after its times changed. */
void task_reindex(engine *e, task *t);
/* Writes t's TaskState row into the turn's batch. */
int task_put_state(engine *e, task *t);
/* Deletes t's rows in the batch and frees it. */
void task_delete(engine *e, task *t);
/* A task as the pull sink parks it: ready since created_at_ms, the whole
 * failure budget, never claimed, not yet in any index or table. */
task *task_new(engine *e, const uint8_t id[BERTH_ID_LEN], topic *tp, uint64_t seq,
               uint64_t created_at_ms, size_t body_bytes);
/* Keeps t's encoded body in memory: takes `owned` (malloc'd, len bytes) or
 * else copies `bytes`. Past the cache budget a body is kept to the end of
 * the turn (until then the store has not seen it) and dropped after. */
void task_keep_body(engine *e, task *t, uint8_t *owned, const void *bytes, size_t len);
/* Drops the bodies kept past the budget this turn (after its write). */
void task_evict_bodies(engine *e);
/* Decodes t's body, from memory or from the store (seeing the batch). */
int task_read_body(engine *e, task *t, store_body *out);
/* Fresh random bytes from libsodium's CSPRNG, drawn in blocks (one
 * system call per 4 KiB rather than per id). */
void engine_random(engine *e, void *out, size_t n);
void task_set_error(task *t, const engine_error *err);
char *strdup_or_null(const char *s);
void task_free(engine *e, task *t);
task *task_find(engine *e, const char *id_str, const char *field, engine_status *st);
int delivery_put_state(engine *e, delivery *d);
void delivery_free(delivery *d);
int incident_put(engine *e, int kind, const uint8_t subject[BERTH_ID_LEN], const topic *t,
                 const char *code, const char *message);
void state_check(engine *e); /* whole-state invariants (BERTH_CHECKS) */

/* ---- recover.c ---- */
int state_load(engine *e, char *err, size_t errlen);
void state_clear(engine *e);

/* ---- submit.c ---- */
void op_submit(engine *e, pending *p);
void op_submit_batch(engine *e, pending *p);

/* ---- relay.c: the outbox relay and its sinks ---- */
void relay_run(engine *e);
/* Writes the outbox rows of deliveries still fresh at the end of a turn. */
void relay_flush_fresh(engine *e);
/* After a failed write: the parks of that turn count as failed attempts. */
void relay_parks_failed(engine *e, const uint8_t (*ids)[BERTH_ID_LEN], size_t n, const char *why);
void op_retry_delivery(engine *e, pending *p);

/* ---- claim.c: fetch, waiting fetches, doorbells ---- */
void op_fetch(engine *e, pending *p);
void claim_wake(engine *e);
void claim_expire(engine *e);
/* Earliest instant a wait ends or a watched topic's front becomes
 * fetchable; UINT64_MAX if none. */
uint64_t claim_next_due(engine *e);
/* Answers every waiting fetch with st (closing). */
void claim_abort_all(engine *e, engine_code code, const char *why);

/* ---- guard.c: lock-guarded requests ---- */
void op_complete(engine *e, pending *p);
void op_complete_batch(engine *e, pending *p);
void op_fail(engine *e, pending *p);
void op_refuse(engine *e, pending *p);
void op_extend_lock(engine *e, pending *p);
void op_release(engine *e, pending *p);

/* ---- intake.c: the one path for inbound messages ---- */
typedef struct inbound {
    const uint8_t *key; /* idempotency key (a task's: store_delivery_key) */
    size_t key_len;
    topic *topic;
    const uint8_t *payload;
    size_t payload_len;
    const char *content_type;
    const engine_header *headers; /* set by the sender: never reserved */
    size_t n_headers;
    const store_body *parked; /* the parked delivery: correlation headers, or NULL
                                 for a task that is not a call */
    bool maybe_seen;          /* the key may be in the inbox already: look (dedup) */
} inbound;
/* 0: accepted (*duplicate when inbox dedup absorbed it). Otherwise the
 * refusal is in st, with its engine code and retryable flag (R10). */
int intake_dispatch(engine *e, const inbound *in, engine_status *st, bool *duplicate);
/* Writes the accepted message's key to the inbox, for dedup. Needed only
 * when its source outlives the batch and may offer it again: a task row
 * deleted in the same batch cannot, and a later completion of it finds no
 * task at all. */
void intake_remember(engine *e, const inbound *in);

/* ---- admin.c ---- */
void op_get_task(engine *e, pending *p);
void op_retry_terminal(engine *e, pending *p);
void op_discard_terminal(engine *e, pending *p);
void op_list_incidents(engine *e, pending *p);
void op_stats(engine *e, pending *p);

#endif
