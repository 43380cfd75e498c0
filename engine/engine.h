/*
 * engine.h — berth's engine: the whole task lifecycle behind one actor.
 *
 * WHAT IT IS
 *   engine_open() opens the store, rebuilds the in-memory indexes from it
 *   and starts the actor thread, the only code that mutates state or
 *   writes the store. Callers hand it requests with engine_exec(); each
 *   turn of the actor drains many requests, applies them, runs the outbox
 *   relay and writes ONE batch. A commit thread syncs the store once for
 *   every turn written meanwhile (group commit) and only then answers
 *   their requests, while the actor goes on with the next turns. A turn
 *   whose write fails answers all of its requests UNAVAILABLE (retryable)
 *   and reloads memory from the store, so memory never disagrees with
 *   disk. A failed sync halts the engine: it answers every request
 *   UNAVAILABLE and reopens its store by itself, as a restart would
 *   (ENGINE_REOPEN_BACKOFF_MIN_MS, ENGINE_FP_STORE_SYNC).
 *
 *   The engine knows nothing of nng or of protobuf requests: the gateway
 *   maps the wire onto engine_request / engine_reply, and tests drive it in
 *   process.
 *
 * FILES, AND WHO CALLS WHOM
 *   actor.c is the engine's thread and engine.h's functions: the queue,
 *   sleeping, running a turn. A turn hands each request to its handler
 *   (submit, claim, guard, admin, relay, calls, deploy) and then the turn
 *   to the commit thread (commit); at open, after a failed turn and at a
 *   reopen, memory is rebuilt from the store (recover). Below the
 *   handlers, each calling only down: intake -> instance -> wait ->
 *   state -> turn -> reply -> mem. deploy also keeps the routes and the
 *   retirement gate; listing, the operator's order of tasks; options.c,
 *   engine_options' defaults and checks. rules holds the decisions the
 *   handlers take that need no memory state (validation, R8's verdicts, a
 *   failure's arithmetic, intake's checks and correlation, a call's failed
 *   attempt, the shape of a task's or a call's answer), on plain views.
 *   core.h holds the types only; check, heap, idtab, table, hist, clock,
 *   utf8 and fault are tools that call (almost) nothing.
 *
 *   Calls go one way only: no cycle. Every function is declared in the
 *   header of the file that defines it, so a call needs an include, and
 *   the includes are the map of who calls whom (X.c and X.h are module
 *   X). Read each line below as "this module -> the modules it
 *   includes"; a module may take two lines, and a leaf says "(none)".
 *   The map lists every include between engine modules and nothing more:
 *   tools/check-engine.sh (ctest engine_layers) fails on an include the
 *   map lacks, on an edge of the map that no include makes, and on a
 *   cycle.
 *
 *   include map begin
 *     front    -> actor backend engine
 *     backend  -> engine
 *     actor    -> backend engine
 *     actor    -> submit claim guard admin relay calls deploy commit recover
 *     actor    -> instance listing wait state turn reply core
 *     submit   -> deploy instance rules check state turn reply core
 *     claim    -> deploy guard wait rules state turn reply core
 *     guard    -> intake rules check state turn reply core
 *     admin    -> deploy commit instance listing check rules state turn reply core
 *     relay    -> deploy intake instance listing fault check rules state turn reply core
 *     calls    -> instance wait rules turn reply core
 *     recover  -> deploy instance listing wait state reply core
 *     deploy   -> rules check state turn reply core
 *     commit   -> check turn reply core
 *     intake   -> instance rules core
 *     instance -> wait rules check state turn reply core
 *     wait     -> rules state turn reply core
 *     state    -> listing rules turn reply core
 *     listing  -> rules core
 *     turn     -> reply core
 *     rules    -> check reply engine
 *     options  -> check
 *     check    -> reply utf8 engine
 *     reply    -> mem utf8 engine
 *     core     -> backend heap hist idtab tcounts table mem engine
 *     tcounts  -> reply table mem engine
 *     heap     -> mem
 *     idtab    -> mem
 *     table    -> mem
 *     hist     -> engine
 *     mem      -> engine
 *     engine   -> clock
 *     clock    -> (none)
 *     utf8     -> (none)
 *     fault    -> (none)
 *   include map end
 *
 *   Nothing below the actor sees its queue or its threads, and the commit
 *   thread wakes the actor through a callback it was given.
 *
 * OWNERSHIP
 *   engine_exec() borrows the request: every byte it points to must stay
 *   valid until done() is called. done() is called EXACTLY ONCE, on the
 *   engine's commit thread (on the actor thread for what engine_stop()
 *   answers, for a turn that found no memory to hand over, and while a
 *   halted engine has no store), and
 *   receives ownership of the reply: free it with engine_reply_free() on
 *   any thread. done() must not block and must not call
 *   engine_exec_sync() (it runs on the thread that would answer it).
 *
 * TIME
 *   All times are Unix milliseconds from the injected engine_clock.
 */
