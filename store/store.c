/*
 * store.c — RocksDB behind the store.h API.
 *
 * OPENING (store_open, a step a function)
 *   The directory is made, or must hold a store already (must_exist).
 *   The options are set: the database's, then each family's (TUNING).
 *   Existing column families are listed and all of them opened (RocksDB
 *   refuses a read-write open that leaves one out); missing ones of ours
 *   are created. A database that exists without `meta` is another
 *   program's: refused, untouched. Then the format version in `meta` is
 *   checked, upgraded, or written into a new store, in its own synced
 *   batch (check_format).
 *
 * TUNING
 *   tasks and outbox are queue-shaped (every row is deleted soon after it
 *   is written): they get the compact-on-deletion collector so tombstones
 *   do not pile up in front of live rows. Point reads (bodies, dedup keys)
 *   get a bloom filter. inbox and submit_keys get the dedup-horizon
 *   compaction filter. The families keyed by sequence (tasks, outbox,
 *   inbox) keep a memtable insertion point per 256 sequences
 *   (store/options.cc): their writes arrive as a few forward-moving
 *   streams, and each then skips the skip list's search from the top.
 *   WAL files are written over zeros kept ahead of their end (options.cc),
 *   so that a sync writes the log's new bytes and not its inode too.
 *
 * Failed RocksDB calls: the error string is copied into s->last_error,
 * freed with rocksdb_free and the pointer reset before the next call.
 */
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <rocksdb/c.h>

#include "store/err.h"
#include "store/keys.h"
#include "store/options.h"

static const char *const cf_names[STORE_CF_COUNT] = {
    [STORE_CF_TASKS] = "tasks",
    [STORE_CF_OUTBOX] = "outbox",
    [STORE_CF_INSTANCES] = "instances",
    [STORE_CF_TIMERS] = "timers",
    [STORE_CF_INBOX] = "inbox",
    [STORE_CF_SUBMIT_KEYS] = "submit_keys",
    [STORE_CF_DEPLOYMENTS] = "deployments",
    [STORE_CF_INCIDENTS] = "incidents",
    [STORE_CF_META] = "meta",
};

/* State of the dedup compaction filter; lives as long as the store. */
typedef struct dedup_filter {
    uint64_t horizon_ms;
    uint64_t (*now_ms)(void *);
    void *now_ctx;
} dedup_filter;

struct store {
    rocksdb_t *db;
    rocksdb_column_family_handle_t *cf[STORE_CF_COUNT];
    rocksdb_column_family_handle_t **extra_cf; /* unknown families found on disk */
    size_t n_extra_cf;
    rocksdb_options_t *db_opts;
    rocksdb_options_t *cf_opts[STORE_CF_COUNT];
    rocksdb_block_based_table_options_t *table_opts;
    rocksdb_filterpolicy_t *bloom; /* owned by table_opts once set */
    rocksdb_cache_t *cache;
    rocksdb_compactionfilter_t *filter;
    rocksdb_writeoptions_t *wo_sync;
    rocksdb_writeoptions_t *wo_append; /* sync = 0: store_sync() makes it durable */
    rocksdb_readoptions_t *ro;
    dedup_filter dedup;
    atomic_int fail_writes; /* failpoints: remaining operations to fail */
    atomic_int fail_reads;
    atomic_int fail_syncs;
    pthread_mutex_t gate_mu; /* the sync gate (failpoint): syncs wait while held */
    pthread_cond_t gate_cv;
    bool gate_held;
    int gate_waiting;
    char last_error[512];
};

struct store_batch {
    store *s;
    rocksdb_writebatch_t *wb;
};

struct store_iter {
    rocksdb_iterator_t *it;
};

/* Takes a RocksDB error string: keeps its text, frees it, resets it. */
static int take_error(store *s, char **err, int code)
{
    snprintf(s->last_error, sizeof(s->last_error), "%s", *err);
    rocksdb_free(*err);
    *err = NULL;
    return code;
}

const char *store_last_error(const store *s)
{
    return s->last_error;
}

const char *store_cf_name(store_cf cf)
{
    return (unsigned)cf < STORE_CF_COUNT ? cf_names[cf] : "?";
}

/* ---- dedup horizon filter ---- */

