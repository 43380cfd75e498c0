/*
 * when.h — the times people type, as berth takes them: durations such as
 * "10m" or "1h30m" and instants in RFC 3339 ("2026-12-24T18:00:00Z",
 * "2026-12-24T19:00:00.250+01:00"). Used by the CLI's --delay and --at.
 */
#ifndef BERTH_TOOLS_WHEN_H
#define BERTH_TOOLS_WHEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A duration: one or more NUMBER UNIT pairs, units ms, s, m, h, d
 * ("1500ms", "10m", "1h30m"), or "0". False (why in err) for anything
 * else, including a bare number and an overflow. */
bool when_duration_ms(const char *s, uint64_t *out, char *err, size_t errlen);
/* An RFC 3339 instant (date, 'T', time, optional fraction of which
 * milliseconds count, then 'Z' or an offset) as Unix ms. False (why in
 * err) for anything else, a date that does not exist, or one before
 * 1970. */
bool when_instant_ms(const char *s, uint64_t *out, char *err, size_t errlen);

#endif
