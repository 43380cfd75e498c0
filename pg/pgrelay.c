/* pgrelay.c — see pgrelay.h. */
#include "pg/pgrelay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/check.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "pg/pgcall.h"
#include "pg/pgwire.h"
#include "store/err.h"
#include "store/keys.h"
#include "store/records.h"

/* The deadlines one turn takes at most (the embedded relay's per turn). */
static uint32_t per_turn(const pgops_turn *t)
{
    return t->o->relay_max_per_turn ? t->o->relay_max_per_turn : 256;
}

void pgrelay_plan(pgops_turn *t, pgreq *p)
{
    engine_status *st = &p->reply->status;
    bool ack = p->req.op == ENGINE_OP_PUSH_ACK;
    const char *id = ack ? p->req.u.push_ack.id : p->req.u.retry_delivery.id;
    p->claim = -1;
    p->matched = false;
    if (!rules_delivery_id(id, p->delivery_id, st)) {
        p->settled = true;
        return;
    }
    t->relay = true; /* a slot frees, or a delivery is due again: claim in the turn */
    if (ack) {
        t->acks++;
        return;
    }
    p->claim = pgplan_add_stmt(t, "outbox_rearm", 64);
    if (p->claim < 0) {
        reply_no_memory(st);
        p->settled = true;
        return;
    }
    pgwire_uuid(&t->params[p->claim], p->delivery_id);
    t->share = true; /* its deployment may drain again: the gate waits for the turn */
    t->admin = true;
}

static bool is_ack(const pgreq *p)
{
    return !p->settled && p->req.op == ENGINE_OP_PUSH_ACK;
}

size_t pgrelay_ack_ids(const pgops_turn *t, uint8_t (*ids)[BERTH_ID_LEN])
{
    size_t n = 0;
    for (const pgreq *p = t->list; p != NULL && n < t->acks; p = p->next)
        if (is_ack(p))
            memcpy(ids[n++], p->delivery_id, BERTH_ID_LEN);
    return n;
}

bool pgrelay_stmt_first(pgops_turn *t)
{
    if (t->acks > 0) {
        uint8_t(*ids)[16] = mem_calloc(t->acks, 16);
        int64_t *flights = mem_calloc(t->acks, 8);
        bool ok = ids != NULL && flights != NULL;
        size_t n = 0;
        for (const pgreq *p = t->list; ok && p != NULL && n < t->acks; p = p->next)
            if (is_ack(p)) {
                memcpy(ids[n], p->delivery_id, 16);
                flights[n++] = (int64_t)p->req.u.push_ack.flight;
            }
        int s = ok ? pgplan_add_stmt(t, "outbox_ack", 64 + 32 * n) : -1;
        if (s >= 0) {
            pgwire_uuid_array(&t->params[s], (const uint8_t(*)[16])ids, NULL, n);
            pgwire_int8_array(&t->params[s], flights, NULL, n);
        }
        free(ids);
        free(flights);
        if ((t->s_ack = s) < 0)
            return false;
    }
    if (t->relay_expire) {
        t->s_expired = pgplan_add_stmt(t, "outbox_expired", 16);
        if (t->s_expired < 0)
            return false;
        pgwire_int4(&t->params[t->s_expired], (int32_t)per_turn(t));
    }
    return true;
}

bool pgrelay_claims(const pgops_turn *t)
{
    return t->relay;
}

bool pgrelay_in(const pgops_turn *t)
{
    return t->s_ack >= 0 || t->s_expired >= 0;
}

bool pgrelay_ends(const pgops_turn *t)
{
    return t->acks > 0 || t->relay_expire;
}

/* ---- between the rounds ---- */

static orow *orow_of(pgops_turn *t, const uint8_t id[BERTH_ID_LEN])
{
    for (size_t i = 0; i < t->orows.n; i++)
        if (memcmp(t->orows.v[i].id, id, BERTH_ID_LEN) == 0)
            return &t->orows.v[i];
    return NULL;
}

