/* R5's early case, deterministically: berth's own server in this process,
 * in front of an engine whose syncs the test holds. A fetch is claimed,
 * its connection closes before the answer can leave, and its task is
 * handed back at once: another worker takes it while the clock stands
 * still (its lock would have run for 30 s). */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gateway/sp.h"
#include "tests/support/harness.h"
#include "tests/support/raw.h"

static gw_sp *S;

static void setup(void)
{
    h_setup();
    gw_sp_limits lim = {.max_message_bytes = 1u << 20, .max_connections = 16};
    char err[256];
    cr_assert_eq(gw_sp_open(H.e, "tcp://127.0.0.1:0", &lim, &S, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(gw_sp_start(S, err, sizeof(err)), 0, "%s", err);
}

static void teardown(void)
{
    engine_stop(H.e);
    gw_sp_close(S);
    h_teardown();
}

TestSuite(giveback, .init = setup, .fini = teardown, .timeout = 60);

static void pause_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A fetch of topic t sent on a new connection, claimed, its answer held
 * back by the held sync; the connection's descriptor. */
static int fetch_held(void)
{
    engine_durable before;
    engine_durability(H.e, &before);
    engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 1);
    int fd = raw_req(gw_sp_url(S));
    uint8_t body[128], frame[256];
    size_t n = raw_pack_fetch(body, "t", 1, 0);
    raw_write_all(fd, frame, raw_frame(frame, 1, body, n));
    h_wait_durability(before.appended + 1, 1); /* claimed, written, not answered */
    return fd;
}

/* Fetches of another worker until one gets a task (real time, bounded):
 * the clock never moves, so only a give-back can make it fetchable. */
static bool another_worker_gets_it(int tries)
{
    for (int i = 0; i < tries; i++) {
        engine_reply *r = h_fetch("other", "t", 1, 0);
        size_t n = r->n_tasks;
        engine_reply_free(r);
        if (n == 1)
            return true;
        pause_ms(10);
    }
    return false;
}

Test(giveback, a_fetch_answered_after_its_connection_closed_hands_its_task_back)
{
    h_submit("t", "p", NULL);
    int fd = fetch_held();
    close(fd);
    for (int i = 0; i < 500 && gw_sp_connections(S) > 0; i++)
        pause_ms(10);
    cr_assert_eq(gw_sp_connections(S), 0, "the server saw the close");
    engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 0); /* the answer goes nowhere */
    cr_assert(another_worker_gets_it(500), "handed back, not left to its lock");
}

Test(giveback, a_fetch_answered_to_its_open_connection_keeps_its_lock)
{
    h_submit("t", "p", NULL);
    int fd = fetch_held();
    engine_failpoint_set(H.e, ENGINE_FP_HOLD_SYNCS, 0);
    uint32_t id;
    Berth__V1__Response *r = raw_answer(fd, &id);
    cr_assert_eq(id, 1);
    cr_assert_eq(r->fetch->n_tasks, 1, "the worker got it");
    berth__v1__response__free_unpacked(r, NULL);
    cr_assert_not(another_worker_gets_it(20), "locked for the worker that has it");
    close(fd);
}
