/*
 * commit.h — the commit thread: durability off the engine's path. See
 * commit.c. The engine thread calls everything here except
 * commit_durability() and commit_syncs() (any thread).
 */
#ifndef BERTH_ENGINE_COMMIT_H
#define BERTH_ENGINE_COMMIT_H

#include "engine/core.h"

/* Starts the thread. wake(arg) is called from the commit thread when the
 * engine thread must look: a sync failed (it halts), or fetch answers
 * left and a claim that stopped on the fetch budget may go on. */
int commit_start(engine *e, void (*wake)(void *arg), void *arg);
/* Answers every turn handed over (syncing first), then stops the thread.
 * Idempotent; a no-op if it never started. */
void commit_stop(engine *e);
/* Frees the pushes a turn staged (never sent). */
void commit_pushes_free(staged_push *v, size_t n);
/* commit_stop(), then frees e->commit. */
void commit_free(engine *e);
/* The turn's batch was appended to the store. */
void commit_appended(engine *e);
/* Hands the turn's staged answers (and its events and pushes,
 * with_events) to the commit thread, which answers, publishes and sends
 * them once every append so far is durable. The turn's lists are empty
 * after. */
void commit_turn(engine *e, bool with_events);
/* A sync failed: the engine must halt; commit_failure() says why. */
bool commit_failed(engine *e);
const char *commit_failure(engine *e);
uint64_t commit_syncs(engine *e);
/* appended, synced and syncs_held of engine_durable. */
void commit_durability(engine *e, engine_durable *out);

#endif
