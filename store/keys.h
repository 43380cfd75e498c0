/*
 * keys.h — berth's on-disk layout, byte by byte.
 *
 * FORMAT VERSION
 *   BERTH_FORMAT_VERSION is stored in the `meta` column family under the
 *   key "format" as a 4-byte big-endian unsigned integer. store_open()
 *   writes it into a new store, upgrades a store of an older version it
 *   knows (store.c: FORMAT_UPGRADES_FROM up) by rewriting it, and refuses
 *   (BERTH_EFORMAT) a store that holds any other value.
 *
 *   To change anything on this page: bump BERTH_FORMAT_VERSION; teach
 *   store_open() to upgrade a store of the previous version in one write
 *   batch (or to refuse it with a message saying how to migrate); keep a
 *   test that opens a store written by the previous version; describe the
 *   change in this comment.
 *
 *   Version 2 writes calls (instances, timers, call keys in submit_keys).
 *   Version 3 writes deployments (the deployments family). Version 4
 *   writes a task's priority and delay into its Body (a Body without them
 *   is priority 1024, fetchable at once); a version-3 build would skip
 *   them and hand delayed tasks out early, so it must refuse these
 *   stores. None of this was written by the version before, so an older
 *   store is upgraded by rewriting its format key. Adding an optional
 *   field to a record in proto/berth/v1/store.proto that an older build
 *   may safely ignore is not a format change (proto2 skips unknown fields
 *   and absent optionals take their defaults).
 *
 * IDS AND SEQUENCES
 *   Task, delivery and incident ids are 16 bytes (BERTH_ID_LEN). Task and
 *   delivery ids come from libsodium's CSPRNG; a task's id is the id of the
 *   delivery that was parked as it. Printed, an id is 32 lowercase hex
 *   digits (BERTH_ID_STR_LEN), in the byte order below.
 *
 *   Rows are keyed by the delivery's sequence number instead (seq: a u64
 *   unique within the store, increasing with submission), written
 *   big-endian: new rows land at the end of the key space and old ones
 *   leave from its front, the shape an LSM tree serves best (sequential
 *   memtable inserts, tombstones clustered where compaction drops them).
 *   The id lives in the Body; memory maps ids to sequences.
 *
 * COLUMN FAMILIES (values are protobuf records of store.proto unless a
 * fixed layout is given)
 *
 *   tasks       key: seq u64 big-endian || kind[1]
 *                 kind 'b' (0x62): Body, written once at park
 *                   (SingleDelete applies)
 *                 kind 's' (0x73): TaskState, rewritten on every claim,
 *                   failure, extension or release; absent = never claimed
 *                   (ready, claims 0, retries_left = the failure budget)
 *
 *   outbox      key: seq u64 big-endian || kind[1]
 *                 kind 'b': Body, written once at submit (SingleDelete applies)
 *                 kind 's': DeliveryState; absent = attempts 0, due at
 *                   Body.created_at_ms, not poisoned
 *
 *   inbox       key: the inbound message's idempotency key; for a task's
 *                 completion, the delivery's: 'd' || seq u64 big-endian
 *               value (fixed, 8 bytes): received_at_ms u64 big-endian
 *               (the engine writes none in this format version: a
 *               completion and its task's delete share one batch, so
 *               nothing can offer it again; the family is kept for
 *               inbound messages whose source outlives their batch)
 *
 *   submit_keys key: topic_len[1] || topic[topic_len] || idempotency key
 *                 (the rest of the key, 1..BERTH_IDEM_KEY_MAX bytes)
 *               value (fixed, 24 bytes): created_at_ms u64 big-endian ||
 *                 delivery id[16]
 *
 *   incidents   key: at_ms u64 big-endian || seq u64 big-endian
 *                 (ordered by time; the 16 key bytes are the incident id)
 *               value: Incident
 *
 *   meta        key "format": u32 big-endian BERTH_FORMAT_VERSION
 *
 *   instances   key: 'L' (0x4c) || instance id[16]: a live call (WAITING,
 *                 BACKOFF), rewritten on each of its changes; its
 *                 in-memory timer index is rebuilt from these rows
 *               key: 'E' (0x45) || instance id[16]: an ended call
 *                 (RESOLVED, FAILED), written once when it ends (the 'L'
 *                 row is deleted in the same batch)
 *               value: Instance
 *
 *   timers      key: ended_at_ms u64 big-endian || instance id[16]: when
 *                 an ended instance's retention began; ordered by time, so
 *                 ended instances are dropped from the front in bounded
 *                 batches (SingleDelete applies: written once)
 *               value: empty
 *
 *   deployments key: number u32 big-endian (1, 2, ... in the order they
 *                 were deployed; Body.deployment and Instance.deployment
 *                 name it, 0 naming the implicit deployment, which has no
 *                 row)
 *               value: Deployment (one version of a deployment id),
 *                 rewritten when its state changes
 *
 *   A call's idempotency key lives in submit_keys too, in its own key
 *   space: 0xff || topic_len[1] || topic || key (a submit key begins with
 *   its topic's length, at most BERTH_TOPIC_MAX, so never 0xff); value as
 *   for a submit, with the instance id.
 *
 * DEDUP HORIZON
 *   inbox and submit_keys values begin with an 8-byte big-endian time. An
 *   entry older than the dedup horizon is dead: readers treat it as absent
 *   (store_dedup_alive) and a compaction filter drops it from disk.
 */
