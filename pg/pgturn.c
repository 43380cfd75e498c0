/*
 * pgturn.c — see pgturn.h. The turn's commands are numbered in wire order:
 * 0 BEGIN, 1 turn_begin, 2 .. n+1 the statements, then turn_notify if any,
 * then COMMIT. `queued` counts the commands handed to libpq, `next` the one
 * whose result is read next (each command yields one result, then a NULL);
 * Syncs are counted apart (each yields PGRES_PIPELINE_SYNC, no NULL), and
 * so is the ROLLBACK of the error path, which follows the turn's Sync.
 */
#include "pg/pgturn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "store/err.h"

uint64_t pgturn_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t pgturn_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

const char *pgturn_outcome_name(pgturn_outcome o)
{
    switch (o) {
    case PGTURN_PENDING:
        return "PENDING";
    case PGTURN_COMMITTED:
        return "COMMITTED";
    case PGTURN_ABORTED:
        return "ABORTED";
    case PGTURN_LOST_BEFORE_COMMIT:
        return "LOST_BEFORE_COMMIT";
    case PGTURN_IN_DOUBT:
        return "IN_DOUBT";
    }
    return "?";
}

/* libpq's messages span lines: one line, blanks folded. */
static void one_line(char *dst, size_t len, const char *src)
{
    size_t n = 0;
    bool gap = false;
    for (; src != NULL && *src != '\0' && n + 2 < len; src++) {
        if (*src == '\n' || *src == '\t' || *src == '\r' || *src == ' ') {
            gap = n > 0;
            continue;
        }
        if (gap)
            dst[n++] = ' ';
        gap = false;
        dst[n++] = *src;
    }
    if (len > 0)
        dst[n] = '\0';
}

/* Server notices (the ROLLBACK after a failed COMMIT warns "there is no
 * transaction in progress") are not for stderr: the turn reports. */
