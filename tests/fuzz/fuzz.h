/* fuzz.h — what the libFuzzer harnesses share. */
#ifndef BERTH_TESTS_FUZZ_H
#define BERTH_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An engine on a fresh temp store (in /dev/shm when there is one: a sync
 * there costs nothing), no long polls, small bounds; open for the whole
 * run. Exits the process if it cannot open. */
engine *fuzz_engine(void);

#endif
