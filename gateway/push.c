/*
 * push.c — see push.h.
 *
 * A FLIGHT is one delivery on its way: a context of its receiver's socket
 * and an aio that first sends the Delivery, then receives the
 * DeliveryAck. Its callback ends it exactly once, as the engine request
 * ENGINE_OP_PUSH_ACK, which the flight owns (with the decoded answer)
 * until the engine's done() frees it on the engine's commit thread. A
 * flight ended while stopping goes to the dead list instead, freed by
 * gw_push_stop(): an aio is never freed inside its own callback.
 */
#include "gateway/push.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "berth/v1/push.pb-c.h"
#include "gateway/listen.h"
#include "store/err.h"

#define GW_PUSH_SYSTEM_CA "/etc/ssl/certs/ca-certificates.crt"
/* A delivery's headers: a submit's (64 at most), and a call's two. */
#define GW_PUSH_HEADERS_MAX 80

typedef struct receiver {
    char *transport; /* as the channel declares it */
    nng_socket sock;
    bool ok;
    char why[200]; /* why it cannot be dialled */
} receiver;

typedef struct flight {
    struct flight *prev, *next; /* in p->flights, or p->dead */
    gw_push *p;
    engine *e;
    nng_ctx ctx;
    nng_aio *aio;
    bool receiving;
    uint64_t deadline_ms;
    char id[ENGINE_ID_STR];
    Berth__V1__DeliveryAck *ack;
    engine_header *hs;
    engine_result res;
    engine_request req;
    char why[256];
} flight;

struct gw_push {
    gw_push_options o;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a flight left p->flights */
    bool stopping;
    receiver *rx;
    size_t n_rx;
    flight *flights, *dead;
    size_t n_flights;
};

int gw_push_open(const gw_push_options *o, gw_push **out, char *err, size_t errlen)
{
    *out = NULL;
    gw_push *p = calloc(1, sizeof(*p));
    if (p == NULL ||
        (p->rx = calloc(o->receivers_max ? o->receivers_max : 1, sizeof(receiver))) == NULL) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return BERTH_ENOMEM;
    }
    p->o = *o;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    *out = p;
    return BERTH_OK;
}

/* ---- receivers ---- */

/* The nng URL of a push transport, or false. */
static bool nng_url_of(const char *transport, char *out, size_t len)
{
    static const struct {
        const char *scheme, *url;
    } map[] = {
        {"nng+req+ipc://", "ipc://"},
        {"nng+req+tls://", "tls+tcp://"},
        {"nng+req://", "tcp://"},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        size_t n = strlen(map[i].scheme);
        if (strncmp(transport, map[i].scheme, n) == 0) {
            int w = snprintf(out, len, "%s%s", map[i].url, transport + n);
            return w > 0 && (size_t)w < len;
        }
    }
    return false;
}

/* A client TLS configuration for one receiver: its certificate checked
 * against --push-tls-ca (or the system's CAs) and for the URL's host (nng's
 * dialer takes the host from the URL into its own configuration, which
 * this one replaces). The dialer holds it; *out is the caller's to free. */
static int tls_config(const gw_push *p, const char *url, nng_tls_config **out)
{
    nng_tls_config *c = NULL;
    nng_url *u = NULL;
    int rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_CLIENT);
    if (rv == 0)
        rv = nng_tls_config_ca_file(c, p->o.tls_ca_file ? p->o.tls_ca_file : GW_PUSH_SYSTEM_CA);
    if (rv == 0)
        rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED);
    if (rv == 0)
        rv = nng_url_parse(&u, url);
    if (rv == 0)
        rv = nng_tls_config_server_name(c, u->u_hostname);
    if (u != NULL)
        nng_url_free(u);
    if (rv != 0 && c != NULL) {
        nng_tls_config_free(c);
        c = NULL;
    }
    *out = c;
    return rv;
}

