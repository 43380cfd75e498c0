/*
 * pgwire.c — see pgwire.h. The formats are PostgreSQL's send and recv
 * functions: integers big-endian, bool one byte, uuid its 16 bytes, text
 * and bytea their bytes; an array is int32 ndim, int32 has-nulls, Oid
 * element type, (int32 size, int32 lower bound) per dimension, then per
 * element an int32 length (-1: NULL) and its bytes (array_send()).
 */
#include "pg/pgwire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/mem.h"
#include "store/err.h"

static void put32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

static void put64(uint8_t *b, uint64_t v)
{
    put32(b, (uint32_t)(v >> 32));
    put32(b + 4, (uint32_t)v);
}

static uint32_t get32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

static uint64_t get64(const uint8_t *b)
{
    return (uint64_t)get32(b) << 32 | get32(b + 4);
}

static const char *type_name(Oid t)
{
    switch (t) {
    case PGWIRE_BOOL:
        return "bool";
    case PGWIRE_BYTEA:
        return "bytea";
    case PGWIRE_INT8:
        return "int8";
    case PGWIRE_INT4:
        return "int4";
    case PGWIRE_TEXT:
        return "text";
    case PGWIRE_UUID:
        return "uuid";
    case PGWIRE_BOOL_ARRAY:
        return "bool[]";
    case PGWIRE_BYTEA_ARRAY:
        return "bytea[]";
    case PGWIRE_INT4_ARRAY:
        return "int4[]";
    case PGWIRE_TEXT_ARRAY:
        return "text[]";
    case PGWIRE_INT8_ARRAY:
        return "int8[]";
    case PGWIRE_UUID_ARRAY:
        return "uuid[]";
    default:
        return "?";
    }
}

void pgwire_params_init(pgwire_params *p, void *buf, size_t cap)
{
    memset(p, 0, sizeof *p);
    p->buf = buf;
    p->cap = buf != NULL ? cap : 0;
}

int pgwire_params_init_own(pgwire_params *p, size_t cap)
{
    memset(p, 0, sizeof *p);
    p->buf = mem_alloc(cap ? cap : 1);
    if (p->buf == NULL)
        return BERTH_ENOMEM;
    p->cap = cap ? cap : 1;
    p->grows = true;
    return BERTH_OK;
}

void pgwire_params_free(pgwire_params *p)
{
    if (p->grows)
        free(p->buf);
    p->buf = NULL;
    p->cap = p->used = 0;
    p->grows = false;
}

/* Room for need more bytes in a buffer of its own: the values already
 * added move with it. */
static bool grow(pgwire_params *p, size_t need)
{
    if (!p->grows || need > INT32_MAX)
        return false;
    size_t cap = p->cap * 2 > p->used + need ? p->cap * 2 : p->used + need;
    uint8_t *b = mem_realloc(p->buf, cap);
    if (b == NULL)
        return false;
    for (int i = 0; i < p->n; i++)
        if (p->values[i] != NULL)
            p->values[i] = (const char *)b + ((const uint8_t *)p->values[i] - p->buf);
    p->buf = b;
    p->cap = cap;
    return true;
}

int pgwire_params_status(const pgwire_params *p)
{
    return p->rv;
}

static void fail(pgwire_params *p, Oid type, size_t need)
{
    if (p->rv != BERTH_OK)
        return;
    p->rv = BERTH_EINVAL;
    if (p->n >= PGWIRE_MAX_PARAMS)
        snprintf(p->err, sizeof p->err, "parameter %d (%s): more than %d parameters", p->n + 1,
                 type_name(type), PGWIRE_MAX_PARAMS);
    else
        snprintf(p->err, sizeof p->err, "parameter %d (%s): needs %zu bytes, %zu left", p->n + 1,
                 type_name(type), need, p->cap - p->used);
}

/* Room for a parameter of need bytes: its start in buf, or NULL (p failed). */
static uint8_t *take(pgwire_params *p, Oid type, size_t need)
{
    if (p->rv != BERTH_OK)
        return NULL;
    if (p->n >= PGWIRE_MAX_PARAMS || need > INT32_MAX ||
        (need > p->cap - p->used && !grow(p, need))) {
        fail(p, type, need);
        return NULL;
    }
    uint8_t *at = p->buf + p->used;
    p->values[p->n] = (const char *)at;
    p->lengths[p->n] = (int)need;
    p->formats[p->n] = 1;
    p->types[p->n] = type;
    p->n++;
    p->used += need;
    return at;
}

void pgwire_null(pgwire_params *p, Oid type)
{
    if (p->rv != BERTH_OK)
        return;
    if (p->n >= PGWIRE_MAX_PARAMS) {
        fail(p, type, 0);
        return;
    }
    p->values[p->n] = NULL;
    p->lengths[p->n] = 0;
    p->formats[p->n] = 1;
    p->types[p->n] = type;
    p->n++;
}

