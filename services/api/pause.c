/*
 * pause.c - the operator verbs pause, resume and rewind (issue 18; docs/api.md "Pause,
 * resume and rewind"): on one instance, and pause/resume of a whole definition version.
 *
 * An instance verb is checked here under the runtime state's row lock (404, 409
 * version_mismatch, 409 not_applicable, 400 on bad input) and becomes a control signal
 * (PAUSE, RESUME, REWIND) carrying the expected_version and the principal's name, with an
 * audit row "requested", in one transaction; the executor re-checks and applies it
 * (services/executor/pause.h), so a verb racing a wake-up applies at most once. The same
 * commands serve the Kafka ingress (COMMAND_TYPE_PAUSE/RESUME/REWIND).
 *
 * A definition version's pause is a row (strand/definition_pause.h) the executor reads
 * on every wake-up; its resume deletes the row and, in the same transaction, sends a
 * RESUME {"scope": "definition"} to every instance of the version that kept signals
 * meanwhile, so a crash either leaves the version paused or drains every instance.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "command_pool.h"
#include "strand/audit.h"
#include "strand/definition_pause.h"
#include "strand/instance_store.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/util.h"

#define MAX_REASON_LEN 1000

/* The instance and its runtime state, the latter locked for the transaction. */
static const char *const sql_instance_lock =
    "SELECT i.status, rs.state_version, rs.snapshot IS NULL FROM strand.instances i"
    " JOIN strand.runtime_states rs ON rs.instance_id = i.id"
    " WHERE i.id = $1::uuid FOR UPDATE OF rs";
/* The status of the snapshot kept at a version (strand/snapshot_log.h), if kept. */
static const char *const sql_kept_status =
    "SELECT coalesce(snapshot->>'status', '') FROM strand.snapshot_log"
    " WHERE instance_id = $1::uuid AND state_version = $2::bigint";
static const char *const sql_definition_exists =
    "SELECT 1 FROM strand.definitions WHERE name = $1 AND version = $2::int";
/* Instances of a version that kept signals while it was paused (signal_buffer rows
 * with an envelope) and are not paused themselves. */
static const char *const sql_held_instances =
    "SELECT DISTINCT b.instance_id FROM strand.signal_buffer b"
    " JOIN strand.instances i ON i.id = b.instance_id"
    " WHERE b.envelope IS NOT NULL AND i.definition_name = $1 AND i.definition_version = $2::int"
    " AND i.status <> 'paused'";

static const char *verb_name(st_signal_type_t type)
{
    return type == ST_SIGNAL_PAUSE ? "pause" : type == ST_SIGNAL_RESUME ? "resume" : "rewind";
}

/* Reads an integer member >= `min`; answers 400 and returns 0 when it is missing (if
 * `required`) or not such an integer. */
static int read_int(const json_t *args, const char *key, long long min, int required,
                    long long *out, st_answer_t *a)
{
    const json_t *v = json_object_get(args, key);
    char field[64], msg[160];
    snprintf(field, sizeof field, "/%s", key);
    if (v == NULL && !required) {
        *out = -1;
        return 1;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min) {
        snprintf(msg, sizeof msg, "%s must be an integer of at least %lld%s", key, min,
                 required ? " (required)" : "");
        st_answer_problem(a, 400, "invalid_field", msg, field, NULL);
        return 0;
    }
    *out = (long long)json_integer_value(v);
    return 1;
}

/* The optional `reason`: a string of at most MAX_REASON_LEN bytes. */
static int read_reason(const json_t *args, const char **reason, st_answer_t *out)
{
    const json_t *r = json_object_get(args, "reason");
    *reason = NULL;
    if (r == NULL || json_is_null(r))
        return 1;
    if (!json_is_string(r) || json_string_length(r) > MAX_REASON_LEN) {
        st_answer_problem(out, 400, "invalid_field", "reason must be a string of at most 1000 bytes",
                          "/reason", NULL);
        return 0;
    }
    *reason = json_string_value(r);
    return 1;
}

/* Why `type` does not apply to an instance in `status` (NULL: it applies). */
static const char *not_applicable(st_signal_type_t type, const char *status, int not_started)
{
    if (type == ST_SIGNAL_PAUSE)
        return strcmp(status, "paused") == 0 ? "the instance is paused already"
               : st_instance_status_ended(status) ? "the instance has ended"
                                             : NULL;
    if (type == ST_SIGNAL_RESUME)
        return strcmp(status, "paused") != 0 ? "the instance is not paused" : NULL;
    return not_started ? "the instance has not started: there is nothing to rewind" : NULL;
}

/* The three instance verbs: validation, the check under lock, the signal and the audit
 * row. Answers 202 {instance_id, signal_id, status: "accepted"}. */
