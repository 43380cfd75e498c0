/* handshake.c — see handshake.h. */
#define _GNU_SOURCE /* syscall */
#include "gateway/handshake.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/engine.h"
#include "gateway/wakeup.h"
#include "store/err.h"

struct gw_handshake {
    gw_handshake_ops ops;
    int efd, wake; /* its epoll and eventfd */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* guards what follows */
    bool stopping;
    gw_hs_entry *given; /* from the loop, newest first */
    gw_hs_entry *done;  /* for the loop */
};

/* Done with e (handshaken, or failed or late): out of the epoll and the
 * deadlines, onto *done, which goes to the loop after the batch of events
 * (a later event of the batch may still name e). */
static void hs_over(gw_handshake *h, gw_deadlines *dl, gw_hs_entry *e, bool failed,
                    gw_hs_entry **done)
{
    gw_deadline_clear(dl, &e->due);
    epoll_ctl(h->efd, EPOLL_CTL_DEL, e->fd, NULL);
    e->over = true;
    e->failed = failed;
    e->next = *done;
    *done = e;
}

/* The handshake as far as the peer's bytes go; once it is done, the
 * server's first bytes (ops.up). Writable interest while output waits. */
static void hs_step(gw_handshake *h, gw_deadlines *dl, gw_hs_entry *e, gw_hs_entry **done)
{
    bool more = false;
    pthread_mutex_lock(e->mu);
    int rv = gw_tls_handshake(e->tls);
    bool ok = rv >= 0 && (rv == 0 || h->ops.up(e->conn)) && h->ops.flush(e->conn, &more);
    pthread_mutex_unlock(e->mu);
    if (!ok || rv == 1) {
        hs_over(h, dl, e, !ok, done);
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (more ? EPOLLOUT : 0), .data.ptr = e};
    epoll_ctl(h->efd, EPOLL_CTL_MOD, e->fd, &ev);
}

/* *done to the loop. */
static void hs_deliver(gw_handshake *h, gw_hs_entry **done)
{
    if (*done == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    while (*done != NULL) {
        gw_hs_entry *e = *done;
        *done = e->next;
        e->next = h->done;
        h->done = e;
    }
    pthread_mutex_unlock(&h->mu);
    h->ops.finished(h->ops.arg);
}

/* The entries given since last time, oldest first (their deadlines in
 * order), into the epoll; *stopping: stop was asked. */
static void hs_take_given(gw_handshake *h, gw_deadlines *dl, bool *stopping, gw_hs_entry **done)
{
    pthread_mutex_lock(&h->mu);
    *stopping = h->stopping;
    gw_hs_entry *fresh = NULL;
    while (h->given != NULL) {
        gw_hs_entry *e = h->given;
        h->given = e->next;
        e->next = fresh;
        fresh = e;
    }
    pthread_mutex_unlock(&h->mu);
    while (fresh != NULL) {
        gw_hs_entry *e = fresh;
        fresh = e->next;
        e->due.owner = e;
        gw_deadline_set(dl, &e->due, e->due_ms);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = e};
        if (*stopping || epoll_ctl(h->efd, EPOLL_CTL_ADD, e->fd, &ev) != 0)
            hs_over(h, dl, e, true, done);
        else
            hs_step(h, dl, e, done); /* (its ClientHello may be in) */
    }
}

static void *hs_main(void *arg)
{
    gw_handshake *h = arg;
    prctl(PR_SET_NAME, "berth-tls", 0, 0, 0);
    /* Handshakes take the CPU the loop leaves. */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    gw_deadlines dl = {NULL, NULL};
    struct epoll_event evs[64];
    for (bool stopping = false; !stopping;) {
        gw_hs_entry *done = NULL;
        hs_take_given(h, &dl, &stopping, &done);
        uint64_t now = engine_monotonic_ms();
        while (dl.head != NULL && (stopping || dl.head->at_ms <= now))
            hs_over(h, &dl, dl.head->owner, true, &done);
        hs_deliver(h, &done);
        int n = stopping ? 0 : epoll_wait(h->efd, evs, 64, gw_deadline_wait(&dl, now));
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &h->wake) {
                gw_wakeup_drain(h->wake);
            } else if (!((gw_hs_entry *)evs[i].data.ptr)->over) {
                hs_step(h, &dl, evs[i].data.ptr, &done);
            }
        }
        hs_deliver(h, &done);
    }
    return NULL;
}

int gw_handshake_open(const gw_handshake_ops *ops, gw_handshake **out, char *err, size_t errlen)
{
    *out = NULL;
    gw_handshake *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        snprintf(err, errlen, "out of memory");
        return BERTH_ENOMEM;
    }
    h->ops = *ops;
    pthread_mutex_init(&h->mu, NULL);
    if (gw_wakeup_open(&h->efd, &h->wake) != 0) {
        snprintf(err, errlen, "cannot open the TLS handshake thread's epoll: %s", strerror(errno));
        gw_handshake_close(h);
        return BERTH_EIO;
    }
    *out = h;
    return BERTH_OK;
}

int gw_handshake_start(gw_handshake *h, char *err, size_t errlen)
{
    int rv = pthread_create(&h->thread, NULL, hs_main, h);
    if (rv != 0) {
        snprintf(err, errlen, "cannot start the TLS handshake thread: %s", strerror(rv));
        return BERTH_EIO;
    }
    h->started = true;
    return BERTH_OK;
}

void gw_handshake_give(gw_handshake *h, gw_hs_entry *e)
{
    pthread_mutex_lock(&h->mu);
    e->next = h->given;
    h->given = e;
    pthread_mutex_unlock(&h->mu);
    gw_wakeup_ring(h->wake);
}

gw_hs_entry *gw_handshake_take(gw_handshake *h)
{
    pthread_mutex_lock(&h->mu);
    gw_hs_entry *list = h->done;
    h->done = NULL;
    pthread_mutex_unlock(&h->mu);
    return list;
}

void gw_handshake_stop(gw_handshake *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = true;
    pthread_mutex_unlock(&h->mu);
    if (h->started) {
        gw_wakeup_ring(h->wake);
        pthread_join(h->thread, NULL); /* it hands back every entry it had */
        h->started = false;
    }
    /* Given after the thread's last look: handed back as failed. */
    pthread_mutex_lock(&h->mu);
    while (h->given != NULL) {
        gw_hs_entry *e = h->given;
        h->given = e->next;
        e->over = e->failed = true;
        e->next = h->done;
        h->done = e;
    }
    pthread_mutex_unlock(&h->mu);
}

void gw_handshake_close(gw_handshake *h)
{
    if (h == NULL)
        return;
    gw_handshake_stop(h);
    gw_wakeup_close(&h->efd, &h->wake);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
