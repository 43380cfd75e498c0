/* pgclaim.c — see pgclaim.h. */
#include "pg/pgclaim.h"

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

static bool one_topic_fetch(const pgreq *p)
{
    return !p->settled && !p->deferred && p->req.op == ENGINE_OP_FETCH &&
           p->req.u.fetch.n_topics == 1;
}

uint64_t pgclaim_task_max(const engine_options *o)
{
    /* pgsubmit_body_bytes(): 16, the payload, the topic, the content type,
     * 2 + name + value a header */
    return 16 + (uint64_t)o->payload_max_bytes + BERTH_TOPIC_MAX + ENGINE_CONTENT_TYPE_MAX +
           (uint64_t)ENGINE_HEADERS_MAX * (2 + ENGINE_HEADER_NAME_MAX + ENGINE_HEADER_VALUE_MAX);
}

/* THE FETCH BUDGET: which fetches claim in this turn. */
static void budget(pgops_turn *t)
{
    uint64_t task_max = pgclaim_task_max(t->o), left = t->fetch_budget;
    uint64_t most = t->o->fetch_max_bytes > task_max ? t->o->fetch_max_bytes : task_max;
    bool first = true;
    for (pgreq *p = t->list; p != NULL; p = p->next) {
        if (p->settled || p->req.op != ENGINE_OP_FETCH || p->claim >= 0)
            continue;
        uint64_t need = p->f.max_tasks * task_max;
        if (need > most)
            need = most;
        if (!first && need > left) {
            p->deferred = true;
            continue;
        }
        left = need > left ? 0 : left - need;
        first = false;
    }
}

/* Every fetch of the turn naming topic alone (from p on), in one claim_many. */
static int stmt_claim_many(pgops_turn *t, pgreq *first)
{
    const char *topic = first->req.u.fetch.topics[0];
    size_t n = 0, bytes = 128 + strlen(topic);
    for (pgreq *p = first; p != NULL; p = p->next)
        if (one_topic_fetch(p) && p->claim < 0 && strcmp(p->req.u.fetch.topics[0], topic) == 0) {
            n++;
            bytes += 32 + strlen(p->req.u.fetch.worker_id);
        }
    int32_t *ns = mem_calloc(n, sizeof(int32_t));
    int64_t *locks = mem_calloc(n, sizeof(int64_t));
    const char **workers = mem_calloc(n, sizeof(char *));
    int s = ns && locks && workers ? pgplan_add_stmt(t, "claim_many", bytes) : -1;
    if (s >= 0) {
        size_t i = 0;
        for (pgreq *p = first; p != NULL; p = p->next)
            if (one_topic_fetch(p) && p->claim < 0 &&
                strcmp(p->req.u.fetch.topics[0], topic) == 0) {
                ns[i] = (int32_t)p->f.max_tasks;
                locks[i] = (int64_t)p->f.lock_ms;
                workers[i] = p->req.u.fetch.worker_id;
                p->claim = s;
                p->claim_i = (int)++i;
            }
        pgwire_params *pp = &t->params[s];
        pgwire_text(pp, topic);
        pgwire_int4_array(pp, ns, NULL, n);
        pgwire_int8_array(pp, locks, NULL, n);
        pgwire_text_array(pp, workers, n);
        pgwire_int8(pp, (int64_t)t->o->fetch_max_bytes);
    }
    free(ns);
    free(locks);
    free(workers);
    return s;
}