static unsigned char dedup_filter_fn(void *state, int level, const char *key, size_t klen,
                                     const char *value, size_t vlen, char **new_value,
                                     size_t *new_vlen, unsigned char *changed)
{
    const dedup_filter *f = state;
    *changed = 0;
    return !store_dedup_alive(value, vlen, f->now_ms(f->now_ctx), f->horizon_ms);
}

static const char *dedup_filter_name(void *state)
{
    return "berth.dedup_horizon";
}

static void noop_destructor(void *state)
{
}

/* mkdir -p */
static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return BERTH_EINVAL;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return BERTH_EIO;
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return BERTH_EIO;
    return BERTH_OK;
}

static int cf_index(const char *name)
{
    for (int i = 0; i < STORE_CF_COUNT; i++)
        if (strcmp(cf_names[i], name) == 0)
            return i;
    return -1;
}

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errlen, const char *fmt,
                                                          ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* The oldest format this build upgrades (keys.h says how). */
#define FORMAT_UPGRADES_FROM 1u

static int check_format(store *s, char *err, size_t errlen)
{
    static const char key[] = "format";
    store_value v;
    int rv = store_get(s, STORE_CF_META, key, sizeof(key) - 1, &v);
    uint32_t found = 0;
    if (rv == BERTH_OK) {
        found = v.len == 4 ? store_get_be32((const uint8_t *)v.data) : 0;
        store_value_free(&v);
        if (found >= FORMAT_UPGRADES_FROM && found < BERTH_FORMAT_VERSION)
            rv = BERTH_ENOTFOUND; /* every older version upgrades by its key alone */
    }
    if (rv == BERTH_ENOTFOUND) {
        uint8_t buf[4];
        store_put_be32(buf, BERTH_FORMAT_VERSION);
        store_batch *b;
        if ((rv = store_batch_alloc(s, &b)) != BERTH_OK)
            return rv;
        store_batch_put(b, STORE_CF_META, key, sizeof(key) - 1, buf, sizeof(buf));
        rv = store_write(s, b);
        store_batch_free(b);
        if (rv != BERTH_OK)
            set_err(err, errlen, "cannot write the format version: %s", s->last_error);
        return rv;
    }
    if (rv != BERTH_OK) {
        set_err(err, errlen, "cannot read the format version: %s", s->last_error);
        return rv;
    }
    if (found != BERTH_FORMAT_VERSION) {
        set_err(err, errlen, "store format version %u, this build reads version %u", found,
                BERTH_FORMAT_VERSION);
        return BERTH_EFORMAT;
    }
    return BERTH_OK;
}

/* ---- opening, a step at a time ---- */

/* The directory: one that must hold a store already (o->must_exist) is
 * one with RocksDB's CURRENT file; otherwise it is made, with its
 * parents. */
