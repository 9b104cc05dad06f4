/*
 * repair.c - the operator's repair verbs on one instance (docs/api.md, "Repairing an
 * instance"): retry, fail, variables (JSON Merge Patch), fire-timer and skip-wait, and
 * the edit of a dead letter's signal payload before its replay.
 *
 * A verb is a command (HTTP and Kafka ingress alike). Under the instance's row lock it
 * checks `expected_version` against the current state_version (409 version_mismatch),
 * then runs the engine's repair (st_repair_run) on the stored snapshot as a dry run, so
 * bad arguments answer 400 and a verb that does not apply 409 not_applicable, with
 * nothing changed. An accepted verb becomes a REPAIR control signal (payload {verb,
 * actor, reason?, args}) carrying expected_version, plus an audit row "requested", in
 * one transaction. The executor applies it under the same lock (wakeup.c), checks the
 * version again (a verb racing a wake-up applies at most once) and writes the audit
 * row "applied" or "rejected".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "permissions.h"
#include "strand/audit.h"
#include "strand/engine.h"
#include "strand/instance_store.h"
#include "strand/kafka.h"
#include "strand/notice.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/util.h"

#define MAX_REASON_LEN 1000
#define MAX_STEP_LEN 300

/* The instance, locked: state_version, snapshot, status, definition, the dead letter
 * of its last wake-up if that letter is still open, the definition's canonical form. */
static const char *const sql_repair_lock =
    "SELECT rs.state_version, rs.snapshot::text, i.status, i.definition_name,"
    " i.definition_version, (SELECT dl.id FROM strand.dead_letters dl"
    "   WHERE dl.id = (rs.last_error->>'dead_letter_id')::bigint AND dl.status = 'open'),"
    " (SELECT d.canonical::text FROM strand.definitions d"
    "   WHERE d.name = i.definition_name AND d.version = i.definition_version)"
    " FROM strand.runtime_states rs JOIN strand.instances i ON i.id = rs.instance_id"
    " WHERE rs.instance_id = $1::uuid FOR UPDATE OF rs";

/* Checks the verb's own arguments (shape only; the engine checks the rest) and copies
 * them into the signal's payload. Answers 400 and returns 0 on bad input. */
static int parse_verb_args(st_repair_verb_t verb, const json_t *args, json_t *payload, st_answer_t *out)
{
    st_errbuf_t eb;
    if (verb == ST_REPAIR_RETRY) {
        const json_t *step = json_object_get(args, "step");
        if (step != NULL && !json_is_null(step) &&
            (!json_is_string(step) || json_string_length(step) == 0 || json_string_length(step) > MAX_STEP_LEN)) {
            st_answer_problem(out, 400, "invalid_field", "step must be a non-empty string of at most 300 "
                              "characters (a step id, a JSON pointer or a state name)", "/step", NULL);
            return 0;
        }
        if (json_is_string(step))
            json_object_set(payload, "step", (json_t *)step);
    } else if (verb == ST_REPAIR_FAIL) {
        const json_t *error = json_object_get(args, "error");
        const json_t *code = json_object_get(error, "code");
        const json_t *message = json_object_get(error, "message");
        if (!json_is_object(error) || !json_is_string(code) || json_string_length(code) == 0 ||
            json_string_length(code) > 120 || (message != NULL && !json_is_string(message))) {
            st_answer_problem(out, 400, "invalid_field", "error must be {code: non-empty text of at most "
                              "120 characters, message?: text}", "/error", NULL);
            return 0;
        }
        if (st_engine_data_check(error, &eb) != ST_OK) {
            st_answer_problem(out, 400, "limit_exceeded", eb.msg, "/error", NULL);
            return 0;
        }
        json_object_set(payload, "error", (json_t *)error);
    } else if (verb == ST_REPAIR_PATCH_VARIABLES) {
        const json_t *patch = json_object_get(args, "patch");
        if (!json_is_object(patch)) {
            st_answer_problem(out, 400, "invalid_field", "patch must be a JSON object (a JSON Merge Patch, "
                              "RFC 7386, of the variables, which must stay an object)", "/patch", NULL);
            return 0;
        }
        if (st_engine_data_check(patch, &eb) != ST_OK) {
            st_answer_problem(out, 400, "limit_exceeded", eb.msg, "/patch", NULL);
            return 0;
        }
        json_object_set(payload, "patch", (json_t *)patch);
    } else if (verb == ST_REPAIR_SKIP_WAIT) {
        const json_t *data = json_object_get(args, "payload");
        if (data != NULL && !json_is_null(data) && !json_is_object(data)) {
            st_answer_problem(out, 400, "invalid_field", "payload must be a JSON object", "/payload", NULL);
            return 0;
        }
        if (json_is_object(data) && st_engine_data_check(data, &eb) != ST_OK) {
            st_answer_problem(out, 400, "limit_exceeded", eb.msg, "/payload", NULL);
            return 0;
        }
        if (json_is_object(data))
            json_object_set(payload, "payload", (json_t *)data);
    }
    return 1;
}

