/* pgguard.c — see pgguard.h. */
#include "pg/pgguard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/check.h"
#include "engine/mem.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "pg/pgcall.h"
#include "pg/pgwire.h"
#include "store/err.h"
#include "store/keys.h"
#include "store/records.h"

bool pgguard_add(pgops_turn *t, pgreq *p, gkind kind, const engine_guard *g, const void *args,
                 engine_status *st, guard_item **out)
{
    guard_item gi = {.p = p, .kind = kind, .g = g, .args = args, .st = st};
    if (!rules_guard_parse(g, gi.id, gi.token, st))
        return true; /* answered in st: takes no part */
    if (!VEC_PUSH(&t->guards, gi))
        return false;
    if (out != NULL)
        *out = &t->guards.v[t->guards.n - 1];
    return true;
}

bool pgguard_plan_completes(pgops_turn *t, pgreq *p, const engine_complete_args *items, size_t n)
{
    engine_reply *r = p->reply;
    if (n == 0)
        return true;
    r->statuses = reply_mem(r, n * sizeof(*r->statuses));
    if (r->statuses == NULL)
        return false;
    r->n_statuses = n;
    for (size_t i = 0; i < n; i++)
        if (!pgguard_add(t, p, G_COMPLETE, &items[i].guard, &items[i], &r->statuses[i], NULL))
            return false;
    return true;
}

static int id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, BERTH_ID_LEN);
}

bool pgguard_stmt_read(pgops_turn *t)
{
    size_t n = t->guards.n;
    uint8_t(*ids)[16] = mem_calloc(n, 16);
    if (ids == NULL)
        return false;
    for (size_t i = 0; i < n; i++)
        memcpy(ids[i], t->guards.v[i].id, 16);
    qsort(ids, n, 16, id_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || memcmp(ids[m - 1], ids[i], 16) != 0)
            memmove(ids[m++], ids[i], 16);
    int s = pgplan_add_stmt(t, "guard_read", 64 + 20 * m);
    if (s >= 0)
        pgwire_uuid_array(&t->params[s], (const uint8_t(*)[16])ids, NULL, m);
    t->s_guard = s;
    free(ids);
    return s >= 0; /* (the calls of those tasks are locked after them: pgops.c) */
}

static bool read_rows(pgops_turn *t, const PGresult *res)
{
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        trow w = {.found = true};
        const char *s;
        size_t len;
        if (pgwire_get_uuid(res, i, 0, w.id) != BERTH_OK ||
            pgwire_get_text(res, i, 1, &s, &len) != BERTH_OK ||
            pgwire_get_bool(res, i, 2, &w.terminal) != BERTH_OK)
            return false;
        w.topic = mem_strdup(s);
        if (!pgwire_isnull(res, i, 3) && pgwire_get_text(res, i, 3, &s, &len) == BERTH_OK)
            w.worker = mem_strdup(s);
        w.has_lock = !pgwire_isnull(res, i, 4) && !pgwire_isnull(res, i, 5);
        if (w.has_lock && (pgwire_get_uuid(res, i, 4, w.token) != BERTH_OK ||
                           pgwire_get_int8(res, i, 5, &w.lock_expires_at) != BERTH_OK))
            return false;
        if (pgwire_get_int4(res, i, 7, &w.failures) != BERTH_OK ||
            pgwire_get_int4(res, i, 8, &w.retries_left) != BERTH_OK ||
            pgwire_get_int8(res, i, 9, &w.available_at) != BERTH_OK ||
            pgwire_get_int8(res, i, 10, &w.created_at) != BERTH_OK)
            return false;
        if (pgwire_get_int4(res, i, 17, &w.deployment) != BERTH_OK)
            return false;
        w.has_instance = !pgwire_isnull(res, i, 12) &&
                         pgwire_get_uuid(res, i, 12, w.instance_id) == BERTH_OK &&
                         pgwire_get_int4(res, i, 13, &w.call_attempt) == BERTH_OK;
        if (w.topic == NULL || !VEC_PUSH(&t->rows, w)) {
            free(w.topic);
            free(w.worker);
            return false;
        }
    }
    return true;
}

trow *pgguard_row(pgops_turn *t, const uint8_t id[BERTH_ID_LEN])
{
    for (size_t i = 0; i < t->rows.n; i++)
        if (memcmp(t->rows.v[i].id, id, BERTH_ID_LEN) == 0)
            return &t->rows.v[i];
    return NULL;
}

