/*
 * batches.c - durable bulk operations (issue 18, item 2): POST /v1/batches, GET
 * /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel.
 *
 * Creating a job validates its filter and action and, in one transaction, inserts the
 * job and freezes the ids of every instance the filter selects as its items (libs/common
 * batch.c owns both tables), plus an audit row. strand-scheduler's batch loop works the
 * items in chunks (services/scheduler/batch_runner.c); nothing here applies an action.
 *
 * Bounds (docs/security.md, "Amplification"): a signal batch's args.payload times its
 * items stays under STRAND_BATCH_MAX_PAYLOAD_BYTES (413), and at most
 * STRAND_BATCH_MAX_RUNNING jobs run at once, STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL of
 * one creator (429, counted in PostgreSQL under a lock, so across API replicas).
 *
 * Access (permissions.c): creating and cancelling need instances:operate; a terminate
 * batch also instances:terminate, a signal batch instances:signal. A caller whose
 * grants are limited to definitions must name one of them in the filter's
 * `definition`. Reading needs instances:read for every definition.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "strand/audit.h"
#include "strand/batch.h"
#include "strand/engine.h"
#include "strand/pg.h"
#include "strand/util.h"

#define MAX_PAGE 500
#define MAX_FAILURES_SHOWN 100
#define DEFAULT_MAX_ITEMS 100000

static const char *const actions[] = {"cancel", "terminate", "signal", "retry", "pause", "resume"};
static const char *const statuses[] = {"pending",   "running", "waiting",   "paused",
                                       "completed", "failed",  "cancelled", "terminated"};

static const char *const sql_job_get =
    "SELECT id, status, action, filter::text, args::text, total, done, failed, created_by,"
    " created_at, updated_at, ended_at, (extract(epoch FROM created_at) * 1000000)::bigint"
    " FROM strand.batch_jobs WHERE id = $1::uuid";
static const char *const sql_job_failures =
    "SELECT instance_id, error::text FROM strand.batch_items"
    " WHERE job_id = $1::uuid AND state = 'failed' ORDER BY seq LIMIT 100";   /* MAX_FAILURES_SHOWN */
static const char *const sql_job_list =
    "SELECT id, status, action, filter::text, args::text, total, done, failed, created_by,"
    " created_at, updated_at, ended_at, (extract(epoch FROM created_at) * 1000000)::bigint"
    " FROM strand.batch_jobs WHERE ($1::text IS NULL OR status = $1)"
    " AND ($2::bigint IS NULL OR (created_at, id) < (to_timestamp($2::bigint / 1000000.0), $3::uuid))"
    " ORDER BY created_at DESC, id DESC LIMIT $4";

/* The amplification bounds (st_api_batches_configure(); docs/security.md). */
static long long max_payload_bytes = 64 << 20;   /* STRAND_BATCH_MAX_PAYLOAD_BYTES */
static long long max_running = 16;               /* STRAND_BATCH_MAX_RUNNING */
static long long max_running_mine = 4;           /* STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL */
/* What a 429 asks a client to wait: a running job ends when its items are worked,
 * which no one can foretell; long enough not to spin, short enough to notice. */
#define RUNNING_RETRY_AFTER_S 10

void st_api_batches_configure(const st_config_t *cfg)
{
    max_payload_bytes = cfg->batch_max_payload_bytes;
    max_running = cfg->batch_max_running;
    max_running_mine = cfg->batch_max_running_per_principal;
}

/* The most items one job may select (STRAND_BATCH_MAX_ITEMS, default 100,000). */
static long long max_items(void)
{
    const char *text = getenv("STRAND_BATCH_MAX_ITEMS");
    long long n = text != NULL ? atoll(text) : 0;
    return n > 0 ? n : DEFAULT_MAX_ITEMS;
}

static int one_of(const char *value, const char *const *list, size_t n)
{
    for (size_t i = 0; value != NULL && i < n; i++)
        if (strcmp(value, list[i]) == 0)
            return 1;
    return 0;
}

static json_t *json_text_column(PGresult *res, int row, int col)
{
    json_error_t jerr;
    json_t *value = PQgetisnull(res, row, col)
                        ? NULL
                        : json_loads(PQgetvalue(res, row, col), JSON_DECODE_ANY, &jerr);
    return value ? value : json_null();
}

