/* instance_store.c - the owner of strand.instances and strand.runtime_states (see
 * instance_store.h). */
#include "strand/instance_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/history.h"
#include "strand/pg.h"

/* ---- starts, ends and snapshot edits from outside a wake-up ------------------------ */

/* $1 id, $2 name, $3 version, $4 business_ref, $5 input, $6 parent, $7 parent's token,
 * $8 lifecycle. */
#define INSTANCE_INSERT_CTES                                                                \
    "WITH i AS (INSERT INTO strand.instances (id, definition_name, definition_version,"     \
    "   business_ref, status, input, parent_instance_id, parent_waiting_token, lifecycle)"  \
    "   VALUES ($1::uuid, $2, $3, $4, 'pending', $5::jsonb, $6::uuid, $7, $8::boolean)"     \
    "   RETURNING *),"                                                                      \
    " rs AS (INSERT INTO strand.runtime_states (instance_id, state_version)"                \
    "   SELECT id, 0 FROM i RETURNING *)"
static const char *const sql_instance_add =
    INSTANCE_INSERT_CTES " SELECT 1 FROM i JOIN rs ON rs.instance_id = i.id";
static const char *const sql_instance_add_view =
    INSTANCE_INSERT_CTES " SELECT" ST_INSTANCE_VIEW_COLUMNS " FROM i JOIN rs ON rs.instance_id = i.id";
static const char *const sql_instance_end =
    "UPDATE strand.instances SET status = $2, updated_at = now(), ended_at = now(),"
    " error = $3::jsonb WHERE id = $1::uuid";
static const char *const sql_instance_touch =
    "UPDATE strand.instances SET updated_at = now() WHERE id = $1::uuid";
static const char *const sql_runtime_lock =
    "SELECT state_version, snapshot::text FROM strand.runtime_states"
    " WHERE instance_id = $1::uuid FOR UPDATE";
static const char *const sql_runtime_lock_version =
    "SELECT state_version FROM strand.runtime_states WHERE instance_id = $1::uuid FOR UPDATE";
static const char *const sql_runtime_put =
    "UPDATE strand.runtime_states SET state_version = state_version + 1, snapshot = $2::jsonb"
    " WHERE instance_id = $1::uuid";
/* $3, $4: the signal that ended it and the node that applied it (the executor), or NULL
 * (the API: they stay as they were). */
static const char *const sql_runtime_end =
    "UPDATE strand.runtime_states SET state_version = state_version + 1, waiting_kind = NULL,"
    " waiting_token = NULL, waiting_until = NULL, snapshot = $2::jsonb,"
    " last_signal_id = COALESCE($3, last_signal_id),"
    " last_executed_by = COALESCE($4, last_executed_by),"
    " last_executed_at = CASE WHEN $3 IS NULL THEN last_executed_at ELSE now() END"
    " WHERE instance_id = $1::uuid";

static void instance_params(const st_instance_new_t *inst, const char *params[8])
{
    params[0] = inst->id;
    params[1] = inst->definition_name;
    params[2] = inst->definition_version;
    params[3] = inst->business_ref;
    params[4] = inst->input_json ? inst->input_json : "{}";
    params[5] = inst->parent_instance_id;
    params[6] = inst->parent_waiting_token;
    params[7] = inst->lifecycle ? "true" : "false";
}

int st_instance_status_ended(const char *status)
{
    return strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0 ||
           strcmp(status, "cancelled") == 0 || strcmp(status, "terminated") == 0;
}

st_err_t st_instance_add_tx(PGconn *conn, const st_instance_new_t *inst, st_errbuf_t *eb)
{
    const char *params[8];
    instance_params(inst, params);
    return st_pg_exec(conn, sql_instance_add, 8, params, NULL, eb);
}

st_err_t st_instance_add_view(PGconn *conn, const st_instance_new_t *inst, int commit,
                              PGresult **view, st_errbuf_t *eb)
{
    const char *params[8];
    instance_params(inst, params);
    return commit ? st_pg_exec_commit(conn, sql_instance_add_view, 8, params, view, eb)
                  : st_pg_exec(conn, sql_instance_add_view, 8, params, view, eb);
}

st_err_t st_instance_end_tx(PGconn *conn, const char *id, const char *status,
                            const char *error_json, st_errbuf_t *eb)
{
    const char *params[] = {id, status, error_json};
    return st_pg_exec(conn, sql_instance_end, 3, params, NULL, eb);
}

st_err_t st_instance_touch_tx(PGconn *conn, const char *id, st_errbuf_t *eb)
{
    const char *params[] = {id};
    return st_pg_exec(conn, sql_instance_touch, 1, params, NULL, eb);
}

st_err_t st_runtime_state_lock_tx(PGconn *conn, const char *id, int *found, long long *version,
                                  json_t **snapshot, st_errbuf_t *eb)
{
    const char *params[] = {id};
    PGresult *res = NULL;
    *found = 0;
    if (snapshot != NULL)
        *snapshot = NULL;
    st_err_t err = st_pg_exec(conn, snapshot ? sql_runtime_lock : sql_runtime_lock_version, 1,
                              params, &res, eb);
    if (err == ST_OK && PQntuples(res) > 0) {
        *found = 1;
        *version = atoll(PQgetvalue(res, 0, 0));
        if (snapshot != NULL && !PQgetisnull(res, 0, 1)) {
            json_error_t jerr;
            *snapshot = json_loads(PQgetvalue(res, 0, 1), 0, &jerr);
            if (*snapshot == NULL)
                err = st_err_set(eb, ST_ERR_INVALID, "instance %s: stored snapshot is not JSON: %s",
                                 id, jerr.text);
        }
    }
    PQclear(res);
    return err;
}