/* What R8 looks at in a row (NULL: no such task; deleted by this turn). */
static rules_lock lock_of(const trow *w)
{
    return (rules_lock){.found = w != NULL && w->found && !w->deleted,
                        .terminal = w != NULL && w->terminal,
                        .has_lock = w != NULL && w->has_lock,
                        .lock_token = w ? w->token : NULL,
                        .worker_id = w ? w->worker : NULL,
                        .lock_expires_at_ms = w ? (uint64_t)w->lock_expires_at : 0};
}

/* One guarded item against its row as the turn has left it so far. */
static void apply(pgops_turn *t, guard_item *g)
{
    uint64_t now = t->now_ms;
    trow *w = pgguard_row(t, g->id);
    rules_lock lk = lock_of(w);
    if (!rules_guard(&lk, g->g, g->token, now, g->st))
        return;
    switch (g->kind) {
    case G_COMPLETE:
    case G_REFUSE: {
        const engine_complete_args *c = g->kind == G_COMPLETE ? g->args : NULL;
        const engine_error *err =
            g->kind == G_REFUSE ? &((const engine_refuse_args *)g->args)->error : NULL;
        bool ok = true;
        if (c != NULL && c->result != NULL) {
            rules_reply in = {.payload_len = c->result->payload_len,
                              .content_type = c->result->content_type,
                              .headers = c->result->headers,
                              .n_headers = c->result->n_headers};
            rules_channel ch;
            int known = pgdeploy_channel(t->deps, (uint32_t)w->deployment, w->topic, &ch);
            if (known < 0) { /* a deployment newer than the replica's copy */
                t->deps_unknown = true;
                return;
            }
            ok = rules_intake_validate(t->o, known ? &ch : NULL, w->topic, &in, g->st);
        }
        if (ok && w->has_instance) /* a call's task: its reply resolves the call */
            ok = pgcall_correlate(t, w, c ? c->result : NULL, err, g->st);
        if (!ok) {
            /* Refused (intake, RETRY_PENDING): locked until the grace window ends (R10). */
            w->lock_expires_at = (int64_t)(now + t->o->lock_default_ms);
            w->dirty = true;
            return;
        }
        w->deleted = true;
        return;
    }
    case G_FAIL: {
        const engine_fail_args *a = g->args;
        rules_fail_out f;
        rules_fail_outcome(t->o, a, &g->fin, (uint32_t)w->failures, (uint32_t)w->retries_left, now,
                           &f);
        w->failures = (int32_t)f.failures;
        w->retries_left = (int32_t)f.retries_left;
        w->lock_expires_at = (int64_t)now;
        w->set_err = true;
        w->err = &a->error;
        w->dirty = true;
        engine_reply *r = g->p->reply;
        if (f.terminal) {
            w->terminal = true;
            w->incident = true;
        } else {
            w->available_at = (int64_t)f.available_at_ms;
            if (f.pause_ms == 0)
                pgplan_notify_add(t, 'p', w->topic, 0);
            else
                pgplan_notify_add(t, 't', w->topic, f.pause_ms);
        }
        r->terminal = f.terminal;
        r->retries_left = f.retries_left;
        r->available_at_ms = f.terminal ? 0 : f.available_at_ms;
        return;
    }
    case G_EXTEND:
        w->lock_expires_at = (int64_t)(now + g->lock_ms);
        w->dirty = true;
        g->p->reply->lock_expires_at_ms = (uint64_t)w->lock_expires_at;
        return;
    case G_RELEASE:
        w->lock_expires_at = (int64_t)now; /* fetchable from now, behind older work */
        w->dirty = true;
        pgplan_notify_add(t, 'p', w->topic, 0);
        return;
    }
}

