/* relay.h — the outbox relay and its sinks (R3, R4). Engine thread. */
#ifndef BERTH_ENGINE_RELAY_H
#define BERTH_ENGINE_RELAY_H

#include "engine/core.h"

/* Hands due deliveries to their sinks. Nonzero: the turn failed. */
int relay_run(engine *e);
/* Writes the outbox rows of deliveries still fresh at the end of a turn. */
void relay_flush_fresh(engine *e);
/* After a failed turn (memory reloaded): its parks count as failed
 * attempts. Nonzero: the accounting itself failed (turn_fail). */
int relay_parks_failed(engine *e, const berth_id_bytes *ids, size_t n, const char *why);
/* The retry_delivery request. */
int relay_retry_delivery(engine *e, pending *p);
/* A push receiver's answer (ENGINE_OP_PUSH_ACK). */
int relay_push_ack(engine *e, pending *p);

#endif
