/* store/store.h against a real RocksDB in a temp directory. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <criterion/criterion.h>
#include <rocksdb/c.h>

#include "store/err.h"
#include "store/keys.h"
#include "store/store.h"

static char dir[64];
static _Atomic uint64_t now_ms;

static uint64_t test_now(void *ctx)
{
    (void)ctx;
    return atomic_load(&now_ms);
}

static const store_options opts = {.dedup_horizon_ms = 1000, .now_ms = test_now};

static int rm_one(const char *p, const struct stat *s, int f, struct FTW *w)
{
    (void)s, (void)f, (void)w;
    return remove(p);
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/berth-store-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    atomic_store(&now_ms, 1000000);
}

static void teardown(void)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(store, .init = setup, .fini = teardown);

static store *open_ok(void)
{
    store *s;
    char err[256] = "";
    int rv = store_open(dir, &opts, &s, err, sizeof(err));
    cr_assert_eq(rv, BERTH_OK, "store_open: %s", err);
    return s;
}

static void put1(store *s, store_cf cf, const char *k, const char *v)
{
    store_batch *b;
    cr_assert_eq(store_batch_alloc(s, &b), BERTH_OK);
    store_batch_put(b, cf, k, strlen(k), v, strlen(v));
    cr_assert_eq(store_write(s, b), BERTH_OK);
    store_batch_free(b);
}

static bool has(store *s, store_cf cf, const char *k)
{
    store_value v;
    int rv = store_get(s, cf, k, strlen(k), &v);
    store_value_free(&v);
    return rv == BERTH_OK;
}

Test(store, opens_new_with_every_family_and_the_format_version)
{
    store *s = open_ok();
    store_value v;
    cr_assert_eq(store_get(s, STORE_CF_META, "format", 6, &v), BERTH_OK);
    cr_assert_eq(v.len, 4);
    cr_assert_eq(store_get_be32((const uint8_t *)v.data), BERTH_FORMAT_VERSION);
    store_value_free(&v);
    store_close(s);

    rocksdb_options_t *o = rocksdb_options_create();
    size_t n = 0;
    char *err = NULL;
    char **names = rocksdb_list_column_families(o, dir, &n, &err);
    cr_assert_null(err);
    for (int cf = 0; cf < STORE_CF_COUNT; cf++) {
        bool found = false;
        for (size_t i = 0; i < n; i++)
            found |= strcmp(names[i], store_cf_name(cf)) == 0;
        cr_assert(found, "column family %s missing", store_cf_name(cf));
    }
    rocksdb_list_column_families_destroy(names, n);
    rocksdb_options_destroy(o);
}

/* The option value RocksDB recorded for family `cf` in the newest
 * OPTIONS file of the store: what it really runs with. */
static void recorded_option(const char *cf, const char *name, char *out, size_t outlen)
{
    char newest[256] = "";
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, "OPTIONS-", 8) == 0 && strcmp(e->d_name, newest) > 0)
            snprintf(newest, sizeof(newest), "%s", e->d_name);
    closedir(d);
    cr_assert_neq(newest[0], 0, "no OPTIONS file");
    char path[400], section[128], line[512];
    snprintf(path, sizeof(path), "%s/%s", dir, newest);
    snprintf(section, sizeof(section), "[CFOptions \"%s\"]", cf);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    bool in = false;
    size_t nl = strlen(name);
    out[0] = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '[')
            in = strcmp(line, section) == 0;
        const char *p = line + strspn(line, " ");
        if (in && strncmp(p, name, nl) == 0 && p[nl] == '=')
            snprintf(out, outlen, "%s", p + nl + 1);
    }
    fclose(f);
    cr_assert_neq(out[0], 0, "%s has no %s in %s", cf, name, newest);
}

Test(store, sequence_keyed_families_insert_with_hints)
{
    store_close(open_ok());
    char v[128];
    const store_cf hinted[] = {STORE_CF_TASKS, STORE_CF_OUTBOX, STORE_CF_INBOX};
    for (size_t i = 0; i < sizeof(hinted) / sizeof(hinted[0]); i++) {
        recorded_option(store_cf_name(hinted[i]), "memtable_insert_with_hint_prefix_extractor", v,
                        sizeof(v));
        cr_assert_str_eq(v, "rocksdb.FixedPrefix.7", "%s", store_cf_name(hinted[i]));
    }
    recorded_option("submit_keys", "memtable_insert_with_hint_prefix_extractor", v, sizeof(v));
    cr_assert_str_eq(v, "nullptr");
}

