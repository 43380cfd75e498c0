/*
 * target.h — the berthd that berth-hostile attacks, and the run's
 * settings: what hostile.c (main), honest.c and attacks.c all read.
 *
 * target_cfg and target_addr are written by main before any thread starts and only
 * read after. Defined in target.c, so that main's file calls the honest
 * load and the attackers and neither of them reaches back into it.
 */
#ifndef BERTH_TOOLS_BENCH_TARGET_H
#define BERTH_TOOLS_BENCH_TARGET_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

typedef struct cfg {
    const char *operate;
    pid_t pid; /* berthd's, for its RSS */
    bool spawn;
    char **berthd_args; /* after "--", for --spawn */
    int n_berthd_args;
    double seconds, settle_s;
    bool json;
} cfg;

extern cfg target_cfg;
extern struct sockaddr_storage target_addr; /* target_cfg.operate, resolved, for the attackers */
extern socklen_t target_addr_len;

/* Time, for every part of berth-hostile. */

static inline uint64_t now_ns(void) /* CLOCK_MONOTONIC */
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

#endif
