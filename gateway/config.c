/* config.c — see config.h. One table lists every setting once; flags,
 * environment and config file all go through it. */
#include "gateway/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "store/err.h"

typedef enum { S_U64, S_U32, S_DBL, S_STR, S_BOOL, S_CHANNEL } stype;

typedef struct setting {
    const char *name;
    stype type;
    size_t off; /* offset in gw_config */
    const char *help;
} setting;

#define E(f) offsetof(gw_config, eng.f)
#define G(f) offsetof(gw_config, f)

static const setting settings[] = {
    {"data", S_STR, E(data_dir), "data directory (the embedded store)"},
    {"store", S_STR, E(store_uri),
     "a PostgreSQL database instead of the embedded store: postgresql://... (several hosts "
     "allowed) or key=value pairs; any number of berthd may share one"},
    {"operate", S_STR, G(operate_url), "operate surface URL (producers and workers)"},
    {"admin", S_STR, G(admin_url), "admin surface URL (operators; loopback unless a key file)"},
    {"admin-key-file", S_STR, G(admin_key_file),
     "the admin surface's key (at least 32 bytes): requests must carry its HMAC"},
    {"admin-skew-ms", S_U64, G(admin_skew_ms),
     "how far an admin request's ts_ms may be from berthd's clock"},
    {"events", S_STR, G(events_url), "events surface URL (PUB)"},
    {"metrics", S_STR, G(metrics_url),
     "/metrics (Prometheus), /healthz and the console: an http:// URL"},
    {"console", S_BOOL, G(console),
     "the web console at /console/ and its API at /api/v1/ on the metrics URL (--console=false: "
     "neither)"},
    {"metrics-topics-max", S_U32, E(metrics_topics_max),
     "topics with series of their own in /metrics; the rest share topic \"_other\""},
    {"lock-default-ms", S_U64, E(lock_default_ms), "lock when a fetch names none; grace window"},
    {"lock-max-ms", S_U64, E(lock_max_ms), "ceiling for lock_ms"},
    {"wait-default-ms", S_U64, E(wait_default_ms), "long-poll wait when a fetch names none"},
    {"wait-max-ms", S_U64, E(wait_max_ms), "ceiling for wait_ms (below nng's 60 s REQ resend)"},
    {"batch-default", S_U32, E(batch_default), "max_tasks when a fetch names none"},
    {"batch-max", S_U32, E(batch_max), "ceiling for max_tasks and for batch items"},
    {"retries", S_U32, E(retries), "failure budget of a task"},
    {"retries-max", S_U32, E(retries_max), "ceiling for a failure's explicit retries_left"},
    {"retry-max-ms", S_U64, E(retry_max_ms), "ceiling for a failure's retry_in_ms"},
    {"backoff-initial-ms", S_U64, E(backoff_initial_ms), "first pause after a failure"},
    {"backoff-max-ms", S_U64, E(backoff_max_ms), "longest pause after a failure"},
    {"delay-max-ms", S_U64, E(delay_max_ms),
     "ceiling for a submit's or call's delay_ms (and how far ahead not_before_ms may be)"},
    {"priority-default", S_U32, E(priority_default),
     "a task's priority when its submit names none (lower is more urgent)"},
    {"priority-max", S_U32, E(priority_max), "ceiling for a submit's or call's priority"},
    {"backoff-jitter", S_DBL, E(backoff_jitter), "fraction a pause may be cut by, 0 to <1"},
    {"dedup-horizon-ms", S_U64, E(dedup_horizon_ms), "how long idempotency keys are kept"},
    {"payload-max-bytes", S_U32, E(payload_max_bytes), "ceiling for a payload"},
    {"topics-max", S_U32, E(topics_max), "ceiling for the topics of one fetch"},
    {"body-cache-bytes", S_U64, E(body_cache_bytes), "task bodies kept in memory"},
    {"fetch-inflight-max-bytes", S_U64, E(fetch_inflight_max_bytes),
     "task bodies in fetch answers not yet handed to their connections, in all; past it "
     "fetches wait (or answer empty)"},
    {"fetch-max-bytes", S_U64, E(fetch_max_bytes),
     "a fetch answers with fewer tasks rather than more bytes"},
    {"delivery-attempts", S_U32, E(delivery_attempts),
     "failed attempts (parks, pushes) before a delivery is poisoned"},
    {"delivery-backoff-initial-ms", S_U64, E(delivery_backoff_initial_ms),
     "first pause after a failed park or push"},
    {"delivery-backoff-max-ms", S_U64, E(delivery_backoff_max_ms),
     "longest pause after a failed park or push"},
    {"push-timeout-ms", S_U64, E(push_timeout_ms),
     "a push receiver's answer comes within this, or the attempt failed"},
    {"push-inflight-max", S_U32, E(push_inflight_max),
     "deliveries sent to one push channel and unanswered, at most; the rest wait in order"},
    {"push-tls-ca", S_STR, G(push_tls_ca),
     "PEM CAs for nng+req+tls:// receivers (default: the system's)"},
    {"strict-channels", S_BOOL, E(strict_channels),
     "topics no live deployment declares are NOT_FOUND (deploy them, or --channel)"},
    {"waits-max", S_U32, E(waits_max),
     "fetches and awaits waiting at once, in all; more are refused"},
    {"waits-per-connection", S_U32, E(waits_per_owner_max),
     "fetches and awaits one connection may keep waiting; more are refused"},
    {"call-timeout-max-ms", S_U64, E(call_timeout_max_ms),
     "ceiling for a call's retry.timeout_ms (per attempt)"},
    {"call-attempts-max", S_U32, E(call_attempts_max), "ceiling for a call's retry.max_attempts"},
    {"instance-retention-ms", S_U64, E(instance_retention_ms),
     "how long an ended call can still be awaited"},
    {"max-message-bytes", S_U64, G(max_message_bytes), "ceiling for one request message"},
    {"operate-nng", S_BOOL, G(operate_nng),
     "serve a tcp://, tls+tcp:// or ipc:// operate URL with nng's REP socket, not berth's own "
     "server (the admin URL stays on berth's own; ws:// is always nng's)"},
    {"max-connections", S_U32, G(max_connections),
     "operate connections at once; more are closed as they come (0: half the descriptor limit, "
     "at most 10000)"},
    {"idle-timeout-ms", S_U64, G(idle_timeout_ms),
     "close an operate connection that sends nothing this long with nothing in flight (0: never)"},
    {"frame-timeout-ms", S_U64, G(frame_timeout_ms),
     "close an operate connection that takes longer to send a request it began (0: never)"},
    {"buffers-max-bytes", S_U64, G(buffers_max_bytes),
     "operate connections' buffered requests and unread answers, in all; over it, the "
     "connections holding more than their share are paused, then closed"},
    {"contexts", S_U32, G(contexts), "request contexts started at once (nng)"},
    {"contexts-max", S_U32, G(contexts_max), "ceiling the context pool grows to (nng)"},
    {"tls-cert", S_STR, G(tls_cert), "PEM certificate for tls+tcp:// URLs"},
    {"tls-key", S_STR, G(tls_key), "PEM private key for tls+tcp:// URLs"},
    {"channel", S_CHANNEL, G(channels),
     "declare a channel (repeatable): NAME[,transport=pull|nng+req://HOST:PORT|...]"
     "[,reply-max-bytes=N][,content-types=A|B]; the "
     "channels given are the deployment \"boot\", a new version of it when they change"},
    {"config", S_STR, G(config_file), "a config file of \"name = value\" lines"},
};

