/*
 * config.h — berthd's settings: flags, their environment twins and an
 * optional config file, in that order of precedence over the defaults.
 *
 *   --lock-max-ms 60000      --lock-max-ms=60000
 *   BERTH_LOCK_MAX_MS=60000  (the flag's name, upper case, - as _)
 *   --config FILE / BERTH_CONFIG: lines "lock-max-ms = 60000", # comments
 *
 * --channel is repeatable (in the environment: specs separated by ';'):
 *   --channel orders,reply-max-bytes=65536,content-types=application/json|text/plain
 *
 * The names are part of the operator contract. A setting that does not
 * parse, or options that contradict themselves, are refused with a message
 * naming the setting (berthd exits 2).
 */
#ifndef BERTH_GATEWAY_CONFIG_H
#define BERTH_GATEWAY_CONFIG_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"

#define GW_CHANNELS_MAX 256

typedef struct gw_config {
    engine_options eng;
    const char *operate_url;
    const char *admin_url;
    const char *admin_key_file; /* NULL: the admin surface binds loopback or ipc only */
    uint64_t admin_skew_ms;
    const char *events_url;
    const char *metrics_url;
    bool console;         /* the web console on the metrics listener (gateway/console.h) */
    const char *tls_cert; /* PEM files for tls+tcp:// URLs */
    const char *tls_key;
    const char *push_tls_ca; /* CAs a push receiver's certificate is checked against */
    uint64_t max_message_bytes;
    bool operate_nng; /* the operate URL (tcp://, tls+tcp://, ipc://) on nng's REP socket,
                         not gateway/sp.c; the admin URL stays on gateway/sp.c */
    uint32_t contexts;
    uint32_t contexts_max;
    uint32_t max_connections;   /* 0: half the descriptor limit, at most 10,000 */
    uint64_t idle_timeout_ms;   /* 0: never */
    uint64_t frame_timeout_ms;  /* 0: never */
    uint64_t buffers_max_bytes; /* gateway/sp.c's memory budget (sp.h) */
    const char *config_file;
    engine_channel channels[GW_CHANNELS_MAX]; /* --channel, in order */
    size_t n_channels;
    void **owned; /* what parsing allocated; gw_config_fini frees it */
    size_t n_owned;
} gw_config;

enum {
    GW_CONFIG_OK = 0,
    GW_CONFIG_HELP = 1,  /* --help was asked for: usage printed */
    GW_CONFIG_ERROR = 2, /* the message is in err */
};

void gw_config_init(gw_config *c);
/* Applies the config file, the environment and argv, then checks. Strings
 * point into argv, the environment or memory kept for the process. */
int gw_config_load(gw_config *c, int argc, char **argv, char *err, size_t errlen);
void gw_config_usage(FILE *f);
/* Frees what gw_config_load allocated (config file values, channels). */
void gw_config_fini(gw_config *c);

#endif
