/*
 * test_ops.c — the task path's statements of pg/sql/statements.sql
 * (pg/README.md §3.1, §3.3, §3.4, §5.3) against a real PostgreSQL 15, each
 * run as the actor runs it: prepared without types, binary parameters and
 * results, inside a turn on the manual clock. Their result columns are
 * checked by name and type (the actor reads them by position), then what
 * they do: submit's answers and idempotency keys (across turns, past the
 * horizon, from two connections at once), delays and headers; the claim's
 * order, budgets, SKIP LOCKED and its re-check of a row claimed after its
 * snapshot; guard_read's locks; the RTT2 writes; topics_due; and that an
 * index serves each read.
 *
 * A transaction a test must hold open runs on a plain (blocking) connection
 * with the same statements prepared: BEGIN, turn_begin, the statement.
 *
 * One throwaway cluster for the binary (pgtmp, started by the runner's
 * PRE_ALL hook, stopped by POST_ALL); each test makes its own database.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "pg/pgconn.h"
#include "pg/pgschema.h"
#include "pg/pgstmt.h"
#include "pg/pgturn.h"
#include "pg/pgwire.h"
#include "store/err.h"
#include "tests/support/pgtmp.h"
#include "tests/support/pgtmp_hooks.h"

static char err[1024];
static pgstmt_table tab;

#define HORIZON 60000 /* the dedup horizon, ms, unless a test says */
#define BIG     (1 << 30)

/* ---- connections ---- */

static void load_tab(void)
{
    if (tab.n == 0)
        cr_assert_eq(pgstmt_load(&tab, err, sizeof err), BERTH_OK, "%s", err);
}

