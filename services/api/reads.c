/*
 * reads.c - what happened, read back (issue 18, items 3 and 4): notices (globally and
 * per instance), task events (per task and per instance), the audit log, and the
 * stuck instances. Read-only handlers on the HTTP thread; the rows are written by
 * their owners (notice.c, task.c, audit.c) and the stuck query lives in stuck.c.
 *
 * Pagination: notices and the audit log newest first, `cursor` = the last id seen
 * (items with a smaller id follow); task events oldest first, `cursor` = the last id
 * seen (larger ids follow); stuck instances longest stuck first, `cursor` =
 * "<since in microseconds>_<instance id>". `next_cursor` is null on the last page.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "command_pool.h"
#include "strand/config.h"
#include "strand/pg.h"
#include "strand/stuck.h"
#include "strand/util.h"

int st_api_notice_retention_s = 7 * 86400;
int st_api_stuck_grace_s = 60;

void st_api_reads_configure(const st_config_t *cfg)
{
    st_api_notice_retention_s = cfg->notice_retention_s;
    st_api_stuck_grace_s = cfg->stuck_grace_s;
}

#define MAX_PAGE 500
#define MAX_FILTER_LEN 200

/* $1 instance, $2 code, $3 since, $4 cursor (id below), $5 limit */
static const char *const sql_notice_page =
    "SELECT id, at, code, instance_id, signal_id, message, detail::text FROM strand.notices"
    " WHERE ($1::uuid IS NULL OR instance_id = $1::uuid) AND ($2::text IS NULL OR code = $2)"
    "   AND ($3::timestamptz IS NULL OR at >= $3::timestamptz)"
    "   AND ($4::bigint IS NULL OR id < $4::bigint)"
    " ORDER BY id DESC LIMIT $5::int";
/* $1 task, $2 instance (one of them), $3 cursor (id above), $4 limit */
static const char *const sql_task_event_page =
    "SELECT e.id, e.at, e.task_id, t.name, e.kind, e.actor, e.detail::text"
    " FROM strand.task_events e JOIN strand.tasks t ON t.id = e.task_id"
    " WHERE ($1::uuid IS NULL OR e.task_id = $1::uuid)"
    "   AND ($2::uuid IS NULL OR t.instance_id = $2::uuid)"
    "   AND ($3::bigint IS NULL OR e.id > $3::bigint)"
    " ORDER BY e.id LIMIT $4::int";
static const char *const sql_task_exists = "SELECT 1 FROM strand.tasks WHERE id = $1::uuid";
static const char *const sql_instance_exists =
    "SELECT 1 FROM strand.instances WHERE id = $1::uuid";
/* $1 instance, $2 actor, $3 action, $4 outcome, $5 since, $6 cursor (id below), $7 limit */
static const char *const sql_audit_page =
    "SELECT id, at, actor, action, outcome, instance_id, target, before::text, after::text,"
    " detail::text FROM strand.audit_log"
    " WHERE ($1::uuid IS NULL OR instance_id = $1::uuid) AND ($2::text IS NULL OR actor = $2)"
    "   AND ($3::text IS NULL OR action = $3) AND ($4::text IS NULL OR outcome = $4)"
    "   AND ($5::timestamptz IS NULL OR at >= $5::timestamptz)"
    "   AND ($6::bigint IS NULL OR id < $6::bigint)"
    " ORDER BY id DESC LIMIT $7::int";
static const char *const sql_check_time = "SELECT $1::timestamptz";

/* ---- parameters --------------------------------------------------------------------- */

/* Query parameters every list shares: limit and an id cursor. Answers 400 into `out`
 * and returns 0 on bad input. */
static int page_params(st_http_req_t *req, int def, const char **cursor, char *limit,
                       size_t limit_len, st_answer_t *out)
{
    int n = st_api_page_limit(req, def, MAX_PAGE, out);
    if (n == 0)
        return 0;
    snprintf(limit, limit_len, "%d", n);
    *cursor = st_http_query(req, "cursor");
    if (*cursor != NULL && ((*cursor)[0] == '\0' || strlen(*cursor) > 18 ||
                            strspn(*cursor, "0123456789") != strlen(*cursor))) {
        st_answer_problem(out, 400, "invalid_cursor", "cursor is not one this API issued",
                          "/cursor", NULL);
        return 0;
    }
    return 1;
}

/* A UUID query or path parameter (`text` may be NULL: absent, allowed). */
static int uuid_param(const char *text, const char *field, st_answer_t *out)
{
    if (text == NULL || st_uuid_valid(text))
        return 1;
    char msg[80];
    snprintf(msg, sizeof msg, "%s must be a UUID", field + 1);
    st_answer_problem(out, 400, "invalid_id", msg, field, NULL);
    return 0;
}