#define N_SETTINGS (sizeof(settings) / sizeof(settings[0]))

void gw_config_init(gw_config *c)
{
    memset(c, 0, sizeof(*c));
    engine_options_default(&c->eng);
    c->operate_url = "tcp://127.0.0.1:7450";
    c->events_url = "tcp://127.0.0.1:7452";
    c->admin_url = "tcp://127.0.0.1:7451";
    c->metrics_url = "http://127.0.0.1:7453";
    c->console = true;
    c->admin_skew_ms = 300000;
    c->max_message_bytes = 8u << 20;
    c->idle_timeout_ms = 600000;
    c->frame_timeout_ms = 30000;
    c->buffers_max_bytes = 256u << 20;
    c->contexts = 64;
    c->contexts_max = 16384;
}

static const setting *find(const char *name, size_t len)
{
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (strlen(settings[i].name) == len && strncmp(settings[i].name, name, len) == 0)
            return &settings[i];
    return NULL;
}

/* Remembers an allocation of the config's, freed by gw_config_fini. */
static void *own(gw_config *c, void *p)
{
    void **v = p ? realloc(c->owned, (c->n_owned + 1) * sizeof(*v)) : NULL;
    if (v == NULL) {
        free(p);
        return NULL;
    }
    c->owned = v;
    c->owned[c->n_owned++] = p;
    return p;
}

