/*
 * pgtmp.h — a throwaway PostgreSQL cluster for the test binaries of
 * tests/pg/ (pg/README.md §6.1).
 *
 * One cluster per test binary: its Criterion runner starts it in a
 * ReportHook(PRE_ALL) with pgtmp_runner_start() and stops it in
 * ReportHook(POST_ALL) with pgtmp_runner_stop() (pgtmp_hooks.h holds the
 * two, for one file of each test binary to include); Criterion then runs each
 * test in a process of its own, which finds the cluster through the
 * environment (PGTMP_ENV_URI, inherited) and asks for a fresh database with
 * pgtmp_createdb(). The cluster is initdb's (trust, superuser "berth",
 * UTF8, C locale) on 127.0.0.1 at a free port, with its socket and files in
 * /tmp/berth-pg-XXXXXX; as root, initdb and pg_ctl run as the `postgres`
 * user through runuser (PostgreSQL refuses to run as root).
 *
 * FOR TESTS ONLY: fsync, synchronous_commit and full_page_writes are off;
 * a crash of the machine loses the cluster, which nobody keeps. A binary
 * whose tests crash PostgreSQL itself and count on what it acknowledged
 * (pg_ctl restart -m immediate) asks for them on: PGTMP_ENV_FSYNC=on in the
 * runner's environment when pgtmp_runner_start() runs (pgtmp_hooks.h sets
 * it when PGTMP_DURABLE is defined before it is included).
 *
 * Nothing is left running: a watchdog process (its own session) waits on a
 * pipe from the runner; when the runner ends in any way, even SIGKILL, the
 * watchdog stops the cluster (pg_ctl stop -m immediate) and removes its dir.
 */
#ifndef BERTH_TESTS_PGTMP_H
#define BERTH_TESTS_PGTMP_H

#include <stddef.h>

#include <libpq-fe.h>

#define PGTMP_ENV_URI   "BERTH_TEST_PG_URI"   /* postgresql://berth@127.0.0.1:PORT */
#define PGTMP_ENV_ERROR "BERTH_TEST_PG_ERROR" /* why the cluster did not start */
#define PGTMP_ENV_DIR   "BERTH_TEST_PG_DIR"   /* the cluster's dir (data in DIR/data) */
#define PGTMP_ENV_FSYNC "BERTH_TEST_PG_FSYNC" /* "on" in the runner: a durable cluster */

/* In the runner (PRE_ALL): start the cluster and export PGTMP_ENV_URI and
 * PGTMP_ENV_DIR, or export PGTMP_ENV_ERROR (every pgtmp_createdb() then fails with it).
 * Returns 0 or -1; the reason is printed to stderr too. */
int pgtmp_runner_start(void);
/* In the runner (POST_ALL): stop the cluster, remove its dir, end the
 * watchdog. Idempotent. */
void pgtmp_runner_stop(void);

/* In a test: a fresh database `name` ([a-z0-9_], dropped first if it
 * exists) and its URI. Fails the test when the cluster is not there. */
void pgtmp_createdb(const char *name, char *uri, size_t len);

/* A TCP port on 127.0.0.1 that nothing listened on a moment ago (bind 0,
 * read it, close): for a server to take, or to find nobody at. */
int pgtmp_free_port(void);

/* In a test, each failing the test when it cannot: a connection to uri
 * (pgconn_open, 10 s); a statement run to completion; the first column
 * of the first row of sql as a number. */
PGconn *pgtmp_connect(const char *uri);
void pgtmp_exec(PGconn *c, const char *sql);
long pgtmp_one_long(PGconn *c, const char *sql);

/* In a test: restarts the binary's cluster as `pg_ctl restart -m mode`
 * ("fast", "immediate", "smart") does, on the same port and options, and
 * waits until it accepts connections again (60 s at most); fails the test
 * when it cannot. Returns how long pg_ctl took, in ms. Every connection to
 * the cluster is broken, other tests' too: see pgtmp_exclusive(). */
long pgtmp_restart(const char *mode);
/* The two halves, for a cluster down a while: pg_ctl stop -m mode, and
 * pg_ctl start as the runner started it (same port, same settings), each
 * waiting until it is done; each fails the test when it cannot and
 * returns how long pg_ctl took, in ms. */
long pgtmp_stop(const char *mode);
long pgtmp_start(void);
/* In a test: waits until no other test process of the binary holds the
 * cluster this way, then holds it until this process ends (flock on
 * DIR/exclusive.lock): for tests that restart it while Criterion may run
 * others beside them (--jobs). Fails the test when the cluster is not
 * there. */
void pgtmp_exclusive(void);

#endif