static void instance_verb(PGconn *conn, const st_principal_t *who, const char *id,
                          const json_t *args, st_signal_type_t type, st_answer_t *out)
{
    long long expected = -1, to = -1;
    const char *reason = NULL;
    if (id == NULL || !st_uuid_valid(id)) {
        st_answer_problem(out, 400, "invalid_id", "the instance id must be a UUID", "/id", NULL);
        return;
    }
    if (!read_int(args, "expected_version", 0, 1, &expected, out) || !read_reason(args, &reason, out))
        return;
    if (type == ST_SIGNAL_REWIND) {
        if (!read_int(args, "to_version", 1, 1, &to, out))
            return;
        if (to >= expected) {
            st_answer_problem(out, 400, "invalid_field",
                              "to_version must be below expected_version (a version the instance had)",
                              "/to_version", NULL);
            return;
        }
    }
    st_errbuf_t eb;
    PGresult *res = NULL;
    const char *params[] = {id};
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_instance_lock, 1, params, &res, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_answer_error(out, err, &eb);
        return;
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        st_pg_rollback(conn);
        st_answer_problem(out, 404, "instance_not_found", "no such instance", NULL, NULL);
        return;
    }
    char status[32];
    snprintf(status, sizeof status, "%s", PQgetvalue(res, 0, 0));
    long long current = atoll(PQgetvalue(res, 0, 1));
    int not_started = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    PQclear(res);
    res = NULL;
    const char *why = NULL;
    char msg[200];
    if (current != expected) {
        st_pg_rollback(conn);
        snprintf(msg, sizeof msg, "the instance's state_version is %lld, not %lld", current, expected);
        st_answer_problem(out, 409, "version_mismatch", msg, "/expected_version",
                          json_pack("{s:I, s:s}", "state_version", (json_int_t)current, "status", status));
        return;
    }
    if ((why = not_applicable(type, status, not_started)) == NULL && type == ST_SIGNAL_REWIND) {
        char to_text[24];
        snprintf(to_text, sizeof to_text, "%lld", to);
        const char *kept_params[] = {id, to_text};
        if ((err = st_pg_exec(conn, sql_kept_status, 2, kept_params, &res, &eb)) != ST_OK) {
            st_pg_rollback(conn);
            st_answer_error(out, err, &eb);
            return;
        }
        if (PQntuples(res) == 0)
            why = "no snapshot is kept for this to_version (only the latest 64 versions at which "
                  "the instance waited are)";
        else if (strcmp(PQgetvalue(res, 0, 0), "completed") == 0 ||
                 strcmp(PQgetvalue(res, 0, 0), "failed") == 0)
            why = "the instance had ended at this to_version: rewind to a version before its end";
        PQclear(res);
    }
    if (why != NULL) {
        st_pg_rollback(conn);
        st_answer_problem(out, 409, "not_applicable", why, NULL,
                          json_pack("{s:s, s:I}", "status", status, "state_version", (json_int_t)current));
        return;
    }
    st_signal_t sig;
    st_signal_init(&sig, type, id, expected);
    sig.payload = json_pack("{s:s}", "actor", who && who->name[0] ? who->name : "system");
    if (reason != NULL)
        json_object_set_new(sig.payload, "reason", json_string(reason));
    if (to >= 0)
        json_object_set_new(sig.payload, "to_version", json_integer(to));
    err = st_api_enqueue_verb_tx(conn, &sig, verb_name(type), status, current, &eb);
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_answer_error(out, err, &eb);
    } else {
        st_answer_set(out, 202, json_pack("{s:s, s:s, s:s}", "instance_id", id, "signal_id",
                                          sig.signal_id, "status", "accepted"));
    }
    st_signal_close(&sig);
}

void st_cmd_pause(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                  st_answer_t *out)
{
    instance_verb(conn, who, id, args, ST_SIGNAL_PAUSE, out);
}

void st_cmd_resume(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out)
{
    instance_verb(conn, who, id, args, ST_SIGNAL_RESUME, out);
}

void st_cmd_rewind(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out)
{
    instance_verb(conn, who, id, args, ST_SIGNAL_REWIND, out);
}

/* ---- a definition version ---------------------------------------------------------- */