/* Columns id, flight, topic, deployment, attempts, instance_id,
 * call_attempt (outbox_ack's and outbox_expired's). */
static bool orow_read(const PGresult *res, int i, orow *w)
{
    const char *s;
    size_t len;
    *w = (orow){0};
    if (pgwire_get_uuid(res, i, 0, w->id) != BERTH_OK ||
        pgwire_get_int8(res, i, 1, &w->flight) != BERTH_OK ||
        pgwire_get_text(res, i, 2, &s, &len) != BERTH_OK ||
        pgwire_get_int4(res, i, 3, &w->deployment) != BERTH_OK ||
        pgwire_get_int4(res, i, 4, &w->attempts) != BERTH_OK)
        return false;
    w->has_instance = !pgwire_isnull(res, i, 5);
    if (w->has_instance && (pgwire_get_uuid(res, i, 5, w->instance_id) != BERTH_OK ||
                            pgwire_get_int4(res, i, 6, &w->call_attempt) != BERTH_OK))
        return false;
    w->topic = mem_strdup(s);
    return w->topic != NULL;
}

static bool read_rows(pgops_turn *t, const PGresult *res, bool acks)
{
    int n = res ? PQntuples(res) : 0;
    for (int i = 0; i < n; i++) {
        orow w;
        if (!orow_read(res, i, &w)) {
            free(w.topic);
            return false;
        }
        if (!acks && orow_of(t, w.id) != NULL) { /* answered in this turn: the answer decides */
            free(w.topic);
            continue;
        }
        for (pgreq *p = t->list; acks && p != NULL; p = p->next)
            if (is_ack(p) && !p->matched && memcmp(p->delivery_id, w.id, BERTH_ID_LEN) == 0 &&
                (int64_t)p->req.u.push_ack.flight == w.flight) {
                p->matched = true; /* (an answer repeated in the turn is ignored) */
                w.ack = p;
                break;
            }
        if (!VEC_PUSH(&t->orows, w)) {
            free(w.topic);
            return false;
        }
    }
    return true;
}

/* A failed attempt: backed off on the outbox curve, or poisoned at the
 * ceiling. */
static void failed(pgops_turn *t, orow *w, const char *why)
{
    w->attempts++;
    snprintf(w->msg, sizeof w->msg, "%s", why);
    uint32_t max = t->o->delivery_attempts;
    if (max > 0 && (uint32_t)w->attempts >= max) {
        w->what = PGRELAY_POISONED;
        if (w->has_instance) /* its call's attempt fails in the next housekeeping */
            pgplan_notify_add(t, 'i', "", 0);
        return;
    }
    w->what = PGRELAY_BACKED_OFF;
    w->due_at = (int64_t)(t->now_ms + check_backoff(t->o->delivery_backoff_initial_ms,
                                                    t->o->delivery_backoff_max_ms,
                                                    (uint32_t)w->attempts, t->o->backoff_jitter));
}

/* The task row a call's reply names, as pgcall_correlate reads it (its
 * result may be w's payload: it stays with w). */
static const trow *as_trow(orow *w)
{
    trow *r = &w->call_task;
    *r = (trow){.found = true, .has_instance = true, .call_attempt = w->call_attempt};
    memcpy(r->id, w->id, BERTH_ID_LEN);
    memcpy(r->instance_id, w->instance_id, BERTH_ID_LEN);
    return r;
}

static void refused(orow *w, const engine_status *st)
{
    w->incident = true;
    snprintf(w->inc_code, sizeof w->inc_code, "%s",
             st->engine_code ? st->engine_code : ENGINE_EC_VALIDATION_REJECTED);
    snprintf(w->msg, sizeof w->msg, "%s", st->message);
}

