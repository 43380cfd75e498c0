/* fuzz.h — what the libFuzzer harnesses share. */
#ifndef BERTH_TESTS_FUZZ_H
#define BERTH_TESTS_FUZZ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv); /* (harnesses that need it) */

/* An engine on a fresh temp store (in /dev/shm when there is one: a sync
 * there costs nothing), no long polls, small bounds; open for the whole
 * run. Exits the process if it cannot open. */
engine *fuzz_engine(void);
/* Closes e and removes its store: a long run starts afresh now and then,
 * so that what the inputs kept does not grow without bound. */
void fuzz_engine_close(engine *e);
/* An answer awaited from the engine: pass fuzz_done and the answer to
 * engine_exec() (or gw_operate_begin()), then fuzz_answer_wait(); and
 * fuzz_answer_fini() in the end, waited for or not. */
typedef struct fuzz_answer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    engine_reply *r;
} fuzz_answer;
void fuzz_answer_init(fuzz_answer *a);
void fuzz_done(void *answer, engine_reply *r);
/* The reply (the caller frees it). */
engine_reply *fuzz_answer_wait(fuzz_answer *a);
void fuzz_answer_fini(fuzz_answer *a);
/* engine_exec() and the wait for its reply (aborts if the engine is
 * closing: a harness never closes it under a request). */
engine_reply *fuzz_run(engine *e, const engine_request *req);

/* Inputs between fresh starts. */
#ifndef FUZZ_RENEW_EVERY
#define FUZZ_RENEW_EVERY 100000
#endif

#endif