/* A turn connection to uri: pipeline mode, every statement prepared. */
static PGconn *turn_conn(const char *uri)
{
    PGconn *c = pgtmp_connect(uri);
    load_tab();
    cr_assert_eq(pgturn_enter(c, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_eq(pgstmt_prepare_all(c, &tab, err, sizeof err), BERTH_OK, "%s", err);
    return c;
}

/* A migrated database `name` (its URI in uri) and a turn connection. */
static PGconn *ops_db(const char *name, char *uri, size_t len)
{
    pgtmp_createdb(name, uri, len);
    PGconn *c = pgtmp_connect(uri);
    cr_assert_eq(pgschema_migrate(c, NULL, err, sizeof err), BERTH_OK, "%s", err);
    pgconn_close(c);
    return turn_conn(uri);
}

/* A plain (blocking) connection with the same statements prepared. */
static PGconn *plain_conn(const char *uri)
{
    PGconn *c = pgtmp_connect(uri);
    load_tab();
    for (size_t i = 0; i < tab.n; i++) {
        PGresult *r = PQprepare(c, tab.v[i].name, tab.v[i].sql, 0, NULL);
        cr_assert_eq(pgconn_check(c, r, PGRES_COMMAND_OK, tab.v[i].name, err, sizeof err), BERTH_OK,
                     "%s", err);
        PQclear(r);
    }
    return c;
}

/* Statement name on plain connection c, binary results; the result. */
static PGresult *plain_exec(PGconn *c, const char *name, const pgwire_params *p)
{
    cr_assert_eq(pgwire_params_status(p), BERTH_OK, "%s", p->err);
    PGresult *r = PQexecPrepared(c, name, p->n, p->values, p->lengths, p->formats, 1);
    ExecStatusType st = PQresultStatus(r);
    cr_assert(st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK, "%s: %s", name,
              PQresultErrorMessage(r));
    return r;
}

/* One turn of one statement on the manual clock at now: committed; its
 * result (the caller's to PQclear). */
static PGresult *turn1(PGconn *c, int64_t now, const char *name, const pgwire_params *p)
{
    cr_assert_eq(pgwire_params_status(p), BERTH_OK, "%s", p->err);
    pgturn_stmt s = {.name = name, .params = p};
    pgturn t = {.conn = c, .clock_set = true, .clock_ms = now, .stmts = &s, .n = 1};
    cr_assert_eq(pgturn_run(&t, pgturn_mono_ms() + 20000), BERTH_OK);
    cr_assert_eq(t.outcome, PGTURN_COMMITTED, "%s: %s: %s", name, pgturn_outcome_name(t.outcome),
                 t.message);
    cr_assert_eq(t.now_ms, now);
    cr_assert_not_null(s.result);
    return s.result;
}

/* The first column of the first row of sql, as text (a static buffer). */
static const char *one(PGconn *c, const char *sql)
{
    static char v[4096];
    PGresult *r = NULL;
    int rv = pgconn_query(c, sql, 0, NULL, sql, &r, err, sizeof err);
    cr_assert_eq(rv, BERTH_OK, "%s", err);
    cr_assert_gt(PQntuples(r), 0, "%s: no row", sql);
    snprintf(v, sizeof v, "%s", PQgetisnull(r, 0, 0) ? "NULL" : PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* Waits (up to 10 s) until sql, run on c, answers 't'. */
static bool wait_for(PGconn *c, const char *sql)
{
    uint64_t end = pgturn_mono_ms() + 10000;
    while (pgturn_mono_ms() < end) {
        if (strcmp(one(c, sql), "t") == 0)
            return true;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* ---- ids and columns ---- */

/* Task k's id: b3000000-0000-0000-0000-0000000000kk; in SQL, k is
 * get_byte(uuid_send(id), 15). */
static void id_of(uint8_t id[16], int k)
{
    memset(id, 0, 16);
    id[0] = 0xb3;
    id[15] = (uint8_t)k;
}

static int k_of(const uint8_t id[16])
{
    return id[15];
}

static void hex16(const uint8_t v[16], char out[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", v[i]);
}

typedef struct colspec {
    const char *name;
    Oid type;
} colspec;

/* r's columns are exactly cols, by name and type, in that order. */
static void assert_columns(const PGresult *r, const colspec *cols, int n, const char *what)
{
    cr_assert_eq(PQnfields(r), n, "%s: %d columns", what, PQnfields(r));
    for (int i = 0; i < n; i++) {
        cr_assert_str_eq(PQfname(r, i), cols[i].name, "%s: column %d", what, i);
        cr_assert_eq(PQftype(r, i), cols[i].type, "%s: column %d (%s) has type %u", what, i,
                     cols[i].name, PQftype(r, i));
    }
}

/* A text[] at (row, col) joined with ',' (NULL elements as "NULL"). */
static void text_array(const PGresult *r, int row, int col, char *out, size_t len)
{
    pgwire_array a;
    const uint8_t *v;
    size_t n, used = 0;
    out[0] = '\0';
    cr_assert_eq(pgwire_array_open(r, row, col, PGWIRE_TEXT, &a), BERTH_OK);
    while (pgwire_array_next(&a, &v, &n) == 1) {
        int w = v == NULL ? snprintf(out + used, len - used, "%sNULL", used ? "," : "")
                          : snprintf(out + used, len - used, "%s%.*s", used ? "," : "", (int)n,
                                     (const char *)v);
        cr_assert(w > 0 && (size_t)w < len - used);
        used += (size_t)w;
    }
}

/* ---- submit ---- */

#define MAXI 24

typedef struct item {
    int k;               /* its id: id_of(k) */
    const char *topic;   /* "t" when NULL */
    const char *payload; /* "" when NULL */
    const char *hdrs[8]; /* name, value, ...; a NULL ends them */
    int junk_start;      /* no headers: hdr_start sent (0: a NULL element) */
    const char *ct;      /* NULL: none */
    const char *key;     /* NULL: none */
    bool delay_set, nb_set;
    int64_t delay, nb;
    int64_t prio;
} item;

static void submit_params(pgwire_params *p, uint8_t *buf, size_t cap, const item *it, size_t n,
                          int64_t horizon, int32_t retries)
{
    uint8_t ids[MAXI][16];
    const char *topics[MAXI], *cts[MAXI], *keys[MAXI], *hdrs[MAXI * 8];
    const void *pl[MAXI];
    size_t pll[MAXI], nh = 0;
    int32_t hs[MAXI], hc[MAXI], bytes[MAXI], deps[MAXI] = {0}; /* the implicit deployment */
    bool push[MAXI] = {0};                                     /* pull: a task each */
    bool hsn[MAXI], dn[MAXI], nbn[MAXI];
    int64_t delay[MAXI], nb[MAXI], prio[MAXI];
    cr_assert_leq(n, MAXI);
    for (size_t i = 0; i < n; i++) {
        id_of(ids[i], it[i].k);
        topics[i] = it[i].topic != NULL ? it[i].topic : "t";
        pl[i] = it[i].payload != NULL ? it[i].payload : "";
        pll[i] = strlen(pl[i]);
        bytes[i] = (int32_t)pll[i];
        int h = 0;
        while (h < 8 && it[i].hdrs[h] != NULL) {
            hdrs[nh + (size_t)h] = it[i].hdrs[h];
            h++;
        }
        hc[i] = h;
        hs[i] = h > 0 ? (int32_t)nh + 1 : it[i].junk_start;
        hsn[i] = h == 0 && it[i].junk_start == 0;
        nh += (size_t)h;
        cts[i] = it[i].ct;
        keys[i] = it[i].key;
        delay[i] = it[i].delay;
        dn[i] = !it[i].delay_set;
        nb[i] = it[i].nb;
        nbn[i] = !it[i].nb_set;
        prio[i] = it[i].prio;
    }
    pgwire_params_init(p, buf, cap);
    pgwire_uuid_array(p, (const uint8_t(*)[16])ids, NULL, n);
    pgwire_text_array(p, topics, n);
    pgwire_bytea_array(p, pl, pll, n);
    pgwire_text_array(p, hdrs, nh);
    pgwire_int4_array(p, hs, hsn, n);
    pgwire_int4_array(p, hc, NULL, n);
    pgwire_text_array(p, cts, n);
    pgwire_text_array(p, keys, n);
    pgwire_int8_array(p, delay, dn, n);
    pgwire_int8_array(p, nb, nbn, n);
    pgwire_int8_array(p, prio, NULL, n);
    pgwire_int4_array(p, bytes, NULL, n);
    pgwire_int8(p, horizon);
    pgwire_int4(p, retries);
    pgwire_int4_array(p, deps, NULL, n);
    pgwire_bool_array(p, push, NULL, n);
    cr_assert_eq(pgwire_params_status(p), BERTH_OK, "%s", p->err);
}

/* An item's answer: winner is k of the id its key names (0: no key). */
static void read_submit(const PGresult *r, size_t n, int *winner)
{
    static const colspec cols[] = {{"no", PGWIRE_INT4}, {"winner", PGWIRE_UUID}};
    assert_columns(r, cols, 2, "submit");
    cr_assert_eq((size_t)PQntuples(r), n, "one row per item");
    bool seen[MAXI] = {false};
    for (int row = 0; row < PQntuples(r); row++) {
        int32_t no;
        uint8_t w[16];
        cr_assert_eq(pgwire_get_int4(r, row, 0, &no), BERTH_OK);
        cr_assert(no >= 1 && (size_t)no <= n && !seen[no - 1], "item number %d", no);
        seen[no - 1] = true;
        if (pgwire_isnull(r, row, 1)) {
            winner[no - 1] = 0;
        } else {
            cr_assert_eq(pgwire_get_uuid(r, row, 1, w), BERTH_OK);
            winner[no - 1] = k_of(w);
        }
    }
}

/* submit of it[0, n) in one turn at now; each item's winner (k, 0: no key). */
static void submit(PGconn *c, int64_t now, const item *it, size_t n, int64_t horizon, int *winner)
{
    static uint8_t buf[1 << 16];
    pgwire_params p;
    submit_params(&p, buf, sizeof buf, it, n, horizon, 3);
    PGresult *r = turn1(c, now, "submit", &p);
    read_submit(r, n, winner);
    PQclear(r);
}

/* Tasks k0..k0+n-1 on topic, no key, priority 0, payload "pNN", at now. */
static void plain_tasks(PGconn *c, int64_t now, const char *topic, int k0, int n)
{
    item it[MAXI];
    char pl[MAXI][8];
    int w[MAXI];
    cr_assert_leq(n, MAXI);
    for (int i = 0; i < n; i++) {
        snprintf(pl[i], sizeof pl[i], "p%02d", k0 + i);
        it[i] = (item){.k = k0 + i, .topic = topic, .payload = pl[i]};
    }
    submit(c, now, it, (size_t)n, HORIZON, w);
}

/* The live and terminal tasks, "k" each in seq order. */
static const char *task_ks(PGconn *look)
{
    return one(look, "SELECT coalesce(string_agg(get_byte(uuid_send(id), 15)::text, ',' "
                     "ORDER BY seq), '') FROM berth.tasks");
}

Test(submit, answers_one_row_per_item_with_its_winner)
{
    char uri[256];
    PGconn *c = ops_db("submit_rows", uri, sizeof uri), *look = pgtmp_connect(uri);
    const item it[] = {
        {.k = 1, .topic = "a", .payload = "one", .prio = 5},
        {.k = 2, .topic = "a", .payload = "two", .key = "k2", .ct = "text/plain", .prio = 1},
        {.k = 3, .topic = "b", .payload = "three!"},
    };
    int w[3];
    submit(c, 10000, it, 3, HORIZON, w);
    cr_assert(w[0] == 0 && w[1] == 2 && w[2] == 0, "winners %d %d %d", w[0], w[1], w[2]);
    /* The rows, in seq order = item order. */
    cr_assert_str_eq(
        one(look, "SELECT string_agg(concat_ws(':', get_byte(uuid_send(id), 15), topic, "
                  "deployment, priority, created_at, available_at, fetchable_at, "
                  "lock_expires_at IS NULL, terminal, retries_left, failures, claims, "
                  "coalesce(content_type, '-'), headers::text, body_bytes, "
                  "convert_from(payload, 'UTF8'), worker_id IS NULL AND lock_token IS NULL), "
                  "' ' ORDER BY seq) FROM berth.tasks"),
        "1:a:0:5:10000:10000:10000:t:f:3:0:0:-:{}:3:one:t "
        "2:a:0:1:10000:10000:10000:t:f:3:0:0:text/plain:{}:3:two:t "
        "3:b:0:0:10000:10000:10000:t:f:3:0:0:-:{}:6:three!:t");
    cr_assert_str_eq(one(look, "SELECT string_agg(concat_ws(':', kind, topic, key, "
                               "get_byte(uuid_send(id), 15), at), ' ') FROM berth.submit_keys"),
                     "s:a:k2:2:10000");

    /* An empty submit is no error and answers nothing. */
    submit(c, 10001, it, 0, HORIZON, w);
    cr_assert_eq(pgtmp_one_long(look, "SELECT count(*) FROM berth.tasks"), 3);
    pgconn_close(look);
    pgconn_close(c);
}

Test(submit, delay_and_not_before_set_available_at)
{
    char uri[256];
    PGconn *c = ops_db("submit_delay", uri, sizeof uri), *look = pgtmp_connect(uri);
    const item it[] = {
        {.k = 1, .delay_set = true, .delay = 1500},
        {.k = 2, .nb_set = true, .nb = 70000},
        {.k = 3, .nb_set = true, .nb = 20000}, /* past: now */
        {.k = 4, .delay_set = true, .delay = 0},
        {.k = 5, .delay_set = true, .delay = 100, .nb_set = true, .nb = 90000}, /* delay first */
        {.k = 6},
    };
    int w[6];
    submit(c, 50000, it, 6, HORIZON, w);
    cr_assert_str_eq(one(look, "SELECT string_agg(get_byte(uuid_send(id), 15) || '@' || "
                               "available_at || '/' || fetchable_at || '/' || created_at, ' ' "
                               "ORDER BY seq) FROM berth.tasks"),
                     "1@51500/51500/50000 2@70000/70000/50000 3@50000/50000/50000 "
                     "4@50000/50000/50000 5@50100/50100/50000 6@50000/50000/50000");
    pgconn_close(look);
    pgconn_close(c);
}

/* claim1 over topic at now: the rows in k order (asserting the columns). */
typedef struct claimed {
    int64_t k;
    int id; /* k_of(id) */
    char topic[32];
    uint8_t token[16];
    int64_t lock, available_at, created_at, priority;
    int32_t claims, retries_left, body_bytes;
    bool instance_null, attempt_null, ct_null;
    char ct[64], headers[256], payload[64];
} claimed;

static const colspec claim_cols[] = {
    {"k", PGWIRE_INT8},
    {"id", PGWIRE_UUID},
    {"topic", PGWIRE_TEXT},
    {"lock_token", PGWIRE_UUID},
    {"lock_expires_at", PGWIRE_INT8},
    {"claims", PGWIRE_INT4},
    {"retries_left", PGWIRE_INT4},
    {"available_at", PGWIRE_INT8},
    {"created_at", PGWIRE_INT8},
    {"priority", PGWIRE_INT8},
    {"instance_id", PGWIRE_UUID},
    {"call_attempt", PGWIRE_INT4},
    {"content_type", PGWIRE_TEXT},
    {"headers", PGWIRE_TEXT_ARRAY},
    {"body_bytes", PGWIRE_INT4},
    {"payload", PGWIRE_BYTEA},
};

static size_t read_claim(const PGresult *r, claimed *out, size_t cap)
{
    assert_columns(r, claim_cols, 16, "claim");
    size_t n = (size_t)PQntuples(r);
    cr_assert_leq(n, cap);
    for (int row = 0; row < (int)n; row++) {
        claimed x = {0};
        uint8_t id[16];
        const char *s;
        const uint8_t *b;
        size_t len;
        cr_assert_eq(pgwire_get_int8(r, row, 0, &x.k), BERTH_OK);
        cr_assert(x.k >= 1 && (size_t)x.k <= n, "k %lld of %zu", (long long)x.k, n);
        cr_assert_eq(pgwire_get_uuid(r, row, 1, id), BERTH_OK);
        x.id = k_of(id);
        cr_assert_eq(pgwire_get_text(r, row, 2, &s, &len), BERTH_OK);
        snprintf(x.topic, sizeof x.topic, "%.*s", (int)len, s);
        cr_assert_eq(pgwire_get_uuid(r, row, 3, x.token), BERTH_OK);
        cr_assert_eq(pgwire_get_int8(r, row, 4, &x.lock), BERTH_OK);
        cr_assert_eq(pgwire_get_int4(r, row, 5, &x.claims), BERTH_OK);
        cr_assert_eq(pgwire_get_int4(r, row, 6, &x.retries_left), BERTH_OK);
        cr_assert_eq(pgwire_get_int8(r, row, 7, &x.available_at), BERTH_OK);
        cr_assert_eq(pgwire_get_int8(r, row, 8, &x.created_at), BERTH_OK);
        cr_assert_eq(pgwire_get_int8(r, row, 9, &x.priority), BERTH_OK);
        x.instance_null = pgwire_isnull(r, row, 10);
        x.attempt_null = pgwire_isnull(r, row, 11);
        x.ct_null = pgwire_isnull(r, row, 12);
        if (!x.ct_null) {
            cr_assert_eq(pgwire_get_text(r, row, 12, &s, &len), BERTH_OK);
            snprintf(x.ct, sizeof x.ct, "%.*s", (int)len, s);
        }
        text_array(r, row, 13, x.headers, sizeof x.headers);
        cr_assert_eq(pgwire_get_int4(r, row, 14, &x.body_bytes), BERTH_OK);
        cr_assert_eq(pgwire_get_bytea(r, row, 15, &b, &len), BERTH_OK);
        snprintf(x.payload, sizeof x.payload, "%.*s", (int)len, (const char *)b);
        out[x.k - 1] = x;
    }
    return n;
}

static size_t claim1(PGconn *c, int64_t now, const char *topic, int32_t n, int64_t lock_ms,
                     const char *worker, int64_t max_bytes, claimed *out, size_t cap)
{
    uint8_t buf[256];
    pgwire_params p;
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_text(&p, topic);
    pgwire_int4(&p, n);
    pgwire_int8(&p, lock_ms);
    pgwire_text(&p, worker);
    pgwire_int8(&p, max_bytes);
    PGresult *r = turn1(c, now, "claim1", &p);
    size_t got = read_claim(r, out, cap);
    PQclear(r);
    return got;
}

static size_t claimk(PGconn *c, int64_t now, const char *const *topics, size_t nt, int32_t n,
                     int64_t lock_ms, const char *worker, int64_t max_bytes, claimed *out,
                     size_t cap)
{
    uint8_t buf[512];
    pgwire_params p;
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_text_array(&p, topics, nt);
    pgwire_int4(&p, n);
    pgwire_int8(&p, lock_ms);
    pgwire_text(&p, worker);
    pgwire_int8(&p, max_bytes);
    PGresult *r = turn1(c, now, "claimk", &p);
    size_t got = read_claim(r, out, cap);
    PQclear(r);
    return got;
}

/* "k,k,k" of the claimed rows, in k order. */
static const char *ks(const claimed *x, size_t n)
{
    static char s[256];
    size_t used = 0;
    s[0] = '\0';
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(s + used, sizeof s - used, "%s%d", i ? "," : "", x[i].id);
    return s;
}

Test(submit, headers_round_trip_as_each_items_slice)
{
    char uri[256];
    PGconn *c = ops_db("submit_headers", uri, sizeof uri), *look = pgtmp_connect(uri);
    const item it[] = {
        {.k = 1, .hdrs = {"x-a", "1", "x-b", "two"}},
        {.k = 2, .junk_start = 77}, /* none, between two with some; any start */
        {.k = 3, .hdrs = {"x-c", "3"}},
        {.k = 4, .hdrs = {"ü,{\"}", ""}, .ct = "application/json"},
        {.k = 5}, /* none, last, a NULL start */
    };
    int w[5];
    submit(c, 1000, it, 5, HORIZON, w);
    cr_assert_str_eq(one(look, "SELECT string_agg(get_byte(uuid_send(id), 15) || '=' || "
                               "headers::text || '/' || array_length(headers, 1) || '/' || "
                               "array_lower(headers, 1), ' ' ORDER BY seq) FROM berth.tasks "
                               "WHERE headers <> '{}'"),
                     "1={x-a,1,x-b,two}/4/1 3={x-c,3}/2/1 4={\"ü,{\\\"}\",\"\"}/2/1");
    cr_assert_eq(pgtmp_one_long(look, "SELECT count(*) FROM berth.tasks WHERE headers = '{}' "
                                      "AND get_byte(uuid_send(id), 15) IN (2, 5)"),
                 2);
    /* And back through the claim, binary. */
    claimed x[8];
    cr_assert_eq(claim1(c, 2000, "t", 10, 30000, "w", BIG, x, 8), 5);
    cr_assert_str_eq(ks(x, 5), "1,2,3,4,5");
    cr_assert_str_eq(x[0].headers, "x-a,1,x-b,two");
    cr_assert_str_eq(x[1].headers, "");
    cr_assert_str_eq(x[2].headers, "x-c,3");
    cr_assert_str_eq(x[3].headers, "ü,{\"},");
    cr_assert_str_eq(x[3].ct, "application/json");
    cr_assert_str_eq(x[4].headers, "");
    cr_assert(x[4].ct_null);
    pgconn_close(look);
    pgconn_close(c);
}

Test(submit, a_key_repeated_in_a_later_turn_answers_the_first_id)
{
    char uri[256];
    PGconn *c = ops_db("submit_dup", uri, sizeof uri), *look = pgtmp_connect(uri);
    int w[4];
    const item first[] = {{.k = 1, .topic = "a", .key = "K"}};
    submit(c, 1000, first, 1, HORIZON, w);
    cr_assert_eq(w[0], 1, "new: its own id");

    const item later[] = {
        {.k = 2, .topic = "a", .key = "K"}, /* the same key: a duplicate */
        {.k = 3, .topic = "b", .key = "K"}, /* the same key on another topic: another key */
        {.k = 4, .topic = "a", .key = "L"},
        {.k = 5, .topic = "a"},
    };
    submit(c, 2000, later, 4, HORIZON, w);
    cr_assert(w[0] == 1 && w[1] == 3 && w[2] == 4 && w[3] == 0, "winners %d %d %d %d", w[0], w[1],
              w[2], w[3]);
    cr_assert_str_eq(task_ks(look), "1,3,4,5", "no task for the duplicate");
    cr_assert_str_eq(one(look, "SELECT get_byte(uuid_send(id), 15) || '@' || at FROM "
                               "berth.submit_keys WHERE topic = 'a' AND key = 'K'"),
                     "1@1000", "a duplicate leaves the key's row as it was");

    /* Task 1 completes; within the horizon its key still answers its id. */
    uint8_t buf[128], id[1][16];
    pgwire_params p;
    id_of(id[0], 1);
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_uuid_array(&p, (const uint8_t(*)[16])id, NULL, 1);
    PQclear(turn1(c, 2500, "tasks_delete", &p));
    const item again[] = {{.k = 6, .topic = "a", .key = "K"}};
    submit(c, 3000, again, 1, HORIZON, w);
    cr_assert_eq(w[0], 1, "the completed task's id");
    cr_assert_str_eq(task_ks(look), "3,4,5");
    pgconn_close(look);
    pgconn_close(c);
}

Test(submit, past_the_horizon_a_key_makes_a_new_task)
{
    char uri[256];
    PGconn *c = ops_db("submit_horizon", uri, sizeof uri), *look = pgtmp_connect(uri);
    int w[1];
    const item i1[] = {{.k = 1, .key = "K"}}, i2[] = {{.k = 2, .key = "K"}},
               i3[] = {{.k = 3, .key = "K"}}, i4[] = {{.k = 4, .key = "K"}};
    submit(c, 1000, i1, 1, 10000, w);
    cr_assert_eq(w[0], 1);
    submit(c, 10999, i2, 1, 10000, w);
    cr_assert_eq(w[0], 1, "1 ms before the horizon: a duplicate");
    submit(c, 11000, i3, 1, 10000, w);
    cr_assert_eq(w[0], 3, "at the horizon: new");
    cr_assert_str_eq(one(look, "SELECT get_byte(uuid_send(id), 15) || '@' || at FROM "
                               "berth.submit_keys"),
                     "3@11000", "the key names the new task from now");
    submit(c, 12000, i4, 1, 10000, w);
    cr_assert_eq(w[0], 3, "the horizon runs from the new task");
    cr_assert_str_eq(task_ks(look), "1,3", "the first task lives on");
    pgconn_close(look);
    pgconn_close(c);
}

Test(submit, a_key_twice_in_one_call_aborts_the_turn)
{
    char uri[256];
    PGconn *c = ops_db("submit_twice", uri, sizeof uri), *look = pgtmp_connect(uri);
    /* The caller folds repeats of a key before sending; the server would
     * refuse them, whole turn. */
    static uint8_t buf[1 << 14];
    pgwire_params p;
    const item it[] = {{.k = 1, .key = "K"}, {.k = 2}, {.k = 3, .key = "K"}};
    submit_params(&p, buf, sizeof buf, it, 3, HORIZON, 3);
    pgturn_stmt s = {.name = "submit", .params = &p};
    pgturn t = {.conn = c, .clock_set = true, .clock_ms = 1000, .stmts = &s, .n = 1};
    cr_assert_eq(pgturn_run(&t, pgturn_mono_ms() + 20000), BERTH_OK);
    cr_assert_eq(t.outcome, PGTURN_ABORTED, "%s", pgturn_outcome_name(t.outcome));
    cr_assert_str_eq(t.sqlstate, "21000", "%s", t.message);
    cr_assert_not(t.rerunnable);
    cr_assert_eq(pgtmp_one_long(look, "SELECT count(*) FROM berth.tasks"), 0);
    cr_assert_eq(pgtmp_one_long(look, "SELECT count(*) FROM berth.submit_keys"), 0);
    pgconn_close(look);
    pgconn_close(c);
}

typedef struct racer {
    PGconn *c;
    int64_t now;
    const char *name;
    pgwire_params *p;
    pgturn_outcome outcome;
    char message[512];
    PGresult *result;
    pthread_barrier_t *go; /* NULL: none */
    volatile int done;
} racer;

/* One turn of one statement, off the test's thread (no assertions here). */
static void *racer_main(void *arg)
{
    racer *r = arg;
    pgturn_stmt s = {.name = r->name, .params = r->p};
    pgturn t = {.conn = r->c, .clock_set = true, .clock_ms = r->now, .stmts = &s, .n = 1};
    if (r->go != NULL)
        pthread_barrier_wait(r->go);
    pgturn_run(&t, pgturn_mono_ms() + 20000);
    r->outcome = t.outcome;
    snprintf(r->message, sizeof r->message, "%s", t.message);
    r->result = s.result;
    r->done = 1;
    return NULL;
}

Test(submit, the_same_key_from_two_connections_makes_one_task)
{
    char uri[256], sql[256];
    PGconn *c = ops_db("submit_race", uri, sizeof uri), *look = pgtmp_connect(uri);
    PGconn *a = plain_conn(uri);
    static uint8_t ba[1 << 14], bb[1 << 14];
    pgwire_params pa, pb;
    const item ia[] = {{.k = 1, .topic = "a", .key = "K"}},
               ib[] = {{.k = 2, .topic = "a", .key = "K"}};
    submit_params(&pa, ba, sizeof ba, ia, 1, HORIZON, 3);
    submit_params(&pb, bb, sizeof bb, ib, 1, HORIZON, 3);
    int w[1];

    /* A: its submit done, not committed. */
    pgtmp_exec(a, "BEGIN");
    pgtmp_exec(a, "SELECT berth.turn_begin(5000)");
    PGresult *r = plain_exec(a, "submit", &pa);
    read_submit(r, 1, w);
    PQclear(r);
    cr_assert_eq(w[0], 1);

    /* B, the same key at the same instant: waits for A. */
    racer b = {.c = c, .now = 5000, .name = "submit", .p = &pb};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, racer_main, &b), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) > 0 FROM pg_locks WHERE pid = %d AND NOT granted",
             PQbackendPID(c));
    bool waited = wait_for(look, sql);
    bool done_early = b.done;
    pgtmp_exec(a, "COMMIT");
    pthread_join(th, NULL);
    cr_assert(waited && !done_early, "B did not wait for A's commit");
    cr_assert_eq(b.outcome, PGTURN_COMMITTED, "%s", b.message);
    read_submit(b.result, 1, w);
    PQclear(b.result);
    cr_assert_eq(w[0], 1, "B answers A's id: a duplicate");
    cr_assert_str_eq(task_ks(look), "1", "exactly one task");
    pgconn_close(a);
    pgconn_close(look);
    pgconn_close(c);
}

/* ---- the claim ---- */

Test(claim1, takes_by_priority_then_fetchable_at_then_seq)
{
    char uri[256];
    PGconn *c = ops_db("claim_order", uri, sizeof uri), *look = pgtmp_connect(uri);
    const item at1000[] = {
        {.k = 1, .prio = 2},
        {.k = 2, .prio = 1, .delay_set = true, .delay = 300},
        {.k = 3, .prio = 1},
        {.k = 4, .prio = 1},
    };
    const item at1100[] = {
        {.k = 5, .prio = 1},
        {.k = 6, .delay_set = true, .delay = 500},
        {.k = 7, .topic = "other"},
    };
    int w[4];
    submit(c, 1000, at1000, 4, HORIZON, w);
    submit(c, 1100, at1100, 3, HORIZON, w);
    claimed x[8];
    /* priority 0: 6 (1600); priority 1: 3, 4 (1000, by seq), 5 (1100),
     * 2 (1300); priority 2: 1. */
    cr_assert_eq(claim1(c, 2000, "t", 4, 30000, "w", BIG, x, 8), 4, "n = 4");
    cr_assert_str_eq(ks(x, 4), "6,3,4,5");
    cr_assert_eq(claim1(c, 2000, "t", 10, 30000, "w", BIG, x, 8), 2);
    cr_assert_str_eq(ks(x, 2), "2,1");
    cr_assert_eq(claim1(c, 2000, "t", 10, 30000, "w", BIG, x, 8), 0, "all locked now");
    cr_assert_str_eq(one(look, "SELECT claims || '/' || (lock_token IS NULL) FROM berth.tasks "
                               "WHERE topic = 'other'"),
                     "0/true", "another topic is not touched");
    pgconn_close(look);
    pgconn_close(c);
}

Test(claim1, sets_the_lock_the_token_the_worker_and_the_count)
{
    char uri[256], hex[33], sql[256];
    PGconn *c = ops_db("claim_sets", uri, sizeof uri), *look = pgtmp_connect(uri);
    const item it[] = {{.k = 1,
                        .topic = "jobs",
                        .payload = "body",
                        .hdrs = {"h", "v"},
                        .ct = "application/json",
                        .prio = 7}};
    int w[1];
    submit(c, 1000, it, 1, HORIZON, w);
    claimed x[2];
    cr_assert_eq(claim1(c, 2000, "jobs", 1, 30000, "w-1", BIG, x, 2), 1);
    cr_assert_eq(x[0].k, 1);
    cr_assert_eq(x[0].id, 1);
    cr_assert_str_eq(x[0].topic, "jobs");
    cr_assert_eq(x[0].lock, 32000, "now + lock_ms");
    cr_assert_eq(x[0].claims, 1);
    cr_assert_eq(x[0].retries_left, 3);
    cr_assert_eq(x[0].available_at, 1000);
    cr_assert_eq(x[0].created_at, 1000);
    cr_assert_eq(x[0].priority, 7);
    cr_assert(x[0].instance_null && x[0].attempt_null, "not a call's task");
    cr_assert_str_eq(x[0].ct, "application/json");
    cr_assert_str_eq(x[0].headers, "h,v");
    cr_assert_eq(x[0].body_bytes, 4);
    cr_assert_str_eq(x[0].payload, "body");
    static const uint8_t zero[16];
    cr_assert_neq(memcmp(x[0].token, zero, 16), 0);
    hex16(x[0].token, hex);
    snprintf(sql, sizeof sql,
             "SELECT worker_id || '/' || fetchable_at || '/' || "
             "(encode(uuid_send(lock_token), 'hex') = '%s') FROM berth.tasks",
             hex);
    cr_assert_str_eq(one(look, sql), "w-1/32000/true", "the row holds what was answered");

    /* Locked until 32000; then claimed again with a new token. */
    cr_assert_eq(claim1(c, 31999, "jobs", 1, 30000, "w-2", BIG, x + 1, 1), 0);
    cr_assert_eq(claim1(c, 32000, "jobs", 1, 10000, "w-2", BIG, x + 1, 1), 1);
    cr_assert_eq(x[1].claims, 2);
    cr_assert_eq(x[1].lock, 42000);
    cr_assert_neq(memcmp(x[1].token, x[0].token, 16), 0, "a fresh token");
    cr_assert_str_eq(one(look, "SELECT worker_id FROM berth.tasks"), "w-2");
    pgconn_close(look);
    pgconn_close(c);
}

Test(claim1, keeps_to_n_and_max_bytes_but_always_takes_one)
{
    char uri[256];
    PGconn *c = ops_db("claim_budget", uri, sizeof uri), *look = pgtmp_connect(uri);
    char pl[100 + 1];
    memset(pl, 'x', 100);
    pl[100] = '\0';
    item it[6];
    int w[6];
    for (int i = 0; i < 6; i++)
        it[i] = (item){.k = i + 1, .payload = pl};
    submit(c, 1000, it, 6, HORIZON, w);
    claimed x[8];
    cr_assert_eq(claim1(c, 2000, "t", 10, 30000, "w", 250, x, 8), 2, "100 + 100 <= 250");
    cr_assert_str_eq(ks(x, 2), "1,2");
    cr_assert_str_eq(one(look, "SELECT claims || '/' || (lock_expires_at IS NULL) FROM "
                               "berth.tasks WHERE get_byte(uuid_send(id), 15) = 3"),
                     "0/true", "a row past the budget is not claimed");
    cr_assert_eq(claim1(c, 2000, "t", 10, 30000, "w", 10, x, 8), 1, "always one");
    cr_assert_str_eq(ks(x, 1), "3");
    cr_assert_eq(claim1(c, 2000, "t", 1, 30000, "w", BIG, x, 8), 1, "n = 1");
    cr_assert_str_eq(ks(x, 1), "4");
    cr_assert_eq(claim1(c, 2000, "t", 10, 30000, "w", 200, x, 8), 2, "the sum may equal it");
    cr_assert_str_eq(ks(x, 2), "5,6");
    pgconn_close(look);
    pgconn_close(c);
}

/* tasks_update of one task k (set_err true). */
static void update1(PGconn *c, int64_t now, int k, bool lx_null, int64_t lx, int64_t av, int32_t rl,
                    int32_t f, bool term, const char *ec, const char *em, const char *ed,
                    bool set_err)
{
    uint8_t buf[512], id[1][16];
    pgwire_params p;
    const char *ecs[] = {ec}, *ems[] = {em}, *eds[] = {ed};
    const bool lxn[] = {lx_null};
    id_of(id[0], k);
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_uuid_array(&p, (const uint8_t(*)[16])id, NULL, 1);
    pgwire_int8_array(&p, &lx, lxn, 1);
    pgwire_int8_array(&p, &av, NULL, 1);
    pgwire_int4_array(&p, &rl, NULL, 1);
    pgwire_int4_array(&p, &f, NULL, 1);
    pgwire_bool_array(&p, &term, NULL, 1);
    pgwire_text_array(&p, ecs, 1);
    pgwire_text_array(&p, ems, 1);
    pgwire_text_array(&p, eds, 1);
    pgwire_bool_array(&p, &set_err, NULL, 1);
    PQclear(turn1(c, now, "tasks_update", &p));
}

Test(claim1, leaves_delayed_terminal_and_locked_tasks)
{
    char uri[256];
    PGconn *c = ops_db("claim_leaves", uri, sizeof uri);
    const item it[] = {
        {.k = 1, .delay_set = true, .delay = 5000},
        {.k = 2},
        {.k = 3},
        {.k = 4, .topic = "other"},
    };
    int w[4];
    submit(c, 1000, it, 4, HORIZON, w);
    update1(c, 1000, 2, true, 0, 1000, 0, 4, true, "E", "m", NULL, true); /* terminal */
    claimed x[4];
    cr_assert_eq(claim1(c, 1000, "t", 1, 10000, "w", BIG, x, 4), 1);
    cr_assert_str_eq(ks(x, 1), "3", "the terminal task is not taken");
    cr_assert_eq(claim1(c, 2000, "t", 10, 10000, "w", BIG, x, 4), 0,
                 "delayed, terminal and locked: nothing");
    cr_assert_eq(claim1(c, 6000, "t", 10, 10000, "w", BIG, x, 4), 1);
    cr_assert_str_eq(ks(x, 1), "1", "the delay is over");
    cr_assert_eq(claim1(c, 11000, "t", 10, 10000, "w", BIG, x, 4), 1);
    cr_assert_str_eq(ks(x, 1), "3", "its lock expired");
    cr_assert_eq(x[0].claims, 2);
    cr_assert_eq(claim1(c, 99000, "t", 10, 10000, "w", BIG, x, 4), 2);
    cr_assert_str_eq(ks(x, 2), "1,3", "never the terminal one");
    pgconn_close(c);
}

Test(claim1, skips_rows_another_transaction_holds_without_waiting)
{
    char uri[256];
    PGconn *c = ops_db("claim_skip", uri, sizeof uri), *holder = pgtmp_connect(uri);
    plain_tasks(c, 1000, "t", 1, 3);
    pgtmp_exec(holder, "BEGIN");
    pgtmp_exec(holder, "SELECT 1 FROM berth.tasks WHERE get_byte(uuid_send(id), 15) = 1 "
                       "FOR UPDATE");
    claimed x[4];
    uint64_t t0 = pgturn_mono_ms();
    cr_assert_eq(claim1(c, 2000, "t", 2, 30000, "w", BIG, x, 4), 2);
    cr_assert_lt(pgturn_mono_ms() - t0, 5000, "waited for the holder");
    cr_assert_str_eq(ks(x, 2), "2,3", "the locked row is skipped");
    cr_assert_eq(claim1(c, 2000, "t", 2, 30000, "w", BIG, x, 4), 0);
    pgtmp_exec(holder, "ROLLBACK");
    cr_assert_eq(claim1(c, 2000, "t", 2, 30000, "w", BIG, x, 4), 1);
    cr_assert_str_eq(ks(x, 1), "1");
    pgconn_close(holder);
    pgconn_close(c);
}

typedef struct stalled {
    PGconn *c;
    pgwire_params *p;
    const char *name;
    int rows; /* -1: failed */
    char message[512];
} stalled;

/* berth.now_ms() waits, once per transaction that sets t.stall, for
 * advisory lock 42: a statement stalled there has its snapshot and has
 * not begun its scan. */
static void stall_now_ms(PGconn *look)
{
    pgtmp_exec(look, "CREATE OR REPLACE FUNCTION berth.now_ms() RETURNS bigint LANGUAGE plpgsql "
                     "STABLE AS $$ BEGIN "
                     "IF current_setting('t.stall', true) = 'on' THEN "
                     "PERFORM set_config('t.stall', 'off', true); "
                     "PERFORM pg_advisory_xact_lock(42); END IF; "
                     "RETURN coalesce(nullif(current_setting('berth.clock_ms', true), '')::bigint, "
                     "(extract(epoch FROM transaction_timestamp()) * 1000)::bigint); END $$");
}

/* On a plain connection: a turn whose statement stalls in its first
 * now_ms() (see the test below), then commits. */
static void *stalled_main(void *arg)
{
    stalled *s = arg;
    PGresult *r = PQexec(s->c, "BEGIN; SELECT berth.turn_begin(2000); "
                               "SELECT set_config('t.stall', 'on', true)");
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    s->rows = -1;
    if (!ok)
        return NULL;
    r = PQexecPrepared(s->c, s->name, s->p->n, s->p->values, s->p->lengths, s->p->formats, 1);
    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        s->rows = PQntuples(r);
    snprintf(s->message, sizeof s->message, "%s", PQresultErrorMessage(r));
    PQclear(r);
    r = PQexec(s->c, "COMMIT");
    PQclear(r);
    return NULL;
}

/* Runs statement name (with p) on b stalled after its snapshot, while c
 * claims the topic's task and commits; the rows b's statement answered. */
static int claim_during_stall(PGconn *b, const char *name, pgwire_params *p, PGconn *c,
                              PGconn *look, PGconn *holder)
{
    char sql[256];
    pgtmp_exec(holder, "SELECT pg_advisory_lock(42)");
    stalled s = {.c = b, .p = p, .name = name};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, stalled_main, &s), 0);
    snprintf(sql, sizeof sql,
             "SELECT count(*) > 0 FROM pg_locks WHERE pid = %d AND locktype = 'advisory' "
             "AND NOT granted",
             PQbackendPID(b));
    bool stalled_seen = wait_for(look, sql);
    claimed x[2];
    size_t got = stalled_seen ? claim1(c, 2000, "t", 1, 30000, "a", BIG, x, 2) : 0;
    pgtmp_exec(holder, "SELECT pg_advisory_unlock(42)");
    pthread_join(th, NULL);
    cr_assert(stalled_seen, "the statement never stalled");
    cr_assert_eq(got, 1, "the other connection claims it meanwhile");
    cr_assert_geq(s.rows, 0, "%s", s.message);
    return s.rows;
}

Test(claim1, a_task_claimed_and_committed_after_its_snapshot_is_not_taken_again)
{
    char uri[256];
    PGconn *c = ops_db("claim_epq", uri, sizeof uri), *look = pgtmp_connect(uri);
    PGconn *holder = pgtmp_connect(uri);
    stall_now_ms(look);
    PGconn *b = plain_conn(uri);
    PGresult *r = PQprepare(b, "t_peek",
                            "SELECT id FROM berth.tasks WHERE topic = $1::text AND NOT terminal "
                            "AND fetchable_at <= berth.now_ms()",
                            0, NULL);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    /* One plan for each, made before the stall (a custom plan would
     * evaluate now_ms() while planning, before the snapshot). */
    pgtmp_exec(b, "SET plan_cache_mode = force_generic_plan");
    uint8_t bp[256], bq[64];
    pgwire_params p, q;
    pgwire_params_init(&p, bp, sizeof bp);
    pgwire_text(&p, "t");
    pgwire_int4(&p, 1);
    pgwire_int8(&p, 30000);
    pgwire_text(&p, "b");
    pgwire_int8(&p, BIG);
    pgwire_params_init(&q, bq, sizeof bq);
    pgwire_text(&q, "t");
    pgtmp_exec(b, "BEGIN");
    PQclear(plain_exec(b, "claim1", &p));
    PQclear(plain_exec(b, "t_peek", &q));
    pgtmp_exec(b, "ROLLBACK");

    /* The control: a plain read stalled the same way still sees the task
     * ready (its snapshot is from before the other claim committed). */
    plain_tasks(c, 1000, "t", 1, 1);
    cr_assert_eq(claim_during_stall(b, "t_peek", &q, c, look, holder), 1);
    /* The claim re-checks the row's new version and drops it. */
    plain_tasks(c, 1000, "t", 2, 1);
    cr_assert_eq(claim_during_stall(b, "claim1", &p, c, look, holder), 0,
                 "taken twice: the claim did not re-check the committed claim");
    cr_assert_str_eq(one(look, "SELECT string_agg(worker_id || '/' || claims, ',') FROM "
                               "berth.tasks WHERE get_byte(uuid_send(id), 15) = 2"),
                     "a/1");
    pgconn_close(b);
    pgconn_close(holder);
    pgconn_close(look);
    pgconn_close(c);
}

Test(claim1, two_connections_racing_for_one_task_take_it_once)
{
    char uri[256];
    PGconn *c = ops_db("claim_race", uri, sizeof uri), *c2 = turn_conn(uri);
    uint8_t buf[256];
    pgwire_params p;
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_text(&p, "t");
    pgwire_int4(&p, 1);
    pgwire_int8(&p, 30000);
    pgwire_text(&p, "w");
    pgwire_int8(&p, BIG);
    int wins[2] = {0, 0};
    for (int round = 0; round < 20; round++) {
        plain_tasks(c, 1000 + round, "t", round + 1, 1);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        racer r[2] = {{.c = c, .now = 5000, .name = "claim1", .p = &p, .go = &go},
                      {.c = c2, .now = 5000, .name = "claim1", .p = &p, .go = &go}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            cr_assert_eq(pthread_create(&th[i], NULL, racer_main, &r[i]), 0);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&go);
        int taken = 0;
        for (int i = 0; i < 2; i++) {
            cr_assert_eq(r[i].outcome, PGTURN_COMMITTED, "round %d: %s", round, r[i].message);
            claimed x[2];
            size_t n = read_claim(r[i].result, x, 2);
            PQclear(r[i].result);
            if (n == 1) {
                cr_assert_eq(x[0].id, round + 1);
                cr_assert_eq(x[0].claims, 1, "round %d: claimed twice", round);
                wins[i]++;
            }
            taken += (int)n;
        }
        cr_assert_eq(taken, 1, "round %d: taken %d times", round, taken);
    }
    cr_assert_eq(wins[0] + wins[1], 20);
    pgconn_close(c2);
    pgconn_close(c);
}

/* claim_many for fetches (n, lock_ms, worker) at once: "i:k,k;i:k" of
 * the task numbers each fetch got, in fetch and then claim order. */
static const char *claim_many(PGconn *c, int64_t now, const char *topic, const int32_t *n,
                              const int64_t *locks, const char *const *workers, size_t nf,
                              int64_t max_bytes)
{
    static char out[256];
    uint8_t buf[1024];
    pgwire_params p;
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_text(&p, topic);
    pgwire_int4_array(&p, n, NULL, nf);
    pgwire_int8_array(&p, locks, NULL, nf);
    pgwire_text_array(&p, workers, nf);
    pgwire_int8(&p, max_bytes);
    PGresult *r = turn1(c, now, "claim_many", &p);
    cr_assert_eq(PQnfields(r), 17, "i, then claim1's 16 columns");
    int got[8][8] = {{0}};
    for (int row = 0; row < PQntuples(r); row++) {
        int32_t i;
        int64_t k, lock;
        uint8_t id[16];
        cr_assert_eq(pgwire_get_int4(r, row, 0, &i), BERTH_OK);
        cr_assert_eq(pgwire_get_int8(r, row, 1, &k), BERTH_OK);
        cr_assert_eq(pgwire_get_uuid(r, row, 2, id), BERTH_OK);
        cr_assert_eq(pgwire_get_int8(r, row, 5, &lock), BERTH_OK);
        cr_assert(i >= 1 && (size_t)i <= nf && k >= 1 && k <= 8);
        cr_assert_eq(lock, now + locks[i - 1], "each fetch's own lock");
        got[i - 1][k - 1] = k_of(id);
    }
    PQclear(r);
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < nf; i++) {
        len += (size_t)snprintf(out + len, sizeof out - len, "%s%zu:", i ? ";" : "", i + 1);
        for (int k = 0; k < 8 && got[i][k]; k++)
            len += (size_t)snprintf(out + len, sizeof out - len, "%s%d", k ? "," : "", got[i][k]);
    }
    return out;
}

Test(claim_many, deals_the_tasks_out_in_fetch_order_each_with_its_lock_and_budget)
{
    char uri[256];
    PGconn *c = ops_db("claim_many", uri, sizeof uri), *look = pgtmp_connect(uri);
    char pl[100 + 1];
    memset(pl, 'x', 100);
    pl[100] = '\0';
    item it[9];
    int w[9];
    for (int i = 0; i < 9; i++)
        it[i] = (item){.k = i + 1, .payload = pl};
    submit(c, 1000, it, 9, HORIZON, w);
    const char *const workers[] = {"a", "b", "c", "d"};
    const int32_t n[] = {3, 1, 4, 5};
    const int64_t locks[] = {30000, 20000, 1000, 30000};
    cr_assert_str_eq(claim_many(c, 2000, "t", n, locks, workers, 4, 250), "1:1,2;2:4;3:5,6;4:9",
                     "three fit no budget of 250: each fetch stops at two, its first always "
                     "taken; the rows past a budget are dealt to nobody");
    cr_assert_str_eq(one(look, "SELECT string_agg(worker_id, '' ORDER BY seq) FROM berth.tasks "
                               "WHERE worker_id IS NOT NULL"),
                     "aabccd", "each task claimed for its own fetch's worker");
    cr_assert_str_eq(one(look, "SELECT count(*) FROM berth.tasks WHERE lock_expires_at IS NULL"),
                     "3", "3, 7 and 8: past their fetch's budget, left as they were");
    const int32_t n2[] = {2, 2};
    cr_assert_str_eq(claim_many(c, 2500, "t", n2, locks, workers, 2, 1000), "1:3,7;2:8",
                     "fewer than asked: the first fetch first");
    pgconn_close(look);
    pgconn_close(c);
}

Test(claimk, merges_the_topics_in_claim_order)
{
    char uri[256];
    PGconn *c = ops_db("claimk_merge", uri, sizeof uri), *holder = pgtmp_connect(uri);
    const item it[] = {
        {.k = 1, .topic = "a", .payload = "xx", .prio = 3},
        {.k = 2, .topic = "a", .payload = "xx", .prio = 1},
        {.k = 3, .topic = "b", .payload = "xx", .prio = 2},
        {.k = 4, .topic = "b", .payload = "xx", .prio = 0},
        {.k = 5, .topic = "c", .payload = "xx", .prio = 0},                  /* not asked */
        {.k = 6, .topic = "a", .prio = 0, .delay_set = true, .delay = 9000}, /* not yet */
    };
    int w[6];
    submit(c, 1000, it, 6, HORIZON, w);
    const char *ab[] = {"a", "b"};
    claimed x[8];
    /* 4 is held by another transaction: skipped, the next ones taken. */
    pgtmp_exec(holder, "BEGIN");
    pgtmp_exec(holder, "SELECT 1 FROM berth.tasks WHERE get_byte(uuid_send(id), 15) = 4 "
                       "FOR UPDATE");
    cr_assert_eq(claimk(c, 2000, ab, 2, 2, 30000, "w", BIG, x, 8), 2);
    cr_assert_str_eq(ks(x, 2), "2,3");
    cr_assert(strcmp(x[0].topic, "a") == 0 && strcmp(x[1].topic, "b") == 0);
    cr_assert_eq(x[1].lock, 32000);
    pgtmp_exec(holder, "ROLLBACK");
    cr_assert_eq(claimk(c, 2000, ab, 2, 3, 30000, "w", 1, x, 8), 1, "always one");
    cr_assert_str_eq(ks(x, 1), "4");
    cr_assert_eq(claimk(c, 2000, ab, 2, 3, 30000, "w", BIG, x, 8), 1);
    cr_assert_str_eq(ks(x, 1), "1");
    cr_assert_eq(claimk(c, 2000, ab, 2, 3, 30000, "w", BIG, x, 8), 0);
    /* Across the topics' priorities, and n over all of them. */
    const item more[] = {
        {.k = 7, .topic = "a", .prio = 5},  {.k = 8, .topic = "b", .prio = 4},
        {.k = 9, .topic = "a", .prio = 4},  {.k = 10, .topic = "b", .prio = 6},
        {.k = 11, .topic = "c", .prio = 0},
    };
    submit(c, 3000, more, 5, HORIZON, w);
    const char *abc[] = {"b", "a", "c"};
    cr_assert_eq(claimk(c, 4000, abc, 3, 4, 30000, "w", BIG, x, 8), 4);
    cr_assert_str_eq(ks(x, 4), "5,11,8,9", "priority, then fetchable_at, then seq");
    cr_assert_eq(claimk(c, 4000, abc, 3, 4, 30000, "w", BIG, x, 8), 2);
    cr_assert_str_eq(ks(x, 2), "7,10");
    pgconn_close(holder);
    pgconn_close(c);
}

/* ---- guarded requests ---- */

static const colspec guard_cols[] = {
    {"id", PGWIRE_UUID},           {"topic", PGWIRE_TEXT},        {"terminal", PGWIRE_BOOL},
    {"worker_id", PGWIRE_TEXT},    {"lock_token", PGWIRE_UUID},   {"lock_expires_at", PGWIRE_INT8},
    {"claims", PGWIRE_INT4},       {"failures", PGWIRE_INT4},     {"retries_left", PGWIRE_INT4},
    {"available_at", PGWIRE_INT8}, {"created_at", PGWIRE_INT8},   {"priority", PGWIRE_INT8},
    {"instance_id", PGWIRE_UUID},  {"call_attempt", PGWIRE_INT4}, {"err_code", PGWIRE_TEXT},
    {"err_message", PGWIRE_TEXT},  {"err_details", PGWIRE_TEXT},  {"deployment", PGWIRE_INT4},
};

/* guard_read's row as text: its columns ':'-joined, NULL as '-', the id as
 * k, the token as whether it is set. */
static void guard_row(const PGresult *r, int row, char *out, size_t len)
{
    size_t used = 0;
    for (int col = 0; col < 17; col++) {
        char v[64];
        if (pgwire_isnull(r, row, col)) {
            snprintf(v, sizeof v, "-");
        } else if (col == 0) {
            uint8_t id[16];
            cr_assert_eq(pgwire_get_uuid(r, row, col, id), BERTH_OK);
            snprintf(v, sizeof v, "%d", k_of(id));
        } else if (col == 4 || col == 12) {
            snprintf(v, sizeof v, "uuid");
        } else if (col == 2) {
            bool b;
            cr_assert_eq(pgwire_get_bool(r, row, col, &b), BERTH_OK);
            snprintf(v, sizeof v, "%s", b ? "T" : "F");
        } else if (PQftype(r, col) == PGWIRE_INT8) {
            int64_t i8;
            cr_assert_eq(pgwire_get_int8(r, row, col, &i8), BERTH_OK);
            snprintf(v, sizeof v, "%lld", (long long)i8);
        } else if (PQftype(r, col) == PGWIRE_INT4) {
            int32_t i4;
            cr_assert_eq(pgwire_get_int4(r, row, col, &i4), BERTH_OK);
            snprintf(v, sizeof v, "%d", i4);
        } else {
            const char *s;
            size_t n;
            cr_assert_eq(pgwire_get_text(r, row, col, &s, &n), BERTH_OK);
            snprintf(v, sizeof v, "%.*s", (int)n, s);
        }
        used += (size_t)snprintf(out + used, len - used, "%s%s", col ? ":" : "", v);
        cr_assert_lt(used, len);
    }
}

static void ids_params(pgwire_params *p, uint8_t *buf, size_t cap, const int *k, size_t n)
{
    uint8_t ids[MAXI][16];
    for (size_t i = 0; i < n; i++)
        id_of(ids[i], k[i]);
    pgwire_params_init(p, buf, cap);
    pgwire_uuid_array(p, (const uint8_t(*)[16])ids, NULL, n);
}

Test(guard_read, answers_in_id_order_and_locks_the_rows_until_commit)
{
    char uri[256], row[512];
    PGconn *c = ops_db("guard_read", uri, sizeof uri), *g = plain_conn(uri);
    PGconn *other = pgtmp_connect(uri);
    const item it[] = {{.k = 3, .topic = "a", .prio = 4},
                       {.k = 1, .topic = "a"},
                       {.k = 2, .topic = "b"},
                       {.k = 4, .topic = "a"}};
    int w[4];
    submit(c, 1000, it, 4, HORIZON, w);
    claimed x[2];
    cr_assert_eq(claim1(c, 2000, "b", 1, 30000, "w-9", BIG, x, 2), 1);
    update1(c, 2000, 3, true, 0, 7000, 2, 1, false, "E_X", "it broke", NULL, true);

    uint8_t buf[256];
    pgwire_params p;
    const int want[] = {1, 2, 3, 9}; /* sorted; 9 does not exist */
    ids_params(&p, buf, sizeof buf, want, 4);
    pgtmp_exec(g, "BEGIN");
    pgtmp_exec(g, "SELECT berth.turn_begin(3000)");
    PGresult *r = plain_exec(g, "guard_read", &p);
    assert_columns(r, guard_cols, 18, "guard_read");
    cr_assert_eq(PQntuples(r), 3, "the absent id is no row");
    guard_row(r, 0, row, sizeof row);
    cr_assert_str_eq(row, "1:a:F:-:-:-:0:0:3:1000:1000:0:-:-:-:-:-");
    guard_row(r, 1, row, sizeof row);
    cr_assert_str_eq(row, "2:b:F:w-9:uuid:32000:1:0:3:1000:1000:0:-:-:-:-:-");
    uint8_t token[16];
    cr_assert_eq(pgwire_get_uuid(r, 1, 4, token), BERTH_OK);
    cr_assert_eq(memcmp(token, x[0].token, 16), 0, "the claim's token");
    guard_row(r, 2, row, sizeof row);
    cr_assert_str_eq(row, "3:a:F:-:-:-:0:1:2:7000:1000:4:-:-:E_X:it broke:-");
    PQclear(r);

    /* Held: another transaction's update of a row read waits (here: gives
     * up after lock_timeout); a row not read is free. */
    pgtmp_exec(other, "SET lock_timeout = '100ms'");
    r = PQexec(other, "UPDATE berth.tasks SET priority = 9 WHERE get_byte(uuid_send(id), 15) = 2");
    cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
    cr_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "55P03");
    PQclear(r);
    pgtmp_exec(other, "UPDATE berth.tasks SET priority = 9 WHERE get_byte(uuid_send(id), 15) = 4");
    pgtmp_exec(g, "COMMIT");
    pgtmp_exec(other, "UPDATE berth.tasks SET priority = 9 WHERE get_byte(uuid_send(id), 15) = 2");

    /* The same through a turn. */
    r = turn1(c, 3000, "guard_read", &p);
    assert_columns(r, guard_cols, 18, "guard_read");
    cr_assert_eq(PQntuples(r), 3);
    guard_row(r, 1, row, sizeof row);
    cr_assert_str_eq(row, "2:b:F:w-9:uuid:32000:1:0:3:1000:1000:9:-:-:-:-:-");
    PQclear(r);
    pgconn_close(other);
    pgconn_close(g);
    pgconn_close(c);
}

