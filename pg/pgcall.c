/* pgcall.c — see pgcall.h. */
#include "pg/pgcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "engine/mem.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "pg/pgsubmit.h"
#include "pg/pgwire.h"
#include "store/err.h"
#include "store/keys.h"

/* A housekeeping turn's next is due now, with more of the same waiting;
 * or, when rows due were held by another replica's turn, shortly. */
#define HELD_RETRY_MS 25

static bool has_key(const engine_submit_args *a)
{
    return a->idempotency_key != NULL && a->idempotency_key[0] != '\0';
}

/* ---- CALL ---- */

void pgcall_plan(pgops_turn *t, pgreq *p)
{
    const engine_call_args *a = &p->req.u.call;
    engine_reply *r = p->reply;
    call_item c = {.p = p, .a = a, .same_as = -1, .has_retry = a->retry != NULL};
    c.pol.max_attempts = 1;
    /* (refused by its route: under a key it goes to the statement, which
     * answers a duplicate of a call accepted before, as for a submit) */
    if (!pgsubmit_check(t, &a->request, &c.dep, &c.push, &r->status) ||
        (c.dep < 0 && !has_key(&a->request)) ||
        (a->retry != NULL && !rules_call_policy(t->o, a->retry, &c.pol, &r->status))) {
        p->settled = true;
        return;
    }
    if ((r->submitted = reply_mem(r, sizeof(*r->submitted))) == NULL) {
        reply_no_memory(&r->status);
        p->settled = true;
        return;
    }
    r->n_submitted = 1;
    randombytes_buf(c.iid, sizeof c.iid);
    randombytes_buf(c.tid, sizeof c.tid);
    if (has_key(&a->request) && c.dep >= 0)
        for (size_t j = 0; j < t->calls.n && c.same_as < 0; j++) {
            const engine_submit_args *b = &t->calls.v[j].a->request;
            if (t->calls.v[j].same_as < 0 && has_key(b) &&
                strcmp(a->request.topic, b->topic) == 0 &&
                strcmp(a->request.idempotency_key, b->idempotency_key) == 0)
                c.same_as = (int)j;
        }
    if (!VEC_PUSH(&t->calls, c)) {
        reply_no_memory(&r->status);
        p->settled = true;
    }
}

/* The call statement's arrays, one element per call sent. */
typedef struct call_cols {
    uint8_t (*iid)[16], (*tid)[16];
    const char **topics, **cts, **keys, **hdrs, **codes, **mults;
    const void **pays;
    size_t *plens;
    int32_t *hs, *hc, *blen, *attempts, *cs, *cc, *dep;
    bool *push;
    int64_t *delay, *nb, *prio, *timeout, *ib, *mb;
    bool *delay_null, *nb_null, *pol_null;
    char (*mult_text)[32];
} call_cols;

