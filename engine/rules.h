/*
 * rules.h — the engine's decisions without its memory: what a request
 * may be, which verdict a guarded request gets, what a failure does to a
 * task's budget, what a reply to a call does, and how a task or a call
 * is answered. Every function takes the options, the time and a plain view
 * of the state it looks at (never a task, an instance or the turn), and
 * fills engine_status / engine_reply with the wording and codes the
 * engine answers with. A store keeps its state as it likes and asks here.
 * Any thread (pure functions).
 */
#ifndef BERTH_ENGINE_RULES_H
#define BERTH_ENGINE_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/reply.h"

/* ---- Ids ---------------------------------------------------------------- */

/* A task's id as a request names it in field; INVALID_ARGUMENT if it is
 * none. */
bool rules_task_id(const char *id_str, const char *field, uint8_t id[BERTH_ID_LEN],
                   engine_status *st);
/* NOT_FOUND, the verdict of an id that names no task. */
void rules_not_found(engine_status *st, const char *id_str);

/* ---- The operator's pages and terminal tasks ----------------------------- */

/* A LIST_TASKS page looks at no more tasks than this many times its limit,
 * and says where it stopped. */
#define RULES_LIST_SCAN_FACTOR 64

/* Where a page starts. */
typedef enum rules_after {
    RULES_AFTER_NONE = 0, /* from the first */
    RULES_AFTER_SEQ,      /* after a page's next token: the entry of sequence seq */
    RULES_AFTER_ID,       /* after the task of that id, which must be there */
} rules_after;

typedef struct rules_list {
    uint64_t limit;
    rules_after after;
    uint64_t seq;
    uint8_t id[BERTH_ID_LEN];
} rules_list;

/* A LIST_TASKS request's limit, topic, state and after. False:
 * INVALID_ARGUMENT in st. */
bool rules_list_check(const engine_options *o, const char *topic, engine_task_state state,
                      uint32_t limit, const char *after, rules_list *out, engine_status *st);
/* INVALID_ARGUMENT: after named a task that is not there. */
void rules_list_after_unknown(engine_status *st);
/* A page's next token: the page after the entry of sequence seq. */
void rules_list_token(uint64_t seq, char out[24]);
/* FAILED_PRECONDITION: retry or discard of a task that is not terminal
 * (verb: "a terminal task can be retried"). */
void rules_not_terminal(engine_status *st, const char *id_str, const char *verb);
/* A call whose attempt in flight an operator discarded ends FAILED with
 * ENGINE_EC_DISCARDED and this message. */
#define RULES_DISCARDED_MESSAGE "an operator discarded the call's terminal task"

/* ---- The guard (R8) ----------------------------------------------------- */

/* What R8 looks at, and nothing else. */
typedef struct rules_lock {
    bool found;                /* a task of that id exists */
    bool terminal;             /* its failure budget is spent */
    bool has_lock;             /* it was ever claimed and its lock was not given back */
    const uint8_t *lock_token; /* BERTH_ID_LEN bytes; read only while has_lock */
    const char *worker_id;     /* read only while has_lock */
    uint64_t lock_expires_at_ms;
} rules_lock;

/* A guarded request's own fields: worker_id, the lock token (parsed into
 * token) and the task id (parsed into id). False: INVALID_ARGUMENT in st,
 * not a verdict. */
bool rules_guard_parse(const engine_guard *g, uint8_t id[BERTH_ID_LEN], uint8_t token[BERTH_ID_LEN],
                       engine_status *st);
/* The lock is live at now: claimed, not given back, not expired. */
static inline bool rules_lock_live(const rules_lock *lk, uint64_t now_ms)
{
    return lk->has_lock && lk->lock_expires_at_ms > now_ms;
}
/* True when the caller (g, its token parsed) holds lk's live lock;
 * otherwise exactly one verdict in st: NOT_FOUND, TERMINAL, LOCK_HELD or
 * LOCK_LOST. */
bool rules_guard(const rules_lock *lk, const engine_guard *g, const uint8_t token[BERTH_ID_LEN],
                 uint64_t now_ms, engine_status *st);

/* ---- fail, extend_lock (R6, R11) ---------------------------------------- */

