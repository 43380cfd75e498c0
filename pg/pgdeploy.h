/*
 * pgdeploy.h — deployments on PostgreSQL (R14, R15; pg/README.md §3.9): the
 * replica's copy of berth.deployments and its routes, and a turn's deploy,
 * retire, list_deployments and retirement gate. Semantics are the
 * embedded store's (engine/deploy.h); the database holds the state.
 *
 * THE COPY
 *   Each replica keeps every deployment as it last read them, with the
 *   epoch (meta 'deploy_epoch', bumped by every change) they were read at,
 *   and routes new work by it. A turn whose plan read the copy (a submit or
 *   a call routed, a fetch under strict channels, a refusal by the routes)
 *   begins with turn_begin_routed: the database's epoch must be the copy's,
 *   or the turn fails with SQLSTATE BR002 (PGDEPLOY_STALE) before it keeps
 *   anything, and the replica reads the deployments again and plans the
 *   same requests anew. A turn that puts work into a deployment holds the
 *   advisory lock K_DEPLOY shared until COMMIT, so a retire and the gate,
 *   which take it exclusive, wait for that work and see it. A replica
 *   therefore never accepts work for a channel the database holds draining
 *   or retired, whatever its copy says, and a deploy through one replica
 *   routes the next submit through any other. The copy is read again when
 *   a `d:` doorbell says another replica changed the deployments, and
 *   after the replica's own changes.
 *
 * DEPLOY AND RETIRE
 *   Round one takes K_DEPLOY exclusive and reads every deployment
 *   (deploy_lock, the turn's first statement: it holds no row yet, so its
 *   wait cannot close a cycle); the decisions run on that copy, in request
 *   order, between the rounds; round two writes them, runs the gate and
 *   reads the answers with their counts. A push channel's name is kept in
 *   push_names too (routing in SQL: the re-drive of a call, berth.submit()).
 *
 * THE GATE
 *   A turn that ended work (completions, failures, housekeeping, an
 *   operator's discard) on a replica whose copy shows a DRAINING deployment
 *   runs the gate last, taking K_DEPLOY only if it is free (a turn that
 *   holds rows must not wait on turns that may wait on them); the actor
 *   also runs a gate-only turn, which waits for K_DEPLOY, every
 *   PGDEPLOY_GATE_EVERY_MS while its copy shows one, so a deployment
 *   retires within about a second of holding nothing even while other
 *   replicas' submits hold the lock shared without a pause.
 *
 * Internal to pg/'s turn modules and the actor. The actor thread only.
 */
#ifndef BERTH_PG_PGDEPLOY_H
#define BERTH_PG_PGDEPLOY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "engine/mem.h"
#include "engine/rules.h"
#include "engine/table.h"
#include "pg/pgreq.h"
#include "pg/pgturn.h"
#include "store/records.h"

#define PGDEPLOY_STALE         "BR002"
#define PGDEPLOY_GATE_EVERY_MS 1000

/* A deployment as the replica read it. */
typedef struct pgdep {
    uint32_t number, version;
    int state; /* engine_deployment_state */
    char *id;
    uint64_t created_at_ms, retired_at_ms;
    store_deployment decl; /* its channels (decoded; owns them) */
    /* a deploy turn's working copy */
    bool named;                      /* deploy_lock: something names it */
    bool inserted, dirty, forgotten; /* what the turn does to it */
} pgdep;

typedef struct pgdeploys {
    bool loaded;
    int64_t epoch;
    VEC(pgdep) v; /* by number */
    table routes; /* name -> its route (pgdeploy.c) */
    size_t n_draining;
} pgdeploys;

int pgdeploy_init(pgdeploys *d);
void pgdeploy_fini(pgdeploys *d);
/* The copy from deployments_read's result. BERTH_ECORRUPT (a row berthd
 * cannot read) or BERTH_ENOMEM: the copy is left as it was. */
int pgdeploy_load(pgdeploys *d, const PGresult *res);

/* The deployment a new submit or call to topic goes to (0: the implicit
 * one), or -1, refused in st (only draining deployments declare it; no
 * deployment does, under strict channels). */
int64_t pgdeploy_route(const pgdeploys *d, bool strict, const char *topic, engine_status *st);
/* The transport of topic in deployment number when it is a push channel
 * there (the copy's memory); else NULL. */
const char *pgdeploy_push(const pgdeploys *d, uint32_t number, const char *topic);
/* A deployment that is not retired declares topic. */
bool pgdeploy_declared(const pgdeploys *d, const char *topic);
/* The declaration of topic in deployment number: 1 (out set), 0 (none: the
 * implicit deployment's, or a name it does not declare), -1 (a number the
 * copy does not know: it is older than the task). */
int pgdeploy_channel(const pgdeploys *d, uint32_t number, const char *topic, rules_channel *out);

/* ---- a turn's part (pgops.c) ---- */

/* DEPLOY, RETIRE, LIST_DEPLOYMENTS: the checks (p->settled when refused). */
void pgdeploy_plan(pgops_turn *t, pgreq *p);
/* Round one: deploy_lock first when the turn deploys or retires; else a
 * LIST_DEPLOYMENTS' read (with deploys it is read last, after them).
 * False: out of memory. */
bool pgdeploy_stmt_first(pgops_turn *t);
/* Whether the turn deploys or retires (two rounds). */
bool pgdeploy_in(const pgops_turn *t);
/* Between the rounds: the decisions on deploy_lock's rows, their writes. */
bool pgdeploy_between(pgops_turn *t, pgturn *pt);
/* Last of the turn: the gate (wait: the gate-only turn) and the deploys'
 * answers. False: out of memory. */
bool pgdeploy_stmt_last(pgops_turn *t, bool wait);
/* After COMMIT: p's answer, if it is a deployments request. */
void pgdeploy_answer(pgops_turn *t, pgreq *p);
/* After COMMIT: the gate's events; true when the turn changed the
 * deployments (the copy is to be read again, other replicas told). */
bool pgdeploy_committed(pgops_turn *t);
/* Frees what the turn's deployments part holds (pgops_free). */
void pgdeploy_turn_free(pgops_turn *t);

#endif
