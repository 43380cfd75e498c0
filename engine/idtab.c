/* idtab.c — the id map of idtab.h. */
#include "engine/idtab.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/mem.h"
#include "store/err.h"

enum { MIN_CAP = 64 };

/* The id's two halves, folded and spread by a multiplication (Fibonacci
 * hashing): any ids, random or not, spread over the top bits. */
static uint64_t mix(const uint8_t id[BERTH_ID_LEN])
{
    uint64_t a, b;
    memcpy(&a, id, 8);
    memcpy(&b, id + 8, 8);
    return (a ^ (b * 0xff51afd7ed558ccdull)) * 0x9e3779b97f4a7c15ull;
}

static uint32_t tag_of(uint64_t m)
{
    return (uint32_t)(m >> 32) | 1u;
}

static size_t home(const idtab *t, uint32_t tag)
{
    return (size_t)(((uint64_t)tag << 32) >> t->shift);
}

static const uint8_t *id_of(const idtab *t, const void *obj)
{
    return (const uint8_t *)obj + t->off;
}

static unsigned log2_of(size_t cap)
{
    unsigned k = 0;
    while (((size_t)1 << k) < cap)
        k++;
    return k;
}

static int alloc_slots(size_t cap, uint32_t **h, void ***p)
{
    *h = mem_calloc_big(cap * sizeof(**h));
    *p = *h ? mem_calloc_big(cap * sizeof(**p)) : NULL;
    if (*p == NULL) {
        free(*h);
        return BERTH_ENOMEM;
    }
    return BERTH_OK;
}

int idtab_init(idtab *t, size_t off)
{
    memset(t, 0, sizeof(*t));
    if (alloc_slots(MIN_CAP, &t->h, &t->p) != BERTH_OK)
        return BERTH_ENOMEM;
    t->cap = MIN_CAP;
    t->shift = 64 - log2_of(MIN_CAP);
    t->off = off;
    return BERTH_OK;
}

void idtab_fini(idtab *t)
{
    free(t->h);
    free(t->p);
    t->h = NULL;
    t->p = NULL;
    t->cap = t->n = 0;
}

void idtab_clear(idtab *t)
{
    memset(t->h, 0, t->cap * sizeof(*t->h));
    t->n = 0;
}

/* The slot holding id; if none does, SIZE_MAX, and *empty (when given)
 * is the empty slot that ends its probe run, where it would go. */
static size_t find(const idtab *t, const uint8_t id[BERTH_ID_LEN], uint32_t tag, size_t *empty)
{
    size_t mask = t->cap - 1;
    for (size_t i = home(t, tag);; i = (i + 1) & mask) {
        if (t->h[i] == 0) {
            if (empty != NULL)
                *empty = i;
            return SIZE_MAX;
        }
        if (t->h[i] == tag && memcmp(id_of(t, t->p[i]), id, BERTH_ID_LEN) == 0)
            return i;
    }
}

void *idtab_get(const idtab *t, const uint8_t id[BERTH_ID_LEN])
{
    size_t i = find(t, id, tag_of(mix(id)), NULL);
    return i == SIZE_MAX ? NULL : t->p[i];
}

static void insert_slot(idtab *t, uint32_t tag, void *obj)
{
    size_t mask = t->cap - 1;
    size_t i = home(t, tag);
    while (t->h[i] != 0)
        i = (i + 1) & mask;
    t->h[i] = tag;
    t->p[i] = obj;
}

/* Rehashes into cap slots (a power of two, room for every entry). */
static int resize(idtab *t, size_t cap)
{
    idtab old = *t;
    if (alloc_slots(cap, &t->h, &t->p) != BERTH_OK) {
        t->h = old.h;
        t->p = old.p;
        return BERTH_ENOMEM;
    }
    t->cap = cap;
    t->shift = 64 - log2_of(cap);
    for (size_t i = 0; i < old.cap; i++)
        if (old.h[i] != 0)
            insert_slot(t, old.h[i], old.p[i]);
    free(old.h);
    free(old.p);
    return BERTH_OK;
}

int idtab_reserve(idtab *t, size_t n)
{
    if (n > SIZE_MAX / 8)
        return BERTH_ENOMEM;
    size_t cap = t->cap;
    while (4 * n > 3 * cap)
        cap *= 2;
    return cap == t->cap ? BERTH_OK : resize(t, cap);
}

void idtab_fit(idtab *t)
{
    size_t cap = MIN_CAP;
    while (4 * t->n > 3 * cap)
        cap *= 2;
    if (cap < t->cap)
        (void)resize(t, cap); /* (no memory: it stays as it was) */
}

int idtab_put(idtab *t, void *obj)
{
    const uint8_t *id = id_of(t, obj);
    uint32_t tag = tag_of(mix(id));
    size_t empty = 0; /* (set by find() when it finds no match) */
    size_t i = find(t, id, tag, &empty);
    if (i != SIZE_MAX) {
        t->p[i] = obj;
        return BERTH_OK;
    }
    if (4 * (t->n + 1) > 3 * t->cap) {
        if (resize(t, t->cap * 2) != BERTH_OK)
            return BERTH_ENOMEM;
        insert_slot(t, tag, obj);
    } else {
        t->h[empty] = tag;
        t->p[empty] = obj;
    }
    t->n++;
    return BERTH_OK;
}

void *idtab_del(idtab *t, const uint8_t id[BERTH_ID_LEN])
{
    size_t i = find(t, id, tag_of(mix(id)), NULL);
    if (i == SIZE_MAX)
        return NULL;
    void *obj = t->p[i];
    size_t mask = t->cap - 1;
    /* Backward shift: pull later entries of the probe run into the hole. */
    for (size_t j = (i + 1) & mask; t->h[j] != 0; j = (j + 1) & mask) {
        size_t h = home(t, t->h[j]);
        /* Entry j may fill hole i unless its home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
        if (!stays) {
            t->h[i] = t->h[j];
            t->p[i] = t->p[j];
            i = j;
        }
    }
    t->h[i] = 0;
    t->n--;
    return obj;
}

void *idtab_next(const idtab *t, size_t *i)
{
    while (*i < t->cap) {
        size_t k = (*i)++;
        if (t->h[k] != 0)
            return t->p[k];
    }
    return NULL;
}