bool pgguard_stmt_outcomes(pgops_turn *t)
{
    size_t nd = 0, nu = 0, ni = 0, bytes = 256;
    for (size_t i = 0; i < t->rows.n; i++) {
        const trow *w = &t->rows.v[i];
        if (w->deleted)
            nd++;
        else if (w->dirty) {
            nu++;
            if (w->set_err)
                bytes += pgplan_text_len(w->err->code) + pgplan_text_len(w->err->message) +
                         pgplan_text_len(w->err->details);
            if (w->incident) {
                ni++;
                bytes += strlen(w->topic) + pgplan_text_len(w->err->code) +
                         pgplan_text_len(w->err->message);
            }
        }
    }
    size_t n = nd + nu + 1;
    uint8_t(*ids)[16] = mem_calloc(n, 16);
    int64_t *lx = mem_calloc(n, 8), *av = mem_calloc(n, 8);
    int32_t *rl = mem_calloc(n, 4), *fl = mem_calloc(n, 4), *kinds = mem_calloc(n, 4);
    bool *term = mem_calloc(n, 1), *se = mem_calloc(n, 1);
    const char **ec = mem_calloc(n, sizeof(char *)), **em = mem_calloc(n, sizeof(char *));
    const char **ed = mem_calloc(n, sizeof(char *)), **tp = mem_calloc(n, sizeof(char *));
    bool ok = ids && lx && av && rl && fl && kinds && term && se && ec && em && ed && tp;
    if (ok && nd > 0) {
        size_t k = 0;
        for (size_t i = 0; i < t->rows.n; i++)
            if (t->rows.v[i].deleted)
                memcpy(ids[k++], t->rows.v[i].id, 16);
        int s = pgplan_add_stmt(t, "tasks_delete", 64 + 20 * nd);
        ok = s >= 0;
        if (ok)
            pgwire_uuid_array(&t->params[s], (const uint8_t(*)[16])ids, NULL, nd);
    }
    if (ok && nu > 0) {
        size_t k = 0;
        for (size_t i = 0; i < t->rows.n; i++) {
            const trow *w = &t->rows.v[i];
            if (w->deleted || !w->dirty)
                continue;
            memcpy(ids[k], w->id, 16);
            lx[k] = w->lock_expires_at;
            av[k] = w->available_at;
            rl[k] = w->retries_left;
            fl[k] = w->failures;
            term[k] = w->terminal;
            se[k] = w->set_err;
            ec[k] = w->set_err ? w->err->code : NULL;
            em[k] = w->set_err ? w->err->message : NULL;
            ed[k] = w->set_err ? w->err->details : NULL;
            k++;
        }
        int s = pgplan_add_stmt(t, "tasks_update", bytes + 80 * nu);
        ok = s >= 0;
        if (ok) {
            pgwire_params *pp = &t->params[s];
            pgwire_uuid_array(pp, (const uint8_t(*)[16])ids, NULL, nu);
            pgwire_int8_array(pp, lx, NULL, nu);
            pgwire_int8_array(pp, av, NULL, nu);
            pgwire_int4_array(pp, rl, NULL, nu);
            pgwire_int4_array(pp, fl, NULL, nu);
            pgwire_bool_array(pp, term, NULL, nu);
            pgwire_text_array(pp, ec, nu);
            pgwire_text_array(pp, em, nu);
            pgwire_text_array(pp, ed, nu);
            pgwire_bool_array(pp, se, NULL, nu);
        }
    }
    if (ok && ni > 0) {
        size_t k = 0;
        for (size_t i = 0; i < t->rows.n; i++) {
            const trow *w = &t->rows.v[i];
            if (w->deleted || !w->incident)
                continue;
            kinds[k] = STORE_INCIDENT_TASK_TERMINAL;
            memcpy(ids[k], w->id, 16);
            tp[k] = w->topic;
            ec[k] = w->err->code;
            em[k] = w->err->message;
            k++;
        }
        ok = pgplan_stmt_incidents(t, kinds, (const uint8_t(*)[16])ids, tp, ec, em, ni, bytes);
    }
    free(ids);
    free(lx);
    free(av);
    free(rl);
    free(fl);
    free(kinds);
    free(term);
    free(se);
    free(ec);
    free(em);
    free(ed);
    free(tp);
    return ok;
}

/* A guarded request: its checks, then its items join the turn's locking
 * read (or p is settled, refused). */