#ifndef BERTH_ENGINE_ENGINE_H
#define BERTH_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/clock.h"
#include "store/keys.h"

typedef struct engine engine;

/* Status codes: gRPC's canonical numbering (proto/berth/v1 Code). */
typedef enum engine_code {
    ENGINE_CODE_OK = 0,
    ENGINE_CODE_CANCELLED = 1,
    ENGINE_CODE_INVALID_ARGUMENT = 3,
    ENGINE_CODE_NOT_FOUND = 5,
    ENGINE_CODE_RESOURCE_EXHAUSTED = 8,
    ENGINE_CODE_FAILED_PRECONDITION = 9,
    ENGINE_CODE_ABORTED = 10,
    ENGINE_CODE_UNIMPLEMENTED = 12,
    ENGINE_CODE_INTERNAL = 13,
    ENGINE_CODE_UNAVAILABLE = 14,
    ENGINE_CODE_UNAUTHENTICATED = 16,
} engine_code;

/* Why a lock-guarded request matched nothing (R8); proto Status.Verdict. */
typedef enum engine_verdict {
    ENGINE_VERDICT_NONE = 0,
    ENGINE_VERDICT_LOCK_LOST = 1, /* expired or released: fetch fresh work */
    ENGINE_VERDICT_LOCK_HELD = 2, /* another claim holds it: not yours */
    ENGINE_VERDICT_TERMINAL = 3,  /* failure budget spent: stop for good */
    ENGINE_VERDICT_NOT_FOUND = 4, /* no such task: it is gone */
} engine_verdict;

/* Engine codes carried by intake refusals (R10) and call replies. */
#define ENGINE_EC_VALIDATION_REJECTED "VALIDATION_REJECTED" /* never helps to retry */
#define ENGINE_EC_ENGINE_UNAVAILABLE  "ENGINE_UNAVAILABLE"  /* may help later */
#define ENGINE_EC_INTERNAL            "ENGINE_INTERNAL" /* a fault in berth: retrying will not help */
/* A call's reply arrived while the call backs off between attempts: the
 * next attempt's reply will resolve it; this one never will. */
#define ENGINE_EC_RETRY_PENDING "RETRY_PENDING"
/* Why a call's instance FAILED (its error.code). */
#define ENGINE_EC_TIMEOUT           "TIMEOUT"           /* every attempt timed out */
#define ENGINE_EC_DELIVERY_POISONED "DELIVERY_POISONED" /* its request could not be delivered */
#define ENGINE_EC_DISCARDED         "DISCARDED"         /* an operator discarded its task */

#define ENGINE_ID_STR (BERTH_ID_STR_LEN + 1) /* printable id with its NUL */

/* Deployments: the id the channels given at open are deployed under, and
 * the bounds of a deploy request. */
#define ENGINE_BOOT_DEPLOYMENT     "boot"
#define ENGINE_DEPLOYMENT_ID_MAX   64
#define ENGINE_DEPLOY_CHANNELS_MAX 256
#define ENGINE_CHANNEL_TYPES_MAX   32
#define ENGINE_DEPLOYMENTS_MAX     1000 /* versions kept, retired ones included */

/* Reserved headers (R10: no producer or worker can set a "berth-" header)
 * that a call's task carries: its instance id and the call's attempt. */
#define ENGINE_HEADER_INSTANCE "berth-instance-id"
#define ENGINE_HEADER_ATTEMPT  "berth-attempt"

typedef struct engine_status {
    engine_code code;
    engine_verdict verdict;
    const char *engine_code; /* static string (ENGINE_EC_*), or NULL */
    bool retryable;
    bool has_limit; /* a bound was exceeded: field and limit name it */
    uint64_t limit;
    char field[64]; /* the offending request field, "" if none */
    char message[256];
} engine_status;

typedef struct engine_header {
    const char *name;
    const char *value;
} engine_header;

typedef struct engine_error {
    const char *code; /* any may be NULL */
    const char *message;
    const char *details;
} engine_error;

/* ---- requests (all pointers borrowed until done() runs) ---- */

typedef enum engine_op {
    ENGINE_OP_SUBMIT = 1,
    ENGINE_OP_SUBMIT_BATCH,
    ENGINE_OP_FETCH,
    ENGINE_OP_COMPLETE,
    ENGINE_OP_COMPLETE_BATCH,
    ENGINE_OP_FAIL,
    ENGINE_OP_REFUSE,
    ENGINE_OP_EXTEND_LOCK,
    ENGINE_OP_RELEASE,
    ENGINE_OP_CALL,
    ENGINE_OP_AWAIT_CALL,
    ENGINE_OP_GET_TASK,
    ENGINE_OP_LIST_TASKS,
    ENGINE_OP_RETRY_TERMINAL,
    ENGINE_OP_DISCARD_TERMINAL,
    ENGINE_OP_RETRY_DELIVERY,
    ENGINE_OP_LIST_INCIDENTS,
    ENGINE_OP_STATS,
    ENGINE_OP_CHECKPOINT,       /* a consistent copy of the store in a new directory */
    ENGINE_OP_METRICS,          /* counters, gauges and histograms: no scan */
    ENGINE_OP_DEPLOY,           /* a new version of a deployment, LIVE */
    ENGINE_OP_RETIRE,           /* its LIVE version drains, then retires */
    ENGINE_OP_LIST_DEPLOYMENTS, /* every version known, with what it holds */
    ENGINE_OP_PUSH_ACK,         /* a push receiver's answer (engine_push_fn) */
    ENGINE_OP_TICK,             /* run a turn now (after moving a manual clock) */
    ENGINE_OP_CANCEL,           /* engine_cancel(): not queued by engine_exec() */
} engine_op;

