/*
 * listing.c — every task in one order, so that an operator's pages (admin
 * list_tasks) give each task present throughout exactly once, however
 * tasks come and go between pages.
 *
 * THE ORDER
 *   Tasks by sequence (Body.seq: unique, rising with submission). An entry
 *   is the task, or the sequence of a task gone (core.h); parks append (a task's sequence is almost
 *   always above every other), the rare re-park of an older delivery
 *   inserts in place. A page starts after a token naming a sequence, so it
 *   needs no task to still be there, and it is a binary search.
 *
 * ON THE HOT PATH: AN APPEND, AND A STORE
 *   A park appends (the task remembers where its entry is); a task that
 *   goes empties its entry (listing_drop, O(1)). Once empty entries
 *   outnumber live ones, a tidy walks the array between turns, a bounded
 *   step each turn (more than was appended meanwhile, so it ends), moving
 *   live entries down over the empty ones and telling their tasks. While
 *   it runs, the array has a hole that reads skip.
 *
 * A PAGE (admin.c) is bounded: it looks at most a multiple of its limit
 * of entries, and returns a token for where it stopped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/listing.h"
#include "store/err.h"

#define TIDY_MIN_STEP 4096

static size_t hole(const engine *e)
{
    return e->listing.tidying ? e->listing.tidy_rd - e->listing.tidy_wr : 0;
}

static size_t length(const engine *e)
{
    return e->listing.n - hole(e);
}

_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "a listing entry holds a sequence");

static task *entry_task(const list_entry *x)
{
    return (x->v & 1) ? NULL : (task *)x->v;
}

static uint64_t entry_seq(const list_entry *x)
{
    return (x->v & 1) ? (uint64_t)(x->v >> 1) : ((const task *)x->v)->ready.seq;
}

static list_entry *at(engine *e, size_t i)
{
    if (e->listing.tidying && i >= e->listing.tidy_wr)
        i += hole(e);
    return &e->listing.v[i];
}

/* The first position whose sequence is above seq. */
static size_t after_seq(engine *e, uint64_t seq)
{
    size_t lo = 0, hi = length(e);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (entry_seq(at(e, mid)) <= seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void tidy_step(engine *e, size_t budget)
{
    for (size_t k = 0; k < budget && e->listing.tidy_rd < e->listing.n; k++) {
        list_entry *x = &e->listing.v[e->listing.tidy_rd++];
        if (entry_task(x) == NULL) {
            e->listing.n_dead--;
        } else {
            entry_task(x)->lpos = (uint32_t)e->listing.tidy_wr;
            e->listing.v[e->listing.tidy_wr++] = *x;
        }
    }
    if (e->listing.tidy_rd == e->listing.n) {
        e->listing.n = e->listing.tidy_wr;
        e->listing.tidying = false;
    }
}

int listing_add(engine *e, task *t)
{
    if (e->listing.n >= UINT32_MAX) /* (a task keeps its place in 32 bits) */
        return BERTH_ENOMEM;
    if (e->listing.n == e->listing.cap) {
        size_t cap = e->listing.cap ? 2 * e->listing.cap : 1024;
        list_entry *v = mem_realloc(e->listing.v, cap * sizeof(*v));
        if (v == NULL)
            return BERTH_ENOMEM;
        e->listing.v = v;
        e->listing.cap = cap;
    }
    list_entry x = {(uintptr_t)t};
    size_t len = length(e);
    if (len > 0 && entry_seq(at(e, len - 1)) > t->ready.seq) {
        /* An older delivery parked late: in its place (rare). */
        while (e->listing.tidying)
            tidy_step(e, SIZE_MAX);
        size_t pos = after_seq(e, t->ready.seq);
        memmove(&e->listing.v[pos + 1], &e->listing.v[pos],
                (e->listing.n - pos) * sizeof(list_entry));
        e->listing.v[pos] = x;
        t->lpos = (uint32_t)pos;
        for (size_t i = pos + 1; i <= e->listing.n; i++)
            if (entry_task(&e->listing.v[i]) != NULL)
                entry_task(&e->listing.v[i])->lpos = (uint32_t)i;
    } else {
        t->lpos = (uint32_t)e->listing.n;
        e->listing.v[e->listing.n] = x;
    }
    e->listing.n++;
    return BERTH_OK;
}

void listing_drop(engine *e, const task *t)
{
    if (t->lpos < e->listing.n && e->listing.v[t->lpos].v == (uintptr_t)t) {
        e->listing.v[t->lpos].v = (uintptr_t)(t->ready.seq << 1) | 1; /* (seq < 2^63) */
        e->listing.n_dead++;
    }
}

void listing_clear(engine *e)
{
    e->listing.n = 0;
    e->listing.n_dead = 0;
    e->listing.tidying = false;
    e->listing.tidy_rd = e->listing.tidy_wr = 0;
}

void listing_tidy(engine *e)
{
    if (!e->listing.tidying) {
        if (e->listing.n_dead <= e->listing.n / 2 + TIDY_MIN_STEP)
            return;
        e->listing.tidying = true;
        e->listing.tidy_rd = e->listing.tidy_wr = 0;
    }
    /* Faster than appends come: at most a tenth of the array a turn past
     * the minimum, so one turn is never long. */
    tidy_step(e, TIDY_MIN_STEP + e->listing.n / 10);
}

int listing_seek(engine *e, const rules_list *l, size_t *pos)
{
    *pos = 0;
    uint64_t seq = l->seq;
    if (l->after == RULES_AFTER_NONE)
        return BERTH_OK;
    if (l->after == RULES_AFTER_ID) {
        task *t = idtab_get(&e->tasks, l->id);
        if (t == NULL)
            return BERTH_EINVAL;
        seq = t->ready.seq;
    }
    *pos = after_seq(e, seq);
    return BERTH_OK;
}

bool listing_next(engine *e, size_t *pos, task **t, uint64_t *seq)
{
    if (*pos >= length(e))
        return false;
    list_entry *x = at(e, (*pos)++);
    *seq = entry_seq(x);
    *t = entry_task(x);
    return true;
}