void pgguard_plan(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    engine_status *st = &r->status;
    bool ok = true;
    guard_item *gi = NULL;
    switch (p->req.op) {
    case ENGINE_OP_COMPLETE:
        ok = pgguard_add(t, p, G_COMPLETE, &p->req.u.complete.guard, &p->req.u.complete, st, NULL);
        break;
    case ENGINE_OP_COMPLETE_BATCH:
        if (!check_items(p->req.u.complete_batch.n, t->o->batch_max, st)) {
            p->settled = true;
            return;
        }
        ok = pgguard_plan_completes(t, p, p->req.u.complete_batch.items, p->req.u.complete_batch.n);
        break;
    case ENGINE_OP_FAIL: {
        rules_fail_in in;
        if (!rules_fail_check(t->o, &p->req.u.fail, &in, st)) {
            p->settled = true;
            return;
        }
        ok = pgguard_add(t, p, G_FAIL, &p->req.u.fail.guard, &p->req.u.fail, st, &gi);
        if (gi != NULL)
            gi->fin = in;
        break;
    }
    case ENGINE_OP_REFUSE:
        if (!check_error(&p->req.u.refuse.error, st)) {
            p->settled = true;
            return;
        }
        ok = pgguard_add(t, p, G_REFUSE, &p->req.u.refuse.guard, &p->req.u.refuse, st, NULL);
        break;
    case ENGINE_OP_EXTEND_LOCK: {
        uint64_t lock_ms;
        if (!rules_extend_check(t->o, &p->req.u.extend, &lock_ms, st)) {
            p->settled = true;
            return;
        }
        ok = pgguard_add(t, p, G_EXTEND, &p->req.u.extend.guard, &p->req.u.extend, st, &gi);
        if (gi != NULL)
            gi->lock_ms = lock_ms;
        break;
    }
    default: /* ENGINE_OP_RELEASE */
        ok = pgguard_add(t, p, G_RELEASE, &p->req.u.release, NULL, st, NULL);
        break;
    }
    if (!ok) {
        reply_no_memory(st);
        p->settled = true;
    }
}

bool pgguard_between(pgops_turn *t, pgturn *pt)
{
    t->now_ms = (uint64_t)pt->now_ms; /* the database's: every rule of the turn on it */
    if (!read_rows(t, pgturn_first_result(pt, (size_t)t->s_guard)) || !pgcall_read_locked(t, pt)) {
        snprintf(pt->message, sizeof pt->message, "guard_read's rows did not decode");
        return false;
    }
    for (size_t i = 0; i < t->guards.n; i++)
        apply(t, &t->guards.v[i]);
    return true;
}

/* ---- one round: completions only (complete_fast) ---- */

static int item_cmp(const void *a, const void *b)
{
    const guard_item *x = *(const guard_item *const *)a, *y = *(const guard_item *const *)b;
    return memcmp(x->id, y->id, BERTH_ID_LEN);
}

bool pgguard_stmt_fast(pgops_turn *t, bool *planned)
{
    *planned = false;
    size_t n = t->guards.n;
    for (size_t i = 0; i < n; i++) {
        const guard_item *g = &t->guards.v[i];
        if (g->kind != G_COMPLETE || ((const engine_complete_args *)g->args)->result != NULL)
            return true; /* the two-round way */
    }
    const guard_item **v = mem_calloc(n, sizeof(*v));
    uint8_t(*ids)[16] = mem_calloc(n, 16);
    uint8_t(*tokens)[16] = mem_calloc(n, 16);
    const char **workers = mem_calloc(n, sizeof(*workers));
    bool ok = v != NULL && ids != NULL && tokens != NULL && workers != NULL;
    if (ok) {
        for (size_t i = 0; i < n; i++)
            v[i] = &t->guards.v[i];
        qsort(v, n, sizeof(*v), item_cmp);
        bool distinct = true; /* a task named twice: the rules' order decides, two rounds */
        size_t bytes = 128;
        for (size_t i = 0; i < n && distinct; i++) {
            distinct = i == 0 || memcmp(v[i - 1]->id, v[i]->id, BERTH_ID_LEN) != 0;
            memcpy(ids[i], v[i]->id, 16);
            memcpy(tokens[i], v[i]->token, 16);
            workers[i] = v[i]->g->worker_id;
            bytes += 64 + strlen(workers[i]);
        }
        int s = distinct ? pgplan_add_stmt(t, "complete_fast", bytes) : -2;
        ok = s != -1;
        if (s >= 0) {
            pgwire_params *pp = &t->params[s];
            pgwire_uuid_array(pp, (const uint8_t(*)[16])ids, NULL, n);
            pgwire_uuid_array(pp, (const uint8_t(*)[16])tokens, NULL, n);
            pgwire_text_array(pp, workers, n);
            t->s_fast = s;
            *planned = true;
        }
    }
    free(v);
    free(ids);
    free(tokens);
    free(workers);
    return ok;
}

