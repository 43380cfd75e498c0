/*
 * utf8.h — what a `string` may hold: UTF-8 as RFC 3629 defines it (no
 * overlong forms, no surrogates, nothing past U+10FFFF) and no NUL byte,
 * which C strings would cut at. Pure functions, any thread.
 */
#ifndef BERTH_ENGINE_UTF8_H
#define BERTH_ENGINE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The length of the longest prefix of s[0..n) that is well-formed UTF-8
 * without a NUL byte: n when all of it is. */
size_t utf8_valid_prefix(const uint8_t *s, size_t n);
static inline bool utf8_valid(const uint8_t *s, size_t n)
{
    return utf8_valid_prefix(s, n) == n;
}
/* Drops from the NUL-terminated s (in place) every byte that is not part
 * of a well-formed character: for text in which an echo of input was cut
 * at a byte count ("%.64s"), mid-character. Whole characters stay. */
void utf8_cut(char *s);

#endif
