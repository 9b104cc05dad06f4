/*
 * instances.c - start, get and list workflow instances.
 *
 * Start writes, in one transaction: the idempotency key (strand.requests), the
 * instance projection, its empty runtime state (version 0) and a START signal in the
 * outbox. Starts queued together share one transaction (st_cmd_start_group). The
 * executor runs them; nothing here runs a step.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "strand/engine.h"
#include "command_pool.h"
#include "wait_loop.h"
#include "strand/history.h"
#include "strand/instance_store.h"
#include "strand/log.h"
#include "strand/pg.h"
#include "strand/request.h"
#include "strand/signal.h"
#include "strand/tree.h"
#include "strand/util.h"

static const char *const sql_definition_latest =
    "SELECT version, canonical->>'id_reuse_policy' FROM strand.definitions WHERE name = $1"
    " AND ($2::int IS NULL OR version = $2::int) ORDER BY version DESC LIMIT 1";
static const char *const sql_instance_get =
    "SELECT" ST_INSTANCE_VIEW_COLUMNS
    " FROM strand.instances i JOIN strand.runtime_states rs ON rs.instance_id = i.id"
    " WHERE i.id = $1::uuid";
static const char *const sql_instance_list =
    "SELECT id, definition_name, definition_version, business_ref, status, created_at,"
    " updated_at, (extract(epoch FROM created_at) * 1000000)::bigint"
    " FROM strand.instances"
    " WHERE ($1::text IS NULL OR definition_name = $1)"
    "   AND ($2::text IS NULL OR status = $2)"
    "   AND ($3::text IS NULL OR business_ref = $3)"
    "   AND ($4::bigint IS NULL OR (created_at, id) < (to_timestamp($4::bigint / 1000000.0), $5::uuid))"
    "   AND ($7::timestamptz IS NULL OR created_at >= $7::timestamptz)"
    "   AND ($8::timestamptz IS NULL OR created_at < $8::timestamptz)"
    "   AND ($9::int IS NULL OR definition_version = $9::int)"
    " ORDER BY created_at DESC, id DESC LIMIT $6";

#define MAX_PAGE 500
#define MAX_REF_LEN 256

/* ---- process ID reuse (docs/processes.md) --------------------------------------------- */

static const char *const sql_reuse_lock =
    "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 9))";
static const char *const sql_reuse_previous =
    "SELECT id, status, parent_instance_id, parent_waiting_token FROM strand.instances"
    " WHERE definition_name = $1 AND business_ref = $2"
    " ORDER BY created_at DESC, id DESC LIMIT 1000";
#define REUSE_TERMINATED_ERROR \
    "{\"code\":\"terminated\",\"reason\":\"id_reuse_policy: a new run started\"}"

/* Ends a running run replaced under allow_terminate_if_running: its runtime state
 * first (the executor locks it before the instance row), the snapshot's status set by
 * the engine, then the instance. */
static st_err_t reuse_terminate_tx(PGconn *conn, const char *id, st_errbuf_t *eb)
{
    int found = 0;
    long long version = 0;
    json_t *snapshot = NULL;
    st_err_t err = st_runtime_state_lock_tx(conn, id, &found, &version, &snapshot, eb);
    if (err == ST_OK && found) {
        json_t *ended = st_snapshot_with_status(snapshot, "terminated");
        err = st_runtime_state_end_tx(conn, id, ended, NULL, NULL, eb);
        json_decref(ended);
    }
    json_decref(snapshot);
    if (err == ST_OK)
        err = st_instance_end_tx(conn, id, "terminated", REUSE_TERMINATED_ERROR, eb);
    return err;
}

/* A process started with a process id (business_ref) follows its definition's ID reuse
 * `policy` (empty: not a process) against earlier runs of the same definition with
 * that id, inside the start's transaction (serialised per id by an advisory lock). Returns ST_OK with out->status
 * set (409) when the start is refused; allow_terminate_if_running ends the running
 * runs here, in the same transaction as the new run's insert. */