/* Values from the config file outlive its line buffer. */
static char *keep(gw_config *c, const char *s)
{
    return own(c, strdup(s));
}

void gw_config_fini(gw_config *c)
{
    for (size_t i = 0; i < c->n_owned; i++)
        free(c->owned[i]);
    free(c->owned);
    c->owned = NULL;
    c->n_owned = 0;
}

/* One channel declaration: NAME[,reply-max-bytes=N][,content-types=A|B]. */
static int add_channel(gw_config *c, const char *spec, const char *from, char *err, size_t errlen)
{
    if (c->n_channels == GW_CHANNELS_MAX) {
        snprintf(err, errlen, "%s: channel: more than %d channels", from, GW_CHANNELS_MAX);
        return GW_CONFIG_ERROR;
    }
    char *copy = keep(c, spec);
    if (copy == NULL)
        goto bad;
    engine_channel *ch = &c->channels[c->n_channels];
    memset(ch, 0, sizeof(*ch));
    char *save = NULL;
    for (char *part = strtok_r(copy, ",", &save); part != NULL; part = strtok_r(NULL, ",", &save)) {
        if (ch->name == NULL) {
            ch->name = part;
        } else if (strncmp(part, "transport=", 10) == 0 && part[10] != '\0') {
            ch->transport = part + 10;
        } else if (strncmp(part, "reply-max-bytes=", 16) == 0) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(part + 16, &end, 10);
            if (errno != 0 || *end != '\0' || !isdigit((unsigned char)part[16]) || n == 0)
                goto bad;
            ch->reply_max_bytes = n;
        } else if (strncmp(part, "content-types=", 14) == 0) {
            size_t n = 1;
            for (const char *p = part + 14; *p; p++)
                n += *p == '|';
            const char **types = own(c, calloc(n, sizeof(*types)));
            if (types == NULL)
                goto bad;
            char *tsave = NULL;
            size_t k = 0;
            for (char *t = strtok_r(part + 14, "|", &tsave); t != NULL;
                 t = strtok_r(NULL, "|", &tsave))
                types[k++] = t;
            ch->content_types = types;
            ch->n_content_types = k;
        } else {
            goto bad;
        }
    }
    if (ch->name == NULL)
        goto bad;
    c->n_channels++;
    return GW_CONFIG_OK;
bad:
    snprintf(err, errlen,
             "%s: channel: \"%s\" is not "
             "NAME[,transport=T][,reply-max-bytes=N][,content-types=A|B]",
             from, spec);
    return GW_CONFIG_ERROR;
}