/* A fail's own bounds, checked. */
typedef struct rules_fail_in {
    uint64_t retry_in_ms;  /* the worker's pause (if a->has_retry_in_ms) */
    uint32_t retries_left; /* the worker's budget (if a->has_retries_left) */
} rules_fail_in;
/* What a fail does to its task. */
typedef struct rules_fail_out {
    uint32_t failures;        /* one more */
    uint32_t retries_left;    /* the worker's, or one less (never below 0) */
    bool terminal;            /* no retry left */
    uint64_t pause_ms;        /* not terminal: the worker's or the backoff's */
    uint64_t available_at_ms; /* not terminal: now + pause */
} rules_fail_out;
/* retry_in_ms, retries_left, error: bounded (R6). */
bool rules_fail_check(const engine_options *o, const engine_fail_args *a, rules_fail_in *in,
                      engine_status *st);
/* The task had failed `failures` times with `retries_left` retries left
 * (R11). Draws the backoff's jitter only when it is not terminal and the
 * worker gave no pause. The lock ends at now. */
void rules_fail_outcome(const engine_options *o, const engine_fail_args *a, const rules_fail_in *in,
                        uint32_t failures, uint32_t retries_left, uint64_t now_ms,
                        rules_fail_out *out);
/* lock_ms bounded (R6), default --lock-default-ms. */
bool rules_extend_check(const engine_options *o, const engine_extend_args *a, uint64_t *lock_ms,
                        engine_status *st);

/* ---- fetch (R6) --------------------------------------------------------- */

typedef struct rules_fetch {
    uint64_t max_tasks, lock_ms, wait_ms;
} rules_fetch;
/* worker_id, topics (declared, when o->strict_channels: declared(ctx,
 * topic) says), completes, max_tasks, lock_ms, wait_ms. */
bool rules_fetch_check(const engine_options *o, const engine_fetch_args *a,
                       bool (*declared)(void *ctx, const char *topic), void *ctx, rules_fetch *out,
                       engine_status *st);

/* ---- A task's answer ---------------------------------------------------- */

/* A claimed task as its answer shows it. */
typedef struct rules_task_view {
    const uint8_t *id; /* BERTH_ID_LEN */
    const store_body *body;
    uint32_t attempt; /* claims so far, this one included */
    uint32_t retries_left;
    uint32_t priority;
    const uint8_t *lock_token; /* BERTH_ID_LEN */
    uint64_t lock_expires_at_ms;
    uint64_t created_at_ms;
    uint64_t available_at_ms;
} rules_task_view;
/* The memory a task's answer needs besides the engine_task (headers, a
 * call's reserved header values), taken from r before the task changes.
 * False: no memory. */
bool rules_task_mem(engine_reply *r, const store_body *b, engine_header **hs, char **call);
/* Fills et: the body's fields, a call's reserved headers (berth-instance-id,
 * berth-attempt) after the body's, the lock. hs and call from rules_task_mem. */
void rules_task_answer(engine_task *et, const rules_task_view *v, engine_header *hs, char *call);
/* What GET_TASK shows of a task's body besides its size: its headers, its
 * content type and its payload's first ENGINE_TASK_INFO_PAYLOAD_MAX bytes,
 * copied into r. False: no memory. */
bool rules_task_info_body(engine_reply *r, const store_body *b, engine_task_info *i);

/* ---- submit, submit_batch, call (R6, R18) ------------------------------- */

/* A submit's payload, delay or instant, priority, headers, content type
 * and idempotency key (the topic and its route are the caller's, first). */
bool rules_submit_check(const engine_options *o, uint64_t now_ms, const engine_submit_args *a,
                        engine_status *st);
/* Names batch item i in a rejection: "items[i].topic". */
void rules_item_name(engine_status *st, size_t i);

/* A call's retry policy, checked and with its defaults filled in. */
typedef struct rules_policy {
    uint64_t timeout_ms; /* per attempt */
    uint32_t max_attempts;
    uint64_t initial_backoff_ms;
    uint64_t max_backoff_ms;
    double multiplier;
} rules_policy;
bool rules_call_policy(const engine_options *o, const engine_retry_policy *r, rules_policy *out,
                       engine_status *st);

/* ---- Intake (R10) ------------------------------------------------------- */

/* A channel's declaration as intake checks it (NULL: the implicit one). */
typedef struct rules_channel {
    uint64_t reply_max_bytes; /* 0: the payload ceiling */
    char *const *content_types;
    size_t n_content_types;
} rules_channel;
/* The reply intake validates. */
typedef struct rules_reply {
    size_t payload_len;
    const char *content_type;
    const engine_header *headers;
    size_t n_headers;
} rules_reply;
/* True: valid. Otherwise st holds VALIDATION_REJECTED, not retryable. */
bool rules_intake_validate(const engine_options *o, const rules_channel *c, const char *topic,
                           const rules_reply *in, engine_status *st);