/* ---- complete_fast (pgguard.h, ONE ROUND) ---- */

typedef struct fast_item {
    int k;
    const uint8_t *token;
    const char *worker;
} fast_item;

static void fast_params(pgwire_params *p, uint8_t *buf, size_t cap, const fast_item *it, size_t n)
{
    uint8_t ids[MAXI][16], tokens[MAXI][16];
    const char *workers[MAXI];
    for (size_t i = 0; i < n; i++) {
        id_of(ids[i], it[i].k);
        memcpy(tokens[i], it[i].token, 16);
        workers[i] = it[i].worker;
    }
    pgwire_params_init(p, buf, cap);
    pgwire_uuid_array(p, (const uint8_t(*)[16])ids, NULL, n);
    pgwire_uuid_array(p, (const uint8_t(*)[16])tokens, NULL, n);
    pgwire_text_array(p, workers, n);
}

static const colspec fast_cols[] = {
    {"id", PGWIRE_UUID},
    {"deleted", PGWIRE_BOOL},
    {"topic", PGWIRE_TEXT},
    {"terminal", PGWIRE_BOOL},
    {"worker_id", PGWIRE_TEXT},
    {"lock_token", PGWIRE_UUID},
    {"lock_expires_at", PGWIRE_INT8},
    {"undecided", PGWIRE_BOOL},
    {"created_at", PGWIRE_INT8},
};

