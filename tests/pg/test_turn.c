/*
 * test_turn.c — pg/pgwire, pg/pgstmt and pg/pgturn against a real
 * PostgreSQL 15: binary parameters and results round-tripped through the
 * server; statements.sql parsed and prepared; a pipelined turn that is one
 * transaction, answers only after COMMIT, aborts cleanly (and tells a
 * re-runnable lock timeout apart), runs on the manual clock, and tells a
 * connection lost before COMMIT from one lost during it.
 *
 * One throwaway cluster for the binary (pgtmp, started by the runner's
 * PRE_ALL hook, stopped by POST_ALL); each test makes its own database.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
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

/* Statements only the tests prepare (before pipeline mode). */
static const char *const test_stmts[][2] = {
    {"t_txid", "SELECT txid_current(), berth.now_ms(), $1::int4"},
    {"t_div", "SELECT 1 / $1::int4"},
    {"t_sleep", "SELECT pg_sleep($1::int4 / 1000.0)"},
    {"t_lock", "SELECT id FROM berth.tasks WHERE id = $1::uuid FOR UPDATE"},
    {"t_def_bad", "INSERT INTO t_def VALUES ($1::int4, $1::int4 + 1000) RETURNING id"},
    {"t_slow_ins", "INSERT INTO t_slow VALUES ($1::int4)"},
};

static pgstmt_table tab;

/* A migrated database `name` and a connection in pipeline mode with every
 * statement prepared; *uri is the database's. */
