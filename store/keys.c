/* keys.c — encoders for the layouts specified in keys.h. Pure functions. */
#include "store/keys.h"

#include <string.h>

#include "store/err.h"

void store_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

uint64_t store_get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

void store_put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

uint32_t store_get_be32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = (v << 8) | p[i];
    return v;
}

void store_row_key(uint8_t *out, uint64_t seq, char kind)
{
    store_put_be64(out, seq);
    out[8] = (uint8_t)kind;
}

void store_delivery_key(uint8_t *out, uint64_t seq)
{
    out[0] = 'd';
    store_put_be64(out + 1, seq);
}

size_t store_submit_key(uint8_t *out, const char *topic, const char *idem_key)
{
    size_t tl = strlen(topic), kl = strlen(idem_key);
    if (tl == 0 || tl > BERTH_TOPIC_MAX || kl == 0 || kl > BERTH_IDEM_KEY_MAX)
        return 0;
    out[0] = (uint8_t)tl;
    memcpy(out + 1, topic, tl);
    memcpy(out + 1 + tl, idem_key, kl);
    return 1 + tl + kl;
}

size_t store_call_key(uint8_t *out, const char *topic, const char *idem_key)
{
    size_t n = store_submit_key(out + 1, topic, idem_key);
    if (n == 0)
        return 0;
    out[0] = 0xff;
    return n + 1;
}

void store_instance_key(uint8_t *out, char kind, const uint8_t id[BERTH_ID_LEN])
{
    out[0] = (uint8_t)kind;
    memcpy(out + 1, id, BERTH_ID_LEN);
}

void store_retention_key(uint8_t *out, uint64_t ended_at_ms, const uint8_t id[BERTH_ID_LEN])
{
    store_put_be64(out, ended_at_ms);
    memcpy(out + 8, id, BERTH_ID_LEN);
}

void store_incident_key(uint8_t *out, uint64_t at_ms, uint64_t seq)
{
    store_put_be64(out, at_ms);
    store_put_be64(out + 8, seq);
}

bool store_dedup_alive(const void *value, size_t len, uint64_t now_ms, uint64_t horizon_ms)
{
    if (len < STORE_DEDUP_TIME_LEN)
        return false;
    uint64_t at = store_get_be64(value);
    /* A time in the future (clock stepped back) counts as fresh. */
    return at >= now_ms || now_ms - at < horizon_ms;
}

void store_id_format(const uint8_t id[BERTH_ID_LEN], char out[BERTH_ID_STR_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < BERTH_ID_LEN; i++) {
        out[2 * i] = hex[id[i] >> 4];
        out[2 * i + 1] = hex[id[i] & 15];
    }
    out[BERTH_ID_STR_LEN] = '\0';
}

/* Each byte's hex digit value plus one; 0 for a byte that is not one. */
static const uint8_t hex1[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

/* Table-driven, one test for the whole id: each completion parses two
 * (its task id and its lock token) on the engine thread. */
int store_id_parse(const char *s, uint8_t out[BERTH_ID_LEN])
{
    if (s == NULL || strnlen(s, BERTH_ID_STR_LEN + 1) != BERTH_ID_STR_LEN)
        return BERTH_EINVAL;
    const unsigned char *u = (const unsigned char *)s;
    unsigned bad = 0;
    for (int i = 0; i < BERTH_ID_LEN; i++) {
        unsigned hi = hex1[u[2 * i]], lo = hex1[u[2 * i + 1]];
        bad |= (unsigned)(hi == 0) | (unsigned)(lo == 0);
        out[i] = (uint8_t)((hi - 1) << 4 | ((lo - 1) & 15));
    }
    return bad ? BERTH_EINVAL : BERTH_OK;
}
