/*
 * recover.h — rebuilds the engine's memory from the store (at open, after
 * a failed turn, and when a halted engine reopens its store). Engine
 * thread (or engine_open's, before it runs).
 */
#ifndef BERTH_ENGINE_RECOVER_H
#define BERTH_ENGINE_RECOVER_H

#include "engine/core.h"

/* Loads the deployments, every task and delivery and the live instances;
 * a message goes to err on failure. */
int recover_load(engine *e, char *err, size_t errlen);
/* Frees every task, delivery, live instance and deployment, and empties
 * the indexes (topics stay); awaits are answered UNAVAILABLE first. */
void recover_clear(engine *e);

#endif