/* A short text filter (code, actor, action, outcome; NULL: absent). */
static int text_param(const char *text, const char *field, st_answer_t *out)
{
    if (text == NULL || (text[0] != '\0' && strlen(text) <= MAX_FILTER_LEN))
        return 1;
    char msg[120];
    snprintf(msg, sizeof msg, "%s must be a non-empty string of at most %d characters",
             field + 1, MAX_FILTER_LEN);
    st_answer_problem(out, 400, "invalid_field", msg, field, NULL);
    return 0;
}

/* The `since` filter: a time PostgreSQL reads as a timestamptz (RFC 3339, or a date).
 * One statement, only when the parameter is given; the database decides. */
static int since_param(PGconn *conn, const char *since, st_answer_t *out)
{
    if (since == NULL)
        return 1;
    st_errbuf_t eb;
    st_err_t err = strlen(since) > 64 ? ST_ERR_INVALID
                                      : st_pg_exec(conn, sql_check_time, 1, &since, NULL, &eb);
    if (err == ST_OK)
        return 1;
    if (err == ST_ERR_INVALID)
        st_answer_problem(out, 400, "invalid_time",
                          "since must be an ISO 8601 time (2026-11-24T10:00:00Z or 2026-11-24)",
                          "/since", NULL);
    else
        st_answer_error(out, err, &eb);
    return 0;
}

static json_t *text_or_null(PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? json_null() : json_string(PQgetvalue(res, row, col));
}

static json_t *json_or_null(PGresult *res, int row, int col)
{
    json_error_t jerr;
    json_t *v = PQgetisnull(res, row, col)
                    ? NULL
                    : json_loads(PQgetvalue(res, row, col), JSON_DECODE_ANY, &jerr);
    return v ? v : json_null();
}

/* {"items": items, "next_cursor": id of row n-1 when the page is full, else null};
 * steals `items`. */
static json_t *page_body(json_t *items, PGresult *res, int limit)
{
    int n = PQntuples(res);
    return json_pack("{s:o, s:o}", "items", items, "next_cursor",
                     n > 0 && n == limit ? json_string(PQgetvalue(res, n - 1, 0)) : json_null());
}

/* ---- notices ------------------------------------------------------------------------- */

/* GET /v1/notices and GET /v1/instances/{id}/notices (the path's id as the filter). */
static void handle_notices(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *path_id = st_http_param(req, "id");
    const char *instance = path_id ? path_id : st_http_query(req, "instance_id");
    const char *code = st_http_query(req, "code"), *since = st_http_query(req, "since");
    const char *cursor = NULL;
    char limit[16];
    st_answer_t answer = {0};
    PGconn *conn = NULL;
    if (uuid_param(instance, path_id ? "/id" : "/instance_id", &answer) &&
        text_param(code, "/code", &answer) &&
        page_params(req, 50, &cursor, limit, sizeof limit, &answer) &&
        (conn = st_api_conn(api, &answer)) != NULL && since_param(conn, since, &answer)) {
        const char *params[] = {instance, code, since, cursor, limit};
        st_errbuf_t eb;
        PGresult *res = NULL;
        st_err_t err = st_pg_exec(conn, sql_notice_page, 5, params, &res, &eb);
        if (err != ST_OK) {
            st_answer_error(&answer, err, &eb);
        } else {
            json_t *items = json_array();
            for (int i = 0; i < PQntuples(res); i++)
                json_array_append_new(
                    items, json_pack("{s:I, s:o, s:s, s:o, s:o, s:s, s:o}", "id",
                                     (json_int_t)atoll(PQgetvalue(res, i, 0)), "at",
                                     st_api_time_json(res, i, 1), "code", PQgetvalue(res, i, 2),
                                     "instance_id", text_or_null(res, i, 3), "signal_id",
                                     text_or_null(res, i, 4), "message", PQgetvalue(res, i, 5),
                                     "detail", json_or_null(res, i, 6)));
            st_answer_set(&answer, 200, page_body(items, res, atoi(limit)));
        }
        PQclear(res);
    }
    st_api_reply(req, &answer);
}

/* ---- task events --------------------------------------------------------------------- */

/* Answers 404 (code `missing`) unless `sql` finds the row `id`; 1 when it does. */
static int row_exists(PGconn *conn, const char *sql, const char *id, const char *missing,
                      const char *message, st_answer_t *out)
{
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql, 1, &id, &res, &eb);
    int found = err == ST_OK && PQntuples(res) > 0;
    PQclear(res);
    if (err != ST_OK)
        st_answer_error(out, err, &eb);
    else if (!found)
        st_answer_problem(out, 404, missing, message, NULL, NULL);
    return found;
}

