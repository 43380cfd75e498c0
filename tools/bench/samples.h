/*
 * samples.h — latencies the load tools collect (microseconds, from
 * nanosecond durations) and the percentiles they report, in ms.
 */
#ifndef BERTH_TOOLS_SAMPLES_H
#define BERTH_TOOLS_SAMPLES_H

#include <stddef.h>
#include <stdint.h>

typedef struct samples {
    uint32_t *v; /* microseconds */
    size_t n, cap;
} samples;

typedef struct pct {
    double p50, p90, p99, max; /* ms */
} pct;

/* Adds one duration; exits the process when out of memory. */
void samples_add(samples *s, uint64_t ns);
/* Sorts s and reads its percentiles (all 0 when it is empty). */
pct samples_percentiles(samples *s);

#endif
