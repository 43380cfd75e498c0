/* when.c — see when.h. */
#include "tools/clients/c/when.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Reads digits at *p into *v (false: none, or past UINT64_MAX). */
static bool digits(const char **p, uint64_t *v, int *n)
{
    uint64_t x = 0;
    int k = 0;
    for (; isdigit((unsigned char)**p); (*p)++, k++) {
        unsigned d = (unsigned)(**p - '0');
        if (x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    *v = x;
    if (n != NULL)
        *n = k;
    return k > 0;
}

bool when_duration_ms(const char *s, uint64_t *out, char *err, size_t errlen)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    const char *p = s;
    uint64_t total = 0;
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return true;
    }
    do {
        uint64_t v;
        if (!digits(&p, &v, NULL)) {
            snprintf(err, errlen, "\"%s\" is not a duration (10s, 5m, 1h30m, 1500ms)", s);
            return false;
        }
        size_t i = 0;
        size_t n = sizeof(units) / sizeof(units[0]);
        for (; i < n; i++) {
            size_t l = strlen(units[i].unit);
            /* "m" must not take the "m" of "ms" */
            if (strncmp(p, units[i].unit, l) == 0 && !isalpha((unsigned char)p[l]))
                break;
        }
        if (i == n) {
            snprintf(err, errlen, "\"%s\": a number needs a unit (ms, s, m, h or d)", s);
            return false;
        }
        if (v > (UINT64_MAX - total) / units[i].ms) {
            snprintf(err, errlen, "\"%s\" is too long a duration", s);
            return false;
        }
        total += v * units[i].ms;
        p += strlen(units[i].unit);
    } while (*p != '\0');
    *out = total;
    return true;
}

/* Days from 1970-01-01 to y-m-d of the proleptic Gregorian calendar
 * (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static unsigned days_in_month(uint64_t y, uint64_t m)
{
    static const unsigned n[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : n[m - 1];
}

/* Exactly `width` digits at *p, then the separator sep (0: none). */
static bool field(const char **p, int width, char sep, uint64_t *v)
{
    int n;
    if (!digits(p, v, &n) || n != width)
        return false;
    if (sep != 0) {
        if (**p != sep)
            return false;
        (*p)++;
    }
    return true;
}

bool when_instant_ms(const char *s, uint64_t *out, char *err, size_t errlen)
{
    const char *p = s;
    uint64_t y, mo, d, h, mi, se, ms = 0;
    if (!field(&p, 4, '-', &y) || !field(&p, 2, '-', &mo) || !field(&p, 2, 0, &d) ||
        (*p != 'T' && *p != 't' && *p != ' '))
        goto bad;
    p++;
    if (!field(&p, 2, ':', &h) || !field(&p, 2, ':', &mi) || !field(&p, 2, 0, &se))
        goto bad;
    if (*p == '.') {
        p++;
        uint64_t scale = 100;
        if (!isdigit((unsigned char)*p))
            goto bad;
        for (; isdigit((unsigned char)*p); p++, scale /= 10)
            ms += (uint64_t)(*p - '0') * scale; /* digits past the third count for nothing */
    }
    int64_t offset_min = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p++ == '-' ? -1 : 1;
        uint64_t oh, om;
        if (!field(&p, 2, ':', &oh) || !field(&p, 2, 0, &om) || oh > 23 || om > 59)
            goto bad;
        offset_min = sign * (int64_t)(oh * 60 + om);
    } else {
        goto bad;
    }
    if (*p != '\0')
        goto bad;
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 59) {
        snprintf(err, errlen, "\"%s\" is not a date and time that exists", s);
        return false;
    }
    int64_t t = days_from_civil((int64_t)y, (unsigned)mo, (unsigned)d) * 86400 +
                (int64_t)(h * 3600 + mi * 60 + se) - offset_min * 60;
    if (t < 0) {
        snprintf(err, errlen, "\"%s\" is before 1970", s);
        return false;
    }
    *out = (uint64_t)t * 1000 + ms;
    return true;
bad:
    snprintf(err, errlen, "\"%s\" is not an RFC 3339 time (2026-12-24T18:00:00Z)", s);
    return false;
}
