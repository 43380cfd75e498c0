/* pgplan.c — see pgplan.h. */
#include "pg/pgplan.h"

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

bool pgplan_push(void *slot, const void *val, size_t n)
{
    if (slot == NULL)
        return false;
    memcpy(slot, val, n);
    return true;
}

int pgplan_add_stmt(pgops_turn *t, const char *name, size_t bytes)
{
    if (t->t.n == t->cap)
        return -1;
    size_t i = t->t.n++;
    if (pgwire_params_init_own(&t->params[i], bytes) != BERTH_OK) {
        t->t.n--;
        return -1;
    }
    t->stmts[i] = (pgturn_stmt){.name = name, .params = &t->params[i]};
    return (int)i;
}

bool pgplan_stmt_incidents(pgops_turn *t, const int32_t *kinds, const uint8_t (*ids)[BERTH_ID_LEN],
                           const char *const *topics, const char *const *codes,
                           const char *const *messages, size_t n, size_t bytes)
{
    int s = pgplan_add_stmt(t, "incidents_insert", bytes + 80 * n);
    if (s < 0)
        return false;
    pgwire_params *pp = &t->params[s];
    pgwire_int4_array(pp, kinds, NULL, n);
    pgwire_uuid_array(pp, ids, NULL, n);
    pgwire_text_array(pp, topics, n);
    pgwire_text_array(pp, codes, n);
    pgwire_text_array(pp, messages, n);
    return true;
}

size_t pgplan_text_len(const char *s)
{
    return s ? strlen(s) : 0;
}

char *pgplan_copy_text(engine_reply *r, const PGresult *res, int row, int col)
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

void pgplan_winner(const PGresult *res, size_t no, const uint8_t own[BERTH_ID_LEN],
                   engine_submitted *out)
{
    uint8_t winner[BERTH_ID_LEN];
    memcpy(winner, own, BERTH_ID_LEN);
    int n = res ? PQntuples(res) : 0;
    for (int r = 0; r < n; r++) {
        int32_t k;
        if (pgwire_get_int4(res, r, 0, &k) == BERTH_OK && (size_t)k == no) {
            if (!pgwire_isnull(res, r, 1))
                (void)pgwire_get_uuid(res, r, 1, winner);
            break;
        }
    }
    out->duplicate = memcmp(winner, own, BERTH_ID_LEN) != 0;
    store_id_format(winner, out->id);
}

void pgplan_refused_answer(engine_reply *r, const engine_submitted *out)
{
    if (out->duplicate)
        memset(&r->status, 0, sizeof r->status); /* accepted before: its duplicate */
    else
        r->n_submitted = 0; /* the route's refusal stands */
}

bool pgplan_copy_headers(engine_reply *r, const PGresult *res, int row, int col,
                         store_header hs[ENGINE_HEADERS_MAX], size_t *n)
{
    *n = 0;
    pgwire_array arr;
    if (pgwire_array_open(res, row, col, PGWIRE_TEXT, &arr) != BERTH_OK)
        return true;
    const uint8_t *v;
    size_t len;
    char *pair[2];
    int k = 0;
    while (*n < ENGINE_HEADERS_MAX && pgwire_array_next(&arr, &v, &len) == 1) {
        char *s = reply_mem(r, len + 1);
        if (s == NULL)
            return false;
        memcpy(s, v ? v : (const uint8_t *)"", v ? len : 0);
        s[v ? len : 0] = '\0';
        pair[k++] = s;
        if (k == 2) {
            hs[(*n)++] = (store_header){pair[0], pair[1]};
            k = 0;
        }
    }
    return true;
}

bool pgplan_copy_bytes(engine_reply *r, const PGresult *res, int row, int col, const uint8_t **out,
                       size_t *len)
{
    *out = NULL;
    *len = 0;
    const uint8_t *v;
    size_t n;
    if (pgwire_isnull(res, row, col) || pgwire_get_bytea(res, row, col, &v, &n) != BERTH_OK ||
        n == 0)
        return true;
    uint8_t *d = reply_mem(r, n);
    if (d == NULL)
        return false;
    memcpy(d, v, n);
    *out = d;
    *len = n;
    return true;
}

/* Past what one notification carries: "look at everything" (p:*), and
 * the turn's earliest timer, which a replica's housekeeping needs. */
static void notify_overflow(pgops_turn *t)
{
    char all[48];
    if (t->notify_i != UINT64_MAX)
        snprintf(all, sizeof all, "p:*;i:+%llu%s", (unsigned long long)t->notify_i,
                 t->notify_o ? ";o:" : "");
    else
        snprintf(all, sizeof all, "p:*%s", t->notify_o ? ";o:" : "");
    free(t->notify);
    t->notify = mem_strdup(all);
    t->notify_len = t->notify ? strlen(all) : 0;
    t->notify_cap = t->notify_len + 1;
    t->notify_over = true;
}

void pgplan_notify_add(pgops_turn *t, char kind, const char *topic, uint64_t in_ms)
{
    char rec[400];
    unsigned long long ms = (unsigned long long)in_ms;
    int k = kind == 't'   ? snprintf(rec, sizeof rec, ";t:%s+%llu", topic, ms)
            : kind == 'i' ? snprintf(rec, sizeof rec, ";i:+%llu", ms)
                          : snprintf(rec, sizeof rec, ";%c:%s", kind, topic);
    if (k <= 0 || (size_t)k >= sizeof rec)
        return;
    if (kind == 'i' && in_ms < t->notify_i)
        t->notify_i = in_ms;
    bool first_o = kind == 'o' && !t->notify_o;
    t->notify_o |= kind == 'o';
    if (t->notify_over) { /* only the earliest timer and the relays' record still count */
        if (kind == 'i' || first_o)
            notify_overflow(t);
        return;
    }
    /* A batch's items on one topic ring it once. */
    if (strcmp(rec, t->notify_last) == 0)
        return;
    memcpy(t->notify_last, rec, (size_t)k + 1);
    const char *r = t->notify_len ? rec : rec + 1; /* the first without its ';' */
    size_t n = t->notify_len ? (size_t)k : (size_t)k - 1;
    if (t->notify_len + n + 1 > 7000) {
        notify_overflow(t);
        return;
    }
    if (t->notify_len + n + 1 > t->notify_cap) {
        size_t cap = (t->notify_len + n + 1) * 2;
        char *nb = mem_realloc(t->notify, cap);
        if (nb == NULL)
            return;
        t->notify = nb;
        t->notify_cap = cap;
    }
    memcpy(t->notify + t->notify_len, r, n + 1);
    t->notify_len += n;
}

engine_topic_counters *pgplan_counters(pgops_turn *t, const char *topic)
{
    return t->topics != NULL && topic != NULL ? tcounts_get(t->topics, topic, strlen(topic)) : NULL;
}

void pgplan_event(pgops_turn *t, engine_event_kind kind, const char *topic,
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
