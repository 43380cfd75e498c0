/* text.c — see text.h. */
#include "gateway/text.h"

#include <stdio.h>
#include <string.h>

#include "store/err.h"

#define DEPTH_MAX  16 /* deeper than any berth message nests */
#define FIELDS_MAX 64 /* repeated fields counted per message */

/* The fields being walked, outermost first: the name of the one refused
 * is built from them only then, never on the way. */
typedef struct frame {
    const ProtobufCFieldDescriptor *f;
    unsigned index; /* its position, for a repeated field */
} frame;

typedef struct walk {
    frame stack[DEPTH_MAX + 1];
    bool envelope; /* the outermost field is the method: left out */
    engine_status *st;
} walk;

static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* The field of number id: protobuf-c keeps d->fields sorted by number,
 * and in berth's messages numbers run from 1 without gaps, so this is
 * usually one comparison; else protobuf-c's own search. */
static const ProtobufCFieldDescriptor *field_of(const ProtobufCMessageDescriptor *d, uint64_t id)
{
    if (id - 1 < d->n_fields && d->fields[id - 1].id == id)
        return &d->fields[id - 1];
    return id <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)id) : NULL;
}

/* depth: how many stack frames name the refused field. */
static int refuse(walk *w, int depth, const char *why, size_t at)
{
    char name[192] = "";
    size_t n = 0;
    for (int i = w->envelope ? 1 : 0; i < depth && n < sizeof(name); i++) {
        const frame *fr = &w->stack[i];
        n += (size_t)snprintf(name + n, sizeof(name) - n, n ? ".%s" : "%s", fr->f->name);
        if (fr->f->label == PROTOBUF_C_LABEL_REPEATED && n < sizeof(name))
            n += (size_t)snprintf(name + n, sizeof(name) - n, "[%u]", fr->index);
    }
    if (name[0] == '\0')
        snprintf(name, sizeof(name), "request");
    memset(w->st, 0, sizeof(*w->st));
    w->st->code = ENGINE_CODE_INVALID_ARGUMENT;
    snprintf(w->st->message, sizeof(w->st->message), "%s: %s (byte %zu)", name, why, at);
    snprintf(w->st->field, sizeof(w->st->field), "%.63s", name);
    return BERTH_EINVAL;
}

static int walk_message(walk *w, const ProtobufCMessageDescriptor *d, const uint8_t *p,
                        const uint8_t *end, int depth)
{
    unsigned seen[FIELDS_MAX];
    size_t n_seen = d->n_fields < FIELDS_MAX ? d->n_fields : FIELDS_MAX;
    memset(seen, 0, n_seen * sizeof(seen[0]));
    while (p < end) {
        uint64_t tag, n;
        if (!varint(&p, end, &tag))
            return refuse(w, depth, "malformed", 0);
        switch (tag & 7) {
        case 0:
            if (!varint(&p, end, &n))
                return refuse(w, depth, "malformed", 0);
            continue;
        case 1:
            if (end - p < 8)
                return refuse(w, depth, "malformed", 0);
            p += 8;
            continue;
        case 5:
            if (end - p < 4)
                return refuse(w, depth, "malformed", 0);
            p += 4;
            continue;
        case 2:
            break;
        default: /* groups: protobuf-c would not have unpacked them */
            return refuse(w, depth, "malformed", 0);
        }
        if (!varint(&p, end, &n) || n > (uint64_t)(end - p))
            return refuse(w, depth, "malformed", 0);
        const uint8_t *v = p;
        p += n;
        const ProtobufCFieldDescriptor *f = field_of(d, tag >> 3);
        if (f == NULL || (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE))
            continue; /* bytes, packed numbers, unknown fields */
        size_t k = (size_t)(f - d->fields);
        w->stack[depth] = (frame){f, k < n_seen ? seen[k]++ : 0};
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            const uint8_t *nul = memchr(v, 0, (size_t)n);
            if (nul != NULL)
                return refuse(w, depth + 1, "a NUL byte is not allowed in text", (size_t)(nul - v));
        } else if (depth >= DEPTH_MAX) {
            return refuse(w, depth + 1, "nested too deep", 0);
        } else {
            int rv = walk_message(w, f->descriptor, v, v + n, depth + 1);
            if (rv != BERTH_OK)
                return rv;
        }
    }
    return BERTH_OK;
}

int gw_text_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                  bool top_is_envelope, engine_status *st)
{
    /* No zero byte anywhere, no NUL in any string: the usual case costs
     * one memchr. */
    if (memchr(data, 0, len) == NULL)
        return BERTH_OK;
    walk w = {.envelope = top_is_envelope, .st = st};
    return walk_message(&w, d, data, data + len, 0);
}