static int open_dir(const char *dir, bool must_exist, char *err, size_t errlen)
{
    if (must_exist) {
        struct stat st;
        char current[PATH_MAX];
        snprintf(current, sizeof(current), "%s/CURRENT", dir);
        if (stat(current, &st) != 0) {
            set_err(err, errlen, "no store in %s: %s", dir, strerror(errno));
            return BERTH_EIO;
        }
    } else if (make_dirs(dir) != BERTH_OK) {
        set_err(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return BERTH_EIO;
    }
    return BERTH_OK;
}

/* The database's options, which every family's start from. */
static void set_db_options(store *s, bool must_exist)
{
    s->db_opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(s->db_opts, !must_exist);
    rocksdb_options_set_create_missing_column_families(s->db_opts, 1);
    rocksdb_options_increase_parallelism(s->db_opts, 2);
    rocksdb_options_set_max_background_jobs(s->db_opts, 2);
    rocksdb_options_set_keep_log_file_num(s->db_opts, 4);
    /* A log is kept until every family with a write in it has flushed, and
     * the small families (meta, deployments, ...) rarely fill a memtable:
     * RocksDB's default bound (4x all write buffers, 4.6 GB here) let a
     * 10M-task backlog keep 1.6 GB of logs, replayed for 6.5 s at every
     * restart. Past this size the families holding the oldest log flush. */
    rocksdb_options_set_max_total_wal_size(s->db_opts, 256u << 20);
    /* An append only fills RocksDB's WAL buffer; store_sync() writes and
     * fsyncs it (FlushWAL). The writer makes no write(2) per batch, and
     * the sync, on its own thread, writes all that it covers at once. */
    rocksdb_options_set_manual_wal_flush(s->db_opts, 1);
    /* What was synced is never rolled back: a WAL whose records do not
     * read back whole, except for a record cut short at its very end (a
     * crash during an append nobody was answered for), is refused at open
     * with the corruption named. (RocksDB's default, point-in-time
     * recovery, would stop at the damage and drop every acknowledged write
     * after it with a warning.) */
    rocksdb_options_set_wal_recovery_mode(s->db_opts, 0 /* kTolerateCorruptedTailRecords */);
    store_options_zeroed_logs(s->db_opts);
    store_options_log_to_stderr(s->db_opts);
}

/* Each family's options (TUNING): the table format with its bloom filter
 * and block cache, shared, and what each family adds. */
static void set_family_options(store *s)
{
    s->cache = rocksdb_cache_create_lru(64u << 20);
    s->table_opts = rocksdb_block_based_options_create();
    s->bloom = rocksdb_filterpolicy_create_bloom(10);
    rocksdb_block_based_options_set_filter_policy(s->table_opts, s->bloom);
    rocksdb_block_based_options_set_block_cache(s->table_opts, s->cache);
    s->filter = rocksdb_compactionfilter_create(&s->dedup, noop_destructor, dedup_filter_fn,
                                                dedup_filter_name);

    for (int i = 0; i < STORE_CF_COUNT; i++) {
        rocksdb_options_t *co = rocksdb_options_create_copy(s->db_opts);
        rocksdb_options_set_block_based_table_factory(co, s->table_opts);
        if (i == STORE_CF_TASKS || i == STORE_CF_OUTBOX)
            rocksdb_options_add_compact_on_deletion_collector_factory(co, 4096, 1024);
        if (i == STORE_CF_INBOX || i == STORE_CF_SUBMIT_KEYS)
            rocksdb_options_set_compaction_filter(co, s->filter);
        /* All but the last byte of the sequence: 256 rows per point. */
        if (i == STORE_CF_TASKS || i == STORE_CF_OUTBOX || i == STORE_CF_INBOX)
            store_options_insert_hints(co, 7);
        s->cf_opts[i] = co;
    }
}

/* A family on disk that is neither ours nor RocksDB's default. */
static bool is_extra_family(const char *name)
{
    return cf_index(name) < 0 && strcmp(name, "default") != 0;
}

/* The families already on disk, every one of which must be opened (ours
 * or not: RocksDB refuses a read-write open that leaves one out); none
 * (*names NULL) where there is no database yet. Another program's
 * database is refused (BERTH_EFORMAT). The caller destroys the list. */
static int list_families(store *s, const char *dir, char ***names, size_t *n, char *err,
                         size_t errlen)
{
    char *rerr = NULL;
    *n = 0;
    *names = rocksdb_list_column_families(s->db_opts, dir, n, &rerr);
    if (rerr != NULL) { /* no database yet (the empty list is allocated all the same) */
        rocksdb_free(rerr);
        if (*names != NULL)
            rocksdb_list_column_families_destroy(*names, 0);
        *names = NULL;
        *n = 0;
    }
    /* A database without berth's meta family is another program's: berth
     * would otherwise add its families to it and write into it. */
    bool has_meta = false;
    for (size_t i = 0; i < *n; i++)
        has_meta |= cf_index((*names)[i]) == STORE_CF_META;
    if (*n > 0 && !has_meta) {
        rocksdb_list_column_families_destroy(*names, *n);
        *names = NULL;
        *n = 0;
        set_err(err, errlen,
                "%s holds a RocksDB database that is not a berth store (it has no \"%s\" "
                "column family); refusing to write into it",
                dir, cf_names[STORE_CF_META]);
        return BERTH_EFORMAT;
    }
    return BERTH_OK;
}

/* Opens the database with the default family, ours (created if missing)
 * and the n_existing found on disk that are not ours (kept open, unused,
 * in s->extra_cf). */
static int open_families(store *s, const char *dir, char **existing, size_t n_existing, char *err,
                         size_t errlen)
{
    size_t n_extra = 0;
    for (size_t i = 0; i < n_existing; i++)
        if (is_extra_family(existing[i]))
            n_extra++;
    size_t n = 1 + STORE_CF_COUNT + n_extra;
    const char **names = calloc(n, sizeof(*names));
    const rocksdb_options_t **opts = calloc(n, sizeof(*opts));
    rocksdb_column_family_handle_t **handles = calloc(n, sizeof(*handles));
    s->extra_cf = calloc(n_extra ? n_extra : 1, sizeof(*s->extra_cf));
    int rv = BERTH_OK;
    if (names == NULL || opts == NULL || handles == NULL || s->extra_cf == NULL) {
        rv = BERTH_ENOMEM;
        goto done;
    }
    names[0] = "default";
    opts[0] = s->db_opts;
    for (int i = 0; i < STORE_CF_COUNT; i++) {
        names[1 + i] = cf_names[i];
        opts[1 + i] = s->cf_opts[i];
    }
    size_t k = 1 + STORE_CF_COUNT;
    for (size_t i = 0; i < n_existing; i++)
        if (is_extra_family(existing[i])) {
            names[k] = existing[i];
            opts[k] = s->db_opts;
            k++;
        }

    char *rerr = NULL;
    s->db = rocksdb_open_column_families(s->db_opts, dir, (int)n, names, opts, handles, &rerr);
    if (rerr != NULL) {
        rv = take_error(s, &rerr, BERTH_EIO);
        set_err(err, errlen, "cannot open the store in %s: %s", dir, s->last_error);
        goto done;
    }
    rocksdb_column_family_handle_destroy(handles[0]); /* default: unused */
    for (int i = 0; i < STORE_CF_COUNT; i++)
        s->cf[i] = handles[1 + i];
    for (size_t i = 0; i < n_extra; i++)
        s->extra_cf[i] = handles[1 + STORE_CF_COUNT + i];
    s->n_extra_cf = n_extra;
done:
    free(names);
    free(opts);
    free(handles);
    return rv;
}

/* How the store writes (synced, or appended) and reads. */
static void set_io_options(store *s)
{
    s->wo_sync = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(s->wo_sync, 1);
    s->wo_append = rocksdb_writeoptions_create();
    s->ro = rocksdb_readoptions_create();
}

int store_open(const char *dir, const store_options *o, store **out, char *err, size_t errlen)
{
    *out = NULL;
    if (o->dedup_horizon_ms == 0 || o->now_ms == NULL) {
        set_err(err, errlen, "store options: a dedup horizon and a clock are required");
        return BERTH_EINVAL;
    }
    int rv = open_dir(dir, o->must_exist, err, errlen);
    if (rv != BERTH_OK)
        return rv;
    store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return BERTH_ENOMEM;
    s->dedup = (dedup_filter){o->dedup_horizon_ms, o->now_ms, o->now_ctx};
    pthread_mutex_init(&s->gate_mu, NULL);
    pthread_cond_init(&s->gate_cv, NULL);

    set_db_options(s, o->must_exist);
    set_family_options(s);
    char **existing;
    size_t n_existing;
    rv = list_families(s, dir, &existing, &n_existing, err, errlen);
    if (rv == BERTH_OK) {
        rv = open_families(s, dir, existing, n_existing, err, errlen);
        if (existing != NULL)
            rocksdb_list_column_families_destroy(existing, n_existing);
    }
    if (rv == BERTH_OK) {
        set_io_options(s);
        rv = check_format(s, err, errlen);
    }
    if (rv != BERTH_OK) {
        store_close(s);
        return rv;
    }
    *out = s;
    return BERTH_OK;
}

void store_close(store *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < STORE_CF_COUNT; i++)
        if (s->cf[i] != NULL)
            rocksdb_column_family_handle_destroy(s->cf[i]);
    for (size_t i = 0; i < s->n_extra_cf; i++)
        rocksdb_column_family_handle_destroy(s->extra_cf[i]);
    free(s->extra_cf);
    if (s->db != NULL)
        rocksdb_close(s->db);
    for (int i = 0; i < STORE_CF_COUNT; i++)
        if (s->cf_opts[i] != NULL)
            rocksdb_options_destroy(s->cf_opts[i]);
    if (s->db_opts != NULL)
        rocksdb_options_destroy(s->db_opts);
    if (s->table_opts != NULL)
        rocksdb_block_based_options_destroy(s->table_opts); /* frees the bloom policy */
    if (s->cache != NULL)
        rocksdb_cache_destroy(s->cache);
    if (s->filter != NULL)
        rocksdb_compactionfilter_destroy(s->filter);
    if (s->wo_sync != NULL)
        rocksdb_writeoptions_destroy(s->wo_sync);
    if (s->wo_append != NULL)
        rocksdb_writeoptions_destroy(s->wo_append);
    if (s->ro != NULL)
        rocksdb_readoptions_destroy(s->ro);
    pthread_mutex_destroy(&s->gate_mu);
    pthread_cond_destroy(&s->gate_cv);
    free(s);
}

