/*
 * signals.c - raise signals into instances: by instance id, by correlation (business
 * reference + signal name), and the control signals cancel and terminate.
 *
 * Each request writes one outbox row (the Signal envelope) in one transaction, plus
 * the idempotency key when the caller sends a request_id (scoped per instance and
 * signal name: the same message id on two instances is two messages). The executor decides what
 * the signal does: resume a matching wait, buffer it until the instance waits for it,
 * or drop it as stale with a notice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "strand/audit.h"
#include "strand/engine.h"
#include "strand/instance_store.h"
#include "strand/pg.h"
#include "strand/request.h"
#include "strand/signal.h"
#include "strand/util.h"

#define MAX_NAME_LEN 120

static const char *const sql_instance_status =
    "SELECT status FROM strand.instances WHERE id = $1::uuid";
static const char *const sql_instances_by_ref =
    "SELECT id FROM strand.instances WHERE business_ref = $1"
    " AND ($2::text IS NULL OR definition_name = $2)"
    " AND status NOT IN ('completed', 'failed', 'cancelled', 'terminated')"
    " ORDER BY created_at LIMIT 2";
/* The request-id scope of a signal type (request.h). */
static const char *request_scope(st_signal_type_t type)
{
    return type == ST_SIGNAL_CANCEL      ? ST_REQUEST_CANCEL
           : type == ST_SIGNAL_TERMINATE ? ST_REQUEST_TERMINATE
                                         : ST_REQUEST_SIGNAL;
}

/* Enqueues `sig` in one transaction, with an optional idempotency key: the request id
 * is claimed per (instance, signal name) - a queue message id per queue - or per
 * instance for a cancel or terminate (request.h) - and, for an operator's action, its
 * audit row `audit` (NULL: none; a repeated request_id writes none). Answers 202 (or
 * 200 for a repeated request_id) or an error. */
static void enqueue(PGconn *conn, st_signal_t *sig, const char *request_id,
                    const st_audit_entry_t *audit, st_answer_t *out)
{
    st_errbuf_t eb;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK && request_id != NULL) {
        int fresh = 0;
        err = st_request_claim_tx(conn, request_scope(sig->type), sig->instance_id, sig->name,
                                  request_id,
                                  sig->instance_id, &fresh, NULL, &eb);
        if (err == ST_OK && !fresh) {
            st_pg_rollback(conn);
            st_answer_set(out, 200, json_pack("{s:s, s:b}", "instance_id", sig->instance_id,
                                              "duplicate", 1));
            return;
        }
    }
    if (err == ST_OK)
        err = st_signal_enqueue_tx(conn, sig, &eb);
    if (err == ST_OK && audit != NULL)
        err = st_audit_add_tx(conn, audit, &eb);
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_answer_error(out, err, &eb);
        return;
    }
    st_answer_set(out, 202, json_pack("{s:s, s:s, s:s}", "signal_id", sig->signal_id,
                                      "instance_id", sig->instance_id, "type",
                                      st_signal_type_name(sig->type)));
}

/* Reads {name, payload, request_id}; answers 400 and returns 0 on bad input. */
static int parse_signal_args(const json_t *args, int need_name, const char **name,
                             json_t **payload, const char **request_id, st_answer_t *out)
{
    json_t *n = json_object_get(args, "name");
    json_t *p = json_object_get(args, "payload");
    json_t *rid = json_object_get(args, "request_id");
    if (need_name && (!json_is_string(n) || json_string_length(n) == 0 ||
                      json_string_length(n) > MAX_NAME_LEN)) {
        st_answer_problem(out, 400, "invalid_field",
                          "name must be a non-empty string of at most 120 characters", "/name",
                          NULL);
        return 0;
    }
    if (p != NULL && !json_is_null(p) && !json_is_object(p)) {
        st_answer_problem(out, 400, "invalid_field", "payload must be a JSON object", "/payload",
                          NULL);
        return 0;
    }
    st_errbuf_t eb;
    if (json_is_object(p) && st_engine_data_check(p, &eb) != ST_OK) {
        st_answer_problem(out, 400, "limit_exceeded", eb.msg, "/payload", NULL);
        return 0;
    }
    if (rid != NULL && !json_is_null(rid) &&
        (!json_is_string(rid) || json_string_length(rid) == 0 || json_string_length(rid) > 256)) {
        st_answer_problem(out, 400, "invalid_field",
                          "request_id must be a non-empty string of at most 256 characters",
                          "/request_id", NULL);
        return 0;
    }
    *name = json_string_value(n);
    *payload = json_is_object(p) ? p : NULL;
    *request_id = json_string_value(rid);
    return 1;
}