typedef struct engine_submit_args {
    const char *topic;
    const uint8_t *payload;
    size_t payload_len;
    const engine_header *headers;
    size_t n_headers;
    const char *content_type;    /* NULL: none */
    const char *idempotency_key; /* NULL: no producer dedup */
    /* When: not fetchable before not_before_ms (Unix ms), or delay_ms after
     * acceptance; not both; at most delay_max_ms ahead. */
    bool has_not_before_ms;
    uint64_t not_before_ms;
    bool has_delay_ms;
    uint64_t delay_ms;
    bool has_priority; /* omitted: priority_default; at most priority_max */
    uint32_t priority;
} engine_submit_args;

/* A call's own retry policy (the second budget, engine/README.md, "Calls"). Omitted
 * fields take the defaults: max_attempts 1, the operator's backoff, a
 * multiplier of 2. */
typedef struct engine_retry_policy {
    bool has_timeout_ms; /* required, > 0, at most call_timeout_max_ms */
    uint64_t timeout_ms;
    bool has_max_attempts;
    uint32_t max_attempts;
    bool has_initial_backoff_ms;
    uint64_t initial_backoff_ms;
    bool has_max_backoff_ms;
    uint64_t max_backoff_ms;
    bool has_multiplier;
    double multiplier;
    const char *const *non_retryable_codes;
    size_t n_non_retryable_codes;
} engine_retry_policy;

typedef struct engine_call_args {
    engine_submit_args request;       /* as a submit's; the key is the call's own */
    const engine_retry_policy *retry; /* NULL: no timeout, one attempt */
} engine_call_args;

typedef struct engine_await_args {
    const char *instance_id;
    bool has_wait_ms; /* omitted: the fetch wait default; 0: answer at once */
    uint64_t wait_ms;
} engine_await_args;

typedef struct engine_fetch_args {
    const char *worker_id;
    const char *const *topics;
    size_t n_topics;
    bool has_max_tasks; /* omitted bounds take the operator default */
    uint32_t max_tasks;
    bool has_lock_ms;
    uint64_t lock_ms;
    bool has_wait_ms; /* wait_ms 0: answer at once */
    uint64_t wait_ms;
    /* Completions applied before the claim, in the same turn (at most
     * batch_max); their statuses are the reply's statuses, in order. */
    const struct engine_complete_args *completes;
    size_t n_completes;
} engine_fetch_args;

/* What every lock-guarded request names: it matches only the live lock. */
typedef struct engine_guard {
    const char *task_id;
    const char *worker_id;
    const char *lock_token;
} engine_guard;

typedef struct engine_result {
    const uint8_t *payload;
    size_t payload_len;
    const char *content_type; /* NULL: none */
    const engine_header *headers;
    size_t n_headers;
} engine_result;

typedef struct engine_complete_args {
    engine_guard guard;
    const engine_result *result; /* NULL: re-deliver the original payload */
} engine_complete_args;

typedef struct engine_fail_args {
    engine_guard guard;
    engine_error error;
    bool has_retry_in_ms; /* omitted: the backoff curve */
    uint64_t retry_in_ms;
    bool has_retries_left; /* omitted: one less than before */
    uint32_t retries_left;
} engine_fail_args;

typedef struct engine_refuse_args {
    engine_guard guard;
    engine_error error;
} engine_refuse_args;

typedef struct engine_extend_args {
    engine_guard guard;
    bool has_lock_ms; /* from now; omitted: the default lock */
    uint64_t lock_ms;
} engine_extend_args;

typedef enum engine_task_state {
    ENGINE_TASK_READY = 1,
    ENGINE_TASK_LOCKED = 2,
    ENGINE_TASK_BACKOFF = 3,
    ENGINE_TASK_TERMINAL = 4,
    ENGINE_TASK_DELAYED = 5, /* never fetched, and its delay has not ended */
} engine_task_state;

