/*
 * heap.h — an indexed binary min-heap, ordered by (at, seq).
 *
 * The engine's ordered indexes are all this shape: the per-topic ready
 * index (at = the instant a task becomes fetchable), the outbox due index
 * (at = next attempt), the waiting fetches (at = deadline). Nodes are
 * embedded in the objects they order and remember their position, so
 * removing or re-keying an object is O(log n) with no search. Engine
 * thread only.
 */
#ifndef BERTH_ENGINE_HEAP_H
#define BERTH_ENGINE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HEAP_ABSENT SIZE_MAX

typedef struct heap_node {
    uint64_t at;  /* ms: the ordering instant */
    uint64_t seq; /* tiebreak: FIFO among equal instants */
    size_t pos;   /* index in the heap, HEAP_ABSENT when not in one */
} heap_node;

typedef struct heap {
    heap_node **v;
    size_t n;
    size_t cap;
} heap;

void heap_init(heap *h);
void heap_fini(heap *h);
void heap_node_init(heap_node *x);
static inline bool heap_has(const heap_node *x)
{
    return x->pos != HEAP_ABSENT;
}
/* BERTH_ENOMEM when the heap cannot grow. */
int heap_push(heap *h, heap_node *x);
void heap_remove(heap *h, heap_node *x);
/* Restores order after x->at or x->seq changed. */
void heap_fix(heap *h, heap_node *x);
static inline heap_node *heap_min(const heap *h)
{
    return h->n ? h->v[0] : NULL;
}
/* Whole-heap order check, for invariant checks. */
bool heap_valid(const heap *h);

#endif