void pgwire_int4(pgwire_params *p, int32_t v)
{
    uint8_t *b = take(p, PGWIRE_INT4, 4);
    if (b != NULL)
        put32(b, (uint32_t)v);
}

void pgwire_int8(pgwire_params *p, int64_t v)
{
    uint8_t *b = take(p, PGWIRE_INT8, 8);
    if (b != NULL)
        put64(b, (uint64_t)v);
}

void pgwire_bool(pgwire_params *p, bool v)
{
    uint8_t *b = take(p, PGWIRE_BOOL, 1);
    if (b != NULL)
        b[0] = v ? 1 : 0;
}

void pgwire_uuid(pgwire_params *p, const uint8_t v[PGWIRE_UUID_LEN])
{
    uint8_t *b = take(p, PGWIRE_UUID, PGWIRE_UUID_LEN);
    if (b != NULL)
        memcpy(b, v, PGWIRE_UUID_LEN);
}

void pgwire_bytea(pgwire_params *p, const void *v, size_t len)
{
    if (v == NULL) {
        pgwire_null(p, PGWIRE_BYTEA);
        return;
    }
    uint8_t *b = take(p, PGWIRE_BYTEA, len);
    if (b != NULL && len > 0)
        memcpy(b, v, len);
}

void pgwire_text(pgwire_params *p, const char *v)
{
    if (v == NULL) {
        pgwire_null(p, PGWIRE_TEXT);
        return;
    }
    size_t len = strlen(v);
    uint8_t *b = take(p, PGWIRE_TEXT, len);
    if (b != NULL && len > 0)
        memcpy(b, v, len);
}

/*
 * An array of n elements: sizes come from size_of(i) (-1: NULL), bytes
 * from write(i, dst). Sized first, so the parameter is taken whole or not
 * at all.
 */
typedef struct elems {
    const void *v;
    const bool *nulls;
    const size_t *lens;
    size_t width; /* fixed element size; 0 for bytea/text */
    Oid elem;
} elems;

static long elem_len(const elems *e, size_t i)
{
    if (e->width > 0)
        return e->nulls != NULL && e->nulls[i] ? -1 : (long)e->width;
    const void *const *vv = e->v;
    if (vv[i] == NULL)
        return -1;
    return e->lens != NULL ? (long)e->lens[i] : (long)strlen(vv[i]);
}

static void elem_write(const elems *e, size_t i, uint8_t *dst)
{
    switch (e->elem) {
    case PGWIRE_INT4:
        put32(dst, (uint32_t)((const int32_t *)e->v)[i]);
        break;
    case PGWIRE_INT8:
        put64(dst, (uint64_t)((const int64_t *)e->v)[i]);
        break;
    case PGWIRE_BOOL:
        dst[0] = ((const bool *)e->v)[i] ? 1 : 0;
        break;
    case PGWIRE_UUID:
        memcpy(dst, ((const uint8_t(*)[PGWIRE_UUID_LEN])e->v)[i], PGWIRE_UUID_LEN);
        break;
    default: {
        const void *const *vv = e->v;
        long len = elem_len(e, i);
        if (len > 0)
            memcpy(dst, vv[i], (size_t)len);
    }
    }
}

static void put_array(pgwire_params *p, Oid array_type, const elems *e, size_t n)
{
    if (p->rv != BERTH_OK)
        return;
    size_t need = n > 0 ? 20 : 12;
    bool has_null = false;
    for (size_t i = 0; i < n; i++) {
        long len = elem_len(e, i);
        has_null |= len < 0;
        size_t add = 4 + (len > 0 ? (size_t)len : 0);
        if (len > INT32_MAX || need > SIZE_MAX - add) {
            fail(p, array_type, SIZE_MAX);
            return;
        }
        need += add;
    }
    if (n > INT32_MAX) {
        fail(p, array_type, need);
        return;
    }
    uint8_t *b = take(p, array_type, need);
    if (b == NULL)
        return;
    put32(b, n > 0 ? 1 : 0);
    put32(b + 4, has_null ? 1 : 0);
    put32(b + 8, e->elem);
    b += 12;
    if (n > 0) {
        put32(b, (uint32_t)n);
        put32(b + 4, 1);
        b += 8;
    }
    for (size_t i = 0; i < n; i++) {
        long len = elem_len(e, i);
        put32(b, (uint32_t)(int32_t)len);
        b += 4;
        if (len >= 0) {
            elem_write(e, i, b);
            b += len;
        }
    }
}