static void cols_free(call_cols *c)
{
    void *all[] = {c->iid,      c->tid,       c->topics, c->cts,   c->keys,       c->hdrs,
                   c->codes,    c->mults,     c->pays,   c->plens, c->hs,         c->hc,
                   c->blen,     c->attempts,  c->cs,     c->cc,    c->delay,      c->nb,
                   c->prio,     c->timeout,   c->ib,     c->mb,    c->delay_null, c->nb_null,
                   c->pol_null, c->mult_text, c->dep,    c->push};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static bool cols_alloc(call_cols *c, size_t n, size_t nh, size_t nc)
{
    n = n ? n : 1;
    *c = (call_cols){.iid = mem_calloc(n, 16),
                     .tid = mem_calloc(n, 16),
                     .topics = mem_calloc(n, sizeof(char *)),
                     .cts = mem_calloc(n, sizeof(char *)),
                     .keys = mem_calloc(n, sizeof(char *)),
                     .hdrs = mem_calloc(nh ? nh : 1, sizeof(char *)),
                     .codes = mem_calloc(nc ? nc : 1, sizeof(char *)),
                     .mults = mem_calloc(n, sizeof(char *)),
                     .pays = mem_calloc(n, sizeof(void *)),
                     .plens = mem_calloc(n, sizeof(size_t)),
                     .hs = mem_calloc(n, 4),
                     .hc = mem_calloc(n, 4),
                     .blen = mem_calloc(n, 4),
                     .attempts = mem_calloc(n, 4),
                     .cs = mem_calloc(n, 4),
                     .cc = mem_calloc(n, 4),
                     .delay = mem_calloc(n, 8),
                     .nb = mem_calloc(n, 8),
                     .prio = mem_calloc(n, 8),
                     .timeout = mem_calloc(n, 8),
                     .ib = mem_calloc(n, 8),
                     .mb = mem_calloc(n, 8),
                     .delay_null = mem_calloc(n, 1),
                     .nb_null = mem_calloc(n, 1),
                     .pol_null = mem_calloc(n, 1),
                     .mult_text = mem_calloc(n, 32),
                     .dep = mem_calloc(n, 4),
                     .push = mem_calloc(n, 1)};
    return c->iid && c->tid && c->topics && c->cts && c->keys && c->hdrs && c->codes && c->mults &&
           c->pays && c->plens && c->hs && c->hc && c->blen && c->attempts && c->cs && c->cc &&
           c->delay && c->nb && c->prio && c->timeout && c->ib && c->mb && c->delay_null &&
           c->nb_null && c->pol_null && c->mult_text && c->dep && c->push;
}

bool pgcall_stmt_call(pgops_turn *t)
{
    size_t n = t->calls.n, nh = 0, nc = 0, bytes = 4096;
    for (size_t i = 0; i < n; i++) {
        const engine_call_args *a = t->calls.v[i].a;
        const engine_submit_args *q = &a->request;
        bytes += 256 + q->payload_len + pgplan_text_len(q->topic) +
                 pgplan_text_len(q->content_type) + pgplan_text_len(q->idempotency_key);
        for (size_t h = 0; h < q->n_headers; h++)
            bytes += 16 + strlen(q->headers[h].name) + strlen(q->headers[h].value);
        nh += 2 * q->n_headers;
        if (a->retry != NULL)
            for (size_t k = 0; k < a->retry->n_non_retryable_codes; k++, nc++)
                bytes += 8 + strlen(a->retry->non_retryable_codes[k]);
    }
    int s = pgplan_add_stmt(t, "call", bytes);
    if (s < 0)
        return false;
    t->s_call = s;
    call_cols c;
    bool ok = cols_alloc(&c, n, nh, nc);
    size_t m = 0, hi = 0, ci = 0;
    for (size_t i = 0; ok && i < n; i++) {
        const call_item *it = &t->calls.v[i];
        if (it->same_as >= 0)
            continue; /* the earlier call's answer is its */
        const engine_submit_args *q = &it->a->request;
        memcpy(c.iid[m], it->iid, 16);
        memcpy(c.tid[m], it->tid, 16);
        c.topics[m] = q->topic;
        c.pays[m] = q->payload != NULL ? (const void *)q->payload : "";
        c.plens[m] = q->payload_len;
        c.hs[m] = (int32_t)hi + 1;
        c.hc[m] = (int32_t)(2 * q->n_headers);
        for (size_t h = 0; h < q->n_headers; h++) {
            c.hdrs[hi++] = q->headers[h].name;
            c.hdrs[hi++] = q->headers[h].value;
        }
        c.cts[m] = q->content_type && q->content_type[0] ? q->content_type : NULL;
        c.keys[m] = has_key(q) ? q->idempotency_key : NULL;
        c.delay[m] = (int64_t)q->delay_ms;
        c.delay_null[m] = !q->has_delay_ms;
        c.nb[m] = (int64_t)q->not_before_ms;
        c.nb_null[m] = !q->has_not_before_ms;
        c.prio[m] = q->has_priority ? q->priority : t->o->priority_default;
        c.blen[m] = (int32_t)pgsubmit_body_bytes(q);
        c.dep[m] = it->dep;
        c.push[m] = it->push;
        c.pol_null[m] = !it->has_retry;
        c.timeout[m] = (int64_t)it->pol.timeout_ms;
        c.attempts[m] = (int32_t)it->pol.max_attempts;
        c.ib[m] = (int64_t)it->pol.initial_backoff_ms;
        c.mb[m] = (int64_t)it->pol.max_backoff_ms;
        snprintf(c.mult_text[m], sizeof c.mult_text[m], "%.17g", it->pol.multiplier);
        c.mults[m] = it->has_retry ? c.mult_text[m] : NULL;
        c.cs[m] = (int32_t)ci + 1;
        c.cc[m] = 0;
        if (it->a->retry != NULL)
            for (size_t k = 0; k < it->a->retry->n_non_retryable_codes; k++, c.cc[m]++)
                c.codes[ci++] = it->a->retry->non_retryable_codes[k];
        m++;
    }
    if (ok) {
        pgwire_params *pp = &t->params[s];
        pgwire_uuid_array(pp, (const uint8_t(*)[16])c.iid, NULL, m);
        pgwire_uuid_array(pp, (const uint8_t(*)[16])c.tid, NULL, m);
        pgwire_text_array(pp, c.topics, m);
        pgwire_bytea_array(pp, c.pays, c.plens, m);
        pgwire_text_array(pp, c.hdrs, hi);
        pgwire_int4_array(pp, c.hs, NULL, m);
        pgwire_int4_array(pp, c.hc, NULL, m);
        pgwire_text_array(pp, c.cts, m);
        pgwire_text_array(pp, c.keys, m);
        pgwire_int8_array(pp, c.delay, c.delay_null, m);
        pgwire_int8_array(pp, c.nb, c.nb_null, m);
        pgwire_int8_array(pp, c.prio, NULL, m);
        pgwire_int4_array(pp, c.blen, NULL, m);
        pgwire_int8_array(pp, c.timeout, c.pol_null, m);
        pgwire_int4_array(pp, c.attempts, NULL, m);
        pgwire_int8_array(pp, c.ib, c.pol_null, m);
        pgwire_int8_array(pp, c.mb, c.pol_null, m);
        pgwire_text_array(pp, c.mults, m);
        pgwire_text_array(pp, c.codes, ci);
        pgwire_int4_array(pp, c.cs, NULL, m);
        pgwire_int4_array(pp, c.cc, NULL, m);
        pgwire_int8(pp, (int64_t)t->o->dedup_horizon_ms);
        pgwire_int4(pp, (int32_t)t->o->retries);
        pgwire_int4_array(pp, c.dep, NULL, m);
        pgwire_bool_array(pp, c.push, NULL, m);
    }
    cols_free(&c);
    return ok;
}

/* ---- a reply's call, and the timers ---- */

bool pgcall_stmt_lock(pgops_turn *t, const uint8_t (*tasks)[BERTH_ID_LEN], size_t m,
                      const uint8_t (*deliveries)[BERTH_ID_LEN], size_t k)
{
    int s = pgplan_add_stmt(t, "instances_lock", 64 + 20 * (m + k));
    if (s >= 0) {
        pgwire_uuid_array(&t->params[s], tasks, NULL, m);
        pgwire_uuid_array(&t->params[s], deliveries, NULL, k);
    }
    t->s_ilock = s;
    return s >= 0;
}

bool pgcall_stmt_housekeeping(pgops_turn *t)
{
    uint32_t n = t->o->timers_max_per_turn ? t->o->timers_max_per_turn : 1;
    if ((t->s_timers = pgplan_add_stmt(t, "timers_due", 16)) < 0 ||
        (t->s_drop = pgplan_add_stmt(t, "instances_drop", 32)) < 0 ||
        (t->s_expire = pgplan_add_stmt(t, "keys_expire", 32)) < 0)
        return false;
    pgwire_int4(&t->params[t->s_timers], (int32_t)n);
    pgwire_int8(&t->params[t->s_drop], (int64_t)t->o->instance_retention_ms);
    pgwire_int4(&t->params[t->s_drop], (int32_t)n);
    pgwire_int8(&t->params[t->s_expire], (int64_t)t->o->dedup_horizon_ms);
    pgwire_int4(&t->params[t->s_expire], 5000);
    return true;
}

static irow *irow_of(pgops_turn *t, const uint8_t id[BERTH_ID_LEN])
{
    for (size_t i = 0; i < t->irows.n; i++)
        if (memcmp(t->irows.v[i].id, id, BERTH_ID_LEN) == 0)
            return &t->irows.v[i];
    return NULL;
}

/* Columns id, state, attempt (0, 1, 2), current and topic at cur, top. */
static bool irow_read(const PGresult *res, int i, int cur, int top, irow *w)
{
    int32_t state, attempt;
    const char *s;
    size_t len;
    *w = (irow){.timer_at = -1, .lrow = -1};
    if (pgwire_get_uuid(res, i, 0, w->id) != BERTH_OK ||
        pgwire_get_int4(res, i, 1, &state) != BERTH_OK ||
        pgwire_get_int4(res, i, 2, &attempt) != BERTH_OK ||
        pgwire_get_text(res, i, top, &s, &len) != BERTH_OK)
        return false;
    w->state = state;
    w->attempt = (uint32_t)attempt;
    w->has_current =
        !pgwire_isnull(res, i, cur) && pgwire_get_uuid(res, i, cur, w->current) == BERTH_OK;
    w->topic = mem_strdup(s);
    return w->topic != NULL;
}

static bool irow_push(pgops_turn *t, irow *w)
{
    if (VEC_PUSH(&t->irows, *w))
        return true;
    free(w->topic);
    return false;
}

bool pgcall_read_locked(pgops_turn *t, pgturn *pt)
{
    const PGresult *res = t->s_ilock >= 0 ? pgturn_first_result(pt, (size_t)t->s_ilock) : NULL;
    if (res == NULL || t->ilock == res)
        return true; /* none, or read already (the relay's answers and the replies share it) */
    t->ilock = res;
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        irow w;
        bool ended;
        if (!irow_read(res, i, 4, 5, &w) || pgwire_get_bool(res, i, 3, &ended) != BERTH_OK) {
            free(w.topic);
            return false;
        }
        w.ended = ended;
        w.lrow = i;
        if (!irow_push(t, &w))
            return false;
    }
    return true;
}

