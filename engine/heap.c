/* heap.c — the indexed binary min-heap of heap.h. */
#include "engine/heap.h"

#include <stdlib.h>

#include "store/err.h"

static bool less(const heap_node *a, const heap_node *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void place(heap *h, size_t i, heap_node *x)
{
    h->v[i] = x;
    x->pos = i;
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
        if (c >= h->n)
            break;
        if (c + 1 < h->n && less(h->v[c + 1], h->v[c]))
            c++;
        if (!less(h->v[c], x))
            break;
        place(h, i, h->v[c]);
        i = c;
    }
    place(h, i, x);
}

void heap_init(heap *h)
{
    h->v = NULL;
    h->n = h->cap = 0;
}

void heap_fini(heap *h)
{
    for (size_t i = 0; i < h->n; i++)
        h->v[i]->pos = HEAP_ABSENT;
    free(h->v);
    heap_init(h);
}

void heap_node_init(heap_node *x)
{
    x->at = 0;
    x->seq = 0;
    x->pos = HEAP_ABSENT;
}

int heap_push(heap *h, heap_node *x)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        heap_node **v = realloc(h->v, cap * sizeof(*v));
        if (v == NULL)
            return BERTH_ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    place(h, h->n++, x);
    sift_up(h, x->pos);
    return BERTH_OK;
}

void heap_remove(heap *h, heap_node *x)
{
    size_t i = x->pos;
    heap_node *last = h->v[--h->n];
    x->pos = HEAP_ABSENT;
    if (last == x)
        return;
    place(h, i, last);
    heap_fix(h, last);
}

void heap_fix(heap *h, heap_node *x)
{
    size_t i = x->pos;
    if (i > 0 && less(x, h->v[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

bool heap_valid(const heap *h)
{
    for (size_t i = 0; i < h->n; i++) {
        if (h->v[i]->pos != i)
            return false;
        if (i > 0 && less(h->v[i], h->v[(i - 1) / 2]))
            return false;
    }
    return true;
}
