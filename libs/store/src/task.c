/* task.c - the owner of strand.tasks and strand.task_events (see task.h). */
#include "strand/task.h"

#include <stdio.h>
#include <string.h>

#include "strand/pg.h"

st_err_t st_task_open_tx(PGconn *conn, const char *id, const char *instance_id,
                         const char *name, const char *roles_json, const char *payload_json,
                         const char *waiting_token, const char *deadline_ms, st_errbuf_t *eb)
{
    static const char *const sql_task_insert =
        "INSERT INTO strand.tasks (id, instance_id, name, status, roles, payload, waiting_token,"
        " deadline_at) VALUES ($1::uuid, $2::uuid, $3, 'open',"
        " ARRAY(SELECT jsonb_array_elements_text($4::jsonb)), $5::jsonb, $6,"
        " to_timestamp($7::double precision / 1000.0))";
    static const char *const sql_task_created =
        "INSERT INTO strand.task_events (task_id, kind, detail) VALUES ($1::uuid, 'created', $2::jsonb)";
    const char *params[] = {id, instance_id, name, roles_json, payload_json, waiting_token,
                            deadline_ms};
    st_err_t err = st_pg_exec(conn, sql_task_insert, 7, params, NULL, eb);
    if (err != ST_OK)
        return err;
    char detail[600];
    snprintf(detail, sizeof detail, "{\"roles\":%s}", strlen(roles_json) < 500 ? roles_json : "[]");
    const char *event_params[] = {id, detail};
    return st_pg_exec(conn, sql_task_created, 2, event_params, NULL, eb);
}

st_err_t st_task_move_tx(PGconn *conn, const char *id, const char *status, const char *assignee,
                         const char *event_kind, const char *actor, const char *detail_json,
                         st_errbuf_t *eb)
{
    static const char *const sql_task_update =
        "UPDATE strand.tasks SET status = $2, assignee = $3,"
        " completed_at = CASE WHEN $2 = 'completed' THEN now() END WHERE id = $1::uuid";
    static const char *const sql_task_event =
        "INSERT INTO strand.task_events (task_id, kind, actor, detail)"
        " VALUES ($1::uuid, $2, $3, $4::jsonb)";
    const char *update_params[] = {id, status, assignee};
    st_err_t err = st_pg_exec(conn, sql_task_update, 3, update_params, NULL, eb);
    if (err != ST_OK)
        return err;
    const char *event_params[] = {id, event_kind, actor, detail_json};
    return st_pg_exec(conn, sql_task_event, 4, event_params, NULL, eb);
}
