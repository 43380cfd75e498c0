/*
 * listing.h — every task in one order, for an operator's pages (admin
 * list_tasks). See listing.c. Engine thread only.
 */
#ifndef BERTH_ENGINE_LISTING_H
#define BERTH_ENGINE_LISTING_H

#include "engine/core.h"
#include "engine/rules.h"

/* t was parked (or loaded): it joins the order. BERTH_ENOMEM: it did
 * not, and nothing changed. */
int listing_add(engine *e, task *t);
/* t goes: its entry is emptied (O(1)). */
void listing_drop(engine *e, const task *t);
/* Forgets every entry (memory is being reloaded). */
void listing_clear(engine *e);
/* Between turns: drops entries of tasks that are gone, a bounded step at
 * a time, once they outnumber the live ones. */
void listing_tidy(engine *e);

/* Where a page starts (rules_list_check() has read the request's after:
 * nothing, a page's next token or the id of a task). BERTH_EINVAL when it
 * names a task that is not there. */
int listing_seek(engine *e, const rules_list *l, size_t *pos);
/* The task of the entry at *pos, NULL if that task is gone; *seq is the
 * entry's. Advances *pos. False at the end. */
bool listing_next(engine *e, size_t *pos, task **t, uint64_t *seq);

#endif
