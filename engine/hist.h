/*
 * hist.h — histograms for the metrics: fixed upper bounds, counts per
 * bucket, a sum. Observed on any thread (relaxed atomics), read into an
 * engine_histogram for export. A leaf.
 */
#ifndef BERTH_ENGINE_HIST_H
#define BERTH_ENGINE_HIST_H

#include <stdatomic.h>
#include <stddef.h>

#include "engine/engine.h"

typedef struct hist {
    const double *bounds; /* ENGINE_HIST_BUCKETS_MAX at most, rising */
    size_t n_bounds;
    atomic_uint_fast64_t counts[ENGINE_HIST_BUCKETS_MAX + 1]; /* the last: over every bound */
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_micro; /* the sum, in millionths */
} hist;

/* Its buckets: latencies in seconds, or counts (requests per batch). */
typedef enum hist_kind { HIST_SECONDS, HIST_SIZES } hist_kind;

void hist_init(hist *h, hist_kind kind);
void hist_observe(hist *h, double v);
void hist_read(const hist *h, engine_histogram *out);

#endif
