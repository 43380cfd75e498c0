/*
 * pgops.c — see pgops.h. A turn is planned in three passes over its
 * requests: the checks and the first round (submit items, guarded items),
 * the rules on the rows read (between the rounds), the answers (after
 * COMMIT); each request's part by its module (pgsubmit, pgguard, pgclaim,
 * pgread; pgplan.h holds what they share). Items point back to their
 * request and to the status they answer in (a batch's item, a fetch's
 * fused completion).
 */
#include "pg/pgops.h"

#include <stdint.h>
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
#include "pg/pgadmin.h"
#include "pg/pgcall.h"
#include "pg/pgclaim.h"
#include "pg/pgdeploy.h"
#include "pg/pgguard.h"
#include "pg/pgplan.h"
#include "pg/pgread.h"
#include "pg/pgrelay.h"
#include "pg/pgsubmit.h"

static bool between(pgturn *pt, void *arg);

static bool declared(void *ctx, const char *topic)
{
    return ctx == NULL || pgdeploy_declared(ctx, topic);
}

bool pgops_fetch_check(const engine_options *o, const pgdeploys *deps, pgreq *p)
{
    /* (strict channels: the topics must be declared; the turn then checks
     * the copy it looked at is current) */
    if (!rules_fetch_check(o, &p->req.u.fetch, declared,
                           o->strict_channels ? (void *)(uintptr_t)deps : NULL, &p->f,
                           &p->reply->status))
        return false;
    p->wait_ms = p->f.wait_ms;
    p->may_wait = p->f.wait_ms > 0;
    return true;
}

static void plan_one(pgops_turn *t, pgreq *p)
{
    switch (p->req.op) {
    case ENGINE_OP_SUBMIT:
    case ENGINE_OP_SUBMIT_BATCH:
        pgsubmit_plan(t, p);
        return;
    case ENGINE_OP_FETCH:
        if (p->completes_done)
            return; /* a waiter claiming again */
        t->routed |= t->o->strict_channels;
        if (!pgops_fetch_check(t->o, t->deps, p)) {
            p->settled = true;
        } else if (!pgguard_plan_completes(t, p, p->req.u.fetch.completes,
                                           p->req.u.fetch.n_completes)) {
            reply_no_memory(&p->reply->status);
            p->settled = true;
        }
        return;
    case ENGINE_OP_COMPLETE:
    case ENGINE_OP_COMPLETE_BATCH:
    case ENGINE_OP_FAIL:
    case ENGINE_OP_REFUSE:
    case ENGINE_OP_EXTEND_LOCK:
    case ENGINE_OP_RELEASE:
        pgguard_plan(t, p);
        return;
    case ENGINE_OP_CALL:
        pgcall_plan(t, p);
        return;
    case ENGINE_OP_AWAIT_CALL:
        pgcall_plan_await(t, p);
        return;
    case ENGINE_OP_GET_TASK:
    case ENGINE_OP_LIST_INCIDENTS:
    case ENGINE_OP_LIST_TASKS:
    case ENGINE_OP_STATS:
    case ENGINE_OP_METRICS: /* its gauges, when the replica's are older than a second */
        pgread_plan(t, p);
        return;
    case ENGINE_OP_RETRY_TERMINAL:
    case ENGINE_OP_DISCARD_TERMINAL:
        pgadmin_plan(t, p);
        return;
    case ENGINE_OP_DEPLOY:
    case ENGINE_OP_RETIRE:
    case ENGINE_OP_LIST_DEPLOYMENTS:
        pgdeploy_plan(t, p);
        return;
    case ENGINE_OP_PUSH_ACK:
    case ENGINE_OP_RETRY_DELIVERY:
        pgrelay_plan(t, p);
        return;
    case ENGINE_OP_CHECKPOINT:
        reply_status(&p->reply->status, ENGINE_CODE_UNIMPLEMENTED,
                     "checkpoint copies the embedded store; berth's state is the database's "
                     "here: back it up with pg_basebackup (a physical copy, with the WAL for "
                     "recovery to a point in time) or pg_dump --schema=berth (a logical one)");
        p->settled = true;
        return;
    default:
        reply_status(&p->reply->status, ENGINE_CODE_UNIMPLEMENTED,
                     "this request is not served on the PostgreSQL store yet");
        p->settled = true;
        return;
    }
}

/* The guarded items' statement: complete_fast when one round may do,
 * else guard_read. */
static bool plan_guards(pgops_turn *t, bool one_round)
{
    bool planned = false;
    if (one_round && !pgguard_stmt_fast(t, &planned))
        return false;
    return planned || pgguard_stmt_read(t);
}

/* The calls of the tasks guard_read locked and of the deliveries push
 * answers name, locked after those (tasks and deliveries, then instances). */
