/* fuzz_engine.c — see fuzz.h. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "store/err.h"
#include "tests/fuzz/fuzz.h"

static char dir[64];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_dir(void)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void fuzz_engine_close(engine *e)
{
    engine_close(e);
    remove_dir();
}

engine *fuzz_engine(void)
{
    static bool registered; /* the store of the last run goes when libFuzzer exits */
    if (!registered && atexit(remove_dir) == 0)
        registered = true;
    snprintf(dir, sizeof(dir), "%s/berth-fuzz-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    engine_options o;
    engine_options_default(&o);
    o.data_dir = dir;
    o.wait_default_ms = 0; /* a fuzz input is answered at once */
    o.wait_max_ms = 0;
    o.body_cache_bytes = 1u << 20;
    char err[256];
    engine *e;
    if (engine_open(&o, &e, err, sizeof(err)) != BERTH_OK) {
        fprintf(stderr, "engine_open: %s\n", err);
        exit(1);
    }
    return e;
}

void fuzz_answer_init(fuzz_answer *a)
{
    a->r = NULL;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
}

void fuzz_done(void *answer, engine_reply *r)
{
    fuzz_answer *a = answer;
    pthread_mutex_lock(&a->mu);
    a->r = r;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

engine_reply *fuzz_answer_wait(fuzz_answer *a)
{
    pthread_mutex_lock(&a->mu);
    while (a->r == NULL)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    return a->r;
}

void fuzz_answer_fini(fuzz_answer *a)
{
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
}

engine_reply *fuzz_run(engine *e, const engine_request *req)
{
    fuzz_answer a;
    fuzz_answer_init(&a);
    if (engine_exec(e, req, fuzz_done, &a) != BERTH_OK)
        abort();
    engine_reply *r = fuzz_answer_wait(&a);
    fuzz_answer_fini(&a);
    return r;
}
