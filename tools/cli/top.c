/*
 * top.c — `berth top`: a live view of berthd from its /metrics, every
 * second: tasks by topic and state, completions and failures per second,
 * waiting fetches, the outbox, and the store's fsync time (p50 and p99 of
 * the syncs in the last second, to their histogram bucket).
 *
 * Given the /metrics of several replicas (on PostgreSQL), it shows the
 * cluster: counters, histograms and the replicas' own gauges are summed;
 * gauges labelled scope="cluster" (read from the shared database, the same
 * on each) are taken once (the largest). Rates are each replica's change
 * since its last scrape, summed over the replicas reached both times, so a
 * replica that cannot be reached for a frame is named and skipped, never
 * counted as a drop.
 */
#include "tools/cli/top.h"

#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli/cli.h"

#define TOP_TOPICS   64
#define TOP_BUCKETS  32
#define TOP_RESPONSE (8u << 20)
#define TOP_URLS     16

typedef struct top_topic {
    char name[208];
    double state[5]; /* ready, delayed, locked, backoff, terminal */
    bool cluster;    /* its states are the cluster's (scope="cluster") */
    double completed, failed;
} top_topic;

typedef struct frame {
    bool ok; /* the scrape answered */
    top_topic t[TOP_TOPICS];
    size_t n;
    double waiting, outbox, poisoned;
    bool outbox_cluster; /* outbox and poisoned are the cluster's (scope="cluster") */
    double le[TOP_BUCKETS], cum[TOP_BUCKETS]; /* berth_fsync_seconds buckets */
    size_t nb;
} frame;

/* GET url/metrics (http://HOST:PORT): the body, malloc'd, or NULL. */
static char *get_metrics(const char *url, char *err, size_t errlen)
{
    char host[256], port[16];
    if (sscanf(url, "http://%255[^:/]:%15[0-9]", host, port) != 2) {
        snprintf(err, errlen, "%s: an http://HOST:PORT URL is needed", url);
        return NULL;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        snprintf(err, errlen, "%s: the host does not resolve", url);
        return NULL;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        snprintf(err, errlen, "cannot reach %s", url);
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return NULL;
    }
    freeaddrinfo(ai);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char req[512];
    int n = snprintf(req, sizeof(req), "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", host);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        snprintf(err, errlen, "cannot write to %s", url);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t got = 0;
    while (buf != NULL && (got = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)got;
        if (len + 1 == cap && cap < TOP_RESPONSE) {
            char *b = realloc(buf, cap *= 2);
            if (b == NULL)
                free(buf);
            buf = b;
        } else if (len + 1 == cap) {
            break;
        }
    }
    close(fd);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    buf[len] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || strstr(buf, " 200 ") == NULL || body == NULL) {
        snprintf(err, errlen, "%s answered: %.60s", url, buf);
        free(buf);
        return NULL;
    }
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
}

/* The value of label `key` in a series' {...}, into out. */
static bool label_of(const char *labels, const char *key, char *out, size_t len)
{
    char pat[32];
    snprintf(pat, sizeof(pat), "%s=\"", key);
    const char *p = strstr(labels, pat);
    if (p == NULL)
        return false;
    p += strlen(pat);
    size_t n = 0;
    for (; *p && *p != '"' && n + 1 < len; p++) {
        if (*p == '\\' && p[1])
            p++;
        out[n++] = *p;
    }
    out[n] = '\0';
    return true;
}

static top_topic *topic_of(frame *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    if (f->n == TOP_TOPICS)
        return NULL;
    top_topic *t = &f->t[f->n++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    return t;
}

static void parse(const char *text, frame *f)
{
    memset(f, 0, sizeof(*f));
    f->ok = true;
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        char l[512];
        if (n < sizeof(l) && line[0] != '#') {
            memcpy(l, line, n);
            l[n] = '\0';
            char *sp = strrchr(l, ' ');
            double v = sp ? atof(sp + 1) : 0;
            char topic[208], state[32], le[32];
            bool has_topic = label_of(l, "topic", topic, sizeof(topic));
            top_topic *t = has_topic ? topic_of(f, topic) : NULL;
            if (strncmp(l, "berth_tasks{", 12) == 0 && t &&
                label_of(l, "state", state, sizeof(state))) {
                char scope[16];
                t->cluster =
                    label_of(l, "scope", scope, sizeof(scope)) && strcmp(scope, "cluster") == 0;
                static const char *const names[] = {"ready", "delayed", "locked", "backoff",
                                                    "terminal"};
                for (int k = 0; k < 5; k++)
                    if (strcmp(state, names[k]) == 0)
                        t->state[k] = v;
            } else if (strncmp(l, "berth_tasks_completed_total{", 28) == 0 && t) {
                t->completed = v;
            } else if (strncmp(l, "berth_tasks_failed_total{", 25) == 0 && t) {
                t->failed = v;
            } else if (strncmp(l, "berth_waiting_fetches ", 22) == 0) {
                f->waiting = v;
            } else if (strncmp(l, "berth_outbox_pending ", 21) == 0 ||
                       strncmp(l, "berth_outbox_pending{", 21) == 0) {
                char scope[16];
                f->outbox = v;
                f->outbox_cluster =
                    label_of(l, "scope", scope, sizeof(scope)) && strcmp(scope, "cluster") == 0;
            } else if (strncmp(l, "berth_deliveries_poisoned ", 26) == 0 ||
                       strncmp(l, "berth_deliveries_poisoned{", 26) == 0) {
                f->poisoned = v;
            } else if (strncmp(l, "berth_fsync_seconds_bucket{", 27) == 0 &&
                       label_of(l, "le", le, sizeof(le)) && f->nb < TOP_BUCKETS) {
                f->le[f->nb] = strcmp(le, "+Inf") == 0 ? -1 : atof(le);
                f->cum[f->nb++] = v;
            }
        }
        line = end ? end + 1 : NULL;
    }
}

