/*
 * guard.c — the lock-guarded worker requests: complete, fail, refuse,
 * extend_lock, release (R8–R12).
 *
 * ZERO ROWS AFFECTED IS NEVER SUCCESS (R8)
 *   Each request matches only when the caller holds the task's live lock:
 *   task id + lock token + worker id, lock not expired, task not terminal.
 *   When it does not match, a second look at the lock state alone gives
 *   exactly one verdict: NOT_FOUND, TERMINAL, LOCK_HELD (a live lock that
 *   is not the caller's) or LOCK_LOST (expired or released). A failure
 *   never carries a payload.
 *
 * COMPLETE AND REFUSE (R9, R10, R12)
 *   Verify the lock and re-take it for the grace window, dispatch the
 *   result through intake, then delete the task: in that order, and all
 *   in the turn's ONE batch. So the dispatch and the delete are atomic:
 *   a crash keeps both or neither, never the dispatch without the delete
 *   (which would re-offer the task) nor the delete without the dispatch
 *   (which would lose the result). A repeated completion therefore finds
 *   no task (NOT_FOUND) and there is nothing for inbox dedup to absorb:
 *   the inbox is not written for completions. If intake refuses, the task
 *   stays, locked until the grace window ends, and the refusal carries
 *   intake's engine code and retryable flag. A worker's refusal takes the
 *   same path with an error instead of a result: for a call's task it is
 *   the call's answer (R12).
 *
 * Engine thread only.
 */
#include <stdio.h>
#include <string.h>

#include "engine/check.h"
#include "engine/guard.h"
#include "engine/intake.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "store/err.h"

static task *guard(engine *e, const engine_guard *g, engine_status *st)
{
    uint8_t id[BERTH_ID_LEN], token[BERTH_ID_LEN];
    if (!rules_guard_parse(g, id, token, st))
        return NULL;
    task *t = idtab_get(&e->tasks, id);
    /* (A task the guard lets through has a lock, so a claim record.) */
    const task_run *run = t != NULL ? state_run(t) : &state_run_none;
    rules_lock lk = {.found = t != NULL,
                     .terminal = t != NULL && t->terminal,
                     .has_lock = run->has_lock,
                     .lock_token = run->lock_token,
                     .worker_id = run->worker_id,
                     .lock_expires_at_ms = run->lock_expires_at_ms};
    return rules_guard(&lk, g, token, e->t.now_ms, st) ? t : NULL;
}

/* A worker's reply to the task it holds, answered in st: a completion
 * (result, or NULL to re-deliver the original payload) or, with err, a
 * refusal. Both go through intake; a call's task carries its instance
 * there. Nonzero only when the turn failed. */
static int reply_one(engine *e, const engine_guard *g, const engine_result *result,
                     const engine_error *err, engine_status *st)
{
    task *t = guard(e, g, st);
    if (t == NULL)
        return BERTH_OK;
    /* The parked body: the payload to re-deliver when there is no result,
     * the correlation headers of a call. Read before anything changes. */
    store_body b = {0};
    bool need_body = t->has_instance || (err == NULL && result == NULL);
    int rv = need_body ? state_task_read_body(e, t, &b) : BERTH_OK;
    if (rv != BERTH_OK) {
        if (rv == BERTH_ECORRUPT)
            reply_status(st, ENGINE_CODE_INTERNAL, "the task's body did not decode");
        else if (rv == BERTH_ENOMEM)
            reply_no_memory(st);
        else
            reply_unavailable(st, "reading the task failed");
        return BERTH_OK; /* the task is as it was: the worker still holds it */
    }
    /* Re-take the lock for the grace window: no other claim can take the
     * task while its result is inside the engine, nor, if intake refuses
     * it, until the window ends. */
    t->run->lock_expires_at_ms = e->t.now_ms + e->o.lock_default_ms;
    state_task_reindex(e, t);

    /* A refusal carries no payload; a completion its result, or else the
     * original payload, re-delivered. */
    inbound in = {.topic = t->topic,
                  .chan = t->chan,
                  .parked = need_body ? &b : NULL,
                  .error = err,
                  .from = t};
    intake_set_reply(&in, result, &b);
    rv = intake_dispatch(e, &in, st);
    store_body_clear(&b);
    if (rv != BERTH_OK) /* refused: locked until the grace window ends */
        return turn_failed(e) ? rv : state_task_put(e, t);
    /* Dispatched: the delete joins the dispatch's batch. Refusal is final
     * and silent (R12): the row goes, the event tells. */
    if (err != NULL) {
        t->topic->tc->refused++;
        turn_event(e, ENGINE_EVENT_TASK_REFUSED, t->topic, t->id, err, 0);
    } else {
        t->topic->tc->completed++;
        uint64_t now = e->t.now_ms;
        hist_observe(&e->task_latency,
                     now > t->created_at_ms ? (double)(now - t->created_at_ms) / 1000.0 : 0);
        turn_event(e, ENGINE_EVENT_TASK_COMPLETED, t->topic, t->id, NULL, 0);
    }
    state_task_delete(e, t);
    return BERTH_OK;
}

