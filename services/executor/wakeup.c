/* wakeup.c - one wake-up, in its own transaction or in the caller's (see wakeup.h). */
#include "wakeup.h"

#include "effects.h"
#include "pause.h"
#include "signal_buffer.h"
#include "verify.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/audit.h"
#include "strand/dedup.h"
#include "strand/definition_pause.h"
#include "strand/engine.h"
#include "strand/globals.h"
#include "strand/history.h"
#include "strand/instance_store.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/kafka.h"
#include "strand/notice.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/snapshot_log.h"
#include "strand/tree.h"
#include "strand/util.h"

/* ---- the wake-up transaction --------------------------------------------------- */

const char *st_wake_outcome_name(st_wake_outcome_t outcome)
{
    switch (outcome) {
    case ST_WAKE_APPLIED: return "applied";
    case ST_WAKE_DUPLICATE: return "duplicate";
    case ST_WAKE_STALE: return "stale";
    case ST_WAKE_UNKNOWN: return "unknown_instance";
    case ST_WAKE_BUFFERED: return "buffered";
    }
    return "unknown";
}

/* Dedup and state load in one round trip: records the signal id (a duplicate inserts
 * nothing) and locks and reads the instance's runtime state; column 7 is 1 for a
 * signal seen for the first time, 8 and 9 the parent (a child's), 10 whether its
 * definition version is paused (pause.h). No row: the instance does not exist. */
static const char *const sql_dedup_and_lock =
    "WITH p AS (" ST_DEDUP_RECORD_SQL("$1", "$2::uuid") ")"
    " SELECT rs.state_version, rs.snapshot::text, i.definition_name, i.definition_version,"
    " i.input::text, i.status, coalesce(i.business_ref, i.id::text), (SELECT count(*) FROM p),"
    " i.parent_instance_id, i.parent_waiting_token,"
    " EXISTS (SELECT 1 FROM strand.definition_pauses dp WHERE dp.definition_name = i.definition_name"
    "   AND dp.definition_version = i.definition_version)"
    " FROM strand.runtime_states rs JOIN strand.instances i ON i.id = rs.instance_id"
    " WHERE rs.instance_id = $2::uuid FOR UPDATE OF rs";
/* Queues a timeline entry (strand.history's owner: history.c); steals `detail`. */
static st_err_t history_add_tx(PGconn *conn, const char *instance_id, const char *kind,
                               json_t *detail, st_errbuf_t *eb)
{
    st_err_t err = st_history_queue_tx(conn, instance_id, kind, detail, eb);
    json_decref(detail);
    return err;
}

/* Records a dropped signal: outcome on the dedup row plus a notice. */
static st_err_t drop_tx(PGconn *conn, const st_signal_t *sig, st_wake_outcome_t outcome,
                        const char *code, const char *why, st_errbuf_t *eb)
{
    st_err_t err = st_dedup_set_outcome_tx(conn, sig->signal_id, st_wake_outcome_name(outcome),
                                           eb);
    if (err != ST_OK)
        return err;
    json_t *detail = json_pack("{s:s, s:I}", "signal_type", st_signal_type_name(sig->type),
                               "expected_version", (json_int_t)sig->expected_version);
    err = st_notice_add_tx(conn, code, sig->instance_id, sig->signal_id, why, detail, eb);
    json_decref(detail);
    return err;
}

static const char *status_name(st_run_status_t status)
{
    switch (status) {
    case ST_RUN_WAITING: return "waiting";
    case ST_RUN_COMPLETED: return "completed";
    case ST_RUN_FAILED: return "failed";
    }
    return "running";
}

/* Builds the interpreter's event from a signal. Caller decrefs. */
static json_t *event_from_signal(const st_signal_t *sig, const char *input_text)
{
    json_t *event = json_pack("{s:s, s:s, s:o}", "type", st_signal_type_name(sig->type),
                              "signal_id", sig->signal_id, "payload",
                              sig->payload ? json_incref(sig->payload) : json_object());
    if (sig->waiting_token[0])
        json_object_set_new(event, "token", json_string(sig->waiting_token));
    if (sig->name[0])
        json_object_set_new(event, "name", json_string(sig->name));
    if (sig->type == ST_SIGNAL_START) {
        json_error_t jerr;
        json_t *input = json_loads(input_text, 0, &jerr);
        json_object_set_new(event, "input", input ? input : json_object());
    }
    return event;
}

