/* deadline.c — see deadline.h. */
#include "gateway/deadline.h"

#include <stddef.h>

void gw_deadline_clear(gw_deadlines *l, gw_deadline *d)
{
    if (d->at_ms == 0)
        return;
    if (d->prev)
        d->prev->next = d->next;
    else
        l->head = d->next;
    if (d->next)
        d->next->prev = d->prev;
    else
        l->tail = d->prev;
    d->prev = d->next = NULL;
    d->at_ms = 0;
}

void gw_deadline_set(gw_deadlines *l, gw_deadline *d, uint64_t at_ms)
{
    gw_deadline_clear(l, d);
    d->at_ms = at_ms ? at_ms : 1;
    d->prev = l->tail;
    if (l->tail)
        l->tail->next = d;
    else
        l->head = d;
    l->tail = d;
}

int gw_deadline_wait(const gw_deadlines *l, uint64_t now_ms)
{
    if (l->head == NULL)
        return -1;
    uint64_t at = l->head->at_ms;
    return at <= now_ms ? 0 : (int)(at - now_ms < INT32_MAX ? at - now_ms : INT32_MAX);
}

int gw_wait_min(int a_ms, int b_ms)
{
    return a_ms < 0 ? b_ms : b_ms < 0 ? a_ms : a_ms < b_ms ? a_ms : b_ms;
}
