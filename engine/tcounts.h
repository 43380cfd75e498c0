/*
 * tcounts.h — the counters of each topic that /metrics exports (tasks
 * submitted, fetched, completed ... per topic, since the process
 * started), bounded: the first metrics_topics_max topics named get their
 * own, the rest share "_other", so that clients naming topics at will
 * cannot grow the metrics without bound. Kept by whichever thread runs a
 * store's turns (the embedded actor, a replica's pgactor); one thread.
 */
#ifndef BERTH_ENGINE_TCOUNTS_H
#define BERTH_ENGINE_TCOUNTS_H

#include <stddef.h>

#include "engine/engine.h"
#include "engine/table.h"

/* One topic's counters. They outlive the topic's tasks: entries are
 * never removed. */
typedef struct tcounter {
    char *name; /* owned; the key */
    size_t len;
    engine_topic_counters c;
} tcounter;

typedef struct tcounts {
    table by_name;   /* topic name → its tcounter */
    tcounter *other; /* "_other", made when the first topic past max comes */
    size_t max;
} tcounts;

/* BERTH_ENOMEM when the table cannot be made. */
int tcounts_init(tcounts *tc, size_t max);
void tcounts_fini(tcounts *tc);
/* The counters of topic name (made if absent; past max, "_other's");
 * NULL when out of memory (the act goes uncounted, nothing else). */
engine_topic_counters *tcounts_get(tcounts *tc, const char *name, size_t len);
/* Copies every topic's counters into r->metrics (topics, n_topics), the
 * names into r's memory. BERTH_ENOMEM: r's metrics hold none. */
int tcounts_read(const tcounts *tc, engine_reply *r);

#endif
