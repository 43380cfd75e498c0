/* listen.c — see listen.h. */
#include "gateway/listen.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/err.h"

int gw_listen(nng_socket s, const char *url, nng_tls_config *tls, char *bound, size_t boundlen,
              char *err, size_t errlen)
{
    bool is_tls = strncmp(url, "tls+", 4) == 0;
    if (is_tls && tls == NULL) {
        snprintf(err, errlen, "%s: a tls+tcp:// URL needs --tls-cert and --tls-key", url);
        return BERTH_EINVAL;
    }
    nng_listener l;
    int rv = nng_listener_create(&l, s, url);
    if (rv == 0 && is_tls)
        rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tls);
    if (rv == 0)
        rv = nng_listener_start(l, 0);
    if (rv != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", url, nng_strerror(rv));
        return BERTH_EIO;
    }
    snprintf(bound, boundlen, "%s", url);
    size_t n = strlen(url);
    int port;
    if (n >= 2 && strcmp(url + n - 2, ":0") == 0 &&
        nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
        snprintf(bound, boundlen, "%.*s:%d", (int)(n - 2), url, port);
    return BERTH_OK;
}

static char *slurp(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot read %s", path);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf != NULL && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            char *b = realloc(buf, cap *= 2);
            if (b == NULL) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    fclose(f);
    if (buf != NULL)
        buf[len] = '\0';
    return buf;
}

int gw_tls_server(const char *cert_file, const char *key_file, nng_tls_config **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    char *cert = slurp(cert_file, err, errlen);
    char *key = cert ? slurp(key_file, err, errlen) : NULL;
    if (cert == NULL || key == NULL) {
        free(cert);
        return BERTH_EINVAL;
    }
    nng_tls_config *cfg;
    int rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER);
    if (rv == 0 && (rv = nng_tls_config_own_cert(cfg, cert, key, NULL)) != 0)
        nng_tls_config_free(cfg);
    free(cert);
    free(key);
    if (rv != 0) {
        snprintf(err, errlen, "TLS certificate %s / key %s: %s", cert_file, key_file,
                 nng_strerror(rv));
        return BERTH_EINVAL;
    }
    *out = cfg;
    return BERTH_OK;
}

typedef struct within {
    void (*fn)(void *arg);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} within;

static void *within_thread(void *arg)
{
    within *w = arg;
    w->fn(w->arg);
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

bool gw_within(void (*fn)(void *arg), void *arg, int ms)
{
    within *w = calloc(1, sizeof(*w)); /* outlives a call that never returns */
    pthread_t th;
    if (w == NULL) {
        fn(arg);
        return true;
    }
    w->fn = fn;
    w->arg = arg;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&th, NULL, within_thread, w) != 0) {
        free(w);
        fn(arg);
        return true;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->mu);
    while (!w->done && pthread_cond_timedwait(&w->cv, &w->mu, &until) == 0)
        ;
    bool done = w->done;
    pthread_mutex_unlock(&w->mu);
    if (!done) {
        pthread_detach(th);
        return false;
    }
    pthread_join(th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
    return true;
}
