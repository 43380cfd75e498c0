/*
 * deploy.h — deployments: versions of channel declarations, the routes
 * that send new work to the live one, and the retirement gate (R14, R15).
 *
 * A deployment id has versions 1, 2, ...; deploying an id again with other
 * channels makes the next version LIVE and turns the one before DRAINING.
 * A channel name is declared by at most one LIVE deployment. New submits
 * and calls go to it; a name that only DRAINING deployments declare takes
 * nothing new (FAILED_PRECONDITION); a name nobody declares is a pull
 * channel of the implicit deployment, unless strict_channels.
 *
 * Every delivery, task and call belongs to the deployment whose channel
 * took it (Body.deployment), and counts toward it (core.h). A DRAINING
 * deployment retires, durably and with the event deployment.retired.<id>,
 * at the end of the first turn in which it holds nothing pending: no
 * outbox row that is not poisoned, no task that is not terminal, no call
 * with an attempt left (between two attempts, or waiting on one that is
 * not its last: it may still re-drive into the deployment). An operator
 * who retries a terminal task or a poisoned delivery of a RETIRED
 * deployment makes it hold something again: it is DRAINING until that is
 * done, then retires again.
 *
 * Engine thread only.
 */
#ifndef BERTH_ENGINE_DEPLOY_H
#define BERTH_ENGINE_DEPLOY_H

#include "engine/core.h"

/* Reads every deployment from the store and builds the routes
 * (recover_load: at open, after a failed turn and at a reopen, before the
 * deliveries and tasks that name them). BERTH_E*, with a message in err. */
int deploy_load(engine *e, char *err, size_t errlen);
/* Frees every deployment and route (the implicit one stays, emptied). */
void deploy_clear(engine *e);
/* Deploys o's channels as ENGINE_BOOT_DEPLOYMENT unless its live version
 * already declares exactly them: one synced write, before the engine
 * serves. */
int deploy_boot(engine *e, const engine_options *o, char *err, size_t errlen);

/* The declaration a new submit or call to topic goes to: NULL for the
 * implicit deployment. NULL with st set when it is refused (a channel
 * that only draining deployments declare; an undeclared topic under
 * strict_channels). */
const channel *deploy_route(engine *e, const char *name, engine_status *st);
/* A deployment that is not retired declares topic. */
bool deploy_declared(engine *e, const char *name);
/* The declaration of topic in deployment number (Body.deployment): NULL
 * for 0, and for a number or a name the store does not know (the topic is
 * then served as the implicit deployment's). */
const channel *deploy_channel_of(engine *e, uint32_t number, const char *name);

/* Work of d came back (an operator's retry): a RETIRED d drains again.
 * turn_fail on error. */
int deploy_redrain(engine *e, deployment *d);
/* End of a turn: every DRAINING deployment that holds nothing pending
 * retires. turn_fail on error. */
int deploy_gate(engine *e);

/* Request handlers (actor.c). */
int deploy_apply(engine *e, pending *p);
int deploy_retire(engine *e, pending *p);
int deploy_list(engine *e, pending *p);

/* Whole-state invariants of the deployments' counters (state_check). */
void deploy_check(engine *e);

#endif