/* DELIVERED: a call's result through intake, then its call. */
static void delivered(pgops_turn *t, orow *w, const engine_result *result)
{
    w->what = PGRELAY_ENDED;
    if (!w->has_instance)
        return;
    engine_status st = {0};
    bool ok = true;
    if (result != NULL) {
        rules_reply in = {.payload_len = result->payload_len,
                          .content_type = result->content_type,
                          .headers = result->headers,
                          .n_headers = result->n_headers};
        rules_channel ch;
        int known = pgdeploy_channel(t->deps, (uint32_t)w->deployment, w->topic, &ch);
        if (known < 0) { /* a deployment newer than the replica's copy */
            t->deps_unknown = true;
            return;
        }
        ok = rules_intake_validate(t->o, known ? &ch : NULL, w->topic, &in, &st);
    }
    if (ok)
        ok = pgcall_correlate(t, as_trow(w), result, NULL, &st);
    if (!ok) /* refused: kept as an incident, never dropped silently */
        refused(w, &st);
}

static void decide(pgops_turn *t, orow *w)
{
    if (w->ack == NULL) { /* its deadline passed */
        failed(t, w, RULES_PUSH_NO_ANSWER);
        return;
    }
    const struct engine_push_ack *a = &w->ack->req.u.push_ack;
    engine_error err = a->error;
    engine_status bad;
    char why[300];
    rules_push_answer(a->outcome, &err, &bad, why, sizeof why);
    switch (a->outcome) {
    case ENGINE_PUSH_DELIVERED:
        delivered(t, w, a->result);
        return;
    case ENGINE_PUSH_REJECT:
        w->what = PGRELAY_ENDED;
        /* (err is the request's or bad's: kept in the row's message) */
        snprintf(w->msg, sizeof w->msg, "%s", err.message ? err.message : "");
        w->code = err.code == a->error.code ? a->error.code : "RECEIVER_ERROR_INVALID";
        if (w->has_instance) {
            engine_error e = {.code = w->code, .message = w->msg, .details = a->error.details};
            pgcall_reject(t, as_trow(w), &e);
        }
        return;
    default:
        failed(t, w, why);
        return;
    }
}

bool pgrelay_between(pgops_turn *t, pgturn *pt)
{
    if (t->s_ack < 0 && t->s_expired < 0)
        return true;
    if (!pgcall_read_locked(t, pt) ||
        (t->s_ack >= 0 && !read_rows(t, pgturn_first_result(pt, (size_t)t->s_ack), true)) ||
        (t->s_expired >= 0 && !read_rows(t, pgturn_first_result(pt, (size_t)t->s_expired), false)))
        return false;
    /* (the rows no longer move: the calls' writes point into them) */
    for (size_t i = 0; i < t->orows.n; i++)
        decide(t, &t->orows.v[i]);
    return true;
}

/* ---- round two ---- */

static bool stmt_incidents(pgops_turn *t)
{
    size_t n = 0, bytes = 256;
    for (size_t i = 0; i < t->orows.n; i++) {
        const orow *w = &t->orows.v[i];
        if (w->what == PGRELAY_POISONED || w->incident) {
            n++;
            bytes += 16 + strlen(w->topic) + strlen(w->msg);
        }
    }
    if (n == 0)
        return true;
    int32_t *kinds = mem_calloc(n, 4);
    uint8_t(*ids)[16] = mem_calloc(n, 16);
    const char **tp = mem_calloc(n, sizeof(char *)), **ec = mem_calloc(n, sizeof(char *)),
               **em = mem_calloc(n, sizeof(char *));
    bool ok = kinds && ids && tp && ec && em;
    size_t k = 0;
    for (size_t i = 0; ok && i < t->orows.n; i++) {
        const orow *w = &t->orows.v[i];
        if (w->what != PGRELAY_POISONED && !w->incident)
            continue;
        kinds[k] = w->incident ? STORE_INCIDENT_RESULT_REFUSED : STORE_INCIDENT_DELIVERY_POISONED;
        memcpy(ids[k], w->id, 16);
        tp[k] = w->topic;
        ec[k] = w->incident ? w->inc_code : ENGINE_EC_DELIVERY_POISONED;
        em[k++] = w->msg;
    }
    ok = ok && pgplan_stmt_incidents(t, kinds, (const uint8_t(*)[16])ids, tp, ec, em, k, bytes);
    free(kinds);
    free(ids);
    free(tp);
    free(ec);
    free(em);
    return ok;
}

