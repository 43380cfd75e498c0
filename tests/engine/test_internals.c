/* The engine's indexes: the ordered heap, the hash table and the id map. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <sodium.h>

#include "engine/heap.h"
#include "engine/idtab.h"
#include "engine/table.h"
#include "store/err.h"

typedef struct item {
    heap_node n;
    uint8_t key[16];
    bool in;
} item;

/* Takes every node out by heap_min(), checking (at, seq) rises. */
static void drain_in_order(heap *h)
{
    uint64_t last_at = 0, last_seq = 0;
    bool first = true;
    heap_node *m;
    while ((m = heap_min(h)) != NULL) {
        cr_assert(first || m->at > last_at || (m->at == last_at && m->seq > last_seq));
        last_at = m->at;
        last_seq = m->seq;
        first = false;
        heap_remove(h, m);
    }
    cr_assert_eq(h->n, 0);
}

Test(heap, pops_in_at_then_seq_order_through_random_updates)
{
    enum { N = 2000 };
    static item it[N];
    heap h;
    heap_init(&h);
    srand(7);
    for (int i = 0; i < N; i++) {
        heap_node_init(&it[i].n);
        it[i].n.at = (uint64_t)(rand() % 100);
        it[i].n.seq = (uint64_t)i;
        cr_assert_eq(heap_push(&h, &it[i].n), BERTH_OK);
        it[i].in = true;
    }
    for (int k = 0; k < 3000; k++) {
        item *x = &it[rand() % N];
        if (!x->in)
            continue;
        if (rand() % 3 == 0) {
            heap_remove(&h, &x->n);
            x->in = false;
            cr_assert_not(heap_has(&x->n));
        } else {
            x->n.at = (uint64_t)(rand() % 100);
            heap_fix(&h, &x->n);
        }
        if (k % 500 == 0)
            cr_assert(heap_valid(&h));
    }
    drain_in_order(&h);
    heap_fini(&h);
}

/* The queue's own shape: tasks parked at "now" with rising sequences,
 * the earliest claimed (re-keyed to now + a lock), some completed
 * (removed), some failed (re-keyed to a backoff), with a plain sorted
 * array as the oracle of what the minimum must be. */
Test(heap, the_minimum_holds_through_a_queue_of_parks_claims_and_completions)
{
    enum { N = 20000 };
    static item it[N];
    heap h;
    heap_init(&h);
    srand(11);
    uint64_t now = 1000;
    int parked = 0, ops = 0;
    size_t max_nv = 0, max_n = 0;
    while (parked < N || h.n > 0) {
        if (h.n > max_n)
            max_n = h.n;
        now += (uint64_t)(rand() % 3);
        int what = rand() % 10;
        if (parked < N && (what < 4 || h.n == 0)) { /* park */
            item *x = &it[parked];
            heap_node_init(&x->n);
            x->n.at = now;
            x->n.seq = (uint64_t)parked++;
            cr_assert_eq(heap_push(&h, &x->n), BERTH_OK);
            x->in = true;
        } else {
            heap_node *m = heap_min(&h);
            /* the oracle: no node held is below m */
            if (ops % 97 == 0)
                for (int i = 0; i < parked; i++)
                    if (it[i].in)
                        cr_assert(
                            !(it[i].n.at < m->at || (it[i].n.at == m->at && it[i].n.seq < m->seq)),
                            "node %d is below the minimum", i);
            item *x = (item *)m;
            if (what < 8 && m->at <= now) { /* claimed: locked for 30 s */
                m->at = now + 30000;
                heap_fix(&h, m);
            } else if (what == 8) { /* completed */
                heap_remove(&h, m);
                x->in = false;
            } else { /* failed: a backoff, out of order */
                m->at = now + (uint64_t)(rand() % 5000);
                heap_fix(&h, m);
                if (rand() % 2) { /* or a completion of some other held node */
                    int k = rand() % parked;
                    if (it[k].in) {
                        heap_remove(&h, &it[k].n);
                        it[k].in = false;
                    }
                }
            }
        }
        if (h.nv > max_nv)
            max_nv = h.nv;
        if (++ops % 1000 == 0)
            cr_assert(heap_valid(&h));
        if (parked == N && ops > 20 * N)
            break;
    }
    /* both halves of the index were used */
    cr_assert(max_nv > 0 && max_nv < max_n, "array %zu of %zu", max_nv, max_n);
    cr_assert(heap_valid(&h));
    drain_in_order(&h);
    heap_fini(&h);
}