/* ---- batches ---- */

int store_batch_alloc(store *s, store_batch **out)
{
    store_batch *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return BERTH_ENOMEM;
    b->s = s;
    b->wb = rocksdb_writebatch_create();
    *out = b;
    return BERTH_OK;
}

void store_batch_free(store_batch *b)
{
    if (b == NULL)
        return;
    rocksdb_writebatch_destroy(b->wb);
    free(b);
}

void store_batch_clear(store_batch *b)
{
    rocksdb_writebatch_clear(b->wb);
}

size_t store_batch_count(store_batch *b)
{
    return (size_t)rocksdb_writebatch_count(b->wb);
}

size_t store_batch_bytes(store_batch *b)
{
    size_t n = 0;
    rocksdb_writebatch_data(b->wb, &n);
    return n;
}

void store_batch_put(store_batch *b, store_cf cf, const void *k, size_t kl, const void *v,
                     size_t vl)
{
    rocksdb_writebatch_put_cf(b->wb, b->s->cf[cf], k, kl, v, vl);
}

void store_batch_delete(store_batch *b, store_cf cf, const void *k, size_t kl)
{
    rocksdb_writebatch_delete_cf(b->wb, b->s->cf[cf], k, kl);
}

void store_batch_single_delete(store_batch *b, store_cf cf, const void *k, size_t kl)
{
    rocksdb_writebatch_singledelete_cf(b->wb, b->s->cf[cf], k, kl);
}

