/*
 * pgreq.h — a request as the PostgreSQL engine holds it, from its queue
 * through its turns (and its waits) to its answer; what a turn learnt of a
 * topic. Shared by the actor (pgactor.c, pgwait) and the turn modules
 * (pgops.c and those below it).
 */
#ifndef BERTH_PG_PGREQ_H
#define BERTH_PG_PGREQ_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/rules.h"

/* A request as the PostgreSQL engine holds it. */
typedef struct pgreq {
    engine_request req;
    engine_done_fn done;
    void *arg;
    engine_reply *reply;
    struct pgreq *next;
    uint64_t arrived_ms; /* the engine's clock when the actor took it */
    uint64_t seq;        /* its place in the queue, ever */
    bool closed;         /* a fetch its owner's cancel came after: answered CANCELLED */
    /* this turn */
    bool settled; /* answered by the checks: nothing of it goes to the database */
    int claim;    /* a fetch's claim statement (get_task's, list_incidents'), -1 none */
    int claim_i;  /* ... its place in a claim_many statement (1-based), 0: its own */
    /* a fetch */
    rules_fetch f;
    bool completes_done; /* its completions were applied by an earlier turn */
    bool deferred;       /* this turn: past the replica's fetch budget, it claimed nothing */
    bool may_wait;       /* it may wait: wait_ms > 0 */
    uint64_t wait_ms;    /* a fetch's or an await's, checked */
    bool rung;           /* waiting: a doorbell rang one of its topics since its last claim */
    uint64_t deadline_ms;
    /* an await */
    bool checked; /* its checks ran (a waiter reading again) */
    bool live;    /* its last read found the call live */
    uint8_t call_id[BERTH_ID_LEN];
    /* retry_terminal */
    uint32_t retries; /* the new failure budget, checked */
    /* deploy, retire: the deployment answered */
    uint32_t dep_number;
    /* push_ack, retry_delivery: the delivery, parsed */
    uint8_t delivery_id[BERTH_ID_LEN];
    bool matched; /* push_ack: the turn found the send it answers */
} pgreq;

/* What a committed turn taught about topics: parks to ring here and
 * announce, and when waiting fetches' topics next have work. */
typedef struct pgops_topic_due {
    const char *topic; /* into the request */
    bool known;        /* next_in_ms is set */
    uint64_t next_in_ms;
    bool contended; /* fetchable rows existed that the claim passed over */
} pgops_topic_due;

/* A push channel of one deployment, and how many more sends this replica
 * may have unanswered on it (pgrelay.h). */
typedef struct pgrelay_chan {
    const char *topic;
    uint32_t deployment;
    uint32_t room;
} pgrelay_chan;

typedef struct pgops_turn pgops_turn;

#endif