typedef struct engine_request {
    engine_op op;
    /* Who sent it (a connection: never reused, never 0), or 0 for nobody
     * in particular. engine_cancel(owner) ends its waiting requests; a
     * fetch waits only while its owner has fewer than waits_per_owner_max
     * waiting. */
    uint64_t owner;
    union {
        engine_submit_args submit;
        engine_call_args call;
        engine_await_args await_call;
        struct {
            const engine_submit_args *items;
            size_t n;
        } submit_batch;
        engine_fetch_args fetch;
        engine_complete_args complete;
        struct {
            const engine_complete_args *items;
            size_t n;
        } complete_batch;
        engine_fail_args fail;
        engine_refuse_args refuse;
        engine_extend_args extend;
        engine_guard release;
        struct {
            const char *id;
        } get_task, discard_terminal, retry_delivery;
        struct {
            const char *dir; /* absolute, not yet there */
        } checkpoint;
        struct {
            const char *id;
            bool has_retries; /* omitted: the operator's failure budget */
            uint32_t retries;
        } retry_terminal;
        struct {
            uint32_t limit;       /* 0: the batch default */
            const char *after_id; /* NULL: from the first; else those after it */
            bool open_only;       /* only the open ones: a page may come back short
                                     (a bounded look at the records): follow its
                                     next_incident */
        } list_incidents;
        struct {
            const char *topic;       /* NULL: every topic */
            engine_task_state state; /* 0: every state */
            uint32_t limit;          /* 0: the batch default */
            const char *after;       /* NULL: from the first; else a page's `next`, or
                                        the id of a task that is still there */
        } list_tasks;
        struct {
            uint64_t owner;
        } cancel;
        struct {
            const char *id;
            const struct engine_channel *channels;
            size_t n_channels;
        } deploy;
        struct {
            const char *id;
        } retire;
        struct engine_push_ack {
            const char *id;  /* the delivery's, as engine_push_delivery gave it */
            uint64_t flight; /* ... and its flight: an answer to an older send is ignored */
            int outcome;     /* ENGINE_PUSH_* */
            engine_error error;
            const engine_result *result; /* DELIVERED: a call's result, or NULL */
        } push_ack;
    } u;
} engine_request;

/* ---- replies (owned by the receiver of done()) ---- */

typedef struct engine_submitted {
    char id[ENGINE_ID_STR];
    bool duplicate; /* the idempotency key matched an earlier submit */
} engine_submitted;

typedef enum engine_instance_state {
    ENGINE_INSTANCE_WAITING = 1,  /* an attempt is on its way or being worked */
    ENGINE_INSTANCE_BACKOFF = 2,  /* an attempt timed out; the next one waits */
    ENGINE_INSTANCE_RESOLVED = 3, /* a worker answered: a result, or a refusal */
    ENGINE_INSTANCE_FAILED = 4,   /* TIMEOUT, DELIVERY_POISONED or DISCARDED */
} engine_instance_state;

/* A call as its caller sees it. */
typedef struct engine_instance {
    char id[ENGINE_ID_STR];
    engine_instance_state state;
    uint32_t attempt;
    bool has_result; /* RESOLVED by a completion */
    engine_result result;
    bool has_error; /* RESOLVED by a refusal, or FAILED */
    engine_error error;
    uint64_t created_at_ms;
    uint64_t resolved_at_ms; /* 0 while it waits */
} engine_instance;

typedef struct engine_task {
    char id[ENGINE_ID_STR];
    const char *topic;
    const uint8_t *payload;
    size_t payload_len;
    const engine_header *headers;
    size_t n_headers;
    const char *content_type;        /* NULL: none */
    char instance_id[ENGINE_ID_STR]; /* "" for a task that is not a call */
    uint32_t attempt;                /* 1 on the first fetch */
    uint32_t retries_left;
    char lock_token[ENGINE_ID_STR];
    uint64_t lock_expires_at_ms;
    uint64_t created_at_ms;
    uint32_t priority;
    uint64_t available_at_ms; /* fetchable since: its delay's or backoff's end */
} engine_task;

typedef struct engine_task_info {
    char id[ENGINE_ID_STR];
    const char *topic;
    engine_task_state state;
    const char *worker_id; /* the last claim's; NULL if never claimed */
    uint64_t lock_expires_at_ms;
    uint64_t available_at_ms;
    uint32_t attempt;
    uint32_t retries_left;
    uint32_t failures;
    engine_error last_error;
    uint64_t created_at_ms;
    size_t payload_bytes;
    uint32_t priority;
    /* GET_TASK only (a listing leaves them empty): what the task carries,
     * its payload cut at ENGINE_TASK_INFO_PAYLOAD_MAX bytes (payload_bytes
     * is its whole size). Never the lock token. */
    const engine_header *headers;
    size_t n_headers;
    const char *content_type; /* NULL: none */
    const uint8_t *payload;
    size_t payload_shown;
} engine_task_info;

/* GET_TASK shows at most this much of a payload. */
#define ENGINE_TASK_INFO_PAYLOAD_MAX 4096

typedef struct engine_incident {
    char id[ENGINE_ID_STR];
    int kind; /* STORE_INCIDENT_* of store/records.h */
    char subject_id[ENGINE_ID_STR];
    const char *topic;
    engine_error error;
    uint64_t at_ms;
    /* Its subject is still stuck as it recorded: the task terminal, the
     * delivery poisoned (a RESULT_REFUSED never is: its call goes on by its
     * own policy). A retry or a discard closes it; the record stays. (A
     * task made terminal twice has two records: both open while it is.) */
    bool open;
} engine_incident;

