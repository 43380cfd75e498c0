/*
 * deadline.h — deadlines as data (berth's own server and its handshake
 * thread): a list per delay. Every entry of a list is added with the same
 * delay, so adding at the tail keeps the list sorted: the head expires
 * first, and setting, clearing and the next wait are O(1). Not locked:
 * each list belongs to one thread.
 */
#ifndef BERTH_GATEWAY_DEADLINE_H
#define BERTH_GATEWAY_DEADLINE_H

#include <stdint.h>

/* An entry, embedded in what expires. */
typedef struct gw_deadline {
    void *owner;    /* what expires (the caller's; set once) */
    uint64_t at_ms; /* monotonic; 0: not listed */
    struct gw_deadline *prev, *next;
} gw_deadline;

typedef struct gw_deadlines {
    gw_deadline *head, *tail;
} gw_deadlines;

/* Off its list (no-op if it is on none). */
void gw_deadline_clear(gw_deadlines *l, gw_deadline *d);
/* (Re)listed at the tail, expiring at at_ms. */
void gw_deadline_set(gw_deadlines *l, gw_deadline *d, uint64_t at_ms);
/* The epoll timeout, in ms, until l's head expires (-1: l is empty). */
int gw_deadline_wait(const gw_deadlines *l, uint64_t now_ms);
/* The shorter of two epoll timeouts (-1: none). */
int gw_wait_min(int a_ms, int b_ms);

#endif
