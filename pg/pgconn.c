/*
 * pgconn.c — see pgconn.h. The connect is libpq's non-blocking one
 * (PQconnectStartParams + PQconnectPoll under poll()), so the deadline
 * bounds each attempt too: libpq's own connect_timeout would count per host
 * and in whole seconds, and a blocking PQconnectdb could outlive the wait.
 *
 * THE HOSTS OF A MULTI-HOST URI. libpq walks a URI's hosts in order and
 * moves on when one refuses, fails, or is read-only where
 * target_session_attrs asks for read-write; but it leaves a host that does
 * not answer at all only at connect_timeout, which PQconnectPoll does not
 * enforce (PQconnectdb does). Given the whole list, an attempt would spend
 * its whole wait on a first host that vanished (a primary powered off or
 * cut off: no RST), every time, and never reach the standby promoted in
 * its place. So each host gets a connection of its own (host, hostaddr and
 * port overridden after the URI), all started at once under one poll().
 * Where target_session_attrs lets one kind of server only (read-write,
 * primary, read-only, standby: berthd's read-write among them), the
 * first to connect wins. Otherwise the first in the URI's order that
 * connects wins once every host before it has failed, as libpq's walk
 * would choose, or at the deadline the first that connected (libpq's
 * prefer-standby second pass is per host here: such a URI gets the first
 * host that answers in order, standby or not). The others are closed.
 */
#include "pg/pgconn.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/err.h"

/* What the server says aside (a notice; a FATAL as it ends a session)
 * is not written to stderr raw by libpq: berthd says in its own words
 * what it does about it (the database unreachable, reconnecting). */
static void quiet(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* libpq's messages span lines ("...failed: Connection refused\n\tIs the
 * server running..."): one line, runs of blanks folded, no trailing one. */
static void one_line(char *dst, size_t len, const char *src)
{
    size_t n = 0;
    bool blank = false;
    if (len == 0)
        return;
    for (; src != NULL && *src != '\0' && n + 1 < len; src++) {
        if (*src == '\n' || *src == '\t' || *src == '\r' || *src == ' ') {
            blank = n > 0;
            continue;
        }
        if (blank && n + 2 < len)
            dst[n++] = ' ';
        blank = false;
        dst[n++] = *src;
    }
    dst[n] = '\0';
}

void pgconn_describe(const char *uri, char *buf, size_t len)
{
    static const char *const shown[] = {"host", "hostaddr", "port", "dbname", "user"};
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(uri != NULL ? uri : "", &perr);
    size_t n = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    if (opts == NULL) {
        PQfreemem(perr);
        snprintf(buf, len, "(unparsable connection string)");
        return;
    }
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
        for (const PQconninfoOption *o = opts; o->keyword != NULL; o++) {
            if (strcmp(o->keyword, shown[i]) != 0 || o->val == NULL || o->val[0] == '\0')
                continue;
            int w = snprintf(buf + n, len - n, "%s%s=%s", n > 0 ? " " : "", o->keyword, o->val);
            if (w > 0)
                n += (size_t)w < len - n ? (size_t)w : len - n - 1;
        }
    }
    PQconninfoFree(opts);
    if (n == 0)
        snprintf(buf, len, "(libpq defaults)");
}

/* A parse error quotes the fragment it choked on, which may be a password:
 * the quoted parts are dropped. */
static void unquoted(char *dst, size_t len, const char *src)
{
    size_t n = 0;
    bool in = false;
    for (; src != NULL && *src != '\0' && n + 1 < len; src++) {
        if (*src == '"') {
            in = !in;
            if (in && n + 6 <= len) {
                memcpy(dst + n, "\"…\"", 5);
                n += 5;
            }
            continue;
        }
        if (!in)
            dst[n++] = *src;
    }
    if (len > 0)
        dst[n < len ? n : len - 1] = '\0';
}

/* A URI's hosts, for one connection each: up to PGCONN_HOSTS_MAX; an
 * empty list (libpq's defaults) or one that does not split evenly is one
 * "host", the URI as it is. */
enum { PGCONN_HOSTS_MAX = 16, PGCONN_HOST_LEN = 256 };
typedef struct hosts {
    int n;                             /* 1 .. PGCONN_HOSTS_MAX */
    bool has_host, has_addr, has_port; /* which keywords to override */
    char host[PGCONN_HOSTS_MAX][PGCONN_HOST_LEN];
    char addr[PGCONN_HOSTS_MAX][PGCONN_HOST_LEN];
    char port[PGCONN_HOSTS_MAX][32];
    int nport;     /* 1: the one port for every host */
    bool one_kind; /* target_session_attrs lets one kind of server only */
} hosts;

