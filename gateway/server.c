/*
 * server.c — see server.h. All of it runs on nng's threads except
 * engine_done(), which the engine's commit thread calls once per request
 * once its turn is durable: it encodes the answer and starts its send,
 * which never blocks (REP queues it for the pipe). Doing it there saves a
 * hand-off to nng's task threads and back for every answer.
 */
#include "gateway/server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "gateway/operate.h"
#include "gateway/convert.h"
#include "gateway/listen.h"
#include "gateway/sp.h"
#include "store/err.h"

typedef enum ctx_state {
    CTX_RECV,
    CTX_ENGINE,
    CTX_SEND,
} ctx_state;

typedef struct gw_ctx {
    struct gw_server *s;
    void *call;       /* the codec's */
    uint32_t pipe_id; /* the connection of the request it holds */
    nng_ctx ctx;
    nng_aio *aio;
    ctx_state state;
    struct gw_ctx *next;
} gw_ctx;

/* A connection, for the idle timeout: when it last sent or was answered,
 * and how many of its requests are in flight (a long poll is not
 * idleness). In an open-addressing table keyed by nng's pipe id. */
typedef struct pipe_rec {
    uint32_t id; /* 0: empty slot */
    uint32_t inflight;
    uint64_t last_ms;
} pipe_rec;

struct gw_server {
    gw_sp *sp;   /* tcp://, tls+tcp:// and ipc://: berth's own server; the rest is unused */
    bool is_sp;  /* (set before sp is opened) */
    bool opened; /* nng's socket is open */
    engine *e;
    const gw_codec *codec;
    const void *codec_ctx;
    nng_socket sock;
    size_t max_msg;
    uint32_t ctx_max;
    pthread_mutex_t mu; /* guards the context list */
    gw_ctx *all;
    uint32_t n_ctx;
    atomic_int idle; /* contexts waiting in RECV */
    atomic_int busy; /* contexts holding a request not yet answered */
    atomic_bool closing;
    atomic_bool abandon; /* the drain ran out: answers still owed are dropped */
    atomic_uint pipes;   /* connections (nng pipes) from their ADD_PRE to REM_POST */
    uint32_t pipes_max;  /* --max-connections: more are closed as they come */
    uint64_t idle_ms;    /* 0: no idle timeout */
    pthread_mutex_t pmu; /* guards the pipe table */
    pipe_rec *pt;        /* the pipe table (idle_ms > 0), pt_cap slots */
    size_t pt_cap;
    nng_aio *reap;       /* a timer: closes idle connections every second */
    gw_server_options o; /* as opened: what gw_server_start() uses */
    char url[256];
};

static void ctx_cb(void *arg);

/* ---- the pipe table (with pmu held) ---- */

static size_t pt_slot(const gw_server *s, uint32_t id)
{
    size_t i = (id * 2654435761u) & (s->pt_cap - 1);
    while (s->pt[i].id != 0 && s->pt[i].id != id)
        i = (i + 1) & (s->pt_cap - 1);
    return i;
}

static pipe_rec *pt_find(gw_server *s, uint32_t id)
{
    if (s->pt == NULL || id == 0)
        return NULL;
    pipe_rec *r = &s->pt[pt_slot(s, id)];
    return r->id == id ? r : NULL;
}

static void pt_add(gw_server *s, uint32_t id)
{
    if (s->pt == NULL || id == 0)
        return;
    pipe_rec *r = &s->pt[pt_slot(s, id)];
    *r = (pipe_rec){.id = id, .last_ms = engine_monotonic_ms()};
}

/* Deletion by backward shift: no tombstones. */
static void pt_del(gw_server *s, uint32_t id)
{
    pipe_rec *r = pt_find(s, id);
    if (r == NULL)
        return;
    size_t i = (size_t)(r - s->pt), mask = s->pt_cap - 1;
    s->pt[i].id = 0;
    for (size_t j = (i + 1) & mask; s->pt[j].id != 0; j = (j + 1) & mask) {
        size_t home = (s->pt[j].id * 2654435761u) & mask;
        /* j's entry may move to i when its home is not in (i, j]. */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            s->pt[i] = s->pt[j];
            s->pt[j].id = 0;
            i = j;
        }
    }
}

