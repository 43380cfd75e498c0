/* fuzz.h — what the libFuzzer harnesses share. */
#ifndef BERTH_TESTS_FUZZ_H
#define BERTH_TESTS_FUZZ_H

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
/* Inputs between fresh starts. */
#ifndef FUZZ_RENEW_EVERY
#define FUZZ_RENEW_EVERY 100000
#endif

#endif
