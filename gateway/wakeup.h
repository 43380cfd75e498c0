/*
 * wakeup.h — an epoll set with an eventfd in it, by which other threads
 * wake the one thread that waits on the set. The SP server's loop
 * (sp.c), the TLS handshake thread (handshake.c) and the push sender
 * (push.c) each wait on one.
 *
 * The eventfd's epoll event carries a pointer to the int that holds it
 * (data.ptr == wake), so the waiting thread tells a wake-up from its
 * other descriptors by that address.
 */
#ifndef BERTH_GATEWAY_WAKEUP_H
#define BERTH_GATEWAY_WAKEUP_H

/* Opens both into *efd and *wake (each -1 if it could not be opened).
 * 0, or -1 with errno set; the caller closes what was opened with
 * gw_wakeup_close() either way. */
int gw_wakeup_open(int *efd, int *wake);
/* Any thread: wakes the waiting thread (it reads the wake-up with
 * gw_wakeup_drain() and looks at what it was told). */
void gw_wakeup_ring(int wake);
/* The waiting thread, on its wake-up's event. */
void gw_wakeup_drain(int wake);
/* Closes both if open and sets them to -1. */
void gw_wakeup_close(int *efd, int *wake);

#endif
