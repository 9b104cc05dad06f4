/*
 * rpc.c - a process's RPCs: POST /v1/instances/{id}/rpc/{name} calls into a running
 * process synchronously (docs/processes.md, "RPC").
 *
 * 1. Reads the instance, its pinned definition, its local attributes (from the
 *    snapshot) and its global attributes (from the user's row), with no transaction
 *    held.
 * 2. POSTs {kind: "rpc", process, rpc, process_id, instance_id, input, attributes} to
 *    the rpc's url with an Idempotency-Key (the caller's request_id, or a fresh one)
 *    and the rpc's timeout. No transaction is open during the call.
 * 3. Applies the worker's answer {output, attributes, publish: [{queue, message}],
 *    next: [state]}
 *    in one transaction: the runtime state is locked and must still be at the version
 *    read in step 1 (else 409 state_changed: nothing was applied, call again); local
 *    attributes go into the snapshot through the engine (st_snapshot_with_locals(),
 *    written by instance_store.c with state_version + 1), global ones into the user's
 *    row, each publish becomes a queue message for the instance (a named signal), and
 *    each `next` state gets a new thread (a "__start_thread_<state>" signal to the
 *    process's spawner thread for that state, compiled from the rpc's `threads`), and
 *    the call is recorded in the timeline. A failed write rolls back all of it.
 * The call blocks the API's HTTP thread for at most the rpc's timeout_ms (default
 * 5000, at most 60000): keep RPC handlers short.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "command_pool.h"
#include "strand/definition_pause.h"
#include "strand/globals.h"
#include "strand/engine.h"
#include "strand/history.h"
#include "strand/instance_store.h"
#include "strand/http.h"
#include "strand/log.h"
#include "strand/pg.h"
#include "strand/request.h"
#include "strand/signal.h"
#include "strand/util.h"
#include "strand/worker_http.h"

#define RPC_DEFAULT_TIMEOUT_MS 5000
#define RPC_MAX_PUBLISH 16

static const char *const sql_rpc_instance =
    "SELECT i.status, coalesce(i.business_ref, i.id::text), d.canonical::text,"
    " rs.state_version, rs.snapshot::text, i.definition_name, i.definition_version"
    " FROM strand.instances i JOIN strand.runtime_states rs ON rs.instance_id = i.id"
    " JOIN strand.definitions d ON d.name = i.definition_name AND d.version = i.definition_version"
    " WHERE i.id = $1::uuid";
/* A request_id makes an RPC idempotent: a repeat on the same instance and rpc answers
 * {duplicate: true} and changes nothing (the claim, per (instance, rpc, request id),
 * commits with the answer's effects; request.h). */

/* POSTs `request` to `url`. Returns the parsed 2xx JSON answer (caller decrefs), or
 * NULL with `why` filled. */
static json_t *rpc_post(const char *url, const json_t *request, const char *key,
                        const char *instance_id, long timeout_ms, char *why, size_t why_len)
{
    char *body = json_dumps(request, JSON_COMPACT);
    if (body == NULL) {
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    st_worker_reply_t reply;
    json_t *out = NULL;
    if (st_worker_call("POST", url, body, key, instance_id, NULL, timeout_ms, &reply) != ST_OK) {
        snprintf(why, why_len, "the worker did not answer: %s", reply.error);
    } else if (reply.status < 200 || reply.status > 299) {
        snprintf(why, why_len, "the worker answered HTTP %ld", reply.status);
    } else {
        json_error_t jerr;
        out = reply.body ? json_loads(reply.body, 0, &jerr) : NULL;
        if (!json_is_object(out)) {
            json_decref(out);
            out = NULL;
            snprintf(why, why_len, "the worker's answer is not a JSON object");
        }
    }
    st_worker_reply_close(&reply);
    free(body);
    return out;
}

static const json_t *find_rpc(const json_t *source, const char *name)
{
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(source, "rpcs"), i, r)
        if (json_string_value(json_object_get(r, "name")) &&
            strcmp(json_string_value(json_object_get(r, "name")), name) == 0)
            return r;
    return NULL;
}

