/* mem.c — see mem.h. */
#include "engine/mem.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

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
