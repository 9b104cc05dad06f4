/*
 * triggers.c - lifecycle triggers: {definition, version?, external_ref, event,
 * request_id, actor?, payload?}; `actor` (a string; default: the caller) is who the
 * transition names.
 *
 * One transaction, serialised per (definition, external_ref) by an advisory lock:
 *  1. the request_id is looked up per (definition, external_ref) (request.h); a repeat
 *     is a no-op answered 200 with a DuplicateRequest notice naming the instance;
 *  2. the reference's instance is found whatever its version: a running one takes the
 *     trigger (a `version` naming another version is 409 version_conflict); one that
 *     reached a final state (or was cancelled, failed, terminated) refuses it with 409
 *     transition_rejected and a TransitionRejected notice, unless the blueprint says
 *     "restart_after_final": true; with none, an instance is created (pinned to
 *     `version`, or the latest) with its START signal. A reference has at most one
 *     running lifecycle instance (migration 0012's unique index);
 *  3. the request_id is claimed with the instance and the trigger enqueued as a named
 *     signal. The executor validates the transition, moves the state, appends the
 *     timeline and emits the work events.
 * A refused trigger claims nothing: the same request, repeated, is refused again.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "strand/engine.h"
#include "strand/instance_store.h"
#include "strand/notice.h"
#include "strand/pg.h"
#include "strand/request.h"
#include "strand/signal.h"
#include "strand/util.h"

/* The version a new instance is pinned to, and whether its blueprint lets a reference
 * start again after its instance ended. */
static const char *const sql_lifecycle_version =
    "SELECT version, coalesce(canonical->'restart_after_final' = 'true'::jsonb, false)"
    " FROM strand.definitions WHERE name = $1 AND kind = 'lifecycle'"
    " AND ($2::int IS NULL OR version = $2::int) ORDER BY version DESC LIMIT 1";
/* The reference's instance, any version: a running one first (the oldest flagged one,
 * should instances from before migration 0012 run beside it), else the latest. */
static const char *const sql_ref_instance =
    "SELECT id, status, definition_version, coalesce(output->>'state', '')"
    " FROM strand.instances WHERE definition_name = $1 AND business_ref = $2"
    " ORDER BY status IN ('completed', 'failed', 'cancelled', 'terminated'), lifecycle DESC,"
    " CASE WHEN status IN ('completed', 'failed', 'cancelled', 'terminated') THEN NULL"
    " ELSE created_at END, created_at DESC LIMIT 1 FOR UPDATE";
static const char *const sql_lock_ref =
    "SELECT pg_advisory_xact_lock(hashtext($1))";

/* Reads member `key` into *out: a string of 1 to `max` bytes, or NULL when absent or
 * null. Returns 0 when it is present but not such a string, or absent and `required`. */
static int string_arg(const json_t *args, const char *key, size_t max, int required,
                      const char **out)
{
    const json_t *v = json_object_get(args, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return !required;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max)
        return 0;
    *out = json_string_value(v);
    return 1;
}

