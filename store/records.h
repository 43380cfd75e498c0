/*
 * records.h — the store's record types and their codecs.
 *
 * The values of the tasks, outbox, instances, incidents and deployments
 * column families are protobuf messages (proto/berth/v1/store.proto);
 * this is the only place that sees the generated code. Callers work with
 * the plain structs below.
 *
 * OWNERSHIP
 *   Encoding borrows every pointer in the struct and writes the bytes into
 *   a store_buf the caller owns and may reuse (its previous content is
 *   replaced). Decoding fills the struct with pointers into the unpacked
 *   message held by `owner` (and into an array beside it, for headers or
 *   channels); free them with the matching *_clear(), which is a
 *   no-op on a zeroed struct. A struct built by hand for encoding has
 *   owner == NULL and must not be passed to *_clear().
 *
 * Strings are NUL-terminated; an absent optional string is NULL.
 */
#ifndef BERTH_STORE_RECORDS_H
#define BERTH_STORE_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/keys.h"

/* A growable byte buffer, reused across encodes to keep allocation off the
 * hot path. */
typedef struct store_buf {
    uint8_t *data;
    size_t len; /* bytes of the last encode */
    size_t cap; /* bytes allocated */
} store_buf;

void store_buf_fini(store_buf *b);

typedef struct store_header {
    const char *name;
    const char *value;
} store_header;

typedef struct store_error {
    const char *code; /* any of the three may be NULL */
    const char *message;
    const char *details;
} store_error;

/* The immutable part of a delivery and of the task it becomes. */
typedef struct store_body {
    const char *topic;
    const uint8_t *payload;
    size_t payload_len;
    const store_header *headers;
    size_t n_headers;
    const char *content_type; /* NULL: none given */
    bool has_instance;
    uint8_t instance_id[BERTH_ID_LEN];
    uint32_t call_attempt;
    uint8_t id[BERTH_ID_LEN]; /* the delivery's id, which the task keeps */
    uint64_t seq;             /* FIFO tiebreak and row key; unique within one store */
    uint64_t created_at_ms;   /* when the producer's submit was accepted */
    uint32_t deployment;      /* the deployment whose channel took it; 0: the implicit one */
    uint32_t priority;        /* lower first; a row without one has STORE_PRIORITY_ABSENT */
    uint64_t not_before_ms;   /* not fetchable (a push: not sent) before; 0: at once */
    void *owner;
} store_body;

/* The priority of a Body row that names none (rows written before
 * priorities, and every row of that priority: it is not written). */
#define STORE_PRIORITY_ABSENT 1024u

typedef struct store_task_state {
    uint64_t available_at_ms; /* not fetchable before: its delay's or a backoff's end */
    const char *worker_id;    /* last claim's worker; NULL if never claimed */
    bool has_lock_token;      /* false if never claimed */
    uint8_t lock_token[BERTH_ID_LEN];
    uint64_t lock_expires_at_ms; /* the lock is live while now < this */
    uint32_t claims;             /* fetches so far */
    uint32_t retries_left;
    uint32_t failures;
    bool terminal;
    store_error last_error;
    void *owner;
} store_task_state;

typedef struct store_delivery_state {
    uint32_t attempts;           /* failed sink attempts so far */
    uint64_t next_attempt_at_ms; /* due again at this time */
    bool poisoned;               /* past the attempt ceiling; kept for an operator */
    store_error last_error;
    void *owner;
} store_delivery_state;

enum {
    STORE_INCIDENT_DELIVERY_POISONED = 1,
    STORE_INCIDENT_TASK_TERMINAL = 2,
    STORE_INCIDENT_RESULT_REFUSED = 3,
};

typedef struct store_incident {
    int kind; /* STORE_INCIDENT_* */
    uint8_t subject_id[BERTH_ID_LEN];
    const char *topic;
    store_error error;
    uint64_t at_ms;
    void *owner;
} store_incident;

enum {
    STORE_INSTANCE_WAITING = 1,
    STORE_INSTANCE_BACKOFF = 2,
    STORE_INSTANCE_RESOLVED = 3,
    STORE_INSTANCE_FAILED = 4,
};