/* A job row (the columns of sql_job_get) as the API shows it. */
static json_t *job_json(PGresult *res, int row)
{
    json_t *job = json_pack("{s:s, s:s, s:s, s:o, s:o, s:I, s:I, s:I, s:s}", "id",
                            PQgetvalue(res, row, 0), "status", PQgetvalue(res, row, 1), "action",
                            PQgetvalue(res, row, 2), "filter", json_text_column(res, row, 3),
                            "args", json_text_column(res, row, 4), "total",
                            (json_int_t)atoll(PQgetvalue(res, row, 5)), "done",
                            (json_int_t)atoll(PQgetvalue(res, row, 6)), "failed",
                            (json_int_t)atoll(PQgetvalue(res, row, 7)), "created_by",
                            PQgetvalue(res, row, 8));
    json_object_set_new(job, "created_at", st_api_time_json(res, row, 9));
    json_object_set_new(job, "updated_at", st_api_time_json(res, row, 10));
    json_object_set_new(job, "ended_at", st_api_time_json(res, row, 11));
    return job;
}

/* Answers `status` with job `id` and its first failures, or 404. */
static void answer_job(PGconn *conn, const char *id, int status, st_answer_t *out)
{
    const char *params[] = {id};
    st_errbuf_t eb;
    PGresult *res = NULL, *failures = NULL;
    st_err_t err = st_pg_exec(conn, sql_job_get, 1, params, &res, &eb);
    if (err == ST_OK && PQntuples(res) == 1)
        err = st_pg_exec(conn, sql_job_failures, 1, params, &failures, &eb);
    if (err != ST_OK) {
        st_answer_error(out, err, &eb);
    } else if (PQntuples(res) == 0) {
        st_answer_problem(out, 404, "batch_not_found", "no such batch", NULL, NULL);
    } else {
        json_t *job = job_json(res, 0);
        json_t *list = json_array();
        for (int i = 0; i < PQntuples(failures); i++)
            json_array_append_new(list, json_pack("{s:s, s:o}", "instance_id",
                                                  PQgetvalue(failures, i, 0), "error",
                                                  json_text_column(failures, i, 1)));
        json_object_set_new(job, "failures", list);
        st_answer_set(out, status, job);
    }
    PQclear(res);
    PQclear(failures);
}

/* ---- creating a job ---------------------------------------------------------------- */

/* A string member of at most `max` characters (at least 1); NULL when absent or null.
 * Sets *bad when present but not such a string. */
static const char *string_member(const json_t *obj, const char *key, size_t max, int *bad)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v))
        return NULL;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max) {
        *bad = 1;
        return NULL;
    }
    return json_string_value(v);
}

/* Validates the filter into `f` (`version` is written into `version`); answers 400 and
 * returns 0 on bad input. */
