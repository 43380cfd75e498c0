/*
 * listeners.h — the listening sockets of berth's own server (sp.h):
 * tcp://HOST:PORT, tls+tcp://HOST:PORT (HOST may be empty or '*' for every
 * address, or [v6]; PORT may be 0) and ipc://PATH. (listen.h binds nng's
 * sockets instead.)
 *
 * An ipc:// socket file left by a listener that is gone (connecting is
 * refused) is replaced, as nng does; one that answers is another
 * server's, and opening fails. Only a socket is ever removed: a file of
 * another kind at the path is left as it is. gw_listener_close() removes
 * the socket file (nng's IPC listener does so too).
 *
 * Loop thread, or the thread that opens and closes the server.
 */
#ifndef BERTH_GATEWAY_LISTENERS_H
#define BERTH_GATEWAY_LISTENERS_H

#include <stddef.h>
#include <stdint.h>

struct gw_tls;

/* Embedded in the server. */
typedef struct gw_listener {
    int fd;                   /* listening, non-blocking; -1: not open */
    uint8_t lead;             /* bytes before a frame's length: 1 on ipc:// (its type), else 0 */
    const struct gw_tls *tls; /* tls+tcp://: the certificate and key; else NULL */
    char url[300];            /* as bound: a port 0 resolved */
    char ipc[108];            /* ipc://: the socket's path ("" otherwise) */
} gw_listener;

/* Binds url and listens. tls is needed by a tls+tcp:// URL (and kept),
 * unused by the others. BERTH_EINVAL (a URL that cannot be) or BERTH_EIO
 * (it cannot be bound), with the reason in err. */
int gw_listener_open(gw_listener *l, const char *url, const struct gw_tls *tls, char *err,
                     size_t errlen);
/* Closes it, and removes an ipc:// socket file. No-op if not open. */
void gw_listener_close(gw_listener *l);

#endif
