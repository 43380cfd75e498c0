/* listeners.c — see listeners.h. */
#include "gateway/listeners.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto/sp_wire.h"
#include "store/err.h"

/* A socket file at sa's path whose listener is gone (connecting is
 * refused): removed. False: there is none, or it answers. */
static bool remove_stale(const struct sockaddr_un *sa)
{
    struct stat st;
    int probe = lstat(sa->sun_path, &st) == 0 && S_ISSOCK(st.st_mode)
                    ? socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)
                    : -1;
    bool stale = probe >= 0 && connect(probe, (const struct sockaddr *)sa, sizeof(*sa)) != 0 &&
                 errno == ECONNREFUSED;
    if (probe >= 0)
        close(probe);
    return stale && unlink(sa->sun_path) == 0;
}

static int listen_ipc(gw_listener *l, const char *url, char *err, size_t errlen)
{
    const char *path = url + strlen("ipc://");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (path[0] == '\0' || strlen(path) >= sizeof(sa.sun_path) || strlen(path) >= sizeof(l->ipc)) {
        snprintf(err, errlen, "%s: an ipc:// path is 1 to %zu bytes", url, sizeof(sa.sun_path) - 1);
        return BERTH_EINVAL;
    }
    memcpy(sa.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rv = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    if (rv != 0 && errno == EADDRINUSE) {
        if (remove_stale(&sa))
            rv = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        else
            errno = EADDRINUSE;
    }
    if (rv != 0 || listen(fd, 128) != 0) {
        int saved = errno;
        if (fd >= 0)
            close(fd);
        snprintf(err, errlen, "cannot listen on %s: %s", url, strerror(saved));
        return BERTH_EIO;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    snprintf(l->url, sizeof(l->url), "%s", url);
    snprintf(l->ipc, sizeof(l->ipc), "%s", path);
    l->lead = 1;
    l->fd = fd;
    return BERTH_OK;
}

/* The first of host:port's addresses that binds, listening; -1 with
 * errno's reason in *saved. */
static int bind_first(const struct addrinfo *ai, int *saved)
{
    int fd = -1;
    for (const struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            *saved = errno;
            close(fd);
            fd = -1;
        }
    }
    return fd;
}

static int listen_tcp(gw_listener *l, const char *url, const char *scheme, char *err, size_t errlen)
{
    const char *hp = url + strlen(scheme);
    char h[256], port_text[16];
    if (!sp_host_port(hp, h, sizeof(h), port_text, sizeof(port_text))) {
        snprintf(err, errlen, "%s: not HOST:PORT (a host of 255 bytes at most)", url);
        return BERTH_EINVAL;
    }
    int hl = (int)(strrchr(hp, ':') - hp); /* (as written, for the URL bound) */
    bool any = h[0] == '\0' || strcmp(h, "*") == 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(any ? NULL : h, port_text, &hints, &ai);
    if (g != 0) {
        snprintf(err, errlen, "%s: %s", url, gai_strerror(g));
        return BERTH_EINVAL;
    }
    int saved = 0;
    int fd = bind_first(ai, &saved);
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", url, strerror(saved ? saved : EINVAL));
        return BERTH_EIO;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    unsigned port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    snprintf(l->url, sizeof(l->url), "%s%.*s:%u", scheme, hl, hp, port);
    l->fd = fd;
    return BERTH_OK;
}

int gw_listener_open(gw_listener *l, const char *url, const struct gw_tls *tls, char *err,
                     size_t errlen)
{
    memset(l, 0, sizeof(*l));
    l->fd = -1;
    if (strncmp(url, "ipc://", 6) == 0)
        return listen_ipc(l, url, err, errlen);
    if (strncmp(url, "tls+tcp://", 10) != 0)
        return listen_tcp(l, url, "tcp://", err, errlen);
    if (tls == NULL) {
        snprintf(err, errlen, "%s: a tls+tcp:// URL needs --tls-cert and --tls-key", url);
        return BERTH_EINVAL;
    }
    l->tls = tls;
    return listen_tcp(l, url, "tls+tcp://", err, errlen);
}

void gw_listener_close(gw_listener *l)
{
    if (l->fd < 0)
        return;
    close(l->fd);
    l->fd = -1;
    if (l->ipc[0] != '\0')
        unlink(l->ipc);
}