bool pgrelay_stmt_writes(pgops_turn *t)
{
    size_t n = t->orows.n, bytes = 256;
    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++)
        bytes += 96 + strlen(t->orows.v[i].msg) + pgplan_text_len(t->orows.v[i].code);
    uint8_t(*ids)[16] = mem_calloc(n, 16);
    int32_t *what = mem_calloc(n, 4), *att = mem_calloc(n, 4);
    int64_t *due = mem_calloc(n, 8);
    const char **ec = mem_calloc(n, sizeof(char *)), **em = mem_calloc(n, sizeof(char *));
    bool ok = ids && what && att && due && ec && em;
    for (size_t i = 0; ok && i < n; i++) {
        const orow *w = &t->orows.v[i];
        memcpy(ids[i], w->id, 16);
        what[i] = w->what;
        att[i] = w->attempts;
        due[i] = w->due_at;
        ec[i] = w->what == PGRELAY_ENDED ? NULL : "PUSH_FAILED";
        em[i] = w->what == PGRELAY_ENDED ? NULL : w->msg;
    }
    int s = ok ? pgplan_add_stmt(t, "outbox_write", bytes) : -1;
    if (s >= 0) {
        pgwire_params *pp = &t->params[s];
        pgwire_uuid_array(pp, (const uint8_t(*)[16])ids, NULL, n);
        pgwire_int4_array(pp, what, NULL, n);
        pgwire_int8_array(pp, due, NULL, n);
        pgwire_int4_array(pp, att, NULL, n);
        pgwire_text_array(pp, ec, n);
        pgwire_text_array(pp, em, n);
    }
    free(ids);
    free(what);
    free(att);
    free(due);
    free(ec);
    free(em);
    return s >= 0 && stmt_incidents(t);
}

bool pgrelay_stmt_claim(pgops_turn *t)
{
    if (!t->relay)
        return true;
    size_t n = 0, bytes = 256;
    for (size_t i = 0; i < t->n_chans; i++)
        if (t->chans[i].room > 0) {
            n++;
            bytes += 16 + strlen(t->chans[i].topic);
        }
    if (n > 0) {
        const char **tp = mem_calloc(n, sizeof(char *));
        int32_t *dep = mem_calloc(n, 4), *room = mem_calloc(n, 4);
        bool ok = tp && dep && room;
        size_t k = 0;
        for (size_t i = 0; ok && i < t->n_chans; i++)
            if (t->chans[i].room > 0) {
                tp[k] = t->chans[i].topic;
                dep[k] = (int32_t)t->chans[i].deployment;
                room[k++] = (int32_t)t->chans[i].room;
            }
        int s = ok ? pgplan_add_stmt(t, "outbox_claim", bytes) : -1;
        if (s >= 0) {
            pgwire_params *pp = &t->params[s];
            pgwire_text_array(pp, tp, k);
            pgwire_int4_array(pp, dep, NULL, k);
            pgwire_int4_array(pp, room, NULL, k);
            pgwire_int8(pp, (int64_t)(t->o->push_timeout_ms + RULES_PUSH_GRACE_MS));
        }
        free(tp);
        free(dep);
        free(room);
        if ((t->s_oclaim = s) < 0)
            return false;
    }
    t->s_onext = pgplan_add_stmt(t, "outbox_next", 8);
    return t->s_onext >= 0;
}

/* ---- after COMMIT ---- */