/* The engine's dry run of the verb on the locked snapshot: 1 when it applies, else the
 * answer (400 bad arguments, 409 not_applicable) is set. */
static int dry_run(PGresult *res, const char *id, const st_repair_t *repair, st_answer_t *out)
{
    if (PQgetisnull(res, 0, 1) || PQgetisnull(res, 0, 6)) {
        st_answer_problem(out, 409, "not_applicable", "the instance has not started yet", NULL, NULL);
        return 0;
    }
    json_error_t jerr;
    json_t *snapshot = json_loads(PQgetvalue(res, 0, 1), 0, &jerr);
    json_t *doc = json_loads(PQgetvalue(res, 0, 6), 0, &jerr);
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    st_errbuf_t eb = {0};
    st_err_t err = doc && snapshot ? st_defn_compile(doc, &defn, &problems)
                                   : st_err_set(&eb, ST_ERR_INTERNAL, "stored snapshot or definition is not JSON");
    json_decref(problems);
    json_decref(doc);
    st_run_result_t run = {0};
    if (err == ST_OK)
        err = st_repair_run(defn, snapshot, repair, id, st_now_ms(), NULL, &run, &eb);
    else if (eb.msg[0] == '\0')
        st_err_set(&eb, ST_ERR_INTERNAL, "the stored definition does not compile");
    st_run_result_close(&run);
    st_defn_free(defn);
    json_decref(snapshot);
    if (err == ST_ERR_INVALID)
        st_answer_problem(out, 400, "invalid_field", eb.msg, NULL, NULL);
    else if (err == ST_ERR_CONFLICT || err == ST_ERR_LIMIT)
        st_answer_problem(out, 409, "not_applicable", eb.msg, NULL, NULL);
    else if (err != ST_OK)
        st_answer_error(out, err, &eb);
    return err == ST_OK;
}

