/*
 * definitions.c - import, validate, list and get workflow definitions (HTTP).
 * Definitions are immutable: re-importing the same (name, version) with the same
 * canonical form is a no-op (200); with a different one it is refused (409). The SQL of
 * strand.definitions and of a lifecycle's lc_* rows is in their owner,
 * strand/definition_store.h; this file compiles, checks and answers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "command_pool.h"
#include "strand/diagram.h"
#include "permissions.h"
#include "strand/result_schema.h"
#include "strand/engine.h"
#include "strand/definition_pause.h"
#include "strand/definition_store.h"
#include "strand/pg.h"
#include "strand/util.h"

/* Appends a problem for every task step whose result_schema is not a schema of the
 * supported subset (result_schema.h), walking the document below `pointer`. */
static void check_result_schemas(const json_t *v, const char *pointer, int depth, json_t *problems)
{
    if (depth > 200 || json_array_size(problems) > 100)
        return;
    char p[700];
    if (json_is_array(v)) {
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) {
            snprintf(p, sizeof p, "%.600s/%zu", pointer, i);
            check_result_schemas(item, p, depth + 1, problems);
        }
        return;
    }
    if (!json_is_object(v))
        return;
    const json_t *schema = json_object_get(v, "result_schema");
    const char *type = json_string_value(json_object_get(v, "type"));
    if (schema != NULL && type != NULL && strcmp(type, "task") == 0) {
        char where[300], msg[300];
        if (!st_schema_check(schema, where, sizeof where, msg, sizeof msg)) {
            snprintf(p, sizeof p, "%.300s/result_schema%s", pointer, where);
            json_array_append_new(problems, json_pack("{s:s, s:s}", "pointer", p, "message", msg));
        }
    }
    const char *key;
    json_t *item;
    json_object_foreach((json_t *)v, key, item) {
        if (strcmp(key, "result_schema") == 0 || strchr(key, '/') || strchr(key, '~'))
            continue;
        snprintf(p, sizeof p, "%.500s/%.100s", pointer, key);
        check_result_schemas(item, p, depth + 1, problems);
    }
}

/* Compiles the body; answers 422 with every problem on failure. */
static st_defn_t *compile_or_reply(st_http_req_t *req, json_t *doc)
{
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    json_t *schema_problems = json_array();
    check_result_schemas(doc, "", 0, schema_problems);
    if (json_array_size(schema_problems) > 0) {
        st_http_reply_problem(req, 422, "invalid_definition",
                              "the definition is not valid; see problems", "",
                              json_pack("{s:o}", "problems", schema_problems));
        return NULL;
    }
    json_decref(schema_problems);
    if (st_defn_compile(doc, &defn, &problems) != ST_OK) {
        st_http_reply_problem(req, 422, "invalid_definition",
                              "the definition is not valid; see problems", "",
                              json_pack("{s:o}", "problems",
                                        problems ? problems : json_array()));
        return NULL;
    }
    json_decref(problems);
    return defn;
}

/* ---- definitions a definition starts ---------------------------------------------
 *
 * A subworkflow step starts an instance of another definition, with input the
 * definition chose. Importing it therefore needs what starting that definition needs:
 * instances:start on it (docs/api.md, "Permissions"), or definitions:write@A with
 * instances:start@A would start anything through A. The executor checks the importer
 * again when the child starts (services/executor/effects.c). The subworkflow step is
 * the only step of the canonical form (flows; processes and lifecycles compile to no
 * such step) that names another definition. */

/* Appends {definition, pointer} for every subworkflow step in the canonical steps
 * `steps` (at `pointer`) and in the step lists nested in them: any member of a step
 * that is an array of steps (then, else, default, body, on_timeout, on_failure), of
 * step arrays (a parallel's branches) or of objects with steps (a switch's cases). */
