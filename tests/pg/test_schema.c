/*
 * test_schema.c — pg/pgconn and pg/pgschema against a real PostgreSQL 15:
 * migrations to the latest version, once, under concurrency; the refusal of
 * a newer schema; the bounded connect; the claim index serving §3.4's claim.
 *
 * One throwaway cluster for the binary (pgtmp, started by the runner's
 * PRE_ALL hook, stopped by POST_ALL); each test makes its own database.
 */
#define _POSIX_C_SOURCE 200809L
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "pg/pgconn.h"
#include "pg/pgschema.h"
#include "pg/pgstmt.h"
#include "store/err.h"
#include "tests/support/pgtmp.h"
#include "tests/support/pgtmp_hooks.h"
#include "tests/support/timing.h"

static char err[1024];

static PGconn *fresh(const char *name, char *uri, size_t len)
{
    pgtmp_createdb(name, uri, len);
    return pgtmp_connect(uri);
}

/* The first column of the first row of sql, as text (a static buffer). */
static const char *one(PGconn *c, const char *sql)
{
    static char v[256];
    PGresult *r = NULL;
    int rv = pgconn_query(c, sql, 0, NULL, sql, &r, err, sizeof err);
    cr_assert_eq(rv, BERTH_OK, "%s", err);
    cr_assert_gt(PQntuples(r), 0, "%s: no row", sql);
    snprintf(v, sizeof v, "%s", PQgetisnull(r, 0, 0) ? "NULL" : PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* Every relation, view and sequence of pg/README.md §2. */
static const char expected[] =
    "{berth.meta,berth.migrations,berth.seq,berth.tasks,berth.tasks_claim,berth.tasks_due,"
    "berth.tasks_dep,berth.tasks_terminal,berth.tasks_seq,berth.outbox,berth.outbox_due,berth."
    "outbox_dep,"
    "berth.instances,berth.instances_timer,berth.instances_ended,berth.instances_dep,"
    "berth.submit_keys,berth.submit_keys_at,berth.inbox,berth.deployments,berth.routes,"
    "berth.incidents,berth.leases}";

Test(schema, a_fresh_database_migrates_to_the_latest_version)
{
    char uri[256];
    PGconn *c = fresh("fresh", uri, sizeof uri);
    pgschema_report rep;
    int version = -1;

    cr_assert_eq(pgschema_version(c, &version, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_eq(version, 0, "an empty database has no berth schema");
    cr_assert_eq(pgschema_migrate(c, &rep, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_eq(rep.from_version, 0);
    cr_assert_eq(rep.to_version, pgschema_latest());
    cr_assert_eq(rep.applied, pgschema_latest());
    cr_assert_geq(pgschema_latest(), 1);
    cr_assert_eq(pgschema_version(c, &version, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_eq(version, pgschema_latest());
    cr_assert_eq(pgtmp_one_long(c, "SELECT count(*) FROM berth.migrations"), pgschema_latest());
    cr_assert_str_eq(one(c, "SELECT name FROM berth.migrations WHERE version = 1"), "001_schema");
    cr_assert_str_eq(one(c, "SELECT applied_by LIKE 'berth-tests pid %' FROM berth.migrations"),
                     "t", "applied_by names the connection");

    const char *params[] = {expected};
    PGresult *r = NULL;
    cr_assert_eq(pgconn_query(c,
                              "SELECT coalesce(string_agg(x, ' '), '') FROM unnest($1::text[]) x "
                              "WHERE to_regclass(x) IS NULL",
                              1, params, "listing what is missing", &r, err, sizeof err),
                 BERTH_OK, "%s", err);
    cr_assert_str_eq(PQgetvalue(r, 0, 0), "", "missing: %s", PQgetvalue(r, 0, 0));
    PQclear(r);
    cr_assert_str_eq(one(c, "SELECT to_regprocedure('berth.now_ms()') IS NOT NULL"), "t");
    /* The claim index is partial, on the claim order. */
    cr_assert_str_eq(one(c, "SELECT pg_get_indexdef('berth.tasks_claim'::regclass)"),
                     "CREATE INDEX tasks_claim ON berth.tasks USING btree (topic, priority, "
                     "fetchable_at, seq) WHERE (NOT terminal)");
    /* The per-table autovacuum settings and lz4 payloads are there. */
    cr_assert_str_eq(one(c, "SELECT 'autovacuum_vacuum_threshold=5000' = ANY(reloptions) AND "
                            "'vacuum_truncate=false' = ANY(reloptions) FROM pg_class "
                            "WHERE oid = 'berth.tasks'::regclass"),
                     "t");
    cr_assert_str_eq(one(c, "SELECT attcompression FROM pg_attribute WHERE attrelid = "
                            "'berth.tasks'::regclass AND attname = 'payload'"),
                     "l");

    /* fetchable_at follows its inputs; now_ms() honours a set clock. */
    pgtmp_exec(c, "INSERT INTO berth.tasks (id, topic, priority, created_at, available_at, "
                  "retries_left, body_bytes, payload) VALUES (gen_random_uuid(), 'a', 1024, 5, 10, "
                  "3, 1, '\\x00')");
    cr_assert_str_eq(one(c, "SELECT fetchable_at FROM berth.tasks"), "10");
    pgtmp_exec(c, "UPDATE berth.tasks SET lock_expires_at = 40");
    cr_assert_str_eq(one(c, "SELECT fetchable_at FROM berth.tasks"), "40");
    pgtmp_exec(c, "UPDATE berth.tasks SET available_at = 70");
    cr_assert_str_eq(one(c, "SELECT fetchable_at FROM berth.tasks"), "70");
    cr_assert_str_eq(one(c, "SELECT seq > 0 FROM berth.tasks"), "t");
    pgtmp_exec(c, "BEGIN");
    pgtmp_exec(c, "SELECT set_config('berth.clock_ms', '1234', true)");
    cr_assert_str_eq(one(c, "SELECT berth.now_ms()"), "1234");
    pgtmp_exec(c, "COMMIT");
    cr_assert_str_eq(one(c, "SELECT abs(berth.now_ms() - "
                            "(extract(epoch FROM now()) * 1000)::bigint) < 1000"),
                     "t", "without berth.clock_ms, now_ms() is the transaction's time");
    pgconn_close(c);
}

Test(schema, migrating_again_changes_nothing)
{
    char uri[256], before[256];
    PGconn *c = fresh("again", uri, sizeof uri);
    pgschema_report rep;
    const char *state = "SELECT string_agg(version || ':' || applied_at, ',' ORDER BY version) "
                        "|| '/' || (SELECT count(*) FROM pg_class WHERE relnamespace = "
                        "'berth'::regnamespace) FROM berth.migrations";

    cr_assert_eq(pgschema_migrate(c, &rep, err, sizeof err), BERTH_OK, "%s", err);
    snprintf(before, sizeof before, "%s", one(c, state));
    cr_assert_eq(pgschema_migrate(c, &rep, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_eq(rep.applied, 0);
    cr_assert_eq(rep.from_version, pgschema_latest());
    cr_assert_eq(rep.to_version, pgschema_latest());
    cr_assert_str_eq(one(c, state), before, "the second run touched the schema");
    /* And from another connection, as a restarted berthd would. */
    PGconn *c2 = NULL;
    cr_assert_eq(pgconn_open(uri, "berth-tests", 5000, &c2, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_eq(pgschema_migrate(c2, &rep, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_eq(rep.applied, 0);
    cr_assert_str_eq(one(c2, state), before);
    pgconn_close(c2);
    pgconn_close(c);
}

#define REPLICAS 4

typedef struct replica {
    const char *uri;
    pthread_barrier_t *go;
    int rv;
    pgschema_report rep;
    char err[512];
} replica;

static void *replica_boot(void *arg)
{
    replica *r = arg;
    PGconn *c = NULL;
    r->rv = pgconn_open(r->uri, "berth-replica", 10000, &c, r->err, sizeof r->err);
    pthread_barrier_wait(r->go);
    if (r->rv == BERTH_OK)
        r->rv = pgschema_migrate(c, &r->rep, r->err, sizeof r->err);
    pgconn_close(c);
    return NULL;
}

Test(schema, four_replicas_booting_at_once_migrate_once)
{
    char uri[256];
    PGconn *c = fresh("four", uri, sizeof uri);
    pthread_barrier_t go;
    pthread_t th[REPLICAS];
    replica r[REPLICAS];
    int applied = 0;

    pthread_barrier_init(&go, NULL, REPLICAS);
    for (int i = 0; i < REPLICAS; i++) {
        r[i] = (replica){.uri = uri, .go = &go};
        cr_assert_eq(pthread_create(&th[i], NULL, replica_boot, &r[i]), 0);
    }
    for (int i = 0; i < REPLICAS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);

    for (int i = 0; i < REPLICAS; i++) {
        cr_expect_eq(r[i].rv, BERTH_OK, "replica %d: %s", i, r[i].err);
        cr_expect_eq(r[i].rep.to_version, pgschema_latest(), "replica %d", i);
        applied += r[i].rep.applied;
    }
    cr_assert_eq(applied, pgschema_latest(), "each migration applied once in all, not %d times",
                 applied);
    /* The records agree: one row per version, each applied once. */
    cr_assert_eq(pgtmp_one_long(c, "SELECT count(*) FROM berth.migrations"), pgschema_latest());
    cr_assert_eq(pgtmp_one_long(c, "SELECT count(DISTINCT version) FROM berth.migrations"),
                 pgschema_latest());
    /* Nobody holds the migration lock any more (on this database: the
     * cluster's other tests, run beside this one, migrate theirs). */
    cr_assert_eq(pgtmp_one_long(c, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                   "AND database = (SELECT oid FROM pg_database "
                                   "WHERE datname = current_database())"),
                 0);
    pgconn_close(c);
}

Test(schema, a_newer_schema_is_refused_naming_both_versions)
{
    char uri[256], want[256];
    PGconn *c = fresh("newer", uri, sizeof uri);
    pgschema_report rep;

    cr_assert_eq(pgschema_migrate(c, &rep, err, sizeof err), BERTH_OK, "%s", err);
    int newer = pgschema_latest() + 1;
    char set[128], v[16];
    snprintf(v, sizeof v, "%d", newer);
    snprintf(set, sizeof set, "UPDATE berth.meta SET value = '%d' WHERE key = 'schema_version'",
             newer);
    pgtmp_exec(c, set);
    err[0] = '\0';
    cr_assert_eq(pgschema_migrate(c, &rep, err, sizeof err), BERTH_EFORMAT, "got: %s", err);
    snprintf(want, sizeof want,
             "the database's berth schema is version %d; this berthd knows versions up to %d",
             newer, pgschema_latest());
    cr_assert_str_eq(err, want);
    cr_assert_eq(rep.from_version, newer);
    cr_assert_eq(rep.applied, 0);
    cr_assert_str_eq(one(c, "SELECT value FROM berth.meta WHERE key = 'schema_version'"), v,
                     "the refusal changed nothing");
    /* The refusal gave the lock back: another session takes it at once. */
    PGconn *c2 = NULL;
    cr_assert_eq(pgconn_open(uri, "berth-tests", 5000, &c2, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_str_eq(one(c2, "SELECT pg_try_advisory_lock(" PGSCHEMA_LOCK_KEY ")"), "t");
    pgconn_close(c2);

    /* A version that is not a number is named too. */
    pgtmp_exec(c, "UPDATE berth.meta SET value = 'x1' WHERE key = 'schema_version'");
    cr_assert_eq(pgschema_migrate(c, &rep, err, sizeof err), BERTH_ECORRUPT, "got: %s", err);
    cr_assert(strstr(err, "'x1'") != NULL, "%s", err);
    pgconn_close(c);
}

Test(schema, an_unreachable_server_fails_after_the_bounded_wait)
{
    char uri[256];
    PGconn *c = NULL;
    int port = pgtmp_free_port();
    cr_assert_gt(port, 0);
    snprintf(uri, sizeof uri, "postgresql://berth:s3cret-pw@127.0.0.1:%d/nowhere", port);

    uint64_t t0 = mono_ms();
    int rv = pgconn_open(uri, "berth-tests", 300, &c, err, sizeof err);
    uint64_t took = mono_ms() - t0;
    cr_assert_eq(rv, BERTH_EIO, "%s", err);
    cr_assert_null(c);
    cr_assert_geq(took, 300, "gave up after %llu ms, before the wait", (unsigned long long)took);
    cr_assert_lt(took, 3000, "took %llu ms", (unsigned long long)took);
    cr_assert(strstr(err, "cannot connect to PostgreSQL at host=127.0.0.1") != NULL, "%s", err);
    cr_assert(strstr(err, "dbname=nowhere") != NULL, "%s", err);
    cr_assert(strstr(err, "within 300 ms") != NULL, "%s", err);
    cr_assert(strstr(err, "Connection refused") != NULL, "libpq's reason: %s", err);
    cr_assert(strstr(err, "s3cret") == NULL, "the password leaked: %s", err);
    cr_assert(strchr(err, '\n') == NULL, "one line: %s", err);

    /* A string libpq cannot parse is refused at once, quoting no value. */
    t0 = mono_ms();
    rv = pgconn_open("postgresql://berth:s3cret%zz@127.0.0.1/x", NULL, 300, &c, err, sizeof err);
    cr_assert_eq(rv, BERTH_EINVAL, "%s", err);
    cr_assert_lt(mono_ms() - t0, 100);
    cr_assert(strstr(err, "s3cret") == NULL, "the password leaked: %s", err);
}

/* A listener whose queue is full: connects to it neither succeed nor are
 * refused, they wait, as for a host that vanished. Its descriptors in fds
 * (3), to close. */
static int silent_port(int fds[3])
{
    int port = pgtmp_free_port(), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fds[0], 0);
    cr_assert_eq(setsockopt(fds[0], SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
    cr_assert_eq(bind(fds[0], (struct sockaddr *)&a, sizeof a), 0, "port %d", port);
    cr_assert_eq(listen(fds[0], 0), 0);
    for (int i = 1; i < 3; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        (void)connect(fds[i], (struct sockaddr *)&a, sizeof a);
    }
    return port;
}

/* libpq leaves a host that does not answer only at connect_timeout, which
 * its non-blocking connect does not enforce: a primary's host gone silent
 * first in the list would hold every attempt, and the standby promoted
 * after it would never be reached (pgconn.c, THE HOSTS OF A MULTI-HOST
 * URI). */
Test(schema, a_silent_first_host_is_passed_over)
{
    char uri[256], multi[512];
    int fds[3];
    PGconn *c = fresh("silent", uri, sizeof uri), *c2 = NULL;
    pgconn_close(c);
    int hole = silent_port(fds), refused = pgtmp_free_port();
    const char *at = strstr(uri, "@127.0.0.1:");
    cr_assert_not_null(at, "%s", uri);
    int port = atoi(at + 11);
    const char *db = strchr(at + 11, '/');
    cr_assert_not_null(db, "%s", uri);
    snprintf(multi, sizeof multi,
             "postgresql://berth@127.0.0.1:%d,127.0.0.1:%d%s?target_session_attrs=read-write", hole,
             port, db);
    uint64_t t0 = mono_ms();
    cr_assert_eq(pgconn_open(multi, "berth-tests", 3000, &c2, err, sizeof err), BERTH_OK, "%s",
                 err);
    /* (not a speed check: short of the wait, so not by waiting it out) */
    cr_assert_lt(mono_ms() - t0, 2500, "took %llu ms", (unsigned long long)(mono_ms() - t0));
    cr_assert_str_eq(one(c2, "SELECT 7"), "7");
    pgconn_close(c2);

    /* Every host failing: each one named with what it did. */
    snprintf(multi, sizeof multi, "postgresql://berth@127.0.0.1:%d,127.0.0.1:%d%s", refused, hole,
             db);
    cr_assert_eq(pgconn_open(multi, "berth-tests", 300, &c2, err, sizeof err), BERTH_EIO);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d: no answer within the wait", hole);
    cr_assert(strstr(err, want) != NULL, "%s", err);
    snprintf(want, sizeof want, "127.0.0.1:%d: connection to server", refused);
    cr_assert(strstr(err, want) != NULL, "%s", err);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
}

Test(schema, the_application_name_is_set_unless_the_uri_sets_one)
{
    char uri[256], named[300];
    PGconn *c = fresh("appname", uri, sizeof uri), *c2 = NULL;
    cr_assert_str_eq(one(c, "SHOW application_name"), "berth-tests");
    snprintf(named, sizeof named, "%s?application_name=mine", uri);
    cr_assert_eq(pgconn_open(named, "berthd", 5000, &c2, err, sizeof err), BERTH_OK, "%s", err);
    cr_assert_str_eq(one(c2, "SHOW application_name"), "mine");
    /* A failing statement names itself, the server's text and SQLSTATE. */
    cr_assert_eq(pgconn_exec(c2, "SELECT * FROM nope", "reading nope", err, sizeof err), BERTH_EIO);
    cr_assert(strstr(err, "reading nope: relation \"nope\" does not exist (SQLSTATE 42P01)") !=
                  NULL,
              "%s", err);
    pgconn_close(c2);
    pgconn_close(c);
}

Test(schema, the_claim_index_serves_the_claim_order)
{
    char uri[256], plan[8192] = "";
    PGconn *c = fresh("claim", uri, sizeof uri);
    PGresult *r = NULL;

    cr_assert_eq(pgschema_migrate(c, NULL, err, sizeof err), BERTH_OK, "%s", err);
    /* 5000 tasks over 10 topics, three priorities, some delayed, some
     * locked, some terminal. */
    pgtmp_exec(c, "INSERT INTO berth.tasks (id, topic, priority, created_at, available_at, "
                  "lock_expires_at, terminal, retries_left, body_bytes, payload) "
                  "SELECT gen_random_uuid(), 't' || (g % 10), (g % 3) * 512, 1000, "
                  "1000 + g * (CASE WHEN g % 5 = 0 THEN 1000 ELSE 1 END), "
                  "CASE WHEN g % 7 = 0 THEN 900000 END, g % 11 = 0, 3, 100, "
                  "decode(repeat('ab', 100), 'hex') FROM generate_series(1, 5000) g");
    pgtmp_exec(c, "ANALYZE berth.tasks");
    pgtmp_exec(c, "SET plan_cache_mode = force_generic_plan");
    /* claim1 as berth prepares it (pg/sql/statements.sql): untyped, its
     * parameters typed by their casts. */
    pgstmt_table tab;
    cr_assert_eq(pgstmt_load(&tab, err, sizeof err), BERTH_OK, "%s", err);
    const char *claim1 = pgstmt_sql(&tab, "claim1");
    cr_assert_not_null(claim1);
    PGresult *pr = PQprepare(c, "claim1", claim1, 0, NULL);
    cr_assert_eq(pgconn_check(c, pr, PGRES_COMMAND_OK, "claim1", err, sizeof err), BERTH_OK, "%s",
                 err);
    PQclear(pr);
    pgstmt_fini(&tab);

    cr_assert_eq(pgconn_query(c, "EXPLAIN EXECUTE claim1('t3', 10, 30000, 'w1', 1048576)", 0, NULL,
                              "explain claim1", &r, err, sizeof err),
                 BERTH_OK, "%s", err);
    for (int i = 0; i < PQntuples(r); i++) {
        strncat(plan, PQgetvalue(r, i, 0), sizeof plan - strlen(plan) - 2);
        strcat(plan, "\n");
    }
    PQclear(r);
    /* The candidate scan: Limit over LockRows over an Index Scan on
     * tasks_claim, with the topic as a parameter (the generic plan). */
    const char *limit = strstr(plan, "Limit");
    const char *lock = limit != NULL ? strstr(limit, "LockRows") : NULL;
    const char *scan = lock != NULL ? strstr(lock, "Index Scan using tasks_claim on tasks") : NULL;
    cr_assert_not_null(scan, "plan:\n%s", plan);
    cr_assert(strstr(scan, "Index Cond: ((topic = $1)") != NULL, "not generic:\n%s", plan);
    const char *sort = strstr(plan, "Sort");
    cr_assert(sort == NULL || sort > scan, "the candidates need no sort:\n%s", plan);

    /* And it claims in that order: priority, then fetchable_at, then seq. */
    pgtmp_exec(c, "BEGIN");
    pgtmp_exec(c, "SELECT set_config('berth.clock_ms', '3000', true)");
    cr_assert_eq(pgconn_query(c, "EXECUTE claim1('t3', 5, 30000, 'w1', 1048576)", 0, NULL, "claim1",
                              &r, err, sizeof err),
                 BERTH_OK, "%s", err);
    cr_assert_eq(PQntuples(r), 5);
    PQclear(r);
    cr_assert_str_eq(one(c, "SELECT string_agg(priority || '@' || available_at, ',' ORDER BY "
                            "priority, available_at) FROM berth.tasks WHERE worker_id = 'w1'"),
                     "0@1003,0@1093,0@1123,0@1153,0@1183");
    pgtmp_exec(c, "COMMIT");
    pgconn_close(c);
}