/* The call a reply names, as correlation sees it. */
typedef struct rules_call {
    bool found; /* live, or ended this turn */
    bool ended;
    engine_instance_state state;
    uint32_t attempt; /* in flight */
} rules_call;
typedef enum rules_corr {
    RULES_CORR_ABSORB = 0,       /* the call has ended: accepted, nothing changes */
    RULES_CORR_RETRY_PENDING,    /* refused (st): the call backs off between attempts */
    RULES_CORR_RESOLVE,          /* resolves the call */
    RULES_CORR_RESOLVE_WITHDRAW, /* resolves it; the attempt in flight (newer) is withdrawn */
} rules_corr;
/* A reply from the task of attempt parked_attempt. */
rules_corr rules_correlate(const rules_call *c, uint32_t parked_attempt, engine_status *st);

/* ---- A call's attempts -------------------------------------------------- */

/* After a failed attempt: fail the call, or back off until retry_at_ms. */
typedef struct rules_call_next {
    bool fail;
    uint64_t retry_at_ms;
} rules_call_next;
void rules_call_failed_attempt(const rules_policy *p, uint32_t attempt, uint64_t now_ms,
                               double jitter, rules_call_next *out);
/* The error of an attempt that timed out (TIMEOUT), its message in buf. */
void rules_call_timeout(const rules_policy *p, uint32_t attempt, char *buf, size_t n,
                        engine_error *err);
/* The error of an attempt whose request was poisoned (DELIVERY_POISONED). */
void rules_call_poisoned(uint32_t attempt, uint32_t max_attempts, const char *why, char *buf,
                         size_t n, engine_error *err);

/* await_call's instance id (parsed into id) and wait_ms. */
bool rules_await_check(const engine_options *o, const engine_await_args *a,
                       uint8_t id[BERTH_ID_LEN], uint64_t *wait_ms, engine_status *st);
/* NOT_FOUND for an await whose call never was or was dropped. */
void rules_await_not_found(engine_status *st, const char *id_str);
/* o, a live instance as it stands (no result, no error yet). */
void rules_instance_live(engine_instance *o, const uint8_t id[BERTH_ID_LEN],
                         engine_instance_state state, uint32_t attempt, uint64_t created_at_ms);
/* r->instance from an instance's record (live fields, or its end); its
 * memory is the reply's. False: no memory. */
bool rules_instance_answer(engine_reply *r, const store_instance *rec);

/* ---- Waits, deployments ------------------------------------------------- */

/* Another request may wait: waiting in all, owner_waiting of its
 * connection (has_owner). False: RESOURCE_EXHAUSTED, ENGINE_UNAVAILABLE,
 * retryable. */
bool rules_wait_may(const engine_options *o, uint64_t waiting, bool has_owner,
                    uint32_t owner_waiting, engine_status *st);
/* A deploy request: its id and channels (names, transports, ceilings,
 * content types, none twice). */
bool rules_deploy_check(const engine_options *o, const char *id, const engine_channel *cs, size_t n,
                        engine_status *st);
/* The refusals of routes and deploys, worded once for both stores: a
 * channel only draining deployments declare; a topic no deployment
 * declares (strict channels); a channel another id's live version
 * declares (channels[i]); no deployment id; the versions kept at the cap. */
void rules_route_draining(engine_status *st, const char *name);
void rules_route_undeclared(engine_status *st, const char *name);
void rules_deploy_conflict(engine_status *st, size_t i, const char *name, const char *live_id,
                           uint32_t live_version);
void rules_deploy_unknown(engine_status *st, const char *id);
void rules_deploy_full(engine_status *st);

/* Push sinks, for both stores' relays. What an answer may take beyond
 * push_timeout_ms: the sync before the send, and the way back. */
#define RULES_PUSH_GRACE_MS  1000
#define RULES_PUSH_NO_ANSWER "no answer from the push receiver within push-timeout-ms"
/* A push answer's outcome and error as a failed attempt's reason, in buf;
 * *err is the receiver's error made safe to keep (check_error: one that
 * fails the checks becomes RECEIVER_ERROR_INVALID). */
void rules_push_answer(int outcome, engine_error *err, engine_status *bad, char *buf, size_t n);
/* A delivery's id (push_ack's, retry_delivery's) parsed into id; false:
 * INVALID_ARGUMENT in st. */
bool rules_delivery_id(const char *s, uint8_t id[BERTH_ID_LEN], engine_status *st);
/* retry_delivery's refusals, worded once. */
void rules_delivery_not_found(engine_status *st, const char *id);
void rules_delivery_not_poisoned(engine_status *st, const char *id);

#endif
