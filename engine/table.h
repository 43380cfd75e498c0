/*
 * table.h — a hash map from byte-string keys to objects.
 *
 * Open addressing with linear probing and backward-shift deletion (no
 * tombstones). Keys are hashed with SipHash (libsodium's crypto_shorthash)
 * under a random per-table key, so names chosen by clients (topics) cannot
 * be aimed at one bucket. The table stores the key pointer, not a copy:
 * the key bytes must live as long as the entry (they live inside the
 * object the entry points to). Engine thread only.
 *
 * Do not put or delete while iterating with table_next(): a deletion may
 * move an entry into a slot already visited.
 */
#ifndef BERTH_ENGINE_TABLE_H
#define BERTH_ENGINE_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct table_slot {
    uint64_t hash;
    const void *key;
    size_t klen;
    void *val; /* NULL: empty slot */
} table_slot;

typedef struct table {
    table_slot *v;
    size_t cap; /* a power of two */
    size_t n;
    unsigned char hkey[16];
} table;

int table_init(table *t);
void table_fini(table *t);
/* Empties the table, keeping its storage. */
void table_clear(table *t);
void *table_get(const table *t, const void *k, size_t kl);
/* Adds or replaces. BERTH_ENOMEM when it cannot grow. */
int table_put(table *t, const void *k, size_t kl, void *val);
/* Removes and returns the entry's value (NULL if absent). */
void *table_del(table *t, const void *k, size_t kl);
/* Iteration: size_t i = 0; while ((v = table_next(t, &i)) != NULL) ... */
void *table_next(const table *t, size_t *i);

#endif
