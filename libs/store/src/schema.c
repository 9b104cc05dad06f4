/* schema.c - applies the embedded schema migrations (see schema.h). */
#include "strand/schema.h"

#include <stdio.h>

#include "strand/log.h"
#include "strand/pg.h"

/* Arbitrary constant: the advisory lock key that serialises migrations. */
#define MIGRATION_LOCK_KEY "7306531"

st_err_t st_schema_migrate(PGconn *conn, st_errbuf_t *eb)
{
    static const char *const setup =
        "SELECT pg_advisory_lock(" MIGRATION_LOCK_KEY ");"
        "CREATE SCHEMA IF NOT EXISTS strand;"
        "CREATE TABLE IF NOT EXISTS strand.schema_migrations ("
        " version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())";
    st_err_t err = st_pg_exec_script(conn, setup, eb);
    if (err != ST_OK) {
        PQclear(PQexec(conn, "SELECT pg_advisory_unlock(" MIGRATION_LOCK_KEY ")"));
        return err;
    }
    for (int i = 0; i < st_migrations_count && err == ST_OK; i++) {
        const st_migration_t *m = &st_migrations[i];
        char version[16];
        snprintf(version, sizeof version, "%d", m->version);
        const char *params[] = {version, m->name};
        PGresult *seen = NULL;
        err = st_pg_exec(conn, "SELECT 1 FROM strand.schema_migrations WHERE version = $1",
                         1, params, &seen, eb);
        if (err != ST_OK)
            break;
        int applied = PQntuples(seen) > 0;
        PQclear(seen);
        if (applied)
            continue;
        /* Simple query protocol: a migration file holds several statements. */
        if ((err = st_pg_begin(conn, eb)) != ST_OK)
            break;
        if ((err = st_pg_exec_script(conn, m->sql, eb)) != ST_OK) {
            st_pg_rollback(conn);
            char detail[sizeof eb->msg];
            snprintf(detail, sizeof detail, "%s", eb ? eb->msg : "");
            st_err_set(eb, err, "migration %s failed: %s", m->name, detail);
            break;
        }
        err = st_pg_exec(conn,
                         "INSERT INTO strand.schema_migrations (version, name) VALUES ($1, $2)",
                         2, params, NULL, eb);
        if (err == ST_OK)
            err = st_pg_commit(conn, eb);
        if (err != ST_OK)
            st_pg_rollback(conn);
        else
            st_log_info("applied schema migration", "%s", m->name);
    }
    PQclear(PQexec(conn, "SELECT pg_advisory_unlock(" MIGRATION_LOCK_KEY ")"));
    return err;
}
