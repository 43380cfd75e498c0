/*
 * berthd — the berth daemon: the engine on its embedded store, and its
 * surfaces. tcp://, tls+tcp:// and ipc:// operate and admin URLs are
 * served by berth's own SP server (gateway/sp.c, speaking nng's REQ/REP
 * wire protocol); nng's REP socket serves only ws:// and --operate-nng
 * (gateway/server.c). nng carries the events PUB socket
 * (gateway/events.c) and the /metrics HTTP server (gateway/metrics.c);
 * push deliveries go out over berth's own SP REQ client
 * (gateway/push.c). Prints one line when ready; SIGTERM or SIGINT finish
 * the turn in flight, answer what is waiting, close the store and exit 0.
 *
 * serve() reads as its steps: settle descriptors, open what the engine
 * needs (TLS, admin keys, events, the push sender), open the engine,
 * open and start the servers, say ready, wait for a signal, then stop
 * everything in order and close it.
 *
 * Exit codes: 0 clean stop, 1 could not start (store, sockets), 2 refused
 * configuration (the message names the setting).
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "gateway/admin.h"
#include "gateway/config.h"
#include "gateway/events.h"
#include "gateway/listen.h"
#include "gateway/budget.h"
#include "gateway/tls.h"
#include "gateway/console.h"
#include "gateway/metrics.h"
#include "gateway/push.h"
#include "gateway/server.h"
#include "store/err.h"

static int serve(gw_config *cfg);

#define SHUTDOWN_SOCKET_MS 5000
/* Admin requests are small: ids, filters, a page size. */
#define ADMIN_MESSAGE_MAX (64u << 10)
/* Distinct push receivers (a socket each). */
#define PUSH_RECEIVERS_MAX 4096

static void close_server(void *arg)
{
    gw_server_close(arg);
}

static void close_metrics(void *arg)
{
    gw_metrics_close(arg);
}

/* Descriptors kept beside the operate connections: the store's files, the
 * other sockets, the events' subscribers. */
#define FDS_RESERVED 256

/* Raises the descriptor limit to its ceiling and settles max-connections
 * under it. False: the setting asks for more than there is. */
static bool settle_descriptors(gw_config *cfg, char *err, size_t errlen)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    uint64_t limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                         ? (uint64_t)rl.rlim_cur
                         : UINT64_MAX;
    uint64_t room = limit > FDS_RESERVED ? limit - FDS_RESERVED : 0;
    if (cfg->max_connections == 0) {
        uint64_t half = limit / 2;
        cfg->max_connections = (uint32_t)(half < 10000 ? half : 10000);
        if (cfg->max_connections == 0) {
            snprintf(err, errlen, "max-connections: the descriptor limit (%" PRIu64 ") is too low",
                     limit);
            return false;
        }
    } else if (cfg->max_connections > room) {
        snprintf(err, errlen,
                 "max-connections (%u) is more than the descriptor limit (%" PRIu64
                 ") leaves beside the %d berthd keeps for itself",
                 cfg->max_connections, limit, FDS_RESERVED);
        return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    gw_config cfg;
    gw_config_init(&cfg);
    char err[512] = "";
    switch (gw_config_load(&cfg, argc, argv, err, sizeof(err))) {
    case GW_CONFIG_HELP:
        gw_config_usage(stdout);
        gw_config_fini(&cfg);
        return 0;
    case GW_CONFIG_ERROR:
        fprintf(stderr, "berthd: %s\n", err);
        gw_config_fini(&cfg);
        return 2;
    }
    int status = serve(&cfg);
    gw_config_fini(&cfg);
    return status;
}

/* Everything serve() opens, closed in reverse by gateway_close(). */
typedef struct gateway {
    sigset_t sigs;       /* SIGTERM, SIGINT: taken by sigwait() */
    nng_tls_config *tls; /* nng's: the events socket and --operate-nng */
    gw_tls *sp_tls;      /* berth's own server's (tls.h) */
    gw_admin *admin;     /* the admin surface's keys */
    gw_events *events;   /* the PUB socket */
    gw_push *push;       /* the push sender */
    engine *e;
    gw_server *server;       /* the operate surface */
    gw_server *admin_server; /* the admin surface */
    gw_metrics *metrics;
    gw_console *console; /* on the metrics server; NULL with --console=false */
} gateway;

/* Signals are taken by sigwait(); every thread started from here on
 * (engine, nng) inherits the mask. */
