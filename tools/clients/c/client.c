/* client.c — see client.h. */
#define _GNU_SOURCE
#include "tools/clients/c/client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <sodium.h>

#include "proto/sp_wire.h"

struct bc {
    nng_socket sock;
    nng_tls_config *tls;
    bool direct; /* the fields below are used, not sock */
    int fd;      /* -1: dial at the next call */
    struct sockaddr_storage addr;
    socklen_t addr_len;
    uint32_t next_id;
    uint8_t *in; /* the last answer's bytes */
    size_t in_cap;
};

const char *bc_strerror(int rv)
{
    switch (rv) {
    case BC_OK:
        return "ok";
    case BC_EUNREACHABLE:
        return "berthd is unreachable";
    case BC_EPROTO:
        return "berthd's answer is not a berth response";
    case BC_ENOMEM:
        return "out of memory";
    case BC_EINVAL:
        return "invalid argument";
    }
    return "unknown error";
}

int bc_open_tls(const char *url, const bc_tls *tls, bc **out, char *err, size_t errlen)
{
    *out = NULL;
    bc *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return BC_ENOMEM;
    nng_dialer d;
    int rv = nng_req0_open(&c->sock);
    if (rv == 0)
        rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if (rv == 0)
        rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, BC_RECV_MAX);
    if (rv == 0)
        rv = nng_dialer_create(&d, c->sock, url);
    if (rv == 0 && strncmp(url, "tls+", 4) == 0) {
        rv = nng_tls_config_alloc(&c->tls, NNG_TLS_MODE_CLIENT);
        const char *ca = tls != NULL && tls->ca_file != NULL ? tls->ca_file : BC_SYSTEM_CA;
        if (rv == 0 && tls != NULL && tls->insecure) {
            rv = nng_tls_config_auth_mode(c->tls, NNG_TLS_AUTH_MODE_NONE);
        } else if (rv == 0) {
            rv = nng_tls_config_ca_file(c->tls, ca);
            if (rv == 0)
                rv = nng_tls_config_auth_mode(c->tls, NNG_TLS_AUTH_MODE_REQUIRED);
        }
        /* The name the certificate must carry: the URL's host unless told
         * otherwise (nng's dialer takes it from the URL into its own
         * configuration, which this one replaces). */
        nng_url *u = NULL;
        const char *name = tls != NULL && tls->server_name != NULL ? tls->server_name : NULL;
        if (rv == 0 && name == NULL && (rv = nng_url_parse(&u, url)) == 0)
            name = u->u_hostname;
        if (rv == 0 && name != NULL && name[0] != '\0')
            rv = nng_tls_config_server_name(c->tls, name);
        if (u != NULL)
            nng_url_free(u);
        if (rv == 0)
            rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, c->tls);
    }
    if (rv == 0)
        rv = nng_dialer_start(d, 0);
    if (rv != 0) {
        if (err != NULL)
            snprintf(err, errlen, "%s: %s", url, nng_strerror(rv));
        bc_close(c);
        return BC_EUNREACHABLE;
    }
    *out = c;
    return BC_OK;
}

int bc_open(const char *url, bc **out, char *err, size_t errlen)
{
    return bc_open_tls(url, NULL, out, err, errlen);
}

/* ---- direct: SP's TCP mapping, spoken with blocking calls ---- */

static bool write_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++, n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return true;
}

/* Reads len bytes; *got says how many arrived when it fails. */
static bool read_all(int fd, void *buf, size_t len, size_t *got)
{
    uint8_t *p = buf;
    *got = 0;
    while (*got < len) {
        ssize_t r = read(fd, p + *got, len - *got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = ECONNRESET;
            return false;
        }
        *got += (size_t)r;
    }
    return true;
}

