/*
 * pgsql.h — the .sql files of pg/sql/, embedded in the binary at build.
 *
 * CMake runs pg/embed.cmake over pg/sql/NNN_*.sql and statements.sql and
 * writes pgsql.c in the build tree (editing a .sql file rebuilds it), so
 * berthd needs no files at run time and the SQL lives only in the .sql
 * files. The script refuses migration numbers that are not 1, 2, 3...
 * without a gap. Read-only data: any thread.
 */
#ifndef BERTH_PG_PGSQL_H
#define BERTH_PG_PGSQL_H

#include <stddef.h>

typedef struct pgsql_file {
    int version;      /* NNN of the file name */
    const char *name; /* the file name without ".sql", e.g. "001_schema" */
    const char *text; /* its contents, NUL-terminated */
} pgsql_file;

/* The migrations in version order: pgsql_migrations[i].version == i + 1. */
extern const pgsql_file pgsql_migrations[];
extern const size_t pgsql_n_migrations;

/* pg/sql/statements.sql, NUL-terminated: `-- name: NAME` sections, parsed
 * by pgstmt_parse() (pg/pgstmt.h). */
extern const char pgsql_statements[];

#endif
