/*
 * pgstmt.c — see pgstmt.h. The parse works on one heap copy of the text:
 * markers and statement ends are overwritten with NULs in place, so the
 * table is two allocations however many statements there are.
 */
#include "pg/pgstmt.h"

#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg/pgconn.h"
#include "pg/pgsql.h"
#include "store/err.h"

static const char marker[] = "-- name:";

static bool blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* Is [s, e) only blanks and "--" comment lines? */
static bool only_comments(const char *s, const char *e)
{
    while (s < e) {
        if (blank(*s)) {
            s++;
            continue;
        }
        if (e - s >= 2 && s[0] == '-' && s[1] == '-') {
            while (s < e && *s != '\n')
                s++;
            continue;
        }
        return false;
    }
    return true;
}

void pgstmt_fini(pgstmt_table *t)
{
    if (t == NULL)
        return;
    free(t->v);
    free(t->text);
    memset(t, 0, sizeof *t);
}

int pgstmt_parse(const char *text, pgstmt_table *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    size_t len = strlen(text), cap = 0, line = 1;
    /* Count markers for the table's size. */
    for (const char *s = text; (s = strstr(s, marker)) != NULL; s += sizeof marker - 1)
        cap++;
    t->text = malloc(len + 1);
    t->v = calloc(cap > 0 ? cap : 1, sizeof *t->v);
    if (t->text == NULL || t->v == NULL) {
        pgstmt_fini(t);
        snprintf(err, errlen, "statements.sql: out of memory");
        return BERTH_ENOMEM;
    }
    memcpy(t->text, text, len + 1);
    char *s = t->text, *end = t->text + len;
    char *body = NULL; /* the current section's text */
    size_t body_line = 0;
    int rv = BERTH_OK;
    while (s <= end) {
        char *eol = memchr(s, '\n', (size_t)(end - s));
        if (eol == NULL)
            eol = end;
        bool is_marker =
            (size_t)(eol - s) >= sizeof marker - 1 && memcmp(s, marker, sizeof marker - 1) == 0;
        if (is_marker || eol == end) {
            char *stop = is_marker ? s : end;
            /* Close the section before this marker (or the file's end). */
            if (body == NULL) {
                if (!only_comments(t->text, stop)) {
                    snprintf(err, errlen,
                             "statements.sql: text before the first '-- name:' marker");
                    rv = BERTH_EFORMAT;
                    break;
                }
            } else {
                char *b = body, *e = stop;
                while (b < e && blank(*b))
                    b++;
                while (e > b && (blank(e[-1]) || e[-1] == ';'))
                    e--;
                if (only_comments(b, e)) {
                    snprintf(err, errlen, "statements.sql line %zu: statement '%s' is empty",
                             body_line, t->v[t->n - 1].name);
                    rv = BERTH_EFORMAT;
                    break;
                }
                *e = '\0';
                t->v[t->n - 1].sql = b;
            }
        }
        if (is_marker) {
            char *n = s + sizeof marker - 1, *ne = eol;
            while (n < ne && blank(*n))
                n++;
            while (ne > n && blank(ne[-1]))
                ne--;
            bool ok = ne > n && (size_t)(ne - n) <= PGSTMT_NAME_MAX;
            for (char *c = n; ok && c < ne; c++)
                ok = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
            if (!ok) {
                snprintf(err, errlen,
                         "statements.sql line %zu: a name is [a-z0-9_], 1 to %d bytes: '%.*s'",
                         line, PGSTMT_NAME_MAX, (int)(ne - n > 80 ? 80 : ne - n), n);
                rv = BERTH_EFORMAT;
                break;
            }
            bool at_end = eol == end;
            *ne = '\0';
            for (size_t i = 0; i < t->n; i++) {
                if (strcmp(t->v[i].name, n) == 0) {
                    snprintf(err, errlen, "statements.sql line %zu: the name '%s' is given twice",
                             line, n);
                    rv = BERTH_EFORMAT;
                    break;
                }
            }
            if (rv != BERTH_OK)
                break;
            t->v[t->n++].name = n;
            body = at_end ? end : eol + 1;
            body_line = line + 1;
            if (at_end) {
                snprintf(err, errlen, "statements.sql line %zu: statement '%s' is empty", line, n);
                rv = BERTH_EFORMAT;
                break;
            }
        }
        if (eol == end)
            break;
        s = eol + 1;
        line++;
    }
    if (rv == BERTH_OK && t->n == 0) {
        snprintf(err, errlen, "statements.sql: no '-- name:' marker");
        rv = BERTH_EFORMAT;
    }
    if (rv != BERTH_OK)
        pgstmt_fini(t);
    return rv;
}

int pgstmt_load(pgstmt_table *t, char *err, size_t errlen)
{
    return pgstmt_parse(pgsql_statements, t, err, errlen);
}

const char *pgstmt_sql(const pgstmt_table *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].name, name) == 0)
            return t->v[i].sql;
    return NULL;
}

/* PQflush until everything is out (the connection may be non-blocking). */
static int flush_all(PGconn *c)
{
    int f;
    while ((f = PQflush(c)) == 1) {
        struct pollfd p = {.fd = PQsocket(c), .events = POLLIN | POLLOUT};
        if (poll(&p, 1, 1000) < 0)
            return -1;
        if ((p.revents & POLLIN) && !PQconsumeInput(c))
            return -1;
    }
    return f;
}

int pgstmt_prepare_all(PGconn *c, const pgstmt_table *t, char *err, size_t errlen)
{
    char what[128];
    if (PQpipelineStatus(c) != PQ_PIPELINE_ON) {
        snprintf(err, errlen, "preparing berth's statements needs a connection in pipeline mode");
        return BERTH_EINVAL;
    }
    size_t sent = 0;
    int rv = BERTH_OK;
    for (; sent < t->n; sent++) {
        if (!PQsendPrepare(c, t->v[sent].name, t->v[sent].sql, 0, NULL)) {
            snprintf(what, sizeof what, "preparing statement %s", t->v[sent].name);
            rv = pgconn_check(c, NULL, PGRES_COMMAND_OK, what, err, errlen);
            break;
        }
    }
    if (!PQpipelineSync(c) || flush_all(c) != 0) {
        snprintf(what, sizeof what, "preparing berth's statements");
        return pgconn_check(c, NULL, PGRES_COMMAND_OK, what, err, errlen);
    }
    /* Every result, then the Sync, even after a failure: the pipeline
     * must be left empty. */
    for (size_t i = 0; i < sent; i++) {
        PGresult *r = PQgetResult(c);
        if (r == NULL) { /* the connection broke */
            snprintf(what, sizeof what, "preparing statement %s", t->v[i].name);
            if (rv == BERTH_OK)
                rv = pgconn_check(c, NULL, PGRES_COMMAND_OK, what, err, errlen);
            return rv;
        }
        if (rv == BERTH_OK) {
            snprintf(what, sizeof what, "preparing statement %s", t->v[i].name);
            rv = pgconn_check(c, r, PGRES_COMMAND_OK, what, err, errlen);
        }
        PQclear(r);
        PQclear(PQgetResult(c)); /* the NULL closing the statement */
    }
    PGresult *r = PQgetResult(c);
    if (rv == BERTH_OK && (r == NULL || PQresultStatus(r) != PGRES_PIPELINE_SYNC))
        rv = pgconn_check(c, r, PGRES_PIPELINE_SYNC, "preparing berth's statements", err, errlen);
    PQclear(r);
    return rv;
}