/* complete_fast's rows as "k:D:topic:@created_at" (deleted) or
 * "k:S:topic:terminal:worker:token:expires" (its lock state), ' '-joined
 * in k order. */
static const char *fast_rows(const PGresult *r, const uint8_t *const *tokens)
{
    static char out[MAXI * 129];
    char rows[MAXI][128];
    int n = PQntuples(r);
    cr_assert_leq(n, MAXI);
    for (int i = 0; i < n; i++) {
        uint8_t id[16], tok[16];
        bool deleted, terminal = false;
        const char *s;
        size_t len;
        cr_assert_eq(pgwire_get_uuid(r, i, 0, id), BERTH_OK);
        cr_assert_eq(pgwire_get_bool(r, i, 1, &deleted), BERTH_OK);
        cr_assert_eq(pgwire_get_text(r, i, 2, &s, &len), BERTH_OK);
        int k = k_of(id);
        int used =
            snprintf(rows[i], sizeof rows[i], "%d:%s:%.*s", k, deleted ? "D" : "S", (int)len, s);
        if (deleted) {
            int64_t at = -1;
            cr_assert_eq(pgwire_get_int8(r, i, 8, &at), BERTH_OK);
            snprintf(rows[i] + used, sizeof rows[i] - (size_t)used, ":@%lld", (long long)at);
        } else {
            cr_assert(pgwire_isnull(r, i, 8), "created_at only for a deleted task");
            cr_assert_eq(pgwire_get_bool(r, i, 3, &terminal), BERTH_OK);
            const char *w = "-";
            size_t wl = 1;
            if (!pgwire_isnull(r, i, 4))
                cr_assert_eq(pgwire_get_text(r, i, 4, &w, &wl), BERTH_OK);
            const char *tk = "-";
            if (!pgwire_isnull(r, i, 5)) {
                cr_assert_eq(pgwire_get_uuid(r, i, 5, tok), BERTH_OK);
                tk = "other";
                for (int j = 0; tokens[j] != NULL; j++)
                    if (memcmp(tok, tokens[j], 16) == 0)
                        tk = j == 0 ? "t0" : j == 1 ? "t1" : j == 2 ? "t2" : "tN";
            }
            int64_t lx = -1;
            if (!pgwire_isnull(r, i, 6))
                cr_assert_eq(pgwire_get_int8(r, i, 6, &lx), BERTH_OK);
            snprintf(rows[i] + used, sizeof rows[i] - (size_t)used, ":%s:%.*s:%s:%lld",
                     terminal ? "T" : "F", (int)wl, w, tk, (long long)lx);
        }
    }
    out[0] = '\0';
    for (int k = 0; k < 256; k++)
        for (int i = 0; i < n; i++)
            if (atoi(rows[i]) == k)
                snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", out[0] ? " " : "",
                         rows[i]);
    return out;
}

