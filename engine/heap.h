/*
 * heap.h — an ordered index by (prio, at, seq): an indexed binary
 * min-heap, plus a few sorted runs beside it.
 *
 * The engine's ordered indexes are all this shape: the per-topic ready
 * index (at = the instant a task becomes fetchable), the outbox due index
 * (at = next attempt), the waiting fetches (at = deadline). Nodes are
 * embedded in the objects they order and remember where they are, so
 * removing or re-keying an object needs no search. Engine thread only.
 *
 * RUNS
 *   Most keys arrive in order: tasks are parked at "now" with rising
 *   sequences, and claimed with one lock duration, so their re-keyed
 *   instants rise too. A node whose key is not below the last node of a
 *   run is appended to it (the run whose last key is the highest such),
 *   or starts an empty run; only a node that fits no run goes into the
 *   heap. Appending, taking the first node of a run and unlinking one are
 *   O(1); the minimum is the least of the heap's root and the runs'
 *   first nodes. The order is the heap's: (prio, at, seq). Only a topic's
 *   ready order sets prio (a task's priority); elsewhere it stays 0.
 */
#ifndef BERTH_ENGINE_HEAP_H
#define BERTH_ENGINE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HEAP_ABSENT UINT32_MAX
/* The most nodes one heap holds (positions are 32 bits; the top few mark
 * the runs). */
#define HEAP_MAX  (UINT32_MAX - 16)
#define HEAP_RUNS 4

typedef struct heap_node {
    uint64_t at;                   /* ms: the ordering instant */
    uint64_t seq;                  /* tiebreak: FIFO among equal instants */
    uint32_t prio;                 /* first: lower first */
    uint32_t pos;                  /* index in the heap's array, a run's mark, or HEAP_ABSENT */
    struct heap_node *prev, *next; /* neighbours in its run */
} heap_node;

typedef struct heap_run {
    heap_node *first, *last;
} heap_run;

typedef struct heap {
    size_t n;      /* nodes held, in the array and the runs */
    heap_node **v; /* the binary heap */
    size_t nv, cap;
    heap_run run[HEAP_RUNS];
} heap;

static inline bool heap_less(const heap_node *a, const heap_node *b)
{
    if (a->prio != b->prio)
        return a->prio < b->prio;
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

void heap_init(heap *h);
void heap_fini(heap *h);
void heap_node_init(heap_node *x);
static inline bool heap_has(const heap_node *x)
{
    return x->pos != HEAP_ABSENT;
}
/* BERTH_ENOMEM when the heap cannot grow. */
int heap_push(heap *h, heap_node *x);
/* Room for n nodes, so that pushes up to n never allocate (BERTH_ENOMEM:
 * nothing changed); heap_push_reserved() is such a push. */
int heap_reserve(heap *h, size_t n);
void heap_push_reserved(heap *h, heap_node *x);
void heap_remove(heap *h, heap_node *x);
/* Restores order after x->at or x->seq changed. Never allocates: the
 * array always has room for every node held. */
void heap_fix(heap *h, heap_node *x);
heap_node *heap_min(const heap *h);
/* x, which heap_has(), is where its position says in h: O(1), for the
 * invariant checks. */
bool heap_holds(const heap *h, const heap_node *x);
/* Whole-index order and bookkeeping check, for invariant checks. */
bool heap_valid(const heap *h);

#endif