/* One verb: validate, lock, check, dry-run, enqueue the REPAIR signal and audit. */
static void repair_verb(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                        st_repair_verb_t verb, st_answer_t *out)
{
    if (id == NULL || !st_uuid_valid(id)) {
        st_answer_problem(out, 400, "invalid_id", "the instance id must be a UUID", "/id", NULL);
        return;
    }
    const json_t *ev = json_object_get(args, "expected_version");
    if (!json_is_integer(ev) || json_integer_value(ev) < 0) {
        st_answer_problem(out, 400, "invalid_field", "expected_version (the instance's state_version, as "
                          "GET /v1/instances/{id} shows it) is required: a non-negative integer",
                          "/expected_version", NULL);
        return;
    }
    const json_t *reason = json_object_get(args, "reason");
    if (reason != NULL && !json_is_null(reason) &&
        (!json_is_string(reason) || json_string_length(reason) > MAX_REASON_LEN)) {
        st_answer_problem(out, 400, "invalid_field", "reason must be a string of at most 1000 characters",
                          "/reason", NULL);
        return;
    }
    const char *actor = who && who->name[0] ? who->name : "anonymous";
    json_t *payload = json_pack("{s:s, s:s}", "verb", st_repair_verb_name(verb), "actor", actor);
    if (json_is_string(reason))
        json_object_set(payload, "reason", (json_t *)reason);
    if (!parse_verb_args(verb, args, payload, out)) {
        json_decref(payload);
        return;
    }
    st_repair_t repair = {.verb = verb, .step = json_string_value(json_object_get(payload, "step")),
                          .error = json_object_get(payload, "error"),
                          .patch = json_object_get(payload, "patch"),
                          .payload = json_object_get(payload, "payload")};
    long long expected = (long long)json_integer_value(ev);
    st_errbuf_t eb;
    PGresult *res = NULL;
    const char *params[] = {id};
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_repair_lock, 1, params, &res, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_answer_error(out, err, &eb);
        json_decref(payload);
        return;
    }
    int ok = 0;
    long long current = PQntuples(res) ? atoll(PQgetvalue(res, 0, 0)) : -1;
    const char *status = PQntuples(res) ? PQgetvalue(res, 0, 2) : "";
    if (PQntuples(res) == 0) {
        st_answer_problem(out, 404, "instance_not_found", "no such instance", NULL, NULL);
    } else if (current != expected) {
        st_answer_problem(out, 409, "version_mismatch", "expected_version is not the instance's current "
                          "state_version: read the instance again", "/expected_version",
                          json_pack("{s:I}", "state_version", (json_int_t)current));
    } else if (st_instance_status_ended(status) && !(strcmp(status, "failed") == 0 &&
                                                (verb == ST_REPAIR_RETRY || verb == ST_REPAIR_PATCH_VARIABLES))) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s does not apply to a %s instance", st_repair_verb_name(verb), status);
        st_answer_problem(out, 409, "not_applicable", msg, NULL, json_pack("{s:s}", "status", status));
    } else if (strcmp(status, "paused") == 0 && verb != ST_REPAIR_PATCH_VARIABLES && verb != ST_REPAIR_FAIL) {
        /* it would run steps while paused (and leave it running): the executor agrees */
        char msg[160];
        snprintf(msg, sizeof msg, "%s does not apply to a paused instance: resume it first",
                 st_repair_verb_name(verb));
        st_answer_problem(out, 409, "not_applicable", msg, NULL, json_pack("{s:s}", "status", status));
    } else if (verb == ST_REPAIR_RETRY && strcmp(status, "failed") != 0) {
        /* A live instance: retry delivers its dead-lettered wake-up again. */
        if (PQgetisnull(res, 0, 5))
            st_answer_problem(out, 409, "not_applicable", "retry applies to a failed instance, or to one "
                              "whose last wake-up was dead-lettered (runtime last_error.dead_letter_id, "
                              "still open); this one is neither", NULL, json_pack("{s:s}", "status", status));
        else {
            json_object_set_new(payload, "dead_letter_id", json_integer(atoll(PQgetvalue(res, 0, 5))));
            ok = 1;
        }
    } else {
        ok = dry_run(res, id, &repair, out);
    }
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_REPAIR, id, expected);
    if (ok) {
        sig.payload = json_incref(payload);
        err = st_api_enqueue_verb_tx(conn, &sig, st_repair_verb_name(verb), status, current, &eb);
    }
    PQclear(res);
    if (ok && err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (!ok || err != ST_OK)
        st_pg_rollback(conn);
    if (ok && err != ST_OK)
        st_answer_error(out, err, &eb);
    else if (ok)
        st_answer_set(out, 202, json_pack("{s:s, s:s, s:s, s:s}", "instance_id", id, "signal_id",
                                          sig.signal_id, "status", "accepted", "verb",
                                          st_repair_verb_name(verb)));
    st_signal_close(&sig);
    json_decref(payload);
}

void st_cmd_retry(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                  st_answer_t *out)
{
    repair_verb(conn, who, id, args, ST_REPAIR_RETRY, out);
}

void st_cmd_fail(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                 st_answer_t *out)
{
    if (st_principal_holds(who, ST_PERM_INSTANCES_TERMINATE) == ST_HOLDS_NONE) {
        st_answer_problem(out, 403, "forbidden", "fail needs the instances:terminate permission", NULL,
                          json_pack("{s:s}", "required_permission", "instances:terminate"));
        return;
    }
    repair_verb(conn, who, id, args, ST_REPAIR_FAIL, out);
}

void st_cmd_patch_variables(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                            st_answer_t *out)
{
    repair_verb(conn, who, id, args, ST_REPAIR_PATCH_VARIABLES, out);
}

void st_cmd_fire_timer(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                       st_answer_t *out)
{
    repair_verb(conn, who, id, args, ST_REPAIR_FIRE_TIMER, out);
}

void st_cmd_skip_wait(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                      st_answer_t *out)
{
    repair_verb(conn, who, id, args, ST_REPAIR_SKIP_WAIT, out);
}

/* ---- PUT /v1/dead-letters/{id}/payload ----------------------------------------------- */

static const char *const sql_dead_letter_lock =
    "SELECT status, source_topic, payload FROM strand.dead_letters WHERE id = $1::bigint FOR UPDATE";

/* Replaces the JSON payload of an open dead-lettered signal: the envelope is decoded,
 * its payload replaced, and encoded again; the audit row keeps the original payload. */
