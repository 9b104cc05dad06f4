/* effects.c - effects to rows (see effects.h). */
#include "effects.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/call.h"
#include "strand/instance_store.h"
#include "strand/kafka.h"
#include "strand/notice.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/task.h"
#include "strand/timer.h"
#include "strand/tree.h"
#include "strand/util.h"
#include "strand/work.h"


static const char *const sql_child_version =
    "SELECT version FROM strand.definitions WHERE name = $1"
    " AND ($2::int IS NULL OR version = $2::int) ORDER BY version DESC LIMIT 1";
/* Who imported the definition version instance $1 runs (one row; NULL: not recorded). */
static const char *const sql_parent_importer =
    "SELECT d.imported_by FROM strand.instances i JOIN strand.definitions d"
    " ON d.name = i.definition_name AND d.version = i.definition_version WHERE i.id = $1::uuid";

/* The token file child starts are checked against (effects.h): whether one is
 * configured, and the loaded file (NULL: not loaded yet). */
static int effects_auth_configured;
static const st_auth_t *effects_auth;

void st_effects_set_auth(int configured, const st_auth_t *auth)
{
    __atomic_store_n(&effects_auth, auth, __ATOMIC_RELEASE);
    __atomic_store_n(&effects_auth_configured, configured, __ATOMIC_RELEASE);
}

/* Compact JSON text of `value` (NULL or JSON null -> `fallback`). Caller frees. */
static char *json_text(const json_t *value, const char *fallback)
{
    if (value == NULL || json_is_null(value))
        return strdup(fallback);
    return json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
}

static const char *string_field(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static st_err_t open_task_tx(PGconn *conn, const char *instance_id, const json_t *effect,
                             st_errbuf_t *eb)
{
    const char *name = string_field(effect, "name");
    const char *token = string_field(effect, "token");
    if (name == NULL || token == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "open_task effect lacks name or token");
    char id[37], deadline[32] = "";
    st_uuid_new(id);
    const json_t *deadline_ms = json_object_get(effect, "deadline_ms");
    if (json_is_integer(deadline_ms))
        snprintf(deadline, sizeof deadline, "%lld", (long long)json_integer_value(deadline_ms));
    char *roles = json_text(json_object_get(effect, "roles"), "[]");
    char *payload = json_text(json_object_get(effect, "payload"), "{}");
    st_err_t err = st_task_open_tx(conn, id, instance_id, name, roles, payload, token,
                                   deadline[0] ? deadline : NULL, eb);
    free(roles);
    free(payload);
    return err;
}

/* With a token file: *importer gets the principal that imported the definition
 * version `instance_id` runs ("" when none is recorded, then nothing is checked) and
 * *allowed whether that principal still holds instances:start on `definition` in the
 * current token file (none while the file has not loaded). Without one *allowed is 1. */
static st_err_t may_start_child_tx(PGconn *conn, const char *instance_id, const char *definition,
                                   char *importer, size_t len, int *allowed, st_errbuf_t *eb)
{
    const st_auth_t *auth = __atomic_load_n(&effects_auth, __ATOMIC_ACQUIRE);
    int configured = __atomic_load_n(&effects_auth_configured, __ATOMIC_ACQUIRE);
    importer[0] = '\0';
    *allowed = 1;
    if (!configured || (auth != NULL && !st_auth_enabled(auth)))
        return ST_OK;
    const char *params[] = {instance_id};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_parent_importer, 1, params, &res, eb);
    if (err != ST_OK)
        return err;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        snprintf(importer, len, "%s", PQgetvalue(res, 0, 0));
        *allowed = auth != NULL &&
                   st_auth_principal_may(auth, importer, ST_PERM_INSTANCES_START, definition);
    }
    PQclear(res);
    return ST_OK;
}

/* A child its parent's importer may no longer start: no child; the parent is woken as
 * by a failed child (CHILD_COMPLETED, status failed) with the error
 * child_start_forbidden, so the subworkflow step fails (on_failure, or the instance
 * fails), and a ChildStartForbidden notice says why. */
