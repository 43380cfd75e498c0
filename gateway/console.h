/*
 * console.h — the web console on the --metrics HTTP listener: its page at
 * /console/ (files compiled in: console/files.h) and its JSON API at
 * /api/v1/ (gateway/api.h). console/README.md is its design; README.md
 * says how to open it and documents the API.
 *
 * POSTURE (the admin surface's, R16: the console is never easier to reach)
 *   Without --admin-key-file it is served only when the listener is on a
 *   loopback address, and answers only requests whose Host names one (a
 *   page whose name resolves to 127.0.0.1 sends its own name: refused).
 *   Elsewhere its paths answer 403. With a key, every API request carries
 *   X-Berth-Ts (ms since the epoch, within --admin-skew-ms) and
 *   X-Berth-Auth: hex HMAC-SHA256(key, ts as 8 big-endian bytes || method
 *   || "\n" || path and query || "\n" || body); else 401, and nothing of
 *   the request is looked at. A change is a POST with Content-Type
 *   application/json, X-Berth-Console: 1, and an Origin (when sent) that
 *   is the Host it was sent to; else 403 (no CORS: a page of another
 *   origin cannot send that header, a form cannot at all). Every answer
 *   carries a Content-Security-Policy that allows the page's own files
 *   and nothing else.
 *
 * Each API request is one engine request, answered from the engine's
 * commit thread as /metrics is; at most GW_CONSOLE_INFLIGHT_MAX at once
 * (the rest 503, retryable). Changes are logged as the admin surface's
 * ("berthd: admin: console <who> retry_terminal <id>") and published by
 * the engine as theirs are.
 */
#ifndef BERTH_GATEWAY_CONSOLE_H
#define BERTH_GATEWAY_CONSOLE_H

#include <stddef.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "engine/engine.h"
#include "gateway/admin.h"

#define GW_CONSOLE_INFLIGHT_MAX 64
#define GW_CONSOLE_BODY_MAX     1024 /* a POST's body, bytes */

typedef struct gw_console gw_console;

/* Adds the console's handlers to srv (the --metrics server, url its
 * URL), before it starts. admin is borrowed and must outlive the console.
 * A listener the console may not serve without a key is said once on
 * stderr; its paths then answer 403. */
int gw_console_open(engine *e, nng_http_server *srv, const char *url, const gw_admin *admin,
                    gw_console **out, char *err, size_t errlen);
/* From now on API requests are answered 503 without the engine; returns
 * once none is with the engine (after engine_stop(), at once). */
void gw_console_stop(gw_console *c);
/* Frees it, after the server (which frees the handlers) is released.
 * NULL: a no-op. */
void gw_console_close(gw_console *c);

#endif