/* A request of pipe id starts (+1) or is answered (-1). */
static void pipe_activity(gw_server *s, uint32_t id, int delta)
{
    if (s->pt == NULL)
        return;
    pthread_mutex_lock(&s->pmu);
    pipe_rec *r = pt_find(s, id);
    if (r != NULL) {
        r->last_ms = engine_monotonic_ms();
        if (delta > 0)
            r->inflight++;
        else if (r->inflight > 0)
            r->inflight--;
    }
    pthread_mutex_unlock(&s->pmu);
}

/* Every second: connections with nothing in flight that sent nothing for
 * idle_ms are closed (nng's transports have no idle timeout of their own;
 * without this, held connections would use up max-connections). */
static void reap_cb(void *arg)
{
    gw_server *s = arg;
    if (nng_aio_result(s->reap) != 0 || atomic_load(&s->closing))
        return;
    uint32_t idle[64];
    size_t n = 0;
    uint64_t now = engine_monotonic_ms();
    pthread_mutex_lock(&s->pmu);
    for (size_t i = 0; i < s->pt_cap && n < 64; i++) {
        const pipe_rec *r = &s->pt[i];
        if (r->id != 0 && r->inflight == 0 && now - r->last_ms >= s->idle_ms)
            idle[n++] = r->id;
    }
    pthread_mutex_unlock(&s->pmu);
    for (size_t i = 0; i < n; i++) {
        nng_pipe p = NNG_PIPE_INITIALIZER;
        p.id = idle[i];
        nng_pipe_close(p);
    }
    nng_sleep_aio(n == 64 ? 0 : 1000, s->reap);
}

static void ctx_recv(gw_ctx *c)
{
    c->state = CTX_RECV;
    atomic_fetch_add(&c->s->idle, 1);
    nng_ctx_recv(c->ctx, c->aio);
}

static void ctx_send(gw_ctx *c, nng_msg *m)
{
    c->state = CTX_SEND;
    nng_aio_set_msg(c->aio, m);
    nng_ctx_send(c->ctx, c->aio);
}

/* The request is answered (or dropped): back to receiving. */
static void ctx_finish(gw_ctx *c)
{
    pipe_activity(c->s, c->pipe_id, -1);
    c->s->codec->fini(c->call);
    atomic_fetch_sub(&c->s->busy, 1);
    if (!atomic_load(&c->s->closing))
        ctx_recv(c);
}

/* Answers with a status alone; if even that cannot be built the request
 * is dropped and the context receives again. */
static void ctx_answer_status(gw_ctx *c, const engine_status *st)
{
    nng_msg *m;
    if (c->s->codec->encode_status(st, &m) != BERTH_OK) {
        ctx_finish(c);
        return;
    }
    ctx_send(c, m);
}

static int ctx_add(gw_server *s)
{
    gw_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->call = calloc(1, s->codec->call_size)) == NULL) {
        free(c);
        return BERTH_ENOMEM;
    }
    s->codec->init(c->call);
    c->s = s;
    if (nng_aio_alloc(&c->aio, ctx_cb, c) != 0) {
        free(c->call);
        free(c);
        return BERTH_ENOMEM;
    }
    if (nng_ctx_open(&c->ctx, s->sock) != 0) {
        nng_aio_free(c->aio);
        free(c->call);
        free(c);
        return BERTH_ENOMEM;
    }
    c->next = s->all;
    s->all = c;
    s->n_ctx++;
    ctx_recv(c);
    return BERTH_OK;
}

static void grow(gw_server *s)
{
    pthread_mutex_lock(&s->mu);
    if (!atomic_load(&s->closing) && s->n_ctx < s->ctx_max)
        ctx_add(s);
    pthread_mutex_unlock(&s->mu);
}

static void engine_done(void *arg, engine_reply *r)
{
    gw_ctx *c = arg;
    if (atomic_load(&c->s->abandon)) {
        /* The drain ran out and the contexts are being stopped: nobody
         * will send this. (berthd stops the engine first, so this is a
         * guard, not a path.) */
        engine_reply_free(r);
        atomic_fetch_sub(&c->s->busy, 1);
        return;
    }
    nng_msg *m;
    int rv = c->s->codec->encode(c->call, r, &m);
    engine_reply_free(r);
    if (rv != BERTH_OK) {
        ctx_finish(c);
        return;
    }
    ctx_send(c, m);
}

