/*
 * args.c — turning berth's arguments into what a request carries: numbers,
 * payloads (an argument, or stdin for "-"), and when and how urgently a
 * submit or a call runs (--delay, --at, --priority). A bad value is a
 * usage error told here, so that a typo never becomes a request.
 * berth.c (option values) and the command files call these.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "tools/clients/c/when.h"

bool cli_parse_u64(const char *s, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

uint8_t *cli_read_arg(const char *arg, size_t *len)
{
    if (arg == NULL) {
        *len = 0;
        return NULL;
    }
    if (strcmp(arg, "-") != 0) {
        *len = strlen(arg);
        return (uint8_t *)strdup(arg);
    }
    size_t cap = 65536, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf != NULL && (got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (b == NULL)
                free(buf);
            buf = b;
        }
    }
    *len = n;
    return buf;
}

const char *cli_admin_id(const opts *o)
{
    if (o->npos != 2) {
        fprintf(stderr, "berth admin %s: ID\n", o->pos[0]);
        return NULL;
    }
    return o->pos[1];
}

/* When and how urgently, checked. */
typedef struct when {
    bool has_delay, has_at, has_priority;
    uint64_t delay_ms, at_ms; /* at_ms: Unix ms */
    uint32_t priority;
} when;

static int when_of(const opts *o, when *w)
{
    char err[200];
    memset(w, 0, sizeof(*w));
    if (o->delay != NULL && o->at != NULL) {
        fprintf(stderr, "berth: give --delay or --at, not both\n");
        return EX_USAGE;
    }
    if (o->delay != NULL &&
        !(w->has_delay = when_duration_ms(o->delay, &w->delay_ms, err, sizeof(err)))) {
        fprintf(stderr, "berth: --delay %s\n", err);
        return EX_USAGE;
    }
    if (o->at != NULL && !(w->has_at = when_instant_ms(o->at, &w->at_ms, err, sizeof(err)))) {
        fprintf(stderr, "berth: --at %s\n", err);
        return EX_USAGE;
    }
    if (o->has_priority && o->priority > UINT32_MAX) {
        fprintf(stderr, "berth: --priority is at most %" PRIu32 "\n", UINT32_MAX);
        return EX_USAGE;
    }
    w->has_priority = o->has_priority;
    w->priority = (uint32_t)o->priority;
    return EX_OK;
}

int cli_when_into(const opts *o, protobuf_c_boolean *has_delay, uint64_t *delay,
                  protobuf_c_boolean *has_at, uint64_t *at, protobuf_c_boolean *has_priority,
                  uint32_t *priority)
{
    when w;
    int ex = when_of(o, &w);
    *has_delay = w.has_delay;
    *delay = w.delay_ms;
    *has_at = w.has_at;
    *at = w.at_ms;
    *has_priority = w.has_priority;
    *priority = w.priority;
    return ex;
}