/* Dials r's receiver (nng redials it for ever after); r->ok says. */
static void dial(gw_push *p, receiver *r)
{
    char url[600];
    int rv = NNG_EINVAL;
    nng_dialer d;
    if (!nng_url_of(r->transport, url, sizeof(url))) {
        snprintf(r->why, sizeof(r->why), "%.120s is not a push receiver's URI", r->transport);
        return;
    }
    if ((rv = nng_req0_open(&r->sock)) != 0) {
        snprintf(r->why, sizeof(r->why), "cannot open a socket: %s", nng_strerror(rv));
        return;
    }
    /* The engine sends again, on its own curve: nng must not. */
    rv = nng_socket_set_ms(r->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if (rv == 0)
        rv = nng_socket_set_size(r->sock, NNG_OPT_RECVMAXSZ, p->o.max_message_bytes);
    if (rv == 0)
        rv = nng_socket_set_ms(r->sock, NNG_OPT_RECONNMAXT, 5000);
    if (rv == 0)
        rv = nng_dialer_create(&d, r->sock, url);
    nng_tls_config *tls = NULL;
    if (rv == 0 && strncmp(url, "tls+", 4) == 0 && (rv = tls_config(p, url, &tls)) == 0) {
        rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tls);
        nng_tls_config_free(tls); /* (the dialer holds its own) */
    }
    if (rv == 0)
        rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK); /* unreachable now: nng retries */
    if (rv != 0) {
        snprintf(r->why, sizeof(r->why), "cannot dial %.120s: %s", url, nng_strerror(rv));
        nng_close(r->sock);
        return;
    }
    r->ok = true;
}

/* The receiver of transport (p->mu held); NULL with why when there is
 * none to send to. */
static receiver *receiver_of(gw_push *p, const char *transport, char *why, size_t len)
{
    for (size_t i = 0; i < p->n_rx; i++)
        if (strcmp(p->rx[i].transport, transport) == 0) {
            if (!p->rx[i].ok)
                snprintf(why, len, "%s", p->rx[i].why);
            return p->rx[i].ok ? &p->rx[i] : NULL;
        }
    if (p->n_rx == p->o.receivers_max) {
        snprintf(why, len, "more than %zu push receivers", p->o.receivers_max);
        return NULL;
    }
    receiver *r = &p->rx[p->n_rx];
    memset(r, 0, sizeof(*r));
    if ((r->transport = strdup(transport)) == NULL) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    p->n_rx++;
    dial(p, r);
    if (!r->ok)
        snprintf(why, len, "%s", r->why);
    return r->ok ? r : NULL;
}

/* ---- flights ---- */

static void flight_free(flight *f)
{
    if (f->aio != NULL)
        nng_aio_free(f->aio); /* (waits for its callback, never inside it) */
    nng_ctx_close(f->ctx);
    if (f->ack != NULL)
        berth__v1__delivery_ack__free_unpacked(f->ack, NULL);
    free(f->hs);
    free(f);
}

static void flight_done(void *arg, engine_reply *reply)
{
    engine_reply_free(reply);
    flight_free(arg);
}

static void unlink_flight(gw_push *p, flight *f)
{
    if (f->prev != NULL)
        f->prev->next = f->next;
    else
        p->flights = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    f->prev = f->next = NULL;
    p->n_flights--;
    pthread_cond_broadcast(&p->cv);
}

/* The flight's end: its request to the engine, or the dead list. */
static void finish(flight *f)
{
    gw_push *p = f->p;
    pthread_mutex_lock(&p->mu);
    unlink_flight(p, f);
    bool stopping = p->stopping;
    if (stopping) {
        f->next = p->dead;
        p->dead = f;
    }
    pthread_mutex_unlock(&p->mu);
    if (stopping)
        return;
    if (engine_exec(f->e, &f->req, flight_done, f) != BERTH_OK) {
        pthread_mutex_lock(&p->mu);
        f->next = p->dead;
        p->dead = f;
        pthread_mutex_unlock(&p->mu);
    }
}

static void retry(flight *f, const char *fmt, const char *what)
{
    snprintf(f->why, sizeof(f->why), fmt, what);
    f->req.u.push_ack.outcome = ENGINE_PUSH_RETRY;
    f->req.u.push_ack.error = (engine_error){.code = "PUSH_FAILED", .message = f->why};
    finish(f);
}