/* w ends this turn, RESOLVED or FAILED. */
static void end(irow *w, engine_instance_state state)
{
    w->end = w->dirty = true;
    w->state = (int)state;
    w->timer_at = -1;
}

bool pgcall_correlate(pgops_turn *t, const trow *w, const engine_result *result,
                      const engine_error *err, engine_status *st)
{
    irow *i = irow_of(t, w->instance_id);
    rules_call c = {.found = i != NULL};
    if (i != NULL)
        c = (rules_call){.found = true,
                         .ended = i->ended || i->end,
                         .state = (engine_instance_state)i->state,
                         .attempt = i->attempt};
    switch (rules_correlate(&c, (uint32_t)w->call_attempt, st)) {
    case RULES_CORR_ABSORB:
        return true; /* the call has ended: absorbed */
    case RULES_CORR_RETRY_PENDING:
        return false;
    case RULES_CORR_RESOLVE_WITHDRAW:
        if (i->has_current && memcmp(i->current, w->id, BERTH_ID_LEN) != 0) {
            i->withdraw = true;
            memcpy(i->dead, i->current, BERTH_ID_LEN);
        }
        break;
    case RULES_CORR_RESOLVE:
        break;
    }
    end(i, ENGINE_INSTANCE_RESOLVED);
    if (err != NULL)
        i->err = *err;
    else if (result != NULL)
        i->result = result;
    else
        i->result_of = w->id;
    t->delta.calls_resolved++;
    return true;
}

