/* instance_store.c - the owner of strand.instances and strand.runtime_states (see
 * instance_store.h). */
#include "strand/instance_store.h"

#include <stdlib.h>

#include "strand/pg.h"

/* ---- pause ---- */

#include <stdio.h>
#include <string.h>

static const char *const sql_pause =
    "UPDATE strand.instances SET status = 'paused', updated_at = now()"
    " WHERE id = $1::uuid AND status IN ('pending', 'running', 'waiting') RETURNING 1";
static const char *const sql_unpause =
    "UPDATE strand.instances i SET status = (SELECT CASE WHEN rs.snapshot IS NULL THEN 'pending'"
    "   ELSE coalesce(rs.snapshot->>'status', 'running') END"
    "   FROM strand.runtime_states rs WHERE rs.instance_id = i.id), updated_at = now()"
    " WHERE i.id = $1::uuid AND i.status = 'paused' RETURNING i.status";
static const char *const sql_rewind_runtime =
    "UPDATE strand.runtime_states SET state_version = state_version + 1, snapshot = $3::jsonb,"
    " waiting_kind = $4, waiting_token = $5,"
    " waiting_until = to_timestamp($6::double precision / 1000.0),"
    " last_signal_id = $7, last_executed_by = $8, last_executed_at = now(),"
    " last_error_code = NULL, last_error = NULL"
    " WHERE instance_id = $1::uuid AND state_version = $2::bigint RETURNING 1";
static const char *const sql_rewind_instance =
    "UPDATE strand.instances SET status = $2, output = $3::jsonb, error = $4::jsonb,"
    " updated_at = now(), ended_at = CASE WHEN $2 IN ('completed', 'failed') THEN now() END"
    " WHERE id = $1::uuid";

st_err_t st_instance_store_pause_tx(PGconn *conn, const char *id, int *changed,
                                    st_errbuf_t *eb)
{
    const char *params[] = {id};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_pause, 1, params, &res, eb);
    *changed = err == ST_OK && PQntuples(res) == 1;
    PQclear(res);
    return err;
}

st_err_t st_instance_store_unpause_tx(PGconn *conn, const char *id, char *status, size_t len,
                                      st_errbuf_t *eb)
{
    const char *params[] = {id};
    PGresult *res = NULL;
    status[0] = '\0';
    st_err_t err = st_pg_exec(conn, sql_unpause, 1, params, &res, eb);
    if (err == ST_OK && PQntuples(res) == 1)
        snprintf(status, len, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return err;
}

st_err_t st_instance_store_rewind_tx(PGconn *conn, const st_instance_rewind_t *r,
                                     st_errbuf_t *eb)
{
    char version[24];
    snprintf(version, sizeof version, "%lld", r->old_version);
    const char *rs_params[] = {r->id, version, r->snapshot, r->waiting_kind, r->waiting_token,
                               r->waiting_until_ms, r->signal_id, r->node_id};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_rewind_runtime, 8, rs_params, &res, eb);
    if (err == ST_OK && PQntuples(res) != 1)
        err = st_err_set(eb, ST_ERR_CONFLICT, "the runtime state of %s is no longer at version %s",
                         r->id, version);
    PQclear(res);
    const char *i_params[] = {r->id, r->status, r->output, r->error};
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_rewind_instance, 4, i_params, NULL, eb);
    return err;
}