static int parse_filter(const json_t *filter, st_batch_filter_t *f, char *version,
                        size_t version_len, st_answer_t *out)
{
    static const char *const keys[] = {"definition",   "version",       "status",
                                       "business_ref", "created_after", "created_before",
                                       "waiting_kind"};
    const char *field = NULL, *message = NULL;
    const char *key;
    json_t *value;
    memset(f, 0, sizeof *f);
    if (!json_is_object(filter)) {
        st_answer_problem(out, 400, "invalid_field", "filter must be a JSON object", "/filter", NULL);
        return 0;
    }
    json_object_foreach((json_t *)filter, key, value) {
        if (!one_of(key, keys, sizeof keys / sizeof keys[0])) {
            st_answer_problem(out, 400, "invalid_field",
                              "filter takes definition, version, status, business_ref,"
                              " created_after, created_before and waiting_kind only",
                              "/filter", json_pack("{s:s}", "unknown", key));
            return 0;
        }
    }
    /* bad[k]: member k is present but not a string of the allowed length */
    int bad[6] = {0};
    json_t *ver = json_object_get(filter, "version");
    f->definition = string_member(filter, "definition", 128, &bad[0]);
    f->status = string_member(filter, "status", 24, &bad[1]);
    f->business_ref = string_member(filter, "business_ref", 256, &bad[2]);
    f->created_after = string_member(filter, "created_after", 40, &bad[3]);
    f->created_before = string_member(filter, "created_before", 40, &bad[4]);
    f->waiting_kind = string_member(filter, "waiting_kind", 64, &bad[5]);
    if (bad[0])
        field = "/filter/definition", message = "definition must be a string of 1 to 128 characters";
    else if (ver != NULL && !json_is_null(ver) &&
             (!json_is_integer(ver) || json_integer_value(ver) <= 0 ||
              json_integer_value(ver) > INT32_MAX))
        field = "/filter/version", message = "version must be a positive integer of at most 2147483647";
    else if (json_is_integer(ver) && f->definition == NULL)
        field = "/filter/version", message = "version needs definition";
    else if (bad[1] || (f->status != NULL && !one_of(f->status, statuses, sizeof statuses / sizeof statuses[0])))
        field = "/filter/status",
        message = "status must be one of pending, running, waiting, paused, completed, failed,"
                  " cancelled, terminated";
    else if (bad[2])
        field = "/filter/business_ref", message = "business_ref must be a string of 1 to 256 characters";
    else if (bad[3] || (f->created_after != NULL && !st_api_valid_time(f->created_after)))
        field = "/filter/created_after",
        message = "created_after must be an ISO 8601 timestamp (2026-11-23 or 2026-11-23T10:00:00Z)";
    else if (bad[4] || (f->created_before != NULL && !st_api_valid_time(f->created_before)))
        field = "/filter/created_before",
        message = "created_before must be an ISO 8601 timestamp (2026-11-23 or 2026-11-23T10:00:00Z)";
    else if (bad[5])
        field = "/filter/waiting_kind", message = "waiting_kind must be a string of 1 to 64 characters";
    else if (f->definition == NULL && f->status == NULL && f->business_ref == NULL &&
             f->created_after == NULL && f->created_before == NULL && f->waiting_kind == NULL)
        field = "/filter",
        message = "filter must name at least one of definition, status, business_ref,"
                  " created_after, created_before, waiting_kind";
    if (field != NULL) {
        st_answer_problem(out, 400, "invalid_filter", message, field, NULL);
        return 0;
    }
    version[0] = '\0';
    if (json_is_integer(ver)) {
        snprintf(version, version_len, "%lld", (long long)json_integer_value(ver));
        f->version = version;
    }
    return 1;
}

/* Validates the action's args ({reason} for all; {name, payload} for signal). */
static int parse_args(const char *action, const json_t *args, st_answer_t *out)
{
    if (args == NULL || json_is_null(args))
        args = NULL;
    else if (!json_is_object(args)) {
        st_answer_problem(out, 400, "invalid_field", "args must be a JSON object", "/args", NULL);
        return 0;
    }
    int is_signal = strcmp(action, "signal") == 0;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)args, key, value) {
        if (strcmp(key, "reason") != 0 &&
            !(is_signal && (strcmp(key, "name") == 0 || strcmp(key, "payload") == 0))) {
            st_answer_problem(out, 400, "invalid_field",
                              is_signal ? "args of a signal batch take name, payload and reason only"
                                        : "args take reason only (name and payload are for signal)",
                              "/args", json_pack("{s:s}", "unknown", key));
            return 0;
        }
    }
    int bad = 0;
    string_member(args, "reason", 1000, &bad);
    if (bad) {
        st_answer_problem(out, 400, "invalid_field", "reason must be a string of 1 to 1000 characters",
                          "/args/reason", NULL);
        return 0;
    }
    if (!is_signal)
        return 1;
    const char *name = string_member(args, "name", 120, &bad);
    if (name == NULL) {
        st_answer_problem(out, 400, "invalid_field",
                          "a signal batch needs args.name, a string of 1 to 120 characters",
                          "/args/name", NULL);
        return 0;
    }
    json_t *payload = json_object_get(args, "payload");
    st_errbuf_t eb;
    if (payload != NULL && !json_is_null(payload) && !json_is_object(payload)) {
        st_answer_problem(out, 400, "invalid_field", "payload must be a JSON object",
                          "/args/payload", NULL);
        return 0;
    }
    if (json_is_object(payload) && st_engine_data_check(payload, &eb) != ST_OK) {
        st_answer_problem(out, 400, "limit_exceeded", eb.msg, "/args/payload", NULL);
        return 0;
    }
    return 1;
}