/* Checks the worker's answer against the declaration; 502 and 0 when it is not sound.
 * Fills `locals` and `global_state` with the declared updates. */
static int check_answer(const json_t *source, const json_t *rpc, const json_t *answer, json_t *locals,
                        json_t *global_state, st_answer_t *out)
{
    const json_t *attrs = json_object_get(answer, "attributes");
    const json_t *decl = json_object_get(source, "attributes");
    const char *k;
    json_t *v;
    if (attrs != NULL && !json_is_object(attrs) && !json_is_null(attrs)) {
        st_answer_problem(out, 502, "bad_worker_answer", "attributes must be an object", "/attributes", NULL);
        return 0;
    }
    json_object_foreach((json_t *)attrs, k, v) {
        if (json_object_get(json_object_get(decl, "local"), k))
            json_object_set(locals, k, v);
        else if (json_object_get(json_object_get(decl, "global"), k))
            json_object_set(global_state, k, v);
        else {
            char msg[200];
            snprintf(msg, sizeof msg, "the worker updated an undeclared attribute '%.100s'", k);
            st_answer_problem(out, 502, "bad_worker_answer", msg, "/attributes", NULL);
            return 0;
        }
    }
    const json_t *next = json_object_get(answer, "next");
    const json_t *allowed = json_object_get(rpc, "threads");
    if (next != NULL && !json_is_array(next)) {
        st_answer_problem(out, 502, "bad_worker_answer", "next must be an array of state names", "/next", NULL);
        return 0;
    }
    size_t n;
    json_t *state;
    json_array_foreach(next, n, state) {
        int ok = 0;
        size_t j;
        json_t *a;
        json_array_foreach(allowed, j, a)
            ok |= json_is_string(state) && strcmp(json_string_value(a), json_string_value(state)) == 0;
        if (!ok || n >= RPC_MAX_PUBLISH) {
            st_answer_problem(out, 502, "bad_worker_answer",
                              "next may name only the states in the rpc's threads (at most 16)", "/next", NULL);
            return 0;
        }
    }
    const json_t *publish = json_object_get(answer, "publish");
    if (publish != NULL && (!json_is_array(publish) || json_array_size(publish) > RPC_MAX_PUBLISH)) {
        st_answer_problem(out, 502, "bad_worker_answer", "publish must be an array of at most 16 {queue, message}",
                          "/publish", NULL);
        return 0;
    }
    size_t i;
    json_array_foreach(publish, i, v) {
        const char *q = json_string_value(json_object_get(v, "queue"));
        const json_t *m = json_object_get(v, "message");
        int declared = 0;
        size_t j;
        json_t *name;
        json_array_foreach(json_object_get(source, "queues"), j, name)
            declared |= q && json_is_string(name) && strcmp(json_string_value(name), q) == 0;
        if (!declared || (m != NULL && !json_is_object(m) && !json_is_null(m))) {
            st_answer_problem(out, 502, "bad_worker_answer",
                              "each publish needs a declared queue and an object message", "/publish", NULL);
            return 0;
        }
    }
    return 1;
}

