/*
 * fault.h — failpoint counters (engine_failpoint_set() arms them from any
 * thread; the engine thread takes them).
 */
#ifndef BERTH_ENGINE_FAULT_H
#define BERTH_ENGINE_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>

/* True, and one fewer left, while n > 0. */
static inline bool fault_take(atomic_int *n)
{
    int v = atomic_load(n);
    while (v > 0)
        if (atomic_compare_exchange_weak(n, &v, v - 1))
            return true;
    return false;
}

#endif
