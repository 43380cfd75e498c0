/*
 * pgconn.c — see pgconn.h. The connect is libpq's non-blocking one
 * (PQconnectStartParams + PQconnectPoll under poll()), so the deadline
 * bounds each attempt too: libpq's own connect_timeout would count per host
 * and in whole seconds, and a blocking PQconnectdb could outlive the wait.
 */
#include "pg/pgconn.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "store/err.h"

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

/* One attempt until deadline: 1 connected, 0 refused, -1 out of time. */
static int attempt(PGconn *c, uint64_t deadline_ms)
{
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    if (PQstatus(c) == CONNECTION_BAD)
        return 0;
    for (;;) {
        if (st == PGRES_POLLING_OK)
            return 1;
        if (st == PGRES_POLLING_FAILED)
            return 0;
        uint64_t now = mono_ms();
        if (now >= deadline_ms)
            return -1;
        struct pollfd p = {.fd = PQsocket(c),
                           .events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT};
        int n = poll(&p, 1, (int)(deadline_ms - now));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return 0;
        if (n == 0)
            return -1;
        st = PQconnectPoll(c);
    }
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

    uint64_t deadline = mono_ms() + wait_ms, pause = PGCONN_BACKOFF_FIRST_MS;
    unsigned tries = 0;
    for (;;) {
        PGconn *c = PQconnectStartParams(kw, val, 1);
        if (c == NULL) {
            snprintf(err, errlen, "connecting to PostgreSQL at %s: out of memory", target);
            return BERTH_ENOMEM;
        }
        tries++;
        uint64_t floor = mono_ms() + PGCONN_ATTEMPT_MIN_MS;
        int got = attempt(c, floor > deadline ? floor : deadline);
        if (got == 1) {
            *out = c;
            return BERTH_OK;
        }
        if (PQerrorMessage(c)[0] != '\0')
            one_line(last, sizeof last, PQerrorMessage(c));
        else if (got < 0 && last[0] == '\0')
            snprintf(last, sizeof last, "no answer from the server within the wait");
        PQfinish(c);
        uint64_t now = mono_ms();
        if (got < 0 || now >= deadline)
            break;
        /* The last attempt starts at the deadline: a server that comes up
         * within the wait is found. */
        sleep_ms(pause < deadline - now ? pause : deadline - now);
        pause = pause * 2 > PGCONN_BACKOFF_MAX_MS ? PGCONN_BACKOFF_MAX_MS : pause * 2;
    }
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