static PGconn *turn_conn(const char *name, char *uri, size_t len)
{
    pgtmp_createdb(name, uri, len);
    PGconn *c = pgtmp_connect(uri);
    cr_assert_eq(pgschema_migrate(c, NULL, err, sizeof err), BERTH_OK, "%s", err);
    pgtmp_exec(c, "CREATE TABLE t_def (id int PRIMARY KEY, ref int REFERENCES t_def (id) "
                  "DEFERRABLE INITIALLY DEFERRED)");
    pgtmp_exec(c, "CREATE TABLE t_slow (id int)");
    pgtmp_exec(c, "CREATE FUNCTION t_slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
                  "$$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$");
    pgtmp_exec(c, "CREATE CONSTRAINT TRIGGER t_slow_at_commit AFTER INSERT ON t_slow DEFERRABLE "
                  "INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION t_slow_commit()");
    for (size_t i = 0; i < sizeof test_stmts / sizeof test_stmts[0]; i++) {
        PGresult *r = PQprepare(c, test_stmts[i][0], test_stmts[i][1], 0, NULL);
        cr_assert_eq(pgconn_check(c, r, PGRES_COMMAND_OK, test_stmts[i][0], err, sizeof err),
                     BERTH_OK, "%s", err);
        PQclear(r);
    }
    cr_assert_eq(pgturn_enter(c, err, sizeof err), BERTH_OK, "%s", err);
    if (tab.n == 0)
        cr_assert_eq(pgstmt_load(&tab, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_eq(pgstmt_prepare_all(c, &tab, err, sizeof err), BERTH_OK, "%s", err);
    return c;
}

static void run(pgturn *t)
{
    cr_assert_eq(pgturn_run(t, pgturn_mono_ms() + 20000), BERTH_OK);
}

static void id_of(uint8_t id[16], int k)
{
    memset(id, 0, 16);
    id[0] = 0xb3;
    id[15] = (uint8_t)k;
}

/* ---- pgwire ---- */

static PGresult *echo(PGconn *c, const char *sql, const pgwire_params *p, int fmt)
{
    cr_assert_eq(pgwire_params_status(p), BERTH_OK, "%s", p->err);
    PGresult *r = PQexecParams(c, sql, p->n, NULL, p->values, p->lengths, p->formats, fmt);
    cr_assert_eq(pgconn_check(c, r, PGRES_TUPLES_OK, sql, err, sizeof err), BERTH_OK, "%s", err);
    return r;
}

Test(wire, scalars_round_trip_through_the_server)
{
    char uri[256];
    uint8_t buf[256];
    pgtmp_createdb("wire_scalars", uri, sizeof uri);
    PGconn *c = pgtmp_connect(uri);
    pgwire_params p;
    uint8_t id[16], back[16];
    for (int i = 0; i < 16; i++)
        id[i] = (uint8_t)(0xf0 - i * 7);
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_int4(&p, -2147483647 - 1);
    pgwire_int8(&p, INT64_MIN + 5);
    pgwire_bool(&p, true);
    pgwire_bytea(&p, "a\0b", 3);
    pgwire_text(&p, "héllo");
    pgwire_uuid(&p, id);
    pgwire_null(&p, PGWIRE_INT8);
    PGresult *r = echo(c,
                       "SELECT $1::int4, $2::int8, $3::bool, $4::bytea, $5::text, $6::uuid, "
                       "$7::int8",
                       &p, 1);
    int32_t i4;
    int64_t i8;
    bool b;
    const uint8_t *v;
    const char *s;
    size_t len;
    cr_assert_eq(pgwire_get_int4(r, 0, 0, &i4), BERTH_OK);
    cr_assert_eq(i4, -2147483647 - 1);
    cr_assert_eq(pgwire_get_int8(r, 0, 1, &i8), BERTH_OK);
    cr_assert_eq(i8, INT64_MIN + 5);
    cr_assert_eq(pgwire_get_bool(r, 0, 2, &b), BERTH_OK);
    cr_assert(b);
    cr_assert_eq(pgwire_get_bytea(r, 0, 3, &v, &len), BERTH_OK);
    cr_assert(len == 3 && memcmp(v, "a\0b", 3) == 0);
    cr_assert_eq(pgwire_get_text(r, 0, 4, &s, &len), BERTH_OK);
    cr_assert(len == strlen("héllo") && memcmp(s, "héllo", len) == 0);
    cr_assert_eq(pgwire_get_uuid(r, 0, 5, back), BERTH_OK);
    cr_assert_eq(memcmp(back, id, 16), 0);
    cr_assert(pgwire_isnull(r, 0, 6));
    cr_assert_eq(pgwire_get_int8(r, 0, 6, &i8), BERTH_ENOTFOUND, "NULL where a value is needed");
    cr_assert_eq(pgwire_get_int8(r, 0, 0, &i8), BERTH_ECORRUPT, "an int4 column is not int8");
    PQclear(r);
    /* The server read what berth meant, not just the same bytes back. */
    r = echo(c,
             "SELECT $1::int4::text || ' ' || $2::int8::text || ' ' || $3::bool::text || ' ' || "
             "encode($4::bytea, 'hex') || ' ' || $5::text || ' ' || $6::uuid::text || ' ' || "
             "($7::int8 IS NULL)::text",
             &p, 0);
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "-2147483648 -9223372036854775803 true 610062 héllo "
                                          "f0e9e2db-d4cd-c6bf-b8b1-aaa39c958e87 true");
    PQclear(r);
    pgconn_close(c);
}

Test(wire, arrays_round_trip_with_null_elements)
{
    char uri[256];
    static uint8_t buf[4096];
    pgtmp_createdb("wire_arrays", uri, sizeof uri);
    PGconn *c = pgtmp_connect(uri);
    pgwire_params p;
    const int64_t i8[] = {1, 0, INT64_MIN, INT64_MAX};
    const bool i8n[] = {false, true, false, false};
    const int32_t i4[] = {7, -7};
    const bool bo[] = {true, false, true};
    uint8_t ids[3][16];
    const bool idn[] = {false, false, true};
    for (int k = 0; k < 3; k++)
        id_of(ids[k], k + 1);
    const void *by[] = {"xy", NULL, ""};
    const size_t byl[] = {2, 0, 0};
    const char *tx[] = {"a", NULL, "ü,\"{}", ""};
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_int8_array(&p, i8, i8n, 4);
    pgwire_int4_array(&p, i4, NULL, 2);
    pgwire_bool_array(&p, bo, NULL, 3);
    pgwire_uuid_array(&p, (const uint8_t(*)[16])ids, idn, 3);
    pgwire_bytea_array(&p, by, byl, 3);
    pgwire_text_array(&p, tx, 4);
    pgwire_int8_array(&p, NULL, NULL, 0);
    const char *sql = "SELECT $1::int8[], $2::int4[], $3::bool[], $4::uuid[], $5::bytea[], "
                      "$6::text[], $7::int8[]";
    PGresult *r = echo(c, sql, &p, 0);
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "{1,NULL,-9223372036854775808,9223372036854775807}");
    cr_assert_str_eq(PQgetvalue(r, 0, 1), "{7,-7}");
    cr_assert_str_eq(PQgetvalue(r, 0, 2), "{t,f,t}");
    cr_assert_str_eq(PQgetvalue(r, 0, 3), "{b3000000-0000-0000-0000-000000000001,"
                                          "b3000000-0000-0000-0000-000000000002,NULL}");
    cr_assert_str_eq(PQgetvalue(r, 0, 4), "{\"\\\\x7879\",NULL,\"\\\\x\"}");
    cr_assert_str_eq(PQgetvalue(r, 0, 5), "{a,NULL,\"ü,\\\"{}\",\"\"}");
    cr_assert_str_eq(PQgetvalue(r, 0, 6), "{}");
    PQclear(r);

    r = echo(c, sql, &p, 1);
    int64_t o8[8];
    bool on[8];
    size_t n;
    cr_assert_eq(pgwire_get_int8_array(r, 0, 0, o8, on, 8, &n), BERTH_OK);
    cr_assert_eq(n, 4);
    cr_assert(o8[0] == 1 && on[1] && o8[2] == INT64_MIN && o8[3] == INT64_MAX && !on[3]);
    cr_assert_eq(pgwire_get_int8_array(r, 0, 0, o8, NULL, 8, &n), BERTH_ENOTFOUND,
                 "a NULL element with nowhere to mark it");
    cr_assert_eq(pgwire_get_int8_array(r, 0, 0, o8, on, 3, &n), BERTH_EINVAL, "past cap");
    uint8_t oid[4][16];
    cr_assert_eq(pgwire_get_uuid_array(r, 0, 3, oid, on, 4, &n), BERTH_OK);
    cr_assert(n == 3 && memcmp(oid[1], ids[1], 16) == 0 && on[2] && !on[0]);
    cr_assert_eq(pgwire_get_uuid_array(r, 0, 0, oid, on, 4, &n), BERTH_ECORRUPT,
                 "an int8[] column is not uuid[]");
    pgwire_array a;
    const uint8_t *v;
    size_t len;
    cr_assert_eq(pgwire_array_open(r, 0, 5, PGWIRE_TEXT, &a), BERTH_OK);
    cr_assert_eq(a.n, 4);
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(pgwire_array_next(&a, &v, &len), 1);
        if (tx[k] == NULL)
            cr_assert_null(v);
        else
            cr_assert(len == strlen(tx[k]) && memcmp(v, tx[k], len) == 0, "element %d", k);
    }
    cr_assert_eq(pgwire_array_next(&a, &v, &len), 0);
    cr_assert_eq(pgwire_array_open(r, 0, 4, PGWIRE_BYTEA, &a), BERTH_OK);
    cr_assert(pgwire_array_next(&a, &v, &len) == 1 && len == 2 && memcmp(v, "xy", 2) == 0);
    cr_assert(pgwire_array_next(&a, &v, &len) == 1 && v == NULL);
    cr_assert(pgwire_array_next(&a, &v, &len) == 1 && v != NULL && len == 0);
    cr_assert_eq(pgwire_get_int8_array(r, 0, 6, o8, on, 8, &n), BERTH_OK);
    cr_assert_eq(n, 0, "the empty array");
    PQclear(r);
    pgconn_close(c);
}

