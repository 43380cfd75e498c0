/*
 * berthd — the berth daemon: the engine on its embedded store, served over
 * nng. Prints one line when ready; SIGTERM or SIGINT finish the turn in
 * flight, answer what is waiting, close the store and exit 0.
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
#include "gateway/sp.h"
#include "gateway/tls.h"
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

/* gw_server_close(), waiting for it ms at most. */
static bool close_within(gw_server *server, int ms)
{
    return gw_within(close_server, server, ms);
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
    gw_config_default(&cfg);
    char err[512] = "";
    switch (gw_config_load(&cfg, argc, argv, err, sizeof(err))) {
    case GW_CONFIG_HELP:
        gw_config_usage(stdout);
        gw_config_free(&cfg);
        return 0;
    case GW_CONFIG_ERROR:
        fprintf(stderr, "berthd: %s\n", err);
        gw_config_free(&cfg);
        return 2;
    }
    int status = serve(&cfg);
    gw_config_free(&cfg);
    return status;
}

static int serve(gw_config *cfg)
{
    char err[512] = "";

    /* Signals are taken by sigwait() below; every thread started from
     * here on (engine, nng) inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (!settle_descriptors(cfg, err, sizeof(err))) {
        fprintf(stderr, "berthd: %s\n", err);
        return 2;
    }
    /* tls+tcp://: berth's own server's TLS (tls.h), and nng's for the
     * event socket and --operate-nng. */
    nng_tls_config *tls = NULL;
    gw_tls *sp_tls = NULL;
    if (cfg->tls_cert != NULL &&
        (gw_tls_open(cfg->tls_cert, cfg->tls_key, &sp_tls, err, sizeof(err)) ||
         gw_tls_server(cfg->tls_cert, cfg->tls_key, &tls, err, sizeof(err)))) {
        fprintf(stderr, "berthd: %s\n", err);
        gw_tls_close(sp_tls);
        return 2;
    }
    gw_admin *admin = NULL;
    if (gw_admin_open(cfg->admin_url, cfg->admin_key_file, cfg->admin_skew_ms, &admin, err,
                      sizeof(err)) != BERTH_OK) {
        fprintf(stderr, "berthd: %s\n", err);
        return 2;
    }
    gw_events *events = NULL;
    if (gw_events_open(cfg->events_url, tls, &events, err, sizeof(err)) != BERTH_OK) {
        fprintf(stderr, "berthd: %s\n", err);
        gw_admin_close(admin);
        return 1;
    }
    cfg->eng.on_event = gw_events_publish;
    cfg->eng.event_ctx = events;
    gw_push_options po = {
        .timeout_ms = cfg->eng.push_timeout_ms,
        .max_message_bytes = cfg->max_message_bytes,
        .tls_ca_file = cfg->push_tls_ca,
        .receivers_max = PUSH_RECEIVERS_MAX,
    };
    gw_push *push = NULL;
    if (gw_push_open(&po, &push, err, sizeof(err)) != BERTH_OK) {
        fprintf(stderr, "berthd: %s\n", err);
        gw_events_close(events);
        gw_admin_close(admin);
        return 1;
    }
    cfg->eng.push_fn = gw_push_send;
    cfg->eng.push_ctx = push;
    engine *e = NULL;
    int rv = engine_open(&cfg->eng, &e, err, sizeof(err));
    if (rv != BERTH_OK) {
        fprintf(stderr, "berthd: %s\n", err);
        gw_push_close(push, SHUTDOWN_SOCKET_MS);
        gw_events_close(events);
        gw_admin_close(admin);
        return rv == BERTH_EINVAL ? 2 : 1;
    }
    gw_server_options so = {
        .url = cfg->operate_url,
        .max_message_bytes = cfg->max_message_bytes,
        .contexts = cfg->contexts,
        .contexts_max = cfg->contexts_max,
        .tls = tls,
        .sp_tls = sp_tls,
        .nng = cfg->operate_nng,
        .max_connections = cfg->max_connections,
        .idle_timeout_ms = cfg->idle_timeout_ms,
        .frame_timeout_ms = cfg->frame_timeout_ms,
        .buffers_max_bytes = cfg->buffers_max_bytes,
    };
    gw_server *server = NULL;
    if (gw_server_start(e, &so, &server, err, sizeof(err)) != BERTH_OK)
        goto close_engine;
    gw_server_options ao = {
        .url = cfg->admin_url,
        .max_message_bytes = ADMIN_MESSAGE_MAX,
        .contexts = 2,
        .contexts_max = 64,
        .tls = tls,
        .sp_tls = sp_tls,
        .max_connections = 64,
        .idle_timeout_ms = cfg->idle_timeout_ms,
        .frame_timeout_ms = cfg->frame_timeout_ms,
        .buffers_max_bytes = 64u << 20,
        .codec = &gw_admin_codec,
        .codec_ctx = admin,
        .name = "admin",
    };
    gw_server *admin_server = NULL;
    if (gw_server_start(e, &ao, &admin_server, err, sizeof(err)) != BERTH_OK)
        goto close_server;
    gw_metrics *metrics = NULL;
    if (gw_metrics_start(e, cfg->metrics_url, &metrics, err, sizeof(err)) != BERTH_OK)
        goto close_admin_server;
    engine_recovery rec;
    engine_recovery_get(e, &rec);
    gw_memory_release();
    fprintf(stderr,
            "berthd: recovered %" PRIu64 " tasks, %" PRIu64 " deliveries and %" PRIu64
            " calls in %" PRIu64 " ms (store opened in %" PRIu64 " ms, memory rebuilt in %" PRIu64
            " ms)\n",
            rec.tasks, rec.deliveries, rec.instances, rec.store_ms + rec.rebuild_ms, rec.store_ms,
            rec.rebuild_ms);
    printf("berthd ready operate=%s admin=%s events=%s metrics=%s data=%s\n", gw_server_url(server),
           gw_server_url(admin_server), gw_events_url(events), gw_metrics_url(metrics),
           cfg->eng.data_dir);
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "berthd: %s: stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    engine_stop(e);         /* the turn in flight finishes; waiters are answered */
    gw_server_stop(server); /* bounded: no request reaches the engine after */
    gw_server_stop(admin_server);
    gw_metrics_stop(metrics); /* no scrape reaches the engine after */
    gw_push_stop(push);       /* deliveries in flight are sent again at the next start */
    engine_close(e);          /* the store is closed: everything is on disk */
    if (!close_within(server, SHUTDOWN_SOCKET_MS) ||
        !close_within(admin_server, SHUTDOWN_SOCKET_MS) ||
        !gw_push_close(push, SHUTDOWN_SOCKET_MS) ||
        !gw_within(close_metrics, metrics, SHUTDOWN_SOCKET_MS)) {
        /* nng's socket and HTTP server closes wait for connections that a
         * peer may have left stuck (a push receiver that resets with
         * answers in flight is enough): nothing is left to keep, so do
         * not wait for them. */
        fprintf(stderr, "berthd: a socket did not close within %d ms; exiting\n",
                SHUTDOWN_SOCKET_MS);
        fflush(stderr);
        _exit(0);
    }
    gw_admin_close(admin);
    gw_events_close(events);
    if (tls != NULL)
        nng_tls_config_free(tls);
    gw_tls_close(sp_tls);
    return 0;

    /* A server did not start: what started stops, in the reverse order. */
close_admin_server:
    engine_stop(e);
    gw_server_close(admin_server);
close_server:
    engine_stop(e);
    gw_server_close(server);
close_engine:
    fprintf(stderr, "berthd: %s\n", err);
    gw_push_stop(push);
    engine_close(e);
    gw_push_close(push, SHUTDOWN_SOCKET_MS);
    gw_events_close(events);
    gw_admin_close(admin);
    return 1;
}
