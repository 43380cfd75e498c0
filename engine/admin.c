/*
 * admin.c — what an operator can see and do: inspect a task, retry or
 * discard a terminal one (R11), list incidents, read the counts.
 *
 * stats is O(tasks): it walks the task table, because ready, locked and
 * backoff depend on the time of asking. Meant for operators, not for a
 * hot loop.
 *
 * Engine thread only.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/admin.h"
#include "engine/check.h"
#include "engine/commit.h"
#include "engine/deploy.h"
#include "engine/instance.h"
#include "engine/listing.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "store/err.h"

/* reply_strdup, remembering whether one found no memory. */
static const char *dup(engine_reply *r, const char *s, bool *oom)
{
    char *d = reply_strdup(r, s);
    *oom |= s != NULL && d == NULL;
    return d;
}

/* A read that found no memory, or a store that failed it, answers that
 * and nothing else. */
static int read_outcome(engine_reply *r, bool oom, int rv, const char *what)
{
    if (oom || rv != BERTH_OK)
        reply_reset(r);
    if (oom)
        reply_no_memory(&r->status);
    else if (rv != BERTH_OK)
        reply_unavailable(&r->status, what);
    return BERTH_OK;
}

/* What an operator sees of t (never its lock token); strings are the
 * reply's. The store's code for its body (payload_bytes), OK if read;
 * whole: its headers, content type and payload's start too (GET_TASK). */
static int info_of(engine *e, task *t, engine_reply *r, engine_task_info *i, bool whole, bool *oom)
{
    store_id_format(t->id, i->id);
    i->topic = dup(r, t->topic->name, oom);
    i->state = state_task_state(t, e->t.now_ms);
    const task_run *run = state_run(t);
    i->worker_id = dup(r, run->worker_id, oom);
    i->lock_expires_at_ms = run->lock_expires_at_ms;
    i->available_at_ms = state_task_available_at(t);
    i->attempt = run->claims;
    i->retries_left = state_task_retries_left(e, t);
    i->failures = run->failures;
    i->last_error.code = dup(r, run->err_code, oom);
    i->last_error.message = dup(r, run->err_message, oom);
    i->last_error.details = dup(r, run->err_details, oom);
    i->created_at_ms = t->created_at_ms;
    i->priority = t->priority;
    store_body b;
    int rv = state_task_read_body(e, t, &b);
    if (rv == BERTH_OK) {
        i->payload_bytes = b.payload_len;
        if (whole && !rules_task_info_body(r, &b, i))
            *oom = true;
        store_body_clear(&b);
    }
    return rv;
}

int admin_get_task(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    task *t = state_task_find(e, p->req.u.get_task.id, "id", &r->status);
    if (t == NULL)
        return BERTH_OK;
    bool oom = false;
    int rv = info_of(e, t, r, &r->task, true, &oom);
    return read_outcome(r, oom || rv == BERTH_ENOMEM, rv, "reading the task failed");
}