static void collect_starts(const json_t *steps, const char *pointer, int depth, json_t *out)
{
    if (!json_is_array(steps) || depth > 200)
        return;
    size_t i;
    json_t *step;
    json_array_foreach(steps, i, step) {
        char p[700];
        snprintf(p, sizeof p, "%.600s/%zu", pointer, i);
        if (!json_is_object(step))
            continue;
        const char *type = json_string_value(json_object_get(step, "type"));
        const char *definition = json_string_value(json_object_get(step, "definition"));
        if (type != NULL && strcmp(type, "subworkflow") == 0 && definition != NULL) {
            char dp[720];
            snprintf(dp, sizeof dp, "%s/definition", p);
            json_array_append_new(out, json_pack("{s:s, s:s}", "definition", definition,
                                                 "pointer", dp));
        }
        const char *key;
        json_t *member;
        json_object_foreach(step, key, member) {
            if (!json_is_array(member) || strchr(key, '/') || strchr(key, '~'))
                continue;
            char mp[800];
            snprintf(mp, sizeof mp, "%.700s/%.90s", p, key);
            const json_t *first = json_array_get(member, 0);
            if (json_is_object(first) && json_object_get(first, "type") != NULL) {
                collect_starts(member, mp, depth + 1, out);   /* steps */
                continue;
            }
            size_t k;
            json_t *item;
            json_array_foreach(member, k, item) {
                char ip[900];
                snprintf(ip, sizeof ip, "%.800s/%zu", mp, k);
                if (json_is_array(item))   /* a branch */
                    collect_starts(item, ip, depth + 1, out);
                else if (json_is_object(item) && json_is_array(json_object_get(item, "steps"))) {
                    char sp[920];   /* a case */
                    snprintf(sp, sizeof sp, "%s/steps", ip);
                    collect_starts(json_object_get(item, "steps"), sp, depth + 1, out);
                }
            }
        }
    }
}

/* Every definition `defn`'s steps start: [{definition, pointer, allowed}], `allowed`
 * whether `who` holds instances:start on it. Caller decrefs. */
static json_t *definition_starts(const st_defn_t *defn, const st_principal_t *who)
{
    const json_t *canonical = st_defn_canonical(defn);
    json_t *starts = json_array();
    collect_starts(json_object_get(canonical, "steps"), "/steps", 0, starts);
    const char *state;
    json_t *steps;
    json_object_foreach((json_t *)json_object_get(canonical, "states"), state, steps) {
        char p[300];   /* a process's states: {"steps": [...]} each */
        snprintf(p, sizeof p, "/states/%.200s/steps", state);
        collect_starts(json_object_get(steps, "steps"), p, 0, starts);
    }
    size_t i;
    json_t *start;
    json_array_foreach(starts, i, start)
        json_object_set_new(start, "allowed",
                            json_boolean(st_principal_may(who, ST_PERM_INSTANCES_START,
                                                          json_string_value(json_object_get(start, "definition")),
                                                          NULL)));
    return starts;
}

/* Answers 403 and returns 0 when the caller may not start a definition `defn` starts
 * (the first such step, in document order); 1 when it may start them all. */
static int may_import_starts(st_api_t *api, st_http_req_t *req, const st_defn_t *defn)
{
    json_t *starts = definition_starts(defn, &api->current);
    size_t i;
    json_t *start;
    json_array_foreach(starts, i, start) {
        if (json_is_true(json_object_get(start, "allowed")))
            continue;
        const char *definition = json_string_value(json_object_get(start, "definition"));
        const char *perm = st_perm_name(ST_PERM_INSTANCES_START);
        char msg[400];
        snprintf(msg, sizeof msg, "importing this definition needs the permission %s for the "
                 "definition %.150s, which its subworkflow step starts", perm, definition);
        st_http_reply_problem(req, 403, "forbidden", msg,
                              json_string_value(json_object_get(start, "pointer")),
                              json_pack("{s:s, s:s}", "required_permission", perm,
                                        "definition", definition));
        json_decref(starts);
        return 0;
    }
    json_decref(starts);
    return 1;
}

