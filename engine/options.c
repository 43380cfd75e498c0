/*
 * options.c — the operator's defaults and the consistency check that
 * refuses a contradictory configuration at startup (R6), where somebody is
 * watching, rather than at the first request.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/check.h"
#include "store/err.h"

void engine_options_default(engine_options *o)
{
    memset(o, 0, sizeof(*o));
    o->data_dir = "./var/berth";
    o->lock_default_ms = 30000;
    o->lock_max_ms = 3600000;
    o->wait_default_ms = 10000;
    o->wait_max_ms = 30000;
    o->batch_default = 10;
    o->batch_max = 1000;
    o->retries = 3;
    o->retries_max = 100;
    o->retry_max_ms = 3600000;
    o->backoff_initial_ms = 1000;
    o->backoff_max_ms = 600000;
    o->backoff_jitter = 0.2;
    o->delay_max_ms = 30ull * 24 * 3600 * 1000;
    o->priority_default = 1024;
    o->priority_max = UINT32_MAX;
    o->dedup_horizon_ms = 24ull * 3600 * 1000;
    o->payload_max_bytes = 1u << 20;
    o->fetch_max_bytes = 8u << 20;
    o->fetch_inflight_max_bytes = 256u << 20;
    o->body_cache_bytes = 256u << 20;
    o->topics_max = 64;
    o->delivery_attempts = 20;
    o->delivery_backoff_initial_ms = 1000;
    o->delivery_backoff_max_ms = 60000;
    o->relay_max_per_turn = 10000;
    o->push_timeout_ms = 10000;
    o->push_inflight_max = 64;
    o->turn_max_requests = 4096;
    o->waits_max = 10000;
    o->waits_per_owner_max = 256;
    o->call_timeout_max_ms = 604800000;
    o->call_attempts_max = 100;
    o->instance_retention_ms = 86400000;
    o->timers_max_per_turn = 10000;
    o->metrics_topics_max = 1000;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (msg != NULL && msglen > 0)                                                         \
                snprintf(msg, msglen, __VA_ARGS__);                                                \
            return BERTH_EINVAL;                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_DEFAULT(def, max, dname, mname)                                                      \
    CHECK((def) <= (max), "%s (%" PRIu64 ") exceeds its ceiling %s (%" PRIu64 ")", dname,          \
          (uint64_t)(def), mname, (uint64_t)(max))

/* Time settings stay below 2^40 ms (35 years): now + any of them fits. */
#define TIME_MAX (1ull << 40)
#define CHECK_TIME(v, name)                                                                        \
    CHECK((v) < TIME_MAX, "%s (%" PRIu64 ") is over the largest time berth takes (%" PRIu64 ")",   \
          name, (uint64_t)(v), (uint64_t)TIME_MAX)

int engine_options_check(const engine_options *o, char *msg, size_t msglen)
{
    CHECK_TIME(o->lock_max_ms, "lock-max-ms");
    CHECK_TIME(o->wait_max_ms, "wait-max-ms");
    CHECK_TIME(o->retry_max_ms, "retry-max-ms");
    CHECK_TIME(o->backoff_max_ms, "backoff-max-ms");
    CHECK_TIME(o->delivery_backoff_max_ms, "delivery-backoff-max-ms");
    CHECK_TIME(o->dedup_horizon_ms, "dedup-horizon-ms");
    CHECK_TIME(o->delay_max_ms, "delay-max-ms");
    CHECK_DEFAULT(o->priority_default, o->priority_max, "priority-default", "priority-max");
    CHECK(o->lock_default_ms > 0, "lock-default-ms must be greater than zero");
    CHECK_DEFAULT(o->lock_default_ms, o->lock_max_ms, "lock-default-ms", "lock-max-ms");
    CHECK_DEFAULT(o->wait_default_ms, o->wait_max_ms, "wait-default-ms", "wait-max-ms");
    CHECK(o->batch_default > 0, "batch-default must be greater than zero");
    CHECK_DEFAULT(o->batch_default, o->batch_max, "batch-default", "batch-max");
    CHECK(o->retries > 0, "retries must be greater than zero");
    CHECK_DEFAULT(o->retries, o->retries_max, "retries", "retries-max");
    CHECK(o->backoff_initial_ms > 0, "backoff-initial-ms must be greater than zero");
    CHECK_DEFAULT(o->backoff_initial_ms, o->backoff_max_ms, "backoff-initial-ms", "backoff-max-ms");
    CHECK(o->backoff_jitter >= 0 && o->backoff_jitter < 1,
          "backoff-jitter must be at least 0 and below 1");
    CHECK(o->dedup_horizon_ms > 0, "dedup-horizon-ms must be greater than zero");
    CHECK(o->payload_max_bytes > 0, "payload-max-bytes must be greater than zero");
    CHECK(o->fetch_inflight_max_bytes >= o->fetch_max_bytes,
          "fetch-inflight-max-bytes (%" PRIu64 ") must be at least fetch-max-bytes (%" PRIu64 ")",
          o->fetch_inflight_max_bytes, o->fetch_max_bytes);
    CHECK(o->fetch_max_bytes >= o->payload_max_bytes,
          "fetch-max-bytes (%" PRIu64 ") must be at least payload-max-bytes (%u)",
          o->fetch_max_bytes, o->payload_max_bytes);
    CHECK(o->topics_max > 0, "topics-max must be greater than zero");
    CHECK(o->delivery_backoff_initial_ms > 0,
          "delivery-backoff-initial-ms must be greater than zero");
    CHECK_DEFAULT(o->delivery_backoff_initial_ms, o->delivery_backoff_max_ms,
                  "delivery-backoff-initial-ms", "delivery-backoff-max-ms");
    CHECK(o->relay_max_per_turn > 0, "relay-max-per-turn must be greater than zero");
    CHECK_TIME(o->push_timeout_ms, "push-timeout-ms");
    CHECK(o->push_timeout_ms > 0, "push-timeout-ms must be greater than zero");
    CHECK(o->push_inflight_max > 0, "push-inflight-max must be greater than zero");
    CHECK(o->turn_max_requests > 0, "turn-max-requests must be greater than zero");
    CHECK(o->waits_max > 0, "waits-max must be greater than zero");
    CHECK(o->waits_per_owner_max > 0, "waits-per-connection must be greater than zero");
    CHECK_TIME(o->call_timeout_max_ms, "call-timeout-max-ms");
    CHECK_TIME(o->instance_retention_ms, "instance-retention-ms");
    CHECK(o->call_timeout_max_ms > 0, "call-timeout-max-ms must be greater than zero");
    CHECK(o->call_attempts_max > 0, "call-attempts-max must be greater than zero");
    CHECK(o->instance_retention_ms > 0, "instance-retention-ms must be greater than zero");
    CHECK(o->timers_max_per_turn > 0, "timers-max-per-turn must be greater than zero");
    CHECK(o->metrics_topics_max > 0, "metrics-topics-max must be greater than zero");
    for (size_t i = 0; i < o->n_channels; i++) {
        const engine_channel *c = &o->channels[i];
        engine_status st;
        CHECK(check_topic(c->name, "channel", &st), "channel %zu: %s", i, st.message);
        CHECK(c->transport == NULL || check_transport(c->transport) != CHECK_TRANSPORT_NONE,
              "channel %s: transport \"%s\" has no sink (pull, nng+req://, nng+req+ipc://, "
              "nng+req+tls://)",
              c->name, c->transport);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(o->channels[j].name, c->name) != 0, "channel %s is declared twice",
                  c->name);
    }
    return BERTH_OK;
}
