/* samples.c — see samples.h. */
#include "tools/bench/samples.h"

#include <stdio.h>
#include <stdlib.h>

void samples_add(samples *s, uint64_t ns)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (s->v == NULL) {
            perror("samples");
            exit(1);
        }
    }
    uint64_t us = ns / 1000;
    s->v[s->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

pct samples_percentiles(samples *s)
{
    pct p = {0};
    if (s->n == 0)
        return p;
    qsort(s->v, s->n, sizeof(*s->v), cmp_u32);
#define AT(q) (s->v[(size_t)((q) * (double)(s->n - 1))] / 1000.0)
    p.p50 = AT(0.50);
    p.p90 = AT(0.90);
    p.p99 = AT(0.99);
#undef AT
    p.max = s->v[s->n - 1] / 1000.0;
    return p;
}
