/*
 * pgschema.h — berth's schema in a PostgreSQL database: versioned
 * migrations (pg/sql/NNN_*.sql, embedded, see pgsql.h) applied under a
 * session advisory lock, and the refusal of a schema newer than this build.
 *
 * Who calls it: the code that opens the PostgreSQL store, once at boot, on
 * the opening thread and on a connection of its own (never the actor's
 * pipelined one); the tests. Replicas booting together on one database
 * migrate once: the lock serialises them, and whoever comes second finds
 * nothing left to do.
 *
 * The version is meta 'schema_version' (absent table or row: 0); each
 * migration runs in its own transaction that also writes that row and a
 * berth.migrations row (version, name, applied_at ms, applied_by), so a
 * version is recorded if and only if its migration committed.
 */
#ifndef BERTH_PG_PGSCHEMA_H
#define BERTH_PG_PGSCHEMA_H

#include <stddef.h>

#include <libpq-fe.h>

/* The advisory lock key, per database: "berthmig" as a big-endian int8. */
#define PGSCHEMA_LOCK_KEY "7090199032658487655"

typedef struct pgschema_report {
    int from_version; /* the database's version when the lock was taken */
    int to_version;   /* its version when the lock was given back */
    int applied;      /* migrations this call applied (0: nothing to do) */
} pgschema_report;

/* The newest version this build knows (the last embedded migration). */
int pgschema_latest(void);

/* Reads the database's schema version (0: no berth schema yet) without
 * locking. BERTH_ECORRUPT if the recorded value is not a version number. */
int pgschema_version(PGconn *c, int *version, char *err, size_t errlen);

/*
 * Brings the database to pgschema_latest(): takes the session advisory lock
 * (waits for another migrator), reads the version, refuses one newer than
 * this build knows (BERTH_EFORMAT: "the database's berth schema is version
 * 7; this berthd knows versions up to 1"), applies each missing migration in
 * its own transaction, unlocks. c must be idle (not in a transaction). A
 * failed migration is rolled back and named in err (BERTH_EIO); the ones
 * before it stay applied. report may be NULL; it is filled on failure too.
 */
int pgschema_migrate(PGconn *c, pgschema_report *report, char *err, size_t errlen);

#endif
