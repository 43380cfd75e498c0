/*
 * pgops.c — see pgops.h. A turn is planned in three passes over its
 * requests: the checks and the first round (submit items, guarded items),
 * the rules on the rows read (between the rounds), the answers (after
 * COMMIT). Items point back to their request and to the status they
 * answer in (a batch's item, a fetch's fused completion).
 */
#include "pg/pgops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "engine/check.h"
#include "engine/mem.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "pg/pgwire.h"
#include "store/err.h"
#include "store/keys.h"
#include "store/records.h"

static bool push_one(void *slot, const void *val, size_t n)
{
    if (slot == NULL)
        return false;
    memcpy(slot, val, n);
    return true;
}
#define VEC_PUSH(vec, val) push_one(VEC_ADD(vec), &(val), sizeof((vec)->v[0]))

/* ---- the turn's items ---- */

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

static int add_stmt(pgops_turn *t, const char *name, size_t bytes)
{
    if (t->t.n == t->cap)
        return -1;
    size_t i = t->t.n++;
    t->bufs[i] = mem_alloc(bytes);
    if (t->bufs[i] == NULL) {
        t->t.n--;
        return -1;
    }
    pgwire_params_init(&t->params[i], t->bufs[i], bytes);
    t->stmts[i] = (pgturn_stmt){.name = name, .params = &t->params[i]};
    return (int)i;
}

/* ---- the checks, and the first round ---- */

static bool has_key(const engine_submit_args *a)
{
    return a->idempotency_key != NULL && a->idempotency_key[0] != '\0';
}

static bool submit_check(const pgops_turn *t, const engine_submit_args *a, engine_status *st)
{
    if (!check_topic(a->topic, "topic", st))
        return false;
    if (t->o->strict_channels) {
        reply_status(st, ENGINE_CODE_NOT_FOUND,
                     "topic %s: no live deployment declares it (strict channels)", a->topic);
        snprintf(st->field, sizeof st->field, "topic");
        return false;
    }
    return rules_submit_check(t->o, t->now_ms, a, st);
}

static bool add_sub(pgops_turn *t, pgreq *p, const engine_submit_args *a, engine_submitted *out)
{
    sub_item s = {.p = p, .a = a, .out = out, .same_as = -1};
    randombytes_buf(s.id, sizeof s.id);
    if (has_key(a))
        for (size_t j = 0; j < t->subs.n && s.same_as < 0; j++) {
            const engine_submit_args *b = t->subs.v[j].a;
            if (t->subs.v[j].same_as < 0 && has_key(b) && strcmp(a->topic, b->topic) == 0 &&
                strcmp(a->idempotency_key, b->idempotency_key) == 0)
                s.same_as = (int)j;
        }
    return VEC_PUSH(&t->subs, s);
}