/* 1 if `who` may use `perm` on this batch: everywhere, or (a limited grant) on the
 * filter's definition; else a 403 naming the permission. */
static int may(const st_principal_t *who, st_perm_t perm, const char *definition, st_answer_t *out)
{
    st_holds_t holds = st_principal_holds(who, perm);
    if (holds == ST_HOLDS_ALL ||
        (holds == ST_HOLDS_SOME && definition != NULL && st_principal_may(who, perm, definition, NULL)))
        return 1;
    char message[200];
    snprintf(message, sizeof message,
             holds == ST_HOLDS_SOME ? "this batch needs the permission %s for the filter's definition"
                                    : "this batch needs the permission %s",
             st_perm_name(perm));
    st_answer_problem(out, 403, "forbidden", message, NULL,
                      json_pack("{s:s}", "required_permission", st_perm_name(perm)));
    return 0;
}

/* 413 batch_payload_too_large: args.payload (`payload_bytes` as JSON) times the items
 * would pass STRAND_BATCH_MAX_PAYLOAD_BYTES; `items` is the most the filter could
 * have selected at this payload (-1: none, the payload alone is too large). */
static void payload_too_large(long long payload_bytes, long long items, st_answer_t *out)
{
    char message[320];
    if (items < 0)
        snprintf(message, sizeof message,
                 "args.payload has %lld bytes, more than the %lld bytes a batch may carry in all"
                 " (STRAND_BATCH_MAX_PAYLOAD_BYTES)", payload_bytes, max_payload_bytes);
    else
        snprintf(message, sizeof message,
                 "args.payload (%lld bytes) times the instances the filter selects would pass"
                 " the %lld bytes a batch may carry in all (STRAND_BATCH_MAX_PAYLOAD_BYTES): at"
                 " this payload at most %lld instances; narrow the filter or shrink the payload",
                 payload_bytes, max_payload_bytes, items);
    st_answer_problem(out, 413, "batch_payload_too_large", message, "/args/payload",
                      json_pack("{s:I, s:I, s:I}", "payload_bytes", (json_int_t)payload_bytes,
                                "max_payload_bytes", (json_int_t)max_payload_bytes,
                                "max_items_at_this_payload", (json_int_t)(items < 0 ? 0 : items)));
}

/* 429 too_many_batches: STRAND_BATCH_MAX_RUNNING jobs run already, or the caller's
 * STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL. `retry_after_s` becomes the Retry-After
 * header (command_pool.c). */
static void too_many_running(long long running, long long mine, st_answer_t *out)
{
    char message[256];
    if (mine >= max_running_mine)
        snprintf(message, sizeof message,
                 "you have %lld batches running, the most one principal may have at once"
                 " (STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL = %lld); retry when one has ended",
                 mine, max_running_mine);
    else
        snprintf(message, sizeof message,
                 "%lld batches are running, the most there may be at once"
                 " (STRAND_BATCH_MAX_RUNNING = %lld); retry when one has ended",
                 running, max_running);
    st_answer_problem(out, 429, "too_many_batches", message, NULL,
                      json_pack("{s:I, s:I, s:I, s:I, s:i}", "running", (json_int_t)running,
                                "running_yours", (json_int_t)mine, "max_running",
                                (json_int_t)max_running, "max_running_per_principal",
                                (json_int_t)max_running_mine, "retry_after_s",
                                RUNNING_RETRY_AFTER_S));
}

