/*
 * intake.h — the one path every inbound message takes (R9, R10). See
 * intake.c. Engine thread only.
 */
#ifndef BERTH_ENGINE_INTAKE_H
#define BERTH_ENGINE_INTAKE_H

#include "engine/core.h"

typedef struct inbound {
    topic *topic;
    const channel *chan; /* its channel's declaration (NULL: the implicit one's defaults) */
    const uint8_t *payload;
    size_t payload_len;
    const char *content_type;
    const engine_header *headers; /* set by the sender: never reserved */
    size_t n_headers;
    const store_body *parked;  /* the parked delivery: correlation headers, or NULL
                                  for a task that is not a call */
    const engine_error *error; /* a refusal (R12): the reply is this error, no payload */
    const task *from;          /* the task it answers (left alone by what it resolves) */
} inbound;

/* Fills in's reply when it is not a refusal: result, or else (NULL) the
 * parked request's payload, re-delivered. */
void intake_set_reply(inbound *in, const engine_result *result, const store_body *parked);

/* 0: accepted, and whatever it resolves is written into the turn's batch
 * (a call's instance ends; a reply to an instance that has ended already
 * is absorbed: accepted, nothing changes).
 * Otherwise the refusal is in st, with its engine code and retryable flag
 * (R10), and nothing was written. */
int intake_dispatch(engine *e, const inbound *in, engine_status *st);

#endif
