/*
 * tasks.c - human tasks: list, get, assign, release, complete.
 *
 * The executor opens task rows when an instance waits on a task; these handlers
 * change them. Every change appends a task event in the same transaction; completion
 * also enqueues a TASK_COMPLETED signal carrying the task's waiting token, so a
 * completion that races a newer wait (or a second completion) is dropped as stale.
 * State machine: open -> assigned (assign) -> open (release); open|assigned ->
 * completed (complete); open|assigned -> cancelled (the executor, with a task event,
 * when the instance ends or the task's branch is abandoned: strand/tree.h). A
 * cancelled task refuses every action with 409 task_cancelled. Only admins act on a
 * task assigned to someone else, taking it included (403 forbidden).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "strand/engine.h"
#include "strand/result_schema.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/task.h"
#include "strand/util.h"

static const char *const sql_task_list =
    "SELECT id, instance_id, name, status, roles, assignee, created_at, deadline_at"
    " FROM strand.tasks"
    " WHERE ($1::text IS NULL OR $1 = ANY(roles))"
    "   AND ($2::text IS NULL OR assignee = $2)"
    "   AND ($3::text IS NULL OR status = $3)"
    "   AND ($4::uuid IS NULL OR instance_id = $4::uuid)"
    "   AND ($5::uuid IS NULL OR id > $5::uuid)"
    " ORDER BY id LIMIT $6";
static const char *const sql_task_get =
    "SELECT id, instance_id, name, status, roles, assignee, created_at, deadline_at,"
    " payload::text, waiting_token, completed_at FROM strand.tasks WHERE id = $1::uuid";
static const char *const sql_task_lock =
    "SELECT status, assignee, instance_id, waiting_token, to_jsonb(roles)::text FROM strand.tasks"
    " WHERE id = $1::uuid FOR UPDATE";
/* The result_schema of the task step the task's instance waits in (the snapshot
 * thread whose wait carries the task's token), or no row when no thread waits for it. */
static const char *const sql_task_result_schema =
    "SELECT (d.canonical #> string_to_array(ltrim(th->'wait'->>'step', '/'), '/'))"
    "        -> 'result_schema'"
    " FROM strand.tasks t"
    " JOIN strand.instances i ON i.id = t.instance_id"
    " JOIN strand.definitions d ON d.name = i.definition_name AND d.version = i.definition_version"
    " JOIN strand.runtime_states rs ON rs.instance_id = t.instance_id,"
    " jsonb_array_elements(coalesce(rs.snapshot->'threads', '[]')) th"
    " WHERE t.id = $1::uuid AND th->'wait'->>'token' = t.waiting_token LIMIT 1";

static json_t *task_row(PGresult *res, int row)
{
    json_t *item = json_pack("{s:s, s:s, s:s, s:s}", "id", PQgetvalue(res, row, 0),
                             "instance_id", PQgetvalue(res, row, 1), "name",
                             PQgetvalue(res, row, 2), "status", PQgetvalue(res, row, 3));
    /* roles arrive as a PostgreSQL array literal {a,b}; split on commas. */
    json_t *roles = json_array();
    char *text = strdup(PQgetvalue(res, row, 4));
    char *save = NULL;
    for (char *tok = strtok_r(text + 1, ",}", &save); tok != NULL; tok = strtok_r(NULL, ",}", &save)) {
        size_t len = strlen(tok);
        if (len >= 2 && tok[0] == '"' && tok[len - 1] == '"') {
            tok[len - 1] = '\0';
            tok++;
        }
        json_array_append_new(roles, json_string(tok));
    }
    free(text);
    json_object_set_new(item, "roles", roles);
    json_object_set_new(item, "assignee", PQgetisnull(res, row, 5)
                                              ? json_null() : json_string(PQgetvalue(res, row, 5)));
    json_object_set_new(item, "created_at", st_api_time_json(res, row, 6));
    json_object_set_new(item, "deadline_at", st_api_time_json(res, row, 7));
    return item;
}