static st_err_t reuse_check_tx(PGconn *conn, const char *definition, const char *policy,
                               const char *business_ref, const char *new_id, st_answer_t *out,
                               st_errbuf_t *eb)
{
    if (policy[0] == '\0')
        return ST_OK;   /* not a process */
    PGresult *res = NULL;
    st_err_t err;
    const char *ref_params[] = {definition, business_ref};
    if ((err = st_pg_exec(conn, sql_reuse_lock, 2, ref_params, NULL, eb)) != ST_OK ||
        (err = st_pg_exec(conn, sql_reuse_previous, 2, ref_params, &res, eb)) != ST_OK)
        return err;
    int n = PQntuples(res), running = 0;
    for (int i = 0; i < n; i++)
        running += !st_instance_status_ended(PQgetvalue(res, i, 1));
    const char *refusal = NULL;
    if (strcmp(policy, "disallow_reuse") == 0 && n > 0)
        refusal = "this process id was used before and the definition's id_reuse_policy is disallow_reuse";
    else if (strcmp(policy, "allow_terminate_if_running") != 0 && running > 0)
        refusal = "a run with this process id is still running";
    else if (strcmp(policy, "allow_if_previous_failed") == 0 && n > 0 &&
             strcmp(PQgetvalue(res, 0, 1), "completed") == 0)
        refusal = "the last run with this process id completed and the definition's id_reuse_policy is"
                  " allow_if_previous_failed";
    if (refusal != NULL) {
        st_answer_problem(out, 409, "process_id_in_use", refusal, "/business_ref", NULL);
        PQclear(res);
        return ST_OK;
    }
    for (int i = 0; i < n && err == ST_OK; i++) {
        if (st_instance_status_ended(PQgetvalue(res, i, 1)))
            continue;
        const char *h_params[] = {PQgetvalue(res, i, 0), new_id};
        err = reuse_terminate_tx(conn, PQgetvalue(res, i, 0), eb);
        if (err == ST_OK) {
            json_t *detail = json_pack("{s:s, s:s}", "reason", "id_reuse_policy",
                                       "replaced_by", h_params[1]);
            err = st_history_add_tx(conn, h_params[0], "terminated", detail, eb);
            json_decref(detail);
        }
        /* ...and its end reaches what it owns: tasks, pending calls, children */
        if (err == ST_OK)
            err = st_tree_end_tx(conn, PQgetvalue(res, i, 0), "terminated", eb);
        /* ...and a parent waiting for it learns it ended, as for any terminate */
        if (err == ST_OK && !PQgetisnull(res, i, 2) && !PQgetisnull(res, i, 3)) {
            json_t *error = json_pack("{s:s, s:s}", "code", "terminated", "reason",
                                      "id_reuse_policy: a new run started");
            err = st_tree_notify_parent_tx(conn, PQgetvalue(res, i, 0), PQgetvalue(res, i, 2),
                                           PQgetvalue(res, i, 3), "terminated", NULL, error, eb);
            json_decref(error);
        }
    }
    PQclear(res);
    return err;
}

/* Adds a JSON value parsed from a text column, or null. */
static void set_json_column(json_t *obj, const char *key, PGresult *res, int row, int col)
{
    json_t *value = NULL;
    if (!PQgetisnull(res, row, col)) {
        json_error_t jerr;
        value = json_loads(PQgetvalue(res, row, col), JSON_DECODE_ANY, &jerr);
    }
    json_object_set_new(obj, key, value ? value : json_null());
}

static void set_text_column(json_t *obj, const char *key, PGresult *res, int row, int col)
{
    json_object_set_new(obj, key, PQgetisnull(res, row, col)
                                      ? json_null()
                                      : json_string(PQgetvalue(res, row, col)));
}

/* Answers `status` with the view in row 0 of `res` (ST_INSTANCE_VIEW_COLUMNS). */
static void answer_view(st_answer_t *out, PGresult *res, int status)
{
    json_t *body = json_object();
    set_text_column(body, "id", res, 0, 0);
    json_object_set_new(body, "definition",
                        json_pack("{s:s, s:i}", "name", PQgetvalue(res, 0, 1), "version",
                                  atoi(PQgetvalue(res, 0, 2))));
    set_text_column(body, "business_ref", res, 0, 3);
    set_text_column(body, "status", res, 0, 4);
    set_json_column(body, "input", res, 0, 5);
    set_json_column(body, "output", res, 0, 6);
    set_json_column(body, "error", res, 0, 7);
    json_object_set_new(body, "created_at", st_api_time_json(res, 0, 8));
    json_object_set_new(body, "updated_at", st_api_time_json(res, 0, 9));
    json_object_set_new(body, "ended_at", st_api_time_json(res, 0, 10));
    json_object_set_new(body, "state_version", json_integer(atoll(PQgetvalue(res, 0, 11))));
    json_t *waiting = json_null();
    if (!PQgetisnull(res, 0, 12)) {
        waiting = json_object();
        set_text_column(waiting, "kind", res, 0, 12);
        set_text_column(waiting, "token", res, 0, 13);
        json_object_set_new(waiting, "until", st_api_time_json(res, 0, 14));
    }
    json_object_set_new(body, "waiting", waiting);
    st_answer_set(out, status, body);
}

/* Answers with the instance's current view, or 404. Returns the error of a failed
 * query, with `out` unset. */
static st_err_t answer_instance(st_answer_t *out, PGconn *conn, const char *id, int status,
                                st_errbuf_t *eb)
{
    const char *params[] = {id};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_instance_get, 1, params, &res, eb);
    if (err != ST_OK)
        return err;
    if (PQntuples(res) == 0)
        st_answer_problem(out, 404, "instance_not_found", "no such instance", NULL, NULL);
    else
        answer_view(out, res, status);
    PQclear(res);
    return ST_OK;
}

