/* top.h — `berth top`, a live view from a berthd's /metrics (top.c). */
#ifndef BERTH_TOOLS_TOP_H
#define BERTH_TOOLS_TOP_H

#include <stdbool.h>

/* Shows the /metrics of urls (one, or several replicas' separated by
 * commas, shown as one cluster) every second, count times (<= 0: until
 * stopped); tty: clear the screen between frames; json: one object per
 * frame, a line each. Returns an exit code of berth's (0; 2 for a bad
 * list; 4 when no berthd can be reached). */
int top_run(const char *urls, long count, bool tty, bool json);

#endif