static void ctx_handle(gw_ctx *c, nng_msg *m)
{
    engine_status st;
    c->state = CTX_ENGINE;
    int pipe = nng_pipe_id(nng_msg_get_pipe(m));
    uint64_t owner = pipe > 0 ? (uint64_t)pipe : 0;
    c->pipe_id = pipe > 0 ? (uint32_t)pipe : 0;
    pipe_activity(c->s, c->pipe_id, +1);
    int rv = c->s->codec->begin(c->s->codec_ctx, c->call, c->s->e, owner, nng_msg_body(m),
                                nng_msg_len(m), c->s->max_msg, engine_done, c, &st);
    nng_msg_free(m);
    if (rv != BERTH_OK)
        ctx_answer_status(c, &st);
}

static void ctx_cb(void *arg)
{
    gw_ctx *c = arg;
    gw_server *s = c->s;
    switch (c->state) {
    case CTX_RECV: {
        atomic_fetch_sub(&s->idle, 1);
        int rv = nng_aio_result(c->aio);
        if (rv != 0) {
            if (rv != NNG_ECLOSED && rv != NNG_ECANCELED && !atomic_load(&s->closing))
                ctx_recv(c); /* a transient failure: keep serving */
            return;
        }
        atomic_fetch_add(&s->busy, 1);
        if (atomic_load(&s->idle) == 0)
            grow(s); /* the last idle context is busy now */
        ctx_handle(c, nng_aio_get_msg(c->aio));
        return;
    }
    case CTX_SEND:
        if (nng_aio_result(c->aio) != 0)
            nng_msg_free(nng_aio_get_msg(c->aio));
        ctx_finish(c);
        return;
    case CTX_ENGINE:
        return; /* not reached: the engine answers through engine_done() */
    }
}

/* A connection is gone: its long polls must not go on claiming tasks
 * nobody will read (nng's thread; engine_cancel only queues). */
static void pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    gw_server *s = arg;
    (void)ev;
    atomic_fetch_sub(&s->pipes, 1);
    if (s->pt != NULL) {
        pthread_mutex_lock(&s->pmu);
        pt_del(s, (uint32_t)nng_pipe_id(p));
        pthread_mutex_unlock(&s->pmu);
    }
    if (nng_pipe_id(p) > 0)
        (void)engine_cancel(s->e, (uint64_t)nng_pipe_id(p));
}

/* A connection is about to be added: past --max-connections it is closed
 * instead, and those open go on. (nng runs REM_POST for every pipe that
 * had its ADD_PRE, closed here or not.) */
static void pipe_coming(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    gw_server *s = arg;
    (void)ev;
    if (atomic_fetch_add(&s->pipes, 1) >= s->pipes_max) {
        nng_pipe_close(p);
        return;
    }
    if (s->pt != NULL) {
        pthread_mutex_lock(&s->pmu);
        pt_add(s, (uint32_t)nng_pipe_id(p));
        pthread_mutex_unlock(&s->pmu);
    }
}

/* berth's own server (sp.h) serves it. */
static int sp_open(gw_server *s, engine *e, const gw_server_options *o, char *err, size_t errlen)
{
    gw_sp_limits lim = {.max_message_bytes = o->max_message_bytes,
                        .max_connections = o->max_connections,
                        .idle_timeout_ms = o->idle_timeout_ms,
                        .frame_timeout_ms = o->frame_timeout_ms,
                        .buffers_max_bytes = o->buffers_max_bytes,
                        .tls = o->sp_tls,
                        .codec = s->codec,
                        .codec_ctx = s->codec_ctx};
    s->is_sp = true;
    return gw_sp_open(e, o->url, &lim, &s->sp, err, errlen);
}

/* The idle timeout needs to know every connection: a table of twice the
 * most there can be. */
static int pipes_open(gw_server *s, uint64_t idle_ms)
{
    if (idle_ms == 0 || s->pipes_max >= (1u << 24))
        return BERTH_OK;
    s->idle_ms = idle_ms;
    for (s->pt_cap = 16; s->pt_cap < 2 * (size_t)s->pipes_max + 2;)
        s->pt_cap *= 2;
    s->pt = calloc(s->pt_cap, sizeof(*s->pt));
    if (s->pt == NULL || nng_aio_alloc(&s->reap, reap_cb, s) != 0)
        return BERTH_ENOMEM;
    return BERTH_OK;
}