Test(complete_fast, deletes_what_its_live_lock_holds_and_answers_the_rest_their_lock_state)
{
    char uri[256];
    PGconn *c = ops_db("complete_fast", uri, sizeof uri), *look = pgtmp_connect(uri);
    plain_tasks(c, 1000, "t", 1, 5);
    claimed x[4];
    cr_assert_eq(claim1(c, 2000, "t", 4, 30000, "w", BIG, x, 4), 4); /* 1..4; 5 never */
    /* 3's lock ends at 2500 */
    update1(c, 2000, 3, false, 2500, 1000, 0, 0, false, NULL, NULL, NULL, false);
    uint8_t stranger[16] = {7};
    const fast_item it[] = {
        {.k = 1, .token = x[0].token, .worker = "w"}, /* holds it: deleted */
        {.k = 2, .token = x[3].token, .worker = "w"}, /* 4's token: held by another */
        {.k = 3, .token = x[2].token, .worker = "w"}, /* its lock expired at 2500 */
        {.k = 4, .token = x[3].token, .worker = "v"}, /* another worker's name */
        {.k = 5, .token = stranger, .worker = "w"},   /* never claimed */
        {.k = 9, .token = stranger, .worker = "w"},   /* no such task */
    };
    cr_assert(x[0].id == 1 && x[1].id == 2 && x[2].id == 3 && x[3].id == 4);
    uint8_t buf[1024];
    pgwire_params p;
    fast_params(&p, buf, sizeof buf, it, 6);
    PGresult *r = turn1(c, 3000, "complete_fast", &p);
    assert_columns(r, fast_cols, 9, "complete_fast");
    const uint8_t *tokens[] = {x[1].token, x[2].token, x[3].token, NULL};
    cr_assert_str_eq(
        fast_rows(r, tokens),
        "1:D:t:@1000 2:S:t:F:w:t0:32000 3:S:t:F:w:t1:2500 4:S:t:F:w:t2:32000 5:S:t:F:-:-:-1",
        "the absent id is no row");
    PQclear(r);
    cr_assert_str_eq(task_ks(look), "2,3,4,5", "only the held lock's task is gone");
    pgconn_close(look);
    pgconn_close(c);
}