static void handle_list(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *instance = st_http_query(req, "instance_id");
    const char *cursor = st_http_query(req, "cursor");
    const char *status = st_http_query(req, "status");
    st_answer_t answer = {0};
    PGconn *conn = NULL;
    int limit = st_api_page_limit(req, 50, 500, &answer);
    if (limit == 0)
        ;   /* answered */
    else if ((instance && !st_uuid_valid(instance)) || (cursor && !st_uuid_valid(cursor)))
        st_answer_problem(&answer, 400, "invalid_id", "instance_id and cursor must be UUIDs",
                          instance && !st_uuid_valid(instance) ? "/instance_id" : "/cursor", NULL);
    else if (status && strcmp(status, "open") && strcmp(status, "assigned") &&
             strcmp(status, "completed") && strcmp(status, "cancelled"))
        st_answer_problem(&answer, 400, "invalid_status",
                          "status must be open, assigned, completed or cancelled", "/status", NULL);
    else
        conn = st_api_conn(api, &answer);
    if (conn == NULL) {
        st_api_reply(req, &answer);
        return;
    }
    char limit_param[16];
    snprintf(limit_param, sizeof limit_param, "%d", limit);
    const char *params[] = {st_http_query(req, "role"), st_http_query(req, "assignee"), status,
                            instance, cursor, limit_param};
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_task_list, 6, params, &res, &eb);
    if (err != ST_OK) {
        st_answer_error(&answer, err, &eb);
        st_api_reply(req, &answer);
        return;
    }
    json_t *items = json_array();
    int n = PQntuples(res);
    for (int i = 0; i < n; i++)
        json_array_append_new(items, task_row(res, i));
    json_t *body = json_pack("{s:o}", "items", items);
    json_object_set_new(body, "next_cursor",
                        n == limit ? json_string(PQgetvalue(res, n - 1, 0)) : json_null());
    PQclear(res);
    st_http_reply_json(req, 200, body);
}

static void handle_get(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *id = st_http_param(req, "id");
    st_answer_t answer = {0};
    PGconn *conn = NULL;
    if (!st_uuid_valid(id))
        st_answer_problem(&answer, 400, "invalid_id", "the task id must be a UUID", "/id", NULL);
    else
        conn = st_api_conn(api, &answer);
    if (conn == NULL) {
        st_api_reply(req, &answer);
        return;
    }
    const char *params[] = {id};
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_task_get, 1, params, &res, &eb);
    if (err != ST_OK || PQntuples(res) == 0) {
        if (err != ST_OK)
            st_answer_error(&answer, err, &eb);
        else
            st_answer_problem(&answer, 404, "task_not_found", "no such task", NULL, NULL);
        PQclear(res);
        st_api_reply(req, &answer);
        return;
    }
    json_t *item = task_row(res, 0);
    json_error_t jerr;
    json_t *payload = json_loads(PQgetvalue(res, 0, 8), 0, &jerr);
    json_object_set_new(item, "payload", payload ? payload : json_object());
    json_object_set_new(item, "completed_at", st_api_time_json(res, 0, 10));
    PQclear(res);
    /* the result_schema of the step that waits for it (null: none, or no step waits),
     * so that a client (the console) can build the completion form */
    json_t *schema = NULL;
    res = NULL;
    if ((err = st_pg_exec(conn, sql_task_result_schema, 1, params, &res, &eb)) != ST_OK) {
        json_decref(item);
        st_api_reply_error(req, err, &eb);
        return;
    }
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
        schema = json_loads(PQgetvalue(res, 0, 0), 0, &jerr);
    PQclear(res);
    json_object_set_new(item, "result_schema", schema ? schema : json_null());
    st_http_reply_json(req, 200, item);
}

typedef enum { TASK_ASSIGN, TASK_RELEASE, TASK_COMPLETE } task_action_t;

/* Applies one action in one transaction: lock, check the state machine, update, event,
 * and for completion the TASK_COMPLETED signal. */