void pgwire_int4_array(pgwire_params *p, const int32_t *v, const bool *nulls, size_t n)
{
    elems e = {.v = v, .nulls = nulls, .width = 4, .elem = PGWIRE_INT4};
    put_array(p, PGWIRE_INT4_ARRAY, &e, n);
}

void pgwire_int8_array(pgwire_params *p, const int64_t *v, const bool *nulls, size_t n)
{
    elems e = {.v = v, .nulls = nulls, .width = 8, .elem = PGWIRE_INT8};
    put_array(p, PGWIRE_INT8_ARRAY, &e, n);
}

void pgwire_bool_array(pgwire_params *p, const bool *v, const bool *nulls, size_t n)
{
    elems e = {.v = v, .nulls = nulls, .width = 1, .elem = PGWIRE_BOOL};
    put_array(p, PGWIRE_BOOL_ARRAY, &e, n);
}

void pgwire_uuid_array(pgwire_params *p, const uint8_t (*v)[PGWIRE_UUID_LEN], const bool *nulls,
                       size_t n)
{
    elems e = {.v = v, .nulls = nulls, .width = PGWIRE_UUID_LEN, .elem = PGWIRE_UUID};
    put_array(p, PGWIRE_UUID_ARRAY, &e, n);
}

void pgwire_bytea_array(pgwire_params *p, const void *const *v, const size_t *lens, size_t n)
{
    elems e = {.v = v, .lens = lens, .elem = PGWIRE_BYTEA};
    if (lens == NULL && n > 0) { /* bytea needs lengths */
        fail(p, PGWIRE_BYTEA_ARRAY, 0);
        return;
    }
    put_array(p, PGWIRE_BYTEA_ARRAY, &e, n);
}

void pgwire_text_array(pgwire_params *p, const char *const *v, size_t n)
{
    elems e = {.v = (const void *const *)v, .elem = PGWIRE_TEXT};
    put_array(p, PGWIRE_TEXT_ARRAY, &e, n);
}

/* ---- readers ---- */

bool pgwire_isnull(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) != 0;
}

/* The value at (row, col) if it is binary, of type t, not NULL and of
 * length want (0: any). */
static int value(const PGresult *r, int row, int col, Oid t, size_t want, const uint8_t **v,
                 size_t *len)
{
    if (row < 0 || col < 0 || row >= PQntuples(r) || col >= PQnfields(r) ||
        PQfformat(r, col) != 1 || PQftype(r, col) != t)
        return BERTH_ECORRUPT;
    if (PQgetisnull(r, row, col))
        return BERTH_ENOTFOUND;
    int n = PQgetlength(r, row, col);
    if (n < 0 || (want > 0 && (size_t)n != want))
        return BERTH_ECORRUPT;
    *v = (const uint8_t *)PQgetvalue(r, row, col);
    *len = (size_t)n;
    return BERTH_OK;
}

int pgwire_get_int4(const PGresult *r, int row, int col, int32_t *out)
{
    const uint8_t *v;
    size_t len;
    int rv = value(r, row, col, PGWIRE_INT4, 4, &v, &len);
    if (rv == BERTH_OK)
        *out = (int32_t)get32(v);
    return rv;
}

int pgwire_get_int8(const PGresult *r, int row, int col, int64_t *out)
{
    const uint8_t *v;
    size_t len;
    int rv = value(r, row, col, PGWIRE_INT8, 8, &v, &len);
    if (rv == BERTH_OK)
        *out = (int64_t)get64(v);
    return rv;
}

int pgwire_get_bool(const PGresult *r, int row, int col, bool *out)
{
    const uint8_t *v;
    size_t len;
    int rv = value(r, row, col, PGWIRE_BOOL, 1, &v, &len);
    if (rv == BERTH_OK)
        *out = v[0] != 0;
    return rv;
}

int pgwire_get_uuid(const PGresult *r, int row, int col, uint8_t out[PGWIRE_UUID_LEN])
{
    const uint8_t *v;
    size_t len;
    int rv = value(r, row, col, PGWIRE_UUID, PGWIRE_UUID_LEN, &v, &len);
    if (rv == BERTH_OK)
        memcpy(out, v, PGWIRE_UUID_LEN);
    return rv;
}

int pgwire_get_bytea(const PGresult *r, int row, int col, const uint8_t **v, size_t *len)
{
    return value(r, row, col, PGWIRE_BYTEA, 0, v, len);
}

int pgwire_get_text(const PGresult *r, int row, int col, const char **v, size_t *len)
{
    const uint8_t *b;
    int rv = value(r, row, col, PGWIRE_TEXT, 0, &b, len);
    if (rv == BERTH_OK)
        *v = (const char *)b;
    return rv;
}

