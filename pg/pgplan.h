/*
 * pgplan.h — a turn of the PostgreSQL engine as its modules share it
 * while it is planned and answered (pgops.c drives it; pgsubmit, pgguard,
 * pgclaim and pgread each plan and answer their requests' part): the items
 * a turn holds, the statements it sends, the doorbell it rings, and the
 * small tools they all use. Internal to pg/'s turn modules.
 */
#ifndef BERTH_PG_PGPLAN_H
#define BERTH_PG_PGPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/check.h"
#include "engine/hist.h"
#include "engine/mem.h"
#include "engine/rules.h"
#include "engine/tcounts.h"
#include "pg/pgdeploy.h"
#include "pg/pgreq.h"
#include "pg/pgturn.h"
#include "pg/pgwire.h"
#include "store/records.h"

typedef struct sub_item {
    pgreq *p;
    const engine_submit_args *a;
    engine_submitted *out;
    uint8_t id[BERTH_ID_LEN];
    int same_as; /* an earlier item of the turn with the same key, or -1 */
    int32_t dep; /* the deployment it was routed to (0: the implicit one) */
    bool push;   /* ... a push channel there: an outbox row */
} sub_item;

typedef enum gkind { G_COMPLETE, G_REFUSE, G_FAIL, G_EXTEND, G_RELEASE } gkind;

typedef struct guard_item {
    pgreq *p;
    gkind kind;
    const engine_guard *g;
    const void *args; /* engine_complete_args, engine_fail_args, ... */
    engine_status *st;
    uint8_t id[BERTH_ID_LEN], token[BERTH_ID_LEN];
    rules_fail_in fin;
    uint64_t lock_ms;
} guard_item;

/* A call of the turn (ENGINE_OP_CALL): its instance and first task. */
typedef struct call_item {
    pgreq *p;
    const engine_call_args *a;
    rules_policy pol; /* has_retry: checked, defaults filled in */
    bool has_retry;
    uint8_t iid[BERTH_ID_LEN], tid[BERTH_ID_LEN];
    int same_as; /* an earlier call of the turn with the same key, or -1 */
    int32_t dep; /* the deployment it was routed to (0: the implicit one) */
    bool push;   /* ... a push channel there: its request is an outbox row */
} call_item;

/* A call's instance as the turn locked it (a reply's, a timer's), then as
 * the turn leaves it. */
typedef struct irow {
    uint8_t id[BERTH_ID_LEN];
    int state; /* engine_instance_state */
    uint32_t attempt;
    bool ended, has_current;
    uint8_t current[BERTH_ID_LEN];
    char *topic;
    int lrow; /* its row in instances_lock's result (its policy), -1: none */
    /* what the turn did */
    bool dirty, end, withdraw, redrive;
    uint8_t dead[BERTH_ID_LEN]; /* withdraw: the dead attempt's task */
    int64_t timer_at;           /* -1: none */
    uint8_t new_task[BERTH_ID_LEN];
    const engine_result *result; /* end: RESOLVED with it */
    const uint8_t *result_of;    /* ... or with this task's payload */
    engine_error err;            /* end: with this error (code set) */
    char msg[320];               /* err.message's storage when the turn wrote it */
} irow;

/* An await of the turn. */
typedef struct await_item {
    pgreq *p;
} await_item;

/* A task row as guard_read gave it, then as the turn's items leave it. */
typedef struct trow {
    uint8_t id[BERTH_ID_LEN];
    bool found, terminal, has_lock, deleted, dirty, set_err, incident;
    bool has_instance; /* a call's task */
    uint8_t instance_id[BERTH_ID_LEN];
    int32_t call_attempt;
    int32_t deployment;
    char *topic, *worker;
    uint8_t token[BERTH_ID_LEN];
    int64_t lock_expires_at, available_at, created_at;
    int32_t failures, retries_left;
    const engine_error *err; /* set_err: the fail's */
} trow;