/* Size of the newest WAL file (*.log) of the store in `d`. */
static off_t newest_log_size(const char *d)
{
    char newest[256] = "";
    DIR *dh = opendir(d);
    cr_assert_not_null(dh);
    for (struct dirent *e; (e = readdir(dh)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".log") == 0 && strcmp(e->d_name, newest) > 0)
            snprintf(newest, sizeof(newest), "%s", e->d_name);
    }
    closedir(dh);
    cr_assert_neq(newest[0], 0, "no WAL file in %s", d);
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", d, newest);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return st.st_size;
}

Test(store, the_live_log_is_written_over_zeros_and_trimmed_at_close)
{
    store *s = open_ok();
    put1(s, STORE_CF_TASKS, "k", "v");
    off_t size = newest_log_size(dir);
    cr_assert_geq(size, 512 << 10, "zeros are kept at least half a chunk ahead of the log's end");
    cr_assert_eq(size % 32768, 0, "the zeros end on a log block boundary (%lld)", (long long)size);
    store_close(s);
    cr_assert_lt(newest_log_size(dir), 4096, "a closed log keeps only what was written");
}

Test(store, a_log_ending_in_zeros_recovers_every_synced_batch)
{
    store *s = open_ok();
    char k[16];
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "k%03d", i);
        store_batch *b;
        cr_assert_eq(store_batch_alloc(s, &b), BERTH_OK);
        store_batch_put(b, STORE_CF_TASKS, k, strlen(k), "v", 1);
        cr_assert_eq(store_append(s, b), BERTH_OK);
        store_batch_free(b);
    }
    char err[256] = "";
    cr_assert_eq(store_sync(s, err, sizeof(err)), BERTH_OK, "%s", err);
    /* What a kill -9 leaves: the files as they are, the log not trimmed. */
    char copy[96], cmd[256];
    snprintf(copy, sizeof(copy), "%s-crash", dir);
    snprintf(cmd, sizeof(cmd), "cp -r %s %s", dir, copy);
    cr_assert_eq(system(cmd), 0);
    store_close(s);
    cr_assert_geq(newest_log_size(copy), 512 << 10);

    store *r;
    int rv = store_open(copy, &opts, &r, err, sizeof(err));
    cr_assert_eq(rv, BERTH_OK, "store_open: %s", err);
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "k%03d", i);
        cr_assert(has(r, STORE_CF_TASKS, k), "%s lost", k);
    }
    put1(r, STORE_CF_TASKS, "after", "v");
    store_close(r);
    nftw(copy, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

Test(store, a_log_that_cannot_be_zeroed_ahead_is_written_all_the_same)
{
    /* A file-size limit stands in for a full disk: the next chunk of
     * zeros stops short of it (EFBIG), and the log's own appends, which
     * stay under it, go on. */
    store *s = open_ok();
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 1280 << 10; /* the first chunk (1 MiB) is in; the second cannot be */
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    static char v[10 << 10];
    memset(v, 'v', sizeof(v));
    char k[16];
    for (int i = 0; i < 110; i++) { /* 1.1 MiB through the log */
        snprintf(k, sizeof(k), "z%03d", i);
        store_batch *b;
        cr_assert_eq(store_batch_alloc(s, &b), BERTH_OK);
        store_batch_put(b, STORE_CF_TASKS, k, strlen(k), v, sizeof(v));
        cr_assert_eq(store_write(s, b), BERTH_OK, "%s: %s", k, store_last_error(s));
        store_batch_free(b);
    }
    store_close(s);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    s = open_ok();
    for (int i = 0; i < 110; i++) {
        snprintf(k, sizeof(k), "z%03d", i);
        cr_assert(has(s, STORE_CF_TASKS, k), "%s lost", k);
    }
    store_close(s);
}

Test(store, a_written_batch_survives_reopen)
{
    store *s = open_ok();
    put1(s, STORE_CF_TASKS, "k1", "v1");
    store_close(s);
    s = open_ok();
    store_value v;
    cr_assert_eq(store_get(s, STORE_CF_TASKS, "k1", 2, &v), BERTH_OK);
    cr_assert_eq(v.len, 2);
    cr_assert_eq(memcmp(v.data, "v1", 2), 0);
    store_value_free(&v);
    cr_assert_eq(store_get(s, STORE_CF_OUTBOX, "k1", 2, &v), BERTH_ENOTFOUND,
                 "families are separate key spaces");
    store_close(s);
}

Test(store, refuses_another_format_version)
{
    store *s = open_ok();
    uint8_t v[4];
    store_put_be32(v, BERTH_FORMAT_VERSION + 1);
    store_batch *b;
    store_batch_alloc(s, &b);
    store_batch_put(b, STORE_CF_META, "format", 6, v, 4);
    cr_assert_eq(store_write(s, b), BERTH_OK);
    store_batch_free(b);
    store_close(s);
    char err[256] = "";
    cr_assert_eq(store_open(dir, &opts, &s, err, sizeof(err)), BERTH_EFORMAT);
    cr_assert_null(s);
    cr_assert(strstr(err, "format version") != NULL, "message: %s", err);
}

Test(store, upgrades_a_version_1_store_and_keeps_its_rows)
{
    /* Version 1 wrote no calls: its rows are read as they are, and the
     * format key says 2 from then on. */
    store *s = open_ok();
    uint8_t v[4];
    store_put_be32(v, 1);
    store_batch *b;
    store_batch_alloc(s, &b);
    store_batch_put(b, STORE_CF_META, "format", 6, v, 4);
    store_batch_put(b, STORE_CF_TASKS, "row", 3, "kept", 4);
    cr_assert_eq(store_write(s, b), BERTH_OK);
    store_batch_free(b);
    store_close(s);
    char err[256] = "";
    cr_assert_eq(store_open(dir, &opts, &s, err, sizeof(err)), BERTH_OK, "%s", err);
    store_value got;
    cr_assert_eq(store_get(s, STORE_CF_META, "format", 6, &got), BERTH_OK);
    cr_assert_eq(store_get_be32((const uint8_t *)got.data), BERTH_FORMAT_VERSION);
    store_value_free(&got);
    cr_assert_eq(store_get(s, STORE_CF_TASKS, "row", 3, &got), BERTH_OK);
    cr_assert_eq(memcmp(got.data, "kept", 4), 0);
    store_value_free(&got);
    store_close(s);

    /* Nor is a version 0 (never written by berth) taken for an old one. */
    s = open_ok();
    store_put_be32(v, 0);
    store_batch_alloc(s, &b);
    store_batch_put(b, STORE_CF_META, "format", 6, v, 4);
    cr_assert_eq(store_write(s, b), BERTH_OK);
    store_batch_free(b);
    store_close(s);
    cr_assert_eq(store_open(dir, &opts, &s, err, sizeof(err)), BERTH_EFORMAT);
}

Test(store, refuses_another_program_s_rocksdb_and_leaves_it_untouched)
{
    /* A database another program made: only "default", one key. */
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    char *rerr = NULL;
    rocksdb_t *db = rocksdb_open(o, dir, &rerr);
    cr_assert_null(rerr, "%s", rerr);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_put(db, wo, "theirs", 6, "data", 4, &rerr);
    cr_assert_null(rerr);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db);

    store *s = NULL;
    char err[512] = "";
    cr_assert_eq(store_open(dir, &opts, &s, err, sizeof(err)), BERTH_EFORMAT);
    cr_assert_null(s);
    cr_assert(strstr(err, "not a berth store") != NULL, "message: %s", err);

    size_t n = 0;
    char **cfs = rocksdb_list_column_families(o, dir, &n, &rerr);
    cr_assert_null(rerr);
    cr_assert_eq(n, 1, "no family of berth's was added");
    cr_assert_str_eq(cfs[0], "default");
    rocksdb_list_column_families_destroy(cfs, n);
    rocksdb_options_destroy(o);
}