/* The fsync buckets' growth since the last frame, summed over the
 * replicas scraped both times (their bounds are berthd's, the same). */
typedef struct growth {
    double le[TOP_BUCKETS], d[TOP_BUCKETS];
    size_t nb;
} growth;

static void grow(growth *g, const frame *now, const frame *prev)
{
    if (!now->ok || !prev->ok || now->nb == 0 || now->nb != prev->nb ||
        (g->nb != 0 && g->nb != now->nb))
        return;
    g->nb = now->nb;
    for (size_t i = 0; i < now->nb; i++) {
        g->le[i] = now->le[i];
        g->d[i] += now->cum[i] - prev->cum[i];
    }
}

/* The bucket bound under which fraction q of the syncs fell (ms); -1 when
 * there was none, -2 past the last bound. */
static double quantile_ms(const growth *g, double q)
{
    if (g->nb == 0 || g->d[g->nb - 1] <= 0)
        return -1;
    for (size_t i = 0; i < g->nb; i++)
        if (g->d[i] >= q * g->d[g->nb - 1])
            return g->le[i] < 0 ? -2 : g->le[i] * 1000;
    return -1;
}

static void print_ms(const char *what, double ms)
{
    if (ms == -1)
        printf(" %s -", what);
    else if (ms == -2)
        printf(" %s >max", what);
    else
        printf(" %s <=%g ms", what, ms);
}

static void json_ms(const char *what, double ms)
{
    if (ms >= 0)
        printf(",\"%s\":%g", what, ms);
    else
        printf(",\"%s\":null", what);
}