static st_err_t refuse_child_tx(PGconn *conn, const char *instance_id, const json_t *effect,
                                const char *definition, const char *importer, st_errbuf_t *eb)
{
    const char *perm = st_perm_name(ST_PERM_INSTANCES_START);
    char msg[600];
    snprintf(msg, sizeof msg, "the subworkflow's child was not started: %.127s, who imported "
             "this definition version, does not hold the permission %s for the definition %.150s%s",
             importer, perm, definition,
             __atomic_load_n(&effects_auth, __ATOMIC_ACQUIRE) == NULL
                 ? " (the executor has not loaded the token file STRAND_AUTH_FILE: nobody holds any)"
                 : "");
    json_t *error = json_pack("{s:s, s:s, s:s, s:s, s:s}", "code", "child_start_forbidden",
                              "message", msg, "principal", importer, "definition", definition,
                              "required_permission", perm);
    if (error == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not build the child_start_forbidden error");
    st_err_t err = st_notice_add_tx(conn, "ChildStartForbidden", instance_id, NULL, msg, error, eb);
    const char *token = string_field(effect, "token");
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_CHILD_COMPLETED, instance_id, -1);
    snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", token ? token : "");
    sig.payload = json_pack("{s:n, s:s, s:n, s:O}", "child_id", "status", "failed", "output",
                            "error", error);
    if (err == ST_OK)
        err = sig.payload == NULL ? st_err_set(eb, ST_ERR_NOMEM, "could not build a signal")
                                  : st_signal_enqueue_tx(conn, &sig, eb);
    st_signal_close(&sig);
    json_decref(error);
    return err;
}

static st_err_t start_child_tx(PGconn *conn, const char *instance_id, const json_t *effect,
                               st_errbuf_t *eb)
{
    const char *definition = string_field(effect, "definition");
    if (definition == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "start_child effect lacks a definition");
    char importer[128];
    int allowed = 1;
    st_err_t checked = may_start_child_tx(conn, instance_id, definition, importer,
                                          sizeof importer, &allowed, eb);
    if (checked != ST_OK)
        return checked;
    if (!allowed)
        return refuse_child_tx(conn, instance_id, effect, definition, importer, eb);
    char version[16] = "";
    const json_t *v = json_object_get(effect, "version");
    if (json_is_integer(v))
        snprintf(version, sizeof version, "%lld", (long long)json_integer_value(v));
    const char *version_params[] = {definition, version[0] ? version : NULL};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_child_version, 2, version_params, &res, eb);
    if (err != ST_OK)
        return err;
    if (PQntuples(res) == 0) {
        PQclear(res);
        return st_err_set(eb, ST_ERR_INVALID, "subworkflow definition %s%s%s is not imported",
                          definition, version[0] ? " v" : "", version);
    }
    snprintf(version, sizeof version, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    char id[37];
    st_uuid_new(id);
    char *input = json_text(json_object_get(effect, "input"), "{}");
    st_instance_new_t child = {.id = id, .definition_name = definition,
                               .definition_version = version,
                               .business_ref = string_field(effect, "business_ref"),
                               .input_json = input, .parent_instance_id = instance_id,
                               .parent_waiting_token = string_field(effect, "token")};
    st_signal_t start;
    st_signal_init(&start, ST_SIGNAL_START, id, 0);
    /* The child's subworkflow depth (the engine bounds it) travels in START's payload. */
    const json_t *depth = json_object_get(effect, "depth");
    if (json_is_integer(depth))
        start.payload = json_pack("{s:I}", "depth", json_integer_value(depth));
    err = st_instance_add_tx(conn, &child, eb);
    if (err == ST_OK)
        err = st_signal_enqueue_tx(conn, &start, eb);
    st_signal_close(&start);
    free(input);
    return err;
}

/* emit_work {kind, event_code, external_ref?, env_code?, payload?, consumers} */
static st_err_t emit_work_tx(PGconn *conn, const char *instance_id, const json_t *effect,
                             const char *token, st_errbuf_t *eb)
{
    const char *kind = string_field(effect, "kind");
    const char *event_code = string_field(effect, "event_code");
    if (event_code == NULL)
        event_code = string_field(effect, "event");
    st_work_event_t ev = {
        .instance_id = instance_id,
        .kind = kind ? kind : (token ? "call" : "hook"),
        .event_code = event_code ? event_code : "call",
        .external_ref = string_field(effect, "external_ref"),
        .env_code = string_field(effect, "env_code"),
        .definition = string_field(effect, "definition"),
        .definition_version = (int)json_integer_value(json_object_get(effect, "definition_version")),
        .waiting_token = token,
        .payload = json_object_get(effect, token ? "request" : "payload"),
        .consumers = json_object_get(effect, "consumers"),
    };
    char ack_guid[37];
    return st_work_emit_tx(conn, &ev, ack_guid, eb);
}

