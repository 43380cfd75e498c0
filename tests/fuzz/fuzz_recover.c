/*
 * fuzz_recover.c — libFuzzer: an engine opening a data directory whose
 * records were corrupted.
 *
 * Once, a real store is made: tasks submitted (one with an idempotency
 * key), fetched, one completed, one failed until terminal, one refused,
 * one left locked. Its records, every column family, are the base. An
 * input is a list of edits to them: flip a byte of a value or a key, cut
 * a value short, drop a record, add one made of the input's bytes, copy
 * one into another family. The edited records go into a fresh store and
 * an engine opens it: it refuses with a message, or it opens, serves a
 * fetch, a stats and a completion with a made-up token, and closes.
 * Never a crash, a hang or a sanitizer report.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/err.h"
#include "store/store.h"
#include "tests/fuzz/fuzz.h"

typedef struct record {
    store_cf cf;
    uint8_t *k, *v;
    size_t kl, vl;
} record;

#define BASE_MAX 256
static record base[BASE_MAX];
static size_t n_base;

static void submit(engine *e, const char *payload, const char *key)
{
    engine_request q = {.op = ENGINE_OP_SUBMIT};
    q.u.submit.topic = "t";
    q.u.submit.payload = (const uint8_t *)payload;
    q.u.submit.payload_len = strlen(payload);
    q.u.submit.idempotency_key = key;
    engine_reply_free(fuzz_run(e, &q));
}

static const char *const topics[] = {"t"};

static engine_reply *fetch(engine *e, uint32_t max)
{
    engine_request q = {.op = ENGINE_OP_FETCH};
    q.u.fetch = (engine_fetch_args){.worker_id = "w",
                                    .topics = topics,
                                    .n_topics = 1,
                                    .has_max_tasks = true,
                                    .max_tasks = max,
                                    .has_wait_ms = true};
    return fuzz_run(e, &q);
}

static engine_guard guard_of(const engine_task *t)
{
    return (engine_guard){.task_id = t->id, .worker_id = "w", .lock_token = t->lock_token};
}

/* ---- directories ---- */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void fresh_dir(char *dir, size_t len)
{
    /* Not /dev/shm: there RocksDB's preallocation of each new log
     * (fallocate) writes ~70 MB of memory, many times an input's cost. */
    snprintf(dir, len, "/tmp/berth-fuzz-recover-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
}

static engine *open_engine(const char *dir, char *err, size_t errlen)
{
    engine_options o;
    engine_options_default(&o);
    o.data_dir = dir;
    o.wait_default_ms = 0;
    o.wait_max_ms = 0;
    o.retries = 1;
    engine *e = NULL;
    return engine_open(&o, &e, err, errlen) == BERTH_OK ? e : NULL;
}

static uint64_t fixed_now(void *ctx)
{
    (void)ctx;
    return 1700000000000ull;
}

static store *open_store(const char *dir)
{
    store_options so = {.dedup_horizon_ms = 86400000, .now_ms = fixed_now};
    store *s;
    char err[256];
    if (store_open(dir, &so, &s, err, sizeof(err)) != BERTH_OK) {
        fprintf(stderr, "store_open: %s\n", err);
        exit(1);
    }
    return s;
}

static void *dup_bytes(const void *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    if (q == NULL)
        abort();
    memcpy(q, p, n);
    return q;
}

/* The base: a store with a little of every kind of record. */
static void make_base(void)
{
    char dir[64], err[256];
    fresh_dir(dir, sizeof(dir));
    engine *e = open_engine(dir, err, sizeof(err));
    if (e == NULL) {
        fprintf(stderr, "engine_open: %s\n", err);
        exit(1);
    }
    submit(e, "to complete", "key-1");
    submit(e, "to fail", NULL);
    submit(e, "to refuse", NULL);
    submit(e, "to hold", NULL);
    submit(e, "to leave", NULL);
    engine_reply *f = fetch(e, 4);
    if (f->n_tasks == 4) {
        engine_request q = {.op = ENGINE_OP_COMPLETE};
        q.u.complete.guard = guard_of(&f->tasks[0]);
        engine_reply_free(fuzz_run(e, &q));
        q = (engine_request){.op = ENGINE_OP_FAIL};
        q.u.fail.guard = guard_of(&f->tasks[1]);
        q.u.fail.error = (engine_error){.code = "E", .message = "failed"};
        q.u.fail.has_retries_left = true; /* terminal: an incident */
        engine_reply_free(fuzz_run(e, &q));
        q = (engine_request){.op = ENGINE_OP_REFUSE};
        q.u.refuse.guard = guard_of(&f->tasks[2]);
        q.u.refuse.error = (engine_error){.code = "R", .message = "refused"};
        engine_reply_free(fuzz_run(e, &q));
    }
    engine_reply_free(f);
    engine_close(e);

    store *s = open_store(dir);
    for (int cf = 0; cf < STORE_CF_COUNT; cf++) {
        store_iter *it;
        if (store_iter_open(s, (store_cf)cf, &it) != BERTH_OK)
            abort();
        for (store_iter_seek(it, "", 0); store_iter_valid(it) && n_base < BASE_MAX;
             store_iter_next(it)) {
            record *r = &base[n_base++];
            r->cf = (store_cf)cf;
            const void *k = store_iter_key(it, &r->kl), *v = store_iter_value(it, &r->vl);
            r->k = dup_bytes(k, r->kl);
            r->v = dup_bytes(v, r->vl);
        }
        store_iter_close(it);
    }
    store_close(s);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    make_base();
    return 0;
}

/* ---- one input ---- */

typedef struct cursor {
    const uint8_t *p;
    size_t n;
} cursor;

static uint8_t take(cursor *c)
{
    if (c->n == 0)
        return 0;
    c->n--;
    return *c->p++;
}

static size_t take_bytes(cursor *c, size_t want, const uint8_t **out)
{
    size_t n = want < c->n ? want : c->n;
    *out = c->p;
    c->p += n;
    c->n -= n;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    record rec[BASE_MAX + 16];
    size_t n = n_base;
    for (size_t i = 0; i < n; i++) {
        rec[i] = base[i];
        rec[i].k = dup_bytes(base[i].k, base[i].kl);
        rec[i].v = dup_bytes(base[i].v, base[i].vl);
    }
    cursor c = {data, size};
    while (c.n > 0) {
        uint8_t op = take(&c) % 6, at = take(&c);
        record *r = n > 0 ? &rec[at % n] : NULL;
        uint16_t pos = (uint16_t)(take(&c) | take(&c) << 8);
        switch (op) {
        case 0: /* flip a byte of a value */
            if (r != NULL && r->vl > 0)
                r->v[pos % r->vl] ^= (uint8_t)(take(&c) | 1);
            break;
        case 1: /* flip a byte of a key */
            if (r != NULL && r->kl > 0)
                r->k[pos % r->kl] ^= (uint8_t)(take(&c) | 1);
            break;
        case 2: /* cut a value short */
            if (r != NULL)
                r->vl = r->vl > 0 ? pos % r->vl : 0;
            break;
        case 3: /* drop a record */
            if (r != NULL) {
                free(r->k);
                free(r->v);
                *r = rec[--n];
            }
            break;
        case 4: /* a record of the input's bytes */
            if (n < BASE_MAX + 16) {
                const uint8_t *k, *v;
                size_t kl = take_bytes(&c, pos % 64, &k);
                size_t vl = take_bytes(&c, take(&c), &v);
                rec[n] = (record){(store_cf)(at % STORE_CF_COUNT), dup_bytes(k, kl),
                                  dup_bytes(v, vl), kl, vl};
                n++;
            }
            break;
        case 5: /* a copy in another family */
            if (r != NULL && n < BASE_MAX + 16) {
                rec[n] = (record){(store_cf)(pos % STORE_CF_COUNT), dup_bytes(r->k, r->kl),
                                  dup_bytes(r->v, r->vl), r->kl, r->vl};
                n++;
            }
            break;
        }
    }

    char dir[64], err[256];
    fresh_dir(dir, sizeof(dir));
    store *s = open_store(dir);
    store_batch *b;
    if (store_batch_alloc(s, &b) != BERTH_OK)
        abort();
    for (size_t i = 0; i < n; i++)
        store_batch_put(b, rec[i].cf, rec[i].k, rec[i].kl, rec[i].v, rec[i].vl);
    if (store_write(s, b) != BERTH_OK)
        abort();
    store_batch_free(b);
    store_close(s);
    for (size_t i = 0; i < n; i++) {
        free(rec[i].k);
        free(rec[i].v);
    }

    engine *e = open_engine(dir, err, sizeof(err));
    if (e != NULL) { /* it took the records: it must serve */
        engine_reply *f = fetch(e, 8);
        for (size_t i = 0; i < f->n_tasks; i++) {
            engine_request q = {.op = ENGINE_OP_COMPLETE};
            q.u.complete.guard = guard_of(&f->tasks[i]);
            engine_reply_free(fuzz_run(e, &q));
        }
        engine_reply_free(f);
        engine_request q = {.op = ENGINE_OP_COMPLETE};
        q.u.complete.guard = (engine_guard){"00000000000000000000000000000000", "w", "x"};
        engine_reply_free(fuzz_run(e, &q));
        q = (engine_request){.op = ENGINE_OP_STATS};
        engine_reply_free(fuzz_run(e, &q));
        engine_close(e);
    }
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
