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

static st_err_t start_child_tx(PGconn *conn, const char *instance_id, const json_t *effect,
                               st_errbuf_t *eb)
{
    const char *definition = string_field(effect, "definition");
    if (definition == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "start_child effect lacks a definition");
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