typedef struct engine_stats {
    uint64_t tasks;    /* task rows, terminal ones included */
    uint64_t ready;    /* fetchable now */
    uint64_t locked;   /* held by a live lock */
    uint64_t backoff;  /* waiting out a failure's pause */
    uint64_t delayed;  /* never fetched, not fetchable yet */
    uint64_t terminal; /* failure budget spent; kept for an operator */
    uint64_t outbox_pending;
    uint64_t poisoned;
    uint64_t waiting_fetches;
    uint64_t topics; /* topics in memory: each named by a task, a delivery or a wait */
    uint64_t turns;  /* turns that committed a write */
    uint64_t syncs;  /* store syncs (one serves every turn written before it) */
    uint64_t commits_failed;
    uint64_t waits_cancelled;   /* waiting fetches ended by engine_cancel() */
    uint64_t waits_refused;     /* fetches answered at once: too many waiting */
    uint64_t halts;             /* the store failed under the engine: it stopped serving */
    uint64_t reopens;           /* ... and came back, the store reopened and reloaded */
    uint64_t instances_waiting; /* calls in flight: WAITING */
    uint64_t instances_backoff; /* ... and BACKOFF */
    uint64_t calls;             /* calls accepted (duplicates not counted) */
    uint64_t calls_resolved;    /* calls ended RESOLVED */
    uint64_t calls_failed;      /* calls ended FAILED */
    uint64_t calls_timed_out;   /* attempts whose timeout fired */
    uint64_t instances_dropped; /* ended instances dropped after their retention */
    uint64_t deployments_live;  /* deployment versions by state */
    uint64_t deployments_draining;
    uint64_t deployments_retired;
    uint64_t body_reads; /* task bodies read back from the store, not the body cache */
} engine_stats;

/* A histogram as exported: upper bounds, counts per bucket (not summed;
 * the last is over every bound), and the sum of what was observed. */
#define ENGINE_HIST_BUCKETS_MAX 20
typedef struct engine_histogram {
    size_t n_bounds;
    double bounds[ENGINE_HIST_BUCKETS_MAX];
    uint64_t counts[ENGINE_HIST_BUCKETS_MAX + 1];
    uint64_t count;
    double sum;
} engine_histogram;

/* Counters of one topic since the engine opened (never a scan). Past
 * metrics_topics_max topics, the rest share the topic "_other". */
typedef struct engine_topic_counters {
    const char *topic;
    uint64_t submitted, fetched, completed, failed, terminal, refused;
    uint64_t delivered, retried, poisoned, rejected; /* the relay's outcomes on its channel */
} engine_topic_counters;

/* What /metrics exports (ENGINE_OP_METRICS): r->stats without its scanned
 * counts, the topics' counters and the histograms. */
typedef struct engine_metrics {
    engine_topic_counters *topics;
    size_t n_topics;
    engine_histogram task_latency; /* submit accepted -> completion, seconds */
    engine_histogram fetch_wait;   /* a fetch's arrival -> its answer, seconds */
    engine_histogram commit_batch; /* requests one sync made durable */
    engine_histogram fsync;        /* one sync of the store, seconds */
    /* The gauges of tasks and calls (stats' ready ... terminal, topic
     * stats, instances) are read from a database other replicas share, at
     * most ENGINE_GAUGES_MAX_AGE_MS old: the same on every replica. */
    bool shared;
} engine_metrics;

/* On a shared store (PostgreSQL), METRICS' gauges are at most this old. */
#define ENGINE_GAUGES_MAX_AGE_MS 1000

typedef enum engine_deployment_state {
    ENGINE_DEPLOYMENT_LIVE = 1,     /* new submits to its channels go to it */
    ENGINE_DEPLOYMENT_DRAINING = 2, /* takes nothing new; serves what it holds */
    ENGINE_DEPLOYMENT_RETIRED = 3,  /* holds nothing pending (the gate, R14) */
} engine_deployment_state;

/* A version of a deployment as the admin surface shows it. */
typedef struct engine_deployment {
    const char *id;
    uint32_t version;
    engine_deployment_state state;
    const struct engine_channel *channels;
    size_t n_channels;
    uint64_t created_at_ms;
    uint64_t retired_at_ms; /* 0: not retired */
    /* what it holds: the gate counts pending_deliveries, tasks and
     * calls_retrying (live calls with an attempt left, those backing off
     * among them) */
    uint64_t pending_deliveries, tasks, calls_backing_off;
    uint64_t terminal_tasks, poisoned_deliveries;
    uint64_t calls_retrying;
} engine_deployment;

typedef struct engine_topic_stats {
    const char *topic;
    uint64_t ready, locked, backoff, delayed, terminal;
    uint64_t waiting_fetches;
} engine_topic_stats;

