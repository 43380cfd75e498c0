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

#include "gateway/operate.h"
#include "gateway/convert.h"
#include "store/err.h"
#include "tests/fuzz/fuzz.h"

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
    gw_operate call;
    gw_operate_init(&call);
    fuzz_answer a;
    fuzz_answer_init(&a);
    engine_status st;
    nng_msg *m = NULL;
    if (gw_operate_begin(&call, e, 1, data, size, 1u << 20, fuzz_done, &a, &st) == BERTH_OK) {
        engine_reply *r = fuzz_answer_wait(&a);
        if (gw_encode_reply(r, &call.arena, &m) != BERTH_OK)
            m = NULL;
        engine_reply_free(r);
    } else if (gw_encode_status(&st, &m) != BERTH_OK) {
        m = NULL;
    }
    fuzz_answer_fini(&a);
    if (m != NULL)
        nng_msg_free(m);
    gw_operate_fini(&call);
    return 0;
}
