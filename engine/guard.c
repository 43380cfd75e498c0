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
 * COMPLETE (R9, R10)
 *   Verify the lock and re-take it for the grace window, dispatch the
 *   result through intake, then delete the task. Dispatch and delete share
 *   the turn's batch, so a crash cannot land between them, except through
 *   the crash failpoint, which commits the dispatch alone and halts: the
 *   task comes back when the grace window ends and the second completion
 *   is absorbed by inbox dedup. If intake refuses, the task stays, locked
 *   until the grace window ends, and the refusal carries intake's engine
 *   code and retryable flag.
 *
 *   The inbox key is written only when the task outlives the dispatch
 *   (the failpoint): a completion whose delete shares its batch leaves
 *   nothing that could offer it again. So only a task recovered from the
 *   store asks the inbox first.
 *
 * Engine thread only.
 */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "engine/internal.h"

static task *guard(engine *e, const engine_guard *g, engine_status *st)
{
    uint8_t token[BERTH_ID_LEN];
    if (!check_text(g->worker_id, ENGINE_WORKER_ID_MAX, true, "worker_id", st))
        return NULL;
    if (berth_id_parse(g->lock_token, token) != BERTH_OK) {
        status_set(st, ENGINE_CODE_INVALID_ARGUMENT, "lock_token: not a lock token");
        snprintf(st->field, sizeof(st->field), "lock_token");
        return NULL;
    }
    task *t = task_find(e, g->task_id, "task_id", st);
    if (t == NULL)
        return NULL;
    bool live = t->has_lock && t->lock_expires_at_ms > e->t.now_ms;
    if (!t->terminal && live && sodium_memcmp(token, t->lock_token, BERTH_ID_LEN) == 0 &&
        strcmp(g->worker_id, t->worker_id) == 0)
        return t;
    /* The second look: lock state only. */
    if (t->terminal) {
        status_set(st, ENGINE_CODE_FAILED_PRECONDITION,
                   "task %s is terminal: its failure budget is spent", g->task_id);
        st->verdict = ENGINE_VERDICT_TERMINAL;
    } else if (live) {
        status_set(st, ENGINE_CODE_ABORTED, "task %s is held by another claim", g->task_id);
        st->verdict = ENGINE_VERDICT_LOCK_HELD;
    } else {
        status_set(st, ENGINE_CODE_ABORTED,
                   "task %s: the lock expired or was released; the task is fetchable again",
                   g->task_id);
        st->verdict = ENGINE_VERDICT_LOCK_LOST;
    }
    return NULL;
}

