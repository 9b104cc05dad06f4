/*
 * triggers.c - lifecycle triggers: {definition, version?, external_ref, event,
 * request_id, actor?, payload?}.
 *
 * One transaction: the request_id is claimed (scope "trigger:<definition>:<ref>"; a
 * repeat is a no-op answered 200 with a DuplicateRequest notice), the instance for
 * (definition, external_ref) is ensured (created with its START signal if there is no
 * running one), and the trigger is enqueued as a named signal. The executor validates
 * the transition, moves the state, appends the timeline and emits the work events.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "strand/notice.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/util.h"

static const char *const sql_lifecycle_version =
    "SELECT version FROM strand.definitions WHERE name = $1 AND kind = 'lifecycle'"
    " AND ($2::int IS NULL OR version = $2::int) ORDER BY version DESC LIMIT 1";
static const char *const sql_request_claim =
    "INSERT INTO strand.requests (scope, request_id, instance_id) VALUES ($1, $2, NULL)"
    " ON CONFLICT (scope, request_id) DO NOTHING RETURNING 1";
static const char *const sql_running_instance =
    "SELECT id FROM strand.instances WHERE definition_name = $1 AND definition_version = $2"
    " AND business_ref = $3 AND status NOT IN ('completed', 'failed', 'cancelled', 'terminated')"
    " ORDER BY created_at LIMIT 1 FOR UPDATE";
static const char *const sql_instance_insert =
    "INSERT INTO strand.instances (id, definition_name, definition_version, business_ref, status,"
    " input) VALUES ($1::uuid, $2, $3, $4, 'pending', jsonb_build_object('external_ref', $4::text))";
static const char *const sql_runtime_insert =
    "INSERT INTO strand.runtime_states (instance_id, state_version) VALUES ($1::uuid, 0)";
static const char *const sql_lock_ref =
    "SELECT pg_advisory_xact_lock(hashtext($1))";

static const char *string_arg(const json_t *args, const char *key, size_t max, int *bad)
{
    const json_t *v = json_object_get(args, key);
    if (v == NULL || json_is_null(v))
        return NULL;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max) {
        *bad = 1;
        return NULL;
    }
    return json_string_value(v);
}

void st_cmd_trigger(PGconn *conn, const st_principal_t *who, const char *unused_id,
                    const json_t *args, st_answer_t *out)
{
    int bad = 0;
    const char *definition = string_arg(args, "definition", 120, &bad);
    const char *ref = string_arg(args, "external_ref", 256, &bad);
    const char *event = string_arg(args, "event", 120, &bad);
    const char *request_id = string_arg(args, "request_id", 256, &bad);
    const json_t *version = json_object_get(args, "version");
    const json_t *payload = json_object_get(args, "payload");
    const char *field = NULL;
    if (bad || definition == NULL)
        field = definition == NULL ? "/definition" : "/external_ref";
    if (field == NULL && ref == NULL)
        field = "/external_ref";
    if (field == NULL && event == NULL)
        field = "/event";
    if (field == NULL && request_id == NULL)
        field = "/request_id";
    if (field == NULL && version != NULL && !json_is_null(version) &&
        (!json_is_integer(version) || json_integer_value(version) < 1 ||
         json_integer_value(version) > INT32_MAX))
        field = "/version";
    if (field == NULL && payload != NULL && !json_is_null(payload) && !json_is_object(payload))
        field = "/payload";
    if (field != NULL || bad) {
        st_answer_problem(out, 400, "invalid_field",
                          "definition, external_ref, event and request_id are required strings;"
                          " version is a positive integer of at most 2147483647; payload an object",
                          field ? field : "", NULL);
        return;
    }
    char version_text[16] = "", scope[400], id[37] = "";
    if (json_is_integer(version))
        snprintf(version_text, sizeof version_text, "%lld", (long long)json_integer_value(version));
    snprintf(scope, sizeof scope, "trigger:%s:%s", definition, ref);
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_signal_t start = {0}, sig = {0};
    int created = 0;
    st_err_t err = st_pg_begin(conn, &eb);
    const char *lock_params[] = {scope};
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
    PQclear(res);
    res = NULL;
    const char *claim_params[] = {scope, request_id};
    if ((err = st_pg_exec(conn, sql_request_claim, 2, claim_params, &res, &eb)) != ST_OK)
        goto done;
    int fresh = PQntuples(res) == 1;
    PQclear(res);
    res = NULL;
    if (!fresh) {
        json_t *detail = json_pack("{s:s, s:s, s:s, s:s}", "request_id", request_id, "external_ref",
                                   ref, "event", event, "definition", definition);
        err = st_notice_add_tx(conn, "DuplicateRequest", NULL, NULL,
                               "this request_id was already applied; nothing changed", detail, &eb);
        json_decref(detail);
        if (err == ST_OK && (err = st_pg_commit(conn, &eb)) == ST_OK)
            st_answer_set(out, 200, json_pack("{s:b, s:s}", "duplicate", 1, "request_id", request_id));
        goto done;
    }
    const char *find_params[] = {definition, pinned, ref};
    if ((err = st_pg_exec(conn, sql_running_instance, 3, find_params, &res, &eb)) != ST_OK)
        goto done;
    if (PQntuples(res) == 1) {
        snprintf(id, sizeof id, "%s", PQgetvalue(res, 0, 0));
    } else {
        st_uuid_new(id);
        const char *inst_params[] = {id, definition, pinned, ref};
        const char *rs_params[] = {id};
        st_signal_init(&start, ST_SIGNAL_START, id, 0);
        if ((err = st_pg_exec(conn, sql_instance_insert, 4, inst_params, NULL, &eb)) != ST_OK ||
            (err = st_pg_exec(conn, sql_runtime_insert, 1, rs_params, NULL, &eb)) != ST_OK ||
            (err = st_signal_enqueue_tx(conn, &start, &eb)) != ST_OK)
            goto done;
        created = 1;
    }
    st_signal_init(&sig, ST_SIGNAL_EXTERNAL, id, -1);
    snprintf(sig.name, sizeof sig.name, "%s", event);
    sig.payload = json_pack("{s:s, s:s, s:s, s:o}", "request_id", request_id, "external_ref", ref,
                            "actor", json_string_value(json_object_get(args, "actor")) ?: who->name,
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