/* A delivery (an outbox row) a push answer names, or whose answer's
 * deadline passed, as the turn locked it, then as the turn leaves it
 * (pgrelay.h). */
typedef struct orow {
    uint8_t id[BERTH_ID_LEN];
    int64_t flight;
    char *topic;
    int32_t deployment, attempts, call_attempt;
    bool has_instance;
    uint8_t instance_id[BERTH_ID_LEN];
    pgreq *ack; /* the answer; NULL: its deadline passed */
    /* what the turn decided (pgrelay.c) */
    int what;       /* PGRELAY_ENDED, _BACKED_OFF, _POISONED */
    int64_t due_at; /* backed off: the next send */
    const char *code;
    char msg[320];  /* the failure, as the row keeps it */
    bool incident;  /* a call's result intake refused (RESULT_REFUSED) */
    trow call_task; /* a call's request as its replies name it (pgcall_correlate) */
    char inc_code[64];
} orow;

/* submit, guard_read or complete_fast, delete, update, incidents, topics_due, stats, turn_fail;
 * call, instances_lock, timers_due, instances_drop, keys_expire, tasks_withdraw, redrive_insert,
 * instances_write, await_read, housekeeping_next, calls_stats; deploy_lock, deployments_write,
 * deploy_gate, deployments_list (a deploy's answers), deploy_stale; outbox_ack, outbox_expired,
 * outbox_write, incidents_insert (the relay's), outbox_claim, outbox_next */
#define STMTS_MAX_FIXED 32

struct pgops_turn {
    const engine_options *o;
    pgreq *list;
    uint64_t now_ms;
    pgturn t;
    pgturn_stmt *stmts;
    size_t cap;
    pgwire_params *params; /* one per statement, each with a buffer of its own */
    VEC(sub_item) subs;
    VEC(guard_item) guards;
    VEC(trow) rows;
    VEC(call_item) calls;
    VEC(irow) irows;
    VEC(await_item) awaits;
    int s_submit, s_guard, s_fast, s_topics_due, s_stats;
    int s_calls_stats, s_call, s_ilock, s_timers, s_drop, s_expire, s_redrive, s_await, s_hk_next;
    bool housekeeping;           /* this turn fires timers, drops, expires keys */
    bool hk_more;                /* ... and left timers due that a reply of the turn held */
    size_t hk_fired;             /* ... timers it fired */
    uint64_t hk_next_in_ms;      /* ... when the next is due (UINT64_MAX: nothing waits) */
    engine_stats delta;          /* the replica's counters this turn adds (calls...) */
    const engine_stats *replica; /* the replica's own counters, for STATS */
    VEC(const char *) due_topics;
    VEC(pgops_topic_due) dues;
    char *notify;
    size_t notify_len, notify_cap;
    char notify_last[400]; /* the last record added (a repeat is not added) */
    bool notify_over;      /* past one notification's size: "p:*" (and the earliest i:) */
    uint64_t notify_i;     /* the earliest i: record's ms, UINT64_MAX: none */
    bool notify_in_turn;
    uint64_t fetch_budget; /* pgops_how's */
    bool admin;            /* an operator's retry or discard: two rounds (pgadmin.h) */
    tcounts *topics;       /* pgops_how's: the acts of the turn, counted once committed */
    hist *task_latency;
    /* deployments (pgdeploy.h) */
    const pgdeploys *deps; /* pgops_how's: the replica's copy */
    bool routed;           /* the plan read the copy: turn_begin_routed checks its epoch */
    bool share;            /* ... and puts work into a deployment: K_DEPLOY shared */
    bool deps_unknown;     /* a task named a deployment the copy lacks: the turn fails BR002 */
    bool deps_changed;     /* the turn changed the deployments */
    size_t deploys, lists; /* DEPLOY and RETIRE requests; LIST_DEPLOYMENTS */
    int s_dlock, s_gate, s_dlist;
    VEC(pgdep) drows; /* a deploy's turn: the deployments as deploy_lock read them, then as left */
    /* the outbox relay (pgrelay.h) */
    bool notify_o;             /* the doorbell carries "o:" (relays, look) */
    bool relay;                /* the turn claims due deliveries last */
    bool relay_expire;         /* ... and takes the sends past their deadline first */
    const PGresult *ilock;     /* instances_lock's rows, once read */
    const pgrelay_chan *chans; /* pgops_how's */
    size_t n_chans;
    size_t acks; /* PUSH_ACK requests planned */
    int s_ack, s_expired, s_oclaim, s_onext;
    VEC(orow) orows;
    uint64_t relay_next_in_ms; /* UINT64_MAX: nothing due later that the turn knows of */
};