Test(wire, a_full_buffer_is_an_error_never_an_overflow)
{
    uint8_t buf[64 + 16];
    memset(buf, 0xaa, sizeof buf);
    pgwire_params p;
    int64_t v[8] = {0};
    pgwire_params_init(&p, buf, 64);
    pgwire_int8(&p, 1);
    pgwire_int8_array(&p, v, NULL, 8); /* 20 + 8 * 12 = 116 bytes: no room */
    cr_assert_eq(pgwire_params_status(&p), BERTH_EINVAL);
    cr_assert_str_eq(p.err, "parameter 2 (int8[]): needs 116 bytes, 56 left");
    pgwire_text(&p, "late");
    cr_assert_eq(p.n, 1, "nothing is added after the first error");
    for (size_t i = 64; i < sizeof buf; i++)
        cr_assert_eq(buf[i], 0xaa, "byte %zu past the buffer was written", i);

    pgwire_params_init(&p, buf, 64);
    for (int i = 0; i < PGWIRE_MAX_PARAMS + 1; i++)
        pgwire_bool(&p, true);
    cr_assert_eq(pgwire_params_status(&p), BERTH_EINVAL);
    cr_assert_eq(p.n, PGWIRE_MAX_PARAMS);
}

/* ---- pgstmt ---- */