/* Splits a comma list into out; -1 when it has more than max entries or
 * one too long. */
static int split(const char *list, char *out, size_t width, int max)
{
    int n = 0;
    for (const char *p = list;; n++) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n >= max || len >= width)
            return -1;
        memcpy(out + (size_t)n * width, p, len);
        out[(size_t)n * width + len] = '\0';
        if (comma == NULL)
            return n + 1;
        p = comma + 1;
    }
}

static const char *option(const PQconninfoOption *o, const char *kw)
{
    for (; o->keyword != NULL; o++)
        if (strcmp(o->keyword, kw) == 0)
            return o->val != NULL && o->val[0] != '\0' ? o->val : NULL;
    return NULL;
}

static void hosts_of(const char *uri, hosts *h)
{
    memset(h, 0, sizeof *h);
    h->n = 1;
    PQconninfoOption *o = PQconninfoParse(uri, NULL);
    if (o == NULL)
        return;
    const char *host = option(o, "host"), *addr = option(o, "hostaddr"), *port = option(o, "port");
    const char *tsa = option(o, "target_session_attrs");
    h->one_kind = tsa != NULL && (strcmp(tsa, "read-write") == 0 || strcmp(tsa, "primary") == 0 ||
                                  strcmp(tsa, "read-only") == 0 || strcmp(tsa, "standby") == 0);
    int nh = host != NULL ? split(host, &h->host[0][0], PGCONN_HOST_LEN, PGCONN_HOSTS_MAX) : 0;
    int na = addr != NULL ? split(addr, &h->addr[0][0], PGCONN_HOST_LEN, PGCONN_HOSTS_MAX) : 0;
    int np = port != NULL ? split(port, &h->port[0][0], sizeof h->port[0], PGCONN_HOSTS_MAX) : 0;
    PQconninfoFree(o);
    int n = nh > na ? nh : na;
    if (nh < 0 || na < 0 || np < 0 || n <= 1 || (nh > 0 && na > 0 && nh != na) ||
        (np > 1 && np != n))
        return; /* libpq's to take, or to refuse with its own words */
    h->n = n;
    h->has_host = nh > 0;
    h->has_addr = na > 0;
    h->has_port = np > 0;
    h->nport = np;
}

/* "host:port: " of host i, before its failure. */
static void host_name(const hosts *h, int i, char *buf, size_t len)
{
    if (h->n == 1)
        buf[0] = '\0';
    else
        snprintf(buf, len, "%s:%s: ", h->has_host ? h->host[i] : h->addr[i],
                 h->has_port ? h->port[h->nport > 1 ? i : 0] : "(default port)");
}

/* One attempt on every host until deadline_ms: 1 connected (*out set), 0
 * every host refused, -1 out of time, -2 out of memory. What each host
 * that failed said goes to last, one line, "host:port: " before it when
 * there are several. bkw and bval are the keywords and values
 * pgconn_open() starts every connection with, NULL-terminated, at most 12
 * of them. */