static const top_topic *find(const frame *f, const char *name)
{
    for (size_t i = 0; f->ok && i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

/* One topic over the replicas: its states (the cluster's once, else
 * summed), its totals, and its rates (-1: no replica scraped twice). */
typedef struct row {
    double state[5], completed, failed, done_s, failed_s;
} row;

static row merge(const frame *now, const frame *prev, size_t n, bool have_prev, const char *name)
{
    row r = {.done_s = -1, .failed_s = -1};
    for (size_t u = 0; u < n; u++) {
        const top_topic *t = find(&now[u], name);
        if (t == NULL)
            continue;
        for (int k = 0; k < 5; k++)
            r.state[k] = t->cluster ? (t->state[k] > r.state[k] ? t->state[k] : r.state[k])
                                    : r.state[k] + t->state[k];
        r.completed += t->completed;
        r.failed += t->failed;
        const top_topic *p = have_prev ? find(&prev[u], name) : NULL;
        if (p != NULL) { /* (a topic new since the last frame has no rate yet) */
            r.done_s = (r.done_s < 0 ? 0 : r.done_s) + t->completed - (p ? p->completed : 0);
            r.failed_s = (r.failed_s < 0 ? 0 : r.failed_s) + t->failed - (p ? p->failed : 0);
        }
    }
    return r;
}

/* The topics of every replica reached, each once: names into now's frames. */
static size_t topic_names(const frame *now, size_t n, const char **names, size_t max)
{
    size_t k = 0;
    for (size_t u = 0; u < n; u++)
        for (size_t i = 0; now[u].ok && i < now[u].n; i++) {
            bool seen = false;
            for (size_t j = 0; j < k && !seen; j++)
                seen = strcmp(names[j], now[u].t[i].name) == 0;
            if (!seen && k < max)
                names[k++] = now[u].t[i].name;
        }
    return k;
}

static void show(const char *urls, char *const *url, size_t n, const frame *now, const frame *prev,
                 bool have_prev, bool tty, bool json)
{
    const char *names[TOP_TOPICS * 4];
    size_t nt = topic_names(now, n, names, sizeof(names) / sizeof(names[0]));
    double waiting = 0, outbox = 0, poisoned = 0;
    growth g = {0};
    size_t reached = 0;
    for (size_t u = 0; u < n; u++) {
        if (!now[u].ok)
            continue;
        reached++;
        waiting += now[u].waiting;
        if (now[u].outbox_cluster) { /* the same on every replica: once */
            outbox = now[u].outbox > outbox ? now[u].outbox : outbox;
            poisoned = now[u].poisoned > poisoned ? now[u].poisoned : poisoned;
        } else {
            outbox += now[u].outbox;
            poisoned += now[u].poisoned;
        }
        if (have_prev)
            grow(&g, &now[u], &prev[u]);
    }
    if (json) {
        printf("{\"replicas\":%zu,\"reached\":%zu,\"unreachable\":[", n, reached);
        for (size_t u = 0, k = 0; u < n; u++)
            if (!now[u].ok) {
                printf("%s", k++ ? "," : "");
                cli_json_cstr(stdout, url[u]);
            }
        printf("],\"topics\":[");
        for (size_t i = 0; i < nt; i++) {
            row r = merge(now, prev, n, have_prev, names[i]);
            printf("%s{\"topic\":", i ? "," : "");
            cli_json_cstr(stdout, names[i]);
            printf(",\"ready\":%.0f,\"delayed\":%.0f,\"locked\":%.0f,\"backoff\":%.0f,"
                   "\"terminal\":%.0f,\"completed\":%.0f,\"failed\":%.0f",
                   r.state[0], r.state[1], r.state[2], r.state[3], r.state[4], r.completed,
                   r.failed);
            if (r.done_s >= 0)
                printf(",\"completed_per_s\":%.1f,\"failed_per_s\":%.1f}", r.done_s, r.failed_s);
            else
                printf(",\"completed_per_s\":null,\"failed_per_s\":null}");
        }
        printf("],\"waiting_fetches\":%.0f,\"outbox\":%.0f,\"poisoned\":%.0f", waiting, outbox,
               poisoned);
        json_ms("fsync_p50_ms", quantile_ms(&g, 0.5));
        json_ms("fsync_p99_ms", quantile_ms(&g, 0.99));
        printf("}\n");
        fflush(stdout);
        return;
    }
    if (tty)
        printf("\033[H\033[2J");
    printf("berth top  %s  (every second; Ctrl-C stops)\n", urls);
    for (size_t u = 0; u < n; u++)
        if (!now[u].ok)
            printf("unreachable: %s\n", url[u]);
    printf("%-32s %9s %9s %9s %9s %9s %10s %10s\n", "topic", "ready", "delayed", "locked",
           "backoff", "terminal", "done/s", "failed/s");
    for (size_t i = 0; i < nt; i++) {
        row r = merge(now, prev, n, have_prev, names[i]);
        printf("%-32s %9.0f %9.0f %9.0f %9.0f %9.0f", names[i], r.state[0], r.state[1], r.state[2],
               r.state[3], r.state[4]);
        if (r.done_s >= 0)
            printf(" %10.1f %10.1f\n", r.done_s, r.failed_s);
        else
            printf(" %10s %10s\n", "-", "-");
    }
    printf("waiting fetches %.0f  outbox %.0f  poisoned %.0f  fsync", waiting, outbox, poisoned);
    print_ms("p50", quantile_ms(&g, 0.5));
    print_ms("p99", quantile_ms(&g, 0.99));
    printf("\n");
    fflush(stdout);
}

int top_run(const char *urls, long count, bool tty, bool json)
{
    static frame now[TOP_URLS], prev[TOP_URLS];
    char *list = strdup(urls), *url[TOP_URLS], *save = NULL;
    size_t n = 0;
    if (list == NULL) {
        fprintf(stderr, "berth top: out of memory\n");
        return 4;
    }
    for (char *u = strtok_r(list, ",", &save); u != NULL; u = strtok_r(NULL, ",", &save)) {
        if (n == TOP_URLS) {
            fprintf(stderr, "berth top: at most %d --metrics URLs\n", TOP_URLS);
            free(list);
            return 2;
        }
        url[n++] = u;
    }
    if (n == 0) {
        fprintf(stderr, "berth top: --metrics names no URL\n");
        free(list);
        return 2;
    }
    bool have_prev = false;
    char err[256];
    int rv = 0;
    for (long shown = 0; count <= 0 || shown < count; shown++) {
        size_t reached = 0;
        for (size_t u = 0; u < n; u++) {
            char *text = get_metrics(url[u], err, sizeof(err));
            if (text == NULL) {
                now[u].ok = false;
                if (n == 1)
                    fprintf(stderr, "berth top: %s\n", err);
                continue;
            }
            parse(text, &now[u]);
            free(text);
            reached++;
        }
        if (reached == 0) { /* nothing to show: as berthd down */
            if (n > 1)
                fprintf(stderr, "berth top: no replica answered (%s)\n", err);
            rv = 4;
            break;
        }
        show(urls, url, n, now, prev, have_prev, tty, json);
        memcpy(prev, now, sizeof(frame) * n);
        have_prev = true;
        if (count <= 0 || shown + 1 < count) {
            struct timespec one = {1, 0};
            nanosleep(&one, NULL);
        }
    }
    free(list);
    return rv;
}
