/*
 * idtab.h — a hash map from 16-byte ids to the objects that hold them.
 *
 * The engine's biggest maps (every task, every delivery) are keyed by ids
 * berth drew from a CSPRNG itself: no client chooses one, so the map needs
 * no keyed hash, and the key need not be stored beside the object. A slot
 * is 12 bytes: 32 bits of the id's hash, in an array of their own, and the
 * object's pointer. A probe reads the hashes only and dereferences an
 * object only when its hash matches (a false match is 1 in 2^31), so a
 * miss costs no pointer chase; a deletion finds each entry's home from its
 * stored hash. Open addressing with linear probing and backward-shift
 * deletion, load kept at or under 3/4: 16 to 21 bytes per entry once
 * large, where the general table (table.h, 32-byte slots at or under 1/2)
 * takes 64 to 128. Engine thread only.
 *
 * Do not put or delete while iterating with idtab_next().
 */
#ifndef BERTH_ENGINE_IDTAB_H
#define BERTH_ENGINE_IDTAB_H

#include <stddef.h>
#include <stdint.h>

#include "store/keys.h" /* BERTH_ID_LEN */

typedef struct idtab {
    uint32_t *h; /* 0: empty slot; else the entry's hash (bit 0 set) */
    void **p;    /* the object, whose id is at byte offset `off` */
    size_t cap;  /* a power of two */
    size_t n;
    unsigned shift; /* 64 - log2(cap): a hash's home is its top bits */
    size_t off;
} idtab;

/* off: where the 16-byte id lies in each object (offsetof). */
int idtab_init(idtab *t, size_t off);
void idtab_fini(idtab *t);
/* Empties the map, keeping its storage. */
void idtab_clear(idtab *t);
void *idtab_get(const idtab *t, const uint8_t id[BERTH_ID_LEN]);
/* Adds obj under the id it holds, or replaces the object of that id.
 * BERTH_ENOMEM when it cannot grow (nothing changed). */
int idtab_put(idtab *t, void *obj);
/* Room for n entries without growing (a load that knows roughly how many
 * will come). BERTH_ENOMEM: nothing changed. */
int idtab_reserve(idtab *t, size_t n);
/* Shrinks the map to what its entries need, after a reserve that was too
 * generous (without memory it stays as it was). */
void idtab_fit(idtab *t);
/* Removes and returns the object of id (NULL if absent). */
void *idtab_del(idtab *t, const uint8_t id[BERTH_ID_LEN]);
/* Iteration: size_t i = 0; while ((v = idtab_next(t, &i)) != NULL) ... */
void *idtab_next(const idtab *t, size_t *i);

#endif