static void handle_validate(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    json_t *doc = st_http_body_object(req);
    if (doc == NULL)
        return;
    st_defn_t *defn = compile_or_reply(req, doc);
    json_decref(doc);
    if (defn == NULL)
        return;
    /* what an import would also need: instances:start on each definition it starts */
    st_http_reply_json(req, 200, json_pack("{s:b, s:s, s:i, s:s, s:O, s:o}", "valid", 1, "name",
                                           st_defn_name(defn), "version",
                                           st_defn_version(defn), "kind", st_defn_kind(defn),
                                           "canonical", st_defn_canonical(defn), "starts",
                                           definition_starts(defn, &api->current)));
    st_defn_free(defn);
}

static void handle_import(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    json_t *doc = st_http_body_object(req);
    if (doc == NULL)
        return;
    st_defn_t *defn = compile_or_reply(req, doc);
    if (defn == NULL || !may_import_starts(api, req, defn)) {
        st_defn_free(defn);
        json_decref(doc);
        return;
    }
    char *source = json_dumps(doc, JSON_COMPACT);
    char *canonical = json_dumps(st_defn_canonical(defn), JSON_COMPACT);
    json_decref(doc);
    const st_definition_new_t def = {st_defn_name(defn), st_defn_version(defn),
                                     st_defn_kind(defn), source, canonical,
                                     api->current.name};
    st_errbuf_t eb;
    int inserted = 0, same = 0;
    PGconn *conn = st_api_conn_or_reply(api, req);
    /* One transaction: the definition row and, for a blueprint, its normalised rows. */
    st_err_t err = conn ? st_pg_begin(conn, &eb) : ST_ERR_DB;
    if (err == ST_OK)
        err = st_definition_add_tx(conn, &def, &inserted, &eb);
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (conn != NULL && err != ST_OK)
        st_pg_rollback(conn);
    if (conn == NULL) {
        /* answered by st_api_conn */
    } else if (err != ST_OK) {
        st_api_reply_error(req, err, &eb);
    } else if (inserted) {
        st_http_reply_json(req, 201, json_pack("{s:s, s:i, s:s, s:b}", "name",
                                               st_defn_name(defn), "version",
                                               st_defn_version(defn), "kind",
                                               st_defn_kind(defn), "created", 1));
    } else if ((err = st_definition_same(conn, def.name, def.version, canonical, &same, &eb)) !=
               ST_OK) {
        st_api_reply_error(req, err, &eb);
    } else if (same) {
        st_http_reply_json(req, 200, json_pack("{s:s, s:i, s:s, s:b}", "name",
                                               st_defn_name(defn), "version",
                                               st_defn_version(defn), "kind",
                                               st_defn_kind(defn), "created", 0));
    } else {
        st_http_reply_problem(req, 409, "definition_exists",
                              "this name and version already exist with different content;"
                              " definitions are immutable, import a new version",
                              "/version", NULL);
    }
    free(source);
    free(canonical);
    st_defn_free(defn);
}

/* GET /v1/definitions?kind=&name_prefix=&limit=&cursor=: by name and version; the cursor is
 * "<version>:<name>" of the last item of the previous page. */