static void handle_edit_payload(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    if (!st_api_require_permission(api, req, ST_PERM_DEAD_LETTERS_OPERATE, NULL))
        return;
    const char *id = st_http_param(req, "id");
    if (id == NULL || *id == '\0' || strlen(id) > 18 || strspn(id, "0123456789") != strlen(id)) {
        st_http_reply_problem(req, 400, "invalid_id", "the dead letter id must be a positive integer", "/id", NULL);
        return;
    }
    json_t *body = st_http_body_object(req);
    if (body == NULL)
        return;
    const json_t *payload = json_object_get(body, "payload");
    st_errbuf_t eb;
    if (!json_is_object(payload)) {
        json_decref(body);
        st_http_reply_problem(req, 400, "invalid_field", "payload must be a JSON object (the signal's new payload)",
                              "/payload", NULL);
        return;
    }
    if (st_engine_data_check(payload, &eb) != ST_OK) {
        json_decref(body);
        st_http_reply_problem(req, 400, "limit_exceeded", eb.msg, "/payload", NULL);
        return;
    }
    PGconn *conn = st_api_conn_or_reply(api, req);
    if (conn == NULL) {
        json_decref(body);
        return;
    }
    const char *params[] = {id};
    PGresult *res = NULL;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_pg_exec_format(conn, sql_dead_letter_lock, 1, params, NULL, NULL, 1, &res, &eb);
    int code = 0;
    const char *problem = NULL, *message = NULL;
    st_signal_t sig = {0};
    uint8_t *buf = NULL;
    size_t len = 0;
    char topic[300];
    snprintf(topic, sizeof topic, "%s%s", api->svc->cfg.topic_prefix, ST_TOPIC_SIGNALS);
    if (err != ST_OK) {
        code = -1;
    } else if (PQntuples(res) == 0) {
        code = 404, problem = "dead_letter_not_found", message = "no such dead letter";
    } else if (strcmp(PQgetvalue(res, 0, 0), "open") != 0) {
        code = 409, problem = "dead_letter_not_open", message = "the dead letter is no longer open (replayed or discarded)";
    } else if (strcmp(PQgetvalue(res, 0, 1), topic) != 0 ||
               st_signal_decode(PQgetvalue(res, 0, 2), (size_t)PQgetlength(res, 0, 2), &sig, &eb) != ST_OK) {
        code = 409, problem = "not_a_signal",
        message = "only a dead-lettered signal (from the signals topic, a valid Signal envelope) has a JSON "
                  "payload to edit";
    }
    if (code == 0 && st_signal_needs_record(sig.type)) {
        /* An operator's control signal (cancel, terminate, repair) carries who sent it and
         * what it may do: it is sent again as a new request, never rewritten. */
        code = 409, problem = "not_editable",
        message = "a control signal (CANCEL, TERMINATE, REPAIR) cannot be edited: send a new request and "
                  "discard this letter";
    }
    if (code == 0) {
        json_t *before = sig.payload ? json_incref(sig.payload) : json_object();
        json_decref(sig.payload);
        sig.payload = json_deep_copy(payload);
        err = st_signal_encode(&sig, &buf, &len, &eb);
        if (err == ST_OK)
            err = st_dead_letter_set_payload_tx(conn, id, buf, len, &eb);
        if (err == ST_OK) {
            char target[64];
            snprintf(target, sizeof target, "dead_letter:%s", id);
            json_t *detail = json_pack("{s:s, s:s}", "signal_id", sig.signal_id, "signal_type",
                                       st_signal_type_name(sig.type));
            st_audit_entry_t entry = {.actor = api->current.name[0] ? api->current.name : "anonymous",
                                      .action = "edit_dead_letter", .outcome = "applied",
                                      .instance_id = st_uuid_valid(sig.instance_id) ? sig.instance_id : NULL,
                                      .target = target, .before = before, .after = payload, .detail = detail};
            err = st_audit_add_tx(conn, &entry, &eb);
            json_decref(detail);
        }
        json_decref(before);
        if (err == ST_OK)
            err = st_pg_commit(conn, &eb);
        code = err == ST_OK ? 200 : -1;
    }
    PQclear(res);
    st_signal_close(&sig);
    free(buf);
    if (code != 200)
        st_pg_rollback(conn);
    if (code == -1)
        st_api_reply_error(req, err, &eb);
    else if (code != 200)
        st_http_reply_problem(req, code, problem, message, NULL, NULL);
    else
        st_http_reply_json(req, 200, json_pack("{s:I, s:s, s:O}", "id", (json_int_t)atoll(id), "status", "open",
                                               "payload", payload));
    json_decref(body);
}

void st_api_repair_register(st_api_t *api)
{
    st_api_route_command(api, "/v1/instances/{id}/retry", st_cmd_retry);
    st_api_route_command(api, "/v1/instances/{id}/fail", st_cmd_fail);
    st_api_route_command(api, "/v1/instances/{id}/variables", st_cmd_patch_variables);
    st_api_route_command(api, "/v1/instances/{id}/fire-timer", st_cmd_fire_timer);
    st_api_route_command(api, "/v1/instances/{id}/skip-wait", st_cmd_skip_wait);
    st_http_route(api->svc->http, "PUT", "/v1/dead-letters/{id}/payload", handle_edit_payload, api);
}