/* True if a loaded view has ended or moved past `after_version`. */
static int view_moved(const st_answer_t *view, long long after_version)
{
    const char *status = json_string_value(json_object_get(view->body, "status"));
    long long version = json_integer_value(json_object_get(view->body, "state_version"));
    return (status != NULL && st_instance_status_ended(status)) || version > after_version;
}

int st_api_instance_view(st_api_t *api, const char *instance_id, long long after_version,
                         st_answer_t *out)
{
    PGconn *conn = st_api_conn(api, out);
    if (conn == NULL)
        return 1;
    st_errbuf_t eb;
    st_err_t err = answer_instance(out, conn, instance_id, 200, &eb);
    if (err != ST_OK)
        st_answer_error(out, err, &eb);
    return out->status != 200 || after_version < 0 || view_moved(out, after_version);
}

/* The wait_ms query parameter of a long poll (0 when absent). Answers 400 in `out`
 * and returns 0 unless it is an integer from 0 to 60000. */
static int wait_param(st_http_req_t *req, int *wait_ms, st_answer_t *out)
{
    const char *text = st_http_query(req, "wait_ms");
    *wait_ms = 0;
    if (text == NULL)
        return 1;
    size_t len = strlen(text);
    if (len >= 1 && len <= 5 && strspn(text, "0123456789") == len && atoi(text) <= 60000) {
        *wait_ms = atoi(text);
        return 1;
    }
    st_answer_problem(out, 400, "invalid_wait", "wait_ms must be an integer from 0 to 60000",
                      "/wait_ms", NULL);
    return 0;
}

/* GET /v1/instances/{id}[?wait_ms=N&after_version=V]: with wait_ms, a long poll that
 * answers once state_version > V (default: the current one) or the instance ended. */
static void handle_get(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *id = st_http_param(req, "id");
    const char *after_text = st_http_query(req, "after_version");
    st_answer_t answer = {0};
    int wait_ms = 0;
    if (!st_uuid_valid(id)) {
        st_answer_problem(&answer, 400, "invalid_id", "the instance id must be a UUID", "/id", NULL);
    } else if (wait_param(req, &wait_ms, &answer)) {
        st_api_instance_view(api, id, -1, &answer);
        long long version = json_integer_value(json_object_get(answer.body, "state_version"));
        long long after = after_text ? atoll(after_text) : version;
        if (wait_ms > 0 && answer.status == 200 && !view_moved(&answer, after)) {
            st_answer_close(&answer);
            st_waiters_park(api->waiters, st_http_defer(req), id, after, wait_ms, 200);
            return;
        }
    }
    st_api_reply(req, &answer);
}

/* A start request as parsed (pointers borrowed from the request's JSON). */
typedef struct {
    const char *definition, *business_ref, *request_id;
    char version[24];   /* "" = the latest */
    const json_t *input;
} start_req_t;

/* The version a start pins and its definition's id_reuse_policy, as looked up by
 * (name, requested version); a group of starts looks each definition up once. */
typedef struct {
    const char *name;        /* borrowed from the request */
    char version[24];        /* as requested: "" = the latest */
    char pinned[16], policy[48];
    int found;
} def_pin_t;

/* The look-ups of one transaction: at most one per start. */
typedef struct {
    def_pin_t pin[ST_CMD_GROUP_MAX];
    int n;
} def_pins_t;

/* Validates the start request; answers 400 and returns 0 on bad input. */
static int parse_start(st_answer_t *out, const json_t *body, start_req_t *req)
{
    json_t *def = json_object_get(body, "definition");
    json_t *ver = json_object_get(body, "version");
    json_t *in = json_object_get(body, "input");
    json_t *ref = json_object_get(body, "business_ref");
    json_t *rid = json_object_get(body, "request_id");
    const char *field = NULL, *message = NULL;
    if (!json_is_string(def) || json_string_length(def) == 0)
        field = "/definition", message = "definition must be a non-empty string";
    else if (ver != NULL && !json_is_null(ver) &&
             (!json_is_integer(ver) || json_integer_value(ver) <= 0 ||
              json_integer_value(ver) > INT32_MAX))
        field = "/version", message = "version must be a positive integer of at most 2147483647";
    else if (in != NULL && !json_is_null(in) && !json_is_object(in))
        field = "/input", message = "input must be a JSON object";
    else if (ref != NULL && !json_is_null(ref) &&
             (!json_is_string(ref) || json_string_length(ref) > MAX_REF_LEN))
        field = "/business_ref", message = "business_ref must be a string of at most 256 characters";
    else if (rid != NULL && !json_is_null(rid) &&
             (!json_is_string(rid) || json_string_length(rid) == 0 ||
              json_string_length(rid) > MAX_REF_LEN))
        field = "/request_id", message = "request_id must be a non-empty string of at most 256 characters";
    if (field != NULL) {
        st_answer_problem(out, 400, "invalid_field", message, field, NULL);
        return 0;
    }
    st_errbuf_t eb;
    if (json_is_object(in) && st_engine_data_check(in, &eb) != ST_OK) {
        st_answer_problem(out, 400, "limit_exceeded", eb.msg, "/input", NULL);
        return 0;
    }
    req->definition = json_string_value(def);
    req->version[0] = '\0';
    if (json_is_integer(ver))
        snprintf(req->version, sizeof req->version, "%lld", (long long)json_integer_value(ver));
    req->input = json_is_object(in) ? in : NULL;
    req->business_ref = json_string_value(ref);
    req->request_id = json_string_value(rid);
    return 1;
}