static void handle_list(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    st_answer_t answer = {0};
    int limit = st_api_page_limit(req, 100, 500, &answer);
    if (limit == 0) {
        st_api_reply(req, &answer);
        return;
    }
    const char *cursor = st_http_query(req, "cursor");
    const char *kind = st_http_query(req, "kind");
    const char *name_prefix = st_http_query(req, "name_prefix");
    char cursor_version[16] = "";
    const char *cursor_name = NULL;
    if (cursor != NULL) {
        size_t digits = strspn(cursor, "0123456789");
        if (digits == 0 || digits > 7 || cursor[digits] != ':' || cursor[digits + 1] == '\0') {
            st_http_reply_problem(req, 400, "invalid_cursor", "cursor is not one this API issued",
                                  "/cursor", NULL);
            return;
        }
        memcpy(cursor_version, cursor, digits);
        cursor_name = cursor + digits + 1;
    }
    if (kind != NULL && strcmp(kind, "flow") && strcmp(kind, "lifecycle") && strcmp(kind, "process")) {
        st_http_reply_problem(req, 400, "invalid_kind", "kind must be flow, lifecycle or process",
                              "/kind", NULL);
        return;
    }
    PGconn *conn = st_api_conn_or_reply(api, req);
    if (conn == NULL)
        return;
    const char *prefix = name_prefix != NULL && name_prefix[0] != '\0' ? name_prefix : NULL;
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_definition_list(conn, cursor_name, cursor_version, limit, kind, prefix,
                                      &res, &eb);
    if (err != ST_OK) {
        st_api_reply_error(req, err, &eb);
        return;
    }
    json_t *items = json_array();
    for (int i = 0; i < PQntuples(res); i++)
        json_array_append_new(items, json_pack("{s:s, s:i, s:s, s:o}", "name",
                                               PQgetvalue(res, i, 0), "version",
                                               atoi(PQgetvalue(res, i, 1)), "kind",
                                               PQgetvalue(res, i, 2), "created_at",
                                               st_api_time_json(res, i, 3)));
    json_t *body = json_pack("{s:o}", "items", items);
    int n = PQntuples(res);
    if (n == limit) {
        const char *last_name = PQgetvalue(res, n - 1, 0);
        size_t len = strlen(last_name) + 16;
        char *next = malloc(len);
        if (next != NULL)
            snprintf(next, len, "%s:%s", PQgetvalue(res, n - 1, 1), last_name);
        json_object_set_new(body, "next_cursor", next ? json_string(next) : json_null());
        free(next);
    } else {
        json_object_set_new(body, "next_cursor", json_null());
    }
    PQclear(res);
    st_http_reply_json(req, 200, body);
}

static void handle_get(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *version = st_http_param(req, "version");
    if (version != NULL && (atoi(version) <= 0 || strspn(version, "0123456789") != strlen(version))) {
        st_http_reply_problem(req, 400, "invalid_version", "version must be a positive integer",
                              "/version", NULL);
        return;
    }
    PGconn *conn = st_api_conn_or_reply(api, req);
    if (conn == NULL)
        return;
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_definition_find(conn, st_http_param(req, "name"), version, &res, &eb);
    if (err != ST_OK) {
        st_api_reply_error(req, err, &eb);
        return;
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        st_http_reply_problem(req, 404, "definition_not_found", "no such definition", NULL,
                              NULL);
        return;
    }
    json_error_t jerr;
    json_t *body = json_pack("{s:s, s:i, s:s, s:o, s:o, s:o}", "name",
                             PQgetvalue(res, 0, 0), "version",
                             atoi(PQgetvalue(res, 0, 1)), "kind",
                             PQgetvalue(res, 0, 2), "source",
                             json_loads(PQgetvalue(res, 0, 3), 0, &jerr),
                             "canonical",
                             json_loads(PQgetvalue(res, 0, 4), 0, &jerr),
                             "created_at", st_api_time_json(res, 0, 5));
    /* ---- pause ---- whether this version is paused (strand/definition_pause.h) */
    int paused = 0;
    err = st_definition_pause_get(conn, PQgetvalue(res, 0, 0), atoi(PQgetvalue(res, 0, 1)), &paused, &eb);
    if (err != ST_OK) {
        PQclear(res);
        json_decref(body);
        st_api_reply_error(req, err, &eb);
        return;
    }
    json_object_set_new(body, "paused", json_boolean(paused));
    st_http_reply_json(req, 200, body);
    PQclear(res);
}

extern const char st_definition_schema_json[];

