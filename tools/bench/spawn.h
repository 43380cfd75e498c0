/*
 * spawn.h — the berthd built beside a tool, run for the tool's --spawn:
 * on a fresh temp directory and free loopback ports, ready when this
 * returns. Stopping it is the tool's (each judges its exit its own way);
 * spawn_cleanup() removes the directory after.
 */
#ifndef BERTH_TOOLS_SPAWN_H
#define BERTH_TOOLS_SPAWN_H

#include <sys/types.h>

typedef struct spawned_berthd {
    pid_t pid;       /* 0: not running */
    char dir[64];    /* its data directory */
    char url[256];   /* its operate URL, from its ready line */
    char admin[256]; /* its admin URL, likewise */
} spawned_berthd;

/* Starts it with the extra arguments (NULL-terminated; NULL: none) and
 * waits up to 20 s for its ready line. 0, or -1 with a line on stderr
 * headed by who (the tool's name). */
int spawn_berthd(spawned_berthd *b, const char *who, const char *const *extra);
/* Removes its data directory (once it is stopped). */
void spawn_cleanup(spawned_berthd *b, const char *who);

#endif
