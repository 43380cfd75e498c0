/*
 * receiver.h — a push receiver served by a thread of the test's process:
 * an nng REP socket that decodes each Delivery berthd sends, keeps what it
 * saw, and answers as the test set it (RETRY for the first `retries`,
 * then `outcome`, with `result`; after `delay_ms`; or, with `hold`, not
 * at all).
 */
#ifndef BERTH_TESTS_RECEIVER_H
#define BERTH_TESTS_RECEIVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "berth/v1/push.pb-c.h" /* outcome: BERTH__V1__DELIVERY_ACK__OUTCOME__* */

typedef struct seen {
    char id[40], key[40], instance_id[40], payload[64];
    uint32_t attempt;
} seen;

typedef struct receiver {
    nng_socket sock;
    int port;
    pthread_t thread;
    atomic_bool stop;
    /* answers: RETRY for the first `retries` deliveries, then outcome */
    atomic_int retries;
    int outcome;
    const char *result; /* DELIVERED with this result, if set */
    int delay_ms;       /* before each answer */
    atomic_bool hold;   /* take deliveries and answer none (berthd's deadline passes) */
    atomic_int pipes;   /* connections berthd has made to it */
    pthread_mutex_t mu;
    seen *seen; /* every delivery it took, in order (grown as needed) */
    int n_seen, cap_seen;
} receiver;

/* Listens on url (tls: a server configuration, or NULL) and serves. */
void receiver_start_at(receiver *r, const char *url, nng_tls_config *tls, int outcome);
/* Listens on port (0: any) of loopback and serves. */
void receiver_start(receiver *r, int port, int outcome);
/* Stops serving and forgets what it saw. The socket is left open: with
 * libnng 1.5.2 closing it while berthd sends can hang (the test's process
 * ends right after). */
void receiver_stop(receiver *r);
int seen_count(receiver *r);
/* Waits up to 10 s until the receiver saw n deliveries (asserts it did). */
void wait_seen(receiver *r, int n);
/* How many times it saw the delivery id. */
int seen_times(receiver *r, const char *id);

#endif