static int complete_one(engine *e, const engine_complete_args *a, engine_status *st)
{
    return reply_one(e, &a->guard, a->result, NULL, st);
}

int guard_complete(engine *e, pending *p)
{
    return complete_one(e, &p->req.u.complete, &p->reply->status);
}

int guard_complete_items(engine *e, const engine_complete_args *items, size_t n, engine_reply *r)
{
    if (n == 0)
        return BERTH_OK;
    r->statuses = reply_mem(r, n * sizeof(*r->statuses));
    if (r->statuses == NULL) {
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    r->n_statuses = n;
    for (size_t i = 0; i < n; i++) {
        int rv = complete_one(e, &items[i], &r->statuses[i]);
        if (rv != BERTH_OK)
            return rv;
    }
    return BERTH_OK;
}

int guard_complete_batch(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    size_t n = p->req.u.complete_batch.n;
    if (!check_items(n, e->o.batch_max, &r->status))
        return BERTH_OK;
    return guard_complete_items(e, p->req.u.complete_batch.items, n, r);
}

int guard_fail(engine *e, pending *p)
{
    const engine_fail_args *a = &p->req.u.fail;
    engine_reply *r = p->reply;
    engine_status *st = &r->status;
    rules_fail_in in;
    if (!rules_fail_check(&e->o, a, &in, st))
        return BERTH_OK;
    task *t = guard(e, &a->guard, st);
    if (t == NULL)
        return BERTH_OK;
    if (state_task_set_error(t->run, &a->error) != BERTH_OK) {
        reply_no_memory(st); /* nothing changed yet */
        return BERTH_OK;
    }
    uint64_t now = e->t.now_ms;
    rules_fail_out f;
    rules_fail_outcome(&e->o, a, &in, t->run->failures, t->run->retries_left, now, &f);
    t->run->failures = f.failures;
    t->run->retries_left = f.retries_left;
    t->run->lock_expires_at_ms = now; /* the claim ends with its failure */
    t->topic->tc->failed++;
    int rv;
    if (f.terminal) {
        t->terminal = true;
        t->topic->tc->terminal++;
        state_task_unindex(t);
        (void)state_task_gauge(e, t, now); /* out of the gauges: frees, never fails */
        t->topic->n_terminal++;
        state_dep(e, t->chan)->n_terminal++;
        if ((rv = state_incident_put(e, STORE_INCIDENT_TASK_TERMINAL, t->id, t->topic,
                                     a->error.code, a->error.message)) != BERTH_OK)
            return rv;
        turn_event(e, ENGINE_EVENT_TASK_TERMINAL, t->topic, t->id, &a->error, 0);
    } else {
        t->run->available_at_ms = f.available_at_ms;
        state_task_reindex(e, t);
        turn_event(e, ENGINE_EVENT_TASK_FAILED, t->topic, t->id, &a->error, t->run->retries_left);
        if (f.pause_ms == 0)
            turn_doorbell(e, t->topic);
    }
    if ((rv = state_task_put(e, t)) != BERTH_OK)
        return rv;
    r->terminal = t->terminal;
    r->retries_left = t->run->retries_left;
    r->available_at_ms = t->terminal ? 0 : t->run->available_at_ms;
    return BERTH_OK;
}

int guard_refuse(engine *e, pending *p)
{
    const engine_refuse_args *a = &p->req.u.refuse;
    engine_status *st = &p->reply->status;
    if (!check_error(&a->error, st))
        return BERTH_OK;
    return reply_one(e, &a->guard, NULL, &a->error, st);
}

int guard_extend_lock(engine *e, pending *p)
{
    const engine_extend_args *a = &p->req.u.extend;
    engine_reply *r = p->reply;
    uint64_t lock_ms;
    if (!rules_extend_check(&e->o, a, &lock_ms, &r->status))
        return BERTH_OK;
    task *t = guard(e, &a->guard, &r->status);
    if (t == NULL)
        return BERTH_OK;
    t->run->lock_expires_at_ms = e->t.now_ms + lock_ms;
    state_task_reindex(e, t);
    int rv = state_task_put(e, t);
    if (rv == BERTH_OK)
        r->lock_expires_at_ms = t->run->lock_expires_at_ms;
    return rv;
}

int guard_release(engine *e, pending *p)
{
    task *t = guard(e, &p->req.u.release, &p->reply->status);
    if (t == NULL)
        return BERTH_OK;
    t->run->lock_expires_at_ms = e->t.now_ms; /* fetchable from now, behind older work */
    state_task_reindex(e, t);
    int rv = state_task_put(e, t);
    if (rv == BERTH_OK)
        turn_doorbell(e, t->topic);
    return rv;
}