static void plan_submits(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    const engine_submit_args *items;
    size_t n;
    if (p->req.op == ENGINE_OP_SUBMIT) {
        items = &p->req.u.submit;
        n = 1;
    } else {
        items = p->req.u.submit_batch.items;
        n = p->req.u.submit_batch.n;
        if (!check_items(n, t->o->batch_max, &r->status)) {
            p->settled = true;
            return;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (!submit_check(t, &items[i], &r->status)) {
            if (p->req.op == ENGINE_OP_SUBMIT_BATCH)
                rules_item_name(&r->status, i);
            p->settled = true;
            return;
        }
    r->submitted = reply_mem(r, n * sizeof(*r->submitted));
    if (r->submitted == NULL) {
        reply_no_memory(&r->status);
        p->settled = true;
        return;
    }
    r->n_submitted = n;
    for (size_t i = 0; i < n; i++)
        if (!add_sub(t, p, &items[i], &r->submitted[i])) {
            reply_no_memory(&r->status);
            p->settled = true;
            return;
        }
}

static bool add_guard(pgops_turn *t, pgreq *p, gkind kind, const engine_guard *g, const void *args,
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

static bool plan_completes(pgops_turn *t, pgreq *p, const engine_complete_args *items, size_t n)
{
    engine_reply *r = p->reply;
    if (n == 0)
        return true;
    r->statuses = reply_mem(r, n * sizeof(*r->statuses));
    if (r->statuses == NULL)
        return false;
    r->n_statuses = n;
    for (size_t i = 0; i < n; i++)
        if (!add_guard(t, p, G_COMPLETE, &items[i].guard, &items[i], &r->statuses[i], NULL))
            return false;
    return true;
}

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

static bool no_strict(void *ctx, const char *topic)
{
    (void)ctx;
    (void)topic;
    return false;
}

static bool declared_ok(void *ctx, const char *topic)
{
    (void)ctx;
    (void)topic;
    return true;
}

bool pgops_fetch_check(const engine_options *o, pgreq *p)
{
    if (!rules_fetch_check(o, &p->req.u.fetch, o->strict_channels ? no_strict : declared_ok, NULL,
                           &p->f, &p->reply->status))
        return false;
    p->may_wait = p->f.wait_ms > 0;
    return true;
}

static void plan_one(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    engine_status *st = &r->status;
    bool ok = true;
    guard_item *gi = NULL;
    switch (p->req.op) {
    case ENGINE_OP_SUBMIT:
    case ENGINE_OP_SUBMIT_BATCH:
        plan_submits(t, p);
        return;
    case ENGINE_OP_FETCH: {
        const engine_fetch_args *a = &p->req.u.fetch;
        if (!p->completes_done) {
            if (!pgops_fetch_check(t->o, p)) {
                p->settled = true;
                return;
            }
            ok = plan_completes(t, p, a->completes, a->n_completes);
        }
        break;
    }
    case ENGINE_OP_COMPLETE:
        ok = add_guard(t, p, G_COMPLETE, &p->req.u.complete.guard, &p->req.u.complete, st, NULL);
        break;
    case ENGINE_OP_COMPLETE_BATCH:
        if (!check_items(p->req.u.complete_batch.n, t->o->batch_max, st)) {
            p->settled = true;
            return;
        }
        ok = plan_completes(t, p, p->req.u.complete_batch.items, p->req.u.complete_batch.n);
        break;
    case ENGINE_OP_FAIL: {
        rules_fail_in in;
        if (!rules_fail_check(t->o, &p->req.u.fail, &in, st)) {
            p->settled = true;
            return;
        }
        ok = add_guard(t, p, G_FAIL, &p->req.u.fail.guard, &p->req.u.fail, st, &gi);
        if (gi != NULL)
            gi->fin = in;
        break;
    }
    case ENGINE_OP_REFUSE:
        if (!check_error(&p->req.u.refuse.error, st)) {
            p->settled = true;
            return;
        }
        ok = add_guard(t, p, G_REFUSE, &p->req.u.refuse.guard, &p->req.u.refuse, st, NULL);
        break;
    case ENGINE_OP_EXTEND_LOCK: {
        uint64_t lock_ms;
        if (!rules_extend_check(t->o, &p->req.u.extend, &lock_ms, st)) {
            p->settled = true;
            return;
        }
        ok = add_guard(t, p, G_EXTEND, &p->req.u.extend.guard, &p->req.u.extend, st, &gi);
        if (gi != NULL)
            gi->lock_ms = lock_ms;
        break;
    }
    case ENGINE_OP_RELEASE:
        ok = add_guard(t, p, G_RELEASE, &p->req.u.release, NULL, st, NULL);
        break;
    case ENGINE_OP_GET_TASK: {
        uint8_t id[BERTH_ID_LEN];
        if (!rules_task_id(p->req.u.get_task.id, "id", id, st)) {
            p->settled = true;
            return;
        }
        p->claim = add_stmt(t, "task_get", 64); /* (its statement, as a fetch's claim) */
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
        p->claim = add_stmt(t, "incidents_list", 64);
        ok = p->claim >= 0;
        if (ok) {
            pgwire_int8(&t->params[p->claim], after ? (int64_t)be64(from) : -1);
            pgwire_int8(&t->params[p->claim], after ? (int64_t)be64(from + 8) : -1);
            pgwire_int4(&t->params[p->claim], (int32_t)limit);
        }
        break;
    }
    case ENGINE_OP_STATS:
        if (t->s_stats < 0)
            t->s_stats = add_stmt(t, "stats", 16);
        ok = t->s_stats >= 0;
        break;
    default:
        reply_status(st, ENGINE_CODE_UNIMPLEMENTED,
                     "this request is not served on the PostgreSQL store yet");
        p->settled = true;
        return;
    }
    if (!ok) {
        reply_no_memory(st);
        p->settled = true;
    }
}

static size_t text_len(const char *s)
{
    return s ? strlen(s) : 0;
}

/* A task's size as fetch budgets count it (fetch_max_bytes): its
 * payload, topic, headers and content type, and 16 bytes for its fixed
 * fields; the embedded store counts its encoded row, a few bytes apart. */
static size_t body_bytes(const engine_submit_args *a)
{
    size_t n = 16 + a->payload_len + text_len(a->topic) + text_len(a->content_type);
    for (size_t h = 0; h < a->n_headers; h++)
        n += 2 + strlen(a->headers[h].name) + strlen(a->headers[h].value);
    return n;
}

static bool stmt_submit(pgops_turn *t)
{
    size_t n = t->subs.n, nh = 0, bytes = 4096;
    for (size_t i = 0; i < n; i++) {
        const engine_submit_args *a = t->subs.v[i].a;
        bytes += 128 + a->payload_len + text_len(a->topic) + text_len(a->content_type) +
                 text_len(a->idempotency_key);
        for (size_t h = 0; h < a->n_headers; h++)
            bytes += 16 + strlen(a->headers[h].name) + strlen(a->headers[h].value);
        nh += 2 * a->n_headers;
    }
    int s = add_stmt(t, "submit", bytes);
    if (s < 0)
        return false;
    t->s_submit = s;
    /* Items the turn folded into an earlier one with the same key are not
     * sent: the earlier one's answer is theirs. */
    size_t m = 0;
    uint8_t(*ids)[16] = mem_calloc(n ? n : 1, 16);
    const char **topics = mem_calloc(n ? n : 1, sizeof(char *));
    const void **pays = mem_calloc(n ? n : 1, sizeof(void *));
    size_t *plens = mem_calloc(n ? n : 1, sizeof(size_t));
    const char **hdrs = mem_calloc(nh ? nh : 1, sizeof(char *));
    int32_t *hstart = mem_calloc(n ? n : 1, sizeof(int32_t));
    int32_t *hcount = mem_calloc(n ? n : 1, sizeof(int32_t));
    const char **cts = mem_calloc(n ? n : 1, sizeof(char *));
    const char **keys = mem_calloc(n ? n : 1, sizeof(char *));
    int64_t *delay = mem_calloc(n ? n : 1, sizeof(int64_t));
    bool *delay_null = mem_calloc(n ? n : 1, sizeof(bool));
    int64_t *nb = mem_calloc(n ? n : 1, sizeof(int64_t));
    bool *nb_null = mem_calloc(n ? n : 1, sizeof(bool));
    int64_t *prio = mem_calloc(n ? n : 1, sizeof(int64_t));
    int32_t *blen = mem_calloc(n ? n : 1, sizeof(int32_t));
    bool ok = ids && topics && pays && plens && hdrs && hstart && hcount && cts && keys && delay &&
              delay_null && nb && nb_null && prio && blen;
    size_t hi = 0;
    for (size_t i = 0; ok && i < n; i++) {
        const sub_item *si = &t->subs.v[i];
        if (si->same_as >= 0)
            continue;
        const engine_submit_args *a = si->a;
        memcpy(ids[m], si->id, 16);
        topics[m] = a->topic;
        pays[m] = a->payload != NULL ? (const void *)a->payload : ""; /* NULL: SQL NULL */
        plens[m] = a->payload_len;
        hstart[m] = (int32_t)hi + 1;
        hcount[m] = (int32_t)(2 * a->n_headers);
        for (size_t h = 0; h < a->n_headers; h++) {
            hdrs[hi++] = a->headers[h].name;
            hdrs[hi++] = a->headers[h].value;
        }
        cts[m] = a->content_type && a->content_type[0] ? a->content_type : NULL;
        keys[m] = has_key(a) ? a->idempotency_key : NULL;
        delay[m] = (int64_t)a->delay_ms;
        delay_null[m] = !a->has_delay_ms;
        nb[m] = (int64_t)a->not_before_ms;
        nb_null[m] = !a->has_not_before_ms;
        prio[m] = a->has_priority ? a->priority : t->o->priority_default;
        blen[m] = (int32_t)body_bytes(a);
        m++;
    }
    if (ok) {
        pgwire_params *pp = &t->params[s];
        pgwire_uuid_array(pp, (const uint8_t(*)[16])ids, NULL, m);
        pgwire_text_array(pp, topics, m);
        pgwire_bytea_array(pp, pays, plens, m);
        pgwire_text_array(pp, hdrs, hi);
        pgwire_int4_array(pp, hstart, NULL, m);
        pgwire_int4_array(pp, hcount, NULL, m);
        pgwire_text_array(pp, cts, m);
        pgwire_text_array(pp, keys, m);
        pgwire_int8_array(pp, delay, delay_null, m);
        pgwire_int8_array(pp, nb, nb_null, m);
        pgwire_int8_array(pp, prio, NULL, m);
        pgwire_int4_array(pp, blen, NULL, m);
        pgwire_int8(pp, (int64_t)t->o->dedup_horizon_ms);
        pgwire_int4(pp, (int32_t)t->o->retries);
    }
    free(ids);
    free(topics);
    free(pays);
    free(plens);
    free(hdrs);
    free(hstart);
    free(hcount);
    free(cts);
    free(keys);
    free(delay);
    free(delay_null);
    free(nb);
    free(nb_null);
    free(prio);
    free(blen);
    return ok;
}

static int id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, BERTH_ID_LEN);
}

static bool stmt_guard_read(pgops_turn *t)
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
    int s = add_stmt(t, "guard_read", 64 + 20 * m);
    if (s >= 0)
        pgwire_uuid_array(&t->params[s], (const uint8_t(*)[16])ids, NULL, m);
    free(ids);
    t->s_guard = s;
    return s >= 0;
}

