/* events.c — see events.h. Publishing runs on the engine thread, after a
 * turn committed: one small encode and a non-blocking send. */
#include "gateway/events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>

#include "berth/v1/operate.pb-c.h"
#include "gateway/listen.h"
#include "store/err.h"

struct gw_events {
    nng_socket sock;
    char url[256];
};

int gw_events_open(const char *url, nng_tls_config *tls, gw_events **out, char *err, size_t errlen)
{
    *out = NULL;
    gw_events *ev = calloc(1, sizeof(*ev));
    if (ev == NULL)
        return BERTH_ENOMEM;
    int rv = nng_pub0_open(&ev->sock);
    if (rv == 0) /* PUB receives nothing; the limit is set all the same */
        rv = nng_socket_set_size(ev->sock, NNG_OPT_RECVMAXSZ, 4096);
    if (rv != 0) {
        snprintf(err, errlen, "cannot open the events socket: %s", nng_strerror(rv));
        free(ev);
        return BERTH_EIO;
    }
    rv = gw_listen(ev->sock, url, tls, ev->url, sizeof(ev->url), err, errlen);
    if (rv != BERTH_OK) {
        nng_close(ev->sock);
        free(ev);
        return rv;
    }
    *out = ev;
    return BERTH_OK;
}

const char *gw_events_url(const gw_events *ev)
{
    return ev->url;
}

void gw_event_subject(const engine_event *ev, char *out, size_t len)
{
    const char *kind = "event";
    switch (ev->kind) {
    case ENGINE_EVENT_TASK_PARKED:
        kind = "task.parked";
        break;
    case ENGINE_EVENT_TASK_COMPLETED:
        kind = "task.completed";
        break;
    case ENGINE_EVENT_TASK_FAILED:
        kind = "task.failed";
        break;
    case ENGINE_EVENT_TASK_TERMINAL:
        kind = "task.terminal";
        break;
    case ENGINE_EVENT_TASK_REFUSED:
        kind = "task.refused";
        break;
    case ENGINE_EVENT_DELIVERY_POISONED:
        kind = "delivery.poisoned";
        break;
    }
    snprintf(out, len, "%s.%s", kind, ev->topic);
}

void gw_events_publish(void *ctx, const engine_event *e)
{
    gw_events *ev = ctx;
    char subject[BERTH_TOPIC_MAX + 32];
    gw_event_subject(e, subject, sizeof(subject));
    Berth__V1__Event m = BERTH__V1__EVENT__INIT;
    Berth__V1__Error err = BERTH__V1__ERROR__INIT;
    m.subject = subject;
    m.topic = (char *)e->topic;
    m.task_id = (char *)e->id;
    if (e->error.code || e->error.message || e->error.details) {
        err.code = (char *)e->error.code;
        err.message = (char *)e->error.message;
        err.details = (char *)e->error.details;
        m.error = &err;
    }
    m.has_at_ms = 1;
    m.at_ms = e->at_ms;
    if (e->kind == ENGINE_EVENT_TASK_FAILED) {
        m.has_retries_left = 1;
        m.retries_left = e->retries_left;
    }
    size_t slen = strlen(subject) + 1, n = berth__v1__event__get_packed_size(&m);
    nng_msg *msg;
    if (nng_msg_alloc(&msg, slen + n) != 0)
        return; /* best effort */
    uint8_t *body = nng_msg_body(msg);
    memcpy(body, subject, slen);
    berth__v1__event__pack(&m, body + slen);
    if (nng_sendmsg(ev->sock, msg, NNG_FLAG_NONBLOCK) != 0)
        nng_msg_free(msg);
}

void gw_events_close(gw_events *ev)
{
    if (ev == NULL)
        return;
    nng_close(ev->sock);
    free(ev);
}
