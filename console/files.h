/*
 * files.h — the console's files, compiled into berthd by
 * console/embed.cmake (the generated console/files.c in the build tree):
 * each file's bytes, its path under /console/ and its content type, and
 * one ETag for them all (a hash of their bytes: a new build's files are
 * fetched again, an unchanged page is answered 304).
 */
#ifndef BERTH_CONSOLE_FILES_H
#define BERTH_CONSOLE_FILES_H

#include <stddef.h>

typedef struct console_file {
    const char *name; /* under /console/: "index.html", "console.js" ... */
    const char *type; /* its Content-Type */
    const unsigned char *data;
    size_t len;
} console_file;

extern const console_file console_files[];
extern const size_t console_n_files;
extern const char console_etag[]; /* quoted, as the header carries it */

#endif
