/*
 * fuzz_sp.c — libFuzzer: berth's own tcp:// server (gateway/sp.c) fed an
 * arbitrary byte stream over a real connection, written in pieces whose
 * sizes the input also decides, then half-closed; whatever it answers is
 * read until it closes or goes quiet. The server and its engine live for
 * the whole run, so a connection that corrupts them fails a later input.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "gateway/sp.h"
#include "store/err.h"
#include "tests/fuzz/fuzz.h"

static int port;
static engine *e;
static gw_sp *s;

static void start(void)
{
    e = fuzz_engine();
    gw_sp_limits lim = {.max_message_bytes = 1u << 20,
                        .max_connections = 1024,
                        .idle_timeout_ms = 1000,
                        .frame_timeout_ms = 1000};
    char err[256];
    if (gw_sp_open(e, "tcp://127.0.0.1:0", &lim, &s, err, sizeof(err)) != BERTH_OK ||
        gw_sp_start(s, err, sizeof(err)) != BERTH_OK) {
        fprintf(stderr, "gw_sp_open: %s\n", err);
        exit(1);
    }
    const char *colon = strrchr(gw_sp_url(s), ':');
    port = atoi(colon + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned runs;
    if (port != 0 && ++runs % FUZZ_RENEW_EVERY == 0) {
        engine_stop(e);
        gw_sp_close(s);
        fuzz_engine_close(e);
        port = 0;
    }
    if (port == 0)
        start();
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd;
    for (;;) { /* (libFuzzer's timers interrupt system calls) */
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
            break;
        if (fd < 0 || errno != EINTR) {
            perror("connect");
            abort(); /* the server stopped accepting: that is a finding */
        }
        close(fd);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct timeval tv = {.tv_usec = 20000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    /* Pieces of 1 to 64 bytes, their sizes read off the input itself. */
    for (size_t at = 0, k = 0; at < size;) {
        size_t n = 1 + data[k++ % size] % 64;
        if (n > size - at)
            n = size - at;
        if (send(fd, data + at, n, MSG_NOSIGNAL) < 0)
            break; /* closed on us: fine */
        at += n;
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    while (recv(fd, buf, sizeof(buf), 0) > 0)
        ;
    close(fd);
    return 0;
}