static void task_action(PGconn *conn, const st_principal_t *who, const char *id,
                        const json_t *args, task_action_t action, st_answer_t *out)
{
    if (!st_uuid_valid(id)) {
        st_answer_problem(out, 400, "invalid_id", "the task id must be a UUID", "/id", NULL);
        return;
    }
    json_t *assignee = json_object_get(args, "assignee");
    json_t *result = json_object_get(args, "result");
    const char *bad = NULL, *bad_msg = NULL;
    if (action == TASK_ASSIGN && assignee != NULL &&
        (!json_is_string(assignee) || json_string_length(assignee) == 0))
        bad = "/assignee", bad_msg = "assignee must be a non-empty string (default: the caller)";
    else if (action == TASK_COMPLETE && result != NULL && !json_is_object(result))
        bad = "/result", bad_msg = "result must be a JSON object";
    if (bad != NULL) {
        st_answer_problem(out, 400, "invalid_field", bad_msg, bad, NULL);
        return;
    }
    st_errbuf_t eb;
    if (action == TASK_COMPLETE && json_is_object(result) && st_engine_data_check(result, &eb) != ST_OK) {
        st_answer_problem(out, 400, "limit_exceeded", eb.msg, "/result", NULL);
        return;
    }
    PGresult *res = NULL;
    st_signal_t sig = {0};
    const char *lock_params[] = {id};
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_task_lock, 1, lock_params, &res, &eb);
    if (err != ST_OK)
        goto done;
    if (PQntuples(res) == 0) {
        st_answer_problem(out, 404, "task_not_found", "no such task", NULL, NULL);
        goto done;
    }
    /* Authorisation: the caller must hold one of the task's effective roles; only
     * admins assign to someone else or act on a task assigned to someone else. */
    json_error_t jerr;
    json_t *roles = json_loads(PQgetvalue(res, 0, 4), 0, &jerr);
    int may = st_principal_has_any_role(who, roles);
    json_decref(roles);
    int admin = st_principal_holds(who, ST_PERM_ADMIN) == ST_HOLDS_ALL;
    const char *holder = PQgetisnull(res, 0, 1) ? NULL : PQgetvalue(res, 0, 1);
    const char *target = assignee ? json_string_value(assignee) : who->name;
    if (!may || (!admin && action == TASK_ASSIGN && strcmp(target, who->name) != 0) ||
        (!admin && holder != NULL && strcmp(holder, who->name) != 0)) {
        st_answer_problem(out, 403, "forbidden",
                          may ? "the task is assigned to someone else"
                              : "the caller holds none of the task's roles",
                          NULL, NULL);
        goto done;
    }
    const char *status = PQgetvalue(res, 0, 0);
    int open = strcmp(status, "open") == 0, assigned = strcmp(status, "assigned") == 0;
    if (strcmp(status, "cancelled") == 0) {
        st_answer_problem(out, 409, "task_cancelled",
                          "the task was cancelled: its instance ended or its branch was abandoned",
                          NULL, NULL);
        goto done;
    }
    if ((action == TASK_RELEASE && !assigned) || (action != TASK_RELEASE && !open && !assigned)) {
        char msg[160];
        snprintf(msg, sizeof msg, "the task is %s; this action is not allowed now", status);
        st_answer_problem(out, 409, "task_state", msg, NULL, NULL);
        goto done;
    }
    if (action == TASK_COMPLETE) {
        /* Payload validation: the result must match the step's result_schema. */
        PGresult *sres = NULL;
        if ((err = st_pg_exec(conn, sql_task_result_schema, 1, lock_params, &sres, &eb)) != ST_OK)
            goto done;
        /* No thread waits with the task's token: its instance ended or abandoned the
         * task's branch (a task left open by an older release). The completion would
         * be dropped as stale; say so instead of answering 200. */
        if (PQntuples(sres) == 0) {
            PQclear(sres);
            st_answer_problem(out, 409, "task_cancelled",
                              "the task's instance no longer waits for it: it ended or abandoned"
                              " the task's branch",
                              NULL, NULL);
            goto done;
        }
        json_t *schema = NULL;
        if (!PQgetisnull(sres, 0, 0))
            schema = json_loads(PQgetvalue(sres, 0, 0), JSON_DECODE_ANY, &jerr);
        PQclear(sres);
        json_t *empty = json_object();
        char where[512], why[300];
        int ok = schema == NULL ||
                 st_schema_validate(schema, result ? result : empty, "/result", where, sizeof where,
                                    why, sizeof why);
        json_decref(schema);
        json_decref(empty);
        if (!ok) {
            char msg[400];
            snprintf(msg, sizeof msg, "the result does not match the task's result_schema: %.120s %.200s",
                     where, why);
            st_answer_problem(out, 422, "invalid_result", msg, where, NULL);
            goto done;
        }
    }
    static const char *const new_status[] = {"assigned", "open", "completed"};
    static const char *const event_kind[] = {"assigned", "released", "completed"};
    const char *new_assignee = action == TASK_ASSIGN ? target
                               : action == TASK_RELEASE ? NULL
                               : holder;
    json_t *detail = json_object();
    if (new_assignee)
        json_object_set_new(detail, "assignee", json_string(new_assignee));
    if (action == TASK_COMPLETE)
        json_object_set_new(detail, "result", result ? json_deep_copy(result) : json_object());
    char *detail_text = json_dumps(detail, JSON_COMPACT);
    json_decref(detail);
    err = st_task_move_tx(conn, id, new_status[action], new_assignee, event_kind[action],
                          who->name, detail_text, &eb);
    free(detail_text);
    if (err == ST_OK && action == TASK_COMPLETE) {
        st_signal_init(&sig, ST_SIGNAL_TASK_COMPLETED, PQgetvalue(res, 0, 2), -1);
        snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", PQgetvalue(res, 0, 3));
        sig.payload = json_pack("{s:s, s:o}", "task_id", id, "result",
                                result ? json_deep_copy(result) : json_object());
        json_object_set_new(sig.payload, "actor", json_string(who->name));
        err = st_signal_enqueue_tx(conn, &sig, &eb);
    }
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err == ST_OK) {
        PQclear(res);
        res = NULL;
        const char *get_params[] = {id};
        if ((err = st_pg_exec(conn, sql_task_get, 1, get_params, &res, &eb)) == ST_OK &&
            PQntuples(res) == 1)
            st_answer_set(out, 200, task_row(res, 0));
    }
