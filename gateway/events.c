/*
 * events.c — see events.h.
 *
 * The engine calls gw_events_publish() on its own thread, after a turn
 * committed. That thread is berth's bottleneck, so the call only copies
 * the event into one allocation and appends it to a queue; a publisher
 * thread encodes and sends. The queue is bounded (GW_EVENTS_QUEUE_MAX):
 * past it new events are dropped and counted, as PUB would drop them for
 * a slow subscriber anyway. Events notify; state is the record.
 *
 * With no subscriber connected, PUB would drop every event: the engine's
 * call then returns at once, and nothing is copied, queued or sent. A pipe
 * counts as a subscriber from the moment nng announces it (ADD_PRE) until
 * it is gone (REM_POST); nng pairs the two.
 */
#include "gateway/events.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>

#include "berth/v1/operate.pb-c.h"
#include "gateway/listen.h"
#include "store/err.h"

#define GW_EVENTS_QUEUE_MAX 65536

/* A queued event: the engine_event's strings copied after the struct. */
typedef struct qevent {
    struct qevent *next;
    engine_event ev; /* pointers into text[] */
    char text[];
} qevent;

struct gw_events {
    nng_socket sock;
    nng_aio *aio; /* the publisher's sends */
    atomic_int subscribers;
    char url[256];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    qevent *head, *tail; /* guarded by mu */
    size_t queued;
    uint64_t dropped;
    bool stopping;
};

static void *publisher(void *arg);

static void pipe_event(nng_pipe p, nng_pipe_ev what, void *arg)
{
    (void)p;
    gw_events *ev = arg;
    atomic_fetch_add(&ev->subscribers, what == NNG_PIPE_EV_ADD_PRE ? 1 : -1);
}

int gw_events_open(const char *url, nng_tls_config *tls, gw_events **out, char *err, size_t errlen)
{
    *out = NULL;
    gw_events *ev = calloc(1, sizeof(*ev));
    if (ev == NULL)
        return BERTH_ENOMEM;
    int rv = nng_pub0_open(&ev->sock);
    if (rv == 0) /* PUB receives nothing; the limit is set all the same */
        rv = nng_socket_set_size(ev->sock, NNG_OPT_RECVMAXSZ, 4096);
    if (rv == 0)
        rv = nng_pipe_notify(ev->sock, NNG_PIPE_EV_ADD_PRE, pipe_event, ev);
    if (rv == 0)
        rv = nng_pipe_notify(ev->sock, NNG_PIPE_EV_REM_POST, pipe_event, ev);
    if (rv == 0)
        rv = nng_aio_alloc(&ev->aio, NULL, NULL);
    if (rv != 0) {
        snprintf(err, errlen, "cannot open the events socket: %s", nng_strerror(rv));
        nng_close(ev->sock);
        free(ev);
        return BERTH_EIO;
    }
    rv = gw_listen(ev->sock, url, tls, ev->url, sizeof(ev->url), err, errlen);
    if (rv != BERTH_OK) {
        nng_close(ev->sock);
        nng_aio_free(ev->aio);
        free(ev);
        return rv;
    }
    pthread_mutex_init(&ev->mu, NULL);
    pthread_cond_init(&ev->cv, NULL);
    if (pthread_create(&ev->thread, NULL, publisher, ev) != 0) {
        snprintf(err, errlen, "cannot start the events thread");
        pthread_mutex_destroy(&ev->mu);
        pthread_cond_destroy(&ev->cv);
        nng_close(ev->sock);
        nng_aio_free(ev->aio);
        free(ev);
        return BERTH_ENOMEM;
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
    case ENGINE_EVENT_TASK_RETRIED:
        kind = "task.retried";
        break;
    case ENGINE_EVENT_TASK_DISCARDED:
        kind = "task.discarded";
        break;
    case ENGINE_EVENT_DELIVERY_RETRIED:
        kind = "delivery.retried";
        break;
    case ENGINE_EVENT_DEPLOYMENT_RETIRED: /* its topic is the deployment's id */
        kind = "deployment.retired";
        break;
    case ENGINE_EVENT_INSTANCE_RESOLVED: /* named by the call, not its topic */
        snprintf(out, len, "instance.resolved.%s", ev->id);
        return;
    }
    snprintf(out, len, "%s.%s", kind, ev->topic);
}

