/*
 * actor.h — the embedded store's engine (actor.c): RocksDB under an actor
 * thread and a commit thread, every task's state in memory.
 */
#ifndef BERTH_ENGINE_ACTOR_H
#define BERTH_ENGINE_ACTOR_H

#include <stddef.h>

#include "engine/engine.h"

/* engine_open() for o->data_dir; the options are checked already. */
int actor_open(const engine_options *o, engine **out, char *err, size_t errlen);

#endif
