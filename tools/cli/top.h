/* top.h — `berth top`, a live view from a berthd's /metrics (top.c). */
#ifndef BERTH_TOOLS_TOP_H
#define BERTH_TOOLS_TOP_H

#include <stdbool.h>

/* Shows url's /metrics every second, count times (<= 0: until stopped);
 * tty: clear the screen between frames. Returns an exit code of berth's
 * (0, or 4 when berthd cannot be reached). */
int top_run(const char *url, long count, bool tty);

#endif
