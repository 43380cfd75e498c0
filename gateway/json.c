/* json.c — see json.h. */
#include "gateway/json.h"

#include <string.h>

/* The length of the UTF-8 sequence at p (at most n bytes), 0 if none is
 * well-formed there. */
static size_t seq(const uint8_t *p, size_t n, uint32_t *cp)
{
    uint8_t b = p[0];
    size_t len;
    uint32_t c, min;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b >= 0xc2 && b <= 0xdf) {
        len = 2, c = b & 0x1f, min = 0x80;
    } else if (b >= 0xe0 && b <= 0xef) {
        len = 3, c = b & 0x0f, min = 0x800;
    } else if (b >= 0xf0 && b <= 0xf4) {
        len = 4, c = b & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

bool gw_json_utf8(const uint8_t *p, size_t n)
{
    uint32_t c;
    for (size_t i = 0; i < n;) {
        size_t k = seq(p + i, n - i, &c);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

void gw_json_strn(FILE *f, const uint8_t *p, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t k = seq(p + i, n - i, &c);
        if (k == 0) {
            fputs("\\ufffd", f);
            i++;
            continue;
        }
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c == '\t') {
            fputs("\\t", f);
        } else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f || c == 0x2028 ||
                   c == 0x2029) {
            fprintf(f, "\\u%04x", (unsigned)c);
        } else {
            fwrite(p + i, 1, k, f);
        }
        i += k;
    }
    fputc('"', f);
}

void gw_json_str(FILE *f, const char *s)
{
    if (s == NULL)
        fputs("null", f);
    else
        gw_json_strn(f, (const uint8_t *)s, strlen(s));
}

void gw_json_hex(FILE *f, const uint8_t *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        fputc(digits[p[i] >> 4], f);
        fputc(digits[p[i] & 15], f);
    }
    fputc('"', f);
}

void gw_json_key(FILE *f, const char *key)
{
    gw_json_str(f, key);
    fputc(':', f);
}
