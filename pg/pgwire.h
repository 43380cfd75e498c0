/*
 * pgwire.h — PostgreSQL's binary format for the values berth sends and
 * reads: int4, int8, bool, bytea, text, uuid (16 raw bytes: berth's ids),
 * and one-dimensional arrays of each, NULL elements included.
 *
 * Parameters are built into a pgwire_params whose bytes live in a buffer
 * the CALLER owns and sizes: a value that does not fit (or a parameter past
 * PGWIRE_MAX_PARAMS) is an error that sticks to the params, never a write
 * past the buffer; the params are checked once, before they are sent
 * (pgwire_params_status()). values[]/lengths[]/formats[]/types[] are laid
 * out as libpq's PQsendQueryPrepared/PQexecParams take them; libpq copies
 * them when the statement is queued, so the buffer may be reused after.
 *
 * Readers take a binary result (resultFormat 1) and check the column's
 * type, the value's length and, for arrays, the whole header and every
 * element's length before handing anything out: a result that does not
 * match is BERTH_ECORRUPT, a NULL where a value is needed BERTH_ENOTFOUND.
 * Pointers handed out point INTO the PGresult: valid until it is cleared.
 *
 * Plain functions over caller memory; no global state: any thread.
 */
#ifndef BERTH_PG_PGWIRE_H
#define BERTH_PG_PGWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

/* Type OIDs (pg_type.dat; stable across versions). */
#define PGWIRE_BOOL        16
#define PGWIRE_BYTEA       17
#define PGWIRE_INT8        20
#define PGWIRE_INT4        23
#define PGWIRE_TEXT        25
#define PGWIRE_UUID        2950
#define PGWIRE_BOOL_ARRAY  1000
#define PGWIRE_BYTEA_ARRAY 1001
#define PGWIRE_INT4_ARRAY  1007
#define PGWIRE_TEXT_ARRAY  1009
#define PGWIRE_INT8_ARRAY  1016
#define PGWIRE_UUID_ARRAY  2951

#define PGWIRE_UUID_LEN   16
#define PGWIRE_MAX_PARAMS 32

typedef struct pgwire_params {
    int n;                                 /* parameters added so far */
    const char *values[PGWIRE_MAX_PARAMS]; /* into buf; NULL: SQL NULL */
    int lengths[PGWIRE_MAX_PARAMS];        /* bytes of each value */
    int formats[PGWIRE_MAX_PARAMS];        /* all 1 (binary) */
    Oid types[PGWIRE_MAX_PARAMS];          /* for PQexecParams/PQprepare if wanted */
    uint8_t *buf;                          /* the caller's, or its own (grows) */
    size_t cap, used;                      /* bytes of buf; bytes taken */
    bool grows;                            /* buf is its own, made larger as needed */
    int rv;                                /* the first error (sticky), 0 if none */
    char err[128];                         /* what it was */
} pgwire_params;

/* Starts empty over buf[cap] (the caller's, outliving the params' use). */
void pgwire_params_init(pgwire_params *p, void *buf, size_t cap);
/* Starts empty over a buffer of its own, cap bytes to begin with, made
 * larger when a parameter needs it (a guess of the size only saves
 * copies). BERTH_ENOMEM: p holds nothing. pgwire_params_free() ends it. */
int pgwire_params_init_own(pgwire_params *p, size_t cap);
void pgwire_params_free(pgwire_params *p);
/* 0, or the first error: BERTH_EINVAL ("parameter 3 (int8[] of 5000):
 * needs 84020 bytes, 100 left"), with p->err. */
int pgwire_params_status(const pgwire_params *p);

/* Scalars. text: NUL-terminated UTF-8; NULL (text, bytea) is SQL NULL. */
void pgwire_null(pgwire_params *p, Oid type);
void pgwire_int4(pgwire_params *p, int32_t v);
void pgwire_int8(pgwire_params *p, int64_t v);
void pgwire_bool(pgwire_params *p, bool v);
void pgwire_uuid(pgwire_params *p, const uint8_t v[PGWIRE_UUID_LEN]);
void pgwire_bytea(pgwire_params *p, const void *v, size_t len);
void pgwire_text(pgwire_params *p, const char *v);

/* One-dimensional arrays (lower bound 1; n = 0 is the empty array). For
 * the fixed-size types, nulls (may be NULL: none) marks NULL elements; for
 * bytea and text a NULL pointer is a NULL element. */
void pgwire_int4_array(pgwire_params *p, const int32_t *v, const bool *nulls, size_t n);
void pgwire_int8_array(pgwire_params *p, const int64_t *v, const bool *nulls, size_t n);
void pgwire_bool_array(pgwire_params *p, const bool *v, const bool *nulls, size_t n);
void pgwire_uuid_array(pgwire_params *p, const uint8_t (*v)[PGWIRE_UUID_LEN], const bool *nulls,
                       size_t n);
void pgwire_bytea_array(pgwire_params *p, const void *const *v, const size_t *lens, size_t n);
void pgwire_text_array(pgwire_params *p, const char *const *v, size_t n);

/* Readers of one binary value at (row, col). */
bool pgwire_isnull(const PGresult *r, int row, int col);
int pgwire_get_int4(const PGresult *r, int row, int col, int32_t *out);
int pgwire_get_int8(const PGresult *r, int row, int col, int64_t *out);
int pgwire_get_bool(const PGresult *r, int row, int col, bool *out);
int pgwire_get_uuid(const PGresult *r, int row, int col, uint8_t out[PGWIRE_UUID_LEN]);
/* *v points into r; text is not guaranteed NUL-terminated by the format
 * (libpq does terminate every value): use *len. */
int pgwire_get_bytea(const PGresult *r, int row, int col, const uint8_t **v, size_t *len);
int pgwire_get_text(const PGresult *r, int row, int col, const char **v, size_t *len);

/* An array value, checked whole when opened; then its elements in order. */
typedef struct pgwire_array {
    const uint8_t *next; /* the next element's length word, into the PGresult */
    size_t n;            /* elements */
    size_t i;            /* elements handed out */
    Oid elem;            /* element type */
} pgwire_array;

/* Opens the array at (row, col) whose element type must be elem (e.g.
 * PGWIRE_INT8). A NULL array is BERTH_ENOTFOUND; more than one dimension,
 * another element type or a length past the value is BERTH_ECORRUPT. */
int pgwire_array_open(const PGresult *r, int row, int col, Oid elem, pgwire_array *a);
/* The next element: 1 and *v, *len (*v NULL for a NULL element), or 0 at
 * the end. Fixed-size elements were checked to have their size at open. */
int pgwire_array_next(pgwire_array *a, const uint8_t **v, size_t *len);

/* Whole arrays into caller arrays of cap elements: *n is the count;
 * more than cap is BERTH_EINVAL, a NULL element BERTH_ENOTFOUND unless
 * nulls (may be NULL) is given to mark it (the value is then 0). */
int pgwire_get_int8_array(const PGresult *r, int row, int col, int64_t *out, bool *nulls,
                          size_t cap, size_t *n);
int pgwire_get_uuid_array(const PGresult *r, int row, int col, uint8_t (*out)[PGWIRE_UUID_LEN],
                          bool *nulls, size_t cap, size_t *n);

#endif
