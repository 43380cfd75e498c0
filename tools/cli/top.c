/*
 * top.c — `berth top`: a live view of a berthd from its /metrics, every
 * second: tasks by topic and state, completions and failures per second,
 * waiting fetches, the outbox, and the store's fsync time (p50 and p99 of
 * the syncs in the last second, to their histogram bucket).
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

#define TOP_TOPICS   64
#define TOP_BUCKETS  32
#define TOP_RESPONSE (8u << 20)

typedef struct top_topic {
    char name[208];
    double state[5]; /* ready, delayed, locked, backoff, terminal */
    double completed, failed;
} top_topic;

typedef struct frame {
    top_topic t[TOP_TOPICS];
    size_t n;
    double waiting, outbox, poisoned;
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
            } else if (strncmp(l, "berth_outbox_pending ", 21) == 0) {
                f->outbox = v;
            } else if (strncmp(l, "berth_deliveries_poisoned ", 26) == 0) {
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

/* The bucket bound under which fraction q of the syncs since `prev` fell
 * (ms), or -1 when there was none. */
static double quantile_ms(const frame *now, const frame *prev, double q)
{
    if (now->nb == 0 || now->nb != prev->nb)
        return -1;
    double total = now->cum[now->nb - 1] - prev->cum[now->nb - 1];
    if (total <= 0)
        return -1;
    for (size_t i = 0; i < now->nb; i++)
        if (now->cum[i] - prev->cum[i] >= q * total)
            return now->le[i] < 0 ? -2 : now->le[i] * 1000;
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

int top_run(const char *url, long count, bool tty)
{
    static frame now, prev;
    bool have_prev = false;
    char err[256];
    for (long shown = 0; count <= 0 || shown < count; shown++) {
        char *text = get_metrics(url, err, sizeof(err));
        if (text == NULL) {
            fprintf(stderr, "berth top: %s\n", err);
            return 4;
        }
        parse(text, &now);
        free(text);
        if (tty)
            printf("\033[H\033[2J");
        printf("berth top  %s  (every second; Ctrl-C stops)\n", url);
        printf("%-32s %9s %9s %9s %9s %9s %10s %10s\n", "topic", "ready", "delayed", "locked",
               "backoff", "terminal", "done/s", "failed/s");
        for (size_t i = 0; i < now.n; i++) {
            const top_topic *t = &now.t[i];
            const top_topic *p = NULL;
            for (size_t k = 0; have_prev && k < prev.n && p == NULL; k++)
                if (strcmp(prev.t[k].name, t->name) == 0)
                    p = &prev.t[k];
            printf("%-32s %9.0f %9.0f %9.0f %9.0f %9.0f", t->name, t->state[0], t->state[1],
                   t->state[2], t->state[3], t->state[4]);
            if (p != NULL)
                printf(" %10.1f %10.1f\n", t->completed - p->completed, t->failed - p->failed);
            else
                printf(" %10s %10s\n", "-", "-");
        }
        printf("waiting fetches %.0f  outbox %.0f  poisoned %.0f  fsync", now.waiting, now.outbox,
               now.poisoned);
        print_ms("p50", have_prev ? quantile_ms(&now, &prev, 0.5) : -1);
        print_ms("p99", have_prev ? quantile_ms(&now, &prev, 0.99) : -1);
        printf("\n");
        fflush(stdout);
        prev = now;
        have_prev = true;
        if (count <= 0 || shown + 1 < count) {
            struct timespec one = {1, 0};
            nanosleep(&one, NULL);
        }
    }
    return 0;
}