/* Appends *val (n bytes) to a VEC: false when out of memory. */
bool pgplan_push(void *slot, const void *val, size_t n);
#define VEC_PUSH(vec, val) pgplan_push(VEC_ADD(vec), &(val), sizeof((vec)->v[0]))

/* A statement of the turn, with a parameter buffer of bytes; its index, or
 * -1 (out of room or memory). */
int pgplan_add_stmt(pgops_turn *t, const char *name, size_t bytes);
/* incidents_insert of n incidents (kinds STORE_INCIDENT_*, their subject
 * ids, topics, codes and messages), with room for bytes of them. False:
 * out of room or memory. */
bool pgplan_stmt_incidents(pgops_turn *t, const int32_t *kinds, const uint8_t (*ids)[BERTH_ID_LEN],
                           const char *const *topics, const char *const *codes,
                           const char *const *messages, size_t n, size_t bytes);
/* strlen, 0 for NULL. */
size_t pgplan_text_len(const char *s);
/* An item its route refused, sent for its key (pgsubmit.h), once out is
 * read: a duplicate of what the key names answers OK; else the route's
 * refusal, in r already, stands. */
void pgplan_refused_answer(engine_reply *r, const engine_submitted *out);
/* A text column of res copied into r's memory; NULL for SQL NULL. */
char *pgplan_copy_text(engine_reply *r, const PGresult *res, int row, int col);
/* out from a keyed insert's result (submit's, call's: rows of no int4,
 * winner uuid): the id item no (1-based) got, own unless its key named
 * another (a duplicate). */
void pgplan_winner(const PGresult *res, size_t no, const uint8_t own[BERTH_ID_LEN],
                   engine_submitted *out);
/* A text[] column of name,value pairs copied into r's memory: up to
 * ENGINE_HEADERS_MAX pairs into hs, *n of them (0 for SQL NULL). False:
 * no memory. */
bool pgplan_copy_headers(engine_reply *r, const PGresult *res, int row, int col,
                         store_header hs[ENGINE_HEADERS_MAX], size_t *n);
/* A bytea column copied into r's memory (*len bytes; NULL for SQL NULL or
 * no bytes). False: no memory. */
bool pgplan_copy_bytes(engine_reply *r, const PGresult *res, int row, int col, const uint8_t **out,
                       size_t *len);
/* A record of the turn's doorbell (pg/README.md §5.1): 'p' (work now on
 * topic), 't' (work on topic in in_ms), 'r' (the call whose id is topic,
 * in hex, changed), 'i' (a call's timer in in_ms; topic unused) or 'o'
 * (deliveries wait: relays, look; topic ""). */
void pgplan_notify_add(pgops_turn *t, char kind, const char *topic, uint64_t in_ms);
/* An event of the turn, published through the options' on_event. */
void pgplan_event(pgops_turn *t, engine_event_kind kind, const char *topic,
                  const uint8_t id[BERTH_ID_LEN], const engine_error *err, uint32_t retries_left);
/* The replica's counters of topic, to count what a committed turn did;
 * NULL when the turn counts nothing, or out of memory. */
engine_topic_counters *pgplan_counters(pgops_turn *t, const char *topic);

#endif