/* GET /v1/tasks/{id}/events and GET /v1/instances/{id}/task-events: oldest first. */
static void task_events(st_api_t *api, st_http_req_t *req, int per_task)
{
    const char *id = st_http_param(req, "id");
    const char *cursor = NULL;
    char limit[16];
    st_answer_t answer = {0};
    PGconn *conn = NULL;
    if (uuid_param(id, "/id", &answer) &&
        page_params(req, 100, &cursor, limit, sizeof limit, &answer) &&
        (conn = st_api_conn(api, &answer)) != NULL &&
        (per_task ? row_exists(conn, sql_task_exists, id, "task_not_found", "no such task", &answer)
                  : row_exists(conn, sql_instance_exists, id, "instance_not_found",
                               "no such instance", &answer))) {
        const char *params[] = {per_task ? id : NULL, per_task ? NULL : id, cursor, limit};
        st_errbuf_t eb;
        PGresult *res = NULL;
        st_err_t err = st_pg_exec(conn, sql_task_event_page, 4, params, &res, &eb);
        if (err != ST_OK) {
            st_answer_error(&answer, err, &eb);
        } else {
            json_t *items = json_array();
            for (int i = 0; i < PQntuples(res); i++)
                json_array_append_new(
                    items, json_pack("{s:I, s:o, s:s, s:s, s:s, s:o, s:o}", "id",
                                     (json_int_t)atoll(PQgetvalue(res, i, 0)), "at",
                                     st_api_time_json(res, i, 1), "task_id", PQgetvalue(res, i, 2),
                                     "task_name", PQgetvalue(res, i, 3), "kind",
                                     PQgetvalue(res, i, 4), "actor", text_or_null(res, i, 5),
                                     "detail", json_or_null(res, i, 6)));
            st_answer_set(&answer, 200, page_body(items, res, atoi(limit)));
        }
        PQclear(res);
    }
    st_api_reply(req, &answer);
}

static void handle_task_events(st_http_req_t *req, void *ctx)
{
    task_events(ctx, req, 1);
}

static void handle_instance_task_events(st_http_req_t *req, void *ctx)
{
    task_events(ctx, req, 0);
}

/* ---- the audit log -------------------------------------------------------------------- */

/* GET /v1/audit?instance_id=&actor=&action=&outcome=&since=&cursor=&limit= */
static void handle_audit(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *instance = st_http_query(req, "instance_id"), *actor = st_http_query(req, "actor"),
               *action = st_http_query(req, "action"), *outcome = st_http_query(req, "outcome"),
               *since = st_http_query(req, "since");
    const char *cursor = NULL;
    char limit[16];
    st_answer_t answer = {0};
    PGconn *conn = NULL;
    if (uuid_param(instance, "/instance_id", &answer) && text_param(actor, "/actor", &answer) &&
        text_param(action, "/action", &answer) && text_param(outcome, "/outcome", &answer) &&
        page_params(req, 50, &cursor, limit, sizeof limit, &answer) &&
        (conn = st_api_conn(api, &answer)) != NULL && since_param(conn, since, &answer)) {
        const char *params[] = {instance, actor, action, outcome, since, cursor, limit};
        st_errbuf_t eb;
        PGresult *res = NULL;
        st_err_t err = st_pg_exec(conn, sql_audit_page, 7, params, &res, &eb);
        if (err != ST_OK) {
            st_answer_error(&answer, err, &eb);
        } else {
            json_t *items = json_array();
            for (int i = 0; i < PQntuples(res); i++)
                json_array_append_new(
                    items,
                    json_pack("{s:I, s:o, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "id",
                              (json_int_t)atoll(PQgetvalue(res, i, 0)), "at",
                              st_api_time_json(res, i, 1), "actor", PQgetvalue(res, i, 2),
                              "action", PQgetvalue(res, i, 3), "outcome", PQgetvalue(res, i, 4),
                              "instance_id", text_or_null(res, i, 5), "target",
                              text_or_null(res, i, 6), "before", json_or_null(res, i, 7),
                              "after", json_or_null(res, i, 8), "detail",
                              json_or_null(res, i, 9)));
            st_answer_set(&answer, 200, page_body(items, res, atoi(limit)));
        }
        PQclear(res);
    }
    st_api_reply(req, &answer);
}

/* ---- stuck instances ------------------------------------------------------------------ */

/* The stuck page on a command worker: one pass over the running and waiting instances
 * takes a while on a large table (docs/operations.md), so it does not hold the event
 * loop. `args`: {limit, reason?, after_us?, after_id?}, checked by handle_stuck. */
