/*
 * pglisten.h — a replica's listening connection (pg/README.md §5): the
 * doorbells other replicas ring come in on it (LISTEN berth), and the ones
 * this replica's committed turns ring go out on it.
 *
 * OUT, AFTER COMMIT
 *   A turn's doorbell is not a statement of the turn: NOTIFY holds a
 *   cluster-wide lock from its transaction's pre-commit to its end, WAL
 *   flush included, which would put every replica's commits in one line.
 *   So a committed turn's records are sent here, in a transaction of their
 *   own with asynchronous commit, one at a time, gathered while one is in
 *   flight (past what one notification carries: "p:*", look at
 *   everything, and the earliest "i:" timer of what it replaced), and at
 *   most one every PGLISTEN_GAP_MS: the first after a quiet spell leaves
 *   at once, the ones behind it wait out the gap together. Under load each
 *   doorbell is a transaction here and a wake-up of every replica's
 *   listener; gathered, a long poll on another replica waits at most the
 *   gap longer. One in flight is kept until its result is read: a
 *   connection that dies, or leaves it unanswered for
 *   PGACTOR_LISTENER_SILENT_MS, is given up on and the doorbell goes out
 *   again on the next one.
 *
 * The actor thread only.
 */
#ifndef BERTH_PG_PGLISTEN_H
#define BERTH_PG_PGLISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#define PGLISTEN_CHANNEL "berth"

/* A doorbell sent and not answered within this: the connection is given
 * up on (reopened, the doorbell sent again on the new one). */
#define PGLISTEN_SILENT_MS 2000

/* Doorbells leave at most one per this (see OUT, AFTER COMMIT). */
#define PGLISTEN_GAP_MS 5

typedef struct pglisten {
    PGconn *conn; /* NULL while down */
    char *bells;  /* gathered, not sent yet */
    size_t bells_len;
    char *flying;          /* the one sent, its result not read yet */
    uint64_t sent_mono_ms; /* the last one's (0: none yet) */
} pglisten;

/* Connects (waiting up to wait_ms) and listens. */
int pglisten_open(pglisten *l, const char *uri, uint64_t wait_ms, char *err, size_t errlen);
/* A committed turn's doorbell records, to go out as soon as they can. */
void pglisten_ring(pglisten *l, const char *payload);
/* Reads what came in: each notification not from a backend ours() claims
 * is handed to heard(); then sends what is gathered. false: the
 * connection was lost or silent and is closed now (reopen it). */
bool pglisten_drain(pglisten *l, bool (*ours)(void *ctx, int pid),
                    void (*heard)(void *ctx, const char *payload), void *ctx);
/* The instant (monotonic ms) a doorbell in flight is given up on, or
 * UINT64_MAX. */
uint64_t pglisten_deadline(const pglisten *l);
/* The instant (monotonic ms) the gathered doorbells may leave (call
 * pglisten_drain() then), or UINT64_MAX: none gathered, or one in flight. */
uint64_t pglisten_send_at(const pglisten *l);
/* Closes the connection (what was gathered or in flight stays, for the
 * next one). */
void pglisten_lost(pglisten *l);
void pglisten_fini(pglisten *l);

#endif