static void direct_hangup(bc *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* Bounds every read and write on the connection: a server that stops
 * reading cannot block a call forever either. */
static void direct_timeouts(int fd, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Connects and exchanges the handshake: "\0SP\0", the protocol, 2 zeros. */
static bool direct_dial(bc *c)
{
    c->fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return false;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint8_t hs[SP_HEADER_LEN], peer[SP_HEADER_LEN], rep[SP_HEADER_LEN];
    sp_header(hs, SP_PROTO_REQ0);
    sp_header(rep, SP_PROTO_REP0);
    size_t got;
    struct iovec iov = {hs, sizeof(hs)};
    direct_timeouts(c->fd, 10000);
    if (connect(c->fd, (struct sockaddr *)&c->addr, c->addr_len) != 0 ||
        !write_all(c->fd, &iov, 1) || !read_all(c->fd, peer, sizeof(peer), &got) ||
        memcmp(peer, rep, 6) != 0) {
        direct_hangup(c);
        return false;
    }
    return true;
}

int bc_tcp_address(const char *url, struct sockaddr_storage *addr, socklen_t *len, char *err,
                   size_t errlen)
{
    char host[256], port[16];
    if (strncmp(url, "tcp://", 6) != 0 ||
        !sp_host_port(url + 6, host, sizeof(host), port, sizeof(port))) {
        if (err != NULL)
            snprintf(err, errlen, "%s: a direct connection needs tcp://host:port", url);
        return BC_EINVAL;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (gai != 0) {
        if (err != NULL)
            snprintf(err, errlen, "%s: %s", url, gai_strerror(gai));
        return BC_EUNREACHABLE;
    }
    memcpy(addr, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return BC_OK;
}

int bc_open_direct(const char *url, bc **out, char *err, size_t errlen)
{
    *out = NULL;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int rv = bc_tcp_address(url, &addr, &addr_len, err, errlen);
    if (rv != BC_OK)
        return rv;
    bc *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return BC_ENOMEM;
    c->direct = true;
    memcpy(&c->addr, &addr, addr_len);
    c->addr_len = addr_len;
    c->next_id = (uint32_t)getpid() << 16;
    if (!direct_dial(c)) {
        if (err != NULL)
            snprintf(err, errlen, "%s: %s", url, strerror(errno));
        free(c);
        return BC_EUNREACHABLE;
    }
    *out = c;
    return BC_OK;
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Writes one request frame with the given id. */
static bool direct_write(bc *c, const void *buf, size_t len, uint32_t id)
{
    uint8_t head[12];
    put_be(head, len + 4, 8);
    put_be(head + 8, id, 4);
    struct iovec iov[2] = {{head, sizeof(head)}, {(void *)buf, len}};
    if (write_all(c->fd, iov, len > 0 ? 2 : 1))
        return true;
    direct_hangup(c);
    return false;
}

/* Reads the next answer frame into c->in: its id and its body's length. */
static int direct_read(bc *c, uint32_t *id, size_t *len)
{
    uint8_t frame[8];
    size_t got;
    if (!read_all(c->fd, frame, sizeof(frame), &got)) {
        /* Timed out before the answer began: it may still come, and is
         * skipped then. Anything else loses the stream. */
        if (got > 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            direct_hangup(c);
        return BC_EUNREACHABLE;
    }
    uint64_t n = get_be(frame, 8);
    if (n < 4 || n > BC_RECV_MAX + 4) {
        direct_hangup(c);
        return BC_EPROTO;
    }
    if (n > c->in_cap) {
        uint8_t *in = realloc(c->in, n);
        if (in == NULL) {
            direct_hangup(c);
            return BC_ENOMEM;
        }
        c->in = in;
        c->in_cap = n;
    }
    if (!read_all(c->fd, c->in, n, &got)) {
        direct_hangup(c); /* half a frame read: the stream is lost */
        return BC_EUNREACHABLE;
    }
    *id = (uint32_t)get_be(c->in, 4);
    *len = n - 4;
    return BC_OK;
}

/* One request, one answer. An answer to an earlier call that timed out
 * carries an older id and is skipped. */
static int direct_call(bc *c, const void *buf, size_t len, int timeout_ms,
                       Berth__V1__Response **out)
{
    if (c->fd < 0 && !direct_dial(c))
        return BC_EUNREACHABLE;
    direct_timeouts(c->fd, timeout_ms > 0 ? timeout_ms : 10000);
    uint32_t id = c->next_id++ | 0x80000000u;
    if (!direct_write(c, buf, len, id))
        return BC_EUNREACHABLE;
    for (;;) {
        uint32_t got_id;
        size_t n;
        int rv = direct_read(c, &got_id, &n);
        if (rv != BC_OK)
            return rv;
        if (got_id != id)
            continue;
        *out = berth__v1__response__unpack(NULL, n, c->in + 4);
        return *out != NULL ? BC_OK : BC_EPROTO;
    }
}

int bc_fd(const bc *c)
{
    return c->direct ? c->fd : -1;
}

int bc_send(bc *c, const Berth__V1__Request *req, uint32_t id)
{
    if (!c->direct || c->fd < 0)
        return BC_EUNREACHABLE;
    if ((id & 0x80000000u) == 0)
        return BC_EINVAL;
    size_t len = berth__v1__request__get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return BC_ENOMEM;
    berth__v1__request__pack(req, buf);
    bool ok = direct_write(c, buf, len, id);
    free(buf);
    return ok ? BC_OK : BC_EUNREACHABLE;
}

int bc_recv(bc *c, uint32_t *id, Berth__V1__Response **out)
{
    *out = NULL;
    if (!c->direct || c->fd < 0)
        return BC_EUNREACHABLE;
    size_t n;
    int rv = direct_read(c, id, &n);
    if (rv != BC_OK)
        return rv;
    *out = berth__v1__response__unpack(NULL, n, c->in + 4);
    return *out != NULL ? BC_OK : BC_EPROTO;
}

void bc_close(bc *c)
{
    if (c == NULL)
        return;
    if (c->direct) {
        direct_hangup(c);
        free(c->in);
        free(c);
        return;
    }
    nng_close(c->sock);
    if (c->tls != NULL)
        nng_tls_config_free(c->tls);
    free(c);
}

/* One request and its answer on an nng context of c's socket. */
static int nng_round_trip(bc *c, const void *buf, size_t len, int timeout_ms, nng_msg **reply)
{
    nng_ctx ctx;
    nng_aio *aio;
    nng_msg *msg;
    if (nng_ctx_open(&ctx, c->sock) != 0)
        return BC_EUNREACHABLE;
    if (nng_aio_alloc(&aio, NULL, NULL) != 0) {
        nng_ctx_close(ctx);
        return BC_ENOMEM;
    }
    nng_aio_set_timeout(aio, timeout_ms > 0 ? timeout_ms : 10000);
    int rv = BC_ENOMEM;
    if (nng_msg_alloc(&msg, 0) != 0 || nng_msg_append(msg, buf, len) != 0)
        goto done;
    nng_aio_set_msg(aio, msg);
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio) != 0) {
        nng_msg_free(msg);
        rv = BC_EUNREACHABLE;
        goto done;
    }
    nng_ctx_recv(ctx, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio) != 0) {
        rv = BC_EUNREACHABLE;
        goto done;
    }
    *reply = nng_aio_get_msg(aio);
    rv = BC_OK;
done:
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    return rv;
}

int bc_call_raw(bc *c, const void *buf, size_t len, int timeout_ms, Berth__V1__Response **out)
{
    *out = NULL;
    if (c->direct)
        return direct_call(c, buf, len, timeout_ms, out);
    nng_msg *msg;
    int rv = nng_round_trip(c, buf, len, timeout_ms, &msg);
    if (rv != BC_OK)
        return rv;
    *out = berth__v1__response__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
    nng_msg_free(msg);
    return *out != NULL ? BC_OK : BC_EPROTO;
}

/* ---- admin ---- */

int bc_admin_key_load(const char *path, uint8_t **key, size_t *len, char *err, size_t errlen)
{
    *key = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot read the admin key file %s", path);
        return BC_EINVAL;
    }
    uint8_t buf[4097];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                     buf[n - 1] == '\t' || buf[n - 1] == '\v' || buf[n - 1] == '\f'))
        n--;
    if (n < 32 || n >= sizeof(buf)) {
        snprintf(err, errlen, "the admin key file %s holds %zu bytes of key; it needs 32 to 4096",
                 path, n);
        sodium_memzero(buf, sizeof(buf));
        return BC_EINVAL;
    }
    if ((*key = malloc(n)) == NULL) {
        sodium_memzero(buf, sizeof(buf));
        return BC_ENOMEM;
    }
    memcpy(*key, buf, n);
    *len = n;
    sodium_memzero(buf, sizeof(buf));
    return BC_OK;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

size_t bc_admin_sign(const Berth__V1__AdminRequest *req, const uint8_t *key, size_t keylen,
                     uint64_t ts_ms, uint8_t *out, size_t cap)
{
    /* The method alone, as the request encodes it: what the MAC covers. */
    Berth__V1__AdminRequest m = *req;
    m.credentials = NULL;
    size_t n = berth__v1__admin_request__get_packed_size(&m);
    if (n > cap)
        return 0;
    berth__v1__admin_request__pack(&m, out);
    if (key == NULL)
        return n;
    uint8_t be[8], mac[crypto_auth_hmacsha256_BYTES];
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(ts_ms >> (56 - 8 * i));
    crypto_auth_hmacsha256_state h;
    crypto_auth_hmacsha256_init(&h, key, keylen);
    crypto_auth_hmacsha256_update(&h, be, sizeof(be));
    crypto_auth_hmacsha256_update(&h, out, n);
    crypto_auth_hmacsha256_final(&h, mac);
    /* Then the credentials, as field 1 after it (any order decodes). */
    Berth__V1__Credentials cr = BERTH__V1__CREDENTIALS__INIT;
    cr.has_ts_ms = 1;
    cr.ts_ms = ts_ms;
    cr.has_auth = 1;
    cr.auth.data = mac;
    cr.auth.len = sizeof(mac);
    Berth__V1__AdminRequest only = BERTH__V1__ADMIN_REQUEST__INIT;
    only.credentials = &cr;
    size_t k = berth__v1__admin_request__get_packed_size(&only);
    if (n + k > cap)
        return 0;
    berth__v1__admin_request__pack(&only, out + n);
    return n + k;
}

int bc_admin_call(bc *c, const Berth__V1__AdminRequest *req, const uint8_t *key, size_t keylen,
                  int timeout_ms, Berth__V1__AdminResponse **out)
{
    *out = NULL;
    if (c->direct)
        return BC_EINVAL;
    uint8_t buf[65536];
    size_t n = bc_admin_sign(req, key, keylen, wall_ms(), buf, sizeof(buf));
    if (n == 0)
        return BC_EINVAL;
    nng_msg *msg;
    int rv = nng_round_trip(c, buf, n, timeout_ms, &msg);
    if (rv != BC_OK)
        return rv;
    *out = berth__v1__admin_response__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
    nng_msg_free(msg);
    return *out != NULL ? BC_OK : BC_EPROTO;
}

int bc_call(bc *c, const Berth__V1__Request *req, int timeout_ms, Berth__V1__Response **out)
{
    size_t n = berth__v1__request__get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL)
        return BC_ENOMEM;
    berth__v1__request__pack(req, buf);
    int rv = bc_call_raw(c, buf, n, timeout_ms, out);
    free(buf);
    return rv;
}
