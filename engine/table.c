/* table.c — the hash map of table.h. Load factor kept at or under 1/2. */
#include "engine/table.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "engine/mem.h"
#include "store/err.h"

static uint64_t hash_of(const table *t, const void *k, size_t kl)
{
    uint64_t h;
    crypto_shorthash((unsigned char *)&h, k, kl, t->hkey);
    return h;
}

static bool same(const table_slot *s, uint64_t h, const void *k, size_t kl)
{
    return s->hash == h && s->klen == kl && memcmp(s->key, k, kl) == 0;
}

int table_init(table *t)
{
    t->cap = 64;
    t->n = 0;
    t->v = mem_calloc(t->cap, sizeof(*t->v));
    if (t->v == NULL)
        return BERTH_ENOMEM;
    crypto_shorthash_keygen(t->hkey);
    return BERTH_OK;
}

void table_fini(table *t)
{
    free(t->v);
    t->v = NULL;
    t->cap = t->n = 0;
}

void table_clear(table *t)
{
    memset(t->v, 0, t->cap * sizeof(*t->v));
    t->n = 0;
}

static table_slot *find(const table *t, uint64_t h, const void *k, size_t kl)
{
    size_t mask = t->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        table_slot *s = &t->v[i];
        if (s->val == NULL)
            return NULL;
        if (same(s, h, k, kl))
            return s;
    }
}

void *table_get(const table *t, const void *k, size_t kl)
{
    table_slot *s = find(t, hash_of(t, k, kl), k, kl);
    return s ? s->val : NULL;
}

static void insert_slot(table_slot *v, size_t cap, table_slot e)
{
    size_t mask = cap - 1;
    size_t i = e.hash & mask;
    while (v[i].val != NULL)
        i = (i + 1) & mask;
    v[i] = e;
}

static int grow(table *t)
{
    size_t cap = t->cap * 2;
    table_slot *v = mem_calloc(cap, sizeof(*v));
    if (v == NULL)
        return BERTH_ENOMEM;
    for (size_t i = 0; i < t->cap; i++)
        if (t->v[i].val != NULL)
            insert_slot(v, cap, t->v[i]);
    free(t->v);
    t->v = v;
    t->cap = cap;
    return BERTH_OK;
}

int table_put(table *t, const void *k, size_t kl, void *val)
{
    uint64_t h = hash_of(t, k, kl);
    table_slot *s = find(t, h, k, kl);
    if (s != NULL) {
        s->key = k;
        s->val = val;
        return BERTH_OK;
    }
    if (2 * (t->n + 1) > t->cap && grow(t) != BERTH_OK)
        return BERTH_ENOMEM;
    insert_slot(t->v, t->cap, (table_slot){h, k, kl, val});
    t->n++;
    return BERTH_OK;
}

void *table_del(table *t, const void *k, size_t kl)
{
    uint64_t h = hash_of(t, k, kl);
    table_slot *s = find(t, h, k, kl);
    if (s == NULL)
        return NULL;
    void *val = s->val;
    size_t mask = t->cap - 1;
    size_t i = (size_t)(s - t->v);
    /* Backward shift: pull later entries of the probe run into the hole. */
    for (size_t j = (i + 1) & mask; t->v[j].val != NULL; j = (j + 1) & mask) {
        size_t home = t->v[j].hash & mask;
        /* Entry j may fill hole i unless its home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            t->v[i] = t->v[j];
            i = j;
        }
    }
    memset(&t->v[i], 0, sizeof(t->v[i]));
    t->n--;
    return val;
}

void *table_next(const table *t, size_t *i)
{
    while (*i < t->cap) {
        void *v = t->v[(*i)++].val;
        if (v != NULL)
            return v;
    }
    return NULL;
}
