/* spawn.c — see spawn.h. */
#define _GNU_SOURCE
#include "tools/bench/spawn.h"

#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int spawn_berthd(spawned_berthd *b, const char *who, const char *const *extra)
{
    memset(b, 0, sizeof(*b));
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char berthd[4200];
    snprintf(berthd, sizeof(berthd), "%s/berthd", dirname(self));
    /* $TMPDIR as mkdtemp(1) has it: TMPDIR=/dev/shm runs berthd without
     * a disk under it, to tell what the disk costs. */
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    if ((size_t)snprintf(b->dir, sizeof(b->dir), "%s/%s-XXXXXX", tmp, who) >= sizeof(b->dir)) {
        fprintf(stderr, "%s: TMPDIR is too long\n", who);
        return -1;
    }
    if (mkdtemp(b->dir) == NULL) {
        perror(who);
        return -1;
    }
    size_t n_extra = 0;
    while (extra != NULL && extra[n_extra] != NULL)
        n_extra++;
    const char **args = calloc(12 + n_extra, sizeof(*args));
    int out[2];
    if (args == NULL || pipe(out) != 0) {
        free(args);
        return -1;
    }
    /* On --store (PostgreSQL) the directory only holds what berthd
     * prints: --data would be refused beside it. */
    bool on_store = false;
    for (size_t i = 0; i < n_extra; i++)
        on_store |= strcmp(extra[i], "--store") == 0 || strncmp(extra[i], "--store=", 8) == 0;
    size_t a = 0;
    args[a++] = berthd;
    if (!on_store) {
        args[a++] = "--data";
        args[a++] = b->dir;
    }
    args[a++] = "--operate";
    args[a++] = "tcp://127.0.0.1:0";
    args[a++] = "--events";
    args[a++] = "tcp://127.0.0.1:0";
    args[a++] = "--admin";
    args[a++] = "tcp://127.0.0.1:0";
    args[a++] = "--metrics";
    args[a++] = "http://127.0.0.1:0";
    for (size_t i = 0; i < n_extra; i++)
        args[a++] = extra[i];
    args[a] = NULL;
    b->pid = fork();
    if (b->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* a tool that dies takes its berthd along */
        dup2(out[1], STDOUT_FILENO);
        close(out[0]);
        execv(berthd, (char *const *)args);
        _exit(127);
    }
    free(args);
    close(out[1]);
    if (b->pid < 0) {
        b->pid = 0;
        close(out[0]);
        return -1;
    }
    char line[512];
    size_t got = 0;
    while (got + 1 < sizeof(line)) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        if (poll(&p, 1, 20000) <= 0 || read(out[0], line + got, 1) != 1)
            break;
        if (line[got] == '\n')
            break;
        got++;
    }
    line[got] = '\0';
    close(out[0]);
    const char *o = strstr(line, "operate=");
    const char *ad = strstr(line, "admin=");
    if (ad == NULL || sscanf(ad, "admin=%255s", b->admin) != 1)
        b->admin[0] = '\0';
    if (o == NULL || sscanf(o, "operate=%255s", b->url) != 1) {
        fprintf(stderr, "%s: %s did not become ready\n", who, berthd);
        return -1;
    }
    return 0;
}

void spawn_cleanup(spawned_berthd *b, const char *who)
{
    if (b->dir[0] == '\0')
        return;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", b->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "%s: could not remove %s\n", who, b->dir);
    b->dir[0] = '\0';
}
