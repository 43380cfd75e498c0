/*
 * front.c — engine.h's functions: the options checked once, then the
 * store's engine chosen and called through its table (backend.h).
 *
 * engine_options.store_uri names the store: NULL or "" is the embedded
 * one in data_dir (actor.c); anything else is a PostgreSQL connection
 * string, a URI (postgresql://...) or key=value pairs, for pg/pgactor.c.
 * A build without PostgreSQL (-DBERTH_PG=OFF) refuses it.
 */
#include <pthread.h>
#include <stdio.h>

#include <sodium.h>

#include "engine/actor.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "store/err.h"
#ifdef BERTH_WITH_PG
#include "pg/pgactor.h"
#include "pg/pgconn.h"
#endif

static const engine_backend *vt(const engine *e)
{
    return ((const struct engine_front *)(const void *)e)->vt;
}

bool engine_store_is_pg(const engine_options *o)
{
    return o->store_uri != NULL && o->store_uri[0] != '\0';
}

#ifdef BERTH_WITH_PG
/* On PostgreSQL the channels given at open are a deploy of
 * ENGINE_BOOT_DEPLOYMENT through the engine, before it serves (nothing
 * changes if its live version declares exactly them), as the embedded
 * store's deploy_boot makes it at open. */
static int deploy_at_open(engine *e, const engine_options *o, char *err, size_t errlen)
{
    if (o->n_channels == 0)
        return BERTH_OK;
    engine_request req = {.op = ENGINE_OP_DEPLOY};
    req.u.deploy.id = ENGINE_BOOT_DEPLOYMENT;
    req.u.deploy.channels = o->channels;
    req.u.deploy.n_channels = o->n_channels;
    engine_reply *r = engine_exec_sync(e, &req);
    int rv = BERTH_OK;
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        rv = BERTH_ENOMEM;
    } else if (r->status.code != ENGINE_CODE_OK) {
        snprintf(err, errlen, "channel: %s", r->status.message);
        rv = r->status.code == ENGINE_CODE_UNAVAILABLE ? BERTH_EIO : BERTH_EINVAL;
    }
    engine_reply_free(r);
    return rv;
}
#endif

int engine_open(const engine_options *o, engine **out, char *err, size_t errlen)
{
    *out = NULL;
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium failed to initialise");
        return BERTH_EINVAL;
    }
    int rv = engine_options_check(o, err, errlen);
    if (rv != BERTH_OK)
        return rv;
    if (!engine_store_is_pg(o))
        return actor_open(o, out, err, errlen);
#ifdef BERTH_WITH_PG
    rv = pgactor_open(o, out, err, errlen);
    if (rv == BERTH_OK && (rv = deploy_at_open(*out, o, err, errlen)) != BERTH_OK) {
        engine_close(*out);
        *out = NULL;
    }
    return rv;
#else
    snprintf(err, errlen,
             "this berthd was built without PostgreSQL (-DBERTH_PG=OFF): --store "
             "cannot be used");
    return BERTH_EINVAL;
#endif
}

void engine_store_describe(const engine_options *o, char *buf, size_t len)
{
    if (!engine_store_is_pg(o)) {
        snprintf(buf, len, "data=%s", o->data_dir ? o->data_dir : "./var/berth");
        return;
    }
#ifdef BERTH_WITH_PG
    char d[360];
    pgconn_describe(o->store_uri, d, sizeof d);
    snprintf(buf, len, "store=\"%s\"", d);
#else
    snprintf(buf, len, "store=(PostgreSQL, not built)");
#endif
}

void engine_stop(engine *e)
{
    vt(e)->stop(e);
}

void engine_close(engine *e)
{
    if (e == NULL)
        return;
    vt(e)->stop(e);
    vt(e)->free(e);
}

int engine_exec(engine *e, const engine_request *req, engine_done_fn done, void *arg)
{
    if (req->op == ENGINE_OP_CANCEL)
        return BERTH_EINVAL; /* engine_cancel() */
    return vt(e)->enqueue(e, req, done, arg);
}

static void cancel_done(void *arg, engine_reply *r)
{
    (void)arg;
    engine_reply_free(r);
}

int engine_cancel(engine *e, uint64_t owner)
{
    engine_request req = {.op = ENGINE_OP_CANCEL};
    req.u.cancel.owner = owner;
    return vt(e)->enqueue(e, &req, cancel_done, NULL);
}

typedef struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    engine_reply *reply;
    bool done;
} sync_wait;

static void sync_done(void *arg, engine_reply *r)
{
    sync_wait *w = arg;
    pthread_mutex_lock(&w->mu);
    w->reply = r;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

engine_reply *engine_exec_sync(engine *e, const engine_request *req)
{
    sync_wait w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    engine_reply *r = NULL;
    if (engine_exec(e, req, sync_done, &w) == BERTH_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        r = w.reply;
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return r;
}

void engine_tick(engine *e)
{
    engine_request req = {.op = ENGINE_OP_TICK};
    engine_reply_free(engine_exec_sync(e, &req));
}

void engine_failpoint_set(engine *e, engine_failpoint fp, int n)
{
    vt(e)->failpoint_set(e, fp, n);
}

void engine_hold(engine *e, bool hold)
{
    vt(e)->hold(e, hold);
}

void engine_recovery_get(const engine *e, engine_recovery *out)
{
    vt(e)->recovery_get(e, out);
}

void engine_durability(engine *e, engine_durable *out)
{
    vt(e)->durability(e, out);
}
