/*
 * listen.h — what berthd's nng sockets share: binding one to a URL (the
 * events PUB socket, and nng's REP socket for ws:// and --operate-nng),
 * any URL nng takes (tcp://, ipc://, ws://, or tls+tcp:// with a server
 * certificate). A tcp port of 0 takes a free port; the URL actually bound
 * (the one clients dial) is written back. berth's own server binds its
 * own sockets (listeners.h).
 *
 * And gw_within(), which bounds the wait for a close that nng may never
 * finish.
 */
#ifndef BERTH_GATEWAY_LISTEN_H
#define BERTH_GATEWAY_LISTEN_H

#include <stdbool.h>
#include <stddef.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

/* tls may be NULL (then a tls+tcp:// URL is refused). */
int gw_listen(nng_socket s, const char *url, nng_tls_config *tls, char *bound, size_t boundlen,
              char *err, size_t errlen);

/* A server TLS configuration from PEM files: cert (chain) and private key. */
int gw_tls_server(const char *cert_file, const char *key_file, nng_tls_config **out, char *err,
                  size_t errlen);

/* Runs fn(arg) on a thread of its own and waits for it ms at most (nng's
 * socket close can wait for ever on a pipe a peer left stuck). False: it
 * had not returned; it goes on, detached, so arg must outlive it. */
bool gw_within(void (*fn)(void *arg), void *arg, int ms);

#endif
