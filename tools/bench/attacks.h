/*
 * attacks.h — berth-hostile's attackers (attacks.c): raw sockets speaking
 * SP by hand, and their table. The flags and counters are atomics;
 * hostile.c runs one attack at a time and reads them.
 */
#ifndef BERTH_TOOLS_BENCH_ATTACKS_H
#define BERTH_TOOLS_BENCH_ATTACKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct attack {
    const char *name;
    int threads;
    void *(*run)(void *arg); /* arg: the thread's index, as intptr_t */
    int (*prepare)(void);    /* before RSS before; NULL: nothing to prepare */
    /* With --operate, what the attack left on someone else's berthd,
     * removed once nothing holds it (until_ns: when its locks are free);
     * NULL: it leaves nothing. */
    void (*cleanup)(uint64_t until_ns);
} attack;

extern const attack attacks_table[];
extern const size_t attacks_table_len;

/* What the attackers did; run_attack resets and reads it. */
typedef struct atk_counts {
    atomic_uint_fast64_t conns;     /* connections made */
    atomic_uint_fast64_t dial_fail; /* connects (or headers) that failed */
    atomic_uint_fast64_t closed;    /* connections berthd closed under a holder */
    atomic_uint_fast64_t sent;      /* bytes */
} atk_counts;

extern atk_counts attacks_counts;
extern atomic_bool attacks_stop; /* set: every attacker thread returns */

/* held-connections needs thousands of descriptors: raises RLIMIT_NOFILE
 * to its hard limit (a spawned berthd inherits it too), and holds fewer
 * connections when that is still too low (told). */
void attacks_fit_fd_limit(void);

#endif
