/*
 * clock.h — the time the engine runs on, injected so that tests control it.
 *
 * The engine reads time only through an engine_clock. The system clock is
 * CLOCK_REALTIME in Unix milliseconds (lock expiries and availability are
 * Unix times on the wire). A manual clock moves only when a test moves it;
 * the engine then never sleeps on a timeout of its own: it waits for the
 * next request, and the test follows a clock change with engine_tick().
 * Both are safe to read from any thread (RocksDB's compaction threads read
 * the clock for the dedup horizon).
 */
#ifndef BERTH_ENGINE_CLOCK_H
#define BERTH_ENGINE_CLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct engine_clock {
    uint64_t (*now_ms)(void *ctx);
    void *ctx;
    bool manual; /* time moves only when told: never sleep waiting for it */
} engine_clock;

engine_clock engine_clock_system(void);
/* CLOCK_MONOTONIC in ms: for measuring how long something took, never for
 * the engine's time (which is the clock above). */
uint64_t engine_monotonic_ms(void);

typedef struct engine_manual_clock {
    _Atomic uint64_t now_ms;
} engine_manual_clock;

void engine_manual_clock_init(engine_manual_clock *m, uint64_t start_ms);
void engine_manual_clock_advance(engine_manual_clock *m, uint64_t ms);
void engine_manual_clock_set(engine_manual_clock *m, uint64_t now_ms);
/* A clock reading m; m must outlive every engine using it. */
engine_clock engine_manual_clock_get(engine_manual_clock *m);

#endif
