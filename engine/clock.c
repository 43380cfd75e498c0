/* clock.c — the system clock and the manual (test) clock of clock.h. */
#include "engine/clock.h"

#include <time.h>

static uint64_t system_now(void *ctx)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

engine_clock engine_clock_system(void)
{
    return (engine_clock){.now_ms = system_now, .ctx = NULL, .manual = false};
}

static uint64_t manual_now(void *ctx)
{
    engine_manual_clock *m = ctx;
    return atomic_load(&m->now_ms);
}

void engine_manual_clock_init(engine_manual_clock *m, uint64_t start_ms)
{
    atomic_init(&m->now_ms, start_ms);
}

void engine_manual_clock_advance(engine_manual_clock *m, uint64_t ms)
{
    atomic_fetch_add(&m->now_ms, ms);
}

void engine_manual_clock_set(engine_manual_clock *m, uint64_t now_ms)
{
    atomic_store(&m->now_ms, now_ms);
}

engine_clock engine_manual_clock_get(engine_manual_clock *m)
{
    return (engine_clock){.now_ms = manual_now, .ctx = m, .manual = true};
}

uint64_t engine_monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