/* complete_fast's rows: a deleted task (its topic), or the lock state the
 * verdict is given on. */
static bool read_fast_rows(pgops_turn *t, const PGresult *res)
{
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        trow w = {.found = true};
        const char *s;
        size_t len;
        if (pgwire_get_uuid(res, i, 0, w.id) != BERTH_OK ||
            pgwire_get_bool(res, i, 1, &w.deleted) != BERTH_OK ||
            pgwire_get_text(res, i, 2, &s, &len) != BERTH_OK || (w.topic = mem_strdup(s)) == NULL)
            return false;
        if (w.deleted && PQnfields(res) > 8 && !pgwire_isnull(res, i, 8))
            (void)pgwire_get_int8(res, i, 8, &w.created_at); /* (0: no latency) */
        if (!w.deleted) {
            if (pgwire_get_bool(res, i, 3, &w.terminal) != BERTH_OK)
                goto bad;
            if (!pgwire_isnull(res, i, 4) && pgwire_get_text(res, i, 4, &s, &len) == BERTH_OK &&
                (w.worker = mem_strdup(s)) == NULL)
                goto bad;
            w.has_lock = !pgwire_isnull(res, i, 5) && !pgwire_isnull(res, i, 6);
            if (w.has_lock && (pgwire_get_uuid(res, i, 5, w.token) != BERTH_OK ||
                               pgwire_get_int8(res, i, 6, &w.lock_expires_at) != BERTH_OK))
                goto bad;
        }
        if (VEC_PUSH(&t->rows, w))
            continue;
    bad:
        free(w.topic);
        free(w.worker);
        return false;
    }
    return true;
}

void pgguard_fast_answer(pgops_turn *t)
{
    t->now_ms = (uint64_t)t->t.now_ms;
    bool read = read_fast_rows(t, t->stmts[t->s_fast].result);
    for (size_t i = 0; i < t->guards.n; i++) {
        guard_item *g = &t->guards.v[i];
        const trow *w = read ? pgguard_row(t, g->id) : NULL;
        if (w != NULL && w->deleted)
            continue; /* completed */
        rules_lock lk = lock_of(w);
        if (!read)
            reply_status(g->st, ENGINE_CODE_INTERNAL, "complete_fast's rows did not decode");
        else if (rules_guard(&lk, g->g, g->token, t->now_ms, g->st)) /* (BR001 forbids) */
            reply_status(g->st, ENGINE_CODE_INTERNAL, "task %s: kept, not completed",
                         g->g->task_id);
    }
}

/* The replica's counters of a verdict kept (the embedded store's:
 * guard.c), and a completion's latency from its task's creation. */
static void count(pgops_turn *t, const guard_item *g, const trow *w)
{
    engine_topic_counters *c = pgplan_counters(t, w->topic);
    if (g->kind == G_COMPLETE) {
        if (c != NULL)
            c->completed++;
        if (t->task_latency != NULL && w->created_at > 0)
            hist_observe(t->task_latency,
                         t->now_ms > (uint64_t)w->created_at
                             ? (double)(t->now_ms - (uint64_t)w->created_at) / 1000.0
                             : 0);
    } else if (g->kind == G_REFUSE && c != NULL) {
        c->refused++;
    } else if (g->kind == G_FAIL && c != NULL) {
        c->failed++;
        c->terminal += g->p->reply->terminal;
    }
}

void pgguard_events(pgops_turn *t)
{
    for (size_t i = 0; i < t->guards.n; i++) {
        const guard_item *g = &t->guards.v[i];
        if (g->st->code != ENGINE_CODE_OK)
            continue;
        const trow *w = pgguard_row(t, g->id);
        count(t, g, w);
        if (g->kind == G_COMPLETE)
            pgplan_event(t, ENGINE_EVENT_TASK_COMPLETED, w->topic, g->id, NULL, 0);
        else if (g->kind == G_REFUSE)
            pgplan_event(t, ENGINE_EVENT_TASK_REFUSED, w->topic, g->id,
                         &((const engine_refuse_args *)g->args)->error, 0);
        else if (g->kind == G_FAIL)
            pgplan_event(
                t, g->p->reply->terminal ? ENGINE_EVENT_TASK_TERMINAL : ENGINE_EVENT_TASK_FAILED,
                w->topic, g->id, &((const engine_fail_args *)g->args)->error,
                g->p->reply->retries_left);
    }
}