typedef struct engine_reply {
    engine_op op;
    engine_status status;
    /* SUBMIT: one; SUBMIT_BATCH: one per item, in order; CALL: one, the
     * instance id */
    engine_submitted *submitted;
    size_t n_submitted;
    /* FETCH */
    engine_task *tasks;
    size_t n_tasks;
    /* COMPLETE_BATCH: one per item, in order; FETCH: one per completion
     * it carried */
    engine_status *statuses;
    size_t n_statuses;
    /* COMPLETE: intake absorbed it as a repeat (none in this version: a
     * completion and its task's delete are one batch, so a task is never
     * completed twice; a repeat finds no task, NOT_FOUND) */
    bool duplicate;
    /* FAIL */
    bool terminal;
    uint32_t retries_left;
    uint64_t available_at_ms;
    /* EXTEND_LOCK */
    uint64_t lock_expires_at_ms;
    /* GET_TASK */
    engine_task_info task;
    /* LIST_TASKS: a page, in the listing's order, and where the next one
     * starts ("" when the listing has reached its end) */
    engine_task_info *infos;
    size_t n_infos;
    char next[24];
    /* LIST_INCIDENTS, in the order they happened, and the id the next
     * page starts after ("" when the records have ended) */
    engine_incident *incidents;
    size_t n_incidents;
    char next_incident[ENGINE_ID_STR];
    /* AWAIT_CALL */
    engine_instance instance;
    /* STATS: the totals, and per topic in memory */
    engine_stats stats;
    engine_topic_stats *topic_stats;
    size_t n_topic_stats;
    /* METRICS (and stats) */
    engine_metrics metrics;
    /* DEPLOY, RETIRE: the version it concerns; LIST_DEPLOYMENTS: every
     * version, in the order they were deployed */
    engine_deployment *deployments;
    size_t n_deployments;
    void *priv; /* allocations behind the pointers above */
} engine_reply;

void engine_reply_free(engine_reply *r);

/* ---- events: notifications, never the record ---- */

typedef enum engine_event_kind {
    ENGINE_EVENT_TASK_PARKED = 1,
    ENGINE_EVENT_TASK_COMPLETED,
    ENGINE_EVENT_TASK_FAILED,
    ENGINE_EVENT_TASK_TERMINAL,
    ENGINE_EVENT_TASK_REFUSED,
    ENGINE_EVENT_DELIVERY_POISONED,
    ENGINE_EVENT_INSTANCE_RESOLVED,  /* a call ended, either way: id is the instance's */
    ENGINE_EVENT_TASK_RETRIED,       /* an operator re-offered a terminal task */
    ENGINE_EVENT_TASK_DISCARDED,     /* an operator discarded a terminal task */
    ENGINE_EVENT_DELIVERY_RETRIED,   /* an operator re-armed a poisoned delivery */
    ENGINE_EVENT_DEPLOYMENT_RETIRED, /* topic: the deployment's id; id: "" */
} engine_event_kind;

typedef struct engine_event {
    engine_event_kind kind;
    const char *topic;
    char id[ENGINE_ID_STR];          /* task, delivery or instance */
    char instance_id[ENGINE_ID_STR]; /* the call a task belongs to, or "" */
    engine_error error;              /* FAILED, TERMINAL, REFUSED, POISONED */
    uint32_t retries_left;           /* FAILED */
    uint32_t version;                /* DEPLOYMENT_RETIRED */
    uint64_t at_ms;
} engine_event;

/* Called on the commit thread after the turn that caused it is durable.
 * Everything it points to is valid during the call only. Must not block. */
typedef void (*engine_event_fn)(void *ctx, const engine_event *ev);

/* ---- push sinks ---- */

/* What a push receiver answered (proto/berth/v1/push.proto DeliveryAck). */
enum {
    ENGINE_PUSH_DELIVERED = 1, /* taken: the delivery ends */
    ENGINE_PUSH_RETRY = 2,     /* not now: the outbox backoff, poisoned past its attempts */
    ENGINE_PUSH_REJECT = 3,    /* never: the delivery ends; a call ends with the error */
};

/* A delivery to send to a push channel. Everything it points to is valid
 * during the call only. */
typedef struct engine_push_delivery {
    const char *transport; /* the channel's, as declared: nng+req://HOST:PORT, ... */
    const char *topic;
    char id[ENGINE_ID_STR];
    uint64_t flight; /* echoed in the answer (ENGINE_OP_PUSH_ACK) */
    const uint8_t *payload;
    size_t payload_len;
    const engine_header *headers; /* a call's include berth-instance-id and berth-attempt */
    size_t n_headers;
    const char *content_type;        /* NULL: none */
    char instance_id[ENGINE_ID_STR]; /* "" for a task */
    uint32_t attempt;                /* 1 on the first send */
    uint64_t created_at_ms;
} engine_push_delivery;

