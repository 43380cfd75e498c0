/* pglisten.c — see pglisten.h. */
#include "pg/pglisten.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/mem.h"
#include "pg/pgconn.h"
#include "pg/pgturn.h"
#include "store/err.h"

int pglisten_open(pglisten *l, const char *uri, uint64_t wait_ms, char *err, size_t errlen)
{
    PGconn *c;
    int rv = pgconn_open(uri, "berthd listener", wait_ms, &c, err, errlen);
    if (rv == BERTH_OK)
        rv = pgconn_exec(c, "SET synchronous_commit = off; LISTEN " PGLISTEN_CHANNEL, "LISTEN", err,
                         errlen);
    if (rv == BERTH_OK) { /* the doorbell, prepared: a transaction each under load */
        PGresult *r = PQprepare(c, "bell", "SELECT pg_notify('" PGLISTEN_CHANNEL "', $1)", 1, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            snprintf(err, errlen, "preparing the doorbell: %s", PQerrorMessage(c));
            rv = BERTH_EIO;
        }
        PQclear(r);
    }
    if (rv == BERTH_OK && PQsetnonblocking(c, 1) != 0)
        rv = BERTH_EIO;
    if (rv != BERTH_OK) {
        pgconn_close(c);
        return rv;
    }
    l->conn = c;
    return BERTH_OK;
}

/* The earliest "i:+ms" record of payload (UINT64_MAX: none). */
static uint64_t earliest_timer(const char *payload)
{
    uint64_t min = UINT64_MAX;
    for (const char *p = payload; p != NULL && (p = strstr(p, "i:+")) != NULL; p += 3)
        if (p == payload || p[-1] == ';') {
            uint64_t v = strtoull(p + 3, NULL, 10);
            min = v < min ? v : min;
        }
    return min;
}

/* Past what one notification carries, or told to: "look at everything"
 * (p:*, which rings every topic and await), and the earliest timer of
 * what it replaces, which only an i: record announces to the other
 * replicas' housekeeping. */
static void gather_all(pglisten *l, const char *payload)
{
    uint64_t a = earliest_timer(l->bells), b = earliest_timer(payload);
    uint64_t i = a < b ? a : b;
    char all[48];
    if (i != UINT64_MAX)
        snprintf(all, sizeof all, "p:*;i:+%llu", (unsigned long long)i);
    else
        snprintf(all, sizeof all, "p:*");
    free(l->bells);
    l->bells = mem_strdup(all);
    l->bells_len = l->bells ? strlen(all) : 0;
}

/* Gathered with what waits already. */
static void gather(pglisten *l, const char *payload)
{
    size_t n = strlen(payload);
    if (n == 0)
        return;
    if (l->bells_len + n + 2 > 7000 || strncmp(payload, "p:*", 3) == 0 ||
        (l->bells != NULL && strncmp(l->bells, "p:*", 3) == 0)) {
        gather_all(l, payload);
        return;
    }
    char *b = mem_realloc(l->bells, l->bells_len + n + 2);
    if (b == NULL)
        return;
    if (l->bells_len > 0)
        b[l->bells_len++] = ';';
    memcpy(b + l->bells_len, payload, n + 1);
    l->bells = b;
    l->bells_len += n;
}

uint64_t pglisten_send_at(const pglisten *l)
{
    if (l->flying != NULL || l->bells_len == 0)
        return UINT64_MAX;
    return l->sent_mono_ms == 0 ? 0 : l->sent_mono_ms + PGLISTEN_GAP_MS;
}

static void send_gathered(pglisten *l)
{
    uint64_t now = pgturn_mono_ms();
    if (l->conn == NULL || now < pglisten_send_at(l))
        return;
    const char *params[1] = {l->bells};
    if (PQsendQueryPrepared(l->conn, "bell", 1, params, NULL, NULL, 0) != 1)
        return; /* the connection is failing: pglisten_drain() will find out */
    (void)PQflush(l->conn);
    l->flying = l->bells;
    l->sent_mono_ms = now;
    l->bells = NULL;
    l->bells_len = 0;
}

void pglisten_ring(pglisten *l, const char *payload)
{
    gather(l, payload);
    send_gathered(l);
}

void pglisten_lost(pglisten *l)
{
    pgconn_close(l->conn);
    l->conn = NULL;
    if (l->flying != NULL) { /* first again, then what gathered behind it */
        char *pending = l->bells;
        l->bells = NULL;
        l->bells_len = 0;
        gather(l, l->flying);
        if (pending != NULL)
            gather(l, pending);
        free(l->flying);
        free(pending);
        l->flying = NULL;
    }
}

uint64_t pglisten_deadline(const pglisten *l)
{
    return l->flying != NULL ? l->sent_mono_ms + PGLISTEN_SILENT_MS + 1 : UINT64_MAX;
}

bool pglisten_drain(pglisten *l, bool (*ours)(void *ctx, int pid),
                    void (*heard)(void *ctx, const char *payload), void *ctx)
{
    if (l->conn == NULL)
        return false;
    if (PQconsumeInput(l->conn) == 0 || PQstatus(l->conn) != CONNECTION_OK ||
        PQflush(l->conn) < 0 ||
        (l->flying != NULL && pgturn_mono_ms() - l->sent_mono_ms > PGLISTEN_SILENT_MS)) {
        pglisten_lost(l); /* gone, or silent */
        return false;
    }
    while (l->flying != NULL && !PQisBusy(l->conn)) {
        PGresult *r = PQgetResult(l->conn);
        if (r == NULL) {
            free(l->flying); /* (an error result: the server refused it; not again) */
            l->flying = NULL;
        }
        PQclear(r);
    }
    PGnotify *n;
    while ((n = PQnotifies(l->conn)) != NULL) {
        if (!ours(ctx, n->be_pid)) /* this replica's own turns rang here already */
            heard(ctx, n->extra);
        PQfreemem(n);
    }
    send_gathered(l);
    return true;
}

void pglisten_fini(pglisten *l)
{
    pgconn_close(l->conn);
    free(l->bells);
    free(l->flying);
    memset(l, 0, sizeof *l);
}