/* GET /v1/schema/definition: the JSON Schema of definition documents. */
static void handle_schema(st_http_req_t *req, void *ctx)
{
    st_http_reply_text(req, 200, "application/schema+json", st_definition_schema_json);
}

static const char *const sql_diagram_instance =
    "SELECT i.definition_name, i.definition_version, rs.snapshot::text,"
    " (SELECT coalesce(jsonb_agg(t.name ORDER BY t.completed_at), '[]')::text FROM strand.tasks t"
    "   WHERE t.instance_id = i.id AND t.status = 'completed')"
    " FROM strand.instances i JOIN strand.runtime_states rs ON rs.instance_id = i.id"
    " WHERE i.id = $1::uuid";

/* The diagram command, run on the command pool: laying out a large graph takes
 * seconds, which the event loop (and /healthz with it) must never wait for. `args` is
 * {name, version, instance?}, checked by handle_diagram(); a 200 answer's body is
 * {"svg": text}, which diagram_then() sends as image/svg+xml. */
static void cmd_diagram(PGconn *conn, const st_principal_t *who, const char *unused_id,
                        const json_t *args, st_answer_t *out)
{
    const char *name = json_string_value(json_object_get(args, "name"));
    const char *version = json_string_value(json_object_get(args, "version"));
    const char *instance = json_string_value(json_object_get(args, "instance"));
    st_errbuf_t eb;
    PGresult *res = NULL, *ires = NULL;
    st_err_t err = st_definition_find_canonical(conn, name, version, &res, &eb);
    if (err == ST_OK && instance != NULL) {
        const char *iparams[] = {instance};
        err = st_pg_exec(conn, sql_diagram_instance, 1, iparams, &ires, &eb);
    }
    json_t *canonical = NULL, *snapshot = NULL, *done_tasks = NULL;
    json_error_t jerr;
    if (err != ST_OK) {
        st_answer_error(out, err, &eb);
    } else if (PQntuples(res) == 0) {
        st_answer_problem(out, 404, "definition_not_found", "no such definition", NULL, NULL);
    } else if (ires != NULL && (PQntuples(ires) == 0 ||
                                !st_principal_may(who, ST_PERM_INSTANCES_READ,
                                                  PQgetvalue(ires, 0, 0), NULL))) {
        /* An instance the caller may not read is answered as one that does not exist:
         * a scoped caller learns nothing of other definitions' instances. */
        st_answer_problem(out, 404, "instance_not_found", "no such instance", "/instance", NULL);
    } else if (ires != NULL && (strcmp(PQgetvalue(ires, 0, 0), name) != 0 ||
                                atoi(PQgetvalue(ires, 0, 1)) != atoi(version))) {
        char msg[300];
        snprintf(msg, sizeof msg, "the instance runs %.100s version %s, not this definition",
                 PQgetvalue(ires, 0, 0), PQgetvalue(ires, 0, 1));
        st_answer_problem(out, 409, "instance_definition_mismatch", msg, "/instance", NULL);
    } else if ((canonical = json_loads(PQgetvalue(res, 0, 0), 0, &jerr)) == NULL) {
        st_answer_problem(out, 500, "internal", "the stored definition is not JSON", NULL, NULL);
    } else {
        if (ires != NULL) {
            snapshot = PQgetisnull(ires, 0, 2) ? json_object() : json_loads(PQgetvalue(ires, 0, 2), 0, &jerr);
            done_tasks = json_loads(PQgetvalue(ires, 0, 3), 0, &jerr);
            if (snapshot == NULL)
                snapshot = json_object();
        }
        char *dot = NULL, *svg = NULL;
        size_t len = 0;
        err = st_diagram_dot(canonical, snapshot, done_tasks, &dot, &eb);
        if (err == ST_OK)
            err = st_diagram_svg(dot, &svg, &len, &eb);
        json_t *text = err == ST_OK ? json_stringn(svg, len) : NULL;
        if (err == ST_ERR_INVALID)
            st_answer_problem(out, 422, "diagram_unavailable", eb.msg, NULL, NULL);
        else if (err == ST_ERR_RETRY)
            st_answer_problem(out, 503, "diagram_busy", eb.msg, NULL, NULL);
        else if (err != ST_OK)
            st_answer_error(out, err, &eb);
        else if (text == NULL)
            st_answer_problem(out, 500, "internal", "the drawn diagram is not UTF-8", NULL, NULL);
        else
            st_answer_set(out, 200, json_pack("{s:o}", "svg", text));
        st_diagram_free(svg);
        free(dot);
    }
    json_decref(canonical);
    json_decref(snapshot);
    json_decref(done_tasks);
    PQclear(res);
    PQclear(ires);
}