/* Step 3: applies the answer in one transaction. */
static void apply_answer(PGconn *conn, const char *id, const char *version, const json_t *canonical,
                         const char *process_id, const json_t *globals_before, const json_t *answer,
                         const char *rpc_name, const json_t *input, const char *request_id,
                         st_answer_t *out)
{
    const json_t *source = json_object_get(canonical, "source");
    json_t *locals = json_object(), *global_state = json_deep_copy(globals_before);
    if (global_state == NULL)
        global_state = json_object();
    if (!check_answer(source, find_rpc(source, rpc_name), answer, locals, global_state, out)) {
        json_decref(locals);
        json_decref(global_state);
        return;
    }
    st_errbuf_t eb;
    int found = 0;
    long long locked_version = 0;
    json_t *snapshot = NULL;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_runtime_state_lock_tx(conn, id, &found, &locked_version, &snapshot, &eb);
    if (err == ST_OK && request_id != NULL) {
        int fresh = 0;
        err = st_request_claim_tx(conn, ST_REQUEST_RPC, id, rpc_name, request_id, id, &fresh,
                                  NULL, &eb);
        if (err == ST_OK && !fresh) {
            st_answer_set(out, 200, json_pack("{s:s, s:s, s:b}", "instance_id", id, "rpc", rpc_name,
                                              "duplicate", 1));
            goto done;
        }
    }
    if (err == ST_OK && (!found || locked_version != atoll(version))) {
        st_answer_problem(out, 409, "state_changed",
                          "the process moved on during the rpc; nothing was applied, call it again", NULL, NULL);
        goto done;
    }
    /* A version paused during the call: nothing is applied (the lock holds off a resume). */
    int version_paused = 0;
    if (err == ST_OK)
        err = st_definition_pause_lock_tx(conn, json_string_value(json_object_get(canonical, "name")),
                                          (int)json_integer_value(json_object_get(canonical, "version")),
                                          &version_paused, &eb);
    if (err == ST_OK && version_paused) {
        st_answer_problem(out, 409, "definition_version_paused",
                          "the definition version was paused during the rpc; nothing was applied",
                          NULL, NULL);
        goto done;
    }
    const json_t *gdecl = json_object_get(canonical, "globals");
    if (err == ST_OK && gdecl != NULL) {
        /* Written against the values the worker saw: the row is locked from here on. */
        json_t *now = NULL;
        err = st_globals_load_tx(conn, gdecl, process_id, &now, &eb);
        if (err == ST_OK && !json_equal(now, globals_before)) {
            st_answer_problem(out, 409, "state_changed",
                              "the global attributes changed during the rpc; nothing was applied, call it again",
                              NULL, NULL);
            json_decref(now);
            goto done;
        }
        json_decref(now);
        if (err == ST_OK)
            err = st_globals_store_tx(conn, gdecl, process_id, globals_before, global_state, &eb);
    }
    if (err == ST_OK && json_object_size(locals) > 0) {
        /* the engine writes the locals into its snapshot (engine.h) */
        json_t *changed = st_snapshot_with_locals(snapshot, locals);
        err = st_runtime_state_put_tx(conn, id, changed, &eb);
        json_decref(changed);
    }
    size_t i;
    json_t *p;
    json_t *signal_ids = json_array();
    json_array_foreach(json_object_get(answer, "publish"), i, p) {
        if (err != ST_OK)
            break;
        st_signal_t sig;
        st_signal_init(&sig, ST_SIGNAL_EXTERNAL, id, -1);
        snprintf(sig.name, sizeof sig.name, "%s", json_string_value(json_object_get(p, "queue")));
        const json_t *m = json_object_get(p, "message");
        sig.payload = json_is_object(m) ? json_deep_copy(m) : json_object();
        err = st_signal_enqueue_tx(conn, &sig, &eb);
        json_array_append_new(signal_ids, json_string(sig.signal_id));
        st_signal_close(&sig);
    }
    /* new threads: the process's spawner thread for each state starts one */
    json_array_foreach(json_object_get(answer, "next"), i, p) {
        if (err != ST_OK)
            break;
        st_signal_t sig;
        st_signal_init(&sig, ST_SIGNAL_EXTERNAL, id, -1);
        snprintf(sig.name, sizeof sig.name, "__start_thread_%s", json_string_value(p));
        sig.payload = json_pack("{s:s}", "rpc", rpc_name);
        err = st_signal_enqueue_tx(conn, &sig, &eb);
        st_signal_close(&sig);
    }
    json_t *detail = json_pack("{s:s, s:O, s:O, s:O, s:o}", "rpc", rpc_name, "input", input ? input : json_null(),
                               "output", json_object_get(answer, "output") ? json_object_get(answer, "output") : json_null(),
                               "attributes", json_object_get(answer, "attributes") ? json_object_get(answer, "attributes") : json_null(),
                               "published", signal_ids);
    if (json_object_get(answer, "next"))
        json_object_set(detail, "threads", json_object_get(answer, "next"));
    if (err == ST_OK)
        err = st_history_add_tx(conn, id, "rpc", detail, &eb);
    json_decref(detail);
    if (err == ST_OK)
        err = st_instance_touch_tx(conn, id, &eb);
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err == ST_OK) {
        const json_t *output = json_object_get(answer, "output");
        st_answer_set(out, 200, json_pack("{s:s, s:s, s:O}", "instance_id", id, "rpc", rpc_name, "output",
                                          output ? output : json_null()));
    } else if (err == ST_ERR_INVALID) {
        /* the user's table refused the write (a CHECK constraint, a trigger) */
        st_answer_problem(out, 422, "attribute_write_failed", eb.msg, "/attributes", NULL);
    }