/* A turn of complete_fast on c at now: its outcome; SQLSTATE in state. */
static pgturn_outcome fast_turn(PGconn *c, int64_t now, const pgwire_params *p, char state[6])
{
    pgturn_stmt s = {.name = "complete_fast", .params = p};
    pgturn t = {.conn = c, .clock_set = true, .clock_ms = now, .stmts = &s, .n = 1};
    cr_assert_eq(pgturn_run(&t, pgturn_mono_ms() + 20000), BERTH_OK);
    memcpy(state, t.sqlstate, 6);
    pgturn_clear_results(&t);
    return t.outcome;
}

Test(complete_fast, a_calls_task_fails_the_turn_with_BR001_and_nothing_is_kept)
{
    char uri[256];
    PGconn *c = ops_db("complete_fast_call", uri, sizeof uri), *look = pgtmp_connect(uri);
    plain_tasks(c, 1000, "t", 1, 2);
    claimed x[2];
    cr_assert_eq(claim1(c, 2000, "t", 2, 30000, "w", BIG, x, 2), 2);
    pgtmp_exec(look, "UPDATE berth.tasks SET instance_id = gen_random_uuid(), call_attempt = 1 "
                     "WHERE get_byte(uuid_send(id), 15) = 2");
    const fast_item it[] = {{.k = 1, .token = x[0].token, .worker = "w"},
                            {.k = 2, .token = x[1].token, .worker = "w"}};
    uint8_t buf[512];
    pgwire_params p;
    fast_params(&p, buf, sizeof buf, it, 2);
    char state[6];
    cr_assert_eq(fast_turn(c, 3000, &p, state), PGTURN_ABORTED);
    cr_assert_str_eq(state, "BR001");
    cr_assert_str_eq(task_ks(look), "1,2", "the turn kept nothing: 1 is not deleted either");
    /* A call's task whose lock is not the caller's is a verdict, not BR001. */
    const fast_item other[] = {{.k = 2, .token = x[0].token, .worker = "w"}};
    fast_params(&p, buf, sizeof buf, other, 1);
    PGresult *r = turn1(c, 3000, "complete_fast", &p);
    cr_assert_eq(PQntuples(r), 1);
    PQclear(r);
    pgconn_close(look);
    pgconn_close(c);
}

