/* receiver.c — see receiver.h. */
#include "tests/support/receiver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>
#include <nng/protocol/reqrep0/rep.h>

#include "berth/v1/push.pb-c.h"

static void *serve(void *arg)
{
    receiver *r = arg;
    while (!atomic_load(&r->stop)) {
        nng_msg *m;
        if (nng_recvmsg(r->sock, &m, 0) != 0)
            continue; /* (a receive timeout: look at stop again) */
        Berth__V1__Delivery *d = berth__v1__delivery__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
        if (d == NULL) { /* (not the main thread: no assertion here) */
            nng_msg_free(m);
            continue;
        }
        pthread_mutex_lock(&r->mu);
        if (r->n_seen == r->cap_seen) {
            int cap = r->cap_seen ? 2 * r->cap_seen : 256;
            seen *v = realloc(r->seen, (size_t)cap * sizeof *v);
            if (v != NULL) {
                r->seen = v;
                r->cap_seen = cap;
            }
        }
        if (r->n_seen < r->cap_seen) {
            seen *s = &r->seen[r->n_seen++];
            snprintf(s->id, sizeof(s->id), "%s", d->id ? d->id : "");
            snprintf(s->key, sizeof(s->key), "%s", d->idempotency_key ? d->idempotency_key : "");
            snprintf(s->instance_id, sizeof(s->instance_id), "%s",
                     d->instance_id ? d->instance_id : "");
            snprintf(s->payload, sizeof(s->payload), "%.*s", (int)d->payload.len,
                     (const char *)d->payload.data);
            s->attempt = d->attempt;
        }
        pthread_mutex_unlock(&r->mu);
        berth__v1__delivery__free_unpacked(d, NULL);
        if (atomic_load(&r->hold)) { /* (a REP socket's next receive drops this request) */
            nng_msg_free(m);
            continue;
        }
        if (r->delay_ms > 0) {
            struct timespec t = {r->delay_ms / 1000, (long)(r->delay_ms % 1000) * 1000000L};
            nanosleep(&t, NULL);
        }
        Berth__V1__DeliveryAck ack = BERTH__V1__DELIVERY_ACK__INIT;
        Berth__V1__Error err = BERTH__V1__ERROR__INIT;
        Berth__V1__Result res = BERTH__V1__RESULT__INIT;
        ack.has_outcome = 1;
        if (atomic_fetch_sub(&r->retries, 1) > 0) {
            ack.outcome = BERTH__V1__DELIVERY_ACK__OUTCOME__RETRY;
            err.code = "BUSY";
            err.message = "try later";
            ack.error = &err;
        } else {
            ack.outcome = (Berth__V1__DeliveryAck__Outcome)r->outcome;
            if (r->result != NULL) {
                res.has_payload = 1;
                res.payload.data = (uint8_t *)r->result;
                res.payload.len = strlen(r->result);
                ack.result = &res;
            }
        }
        nng_msg_clear(m);
        nng_msg_realloc(m, berth__v1__delivery_ack__get_packed_size(&ack));
        berth__v1__delivery_ack__pack(&ack, nng_msg_body(m));
        if (nng_sendmsg(r->sock, m, 0) != 0)
            nng_msg_free(m);
    }
    return NULL;
}

static void pipe_added(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
    (void)pipe;
    (void)ev;
    atomic_fetch_add(&((receiver *)arg)->pipes, 1);
}

/* Listens on port (0: any) of loopback and serves. */
void receiver_start(receiver *r, int port, int outcome)
{
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    receiver_start_at(r, url, NULL, outcome);
}

/* Stops serving. The socket is left open: with libnng 1.5.2 closing it
 * while berthd sends can hang (the test's process ends right after). */
void receiver_stop(receiver *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->thread, NULL);
    free(r->seen);
    r->seen = NULL;
    r->n_seen = r->cap_seen = 0;
}

int seen_count(receiver *r)
{
    pthread_mutex_lock(&r->mu);
    int n = r->n_seen;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void wait_seen(receiver *r, int n)
{
    for (int i = 0; i < 1000 && seen_count(r) < n; i++) {
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
    cr_assert_geq(seen_count(r), n, "the receiver saw %d deliveries, not %d", seen_count(r), n);
}

/* Listens on url (tls: a server configuration, or NULL) and serves. */
void receiver_start_at(receiver *r, const char *url, nng_tls_config *tls, int outcome)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->outcome = outcome;
    cr_assert_eq(nng_rep0_open(&r->sock), 0);
    cr_assert_eq(nng_socket_set_ms(r->sock, NNG_OPT_RECVTIMEO, 100), 0);
    cr_assert_eq(nng_pipe_notify(r->sock, NNG_PIPE_EV_ADD_POST, pipe_added, r), 0);
    nng_listener l;
    cr_assert_eq(nng_listener_create(&l, r->sock, url), 0, "%s", url);
    if (tls != NULL)
        cr_assert_eq(nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tls), 0);
    cr_assert_eq(nng_listener_start(l, 0), 0, "listen %s", url);
    if (strncmp(url, "ipc://", 6) != 0)
        cr_assert_eq(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &r->port), 0);
    pthread_create(&r->thread, NULL, serve, r);
}

int seen_times(receiver *r, const char *id)
{
    int n = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_seen; i++)
        n += strcmp(r->seen[i].id, id) == 0;
    pthread_mutex_unlock(&r->mu);
    return n;
}
