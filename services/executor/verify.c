/* verify.c - re-checks of signals the API alone checked before (see verify.h). */
#include "verify.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/pg.h"
#include "strand/result_schema.h"

/* The task waiting on (instance, token): its id, status, whether `$3` (the signal's
 * result) is the result recorded by its completion, and the result_schema of the step
 * the instance waits in with that token (NULL: none). */
static const char *const sql_task_for_completion =
    "SELECT t.id, t.status,"
    " coalesce((SELECT e.detail->'result' FROM strand.task_events e"
    "   WHERE e.task_id = t.id AND e.kind = 'completed' ORDER BY e.id DESC LIMIT 1)"
    "   = $3::jsonb, false),"
    " (SELECT (d.canonical #> string_to_array(ltrim(th->'wait'->>'step', '/'), '/'))"
    "          -> 'result_schema'"
    "    FROM strand.instances i"
    "    JOIN strand.definitions d ON d.name = i.definition_name AND d.version = i.definition_version"
    "    JOIN strand.runtime_states rs ON rs.instance_id = i.id,"
    "    jsonb_array_elements(coalesce(rs.snapshot->'threads', '[]')) th"
    "    WHERE i.id = t.instance_id AND th->'wait'->>'token' = t.waiting_token LIMIT 1)::text"
    " FROM strand.tasks t WHERE t.instance_id = $1::uuid AND t.waiting_token = $2 LIMIT 1";

static st_err_t verify_task_completed_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb)
{
    const json_t *result = sig->payload ? json_object_get(sig->payload, "result") : NULL;
    char *result_text = result ? json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    const char *params[] = {sig->instance_id, sig->waiting_token, result_text};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_task_for_completion, 3, params, &res, eb);
    free(result_text);
    if (err != ST_OK)
        return err;
    if (PQntuples(res) == 0) {   /* no task waits on this token: the interpreter says stale */
        PQclear(res);
        return ST_OK;
    }
    json_t *schema = NULL;
    if (!PQgetisnull(res, 0, 3)) {
        json_error_t jerr;
        schema = json_loads(PQgetvalue(res, 0, 3), JSON_DECODE_ANY, &jerr);
    }
    char where[256] = "", why[300] = "";
    json_t *empty = json_object();
    if (json_is_object(schema) &&
        !st_schema_validate(schema, json_is_object(result) ? result : empty, "/result", where,
                            sizeof where, why, sizeof why))
        err = st_err_set(eb, ST_ERR_FORBIDDEN,
                         "TASK_COMPLETED for task %s refused: the result does not match the "
                         "task's result_schema at %.100s: %.200s",
                         PQgetvalue(res, 0, 0), where, why);
    else if (strcmp(PQgetvalue(res, 0, 1), "completed") != 0 ||
             strcmp(PQgetvalue(res, 0, 2), "t") != 0)
        err = st_err_set(eb, ST_ERR_FORBIDDEN,
                         "TASK_COMPLETED for task %s refused: the task is %s and Strand recorded "
                         "no completion with this result (it did not come from the API)",
                         PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
    json_decref(empty);
    json_decref(schema);
    PQclear(res);
    return err;
}

st_err_t st_verify_signal_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb)
{
    if (st_signal_needs_record(sig->type)) {
        int found = 0;
        st_err_t err = st_signal_take_record_tx(conn, sig, &found, eb);
        if (err != ST_OK)
            return err;
        if (!found)
            return st_err_set(eb, ST_ERR_FORBIDDEN,
                              "%s signal %s refused: Strand has no record of sending it "
                              "(strand.control_signals); it was not produced through the outbox",
                              st_signal_type_name(sig->type), sig->signal_id);
        return ST_OK;
    }
    if (sig->type == ST_SIGNAL_TASK_COMPLETED)
        return verify_task_completed_tx(conn, sig, eb);
    return ST_OK;
}
