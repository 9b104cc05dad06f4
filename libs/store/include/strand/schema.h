/*
 * schema.h - the strand schema's migrations (owner of strand.schema_migrations).
 *
 * The versioned SQL files of libs/store/sql/ are embedded in the binary at build time
 * (embed_sql.cmake) and applied in order at start-up, so that a fresh deployment and a
 * restart take the same path (invariant 10).
 */
#ifndef STRAND_SCHEMA_H
#define STRAND_SCHEMA_H

#include <libpq-fe.h>

#include "strand/err.h"

/* One migration file, embedded in the binary at build time. */
typedef struct {
    int version;
    const char *name;
    const char *sql;
} st_migration_t;
extern const st_migration_t st_migrations[];
extern const int st_migrations_count;

/* Creates schema `strand` and applies every migration not yet recorded in
 * strand.schema_migrations, each in its own transaction, under an advisory lock so
 * that replicas starting together apply each migration exactly once. */
st_err_t st_schema_migrate(PGconn *conn, st_errbuf_t *eb);

#endif