done:
    if (out->status == 0)
        st_answer_error(out, err == ST_OK ? ST_ERR_INTERNAL : err, &eb);
    st_pg_rollback(conn);
    PQclear(res);
    st_signal_close(&sig);
}

void st_cmd_task_assign(PGconn *conn, const st_principal_t *who, const char *id,
                  const json_t *args, st_answer_t *out)
{
    task_action(conn, who, id, args, TASK_ASSIGN, out);
}

void st_cmd_task_release(PGconn *conn, const st_principal_t *who, const char *id,
                  const json_t *args, st_answer_t *out)
{
    task_action(conn, who, id, args, TASK_RELEASE, out);
}

void st_cmd_task_complete(PGconn *conn, const st_principal_t *who, const char *id,
                  const json_t *args, st_answer_t *out)
{
    task_action(conn, who, id, args, TASK_COMPLETE, out);
}

void st_api_tasks_register(st_api_t *api)
{
    st_http_route(api->svc->http, "GET", "/v1/tasks", handle_list, api);
    st_http_route(api->svc->http, "GET", "/v1/tasks/{id}", handle_get, api);
    st_api_route_command(api, "/v1/tasks/{id}/assign", st_cmd_task_assign);
    st_api_route_command(api, "/v1/tasks/{id}/release", st_cmd_task_release);
    st_api_route_command(api, "/v1/tasks/{id}/complete", st_cmd_task_complete);
}