static void send_event(gw_events *ev, const engine_event *e)
{
    char subject[BERTH_TOPIC_MAX + 32];
    gw_event_subject(e, subject, sizeof(subject));
    Berth__V1__Event m = BERTH__V1__EVENT__INIT;
    Berth__V1__Error err = BERTH__V1__ERROR__INIT;
    m.subject = subject;
    if (e->kind == ENGINE_EVENT_DEPLOYMENT_RETIRED) {
        m.deployment_id = (char *)e->topic;
        m.has_deployment_version = 1;
        m.deployment_version = e->version;
    } else {
        m.topic = (char *)e->topic;
    }
    if (e->kind == ENGINE_EVENT_INSTANCE_RESOLVED)
        m.instance_id = (char *)e->id;
    else if (e->id[0] != '\0')
        m.task_id = (char *)e->id;
    if (e->instance_id[0] != '\0')
        m.instance_id = (char *)e->instance_id;
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
    /* PUB never blocks a send: it queues per subscriber or drops. */
    nng_aio_set_msg(ev->aio, msg);
    nng_send_aio(ev->sock, ev->aio);
    nng_aio_wait(ev->aio);
    if (nng_aio_result(ev->aio) != 0)
        nng_msg_free(msg);
}

static void *publisher(void *arg)
{
    gw_events *ev = arg;
    prctl(PR_SET_NAME, "berth-events", 0, 0, 0);
    pthread_mutex_lock(&ev->mu);
    for (;;) {
        while (ev->head == NULL && !ev->stopping)
            pthread_cond_wait(&ev->cv, &ev->mu);
        qevent *q = ev->head;
        ev->head = ev->tail = NULL;
        ev->queued = 0;
        bool stop = ev->stopping;
        pthread_mutex_unlock(&ev->mu);
        while (q != NULL) {
            qevent *next = q->next;
            send_event(ev, &q->ev);
            free(q);
            q = next;
        }
        pthread_mutex_lock(&ev->mu);
        if (stop && ev->head == NULL)
            break;
    }
    pthread_mutex_unlock(&ev->mu);
    return NULL;
}

/* Copies s into *p (NULL stays NULL), advancing *p. */
static const char *copy_str(char **p, const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    memcpy(*p, s, n);
    const char *out = *p;
    *p += n;
    return out;
}

static size_t len_or_0(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

void gw_events_publish(void *ctx, const engine_event *e)
{
    gw_events *ev = ctx;
    if (atomic_load_explicit(&ev->subscribers, memory_order_relaxed) <= 0)
        return; /* PUB would drop it */
    size_t n = len_or_0(e->topic) + len_or_0(e->error.code) + len_or_0(e->error.message) +
               len_or_0(e->error.details);
    qevent *q = malloc(sizeof(*q) + n);
    if (q == NULL)
        return;
    q->next = NULL;
    q->ev = *e;
    char *p = q->text;
    q->ev.topic = copy_str(&p, e->topic);
    q->ev.error.code = copy_str(&p, e->error.code);
    q->ev.error.message = copy_str(&p, e->error.message);
    q->ev.error.details = copy_str(&p, e->error.details);
    pthread_mutex_lock(&ev->mu);
    if (ev->queued >= GW_EVENTS_QUEUE_MAX) {
        ev->dropped++;
        pthread_mutex_unlock(&ev->mu);
        free(q);
        return;
    }
    if (ev->tail)
        ev->tail->next = q;
    else
        ev->head = q;
    ev->tail = q;
    if (ev->queued++ == 0)
        pthread_cond_signal(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
}

void gw_events_close(gw_events *ev)
{
    if (ev == NULL)
        return;
    pthread_mutex_lock(&ev->mu);
    ev->stopping = true;
    pthread_cond_signal(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
    pthread_join(ev->thread, NULL); /* what was queued is sent first */
    pthread_mutex_destroy(&ev->mu);
    pthread_cond_destroy(&ev->cv);
    nng_close(ev->sock);
    nng_aio_free(ev->aio);
    free(ev);
}