static st_err_t make_call_tx(PGconn *conn, const char *instance_id, const json_t *effect,
                             st_errbuf_t *eb)
{
    const char *transport = string_field(effect, "transport");
    const char *token = string_field(effect, "token");
    const char *key = string_field(effect, "idempotency_key");
    if (transport == NULL || token == NULL || key == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "make_call effect lacks transport, token or key");
    /* Kafka transport: a work event awaiting a processed ACK that carries the result. */
    if (strcmp(transport, "kafka") == 0)
        return emit_work_tx(conn, instance_id, effect, token, eb);
    char id[37];
    st_uuid_new(id);
    const json_t *a = json_object_get(effect, "attempt");
    const json_t *t = json_object_get(effect, "timeout_ms");
    char *request = json_text(json_object_get(effect, "request"), "{}");
    st_call_new_t call = {
        .id = id,
        .instance_id = instance_id,
        .waiting_token = token,
        .transport = transport,
        .request_json = request,
        .attempt = json_is_integer(a) ? (long long)json_integer_value(a) : 1,
        .idempotency_key = key,
        .timeout_ms = json_is_integer(t) ? (long long)json_integer_value(t) : 30000,
    };
    st_err_t err = st_call_add_tx(conn, &call, eb);
    free(request);
    return err;
}

static st_err_t notice_tx(PGconn *conn, const char *instance_id, const json_t *effect,
                          st_errbuf_t *eb)
{
    const char *code = string_field(effect, "code");
    const char *message = string_field(effect, "message");
    return st_notice_add_tx(conn, code ? code : "Notice", instance_id, NULL,
                            message ? message : "", json_object_get(effect, "detail"), eb);
}

st_err_t st_effects_apply_tx(PGconn *conn, const char *instance_id, const json_t *effects,
                             st_run_status_t status, const json_t *snapshot,
                             const st_parent_t *parent, st_errbuf_t *eb)
{
    size_t i;
    json_t *effect;
    st_err_t err = ST_OK;
    json_array_foreach(effects, i, effect) {
        const char *type = string_field(effect, "type");
        if (type == NULL)
            err = st_err_set(eb, ST_ERR_INVALID, "effect %zu has no type", i);
        else if (strcmp(type, "open_task") == 0)
            err = open_task_tx(conn, instance_id, effect, eb);
        else if (strcmp(type, "start_child") == 0)
            err = start_child_tx(conn, instance_id, effect, eb);
        else if (strcmp(type, "make_call") == 0)
            err = make_call_tx(conn, instance_id, effect, eb);
        else if (strcmp(type, "set_timer") == 0)
            err = json_is_integer(json_object_get(effect, "due_ms")) && string_field(effect, "token")
                      ? st_timer_schedule_tx(conn, instance_id, string_field(effect, "token"),
                                             string_field(effect, "kind") ? string_field(effect, "kind") : "timer",
                                             (long long)json_integer_value(json_object_get(effect, "due_ms")),
                                             NULL, eb)
                      : st_err_set(eb, ST_ERR_INVALID, "set_timer effect lacks due_ms or token");
        else if (strcmp(type, "emit_work") == 0)
            err = emit_work_tx(conn, instance_id, effect, NULL, eb);
        else if (strcmp(type, "emit_notice") == 0)
            err = notice_tx(conn, instance_id, effect, eb);
        else if (strcmp(type, "abandon") == 0)
            /* An abandoned branch's task, call or child; an ended instance ends all it
             * owns below, so its abandoned waits need nothing more. */
            err = status == ST_RUN_WAITING
                      ? st_tree_abandon_tx(conn, instance_id, string_field(effect, "token"), eb)
                      : ST_OK;
        else if (strcmp(type, "complete") == 0 || strcmp(type, "fail") == 0)
            err = ST_OK;   /* the projection records the outcome */
        else
            err = st_err_set(eb, ST_ERR_INVALID, "effect type %s is not supported yet", type);
        if (err != ST_OK)
            return err;
    }
    if (status != ST_RUN_COMPLETED && status != ST_RUN_FAILED)
        return ST_OK;
    const char *ended = status == ST_RUN_COMPLETED ? "completed" : "failed";
    /* A flow or process that never drew a waiting token (seq 0: it ran straight to its
     * end) owns no task, call or child: no round trip for it. */
    const json_t *seq = json_object_get(snapshot, "seq");
    if (!json_is_integer(seq) || json_integer_value(seq) > 0)
        err = st_tree_end_tx(conn, instance_id, ended, eb);
    if (err == ST_OK && parent != NULL)
        err = st_tree_notify_parent_tx(conn, instance_id, parent->instance_id,
                                       parent->waiting_token, ended,
                                       json_object_get(snapshot, "output"),
                                       json_object_get(snapshot, "error"), eb);
    return err;
}