static void quiet(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

int pgturn_enter(PGconn *c, char *err, size_t errlen)
{
    char msg[256];
    PQsetNoticeProcessor(c, quiet, NULL);
    if (PQsetnonblocking(c, 1) != 0 ||
        (PQpipelineStatus(c) == PQ_PIPELINE_OFF && !PQenterPipelineMode(c))) {
        one_line(msg, sizeof msg, PQerrorMessage(c));
        snprintf(err, errlen, "entering pipeline mode: %s", msg[0] != '\0' ? msg : "refused");
        return BERTH_EIO;
    }
    return BERTH_OK;
}

static size_t n_cmds(const pgturn *t)
{
    return t->n + 3 + (t->notify != NULL ? 1 : 0);
}

static size_t commit_idx(const pgturn *t)
{
    return n_cmds(t) - 1;
}

static void drop_held(pgturn *t)
{
    for (size_t i = 0; i < t->n; i++) {
        PQclear(t->stmts[i].held);
        t->stmts[i].held = NULL;
    }
}

void pgturn_clear_results(pgturn *t)
{
    drop_held(t);
    for (size_t i = 0; i < t->n; i++) {
        PQclear(t->stmts[i].result);
        t->stmts[i].result = NULL;
    }
}

static void finish(pgturn *t, pgturn_outcome o)
{
    if (t->outcome != PGTURN_PENDING)
        return;
    t->outcome = o;
    if (o == PGTURN_COMMITTED) {
        for (size_t i = 0; i < t->n; i++) {
            t->stmts[i].result = t->stmts[i].held;
            t->stmts[i].held = NULL;
        }
    } else {
        drop_held(t);
    }
}

/* The connection is gone (or given up on): decide by where the turn was. */
static void lost(pgturn *t, const char *why)
{
    t->broken = true;
    if (t->message[0] == '\0' || !t->error_seen) {
        char msg[400];
        one_line(msg, sizeof msg, why != NULL && why[0] != '\0' ? why : PQerrorMessage(t->conn));
        snprintf(t->message, sizeof t->message, "connection lost: %s",
                 msg[0] != '\0' ? msg : "(no reason given)");
    }
    finish(t, t->error_seen    ? PGTURN_ABORTED
              : t->commit_sent ? PGTURN_IN_DOUBT
                               : PGTURN_LOST_BEFORE_COMMIT);
}

/* SQLSTATEs that mean the session is ending: class 08 (connection
 * exception) and 57P01..57P03 (terminated, crash shutdown, cannot connect). */
static bool session_ends(const char *state)
{
    return state != NULL && (strncmp(state, "08", 2) == 0 || strcmp(state, "57P01") == 0 ||
                             strcmp(state, "57P02") == 0 || strcmp(state, "57P03") == 0);
}

static bool queue(pgturn *t, size_t idx)
{
    PGconn *c = t->conn;
    int ok;
    if (idx == 0) {
        ok = PQsendQueryParams(c, "BEGIN", 0, NULL, NULL, NULL, NULL, 1);
    } else if (idx == 1) {
        ok = PQsendQueryPrepared(c, t->tb.n > 1 ? "turn_begin_routed" : "turn_begin", t->tb.n,
                                 t->tb.values, t->tb.lengths, t->tb.formats, 1);
    } else if (idx < t->n + 2) {
        const pgturn_stmt *s = &t->stmts[idx - 2];
        const pgwire_params *p = s->params;
        ok = p != NULL ? PQsendQueryPrepared(c, s->name, p->n, p->values, p->lengths, p->formats, 1)
                       : PQsendQueryPrepared(c, s->name, 0, NULL, NULL, NULL, 1);
    } else if (idx < commit_idx(t)) {
        const char *v[1] = {t->notify};
        ok = PQsendQueryPrepared(c, "turn_notify", 1, v, NULL, NULL, 1);
    } else {
        t->commit_sent = true; /* libpq may write it during the call */
        ok = PQsendQueryParams(c, "COMMIT", 0, NULL, NULL, NULL, NULL, 1);
    }
    if (!ok)
        return false;
    t->queued++;
    return true;
}

static bool sync(pgturn *t)
{
    if (!PQpipelineSync(t->conn))
        return false;
    t->syncs++;
    return true;
}

/* Queues commands up to (not including) end, then a Sync or a flush
 * request. */
static bool queue_to(pgturn *t, size_t end, bool with_sync)
{
    while (t->queued < end)
        if (!queue(t, t->queued))
            return false;
    return with_sync ? sync(t) : PQsendFlushRequest(t->conn) == 1;
}

static void flush(pgturn *t)
{
    int f = PQflush(t->conn);
    if (f < 0)
        lost(t, NULL);
    t->want_write = f == 1;
    if (f == 0 && t->cut_after_commit && t->commit_sent && t->syncs > 0) {
        t->cut_after_commit = false;
        (void)shutdown(PQsocket(t->conn), SHUT_RDWR);
        /* Lost from here, whatever is already in the socket: libpq may
         * have flushed COMMIT itself, and an answer read before the cut
         * would make the turn committed. */
        lost(t, "cut after COMMIT was sent");
    }
}

int pgturn_start(pgturn *t)
{
    if (t == NULL || t->conn == NULL || t->n_first > t->n || (t->n > 0 && t->stmts == NULL))
        return BERTH_EINVAL;
    for (size_t i = 0; i < t->n; i++) {
        if (t->stmts[i].name == NULL ||
            (t->stmts[i].params != NULL && pgwire_params_status(t->stmts[i].params) != BERTH_OK))
            return BERTH_EINVAL;
        t->stmts[i].result = t->stmts[i].held = NULL;
    }
    if (t->notify != NULL && strlen(t->notify) >= 8000)
        return BERTH_EINVAL; /* PostgreSQL's payload limit */
    t->outcome = PGTURN_PENDING;
    t->queued = t->next = 0;
    t->in_null = t->commit_sent = t->error_seen = t->commit_ok = t->round2_sent = false;
    t->broken = t->rerunnable = t->want_write = false;
    t->syncs = t->rollback = 0;
    t->failed = -1;
    t->sqlstate[0] = t->message[0] = '\0';
    t->now_ms = t->deploy_epoch = 0;
    pgwire_params_init(&t->tb, t->tb_buf, sizeof t->tb_buf);
    if (t->clock_set)
        pgwire_int8(&t->tb, t->clock_ms);
    else
        pgwire_null(&t->tb, PGWIRE_INT8);
    if (t->check_epoch || t->share) {
        if (t->check_epoch)
            pgwire_int8(&t->tb, t->expect_epoch);
        else
            pgwire_null(&t->tb, PGWIRE_INT8);
        pgwire_bool(&t->tb, t->share);
    }

    if (PQstatus(t->conn) != CONNECTION_OK) {
        lost(t, NULL);
        return BERTH_OK;
    }
    if (PQpipelineStatus(t->conn) != PQ_PIPELINE_ON) {
        snprintf(t->message, sizeof t->message, "the connection is not in pipeline mode");
        return BERTH_EINVAL;
    }
    bool ok = t->n_first > 0 ? queue_to(t, 2 + t->n_first, false) : queue_to(t, n_cmds(t), true);
    t->round2_sent = t->n_first == 0;
    if (!ok) {
        lost(t, NULL);
        return BERTH_OK;
    }
    flush(t);
    return BERTH_OK;
}

/* The first round is in and kept: the caller's hook builds the rest
 * (t->n, t->stmts beyond n_first, t->notify) from its results. false: the
 * turn is abandoned (ROLLBACK), the message says why. */
static bool second_round(pgturn *t)
{
    if (t->between != NULL && !t->between(t, t->between_arg)) {
        if (t->message[0] == '\0')
            snprintf(t->message, sizeof t->message, "the turn's second round could not be built");
        return false;
    }
    for (size_t i = t->n_first; i < t->n; i++) {
        t->stmts[i].result = t->stmts[i].held = NULL;
        if (t->stmts[i].name == NULL ||
            (t->stmts[i].params != NULL && pgwire_params_status(t->stmts[i].params) != BERTH_OK)) {
            snprintf(t->message, sizeof t->message,
                     "statement %zu (%s) of the turn's second round is malformed: %s", i,
                     t->stmts[i].name ? t->stmts[i].name : "unnamed",
                     t->stmts[i].params ? t->stmts[i].params->err : "no name");
            return false;
        }
    }
    if (t->notify != NULL && strlen(t->notify) >= 8000) {
        snprintf(t->message, sizeof t->message, "the turn's notification is 8000 bytes or more");
        return false;
    }
    return true;
}

const PGresult *pgturn_first_result(const pgturn *t, size_t i)
{
    return i < t->n_first ? t->stmts[i].held : NULL;
}

short pgturn_events(const pgturn *t)
{
    return (short)(POLLIN | (t->want_write ? POLLOUT : 0));
}

/* One command's result (not NULL). */
static void take(pgturn *t, size_t idx, PGresult *r)
{
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (session_ends(state) || PQstatus(t->conn) == CONNECTION_BAD) {
            char why[400];
            one_line(why, sizeof why, PQresultErrorMessage(r));
            if (state != NULL && !t->error_seen)
                snprintf(t->sqlstate, sizeof t->sqlstate, "%s", state);
            PQclear(r);
            lost(t, why);
            return;
        }
        if (!t->error_seen) {
            char msg[400];
            const char *primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
            t->error_seen = true;
            snprintf(t->sqlstate, sizeof t->sqlstate, "%s", state != NULL ? state : "");
            t->rerunnable =
                state != NULL && (strcmp(state, "40P01") == 0 || strcmp(state, "55P03") == 0);
            t->failed = idx >= 2 && idx < t->n + 2 ? (int)(idx - 2) : -1;
            one_line(msg, sizeof msg, primary != NULL ? primary : PQresultErrorMessage(r));
            const char *what = idx == 0               ? "BEGIN"
                               : idx == 1             ? "turn_begin"
                               : idx < t->n + 2       ? t->stmts[idx - 2].name
                               : idx == commit_idx(t) ? "COMMIT"
                                                      : "turn_notify";
            snprintf(t->message, sizeof t->message, "%s: %s (SQLSTATE %s)", what, msg,
                     t->sqlstate[0] != '\0' ? t->sqlstate : "none");
        }
        PQclear(r);
        return;
    }
    if (st == PGRES_PIPELINE_ABORTED) {
        PQclear(r);
        return;
    }
    if (idx == 1) {
        if (pgwire_get_int8(r, 0, 0, &t->now_ms) != BERTH_OK ||
            pgwire_get_int8(r, 0, 1, &t->deploy_epoch) != BERTH_OK)
            snprintf(t->message, sizeof t->message, "turn_begin: an unexpected result");
    } else if (idx >= 2 && idx < t->n + 2) {
        t->stmts[idx - 2].held = r;
        return;
    } else if (idx == commit_idx(t)) {
        t->commit_ok = st == PGRES_COMMAND_OK;
    }
    PQclear(r);
}