/* A call's instance (see store.proto's Instance). */
typedef struct store_instance {
    uint8_t id[BERTH_ID_LEN];
    int state; /* STORE_INSTANCE_* */
    const char *topic;
    uint32_t attempt;
    uint64_t created_at_ms;
    uint64_t timer_at_ms; /* 0: none */
    bool has_current;
    uint8_t current_id[BERTH_ID_LEN];
    bool has_retry;
    uint64_t timeout_ms;
    uint32_t max_attempts;
    uint64_t initial_backoff_ms;
    uint64_t max_backoff_ms;
    double multiplier;
    const char *const *non_retryable_codes;
    size_t n_non_retryable_codes;
    const uint8_t *request; /* an encoded Body, or NULL */
    size_t request_len;
    const uint8_t *dedup_key; /* or NULL */
    size_t dedup_key_len;
    uint64_t ended_at_ms;
    bool has_result;
    const uint8_t *result_payload;
    size_t result_payload_len;
    const char *result_content_type;
    const store_header *result_headers;
    size_t n_result_headers;
    store_error error;
    uint32_t deployment; /* as its request's Body */
    void *owner;
} store_instance;

enum {
    STORE_DEPLOYMENT_LIVE = 1,
    STORE_DEPLOYMENT_DRAINING = 2,
    STORE_DEPLOYMENT_RETIRED = 3,
};

typedef struct store_channel {
    const char *name;
    const char *transport; /* NULL: pull */
    uint64_t reply_max_bytes;
    const char *const *content_types;
    size_t n_content_types;
} store_channel;

/* A version of a deployment (see store.proto's Deployment). */
typedef struct store_deployment {
    const char *id;
    uint32_t version;
    int state; /* STORE_DEPLOYMENT_* */
    const store_channel *channels;
    size_t n_channels;
    uint64_t created_at_ms;
    uint64_t retired_at_ms; /* 0: not retired */
    void *owner;
} store_deployment;

int store_instance_encode(const store_instance *r, store_buf *out);
int store_instance_decode(const void *buf, size_t len, store_instance *out);
void store_instance_clear(store_instance *r);

int store_body_encode(const store_body *r, store_buf *out);
int store_body_decode(const void *buf, size_t len, store_body *out);
void store_body_clear(store_body *r);

/* What loading a store needs of a Body, read in place: no allocation, the
 * topic pointing into the buffer (up to its first NUL, as a decoded
 * string reads). A Body that store_body_decode() takes, this takes too,
 * with the same fields; BERTH_ECORRUPT otherwise (a malformed field, a
 * field of the wrong wire type, no topic or id). */
typedef struct store_body_meta {
    const char *topic; /* not NUL-terminated: topic_len bytes */
    size_t topic_len;
    uint8_t id[BERTH_ID_LEN];
    bool has_instance;
    uint8_t instance_id[BERTH_ID_LEN];
    uint64_t seq;
    uint64_t created_at_ms;
    uint32_t deployment;
    uint32_t priority; /* STORE_PRIORITY_ABSENT when the row names none */
    uint64_t not_before_ms;
} store_body_meta;
int store_body_peek(const void *buf, size_t len, store_body_meta *out);

int store_task_state_encode(const store_task_state *r, store_buf *out);
int store_task_state_decode(const void *buf, size_t len, store_task_state *out);
void store_task_state_clear(store_task_state *r);

int store_delivery_state_encode(const store_delivery_state *r, store_buf *out);
int store_delivery_state_decode(const void *buf, size_t len, store_delivery_state *out);
void store_delivery_state_clear(store_delivery_state *r);

int store_deployment_encode(const store_deployment *r, store_buf *out);
int store_deployment_decode(const void *buf, size_t len, store_deployment *out);
void store_deployment_clear(store_deployment *r);

int store_incident_encode(const store_incident *r, store_buf *out);
int store_incident_decode(const void *buf, size_t len, store_incident *out);
void store_incident_clear(store_incident *r);

#endif