/* Looks up the definition `req` names, once per distinct (name, version) in `pins`.
 * Returns the pin, or NULL with *err set on a failed query. */
static const def_pin_t *pin_definition(PGconn *conn, const start_req_t *req, def_pins_t *pins,
                                       st_err_t *err, st_errbuf_t *eb)
{
    for (int i = 0; i < pins->n; i++)
        if (strcmp(pins->pin[i].name, req->definition) == 0 &&
            strcmp(pins->pin[i].version, req->version) == 0)
            return &pins->pin[i];
    def_pin_t *pin = &pins->pin[pins->n];   /* room: one per start, ST_CMD_GROUP_MAX starts */
    *pin = (def_pin_t){.name = req->definition};
    snprintf(pin->version, sizeof pin->version, "%s", req->version);
    PGresult *res = NULL;
    const char *params[] = {req->definition, req->version[0] ? req->version : NULL};
    if ((*err = st_pg_exec(conn, sql_definition_latest, 2, params, &res, eb)) != ST_OK)
        return NULL;
    pin->found = PQntuples(res) > 0;
    if (pin->found) {
        snprintf(pin->pinned, sizeof pin->pinned, "%s", PQgetvalue(res, 0, 0));
        snprintf(pin->policy, sizeof pin->policy, "%s", PQgetvalue(res, 0, 1)); /* "" = NULL */
    }
    PQclear(res);
    pins->n++;
    return pin;
}

/* The writes of one start inside the caller's open transaction: answers `out` with 201
 * and the inserted view, or with 404 / 409 / 200 (a retried request_id) and no writes.
 * With `commit`, the instance insert goes out with the COMMIT (a start alone); without,
 * the transaction stays open (a group). Returns the error of a failed statement, with
 * `out` unset; the caller then rolls back. */
static st_err_t start_tx(PGconn *conn, const start_req_t *req, int commit, def_pins_t *pins,
                         st_answer_t *out, st_errbuf_t *eb)
{
    st_err_t err = ST_OK;
    const def_pin_t *pin = pin_definition(conn, req, pins, &err, eb);
    if (pin == NULL)
        return err;
    if (!pin->found) {
        st_answer_problem(out, 404, "definition_not_found",
                          "no such definition (or version) is imported", "/definition", NULL);
        return ST_OK;
    }
    char id[37];
    st_uuid_new(id);
    if (req->request_id != NULL) {
        int fresh = 0, found = 0;
        char prior[37] = "";
        if ((err = st_request_claim_tx(conn, ST_REQUEST_START, "", "", req->request_id, id,
                                       &fresh, prior, eb)) != ST_OK)
            return err;
        if (!fresh) {
            /* A retry of an earlier start: answer with that instance, change nothing. A
             * claim committed while ours waited is not in our snapshot: look again. */
            if (prior[0] == '\0' &&
                (err = st_request_find(conn, ST_REQUEST_START, "", "", req->request_id, &found,
                                       prior, eb)) != ST_OK)
                return err;
            return answer_instance(out, conn, prior, 200, eb);
        }
    }
    if (req->business_ref != NULL &&
        ((err = reuse_check_tx(conn, req->definition, pin->policy, req->business_ref, id, out,
                               eb)) != ST_OK ||
         out->status != 0))
        return err;
    char *input_text = req->input ? json_dumps(req->input, JSON_COMPACT) : strdup("{}");
    st_instance_new_t inst = {.id = id, .definition_name = req->definition,
                              .definition_version = pin->pinned,
                              .business_ref = req->business_ref, .input_json = input_text};
    st_signal_t start = {0};
    st_signal_init(&start, ST_SIGNAL_START, id, 0);
    PGresult *res = NULL;
    /* The START signal's outbox row is queued and goes out in one round trip with the
     * instance insert (and the COMMIT, for a start alone). */
    if ((err = st_signal_enqueue_tx(conn, &start, eb)) == ST_OK &&
        (err = st_instance_add_view(conn, &inst, commit, &res, eb)) == ST_OK)
        answer_view(out, res, 201);   /* as inserted: pending, state_version 0 */
    PQclear(res);
    st_signal_close(&start);
    free(input_text);
    return err;
}

