/* pgsubmit.c — see pgsubmit.h. */
#include "pg/pgsubmit.h"

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

static bool has_key(const engine_submit_args *a)
{
    return a->idempotency_key != NULL && a->idempotency_key[0] != '\0';
}

bool pgsubmit_check(pgops_turn *t, const engine_submit_args *a, int32_t *dep, bool *push,
                    engine_status *st)
{
    if (!check_topic(a->topic, "topic", st) || !rules_submit_check(t->o, t->now_ms, a, st))
        return false;
    t->routed = true;
    int64_t d = pgdeploy_route(t->deps, t->o->strict_channels, a->topic, st);
    *dep = (int32_t)d;
    *push = d > 0 && pgdeploy_push(t->deps, (uint32_t)d, a->topic) != NULL;
    t->share |= d > 0;
    t->relay |= *push; /* its delivery is claimed in the same turn */
    return true;
}

static bool add_sub(pgops_turn *t, pgreq *p, const engine_submit_args *a, int32_t dep, bool push,
                    engine_submitted *out)
{
    sub_item s = {.p = p, .a = a, .out = out, .same_as = -1, .dep = dep, .push = push};
    randombytes_buf(s.id, sizeof s.id);
    if (has_key(a) && dep >= 0)
        for (size_t j = 0; j < t->subs.n && s.same_as < 0; j++) {
            const engine_submit_args *b = t->subs.v[j].a;
            if (t->subs.v[j].same_as < 0 && has_key(b) && strcmp(a->topic, b->topic) == 0 &&
                strcmp(a->idempotency_key, b->idempotency_key) == 0)
                s.same_as = (int)j;
        }
    return VEC_PUSH(&t->subs, s);
}

void pgsubmit_plan(pgops_turn *t, pgreq *p)
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
    struct route {
        int32_t dep;
        bool push;
    } one, *rt = n > 1 ? mem_calloc(n, sizeof *rt) : &one;
    if (rt == NULL) {
        reply_no_memory(&r->status);
        p->settled = true;
        return;
    }
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        ok = pgsubmit_check(t, &items[i], &rt[i].dep, &rt[i].push, &r->status);
        /* A refused route: a batch is refused whole; a single submit under
         * a key goes to the statement, which answers a duplicate if the
         * key was accepted before (R17 outlives the route). */
        if (!ok ||
            (rt[i].dep < 0 && (p->req.op == ENGINE_OP_SUBMIT_BATCH || !has_key(&items[i])))) {
            if (p->req.op == ENGINE_OP_SUBMIT_BATCH)
                rules_item_name(&r->status, i);
            ok = false;
        }
    }
    if (ok && (r->submitted = reply_mem(r, n * sizeof(*r->submitted))) == NULL) {
        reply_no_memory(&r->status);
        ok = false;
    }
    if (ok) {
        r->n_submitted = n;
        for (size_t i = 0; i < n && ok; i++)
            ok = add_sub(t, p, &items[i], rt[i].dep, rt[i].push, &r->submitted[i]);
        if (!ok)
            reply_no_memory(&r->status);
    }
    if (rt != &one)
        free(rt);
    p->settled = !ok;
}

size_t pgsubmit_body_bytes(const engine_submit_args *a)
{
    size_t n = 16 + a->payload_len + pgplan_text_len(a->topic) + pgplan_text_len(a->content_type);
    for (size_t h = 0; h < a->n_headers; h++)
        n += 2 + strlen(a->headers[h].name) + strlen(a->headers[h].value);
    return n;
}

bool pgsubmit_stmt(pgops_turn *t)
{
    size_t n = t->subs.n, nh = 0, bytes = 4096;
    for (size_t i = 0; i < n; i++) {
        const engine_submit_args *a = t->subs.v[i].a;
        bytes += 128 + a->payload_len + pgplan_text_len(a->topic) +
                 pgplan_text_len(a->content_type) + pgplan_text_len(a->idempotency_key);
        for (size_t h = 0; h < a->n_headers; h++)
            bytes += 16 + strlen(a->headers[h].name) + strlen(a->headers[h].value);
        nh += 2 * a->n_headers;
    }
    int s = pgplan_add_stmt(t, "submit", bytes);
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
    int32_t *deps = mem_calloc(n ? n : 1, sizeof(int32_t));
    bool *push = mem_calloc(n ? n : 1, sizeof(bool));
    bool ok = ids && topics && pays && plens && hdrs && hstart && hcount && cts && keys && delay &&
              delay_null && nb && nb_null && prio && blen && deps && push;
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
        blen[m] = (int32_t)pgsubmit_body_bytes(a);
        deps[m] = si->dep;
        push[m] = si->push;
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
        pgwire_int4_array(pp, deps, NULL, m);
        pgwire_bool_array(pp, push, NULL, m);
    }
    free(deps);
    free(push);
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

void pgsubmit_answer(pgops_turn *t)
{
    const PGresult *res = t->stmts[t->s_submit].result;
    /* Rows by item number, counting only the items sent. */
    size_t sent = 0;
    for (size_t i = 0; i < t->subs.n; i++) {
        sub_item *s = &t->subs.v[i];
        if (s->same_as >= 0)
            continue;
        pgplan_winner(res, ++sent, s->id, s->out);
        if (s->dep < 0)
            pgplan_refused_answer(s->p->reply, s->out);
    }
    for (size_t i = 0; i < t->subs.n; i++) {
        sub_item *s = &t->subs.v[i];
        if (s->same_as >= 0) {
            memcpy(s->out->id, t->subs.v[s->same_as].out->id, sizeof s->out->id);
            s->out->duplicate = true;
        }
    }
}

/* The turn's doorbell records for its submits: work now, or later. */
void pgsubmit_notify(pgops_turn *t)
{
    for (size_t i = 0; i < t->subs.n; i++) {
        const engine_submit_args *a = t->subs.v[i].a;
        if (t->subs.v[i].dep < 0)
            continue;            /* refused by its route: nothing new */
        if (t->subs.v[i].push) { /* a delivery: relays, look */
            pgplan_notify_add(t, 'o', "", 0);
            continue;
        }
        uint64_t at = a->has_delay_ms        ? t->now_ms + a->delay_ms
                      : a->has_not_before_ms ? a->not_before_ms
                                             : 0;
        if (at > t->now_ms)
            pgplan_notify_add(t, 't', a->topic, at - t->now_ms);
        else
            pgplan_notify_add(t, 'p', a->topic, 0);
    }
}

void pgsubmit_events(pgops_turn *t)
{
    for (size_t i = 0; i < t->subs.n; i++) {
        const sub_item *s = &t->subs.v[i];
        if (!s->out->duplicate && s->dep >= 0) {
            engine_topic_counters *c = pgplan_counters(t, s->a->topic);
            if (c != NULL)
                c->submitted++;
            uint8_t id[BERTH_ID_LEN];
            memcpy(id, s->id, BERTH_ID_LEN);
            if (!s->push) /* (a delivery is not parked: it is pushed) */
                pgplan_event(t, ENGINE_EVENT_TASK_PARKED, s->a->topic, id, NULL, 0);
        }
    }
}