bool pgclaim_stmts(pgops_turn *t)
{
    budget(t);
    for (pgreq *p = t->list; p != NULL; p = p->next) {
        if (p->settled || p->deferred || p->req.op != ENGINE_OP_FETCH || p->claim >= 0)
            continue;
        const engine_fetch_args *a = &p->req.u.fetch;
        bool many = false;
        if (one_topic_fetch(p))
            for (pgreq *q = p->next; q != NULL && !many; q = q->next)
                many = one_topic_fetch(q) && strcmp(q->req.u.fetch.topics[0], a->topics[0]) == 0;
        if (many) {
            if (stmt_claim_many(t, p) < 0)
                return false;
        } else {
            size_t bytes = 128 + strlen(a->worker_id);
            for (size_t i = 0; i < a->n_topics; i++)
                bytes += 8 + strlen(a->topics[i]);
            int s = pgplan_add_stmt(t, a->n_topics == 1 ? "claim1" : "claimk", bytes);
            if (s < 0)
                return false;
            pgwire_params *pp = &t->params[s];
            if (a->n_topics == 1)
                pgwire_text(pp, a->topics[0]);
            else
                pgwire_text_array(pp, (const char *const *)a->topics, a->n_topics);
            pgwire_int4(pp, (int32_t)p->f.max_tasks);
            pgwire_int8(pp, (int64_t)p->f.lock_ms);
            pgwire_text(pp, a->worker_id);
            pgwire_int8(pp, (int64_t)t->o->fetch_max_bytes);
            p->claim = s;
            p->claim_i = 0;
        }
    }
    for (pgreq *p = t->list; p != NULL; p = p->next) {
        if (p->settled || p->deferred || p->req.op != ENGINE_OP_FETCH || !p->may_wait)
            continue;
        for (size_t i = 0; i < p->req.u.fetch.n_topics; i++) {
            const char *topic = p->req.u.fetch.topics[i];
            bool seen = false;
            for (size_t k = 0; k < t->due_topics.n && !seen; k++)
                seen = strcmp(t->due_topics.v[k], topic) == 0;
            if (!seen && !VEC_PUSH(&t->due_topics, topic))
                return false;
        }
    }
    if (t->due_topics.n > 0) {
        size_t bytes = 64;
        for (size_t i = 0; i < t->due_topics.n; i++)
            bytes += 8 + strlen(t->due_topics.v[i]);
        int s = pgplan_add_stmt(t, "topics_due", bytes);
        if (s < 0)
            return false;
        pgwire_text_array(&t->params[s], t->due_topics.v, t->due_topics.n);
        t->s_topics_due = s;
    }
    return true;
}

/* One claimed row into et (its memory the reply's). */
static bool claimed_task(engine_reply *r, const PGresult *res, int i, int off, engine_task *et)
{
    uint8_t id[BERTH_ID_LEN], token[BERTH_ID_LEN];
    int64_t lx, av, created, prio;
    int32_t claims, rl;
    const uint8_t *pay;
    size_t plen;
    if (pgwire_get_uuid(res, i, off + 1, id) || pgwire_get_uuid(res, i, off + 3, token) ||
        pgwire_get_int8(res, i, off + 4, &lx) || pgwire_get_int4(res, i, off + 5, &claims) ||
        pgwire_get_int4(res, i, off + 6, &rl) || pgwire_get_int8(res, i, off + 7, &av) ||
        pgwire_get_int8(res, i, off + 8, &created) || pgwire_get_int8(res, i, off + 9, &prio) ||
        pgwire_get_bytea(res, i, off + 15, &pay, &plen))
        return false;
    store_header hs[ENGINE_HEADERS_MAX];
    size_t nh;
    if (!pgplan_copy_headers(r, res, i, off + 13, hs, &nh))
        return false;
    store_body b = {.topic = pgplan_copy_text(r, res, i, off + 2),
                    .payload = plen ? mem_dup(pay, plen) : NULL,
                    .payload_len = plen,
                    .headers = hs,
                    .n_headers = nh,
                    .content_type = pgplan_copy_text(r, res, i, off + 12)};
    if (b.topic == NULL || (plen && b.payload == NULL)) {
        free((void *)b.payload);
        return false;
    }
    /* The payload's bytes belong to the reply. */
    uint8_t *pcopy = plen ? reply_mem(r, plen) : NULL;
    if (plen && pcopy == NULL) {
        free((void *)b.payload);
        return false;
    }
    if (plen)
        memcpy(pcopy, b.payload, plen);
    free((void *)b.payload);
    b.payload = pcopy;
    if (!pgwire_isnull(res, i, off + 10)) {
        int32_t att = 0;
        b.has_instance = pgwire_get_uuid(res, i, off + 10, b.instance_id) == BERTH_OK;
        if (!pgwire_isnull(res, i, off + 11) && pgwire_get_int4(res, i, off + 11, &att) == BERTH_OK)
            b.call_attempt = (uint32_t)att;
    }
    engine_header *ehs;
    char *call;
    if (!rules_task_mem(r, &b, &ehs, &call))
        return false;
    rules_task_view v = {.id = id,
                         .body = &b,
                         .attempt = (uint32_t)claims,
                         .retries_left = (uint32_t)rl,
                         .priority = (uint32_t)prio,
                         .lock_token = token,
                         .lock_expires_at_ms = (uint64_t)lx,
                         .created_at_ms = (uint64_t)created,
                         .available_at_ms = (uint64_t)av};
    rules_task_answer(et, &v, ehs, call);
    return true;
}

