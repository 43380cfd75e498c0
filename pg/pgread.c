/* pgread.c — see pgread.h. */
#include "pg/pgread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/check.h"
#include "engine/mem.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "pg/pgwire.h"
#include "store/err.h"
#include "store/keys.h"
#include "store/records.h"

static uint64_t be64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

static void put_be64(uint8_t *b, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

static void pgread_answer_stats(pgops_turn *t, engine_reply *r)
{
    const PGresult *res = t->stmts[t->s_stats].result;
    int n = res ? PQntuples(res) : 0;
    r->stats = *t->replica;
    r->topic_stats = n ? reply_mem(r, (size_t)n * sizeof(*r->topic_stats)) : NULL;
    if (n && r->topic_stats == NULL) {
        reply_no_memory(&r->status);
        return;
    }
    for (int i = 0; i < n; i++) {
        engine_topic_stats *ts = &r->topic_stats[i];
        int64_t v[5] = {0};
        for (int c = 0; c < 5; c++)
            (void)pgwire_get_int8(res, i, 1 + c, &v[c]);
        *ts = (engine_topic_stats){.topic = pgplan_copy_text(r, res, i, 0),
                                   .ready = (uint64_t)v[0],
                                   .locked = (uint64_t)v[1],
                                   .backoff = (uint64_t)v[2],
                                   .delayed = (uint64_t)v[3],
                                   .terminal = (uint64_t)v[4]};
        r->stats.ready += ts->ready;
        r->stats.locked += ts->locked;
        r->stats.backoff += ts->backoff;
        r->stats.delayed += ts->delayed;
        r->stats.terminal += ts->terminal;
        r->stats.tasks += ts->ready + ts->locked + ts->backoff + ts->delayed + ts->terminal;
    }
    r->n_topic_stats = (size_t)n;
    r->stats.topics = (uint64_t)n;
    const PGresult *one = t->stmts[t->s_calls_stats].result;
    int64_t v[7] = {0};
    for (int c = 0; one != NULL && PQntuples(one) == 1 && c < 7; c++)
        (void)pgwire_get_int8(one, 0, c, &v[c]);
    r->stats.instances_waiting = (uint64_t)v[0];
    r->stats.instances_backoff = (uint64_t)v[1];
    r->stats.deployments_live = (uint64_t)v[2];
    r->stats.deployments_draining = (uint64_t)v[3];
    r->stats.deployments_retired = (uint64_t)v[4];
    r->stats.outbox_pending = (uint64_t)v[5];
    r->stats.poisoned = (uint64_t)v[6];
}

/* A task_get row (its columns from off on) into i, its memory r's. */
static void info_of_row(engine_reply *r, const PGresult *res, int row, int off, engine_task_info *i)
{
    int32_t state = 0, claims = 0, rl = 0, fl = 0, bytes = 0;
    int64_t lx = 0, av = 0, created = 0, prio = 0;
    (void)pgwire_get_int4(res, row, off + 1, &state);
    if (!pgwire_isnull(res, row, off + 3))
        (void)pgwire_get_int8(res, row, off + 3, &lx);
    (void)pgwire_get_int8(res, row, off + 4, &av);
    (void)pgwire_get_int4(res, row, off + 5, &claims);
    (void)pgwire_get_int4(res, row, off + 6, &rl);
    (void)pgwire_get_int4(res, row, off + 7, &fl);
    (void)pgwire_get_int8(res, row, off + 11, &created);
    (void)pgwire_get_int8(res, row, off + 12, &prio);
    (void)pgwire_get_int4(res, row, off + 13, &bytes);
    i->topic = pgplan_copy_text(r, res, row, off);
    i->state = (engine_task_state)state;
    i->worker_id = pgplan_copy_text(r, res, row, off + 2);
    i->lock_expires_at_ms = (uint64_t)lx;
    i->available_at_ms = (uint64_t)av;
    i->attempt = (uint32_t)claims;
    i->retries_left = (uint32_t)rl;
    i->failures = (uint32_t)fl;
    i->last_error = (engine_error){pgplan_copy_text(r, res, row, off + 8),
                                   pgplan_copy_text(r, res, row, off + 9),
                                   pgplan_copy_text(r, res, row, off + 10)};
    i->created_at_ms = (uint64_t)created;
    i->priority = (uint32_t)prio;
    i->payload_bytes = (size_t)bytes;
}

static void pgread_answer_task(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    const PGresult *res = t->stmts[p->claim].result;
    if (res == NULL || PQntuples(res) == 0) {
        rules_not_found(&r->status, p->req.u.get_task.id);
        return;
    }
    snprintf(r->task.id, sizeof r->task.id, "%s", p->req.u.get_task.id);
    info_of_row(r, res, 0, 0, &r->task);
    store_header hs[ENGINE_HEADERS_MAX];
    store_body b = {.content_type = pgplan_copy_text(r, res, 0, 14), .headers = hs};
    if (!pgplan_copy_headers(r, res, 0, 15, hs, &b.n_headers) ||
        !pgplan_copy_bytes(r, res, 0, 16, &b.payload, &b.payload_len) ||
        !rules_task_info_body(r, &b, &r->task)) {
        reply_reset(r);
        reply_no_memory(&r->status);
    }
}

/* tasks_list's rows: found, last, more, then id and task_get's columns. */
static void pgread_answer_list(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    const PGresult *res = t->stmts[p->claim].result;
    int n = res ? PQntuples(res) : 0;
    bool found = false, more = false;
    if (n < 1 || pgwire_get_bool(res, 0, 0, &found) != BERTH_OK) {
        reply_unavailable(&r->status, "reading the tasks failed");
        return;
    }
    if (!found) {
        rules_list_after_unknown(&r->status);
        return;
    }
    r->infos = reply_mem(r, (size_t)n * sizeof(*r->infos));
    if (r->infos == NULL) {
        reply_no_memory(&r->status);
        return;
    }
    for (int i = 0; i < n; i++) {
        uint8_t id[BERTH_ID_LEN];
        if (pgwire_isnull(res, i, 3) || pgwire_get_uuid(res, i, 3, id) != BERTH_OK)
            continue; /* the first row of a page where none passed */
        engine_task_info *o = &r->infos[r->n_infos++];
        memset(o, 0, sizeof *o);
        store_id_format(id, o->id);
        info_of_row(r, res, i, 4, o);
    }
    int64_t last = 0;
    if (!pgwire_isnull(res, 0, 1) && pgwire_get_int8(res, 0, 1, &last) == BERTH_OK &&
        pgwire_get_bool(res, 0, 2, &more) == BERTH_OK && more)
        rules_list_token((uint64_t)last, r->next);
}

static void pgread_answer_incidents(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    const PGresult *res = t->stmts[p->claim].result;
    int n = res ? PQntuples(res) : 0;
    r->incidents = n ? reply_mem(r, (size_t)n * sizeof(*r->incidents)) : NULL;
    if (n && r->incidents == NULL) {
        reply_no_memory(&r->status);
        return;
    }
    for (int i = 0; i < n; i++) {
        engine_incident *o = &r->incidents[i];
        int64_t at = 0, seq = 0;
        int32_t kind = 0;
        uint8_t id[BERTH_ID_LEN] = {0}, ref[BERTH_ID_LEN] = {0};
        (void)pgwire_get_int8(res, i, 0, &at);
        (void)pgwire_get_int8(res, i, 1, &seq);
        (void)pgwire_get_int4(res, i, 2, &kind);
        (void)pgwire_get_uuid(res, i, 3, ref);
        put_be64(id, (uint64_t)at);
        put_be64(id + 8, (uint64_t)seq);
        memset(o, 0, sizeof *o);
        store_id_format(id, o->id);
        store_id_format(ref, o->subject_id);
        o->kind = kind;
        o->topic = pgplan_copy_text(r, res, i, 4);
        o->error.code = pgplan_copy_text(r, res, i, 5);
        o->error.message = pgplan_copy_text(r, res, i, 6);
        o->at_ms = (uint64_t)at;
        (void)pgwire_get_bool(res, i, 7, &o->open);
    }
    r->n_incidents = (size_t)n;
    /* A full page may have more after it (the statement filters in the
     * database: a page is never short before the end). */
    uint32_t asked = p->req.u.list_incidents.limit;
    if (n > 0 && (uint32_t)n >= (asked ? asked : t->o->batch_default))
        snprintf(r->next_incident, sizeof r->next_incident, "%s", r->incidents[n - 1].id);
}

void pgread_plan(pgops_turn *t, pgreq *p)
{
    engine_status *st = &p->reply->status;
    bool ok = true;
    switch (p->req.op) {
    case ENGINE_OP_GET_TASK: {
        uint8_t id[BERTH_ID_LEN];
        if (!rules_task_id(p->req.u.get_task.id, "id", id, st)) {
            p->settled = true;
            return;
        }
        p->claim = pgplan_add_stmt(t, "task_get", 64); /* (its statement, as a fetch's claim) */
        ok = p->claim >= 0;
        if (ok)
            pgwire_uuid(&t->params[p->claim], id);
        break;
    }
    case ENGINE_OP_LIST_INCIDENTS: {
        uint64_t limit;
        uint32_t asked = p->req.u.list_incidents.limit;
        const char *after = p->req.u.list_incidents.after_id;
        uint8_t from[BERTH_ID_LEN];
        if (!check_bound(asked != 0, asked, t->o->batch_default, t->o->batch_max, false, "limit",
                         &limit, st)) {
            p->settled = true;
            return;
        }
        if (after != NULL && store_id_parse(after, from) != BERTH_OK) {
            reply_status(st, ENGINE_CODE_INVALID_ARGUMENT,
                         "after_id: not an incident id (32 hex digits)");
            snprintf(st->field, sizeof st->field, "after_id");
            p->settled = true;
            return;
        }
        p->claim = pgplan_add_stmt(t, "incidents_list", 64);
        ok = p->claim >= 0;
        if (ok) {
            pgwire_int8(&t->params[p->claim], after ? (int64_t)be64(from) : -1);
            pgwire_int8(&t->params[p->claim], after ? (int64_t)be64(from + 8) : -1);
            pgwire_int4(&t->params[p->claim], (int32_t)limit);
            pgwire_bool(&t->params[p->claim], p->req.u.list_incidents.open_only);
        }
        break;
    }
    case ENGINE_OP_LIST_TASKS: {
        rules_list l;
        const char *topic = p->req.u.list_tasks.topic;
        engine_task_state state = p->req.u.list_tasks.state;
        if (!rules_list_check(t->o, topic, state, p->req.u.list_tasks.limit,
                              p->req.u.list_tasks.after, &l, st)) {
            p->settled = true;
            return;
        }
        p->claim = pgplan_add_stmt(t, "tasks_list", 96 + pgplan_text_len(topic));
        ok = p->claim >= 0;
        if (ok) {
            pgwire_params *pp = &t->params[p->claim];
            if (topic != NULL)
                pgwire_text(pp, topic);
            else
                pgwire_null(pp, PGWIRE_TEXT);
            pgwire_int4(pp, (int32_t)state);
            pgwire_int8(pp, l.after == RULES_AFTER_SEQ ? (int64_t)l.seq : -1);
            if (l.after == RULES_AFTER_ID)
                pgwire_uuid(pp, l.id);
            else
                pgwire_null(pp, PGWIRE_UUID);
            pgwire_int4(pp, (int32_t)(l.limit * RULES_LIST_SCAN_FACTOR));
            pgwire_int4(pp, (int32_t)l.limit);
        }
        break;
    }
    default: /* ENGINE_OP_STATS, ENGINE_OP_METRICS (its gauges) */
        if (t->s_stats < 0) {
            t->s_stats = pgplan_add_stmt(t, "stats", 16);
            t->s_calls_stats = pgplan_add_stmt(t, "calls_stats", 16);
        }
        ok = t->s_stats >= 0 && t->s_calls_stats >= 0;
        break;
    }
    if (!ok) {
        reply_no_memory(st);
        p->settled = true;
    }
}

void pgread_answer(pgops_turn *t, pgreq *p)
{
    if (p->req.op == ENGINE_OP_STATS || p->req.op == ENGINE_OP_METRICS)
        pgread_answer_stats(t, p->reply);
    else if (p->req.op == ENGINE_OP_GET_TASK)
        pgread_answer_task(t, p);
    else if (p->req.op == ENGINE_OP_LIST_INCIDENTS)
        pgread_answer_incidents(t, p);
    else if (p->req.op == ENGINE_OP_LIST_TASKS)
        pgread_answer_list(t, p);
}
