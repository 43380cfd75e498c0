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

#include "engine/mem.h"
#include "engine/rules.h"
#include "pg/pgreq.h"
#include "pg/pgturn.h"
#include "pg/pgwire.h"

typedef struct sub_item {
    pgreq *p;
    const engine_submit_args *a;
    engine_submitted *out;
    uint8_t id[BERTH_ID_LEN];
    int same_as; /* an earlier item of the turn with the same key, or -1 */
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

/* A task row as guard_read gave it, then as the turn's items leave it. */
typedef struct trow {
    uint8_t id[BERTH_ID_LEN];
    bool found, terminal, has_lock, deleted, dirty, set_err, incident;
    char *topic, *worker;
    uint8_t token[BERTH_ID_LEN];
    int64_t lock_expires_at, available_at, created_at;
    int32_t failures, retries_left;
    const engine_error *err; /* set_err: the fail's */
} trow;

#define STMTS_MAX_FIXED                                                                            \
    8 /* submit, guard_read, delete, update, incidents, topics_due, stats, turn_fail */

struct pgops_turn {
    const engine_options *o;
    pgreq *list;
    uint64_t now_ms;
    pgturn t;
    pgturn_stmt *stmts;
    size_t cap;
    pgwire_params *params; /* one per statement */
    uint8_t **bufs;        /* their buffers */
    VEC(sub_item) subs;
    VEC(guard_item) guards;
    VEC(trow) rows;
    int s_submit, s_guard, s_topics_due, s_stats;
    const engine_stats *replica; /* the replica's own counters, for STATS */
    VEC(const char *) due_topics;
    VEC(pgops_topic_due) dues;
    char *notify;
    size_t notify_len, notify_cap;
    bool notify_in_turn;
};

/* Appends *val (n bytes) to a VEC: false when out of memory. */
bool pgplan_push(void *slot, const void *val, size_t n);
#define VEC_PUSH(vec, val) pgplan_push(VEC_ADD(vec), &(val), sizeof((vec)->v[0]))

/* A statement of the turn, with a parameter buffer of bytes; its index, or
 * -1 (out of room or memory). */
int pgplan_add_stmt(pgops_turn *t, const char *name, size_t bytes);
/* strlen, 0 for NULL. */
size_t pgplan_text_len(const char *s);
/* A text column of res copied into r's memory; NULL for SQL NULL. */
char *pgplan_copy_text(engine_reply *r, const PGresult *res, int row, int col);
/* A record of the turn's doorbell (pg/README.md §5.1): 'p' (work now on
 * topic) or 't' (work on topic in in_ms). */
void pgplan_notify_add(pgops_turn *t, char kind, const char *topic, uint64_t in_ms);
/* An event of the turn, published through the options' on_event. */
void pgplan_event(pgops_turn *t, engine_event_kind kind, const char *topic,
                  const uint8_t id[BERTH_ID_LEN], const engine_error *err, uint32_t retries_left);

#endif