/* Checks the instance exists and has not ended; answers 404/409 otherwise. */
static int instance_open(PGconn *conn, const char *id, st_answer_t *out)
{
    const char *params[] = {id};
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_instance_status, 1, params, &res, &eb);
    if (err != ST_OK) {
        st_answer_error(out, err, &eb);
        return 0;
    }
    int ok = 0;
    if (PQntuples(res) == 0)
        st_answer_problem(out, 404, "instance_not_found", "no such instance", NULL, NULL);
    else if (st_instance_status_ended(PQgetvalue(res, 0, 0)))
        st_answer_problem(out, 409, "instance_ended", "the instance has already ended", NULL,
                          NULL);
    else
        ok = 1;
    PQclear(res);
    return ok;
}

/* If `request_id` was claimed before for (instance, name), replaces the answer in `out`
 * with 200 duplicate; otherwise leaves `out` as it is. */
static void answer_if_duplicate(PGconn *conn, const char *id, st_signal_type_t type,
                                const char *name, const char *request_id, st_answer_t *out)
{
    int found = 0;
    st_errbuf_t eb;
    if (st_request_find(conn, request_scope(type), id, name ? name : "", request_id, &found,
                        NULL, &eb) != ST_OK || !found)
        return;
    st_answer_close(out);
    memset(out, 0, sizeof *out);
    st_answer_set(out, 200, json_pack("{s:s, s:b}", "instance_id", id, "duplicate", 1));
}

/* The signal, cancel and terminate commands share this. A cancel or terminate names
 * its `who` in the signal's payload ("actor", for the executor's audit row) and gets
 * the audit row "requested". */
static void raise_on_instance(PGconn *conn, const st_principal_t *who, const char *id,
                              const json_t *args, st_signal_type_t type, st_answer_t *out)
{
    if (!st_uuid_valid(id)) {
        st_answer_problem(out, 400, "invalid_id", "the instance id must be a UUID", "/id", NULL);
        return;
    }
    const char *name = NULL, *request_id = NULL;
    json_t *payload = NULL;
    if (!parse_signal_args(args, type == ST_SIGNAL_EXTERNAL, &name, &payload, &request_id, out))
        return;
    json_t *reason = json_object_get(args, "reason");
    if (type != ST_SIGNAL_EXTERNAL && reason != NULL && !json_is_null(reason) &&
        !json_is_string(reason)) {
        st_answer_problem(out, 400, "invalid_field", "reason must be a string", "/reason", NULL);
        return;
    }
    if (!instance_open(conn, id, out)) {
        /* A retry of a request that was accepted gets the same answer after the instance
         * ended too (the first may have ended it): 200 duplicate, not 409. */
        if (request_id != NULL && out->status == 409)
            answer_if_duplicate(conn, id, type, name, request_id, out);
        return;
    }
    st_signal_t sig;
    st_signal_init(&sig, type, id, -1);
    if (name != NULL)
        snprintf(sig.name, sizeof sig.name, "%s", name);
    sig.payload = payload ? json_deep_copy(payload) : json_object();
    if (json_is_string(reason))
        json_object_set(sig.payload, "reason", reason);
    if (type == ST_SIGNAL_EXTERNAL) {
        enqueue(conn, &sig, request_id, NULL, out);
    } else {
        const char *actor = who != NULL && who->name[0] ? who->name : "system";
        json_object_set_new(sig.payload, "actor", json_string(actor));
        json_t *detail = json_pack("{s:s, s:O}", "signal_id", sig.signal_id, "reason",
                                   json_is_string(reason) ? reason : json_null());
        if (request_id != NULL)
            json_object_set_new(detail, "request_id", json_string(request_id));
        st_audit_entry_t audit = {actor, type == ST_SIGNAL_CANCEL ? "cancel" : "terminate",
                                  "requested", id, NULL, NULL, NULL, detail};
        enqueue(conn, &sig, request_id, &audit, out);
        json_decref(detail);
    }
    st_signal_close(&sig);
}