Test(table, puts_gets_and_deletes_many_keys)
{
    cr_assert_geq(sodium_init(), 0);
    enum { N = 5000 };
    static item it[N];
    table t;
    cr_assert_eq(table_init(&t), BERTH_OK);
    for (int i = 0; i < N; i++) {
        randombytes_buf(it[i].key, 16);
        cr_assert_eq(table_put(&t, it[i].key, 16, &it[i]), BERTH_OK);
    }
    cr_assert_eq(t.n, N);
    for (int i = 0; i < N; i += 2)
        cr_assert_eq(table_del(&t, it[i].key, 16), &it[i]);
    for (int i = 0; i < N; i++)
        cr_assert_eq(table_get(&t, it[i].key, 16), i % 2 ? &it[i] : NULL, "key %d", i);
    size_t i = 0, seen = 0;
    while (table_next(&t, &i) != NULL)
        seen++;
    cr_assert_eq(seen, N / 2);
    table_fini(&t);
}

Test(table, string_keys_of_different_lengths_do_not_collide)
{
    cr_assert_geq(sodium_init(), 0);
    table t;
    table_init(&t);
    int a, b;
    table_put(&t, "ab", 2, &a);
    table_put(&t, "abc", 3, &b);
    cr_assert_eq(table_get(&t, "ab", 2), &a);
    cr_assert_eq(table_get(&t, "abc", 3), &b);
    cr_assert_null(table_get(&t, "a", 1));
    table_put(&t, "ab", 2, &b);
    cr_assert_eq(table_get(&t, "ab", 2), &b, "put replaces");
    cr_assert_eq(t.n, 2);
    table_fini(&t);
}

/* No entry sits past a hole in its probe run: every slot from its home to
 * it is taken (else a lookup would stop short of it). */
static void check_runs(const idtab *t)
{
    for (size_t i = 0; i < t->cap; i++) {
        if (t->h[i] == 0)
            continue;
        size_t home = (size_t)(((uint64_t)t->h[i] << 32) >> t->shift);
        for (size_t k = home; k != i; k = (k + 1) & (t->cap - 1))
            cr_assert_neq(t->h[k], 0, "slot %zu: a hole at %zu before it", i, k);
    }
}

/* Random puts and deletes against a model, with ids that are not random
 * (counters, one byte apart) as well as random ones, through many grows. */
