/*
 * harness.h — drives an engine in process for the Criterion suites.
 *
 * One harness per test process (Criterion forks each test): H holds the
 * engine, a manual clock starting at H_T0, a temp data directory, the
 * options the engine was opened with (tests may change them and reopen)
 * and the events it published. Time moves only through h_advance(), which
 * also runs a turn, so nothing here ever sleeps to expire a lock.
 */
#ifndef BERTH_TESTS_HARNESS_H
#define BERTH_TESTS_HARNESS_H

#include <pthread.h>
#include <stdint.h>

#include <criterion/criterion.h>

#include "engine/engine.h"

#define H_T0         1700000000000ull /* the manual clock's start, Unix ms */
#define H_MAX_EVENTS 1024

typedef struct h_event {
    engine_event_kind kind;
    char topic[256];
    char id[ENGINE_ID_STR];
    char code[128];
    char message[256];
    uint32_t retries_left;
} h_event;

#define H_MAX_PUSHES 256

/* A send to a push channel, as the engine handed it over. */
typedef struct h_push {
    char id[ENGINE_ID_STR];
    uint64_t flight;
    char transport[128];
    char topic[128];
    char payload[128];
    uint32_t attempt;
    char instance_id[ENGINE_ID_STR];
    char header_attempt[16]; /* a call's berth-attempt header, or "" */
} h_push;

typedef struct harness {
    engine *e;
    engine_manual_clock clock;
    engine_options o;
    char dir[64];
    char store_uri[256]; /* BERTH_TEST_STORE=pg: the test's own database */
    pthread_mutex_t mu;
    h_event ev[H_MAX_EVENTS];
    size_t n_ev;
    h_push pushes[H_MAX_PUSHES];
    size_t n_pushes;
} harness;

extern harness H;

/* Criterion fixtures: a fresh directory and an engine with the defaults,
 * except backoff jitter 0 (pauses are exact; one suite tests jitter).
 * With BERTH_TEST_STORE=pg in the environment the engine runs on
 * PostgreSQL instead: a throwaway cluster per test binary (started by the
 * runner, tests/support/pgtmp.h) and a fresh database per test, the
 * manual clock the database's clock too. */
void h_setup(void);
/* Whether the engine under test is on PostgreSQL. */
bool h_store_is_pg(void);
/* On PostgreSQL, skips the test, saying why (what it checks has no
 * meaning there, or is not served there yet). */
void h_skip_on_pg(const char *why);
void h_teardown(void);

void h_open(void); /* opens H.e on H.dir with H.o; fails the test on error */
void h_close(void);
void h_reopen(void); /* close and open again: a restart */

engine_reply *h_exec(const engine_request *req); /* never NULL */
void h_advance(uint64_t ms);                     /* move the clock, run a turn */
uint64_t h_now(void);

/* Submit one task; its id goes to id_out (may be NULL). Asserts OK. */
void h_submit(const char *topic, const char *payload, char *id_out);
engine_reply *h_submit_key(const char *topic, const char *payload, const char *key);
/* Fetch without waiting. max or lock_ms 0: omitted (the default). */
engine_reply *h_fetch(const char *worker, const char *topic, uint32_t max, uint64_t lock_ms);
/* Fetch exactly one task (asserts), copied to *out. */
void h_fetch_one(const char *worker, const char *topic, uint64_t lock_ms, engine_task *out,
                 char token[ENGINE_ID_STR]);
engine_reply *h_complete(const char *id, const char *worker, const char *token);
engine_reply *h_fail(const char *id, const char *worker, const char *token, const char *code);
engine_reply *h_guarded(engine_op op, const char *id, const char *worker, const char *token);
engine_reply *h_get_task(const char *id);
engine_stats h_stats(void);
/* Until the engine has appended `appended` turns and `held` syncs wait at
 * ENGINE_FP_HOLD_SYNCS (real time, a bound against hanging). */
void h_wait_durability(uint64_t appended, uint32_t held);
/* Until the engine has finished `turns` turns (same bound). */
void h_wait_turns(uint64_t turns);
size_t h_events(engine_event_kind kind);

/* Push channels reach the harness: every send is recorded in H.pushes
 * (set before h_reopen()). */
void h_push_on(void);
size_t h_pushes(void);
/* Answers send i as a receiver would. */
engine_reply *h_push_ack(size_t i, int outcome, const char *code, const engine_result *result);

/* A request answered later (a waiting fetch). */
typedef struct h_async {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    engine_reply *r;
} h_async;

void h_exec_async(const engine_request *req, h_async *a);
/* The same, returning engine_exec()'s result instead of asserting it. */
int h_exec_async_try(const engine_request *req, h_async *a);
/* The reply if it has arrived, else NULL. Ownership stays with a. */
engine_reply *h_async_peek(h_async *a);
/* Waits for the reply (real time, up to 10 s, a bound against hanging,
 * not a measurement); fails the test if it does not come. */
engine_reply *h_async_wait(h_async *a);
void h_async_free(h_async *a);
/* A fetch on the given topics that may wait wait_ms; returns once the
 * engine has served it or made it wait, at the current clock. */
void h_fetch_async(const char *worker, const char *const *topics, size_t n, uint64_t wait_ms,
                   h_async *a);

#define h_expect_code(r, c)                                                                        \
    cr_assert_eq((int)(r)->status.code, (int)(c), "status %d (%s), expected %d",                   \
                 (int)(r)->status.code, (r)->status.message, (int)(c))
#define h_expect_ok(r) h_expect_code(r, ENGINE_CODE_OK)

#endif