static size_t fixed_width(Oid elem)
{
    switch (elem) {
    case PGWIRE_INT4:
        return 4;
    case PGWIRE_INT8:
        return 8;
    case PGWIRE_BOOL:
        return 1;
    case PGWIRE_UUID:
        return PGWIRE_UUID_LEN;
    default:
        return 0;
    }
}

static Oid array_of(Oid elem)
{
    switch (elem) {
    case PGWIRE_INT4:
        return PGWIRE_INT4_ARRAY;
    case PGWIRE_INT8:
        return PGWIRE_INT8_ARRAY;
    case PGWIRE_BOOL:
        return PGWIRE_BOOL_ARRAY;
    case PGWIRE_UUID:
        return PGWIRE_UUID_ARRAY;
    case PGWIRE_BYTEA:
        return PGWIRE_BYTEA_ARRAY;
    case PGWIRE_TEXT:
        return PGWIRE_TEXT_ARRAY;
    default:
        return 0;
    }
}

int pgwire_array_open(const PGresult *r, int row, int col, Oid elem, pgwire_array *a)
{
    const uint8_t *v;
    size_t len;
    memset(a, 0, sizeof *a);
    Oid t = array_of(elem);
    if (t == 0)
        return BERTH_EINVAL;
    int rv = value(r, row, col, t, 0, &v, &len);
    if (rv != BERTH_OK)
        return rv;
    if (len < 12)
        return BERTH_ECORRUPT;
    uint32_t ndim = get32(v);
    if (ndim > 1 || get32(v + 8) != elem)
        return BERTH_ECORRUPT;
    const uint8_t *p = v + 12, *end = v + len;
    size_t n = 0;
    if (ndim == 1) {
        if (len < 20)
            return BERTH_ECORRUPT;
        n = get32(p);
        p += 8;
        if (n > INT32_MAX)
            return BERTH_ECORRUPT;
    }
    a->next = p;
    a->n = n;
    a->elem = elem;
    size_t w = fixed_width(elem);
    for (size_t i = 0; i < n; i++) { /* every length within the value */
        if ((size_t)(end - p) < 4)
            return BERTH_ECORRUPT;
        int32_t el = (int32_t)get32(p);
        p += 4;
        if (el < -1 || (el >= 0 && (size_t)el > (size_t)(end - p)) ||
            (el >= 0 && w > 0 && (size_t)el != w))
            return BERTH_ECORRUPT;
        if (el > 0)
            p += el;
    }
    return p == end ? BERTH_OK : BERTH_ECORRUPT;
}

int pgwire_array_next(pgwire_array *a, const uint8_t **v, size_t *len)
{
    if (a->i >= a->n)
        return 0;
    int32_t el = (int32_t)get32(a->next);
    a->next += 4;
    a->i++;
    if (el < 0) {
        *v = NULL;
        *len = 0;
        return 1;
    }
    *v = a->next;
    *len = (size_t)el;
    a->next += el;
    return 1;
}

/* Fills out[i] (width bytes each, via conv) for every element. */
static int get_fixed(const PGresult *r, int row, int col, Oid elem, void *out, size_t width,
                     bool *nulls, size_t cap, size_t *n)
{
    pgwire_array a;
    const uint8_t *v;
    size_t len;
    *n = 0;
    int rv = pgwire_array_open(r, row, col, elem, &a);
    if (rv != BERTH_OK)
        return rv;
    if (a.n > cap)
        return BERTH_EINVAL;
    for (size_t i = 0; pgwire_array_next(&a, &v, &len) == 1; i++) {
        uint8_t *dst = (uint8_t *)out + i * width;
        if (v == NULL) {
            if (nulls == NULL)
                return BERTH_ENOTFOUND;
            nulls[i] = true;
            memset(dst, 0, width);
            continue;
        }
        if (nulls != NULL)
            nulls[i] = false;
        if (elem == PGWIRE_INT8) {
            int64_t x = (int64_t)get64(v);
            memcpy(dst, &x, sizeof x);
        } else {
            memcpy(dst, v, width);
        }
    }
    *n = a.n;
    return BERTH_OK;
}

int pgwire_get_int8_array(const PGresult *r, int row, int col, int64_t *out, bool *nulls,
                          size_t cap, size_t *n)
{
    return get_fixed(r, row, col, PGWIRE_INT8, out, sizeof *out, nulls, cap, n);
}

int pgwire_get_uuid_array(const PGresult *r, int row, int col, uint8_t (*out)[PGWIRE_UUID_LEN],
                          bool *nulls, size_t cap, size_t *n)
{
    return get_fixed(r, row, col, PGWIRE_UUID, out, PGWIRE_UUID_LEN, nulls, cap, n);
}