/* Sends d to its receiver without blocking, and later answers the engine
 * with exactly one ENGINE_OP_PUSH_ACK (a RETRY when no answer came within
 * push_timeout_ms). Called on the commit thread, once the turn that sent it
 * is durable: nothing is pushed that the store could still lose. Nonzero:
 * not sent (the engine's deadline treats it as no answer). */
typedef int (*engine_push_fn)(void *ctx, engine *e, const engine_push_delivery *d);

/* ---- options ---- */

/* A declared channel: a topic with its own sink and intake policy.
 * Undeclared topics are pull channels with the defaults (unless
 * strict_channels). */
typedef struct engine_channel {
    const char *name;
    const char *transport;            /* NULL or "pull": the sink its deliveries go to */
    uint64_t reply_max_bytes;         /* 0: payload_max_bytes */
    const char *const *content_types; /* allowed reply content types; none: any */
    size_t n_content_types;
} engine_channel;

typedef struct engine_options {
    const char *data_dir;
    /* NULL or "": the embedded store in data_dir. Else a PostgreSQL
     * connection string (postgresql://... or key=value pairs, several
     * hosts allowed): the engine keeps its state in that database, shared
     * with any other engine opened on it (pg/README.md). */
    const char *store_uri;
    engine_clock clock; /* now_ms NULL: the system clock */

    /* Bounds (R6): omitted → default; over the ceiling → INVALID_ARGUMENT. */
    uint64_t lock_default_ms; /* also the completion grace window */
    uint64_t lock_max_ms;
    uint64_t wait_default_ms;
    uint64_t wait_max_ms;
    uint32_t batch_default;
    uint32_t batch_max;
    uint32_t retries;      /* the failure budget (R11) */
    uint32_t retries_max;  /* ceiling for Fail's explicit retries_left */
    uint64_t retry_max_ms; /* ceiling for Fail's retry_in_ms */
    uint64_t backoff_initial_ms;
    uint64_t backoff_max_ms;
    uint64_t delay_max_ms;     /* a submit's or call's delay, at most this ahead */
    uint32_t priority_default; /* a submit's or call's priority when it names none */
    uint32_t priority_max;
    double backoff_jitter; /* 0..1: a pause is cut by up to this fraction */
    uint64_t dedup_horizon_ms;
    uint32_t payload_max_bytes;
    /* Task bodies in fetch answers claimed and not yet handed to their
     * done(), in all: past it, fetches claim nothing (they wait, or answer
     * empty) until answers leave. At least fetch_max_bytes. */
    uint64_t fetch_inflight_max_bytes;
    uint64_t fetch_max_bytes;  /* a fetch answers with fewer tasks rather than more
                                  bytes than this (always at least one task) */
    uint64_t body_cache_bytes; /* task bodies kept in memory (beyond: read from disk) */
    uint32_t topics_max;       /* topics one fetch may name */

    /* The outbox relay (R4): sink retries and the poison horizon. */
    uint32_t delivery_attempts; /* poisoned after this many failed attempts */
    uint64_t delivery_backoff_initial_ms;
    uint64_t delivery_backoff_max_ms;
    uint32_t relay_max_per_turn;

    /* Push channels (transports nng+req://, nng+req+ipc://, nng+req+tls://):
     * deployable only with a push_fn. A delivery gets no answer within
     * push_timeout_ms (plus a grace for the sync before it is sent): a
     * failed attempt. A channel has at most push_inflight_max deliveries
     * sent and unanswered; the rest wait their turn, in order. */
    engine_push_fn push_fn;
    void *push_ctx;
    uint64_t push_timeout_ms;
    uint32_t push_inflight_max;

    uint32_t turn_max_requests; /* requests one turn drains at most */

    /* Waiting fetches (R7): a fetch that would wait past either bound is
     * answered at once, RESOURCE_EXHAUSTED, retryable. */
    uint32_t waits_max;           /* in all */
    uint32_t waits_per_owner_max; /* of one owner (a connection) */

    /* Calls (engine/README.md, "Calls"): ceilings of a call's retry policy, and how long an
     * ended instance stays to be awaited. */
    uint64_t call_timeout_max_ms;
    uint32_t call_attempts_max;
    uint64_t instance_retention_ms;
    uint32_t timers_max_per_turn; /* timers fired, ended instances dropped, per turn */
    uint32_t metrics_topics_max;  /* topics with counters of their own (then "_other") */

    /* Channels declared at open: the deployment ENGINE_BOOT_DEPLOYMENT,
     * deployed anew when they differ from its live version. */
    const engine_channel *channels;
    size_t n_channels;
    bool strict_channels; /* topics no live deployment declares are NOT_FOUND */

    engine_event_fn on_event;
    void *event_ctx;
} engine_options;

/* The operator defaults (ARCHITECTURE.md, "Operating"). */
void engine_options_default(engine_options *o);
/* BERTH_EINVAL when the options contradict themselves (a default over its
 * ceiling, a zero default lock, ...); msg names the setting by its flag
 * name, e.g. "lock-default-ms". */
int engine_options_check(const engine_options *o, char *msg, size_t msglen);

