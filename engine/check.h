/*
 * check.h — validation of what producers and workers send, and the
 * backoff curve. Every rejection is INVALID_ARGUMENT naming the field;
 * bounds over their ceiling also carry the ceiling (R6). Nothing is ever
 * clamped. Text is UTF-8 (utf8.h) or rejected. Any thread (pure
 * functions).
 */
#ifndef BERTH_ENGINE_CHECK_H
#define BERTH_ENGINE_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

/* Input limits that are not operator settings. */
#define ENGINE_WORKER_ID_MAX     128
#define ENGINE_HEADERS_MAX       64
#define ENGINE_HEADER_NAME_MAX   128
#define ENGINE_HEADER_VALUE_MAX  4096
#define ENGINE_CONTENT_TYPE_MAX  256
#define ENGINE_ERROR_CODE_MAX    128
#define ENGINE_ERROR_TEXT_MAX    4096 /* message */
#define ENGINE_ERROR_DETAILS_MAX 65536
#define ENGINE_RESERVED_PREFIX   "berth-"

bool check_topic(const char *s, const char *field, engine_status *st);

/* What a channel's transport names: pull ("pull", or NULL or empty), a
 * push receiver (nng+req://HOST:PORT, nng+req+ipc:///PATH,
 * nng+req+tls://HOST:PORT: something after the scheme, at most
 * CHECK_TRANSPORT_MAX bytes, printable), or nothing berth serves. */
#define CHECK_TRANSPORT_MAX 512
enum { CHECK_TRANSPORT_NONE = 0, CHECK_TRANSPORT_PULL, CHECK_TRANSPORT_PUSH };
int check_transport(const char *t);
bool check_headers(const engine_header *h, size_t n, const char *field, engine_status *st);
bool check_text(const char *s, size_t max, bool required, const char *field, engine_status *st);
bool check_error(const engine_error *err, engine_status *st);
/* A batch's items: at least one, at most max (INVALID_ARGUMENT naming
 * "items"). */
bool check_items(size_t n, uint64_t max, engine_status *st);
/* A bound of R6: omitted → default; 0 when zero_ok is false, or over the
 * ceiling → INVALID_ARGUMENT. */
bool check_bound(bool has, uint64_t value, uint64_t def, uint64_t max, bool zero_ok,
                 const char *field, uint64_t *out, engine_status *st);
/* A pause for the n-th failure (n >= 1): initial doubling to max, cut by
 * up to jitter. */
uint64_t check_backoff(uint64_t initial_ms, uint64_t max_ms, uint32_t n, double jitter);
/* The same curve growing by multiplier (>= 1) rather than doubling. */
uint64_t check_backoff_curve(uint64_t initial_ms, uint64_t max_ms, uint32_t n, double multiplier,
                             double jitter);

#endif
