/*
 * events.h — the events surface: an nng PUB socket. Each message is an
 * ASCII subject, one NUL byte, then a berth.v1.Event. Subscribers filter
 * by subject prefix ("task.parked.", "task.completed.orders", ...).
 * Best effort: PUB drops for a slow subscriber; state is the record.
 */
#ifndef BERTH_GATEWAY_EVENTS_H
#define BERTH_GATEWAY_EVENTS_H

#include <stddef.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "engine/engine.h"

typedef struct gw_events gw_events;

int gw_events_open(const char *url, nng_tls_config *tls, gw_events **out, char *err, size_t errlen);
const char *gw_events_url(const gw_events *ev);
/* An engine_event_fn: ctx is the gw_events. Copies the event onto a queue
 * that a publisher thread sends from; never blocks on the network. While
 * no subscriber is connected it returns at once (PUB would drop it). */
void gw_events_publish(void *ctx, const engine_event *ev);
void gw_events_close(gw_events *ev);

/* The subject of an event, e.g. "task.parked.orders". */
void gw_event_subject(const engine_event *ev, char *out, size_t len);

#endif
