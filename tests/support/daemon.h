/*
 * daemon.h — runs berthd as a real process for the integration suites:
 * a temp data directory, free loopback ports (port 0, read back from the
 * readiness line), kill and restart on the same directory. Clients dial
 * the URLs berthd printed.
 */
#ifndef BERTH_TESTS_DAEMON_H
#define BERTH_TESTS_DAEMON_H

#include <stdbool.h>
#include <sys/types.h>

#include "tools/clients/c/client.h"

typedef struct daemon_proc {
    pid_t pid;
    char dir[64];
    char operate[128];
    char events[128];
    char admin[128];
    char metrics[128];
    const char *extra[32]; /* extra flags, kept for restarts */
    int n_extra;
    char stderr_path[96];
    char store[512]; /* d_start_store(): --store this instead of --data dir */
} daemon_proc;

/* Makes a fresh data directory and starts berthd on it with the extra
 * flags (NULL-terminated). Fails the test if it does not become ready. */
void d_start(daemon_proc *d, const char *const *extra);
/* Starts berthd on the PostgreSQL database uri (--store uri, no --data)
 * with the extra flags; its dir is made all the same (it names the stderr
 * file). Any number of them may share one database: each takes its own
 * ports. Fails the test if it does not become ready. */
void d_start_store(daemon_proc *d, const char *uri, const char *const *extra);
/* Starts berthd again on the same directory (or store) and flags. */
void d_restart(daemon_proc *d);
/* Sends sig and reaps the process; returns its exit status (or 128+signal). */
int d_signal(daemon_proc *d, int sig);
/* Stops it with SIGTERM as an operator would (15 s at most, then SIGKILL)
 * and fails the test unless it exited 0. Criterion 2.4 does not fail a
 * test for what its .fini finds: a test that means to prove a clean stop
 * calls this in its body. */
void d_stop(daemon_proc *d);
/* d_stop() (if running), then removes its directory. */
void d_cleanup(daemon_proc *d);

/* A test of a suite whose daemon is `D`: after the body, berthd must stop
 * cleanly (d_stop), and that verdict counts, as a .fini's would not. */
#define DTest(suite, name)                                                                         \
    static void suite##_##name##_body(void);                                                       \
    Test(suite, name)                                                                              \
    {                                                                                              \
        suite##_##name##_body();                                                                   \
        d_stop(&D);                                                                                \
    }                                                                                              \
    static void suite##_##name##_body(void)
/* Runs berthd with the given flags expecting it to refuse to start:
 * returns its exit status; its stderr goes to err. */
int d_refused(const char *const *flags, char *err, size_t errlen);
/* The same with --store uri instead of --data (berthd refuses the two). */
int d_refused_store(const char *uri, const char *const *flags, char *err, size_t errlen);
/* The local TCP ports of berthd's connections to 127.0.0.1:port (its
 * database connections when port is the server's): at most max, written
 * to ports; returns how many. */
int d_peer_ports(const daemon_proc *d, int port, int *ports, int max);
/* On a store (d_start_store(), or d_start() with BERTH_TEST_STORE=pg): how
 * many connections its database has besides the one asking (berthd's
 * own: a replica holds a fixed number); -1 on the embedded store. */
int d_store_connections(const daemon_proc *d);

/* Deploys id through d's admin surface: one channel with transport
 * (NULL: pull). Asserts it is deployed. */
void d_deploy(const daemon_proc *d, const char *id, const char *channel, const char *transport);

/* A client for the daemon's operate URL. */
bc *d_client(const daemon_proc *d);

/* Request helpers: each returns the Response (never NULL; asserts a
 * transport success). Zero/NULL arguments are omitted from the request. */
Berth__V1__Response *w_call(bc *c, Berth__V1__Request *req, int timeout_ms);
Berth__V1__Response *w_submit(bc *c, const char *topic, const char *payload, const char *key);
Berth__V1__Response *w_fetch(bc *c, const char *worker, const char *topic, uint32_t max,
                             uint64_t lock_ms, long wait_ms /* -1: omitted */);
Berth__V1__Response *w_guarded(bc *c, Berth__V1__Request__MethodCase m, const char *id,
                               const char *worker, const char *token);
/* The same two, NULL when the transport fails (berthd killed under them). */
Berth__V1__Response *w_fetch_or_null(bc *c, const char *worker, const char *topic, uint32_t max,
                                     uint64_t lock_ms, long wait_ms);
Berth__V1__Response *w_guarded_or_null(bc *c, Berth__V1__Request__MethodCase m, const char *id,
                                       const char *worker, const char *token);
/* A fetch of topic (max and lock: the defaults) that first completes
 * the n tasks ids[i] that worker holds with tokens[i]; wait_ms -1:
 * omitted. The _or_null one returns NULL when the transport fails. */
Berth__V1__Response *w_fetch_completing(bc *c, const char *worker, const char *topic, long wait_ms,
                                        const char *const *ids, const char *const *tokens,
                                        size_t n);
Berth__V1__Response *w_fetch_completing_or_null(bc *c, const char *worker, const char *topic,
                                                long wait_ms, const char *const *ids,
                                                const char *const *tokens, size_t n);
/* Fetches and awaits waiting in berthd now (admin stats, no key). */
uint64_t d_waiting_fetches(const daemon_proc *d);
/* GET path from d's /metrics server: the HTTP status, and the body
 * (malloc'd) in *body. */
int d_http_get(const daemon_proc *d, const char *path, char **body);
/* One HTTP/1.1 exchange with d's metrics listener (on 127.0.0.1, also when
 * it listens on 0.0.0.0): headers are extra lines, each ending "\r\n" (a
 * first line "Host: ..." replaces the loopback Host sent by default);
 * body may be NULL. The status; the head and the body malloc'd (either
 * out may be NULL). */
int d_http(const daemon_proc *d, const char *method, const char *path, const char *headers,
           const char *body, char **head_out, char **body_out);
/* Descriptors berthd holds open now. */
int d_open_fds(const daemon_proc *d);
/* Completes task t (held by worker) with a result of len bytes. */
Berth__V1__Response *w_answer(bc *c, const Berth__V1__Task *t, const char *worker,
                              const void *result, size_t len);
Berth__V1__Response *w_answer_or_null(bc *c, const Berth__V1__Task *t, const char *worker,
                                      const void *result, size_t len);
void w_free(Berth__V1__Response *r);
/* Submits payload to topic through c, asserting OK: the task's id (malloc'd). */
char *w_submit_id(bc *c, const char *topic, const char *payload);
/* Whether a line of d's stderr (its file, as written so far) holds needle. */
bool d_stderr_has(const daemon_proc *d, const char *needle);

#define w_expect_code(r, c)                                                                        \
    cr_assert_eq((int)(r)->status->code, (int)(c), "status %d (%s), expected %d",                  \
                 (int)(r)->status->code, (r)->status->message ? (r)->status->message : "",         \
                 (int)(c))

#endif