/* Consumes one unit of a failpoint counter; true when this call must fail. */
static bool failpoint_hit(atomic_int *n)
{
    int v = atomic_load(n);
    while (v > 0)
        if (atomic_compare_exchange_weak(n, &v, v - 1))
            return true;
    return false;
}

static int write_batch(store *s, store_batch *b, const rocksdb_writeoptions_t *wo)
{
    if (failpoint_hit(&s->fail_writes)) {
        snprintf(s->last_error, sizeof(s->last_error), "failpoint: write refused");
        return BERTH_EIO;
    }
    char *rerr = NULL;
    rocksdb_write(s->db, wo, b->wb, &rerr);
    if (rerr != NULL)
        return take_error(s, &rerr, BERTH_EIO);
    return BERTH_OK;
}

int store_write(store *s, store_batch *b)
{
    return write_batch(s, b, s->wo_sync);
}

int store_append(store *s, store_batch *b)
{
    return write_batch(s, b, s->wo_append);
}

int store_sync(store *s, char *err, size_t errlen)
{
    pthread_mutex_lock(&s->gate_mu);
    s->gate_waiting++;
    while (s->gate_held)
        pthread_cond_wait(&s->gate_cv, &s->gate_mu);
    s->gate_waiting--;
    pthread_mutex_unlock(&s->gate_mu);
    if (failpoint_hit(&s->fail_syncs)) {
        set_err(err, errlen, "failpoint: sync refused");
        return BERTH_EIO;
    }
    /* FlushWAL(sync): writes the WAL buffer, then SyncWAL() fsyncs every
     * log up to the current one. Both are safe against the writer
     * appending meanwhile. */
    char *rerr = NULL;
    rocksdb_flush_wal(s->db, 1, &rerr);
    if (rerr != NULL) {
        set_err(err, errlen, "%s", rerr);
        rocksdb_free(rerr);
        return BERTH_EIO;
    }
    return BERTH_OK;
}

