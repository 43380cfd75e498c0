/*
 * check.c — validation of what producers and workers send, and the backoff
 * curve. Every rejection is INVALID_ARGUMENT naming the field; bounds over
 * their ceiling also carry the ceiling (R6). Nothing is ever clamped.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

#include "engine/check.h"
#include "engine/reply.h"
#include "engine/utf8.h"

static void reject(engine_status *st, const char *field, const char *fmt, const char *what)
{
    reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, fmt, field, what);
    snprintf(st->field, sizeof(st->field), "%s", field);
}

bool check_topic(const char *s, const char *field, engine_status *st)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0) {
        reject(st, field, "%s: a topic is required%s", "");
        return false;
    }
    if (n > BERTH_TOPIC_MAX) {
        reply_over_ceiling(st, field, n, BERTH_TOPIC_MAX);
        snprintf(st->message, sizeof(st->message), "%s: %zu bytes is over the ceiling %d", field, n,
                 BERTH_TOPIC_MAX);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.' || c == ':' || c == '/';
        if (!ok) {
            reject(st, field, "%s: \"%.64s\" may hold only letters, digits and _ - . : /", s);
            return false;
        }
    }
    return true;
}

bool check_text(const char *s, size_t max, bool required, const char *field, engine_status *st)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 && required) {
        reject(st, field, "%s: required%s", "");
        return false;
    }
    if (n > max) {
        reply_over_ceiling(st, field, n, max);
        snprintf(st->message, sizeof(st->message), "%s: %zu bytes is over the ceiling of %zu bytes",
                 field, n, max);
        return false;
    }
    size_t ok = utf8_valid_prefix((const uint8_t *)s, n);
    if (ok < n) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "%s: not valid UTF-8 (byte %zu)", field, ok);
        snprintf(st->field, sizeof(st->field), "%s", field);
        return false;
    }
    return true;
}

bool check_headers(const engine_header *h, size_t n, const char *field, engine_status *st)
{
    if (n > ENGINE_HEADERS_MAX) {
        reply_over_ceiling(st, field, n, ENGINE_HEADERS_MAX);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!check_text(h[i].name, ENGINE_HEADER_NAME_MAX, true, field, st) ||
            !check_text(h[i].value, ENGINE_HEADER_VALUE_MAX, false, field, st))
            return false;
        if (strncasecmp(h[i].name, ENGINE_RESERVED_PREFIX, strlen(ENGINE_RESERVED_PREFIX)) == 0) {
            reject(st, field,
                   "%s: \"%.64s\" is reserved: names beginning \"berth-\" are set by "
                   "berth alone",
                   h[i].name);
            return false;
        }
    }
    return true;
}

bool check_error(const engine_error *err, engine_status *st)
{
    return check_text(err->code, ENGINE_ERROR_CODE_MAX, false, "error.code", st) &&
           check_text(err->message, ENGINE_ERROR_TEXT_MAX, false, "error.message", st) &&
           check_text(err->details, ENGINE_ERROR_DETAILS_MAX, false, "error.details", st);
}

bool check_items(size_t n, uint64_t max, engine_status *st)
{
    if (n == 0) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "items: at least one is required");
        snprintf(st->field, sizeof(st->field), "items");
        return false;
    }
    if (n > max) {
        reply_over_ceiling(st, "items", n, max);
        return false;
    }
    return true;
}

bool check_bound(bool has, uint64_t value, uint64_t def, uint64_t max, bool zero_ok,
                 const char *field, uint64_t *out, engine_status *st)
{
    if (!has) {
        *out = def;
        return true;
    }
    if (value == 0 && !zero_ok) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "%s: must be greater than zero", field);
        snprintf(st->field, sizeof(st->field), "%s", field);
        st->has_limit = true;
        st->limit = max;
        return false;
    }
    if (value > max) {
        reply_over_ceiling(st, field, value, max);
        return false;
    }
    *out = value;
    return true;
}

uint64_t check_backoff(uint64_t initial_ms, uint64_t max_ms, uint32_t n, double jitter)
{
    return check_backoff_curve(initial_ms, max_ms, n, 2.0, jitter);
}

uint64_t check_backoff_curve(uint64_t initial_ms, uint64_t max_ms, uint32_t n, double multiplier,
                             double jitter)
{
    uint64_t base = initial_ms;
    for (uint32_t i = 1; i < n && base < max_ms; i++) {
        double next = (double)base * multiplier;
        base = next >= (double)max_ms ? max_ms : (uint64_t)next;
    }
    if (base > max_ms)
        base = max_ms;
    if (jitter <= 0)
        return base;
    /* Cut by a uniform fraction of up to `jitter`, so that tasks failing
     * together do not come back together. */
    double u = (double)randombytes_uniform(1u << 24) / (double)(1u << 24);
    return base - (uint64_t)((double)base * jitter * u);
}

int check_transport(const char *t)
{
    if (t == NULL || t[0] == '\0' || strcmp(t, "pull") == 0)
        return CHECK_TRANSPORT_PULL;
    static const char *const schemes[] = {"nng+req://", "nng+req+ipc://", "nng+req+tls://"};
    size_t len = strlen(t);
    if (len > CHECK_TRANSPORT_MAX)
        return CHECK_TRANSPORT_NONE;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            return CHECK_TRANSPORT_NONE;
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        size_t n = strlen(schemes[i]);
        if (len > n && strncmp(t, schemes[i], n) == 0)
            return CHECK_TRANSPORT_PUSH;
    }
    return CHECK_TRANSPORT_NONE;
}