/* The turn's Sync came back: commit, or roll back. */
static void after_sync(pgturn *t)
{
    if (t->rollback == 3 || t->syncs > 0)
        goto done;
    if (!t->error_seen && t->commit_ok) {
        finish(t, PGTURN_COMMITTED);
        return;
    }
    if (!t->error_seen) { /* COMMIT answered something else: not kept */
        t->error_seen = true;
        if (t->message[0] == '\0')
            snprintf(t->message, sizeof t->message, "COMMIT did not return COMMAND_OK");
    }
    /* Always: PQtransactionStatus() answers PQTRANS_ACTIVE in pipeline mode
     * (libpq 15), so whether the transaction is still open is not known
     * here; a ROLLBACK outside one is a warning, COMMAND_OK. */
    if (!PQsendQueryParams(t->conn, "ROLLBACK", 0, NULL, NULL, NULL, NULL, 1) || !sync(t)) {
        lost(t, NULL);
        return;
    }
    t->rollback = 1;
    return;
done:
    if (t->syncs == 0)
        finish(t, PGTURN_ABORTED);
}

int pgturn_advance(pgturn *t)
{
    PGconn *c = t->conn;
    if (t->outcome != PGTURN_PENDING)
        return 1;
    if (PQstatus(c) == CONNECTION_BAD) {
        lost(t, NULL);
        return 1;
    }
    flush(t);
    if (t->outcome == PGTURN_PENDING && !PQconsumeInput(c))
        lost(t, NULL);
    /* A NULL where a result is due, on a live connection, is libpq 15's
     * pipeline-idle state after a Sync ("not yet", not a loss): looked at
     * once more (the message may be buffered already), then waited for;
     * a real loss shows in PQstatus(). */
    int early = 0;
    while (t->outcome == PGTURN_PENDING && !PQisBusy(c) && early < 2) {
        if (t->rollback == 1 || t->rollback == 2) {
            PGresult *r = PQgetResult(c);
            if (t->rollback == 1) {
                if (r == NULL) {
                    early++;
                    continue;
                }
                if (PQresultStatus(r) != PGRES_COMMAND_OK)
                    t->broken = true;
                t->rollback = 2;
                early = 0;
            } else {
                t->rollback = r == NULL ? 3 : 2;
            }
            PQclear(r);
            continue;
        }
        if (t->next < t->queued) {
            PGresult *r = PQgetResult(c);
            if (!t->in_null) {
                if (r == NULL) {
                    early++;
                    continue;
                }
                take(t, t->next, r);
                t->in_null = true;
                early = 0;
            } else if (r != NULL) {
                PQclear(r); /* one result per command is all berth sends for */
            } else {
                t->in_null = false;
                t->next++;
                /* The first round is in: the rest, the notify, COMMIT; or,
                 * if it failed, a Sync ending it, then the ROLLBACK. (The
                 * Sync is queued only now: one queued while results before
                 * it were unread never came back, libpq 15.) */
                if (!t->round2_sent && t->next == 2 + t->n_first) {
                    t->round2_sent = true;
                    if (!t->error_seen && !second_round(t)) {
                        t->error_seen = true;
                        t->failed = (int)t->n_first;
                    }
                    if (!(t->error_seen ? sync(t) : queue_to(t, n_cmds(t), true)))
                        lost(t, NULL);
                    else
                        flush(t);
                }
            }
            continue;
        }
        if (t->syncs > 0) {
            PGresult *r = PQgetResult(c);
            if (r == NULL) {
                early++;
                continue;
            }
            ExecStatusType st = PQresultStatus(r);
            PQclear(r);
            if (st != PGRES_PIPELINE_SYNC) {
                if (PQstatus(c) == CONNECTION_BAD)
                    lost(t, NULL);
                continue;
            }
            t->syncs--;
            early = 0;
            after_sync(t);
            if (t->outcome == PGTURN_PENDING)
                flush(t);
            continue;
        }
        break; /* nothing expected yet */
    }
    if (t->outcome == PGTURN_PENDING && PQstatus(c) == CONNECTION_BAD)
        lost(t, NULL);
    return t->outcome != PGTURN_PENDING;
}

void pgturn_give_up(pgturn *t, const char *why)
{
    if (t->outcome == PGTURN_PENDING)
        lost(t, why);
}

int pgturn_run(pgturn *t, uint64_t deadline_ms)
{
    int rv = pgturn_start(t);
    if (rv != BERTH_OK)
        return rv;
    while (!pgturn_advance(t)) {
        uint64_t now = pgturn_mono_ms();
        if (now >= deadline_ms) {
            lost(t, "no answer from the server within the turn's deadline");
            break;
        }
        struct pollfd p = {.fd = PQsocket(t->conn), .events = pgturn_events(t)};
        uint64_t wait = deadline_ms - now;
        int n = poll(&p, 1, wait > 1000 ? 1000 : (int)wait);
        if (n < 0 && errno != EINTR) {
            lost(t, strerror(errno));
            break;
        }
    }
    return BERTH_OK;
}