void st_cmd_batch_create(PGconn *conn, const st_principal_t *who, const char *unused_id,
                         const json_t *body, st_answer_t *out)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)body, key, value) {
        if (strcmp(key, "filter") != 0 && strcmp(key, "action") != 0 && strcmp(key, "args") != 0) {
            st_answer_problem(out, 400, "invalid_field", "a batch takes filter, action and args only",
                              NULL, json_pack("{s:s}", "unknown", key));
            return;
        }
    }
    const char *action = json_string_value(json_object_get(body, "action"));
    if (!one_of(action, actions, sizeof actions / sizeof actions[0])) {
        st_answer_problem(out, 400, "invalid_field",
                          "action must be one of cancel, terminate, signal, retry, pause, resume",
                          "/action", NULL);
        return;
    }
    st_batch_filter_t filter;
    char version[24];
    const json_t *filter_doc = json_object_get(body, "filter");
    const json_t *args = json_object_get(body, "args");
    if (!parse_filter(filter_doc, &filter, version, sizeof version, out) ||
        !parse_args(action, args, out))
        return;
    st_perm_t perm = strcmp(action, "terminate") == 0 ? ST_PERM_INSTANCES_TERMINATE
                     : strcmp(action, "signal") == 0  ? ST_PERM_INSTANCES_SIGNAL
                                                      : ST_PERM_INSTANCES_OPERATE;
    if (!may(who, ST_PERM_INSTANCES_OPERATE, filter.definition, out) ||
        !may(who, perm, filter.definition, out))
        return;
    if (!json_is_object(args))
        args = NULL;
    /* A signal batch writes its payload once per item (a signal, and a buffered copy
     * where the instance does not wait for it): payload bytes x items is bounded, so a
     * bigger payload means fewer items. */
    long long payload_bytes = 0;
    const json_t *payload = json_object_get(args, "payload");
    if (json_is_object(payload)) {
        char *text = json_dumps(payload, JSON_COMPACT);
        payload_bytes = text ? (long long)strlen(text) : 0;
        free(text);
    }
    long long items_max = max_items(), limit = items_max;
    if (payload_bytes > 0 && max_payload_bytes / payload_bytes < limit)
        limit = max_payload_bytes / payload_bytes;
    if (limit < 1) {
        payload_too_large(payload_bytes, -1, out);
        return;
    }
    char id[37];
    st_uuid_new(id);
    long long total = 0, running = 0, running_mine = 0;
    st_errbuf_t eb;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_batch_count_running_tx(conn, who->name, &running, &running_mine, &eb);
    if (err == ST_OK && (running >= max_running || running_mine >= max_running_mine)) {
        st_pg_rollback(conn);
        too_many_running(running, running_mine, out);
        return;
    }
    if (err == ST_OK)
        err = st_batch_create_tx(conn, id, action, filter_doc, &filter, args, who->name, limit,
                                 &total, &eb);
    if (err == ST_OK) {
        char target[64];
        snprintf(target, sizeof target, "batch:%s", id);
        json_t *detail = json_pack("{s:s, s:O, s:o, s:I}", "action", action, "filter", filter_doc,
                                   "args", args ? json_incref((json_t *)args) : json_object(),
                                   "total", (json_int_t)total);
        st_audit_entry_t entry = {who->name, "batch_create", "applied", NULL, target, NULL, NULL,
                                  detail};
        err = st_audit_add_tx(conn, &entry, &eb);
        json_decref(detail);
    }
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        if (err == ST_ERR_LIMIT && limit < items_max)
            payload_too_large(payload_bytes, limit, out);
        else if (err == ST_ERR_LIMIT)
            st_answer_problem(out, 400, "too_many_instances", eb.msg, "/filter",
                              json_pack("{s:I}", "max_items", (json_int_t)limit));
        else if (err == ST_ERR_INVALID)   /* e.g. a time PostgreSQL cannot represent */
            st_answer_problem(out, 400, "invalid_filter", eb.msg, "/filter", NULL);
        else
            st_answer_error(out, err, &eb);
        return;
    }
    st_answer_set(out, 201, json_pack("{s:s, s:s, s:s, s:I}", "id", id, "status",
                                      total > 0 ? "running" : "completed", "action", action,
                                      "total", (json_int_t)total));
}