static bool put_state(engine *e, task *t, engine_status *st)
{
    if (task_put_state(e, t) == BERTH_OK)
        return true;
    status_set(st, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory");
    e->t.abort = true;
    return false;
}

static void complete_one(engine *e, const engine_complete_args *a, engine_status *st,
                         bool *duplicate)
{
    task *t = guard(e, &a->guard, st);
    if (t == NULL)
        return;
    /* Re-take the lock for the grace window: no other claim can take the
     * task while its result is inside the engine, nor, if intake refuses
     * it, until the window ends. Its row is written only if the task
     * outlives this request; a delete in the same batch would cover it. */
    t->lock_expires_at_ms = e->t.now_ms + e->o.lock_default_ms;
    task_reindex(e, t);

    /* The parked body: the payload to re-deliver when there is no result,
     * the correlation headers of a call. */
    store_body b = {0};
    bool need_body = a->result == NULL || t->has_instance;
    int rv = need_body ? task_read_body(e, t, &b) : BERTH_OK;
    if (rv != BERTH_OK) {
        if (rv == BERTH_ECORRUPT)
            status_set(st, ENGINE_CODE_INTERNAL, "the task's body did not decode");
        else
            status_unavailable(st, "reading the task failed");
        put_state(e, t, st);
        return;
    }
    uint8_t dkey[STORE_DELIVERY_KEY_LEN];
    store_delivery_key(dkey, t->seq);
    inbound in = {.key = dkey,
                  .key_len = sizeof(dkey),
                  .topic = t->topic,
                  .parked = need_body ? &b : NULL,
                  .maybe_seen = t->recovered};
    if (a->result != NULL) {
        in.payload = a->result->payload;
        in.payload_len = a->result->payload_len;
        in.content_type = a->result->content_type;
        in.headers = a->result->headers;
        in.n_headers = a->result->n_headers;
    } else { /* no result: the original payload is re-delivered */
        in.payload = b.payload;
        in.payload_len = b.payload_len;
        in.content_type = b.content_type;
    }
    rv = intake_dispatch(e, &in, st, duplicate);
    if (rv != BERTH_OK) {
        store_body_clear(&b);
        put_state(e, t, st); /* refused: locked until the grace window ends */
        return;
    }
    if (failpoint_take(&e->fp_crash)) {
        /* The dispatch and the re-taken lock are committed; the delete
         * never happens. The task outlives the dispatch, so its inbox key
         * is written, as a store that cannot share one batch would. */
        intake_remember(e, &in);
        store_body_clear(&b);
        put_state(e, t, st);
        e->t.halt = true;
        return;
    }
    store_body_clear(&b);
    turn_event(e, ENGINE_EVENT_TASK_COMPLETED, t->topic, t->id, NULL, 0);
    task_delete(e, t); /* in the dispatch's batch: no inbox key needed */
}

void op_complete(engine *e, pending *p)
{
    complete_one(e, &p->req.u.complete, &p->reply->status, &p->reply->duplicate);
}

void op_complete_batch(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    size_t n = p->req.u.complete_batch.n;
    if (n == 0) {
        status_set(&r->status, ENGINE_CODE_INVALID_ARGUMENT, "items: at least one is required");
        snprintf(r->status.field, sizeof(r->status.field), "items");
        return;
    }
    if (n > e->o.batch_max) {
        status_over_ceiling(&r->status, "items", n, e->o.batch_max);
        return;
    }
    r->statuses = reply_mem(r, n * sizeof(*r->statuses));
    if (r->statuses == NULL) {
        status_set(&r->status, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    r->n_statuses = n;
    for (size_t i = 0; i < n && !e->t.halt; i++) {
        bool dup = false;
        complete_one(e, &p->req.u.complete_batch.items[i], &r->statuses[i], &dup);
    }
}

void op_fail(engine *e, pending *p)
{
    const engine_fail_args *a = &p->req.u.fail;
    engine_reply *r = p->reply;
    engine_status *st = &r->status;
    uint64_t retry_in = 0, retries_left = 0;
    if (!check_bound(a->has_retry_in_ms, a->retry_in_ms, 0, e->o.retry_max_ms, true, "retry_in_ms",
                     &retry_in, st) ||
        !check_bound(a->has_retries_left, a->retries_left, 0, e->o.retries_max, true,
                     "retries_left", &retries_left, st) ||
        !check_error(&a->error, st))
        return;
    task *t = guard(e, &a->guard, st);
    if (t == NULL)
        return;
    uint64_t now = e->t.now_ms;
    t->failures++;
    if (a->has_retries_left)
        t->retries_left = (uint32_t)retries_left;
    else if (t->retries_left > 0)
        t->retries_left--;
    task_set_error(t, &a->error);
    t->lock_expires_at_ms = now; /* the claim ends with its failure */
    if (t->retries_left == 0) {
        t->terminal = true;
        heap_remove(&t->topic->ready, &t->ready);
        t->topic->n_terminal++;
        if (incident_put(e, STORE_INCIDENT_TASK_TERMINAL, t->id, t->topic, a->error.code,
                         a->error.message) != BERTH_OK)
            e->t.abort = true;
        turn_event(e, ENGINE_EVENT_TASK_TERMINAL, t->topic, t->id, &a->error, 0);
    } else {
        uint64_t pause = a->has_retry_in_ms
                             ? retry_in
                             : engine_backoff(e->o.backoff_initial_ms, e->o.backoff_max_ms,
                                              t->failures, e->o.backoff_jitter);
        t->available_at_ms = now + pause;
        task_reindex(e, t);
        turn_event(e, ENGINE_EVENT_TASK_FAILED, t->topic, t->id, &a->error, t->retries_left);
        if (pause == 0)
            doorbell_ring(e, t->topic);
    }
    if (!put_state(e, t, st))
        return;
    r->terminal = t->terminal;
    r->retries_left = t->retries_left;
    r->available_at_ms = t->terminal ? 0 : t->available_at_ms;
}

void op_refuse(engine *e, pending *p)
{
    const engine_refuse_args *a = &p->req.u.refuse;
    engine_status *st = &p->reply->status;
    if (!check_error(&a->error, st))
        return;
    task *t = guard(e, &a->guard, st);
    if (t == NULL)
        return;
    /* Final and silent (R12): the row goes, the event tells. */
    turn_event(e, ENGINE_EVENT_TASK_REFUSED, t->topic, t->id, &a->error, 0);
    task_delete(e, t);
}

void op_extend_lock(engine *e, pending *p)
{
    const engine_extend_args *a = &p->req.u.extend;
    engine_reply *r = p->reply;
    uint64_t lock_ms;
    if (!check_bound(a->has_lock_ms, a->lock_ms, e->o.lock_default_ms, e->o.lock_max_ms, false,
                     "lock_ms", &lock_ms, &r->status))
        return;
    task *t = guard(e, &a->guard, &r->status);
    if (t == NULL)
        return;
    t->lock_expires_at_ms = e->t.now_ms + lock_ms;
    task_reindex(e, t);
    if (put_state(e, t, &r->status))
        r->lock_expires_at_ms = t->lock_expires_at_ms;
}

void op_release(engine *e, pending *p)
{
    engine_status *st = &p->reply->status;
    task *t = guard(e, &p->req.u.release, st);
    if (t == NULL)
        return;
    t->lock_expires_at_ms = e->t.now_ms; /* fetchable from now, behind older work */
    task_reindex(e, t);
    if (put_state(e, t, st))
        doorbell_ring(e, t->topic);
}
