/* snapshot_log.c - the owner of strand.snapshot_log (see snapshot_log.h). */
#include "strand/snapshot_log.h"

#include <stdio.h>
#include <stdlib.h>

#include "strand/pg.h"

#define ST_STR_(x) #x
#define ST_STR(x) ST_STR_(x)

/* The first ST_SNAPSHOT_LOG_KEEP versions have nothing older to drop. */
static const char *const sql_keep_first =
    "INSERT INTO strand.snapshot_log (instance_id, state_version, snapshot)"
    " VALUES ($1::uuid, $2::bigint, $3::jsonb)"
    " ON CONFLICT (instance_id, state_version) DO UPDATE SET snapshot = EXCLUDED.snapshot,"
    "   created_at = now()";
static const char *const sql_keep =
    "WITH d AS (DELETE FROM strand.snapshot_log WHERE instance_id = $1::uuid"
    "   AND state_version <= $2::bigint - " ST_STR(ST_SNAPSHOT_LOG_KEEP) ")"
    " INSERT INTO strand.snapshot_log (instance_id, state_version, snapshot)"
    " VALUES ($1::uuid, $2::bigint, $3::jsonb)"
    " ON CONFLICT (instance_id, state_version) DO UPDATE SET snapshot = EXCLUDED.snapshot,"
    "   created_at = now()";
static const char *const sql_get =
    "SELECT snapshot::text FROM strand.snapshot_log WHERE instance_id = $1::uuid"
    " AND state_version = $2::bigint";

st_err_t st_snapshot_log_keep_tx(PGconn *conn, const char *instance_id,
                                 long long state_version, const char *snapshot_text,
                                 st_errbuf_t *eb)
{
    char version[24];
    snprintf(version, sizeof version, "%lld", state_version);
    const char *params[] = {instance_id, version, snapshot_text};
    return st_pg_queue_bin(conn, state_version > ST_SNAPSHOT_LOG_KEEP ? sql_keep : sql_keep_first, 3,
                           params, NULL, NULL, eb);
}

st_err_t st_snapshot_log_get(PGconn *conn, const char *instance_id, long long state_version,
                             json_t **out, st_errbuf_t *eb)
{
    char version[24];
    snprintf(version, sizeof version, "%lld", state_version);
    const char *params[] = {instance_id, version};
    PGresult *res = NULL;
    *out = NULL;
    st_err_t err = st_pg_exec(conn, sql_get, 2, params, &res, eb);
    if (err != ST_OK)
        return err;
    if (PQntuples(res) == 1) {
        json_error_t jerr;
        *out = json_loads(PQgetvalue(res, 0, 0), 0, &jerr);
        if (*out == NULL)
            err = st_err_set(eb, ST_ERR_INTERNAL, "a kept snapshot is not JSON: %s", jerr.text);
    }
    PQclear(res);
    return err;
}