static int set(gw_config *c, const setting *s, const char *v, const char *from, char *err,
               size_t errlen)
{
    void *p = (char *)c + s->off;
    char *end = NULL;
    errno = 0;
    switch (s->type) {
    case S_U64:
    case S_U32: {
        if (v == NULL || !isdigit((unsigned char)v[0]))
            goto bad;
        unsigned long long n = strtoull(v, &end, 10);
        if (errno != 0 || *end != '\0' || (s->type == S_U32 && n > UINT32_MAX))
            goto bad;
        if (s->type == S_U64)
            *(uint64_t *)p = n;
        else
            *(uint32_t *)p = (uint32_t)n;
        return GW_CONFIG_OK;
    }
    case S_DBL: {
        if (v == NULL)
            goto bad;
        double d = strtod(v, &end);
        if (errno != 0 || end == v || *end != '\0')
            goto bad;
        *(double *)p = d;
        return GW_CONFIG_OK;
    }
    case S_BOOL:
        if (v == NULL || strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "yes") == 0)
            *(bool *)p = true;
        else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0 || strcmp(v, "no") == 0)
            *(bool *)p = false;
        else
            goto bad;
        return GW_CONFIG_OK;
    case S_STR:
        if (v == NULL || v[0] == '\0')
            goto bad;
        *(const char **)p = v;
        return GW_CONFIG_OK;
    case S_CHANNEL: {
        if (v == NULL || v[0] == '\0')
            goto bad;
        /* Several in one value, separated by ';' (the environment's way). */
        char *all = keep(c, v), *save = NULL;
        if (all == NULL)
            goto bad;
        for (char *one = strtok_r(all, ";", &save); one != NULL; one = strtok_r(NULL, ";", &save))
            if (add_channel(c, one, from, err, errlen) != GW_CONFIG_OK)
                return GW_CONFIG_ERROR;
        return GW_CONFIG_OK;
    }
    }
bad:
    snprintf(err, errlen, "%s: %s: \"%s\" is not a valid value", from, s->name, v ? v : "");
    return GW_CONFIG_ERROR;
}

static void env_name(const char *name, char *out, size_t len)
{
    size_t i = 0;
    for (const char *p = "BERTH_"; *p && i + 1 < len; p++)
        out[i++] = *p;
    for (const char *p = name; *p && i + 1 < len; p++)
        out[i++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    out[i] = '\0';
}

static int load_file(gw_config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "config: cannot read %s: %s", path, strerror(errno));
        return GW_CONFIG_ERROR;
    }
    char line[4096];
    int lineno = 0, rv = GW_CONFIG_OK;
    while (rv == GW_CONFIG_OK && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        char *name = p;
        while (*p && !isspace((unsigned char)*p) && *p != '=')
            p++;
        size_t nlen = (size_t)(p - name);
        while (isspace((unsigned char)*p) || *p == '=')
            p++;
        char *v = p, *e = v + strlen(v);
        while (e > v && isspace((unsigned char)e[-1]))
            *--e = '\0';
        const setting *s = find(name, nlen);
        char from[64];
        snprintf(from, sizeof(from), "%s:%d", path, lineno);
        if (s == NULL) {
            snprintf(err, errlen, "%s: unknown setting \"%.*s\"", from, (int)nlen, name);
            rv = GW_CONFIG_ERROR;
        } else {
            rv = set(c, s, s->type == S_STR ? keep(c, v) : v, from, err, errlen);
        }
    }
    fclose(f);
    return rv;
}