/* The receiver's answer, as the engine takes it. */
static void answered(flight *f, nng_msg *m)
{
    f->ack = berth__v1__delivery_ack__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
    nng_msg_free(m);
    if (f->ack == NULL) {
        retry(f, "%s", "the receiver's answer is not a berth.v1.DeliveryAck");
        return;
    }
    const Berth__V1__DeliveryAck *a = f->ack;
    struct engine_push_ack *out = &f->req.u.push_ack;
    switch (a->has_outcome ? a->outcome : 0) {
    case BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED:
        out->outcome = ENGINE_PUSH_DELIVERED;
        break;
    case BERTH__V1__DELIVERY_ACK__OUTCOME__REJECT:
        out->outcome = ENGINE_PUSH_REJECT;
        break;
    case BERTH__V1__DELIVERY_ACK__OUTCOME__RETRY:
        out->outcome = ENGINE_PUSH_RETRY;
        break;
    default:
        retry(f, "%s", "the receiver's answer has no outcome");
        return;
    }
    if (a->error != NULL)
        out->error = (engine_error){a->error->code, a->error->message, a->error->details};
    if (out->outcome == ENGINE_PUSH_DELIVERED && a->result != NULL) {
        const Berth__V1__Result *r = a->result;
        if (r->n_headers > 0 && (f->hs = calloc(r->n_headers, sizeof(*f->hs))) == NULL) {
            retry(f, "%s", "out of memory reading the receiver's answer");
            return;
        }
        for (size_t i = 0; i < r->n_headers; i++)
            f->hs[i] = (engine_header){r->headers[i]->key ? r->headers[i]->key : "",
                                       r->headers[i]->value ? r->headers[i]->value : ""};
        f->res = (engine_result){
            .payload = r->has_payload ? r->payload.data : (const uint8_t *)"",
            .payload_len = r->has_payload ? r->payload.len : 0,
            .content_type = r->content_type,
            .headers = f->hs,
            .n_headers = r->n_headers,
        };
        out->result = &f->res;
    }
    finish(f);
}

static void flight_cb(void *arg)
{
    flight *f = arg;
    int rv = nng_aio_result(f->aio);
    if (!f->receiving) {
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(f->aio)); /* not sent: still ours */
            retry(f, "cannot send to the push receiver: %s", nng_strerror(rv));
            return;
        }
        /* Started under the lock: gw_push_stop() either cancels it or is
         * seen here. */
        pthread_mutex_lock(&f->p->mu);
        bool stopping = f->p->stopping;
        uint64_t now = engine_monotonic_ms();
        if (!stopping && now < f->deadline_ms) {
            f->receiving = true;
            nng_aio_set_timeout(f->aio, (nng_duration)(f->deadline_ms - now));
            nng_ctx_recv(f->ctx, f->aio);
        }
        pthread_mutex_unlock(&f->p->mu);
        if (!f->receiving)
            retry(f, "%s", stopping ? "berthd is stopping" : "no answer within push-timeout-ms");
        return;
    }
    if (rv == NNG_ETIMEDOUT)
        retry(f, "%s", "no answer within push-timeout-ms");
    else if (rv != 0)
        retry(f, "the push receiver's answer did not come: %s", nng_strerror(rv));
    else
        answered(f, nng_aio_get_msg(f->aio));
}

/* The Delivery d, encoded into a new message. */
static nng_msg *encode(const engine_push_delivery *d)
{
    Berth__V1__Delivery m = BERTH__V1__DELIVERY__INIT;
    Berth__V1__Delivery__HeadersEntry hv[GW_PUSH_HEADERS_MAX], *hp[GW_PUSH_HEADERS_MAX];
    size_t nh = d->n_headers < GW_PUSH_HEADERS_MAX ? d->n_headers : GW_PUSH_HEADERS_MAX;
    for (size_t i = 0; i < nh; i++) {
        berth__v1__delivery__headers_entry__init(&hv[i]);
        hv[i].key = (char *)d->headers[i].name;
        hv[i].value = (char *)d->headers[i].value;
        hp[i] = &hv[i];
    }
    m.id = (char *)d->id;
    m.topic = (char *)d->topic;
    m.has_payload = 1;
    m.payload.data = (uint8_t *)d->payload;
    m.payload.len = d->payload_len;
    m.n_headers = nh;
    m.headers = hp;
    m.content_type = (char *)d->content_type;
    if (d->instance_id[0] != '\0')
        m.instance_id = (char *)d->instance_id;
    m.has_attempt = 1;
    m.attempt = d->attempt;
    m.idempotency_key = (char *)d->id;
    m.has_created_at_ms = 1;
    m.created_at_ms = d->created_at_ms;
    nng_msg *msg;
    if (nng_msg_alloc(&msg, berth__v1__delivery__get_packed_size(&m)) != 0)
        return NULL;
    berth__v1__delivery__pack(&m, nng_msg_body(msg));
    return msg;
}