void pgrelay_answer(pgops_turn *t, pgreq *p)
{
    if (p->settled || p->req.op != ENGINE_OP_RETRY_DELIVERY || p->claim < 0)
        return;
    engine_reply *r = p->reply;
    const char *id = p->req.u.retry_delivery.id;
    const PGresult *res = t->stmts[p->claim].result;
    bool poisoned = false;
    if (res == NULL || PQntuples(res) != 1) {
        rules_delivery_not_found(&r->status, id);
        return;
    }
    if (pgwire_get_bool(res, 0, 0, &poisoned) != BERTH_OK || !poisoned) {
        rules_delivery_not_poisoned(&r->status, id);
        return;
    }
    if (!pgwire_isnull(res, 0, 2))
        t->deps_changed = true; /* its deployment drains again */
    pgplan_notify_add(t, 'o', "", 0);
    pgplan_event(t, ENGINE_EVENT_DELIVERY_RETRIED, PQgetvalue(res, 0, 1), p->delivery_id, NULL, 0);
}

void pgrelay_events(pgops_turn *t)
{
    for (size_t i = 0; i < t->orows.n; i++) {
        const orow *w = &t->orows.v[i];
        engine_topic_counters *c = pgplan_counters(t, w->topic);
        bool answered_ok = w->ack != NULL && w->what == PGRELAY_ENDED;
        if (c != NULL) {
            c->delivered += answered_ok && w->ack->req.u.push_ack.outcome == ENGINE_PUSH_DELIVERED;
            c->rejected += answered_ok && w->ack->req.u.push_ack.outcome == ENGINE_PUSH_REJECT;
            c->retried += w->what != PGRELAY_ENDED;
            c->poisoned += w->what == PGRELAY_POISONED;
        }
        if (w->what == PGRELAY_POISONED) {
            engine_error err = {.code = ENGINE_EC_DELIVERY_POISONED, .message = w->msg};
            pgplan_event(t, ENGINE_EVENT_DELIVERY_POISONED, w->topic, w->id, &err, 0);
        } else if (answered_ok && !w->has_instance &&
                   w->ack->req.u.push_ack.outcome == ENGINE_PUSH_REJECT) {
            engine_error err = {.code = w->code, .message = w->msg};
            pgplan_event(t, ENGINE_EVENT_TASK_REFUSED, w->topic, w->id, &err, 0);
        }
    }
}

uint64_t pgrelay_next_in(const pgops_turn *t)
{
    const PGresult *res = t->s_onext >= 0 ? t->stmts[t->s_onext].result : NULL;
    int64_t v;
    if (res == NULL || PQntuples(res) != 1 || pgwire_isnull(res, 0, 0) ||
        pgwire_get_int8(res, 0, 0, &v) != BERTH_OK)
        return UINT64_MAX;
    return v > 0 ? (uint64_t)v : 0;
}

/* A send a committed turn claimed: its row in outbox_claim's result. */
typedef struct send_ref {
    int row;
    int64_t seq;
} send_ref;

static int by_seq(const void *a, const void *b)
{
    int64_t x = ((const send_ref *)a)->seq, y = ((const send_ref *)b)->seq;
    return (x > y) - (x < y);
}

/* Columns of outbox_claim's result. */
enum {
    C_ID,
    C_FLIGHT,
    C_TOPIC,
    C_DEP,
    C_ATTEMPTS,
    C_IID,
    C_CATT,
    C_SEQ,
    C_CREATED,
    C_CT,
    C_HDRS,
    C_PAYLOAD
};