/* Whether code is one of i's non-retryable codes (instances_lock's). */
static bool non_retryable(const pgops_turn *t, const irow *i, const char *code)
{
    pgwire_array arr;
    if (code == NULL || i->lrow < 0 || t->ilock == NULL ||
        pgwire_array_open(t->ilock, i->lrow, 11, PGWIRE_TEXT, &arr) != BERTH_OK)
        return false;
    const uint8_t *v;
    size_t len;
    while (pgwire_array_next(&arr, &v, &len) == 1)
        if (v != NULL && len == strlen(code) && memcmp(v, code, len) == 0)
            return true;
    return false;
}

void pgcall_reject(pgops_turn *t, const trow *w, const engine_error *err)
{
    irow *i = irow_of(t, w->instance_id);
    if (i != NULL && !i->ended && !i->end && i->state != ENGINE_INSTANCE_BACKOFF &&
        non_retryable(t, i, err->code)) {
        end(i, ENGINE_INSTANCE_FAILED);
        i->err = *err;
        t->delta.calls_failed++;
        return;
    }
    engine_status st = {0};
    (void)pgcall_correlate(t, w, NULL, err, &st); /* (a refusal, RETRY_PENDING: nothing to do) */
}

/* A timer row's policy: columns 3..7 of timers_due. */
static rules_policy policy_of(const PGresult *res, int i)
{
    int32_t attempts = 1;
    int64_t timeout = 0, ib = 0, mb = 0;
    const char *mult = NULL;
    size_t len;
    (void)pgwire_get_int4(res, i, 3, &attempts);
    if (!pgwire_isnull(res, i, 4))
        (void)pgwire_get_int8(res, i, 4, &timeout);
    if (!pgwire_isnull(res, i, 5))
        (void)pgwire_get_int8(res, i, 5, &ib);
    if (!pgwire_isnull(res, i, 6))
        (void)pgwire_get_int8(res, i, 6, &mb);
    if (!pgwire_isnull(res, i, 7))
        (void)pgwire_get_text(res, i, 7, &mult, &len);
    return (rules_policy){.timeout_ms = (uint64_t)timeout,
                          .max_attempts = (uint32_t)attempts,
                          .initial_backoff_ms = (uint64_t)ib,
                          .max_backoff_ms = (uint64_t)mb,
                          .multiplier = mult ? strtod(mult, NULL) : 2.0};
}

/* A timer that came: BACKOFF's end re-drives; WAITING's is the attempt's
 * timeout (engine/README.md, "Calls"). */
static void fire(pgops_turn *t, irow *w, const rules_policy *pol, const char *poisoned_why)
{
    uint64_t now = t->now_ms;
    if (w->has_current) {
        w->withdraw = true; /* the dead attempt's task, unless a worker holds it */
        memcpy(w->dead, w->current, BERTH_ID_LEN);
    }
    w->dirty = true;
    if (w->state == ENGINE_INSTANCE_BACKOFF) {
        w->redrive = true;
        randombytes_buf(w->new_task, sizeof w->new_task);
        memcpy(w->current, w->new_task, BERTH_ID_LEN);
        w->has_current = true;
        w->attempt++;
        w->state = ENGINE_INSTANCE_WAITING;
        w->timer_at = (int64_t)(now + pol->timeout_ms);
        return;
    }
    if (poisoned_why != NULL) { /* its request could not be delivered (kept, poisoned) */
        rules_call_poisoned(w->attempt, pol->max_attempts, poisoned_why[0] ? poisoned_why : NULL,
                            w->msg, sizeof w->msg, &w->err);
    } else {
        t->delta.calls_timed_out++;
        rules_call_timeout(pol, w->attempt, w->msg, sizeof w->msg, &w->err);
    }
    rules_call_next next;
    rules_call_failed_attempt(pol, w->attempt, now, t->o->backoff_jitter, &next);
    if (next.fail) {
        end(w, ENGINE_INSTANCE_FAILED);
        t->delta.calls_failed++;
        return;
    }
    w->err = (engine_error){0}; /* an attempt's timeout is no end: the call backs off */
    w->state = ENGINE_INSTANCE_BACKOFF;
    w->timer_at = (int64_t)next.retry_at_ms;
}

