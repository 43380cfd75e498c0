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
