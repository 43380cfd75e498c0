/*
 * admin.h — the admin surface (R16): AdminRequest in, AdminResponse out,
 * on its own socket (server.c serves gw_admin_codec), so the operate
 * socket cannot even decode an admin method, nor this one an operate one.
 *
 * CREDENTIALS (ARCHITECTURE.md, "Wire")
 *   With a key file, every request carries Credentials: ts_ms and auth =
 *   HMAC-SHA256(key, ts_ms as 8 big-endian bytes || the method field as
 *   the request encodes it: its key, its length and its bytes). A client
 *   gets those bytes by encoding an AdminRequest that holds the method
 *   alone. The MAC is checked in constant time (libsodium), and ts_ms
 *   must be within --admin-skew-ms of berthd's clock. Anything else is
 *   UNAUTHENTICATED, and nothing of the request is looked at further. The
 *   key is the file's bytes, trailing whitespace stripped, at least 32.
 *   Without a key file the surface trusts whoever reaches it, so berthd
 *   binds it only to loopback or ipc:// (gw_admin_open refuses the rest).
 *
 * Every change an operator makes (retry_terminal, discard_terminal,
 * retry_delivery; and a checkpoint) is durable before its OK, logged on stderr as one line
 * once it is (who: the key's fingerprint or "loopback"; what; which id),
 * and published as an event by the engine.
 */
#ifndef BERTH_GATEWAY_ADMIN_H
#define BERTH_GATEWAY_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/operate.h"

#define GW_ADMIN_KEY_MIN 32

typedef struct gw_admin gw_admin;

/* The surface's settings: key_file may be NULL (then url must be loopback
 * or ipc://). BERTH_EINVAL with a message naming the setting. */
int gw_admin_open(const char *url, const char *key_file, uint64_t skew_ms, gw_admin **out,
                  char *err, size_t errlen);
void gw_admin_close(gw_admin *a);
/* Who the surface's changes are logged as: "key:" and the first 8 bytes
 * of HMAC-SHA256(key, "berth admin fingerprint") in hex, or "loopback". */
const char *gw_admin_who(const gw_admin *a);

/* For the console (gateway/console.c), which is the admin surface in
 * another shape and keeps its posture: */
/* whether a key file was given; */
bool gw_admin_keyed(const gw_admin *a);
/* NULL if mac is HMAC-SHA256(key, ts_ms as 8 big-endian bytes || msg)
 * and ts_ms is within --admin-skew-ms of berthd's clock; else why not
 * (checked in constant time; only when keyed); */
const char *gw_admin_verify(const gw_admin *a, uint64_t ts_ms, const void *msg, size_t len,
                            const uint8_t mac[32]);
/* whether an http:// URL listens on a numeric loopback address only; */
bool gw_admin_loopback_http(const char *url);
/* whether a Host header names a loopback address or "localhost" (a page
 * whose name was made to resolve to 127.0.0.1 sends its own name); */
bool gw_admin_loopback_host(const char *host);
/* the line a change leaves on stderr once it is durable, with via
 * ("console", or NULL) before who made it. */
void gw_admin_log_change(const gw_admin *a, const char *via, const engine_request *req);

/* Serve with codec_ctx = the gw_admin. */
extern const gw_codec gw_admin_codec;

#endif
