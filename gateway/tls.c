/* tls.c — see tls.h. */
#include "gateway/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "store/err.h"

#define TLS_RECORD 16384 /* the most plaintext one record carries */

struct gw_tls {
    mbedtls_ssl_config conf;
    mbedtls_x509_crt chain;
    mbedtls_pk_context key;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg; /* (mbed TLS locks it: built with threading) */
};

struct gw_tls_conn {
    mbedtls_ssl_context ssl;
    int fd;
    gw_tls_out_fn out;
    void *arg;
};

static void tls_error(char *err, size_t errlen, const char *what, const char *file, int rv)
{
    char why[160];
    mbedtls_strerror(rv, why, sizeof(why));
    snprintf(err, errlen, "TLS %s %s: %s", what, file, why);
}

/* (mbed TLS says only "read/write of file failed"; errno says why.) */
static bool readable(const char *what, const char *file, char *err, size_t errlen)
{
    FILE *f = fopen(file, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "TLS %s %s: %s", what, file, strerror(errno));
        return false;
    }
    fclose(f);
    return true;
}

static gw_tls *tls_new(void)
{
    gw_tls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    mbedtls_ssl_config_init(&t->conf);
    mbedtls_x509_crt_init(&t->chain);
    mbedtls_pk_init(&t->key);
    mbedtls_entropy_init(&t->entropy);
    mbedtls_ctr_drbg_init(&t->drbg);
    return t;
}

/* What both sides share: a seeded RNG, TLS 1.2 or later, no
 * renegotiation. `file` names the setup in an error. */
static bool tls_setup(gw_tls *t, int endpoint, const char *file, char *err, size_t errlen)
{
    static const unsigned char who[] = "berthd tls";
    int rv;
    if ((rv = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy, who,
                                    sizeof(who) - 1)) != 0 ||
        (rv = mbedtls_ssl_config_defaults(&t->conf, endpoint, MBEDTLS_SSL_TRANSPORT_STREAM,
                                          MBEDTLS_SSL_PRESET_DEFAULT)) != 0) {
        tls_error(err, errlen, "setup for", file, rv);
        return false;
    }
    mbedtls_ssl_conf_rng(&t->conf, mbedtls_ctr_drbg_random, &t->drbg);
    mbedtls_ssl_conf_min_version(&t->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                                 MBEDTLS_SSL_MINOR_VERSION_3); /* TLS 1.2 */
    mbedtls_ssl_conf_renegotiation(&t->conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
    return true;
}

int gw_tls_open(const char *cert_file, const char *key_file, gw_tls **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!readable("certificate", cert_file, err, errlen) || !readable("key", key_file, err, errlen))
        return BERTH_EINVAL;
    gw_tls *t = tls_new();
    if (t == NULL)
        return BERTH_ENOMEM;
    int rv = mbedtls_x509_crt_parse_file(&t->chain, cert_file);
    if (rv != 0) {
        if (rv > 0) /* some parsed, rv did not: a file we would serve in part */
            snprintf(err, errlen, "TLS certificate %s: %d of its certificates cannot be read",
                     cert_file, rv);
        else
            tls_error(err, errlen, "certificate", cert_file, rv);
        goto fail;
    }
    if ((rv = mbedtls_pk_parse_keyfile(&t->key, key_file, NULL)) != 0) {
        tls_error(err, errlen, "key", key_file, rv);
        goto fail;
    }
    if ((rv = mbedtls_pk_check_pair(&t->chain.pk, &t->key)) != 0) {
        snprintf(err, errlen, "TLS key %s is not the key of certificate %s", key_file, cert_file);
        goto fail;
    }
    if (!tls_setup(t, MBEDTLS_SSL_IS_SERVER, cert_file, err, errlen))
        goto fail;
    if ((rv = mbedtls_ssl_conf_own_cert(&t->conf, &t->chain, &t->key)) != 0) {
        tls_error(err, errlen, "setup for", cert_file, rv);
        goto fail;
    }
    mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_NONE); /* no client certificates */
    *out = t;
    return BERTH_OK;
fail:
    gw_tls_close(t);
    return BERTH_EINVAL;
}

int gw_tls_client_open(const char *ca_file, gw_tls **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!readable("CA file", ca_file, err, errlen))
        return BERTH_EINVAL;
    gw_tls *t = tls_new();
    if (t == NULL)
        return BERTH_ENOMEM;
    int rv = mbedtls_x509_crt_parse_file(&t->chain, ca_file);
    if (rv < 0 || t->chain.version == 0) { /* (> 0: some of a bundle unread; the rest serve) */
        tls_error(err, errlen, "CA file", ca_file, rv < 0 ? rv : MBEDTLS_ERR_X509_INVALID_FORMAT);
        gw_tls_close(t);
        return BERTH_EINVAL;
    }
    if (!tls_setup(t, MBEDTLS_SSL_IS_CLIENT, ca_file, err, errlen)) {
        gw_tls_close(t);
        return BERTH_EINVAL;
    }
    mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_ca_chain(&t->conf, &t->chain, NULL);
    *out = t;
    return BERTH_OK;
}

