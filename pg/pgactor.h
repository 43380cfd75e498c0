/*
 * pgactor.h — the PostgreSQL store's engine (pg/README.md): engine.h's
 * contract with the state in a database that any number of engines
 * (berthd replicas) share.
 *
 * One thread per engine owns one pipelined connection (its turns) and one
 * listening connection (the doorbells other replicas ring, §5). The
 * replica keeps only its queue, its waiting fetches and what it learnt of
 * when topics next have work; every task's state is in the database, so a
 * task fetched through one replica is completed through any other.
 */
#ifndef BERTH_PG_PGACTOR_H
#define BERTH_PG_PGACTOR_H

#include <stddef.h>

#include "engine/engine.h"

/* Engine connections: a turn runs on each, so one turn's statements go
 * while another's COMMIT waits for the disk (the embedded engine's commit
 * thread, in SQL). One, measured (BENCHMARKS.md, "On PostgreSQL"): with
 * two, the claims of one replica's lanes race for a topic's head and each
 * walks what the other just locked or claimed (EvalPlanQual re-checks);
 * S2 over three replicas ran at 8,600-10,000 tasks/s with two lanes and
 * 21,000-26,700 with one, S1 at 1,350-1,630 against 1,740-2,080; one
 * replica within noise (S2 a little lower, S1 a little higher). Holding
 * a replica's fetches back while its other lane claimed was slower than
 * either. A disk whose flush is slow would favour two again. */
#define PGACTOR_LANES 1

/* How long engine_open() waits for the database before giving up. */
#define PGACTOR_CONNECT_WAIT_MS 5000

/* engine_open() for o->store_uri; the options are checked already.
 * BERTH_EFORMAT: the database's berth schema is newer than this build. */
int pgactor_open(const engine_options *o, engine **out, char *err, size_t errlen);

#endif
