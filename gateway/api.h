/*
 * api.h — the console's JSON API (/api/v1/..., README.md "The console's
 * API"): an HTTP request line mapped onto one engine request, and the
 * engine's reply written as JSON. Who may ask, and how a request reaches
 * the engine, is gateway/console.c's; this file knows only the shapes.
 *
 *   GET  overview                  METRICS           counters, gauges, histograms
 *   GET  tasks?topic&state&after&limit  LIST_TASKS   a page and its next_after
 *   GET  tasks/ID                  GET_TASK          with headers and payload: as
 *                                                    text if UTF-8, else hex; cut
 *                                                    at ENGINE_TASK_INFO_PAYLOAD_MAX
 *   GET  incidents?after&limit&open LIST_INCIDENTS   oldest first; open=true: those
 *                                                    still open (follow next_after)
 *   GET  deployments               LIST_DEPLOYMENTS
 *   POST tasks/ID/retry {"retries":N}?  RETRY_TERMINAL
 *   POST tasks/ID/discard          DISCARD_TERMINAL
 *   POST deliveries/ID/retry       RETRY_DELIVERY
 *
 * A refusal is {"code": "...", "message": "...", "field": "..."} with the
 * engine's code (INVALID_ARGUMENT 400, NOT_FOUND 404, FAILED_PRECONDITION
 * 409, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503, the rest 500). Any
 * thread: a gw_api_req owns the strings its engine request points to.
 */
#ifndef BERTH_GATEWAY_API_H
#define BERTH_GATEWAY_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"

/* The longest request target (path and query) the API takes. */
#define GW_API_URI_MAX 1024

typedef struct gw_api_req {
    engine_request req;
    bool change;              /* a POST: an operator's change (logged as the admin surface's are) */
    char buf[GW_API_URI_MAX]; /* the decoded strings req points into */
} gw_api_req;

/* method and uri (path after "/api/v1/", with its query) and the body
 * to out. 0, or the HTTP status of a refusal whose JSON is on f. */
int gw_api_map(const char *method, const char *uri, const void *body, size_t len, gw_api_req *out,
               FILE *f);
/* The engine's reply to q as JSON on f; returns the HTTP status. */
int gw_api_answer(const gw_api_req *q, const engine_reply *r, FILE *f);
/* A refusal of berthd's own (not the engine's) on f. */
void gw_api_refusal(FILE *f, const char *code, const char *message);
/* The HTTP status of an engine code. */
int gw_api_status(engine_code code);

#endif