void st_cmd_start(PGconn *conn, const st_principal_t *who, const char *unused_id,
                  const json_t *args, st_answer_t *out)
{
    (void)who;
    (void)unused_id;
    start_req_t req;
    if (!parse_start(out, args, &req))
        return;
    st_errbuf_t eb;
    def_pins_t pins = {.n = 0};
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = start_tx(conn, &req, 1, &pins, out, &eb);
    if (out->status == 0)
        st_answer_error(out, err, &eb);
    st_pg_rollback(conn);   /* a no-op after the commit */
}

st_group_outcome_t st_cmd_start_group(PGconn *conn, st_cmd_item_t *items, int n)
{
    def_pins_t pins = {.n = 0};
    st_errbuf_t eb;
    st_err_t err = st_pg_begin(conn, &eb);
    for (int i = 0; i < n && err == ST_OK; i++) {
        start_req_t req;
        if (parse_start(items[i].out, items[i].args, &req))
            err = start_tx(conn, &req, 0, &pins, items[i].out, &eb);
    }
    int committing = err == ST_OK;
    if (committing && (err = st_pg_commit(conn, &eb)) == ST_OK)
        return ST_GROUP_COMMITTED;
    /* A COMMIT the server answered with an error rolled back (a deferred constraint, a
     * serialization failure, an aborted transaction); one that got no answer (the
     * connection lost) may or may not have committed. */
    int unknown = committing && (err == ST_ERR_DB || PQstatus(conn) != CONNECTION_OK);
    st_pg_rollback(conn);
    for (int i = 0; i < n; i++) {
        int status = items[i].out->status;
        if (unknown && (status == 400 || status == 404))
            continue;   /* answered without the transaction */
        st_answer_close(items[i].out);
        items[i].out->status = 0;
        if (unknown)
            st_answer_error(items[i].out, err, &eb);
    }
    if (unknown) {
        /* Running the starts again could start them twice: each answers the error, as a
         * start alone would (the client retries, with its request_id). */
        st_log_warn("the COMMIT of a group of starts got no answer; each answers the error",
                    "%s", eb.msg);
        return ST_GROUP_UNKNOWN;
    }
    st_log_debug("a group of starts rolled back; each runs alone", "%s", eb.msg);
    return ST_GROUP_RUN_ALONE;
}

