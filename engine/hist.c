/* hist.c — see hist.h. */
#include "engine/hist.h"

static const double seconds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                 0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                 5,      10,      30,     60,    300};
static const double sizes[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};

void hist_init(hist *h, hist_kind kind)
{
    const double *bounds = kind == HIST_SECONDS ? seconds : sizes;
    size_t n_bounds = kind == HIST_SECONDS ? sizeof(seconds) / sizeof(seconds[0])
                                           : sizeof(sizes) / sizeof(sizes[0]);
    h->bounds = bounds;
    h->n_bounds = n_bounds < ENGINE_HIST_BUCKETS_MAX ? n_bounds : ENGINE_HIST_BUCKETS_MAX;
    for (size_t i = 0; i <= ENGINE_HIST_BUCKETS_MAX; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->count, 0);
    atomic_init(&h->sum_micro, 0);
}

void hist_observe(hist *h, double v)
{
    size_t i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    if (v > 0)
        atomic_fetch_add_explicit(&h->sum_micro, (uint_fast64_t)(v * 1e6 + 0.5),
                                  memory_order_relaxed);
}

void hist_read(const hist *h, engine_histogram *out)
{
    out->n_bounds = h->n_bounds;
    for (size_t i = 0; i < h->n_bounds; i++)
        out->bounds[i] = h->bounds[i];
    for (size_t i = 0; i <= h->n_bounds; i++)
        out->counts[i] = atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    out->count = atomic_load_explicit(&h->count, memory_order_relaxed);
    out->sum = (double)atomic_load_explicit(&h->sum_micro, memory_order_relaxed) / 1e6;
}
