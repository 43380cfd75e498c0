/*
 * text.h — no `string` field of a request holds a NUL byte, checked on
 * the request's own bytes.
 *
 * protobuf-c hands a string field over as a C string: a NUL byte inside
 * it would cut it there, so "order-1\0A" and "order-1\0B" would be one
 * idempotency key, and a lock token followed by "\0junk" would pass. The
 * lengths are only on the wire, so this walks the wire: a field whose
 * descriptor says `string`, at any depth, that holds a NUL makes the
 * request INVALID_ARGUMENT naming the field as the engine names fields
 * ("idempotency_key", "items[2].topic", "result.headers[0].key": the
 * method's own name is left out). Never both readings of one input. A
 * request with no zero byte at all (most) costs one memchr. The rest of
 * what text must be (UTF-8) the engine checks on every text it takes
 * (engine/check.c). Any thread.
 */
#ifndef BERTH_GATEWAY_TEXT_H
#define BERTH_GATEWAY_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "engine/engine.h"

/* data is a message of type d that protobuf-c unpacked. BERTH_OK, or
 * BERTH_EINVAL with st saying which field and why. top_is_envelope: the
 * outermost fields are the method names, left out of the field's name. */
int gw_text_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                  bool top_is_envelope, engine_status *st);

#endif