static int attempt(const hosts *h, const char *const *bkw, const char *const *bval,
                   uint64_t deadline_ms, PGconn **out, char *last, size_t lastlen)
{
    PGconn *c[PGCONN_HOSTS_MAX] = {0};
    PostgresPollingStatusType st[PGCONN_HOSTS_MAX];
    enum { PENDING, UP, FAILED } state[PGCONN_HOSTS_MAX];
    int rv = -1, failed = 0;
    size_t used = 0;
    last[0] = '\0';
    for (int i = 0; i < h->n; i++) {
        const char *kw[16], *val[16];
        int k = 0;
        for (; bkw[k] != NULL; k++) {
            kw[k] = bkw[k];
            val[k] = bval[k];
        }
        if (h->n > 1) { /* after dbname (the URI): these win */
            if (h->has_host) {
                kw[k] = "host";
                val[k++] = h->host[i];
            }
            if (h->has_addr) {
                kw[k] = "hostaddr";
                val[k++] = h->addr[i];
            }
            if (h->has_port) {
                kw[k] = "port";
                val[k++] = h->port[h->nport > 1 ? i : 0];
            }
        }
        kw[k] = val[k] = NULL;
        c[i] = PQconnectStartParams(kw, val, 1);
        if (c[i] == NULL) {
            rv = -2;
            goto done;
        }
        st[i] = PGRES_POLLING_WRITING;
        state[i] = PQstatus(c[i]) == CONNECTION_BAD ? FAILED : PENDING;
    }
    for (;;) {
        /* Failures first, as they came: their reasons. */
        for (int i = 0; i < h->n; i++) {
            if (state[i] == PENDING && st[i] == PGRES_POLLING_OK)
                state[i] = UP;
            if (state[i] == PENDING && st[i] == PGRES_POLLING_FAILED)
                state[i] = FAILED;
            if (state[i] == FAILED && c[i] != NULL) {
                char name[PGCONN_HOST_LEN + 48], msg[512];
                host_name(h, i, name, sizeof name);
                one_line(msg, sizeof msg, PQerrorMessage(c[i]));
                if (used + 3 < lastlen) {
                    int w = snprintf(last + used, lastlen - used, "%s%s%s", used > 0 ? "; " : "",
                                     name, msg[0] != '\0' ? msg : "refused");
                    if (w > 0)
                        used += (size_t)w < lastlen - used ? (size_t)w : lastlen - used - 1;
                }
                PQfinish(c[i]);
                c[i] = NULL;
                failed++;
            }
        }
        int win = -1, first_up = -1;
        for (int i = 0; i < h->n && win < 0; i++) {
            if (state[i] == UP && first_up < 0)
                first_up = i;
            if (state[i] == PENDING)
                break; /* a host before any that connected may yet */
            if (state[i] == UP)
                win = i;
        }
        for (int i = 0; i < h->n && first_up < 0; i++)
            if (state[i] == UP)
                first_up = i;
        uint64_t now = mono_ms();
        if (win < 0 && (h->one_kind || now >= deadline_ms))
            win = first_up;
        if (win >= 0) {
            *out = c[win];
            c[win] = NULL;
            rv = 1;
            goto done;
        }
        if (failed == h->n) {
            rv = 0;
            goto done;
        }
        if (now >= deadline_ms)
            goto done;
        struct pollfd p[PGCONN_HOSTS_MAX];
        int who[PGCONN_HOSTS_MAX], np = 0;
        for (int i = 0; i < h->n; i++)
            if (state[i] == PENDING) {
                p[np] =
                    (struct pollfd){.fd = PQsocket(c[i]),
                                    .events = st[i] == PGRES_POLLING_READING ? POLLIN : POLLOUT};
                who[np++] = i;
            }
        int n = poll(p, (nfds_t)np, (int)(deadline_ms - now));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rv = 0;
            goto done;
        }
        for (int j = 0; j < np; j++)
            if (p[j].revents != 0)
                st[who[j]] = PQconnectPoll(c[who[j]]);
    }
done:
    if (rv == -1 && h->n > 1) /* who never answered */
        for (int i = 0; i < h->n; i++)
            if (c[i] != NULL && state[i] == PENDING && used + 3 < lastlen) {
                char name[PGCONN_HOST_LEN + 48];
                host_name(h, i, name, sizeof name);
                int w = snprintf(last + used, lastlen - used, "%s%sno answer within the wait",
                                 used > 0 ? "; " : "", name);
                if (w > 0)
                    used += (size_t)w < lastlen - used ? (size_t)w : lastlen - used - 1;
            }
    for (int i = 0; i < h->n; i++)
        if (c[i] != NULL)
            PQfinish(c[i]);
    return rv;
}

