/* operate.c — see operate.h. */
#include "gateway/operate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/text.h"
#include "store/err.h"

static void *budget_alloc(void *data, size_t size)
{
    gw_decode_budget *b = data;
    if (size > b->cap - b->used) {
        b->over = true;
        return NULL;
    }
    b->used += size;
    return malloc(size);
}

static void budget_free(void *data, void *p)
{
    (void)data;
    free(p);
}

void gw_operate_init(gw_operate *c)
{
    memset(c, 0, sizeof(*c));
    c->budget.a = (ProtobufCAllocator){budget_alloc, budget_free, &c->budget};
}

int gw_operate_begin(gw_operate *c, engine *e, uint64_t owner, const void *data, size_t len,
                     size_t max_msg, engine_done_fn done, void *arg, engine_status *st)
{
    memset(st, 0, sizeof(*st));
    if (len > max_msg) {
        st->code = ENGINE_CODE_RESOURCE_EXHAUSTED;
        snprintf(st->message, sizeof(st->message),
                 "request: %zu bytes is over the ceiling of %zu bytes", len, max_msg);
        snprintf(st->field, sizeof(st->field), "request");
        st->has_limit = true;
        st->limit = max_msg;
        return BERTH_EINVAL;
    }
    c->budget.used = 0;
    c->budget.over = false;
    c->budget.cap = 16 * len + (4u << 20);
    c->req = berth__v1__request__unpack(&c->budget.a, len, data);
    if (c->req == NULL && c->budget.over) {
        st->code = ENGINE_CODE_RESOURCE_EXHAUSTED;
        snprintf(st->message, sizeof(st->message),
                 "request: decoding it would take more than %zu bytes", c->budget.cap);
        snprintf(st->field, sizeof(st->field), "request");
        return BERTH_EINVAL;
    }
    if (c->req == NULL) {
        st->code = ENGINE_CODE_INVALID_ARGUMENT;
        snprintf(st->message, sizeof(st->message),
                 "the request is not a berth.v1.Request (malformed protobuf)");
        return BERTH_EINVAL;
    }
    if (gw_text_check(&berth__v1__request__descriptor, data, len, true, st) != BERTH_OK ||
        gw_request_from_wire(c->req, &c->ereq, &c->arena, st) != BERTH_OK)
        return BERTH_EINVAL;
    c->ereq.owner = owner;
    if (c->peer_gone && (c->ereq.op == ENGINE_OP_FETCH || c->ereq.op == ENGINE_OP_AWAIT_CALL))
        return GW_OPERATE_DROPPED;
    if (engine_exec(e, &c->ereq, done, arg) != BERTH_OK) {
        st->code = ENGINE_CODE_UNAVAILABLE;
        st->engine_code = ENGINE_EC_ENGINE_UNAVAILABLE;
        st->retryable = true;
        snprintf(st->message, sizeof(st->message), "berthd is shutting down");
        return BERTH_ECLOSED;
    }
    return BERTH_OK;
}

void gw_operate_fini(gw_operate *c)
{
    if (c->req != NULL)
        berth__v1__request__free_unpacked(c->req, &c->budget.a);
    c->req = NULL;
    gw_arena_reset(&c->arena);
}

static void op_init(void *call)
{
    gw_operate_init(call);
}

static int op_begin(const void *ctx, void *call, engine *e, uint64_t owner, const void *data,
                    size_t len, size_t max_msg, engine_done_fn done, void *arg, engine_status *st)
{
    (void)ctx;
    return gw_operate_begin(call, e, owner, data, len, max_msg, done, arg, st);
}

static int op_encode(void *call, const engine_reply *r, nng_msg **out)
{
    return gw_encode_reply(r, &((gw_operate *)call)->arena, out);
}

static void op_fini(void *call)
{
    gw_operate_fini(call);
}

const gw_codec gw_operate_codec = {
    .call_size = sizeof(gw_operate),
    .init = op_init,
    .begin = op_begin,
    .encode = op_encode,
    .encode_status = gw_encode_status,
    .fini = op_fini,
};