bool pgcall_timers(pgops_turn *t, pgturn *pt)
{
    t->now_ms = (uint64_t)pt->now_ms;
    const PGresult *res = pgturn_first_result(pt, (size_t)t->s_timers);
    int n = res ? PQntuples(res) : 0;
    size_t first = t->irows.n;
    for (int i = 0; i < n; i++) {
        irow w;
        if (!irow_read(res, i, 8, 9, &w)) {
            free(w.topic);
            return false;
        }
        if (irow_of(t, w.id) != NULL) { /* a reply of this turn has it: the next turn fires it */
            free(w.topic);
            t->hk_more = true;
            continue;
        }
        if (!irow_push(t, &w))
            return false;
    }
    /* (the rows no longer move: messages may point into them) */
    for (int i = 0; i < n; i++) {
        uint8_t id[BERTH_ID_LEN];
        if (pgwire_get_uuid(res, i, 0, id) != BERTH_OK)
            continue;
        irow *w = irow_of(t, id);
        if (w == NULL || (size_t)(w - t->irows.v) < first)
            continue;
        rules_policy pol = policy_of(res, i);
        const char *why = NULL;
        size_t len;
        if (!pgwire_isnull(res, i, 10))
            (void)pgwire_get_text(res, i, 10, &why, &len);
        fire(t, w, &pol, why);
        if (w->err.code != NULL)
            w->err.message = w->msg;
    }
    t->hk_fired = (size_t)n;
    return true;
}

/* ---- round two ---- */

static bool stmt_withdraw(pgops_turn *t, size_t n)
{
    uint8_t(*ids)[16] = mem_calloc(n, 16);
    if (ids == NULL)
        return false;
    size_t k = 0;
    for (size_t i = 0; i < t->irows.n; i++)
        if (t->irows.v[i].withdraw)
            memcpy(ids[k++], t->irows.v[i].dead, 16);
    int s = pgplan_add_stmt(t, "tasks_withdraw", 64 + 20 * k);
    if (s >= 0)
        pgwire_uuid_array(&t->params[s], (const uint8_t(*)[16])ids, NULL, k);
    free(ids);
    return s >= 0;
}

static bool stmt_redrive(pgops_turn *t, size_t n)
{
    uint8_t(*iid)[16] = mem_calloc(n, 16), (*tid)[16] = mem_calloc(n, 16);
    int32_t *att = mem_calloc(n, 4);
    bool ok = iid && tid && att;
    size_t k = 0;
    for (size_t i = 0; ok && i < t->irows.n; i++) {
        const irow *w = &t->irows.v[i];
        if (!w->redrive)
            continue;
        memcpy(iid[k], w->id, 16);
        memcpy(tid[k], w->new_task, 16);
        att[k++] = (int32_t)w->attempt;
    }
    int s = ok ? pgplan_add_stmt(t, "redrive_insert", 128 + 64 * k) : -1;
    if (s >= 0) {
        pgwire_params *pp = &t->params[s];
        pgwire_uuid_array(pp, (const uint8_t(*)[16])iid, NULL, k);
        pgwire_uuid_array(pp, (const uint8_t(*)[16])tid, NULL, k);
        pgwire_int4_array(pp, att, NULL, k);
        pgwire_int4(pp, (int32_t)t->o->retries);
    }
    t->s_redrive = s;
    free(iid);
    free(tid);
    free(att);
    return s >= 0;
}

/* instances_write's arrays. */
typedef struct write_cols {
    uint8_t (*id)[16], (*cur)[16], (*src)[16];
    int32_t *state, *attempt, *rhs, *rhc;
    int64_t *timer;
    bool *timer_null, *cur_null, *src_null, *ended;
    const void **rp;
    size_t *rplen;
    const char **rct, **rh, **ec, **em, **ed;
} write_cols;

