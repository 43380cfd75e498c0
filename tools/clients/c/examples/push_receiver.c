/*
 * push_receiver.c — a minimal receiver for a push channel: berthd dials
 * it and sends each delivery; it answers each one. The shape every
 * receiver has, in any language with protobuf and an nng binding
 * (proto/berth/v1/push.proto):
 *
 *   listen with a REP socket on the channel's address
 *   loop: Delivery ← receive; do the work; DeliveryAck → send
 *         DELIVERED: done (a call's result may ride along)
 *         RETRY:     not now (berthd sends it again later, with backoff)
 *         REJECT:    never (the delivery ends; a call ends with the error)
 *
 * Delivery is at least once: a delivery whose answer berthd did not get
 * comes again with the same idempotency_key. This example keeps the keys
 * it has acted on (the last KEYS_KEPT of them) and answers a repeat
 * DELIVERED without acting twice.
 *
 * A delivery that belongs to a call (instance_id is set) is answered with
 * a result: here its payload in upper case, which the caller's await_call
 * returns.
 *
 *   berth-push-receiver-example [--listen URL] [--reject-code CODE]
 *
 * and declare the channel, e.g.
 *
 *   berth admin deploy mail --channel 'emails,transport=nng+req://127.0.0.1:7460'
 */
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "berth/v1/push.pb-c.h"

#define KEYS_KEPT 4096

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

/* The idempotency keys acted on, oldest overwritten first. */
static char keys[KEYS_KEPT][40];
static size_t next_key;

static int seen_before(const char *key)
{
    for (size_t i = 0; i < KEYS_KEPT; i++)
        if (keys[i][0] != '\0' && strcmp(keys[i], key) == 0)
            return 1;
    snprintf(keys[next_key], sizeof(keys[next_key]), "%s", key);
    next_key = (next_key + 1) % KEYS_KEPT;
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = "tcp://127.0.0.1:7460", *reject_code = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--reject-code") == 0 && i + 1 < argc)
            reject_code = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--listen URL] [--reject-code CODE]\n", argv[0]);
            return 2;
        }
    }
    nng_socket s;
    int rv = nng_rep0_open(&s);
    if (rv == 0)
        rv = nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 200); /* to look at `stopping` */
    if (rv == 0)
        rv = nng_listen(s, url, NULL, 0);
    if (rv != 0) {
        fprintf(stderr, "cannot listen on %s: %s\n", url, nng_strerror(rv));
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    printf("listening on %s\n", url);
    fflush(stdout);
    while (!stopping) {
        nng_msg *m;
        if (nng_recvmsg(s, &m, 0) != 0)
            continue;
        Berth__V1__Delivery *d = berth__v1__delivery__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
        Berth__V1__DeliveryAck ack = BERTH__V1__DELIVERY_ACK__INIT;
        Berth__V1__Error err = BERTH__V1__ERROR__INIT;
        Berth__V1__Result res = BERTH__V1__RESULT__INIT;
        uint8_t *answer = NULL;
        ack.has_outcome = 1;
        if (d == NULL) {
            ack.outcome = BERTH__V1__DELIVERY_ACK__OUTCOME__REJECT;
            err.code = "NOT_A_DELIVERY";
            ack.error = &err;
        } else if (reject_code != NULL) {
            ack.outcome = BERTH__V1__DELIVERY_ACK__OUTCOME__REJECT;
            err.code = (char *)reject_code;
            err.message = "this receiver rejects everything";
            ack.error = &err;
        } else {
            ack.outcome = BERTH__V1__DELIVERY_ACK__OUTCOME__DELIVERED;
            int repeat = d->idempotency_key != NULL && seen_before(d->idempotency_key);
            printf("%s %s attempt %u%s: %.*s\n", d->topic ? d->topic : "", d->id ? d->id : "",
                   d->attempt, repeat ? " (seen before: not acted on again)" : "",
                   (int)d->payload.len, (const char *)d->payload.data);
            fflush(stdout);
            if (d->instance_id != NULL && (answer = malloc(d->payload.len + 1)) != NULL) {
                for (size_t i = 0; i < d->payload.len; i++)
                    answer[i] = (uint8_t)toupper(d->payload.data[i]);
                res.has_payload = 1;
                res.payload.data = answer;
                res.payload.len = d->payload.len;
                ack.result = &res;
            }
        }
        nng_msg_clear(m);
        if (nng_msg_realloc(m, berth__v1__delivery_ack__get_packed_size(&ack)) == 0) {
            berth__v1__delivery_ack__pack(&ack, nng_msg_body(m));
            if (nng_sendmsg(s, m, 0) != 0)
                nng_msg_free(m);
        } else {
            nng_msg_free(m); /* no answer: berthd's timeout makes it a RETRY */
        }
        free(answer);
        if (d != NULL)
            berth__v1__delivery__free_unpacked(d, NULL);
    }
    return 0; /* (the socket goes with the process) */
}