static void block_signals(gateway *g)
{
    sigemptyset(&g->sigs);
    sigaddset(&g->sigs, SIGTERM);
    sigaddset(&g->sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &g->sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* tls+tcp://: berth's own server's TLS (tls.h), and nng's for the event
 * socket and --operate-nng. Exit status on failure: 2. */
static int tls_open(gateway *g, const gw_config *cfg, char *err, size_t errlen)
{
    if (cfg->tls_cert == NULL)
        return BERTH_OK;
    if (gw_tls_open(cfg->tls_cert, cfg->tls_key, &g->sp_tls, err, errlen) != BERTH_OK ||
        gw_tls_server(cfg->tls_cert, cfg->tls_key, &g->tls, err, errlen) != 0)
        return BERTH_EINVAL;
    return BERTH_OK;
}

/* The events socket and the push sender, wired into the engine's
 * options. */
static int outlets_open(gateway *g, gw_config *cfg, char *err, size_t errlen)
{
    if (gw_events_open(cfg->events_url, g->tls, &g->events, err, errlen) != BERTH_OK)
        return BERTH_EIO;
    cfg->eng.on_event = gw_events_publish;
    cfg->eng.event_ctx = g->events;
    gw_push_options po = {
        .timeout_ms = cfg->eng.push_timeout_ms,
        .max_message_bytes = cfg->max_message_bytes,
        .tls_ca_file = cfg->push_tls_ca,
        .receivers_max = PUSH_RECEIVERS_MAX,
    };
    if (gw_push_open(&po, &g->push, err, errlen) != BERTH_OK ||
        gw_push_start(g->push, err, errlen) != BERTH_OK)
        return BERTH_EIO;
    cfg->eng.push_fn = gw_push_send;
    cfg->eng.push_ctx = g->push;
    return BERTH_OK;
}

/* One surface's server, opened and started. */
static int server_run(gateway *g, const gw_server_options *o, gw_server **out, char *err,
                      size_t errlen)
{
    int rv = gw_server_open(g->e, o, out, err, errlen);
    return rv != BERTH_OK ? rv : gw_server_start(*out, err, errlen);
}

/* The operate and admin servers and /metrics, serving. */
static int servers_run(gateway *g, const gw_config *cfg, char *err, size_t errlen)
{
    gw_server_options so = {
        .url = cfg->operate_url,
        .max_message_bytes = cfg->max_message_bytes,
        .contexts = cfg->contexts,
        .contexts_max = cfg->contexts_max,
        .tls = g->tls,
        .sp_tls = g->sp_tls,
        .nng = cfg->operate_nng,
        .max_connections = cfg->max_connections,
        .idle_timeout_ms = cfg->idle_timeout_ms,
        .frame_timeout_ms = cfg->frame_timeout_ms,
        .buffers_max_bytes = cfg->buffers_max_bytes,
    };
    gw_server_options ao = {
        .url = cfg->admin_url,
        .max_message_bytes = ADMIN_MESSAGE_MAX,
        .contexts = 2,
        .contexts_max = 64,
        .tls = g->tls,
        .sp_tls = g->sp_tls,
        .max_connections = 64,
        .idle_timeout_ms = cfg->idle_timeout_ms,
        .frame_timeout_ms = cfg->frame_timeout_ms,
        .buffers_max_bytes = 64u << 20,
        .codec = &gw_admin_codec,
        .codec_ctx = g->admin,
        .name = "admin",
    };
    int rv = server_run(g, &so, &g->server, err, errlen);
    if (rv == BERTH_OK)
        rv = server_run(g, &ao, &g->admin_server, err, errlen);
    if (rv == BERTH_OK)
        rv = gw_metrics_open(g->e, cfg->metrics_url, &g->metrics, err, errlen);
    if (rv == BERTH_OK && cfg->console)
        rv = gw_console_open(g->e, gw_metrics_http(g->metrics), cfg->metrics_url, g->admin,
                             &g->console, err, errlen);
    if (rv == BERTH_OK)
        rv = gw_metrics_start(g->metrics, err, errlen);
    return rv;
}

/* Recovery's numbers on stderr, and the ready line on stdout. */
static void say_ready(const gateway *g, const gw_config *cfg)
{
    engine_recovery rec;
    engine_recovery_get(g->e, &rec);
    gw_memory_return();
    fprintf(stderr,
            "berthd: recovered %" PRIu64 " tasks, %" PRIu64 " deliveries and %" PRIu64
            " calls in %" PRIu64 " ms (store opened in %" PRIu64 " ms, memory rebuilt in %" PRIu64
            " ms)\n",
            rec.tasks, rec.deliveries, rec.instances, rec.store_ms + rec.rebuild_ms, rec.store_ms,
            rec.rebuild_ms);
    char where[400];
    engine_store_describe(&cfg->eng, where, sizeof where);
    printf("berthd ready operate=%s admin=%s events=%s metrics=%s %s\n", gw_server_url(g->server),
           gw_server_url(g->admin_server), gw_events_url(g->events), gw_metrics_url(g->metrics),
           where);
    fflush(stdout);
}

/* Nothing reaches the engine any more, and the engine has stopped: its
 * turn in flight finished, its waiters answered, its store closed with
 * everything on disk. */
static void gateway_stop(gateway *g)
{
    if (g->e != NULL)
        engine_stop(g->e);     /* the turn in flight finishes; waiters are answered */
    gw_server_stop(g->server); /* bounded: no request reaches the engine after */
    gw_server_stop(g->admin_server);
    gw_metrics_stop(g->metrics); /* no scrape reaches the engine after */
    gw_console_stop(g->console); /* nor a console request */
    gw_push_stop(g->push);       /* deliveries in flight are sent again at the next start */
    if (g->e != NULL)
        engine_close(g->e); /* the store is closed: everything is on disk */
    g->e = NULL;
}

/* Closes the servers, each bounded by SHUTDOWN_SOCKET_MS: nng's socket and
 * HTTP server closes wait for connections that a peer may have left
 * stuck. False: one did not close in time (it goes on, detached). */
static bool servers_close(gateway *g)
{
    bool ok = gw_within(close_server, g->server, SHUTDOWN_SOCKET_MS) &&
              gw_within(close_server, g->admin_server, SHUTDOWN_SOCKET_MS) &&
              gw_within(close_metrics, g->metrics, SHUTDOWN_SOCKET_MS);
    g->server = g->admin_server = NULL;
    g->metrics = NULL;
    if (ok)
        gw_console_close(g->console); /* its handlers went with the metrics server */
    g->console = NULL;
    return ok;
}

/* What servers_close() leaves: the push sender, the events socket, the
 * keys and TLS. */
static void outlets_close(gateway *g)
{
    gw_push_close(g->push);
    gw_events_close(g->events);
    gw_admin_close(g->admin);
    if (g->tls != NULL)
        nng_tls_config_free(g->tls);
    gw_tls_close(g->sp_tls);
}

static int serve(gw_config *cfg)
{
    char err[512] = "";
    gateway g = {0};
    block_signals(&g);
    if (!settle_descriptors(cfg, err, sizeof(err)) ||
        tls_open(&g, cfg, err, sizeof(err)) != BERTH_OK ||
        gw_admin_open(cfg->admin_url, cfg->admin_key_file, cfg->admin_skew_ms, &g.admin, err,
                      sizeof(err)) != BERTH_OK) {
        fprintf(stderr, "berthd: %s\n", err);
        outlets_close(&g);
        return 2;
    }
    int status = 1;
    int rv = outlets_open(&g, cfg, err, sizeof(err));
    if (rv == BERTH_OK) {
        rv = engine_open(&cfg->eng, &g.e, err, sizeof(err));
        /* A bad setting, or a store newer than this build: no restart helps. */
        status = rv == BERTH_EINVAL || rv == BERTH_EFORMAT ? 2 : 1;
    }
    if (rv == BERTH_OK && servers_run(&g, cfg, err, sizeof(err)) == BERTH_OK) {
        say_ready(&g, cfg);
        int sig = 0;
        sigwait(&g.sigs, &sig);
        fprintf(stderr, "berthd: %s: stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        status = 0;
    } else {
        fprintf(stderr, "berthd: %s\n", err);
    }
    gateway_stop(&g);
    if (!servers_close(&g)) {
        /* Nothing is left to keep (a push receiver that resets with
         * answers in flight is enough to leave a socket stuck): do not
         * wait for it. */
        fprintf(stderr, "berthd: a socket did not close within %d ms; exiting\n",
                SHUTDOWN_SOCKET_MS);
        fflush(stderr);
        _exit(status);
    }
    outlets_close(&g);
    return status;
}
