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
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/check.h"
#include "engine/instance.h"
#include "engine/intake.h"
#include "engine/reply.h"
#include "store/err.h"

__attribute__((format(printf, 5, 6))) static int
refuse(engine_status *st, engine_code code, const char *ec, bool retryable, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_vstatus(st, code, fmt, ap);
    va_end(ap);
    st->engine_code = ec;
    st->retryable = retryable;
    return BERTH_EINVAL;
}

static int validate(engine *e, const inbound *in, engine_status *st)
{
    const channel *c = in->chan;
    uint64_t max = c && c->reply_max_bytes ? c->reply_max_bytes : e->o.payload_max_bytes;
    if (in->payload_len > max) {
        refuse(st, ENGINE_CODE_INVALID_ARGUMENT, ENGINE_EC_VALIDATION_REJECTED, false,
               "result.payload: %zu bytes is over channel %s's reply ceiling of %llu bytes",
               in->payload_len, in->topic->name, (unsigned long long)max);
        snprintf(st->field, sizeof(st->field), "result.payload");
        st->has_limit = true;
        st->limit = max;
        return BERTH_EINVAL;
    }
    if (c != NULL && c->n_content_types > 0) {
        const char *ct = in->content_type ? in->content_type : "";
        bool ok = false;
        for (size_t i = 0; i < c->n_content_types && !ok; i++)
            ok = strcmp(ct, c->content_types[i]) == 0;
        if (!ok)
            return refuse(st, ENGINE_CODE_INVALID_ARGUMENT, ENGINE_EC_VALIDATION_REJECTED, false,
                          "result.content_type: \"%.64s\" is not accepted on channel %s", ct,
                          in->topic->name);
    }
    if (!check_text(in->content_type, ENGINE_CONTENT_TYPE_MAX, false, "result.content_type", st) ||
        !check_headers(in->headers, in->n_headers, "result.headers", st)) {
        st->engine_code = ENGINE_EC_VALIDATION_REJECTED;
        st->retryable = false;
        return BERTH_EINVAL;
    }
    return BERTH_OK;
}

/* The waiting instance a reply resolves, through the parked headers. */
static int correlate(engine *e, const inbound *in, engine_status *st)
{
    if (in->parked == NULL || !in->parked->has_instance)
        return BERTH_OK;
    instance *i = instance_find(e, in->parked->instance_id);
    if (i == NULL || i->ended)
        return BERTH_OK; /* the call has ended: absorbed */
    if (i->state == ENGINE_INSTANCE_BACKOFF)
        return refuse(st, ENGINE_CODE_FAILED_PRECONDITION, ENGINE_EC_RETRY_PENDING, false,
                      "the call's attempt %u timed out and its next attempt is pending: this "
                      "reply cannot resolve it",
                      in->parked->call_attempt);
    /* A reply to an older attempt resolves too; the attempt in flight is
     * then not needed, unless a worker holds it (its reply is absorbed). */
    if (in->parked->call_attempt != i->attempt)
        instance_withdraw(e, i, in->from);
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