void pgclaim_answer(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    const PGresult *res = t->stmts[p->claim].result;
    int rows = res ? PQntuples(res) : 0, off = p->claim_i > 0 ? 1 : 0, n = 0;
    for (int i = 0; i < rows; i++) { /* this fetch's rows (claim_many: column i names it) */
        int32_t mine = 0;
        n += off == 0 || (pgwire_get_int4(res, i, 0, &mine) == BERTH_OK && mine == p->claim_i);
    }
    if (n == 0)
        return;
    r->tasks = reply_mem(r, (size_t)n * sizeof(*r->tasks));
    if (r->tasks == NULL) {
        reply_no_memory(&r->status);
        return; /* the claimed tasks come back when their locks expire */
    }
    /* In claim order (k), whatever order RETURNING gave. */
    for (int i = 0; i < rows; i++) {
        int32_t mine = 0;
        if (off > 0 && (pgwire_get_int4(res, i, 0, &mine) != BERTH_OK || mine != p->claim_i))
            continue;
        int64_t k;
        if (pgwire_get_int8(res, i, off, &k) != BERTH_OK || k < 1 || k > n ||
            !claimed_task(r, res, i, off, &r->tasks[k - 1])) {
            reply_status(&r->status, ENGINE_CODE_INTERNAL, "a claimed task did not decode");
            r->n_tasks = 0;
            return;
        }
    }
    r->n_tasks = (size_t)n;
    if (one_topic_fetch(p)) {
        engine_topic_counters *c = pgplan_counters(t, p->req.u.fetch.topics[0]);
        if (c != NULL)
            c->fetched += (uint64_t)n;
        return;
    }
    for (size_t i = 0; i < r->n_tasks; i++) {
        engine_topic_counters *c = pgplan_counters(t, r->tasks[i].topic);
        if (c != NULL)
            c->fetched++;
    }
}

void pgclaim_dues(pgops_turn *t)
{
    if (t->s_topics_due < 0)
        return;
    const PGresult *res = t->stmts[t->s_topics_due].result;
    int n = res ? PQntuples(res) : 0;
    for (int i = 0; i < n; i++) {
        pgops_topic_due d = {0};
        const char *s;
        size_t len;
        if (pgwire_get_text(res, i, 0, &s, &len) != BERTH_OK)
            continue;
        for (size_t k = 0; k < t->due_topics.n && d.topic == NULL; k++)
            if (strlen(t->due_topics.v[k]) == len && memcmp(t->due_topics.v[k], s, len) == 0)
                d.topic = t->due_topics.v[k];
        int64_t at;
        if (d.topic == NULL)
            continue;
        if (!pgwire_isnull(res, i, 1) && pgwire_get_int8(res, i, 1, &at) == BERTH_OK) {
            d.known = true;
            d.next_in_ms = at > (int64_t)t->now_ms ? (uint64_t)(at - (int64_t)t->now_ms) : 0;
        }
        (void)pgwire_get_bool(res, i, 2, &d.contended);
        (void)VEC_PUSH(&t->dues, d);
    }
}
