/* raw.c — see raw.h. */
#include "tests/support/raw.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <criterion/criterion.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <unistd.h>

#include "proto/sp_wire.h"
#include "tests/support/timing.h"

int raw_connect(const char *url)
{
    const char *colon = strrchr(url, ':');
    cr_assert_not_null(colon, "%s", url);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

void raw_read_all(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);
        cr_assert_gt(r, 0, "the connection ended or timed out after %zu of %zu bytes", got, n);
        got += (size_t)r;
    }
}

void raw_write_all(int fd, const void *p, size_t n)
{
    cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static int raw_peer(const char *url, uint16_t self, uint16_t peer)
{
    int fd = raw_connect(url);
    uint8_t mine[SP_HEADER_LEN], theirs[SP_HEADER_LEN];
    sp_header(mine, self);
    sp_header(theirs, peer);
    raw_write_all(fd, mine, sizeof(mine));
    uint8_t got[SP_HEADER_LEN];
    raw_read_all(fd, got, sizeof(got));
    cr_assert_eq(memcmp(got, theirs, sizeof(theirs)), 0, "berthd answers as the expected peer");
    return fd;
}

int raw_req(const char *url)
{
    return raw_peer(url, SP_PROTO_REQ0, SP_PROTO_REP0);
}

int raw_sub(const char *url)
{
    return raw_peer(url, SP_PROTO_SUB0, SP_PROTO_PUB0);
}

uint8_t *raw_event(int fd, const char *prefix, size_t *len)
{
    size_t pl = strlen(prefix);
    for (uint64_t until = mono_ms() + 10000; mono_ms() < until;) {
        uint8_t h[SP_LENGTH_LEN];
        raw_read_all(fd, h, sizeof(h));
        uint64_t n = 0;
        for (int i = 0; i < SP_LENGTH_LEN; i++)
            n = n << 8 | h[i];
        cr_assert_leq(n, 1u << 24, "an event of %llu bytes", (unsigned long long)n);
        uint8_t *m = malloc(n + 1);
        cr_assert_not_null(m);
        raw_read_all(fd, m, n);
        m[n] = 0; /* a subject without its NUL still reads as a string */
        if (n >= pl && memcmp(m, prefix, pl) == 0) {
            *len = n;
            return m;
        }
        free(m);
    }
    cr_assert_fail("no event %s* within 10 s", prefix);
    return NULL;
}

size_t raw_frame(uint8_t *out, uint32_t id, const uint8_t *body, size_t len)
{
    uint64_t n = 4 + len;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(n >> (56 - 8 * i));
    id |= 0x80000000u;
    for (int i = 0; i < 4; i++)
        out[8 + i] = (uint8_t)(id >> (24 - 8 * i));
    memcpy(out + 12, body, len);
    return 12 + len;
}

/* One answer read through read_all from its source. */
static Berth__V1__Response *answer_from(void (*read_all)(void *src, void *p, size_t n), void *src,
                                        uint32_t *id)
{
    uint8_t h[12];
    read_all(src, h, sizeof(h));
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n = n << 8 | h[i];
    cr_assert_geq(n, 4);
    *id =
        ((uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11]) & 0x7fffffffu;
    uint8_t *body = malloc(n - 4 + 1);
    read_all(src, body, n - 4);
    Berth__V1__Response *r = berth__v1__response__unpack(NULL, n - 4, body);
    free(body);
    cr_assert_not_null(r, "the answer is a Response");
    return r;
}

static void fd_read_all(void *src, void *p, size_t n)
{
    raw_read_all(*(int *)src, p, n);
}

Berth__V1__Response *raw_answer(int fd, uint32_t *id)
{
    return answer_from(fd_read_all, &fd, id);
}

size_t raw_pack_fetch(uint8_t *out, const char *topic, uint32_t max, uint64_t wait_ms)
{
    Berth__V1__FetchRequest f = BERTH__V1__FETCH_REQUEST__INIT;
    char *topics[] = {(char *)topic};
    f.worker_id = "raw";
    f.topics = topics;
    f.n_topics = 1;
    f.has_max_tasks = true;
    f.max_tasks = max;
    f.has_wait_ms = true;
    f.wait_ms = wait_ms;
    Berth__V1__Request r = BERTH__V1__REQUEST__INIT;
    r.method_case = BERTH__V1__REQUEST__METHOD_FETCH;
    r.fetch = &f;
    return berth__v1__request__pack(&r, out);
}

void raw_round_trip(int fd, uint32_t id)
{
    uint8_t body[128], f[256];
    size_t bl = raw_pack_fetch(body, "rt", 1, 0);
    raw_write_all(fd, f, raw_frame(f, id, body, bl));
    uint32_t got;
    Berth__V1__Response *r = raw_answer(fd, &got);
    cr_assert_eq(got, id);
    cr_assert(r->status != NULL && r->status->code == BERTH__V1__CODE__OK, "status %d",
              r->status != NULL ? (int)r->status->code : -1);
    berth__v1__response__free_unpacked(r, NULL);
}

struct raw_tls {
    mbedtls_net_context net;
    mbedtls_ssl_context ssl;
    mbedtls_ssl_config conf;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
};

static void tls_read_all(void *src, void *p, size_t n)
{
    raw_tls *t = src;
    for (size_t got = 0; got < n;) {
        int r = mbedtls_ssl_read(&t->ssl, (unsigned char *)p + got, n - got);
        cr_assert_gt(r, 0, "TLS read: -0x%04x after %zu of %zu bytes", (unsigned)-r, got, n);
        got += (size_t)r;
    }
}

raw_tls *raw_tls_req(const char *url)
{
    raw_tls *t = calloc(1, sizeof(*t));
    cr_assert_not_null(t);
    mbedtls_net_init(&t->net);
    mbedtls_ssl_init(&t->ssl);
    mbedtls_ssl_config_init(&t->conf);
    mbedtls_entropy_init(&t->entropy);
    mbedtls_ctr_drbg_init(&t->drbg);
    t->net.fd = raw_connect(url);
    cr_assert_eq(mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy, NULL, 0), 0);
    cr_assert_eq(mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_CLIENT,
                                             MBEDTLS_SSL_TRANSPORT_STREAM,
                                             MBEDTLS_SSL_PRESET_DEFAULT),
                 0);
    mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_NONE);
    mbedtls_ssl_conf_rng(&t->conf, mbedtls_ctr_drbg_random, &t->drbg);
    cr_assert_eq(mbedtls_ssl_setup(&t->ssl, &t->conf), 0);
    mbedtls_ssl_set_bio(&t->ssl, &t->net, mbedtls_net_send, mbedtls_net_recv, NULL);
    int rv = mbedtls_ssl_handshake(&t->ssl);
    cr_assert_eq(rv, 0, "TLS handshake: -0x%04x", (unsigned)-rv);
    uint8_t mine[SP_HEADER_LEN], theirs[SP_HEADER_LEN], got[SP_HEADER_LEN];
    sp_header(mine, SP_PROTO_REQ0);
    sp_header(theirs, SP_PROTO_REP0);
    raw_tls_write(t, mine, sizeof(mine));
    tls_read_all(t, got, sizeof(got));
    cr_assert_eq(memcmp(got, theirs, sizeof(theirs)), 0, "berthd answers as a REP peer");
    return t;
}

void raw_tls_write(raw_tls *t, const void *p, size_t n)
{
    for (size_t put = 0; put < n;) {
        int r = mbedtls_ssl_write(&t->ssl, (const unsigned char *)p + put, n - put);
        cr_assert_gt(r, 0, "TLS write: -0x%04x", (unsigned)-r);
        put += (size_t)r;
    }
}

void raw_tls_hang_up(raw_tls *t)
{
    close(t->net.fd);
    mbedtls_ssl_free(&t->ssl);
    mbedtls_ssl_config_free(&t->conf);
    mbedtls_ctr_drbg_free(&t->drbg);
    mbedtls_entropy_free(&t->entropy);
    free(t);
}

Berth__V1__Response *raw_tls_answer(raw_tls *t, uint32_t *id)
{
    return answer_from(tls_read_all, t, id);
}