/* Pause (`pause` = 1) or resume of `name` v`version_text`. */
static void definition_verb(PGconn *conn, const st_principal_t *who, const char *name,
                            const char *version_text, const json_t *args, int pause,
                            st_answer_t *out)
{
    const char *reason = NULL;
    char *end = NULL;
    long version = version_text ? strtol(version_text, &end, 10) : 0;
    if (version_text == NULL || end == version_text || *end != '\0' || version < 1 || version > 1000000000) {
        st_answer_problem(out, 400, "invalid_version", "the version must be a positive integer",
                          "/version", NULL);
        return;
    }
    if (name == NULL || name[0] == '\0' || strlen(name) > 128) {
        st_answer_problem(out, 400, "invalid_name", "the definition name is missing or too long", "/name",
                          NULL);
        return;
    }
    if (!read_reason(args, &reason, out))
        return;
    const char *actor = who && who->name[0] ? who->name : "system";
    char canonical_version[16];
    snprintf(canonical_version, sizeof canonical_version, "%ld", version);
    const char *params[] = {name, canonical_version};
    st_errbuf_t eb;
    PGresult *res = NULL;
    int changed = 0, drained = 0;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_definition_exists, 2, params, &res, &eb);
    if (err == ST_OK && PQntuples(res) == 0) {
        PQclear(res);
        st_pg_rollback(conn);
        st_answer_problem(out, 404, "definition_not_found", "no such definition version", NULL, NULL);
        return;
    }
    PQclear(res);
    res = NULL;
    if (err == ST_OK && pause)
        err = st_definition_pause_add_tx(conn, name, (int)version, actor, reason, &changed, &eb);
    if (err == ST_OK && !pause)
        err = st_definition_pause_remove_tx(conn, name, (int)version, &changed, &eb);
    /* The row is gone under its lock: every wake-up that kept a signal because of it
     * has committed, and this statement sees its row. */
    if (err == ST_OK && !pause && changed)
        err = st_pg_exec(conn, sql_held_instances, 2, params, &res, &eb);
    for (int i = 0; err == ST_OK && res != NULL && i < PQntuples(res); i++) {
        st_signal_t sig;
        st_signal_init(&sig, ST_SIGNAL_RESUME, PQgetvalue(res, i, 0), -1);
        sig.payload = json_pack("{s:s, s:s}", "actor", actor, "scope", "definition");
        err = st_signal_enqueue_tx(conn, &sig, &eb);
        st_signal_close(&sig);
        drained++;
    }
    PQclear(res);
    char target[200];
    snprintf(target, sizeof target, "definition:%s/%ld", name, version);
    json_t *before = json_pack("{s:b}", "paused", pause ? !changed : changed);
    json_t *after = json_pack("{s:b}", "paused", pause);
    json_t *detail = json_pack("{s:b}", "changed", changed);
    if (reason != NULL)
        json_object_set_new(detail, "reason", json_string(reason));
    if (!pause)
        json_object_set_new(detail, "instances_drained", json_integer(drained));
    st_audit_entry_t entry = {actor, pause ? "pause_definition" : "resume_definition", "applied",
                              NULL, target, before, after, detail};
    if (err == ST_OK)
        err = st_audit_add_tx(conn, &entry, &eb);
    json_decref(before);
    json_decref(after);
    json_decref(detail);
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_answer_error(out, err, &eb);
        return;
    }
    json_t *body = json_pack("{s:s, s:i, s:b, s:b}", "definition", name, "version", (int)version,
                             "paused", pause, "changed", changed);
    if (!pause)
        json_object_set_new(body, "instances_drained", json_integer(drained));
    st_answer_set(out, 200, body);
}

static void cmd_definition_pause(PGconn *conn, const st_principal_t *who, const char *name,
                                 const char *version, const json_t *args, st_answer_t *out)
{
    definition_verb(conn, who, name, version, args, 1, out);
}

static void cmd_definition_resume(PGconn *conn, const st_principal_t *who, const char *name,
                                  const char *version, const json_t *args, st_answer_t *out)
{
    definition_verb(conn, who, name, version, args, 0, out);
}

static void handle_definition(st_http_req_t *req, st_api_t *api, st_named_cmd_fn fn)
{
    json_t *args = st_http_body_object(req);
    if (args == NULL)
        return;
    st_command_pool_submit(api->pool, req, NULL, fn, &api->current, st_http_param(req, "name"),
                           st_http_param(req, "version"), args, NULL);
}

static void handle_definition_pause(st_http_req_t *req, void *ctx)
{
    handle_definition(req, ctx, cmd_definition_pause);
}

static void handle_definition_resume(st_http_req_t *req, void *ctx)
{
    handle_definition(req, ctx, cmd_definition_resume);
}

void st_api_pause_register(st_api_t *api)
{
    st_api_route_command(api, "/v1/instances/{id}/pause", st_cmd_pause);
    st_api_route_command(api, "/v1/instances/{id}/resume", st_cmd_resume);
    st_api_route_command(api, "/v1/instances/{id}/rewind", st_cmd_rewind);
    st_http_route(api->svc->http, "POST", "/v1/definitions/{name}/{version}/pause",
                  handle_definition_pause, api);
    st_http_route(api->svc->http, "POST", "/v1/definitions/{name}/{version}/resume",
                  handle_definition_resume, api);
}
