/*
 * client.h — a berth operate-surface client over nng REQ/REP.
 *
 * One bc holds one REQ socket dialled to berthd. bc_call() may be called
 * from several threads at once: each call runs on its own nng context.
 * bc_close() must not run while any call on that bc is in progress (nng
 * panics closing a context under a call): join the callers first.
 * Requests and responses are the generated protobuf-c types of
 * proto/berth/v1/operate.proto; a response is owned by the caller and
 * released with berth__v1__response__free_unpacked(r, NULL).
 *
 * Answers are limited to BC_RECV_MAX bytes (berthd keeps a fetch's answer
 * under its --fetch-max-bytes, 8 MiB by default). The REQ resend timer is
 * switched off: a fetch re-sent by the transport
 * would claim a second batch while the first one's reply is discarded
 * (its tasks would wait out their locks). A call that times out is for
 * the caller to retry.
 *
 * bc_open_direct() is a second way to reach the same surface: it speaks
 * nng's REQ protocol over TCP itself (SP's TCP mapping: an 8-byte
 * handshake, then messages framed by a 64-bit length, each request headed
 * by its 32-bit id) with blocking system calls on the caller's thread.
 * One call at a time per bc, tcp:// only. It costs the client a fraction
 * of the CPU of nng's threads per round trip, which is what a load
 * generator sharing the server's machine needs.
 */
#ifndef BERTH_TOOLS_CLIENT_H
#define BERTH_TOOLS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "berth/v1/admin.pb-c.h"
#include "berth/v1/operate.pb-c.h"

typedef struct bc bc;

#define BC_RECV_MAX (64u << 20)

enum {
    BC_OK = 0,
    BC_EUNREACHABLE = -1, /* no connection, or no answer in time */
    BC_EPROTO = -2,       /* the answer is not a berth Response */
    BC_ENOMEM = -3,
    BC_EINVAL = -4,
};

/* For tls+tcp:// URLs the server's certificate is always verified: against
 * ca_file, or else the system's bundle (BC_SYSTEM_CA), for the name
 * server_name (NULL: the host of the URL). Only insecure skips the check. */
typedef struct bc_tls {
    const char *ca_file;
    const char *server_name;
    bool insecure;
} bc_tls;

#define BC_SYSTEM_CA "/etc/ssl/certs/ca-certificates.crt"

/* Dials url (synchronously: BC_EUNREACHABLE when nothing listens). */
int bc_open(const char *url, bc **out, char *err, size_t errlen);
/* bc_open with TLS settings (tls may be NULL). */
int bc_open_tls(const char *url, const bc_tls *tls, bc **out, char *err, size_t errlen);
/* A direct connection to a tcp://host:port URL (see above). A connection
 * that fails is dialled again by the next call. */
int bc_open_direct(const char *url, bc **out, char *err, size_t errlen);
/* The address of a tcp://HOST:PORT URL (HOST may be [v6] or empty), as
 * bc_open_direct() dials it: BC_EINVAL for another URL, BC_EUNREACHABLE
 * when HOST does not resolve. */
int bc_tcp_address(const char *url, struct sockaddr_storage *addr, socklen_t *len, char *err,
                   size_t errlen);
void bc_close(bc *c);
/* Sends req and waits up to timeout_ms (0: 10 s) for the response. */
int bc_call(bc *c, const Berth__V1__Request *req, int timeout_ms, Berth__V1__Response **out);
/* Pipelined requests on a direct connection (a load generator that sends
 * on time whatever the answers do): bc_send() writes a request under the
 * caller's id (high bit set, distinct among those in flight on c) and
 * returns at once; bc_recv() reads the next answer, whichever request it
 * answers, waiting as bc_open_direct()'s socket timeout allows (poll
 * bc_fd() first). One thread may send while another receives; neither
 * runs beside bc_call() on the same bc. A failure closes the connection
 * (no redial: answers in flight are lost). bc_fd() is -1 for nng's. */
int bc_send(bc *c, const Berth__V1__Request *req, uint32_t id);
int bc_recv(bc *c, uint32_t *id, Berth__V1__Response **out);
int bc_fd(const bc *c);
/* Sends raw bytes as a request (tests: garbage, oversize messages). */
int bc_call_raw(bc *c, const void *buf, size_t len, int timeout_ms, Berth__V1__Response **out);
const char *bc_strerror(int rv);

/* ---- the admin surface (bc_open its URL; nng's socket only) ---- */

/* The key of an admin key file: its bytes, trailing whitespace stripped,
 * 32 to 4096 of them (free() it). */
int bc_admin_key_load(const char *path, uint8_t **key, size_t *len, char *err, size_t errlen);
/* Encodes req (its method; its credentials are ignored) into out, signed
 * with key at ts_ms as ARCHITECTURE.md ("Wire") says: the method field as encoded, then
 * Credentials{ts_ms, auth = HMAC-SHA256(key, ts_ms big-endian || those
 * bytes)}. key NULL: unsigned. Returns the length, 0 if cap is short. */
size_t bc_admin_sign(const Berth__V1__AdminRequest *req, const uint8_t *key, size_t keylen,
                     uint64_t ts_ms, uint8_t *out, size_t cap);
/* Signs req (with key, unless NULL) now, sends it and waits for the
 * AdminResponse (free with berth__v1__admin_response__free_unpacked). */
int bc_admin_call(bc *c, const Berth__V1__AdminRequest *req, const uint8_t *key, size_t keylen,
                  int timeout_ms, Berth__V1__AdminResponse **out);

#endif