#ifndef BERTH_STORE_KEYS_H
#define BERTH_STORE_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BERTH_FORMAT_VERSION 4u

#define BERTH_ID_LEN       16
#define BERTH_ID_STR_LEN   32 /* hex digits, without the terminating NUL */
#define BERTH_TOPIC_MAX    200
#define BERTH_IDEM_KEY_MAX 256

#define STORE_KIND_BODY  'b'
#define STORE_KIND_STATE 's'

#define STORE_ROW_KEY_LEN        9 /* seq + kind */
#define STORE_DELIVERY_KEY_LEN   9 /* 'd' + seq */
#define STORE_INCIDENT_KEY_LEN   16
#define STORE_SUBMIT_KEY_MAX     (1 + BERTH_TOPIC_MAX + BERTH_IDEM_KEY_MAX)
#define STORE_DEDUP_TIME_LEN     8
#define STORE_SUBMIT_VALUE_LEN   (STORE_DEDUP_TIME_LEN + BERTH_ID_LEN)
#define STORE_CALL_KEY_MAX       (1 + STORE_SUBMIT_KEY_MAX)
#define STORE_INSTANCE_KEY_LEN   (1 + BERTH_ID_LEN)
#define STORE_RETENTION_KEY_LEN  (8 + BERTH_ID_LEN)
#define STORE_DEPLOYMENT_KEY_LEN 4
#define STORE_INSTANCE_LIVE      'L'
#define STORE_INSTANCE_ENDED     'E'

void store_put_be64(uint8_t *p, uint64_t v);
uint64_t store_get_be64(const uint8_t *p);
void store_put_be32(uint8_t *p, uint32_t v);
uint32_t store_get_be32(const uint8_t *p);

/* tasks/outbox row key: out must hold STORE_ROW_KEY_LEN bytes. */
void store_row_key(uint8_t *out, uint64_t seq, char kind);
/* A delivery's idempotency key (inbox): STORE_DELIVERY_KEY_LEN bytes. */
void store_delivery_key(uint8_t *out, uint64_t seq);

/* submit_keys key for (topic, key); returns its length, or 0 when topic or
 * key is empty or over its maximum. out holds STORE_SUBMIT_KEY_MAX bytes. */
size_t store_submit_key(uint8_t *out, const char *topic, const char *idem_key);

/* submit_keys key of a call's (topic, key): as store_submit_key, in the
 * calls' own key space; out holds STORE_CALL_KEY_MAX bytes. */
size_t store_call_key(uint8_t *out, const char *topic, const char *idem_key);

/* instances key: kind STORE_INSTANCE_LIVE or _ENDED, then the id. */
void store_instance_key(uint8_t *out, char kind, const uint8_t id[BERTH_ID_LEN]);
/* timers key of an ended instance. */
void store_retention_key(uint8_t *out, uint64_t ended_at_ms, const uint8_t id[BERTH_ID_LEN]);

/* incidents key: out holds STORE_INCIDENT_KEY_LEN bytes. */
void store_incident_key(uint8_t *out, uint64_t at_ms, uint64_t seq);

/* True when a dedup value (inbox or submit_keys) written at the time it
 * carries is still inside the horizon at now_ms. A value too short to
 * carry a time is dead. */
bool store_dedup_alive(const void *value, size_t len, uint64_t now_ms, uint64_t horizon_ms);

/* Printable ids: 32 lowercase hex digits and a NUL (33 bytes). */
void store_id_format(const uint8_t id[BERTH_ID_LEN], char out[BERTH_ID_STR_LEN + 1]);
/* Parses exactly 32 hex digits (either case); BERTH_EINVAL otherwise. */
int store_id_parse(const char *s, uint8_t out[BERTH_ID_LEN]);

#endif