int gw_push_send(void *ctx, engine *e, const engine_push_delivery *d)
{
    gw_push *p = ctx;
    flight *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return BERTH_ENOMEM;
    f->p = p;
    f->e = e;
    memcpy(f->id, d->id, ENGINE_ID_STR);
    f->req.op = ENGINE_OP_PUSH_ACK;
    f->req.u.push_ack.id = f->id;
    f->req.u.push_ack.flight = d->flight;
    f->deadline_ms = engine_monotonic_ms() + p->o.timeout_ms;
    nng_msg *msg = encode(d);
    if (msg == NULL || nng_aio_alloc(&f->aio, flight_cb, f) != 0) {
        nng_msg_free(msg);
        free(f);
        return BERTH_ENOMEM;
    }
    pthread_mutex_lock(&p->mu);
    char why[200] = "";
    bool stopping = p->stopping;
    receiver *r = stopping ? NULL : receiver_of(p, d->transport, why, sizeof(why));
    if (r == NULL || nng_ctx_open(&f->ctx, r->sock) != 0) {
        pthread_mutex_unlock(&p->mu);
        nng_msg_free(msg);
        nng_aio_free(f->aio);
        f->aio = NULL;
        /* Answered at once, saying why (the operator sees it as the
         * delivery's last error); stopping, the engine sends it again at
         * its next start. */
        if (!stopping) {
            snprintf(f->why, sizeof(f->why), "%s", why[0] ? why : "cannot open a context");
            f->req.u.push_ack.outcome = ENGINE_PUSH_RETRY;
            f->req.u.push_ack.error = (engine_error){.code = "PUSH_FAILED", .message = f->why};
            if (engine_exec(e, &f->req, flight_done, f) == BERTH_OK)
                return BERTH_OK;
        }
        free(f);
        return BERTH_EIO; /* the engine's deadline makes it a failed attempt */
    }
    f->next = p->flights;
    if (p->flights != NULL)
        p->flights->prev = f;
    p->flights = f;
    p->n_flights++;
    nng_aio_set_timeout(f->aio, (nng_duration)p->o.timeout_ms);
    nng_aio_set_msg(f->aio, msg);
    nng_ctx_send(f->ctx, f->aio);
    pthread_mutex_unlock(&p->mu);
    return BERTH_OK;
}

void gw_push_stop(gw_push *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    for (flight *f = p->flights; f != NULL; f = f->next)
        nng_aio_cancel(f->aio); /* its callback ends it: onto the dead list */
    while (p->n_flights > 0)
        pthread_cond_wait(&p->cv, &p->mu);
    flight *dead = p->dead;
    p->dead = NULL;
    pthread_mutex_unlock(&p->mu);
    while (dead != NULL) {
        flight *next = dead->next;
        flight_free(dead);
        dead = next;
    }
}

static void close_all(void *arg)
{
    gw_push *p = arg;
    for (size_t i = 0; i < p->n_rx; i++)
        if (p->rx[i].ok)
            nng_close(p->rx[i].sock);
}

bool gw_push_close(gw_push *p, int ms)
{
    if (p == NULL)
        return true;
    gw_push_stop(p);
    if (!gw_within(close_all, p, ms))
        return false; /* p stays: the close may still use it */
    for (size_t i = 0; i < p->n_rx; i++)
        free(p->rx[i].transport);
    free(p->rx);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    return true;
}