static void send_one(const PGresult *res, int i, const pgdeploys *deps,
                     void (*fn)(void *ctx, const engine_push_delivery *d, uint32_t deployment),
                     void *ctx)
{
    uint8_t id[BERTH_ID_LEN];
    int64_t flight, created = 0;
    int32_t dep, attempts, catt = 0;
    const char *topic, *ct = NULL;
    size_t len;
    const uint8_t *pay;
    size_t plen;
    if (pgwire_get_uuid(res, i, C_ID, id) != BERTH_OK ||
        pgwire_get_int8(res, i, C_FLIGHT, &flight) != BERTH_OK ||
        pgwire_get_text(res, i, C_TOPIC, &topic, &len) != BERTH_OK ||
        pgwire_get_int4(res, i, C_DEP, &dep) != BERTH_OK ||
        pgwire_get_int4(res, i, C_ATTEMPTS, &attempts) != BERTH_OK ||
        pgwire_get_bytea(res, i, C_PAYLOAD, &pay, &plen) != BERTH_OK)
        return;
    const char *transport = pgdeploy_push(deps, (uint32_t)dep, topic);
    if (transport == NULL)
        return;
    (void)pgwire_get_int8(res, i, C_CREATED, &created);
    if (!pgwire_isnull(res, i, C_CT))
        (void)pgwire_get_text(res, i, C_CT, &ct, &len);
    /* The headers, each a string of its own, in one buffer. */
    engine_header hs[ENGINE_HEADERS_MAX + 2];
    size_t nh = 0;
    char *buf = NULL;
    pgwire_array arr;
    if (pgwire_array_open(res, i, C_HDRS, PGWIRE_TEXT, &arr) == BERTH_OK) {
        size_t cap = (size_t)PQgetlength(res, i, C_HDRS) + 2 * ENGINE_HEADERS_MAX + 2, at = 0;
        buf = malloc(cap);
        const uint8_t *v;
        char *pair[2];
        int k = 0;
        while (buf != NULL && nh < ENGINE_HEADERS_MAX && pgwire_array_next(&arr, &v, &len) == 1 &&
               at + len + 1 <= cap) {
            pair[k] = buf + at;
            memcpy(buf + at, v ? v : (const uint8_t *)"", v ? len : 0);
            at += v ? len : 0;
            buf[at++] = '\0';
            if (++k == 2) {
                hs[nh++] = (engine_header){pair[0], pair[1]};
                k = 0;
            }
        }
    }
    engine_push_delivery d = {.transport = transport,
                              .topic = topic,
                              .flight = (uint64_t)flight,
                              .payload = pay,
                              .payload_len = plen,
                              .headers = hs,
                              .content_type = ct,
                              .attempt = (uint32_t)attempts + 1,
                              .created_at_ms = (uint64_t)created};
    store_id_format(id, d.id);
    char attempt[12];
    if (!pgwire_isnull(res, i, C_IID)) { /* a call's request names its call, as its task would */
        uint8_t iid[BERTH_ID_LEN];
        (void)pgwire_get_uuid(res, i, C_IID, iid);
        (void)pgwire_get_int4(res, i, C_CATT, &catt);
        store_id_format(iid, d.instance_id);
        snprintf(attempt, sizeof attempt, "%d", catt);
        hs[nh++] = (engine_header){ENGINE_HEADER_INSTANCE, d.instance_id};
        hs[nh++] = (engine_header){ENGINE_HEADER_ATTEMPT, attempt};
    }
    d.n_headers = nh;
    fn(ctx, &d, (uint32_t)dep);
    free(buf);
}

void pgrelay_each_send(const pgops_turn *t, const pgdeploys *deps,
                       void (*fn)(void *ctx, const engine_push_delivery *d, uint32_t deployment),
                       void *ctx)
{
    const PGresult *res = t->s_oclaim >= 0 ? t->stmts[t->s_oclaim].result : NULL;
    int n = res ? PQntuples(res) : 0;
    if (n == 0)
        return;
    send_ref *v = mem_calloc((size_t)n, sizeof *v);
    for (int i = 0; i < n; i++) {
        if (v == NULL) { /* (out of memory: in the order the database gave) */
            send_one(res, i, deps, fn, ctx);
            continue;
        }
        v[i].row = i;
        (void)pgwire_get_int8(res, i, C_SEQ, &v[i].seq);
    }
    if (v == NULL)
        return;
    qsort(v, (size_t)n, sizeof *v, by_seq);
    for (int i = 0; i < n; i++)
        send_one(res, v[i].row, deps, fn, ctx);
    free(v);
}