static bool between(pgturn *pt, void *arg);

int pgops_plan(const engine_options *o, const engine_stats *replica, pgreq *list, uint64_t now_ms,
               bool manual, bool fail, bool notify_in_turn, PGconn *conn, pgops_turn **out)
{
    *out = NULL;
    pgops_turn *t = mem_calloc(1, sizeof(*t));
    if (t == NULL)
        return BERTH_ENOMEM;
    t->o = o;
    t->list = list;
    t->now_ms = now_ms;
    t->s_submit = t->s_guard = t->s_topics_due = t->s_stats = -1;
    t->replica = replica;
    t->notify_in_turn = notify_in_turn;
    size_t fetches = 0;
    for (pgreq *p = list; p != NULL; p = p->next) {
        p->claim = -1;
        p->claim_i = 0;
        fetches += p->req.op == ENGINE_OP_FETCH || p->req.op == ENGINE_OP_GET_TASK ||
                   p->req.op == ENGINE_OP_LIST_INCIDENTS;
    }
    t->cap = STMTS_MAX_FIXED + fetches;
    t->stmts = mem_calloc(t->cap, sizeof(*t->stmts));
    t->params = mem_calloc(t->cap, sizeof(*t->params));
    t->bufs = mem_calloc(t->cap, sizeof(*t->bufs));
    if (t->stmts == NULL || t->params == NULL || t->bufs == NULL) {
        pgops_free(t);
        return BERTH_ENOMEM;
    }
    t->t = (pgturn){.conn = conn,
                    .clock_set = manual,
                    .clock_ms = (int64_t)now_ms,
                    .stmts = t->stmts,
                    .between = between,
                    .between_arg = t};
    for (pgreq *p = list; p != NULL; p = p->next)
        if (!p->settled)
            plan_one(t, p);
    if ((t->subs.n > 0 && !stmt_submit(t)) || (t->guards.n > 0 && !stmt_guard_read(t))) {
        pgops_free(t);
        return BERTH_ENOMEM;
    }
    if (fail && t->t.n > 0) { /* ENGINE_FP_STORE_WRITE: the turn fails, keeping nothing */
        int s = add_stmt(t, "turn_fail", 16);
        if (s >= 0)
            pgwire_int4(&t->params[s], 0);
    }
    if (t->guards.n > 0) {
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
    return t->t.n == 0;
}

/* ---- between the rounds: the rules on the rows ---- */

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
        if (w.topic == NULL || !VEC_PUSH(&t->rows, w)) {
            free(w.topic);
            free(w.worker);
            return false;
        }
    }
    return true;
}