/* Compact JSON text of `snapshot`, NULL for none; `*err` set when encoding failed. */
static char *snapshot_text(const json_t *snapshot, st_err_t *err, st_errbuf_t *eb)
{
    *err = ST_OK;
    if (snapshot == NULL || json_is_null(snapshot))
        return NULL;
    char *text = json_dumps(snapshot, JSON_COMPACT);
    if (text == NULL)
        *err = st_err_set(eb, ST_ERR_NOMEM, "could not encode a snapshot");
    return text;
}

static st_err_t runtime_write(PGconn *conn, const char *sql, const char *id,
                              const json_t *snapshot, st_errbuf_t *eb)
{
    st_err_t err;
    char *text = snapshot_text(snapshot, &err, eb);
    if (err != ST_OK)
        return err;
    const char *params[] = {id, text};
    err = st_pg_exec(conn, sql, 2, params, NULL, eb);
    free(text);
    return err;
}

st_err_t st_runtime_state_put_tx(PGconn *conn, const char *id, const json_t *snapshot,
                                 st_errbuf_t *eb)
{
    return runtime_write(conn, sql_runtime_put, id, snapshot, eb);
}

st_err_t st_runtime_state_end_tx(PGconn *conn, const char *id, const json_t *snapshot,
                                 const char *signal_id, const char *node_id, st_errbuf_t *eb)
{
    st_err_t err;
    char *text = snapshot_text(snapshot, &err, eb);
    if (err != ST_OK)
        return err;
    const char *params[] = {id, text, signal_id, node_id};
    err = st_pg_exec(conn, sql_runtime_end, 4, params, NULL, eb);
    free(text);
    return err;
}

/* ---- pause ---- */


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

/* ---- the executor's wake-up (services/executor/wakeup.c) --------------------------- */

/* The run's result in one statement: runtime state (under the version check; an
 * applied wake-up clears last_error, or sets it to instance_failed when the run failed),
 * projection and history entry. It is queued (sent with the COMMIT), so nothing reads
 * its answer: a version that does not match, which cannot happen under the row lock the
 * executor holds, fails the statement instead (a text that is no integer; the subquery
 * is only evaluated then) and the transaction with it. */
static const char *const sql_run_persist =
    "WITH rs AS (UPDATE strand.runtime_states SET state_version = state_version + 1,"
    "   snapshot = $3::jsonb, waiting_kind = $4, waiting_token = $5,"
    "   waiting_until = to_timestamp($6::double precision / 1000.0),"
    "   last_signal_id = $7, last_executed_by = $8, last_executed_at = now(),"
    "   last_error_code = CASE WHEN $9 = 'failed' THEN 'instance_failed' END,"
    "   last_error = CASE WHEN $9 = 'failed' THEN jsonb_build_object('code', 'instance_failed',"
    "     'message', 'the instance failed', 'error', $11::jsonb, 'signal_id', $7::text, 'at', " ST_PG_SQL_RFC3339("now()") ") END"
    "   WHERE instance_id = $1::uuid AND state_version = $2 RETURNING 1),"
    " i AS (UPDATE strand.instances SET status = $9, output = $10::jsonb, error = $11::jsonb,"
    "   updated_at = now(), ended_at = CASE WHEN $9 IN ('completed', 'failed') THEN now() END"
    "   WHERE id = $1::uuid AND EXISTS (SELECT 1 FROM rs)),"
    " h AS (" ST_HISTORY_INSERT
    "   SELECT $1::uuid, 'wakeup', $12::jsonb WHERE EXISTS (SELECT 1 FROM rs))"
    " SELECT CASE WHEN (SELECT count(*) FROM rs) = 1 THEN 1 ELSE"
    "   (SELECT 'runtime state of ' || $1 || ' changed under its lock (' || count(*)"
    "    || ' rows at version ' || $2 || ')' FROM rs)::int END";

st_err_t st_runtime_state_queue_run_tx(PGconn *conn, const st_run_write_t *w, st_errbuf_t *eb)
{
    const char *params[] = {w->instance_id, w->old_version, w->snapshot, w->waiting_kind,
                            w->waiting_token, w->waiting_until_ms, w->signal_id, w->node_id,
                            w->status, w->output, w->error, w->history_detail};
    return st_pg_queue_bin(conn, sql_run_persist, 12, params, NULL, NULL, eb);
}

/* last_error on the runtime state (no version bump: it describes, it does not move the
 * instance). $8: the dead letter this transaction just wrote is named by its id. */
static const char *const sql_last_error =
    "UPDATE strand.runtime_states SET last_error_code = $2,"
    " last_error = jsonb_build_object('code', $2::text, 'message', $3::text, 'error', $4::text,"
    "   'signal_id', $5::text, 'signal_type', $6::text, 'attempts', $7::int, 'at', " ST_PG_SQL_RFC3339("now()") ")"
    "   || CASE WHEN $8::boolean THEN jsonb_build_object('dead_letter_id',"
    "        currval(pg_get_serial_sequence('strand.dead_letters', 'id'))) ELSE '{}'::jsonb END"
    " WHERE instance_id = $1::uuid";

st_err_t st_runtime_state_set_last_error_tx(PGconn *conn, const st_last_error_t *e,
                                            st_errbuf_t *eb)
{
    char attempts[16];
    snprintf(attempts, sizeof attempts, "%d", e->attempts);
    const char *params[] = {e->instance_id, e->code, e->message ? e->message : "", e->error,
                            e->signal_id, e->signal_type, attempts,
                            e->dead_lettered ? "true" : "false"};
    return st_pg_exec(conn, sql_last_error, 8, params, NULL, eb);
}