void st_cmd_signal(PGconn *conn, const st_principal_t *who, const char *id,
                  const json_t *args, st_answer_t *out)
{
    raise_on_instance(conn, who, id, args, ST_SIGNAL_EXTERNAL, out);
}

void st_cmd_cancel(PGconn *conn, const st_principal_t *who, const char *id,
                  const json_t *args, st_answer_t *out)
{
    raise_on_instance(conn, who, id, args, ST_SIGNAL_CANCEL, out);
}

void st_cmd_terminate(PGconn *conn, const st_principal_t *who, const char *id,
                  const json_t *args, st_answer_t *out)
{
    if (st_principal_holds(who, ST_PERM_INSTANCES_TERMINATE) == ST_HOLDS_NONE) {
        st_answer_problem(out, 403, "forbidden", "terminate needs the instances:terminate permission",
                          NULL, json_pack("{s:s}", "required_permission", "instances:terminate"));
        return;
    }
    raise_on_instance(conn, who, id, args, ST_SIGNAL_TERMINATE, out);
}

/* {business_ref, definition?, name, payload?, request_id?} */
void st_cmd_signal_correlated(PGconn *conn, const st_principal_t *who, const char *unused_id,
                              const json_t *args, st_answer_t *out)
{
    const char *name = NULL, *request_id = NULL;
    json_t *payload = NULL;
    json_t *ref = json_object_get(args, "business_ref");
    json_t *def = json_object_get(args, "definition");
    if (!parse_signal_args(args, 1, &name, &payload, &request_id, out))
        return;
    if (!json_is_string(ref) || json_string_length(ref) == 0) {
        st_answer_problem(out, 400, "invalid_field", "business_ref must be a non-empty string",
                          "/business_ref", NULL);
        return;
    }
    if (def != NULL && !json_is_null(def) && !json_is_string(def)) {
        st_answer_problem(out, 400, "invalid_field", "definition must be a string",
                          "/definition", NULL);
        return;
    }
    const char *params[] = {json_string_value(ref), json_string_value(def)};
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_instances_by_ref, 2, params, &res, &eb);
    if (err != ST_OK) {
        st_answer_error(out, err, &eb);
    } else if (PQntuples(res) == 0) {
        st_answer_problem(out, 404, "instance_not_found",
                          "no running instance has this business_ref", "/business_ref", NULL);
    } else if (PQntuples(res) > 1) {
        st_answer_problem(out, 409, "ambiguous_correlation",
                          "several running instances have this business_ref; name the definition",
                          "/definition", NULL);
    } else {
        st_signal_t sig;
        st_signal_init(&sig, ST_SIGNAL_EXTERNAL, PQgetvalue(res, 0, 0), -1);
        snprintf(sig.name, sizeof sig.name, "%s", name);
        sig.payload = payload ? json_deep_copy(payload) : json_object();
        enqueue(conn, &sig, request_id, NULL, out);
        st_signal_close(&sig);
    }
    PQclear(res);
}

void st_api_signals_register(st_api_t *api)
{
    st_api_route_command(api, "/v1/instances/{id}/signals", st_cmd_signal);
    st_api_route_command(api, "/v1/instances/{id}/cancel", st_cmd_cancel);
    st_api_route_command(api, "/v1/instances/{id}/terminate", st_cmd_terminate);
    st_api_route_command(api, "/v1/signals", st_cmd_signal_correlated);
}

st_err_t st_api_enqueue_verb_tx(PGconn *conn, st_signal_t *sig, const char *action,
                                const char *status, long long current, st_errbuf_t *eb)
{
    st_err_t err = st_signal_enqueue_tx(conn, sig, eb);
    if (err != ST_OK)
        return err;
    json_t *before = json_pack("{s:s, s:I}", "status", status, "state_version", (json_int_t)current);
    json_t *detail = json_deep_copy(sig->payload);
    json_object_del(detail, "actor");
    json_object_set_new(detail, "signal_id", json_string(sig->signal_id));
    json_object_set_new(detail, "expected_version", json_integer(sig->expected_version));
    st_audit_entry_t entry = {.actor = json_string_value(json_object_get(sig->payload, "actor")),
                              .action = action, .outcome = "requested",
                              .instance_id = sig->instance_id, .before = before, .detail = detail};
    err = st_audit_add_tx(conn, &entry, eb);
    json_decref(before);
    json_decref(detail);
    return err;
}
