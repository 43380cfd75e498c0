/*
 * fuzz_admin.c — libFuzzer: an admin request as berthd's admin surface
 * takes it, with a key: decoded, its credentials checked, mapped onto a
 * real engine on a temp store (which holds a few tasks, some terminal),
 * and its answer encoded.
 *
 * The first byte of an input chooses what the rest is: odd, the request's
 * bytes as they are (credentials as the input says: almost always
 * refused); even, an AdminRequest that the harness signs with the key at
 * the current time, so that every method is reached past the check. A
 * checkpoint is turned into stats: it would write directories wherever
 * the input names.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>

#include "gateway/admin.h"
#include "store/err.h"
#include "tests/fuzz/fuzz.h"
#include "tools/clients/c/client.h"

static const char KEY[] = "fuzzing-key-0123456789abcdef-0123456789";

static gw_admin *admin_ctx(void)
{
    static gw_admin *a;
    if (a != NULL)
        return a;
    char path[] = "/tmp/berth-fuzz-key-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, KEY, strlen(KEY)) != (ssize_t)strlen(KEY)) {
        perror("fuzz_admin: key file");
        exit(1);
    }
    close(fd);
    char err[256];
    if (gw_admin_open("tcp://0.0.0.0:7451", path, 300000, &a, err, sizeof(err)) != BERTH_OK) {
        fprintf(stderr, "fuzz_admin: %s\n", err);
        exit(1);
    }
    unlink(path);
    return a;
}

/* The tasks populate() made: an input that names a task by one byte
 * names one of these (random ids could never be guessed). */
static char known[8][ENGINE_ID_STR];
static size_t n_known;

static char *known_id(char *id)
{
    return id != NULL && strlen(id) == 1 && n_known > 0 ? known[(uint8_t)id[0] % n_known] : id;
}

/* A few tasks to look at: ready ones, and terminal ones (retries 1). */
static void populate(engine *e)
{
    n_known = 0;
    for (int i = 0; i < 8; i++) {
        engine_request s = {.op = ENGINE_OP_SUBMIT};
        s.u.submit = (engine_submit_args){
            .topic = i % 2 ? "a" : "b", .payload = (const uint8_t *)"p", .payload_len = 1};
        engine_reply *r = fuzz_run(e, &s);
        if (r->status.code == ENGINE_CODE_OK)
            memcpy(known[n_known++], r->submitted[0].id, ENGINE_ID_STR);
        engine_reply_free(r);
    }
    engine_request f = {.op = ENGINE_OP_FETCH};
    static const char *const topics[] = {"a"};
    f.u.fetch = (engine_fetch_args){.worker_id = "w", .topics = topics, .n_topics = 1};
    engine_reply *r = fuzz_run(e, &f);
    for (size_t i = 0; i < r->n_tasks; i++) {
        engine_request x = {.op = ENGINE_OP_FAIL};
        x.u.fail.guard = (engine_guard){r->tasks[i].id, "w", r->tasks[i].lock_token};
        x.u.fail.has_retries_left = true; /* terminal */
        engine_reply_free(fuzz_run(e, &x));
    }
    engine_reply_free(r);
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static engine *e;
    static unsigned runs;
    static uint8_t signed_buf[65536];
    if (e != NULL && ++runs % FUZZ_RENEW_EVERY == 0) {
        fuzz_engine_close(e);
        e = NULL;
    }
    if (e == NULL) {
        e = fuzz_engine();
        populate(e);
    }
    if (size == 0)
        return 0;
    const uint8_t *req = data + 1;
    size_t len = size - 1;
    if (!(data[0] & 1)) {
        Berth__V1__AdminRequest *m = berth__v1__admin_request__unpack(NULL, len, req);
        if (m == NULL)
            return 0;
        Berth__V1__StatsRequest stats = BERTH__V1__STATS_REQUEST__INIT;
        /* The id field, swapped for a known id while signing and put back
         * before the message is freed (it owns its strings). */
        char **slot = NULL;
        switch (m->method_case) {
        case BERTH__V1__ADMIN_REQUEST__METHOD_GET_TASK:
            slot = &m->get_task->id;
            break;
        case BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL:
            slot = &m->retry_terminal->id;
            break;
        case BERTH__V1__ADMIN_REQUEST__METHOD_DISCARD_TERMINAL:
            slot = &m->discard_terminal->id;
            break;
        case BERTH__V1__ADMIN_REQUEST__METHOD_LIST_TASKS:
            slot = &m->list_tasks->after_id;
            break;
        default:
            break;
        }
        char *orig = slot ? *slot : NULL;
        if (slot != NULL)
            *slot = known_id(orig);
        if (m->method_case == BERTH__V1__ADMIN_REQUEST__METHOD_CHECKPOINT) {
            Berth__V1__AdminRequest safe = BERTH__V1__ADMIN_REQUEST__INIT;
            safe.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_STATS;
            safe.stats = &stats;
            len = bc_admin_sign(&safe, (const uint8_t *)KEY, strlen(KEY), wall_ms(), signed_buf,
                                sizeof(signed_buf));
        } else {
            len = bc_admin_sign(m, (const uint8_t *)KEY, strlen(KEY), wall_ms(), signed_buf,
                                sizeof(signed_buf));
        }
        if (slot != NULL)
            *slot = orig;
        berth__v1__admin_request__free_unpacked(m, NULL);
        if (len == 0)
            return 0;
        req = signed_buf;
    }
    /* (A raw request passes the check only by forging the MAC: a raw
     * checkpoint is refused UNAUTHENTICATED like the rest.) */
    void *call = calloc(1, gw_admin_codec.call_size);
    if (call == NULL)
        return 0;
    gw_admin_codec.init(call);
    fuzz_answer a;
    fuzz_answer_init(&a);
    engine_status st;
    nng_msg *m = NULL;
    if (gw_admin_codec.begin(admin_ctx(), call, e, 1, req, len, 64u << 10, fuzz_done, &a, &st) ==
        BERTH_OK) {
        engine_reply *r = fuzz_answer_wait(&a);
        if (gw_admin_codec.encode(call, r, &m) != BERTH_OK)
            m = NULL;
        engine_reply_free(r);
    } else if (gw_admin_codec.encode_status(&st, &m) != BERTH_OK) {
        m = NULL;
    }
    fuzz_answer_fini(&a);
    if (m != NULL)
        nng_msg_free(m);
    gw_admin_codec.fini(call);
    free(call);
    return 0;
}