static trow *row_of(pgops_turn *t, const uint8_t id[BERTH_ID_LEN])
{
    for (size_t i = 0; i < t->rows.n; i++)
        if (memcmp(t->rows.v[i].id, id, BERTH_ID_LEN) == 0)
            return &t->rows.v[i];
    return NULL;
}

static void notify_add(pgops_turn *t, char kind, const char *topic, uint64_t in_ms)
{
    char rec[400];
    int k = kind == 'p' ? snprintf(rec, sizeof rec, "%sp:%s", t->notify_len ? ";" : "", topic)
                        : snprintf(rec, sizeof rec, "%st:%s+%llu", t->notify_len ? ";" : "", topic,
                                   (unsigned long long)in_ms);
    if (k <= 0 || (size_t)k >= sizeof rec)
        return;
    if (t->notify_len + (size_t)k + 1 > 7000) {
        /* Past what one notification carries: "look at everything". */
        if (t->notify == NULL || strcmp(t->notify, "p:*") != 0) {
            free(t->notify);
            t->notify = mem_strdup("p:*");
            t->notify_len = t->notify ? 3 : 0;
            t->notify_cap = t->notify_len + 1;
        }
        return;
    }
    if (t->notify != NULL && strcmp(t->notify, "p:*") == 0)
        return;
    if (t->notify_len + (size_t)k + 1 > t->notify_cap) {
        size_t cap = (t->notify_len + (size_t)k + 1) * 2;
        char *nb = mem_realloc(t->notify, cap);
        if (nb == NULL)
            return;
        t->notify = nb;
        t->notify_cap = cap;
    }
    memcpy(t->notify + t->notify_len, rec, (size_t)k + 1);
    t->notify_len += (size_t)k;
}

