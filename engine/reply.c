/* reply.c — see reply.h. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/mem.h"
#include "engine/reply.h"
#include "engine/utf8.h"

typedef struct reply_block {
    struct reply_block *next;
    void (*fini)(void *data);
    max_align_t data[];
} reply_block;

engine_reply *reply_alloc(engine_op op)
{
    engine_reply *r = mem_calloc(1, sizeof(*r));
    if (r != NULL)
        r->op = op;
    return r;
}

static void *block_add(engine_reply *r, size_t n, void (*fini)(void *))
{
    reply_block *b = mem_calloc(1, sizeof(*b) + n);
    if (b == NULL)
        return NULL;
    b->fini = fini;
    b->next = r->priv;
    r->priv = b;
    return b->data;
}

void *reply_mem(engine_reply *r, size_t n)
{
    return block_add(r, n, NULL);
}

char *reply_strdup(engine_reply *r, const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = reply_mem(r, n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

static void body_fini(void *p)
{
    store_body_clear(p);
}

store_body *reply_body(engine_reply *r)
{
    return block_add(r, sizeof(store_body), body_fini);
}

static void instance_fini(void *p)
{
    store_instance_clear(p);
}

store_instance *reply_instance_row(engine_reply *r)
{
    return block_add(r, sizeof(store_instance), instance_fini);
}

void reply_reset(engine_reply *r)
{
    engine_op op = r->op;
    reply_block *b = r->priv;
    while (b != NULL) {
        reply_block *next = b->next;
        if (b->fini != NULL)
            b->fini(b->data);
        free(b);
        b = next;
    }
    memset(r, 0, sizeof(*r));
    r->op = op;
}

void engine_reply_free(engine_reply *r)
{
    if (r == NULL)
        return;
    reply_reset(r);
    free(r);
}

void reply_vstatus(engine_status *st, engine_code code, const char *fmt, va_list ap)
{
    memset(st, 0, sizeof(*st));
    st->code = code;
    vsnprintf(st->message, sizeof(st->message), fmt, ap);
    utf8_cut(st->message); /* an echo of input cut mid-character stays text */
}

void reply_status(engine_status *st, engine_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_vstatus(st, code, fmt, ap);
    va_end(ap);
}

void reply_over_ceiling(engine_status *st, const char *field, uint64_t value, uint64_t limit)
{
    reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "%s: %" PRIu64 " is over the ceiling %" PRIu64,
                 field, value, limit);
    snprintf(st->field, sizeof(st->field), "%s", field);
    st->has_limit = true;
    st->limit = limit;
}

void reply_unavailable(engine_status *st, const char *what)
{
    reply_status(st, ENGINE_CODE_UNAVAILABLE, "%s", what);
    st->engine_code = ENGINE_EC_ENGINE_UNAVAILABLE;
    st->retryable = true;
}

void reply_no_memory(engine_status *st)
{
    reply_status(st, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory: nothing was done; try again");
    st->engine_code = ENGINE_EC_ENGINE_UNAVAILABLE;
    st->retryable = true;
}