void st_cmd_batch_cancel(PGconn *conn, const st_principal_t *who, const char *id,
                         const json_t *body, st_answer_t *out)
{
    if (!st_uuid_valid(id)) {
        st_answer_problem(out, 400, "invalid_id", "the batch id must be a UUID", "/id", NULL);
        return;
    }
    char status[24] = "";
    int changed = 0;
    st_errbuf_t eb;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_batch_cancel_tx(conn, id, status, sizeof status, &changed, &eb);
    if (err == ST_OK && changed) {
        char target[64];
        snprintf(target, sizeof target, "batch:%s", id);
        st_audit_entry_t entry = {who->name, "batch_cancel", "applied", NULL, target, NULL, NULL, NULL};
        err = st_audit_add_tx(conn, &entry, &eb);
    }
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_answer_error(out, err, &eb);
    } else if (status[0] == '\0') {
        st_answer_problem(out, 404, "batch_not_found", "no such batch", NULL, NULL);
    } else if (!changed) {
        st_answer_problem(out, 409, "batch_ended", "the batch has already ended", NULL,
                          json_pack("{s:s}", "batch_status", status));
    } else {
        answer_job(conn, id, 200, out);
    }
}

/* ---- reading ---------------------------------------------------------------------- */

/* GET /v1/batches/{id}: progress and the first failures. */
static void handle_get(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *id = st_http_param(req, "id");
    st_answer_t answer = {0};
    PGconn *conn = NULL;
    if (!st_uuid_valid(id))
        st_answer_problem(&answer, 400, "invalid_id", "the batch id must be a UUID", "/id", NULL);
    else if ((conn = st_api_conn(api, &answer)) != NULL)
        answer_job(conn, id, 200, &answer);
    st_api_reply(req, &answer);
}

/* GET /v1/batches?status=&limit=&cursor=: newest first. */
static void handle_list(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    st_answer_t answer = {0};
    const char *status = st_http_query(req, "status");
    const char *cursor = st_http_query(req, "cursor");
    char cursor_ts[24] = "", cursor_id[37] = "";
    int limit = st_api_page_limit(req, 50, MAX_PAGE, &answer);
    if (limit == 0) {
        st_api_reply(req, &answer);
        return;
    }
    if (status != NULL && strcmp(status, "running") != 0 && strcmp(status, "completed") != 0 &&
        strcmp(status, "failed") != 0 && strcmp(status, "cancelled") != 0) {
        st_http_reply_problem(req, 400, "invalid_status",
                              "status must be running, completed, failed or cancelled", "/status", NULL);
        return;
    }
    /* cursor = "<created_at in microseconds>_<id>" of the last item of the previous page */
    if (cursor != NULL) {
        const char *sep = strchr(cursor, '_');
        if (sep == NULL || sep == cursor || sep - cursor > 18 ||
            strspn(cursor, "0123456789") != (size_t)(sep - cursor) || !st_uuid_valid(sep + 1)) {
            st_http_reply_problem(req, 400, "invalid_cursor", "cursor is not one this API issued",
                                  "/cursor", NULL);
            return;
        }
        memcpy(cursor_ts, cursor, (size_t)(sep - cursor));
        snprintf(cursor_id, sizeof cursor_id, "%s", sep + 1);
    }
    PGconn *conn = st_api_conn_or_reply(api, req);
    if (conn == NULL)
        return;
    char limit_param[16];
    snprintf(limit_param, sizeof limit_param, "%d", limit);
    const char *params[] = {status, cursor ? cursor_ts : NULL, cursor ? cursor_id : NULL,
                            limit_param};
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_job_list, 4, params, &res, &eb);
    if (err != ST_OK) {
        st_api_reply_error(req, err, &eb);
        return;
    }
    json_t *items = json_array();
    int n = PQntuples(res);
    for (int i = 0; i < n; i++)
        json_array_append_new(items, job_json(res, i));
    json_t *body = json_pack("{s:o}", "items", items);
    if (n == limit) {
        char next[80];
        snprintf(next, sizeof next, "%s_%s", PQgetvalue(res, n - 1, 12), PQgetvalue(res, n - 1, 0));
        json_object_set_new(body, "next_cursor", json_string(next));
    } else {
        json_object_set_new(body, "next_cursor", json_null());
    }
    PQclear(res);
    st_http_reply_json(req, 200, body);
}

void st_api_batches_register(st_api_t *api)
{
    st_http_route(api->svc->http, "GET", "/v1/batches", handle_list, api);
    st_http_route(api->svc->http, "GET", "/v1/batches/{id}", handle_get, api);
    st_api_route_command(api, "/v1/batches", st_cmd_batch_create);
    st_api_route_command(api, "/v1/batches/{id}/cancel", st_cmd_batch_cancel);
}
