/*
 * tls.h — the server side of TLS for berth's own server (sp.h), on
 * Debian's mbed TLS (the library nng's own TLS is built on, so a client
 * on nng meets the same protocol versions and cipher suites).
 *
 * A gw_tls is a certificate chain and its private key, read once at
 * start; every tls+tcp:// connection then gets a gw_tls_conn. The client
 * side (the push sender) is a gw_tls of CAs instead. TLS 1.2 or
 * later, no renegotiation, no client certificates (as berthd's nng
 * listeners). The connection reads the socket itself, but never writes
 * it: what TLS sends (the handshake, alerts, records) is handed to the
 * caller's `out`, which queues it with the connection's other output, so
 * the socket keeps one writer and one memory bound.
 *
 * A gw_tls_conn is not thread-safe: the caller serialises every call on
 * one connection (sp.c: the connection's mutex). Calls on different
 * connections may run at once.
 */
#ifndef BERTH_GATEWAY_TLS_H
#define BERTH_GATEWAY_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct gw_tls gw_tls;
typedef struct gw_tls_conn gw_tls_conn;

/* Takes n bytes for the socket, in order; false: they cannot be taken
 * (the connection's output bound), and the connection fails. */
typedef bool (*gw_tls_out_fn)(void *arg, const uint8_t *p, size_t n);

/* Reads the PEM certificate chain (the server's first) and its key. An
 * error names the file and the problem. */
int gw_tls_open(const char *cert_file, const char *key_file, gw_tls **out, char *err,
                size_t errlen);
/* A client's: the PEM CAs a server's certificate is checked against. */
int gw_tls_client_open(const char *ca_file, gw_tls **out, char *err, size_t errlen);
void gw_tls_close(gw_tls *t);

/* A server connection on fd (non-blocking). NULL: no memory. */
gw_tls_conn *gw_tls_conn_alloc(const gw_tls *t, int fd, gw_tls_out_fn out, void *arg);
/* A client connection on fd (t from gw_tls_client_open): the server's
 * certificate must chain to t's CAs and name server_name. */
gw_tls_conn *gw_tls_conn_client_alloc(const gw_tls *t, int fd, const char *server_name,
                                      gw_tls_out_fn out, void *arg);
void gw_tls_conn_free(gw_tls_conn *c);

/* Runs the handshake as far as the peer's bytes allow: 1 done, 0 it waits
 * for the peer, -1 failed (a bad peer, or output refused). */
int gw_tls_handshake(gw_tls_conn *c);
/* Up to n (> 0) bytes of plaintext: > 0 read, 0 nothing yet, -1 the peer
 * hung up (with or without telling) or the connection failed. */
ssize_t gw_tls_read(gw_tls_conn *c, void *buf, size_t n);
/* Plaintext read from the socket and decrypted that no read took yet: the
 * socket will not say it is readable for these. */
size_t gw_tls_pending(gw_tls_conn *c);
/* Encrypts all of it, gathered into as few records as it fits, for `out`.
 * False: the connection failed. After the handshake only. */
bool gw_tls_writev(gw_tls_conn *c, const struct iovec *iov, int n);

#endif