void gw_tls_close(gw_tls *t)
{
    if (t == NULL)
        return;
    mbedtls_ssl_config_free(&t->conf);
    mbedtls_x509_crt_free(&t->chain);
    mbedtls_pk_free(&t->key);
    mbedtls_ctr_drbg_free(&t->drbg);
    mbedtls_entropy_free(&t->entropy);
    free(t);
}

static int bio_send(void *arg, const unsigned char *p, size_t n)
{
    gw_tls_conn *c = arg;
    return c->out(c->arg, p, n) ? (int)n : MBEDTLS_ERR_SSL_ALLOC_FAILED;
}

static int bio_recv(void *arg, unsigned char *p, size_t n)
{
    gw_tls_conn *c = arg;
    for (;;) {
        ssize_t r = recv(c->fd, p, n, 0);
        if (r >= 0)
            return (int)r; /* (0: the peer hung up) */
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return MBEDTLS_ERR_SSL_WANT_READ;
        return errno == ECONNRESET || errno == EPIPE ? MBEDTLS_ERR_NET_CONN_RESET
                                                     : MBEDTLS_ERR_NET_RECV_FAILED;
    }
}

gw_tls_conn *gw_tls_conn_alloc(const gw_tls *t, int fd, gw_tls_out_fn out, void *arg)
{
    return gw_tls_conn_client_alloc(t, fd, NULL, out, arg);
}

gw_tls_conn *gw_tls_conn_client_alloc(const gw_tls *t, int fd, const char *server_name,
                                      gw_tls_out_fn out, void *arg)
{
    gw_tls_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    mbedtls_ssl_init(&c->ssl);
    if (mbedtls_ssl_setup(&c->ssl, &t->conf) != 0 ||
        (server_name != NULL && mbedtls_ssl_set_hostname(&c->ssl, server_name) != 0)) {
        mbedtls_ssl_free(&c->ssl);
        free(c);
        return NULL;
    }
    c->fd = fd;
    c->out = out;
    c->arg = arg;
    mbedtls_ssl_set_bio(&c->ssl, c, bio_send, bio_recv, NULL);
    return c;
}

void gw_tls_conn_free(gw_tls_conn *c)
{
    if (c == NULL)
        return;
    mbedtls_ssl_free(&c->ssl);
    free(c);
}

static bool would_block(int rv)
{
    return rv == MBEDTLS_ERR_SSL_WANT_READ || rv == MBEDTLS_ERR_SSL_WANT_WRITE;
}

int gw_tls_handshake(gw_tls_conn *c)
{
    int rv = mbedtls_ssl_handshake(&c->ssl);
    if (rv == 0)
        return 1;
    return would_block(rv) ? 0 : -1;
}

ssize_t gw_tls_read(gw_tls_conn *c, void *buf, size_t n)
{
    int rv = mbedtls_ssl_read(&c->ssl, buf, n);
    if (rv > 0)
        return rv;
    return would_block(rv) ? 0 : -1; /* (0 and PEER_CLOSE_NOTIFY: it hung up) */
}

size_t gw_tls_pending(gw_tls_conn *c)
{
    return mbedtls_ssl_get_bytes_avail(&c->ssl);
}

/* All n bytes, a record at a time. (The output never blocks: `out`
 * queues, so mbed TLS never asks to be called again with the same data.) */
static bool write_all(gw_tls_conn *c, const unsigned char *p, size_t n)
{
    while (n > 0) {
        int rv = mbedtls_ssl_write(&c->ssl, p, n);
        if (rv <= 0)
            return false;
        p += rv;
        n -= (size_t)rv;
    }
    return true;
}

bool gw_tls_writev(gw_tls_conn *c, const struct iovec *iov, int n)
{
    unsigned char stage[TLS_RECORD]; /* small parts share a record */
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        const unsigned char *p = iov[i].iov_base;
        size_t left = iov[i].iov_len;
        while (left > 0) {
            if (used == 0 && left >= sizeof(stage)) { /* whole records straight from p */
                size_t whole = left - left % sizeof(stage);
                if (!write_all(c, p, whole))
                    return false;
                p += whole;
                left -= whole;
                continue;
            }
            size_t k = left < sizeof(stage) - used ? left : sizeof(stage) - used;
            memcpy(stage + used, p, k);
            used += k;
            p += k;
            left -= k;
            if (used == sizeof(stage)) {
                if (!write_all(c, stage, used))
                    return false;
                used = 0;
            }
        }
    }
    return used == 0 || write_all(c, stage, used);
}