int gw_config_load(gw_config *c, int argc, char **argv, char *err, size_t errlen)
{
    /* The config file first (named by flag or environment), then the
     * environment, then the flags: each overrides what came before. */
    const char *file = getenv("BERTH_CONFIG");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return GW_CONFIG_HELP;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            file = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            file = argv[i] + 9;
    }
    if (file != NULL && load_file(c, file, err, errlen) != GW_CONFIG_OK)
        return GW_CONFIG_ERROR;
    for (size_t i = 0; i < N_SETTINGS; i++) {
        char name[96];
        env_name(settings[i].name, name, sizeof(name));
        const char *v = getenv(name);
        if (v != NULL && set(c, &settings[i], v, name, err, errlen) != GW_CONFIG_OK)
            return GW_CONFIG_ERROR;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", a);
            return GW_CONFIG_ERROR;
        }
        a += 2;
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const setting *s = find(a, nlen);
        if (s == NULL) {
            snprintf(err, errlen, "unknown flag --%.*s (see --help)", (int)nlen, a);
            return GW_CONFIG_ERROR;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (v == NULL && s->type != S_BOOL) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--%s needs a value", s->name);
                return GW_CONFIG_ERROR;
            }
            v = argv[++i];
        }
        if (set(c, s, v, "flag", err, errlen) != GW_CONFIG_OK)
            return GW_CONFIG_ERROR;
    }

    c->eng.channels = c->channels;
    c->eng.n_channels = c->n_channels;
    if (engine_store_is_pg(&c->eng) && strcmp(c->eng.data_dir, "./var/berth") != 0) {
        snprintf(err, errlen, "--store and --data name two stores: give one");
        return GW_CONFIG_ERROR;
    }
    if (engine_options_check(&c->eng, err, errlen) != BERTH_OK)
        return GW_CONFIG_ERROR;
    if (c->eng.wait_max_ms >= 60000) {
        snprintf(err, errlen,
                 "wait-max-ms (%" PRIu64 ") must stay below 60000: nng REQ clients re-send a "
                 "request unanswered for 60 s",
                 c->eng.wait_max_ms);
        return GW_CONFIG_ERROR;
    }
    if (c->max_message_bytes > (1u << 30)) {
        snprintf(err, errlen, "max-message-bytes (%" PRIu64 ") is over 1 GiB",
                 c->max_message_bytes);
        return GW_CONFIG_ERROR;
    }
    if (c->buffers_max_bytes < 4 * c->max_message_bytes) {
        snprintf(err, errlen,
                 "buffers-max-bytes (%" PRIu64 ") must be at least 4 x max-message-bytes (%" PRIu64
                 "): room for a request of each size and its answer",
                 c->buffers_max_bytes, c->max_message_bytes);
        return GW_CONFIG_ERROR;
    }
    if (c->contexts_max > (1u << 20)) {
        snprintf(err, errlen, "contexts-max (%u) is over 1048576", c->contexts_max);
        return GW_CONFIG_ERROR;
    }
    if (c->max_message_bytes <= c->eng.payload_max_bytes) {
        snprintf(err, errlen, "max-message-bytes (%" PRIu64 ") must exceed payload-max-bytes (%u)",
                 c->max_message_bytes, c->eng.payload_max_bytes);
        return GW_CONFIG_ERROR;
    }
    if (c->contexts == 0 || c->contexts > c->contexts_max) {
        snprintf(err, errlen, "contexts (%u) must be at least 1 and at most contexts-max (%u)",
                 c->contexts, c->contexts_max);
        return GW_CONFIG_ERROR;
    }
    if ((c->tls_cert == NULL) != (c->tls_key == NULL)) {
        snprintf(err, errlen, "tls-cert and tls-key go together");
        return GW_CONFIG_ERROR;
    }
    const char *urls[][2] = {
        {"operate", c->operate_url}, {"admin", c->admin_url}, {"events", c->events_url}};
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]) && c->tls_cert == NULL; i++) {
        if (urls[i][1] != NULL && strncmp(urls[i][1], "tls+", 4) == 0) {
            snprintf(err, errlen, "%s %s: a tls+tcp:// URL needs tls-cert and tls-key", urls[i][0],
                     urls[i][1]);
            return GW_CONFIG_ERROR;
        }
    }
    return GW_CONFIG_OK;
}

void gw_config_usage(FILE *f)
{
    gw_config d;
    gw_config_init(&d);
    fprintf(f, "usage: berthd [--setting value | --setting=value]...\n\n"
               "Serves berth's operate surface and events over nng, on the embedded store.\n"
               "Every setting also reads from the environment (BERTH_<NAME>) and from a\n"
               "config file (--config FILE); flags win over the environment, which wins\n"
               "over the file.\n\n");
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        const void *p = (const char *)&d + s->off;
        char def[64] = "";
        switch (s->type) {
        case S_U64:
            snprintf(def, sizeof(def), "%" PRIu64, *(const uint64_t *)p);
            break;
        case S_U32:
            snprintf(def, sizeof(def), "%u", *(const uint32_t *)p);
            break;
        case S_DBL:
            snprintf(def, sizeof(def), "%g", *(const double *)p);
            break;
        case S_BOOL:
            snprintf(def, sizeof(def), "%s", *(const bool *)p ? "true" : "false");
            break;
        case S_STR:
            snprintf(def, sizeof(def), "%s",
                     *(const char *const *)p ? *(const char *const *)p : "");
            break;
        case S_CHANNEL:
            break;
        }
        char env[96];
        env_name(s->name, env, sizeof(env));
        fprintf(f, "  --%-28s %s\n  %-30s default %s; env %s\n", s->name, s->help, "",
                def[0] ? def : "(none)", env);
    }
}
