/*
 * claim.c — fetch-and-lock, waiting fetches, and doorbells (R5, R6, R7).
 *
 * THE CLAIM PREDICATE (R5)
 *   A task is fetchable when it is not terminal, its delay or backoff has
 *   ended and it is unlocked or its lock has expired. Each topic keeps its
 *   non-terminal tasks in two orders (core.h): those not fetchable when
 *   last placed in `later`, by the instant they become fetchable,
 *   max(available_at, lock_expires_at); the fetchable ones in `ready`, most
 *   urgent first (priority, then that instant, then submission). A claim
 *   moves the front of `later` whose instant has come into `ready` and
 *   takes the front of `ready`; a fetch of several topics takes the most
 *   urgent front among them. An expired lock or an ended delay is not a
 *   state anyone cleans up: the task simply moves the next time its topic
 *   is claimed from. There is no sweeper.
 *
 * LONG POLLS (R7)
 *   A fetch that claims nothing and may wait becomes a waiter: linked into
 *   each of its topics and into a deadline heap. Doorbells: a park (or a
 *   release, a retry) rings its topic; at the end of the turn each rung
 *   topic's waiters, oldest first, re-run their claims. A doorbell carries
 *   nothing but "look again". A waiting fetch also hears time: when a
 *   watched topic's front becomes fetchable (a lock ran out, a backoff
 *   ended) the actor wakes for it and rings the topic. At its deadline a
 *   waiter is answered with an empty list (OK). The claim and the
 *   registration run in one turn of the one actor, and parks happen later
 *   in the turn than requests, so no park can fall between a fetch's claim
 *   and its wait: no wake-up is lost.
 *
 * Engine thread only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "engine/claim.h"
#include "engine/deploy.h"
#include "engine/guard.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "engine/wait.h"
#include "store/err.h"

/* The bytes of the answers claimed by p leave with p (commit.c). */
static void charge(engine *e, pending *p, uint64_t bytes)
{
    p->charged += bytes;
    atomic_fetch_add(&e->fetch_inflight, bytes);
}

/* Claims up to max fetchable tasks of the given topics, most urgent first
 * across them, into p's reply; stops early rather than pass
 * the fetch byte budget (the first task always fits: the budget is at
 * least the payload ceiling), or the engine's budget for answers not yet
 * handed over (then it claims nothing more until some have left: the
 * first task always fits when none is in flight). A failure before the
 * first task is claimed is the fetch's own answer (r->status); after it,
 * the fetch answers with the tasks it has. Nonzero only when the turn
 * failed. */
static int claim_tasks(engine *e, topic *const *topics, size_t n_topics, uint32_t max,
                       uint64_t lock_ms, const char *worker_id, pending *p)
{
    engine_reply *r = p->reply;
    uint64_t now = e->t.now_ms, bytes = 0;
    uint64_t flying = atomic_load(&e->fetch_inflight);
    int rv_end = BERTH_OK;
    while (r->n_tasks < max) {
        task *t = NULL;
        for (size_t i = 0; i < n_topics; i++) {
            task *x = topics[i] ? state_topic_front(topics[i], now) : NULL;
            if (x != NULL && (t == NULL || heap_less(&x->ready, &t->ready)))
                t = x;
        }
        if (t == NULL)
            break;
        if (r->n_tasks > 0 && bytes + t->body_bytes > e->o.fetch_max_bytes)
            break;
        if ((flying > 0 || r->n_tasks > 0) &&
            flying + bytes + t->body_bytes > e->o.fetch_inflight_max_bytes) {
            e->fetch_blocked_at = flying; /* (claim_next_due) */
            atomic_store(&e->fetch_blocked, true);
            break;
        }

        /* Everything that can fail comes before the task changes. */
        if (r->tasks == NULL && (r->tasks = reply_mem(r, max * sizeof(*r->tasks))) == NULL)
            goto no_memory;
        store_body *b = reply_body(r);
        if (b == NULL)
            goto no_memory;
        int rv = state_task_read_body(e, t, b);
        if (rv == BERTH_ENOMEM)
            goto no_memory;
        if (rv != BERTH_OK) {
            if (r->n_tasks == 0) {
                char id[ENGINE_ID_STR];
                store_id_format(t->id, id);
                if (rv == BERTH_ECORRUPT)
                    reply_status(&r->status, ENGINE_CODE_INTERNAL,
                                 "task %s: its body did not decode", id);
                else
                    reply_unavailable(&r->status, "reading a task failed");
            }
            break;
        }
        /* A call's task also carries its call in reserved headers. */
        engine_header *hs;
        char *call;
        char *wid = mem_strdup(worker_id);
        task_run *run = NULL;
        if (wid == NULL || !rules_task_mem(r, b, &hs, &call) ||
            (run = state_task_run(e, t)) == NULL) {
            free(wid);
            goto no_memory;
        }

        bytes += t->body_bytes;
        run->has_lock = true;
        state_random(e, run->lock_token, BERTH_ID_LEN);
        free(run->worker_id);
        run->worker_id = wid;
        run->lock_expires_at_ms = now + lock_ms;
        run->claims++;
        t->topic->tc->fetched++;
        state_task_reindex(e, t);
        if ((rv = state_task_put(e, t)) != BERTH_OK) {
            rv_end = rv;
            break;
        }

        rules_task_view v = {.id = t->id,
                             .body = b,
                             .attempt = run->claims,
                             .retries_left = run->retries_left,
                             .priority = t->priority,
                             .lock_token = run->lock_token,
                             .lock_expires_at_ms = run->lock_expires_at_ms,
                             .created_at_ms = t->created_at_ms,
                             .available_at_ms = run->available_at_ms};
        rules_task_answer(&r->tasks[r->n_tasks++], &v, hs, call);
    }
    charge(e, p, bytes);
    return rv_end;

no_memory:
    /* Never "no work": a fetch that claimed nothing says why. */
    if (r->n_tasks == 0)
        reply_no_memory(&r->status);
    charge(e, p, bytes);
    return BERTH_OK;
}

