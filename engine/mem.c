/* mem.c — see mem.h. */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "engine/mem.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/engine.h"

static atomic_uint_fast64_t fail_at; /* 0: disarmed */
static atomic_uint_fast64_t counted; /* allocations since armed */
static atomic_bool fired;

void engine_fault_alloc(uint64_t nth)
{
    atomic_store(&fail_at, 0);
    atomic_store(&counted, 0);
    atomic_store(&fired, false);
    atomic_store(&fail_at, nth);
}

bool engine_fault_alloc_fired(void)
{
    return atomic_load(&fired);
}

static bool fail_now(void)
{
    uint64_t at = atomic_load_explicit(&fail_at, memory_order_relaxed);
    if (at == 0)
        return false;
    if (atomic_fetch_add(&counted, 1) + 1 != at)
        return false;
    atomic_store(&fired, true);
    return true;
}

void *mem_alloc(size_t n)
{
    return fail_now() ? NULL : malloc(n ? n : 1);
}

void *mem_calloc(size_t n, size_t size)
{
    return fail_now() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

void *mem_realloc(void *p, size_t n)
{
    return fail_now() ? NULL : realloc(p, n ? n : 1);
}

void *mem_calloc_big(size_t n)
{
    enum { HUGE = 2u << 20 };
    if (n < 2 * HUGE)
        return mem_calloc(1, n);
    if (fail_now())
        return NULL;
    size_t len = (n + HUGE - 1) / HUGE * HUGE;
    void *p = aligned_alloc(HUGE, len);
    if (p == NULL)
        return NULL;
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice: refused where huge pages are off */
    memset(p, 0, len);
    return p;
}

void *mem_dup(const void *p, size_t n)
{
    void *d = mem_alloc(n);
    if (d != NULL && n > 0)
        memcpy(d, p, n);
    return d;
}

char *mem_strdup(const char *s)
{
    return s ? mem_dup(s, strlen(s) + 1) : NULL;
}

void *mem_vec_add(void **v, size_t *n, size_t *cap, size_t elem)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        void *nv = mem_realloc(*v, c * elem);
        if (nv == NULL)
            return NULL;
        *v = nv;
        *cap = c;
    }
    return (char *)*v + (*n)++ * elem;
}
