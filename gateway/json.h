/*
 * json.h — JSON text written to a stdio stream, for the console's API
 * (gateway/api.c). Strings are escaped for any place a page may put them:
 * besides what JSON requires, '<', '>', '&', U+2028 and U+2029 become
 * \u escapes, so an answer stays inert even where a browser sniffs it as
 * HTML or script. Bytes that are not UTF-8 become U+FFFD: what is written
 * is always valid JSON. Any thread; nothing is kept between calls.
 */
#ifndef BERTH_GATEWAY_JSON_H
#define BERTH_GATEWAY_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Whether p[0..n) is well-formed UTF-8 (no overlongs, no surrogates,
 * nothing past U+10FFFF). */
bool gw_json_utf8(const uint8_t *p, size_t n);
/* s as a JSON string; NULL as null. */
void gw_json_str(FILE *f, const char *s);
/* p[0..n) as a JSON string (bytes that are not UTF-8 as U+FFFD). */
void gw_json_strn(FILE *f, const uint8_t *p, size_t n);
/* p[0..n) as a JSON string of lower-case hex digits. */
void gw_json_hex(FILE *f, const uint8_t *p, size_t n);
/* "key": (a key written as gw_json_str writes it, then a colon). */
void gw_json_key(FILE *f, const char *key);

#endif