/* What a diagram opened on its own (a link, a saved file served back) may do: draw,
 * with its inline styles, and nothing else: no script, nothing fetched. The console
 * inlines the SVG text into its own page, where the console's policy applies. */
#define DIAGRAM_CSP "default-src 'none'; style-src 'unsafe-inline'"

/* Sends a drawn diagram as SVG; any other answer (a problem) as it is. */
static void diagram_then(st_http_req_t *req, st_answer_t *answer, void *ctx)
{
    const char *svg = json_string_value(json_object_get(answer->body, "svg"));
    if (answer->status == 200 && svg != NULL) {
        st_http_add_header(req, "Content-Security-Policy", DIAGRAM_CSP);
        st_http_reply_text(req, 200, "image/svg+xml", svg);
    } else {
        st_api_reply(req, answer);
    }
    free(ctx);
}

/* GET /v1/definitions/{name}/{version}/diagram.svg[?instance=<id>]: the definition as
 * SVG; with an instance of that version, its path (visited) and waits (waiting). The
 * parameters are checked here; the drawing runs on the command pool (cmd_diagram). */
static void handle_diagram(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *name = st_http_param(req, "name");
    const char *version = st_http_param(req, "version");
    const char *instance = st_http_query(req, "instance");
    if (strlen(version) > 7 || atoi(version) <= 0 || strspn(version, "0123456789") != strlen(version)) {
        st_http_reply_problem(req, 400, "invalid_version", "version must be a positive integer",
                              "/version", NULL);
        return;
    }
    if (instance != NULL && !st_uuid_valid(instance)) {
        st_http_reply_problem(req, 400, "invalid_id", "instance must be an instance id (a UUID)",
                              "/instance", NULL);
        return;
    }
    /* the overlay shows the instance's path: its reader's permission too */
    if (instance != NULL && !st_api_require_permission(api, req, ST_PERM_INSTANCES_READ, name))
        return;
    json_t *args = json_pack("{s:s, s:s}", "name", name, "version", version);
    if (args == NULL) {
        st_http_reply_problem(req, 400, "invalid_field", "name must be UTF-8 text", "/name", NULL);
        return;
    }
    if (instance != NULL)
        json_object_set_new(args, "instance", json_string(instance));
    st_command_then_t then = {diagram_then, NULL};
    st_command_pool_submit(api->pool, req, cmd_diagram, NULL, &api->current, NULL, NULL, args,
                           &then);
}

void st_api_definitions_register(st_api_t *api)
{
    st_http_route(api->svc->http, "POST", "/v1/definitions", handle_import, api);
    st_http_route(api->svc->http, "POST", "/v1/definitions/validate", handle_validate, api);
    st_http_route(api->svc->http, "GET", "/v1/definitions", handle_list, api);
    st_http_route(api->svc->http, "GET", "/v1/definitions/{name}", handle_get, api);
    st_http_route(api->svc->http, "GET", "/v1/definitions/{name}/{version}", handle_get, api);
    st_http_route(api->svc->http, "GET", "/v1/definitions/{name}/{version}/diagram.svg",
                  handle_diagram, api);
    st_http_route(api->svc->http, "GET", "/v1/schema/definition", handle_schema, api);
}