static int digits(const char *p, int n)
{
    for (int i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return -1;
    int v = 0;
    for (int i = 0; i < n; i++)
        v = v * 10 + (p[i] - '0');
    return v;
}

/* A time filter: an RFC 3339 / ISO 8601 date or timestamp that exists ("2026-11-23",
 * "2026-11-23T10:00:00Z", "2026-11-23T10:00:00.5+01:00"); no 2026-02-31, no 25:00. */
int st_api_valid_time(const char *text)
{
    static const int month_days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    size_t len = strlen(text);
    if (len < 10 || len > 35 || text[4] != '-' || text[7] != '-')
        return 0;
    int y = digits(text, 4), mo = digits(text + 5, 2), d = digits(text + 8, 2);
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > month_days[mo - 1])
        return 0;
    if (mo == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
        return 0;
    if (len == 10)
        return 1;
    const char *p = text + 10;
    if ((*p != 'T' && *p != 't' && *p != ' ') || strlen(p) < 6 || p[3] != ':')
        return 0;
    int h = digits(p + 1, 2), mi = digits(p + 4, 2);
    if (h < 0 || h > 23 || mi < 0 || mi > 59)
        return 0;
    p += 6;
    if (*p == ':') {
        int sec = digits(p + 1, 2);
        if (strlen(p) < 3 || sec < 0 || sec > 60)
            return 0;
        p += 3;
        if (*p == '.') {
            size_t n = strspn(p + 1, "0123456789");
            if (n < 1 || n > 6)
                return 0;
            p += 1 + n;
        }
    }
    if (*p == '\0' || ((*p == 'Z' || *p == 'z') && p[1] == '\0'))
        return 1;
    if (*p != '+' && *p != '-')
        return 0;
    size_t rest = strlen(p + 1);
    int oh = digits(p + 1, 2), om = 0;
    if (rest == 5 && p[3] == ':')
        om = digits(p + 4, 2);
    else if (rest == 4)
        om = digits(p + 3, 2);
    else if (rest != 2)
        return 0;
    return oh >= 0 && oh <= 15 && om >= 0 && om <= 59;
}

static void handle_list(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    st_answer_t answer = {0};
    int limit = st_api_page_limit(req, 50, MAX_PAGE, &answer);
    if (limit == 0) {
        st_api_reply(req, &answer);
        return;
    }
    const char *after = st_http_query(req, "created_after");
    const char *before = st_http_query(req, "created_before");
    if ((after && !st_api_valid_time(after)) || (before && !st_api_valid_time(before))) {
        st_answer_problem(&answer, 400, "invalid_time",
                          "created_after and created_before must be ISO 8601 timestamps"
                          " (2026-11-23 or 2026-11-23T10:00:00Z)",
                          after && !st_api_valid_time(after) ? "/created_after" : "/created_before", NULL);
        st_api_reply(req, &answer);
        return;
    }
    const char *version = st_http_query(req, "version");
    if (version != NULL && (version[0] == '\0' || strlen(version) > 9 ||
                            strspn(version, "0123456789") != strlen(version) || atoi(version) < 1)) {
        st_answer_problem(&answer, 400, "invalid_version", "version must be a positive integer",
                          "/version", NULL);
        st_api_reply(req, &answer);
        return;
    }
    /* cursor = "<created_at in microseconds>_<id>" of the last item of the previous page */
    const char *cursor = st_http_query(req, "cursor");
    char cursor_ts[24] = "", cursor_id[37] = "";
    if (cursor != NULL) {
        const char *sep = strchr(cursor, '_');
        if (sep == NULL || sep == cursor || sep - cursor > 18 ||
            strspn(cursor, "0123456789") != (size_t)(sep - cursor) || !st_uuid_valid(sep + 1)) {
            st_answer_problem(&answer, 400, "invalid_cursor", "cursor is not one this API issued",
                              "/cursor", NULL);
            st_api_reply(req, &answer);
            return;
        }
        memcpy(cursor_ts, cursor, (size_t)(sep - cursor));
        snprintf(cursor_id, sizeof cursor_id, "%s", sep + 1);
    }
    PGconn *conn = st_api_conn(api, &answer);
    if (conn == NULL) {
        st_api_reply(req, &answer);
        return;
    }
    char limit_param[16];
    snprintf(limit_param, sizeof limit_param, "%d", limit);
    const char *params[] = {st_http_query(req, "definition"), st_http_query(req, "status"),
                            st_http_query(req, "business_ref"),
                            cursor ? cursor_ts : NULL, cursor ? cursor_id : NULL, limit_param,
                            after, before, version};
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_instance_list, 9, params, &res, &eb);
    if (err != ST_OK) {
        st_answer_error(&answer, err, &eb);
        st_api_reply(req, &answer);
        return;
    }
    json_t *items = json_array();
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        json_t *item = json_object();
        set_text_column(item, "id", res, i, 0);
        json_object_set_new(item, "definition",
                            json_pack("{s:s, s:i}", "name", PQgetvalue(res, i, 1), "version",
                                      atoi(PQgetvalue(res, i, 2))));
        set_text_column(item, "business_ref", res, i, 3);
        set_text_column(item, "status", res, i, 4);
        json_object_set_new(item, "created_at", st_api_time_json(res, i, 5));
        json_object_set_new(item, "updated_at", st_api_time_json(res, i, 6));
        json_array_append_new(items, item);
    }
    json_t *body = json_pack("{s:o}", "items", items);
    if (n == limit) {
        char next[80];
        snprintf(next, sizeof next, "%s_%s", PQgetvalue(res, n - 1, 7), PQgetvalue(res, n - 1, 0));
        json_object_set_new(body, "next_cursor", json_string(next));
    } else {
        json_object_set_new(body, "next_cursor", json_null());
    }
    PQclear(res);
    st_http_reply_json(req, 200, body);
}

static const char *const sql_history_page =
    "SELECT id, kind, detail::text, at FROM strand.history WHERE instance_id = $1::uuid"
    " AND id > $2::bigint ORDER BY id LIMIT $3";
static const char *const sql_runtime_view =
    "SELECT rs.state_version, rs.snapshot::text, rs.waiting_kind, rs.waiting_token,"
    " rs.waiting_until, rs.last_signal_id, rs.last_error::text, rs.last_executed_by,"
    " rs.last_executed_at,"
    " (SELECT coalesce(jsonb_agg(jsonb_build_object('id', t.id, 'name', t.name, 'status', t.status,"
    "   'roles', t.roles, 'assignee', t.assignee, 'deadline_at', " ST_PG_SQL_RFC3339("t.deadline_at") ")), '[]')::text"
    "   FROM strand.tasks t WHERE t.instance_id = rs.instance_id AND t.status IN ('open', 'assigned')),"
    " (SELECT coalesce(jsonb_agg(jsonb_build_object('id', c.id, 'transport', c.transport,"
    "   'status', c.status, 'attempt', c.attempt)), '[]')::text"
    "   FROM strand.calls c WHERE c.instance_id = rs.instance_id AND c.status IN ('pending', 'sent')),"
    " (SELECT coalesce(jsonb_agg(jsonb_build_object('ack_guid', a.ack_guid, 'consumer', a.consumer,"
    "   'stage', a.stage, 'due_at', " ST_PG_SQL_RFC3339("a.due_at") ", 'raises', a.raises)), '[]')::text"
    "   FROM strand.acks a JOIN strand.work_events w USING (ack_guid)"
    "   WHERE w.instance_id = rs.instance_id AND a.due_at IS NOT NULL),"
    " (SELECT count(*) FROM strand.signal_buffer b WHERE b.instance_id = rs.instance_id),"
    " (SELECT coalesce(jsonb_agg(jsonb_build_object('kind', t.kind, 'due_at', " ST_PG_SQL_RFC3339("t.due_at") ","
    "   'token', t.waiting_token) ORDER BY t.due_at), '[]')::text"
    "   FROM strand.timers t WHERE t.instance_id = rs.instance_id AND t.fired_at IS NULL),"
    " rs.last_error_code"
    " FROM strand.runtime_states rs WHERE rs.instance_id = $1::uuid";