/* rules_fetch_check()'s look at the declared channels. */
static bool declared(void *e, const char *name)
{
    return deploy_declared(e, name);
}

int claim_fetch(engine *e, pending *p)
{
    const engine_fetch_args *a = &p->req.u.fetch;
    engine_reply *r = p->reply;
    rules_fetch f;
    if (!rules_fetch_check(&e->o, a, declared, e, &f, &r->status))
        return BERTH_OK;
    uint64_t max = f.max_tasks, lock_ms = f.lock_ms, wait_ms = f.wait_ms;
    /* A fused fetch: its completions first, in this turn (so in its sync,
     * before any wait), each with its own status; then the claim, which
     * cannot hand back a task just completed (it is gone, or held). */
    int rv = guard_complete_items(e, a->completes, a->n_completes, r);
    if (rv != BERTH_OK || r->status.code != ENGINE_CODE_OK)
        return rv;
    topic *stack[64] = {0};
    topic **topics = a->n_topics <= 64 ? stack : mem_calloc(a->n_topics, sizeof(*topics));
    if (topics == NULL) {
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    /* A topic with no struct has no tasks; NULL entries are skipped. */
    for (size_t i = 0; i < a->n_topics; i++)
        topics[i] = state_topic(e, a->topics[i], strlen(a->topics[i]), false);
    rv = claim_tasks(e, topics, a->n_topics, (uint32_t)max, lock_ms, a->worker_id, p);
    if (topics != stack)
        free(topics);
    /* Answered by the actor unless it becomes a waiter. */
    if (rv == BERTH_OK && r->n_tasks == 0 && r->status.code == ENGINE_CODE_OK && wait_ms > 0 &&
        wait_may(e, p, &r->status) && !wait_fetch(e, p, (uint32_t)max, lock_ms, wait_ms))
        reply_no_memory(&r->status);
    if (p->waiter != NULL && r->n_statuses > 0) {
        pending **slot = VEC_ADD(&e->t.fused_waits);
        if (slot == NULL) {
            wait_answer(e, p->waiter); /* (with the turn's failure, as the rest of it) */
            return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory keeping a wait");
        }
        *slot = p;
    }
    if (p->waiter == NULL)
        hist_observe(&e->fetch_wait, 0);
    return rv;
}

static bool front_due(const topic *tp, uint64_t now)
{
    return state_topic_due(tp) <= now;
}

int claim_wake(engine *e)
{
    uint64_t now = e->t.now_ms;
    for (topic *tp = e->watched; tp != NULL; tp = tp->watch_next)
        if (front_due(tp, now))
            turn_doorbell(e, tp);
    while (e->t.rung != NULL) {
        topic *tp = e->t.rung;
        e->t.rung = tp->rung_next;
        tp->rung = false;
        wait_link *l = tp->waiters;
        while (l != NULL && front_due(tp, now)) {
            /* Answering w unlinks only w's links; the next one is another
             * waiter's, since each waiter links a topic once. */
            wait_link *next = l->next;
            waiter *w = l->w;
            engine_reply *r = w->p->reply;
            int rv = claim_tasks(e, w->topics, w->n_topics, w->max_tasks, w->lock_ms,
                                 w->p->req.u.fetch.worker_id, w->p);
            if (rv != BERTH_OK) {
                wait_answer(e, w); /* with the turn's failure */
                return rv;
            }
            if (r->n_tasks > 0 || r->status.code != ENGINE_CODE_OK)
                wait_answer(e, w);
            else
                break; /* nothing claimable after all: the front is not ours to take */
            l = next;
        }
    }
    return BERTH_OK;
}

uint64_t claim_next_due(engine *e)
{
    uint64_t due = wait_next_deadline(e);
    /* Stopped on the budget for answers in flight: the fronts wait until
     * some answers have left (the commit thread wakes the actor then). */
    if (atomic_load(&e->fetch_blocked)) {
        if (atomic_load(&e->fetch_inflight) >= e->fetch_blocked_at)
            return due;
        atomic_store(&e->fetch_blocked, false);
    }
    for (topic *tp = e->watched; tp != NULL; tp = tp->watch_next) {
        uint64_t at = state_topic_due(tp);
        if (at < due)
            due = at;
    }
    return due;
}
