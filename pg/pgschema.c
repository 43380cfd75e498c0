/*
 * pgschema.c — see pgschema.h. The migration texts come from pgsql.c
 * (generated at build from pg/sql/); this file only sequences them.
 */
#include "pg/pgschema.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg/pgconn.h"
#include "pg/pgsql.h"
#include "store/err.h"

int pgschema_latest(void)
{
    return (int)pgsql_n_migrations;
}

int pgschema_version(PGconn *c, int *version, char *err, size_t errlen)
{
    PGresult *r = NULL;
    *version = 0;
    int rv = pgconn_query(c, "SELECT to_regclass('berth.meta') IS NOT NULL", 0, NULL,
                          "reading the berth schema version", &r, err, errlen);
    if (rv != BERTH_OK)
        return rv;
    int has_meta = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!has_meta)
        return BERTH_OK;
    rv = pgconn_query(c, "SELECT value FROM berth.meta WHERE key = 'schema_version'", 0, NULL,
                      "reading the berth schema version", &r, err, errlen);
    if (rv != BERTH_OK)
        return rv;
    if (PQntuples(r) == 1) {
        const char *s = PQgetvalue(r, 0, 0);
        char *end = NULL;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno != 0 || end == s || *end != '\0' || v < 0 || v > 1000000) {
            snprintf(err, errlen, "berth.meta's schema_version is '%.40s', not a version number",
                     s);
            PQclear(r);
            return BERTH_ECORRUPT;
        }
        *version = (int)v;
    }
    PQclear(r);
    return BERTH_OK;
}

/* One migration, one transaction: its statements, then its records. */
static int apply(PGconn *c, const pgsql_file *m, char *err, size_t errlen)
{
    char what[128], version[16];
    snprintf(what, sizeof what, "applying berth schema migration %s", m->name);
    snprintf(version, sizeof version, "%d", m->version);
    const char *params[] = {version, m->name};
    int rv = pgconn_exec(c, "BEGIN", what, err, errlen);
    if (rv != BERTH_OK)
        return rv;
    rv = pgconn_exec(c, m->text, what, err, errlen);
    if (rv == BERTH_OK)
        rv = pgconn_command(c,
                            "INSERT INTO berth.migrations (version, name, applied_at, applied_by) "
                            "VALUES ($1::integer, $2, "
                            "(extract(epoch FROM clock_timestamp()) * 1000)::bigint, "
                            "current_setting('application_name') || ' pid ' || pg_backend_pid())",
                            2, params, what, err, errlen);
    if (rv == BERTH_OK)
        rv = pgconn_command(c,
                            "INSERT INTO berth.meta (key, value) VALUES ('schema_version', $1) "
                            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                            1, params, what, err, errlen);
    if (rv == BERTH_OK)
        rv = pgconn_exec(c, "COMMIT", what, err, errlen);
    if (rv != BERTH_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
        PQclear(PQexec(c, "ROLLBACK")); /* err already says why */
    return rv;
}

static int migrate_locked(PGconn *c, pgschema_report *rep, char *err, size_t errlen)
{
    int rv = pgschema_version(c, &rep->from_version, err, errlen);
    if (rv != BERTH_OK)
        return rv;
    rep->to_version = rep->from_version;
    if (rep->from_version > pgschema_latest()) {
        snprintf(err, errlen,
                 "the database's berth schema is version %d; this berthd knows versions up to %d",
                 rep->from_version, pgschema_latest());
        return BERTH_EFORMAT;
    }
    for (size_t i = (size_t)rep->from_version; i < pgsql_n_migrations; i++) {
        rv = apply(c, &pgsql_migrations[i], err, errlen);
        if (rv != BERTH_OK)
            return rv;
        rep->to_version = pgsql_migrations[i].version;
        rep->applied++;
    }
    return BERTH_OK;
}

int pgschema_migrate(PGconn *c, pgschema_report *report, char *err, size_t errlen)
{
    pgschema_report local;
    pgschema_report *rep = report != NULL ? report : &local;
    memset(rep, 0, sizeof *rep);
    if (PQtransactionStatus(c) != PQTRANS_IDLE) {
        snprintf(err, errlen,
                 "migrating the berth schema needs a connection outside a transaction");
        return BERTH_EINVAL;
    }
    /* A session lock: it spans the per-migration transactions. */
    int rv = pgconn_exec(c, "SELECT pg_advisory_lock(" PGSCHEMA_LOCK_KEY ")",
                         "taking the berth schema migration lock", err, errlen);
    if (rv != BERTH_OK)
        return rv;
    rv = migrate_locked(c, rep, err, errlen);
    char uerr[256];
    int urv = pgconn_exec(c, "SELECT pg_advisory_unlock(" PGSCHEMA_LOCK_KEY ")",
                          "giving back the berth schema migration lock", uerr, sizeof uerr);
    if (rv == BERTH_OK && urv != BERTH_OK) {
        snprintf(err, errlen, "%s", uerr);
        rv = urv;
    }
    return rv;
}