Test(idtab, follows_a_model_through_puts_deletes_and_grows)
{
    cr_assert_geq(sodium_init(), 0);
    enum { N = 6000, STEPS = 40000 };
    static item it[N];
    for (int i = 0; i < N; i++) {
        /* Distinct by construction: the first byte names the kind. */
        memset(it[i].key, 0, 16);
        int k = i / 3;
        if (i % 3 == 0) {
            randombytes_buf(it[i].key, 16);
            it[i].key[0] = 0;
        } else if (i % 3 == 1) {
            it[i].key[0] = 1;
            memcpy(it[i].key + 8, &k, sizeof(k)); /* a counter in the second half */
        } else {
            it[i].key[0] = 2; /* one byte set, its place and value from k */
            it[i].key[2 + k % 12] = (uint8_t)(1 + (k / 12) % 250);
            it[i].key[15] = (uint8_t)(k / 12 / 250);
        }
        it[i].in = false;
    }
    idtab t;
    cr_assert_eq(idtab_init(&t, offsetof(item, key)), BERTH_OK);
    size_t n = 0;
    for (int s = 0; s < STEPS; s++) {
        item *x = &it[randombytes_uniform(N)];
        /* Fill up at first, then hover around half. */
        bool put = s < STEPS / 4 ? randombytes_uniform(4) != 0 : randombytes_uniform(2) == 0;
        if (put) {
            cr_assert_eq(idtab_put(&t, x), BERTH_OK);
            n += !x->in;
            x->in = true;
        } else {
            cr_assert_eq(idtab_del(&t, x->key), x->in ? x : NULL);
            n -= x->in;
            x->in = false;
        }
        cr_assert_eq(t.n, n);
        cr_assert_leq(4 * t.n, 3 * t.cap, "load over 3/4");
        if (s % 4000 == 0)
            check_runs(&t);
    }
    check_runs(&t);
    for (int i = 0; i < N; i++)
        cr_assert_eq(idtab_get(&t, it[i].key), it[i].in ? &it[i] : NULL, "id %d", i);
    size_t i = 0, seen = 0;
    item *v;
    while ((v = idtab_next(&t, &i)) != NULL) {
        cr_assert(v->in);
        seen++;
    }
    cr_assert_eq(seen, n);
    idtab_clear(&t);
    cr_assert_eq(t.n, 0);
    cr_assert_null(idtab_get(&t, it[0].key));
    idtab_fini(&t);
}

Test(idtab, put_replaces_the_object_of_an_id)
{
    idtab t;
    cr_assert_eq(idtab_init(&t, offsetof(item, key)), BERTH_OK);
    item a = {0}, b = {0};
    memset(a.key, 7, 16);
    memset(b.key, 7, 16);
    cr_assert_eq(idtab_put(&t, &a), BERTH_OK);
    cr_assert_eq(idtab_put(&t, &b), BERTH_OK);
    cr_assert_eq(t.n, 1);
    cr_assert_eq(idtab_get(&t, a.key), &b);
    cr_assert_eq(idtab_del(&t, a.key), &b);
    cr_assert_null(idtab_get(&t, a.key));
    idtab_fini(&t);
}

Test(idtab, a_reserved_map_takes_that_many_without_growing)
{
    cr_assert_geq(sodium_init(), 0);
    enum { N = 3000 };
    static item it[N];
    idtab t;
    cr_assert_eq(idtab_init(&t, offsetof(item, key)), BERTH_OK);
    cr_assert_eq(idtab_reserve(&t, N), BERTH_OK);
    size_t cap = t.cap;
    cr_assert_geq(3 * cap, 4 * (size_t)N);
    for (int i = 0; i < N; i++) {
        randombytes_buf(it[i].key, 16);
        cr_assert_eq(idtab_put(&t, &it[i]), BERTH_OK);
    }
    cr_assert_eq(t.cap, cap, "grew after a reserve");
    check_runs(&t);
    for (int i = 0; i < N; i++)
        cr_assert_eq(idtab_get(&t, it[i].key), &it[i]);
    idtab_fini(&t);
}

Test(idtab, a_map_reserved_too_generously_fits_its_entries)
{
    cr_assert_geq(sodium_init(), 0);
    enum { N = 100 };
    static item it[N];
    idtab t;
    cr_assert_eq(idtab_init(&t, offsetof(item, key)), BERTH_OK);
    cr_assert_eq(idtab_reserve(&t, 100000), BERTH_OK);
    for (int i = 0; i < N; i++) {
        randombytes_buf(it[i].key, 16);
        cr_assert_eq(idtab_put(&t, &it[i]), BERTH_OK);
    }
    idtab_fit(&t);
    cr_assert_eq(t.cap, 256, "cap %zu for %d entries", t.cap, N);
    check_runs(&t);
    for (int i = 0; i < N; i++)
        cr_assert_eq(idtab_get(&t, it[i].key), &it[i]);
    idtab_fini(&t);
}