Test(stmt, the_embedded_file_parses_into_named_statements)
{
    pgstmt_table t;
    cr_assert_eq(pgstmt_load(&t, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_geq(t.n, 4);
    cr_assert_str_eq(t.v[0].name, "turn_begin");
    const char *tb = pgstmt_sql(&t, "turn_begin");
    cr_assert_not_null(tb);
    cr_assert_eq(strncmp(tb, "-- The turn's clock and deployment epoch", 40), 0, "%s", tb);
    cr_assert_not_null(strstr(tb, "\nSELECT CASE WHEN $1::bigint IS NULL"), "%s", tb);
    cr_assert_neq(tb[strlen(tb) - 1], ';', "the statement's ';' is the parser's, not part of it");
    cr_assert_not_null(pgstmt_sql(&t, "turn_notify"));
    cr_assert_not_null(pgstmt_sql(&t, "tasks_insert"));
    cr_assert_not_null(pgstmt_sql(&t, "tasks_count"));
    cr_assert_null(pgstmt_sql(&t, "nope"));
    pgstmt_fini(&t);
    pgstmt_fini(&t); /* idempotent on an emptied table */
}

Test(stmt, a_broken_file_is_refused_at_start)
{
    pgstmt_table t;
    cr_assert_eq(pgstmt_parse("-- head\n\n-- name: a\nSELECT 1;\n-- name: b\nSELECT 2\n", &t, err,
                              sizeof err),
                 BERTH_OK, "%s", err);
    cr_assert(t.n == 2 && strcmp(t.v[0].sql, "SELECT 1") == 0 &&
              strcmp(t.v[1].sql, "SELECT 2") == 0);
    pgstmt_fini(&t);
    cr_assert_eq(pgstmt_parse("-- name: a\nSELECT 1;\n-- name: b\nSELECT 2\n-- name: a\nSELECT 3",
                              &t, err, sizeof err),
                 BERTH_EFORMAT);
    cr_assert_str_eq(err, "statements.sql line 5: the name 'a' is given twice");
    cr_assert_null(t.v);
    cr_assert_eq(pgstmt_parse("SELECT 0;\n-- name: a\nSELECT 1", &t, err, sizeof err),
                 BERTH_EFORMAT);
    cr_assert_str_eq(err, "statements.sql: text before the first '-- name:' marker");
    cr_assert_eq(pgstmt_parse("-- name: A b\nSELECT 1", &t, err, sizeof err), BERTH_EFORMAT);
    cr_assert_eq(
        pgstmt_parse("-- name: a\n-- only a comment\n;\n-- name: b\nSELECT 1", &t, err, sizeof err),
        BERTH_EFORMAT);
    cr_assert_str_eq(err, "statements.sql line 2: statement 'a' is empty");
    cr_assert_eq(pgstmt_parse("-- nothing\n", &t, err, sizeof err), BERTH_EFORMAT);
}

/* ---- pgturn ---- */

Test(turn, several_statements_are_one_transaction_answered_in_order_after_commit)
{
    char uri[256];
    PGconn *c = turn_conn("turn_one", uri, sizeof uri);
    uint8_t bufs[4][64];
    pgwire_params p[4];
    pgturn_stmt s[4] = {{0}};
    for (int i = 0; i < 4; i++) {
        pgwire_params_init(&p[i], bufs[i], sizeof bufs[i]);
        pgwire_int4(&p[i], 100 + i);
        s[i].name = "t_txid";
        s[i].params = &p[i];
    }
    /* Two rounds (COMMIT after the statements' results are in), driven by
     * hand: no result is visible before COMMIT's, though they are held. */
    pgturn t = {.conn = c, .stmts = s, .n = 4, .n_first = 4, .notify = "p:x"};
    cr_assert_eq(pgturn_start(&t), BERTH_OK);
    uint64_t deadline = pgturn_mono_ms() + 10000;
    bool held = false;
    while (!pgturn_advance(&t)) {
        for (int i = 0; i < 4; i++)
            cr_assert_null(s[i].result, "statement %d answered before COMMIT", i);
        held |= s[3].held != NULL;
        cr_assert_lt(pgturn_mono_ms(), deadline);
        struct pollfd pf = {.fd = PQsocket(c), .events = pgturn_events(&t)};
        poll(&pf, 1, 100);
    }
    cr_assert_eq(t.outcome, PGTURN_COMMITTED, "%s: %s", pgturn_outcome_name(t.outcome), t.message);
    cr_assert(held, "the results were in before COMMIT's");
    int64_t xid0 = 0;
    for (int i = 0; i < 4; i++) {
        int64_t xid, now;
        int32_t mark;
        cr_assert_not_null(s[i].result);
        cr_assert_eq(pgwire_get_int8(s[i].result, 0, 0, &xid), BERTH_OK);
        cr_assert_eq(pgwire_get_int8(s[i].result, 0, 1, &now), BERTH_OK);
        cr_assert_eq(pgwire_get_int4(s[i].result, 0, 2, &mark), BERTH_OK);
        cr_assert_eq(mark, 100 + i, "results in send order");
        if (i == 0)
            xid0 = xid;
        cr_assert_eq(xid, xid0, "one transaction");
        cr_assert_eq(now, t.now_ms, "turn_begin's now is the statements' now");
    }
    pgturn_clear_results(&t);
    /* Committed: the next turn is a transaction of its own. */
    pgturn t2 = {.conn = c, .stmts = s, .n = 1};
    run(&t2);
    cr_assert_eq(t2.outcome, PGTURN_COMMITTED, "%s", t2.message);
    int64_t xid;
    cr_assert_eq(pgwire_get_int8(s[0].result, 0, 0, &xid), BERTH_OK);
    /* Other tests' databases take ids from the same cluster meanwhile:
     * later, not necessarily next. */
    cr_assert_gt(xid, xid0, "the next turn is a later transaction");
    pgturn_clear_results(&t2);
    pgconn_close(c);
}

/* tasks_insert of one task k on topic. */
static void insert_params(pgwire_params *p, uint8_t *buf, size_t cap, int k, const char *topic)
{
    uint8_t id[1][16];
    const void *pl[] = {"payload"};
    const size_t pll[] = {7};
    const char *tp[] = {topic};
    id_of(id[0], k);
    pgwire_params_init(p, buf, cap);
    pgwire_uuid_array(p, (const uint8_t(*)[16])id, NULL, 1);
    pgwire_text_array(p, tp, 1);
    pgwire_bytea_array(p, pl, pll, 1);
}

static long count_topic(PGconn *c, const char *topic)
{
    uint8_t buf[64];
    pgwire_params p;
    pgturn_stmt s = {.name = "tasks_count", .params = &p};
    pgwire_params_init(&p, buf, sizeof buf);
    pgwire_text(&p, topic);
    pgturn t = {.conn = c, .stmts = &s, .n = 1};
    run(&t);
    cr_assert_eq(t.outcome, PGTURN_COMMITTED, "%s", t.message);
    int64_t n;
    cr_assert_eq(pgwire_get_int8(s.result, 0, 0, &n), BERTH_OK);
    pgturn_clear_results(&t);
    return (long)n;
}

Test(turn, an_error_in_the_second_of_four_aborts_all_and_the_connection_serves_on)
{
    char uri[256];
    PGconn *c = turn_conn("turn_abort", uri, sizeof uri);
    uint8_t b0[256], b1[16], b2[256], b3[64];
    pgwire_params p0, p1, p2, p3;
    insert_params(&p0, b0, sizeof b0, 1, "ab");
    pgwire_params_init(&p1, b1, sizeof b1);
    pgwire_int4(&p1, 0);
    insert_params(&p2, b2, sizeof b2, 2, "ab");
    pgwire_params_init(&p3, b3, sizeof b3);
    pgwire_text(&p3, "ab");
    pgturn_stmt s[4] = {{.name = "tasks_insert", .params = &p0},
                        {.name = "t_div", .params = &p1},
                        {.name = "tasks_insert", .params = &p2},
                        {.name = "tasks_count", .params = &p3}};
    pgturn t = {.conn = c, .stmts = s, .n = 4, .notify = "p:ab"};
    run(&t);
    cr_assert_eq(t.outcome, PGTURN_ABORTED, "%s", pgturn_outcome_name(t.outcome));
    cr_assert_str_eq(t.sqlstate, "22012");
    cr_assert_eq(t.failed, 1);
    cr_assert_not(t.rerunnable);
    cr_assert_not(t.broken);
    cr_assert_str_eq(t.message, "t_div: division by zero (SQLSTATE 22012)");
    for (int i = 0; i < 4; i++)
        cr_assert_null(s[i].result, "statement %d answered in an aborted turn", i);
    cr_assert_eq(count_topic(c, "ab"), 0, "nothing of the turn was kept");

    /* The same in a two-round turn: the error in the first round. */
    pgturn t2 = {.conn = c, .stmts = s, .n = 4, .n_first = 2};
    run(&t2);
    cr_assert_eq(t2.outcome, PGTURN_ABORTED, "%s", pgturn_outcome_name(t2.outcome));
    cr_assert_eq(t2.failed, 1);
    cr_assert_eq(count_topic(c, "ab"), 0);

    /* A COMMIT that fails (a deferred foreign key): every statement
     * succeeded, none is answered. */
    uint8_t bd[16];
    pgwire_params pd;
    pgwire_params_init(&pd, bd, sizeof bd);
    pgwire_int4(&pd, 5);
    pgturn_stmt sd[2] = {{.name = "tasks_insert", .params = &p0},
                         {.name = "t_def_bad", .params = &pd}};
    pgturn t3 = {.conn = c, .stmts = sd, .n = 2};
    run(&t3);
    cr_assert_eq(t3.outcome, PGTURN_ABORTED, "%s", pgturn_outcome_name(t3.outcome));
    cr_assert_str_eq(t3.sqlstate, "23503");
    cr_assert_eq(t3.failed, -1, "COMMIT failed, not a statement");
    cr_assert(sd[0].result == NULL && sd[1].result == NULL);
    cr_assert_eq(count_topic(c, "ab"), 0);

    /* And the connection serves the next turn. */
    pgturn_stmt s4[2] = {{.name = "tasks_insert", .params = &p0},
                         {.name = "tasks_insert", .params = &p2}};
    pgturn t4 = {.conn = c, .stmts = s4, .n = 2};
    run(&t4);
    cr_assert_eq(t4.outcome, PGTURN_COMMITTED, "%s", t4.message);
    pgturn_clear_results(&t4);
    cr_assert_eq(count_topic(c, "ab"), 2);
    pgconn_close(c);
}

Test(turn, a_lock_timeout_is_reported_rerunnable)
{
    char uri[256];
    PGconn *c = turn_conn("turn_locked", uri, sizeof uri);
    PGconn *holder = pgtmp_connect(uri);
    pgtmp_exec(holder, "INSERT INTO berth.tasks (id, topic, priority, created_at, available_at, "
                       "retries_left, body_bytes, payload) VALUES "
                       "('b3000000-0000-0000-0000-000000000009', 'l', 0, 0, 0, 0, 0, '')");
    pgtmp_exec(holder, "BEGIN");
    pgtmp_exec(holder, "SELECT 1 FROM berth.tasks FOR UPDATE");
    uint8_t b[64], id[16];
    pgwire_params p;
    id_of(id, 9);
    pgwire_params_init(&p, b, sizeof b);
    pgwire_uuid(&p, id);
    pgturn_stmt s[1] = {{.name = "t_lock", .params = &p}};
    /* A short lock_timeout on the pipelined connection, outside a turn. */
    cr_assert(PQsendQueryParams(c, "SET lock_timeout = '100ms'", 0, NULL, NULL, NULL, NULL, 0));
    cr_assert(PQpipelineSync(c));
    while (PQflush(c) == 1)
        ;
    PGresult *sr = PQgetResult(c);
    cr_assert_eq(PQresultStatus(sr), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(sr));
    PQclear(sr);
    cr_assert_null(PQgetResult(c));
    sr = PQgetResult(c);
    cr_assert_eq(PQresultStatus(sr), PGRES_PIPELINE_SYNC);
    PQclear(sr);

    pgturn t = {.conn = c, .stmts = s, .n = 1};
    run(&t);
    cr_assert_eq(t.outcome, PGTURN_ABORTED, "%s", pgturn_outcome_name(t.outcome));
    cr_assert_str_eq(t.sqlstate, "55P03");
    cr_assert(t.rerunnable, "a lock timeout is re-runnable");
    cr_assert_not(t.broken);
    pgtmp_exec(holder, "ROLLBACK");
    pgturn t2 = {.conn = c, .stmts = s, .n = 1};
    run(&t2);
    cr_assert_eq(t2.outcome, PGTURN_COMMITTED, "re-run after the holder let go: %s", t2.message);
    cr_assert_eq(PQntuples(s[0].result), 1);
    pgturn_clear_results(&t2);
    pgconn_close(holder);
    pgconn_close(c);
}

Test(turn, the_manual_clock_sets_every_now_of_the_turn)
{
    char uri[256];
    PGconn *c = turn_conn("turn_clock", uri, sizeof uri);
    uint8_t b0[16], b1[256];
    pgwire_params p0, p1;
    pgwire_params_init(&p0, b0, sizeof b0);
    pgwire_int4(&p0, 1);
    insert_params(&p1, b1, sizeof b1, 1, "clk");
    pgturn_stmt s[2] = {{.name = "t_txid", .params = &p0}, {.name = "tasks_insert", .params = &p1}};
    pgturn t = {.conn = c, .stmts = s, .n = 2, .clock_set = true, .clock_ms = 42000};
    run(&t);
    cr_assert_eq(t.outcome, PGTURN_COMMITTED, "%s", t.message);
    int64_t now, created;
    cr_assert_eq(t.now_ms, 42000);
    cr_assert_eq(t.deploy_epoch, 0);
    cr_assert_eq(pgwire_get_int8(s[0].result, 0, 1, &now), BERTH_OK);
    cr_assert_eq(now, 42000);
    cr_assert_eq(pgwire_get_int8(s[1].result, 0, 1, &created), BERTH_OK);
    cr_assert_eq(created, 42000, "an insert's now_ms() too");
    pgturn_clear_results(&t);

    /* NULL: the transaction's time, and 42000 did not outlive its turn. */
    int64_t wall = (int64_t)time(NULL) * 1000;
    pgturn t2 = {.conn = c, .stmts = s, .n = 1};
    run(&t2);
    cr_assert_eq(t2.outcome, PGTURN_COMMITTED, "%s", t2.message);
    cr_assert_eq(pgwire_get_int8(s[0].result, 0, 1, &now), BERTH_OK);
    cr_assert_eq(now, t2.now_ms);
    cr_assert(now > wall - 60000 && now < wall + 60000, "now %lld, wall %lld", (long long)now,
              (long long)wall);
    pgturn_clear_results(&t2);
    pgconn_close(c);
}

/* ---- lost connections ---- */

typedef struct killer {
    char uri[256];
    int pid;           /* the turn's backend */
    const char *query; /* what it must be running (LIKE pattern) */
    int killed;        /* 1 terminated, 0 never saw it */
    pthread_t th;
} killer;

/* Waits (up to 10 s) until the backend sleeps in `query`, then ends it. */
static void *kill_main(void *arg)
{
    killer *k = arg;
    PGconn *c = NULL;
    char e[256], pid[16];
    if (pgconn_open(k->uri, "berth-killer", 10000, &c, e, sizeof e) != BERTH_OK)
        return NULL;
    snprintf(pid, sizeof pid, "%d", k->pid);
    const char *params[] = {pid, k->query};
    uint64_t end = pgturn_mono_ms() + 10000;
    while (pgturn_mono_ms() < end && !k->killed) {
        PGresult *r = NULL;
        if (pgconn_query(c,
                         "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int AND "
                         "wait_event = 'PgSleep' AND query LIKE $2",
                         2, params, "watching", &r, e, sizeof e) != BERTH_OK)
            break;
        bool sleeping = PQgetvalue(r, 0, 0)[0] == '1';
        PQclear(r);
        if (sleeping) {
            pgconn_query(c, "SELECT pg_terminate_backend($1::int)", 1, params, "killing", &r, e,
                         sizeof e);
            PQclear(r);
            k->killed = 1;
        } else {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    pgconn_close(c);
    return NULL;
}

static void killer_start(killer *k, const char *uri, PGconn *victim, const char *query)
{
    snprintf(k->uri, sizeof k->uri, "%s", uri);
    k->pid = PQbackendPID(victim);
    k->query = query;
    k->killed = 0;
    cr_assert_eq(pthread_create(&k->th, NULL, kill_main, k), 0);
}

Test(turn, lost_before_commit_was_sent_is_not_kept)
{
    char uri[256];
    PGconn *c = turn_conn("turn_lost", uri, sizeof uri);
    PGconn *look = pgtmp_connect(uri);
    uint8_t b0[256], b1[16], b2[64];
    pgwire_params p0, p1, p2;
    insert_params(&p0, b0, sizeof b0, 1, "lost");
    pgwire_params_init(&p1, b1, sizeof b1);
    pgwire_int4(&p1, 3000);
    pgwire_params_init(&p2, b2, sizeof b2);
    pgwire_text(&p2, "lost");
    pgturn_stmt s[3] = {{.name = "tasks_insert", .params = &p0},
                        {.name = "t_sleep", .params = &p1},
                        {.name = "tasks_count", .params = &p2}};
    /* Two rounds: COMMIT waits for the sleep's result. */
    pgturn t = {.conn = c, .stmts = s, .n = 3, .n_first = 2};
    killer k;
    killer_start(&k, uri, c, "%pg_sleep%");
    run(&t);
    pthread_join(k.th, NULL);
    cr_assert(k.killed, "the backend was never seen sleeping");
    cr_assert_eq(t.outcome, PGTURN_LOST_BEFORE_COMMIT, "%s: %s", pgturn_outcome_name(t.outcome),
                 t.message);
    cr_assert(t.broken);
    cr_assert_null(s[0].result);
    cr_assert_eq(pgtmp_one_long(look, "SELECT count(*) FROM berth.tasks"), 0, "not kept");
    pgconn_close(c);

    /* One round: COMMIT is on the wire with the sleep, so the same loss is
     * in doubt (conservative; it was in fact not kept). */
    c = turn_conn("turn_lost1", uri, sizeof uri);
    pgturn t1 = {.conn = c, .stmts = s, .n = 3};
    killer_start(&k, uri, c, "%pg_sleep%");
    run(&t1);
    pthread_join(k.th, NULL);
    cr_assert(k.killed);
    cr_assert_eq(t1.outcome, PGTURN_IN_DOUBT, "%s: %s", pgturn_outcome_name(t1.outcome),
                 t1.message);
    pgconn_close(c);
    pgconn_close(look);
}

Test(turn, lost_during_commit_is_in_doubt)
{
    char uri[256];
    PGconn *c = turn_conn("turn_doubt", uri, sizeof uri);
    uint8_t b0[16];
    pgwire_params p0;
    pgwire_params_init(&p0, b0, sizeof b0);
    pgwire_int4(&p0, 1);
    /* t_slow's deferred trigger sleeps 3 s inside COMMIT. */
    pgturn_stmt s[1] = {{.name = "t_slow_ins", .params = &p0}};
    pgturn t = {.conn = c, .stmts = s, .n = 1, .n_first = 1};
    killer k;
    killer_start(&k, uri, c, "COMMIT%");
    run(&t);
    pthread_join(k.th, NULL);
    cr_assert(k.killed, "COMMIT was never seen sleeping");
    cr_assert_eq(t.outcome, PGTURN_IN_DOUBT, "%s: %s", pgturn_outcome_name(t.outcome), t.message);
    cr_assert(t.broken);
    cr_assert_null(s[0].result);
    pgconn_close(c);
}

Test(turn, a_commit_kept_whose_answer_is_lost_is_in_doubt)
{
    char uri[256];
    PGconn *c = turn_conn("turn_cut", uri, sizeof uri);
    PGconn *look = pgtmp_connect(uri);
    uint8_t b0[256];
    pgwire_params p0;
    insert_params(&p0, b0, sizeof b0, 1, "cut");
    pgturn_stmt s[1] = {{.name = "tasks_insert", .params = &p0}};
    /* The server reads COMMIT before the end of the stream, so it keeps
     * the turn; the client never hears so. */
    pgturn t = {.conn = c, .stmts = s, .n = 1, .cut_after_commit = true};
    run(&t);
    cr_assert_eq(t.outcome, PGTURN_IN_DOUBT, "%s: %s", pgturn_outcome_name(t.outcome), t.message);
    cr_assert(t.broken);
    cr_assert_null(s[0].result, "no result is handed over for a turn in doubt");
    long kept = 0;
    for (int i = 0;
         i < 100 && (kept = pgtmp_one_long(look, "SELECT count(*) FROM berth.tasks")) == 0; i++)
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    cr_assert_eq(kept, 1, "the server committed what was in doubt");
    pgconn_close(c);
    pgconn_close(look);
}