static json_t *json_column(PGresult *res, int row, int col)
{
    json_error_t jerr;
    json_t *value = PQgetisnull(res, row, col) ? NULL
                                               : json_loads(PQgetvalue(res, row, col),
                                                            JSON_DECODE_ANY, &jerr);
    return value ? value : json_null();
}

/* GET /v1/instances/{id}/history?after=&limit=: the timeline, oldest first. */
static void handle_history(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *id = st_http_param(req, "id");
    const char *after = st_http_query(req, "after");
    st_answer_t answer = {0};
    PGconn *conn = NULL;
    int limit = 0;
    if (!st_uuid_valid(id))
        st_answer_problem(&answer, 400, "invalid_id", "the instance id must be a UUID", "/id", NULL);
    else if ((limit = st_api_page_limit(req, 200, 1000, &answer)) == 0)
        ;   /* answered */
    else if (after && (strlen(after) > 18 || strspn(after, "0123456789") != strlen(after)))
        st_answer_problem(&answer, 400, "invalid_cursor", "after must be an entry id", "/after", NULL);
    else
        conn = st_api_conn(api, &answer);
    if (conn != NULL) {
        char limit_param[16];
        snprintf(limit_param, sizeof limit_param, "%d", limit);
        const char *params[] = {id, after ? after : "0", limit_param};
        st_errbuf_t eb;
        PGresult *res = NULL;
        st_err_t err = st_pg_exec(conn, sql_history_page, 3, params, &res, &eb);
        if (err != ST_OK) {
            st_answer_error(&answer, err, &eb);
        } else {
            json_t *items = json_array();
            int n = PQntuples(res);
            for (int i = 0; i < n; i++)
                json_array_append_new(items, json_pack("{s:I, s:s, s:o, s:o}", "id",
                                                       (json_int_t)atoll(PQgetvalue(res, i, 0)),
                                                       "kind", PQgetvalue(res, i, 1), "detail",
                                                       json_column(res, i, 2), "at",
                                                       st_api_time_json(res, i, 3)));
            json_t *body = json_pack("{s:o}", "items", items);
            json_object_set_new(body, "next_after", n == limit ? json_string(PQgetvalue(res, n - 1, 0))
                                                               : json_null());
            st_answer_set(&answer, 200, body);
        }
        PQclear(res);
    }
    st_api_reply(req, &answer);
}

/* GET /v1/instances/{id}/runtime: "why is it waiting" - the snapshot, the wait, and
 * what the instance waits on (open tasks, calls in flight, overdue-tracked ACKs,
 * buffered signals), and "stuck" when nothing can wake it (reads.c, stuck.h). */
