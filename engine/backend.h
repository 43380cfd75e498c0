/*
 * backend.h — what engine.h's functions dispatch to: a store's engine.
 *
 * berth has two: the embedded one (actor.c and the modules below it:
 * RocksDB and all state in memory) and the PostgreSQL one (pg/pgactor.c:
 * the database holds the state, the replica holds only its queue and its
 * waiters). Each one's handle starts with a struct engine_front, so an
 * engine * is a pointer to it; front.c reads the table and calls through.
 * One indirect call per engine_exec(): nothing a turn would notice.
 */
#ifndef BERTH_ENGINE_BACKEND_H
#define BERTH_ENGINE_BACKEND_H

#include "engine/engine.h"

typedef struct engine_backend {
    /* Queues any request, ENGINE_OP_CANCEL included (engine_exec()'s
     * contract otherwise). */
    int (*enqueue)(engine *e, const engine_request *req, engine_done_fn done, void *arg);
    void (*stop)(engine *e); /* engine_stop() */
    void (*free)(engine *e); /* after stop: everything the handle owns */
    void (*failpoint_set)(engine *e, engine_failpoint fp, int n);
    void (*hold)(engine *e, bool hold);
    void (*recovery_get)(const engine *e, engine_recovery *out);
    void (*durability)(engine *e, engine_durable *out);
} engine_backend;

/* The first member of every backend's handle. */
struct engine_front {
    const engine_backend *vt;
};

#endif