static bool stmt_write(pgops_turn *t, size_t n)
{
    size_t nh = 0, bytes = 1024;
    for (size_t i = 0; i < t->irows.n; i++) {
        const irow *w = &t->irows.v[i];
        if (!w->dirty)
            continue;
        bytes += 160 + pgplan_text_len(w->err.code) + pgplan_text_len(w->err.message) +
                 pgplan_text_len(w->err.details);
        if (w->result != NULL) {
            bytes += w->result->payload_len + pgplan_text_len(w->result->content_type);
            for (size_t h = 0; h < w->result->n_headers; h++)
                bytes +=
                    16 + strlen(w->result->headers[h].name) + strlen(w->result->headers[h].value);
            nh += 2 * w->result->n_headers;
        }
    }
    write_cols c = {.id = mem_calloc(n, 16),
                    .cur = mem_calloc(n, 16),
                    .src = mem_calloc(n, 16),
                    .state = mem_calloc(n, 4),
                    .attempt = mem_calloc(n, 4),
                    .rhs = mem_calloc(n, 4),
                    .rhc = mem_calloc(n, 4),
                    .timer = mem_calloc(n, 8),
                    .timer_null = mem_calloc(n, 1),
                    .cur_null = mem_calloc(n, 1),
                    .src_null = mem_calloc(n, 1),
                    .ended = mem_calloc(n, 1),
                    .rp = mem_calloc(n, sizeof(void *)),
                    .rplen = mem_calloc(n, sizeof(size_t)),
                    .rct = mem_calloc(n, sizeof(char *)),
                    .rh = mem_calloc(nh ? nh : 1, sizeof(char *)),
                    .ec = mem_calloc(n, sizeof(char *)),
                    .em = mem_calloc(n, sizeof(char *)),
                    .ed = mem_calloc(n, sizeof(char *))};
    bool ok = c.id && c.cur && c.src && c.state && c.attempt && c.rhs && c.rhc && c.timer &&
              c.timer_null && c.cur_null && c.src_null && c.ended && c.rp && c.rplen && c.rct &&
              c.rh && c.ec && c.em && c.ed;
    size_t k = 0, hi = 0;
    for (size_t i = 0; ok && i < t->irows.n; i++) {
        const irow *w = &t->irows.v[i];
        if (!w->dirty)
            continue;
        memcpy(c.id[k], w->id, 16);
        c.state[k] = w->state;
        c.attempt[k] = (int32_t)w->attempt;
        memcpy(c.cur[k], w->current, 16);
        c.cur_null[k] = !w->has_current;
        c.timer[k] = w->timer_at;
        c.timer_null[k] = w->timer_at < 0;
        c.ended[k] = w->end;
        c.src_null[k] = w->result_of == NULL;
        if (w->result_of != NULL)
            memcpy(c.src[k], w->result_of, 16);
        c.rhs[k] = (int32_t)hi + 1;
        if (w->result != NULL) {
            c.rp[k] = w->result->payload != NULL ? (const void *)w->result->payload : "";
            c.rplen[k] = w->result->payload_len;
            c.rct[k] = w->result->content_type && w->result->content_type[0]
                           ? w->result->content_type
                           : NULL;
            c.rhc[k] = (int32_t)(2 * w->result->n_headers);
            for (size_t h = 0; h < w->result->n_headers; h++) {
                c.rh[hi++] = w->result->headers[h].name;
                c.rh[hi++] = w->result->headers[h].value;
            }
        }
        c.ec[k] = w->end ? w->err.code : NULL;
        c.em[k] = w->end ? w->err.message : NULL;
        c.ed[k] = w->end ? w->err.details : NULL;
        k++;
    }
    int s = ok ? pgplan_add_stmt(t, "instances_write", bytes + 64 * k) : -1;
    if (s >= 0) {
        pgwire_params *pp = &t->params[s];
        pgwire_uuid_array(pp, (const uint8_t(*)[16])c.id, NULL, k);
        pgwire_int4_array(pp, c.state, NULL, k);
        pgwire_int4_array(pp, c.attempt, NULL, k);
        pgwire_uuid_array(pp, (const uint8_t(*)[16])c.cur, c.cur_null, k);
        pgwire_int8_array(pp, c.timer, c.timer_null, k);
        pgwire_bool_array(pp, c.ended, NULL, k);
        /* bytea elements: a NULL pointer is SQL NULL (no result) */
        pgwire_bytea_array(pp, c.rp, c.rplen, k);
        pgwire_text_array(pp, c.rct, k);
        pgwire_text_array(pp, c.rh, hi);
        pgwire_int4_array(pp, c.rhs, NULL, k);
        pgwire_int4_array(pp, c.rhc, NULL, k);
        pgwire_uuid_array(pp, (const uint8_t(*)[16])c.src, c.src_null, k);
        pgwire_text_array(pp, c.ec, k);
        pgwire_text_array(pp, c.em, k);
        pgwire_text_array(pp, c.ed, k);
    }
    void *all[] = {c.id,    c.cur,        c.src,      c.state,    c.attempt, c.rhs, c.rhc,
                   c.timer, c.timer_null, c.cur_null, c.src_null, c.ended,   c.rp,  c.rplen,
                   c.rct,   c.rh,         c.ec,       c.em,       c.ed};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    return s >= 0;
}

/* The doorbell records of the turn's calls: their tasks (as a submit's),
 * their timers, and every call that changed ('r', for awaits anywhere). */