static void handle_runtime(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *id = st_http_param(req, "id");
    st_answer_t answer = {0};
    PGconn *conn = NULL;
    if (!st_uuid_valid(id))
        st_answer_problem(&answer, 400, "invalid_id", "the instance id must be a UUID", "/id", NULL);
    else
        conn = st_api_conn(api, &answer);
    if (conn != NULL) {
        const char *params[] = {id};
        st_errbuf_t eb;
        PGresult *res = NULL;
        st_err_t err = st_pg_exec(conn, sql_runtime_view, 1, params, &res, &eb);
        if (err != ST_OK) {
            st_answer_error(&answer, err, &eb);
        } else if (PQntuples(res) == 0) {
            st_answer_problem(&answer, 404, "instance_not_found", "no such instance", NULL, NULL);
        } else {
            json_t *waiting = json_null();
            if (!PQgetisnull(res, 0, 2)) {
                waiting = json_object();
                set_text_column(waiting, "kind", res, 0, 2);
                set_text_column(waiting, "token", res, 0, 3);
                json_object_set_new(waiting, "until", st_api_time_json(res, 0, 4));
            }
            json_t *body = json_pack("{s:s, s:I, s:o, s:o}", "id", id, "state_version",
                                     (json_int_t)atoll(PQgetvalue(res, 0, 0)), "waiting", waiting,
                                     "snapshot", json_column(res, 0, 1));
            set_text_column(body, "last_signal_id", res, 0, 5);
            json_object_set_new(body, "last_error", json_column(res, 0, 6));
            set_text_column(body, "last_error_code", res, 0, 14);
            set_text_column(body, "last_executed_by", res, 0, 7);
            json_object_set_new(body, "last_executed_at", st_api_time_json(res, 0, 8));
            json_object_set_new(body, "open_tasks", json_column(res, 0, 9));
            json_object_set_new(body, "calls_in_flight", json_column(res, 0, 10));
            json_object_set_new(body, "pending_acks", json_column(res, 0, 11));
            json_object_set_new(body, "buffered_signals", json_integer(atoll(PQgetvalue(res, 0, 12))));
            /* what would wake it: signal names it waits for, and its pending timers */
            json_t *snapshot = json_object_get(body, "snapshot");
            json_object_set_new(body, "waiting_for_signals",
                                json_is_object(snapshot) ? st_snapshot_waiting_signals(snapshot) : json_array());
            json_object_set_new(body, "pending_timers", json_column(res, 0, 13));
            /* ...and whether nothing will (stuck.h): {reason, since} or null */
            json_t *stuck = st_api_stuck_json(conn, id, &err, &eb);
            json_object_set_new(body, "stuck", stuck);
            if (err != ST_OK) {
                json_decref(body);
                st_answer_error(&answer, err, &eb);
            } else {
                st_answer_set(&answer, 200, body);
            }
        }
        PQclear(res);
    }
    st_api_reply(req, &answer);
}

/* A start that waits (POST /v1/instances?wait_ms=N): the loop thread's part. */
typedef struct {
    st_api_t *api;
    int wait_ms;
    unsigned long long mark;   /* hints received before the command ran */
} start_wait_t;

/* Answers a finished start once its first wake-up ran (state_version > 0) or it ended,
 * or at wait_ms, with the start's own status (201; 200 for a retry). Errors, and a
 * retried start that already moved, are answered at once. The view is only loaded
 * here when a hint for the instance may have come while the start ran (its wake-up
 * may be done); otherwise the request is parked and the hint loads it. */
static void start_then_wait(st_http_req_t *req, st_answer_t *answer, void *ctx)
{
    start_wait_t *sw = ctx;
    st_api_t *api = sw->api;
    int status = answer->status;
    const char *id = json_string_value(json_object_get(answer->body, "id"));
    char instance_id[40] = "";
    if ((status == 200 || status == 201) && id != NULL && !view_moved(answer, 0))
        snprintf(instance_id, sizeof instance_id, "%s", id);
    st_answer_t view = {0};
    if (instance_id[0] == '\0') {
        st_api_reply(req, answer);
    } else if (st_waiters_hinted_since(api->waiters, instance_id, sw->mark) &&
               st_api_instance_view(api, instance_id, 0, &view)) {
        if (view.status == 200)
            view.status = status;
        st_api_reply(req, &view);
    } else {
        st_answer_close(&view);
        st_waiters_park(api->waiters, req, instance_id, 0, sw->wait_ms, status);
    }
    free(sw);
}

/* POST /v1/instances[?wait_ms=N]: the start command, on the command pool; with wait_ms,
 * the answer waits for the instance's first wake-up (as GET's long poll does). */
static void handle_start(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    st_answer_t answer = {0};
    int wait_ms;
    if (!wait_param(req, &wait_ms, &answer)) {
        st_api_reply(req, &answer);
        return;
    }
    json_t *args = st_http_body_object(req);
    if (args == NULL)
        return;
    st_command_then_t then = {start_then_wait, NULL};
    if (wait_ms > 0) {
        start_wait_t *sw = malloc(sizeof *sw);
        if (sw == NULL)
            abort();
        *sw = (start_wait_t){api, wait_ms, st_waiters_mark(api->waiters)};
        then.ctx = sw;
    }
    st_command_pool_submit(api->pool, req, st_cmd_start, NULL, &api->current, NULL, NULL, args,
                           wait_ms > 0 ? &then : NULL);
}

void st_api_instances_register(st_api_t *api)
{
    st_http_route(api->svc->http, "GET", "/v1/instances/{id}/history", handle_history, api);
    st_http_route(api->svc->http, "GET", "/v1/instances/{id}/runtime", handle_runtime, api);
    st_http_route(api->svc->http, "POST", "/v1/instances", handle_start, api);
    st_http_route(api->svc->http, "GET", "/v1/instances", handle_list, api);
    st_http_route(api->svc->http, "GET", "/v1/instances/{id}", handle_get, api);
}
