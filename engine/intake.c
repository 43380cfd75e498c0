/*
 * intake.c — the one path every inbound message takes: validate, dedup,
 * correlate (R9, R10).
 *
 * A worker's completion is rebuilt into an inbound message and goes
 * through here like any other, so it can do nothing a message on that
 * channel could not:
 *   1. Validation: the channel's reply size ceiling and allowed content
 *      types, and no header under the reserved "berth-" prefix.
 *   2. Dedup: none is needed for completions. A completion's dispatch and
 *      its task's delete share one batch (guard.c), so a completion cannot
 *      be offered twice: a repeat finds no task. The inbox column family
 *      is kept for sources that outlive their batch; none does in this
 *      format version.
 *   3. Correlation: the parked headers carry a call's instance, which
 *      the reply ends (instance.c): RESOLVED with the result, or with the
 *      worker's error for a refusal. A reply while the call backs off
 *      between attempts is refused RETRY_PENDING; one to a call that has
 *      ended is absorbed. A task that is not a call correlates with
 *      nothing.
 * A refusal carries an engine code and says whether retrying can help:
 * VALIDATION_REJECTED never will (the same message fails the same way),
 * ENGINE_UNAVAILABLE may.
 *
 * Engine thread only; writes go into the turn's batch.
 */
#include "engine/instance.h"
#include "engine/intake.h"
#include "engine/rules.h"
#include "store/err.h"

static int validate(engine *e, const inbound *in, engine_status *st)
{
    const channel *c = in->chan;
    rules_channel rc = {0};
    if (c != NULL)
        rc = (rules_channel){.reply_max_bytes = c->reply_max_bytes,
                             .content_types = c->content_types,
                             .n_content_types = c->n_content_types};
    rules_reply rr = {.payload_len = in->payload_len,
                      .content_type = in->content_type,
                      .headers = in->headers,
                      .n_headers = in->n_headers};
    return rules_intake_validate(&e->o, c != NULL ? &rc : NULL, in->topic->name, &rr, st)
               ? BERTH_OK
               : BERTH_EINVAL;
}

/* The waiting instance a reply resolves, through the parked headers. */
static int correlate(engine *e, const inbound *in, engine_status *st)
{
    if (in->parked == NULL || !in->parked->has_instance)
        return BERTH_OK;
    instance *i = instance_find(e, in->parked->instance_id);
    rules_call c = {.found = i != NULL};
    if (i != NULL)
        c = (rules_call){
            .found = true, .ended = i->ended, .state = i->state, .attempt = i->attempt};
    switch (rules_correlate(&c, in->parked->call_attempt, st)) {
    case RULES_CORR_ABSORB:
        return BERTH_OK; /* the call has ended: absorbed */
    case RULES_CORR_RETRY_PENDING:
        return BERTH_EINVAL;
    case RULES_CORR_RESOLVE_WITHDRAW:
        instance_withdraw(e, i, in->from);
        break;
    case RULES_CORR_RESOLVE:
        break;
    }
    if (in->error != NULL)
        return instance_end(e, i, ENGINE_INSTANCE_RESOLVED, NULL, in->error);
    engine_result res = {
        .payload = in->payload,
        .payload_len = in->payload_len,
        .content_type = in->content_type,
        .headers = in->headers,
        .n_headers = in->n_headers,
    };
    return instance_end(e, i, ENGINE_INSTANCE_RESOLVED, &res, NULL);
}

void intake_set_reply(inbound *in, const engine_result *result, const store_body *parked)
{
    if (in->error != NULL)
        return;
    if (result != NULL) {
        in->payload = result->payload;
        in->payload_len = result->payload_len;
        in->content_type = result->content_type;
        in->headers = result->headers;
        in->n_headers = result->n_headers;
    } else {
        in->payload = parked->payload;
        in->payload_len = parked->payload_len;
        in->content_type = parked->content_type;
    }
}

int intake_dispatch(engine *e, const inbound *in, engine_status *st)
{
    int rv = in->error ? BERTH_OK : validate(e, in, st);
    if (rv != BERTH_OK)
        return rv;
    return correlate(e, in, st);
}