/* ---- reads ---- */

uint64_t store_estimate_keys(store *s, store_cf cf)
{
    uint64_t n = 0;
    if (rocksdb_property_int_cf(s->db, s->cf[cf], "rocksdb.estimate-num-keys", &n) != 0)
        return 0;
    return n;
}

int store_get(store *s, store_cf cf, const void *k, size_t kl, store_value *out)
{
    out->data = NULL;
    out->len = 0;
    if (failpoint_hit(&s->fail_reads)) {
        snprintf(s->last_error, sizeof(s->last_error), "failpoint: read refused");
        return BERTH_EIO;
    }
    char *rerr = NULL;
    size_t len = 0;
    char *v = rocksdb_get_cf(s->db, s->ro, s->cf[cf], k, kl, &len, &rerr);
    if (rerr != NULL)
        return take_error(s, &rerr, BERTH_EIO);
    if (v == NULL)
        return BERTH_ENOTFOUND;
    out->data = v;
    out->len = len;
    return BERTH_OK;
}

void store_value_free(store_value *v)
{
    if (v->data != NULL)
        rocksdb_free(v->data);
    v->data = NULL;
    v->len = 0;
}

/* ---- iterators ---- */

int store_iter_open(store *s, store_cf cf, store_iter **out)
{
    store_iter *it = calloc(1, sizeof(*it));
    if (it == NULL)
        return BERTH_ENOMEM;
    it->it = rocksdb_create_iterator_cf(s->db, s->ro, s->cf[cf]);
    rocksdb_iter_seek_to_first(it->it);
    *out = it;
    return BERTH_OK;
}

void store_iter_seek(store_iter *it, const void *k, size_t kl)
{
    rocksdb_iter_seek(it->it, k, kl);
}

bool store_iter_valid(store_iter *it)
{
    return rocksdb_iter_valid(it->it) != 0;
}

const void *store_iter_key(store_iter *it, size_t *len)
{
    return rocksdb_iter_key(it->it, len);
}

const void *store_iter_value(store_iter *it, size_t *len)
{
    return rocksdb_iter_value(it->it, len);
}

void store_iter_next(store_iter *it)
{
    rocksdb_iter_next(it->it);
}

int store_iter_status(store_iter *it)
{
    char *rerr = NULL;
    rocksdb_iter_get_error(it->it, &rerr);
    if (rerr != NULL) {
        rocksdb_free(rerr);
        return BERTH_EIO;
    }
    return BERTH_OK;
}

void store_iter_close(store_iter *it)
{
    if (it == NULL)
        return;
    rocksdb_iter_destroy(it->it);
    free(it);
}

int store_checkpoint(store *s, const char *dir, char *err, size_t errlen)
{
    char *rerr = NULL;
    rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(s->db, &rerr);
    if (rerr == NULL)
        /* 0: flush the memtables first, so the copy's log is short. */
        rocksdb_checkpoint_create(cp, dir, 0, &rerr);
    if (cp != NULL)
        rocksdb_checkpoint_object_destroy(cp);
    if (rerr != NULL) {
        set_err(err, errlen, "%s", rerr);
        rocksdb_free(rerr);
        return BERTH_EIO;
    }
    return BERTH_OK;
}

int store_compact(store *s, store_cf cf)
{
    rocksdb_compact_range_cf(s->db, s->cf[cf], NULL, 0, NULL, 0);
    return BERTH_OK;
}

void store_failpoint_writes(store *s, int n)
{
    atomic_store(&s->fail_writes, n);
}

void store_failpoint_reads(store *s, int n)
{
    atomic_store(&s->fail_reads, n);
}

void store_failpoint_syncs(store *s, int n)
{
    atomic_store(&s->fail_syncs, n);
}

void store_hold_syncs(store *s, bool hold)
{
    pthread_mutex_lock(&s->gate_mu);
    s->gate_held = hold;
    pthread_cond_broadcast(&s->gate_cv);
    pthread_mutex_unlock(&s->gate_mu);
}

int store_syncs_waiting(store *s)
{
    pthread_mutex_lock(&s->gate_mu);
    int n = s->gate_waiting;
    pthread_mutex_unlock(&s->gate_mu);
    return n;
}