/* nng's REP socket, its options and its pipe callbacks. */
static int socket_open(gw_server *s, char *err, size_t errlen)
{
    int rv = nng_rep0_open(&s->sock);
    if (rv == 0)
        rv = nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, 2 * s->max_msg);
    if (rv == 0)
        rv = nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_PRE, pipe_coming, s);
    if (rv == 0)
        rv = nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, pipe_gone, s);
    if (rv != 0) {
        snprintf(err, errlen, "cannot open the %s socket: %s", s->o.name ? s->o.name : "operate",
                 nng_strerror(rv));
        return BERTH_EIO;
    }
    s->opened = true;
    return BERTH_OK;
}

int gw_server_open(engine *e, const gw_server_options *o, gw_server **out, char *err, size_t errlen)
{
    *out = NULL;
    gw_server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return BERTH_ENOMEM;
    s->o = *o;
    s->codec = o->codec ? o->codec : &gw_operate_codec;
    s->codec_ctx = o->codec_ctx;
    s->e = e;
    s->max_msg = o->max_message_bytes;
    s->ctx_max = o->contexts_max;
    s->pipes_max = o->max_connections ? o->max_connections : UINT32_MAX;
    atomic_init(&s->pipes, 0);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->pmu, NULL);
    int rv;
    if (!o->nng && (strncmp(o->url, "tcp://", 6) == 0 || strncmp(o->url, "ipc://", 6) == 0 ||
                    strncmp(o->url, "tls+tcp://", 10) == 0)) {
        rv = sp_open(s, e, o, err, errlen);
    } else if ((rv = pipes_open(s, o->idle_timeout_ms)) != BERTH_OK) {
        snprintf(err, errlen, "out of memory");
    } else {
        rv = socket_open(s, err, errlen);
    }
    if (rv != BERTH_OK) {
        gw_server_close(s);
        return rv;
    }
    *out = s;
    return BERTH_OK;
}

int gw_server_start(gw_server *s, char *err, size_t errlen)
{
    if (s->is_sp)
        return gw_sp_start(s->sp, err, errlen);
    int rv = 0;
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < s->o.contexts && rv == 0; i++)
        rv = ctx_add(s);
    pthread_mutex_unlock(&s->mu);
    if (rv == 0)
        rv = gw_listen(s->sock, s->o.url, s->o.tls, s->url, sizeof(s->url), err, errlen);
    else
        snprintf(err, errlen, "out of memory");
    if (rv != 0)
        return rv;
    if (s->reap != NULL)
        nng_sleep_aio(1000, s->reap);
    return BERTH_OK;
}

const char *gw_server_url(const gw_server *s)
{
    if (s->sp != NULL)
        return gw_sp_url(s->sp);
    return s->url;
}

void gw_server_stop(gw_server *s)
{
    if (s == NULL || atomic_load(&s->closing))
        return;
    atomic_store(&s->closing, true);
    if (s->is_sp) {
        gw_sp_stop(s->sp);
        return;
    }
    if (!s->opened)
        return;
    /* Answers owed (the engine's last ones, UNAVAILABLE to waiting fetches)
     * go out before the socket closes: wait for them, boundedly. */
    struct timespec tick = {0, 5 * 1000000L};
    for (int i = 0; i < 400 && atomic_load(&s->busy) > 0; i++)
        nanosleep(&tick, NULL);
    atomic_store(&s->abandon, true);
    if (s->reap != NULL)
        nng_aio_stop(s->reap);
    nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_PRE, NULL, NULL); /* s goes later */
    nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, NULL, NULL);
    /* Stopping an aio aborts what it waits for and waits out its callback,
     * which starts nothing new now that s is closing: from here on no
     * context calls the engine. */
    pthread_mutex_lock(&s->mu);
    for (gw_ctx *x = s->all; x != NULL; x = x->next)
        nng_aio_stop(x->aio);
    for (gw_ctx *x = s->all; x != NULL; x = x->next)
        nng_ctx_close(x->ctx);
    pthread_mutex_unlock(&s->mu);
}

void gw_server_close(gw_server *s)
{
    if (s == NULL)
        return;
    gw_server_stop(s);
    gw_sp_close(s->sp);
    if (s->opened)
        nng_close(s->sock);
    gw_ctx *c = s->all;
    s->all = NULL;
    while (c != NULL) {
        gw_ctx *next = c->next;
        nng_aio_free(c->aio);
        s->codec->fini(c->call);
        free(c->call);
        free(c);
        c = next;
    }
    if (s->reap != NULL)
        nng_aio_free(s->reap);
    free(s->pt);
    pthread_mutex_destroy(&s->pmu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
