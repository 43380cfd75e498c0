/*
 * reply.h — engine replies and statuses.
 *
 * A reply owns everything its pointers reach: blocks chained on r->priv,
 * each freed (after its optional finaliser) by engine_reply_free(). So
 * a fetch's payloads point straight into the decoded bodies, with no copy.
 * Any thread (a reply belongs to one thread at a time).
 */
#ifndef BERTH_ENGINE_REPLY_H
#define BERTH_ENGINE_REPLY_H

#include <stdarg.h>
#include <stdint.h>

#include "engine/engine.h"
#include "store/records.h"

engine_reply *reply_alloc(engine_op op);
/* Memory freed with the reply. NULL on allocation failure. */
void *reply_mem(engine_reply *r, size_t n);
/* NULL for NULL, and on allocation failure. */
char *reply_strdup(engine_reply *r, const char *s);
/* A store_body whose decoded memory is freed with the reply. */
store_body *reply_body(engine_reply *r);
/* A store_instance whose decoded memory is freed with the reply. */
store_instance *reply_instance_row(engine_reply *r);
/* Frees everything a reply holds except the reply itself, keeping op. */
void reply_reset(engine_reply *r);

/* A status of code with a formatted message (reset first; a message
 * never ends mid-character). */
__attribute__((format(printf, 3, 0))) void reply_vstatus(engine_status *st, engine_code code,
                                                         const char *fmt, va_list ap);
__attribute__((format(printf, 3, 4))) void reply_status(engine_status *st, engine_code code,
                                                        const char *fmt, ...);
/* R6: INVALID_ARGUMENT naming the field, the value sent and the ceiling. */
void reply_over_ceiling(engine_status *st, const char *field, uint64_t value, uint64_t limit);
/* UNAVAILABLE, engine code ENGINE_UNAVAILABLE, retryable. */
void reply_unavailable(engine_status *st, const char *what);
/* RESOURCE_EXHAUSTED for a request that found no memory before it changed
 * anything: retryable. */
void reply_no_memory(engine_status *st);

#endif