static void stuck_page_cmd(PGconn *conn, const st_principal_t *who, const char *unused_id,
                           const json_t *args, st_answer_t *out)
{
    int limit = (int)json_integer_value(json_object_get(args, "limit"));
    const char *after_id = json_string_value(json_object_get(args, "after_id"));
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_stuck_page(conn, st_api_stuck_grace_s,
                                 json_string_value(json_object_get(args, "reason")),
                                 json_string_value(json_object_get(args, "after_us")), after_id,
                                 limit, &res, &eb);
    if (err != ST_OK) {
        st_answer_error(out, err, &eb);
        return;
    }
    json_t *items = json_array();
    int n = PQntuples(res);
    for (int i = 0; i < n; i++)
        json_array_append_new(
            items, json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:o, s:o}", "instance_id",
                             PQgetvalue(res, i, 0), "definition", PQgetvalue(res, i, 1), "version",
                             atoi(PQgetvalue(res, i, 2)), "status", PQgetvalue(res, i, 3),
                             "reason", PQgetvalue(res, i, 4), "waiting_kind",
                             text_or_null(res, i, 5), "since", st_api_time_json(res, i, 6),
                             "last_error_code", text_or_null(res, i, 8)));
    json_t *next = json_null();
    if (n > 0 && n == limit) {
        char text[80];
        snprintf(text, sizeof text, "%s_%s", PQgetvalue(res, n - 1, 7), PQgetvalue(res, n - 1, 0));
        next = json_string(text);
    }
    PQclear(res);
    st_answer_set(out, 200, json_pack("{s:o, s:o, s:i}", "items", items, "next_cursor", next,
                                      "grace_s", st_api_stuck_grace_s));
}

/* GET /v1/instances/stuck?reason=&cursor=&limit= (stuck.h says what stuck means):
 * checks the parameters here, runs the query on the command pool. */
static void handle_stuck(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *reason = st_http_query(req, "reason"), *cursor = st_http_query(req, "cursor");
    st_answer_t answer = {0};
    int limit = st_api_page_limit(req, 50, MAX_PAGE, &answer);
    if (limit == 0) {
        st_api_reply(req, &answer);
        return;
    }
    int known = reason == NULL;
    for (int i = 0; !known && i < ST_STUCK_NREASONS; i++)
        known = strcmp(reason, st_stuck_reasons[i]) == 0;
    if (!known) {
        st_answer_problem(&answer, 400, "invalid_field",
                          "reason must be last_wakeup_failed, no_pending_wakeup or "
                          "signal_without_deadline", "/reason", NULL);
        st_api_reply(req, &answer);
        return;
    }
    json_t *args = json_pack("{s:i}", "limit", limit);
    if (reason != NULL)
        json_object_set_new(args, "reason", json_string(reason));
    if (cursor != NULL) {
        const char *sep = strchr(cursor, '_');
        if (sep == NULL || sep == cursor || sep - cursor > 18 ||
            strspn(cursor, "0123456789") != (size_t)(sep - cursor) || !st_uuid_valid(sep + 1)) {
            json_decref(args);
            st_answer_problem(&answer, 400, "invalid_cursor", "cursor is not one this API issued",
                              "/cursor", NULL);
            st_api_reply(req, &answer);
            return;
        }
        json_object_set_new(args, "after_us", json_stringn(cursor, (size_t)(sep - cursor)));
        json_object_set_new(args, "after_id", json_string(sep + 1));
    }
    st_command_pool_submit(api->pool, req, stuck_page_cmd, NULL, &api->current, NULL, NULL, args,
                           NULL);
}

json_t *st_api_stuck_json(PGconn *conn, const char *instance_id, st_err_t *err, st_errbuf_t *eb)
{
    int found = 0;
    const char *reason = NULL;
    char since[64] = "";
    *err = st_stuck_check(conn, st_api_stuck_grace_s, instance_id, &found, &reason, since,
                          sizeof since, eb);
    if (*err != ST_OK || !found)
        return json_null();
    return json_pack("{s:s, s:s}", "reason", reason, "since", since);
}

void st_api_reads_register(st_api_t *api)
{
    /* before GET /v1/instances/{id}, which would take "stuck" for an id */
    st_http_route(api->svc->http, "GET", "/v1/instances/stuck", handle_stuck, api);
    st_http_route(api->svc->http, "GET", "/v1/notices", handle_notices, api);
    st_http_route(api->svc->http, "GET", "/v1/instances/{id}/notices", handle_notices, api);
    st_http_route(api->svc->http, "GET", "/v1/tasks/{id}/events", handle_task_events, api);
    st_http_route(api->svc->http, "GET", "/v1/instances/{id}/task-events",
                  handle_instance_task_events, api);
    st_http_route(api->svc->http, "GET", "/v1/audit", handle_audit, api);
}