Test(complete_fast, a_lock_released_after_its_snapshot_fails_the_turn_with_BR001)
{
    char uri[256];
    PGconn *c = ops_db("complete_fast_epq", uri, sizeof uri), *look = pgtmp_connect(uri);
    PGconn *holder = pgtmp_connect(uri);
    stall_now_ms(look);
    plain_tasks(c, 1000, "t", 1, 1);
    claimed x[1];
    cr_assert_eq(claim1(c, 2000, "t", 1, 30000, "w", BIG, x, 1), 1);
    PGconn *b = plain_conn(uri);
    pgtmp_exec(b, "SET plan_cache_mode = force_generic_plan");
    const fast_item it[] = {{.k = 1, .token = x[0].token, .worker = "w"}};
    uint8_t buf[512];
    pgwire_params p;
    fast_params(&p, buf, sizeof buf, it, 1);
    pgtmp_exec(b, "BEGIN"); /* the plan, made before the stall */
    PQclear(plain_exec(b, "complete_fast", &p));
    pgtmp_exec(b, "ROLLBACK");

    pgtmp_exec(holder, "SELECT pg_advisory_lock(42)");
    stalled s = {.c = b, .p = &p, .name = "complete_fast"};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, stalled_main, &s), 0);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) > 0 FROM pg_locks WHERE pid = %d AND locktype = 'advisory' "
             "AND NOT granted",
             PQbackendPID(b));
    bool stalled_seen = wait_for(look, sql);
    if (stalled_seen) /* released meanwhile: fetchable from 2000 */
        update1(c, 2000, 1, false, 2000, 1000, 0, 0, false, NULL, NULL, NULL, false);
    pgtmp_exec(holder, "SELECT pg_advisory_unlock(42)");
    pthread_join(th, NULL);
    cr_assert(stalled_seen, "the statement never stalled");
    cr_assert_eq(s.rows, -1, "answered from its snapshot as if it held the lock");
    cr_assert(strstr(s.message, "two-round") != NULL, "%s", s.message);
    cr_assert_str_eq(task_ks(look), "1");
    pgconn_close(b);
    pgconn_close(holder);
    pgconn_close(look);
    pgconn_close(c);
}

Test(tasks_delete, removes_the_tasks_named)
{
    char uri[256];
    PGconn *c = ops_db("tasks_delete", uri, sizeof uri), *look = pgtmp_connect(uri);
    plain_tasks(c, 1000, "t", 1, 3);
    uint8_t buf[256];
    pgwire_params p;
    const int del[] = {1, 3, 9};
    ids_params(&p, buf, sizeof buf, del, 3);
    PGresult *r = turn1(c, 2000, "tasks_delete", &p);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK);
    cr_assert_str_eq(PQcmdTuples(r), "2");
    PQclear(r);
    cr_assert_str_eq(task_ks(look), "2");
    pgconn_close(look);
    pgconn_close(c);
}

Test(tasks_update, writes_each_row_and_keeps_the_error_when_told)
{
    char uri[256];
    PGconn *c = ops_db("tasks_update", uri, sizeof uri), *look = pgtmp_connect(uri);
    plain_tasks(c, 1000, "t", 1, 3);
    const char *state = "SELECT string_agg(concat_ws(':', get_byte(uuid_send(id), 15), "
                        "coalesce(lock_expires_at::text, '-'), available_at, fetchable_at, "
                        "retries_left, failures, terminal, coalesce(err_code, '-'), "
                        "coalesce(err_message, '-'), coalesce(err_details, '-')), ' ' "
                        "ORDER BY seq) FROM berth.tasks";
    /* Two rows in one statement, one with a NULL lock. */
    uint8_t buf[1024], ids[2][16];
    pgwire_params p;
    id_of(ids[0], 1);
    id_of(ids[1], 2);
    const int64_t lx[] = {9000, 0}, av[] = {5000, 7000};
    const bool lxn[] = {false, true}, term[] = {false, true}, se[] = {true, true};
    const int32_t rl[] = {2, 0}, f[] = {1, 3};
    const char *ec[] = {"E1", "E2"}, *em[] = {"m1", "m2"}, *ed[] = {"d1", NULL};
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_uuid_array(&p, (const uint8_t(*)[16])ids, NULL, 2);
    pgwire_int8_array(&p, lx, lxn, 2);
    pgwire_int8_array(&p, av, NULL, 2);
    pgwire_int4_array(&p, rl, NULL, 2);
    pgwire_int4_array(&p, f, NULL, 2);
    pgwire_bool_array(&p, term, NULL, 2);
    pgwire_text_array(&p, ec, 2);
    pgwire_text_array(&p, em, 2);
    pgwire_text_array(&p, ed, 2);
    pgwire_bool_array(&p, se, NULL, 2);
    PGresult *r = turn1(c, 2000, "tasks_update", &p);
    cr_assert_str_eq(PQcmdTuples(r), "2");
    PQclear(r);
    cr_assert_str_eq(one(look, state), "1:9000:5000:9000:2:1:f:E1:m1:d1 "
                                       "2:-:7000:7000:0:3:t:E2:m2:- "
                                       "3:-:1000:1000:3:0:f:-:-:-");
    /* set_err false: the error stays; the rest is written. */
    update1(c, 3000, 1, true, 0, 6000, 1, 2, false, "X", "X", "X", false);
    cr_assert_str_eq(one(look, state), "1:-:6000:6000:1:2:f:E1:m1:d1 "
                                       "2:-:7000:7000:0:3:t:E2:m2:- "
                                       "3:-:1000:1000:3:0:f:-:-:-");
    /* set_err true with NULLs clears it. */
    update1(c, 3000, 1, false, 8000, 6000, 1, 2, false, NULL, NULL, NULL, true);
    cr_assert_str_eq(one(look, "SELECT concat_ws(':', lock_expires_at, fetchable_at, "
                               "coalesce(err_code, '-'), coalesce(err_message, '-')) FROM "
                               "berth.tasks WHERE get_byte(uuid_send(id), 15) = 1"),
                     "8000:8000:-:-");
    pgconn_close(look);
    pgconn_close(c);
}

Test(incidents_insert, writes_a_row_per_item_at_the_turns_now)
{
    char uri[256];
    PGconn *c = ops_db("incidents", uri, sizeof uri), *look = pgtmp_connect(uri);
    uint8_t buf[512], ids[3][16];
    pgwire_params p;
    id_of(ids[0], 7);
    id_of(ids[1], 5);
    id_of(ids[2], 6);
    const int32_t kind[] = {2, 1, 300};
    const char *topic[] = {"a", "b", "c"}, *code[] = {"E_A", "E_B", NULL},
               *msg[] = {"first", "second", "third"};
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_int4_array(&p, kind, NULL, 3);
    pgwire_uuid_array(&p, (const uint8_t(*)[16])ids, NULL, 3);
    pgwire_text_array(&p, topic, 3);
    pgwire_text_array(&p, code, 3);
    pgwire_text_array(&p, msg, 3);
    PGresult *r = turn1(c, 4242, "incidents_insert", &p);
    cr_assert_str_eq(PQcmdTuples(r), "3");
    PQclear(r);
    cr_assert_str_eq(one(look, "SELECT string_agg(concat_ws(':', at, kind, pg_typeof(kind), "
                               "get_byte(uuid_send(ref), 15), topic, coalesce(code, '-'), "
                               "message), ' ' ORDER BY seq) FROM berth.incidents"),
                     "4242:2:smallint:7:a:E_A:first 4242:1:smallint:5:b:E_B:second "
                     "4242:300:smallint:6:c:-:third");
    pgconn_close(look);
    pgconn_close(c);
}

/* ---- long polls ---- */