int admin_list_tasks(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    const char *want_topic = p->req.u.list_tasks.topic;
    engine_task_state want = p->req.u.list_tasks.state;
    rules_list l;
    if (!rules_list_check(&e->o, want_topic, want, p->req.u.list_tasks.limit,
                          p->req.u.list_tasks.after, &l, &r->status))
        return BERTH_OK;
    uint64_t limit = l.limit;
    size_t pos;
    if (listing_seek(e, &l, &pos) != BERTH_OK) {
        rules_list_after_unknown(&r->status);
        return BERTH_OK;
    }
    const topic *only = want_topic ? state_topic(e, want_topic, strlen(want_topic), false) : NULL;
    if ((r->infos = reply_mem(r, limit * sizeof(*r->infos))) == NULL) {
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    bool oom = false;
    int rv = BERTH_OK;
    uint64_t seq = 0, budget = limit * RULES_LIST_SCAN_FACTOR;
    task *t;
    bool more = true;
    while (rv == BERTH_OK && r->n_infos < limit && budget-- > 0 &&
           (more = listing_next(e, &pos, &t, &seq))) {
        if (t == NULL || (want_topic && t->topic != only) ||
            (want != 0 && state_task_state(t, e->t.now_ms) != want))
            continue;
        rv = info_of(e, t, r, &r->infos[r->n_infos++], false, &oom);
    }
    /* Where the next page starts: after the last entry looked at, unless
     * the listing has ended. */
    size_t peek = pos;
    task *unused;
    uint64_t unused_seq;
    if (more && listing_next(e, &peek, &unused, &unused_seq))
        rules_list_token(seq, r->next);
    return read_outcome(r, oom || rv == BERTH_ENOMEM, rv, "reading a task failed");
}

static task *find_terminal(engine *e, const char *id, engine_status *st, const char *verb)
{
    task *t = state_task_find(e, id, "id", st);
    if (t != NULL && !t->terminal) {
        rules_not_terminal(st, id, verb);
        return NULL;
    }
    return t;
}

int admin_retry_terminal(engine *e, pending *p)
{
    engine_status *st = &p->reply->status;
    uint64_t retries;
    if (!check_bound(p->req.u.retry_terminal.has_retries, p->req.u.retry_terminal.retries,
                     e->o.retries, e->o.retries_max, false, "retries", &retries, st))
        return BERTH_OK;
    task *t = find_terminal(e, p->req.u.retry_terminal.id, st, "a terminal task can be retried");
    if (t == NULL)
        return BERTH_OK;
    uint64_t now = e->t.now_ms;
    task_run *run = state_task_run(e, t);
    if (run == NULL) {
        reply_no_memory(st); /* nothing changed */
        return BERTH_OK;
    }
    uint64_t was_available = run->available_at_ms, was_expiring = run->lock_expires_at_ms;
    run->available_at_ms = now;
    run->lock_expires_at_ms = now;
    t->terminal = false;
    if (state_task_index(e, t, now) != BERTH_OK) {
        run->available_at_ms = was_available;
        run->lock_expires_at_ms = was_expiring;
        t->terminal = true;
        reply_no_memory(st); /* nothing changed */
        return BERTH_OK;
    }
    t->topic->n_terminal--;
    deployment *dep = state_dep(e, t->chan);
    dep->n_terminal--;
    run->retries_left = (uint32_t)retries;
    int rv = deploy_redrain(e, dep);
    if (rv == BERTH_OK)
        rv = state_task_put(e, t);
    if (rv == BERTH_OK) {
        turn_doorbell(e, t->topic);
        turn_event(e, ENGINE_EVENT_TASK_RETRIED, t->topic, t->id, NULL, run->retries_left);
    }
    return rv;
}

int admin_discard_terminal(engine *e, pending *p)
{
    engine_status *st = &p->reply->status;
    task *t =
        find_terminal(e, p->req.u.discard_terminal.id, st, "a terminal task can be discarded");
    if (t == NULL)
        return BERTH_OK;
    /* A call's task: its call ends FAILED, if this task is its attempt. */
    instance *i = NULL;
    if (t->has_instance) {
        store_body b;
        int rv = state_task_read_body(e, t, &b);
        if (rv != BERTH_OK) {
            if (rv == BERTH_ENOMEM)
                reply_no_memory(st);
            else
                reply_unavailable(st, "reading the task failed");
            return BERTH_OK;
        }
        i = instance_find(e, b.instance_id);
        store_body_clear(&b);
        /* (In BACKOFF this task's attempt is over: the next one comes.) */
        if (i != NULL && (i->ended || i->state != ENGINE_INSTANCE_WAITING || !i->has_current ||
                          memcmp(i->current, t->id, BERTH_ID_LEN) != 0))
            i = NULL;
    }
    turn_event(e, ENGINE_EVENT_TASK_DISCARDED, t->topic, t->id, NULL, 0);
    state_task_delete(e, t);
    if (i == NULL)
        return BERTH_OK;
    engine_error err = {.code = ENGINE_EC_DISCARDED, .message = RULES_DISCARDED_MESSAGE};
    return instance_end(e, i, ENGINE_INSTANCE_FAILED, NULL, &err);
}

/* Whether what inc recorded still holds (engine_incident.open). */
static bool incident_open(engine *e, const store_incident *inc)
{
    if (inc->kind == STORE_INCIDENT_TASK_TERMINAL) {
        const task *t = idtab_get(&e->tasks, inc->subject_id);
        return t != NULL && t->terminal;
    }
    if (inc->kind != STORE_INCIDENT_DELIVERY_POISONED)
        return false; /* a refused result: its call goes on by its own policy */
    const delivery *d = idtab_get(&e->deliveries, inc->subject_id);
    return d != NULL && d->poisoned;
}

int admin_list_incidents(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    uint64_t limit;
    uint32_t asked = p->req.u.list_incidents.limit;
    if (!check_bound(asked != 0, asked, e->o.batch_default, e->o.batch_max, false, "limit", &limit,
                     &r->status))
        return BERTH_OK;
    const char *after = p->req.u.list_incidents.after_id;
    uint8_t from[STORE_INCIDENT_KEY_LEN];
    if (after != NULL && store_id_parse(after, from) != BERTH_OK) {
        reply_status(&r->status, ENGINE_CODE_INVALID_ARGUMENT,
                     "after_id: not an incident id (32 hex digits)");
        snprintf(r->status.field, sizeof(r->status.field), "after_id");
        return BERTH_OK;
    }
    r->incidents = reply_mem(r, limit * sizeof(*r->incidents));
    store_iter *it;
    if (r->incidents == NULL || store_iter_open(e->store, STORE_CF_INCIDENTS, &it) != BERTH_OK) {
        reply_reset(r);
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    if (after != NULL)
        store_iter_seek(it, from, sizeof(from)); /* incident ids are their keys */
    bool oom = false, open_only = p->req.u.list_incidents.open_only;
    /* Open only: a page looks at a bounded number of records (as a page of
     * tasks does), so one call stays short whatever the log holds. */
    uint64_t budget = open_only ? limit * RULES_LIST_SCAN_FACTOR : UINT64_MAX;
    uint8_t last[STORE_INCIDENT_KEY_LEN];
    bool looked = false;
    for (; store_iter_valid(it) && r->n_incidents < limit && budget > 0; store_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = store_iter_key(it, &kl);
        const void *v = store_iter_value(it, &vl);
        if (after != NULL && kl == sizeof(from) && memcmp(k, from, kl) == 0)
            continue; /* the one it is after */
        store_incident inc;
        if (kl != STORE_INCIDENT_KEY_LEN || store_incident_decode(v, vl, &inc) != BERTH_OK)
            continue;
        budget--;
        memcpy(last, k, sizeof(last));
        looked = true;
        bool open = incident_open(e, &inc);
        if (open_only && !open) {
            store_incident_clear(&inc);
            continue;
        }
        engine_incident *o = &r->incidents[r->n_incidents++];
        o->open = open;
        store_id_format(k, o->id);
        o->kind = inc.kind;
        store_id_format(inc.subject_id, o->subject_id);
        o->topic = dup(r, inc.topic, &oom);
        o->error.code = dup(r, inc.error.code, &oom);
        o->error.message = dup(r, inc.error.message, &oom);
        o->error.details = dup(r, inc.error.details, &oom);
        o->at_ms = inc.at_ms;
        store_incident_clear(&inc);
    }
    if (looked && store_iter_valid(it))
        store_id_format(last, r->next_incident);
    int rv = store_iter_status(it);
    store_iter_close(it);
    return read_outcome(r, oom, rv, "reading incidents failed");
}

/* The topics in memory, each with its slot in r->topic_stats. False: no
 * memory. */
static bool topic_slots(engine *e, engine_reply *r)
{
    r->topic_stats = reply_mem(r, (e->topics.n ? e->topics.n : 1) * sizeof(*r->topic_stats));
    if (r->topic_stats == NULL)
        return false;
    size_t i = 0;
    topic *tp;
    while ((tp = table_next(&e->topics, &i)) != NULL) {
        engine_topic_stats *ts = &r->topic_stats[r->n_topic_stats];
        tp->stats_slot = r->n_topic_stats++;
        if ((ts->topic = reply_strdup(r, tp->name)) == NULL)
            return false;
        ts->waiting_fetches = tp->n_waiters;
    }
    return true;
}

int admin_stats(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    engine_stats *s = &r->stats;
    *s = e->counters;
    s->syncs = e->syncs_past + commit_syncs(e);
    if (!topic_slots(e, r)) {
        reply_reset(r);
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    uint64_t now = e->t.now_ms;
    size_t i = 0;
    task *t;
    while ((t = idtab_next(&e->tasks, &i)) != NULL) {
        s->tasks++;
        engine_topic_stats *ts = &r->topic_stats[t->topic->stats_slot];
        switch (state_task_state(t, now)) {
        case ENGINE_TASK_READY:
            s->ready++;
            ts->ready++;
            break;
        case ENGINE_TASK_LOCKED:
            s->locked++;
            ts->locked++;
            break;
        case ENGINE_TASK_BACKOFF:
            s->backoff++;
            ts->backoff++;
            break;
        case ENGINE_TASK_DELAYED:
            s->delayed++;
            ts->delayed++;
            break;
        case ENGINE_TASK_TERMINAL:
            s->terminal++;
            ts->terminal++;
            break;
        }
    }
    s->outbox_pending = e->deliveries.n - e->n_poisoned;
    s->poisoned = e->n_poisoned;
    s->waiting_fetches = e->n_waiters;
    s->topics = e->topics.n;
    s->instances_backoff = e->n_backoff;
    s->instances_waiting = e->instances.n - e->t.ended.n - e->n_backoff;
    return BERTH_OK;
}

/* Deployment versions by state (at most ENGINE_DEPLOYMENTS_MAX). */
static void count_deployments(const engine *e, engine_stats *s)
{
    for (size_t i = 0; i < e->deps.n; i++) {
        engine_deployment_state st = e->deps.v[i]->state;
        s->deployments_live += st == ENGINE_DEPLOYMENT_LIVE;
        s->deployments_draining += st == ENGINE_DEPLOYMENT_DRAINING;
        s->deployments_retired += st == ENGINE_DEPLOYMENT_RETIRED;
    }
}

int admin_checkpoint(engine *e, pending *p)
{
    engine_status *st = &p->reply->status;
    const char *dir = p->req.u.checkpoint.dir;
    if (dir == NULL || dir[0] != '/') {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT,
                     "dir: an absolute path on berthd's machine is required");
        snprintf(st->field, sizeof(st->field), "dir");
        return BERTH_OK;
    }
    if (!check_text(dir, 4096, true, "dir", st))
        return BERTH_OK;
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        reply_status(st, ENGINE_CODE_FAILED_PRECONDITION,
                     "dir: %.200s is there already; a checkpoint goes into a new directory", dir);
        snprintf(st->field, sizeof(st->field), "dir");
        return BERTH_OK;
    }
    char err[256] = "";
    if (store_checkpoint(e->store, dir, err, sizeof(err)) != BERTH_OK)
        reply_status(st, ENGINE_CODE_FAILED_PRECONDITION, "the checkpoint failed: %s", err);
    return BERTH_OK;
}

int admin_metrics(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    engine_stats *s = &r->stats;
    *s = e->counters;
    s->syncs = e->syncs_past + commit_syncs(e);
    s->outbox_pending = e->deliveries.n - e->n_poisoned;
    s->poisoned = e->n_poisoned;
    s->waiting_fetches = e->n_waiters;
    s->topics = e->topics.n;
    s->tasks = e->tasks.n;
    s->instances_backoff = e->n_backoff;
    s->instances_waiting = e->instances.n - e->t.ended.n - e->n_backoff;
    count_deployments(e, s);
    engine_metrics *m = &r->metrics;
    if (tcounts_read(&e->tcounts, r) != BERTH_OK) {
        reply_reset(r);
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    /* Tasks by topic and state, from the heaps, never a scan of tasks:
     * what lies in the locked and backoff heaps past now, the rest of the
     * ready index is ready. */
    state_gauges_settle(e, e->t.now_ms);
    size_t nt = e->topics.n;
    if (nt > 0 && (r->topic_stats = reply_mem(r, nt * sizeof(*r->topic_stats))) == NULL) {
        reply_reset(r);
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    size_t i = 0;
    topic *tp;
    while ((tp = table_next(&e->topics, &i)) != NULL) {
        engine_topic_stats *ts = &r->topic_stats[r->n_topic_stats++];
        if ((ts->topic = reply_strdup(r, tp->name)) == NULL) {
            reply_reset(r);
            reply_no_memory(&r->status);
            return BERTH_OK;
        }
        ts->locked = tp->locked.n;
        ts->backoff = tp->backoff.n;
        ts->delayed = tp->n_later_unfetched;
        ts->ready = tp->ready.n + tp->later.n - ts->locked - ts->backoff - ts->delayed;
        ts->terminal = tp->n_terminal;
        ts->waiting_fetches = tp->n_waiters;
    }
    hist_read(&e->task_latency, &m->task_latency);
    hist_read(&e->fetch_wait, &m->fetch_wait);
    hist_read(&e->commit_batch, &m->commit_batch);
    hist_read(&e->fsync, &m->fsync);
    return BERTH_OK;
}