int pgconn_open(const char *uri, const char *app_name, uint64_t wait_ms, PGconn **out, char *err,
                size_t errlen)
{
    char target[512], last[512] = "", perr_line[256];
    char *perr = NULL;
    *out = NULL;
    if (uri == NULL)
        uri = "";
    PQconninfoOption *parsed = PQconninfoParse(uri, &perr);
    if (parsed == NULL) {
        unquoted(perr_line, sizeof perr_line, perr != NULL ? perr : "out of memory");
        one_line(last, sizeof last, perr_line);
        PQfreemem(perr);
        snprintf(err, errlen, "the PostgreSQL connection string does not parse: %s", last);
        return BERTH_EINVAL;
    }
    PQconninfoFree(parsed);
    if (wait_ms == 0) {
        snprintf(err, errlen, "connecting to PostgreSQL needs a wait above 0 ms");
        return BERTH_EINVAL;
    }
    pgconn_describe(uri, target, sizeof target);

    /* expand_dbname: "dbname" carries the whole uri, and what it sets
     * overrides the keywords before it: TCP keepalives, so a peer that went
     * silent (a dead host, a cut network) is found within about 15 s
     * rather than hours, unless the uri says otherwise. A fallback name
     * applies only when the uri sets no application_name. */
    const char *kw[] = {"keepalives_idle",
                        "keepalives_interval",
                        "keepalives_count",
                        "tcp_user_timeout",
                        "dbname",
                        "fallback_application_name",
                        NULL};
    const char *val[] = {"5", "2", "3", "15000", uri, app_name, NULL};
    if (app_name == NULL)
        kw[5] = NULL;

    hosts *h = malloc(sizeof *h); /* 9 kB: not on the caller's stack */
    if (h == NULL) {
        snprintf(err, errlen, "connecting to PostgreSQL at %s: out of memory", target);
        return BERTH_ENOMEM;
    }
    hosts_of(uri, h);
    uint64_t deadline = mono_ms() + wait_ms, pause = PGCONN_BACKOFF_FIRST_MS;
    unsigned tries = 0;
    for (;;) {
        char said[512];
        PGconn *c = NULL;
        tries++;
        uint64_t floor = mono_ms() + PGCONN_ATTEMPT_MIN_MS;
        int got = attempt(h, kw, val, floor > deadline ? floor : deadline, &c, said, sizeof said);
        if (got == -2) {
            free(h);
            snprintf(err, errlen, "connecting to PostgreSQL at %s: out of memory", target);
            return BERTH_ENOMEM;
        }
        if (got == 1) {
            free(h);
            PQsetNoticeProcessor(c, quiet, NULL);
            *out = c;
            return BERTH_OK;
        }
        if (said[0] != '\0')
            snprintf(last, sizeof last, "%s", said);
        else if (got < 0 && last[0] == '\0')
            snprintf(last, sizeof last, "no answer from the server within the wait");
        uint64_t now = mono_ms();
        if (got < 0 || now >= deadline)
            break;
        /* The last attempt starts at the deadline: a server that comes up
         * within the wait is found. */
        sleep_ms(pause < deadline - now ? pause : deadline - now);
        pause = pause * 2 > PGCONN_BACKOFF_MAX_MS ? PGCONN_BACKOFF_MAX_MS : pause * 2;
    }
    free(h);
    one_line(perr_line, sizeof perr_line, last);
    snprintf(err, errlen, "cannot connect to PostgreSQL at %s within %llu ms (%u attempt%s): %s",
             target, (unsigned long long)wait_ms, tries, tries == 1 ? "" : "s", perr_line);
    return BERTH_EIO;
}

void pgconn_close(PGconn *c)
{
    if (c != NULL)
        PQfinish(c);
}

int pgconn_code(PGconn *c, const PGresult *r)
{
    if (r == NULL && c != NULL && PQstatus(c) == CONNECTION_OK)
        return BERTH_ENOMEM;
    return BERTH_EIO;
}

int pgconn_check(PGconn *c, const PGresult *r, ExecStatusType want, const char *what, char *err,
                 size_t errlen)
{
    char msg[512], detail[512];
    if (r != NULL && PQresultStatus(r) == want)
        return BERTH_OK;
    if (r == NULL) {
        one_line(msg, sizeof msg, c != NULL ? PQerrorMessage(c) : "no connection");
        snprintf(err, errlen, "%s: %s", what, msg[0] != '\0' ? msg : "out of memory");
        return pgconn_code(c, r);
    }
    ExecStatusType st = PQresultStatus(r);
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    if (st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR) {
        one_line(msg, sizeof msg, primary != NULL ? primary : PQresultErrorMessage(r));
        one_line(detail, sizeof detail, PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL));
        snprintf(err, errlen, "%s: %s%s%s (SQLSTATE %s)", what, msg, detail[0] != '\0' ? "; " : "",
                 detail, state != NULL ? state : "none");
    } else {
        snprintf(err, errlen, "%s: the server answered %s where %s was expected", what,
                 PQresStatus(st), PQresStatus(want));
    }
    return pgconn_code(c, r);
}

int pgconn_exec(PGconn *c, const char *sql, const char *what, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, sql);
    int rv = BERTH_OK;
    if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
        rv = pgconn_check(c, r, PGRES_COMMAND_OK, what, err, errlen);
    PQclear(r);
    return rv;
}

static int run(PGconn *c, const char *sql, int nparams, const char *const *params,
               ExecStatusType want, const char *what, PGresult **out, char *err, size_t errlen)
{
    PGresult *r = PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
    int rv = pgconn_check(c, r, want, what, err, errlen);
    if (rv == BERTH_OK && out != NULL) {
        *out = r;
        return rv;
    }
    PQclear(r);
    return rv;
}

int pgconn_query(PGconn *c, const char *sql, int nparams, const char *const *params,
                 const char *what, PGresult **out, char *err, size_t errlen)
{
    return run(c, sql, nparams, params, PGRES_TUPLES_OK, what, out, err, errlen);
}

int pgconn_command(PGconn *c, const char *sql, int nparams, const char *const *params,
                   const char *what, char *err, size_t errlen)
{
    return run(c, sql, nparams, params, PGRES_COMMAND_OK, what, NULL, err, errlen);
}