static bool plan_ilock(pgops_turn *t)
{
    size_t m = t->s_guard >= 0 ? t->guards.n : 0;
    if (m == 0 && t->acks == 0)
        return true;
    uint8_t(*tasks)[16] = mem_calloc(m ? m : 1, 16);
    uint8_t(*dels)[16] = mem_calloc(t->acks ? t->acks : 1, 16);
    bool ok = tasks != NULL && dels != NULL;
    for (size_t i = 0; ok && i < m; i++)
        memcpy(tasks[i], t->guards.v[i].id, 16);
    size_t k = ok ? pgrelay_ack_ids(t, dels) : 0;
    ok = ok && pgcall_stmt_lock(t, (const uint8_t(*)[16])tasks, m, (const uint8_t(*)[16])dels, k);
    free(tasks);
    free(dels);
    return ok;
}

int pgops_plan(const engine_options *o, const engine_stats *replica, pgreq *list,
               const pgops_how *how, PGconn *conn, pgops_turn **out)
{
    uint64_t now_ms = how->now_ms;
    bool housekeeping = how->housekeeping, fail = how->fail;
    *out = NULL;
    pgops_turn *t = mem_calloc(1, sizeof(*t));
    if (t == NULL)
        return BERTH_ENOMEM;
    t->o = o;
    t->list = list;
    t->now_ms = now_ms;
    t->s_submit = t->s_guard = t->s_fast = t->s_topics_due = t->s_stats = -1;
    t->s_dlock = t->s_gate = t->s_dlist = -1;
    t->s_ack = t->s_expired = t->s_oclaim = t->s_onext = -1;
    t->chans = how->chans;
    t->n_chans = how->n_chans;
    t->relay = how->relay || (housekeeping && how->n_chans > 0); /* (a re-drive may push) */
    t->relay_expire = how->relay || housekeeping;
    t->deps = how->deps;
    t->s_calls_stats = t->s_call = t->s_ilock = t->s_timers = t->s_drop = t->s_expire =
        t->s_redrive = t->s_await = t->s_hk_next = -1;
    t->housekeeping = housekeeping;
    t->hk_next_in_ms = UINT64_MAX;
    t->notify_i = UINT64_MAX;
    t->replica = replica;
    t->notify_in_turn = how->notify_in_turn;
    t->fetch_budget = how->fetch_budget;
    t->topics = how->topics;
    t->task_latency = how->task_latency;
    size_t fetches = 0;
    for (pgreq *p = list; p != NULL; p = p->next) {
        p->claim = -1;
        p->claim_i = 0;
        p->deferred = false;
        fetches += p->req.op == ENGINE_OP_FETCH || p->req.op == ENGINE_OP_GET_TASK ||
                   p->req.op == ENGINE_OP_LIST_INCIDENTS || p->req.op == ENGINE_OP_LIST_TASKS ||
                   p->req.op == ENGINE_OP_RETRY_TERMINAL ||
                   p->req.op == ENGINE_OP_DISCARD_TERMINAL || p->req.op == ENGINE_OP_DEPLOY ||
                   p->req.op == ENGINE_OP_LIST_DEPLOYMENTS ||
                   p->req.op == ENGINE_OP_RETRY_DELIVERY; /* a statement each */
    }
    t->cap = STMTS_MAX_FIXED + fetches;
    t->stmts = mem_calloc(t->cap, sizeof(*t->stmts));
    t->params = mem_calloc(t->cap, sizeof(*t->params));
    if (t->stmts == NULL || t->params == NULL) {
        pgops_free(t);
        return BERTH_ENOMEM;
    }
    t->t = (pgturn){.conn = conn,
                    .clock_set = how->manual,
                    .clock_ms = (int64_t)now_ms,
                    .stmts = t->stmts,
                    .between = between,
                    .between_arg = t};
    if (how->gate_wait) { /* the gate alone (pgdeploy.h, THE GATE) */
        if (!pgdeploy_stmt_last(t, true)) {
            pgops_free(t);
            return BERTH_ENOMEM;
        }
        *out = t;
        return BERTH_OK;
    }
    for (pgreq *p = list; p != NULL; p = p->next)
        if (!p->settled)
            plan_one(t, p);
    /* A deploy's lock first, while the turn holds no row; housekeeping
     * next: a key it drops is free for a submit or call of the same turn. */
    if (!pgdeploy_stmt_first(t) || (housekeeping && !pgcall_stmt_housekeeping(t)) ||
        (t->subs.n > 0 && !pgsubmit_stmt(t)) || (t->calls.n > 0 && !pgcall_stmt_call(t)) ||
        (t->guards.n > 0 && !plan_guards(t, how->one_round && !fail && !housekeeping)) ||
        !pgrelay_stmt_first(t) || !plan_ilock(t)) {
        pgops_free(t);
        return BERTH_ENOMEM;
    }
    if (fail && t->t.n > 0) { /* ENGINE_FP_STORE_WRITE: the turn fails, keeping nothing */
        int s = pgplan_add_stmt(t, "turn_fail", 16);
        if (s >= 0)
            pgwire_int4(&t->params[s], 0);
    }
    /* Its deploy epoch checked at turn_begin when the plan read the
     * replica's deployments; K_DEPLOY shared when it puts work into one
     * (a deploy's turn holds it exclusive: deploy_lock checks then). */
    t->t.check_epoch = t->routed && t->deploys == 0;
    t->t.expect_epoch = t->deps != NULL ? t->deps->epoch : 0;
    t->t.share = t->share && t->deploys == 0;
    if ((t->guards.n > 0 && t->s_fast < 0) || housekeeping || pgadmin_in(t) || pgdeploy_in(t) ||
        pgrelay_in(t)) {
        t->t.n_first = t->t.n;
    } else if (!between(&t->t, t)) {
        pgops_free(t);
        return BERTH_ENOMEM;
    }
    *out = t;
    return BERTH_OK;
}