static void notify(pgops_turn *t)
{
    uint64_t now = t->now_ms;
    for (size_t i = 0; i < t->calls.n; i++) {
        const call_item *c = &t->calls.v[i];
        const engine_submit_args *q = &c->a->request;
        if (c->dep < 0)
            continue; /* refused by its route: nothing new */
        uint64_t at = q->has_delay_ms        ? now + q->delay_ms
                      : q->has_not_before_ms ? q->not_before_ms
                                             : 0;
        uint64_t in = at > now ? at - now : 0;
        if (c->push)
            pgplan_notify_add(t, 'o', "", 0); /* a delivery: relays, look */
        else
            pgplan_notify_add(t, in ? 't' : 'p', q->topic, in);
        if (c->has_retry)
            pgplan_notify_add(t, 'i', "", in + c->pol.timeout_ms);
    }
    for (size_t i = 0; i < t->irows.n; i++) {
        const irow *w = &t->irows.v[i];
        if (!w->dirty)
            continue;
        char hex[ENGINE_ID_STR];
        store_id_format(w->id, hex);
        pgplan_notify_add(t, 'r', hex, 0);
        if (w->redrive)
            pgplan_notify_add(t, 'p', w->topic, 0);
        if (w->timer_at >= 0)
            pgplan_notify_add(t, 'i', "",
                              (uint64_t)w->timer_at > now ? (uint64_t)w->timer_at - now : 0);
        if (w->end)
            pgplan_notify_add(t, 'i', "", t->o->instance_retention_ms);
    }
}

bool pgcall_stmt_writes(pgops_turn *t)
{
    size_t nw = 0, nr = 0, nd = 0;
    for (size_t i = 0; i < t->irows.n; i++) {
        nw += t->irows.v[i].withdraw;
        nr += t->irows.v[i].redrive;
        nd += t->irows.v[i].dirty;
    }
    notify(t);
    return (nw == 0 || stmt_withdraw(t, nw)) && (nr == 0 || stmt_redrive(t, nr)) &&
           (nd == 0 || stmt_write(t, nd));
}

/* ---- AWAIT_CALL ---- */

void pgcall_plan_await(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    if (!p->checked) {
        if (!rules_await_check(t->o, &p->req.u.await_call, p->call_id, &p->wait_ms, &r->status)) {
            p->settled = true;
            return;
        }
        p->checked = true;
        p->may_wait = p->wait_ms > 0;
    }
    await_item a = {.p = p};
    if (!VEC_PUSH(&t->awaits, a)) {
        reply_no_memory(&r->status);
        p->settled = true;
    }
}

bool pgcall_stmt_after(pgops_turn *t)
{
    if (t->awaits.n > 0) {
        uint8_t(*ids)[16] = mem_calloc(t->awaits.n, 16);
        if (ids == NULL)
            return false;
        for (size_t i = 0; i < t->awaits.n; i++)
            memcpy(ids[i], t->awaits.v[i].p->call_id, 16);
        t->s_await = pgplan_add_stmt(t, "await_read", 64 + 20 * t->awaits.n);
        if (t->s_await >= 0)
            pgwire_uuid_array(&t->params[t->s_await], (const uint8_t(*)[16])ids, NULL, t->awaits.n);
        free(ids);
        if (t->s_await < 0)
            return false;
    }
    if (t->housekeeping) {
        t->s_hk_next = pgplan_add_stmt(t, "housekeeping_next", 32);
        if (t->s_hk_next < 0)
            return false;
        pgwire_int8(&t->params[t->s_hk_next], (int64_t)t->o->instance_retention_ms);
        pgwire_int8(&t->params[t->s_hk_next], (int64_t)t->o->dedup_horizon_ms);
    }
    return true;
}

/* r->instance from await_read's row i (an ended call's outcome in r's
 * memory). False: no memory. */
static bool instance_from_row(engine_reply *r, const PGresult *res, int i, bool *live)
{
    store_instance rec = {0};
    int32_t state = 0, attempt = 0;
    int64_t created = 0, ended = 0;
    (void)pgwire_get_uuid(res, i, 0, rec.id);
    (void)pgwire_get_int4(res, i, 1, &state);
    (void)pgwire_get_int4(res, i, 2, &attempt);
    (void)pgwire_get_int8(res, i, 3, &created);
    memset(&r->instance, 0, sizeof r->instance);
    *live = pgwire_isnull(res, i, 4);
    if (*live) {
        rules_instance_live(&r->instance, rec.id, (engine_instance_state)state, (uint32_t)attempt,
                            (uint64_t)created);
        return true;
    }
    (void)pgwire_get_int8(res, i, 4, &ended);
    rec.state = state;
    rec.attempt = (uint32_t)attempt;
    rec.created_at_ms = (uint64_t)created;
    rec.ended_at_ms = (uint64_t)ended;
    store_header hs[ENGINE_HEADERS_MAX];
    rec.has_result = !pgwire_isnull(res, i, 5);
    if (!pgplan_copy_bytes(r, res, i, 5, &rec.result_payload, &rec.result_payload_len) ||
        !pgplan_copy_headers(r, res, i, 7, hs, &rec.n_result_headers))
        return false;
    rec.result_headers = hs;
    rec.result_content_type = pgplan_copy_text(r, res, i, 6);
    rec.error = (store_error){pgplan_copy_text(r, res, i, 8), pgplan_copy_text(r, res, i, 9),
                              pgplan_copy_text(r, res, i, 10)};
    return rules_instance_answer(r, &rec);
}

