/*
 * budget.h — the memory budget of berth's own server (sp.h "Memory"):
 * what its connections hold, requests read in part and answers their
 * peers have not read, counted against one ceiling; and the process-wide
 * hand-back of freed memory to the system.
 *
 * Any thread may count (the loop reads, the commit thread queues
 * answers); the totals are atomics. gw_budget_settle() and `peak` are the
 * loop thread's.
 *
 * Within the budget any holder may grow; past it, only one under its
 * share (the budget over the holders open). A holder over its share is
 * not read until the total is back under 3/4 of the budget, and one whose
 * answers would not fit is closed: so the total stays under twice the
 * budget. Once a surge has passed (the total fell under 1/16 of the
 * budget after it had passed 1/4), the memory it took is returned to the
 * system.
 */
#ifndef BERTH_GATEWAY_BUDGET_H
#define BERTH_GATEWAY_BUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Embedded in the server. */
typedef struct gw_budget {
    size_t max;         /* bytes every holder may hold together */
    atomic_size_t used; /* bytes they hold now */
    size_t peak;        /* most `used` since memory was last returned (loop thread) */
} gw_budget;

/* max_bytes 0 (or past SIZE_MAX): unbounded. */
void gw_budget_init(gw_budget *b, uint64_t max_bytes);
/* May a holder of `held` bytes, one of `holders`, grow by n bytes? */
bool gw_budget_may_grow(const gw_budget *b, size_t held, size_t n, unsigned holders);
/* n bytes more (take) or fewer (give_back) for the holder whose count is
 * *held, and for the total. */
void gw_budget_take(gw_budget *b, atomic_size_t *held, size_t n);
void gw_budget_give_back(gw_budget *b, atomic_size_t *held, size_t n);
/* Loop thread, once a batch of events: true when the total is under 3/4
 * of the budget (the starved holders may be read again); then, after a
 * surge, returns freed memory to the system (gw_memory_return). */
bool gw_budget_settle(gw_budget *b);

/* Returns memory the allocator keeps free to the system (tcmalloc's page
 * heap when berthd links it, else glibc's malloc_trim): after a flood of
 * clients has gone, and after recovery, whose growing tables leave their
 * outgrown arrays behind. Any thread. */
void gw_memory_return(void);

#endif