pgturn *pgops_pgturn(pgops_turn *t)
{
    return &t->t;
}

bool pgops_empty(const pgops_turn *t)
{
    /* (a turn that only refused by the routes still checks they were current) */
    return t->t.n == 0 && !t->t.check_epoch;
}

bool pgops_deploys_changed(const pgops_turn *t)
{
    return t->deps_changed;
}

static bool between(pgturn *pt, void *arg)
{
    pgops_turn *t = arg;
    bool two = t->guards.n > 0 && t->s_fast < 0; /* guard_read's rows are in */
    if (!pgdeploy_between(t, pt) || (two && !pgguard_between(t, pt)) ||
        (t->housekeeping && !pgcall_timers(t, pt)) || !pgrelay_between(t, pt))
        return false;
    if (t->deps_unknown) { /* a task of a deployment the copy lacks: read them, plan anew */
        int s = pgplan_add_stmt(t, "deploy_stale", 8);
        pt->notify = NULL;
        return s >= 0;
    }
    if (t->t.n_first > 0)
        pgadmin_between(t, pt);
    /* The calls' writes before the tasks' (a result read from a task the
     * turn deletes), the awaits' read after both. */
    if (!pgcall_stmt_writes(t) || (two && !pgguard_stmt_outcomes(t)) || !pgrelay_stmt_writes(t))
        return false;
    pgsubmit_notify(t);
    if (!pgclaim_stmts(t) || !pgcall_stmt_after(t) || !pgrelay_stmt_claim(t) ||
        !pgdeploy_stmt_last(t, false))
        return false;
    pt->notify = t->notify_in_turn ? t->notify : NULL;
    return true;
}

void pgops_answer(pgops_turn *t, void (*bells)(void *ctx, const char *payload), void *ctx)
{
    if (t->s_fast >= 0)
        pgguard_fast_answer(t);
    if (t->s_submit >= 0)
        pgsubmit_answer(t);
    for (pgreq *p = t->list; p != NULL; p = p->next)
        if (!p->settled && p->req.op == ENGINE_OP_FETCH && p->claim >= 0 &&
            p->reply->status.code == ENGINE_CODE_OK)
            pgclaim_answer(t, p);
    pgclaim_dues(t);
    for (pgreq *p = t->list; p != NULL; p = p->next)
        if (!p->settled) {
            pgread_answer(t, p);
            pgadmin_answer(t, p);
            pgdeploy_answer(t, p);
            pgrelay_answer(t, p);
        }
    pgcall_answer(t, &t->hk_next_in_ms);
    pgsubmit_events(t);
    pgguard_events(t);
    pgrelay_events(t);
    pgdeploy_committed(t); /* deployment.retired after the acts that retired it */
    /* Here as anywhere: the doorbells the turn rang. */
    if (t->notify != NULL)
        bells(ctx, t->notify);
}

uint64_t pgops_housekeeping_next(const pgops_turn *t)
{
    return t->hk_next_in_ms;
}

const engine_stats *pgops_delta(const pgops_turn *t)
{
    return &t->delta;
}

const char *pgops_notify(const pgops_turn *t)
{
    return t->notify_in_turn ? NULL : t->notify;
}

const pgops_topic_due *pgops_dues(const pgops_turn *t, size_t *n)
{
    *n = t->dues.n;
    return t->dues.v;
}

void pgops_free(pgops_turn *t)
{
    if (t == NULL)
        return;
    pgturn_clear_results(&t->t);
    for (size_t i = 0; i < t->cap && t->params != NULL; i++)
        pgwire_params_free(&t->params[i]);
    for (size_t i = 0; i < t->rows.n; i++) {
        free(t->rows.v[i].topic);
        free(t->rows.v[i].worker);
    }
    VEC_FREE(&t->rows);
    for (size_t i = 0; i < t->irows.n; i++)
        free(t->irows.v[i].topic);
    VEC_FREE(&t->irows);
    for (size_t i = 0; i < t->orows.n; i++)
        free(t->orows.v[i].topic);
    VEC_FREE(&t->orows);
    VEC_FREE(&t->calls);
    VEC_FREE(&t->awaits);
    VEC_FREE(&t->subs);
    VEC_FREE(&t->guards);
    VEC_FREE(&t->due_topics);
    VEC_FREE(&t->dues);
    pgdeploy_turn_free(t);
    free(t->params);
    free(t->stmts);
    free(t->notify);
    free(t);
}