static void answer_awaits(pgops_turn *t)
{
    const PGresult *res = t->s_await >= 0 ? t->stmts[t->s_await].result : NULL;
    int n = res ? PQntuples(res) : 0;
    for (size_t k = 0; k < t->awaits.n; k++) {
        pgreq *p = t->awaits.v[k].p;
        engine_reply *r = p->reply;
        int row = -1;
        for (int i = 0; i < n && row < 0; i++) {
            uint8_t id[BERTH_ID_LEN];
            if (pgwire_get_uuid(res, i, 0, id) == BERTH_OK &&
                memcmp(id, p->call_id, BERTH_ID_LEN) == 0)
                row = i;
        }
        p->live = false;
        if (row < 0)
            rules_await_not_found(&r->status, p->req.u.await_call.instance_id);
        else if (!instance_from_row(r, res, row, &p->live))
            reply_no_memory(&r->status);
    }
}

/* ---- after COMMIT ---- */

static void answer_calls(pgops_turn *t)
{
    const PGresult *res = t->stmts[t->s_call].result;
    size_t sent = 0;
    for (size_t i = 0; i < t->calls.n; i++) {
        call_item *c = &t->calls.v[i];
        engine_submitted *out = c->p->reply->submitted;
        if (c->same_as >= 0)
            continue;
        pgplan_winner(res, ++sent, c->iid, out);
        if (c->dep < 0) {
            pgplan_refused_answer(c->p->reply, out);
            continue;
        }
        if (!out->duplicate) {
            engine_topic_counters *tc = pgplan_counters(t, c->a->request.topic);
            if (tc != NULL)
                tc->submitted++;
            t->delta.calls++;
            if (!c->push) /* (a delivery is not parked: it is pushed) */
                pgplan_event(t, ENGINE_EVENT_TASK_PARKED, c->a->request.topic, c->tid, NULL, 0);
        }
    }
    for (size_t i = 0; i < t->calls.n; i++) {
        call_item *c = &t->calls.v[i];
        if (c->same_as >= 0) {
            engine_submitted *out = c->p->reply->submitted;
            memcpy(out->id, t->calls.v[c->same_as].p->reply->submitted->id, sizeof out->id);
            out->duplicate = true;
        }
    }
}

/* When the next housekeeping is due, from housekeeping_next's row. */
static uint64_t next_due(pgops_turn *t)
{
    uint32_t cap = t->o->timers_max_per_turn ? t->o->timers_max_per_turn : 1;
    int64_t dropped = 0, expired = 0;
    const PGresult *d = t->stmts[t->s_drop].result, *x = t->stmts[t->s_expire].result;
    if (d && PQntuples(d) == 1)
        (void)pgwire_get_int8(d, 0, 0, &dropped);
    if (x && PQntuples(x) == 1)
        (void)pgwire_get_int8(x, 0, 0, &expired);
    t->delta.instances_dropped += (uint64_t)dropped;
    if (t->hk_more || t->hk_fired >= cap || dropped >= (int64_t)cap || expired >= 5000)
        return 0; /* more of it now */
    const PGresult *res = t->stmts[t->s_hk_next].result;
    if (res == NULL || PQntuples(res) != 1)
        return UINT64_MAX;
    int64_t now = 0, at, due = INT64_MAX;
    (void)pgwire_get_int8(res, 0, 3, &now);
    for (int col = 0; col < 3; col++)
        if (!pgwire_isnull(res, 0, col) && pgwire_get_int8(res, 0, col, &at) == BERTH_OK &&
            at < due)
            due = at;
    if (due == INT64_MAX)
        return UINT64_MAX;
    return due > now ? (uint64_t)(due - now) : HELD_RETRY_MS; /* due, yet held elsewhere */
}

void pgcall_answer(pgops_turn *t, uint64_t *next_in_ms)
{
    if (t->s_call >= 0)
        answer_calls(t);
    answer_awaits(t);
    for (size_t i = 0; i < t->irows.n; i++) {
        const irow *w = &t->irows.v[i];
        if (w->end)
            pgplan_event(t, ENGINE_EVENT_INSTANCE_RESOLVED, w->topic, w->id,
                         w->err.code || w->err.message ? &w->err : NULL, 0);
        if (w->redrive)
            pgplan_event(t, ENGINE_EVENT_TASK_PARKED, w->topic, w->new_task, NULL, 0);
    }
    *next_in_ms = t->housekeeping ? next_due(t) : UINT64_MAX;
}