void st_cmd_trigger(PGconn *conn, const st_principal_t *who, const char *unused_id,
                    const json_t *args, st_answer_t *out)
{
    const char *definition = NULL, *ref = NULL, *event = NULL, *request_id = NULL, *actor = NULL;
    const json_t *version = json_object_get(args, "version");
    const json_t *payload = json_object_get(args, "payload");
    /* the first field at fault is the one named */
    const char *field = !string_arg(args, "definition", 120, 1, &definition)    ? "/definition"
                        : !string_arg(args, "external_ref", 256, 1, &ref)       ? "/external_ref"
                        : !string_arg(args, "event", 120, 1, &event)            ? "/event"
                        : !string_arg(args, "request_id", 256, 1, &request_id) ? "/request_id"
                        : !string_arg(args, "actor", 256, 0, &actor)            ? "/actor"
                                                                                : NULL;
    if (field == NULL && version != NULL && !json_is_null(version) &&
        (!json_is_integer(version) || json_integer_value(version) < 1 ||
         json_integer_value(version) > INT32_MAX))
        field = "/version";
    if (field == NULL && payload != NULL && !json_is_null(payload) && !json_is_object(payload))
        field = "/payload";
    if (field != NULL) {
        st_answer_problem(out, 400, "invalid_field",
                          "definition and event (at most 120 characters), external_ref and"
                          " request_id (at most 256) are required non-empty strings; actor, if"
                          " given, a non-empty string of at most 256 characters; version a"
                          " positive integer of at most 2147483647; payload an object",
                          field, NULL);
        return;
    }
    st_errbuf_t limit_eb;
    if (json_is_object(payload) && st_engine_data_check(payload, &limit_eb) != ST_OK) {
        st_answer_problem(out, 400, "limit_exceeded", limit_eb.msg, "/payload", NULL);
        return;
    }
    char version_text[16] = "", lock_key[400], id[37] = "";
    if (json_is_integer(version))
        snprintf(version_text, sizeof version_text, "%lld", (long long)json_integer_value(version));
    snprintf(lock_key, sizeof lock_key, "trigger:%s:%s", definition, ref);
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_signal_t start = {0}, sig = {0};
    int created = 0;
    st_err_t err = st_pg_begin(conn, &eb);
    const char *lock_params[] = {lock_key};
    if (err == ST_OK)   /* serialise triggers for one (definition, external_ref) */
        err = st_pg_exec(conn, sql_lock_ref, 1, lock_params, NULL, &eb);
    const char *def_params[] = {definition, version_text[0] ? version_text : NULL};
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_lifecycle_version, 2, def_params, &res, &eb);
    if (err != ST_OK)
        goto done;
    if (PQntuples(res) == 0) {
        st_answer_problem(out, 404, "definition_not_found", "no such lifecycle definition is imported",
                          "/definition", NULL);
        goto done;
    }
    char pinned[16];
    snprintf(pinned, sizeof pinned, "%s", PQgetvalue(res, 0, 0));
    int restart_after_final = PQgetvalue(res, 0, 1)[0] == 't';
    PQclear(res);
    res = NULL;
    int seen = 0;
    char prior[37] = "";
    if ((err = st_request_find(conn, ST_REQUEST_TRIGGER, definition, ref, request_id, &seen, prior,
                               &eb)) != ST_OK)
        goto done;
    if (seen) {
        json_t *detail = json_pack("{s:s, s:s, s:s, s:s}", "request_id", request_id, "external_ref",
                                   ref, "event", event, "definition", definition);
        err = st_notice_add_tx(conn, "DuplicateRequest", prior[0] ? prior : NULL, NULL,
                               "this request_id was already applied; nothing changed", detail, &eb);
        json_decref(detail);
        if (err == ST_OK && (err = st_pg_commit(conn, &eb)) == ST_OK)
            st_answer_set(out, 200, json_pack("{s:b, s:s, s:s?}", "duplicate", 1, "request_id", request_id,
                                              "instance_id", prior[0] ? prior : NULL));
        goto done;
    }
    const char *find_params[] = {definition, ref};
    if ((err = st_pg_exec(conn, sql_ref_instance, 2, find_params, &res, &eb)) != ST_OK)
        goto done;
    int found = PQntuples(res) == 1;
    int ended = found && st_instance_status_ended(PQgetvalue(res, 0, 1));
    if (found && !ended && version_text[0] && strcmp(version_text, PQgetvalue(res, 0, 2)) != 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "the reference's running instance runs version %s; send no version"
                 " (or that one) to trigger it", PQgetvalue(res, 0, 2));
        st_answer_problem(out, 409, "version_conflict", msg, "/version",
                          json_pack("{s:s, s:i}", "instance_id", PQgetvalue(res, 0, 0),
                                    "definition_version", atoi(PQgetvalue(res, 0, 2))));
        goto done;
    }
    if (ended && !restart_after_final) {
        /* The lifecycle is over: no new instance, no transition, no hooks. */
        snprintf(id, sizeof id, "%s", PQgetvalue(res, 0, 0));
        json_t *detail = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "event", event, "external_ref", ref,
                                   "definition", definition, "request_id", request_id, "status",
                                   PQgetvalue(res, 0, 1), "state", PQgetvalue(res, 0, 3));
        err = st_notice_add_tx(conn, "TransitionRejected", id, NULL,
                               "the lifecycle instance has reached its final state", detail, &eb);
        json_decref(detail);
        if (err == ST_OK && (err = st_pg_commit(conn, &eb)) == ST_OK)
            st_answer_problem(out, 409, "transition_rejected",
                              "the lifecycle instance for this reference has ended (its final state"
                              " or a cancel); the blueprint does not restart it (restart_after_final)",
                              "/external_ref",
                              json_pack("{s:s, s:s, s:s}", "instance_id", id, "instance_status",
                                        PQgetvalue(res, 0, 1), "state", PQgetvalue(res, 0, 3)));
        goto done;
    }
    if (found && !ended) {
        snprintf(id, sizeof id, "%s", PQgetvalue(res, 0, 0));
    } else {
        st_uuid_new(id);
        /* its input names the reference it was started for */
        json_t *input = json_pack("{s:s}", "external_ref", ref);
        char *input_text = input ? json_dumps(input, JSON_COMPACT) : NULL;
        json_decref(input);
        st_instance_new_t inst = {.id = id, .definition_name = definition,
                                  .definition_version = pinned, .business_ref = ref,
                                  .input_json = input_text, .lifecycle = 1};
        st_signal_init(&start, ST_SIGNAL_START, id, 0);
        if (input_text == NULL)
            err = st_err_set(&eb, ST_ERR_NOMEM, "could not encode an instance's input");
        else
            err = st_instance_add_tx(conn, &inst, &eb);
        free(input_text);
        if (err != ST_OK || (err = st_signal_enqueue_tx(conn, &start, &eb)) != ST_OK)
            goto done;
        created = 1;
    }
    PQclear(res);
    res = NULL;
    int fresh = 0;
    if ((err = st_request_claim_tx(conn, ST_REQUEST_TRIGGER, definition, ref, request_id, id, &fresh,
                                   NULL, &eb)) != ST_OK)
        goto done;
    if (!fresh) {   /* cannot happen under the lock; refuse rather than apply twice */
        err = st_err_set(&eb, ST_ERR_CONFLICT, "the trigger's request_id was claimed concurrently");
        goto done;
    }
    st_signal_init(&sig, ST_SIGNAL_EXTERNAL, id, -1);
    snprintf(sig.name, sizeof sig.name, "%s", event);
    sig.payload = json_pack("{s:s, s:s, s:s, s:o}", "request_id", request_id, "external_ref", ref,
                            "actor", actor ? actor : who->name,
                            "payload", json_is_object(payload) ? json_deep_copy(payload) : json_object());
    if ((err = st_signal_enqueue_tx(conn, &sig, &eb)) != ST_OK || (err = st_pg_commit(conn, &eb)) != ST_OK)
        goto done;
    st_answer_set(out, 202, json_pack("{s:s, s:s, s:b, s:s}", "instance_id", id, "signal_id",
                                      sig.signal_id, "created", created, "event", event));
done:
    if (out->status == 0)
        st_answer_error(out, err == ST_OK ? ST_ERR_INTERNAL : err, &eb);
    st_pg_rollback(conn);
    PQclear(res);
    st_signal_close(&start);
    st_signal_close(&sig);
}

void st_api_triggers_register(st_api_t *api)
{
    st_api_route_command(api, "/v1/triggers", st_cmd_trigger);
}
