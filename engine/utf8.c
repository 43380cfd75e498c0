/* utf8.c — see utf8.h. */
#include "engine/utf8.h"

#include <string.h>

size_t utf8_valid_prefix(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* Eight ASCII bytes at a time, none of them NUL. */
        while (n - i >= 8) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if ((v & 0x8080808080808080ull) != 0 ||
                ((v - 0x0101010101010101ull) & ~v & 0x8080808080808080ull) != 0)
                break;
            i += 8;
        }
        if (i == n)
            break;
        uint8_t c = s[i];
        if (c >= 0x01 && c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0; /* no overlong forms */
            else if (c == 0xED)
                hi = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F; /* nothing past U+10FFFF */
        } else {
            return i; /* NUL, a continuation byte, C0, C1, F5..FF */
        }
        if (n - i < len || s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return i;
        i += len;
    }
    return n;
}

void utf8_cut(char *s)
{
    size_t n = strlen(s), out = 0;
    for (size_t i = 0; i < n;) {
        size_t ok = utf8_valid_prefix((const uint8_t *)s + i, n - i);
        memmove(s + out, s + i, ok);
        out += ok;
        i += ok + (i + ok < n); /* drop the byte that starts no character */
    }
    s[out] = '\0';
}
