/* wakeup.c — see wakeup.h. */
#include "gateway/wakeup.h"

#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

int gw_wakeup_open(int *efd, int *wake)
{
    *efd = epoll_create1(EPOLL_CLOEXEC);
    *wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (*efd < 0 || *wake < 0)
        return -1;
    struct epoll_event w = {.events = EPOLLIN, .data.ptr = wake};
    return epoll_ctl(*efd, EPOLL_CTL_ADD, *wake, &w);
}

void gw_wakeup_ring(int wake)
{
    uint64_t one = 1;
    ssize_t w = write(wake, &one, sizeof(one)); /* full at 2^64-2: woken anyway */
    (void)w;
}

void gw_wakeup_drain(int wake)
{
    uint64_t v;
    ssize_t r = read(wake, &v, sizeof(v));
    (void)r;
}

void gw_wakeup_close(int *efd, int *wake)
{
    if (*efd >= 0)
        close(*efd);
    if (*wake >= 0)
        close(*wake);
    *efd = *wake = -1;
}
