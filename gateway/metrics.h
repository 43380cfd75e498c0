/*
 * metrics.h — /metrics (Prometheus text exposition) and /healthz on nng's
 * HTTP server (--metrics URL). Every number comes from what the engine
 * keeps as it goes (counters, gauges, histograms), never from a scan:
 * one METRICS request a scrape. /healthz answers 200 while the engine
 * serves, 503 once it has halted (or is stopping). ARCHITECTURE.md
 * ("Operating") names the families; they are a contract.
 * berth_tasks{topic,state} comes from the engine's per-topic heaps of
 * locked and backing-off tasks (a lock that ran out is dropped from them
 * when read), not from walking the tasks.
 *
 * Scrapes arrive on nng's HTTP threads and are answered from the
 * engine's commit thread; after gw_metrics_stop() they are answered 503
 * without the engine. (The operate and admin surfaces are not served
 * here: server.h, sp.h.)
 */
#ifndef BERTH_GATEWAY_METRICS_H
#define BERTH_GATEWAY_METRICS_H

#include <stddef.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "engine/engine.h"

typedef struct gw_metrics gw_metrics;

/* The HTTP server for url (http://HOST:PORT; port 0 takes a free one)
 * and its two handlers, not yet serving. */
int gw_metrics_open(engine *e, const char *url, gw_metrics **out, char *err, size_t errlen);
/* Binds and serves. */
int gw_metrics_start(gw_metrics *m, char *err, size_t errlen);
/* The HTTP server, for the console's handlers (gateway/console.h): added
 * between open and start. */
nng_http_server *gw_metrics_http(gw_metrics *m);
/* The URL served (a port 0 resolved). */
const char *gw_metrics_url(const gw_metrics *m);
/* From now on a scrape is answered 503 without the engine; returns once
 * no scrape is with the engine (after engine_stop(), which answers them,
 * at once). Then the engine may be closed. */
void gw_metrics_stop(gw_metrics *m);
/* Stops the HTTP server and frees it (NULL: a no-op). nng's server waits for its
 * connections to go, which a stuck nng may keep it from (berthd bounds
 * that wait: gateway/main.c). */
void gw_metrics_close(gw_metrics *m);

#endif