/* Opens the store (o->store_uri's database, else the embedded one in
 * o->data_dir), rebuilds memory from it, starts the actor. The options
 * (and what they point to) are copied. On failure a message goes to err.
 * Open and start in one, unlike the gateway's servers (ARCHITECTURE.md,
 * "Conventions"): nothing can be done with an engine whose actor has not
 * started, and nothing it owns is shared before engine_open() returns, so
 * there is no step between for a caller to take. */
int engine_open(const engine_options *o, engine **out, char *err, size_t errlen);
/* Whether o names a PostgreSQL store (store_uri set). */
bool engine_store_is_pg(const engine_options *o);
/* "data=DIR", or "store=host=... port=... dbname=... user=..." (never a
 * password): where the store is, for messages. */
void engine_store_describe(const engine_options *o, char *buf, size_t len);
/* Finishes the turn in flight, answers everything still queued or waiting
 * UNAVAILABLE and stops the actor; from then on engine_exec() returns
 * BERTH_ECLOSED. The handle stays valid until engine_close(). Idempotent. */
void engine_stop(engine *e);
/* engine_stop(), then closes the store and frees the engine. No call on e
 * may be in progress or follow. NULL is a no-op. */
void engine_close(engine *e);

typedef void (*engine_done_fn)(void *arg, engine_reply *reply);

/* Queues a request. 0: done() will be called exactly once. Nonzero
 * (BERTH_ECLOSED, BERTH_ENOMEM): it was not queued and done() will never
 * be called. */
int engine_exec(engine *e, const engine_request *req, engine_done_fn done, void *arg);
/* Every request of owner that is waiting (a fetch's long poll) is
 * answered at once, CANCELLED, having claimed nothing; requests of owner
 * queued after this call are not affected. For a connection that closed:
 * its waits must not claim tasks nobody will read. Any thread;
 * asynchronous (applied in the engine's next turn). BERTH_ECLOSED once
 * the engine stops, BERTH_ENOMEM. */
int engine_cancel(engine *e, uint64_t owner);
/* engine_exec and wait for the reply (never from an engine thread, nor
 * from done()).
 * Returns NULL only if the request could not be queued. */
engine_reply *engine_exec_sync(engine *e, const engine_request *req);
/* A turn has run since this call: relay, timers and waits are up to date
 * with the clock. */
void engine_tick(engine *e);

/* A halted engine reopens its store (a disk that was full has room again,
 * a device came back), first this long after the halt on its clock, then
 * doubling to the last value while it fails. */
#define ENGINE_REOPEN_BACKOFF_MIN_MS 100
#define ENGINE_REOPEN_BACKOFF_MAX_MS 5000

/* ---- failpoints (tests) ---- */
typedef enum engine_failpoint {
    /* The pull sink answers Retry instead of parking. */
    ENGINE_FP_PARK = 1,
    /* The next store writes fail (the store's own failpoint). */
    ENGINE_FP_STORE_WRITE = 3,
    /* The next store reads fail. */
    ENGINE_FP_STORE_READ,
    /* The next store syncs fail. Whether the turns written since the last
     * good sync reached the disk is then unknown, so the engine halts:
     * those turns and every request after are answered UNAVAILABLE until
     * it has reopened its store (ENGINE_REOPEN_BACKOFF_MIN_MS later on its
     * clock, then backing off), which recovers what the disk holds. */
    ENGINE_FP_STORE_SYNC,
    /* n > 0: syncs wait before syncing until it is set to 0 again (set
     * it to 0 before engine_stop(): the commit thread waits there). */
    ENGINE_FP_HOLD_SYNCS,
} engine_failpoint;

/* The next n hits of fp fail. */
void engine_failpoint_set(engine *e, engine_failpoint fp, int n);
/* The allocation seam (process-wide, any thread): the nth allocation the
 * engine makes from now on fails, once; 0 disarms. fired: whether it has
 * failed since it was armed (a walk over n ends when it no longer does). */
void engine_fault_alloc(uint64_t nth);
bool engine_fault_alloc_fired(void);
/* How far durability has got; any thread (tests). */
typedef struct engine_durable {
    uint64_t turns;      /* turns the actor has finished, writing or not */
    uint64_t appended;   /* turns written to the store */
    uint64_t synced;     /* of those, known durable */
    uint32_t syncs_held; /* syncs waiting at ENGINE_FP_HOLD_SYNCS */
} engine_durable;
void engine_durability(engine *e, engine_durable *out);

/* What engine_open() found and how long it took: opening the store (its
 * log replayed) and rebuilding memory from it. */
typedef struct engine_recovery {
    uint64_t store_ms, rebuild_ms;
    uint64_t tasks, deliveries, instances;
} engine_recovery;
void engine_recovery_get(const engine *e, engine_recovery *out);
/* Holds the actor between turns (true), so that requests queued meanwhile
 * share the next turn; false lets it go on. */
void engine_hold(engine *e, bool hold);

#endif