Test(store, opens_a_store_holding_a_family_it_does_not_know)
{
    store *s = open_ok();
    store_close(s);
    rocksdb_options_t *o = rocksdb_options_create();
    char *err = NULL;
    /* Open with every existing family, then add a foreign one. */
    size_t n = 0;
    char **existing = rocksdb_list_column_families(o, dir, &n, &err);
    cr_assert_null(err);
    const char **all = calloc(n, sizeof(*all));
    const rocksdb_options_t **allo = calloc(n, sizeof(*allo));
    rocksdb_column_family_handle_t **h = calloc(n, sizeof(*h));
    for (size_t i = 0; i < n; i++) {
        all[i] = existing[i];
        allo[i] = o;
    }
    rocksdb_t *db = rocksdb_open_column_families(o, dir, (int)n, all, allo, h, &err);
    cr_assert_null(err, "%s", err);
    rocksdb_column_family_handle_t *x = rocksdb_create_column_family(db, o, "future_cf", &err);
    cr_assert_null(err);
    rocksdb_column_family_handle_destroy(x);
    for (size_t i = 0; i < n; i++)
        rocksdb_column_family_handle_destroy(h[i]);
    rocksdb_close(db);
    rocksdb_list_column_families_destroy(existing, n);
    free(all);
    free(allo);
    free(h);
    rocksdb_options_destroy(o);

    s = open_ok(); /* would fail if the foreign family were left out */
    put1(s, STORE_CF_TASKS, "a", "b");
    store_close(s);
}

