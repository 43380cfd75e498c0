/*
 * fuzz_operate.c — libFuzzer: an operate request, as berthd's servers take
 * it: decoded (bounded), its strings checked, mapped onto the engine, run
 * by a real engine on a temp store, and its answer encoded. The engine
 * never waits here (wait-max 0), so every input is answered at once.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "gateway/call.h"
#include "gateway/convert.h"
#include "store/err.h"
#include "tests/fuzz/fuzz.h"

typedef struct answer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    engine_reply *r;
} answer;

static void done(void *arg, engine_reply *r)
{
    answer *a = arg;
    pthread_mutex_lock(&a->mu);
    a->r = r;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static engine *e;
    static unsigned runs;
    if (e != NULL && ++runs % FUZZ_RENEW_EVERY == 0) {
        fuzz_engine_close(e);
        e = NULL;
    }
    if (e == NULL)
        e = fuzz_engine();
    gw_call call;
    gw_call_init(&call);
    answer a = {.r = NULL};
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    engine_status st;
    nng_msg *m = NULL;
    if (gw_call_start(&call, e, 1, data, size, 1u << 20, done, &a, &st) == BERTH_OK) {
        pthread_mutex_lock(&a.mu);
        while (a.r == NULL)
            pthread_cond_wait(&a.cv, &a.mu);
        pthread_mutex_unlock(&a.mu);
        if (gw_encode_reply(a.r, &call.arena, &m) != BERTH_OK)
            m = NULL;
        engine_reply_free(a.r);
    } else if (gw_encode_status(&st, &m) != BERTH_OK) {
        m = NULL;
    }
    if (m != NULL)
        nng_msg_free(m);
    gw_call_release(&call);
    pthread_mutex_destroy(&a.mu);
    pthread_cond_destroy(&a.cv);
    return 0;
}
