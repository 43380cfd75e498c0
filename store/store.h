/*
 * store.h — berth's embedded store: RocksDB column families, atomic synced
 * write batches, point reads and iterators. Reads see what was written,
 * never a batch still being built: the engine keeps in memory what it
 * must read back within a turn.
 *
 * CONVENTIONS
 *   Opaque handles; int returns (0 = BERTH_OK, negative BERTH_E* of err.h);
 *   keys and values are pointer + length; out-parameters last. RocksDB's
 *   error strings end here: each becomes a code, and its text is kept for
 *   store_last_error() (it is freed and reset before the next call).
 *
 * THREADS
 *   One writer: the engine thread owns the store and every batch. Only
 *   store_sync(), the failpoint setters, store_hold_syncs(),
 *   store_syncs_waiting() and the clock passed in store_options may be
 *   touched from elsewhere (the clock is called from RocksDB's compaction
 *   threads and must be thread-safe).
 *
 * DURABILITY
 *   store_write() writes one batch atomically with sync = 1: when it
 *   returns BERTH_OK the batch is on disk, fsynced. store_append() applies
 *   it atomically without touching the disk (it waits in RocksDB's WAL
 *   buffer): reads see it at once, and it is on disk once a store_sync()
 *   that began after it returned has returned BERTH_OK. One sync serves
 *   every append before it, which is how a writer keeps working while the
 *   disk flushes. A batch whose write failed was not applied at all.
 *
 * The key and record layouts are specified in keys.h and records.h.
 */
#ifndef BERTH_STORE_STORE_H
#define BERTH_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct store store;
typedef struct store_batch store_batch;
typedef struct store_iter store_iter;

typedef enum store_cf {
    STORE_CF_TASKS,
    STORE_CF_OUTBOX,
    STORE_CF_INSTANCES,
    STORE_CF_TIMERS,
    STORE_CF_INBOX,
    STORE_CF_SUBMIT_KEYS,
    STORE_CF_DEPLOYMENTS,
    STORE_CF_INCIDENTS,
    STORE_CF_META,
    STORE_CF_COUNT
} store_cf;

typedef struct store_options {
    /* inbox and submit_keys entries older than this are dead: a compaction
     * filter drops them. Must be > 0. */
    uint64_t dedup_horizon_ms;
    /* The clock the horizon is measured on (Unix ms). Thread-safe. */
    uint64_t (*now_ms)(void *ctx);
    void *now_ctx;
    /* Open only a store that is there: a data directory that went away
     * (an unmounted disk) is an error, never a new empty store. */
    bool must_exist;
} store_options;

/* Opens (creating if missing, with parent directories, unless
 * o->must_exist) the store in dir.
 * On failure *out is NULL and, when err is not NULL, a message is written
 * to err (errlen bytes at most). BERTH_EFORMAT: written by another format
 * version. */
int store_open(const char *dir, const store_options *o, store **out, char *err, size_t errlen);
/* Closes the store; NULL is a no-op. Every batch and iterator of it must
 * already be freed. */
void store_close(store *s);
/* Text of the last failed operation ("" if none). */
const char *store_last_error(const store *s);
const char *store_cf_name(store_cf cf);

/* ---- write batches ---- */
int store_batch_alloc(store *s, store_batch **out);
void store_batch_free(store_batch *b);
void store_batch_clear(store_batch *b);
size_t store_batch_count(store_batch *b);
/* Size of the batch's serialized data, in bytes. */
size_t store_batch_bytes(store_batch *b);
void store_batch_put(store_batch *b, store_cf cf, const void *k, size_t kl, const void *v,
                     size_t vl);
void store_batch_delete(store_batch *b, store_cf cf, const void *k, size_t kl);
/* Only for a key that was put EXACTLY ONCE since it last did not exist. */
void store_batch_single_delete(store_batch *b, store_cf cf, const void *k, size_t kl);

/* Writes the batch atomically and fsynced. The batch is left as it was:
 * the caller clears it. */
int store_write(store *s, store_batch *b);
/* Writes the batch atomically, not yet durable (see DURABILITY). */
int store_append(store *s, store_batch *b);
/* Makes every batch appended before the call durable (the WAL is
 * fsynced). Safe to call from another thread while the writer appends or
 * reads. The error text goes to err, not to store_last_error(). After a
 * failure it is unknown which unsynced batches reached the disk. */
int store_sync(store *s, char *err, size_t errlen);

/* ---- reads ---- */
typedef struct store_value {
    char *data; /* owned: free with store_value_free */
    size_t len;
} store_value;

/* Reads key k of cf as written. BERTH_ENOTFOUND when absent. */
int store_get(store *s, store_cf cf, const void *k, size_t kl, store_value *out);
/* RocksDB's estimate of how many keys cf holds (0 when it has none): a
 * size hint for a full scan, never a count to rely on. */
uint64_t store_estimate_keys(store *s, store_cf cf);
void store_value_free(store_value *v);

/* An iterator over one column family, in key order, on an implicit
 * snapshot taken when it is opened. Positioned at the first key. */
int store_iter_open(store *s, store_cf cf, store_iter **out);
void store_iter_seek(store_iter *it, const void *k, size_t kl);
bool store_iter_valid(store_iter *it);
const void *store_iter_key(store_iter *it, size_t *len);
const void *store_iter_value(store_iter *it, size_t *len);
void store_iter_next(store_iter *it);
/* BERTH_EIO when the iteration ended on an error rather than at the end. */
int store_iter_status(store_iter *it);
void store_iter_close(store_iter *it);

/* A consistent copy of the store, as of now, in dir (which must not
 * exist), while writes go on: RocksDB's checkpoint (hard links to the
 * table files where dir shares their file system, a copy of the log).
 * Everything appended before the call is in it. The error text goes to
 * err. */
int store_checkpoint(store *s, const char *dir, char *err, size_t errlen);

/* Compacts the whole of cf now (the dedup filter runs). */
int store_compact(store *s, store_cf cf);

/* ---- failpoints (tests) ---- */
/* The next n writes fail with BERTH_EIO without writing anything. */
void store_failpoint_writes(store *s, int n);
/* The next n reads (store_get) fail with BERTH_EIO. */
void store_failpoint_reads(store *s, int n);
/* The next n syncs fail with BERTH_EIO without syncing. */
void store_failpoint_syncs(store *s, int n);
/* While held, store_sync() waits at a gate before syncing. */
void store_hold_syncs(store *s, bool hold);
/* Syncs waiting at the gate now. */
int store_syncs_waiting(store *s);

#endif