done:
    if (out->status == 0)
        st_answer_error(out, err, &eb);
    st_pg_rollback(conn);
    json_decref(snapshot);
    json_decref(locals);
    json_decref(global_state);
}

/* POST /v1/instances/{id}/rpc/{name} {input?, request_id?} */
void st_cmd_rpc(PGconn *conn, const st_principal_t *who, const char *id, const char *name,
                const json_t *args, st_answer_t *out)
{
    const json_t *input = json_object_get(args, "input");
    const json_t *rid = json_object_get(args, "request_id");
    if (!st_uuid_valid(id)) {
        st_answer_problem(out, 400, "invalid_id", "the instance id must be a UUID", "/id", NULL);
        return;
    }
    if (rid != NULL && !json_is_null(rid) &&
        (!json_is_string(rid) || json_string_length(rid) == 0 || json_string_length(rid) > 200)) {
        st_answer_problem(out, 400, "invalid_field", "request_id must be a non-empty string of at most 200 characters",
                          "/request_id", NULL);
        return;
    }
    st_errbuf_t eb;
    PGresult *res = NULL;
    const char *params[] = {id};
    st_err_t err = st_pg_exec(conn, sql_rpc_instance, 1, params, &res, &eb);
    if (err != ST_OK) {
        st_answer_error(out, err, &eb);
        return;
    }
    json_t *canonical = NULL, *snapshot = NULL, *globals = NULL, *answer = NULL;
    json_error_t jerr;
    if (PQntuples(res) == 0) {
        st_answer_problem(out, 404, "instance_not_found", "no such instance", NULL, NULL);
        goto done;
    }
    if (json_is_string(rid)) {
        /* a repeat of an applied call, whatever the process did since */
        int repeat = 0;
        if ((err = st_request_find(conn, ST_REQUEST_RPC, id, name, json_string_value(rid), &repeat,
                                   NULL, &eb)) != ST_OK) {
            st_answer_error(out, err, &eb);
            goto done;
        }
        if (repeat) {
            st_answer_set(out, 200, json_pack("{s:s, s:s, s:b}", "instance_id", id, "rpc", name, "duplicate", 1));
            goto done;
        }
    }
    const char *status = PQgetvalue(res, 0, 0);
    canonical = json_loads(PQgetvalue(res, 0, 2), 0, &jerr);
    const char *kind = json_string_value(json_object_get(canonical, "kind"));
    const json_t *source = json_object_get(canonical, "source");
    const json_t *rpc = find_rpc(source, name);
    if (kind == NULL || strcmp(kind, "process") != 0 || rpc == NULL) {
        st_answer_problem(out, 404, "rpc_not_found", "the instance's definition declares no such rpc", "/name", NULL);
        goto done;
    }
    if (strcmp(status, "pending") == 0 || PQgetisnull(res, 0, 4)) {
        st_answer_problem(out, 409, "instance_not_started", "the process has not started yet; call again", NULL, NULL);
        goto done;
    }
    if (strcmp(status, "paused") == 0) {
        st_answer_problem(out, 409, "instance_paused", "the instance is paused: resume it first",
                          NULL, NULL);
        goto done;
    }
    if (strcmp(status, "running") != 0 && strcmp(status, "waiting") != 0) {
        st_answer_problem(out, 409, "instance_ended", "the instance has already ended", NULL, NULL);
        goto done;
    }
    int version_paused = 0;
    if ((err = st_definition_pause_get(conn, PQgetvalue(res, 0, 5), atoi(PQgetvalue(res, 0, 6)),
                                       &version_paused, &eb)) != ST_OK) {
        st_answer_error(out, err, &eb);
        goto done;
    }
    if (version_paused) {   /* an rpc runs the process now: it cannot be kept for later */
        st_answer_problem(out, 409, "definition_version_paused",
                          "the instance's definition version is paused: resume it first", NULL,
                          NULL);
        goto done;
    }
    const char *url = json_string_value(json_object_get(rpc, "url"));
    if (url == NULL) {
        st_answer_problem(out, 409, "rpc_without_url", "the rpc declares no worker url", "/name", NULL);
        goto done;
    }
    snapshot = json_loads(PQgetvalue(res, 0, 4), 0, &jerr);
    const char *process_id = PQgetvalue(res, 0, 1);
    const json_t *gdecl = json_object_get(canonical, "globals");
    if (gdecl != NULL && (err = st_globals_load_tx(conn, gdecl, process_id, &globals, &eb)) != ST_OK) {
        st_answer_error(out, err, &eb);
        goto done;
    }
    /* The attributes the worker sees: locals from the snapshot, globals from the row. */
    json_t *attributes = json_object();
    const char *an;
    json_t *decl;
    json_object_foreach(json_object_get(json_object_get(source, "attributes"), "local"), an, decl) {
        json_t *v = json_object_get(json_object_get(snapshot, "state"), an);
        json_object_set(attributes, an, v ? v : json_null());
    }
    if (globals != NULL)
        json_object_update(attributes, globals);
    char key[300];
    if (json_is_string(rid)) {
        snprintf(key, sizeof key, "%s:rpc:%s:%s", id, name, json_string_value(rid));
    } else {
        char uuid[37];
        st_uuid_new(uuid);
        snprintf(key, sizeof key, "%s:rpc:%s:%s", id, name, uuid);
    }
    json_t *request = json_pack("{s:s, s:O, s:s, s:s, s:s, s:s, s:O, s:o}", "kind", "rpc", "process",
                                json_object_get(canonical, "name"), "rpc", name, "process_id", process_id,
                                "instance_id", id, "idempotency_key", key, "input", input ? input : json_null(),
                                "attributes", attributes);
    const json_t *t = json_object_get(rpc, "timeout_ms");
    char why[300];
    answer = rpc_post(url, request, key, id, json_is_integer(t) ? (long)json_integer_value(t) : RPC_DEFAULT_TIMEOUT_MS,
                      why, sizeof why);
    json_decref(request);
    if (answer == NULL) {
        st_answer_problem(out, 502, "worker_failed", why, NULL, NULL);
        goto done;
    }
    apply_answer(conn, id, PQgetvalue(res, 0, 3), canonical, process_id, globals, answer, name, input,
                 json_string_value(rid), out);

done:
    /* A refused or failed call on a live process is in the timeline too. */
    if (out->status >= 400 && canonical != NULL && out->body != NULL) {
        json_t *detail = json_pack("{s:s, s:i, s:O}", "rpc", name, "status", out->status, "problem", out->body);
        st_errbuf_t heb;
        if (st_history_add_tx(conn, id, "rpc_failed", detail, &heb) != ST_OK)
            st_log_warn("could not record a failed rpc", "%s", heb.msg);
        json_decref(detail);
    }
    PQclear(res);
    json_decref(canonical);
    json_decref(snapshot);
    json_decref(globals);
    json_decref(answer);
}

static void handle_rpc(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    json_t *args = st_http_body_object(req);
    if (args == NULL)
        return;
    /* On a worker thread: the call to the process's worker may take its whole timeout. */
    st_command_pool_submit(api->pool, req, NULL, st_cmd_rpc, &api->current,
                           st_http_param(req, "id"), st_http_param(req, "name"), args, NULL);
}

void st_api_rpc_register(st_api_t *api)
{
    st_http_route(api->svc->http, "POST", "/v1/instances/{id}/rpc/{name}", handle_rpc, api);
}