/* One guarded item against its row as the turn has left it so far. */
static void apply(pgops_turn *t, guard_item *g)
{
    uint64_t now = t->now_ms;
    trow *w = row_of(t, g->id);
    rules_lock lk = {.found = w != NULL && !w->deleted,
                     .terminal = w != NULL && w->terminal,
                     .has_lock = w != NULL && w->has_lock,
                     .lock_token = w ? w->token : NULL,
                     .worker_id = w ? w->worker : NULL,
                     .lock_expires_at_ms = w ? (uint64_t)w->lock_expires_at : 0};
    if (!rules_guard(&lk, g->g, g->token, now, g->st))
        return;
    switch (g->kind) {
    case G_COMPLETE:
    case G_REFUSE: {
        const engine_complete_args *c = g->kind == G_COMPLETE ? g->args : NULL;
        if (c != NULL && c->result != NULL) {
            rules_reply in = {.payload_len = c->result->payload_len,
                              .content_type = c->result->content_type,
                              .headers = c->result->headers,
                              .n_headers = c->result->n_headers};
            if (!rules_intake_validate(t->o, NULL, w->topic, &in, g->st)) {
                /* Refused by intake: locked until the grace window ends (R10). */
                w->lock_expires_at = (int64_t)(now + t->o->lock_default_ms);
                w->dirty = true;
                return;
            }
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
                notify_add(t, 'p', w->topic, 0);
            else
                notify_add(t, 't', w->topic, f.pause_ms);
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
        notify_add(t, 'p', w->topic, 0);
        return;
    }
}

static bool stmt_outcomes(pgops_turn *t)
{
    size_t nd = 0, nu = 0, ni = 0, bytes = 256;
    for (size_t i = 0; i < t->rows.n; i++) {
        const trow *w = &t->rows.v[i];
        if (w->deleted)
            nd++;
        else if (w->dirty) {
            nu++;
            if (w->set_err)
                bytes +=
                    text_len(w->err->code) + text_len(w->err->message) + text_len(w->err->details);
            if (w->incident) {
                ni++;
                bytes += strlen(w->topic) + text_len(w->err->code) + text_len(w->err->message);
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
        int s = add_stmt(t, "tasks_delete", 64 + 20 * nd);
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
        int s = add_stmt(t, "tasks_update", bytes + 80 * nu);
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
        int s = add_stmt(t, "incidents_insert", bytes + 80 * ni);
        ok = s >= 0;
        if (ok) {
            pgwire_params *pp = &t->params[s];
            pgwire_int4_array(pp, kinds, NULL, ni);
            pgwire_uuid_array(pp, (const uint8_t(*)[16])ids, NULL, ni);
            pgwire_text_array(pp, tp, ni);
            pgwire_text_array(pp, ec, ni);
            pgwire_text_array(pp, em, ni);
        }
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

static bool one_topic_fetch(const pgreq *p)
{
    return !p->settled && p->req.op == ENGINE_OP_FETCH && p->req.u.fetch.n_topics == 1;
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
    int s = ns && locks && workers ? add_stmt(t, "claim_many", bytes) : -1;
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

static bool stmt_claims(pgops_turn *t)
{
    for (pgreq *p = t->list; p != NULL; p = p->next) {
        if (p->settled || p->req.op != ENGINE_OP_FETCH || p->claim >= 0)
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
            int s = add_stmt(t, a->n_topics == 1 ? "claim1" : "claimk", bytes);
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
        if (p->settled || p->req.op != ENGINE_OP_FETCH || !p->may_wait)
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
        int s = add_stmt(t, "topics_due", bytes);
        if (s < 0)
            return false;
        pgwire_text_array(&t->params[s], t->due_topics.v, t->due_topics.n);
        t->s_topics_due = s;
    }
    return true;
}

static bool between(pgturn *pt, void *arg)
{
    pgops_turn *t = arg;
    if (t->guards.n > 0) {
        t->now_ms = (uint64_t)pt->now_ms; /* the database's: every rule of the turn on it */
        if (!read_rows(t, pgturn_first_result(pt, (size_t)t->s_guard))) {
            snprintf(pt->message, sizeof pt->message, "guard_read's rows did not decode");
            return false;
        }
        for (size_t i = 0; i < t->guards.n; i++)
            apply(t, &t->guards.v[i]);
        if (!stmt_outcomes(t))
            return false;
    }
    for (size_t i = 0; i < t->subs.n; i++) {
        const engine_submit_args *a = t->subs.v[i].a;
        uint64_t at = a->has_delay_ms        ? t->now_ms + a->delay_ms
                      : a->has_not_before_ms ? a->not_before_ms
                                             : 0;
        if (at > t->now_ms)
            notify_add(t, 't', a->topic, at - t->now_ms);
        else
            notify_add(t, 'p', a->topic, 0);
    }
    if (!stmt_claims(t))
        return false;
    pt->notify = t->notify_in_turn ? t->notify : NULL;
    return true;
}

/* ---- after COMMIT: the answers ---- */

static char *copy_text(engine_reply *r, const PGresult *res, int row, int col);

static void answer_stats(pgops_turn *t, engine_reply *r)
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
        *ts = (engine_topic_stats){.topic = copy_text(r, res, i, 0),
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
}

static void answer_submits(pgops_turn *t)
{
    const PGresult *res = t->stmts[t->s_submit].result;
    int n = res ? PQntuples(res) : 0;
    /* Rows by item number, counting only the items sent. */
    size_t sent = 0;
    for (size_t i = 0; i < t->subs.n; i++) {
        sub_item *s = &t->subs.v[i];
        if (s->same_as >= 0)
            continue;
        sent++;
        uint8_t winner[BERTH_ID_LEN];
        memcpy(winner, s->id, BERTH_ID_LEN);
        for (int r = 0; r < n; r++) {
            int32_t no;
            if (pgwire_get_int4(res, r, 0, &no) == BERTH_OK && (size_t)no == sent) {
                if (!pgwire_isnull(res, r, 1))
                    (void)pgwire_get_uuid(res, r, 1, winner);
                break;
            }
        }
        s->out->duplicate = memcmp(winner, s->id, BERTH_ID_LEN) != 0;
        store_id_format(winner, s->out->id);
    }
    for (size_t i = 0; i < t->subs.n; i++) {
        sub_item *s = &t->subs.v[i];
        if (s->same_as >= 0) {
            memcpy(s->out->id, t->subs.v[s->same_as].out->id, sizeof s->out->id);
            s->out->duplicate = true;
        }
    }
}

static char *copy_text(engine_reply *r, const PGresult *res, int row, int col)
{
    const char *s;
    size_t len;
    if (pgwire_isnull(res, row, col) || pgwire_get_text(res, row, col, &s, &len) != BERTH_OK)
        return NULL;
    char *d = reply_mem(r, len + 1);
    if (d != NULL) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
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
    size_t nh = 0;
    pgwire_array arr;
    if (pgwire_array_open(res, i, off + 13, PGWIRE_TEXT, &arr) == BERTH_OK) {
        const uint8_t *v;
        size_t len;
        char *pair[2];
        int k = 0;
        while (nh < ENGINE_HEADERS_MAX && pgwire_array_next(&arr, &v, &len) == 1) {
            char *s = reply_mem(r, len + 1);
            if (s == NULL)
                return false;
            memcpy(s, v ? v : (const uint8_t *)"", v ? len : 0);
            s[v ? len : 0] = '\0';
            pair[k++] = s;
            if (k == 2) {
                hs[nh++] = (store_header){pair[0], pair[1]};
                k = 0;
            }
        }
    }
    store_body b = {.topic = copy_text(r, res, i, off + 2),
                    .payload = plen ? mem_dup(pay, plen) : NULL,
                    .payload_len = plen,
                    .headers = hs,
                    .n_headers = nh,
                    .content_type = copy_text(r, res, i, off + 12)};
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

static void answer_task_info(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    const PGresult *res = t->stmts[p->claim].result;
    if (res == NULL || PQntuples(res) == 0) {
        rules_not_found(&r->status, p->req.u.get_task.id);
        return;
    }
    engine_task_info *i = &r->task;
    int32_t state = 0, claims = 0, rl = 0, fl = 0, bytes = 0;
    int64_t lx = 0, av = 0, created = 0, prio = 0;
    (void)pgwire_get_int4(res, 0, 1, &state);
    if (!pgwire_isnull(res, 0, 3))
        (void)pgwire_get_int8(res, 0, 3, &lx);
    (void)pgwire_get_int8(res, 0, 4, &av);
    (void)pgwire_get_int4(res, 0, 5, &claims);
    (void)pgwire_get_int4(res, 0, 6, &rl);
    (void)pgwire_get_int4(res, 0, 7, &fl);
    (void)pgwire_get_int8(res, 0, 11, &created);
    (void)pgwire_get_int8(res, 0, 12, &prio);
    (void)pgwire_get_int4(res, 0, 13, &bytes);
    snprintf(i->id, sizeof i->id, "%s", p->req.u.get_task.id);
    i->topic = copy_text(r, res, 0, 0);
    i->state = (engine_task_state)state;
    i->worker_id = copy_text(r, res, 0, 2);
    i->lock_expires_at_ms = (uint64_t)lx;
    i->available_at_ms = (uint64_t)av;
    i->attempt = (uint32_t)claims;
    i->retries_left = (uint32_t)rl;
    i->failures = (uint32_t)fl;
    i->last_error =
        (engine_error){copy_text(r, res, 0, 8), copy_text(r, res, 0, 9), copy_text(r, res, 0, 10)};
    i->created_at_ms = (uint64_t)created;
    i->priority = (uint32_t)prio;
    i->payload_bytes = (size_t)bytes;
}

static void answer_incidents(pgops_turn *t, pgreq *p)
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
        o->topic = copy_text(r, res, i, 4);
        o->error.code = copy_text(r, res, i, 5);
        o->error.message = copy_text(r, res, i, 6);
        o->at_ms = (uint64_t)at;
    }
    r->n_incidents = (size_t)n;
}

static void answer_claim(pgops_turn *t, pgreq *p)
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
}

static void answer_dues(pgops_turn *t)
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

static void event(pgops_turn *t, engine_event_kind kind, const char *topic,
                  const uint8_t id[BERTH_ID_LEN], const engine_error *err, uint32_t retries_left)
{
    if (t->o->on_event == NULL)
        return;
    engine_event ev = {
        .kind = kind, .topic = topic, .retries_left = retries_left, .at_ms = t->now_ms};
    store_id_format(id, ev.id);
    if (err != NULL)
        ev.error = *err;
    t->o->on_event(t->o->event_ctx, &ev);
}

static void events(pgops_turn *t)
{
    for (size_t i = 0; i < t->subs.n; i++) {
        const sub_item *s = &t->subs.v[i];
        if (!s->out->duplicate) {
            uint8_t id[BERTH_ID_LEN];
            memcpy(id, s->id, BERTH_ID_LEN);
            event(t, ENGINE_EVENT_TASK_PARKED, s->a->topic, id, NULL, 0);
        }
    }
    for (size_t i = 0; i < t->guards.n; i++) {
        const guard_item *g = &t->guards.v[i];
        if (g->st->code != ENGINE_CODE_OK)
            continue;
        const trow *w = row_of(t, g->id);
        if (g->kind == G_COMPLETE)
            event(t, ENGINE_EVENT_TASK_COMPLETED, w->topic, g->id, NULL, 0);
        else if (g->kind == G_REFUSE)
            event(t, ENGINE_EVENT_TASK_REFUSED, w->topic, g->id,
                  &((const engine_refuse_args *)g->args)->error, 0);
        else if (g->kind == G_FAIL)
            event(t, g->p->reply->terminal ? ENGINE_EVENT_TASK_TERMINAL : ENGINE_EVENT_TASK_FAILED,
                  w->topic, g->id, &((const engine_fail_args *)g->args)->error,
                  g->p->reply->retries_left);
    }
}

void pgops_answer(pgops_turn *t, void (*ring)(void *ctx, const char *topic),
                  void (*later)(void *ctx, const char *topic, uint64_t in_ms), void *ctx)
{
    if (t->s_submit >= 0)
        answer_submits(t);
    for (pgreq *p = t->list; p != NULL; p = p->next)
        if (!p->settled && p->req.op == ENGINE_OP_FETCH && p->claim >= 0 &&
            p->reply->status.code == ENGINE_CODE_OK)
            answer_claim(t, p);
    answer_dues(t);
    for (pgreq *p = t->list; p != NULL; p = p->next) {
        if (!p->settled && p->req.op == ENGINE_OP_STATS)
            answer_stats(t, p->reply);
        if (!p->settled && p->req.op == ENGINE_OP_GET_TASK)
            answer_task_info(t, p);
        if (!p->settled && p->req.op == ENGINE_OP_LIST_INCIDENTS)
            answer_incidents(t, p);
    }
    events(t);
    /* Doorbells here: the ones the notify carries, read back. */
    for (char *rec = t->notify; rec != NULL && *rec != '\0';) {
        char *end = strchr(rec, ';');
        size_t len = end ? (size_t)(end - rec) : strlen(rec);
        char buf[400];
        if (len < sizeof buf && len > 2) {
            memcpy(buf, rec + 2, len - 2);
            buf[len - 2] = '\0';
            if (rec[0] == 'p') {
                ring(ctx, buf);
            } else {
                char *plus = strrchr(buf, '+');
                if (plus != NULL) {
                    *plus = '\0';
                    later(ctx, buf, strtoull(plus + 1, NULL, 10));
                }
            }
        }
        rec = end ? end + 1 : NULL;
    }
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

void pgops_refuse(pgops_turn *t, const engine_status *st)
{
    for (pgreq *p = t->list; p != NULL; p = p->next) {
        if (p->settled || (p->req.op == ENGINE_OP_FETCH && p->completes_done))
            continue;
        p->reply->status = *st;
        p->reply->n_submitted = 0;
        p->reply->n_statuses = 0;
        p->reply->n_tasks = 0;
    }
}

void pgops_free(pgops_turn *t)
{
    if (t == NULL)
        return;
    pgturn_clear_results(&t->t);
    for (size_t i = 0; i < t->t.n; i++)
        free(t->bufs[i]);
    for (size_t i = 0; i < t->rows.n; i++) {
        free(t->rows.v[i].topic);
        free(t->rows.v[i].worker);
    }
    VEC_FREE(&t->rows);
    VEC_FREE(&t->subs);
    VEC_FREE(&t->guards);
    VEC_FREE(&t->due_topics);
    VEC_FREE(&t->dues);
    free(t->bufs);
    free(t->params);
    free(t->stmts);
    free(t->notify);
    free(t);
}