static int by_text(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* topics_due over topics at now: "topic=next_due/ready" each, sorted by
 * topic. */
static const char *topics_due(PGconn *c, int64_t now, const char *const *topics, size_t n)
{
    static char s[512];
    static const colspec cols[] = {
        {"topic", PGWIRE_TEXT}, {"next_due", PGWIRE_INT8}, {"ready", PGWIRE_BOOL}};
    uint8_t buf[512];
    pgwire_params p;
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_text_array(&p, topics, n);
    PGresult *r = turn1(c, now, "topics_due", &p);
    assert_columns(r, cols, 3, "topics_due");
    cr_assert_eq((size_t)PQntuples(r), n, "one row per topic");
    cr_assert_leq(n, 8);
    char rows[8][64];
    for (int row = 0; row < PQntuples(r); row++) {
        const char *t;
        size_t len;
        int64_t due = 0;
        bool ready;
        cr_assert_eq(pgwire_get_text(r, row, 0, &t, &len), BERTH_OK);
        bool none = pgwire_isnull(r, row, 1);
        if (!none)
            cr_assert_eq(pgwire_get_int8(r, row, 1, &due), BERTH_OK);
        cr_assert_eq(pgwire_get_bool(r, row, 2, &ready), BERTH_OK);
        if (none)
            snprintf(rows[row], sizeof rows[row], "%.*s=-/%s", (int)len, t, ready ? "T" : "F");
        else
            snprintf(rows[row], sizeof rows[row], "%.*s=%lld/%s", (int)len, t, (long long)due,
                     ready ? "T" : "F");
    }
    PQclear(r);
    qsort(rows, n, sizeof rows[0], by_text);
    size_t used = 0;
    s[0] = '\0';
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(s + used, sizeof s - used, "%s%s", i ? " " : "", rows[i]);
    return s;
}

Test(topics_due, reports_the_next_due_instant_and_ready_work)
{
    char uri[256];
    PGconn *c = ops_db("topics_due", uri, sizeof uri);
    const item it[] = {
        {.k = 1, .topic = "a"},
        {.k = 2, .topic = "a", .delay_set = true, .delay = 4000},
        {.k = 3, .topic = "b", .delay_set = true, .delay = 2000},
        {.k = 4, .topic = "b"},
        {.k = 5, .topic = "d"},
    };
    int w[5];
    submit(c, 1000, it, 5, HORIZON, w);
    update1(c, 1000, 4, true, 0, 1500, 0, 1, true, "E", "m", NULL, true); /* terminal */
    claimed x[2];
    cr_assert_eq(claim1(c, 1000, "d", 1, 7000, "w", BIG, x, 2), 1); /* locked until 8000 */
    const char *topics[] = {"a", "b", "c", "d"};
    cr_assert_str_eq(topics_due(c, 2000, topics, 4), "a=5000/T b=3000/F c=-/F d=8000/F");
    cr_assert_str_eq(topics_due(c, 5000, topics, 4), "a=-/T b=-/T c=-/F d=8000/F",
                     "due at now is ready, not next");
    cr_assert_str_eq(topics_due(c, 9000, topics, 1), "a=-/T");
    pgconn_close(c);
}

/* ---- plans ---- */

/* EXPLAIN of sql on c, one string. */
static void explain(PGconn *c, const char *sql, char *plan, size_t len)
{
    PGresult *r = NULL;
    cr_assert_eq(pgconn_query(c, sql, 0, NULL, sql, &r, err, sizeof err), BERTH_OK, "%s", err);
    plan[0] = '\0';
    for (int i = 0; i < PQntuples(r); i++) {
        strncat(plan, PQgetvalue(r, i, 0), len - strlen(plan) - 2);
        strcat(plan, "\n");
    }
    PQclear(r);
}

Test(plans, indexes_serve_the_reads_never_a_sequential_scan)
{
    char uri[256], plan[16384];
    PGconn *c = ops_db("plans", uri, sizeof uri), *look = plain_conn(uri);
    /* 5000 tasks over 10 topics, three priorities, some delayed, some
     * locked, some terminal (as test_schema.c's claim plan). */
    pgtmp_exec(look, "INSERT INTO berth.tasks (id, topic, priority, created_at, available_at, "
                     "lock_expires_at, terminal, retries_left, body_bytes, payload) "
                     "SELECT gen_random_uuid(), 't' || (g % 10), (g % 3) * 512, 1000, "
                     "1000 + g * (CASE WHEN g % 5 = 0 THEN 1000 ELSE 1 END), "
                     "CASE WHEN g % 7 = 0 THEN 900000 END, g % 11 = 0, 3, 100, "
                     "decode(repeat('ab', 100), 'hex') FROM generate_series(1, 5000) g");
    pgtmp_exec(look, "ANALYZE berth.tasks");
    pgtmp_exec(look, "SET plan_cache_mode = force_generic_plan");
    static const struct {
        const char *sql, *index;
    } q[] = {
        {"EXPLAIN EXECUTE topics_due('{t1,t2,t3}')", "Index Only Scan using tasks_due on tasks"},
        {"EXPLAIN EXECUTE guard_read('{b3000000-0000-0000-0000-000000000001,"
         "b3000000-0000-0000-0000-000000000002}')",
         "Index Cond: (id = ANY ($1))"},
        {"EXPLAIN EXECUTE claimk('{t1,t2}', 10, 30000, 'w', 1048576)",
         "Index Scan using tasks_claim on tasks"},
        {"EXPLAIN EXECUTE tasks_delete('{b3000000-0000-0000-0000-000000000001}')",
         "Index Cond: (id = ANY ($1))"},
        {"EXPLAIN EXECUTE tasks_update('{b3000000-0000-0000-0000-000000000001}', '{1}', '{1}', "
         "'{1}', '{1}', '{f}', '{a}', '{b}', '{c}', '{t}')",
         "Index Scan using tasks_pkey on tasks t"},
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        explain(look, q[i].sql, plan, sizeof plan);
        cr_assert(strstr(plan, q[i].index) != NULL, "%s:\n%s", q[i].sql, plan);
        cr_assert(strstr(plan, "Seq Scan") == NULL, "%s:\n%s", q[i].sql, plan);
    }
    /* topics_due: both probes are index entries, one per topic. */
    explain(look, q[0].sql, plan, sizeof plan);
    const char *second = strstr(plan, "using tasks_due");
    cr_assert(second != NULL && strstr(second + 1, "using tasks_due") != NULL, "%s", plan);
    pgconn_close(look);
    pgconn_close(c);
}

/* Every statement's generic plan (the one berthd runs: force_generic_plan)
 * on tables with rows enough that a hash join over a whole table looks
 * cheap to the planner: none reads tasks, instances or submit_keys whole,
 * but the counts the operator asks for. A claim that joined its locked
 * rows back to tasks by a hash of the whole table cost 20 ms a call with
 * 50,000 tasks waiting (S2 fell to a third over ten minutes). */
Test(plans, no_statement_reads_a_whole_table_whatever_the_statistics)
{
    char uri[256], plan[32768], sql[1024];
    PGconn *c = ops_db("plans_all", uri, sizeof uri), *look = plain_conn(uri);
    pgtmp_exec(look, "INSERT INTO berth.tasks (id, topic, priority, created_at, available_at, "
                     "lock_expires_at, retries_left, body_bytes, payload) "
                     "SELECT gen_random_uuid(), 't' || (g % 3), 0, 1000, 1000 + g, "
                     "CASE WHEN g % 7 = 0 THEN 900000 END, 3, 100, '\\x00' "
                     "FROM generate_series(1, 50000) g");
    pgtmp_exec(look, "INSERT INTO berth.instances (id, topic, state, created_at, timer_at, "
                     "ended_at, key_topic, key) SELECT gen_random_uuid(), 't', 1 + g % 4, 0, "
                     "CASE WHEN g % 3 = 0 THEN g END, CASE WHEN g % 4 >= 2 THEN g END, 't', "
                     "'k' || g FROM generate_series(1, 20000) g");
    pgtmp_exec(look, "INSERT INTO berth.submit_keys SELECT 's', 't', 'k' || g, "
                     "gen_random_uuid(), g FROM generate_series(1, 20000) g");
    pgtmp_exec(look, "INSERT INTO berth.incidents (at, kind, ref, topic, code, message) "
                     "SELECT g, 1, gen_random_uuid(), 't', 'E', 'm' "
                     "FROM generate_series(1, 20000) g");
    pgtmp_exec(look, "INSERT INTO berth.outbox (id, topic, deployment, priority, created_at, "
                     "due_at, poisoned, flight, body_bytes, payload) SELECT gen_random_uuid(), "
                     "'p' || (g % 3), g % 5, 0, 0, g, g % 9 = 0, CASE WHEN g % 4 = 0 THEN g END, "
                     "1, '\\x00' FROM generate_series(1, 20000) g");
    pgtmp_exec(look, "INSERT INTO berth.inbox SELECT gen_random_uuid(), g, g "
                     "FROM generate_series(1, 20000) g");
    pgtmp_exec(look, "ANALYZE");
    pgtmp_exec(look, "SET plan_cache_mode = force_generic_plan");
    static const char *const whole[] = {
        "turn_begin",  /* berth.meta: a handful of rows */
        "tasks_count", /* the tests' own count */
        "stats",       /* STATS counts every task by state (the operator's view) */
        "calls_stats", /* ... and every live call */
    };
    size_t checked = 0;
    for (size_t i = 0; i < tab.n; i++) {
        bool exempt = false;
        for (size_t k = 0; k < sizeof whole / sizeof whole[0]; k++)
            exempt |= strcmp(tab.v[i].name, whole[k]) == 0;
        if (exempt)
            continue;
        PGresult *d = PQdescribePrepared(look, tab.v[i].name);
        cr_assert_eq(PQresultStatus(d), PGRES_COMMAND_OK, "%s", tab.v[i].name);
        int np = PQnparams(d);
        PQclear(d);
        size_t used = (size_t)snprintf(sql, sizeof sql, "EXPLAIN EXECUTE %s", tab.v[i].name);
        for (int k = 0; k < np; k++)
            used += (size_t)snprintf(sql + used, sizeof sql - used, "%sNULL", k ? ", " : "(");
        snprintf(sql + used, sizeof sql - used, "%s", np ? ")" : "");
        pgtmp_exec(look, "BEGIN"); /* (EXPLAIN of a write runs nothing; rolled back anyway) */
        explain(look, sql, plan, sizeof plan);
        pgtmp_exec(look, "ROLLBACK");
        /* berth.meta (a handful of rows) and berth.deployments (at most
         * ENGINE_DEPLOYMENTS_MAX) are read whole where the planner likes */
        for (const char *at = plan; (at = strstr(at, "Seq Scan on ")) != NULL; at++) {
            const char *table = at + strlen("Seq Scan on ");
            cr_assert(strncmp(table, "meta", 4) == 0 || strncmp(table, "deployments", 11) == 0,
                      "%s reads a table whole:\n%s", tab.v[i].name, plan);
        }
        checked++;
    }
    cr_assert_geq(checked, 25, "every statement: %zu", checked);
    pgconn_close(look);
    pgconn_close(c);
}

/* turn_begin_routed's three parameters, text: the clock (NULL), the epoch
 * the turn was planned with and whether it locks. */
static PGresult *routed_begin(PGconn *c, const char *epoch, const char *share, bool wait)
{
    const char *v[3] = {NULL, epoch, share};
    if (!wait) {
        cr_assert_eq(PQsendQueryPrepared(c, "turn_begin_routed", 3, v, NULL, NULL, 0), 1);
        return NULL;
    }
    return PQexecPrepared(c, "turn_begin_routed", 3, v, NULL, NULL, 0);
}

static const char *sqlstate_of(const PGresult *r)
{
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    return s != NULL ? s : "00000";
}

/* The routed turn's bracket (pg/pgdeploy.h, THE COPY): an epoch older than
 * the database's fails BR002; a turn that locks holds K_DEPLOY shared to
 * its end (a retire's lock waits for it); and a retire that committed
 * while turn_begin_routed waited for the lock is seen (the epoch is read
 * after the lock, in a snapshot of its own). */
Test(deploy, a_routed_turn_holds_the_lock_and_sees_a_change_made_while_it_waited)
{
    char uri[256];
    PGconn *c = ops_db("routed", uri, sizeof uri);
    PGconn *a = plain_conn(uri), *b = plain_conn(uri);
    pgconn_close(c);
    pgtmp_exec(b, "SELECT berth.deploy_epoch_bump()"); /* epoch 1 */

    pgtmp_exec(a, "BEGIN");
    PGresult *r = routed_begin(a, "0", "f", true);
    cr_assert_str_eq(sqlstate_of(r), "BR002", "%s", PQresultErrorMessage(r));
    PQclear(r);
    pgtmp_exec(a, "ROLLBACK");

    pgtmp_exec(a, "BEGIN");
    r = routed_begin(a, "1", "t", true);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    pgtmp_exec(b, "BEGIN");
    pgtmp_exec(b, "SET LOCAL lock_timeout = '200ms'");
    r = PQexec(b, "SELECT count(*) FROM berth.deploy_lock(NULL)");
    cr_assert_str_eq(sqlstate_of(r), "55P03", "a retire's lock did not wait for the turn");
    PQclear(r);
    pgtmp_exec(b, "ROLLBACK");
    pgtmp_exec(a, "COMMIT");

    /* b holds the lock exclusive; a's turn_begin waits; b bumps the epoch
     * and commits: a's turn_begin, which read the epoch after the lock,
     * fails. */
    pgtmp_exec(b, "BEGIN");
    pgtmp_exec(b, "SELECT count(*) FROM berth.deploy_lock(NULL)");
    pgtmp_exec(a, "BEGIN");
    routed_begin(a, "1", "t", false);
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL);
    pgtmp_exec(b, "SELECT berth.deploy_epoch_bump()");
    pgtmp_exec(b, "COMMIT");
    r = PQgetResult(a);
    cr_assert_str_eq(sqlstate_of(r), "BR002", "the turn missed the change it waited for: %s",
                     PQresultErrorMessage(r));
    PQclear(r);
    while ((r = PQgetResult(a)) != NULL)
        PQclear(r);
    pgtmp_exec(a, "ROLLBACK");
    pgconn_close(a);
    pgconn_close(b);
}