Test(store, a_batch_is_atomic_across_families)
{
    store *s = open_ok();
    store_batch *b;
    store_batch_alloc(s, &b);
    store_batch_put(b, STORE_CF_TASKS, "t", 1, "1", 1);
    store_batch_put(b, STORE_CF_OUTBOX, "o", 1, "2", 1);
    store_batch_delete(b, STORE_CF_TASKS, "missing", 7);
    cr_assert_eq(store_batch_count(b), 3);
    cr_assert_eq(store_write(s, b), BERTH_OK);
    store_batch_free(b);
    cr_assert(has(s, STORE_CF_TASKS, "t"));
    cr_assert(has(s, STORE_CF_OUTBOX, "o"));
    store_close(s);
}

Test(store, reads_see_what_was_written_not_a_pending_batch)
{
    store *s = open_ok();
    put1(s, STORE_CF_TASKS, "gone", "x");
    store_batch *b;
    store_batch_alloc(s, &b);
    store_batch_put(b, STORE_CF_TASKS, "new", 3, "n", 1);
    store_batch_single_delete(b, STORE_CF_TASKS, "gone", 4);
    store_value v;
    cr_assert_eq(store_get(s, STORE_CF_TASKS, "new", 3, &v), BERTH_ENOTFOUND);
    cr_assert_eq(store_get(s, STORE_CF_TASKS, "gone", 4, &v), BERTH_OK);
    store_value_free(&v);
    cr_assert_eq(store_write(s, b), BERTH_OK);
    cr_assert_eq(store_get(s, STORE_CF_TASKS, "new", 3, &v), BERTH_OK);
    store_value_free(&v);
    cr_assert_eq(store_get(s, STORE_CF_TASKS, "gone", 4, &v), BERTH_ENOTFOUND);
    store_batch_free(b);
    store_close(s);
}

Test(store, write_failpoint_fails_and_applies_nothing)
{
    store *s = open_ok();
    store_failpoint_writes(s, 1);
    store_batch *b;
    store_batch_alloc(s, &b);
    store_batch_put(b, STORE_CF_TASKS, "a", 1, "1", 1);
    cr_assert_eq(store_write(s, b), BERTH_EIO);
    cr_assert_not(has(s, STORE_CF_TASKS, "a"));
    cr_assert_str_neq(store_last_error(s), "");
    cr_assert_eq(store_write(s, b), BERTH_OK, "only the next n writes fail");
    cr_assert(has(s, STORE_CF_TASKS, "a"));
    store_batch_free(b);
    store_close(s);
}

Test(store, an_appended_batch_is_read_at_once_and_kept_once_synced)
{
    store *s = open_ok();
    store_batch *b;
    store_batch_alloc(s, &b);
    store_batch_put(b, STORE_CF_TASKS, "a", 1, "1", 1);
    store_failpoint_writes(s, 1);
    cr_assert_eq(store_append(s, b), BERTH_EIO);
    cr_assert_not(has(s, STORE_CF_TASKS, "a"), "a failed append applies nothing");
    cr_assert_eq(store_append(s, b), BERTH_OK);
    cr_assert(has(s, STORE_CF_TASKS, "a"), "readable before any sync");

    char err[128] = "";
    store_failpoint_syncs(s, 1);
    cr_assert_eq(store_sync(s, err, sizeof(err)), BERTH_EIO);
    cr_assert_str_eq(err, "failpoint: sync refused");
    cr_assert_eq(store_sync(s, err, sizeof(err)), BERTH_OK, "only the next n syncs fail");
    store_batch_free(b);
    store_close(s);
    s = open_ok();
    cr_assert(has(s, STORE_CF_TASKS, "a"));
    store_close(s);
}

