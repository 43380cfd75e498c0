/* heap.c — the ordered index of heap.h: a binary min-heap and sorted runs. */
#include "engine/heap.h"

#include <stdlib.h>
#include <string.h>

#include "engine/mem.h"
#include "store/err.h"

/* A node in run r has pos RUN_MARK(r); array indexes stay far below. */
#define RUN_MARK(r) (UINT32_MAX - 1 - (uint32_t)(r))

static inline bool less(const heap_node *a, const heap_node *b)
{
    return heap_less(a, b);
}

static bool in_run(const heap_node *x, size_t *r)
{
    if (x->pos == HEAP_ABSENT || x->pos < RUN_MARK(HEAP_RUNS - 1))
        return false;
    *r = RUN_MARK(0) - x->pos;
    return true;
}

/* ---- the binary heap ---- */

static void place(heap *h, size_t i, heap_node *x)
{
    h->v[i] = x;
    x->pos = (uint32_t)i; /* (i < cap <= HEAP_MAX) */
}

static void sift_up(heap *h, size_t i)
{
    heap_node *x = h->v[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!less(x, h->v[p]))
            break;
        place(h, i, h->v[p]);
        i = p;
    }
    place(h, i, x);
}

static void sift_down(heap *h, size_t i)
{
    heap_node *x = h->v[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->nv)
            break;
        if (c + 1 < h->nv && less(h->v[c + 1], h->v[c]))
            c++;
        if (!less(h->v[c], x))
            break;
        place(h, i, h->v[c]);
        i = c;
    }
    place(h, i, x);
}

static void array_fix(heap *h, size_t i)
{
    if (i > 0 && less(h->v[i], h->v[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

static void array_remove(heap *h, heap_node *x)
{
    size_t i = x->pos;
    heap_node *last = h->v[--h->nv];
    if (last != x) {
        place(h, i, last);
        array_fix(h, i);
    }
}

/* ---- runs ---- */

static void run_unlink(heap *h, heap_node *x, size_t r)
{
    heap_run *run = &h->run[r];
    if (x->prev)
        x->prev->next = x->next;
    else
        run->first = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        run->last = x->prev;
    x->prev = x->next = NULL;
}

/* Puts x at the end of a run it does not unsort, or into the array. The
 * array has room (heap_push keeps it so). */
static void place_node(heap *h, heap_node *x)
{
    size_t best = HEAP_RUNS, empty = HEAP_RUNS;
    for (size_t r = 0; r < HEAP_RUNS; r++) {
        const heap_node *last = h->run[r].last;
        if (last == NULL) {
            if (empty == HEAP_RUNS)
                empty = r;
        } else if (!less(x, last) && (best == HEAP_RUNS || less(h->run[best].last, last))) {
            best = r;
        }
    }
    if (best == HEAP_RUNS)
        best = empty;
    if (best == HEAP_RUNS) {
        place(h, h->nv++, x);
        sift_up(h, x->pos);
        return;
    }
    heap_run *run = &h->run[best];
    x->prev = run->last;
    x->next = NULL;
    if (run->last)
        run->last->next = x;
    else
        run->first = x;
    run->last = x;
    x->pos = RUN_MARK(best);
}

/* ---- the index ---- */

void heap_init(heap *h)
{
    *h = (heap){0};
}

void heap_fini(heap *h)
{
    for (size_t i = 0; i < h->nv; i++)
        h->v[i]->pos = HEAP_ABSENT;
    for (size_t r = 0; r < HEAP_RUNS; r++)
        for (heap_node *x = h->run[r].first, *next; x != NULL; x = next) {
            next = x->next;
            x->pos = HEAP_ABSENT;
            x->prev = x->next = NULL;
        }
    free(h->v);
    heap_init(h);
}

void heap_node_init(heap_node *x)
{
    *x = (heap_node){.pos = HEAP_ABSENT};
}

int heap_reserve(heap *h, size_t n)
{
    if (n <= h->cap)
        return BERTH_OK;
    if (n > HEAP_MAX)
        return BERTH_ENOMEM;
    size_t cap = h->cap ? h->cap * 2 : 16;
    while (cap < n)
        cap *= 2;
    if (cap > HEAP_MAX)
        cap = HEAP_MAX;
    /* Not realloc: it would copy the whole old array, and the room kept for
     * every task of a topic is mostly never written (in-order nodes go to
     * the runs), so only what is used is copied, and untouched room stays
     * out of memory. */
    heap_node **v = mem_alloc(cap * sizeof(*v));
    if (v == NULL)
        return BERTH_ENOMEM;
    if (h->nv > 0)
        memcpy(v, h->v, h->nv * sizeof(*v));
    free(h->v);
    h->v = v;
    h->cap = cap;
    return BERTH_OK;
}

void heap_push_reserved(heap *h, heap_node *x)
{
    place_node(h, x); /* (the array has room for every node held: see heap_reserve) */
    h->n++;
}

int heap_push(heap *h, heap_node *x)
{
    if (heap_reserve(h, h->n + 1) != BERTH_OK) /* room in the array for every node held */
        return BERTH_ENOMEM;
    heap_push_reserved(h, x);
    return BERTH_OK;
}

void heap_remove(heap *h, heap_node *x)
{
    size_t r;
    if (in_run(x, &r))
        run_unlink(h, x, r);
    else
        array_remove(h, x);
    x->pos = HEAP_ABSENT;
    h->n--;
}

void heap_fix(heap *h, heap_node *x)
{
    size_t r;
    if (!in_run(x, &r)) {
        array_fix(h, x->pos);
        return;
    }
    if ((x->prev == NULL || !less(x, x->prev)) && (x->next == NULL || !less(x->next, x)))
        return; /* still in order where it is */
    run_unlink(h, x, r);
    place_node(h, x);
}

heap_node *heap_min(const heap *h)
{
    heap_node *m = h->nv ? h->v[0] : NULL;
    for (size_t r = 0; r < HEAP_RUNS; r++) {
        heap_node *f = h->run[r].first;
        if (f != NULL && (m == NULL || less(f, m)))
            m = f;
    }
    return m;
}

bool heap_holds(const heap *h, const heap_node *x)
{
    size_t r;
    if (!in_run(x, &r))
        return x->pos < h->nv && h->v[x->pos] == x;
    const heap_run *run = &h->run[r];
    return (x->prev ? x->prev->next == x : run->first == x) &&
           (x->next ? x->next->prev == x : run->last == x);
}

bool heap_valid(const heap *h)
{
    size_t n = h->nv;
    if (h->nv > h->cap || h->n > h->cap)
        return false;
    for (size_t i = 0; i < h->nv; i++) {
        if (h->v[i]->pos != i)
            return false;
        if (i > 0 && less(h->v[i], h->v[(i - 1) / 2]))
            return false;
    }
    for (size_t r = 0; r < HEAP_RUNS; r++) {
        const heap_node *prev = NULL;
        for (const heap_node *x = h->run[r].first; x != NULL; prev = x, x = x->next) {
            if (x->pos != RUN_MARK(r) || x->prev != prev || (prev && less(x, prev)))
                return false;
            n++;
        }
        if (h->run[r].last != prev)
            return false;
    }
    return n == h->n;
}
