/* budget.c — see budget.h. */
#include "gateway/budget.h"

#include <malloc.h>

void gw_budget_init(gw_budget *b, uint64_t max_bytes)
{
    b->max = max_bytes && max_bytes < SIZE_MAX ? (size_t)max_bytes : SIZE_MAX / 2;
    atomic_init(&b->used, 0);
    b->peak = 0;
}

bool gw_budget_may_grow(const gw_budget *b, size_t held, size_t n, unsigned holders)
{
    if (atomic_load(&b->used) + n <= b->max)
        return true;
    return held + n <= b->max / (holders ? holders : 1);
}

void gw_budget_take(gw_budget *b, atomic_size_t *held, size_t n)
{
    atomic_fetch_add(held, n);
    atomic_fetch_add(&b->used, n);
}

void gw_budget_give_back(gw_budget *b, atomic_size_t *held, size_t n)
{
    atomic_fetch_sub(held, n);
    atomic_fetch_sub(&b->used, n);
}

bool gw_budget_settle(gw_budget *b)
{
    size_t used = atomic_load(&b->used);
    if (used > b->peak)
        b->peak = used;
    if (used > b->max / 4 * 3)
        return false;
    if (b->peak > b->max / 4 && used < b->max / 16) {
        gw_memory_return();
        b->peak = used;
    }
    return true;
}

/* tcmalloc keeps what it frees for a while, glibc the top of its heaps. */
extern void MallocExtension_ReleaseFreeMemory(void) __attribute__((weak));

void gw_memory_return(void)
{
    if (MallocExtension_ReleaseFreeMemory != NULL)
        MallocExtension_ReleaseFreeMemory();
    else
        malloc_trim(0);
}