Test(store, read_failpoint_fails_the_next_reads)
{
    store *s = open_ok();
    put1(s, STORE_CF_TASKS, "a", "1");
    store_failpoint_reads(s, 2);
    store_value v;
    cr_assert_eq(store_get(s, STORE_CF_TASKS, "a", 1, &v), BERTH_EIO);
    cr_assert_eq(store_get(s, STORE_CF_TASKS, "a", 1, &v), BERTH_EIO);
    cr_assert_eq(store_get(s, STORE_CF_TASKS, "a", 1, &v), BERTH_OK);
    store_value_free(&v);
    store_close(s);
}

Test(store, iterates_in_key_order)
{
    store *s = open_ok();
    put1(s, STORE_CF_INCIDENTS, "b", "2");
    put1(s, STORE_CF_INCIDENTS, "a", "1");
    put1(s, STORE_CF_INCIDENTS, "c", "3");
    store_iter *it;
    cr_assert_eq(store_iter_open(s, STORE_CF_INCIDENTS, &it), BERTH_OK);
    const char *want = "abc";
    int i = 0;
    for (; store_iter_valid(it); store_iter_next(it), i++) {
        size_t kl;
        const char *k = store_iter_key(it, &kl);
        cr_assert_eq(kl, 1);
        cr_assert_eq(k[0], want[i]);
    }
    cr_assert_eq(i, 3);
    cr_assert_eq(store_iter_status(it), BERTH_OK);
    store_iter_seek(it, "b", 1);
    cr_assert(store_iter_valid(it));
    store_iter_close(it);
    store_close(s);
}

static size_t count_rows(store *s, store_cf cf)
{
    store_iter *it;
    store_iter_open(s, cf, &it);
    size_t n = 0;
    for (; store_iter_valid(it); store_iter_next(it))
        n++;
    store_iter_close(it);
    return n;
}

Test(store, compaction_drops_dedup_entries_past_the_horizon)
{
    store *s = open_ok();
    uint8_t old_v[STORE_SUBMIT_VALUE_LEN] = {0}, new_v[STORE_SUBMIT_VALUE_LEN] = {0};
    store_put_be64(old_v, 1000000 - 5000); /* 5 s old, horizon 1 s */
    store_put_be64(new_v, 1000000 - 10);
    store_batch *b;
    store_batch_alloc(s, &b);
    store_batch_put(b, STORE_CF_SUBMIT_KEYS, "old", 3, old_v, sizeof(old_v));
    store_batch_put(b, STORE_CF_SUBMIT_KEYS, "new", 3, new_v, sizeof(new_v));
    store_batch_put(b, STORE_CF_INBOX, "old", 3, old_v, 8);
    store_batch_put(b, STORE_CF_INBOX, "new", 3, new_v, 8);
    store_batch_put(b, STORE_CF_TASKS, "old", 3, old_v, 8); /* not a dedup family */
    cr_assert_eq(store_write(s, b), BERTH_OK);
    store_batch_free(b);
    cr_assert_eq(count_rows(s, STORE_CF_SUBMIT_KEYS), 2);
    store_compact(s, STORE_CF_SUBMIT_KEYS);
    store_compact(s, STORE_CF_INBOX);
    store_compact(s, STORE_CF_TASKS);
    cr_assert_not(has(s, STORE_CF_SUBMIT_KEYS, "old"));
    cr_assert(has(s, STORE_CF_SUBMIT_KEYS, "new"));
    cr_assert_not(has(s, STORE_CF_INBOX, "old"));
    cr_assert(has(s, STORE_CF_INBOX, "new"));
    cr_assert(has(s, STORE_CF_TASKS, "old"), "the filter touches dedup families only");
    store_close(s);
}

Test(store, refuses_options_without_a_horizon)
{
    store_options bad = opts;
    bad.dedup_horizon_ms = 0;
    store *s;
    char err[128] = "";
    cr_assert_eq(store_open(dir, &bad, &s, err, sizeof(err)), BERTH_EINVAL);
    cr_assert_null(s);
}
