/* text.c — see text.h. */
#include "gateway/text.h"

#include <stdio.h>
#include <string.h>

#include "engine/utf8.h"
#include "store/err.h"

#define DEPTH_MAX  16 /* deeper than any berth message nests */
#define FIELDS_MAX 64 /* repeated fields counted per message */

typedef struct walk {
    char path[192]; /* the field's name so far */
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

static int refuse(walk *w, const char *why, size_t at)
{
    const char *name = w->path[0] ? w->path : "request";
    memset(w->st, 0, sizeof(*w->st));
    w->st->code = ENGINE_CODE_INVALID_ARGUMENT;
    snprintf(w->st->message, sizeof(w->st->message), "%s: %s (byte %zu)", name, why, at);
    snprintf(w->st->field, sizeof(w->st->field), "%.63s", name);
    return BERTH_EINVAL;
}

static int walk_message(walk *w, const ProtobufCMessageDescriptor *d, const uint8_t *p,
                        const uint8_t *end, int depth, bool envelope)
{
    unsigned seen[FIELDS_MAX] = {0};
    size_t base = strlen(w->path);
    while (p < end) {
        uint64_t tag, n;
        if (!varint(&p, end, &tag))
            return refuse(w, "malformed", 0);
        switch (tag & 7) {
        case 0:
            if (!varint(&p, end, &n))
                return refuse(w, "malformed", 0);
            continue;
        case 1:
            if (end - p < 8)
                return refuse(w, "malformed", 0);
            p += 8;
            continue;
        case 5:
            if (end - p < 4)
                return refuse(w, "malformed", 0);
            p += 4;
            continue;
        case 2:
            break;
        default: /* groups: protobuf-c would not have unpacked them */
            return refuse(w, "malformed", 0);
        }
        if (!varint(&p, end, &n) || n > (uint64_t)(end - p))
            return refuse(w, "malformed", 0);
        const uint8_t *v = p;
        p += n;
        const ProtobufCFieldDescriptor *f =
            tag >> 3 <= UINT32_MAX
                ? protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3))
                : NULL;
        if (f == NULL || (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE))
            continue; /* bytes, packed numbers, unknown fields */

        /* This field's name: "items[2]", "headers[0]", "topic". */
        w->path[base] = '\0';
        if (!envelope) {
            size_t at = base;
            if (at > 0 && at < sizeof(w->path) - 1)
                w->path[at++] = '.';
            int k = (int)(f - d->fields);
            if (f->label == PROTOBUF_C_LABEL_REPEATED && k >= 0 && k < FIELDS_MAX)
                snprintf(w->path + at, sizeof(w->path) - at, "%s[%u]", f->name, seen[k]++);
            else
                snprintf(w->path + at, sizeof(w->path) - at, "%s", f->name);
        }
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            size_t ok = utf8_valid_prefix(v, (size_t)n);
            if (ok < n)
                return refuse(
                    w, v[ok] == 0 ? "a NUL byte is not allowed in text" : "not valid UTF-8", ok);
        } else if (depth >= DEPTH_MAX) {
            return refuse(w, "nested too deep", 0);
        } else {
            int rv = walk_message(w, f->descriptor, v, v + n, depth + 1, false);
            if (rv != BERTH_OK)
                return rv;
        }
    }
    w->path[base] = '\0';
    return BERTH_OK;
}

int gw_text_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                  bool top_is_envelope, engine_status *st)
{
    walk w = {.path = "", .st = st};
    return walk_message(&w, d, data, data + len, 0, top_is_envelope);
}