/* Writes the run's result: snapshot, projection, history, and its effects. */
static st_err_t persist_tx(PGconn *conn, const st_signal_t *sig, const char *node_id,
                           const char *old_version, const st_parent_t *parent,
                           const st_run_result_t *run, st_errbuf_t *eb)
{
    const json_t *waiting = json_object_get(run->snapshot, "waiting");
    const char *waiting_kind = json_string_value(json_object_get(waiting, "kind"));
    const char *waiting_token = json_string_value(json_object_get(waiting, "token"));
    char until[32] = "";
    const json_t *until_ms = json_object_get(waiting, "until_ms");
    if (json_is_integer(until_ms))
        snprintf(until, sizeof until, "%lld", (long long)json_integer_value(until_ms));
    char *snapshot = json_dumps(run->snapshot, JSON_COMPACT);
    if (snapshot == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode the snapshot");
    const json_t *output = json_object_get(run->snapshot, "output");
    const json_t *error = json_object_get(run->snapshot, "error");
    char *output_text = output && !json_is_null(output) ? json_dumps(output, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    char *error_text = error && !json_is_null(error) ? json_dumps(error, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_t *effect_types = json_array();
    size_t i;
    json_t *effect;
    json_array_foreach(run->effects, i, effect)
        json_array_append(effect_types, json_object_get(effect, "type"));
    json_t *detail = json_pack("{s:s, s:s, s:s, s:o, s:I}", "signal_id", sig->signal_id, "signal_type",
                               st_signal_type_name(sig->type), "status", status_name(run->status),
                               "effects", effect_types, "state_version",
                               (json_int_t)(atoll(old_version) + 1));
    char *detail_text = json_dumps(detail, JSON_COMPACT);
    json_decref(detail);
    st_run_write_t write = {sig->instance_id, old_version, snapshot, waiting_kind,
                            waiting_token, until[0] ? until : NULL, sig->signal_id, node_id,
                            status_name(run->status), output_text, error_text, detail_text};
    st_err_t err = detail_text == NULL
                       ? st_err_set(eb, ST_ERR_NOMEM, "could not encode history")
                       : st_runtime_state_queue_run_tx(conn, &write, eb);
    /* ---- pause ---- the snapshot is kept by the version it produced, for a rewind (an
     * ended one never is: nothing can continue from it) */
    if (err == ST_OK && run->status == ST_RUN_WAITING)
        err = st_snapshot_log_keep_tx(conn, sig->instance_id, atoll(old_version) + 1, snapshot, eb);
    free(snapshot);
    free(output_text);
    free(error_text);
    free(detail_text);
    if (err != ST_OK)
        return err;
    return st_effects_apply_tx(conn, sig->instance_id, run->effects, run->status, run->snapshot,
                               parent, eb);
}

/* An operator's cancel or terminate (its payload names the "actor": the API put the
 * principal there) gets its audit row "applied" or "rejected" where the executor
 * decides; a parent's cancel of its child is no operator action and gets none. */
static st_err_t audit_control_tx(PGconn *conn, const st_signal_t *sig, const char *outcome,
                                 const char *old_status, long long old_version,
                                 const char *new_status, st_errbuf_t *eb)
{
    const char *actor = json_string_value(json_object_get(sig->payload, "actor"));
    if (actor == NULL || (sig->type != ST_SIGNAL_CANCEL && sig->type != ST_SIGNAL_TERMINATE))
        return ST_OK;
    json_t *before = json_pack("{s:s, s:I}", "status", old_status, "state_version",
                               (json_int_t)old_version);
    json_t *after = new_status ? json_pack("{s:s, s:I}", "status", new_status, "state_version",
                                           (json_int_t)old_version + 1)
                               : NULL;
    const json_t *reason = json_object_get(sig->payload, "reason");
    json_t *detail = json_pack("{s:s, s:O}", "signal_id", sig->signal_id, "reason",
                               reason ? reason : json_null());
    st_audit_entry_t entry = {actor, sig->type == ST_SIGNAL_CANCEL ? "cancel" : "terminate",
                              outcome, sig->instance_id, NULL, before, after, detail};
    st_err_t err = st_audit_add_tx(conn, &entry, eb);
    json_decref(before);
    json_decref(after);
    json_decref(detail);
    return err;
}

/* CANCEL and TERMINATE end the instance where it stands, without running steps. The
 * end reaches everything it owns (strand/tree.h): tasks, pending calls, children. A
 * child's end wakes its parent as a failure (status cancelled or terminated), unless
 * the parent sent the signal itself: it has moved on or ended. Later signals find the
 * instance ended (stale). */
static st_err_t end_instance_tx(PGconn *conn, const st_signal_t *sig, const char *node_id,
                                const st_parent_t *parent, const char *old_status,
                                long long old_version, const char *snapshot_text,
                                st_errbuf_t *eb)
{
    const char *status = sig->type == ST_SIGNAL_CANCEL ? "cancelled" : "terminated";
    const json_t *reason = sig->payload ? json_object_get(sig->payload, "reason") : NULL;
    json_t *error = json_pack("{s:s, s:O}", "code", status, "reason",
                              reason ? reason : json_null());
    char *error_text = json_dumps(error, JSON_COMPACT);
    int by_parent = parent != NULL && st_tree_from_parent(sig, parent->waiting_token);
    /* the stored snapshot's status set by the engine (NULL before START ran) */
    json_t *snapshot = snapshot_text ? json_loads(snapshot_text, 0, NULL) : NULL;
    json_t *ended = st_snapshot_with_status(snapshot, status);
    st_err_t err = snapshot_text != NULL && snapshot == NULL
                       ? st_err_set(eb, ST_ERR_INTERNAL, "stored snapshot is not JSON")
                       : st_runtime_state_end_tx(conn, sig->instance_id, ended, sig->signal_id,
                                                 node_id, eb);
    json_decref(snapshot);
    json_decref(ended);
    if (err == ST_OK)
        err = st_instance_end_tx(conn, sig->instance_id, status, error_text, eb);
    if (err == ST_OK)
        err = st_tree_end_tx(conn, sig->instance_id, status, eb);
    if (err == ST_OK && parent != NULL && !by_parent)
        err = st_tree_notify_parent_tx(conn, sig->instance_id, parent->instance_id,
                                       parent->waiting_token, status, NULL, error, eb);
    free(error_text);
    if (err == ST_OK) {
        json_t *detail = json_pack("{s:s, s:o}", "signal_id", sig->signal_id, "error", error);
        if (by_parent)
            json_object_set_new(detail, "by_parent", json_string(parent->instance_id));
        err = history_add_tx(conn, sig->instance_id, status, detail, eb);
    } else {
        json_decref(error);
    }
    if (err == ST_OK)
        err = audit_control_tx(conn, sig, "applied", old_status, old_version, status, eb);
    return err;
}

#define MAX_BUFFERED_PER_WAKEUP 100

/* While the run left the instance waiting for a named signal that is buffered, feeds
 * it in (same transaction), accumulating effects. */
static st_err_t drain_buffer_tx(PGconn *conn, const st_defn_t *defn, const st_signal_t *sig,
                                st_run_budget_t *budget, st_run_result_t *run, st_errbuf_t *eb)
{
    for (int n = 0; n < MAX_BUFFERED_PER_WAKEUP && run->status == ST_RUN_WAITING; n++) {
        /* Every name any thread waits for: a process may wait on several queues. */
        json_t *names = st_snapshot_waiting_signals(run->snapshot);
        char *names_text = json_array_size(names) ? json_dumps(names, JSON_COMPACT) : NULL;
        json_decref(names);
        if (names_text == NULL)
            return ST_OK;
        PGresult *res = NULL;
        st_err_t err = st_signal_buffer_take_tx(conn, sig->instance_id, names_text, &res, eb);
        free(names_text);
        if (err != ST_OK)
            return err;
        if (PQntuples(res) == 0) {
            PQclear(res);
            return ST_OK;
        }
        json_error_t jerr;
        json_t *payload = json_loads(PQgetvalue(res, 0, 1), 0, &jerr);
        json_t *event = json_pack("{s:s, s:s, s:s, s:o}", "type", "SIGNAL", "name",
                                  PQgetvalue(res, 0, 2), "signal_id", PQgetvalue(res, 0, 0), "payload",
                                  payload ? payload : json_object());
        PQclear(res);
        st_run_result_t next = {0};
        err = st_interp_run_budget(defn, run->snapshot, event, sig->instance_id, st_now_ms(), budget,
                                   &next, eb);
        /* A process's timeline records a buffered queue message when it is consumed. */
        if (err == ST_OK && strcmp(st_defn_kind(defn), "process") == 0)
            err = history_add_tx(conn, sig->instance_id, "command_result",
                                 json_pack("{s:O, s:s, s:O, s:O, s:b}", "signal_id",
                                           json_object_get(event, "signal_id"), "command", "queue", "queue",
                                           json_object_get(event, "name"), "message",
                                           json_object_get(event, "payload"), "buffered", 1),
                                 eb);
        json_decref(event);
        if (err != ST_OK) {
            st_run_result_close(&next);
            return err;
        }
        json_array_extend(run->effects, next.effects);
        json_decref(run->snapshot);
        json_decref(next.effects);
        run->snapshot = next.snapshot;
        run->status = next.status;
        json_decref(run->waiting_in);
        run->waiting_in = next.waiting_in;
    }
    return ST_OK;
}

/* A process's timeline (docs/processes.md): what the wake-up meant in process terms. A
 * command result (a queue message or a timer), a state's execute answer (the decision,
 * or a failed attempt), and the states the threads now wait in. */
static st_err_t process_history_tx(PGconn *conn, const st_signal_t *sig, const st_run_result_t *run,
                                   st_errbuf_t *eb)
{
    const char *kind = NULL;
    json_t *detail = json_pack("{s:s}", "signal_id", sig->signal_id);
    const json_t *payload = sig->payload;
    if (sig->type == ST_SIGNAL_EXTERNAL) {
        kind = "command_result";
        json_object_set_new(detail, "command", json_string("queue"));
        json_object_set_new(detail, "queue", json_string(sig->name));
        json_object_set(detail, "message", payload ? (json_t *)payload : json_null());
    } else if (sig->type == ST_SIGNAL_TIMER_DUE) {
        kind = "command_result";
        json_object_set_new(detail, "command", json_string("timer"));
    } else if (sig->type == ST_SIGNAL_CALL_RESULT) {
        const json_t *result = json_object_get(payload, "result");
        int ok = json_is_true(json_object_get(result, "ok"));
        /* a waitUntil call (the worker chose the commands) or an execute */
        int wait_until = 0;
        const char *call_id = json_string_value(json_object_get(payload, "call_id"));
        if (call_id != NULL) {
            static const char *const sql_call_kind =
                "SELECT request->'body'->>'kind' FROM strand.calls WHERE id = $1::uuid";
            const char *params[] = {call_id};
            PGresult *res = NULL;
            st_err_t err = st_pg_exec(conn, sql_call_kind, 1, params, &res, eb);
            if (err != ST_OK) {
                json_decref(detail);
                return err;
            }
            wait_until = PQntuples(res) > 0 && strcmp(PQgetvalue(res, 0, 0), "wait_until") == 0;
            PQclear(res);
        }
        kind = wait_until ? (ok ? "wait_until_answered" : "wait_until_failed")
                          : (ok ? "state_executed" : "state_execute_failed");
        json_object_set(detail, "attempt", json_object_get(payload, "attempt"));
        json_object_set(detail, !ok ? "result" : wait_until ? "commands" : "decision",
                        ok ? json_object_get(result, "body") : (json_t *)result);
    } else if (sig->type == ST_SIGNAL_START) {
        kind = "process_started";
    }
    if (kind == NULL) {
        json_decref(detail);
        return ST_OK;
    }
    /* The state each live thread stands in: the engine's run result says (engine.h). */
    json_object_set_new(detail, "waiting_in",
                        run->waiting_in ? json_incref(run->waiting_in) : json_array());
    json_object_set_new(detail, "status", json_string(status_name(run->status)));
    return history_add_tx(conn, sig->instance_id, kind, detail, eb);
}

/* ---- repair: an operator's verb (SIGNAL_TYPE_REPAIR, services/api/repair.c) ---------
 *
 * Applied under the instance lock like any wake-up, and only with Strand's record of
 * the signal (verify.h). The version the operator saw must still be the current one,
 * so a verb racing a wake-up (or a second verb) applies at most once; a stale verb is
 * dropped with a StaleSignal notice and an audit row "rejected". Unlike every other
 * signal, retry and patch_variables also apply to a failed instance. */

static const char *const sql_dead_letter_of_last_wakeup =
    "SELECT last_error->>'dead_letter_id' FROM strand.runtime_states"
    " WHERE instance_id = $1::uuid AND last_error ? 'dead_letter_id'";

/* Writes the verb's audit row (`before` and `after` borrowed, may be NULL). */
static st_err_t repair_audit_tx(PGconn *conn, const st_signal_t *sig, const char *outcome,
                                const json_t *before, const json_t *after, const char *why,
                                st_errbuf_t *eb)
{
    json_t *detail = json_pack("{s:s, s:I}", "signal_id", sig->signal_id, "expected_version",
                               (json_int_t)sig->expected_version);
    if (why != NULL)
        json_object_set_new(detail, "why", json_string(why));
    json_object_set(detail, "reason", json_object_get(sig->payload, "reason") ?: json_null());
    const char *verb = json_string_value(json_object_get(sig->payload, "verb"));
    st_audit_entry_t entry = {.actor = json_string_value(json_object_get(sig->payload, "actor")),
                              .action = verb ? verb : "repair", .outcome = outcome,
                              .instance_id = sig->instance_id, .before = before, .after = after,
                              .detail = detail};
    st_err_t err = st_audit_add_tx(conn, &entry, eb);
    json_decref(detail);
    return err;
}

/* Retry of a live instance whose last wake-up was dead-lettered: that letter's signal
 * goes back on the signals topic (the letter marked replayed). *why is set when there
 * is none left to deliver. */
static st_err_t redeliver_tx(PGconn *conn, const st_signal_t *sig, json_t *after, const char **why,
                             st_errbuf_t *eb)
{
    const char *params[] = {sig->instance_id};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_dead_letter_of_last_wakeup, 1, params, &res, eb);
    if (err != ST_OK)
        return err;
    int found = 0;
    st_dead_letter_t letter = {0};
    char id[32] = "";
    if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
        snprintf(id, sizeof id, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    if (id[0] && strspn(id, "0123456789") == strlen(id))
        err = st_dead_letter_settle_tx(conn, id, "replayed", &found, &letter, eb);
    if (err == ST_OK && !found)
        *why = "the instance has not failed and no open dead letter holds its last wake-up";
    if (err == ST_OK && found) {
        err = st_outbox_add_tx(conn, ST_TOPIC_SIGNALS, sig->instance_id, letter.payload, letter.len, eb);
        json_object_set_new(after, "redelivered_dead_letter_id", json_integer(atoll(id)));
    }
    free(letter.payload);
    return err;
}

static st_err_t repair_tx(PGconn *conn, st_defcache_t *cache, const char *node_id,
                          const st_signal_t *sig, PGresult *state, st_wake_outcome_t *outcome,
                          st_errbuf_t *eb)
{
    const char *version = PQgetvalue(state, 0, 0);
    const char *status = PQgetvalue(state, 0, 5);
    long long current = atoll(version);
    st_repair_verb_t verb = st_repair_verb_parse(json_string_value(json_object_get(sig->payload, "verb")));
    int failed = strcmp(status, "failed") == 0;
    int ended = failed || strcmp(status, "completed") == 0 || strcmp(status, "cancelled") == 0 ||
                strcmp(status, "terminated") == 0;
    /* A paused instance takes the verbs that run no step (patch_variables: it stays
     * paused; fail: it ends, as with cancel); the others would run it while paused. */
    int paused = strcmp(status, "paused") == 0;
    /* What only the API checked: a forged message is refused here (verify.h). */
    st_err_t err = st_verify_signal_tx(conn, sig, eb);
    if (err != ST_OK)
        return err;
    /* A paused definition version keeps the verbs that would run steps, as it keeps its
     * instances' wake-ups: they are sent again, once, when the version resumes (pause.h).
     * patch_variables and fail run no step and apply at once, as on a paused instance. */
    if (!paused && verb != ST_REPAIR_PATCH_VARIABLES && verb != ST_REPAIR_FAIL &&
        strcmp(PQgetvalue(state, 0, 10), "t") == 0) {
        int version_paused = 0;
        err = st_definition_pause_lock_tx(conn, PQgetvalue(state, 0, 2),
                                          atoi(PQgetvalue(state, 0, 3)), &version_paused, eb);
        if (err != ST_OK)
            return err;
        if (version_paused) {
            *outcome = ST_WAKE_BUFFERED;
            return st_signal_buffer_hold_tx(conn, sig, eb);
        }
    }
    json_t *before = json_pack("{s:I, s:s}", "state_version", (json_int_t)current, "status", status);
    json_t *after = json_pack("{s:I}", "state_version", (json_int_t)current);
    json_t *snapshot = NULL, *globals = NULL;
    st_run_result_t run = {0};
    st_errbuf_t why_eb = {0};
    const char *why = NULL;
    if (verb == 0)
        why = "the repair signal names no known verb";
    else if (sig->expected_version != current)
        why = "the signal expected another state version";
    else if (ended && !(failed && (verb == ST_REPAIR_RETRY || verb == ST_REPAIR_PATCH_VARIABLES)))
        why = "the instance has already ended";
    else if (paused && verb != ST_REPAIR_PATCH_VARIABLES && verb != ST_REPAIR_FAIL)
        why = "the instance is paused: resume it first";
    if (why == NULL && verb == ST_REPAIR_RETRY && !failed) {
        err = redeliver_tx(conn, sig, after, &why, eb);
        if (err == ST_OK && why == NULL) {
            json_object_set_new(after, "status", json_string(status));
            err = repair_audit_tx(conn, sig, "applied", before, after, NULL, eb);
            if (err == ST_OK)
                err = history_add_tx(conn, sig->instance_id, "repair",
                                     json_pack("{s:s, s:s, s:O, s:O, s:O}", "signal_id", sig->signal_id,
                                               "verb", "retry", "actor",
                                               json_object_get(sig->payload, "actor") ?: json_null(),
                                               "reason", json_object_get(sig->payload, "reason") ?: json_null(),
                                               "redelivered_dead_letter_id",
                                               json_object_get(after, "redelivered_dead_letter_id")),
                                     eb);
            *outcome = ST_WAKE_APPLIED;
            goto done;
        }
    }
    const st_defn_t *defn = NULL;
    const json_t *globals_decl = NULL;
    if (err == ST_OK && why == NULL && PQgetisnull(state, 0, 1))
        why = "the instance has not started yet";   /* (its START may be retried, above) */
    if (err == ST_OK && why == NULL) {
        json_error_t jerr;
        err = st_defcache_get_tx(cache, conn, PQgetvalue(state, 0, 2), atoi(PQgetvalue(state, 0, 3)), &defn, eb);
        if (err == ST_OK && (snapshot = json_loads(PQgetvalue(state, 0, 1), 0, &jerr)) == NULL)
            err = st_err_set(eb, ST_ERR_INTERNAL, "stored snapshot is not JSON: %s", jerr.text);
    }
    if (err == ST_OK && why == NULL) {
        /* A process's global attributes are variables too: loaded before, stored after. */
        globals_decl = json_object_get(st_defn_canonical(defn), "globals");
        if (globals_decl != NULL &&
            (err = st_globals_load_tx(conn, globals_decl, PQgetvalue(state, 0, 6), &globals, eb)) == ST_OK &&
            json_is_object(json_object_get(snapshot, "state")))
            json_object_update(json_object_get(snapshot, "state"), globals);
    }
    if (err == ST_OK && why == NULL) {
        st_run_budget_t budget;
        st_run_budget_init(&budget);
        st_repair_t repair = {.verb = verb,
                              .step = json_string_value(json_object_get(sig->payload, "step")),
                              .error = json_object_get(sig->payload, "error"),
                              .patch = json_object_get(sig->payload, "patch"),
                              .payload = json_object_get(sig->payload, "payload")};
        st_err_t rerr = st_repair_run(defn, snapshot, &repair, sig->instance_id, st_now_ms(), &budget, &run,
                                      &why_eb);
        if (rerr == ST_ERR_INVALID || rerr == ST_ERR_CONFLICT || rerr == ST_ERR_LIMIT)
            why = why_eb.msg;
        else if (rerr != ST_OK)
            err = st_err_set(eb, rerr, "%s", why_eb.msg);
        else if (verb != ST_REPAIR_PATCH_VARIABLES && verb != ST_REPAIR_FAIL)
            err = drain_buffer_tx(conn, defn, sig, &budget, &run, eb);
    }
    if (err == ST_OK && why == NULL) {
        st_parent_t parent = {0};
        /* A patched failed instance stays failed: its parent heard of it already. */
        if (!PQgetisnull(state, 0, 8) && !(failed && verb == ST_REPAIR_PATCH_VARIABLES)) {
            snprintf(parent.instance_id, sizeof parent.instance_id, "%s", PQgetvalue(state, 0, 8));
            snprintf(parent.waiting_token, sizeof parent.waiting_token, "%s", PQgetvalue(state, 0, 9));
        }
        if (globals_decl != NULL)
            err = st_globals_store_tx(conn, globals_decl, PQgetvalue(state, 0, 6), globals,
                                      json_object_get(run.snapshot, "state"), eb);
        if (err == ST_OK)
            err = persist_tx(conn, sig, node_id, version, parent.instance_id[0] ? &parent : NULL, &run, eb);
        int still_paused = 0;
        if (err == ST_OK && paused && verb == ST_REPAIR_PATCH_VARIABLES)
            err = st_instance_store_pause_tx(conn, sig->instance_id, &still_paused, eb);
        if (err == ST_OK)
            err = history_add_tx(conn, sig->instance_id, "repair",
                                 json_pack("{s:s, s:s, s:O, s:O}", "signal_id", sig->signal_id, "verb",
                                           st_repair_verb_name(verb), "actor",
                                           json_object_get(sig->payload, "actor") ?: json_null(), "reason",
                                           json_object_get(sig->payload, "reason") ?: json_null()),
                                 eb);
        if (err == ST_OK) {
            json_object_set_new(after, "state_version", json_integer(current + 1));
            json_object_set_new(after, "status", json_string(still_paused ? "paused" : status_name(run.status)));
            if (verb == ST_REPAIR_PATCH_VARIABLES) {
                json_object_set(before, "variables", json_object_get(snapshot, "state"));
                json_object_set(after, "variables", json_object_get(run.snapshot, "state"));
            } else {
                json_object_set(before, "waiting", json_object_get(snapshot, "waiting") ?: json_null());
                json_object_set(after, "waiting", json_object_get(run.snapshot, "waiting") ?: json_null());
            }
            err = repair_audit_tx(conn, sig, "applied", before, after, NULL, eb);
        }
        *outcome = ST_WAKE_APPLIED;
    }
    if (err == ST_OK && why != NULL) {
        *outcome = ST_WAKE_STALE;
        err = drop_tx(conn, sig, *outcome, "StaleSignal", why, eb);
        if (err == ST_OK)
            err = repair_audit_tx(conn, sig, "rejected", before, NULL, why, eb);
    }
done:
    json_decref(before);
    json_decref(after);
    json_decref(snapshot);
    json_decref(globals);
    st_run_result_close(&run);
    return err;
}

st_err_t st_wakeup_run_tx(PGconn *conn, st_defcache_t *cache, const char *node_id,
                          const st_signal_t *sig, st_wake_outcome_t *outcome, st_errbuf_t *eb)
{
    st_run_result_t run = {0};
    st_run_budget_t budget = {0};   /* one budget for every run of this wake-up (engine.h) */
    PGresult *state = NULL;
    json_t *snapshot = NULL, *event = NULL, *globals = NULL;
    const json_t *globals_decl = NULL;
    st_err_t err;

    const char *dedup_params[] = {sig->signal_id, sig->instance_id};
    if ((err = st_pg_exec(conn, sql_dedup_and_lock, 2, dedup_params, &state, eb)) != ST_OK)
        goto finish;
    int fresh;
    if (PQntuples(state) == 1) {
        fresh = strcmp(PQgetvalue(state, 0, 7), "1") == 0;
    } else if ((err = st_dedup_recorded_here_tx(conn, sig->signal_id, &fresh, eb)) != ST_OK) {
        goto finish;
    }
    if (!fresh) {   /* the dedup insert wrote nothing; neither does the rest */
        *outcome = ST_WAKE_DUPLICATE;
        goto finish;
    }
    if (PQntuples(state) == 0) {
        *outcome = ST_WAKE_UNKNOWN;
        err = drop_tx(conn, sig, *outcome, "UnknownInstance",
                      "the signal names an instance that does not exist", eb);
        goto finish;
    }
    if (sig->type == ST_SIGNAL_REPAIR) {   /* an operator's verb: see repair_tx() */
        err = repair_tx(conn, cache, node_id, sig, state, outcome, eb);
        goto finish;
    }
    const char *version = PQgetvalue(state, 0, 0);
    const char *status = PQgetvalue(state, 0, 5);
    long long current = atoll(version);
    /* ---- pause ---- PAUSE, RESUME and REWIND check and apply themselves (pause.h) */
    if (st_pause_signal(sig->type)) {
        st_pause_instance_t inst = {current, status, PQgetvalue(state, 0, 2),
                                    atoi(PQgetvalue(state, 0, 3)),
                                    PQgetisnull(state, 0, 1) ? NULL : PQgetvalue(state, 0, 1),
                                    PQgetisnull(state, 0, 8) ? NULL : PQgetvalue(state, 0, 8),
                                    PQgetisnull(state, 0, 8) ? NULL : PQgetvalue(state, 0, 9)};
        err = st_pause_apply_tx(conn, cache, node_id, sig, &inst, outcome, eb);
        goto finish;
    }
    if (strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0 ||
        strcmp(status, "cancelled") == 0 || strcmp(status, "terminated") == 0) {
        *outcome = ST_WAKE_STALE;
        err = drop_tx(conn, sig, *outcome, "StaleSignal", "the instance has already ended", eb);
        if (err == ST_OK)
            err = audit_control_tx(conn, sig, "rejected", status, current, NULL, eb);
        goto finish;
    }
    if (sig->expected_version >= 0 && sig->expected_version != current) {
        *outcome = ST_WAKE_STALE;
        err = drop_tx(conn, sig, *outcome, "StaleSignal",
                      "the signal expected another state version", eb);
        goto finish;
    }
    /* What only the API checked: a forged message is refused here (verify.h). */
    if ((err = st_verify_signal_tx(conn, sig, eb)) != ST_OK)
        goto finish;
    /* ---- pause ---- a paused instance or definition version keeps all but the end */
    if (sig->type != ST_SIGNAL_CANCEL && sig->type != ST_SIGNAL_TERMINATE) {
        int paused = strcmp(status, "paused") == 0;
        if (!paused && strcmp(PQgetvalue(state, 0, 10), "t") == 0 &&
            (err = st_definition_pause_lock_tx(conn, PQgetvalue(state, 0, 2),
                                               atoi(PQgetvalue(state, 0, 3)), &paused, eb)) != ST_OK)
            goto finish;
        if (paused) {
            *outcome = ST_WAKE_BUFFERED;
            err = st_signal_buffer_hold_tx(conn, sig, eb);
            goto finish;
        }
    }

    st_parent_t parent = {0};
    if (!PQgetisnull(state, 0, 8)) {
        snprintf(parent.instance_id, sizeof parent.instance_id, "%s", PQgetvalue(state, 0, 8));
        snprintf(parent.waiting_token, sizeof parent.waiting_token, "%s",
                 PQgetvalue(state, 0, 9));
    }
    if (sig->type == ST_SIGNAL_CANCEL || sig->type == ST_SIGNAL_TERMINATE) {
        err = end_instance_tx(conn, sig, node_id, parent.instance_id[0] ? &parent : NULL,
                              status, current,
                              PQgetisnull(state, 0, 1) ? NULL : PQgetvalue(state, 0, 1), eb);
        *outcome = ST_WAKE_APPLIED;
        goto finish;
    }

    const st_defn_t *defn = NULL;
    if ((err = st_defcache_get_tx(cache, conn, PQgetvalue(state, 0, 2),
                               atoi(PQgetvalue(state, 0, 3)), &defn, eb)) != ST_OK)
        goto finish;
    if (!PQgetisnull(state, 0, 1)) {
        json_error_t jerr;
        snapshot = json_loads(PQgetvalue(state, 0, 1), 0, &jerr);
        if (snapshot == NULL) {
            err = st_err_set(eb, ST_ERR_INTERNAL, "stored snapshot is not JSON: %s", jerr.text);
            goto finish;
        }
    }
    event = event_from_signal(sig, PQgetvalue(state, 0, 4));
    /* A process's global attributes: read from the user's row (locked) before the run. */
    globals_decl = json_object_get(st_defn_canonical(defn), "globals");
    if (globals_decl != NULL) {
        if ((err = st_globals_load_tx(conn, globals_decl, PQgetvalue(state, 0, 6), &globals, eb)) != ST_OK)
            goto finish;
        if (snapshot == NULL) {
            json_t *payload = json_deep_copy(json_object_get(event, "payload"));
            json_object_set(payload, "globals", globals);
            json_object_set_new(event, "payload", payload);
        }
        else if (json_is_object(json_object_get(snapshot, "state")))
            json_object_update(json_object_get(snapshot, "state"), globals);
    }
    if (snapshot == NULL && sig->type == ST_SIGNAL_EXTERNAL) {
        err = ST_ERR_CONFLICT;   /* arrived before START ran: keep it */
    } else {
        st_run_budget_init(&budget);   /* from here: the lock waits before do not count */
        err = st_interp_run_budget(defn, snapshot, event, sig->instance_id, st_now_ms(), &budget,
                                   &run, eb);
    }
    if (err == ST_ERR_CONFLICT && sig->type == ST_SIGNAL_EXTERNAL && sig->name[0]) {
        *outcome = ST_WAKE_BUFFERED;
        err = st_signal_buffer_keep_tx(conn, sig, eb);
        goto finish;
    }
    if (err == ST_OK)
        err = drain_buffer_tx(conn, defn, sig, &budget, &run, eb);
    if (err == ST_ERR_STALE) {
        *outcome = ST_WAKE_STALE;
        err = drop_tx(conn, sig, *outcome, "StaleSignal",
                      "the signal's waiting token does not match the current wait", eb);
        goto finish;
    }
    if (err != ST_OK)
        goto finish;
    /* ...and the changed ones written back in this transaction: a failed write rolls
     * back the decision, its snapshot and its outbox rows with it. */
    if (globals_decl != NULL &&
        (err = st_globals_store_tx(conn, globals_decl, PQgetvalue(state, 0, 6), globals,
                                   json_object_get(run.snapshot, "state"), eb)) != ST_OK)
        goto finish;
    if ((err = persist_tx(conn, sig, node_id, version, parent.instance_id[0] ? &parent : NULL,
                          &run, eb)) != ST_OK)
        goto finish;
    if (strcmp(st_defn_kind(defn), "process") == 0 &&
        (err = process_history_tx(conn, sig, &run, eb)) != ST_OK)
        goto finish;
    *outcome = ST_WAKE_APPLIED;

finish:
    PQclear(state);
    json_decref(snapshot);
    json_decref(event);
    json_decref(globals);
    st_run_result_close(&run);
    return err;
}

st_err_t st_wakeup_run(PGconn *conn, st_defcache_t *cache, const char *node_id,
                       const st_signal_t *sig, st_wake_outcome_t *outcome, st_errbuf_t *eb)
{
    st_err_t err = st_pg_begin(conn, eb);
    if (err == ST_OK)
        err = st_wakeup_run_tx(conn, cache, node_id, sig, outcome, eb);
    /* A duplicate wrote nothing: a rollback ends it without a commit record. A commit
     * can fail too (queued statements run with it) and is then rolled back. */
    if (err == ST_OK && *outcome != ST_WAKE_DUPLICATE)
        err = st_pg_commit(conn, eb);
    if (err != ST_OK || *outcome == ST_WAKE_DUPLICATE)
        st_pg_rollback(conn);
    return err;
}

/* ---- failures -------------------------------------------------------------------- */

st_err_t st_wakeup_failed_tx(PGconn *conn, const st_signal_t *sig, st_err_t cause,
                             const char *message, int attempts, int dead_lettered,
                             st_errbuf_t *eb)
{
    st_last_error_t last = {sig->instance_id,
                            dead_lettered ? "wakeup_dead_lettered" : "wakeup_failed",
                            message, st_err_name(cause), sig->signal_id,
                            st_signal_type_name(sig->type), attempts, dead_lettered};
    return st_runtime_state_set_last_error_tx(conn, &last, eb);
}

void st_wakeup_failed(PGconn *conn, const st_signal_t *sig, st_err_t cause, const char *message,
                      int attempts)
{
    st_errbuf_t eb;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_wakeup_failed_tx(conn, sig, cause, message, attempts, 0, &eb);
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_log_warn("could not record a failed wake-up", "instance=%s: %s", sig->instance_id, eb.msg);
    }
}
