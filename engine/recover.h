/*
 * recover.h — rebuilds the engine's memory from the store (at open, and
 * after a failed turn). Engine thread (or engine_open's, before it runs).
 */
#ifndef BERTH_ENGINE_RECOVER_H
#define BERTH_ENGINE_RECOVER_H

#include "engine/core.h"

/* Loads every task and delivery; a message goes to err on failure. */
int recover_load(engine *e, char *err, size_t errlen);
/* Frees every task and delivery, empties the indexes (topics stay). */
void recover_clear(engine *e);

#endif
