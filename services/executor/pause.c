/* pause.c - PAUSE, RESUME and REWIND in the executor (see pause.h). */
#include "pause.h"

#include "effects.h"
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
#include "strand/history.h"
#include "strand/instance_store.h"
#include "strand/notice.h"
#include "strand/snapshot_log.h"
#include "strand/tree.h"
#include "strand/util.h"

int st_pause_signal(st_signal_type_t type)
{
    return type == ST_SIGNAL_PAUSE || type == ST_SIGNAL_RESUME || type == ST_SIGNAL_REWIND;
}

static const char *verb_name(st_signal_type_t type)
{
    return type == ST_SIGNAL_PAUSE ? "pause" : type == ST_SIGNAL_RESUME ? "resume" : "rewind";
}

static const char *actor_of(const st_signal_t *sig)
{
    const char *actor = json_string_value(json_object_get(sig->payload, "actor"));
    return actor != NULL ? actor : "system";
}

/* The verb's arguments for the audit row and history: signal id, expected version,
 * reason and to_version when given. Caller decrefs. */
static json_t *verb_detail(const st_signal_t *sig)
{
    json_t *detail = json_pack("{s:s, s:I}", "signal_id", sig->signal_id, "expected_version",
                               (json_int_t)sig->expected_version);
    static const char *const keys[] = {"reason", "to_version", "scope", NULL};
    for (int i = 0; keys[i] != NULL; i++) {
        json_t *v = json_object_get(sig->payload, keys[i]);
        if (v != NULL)
            json_object_set(detail, keys[i], v);
    }
    return detail;
}

static st_err_t audit_tx(PGconn *conn, const st_signal_t *sig, const char *outcome,
                         json_t *before, json_t *after, json_t *detail, st_errbuf_t *eb)
{
    st_audit_entry_t entry = {actor_of(sig), verb_name(sig->type), outcome, sig->instance_id,
                              NULL, before, after, detail};
    st_err_t err = st_audit_add_tx(conn, &entry, eb);
    json_decref(before);
    json_decref(after);
    json_decref(detail);
    return err;
}

static json_t *state_of(const char *status, long long version)
{
    return json_pack("{s:s, s:I}", "status", status, "state_version", (json_int_t)version);
}

/* Drops the verb: outcome stale, a StaleSignal notice saying `why`, an audit row
 * "rejected" (before = after: nothing changed). */
static st_err_t reject_tx(PGconn *conn, const st_signal_t *sig, const st_pause_instance_t *inst,
                          const char *why, st_wake_outcome_t *outcome, st_errbuf_t *eb)
{
    *outcome = ST_WAKE_STALE;
    st_err_t err = st_dedup_set_outcome_tx(conn, sig->signal_id, "stale", eb);
    json_t *detail = verb_detail(sig);
    json_object_set_new(detail, "signal_type", json_string(st_signal_type_name(sig->type)));
    if (err == ST_OK)
        err = st_notice_add_tx(conn, "StaleSignal", sig->instance_id, sig->signal_id, why, detail, eb);
    json_object_set_new(detail, "why", json_string(why));
    if (err == ST_OK)
        return audit_tx(conn, sig, "rejected", state_of(inst->status, inst->version),
                        state_of(inst->status, inst->version), detail, eb);
    json_decref(detail);
    return err;
}

/* Queues a timeline entry; steals `detail`. */
static st_err_t history_tx(PGconn *conn, const char *instance_id, const char *kind, json_t *detail,
                           st_errbuf_t *eb)
{
    st_err_t err = st_history_queue_tx(conn, instance_id, kind, detail, eb);
    json_decref(detail);
    return err;
}

/* Whether the instance's definition version is paused (share-locked, see
 * definition_pause.h). */
static st_err_t definition_paused_tx(PGconn *conn, const st_pause_instance_t *inst, int *paused,
                                     st_errbuf_t *eb)
{
    return st_definition_pause_lock_tx(conn, inst->definition, inst->definition_version, paused, eb);
}

static st_err_t pause_tx(PGconn *conn, const st_signal_t *sig, const st_pause_instance_t *inst,
                         st_wake_outcome_t *outcome, st_errbuf_t *eb)
{
    int changed = 0;
    st_err_t err = st_instance_store_pause_tx(conn, sig->instance_id, &changed, eb);
    if (err != ST_OK)
        return err;
    if (!changed)
        return reject_tx(conn, sig, inst, strcmp(inst->status, "paused") == 0
                                              ? "the instance is paused already"
                                              : "the instance has ended", outcome, eb);
    *outcome = ST_WAKE_APPLIED;
    json_t *h = verb_detail(sig);
    json_object_set_new(h, "actor", json_string(actor_of(sig)));
    json_object_set_new(h, "state_version", json_integer(inst->version));
    err = history_tx(conn, sig->instance_id, "paused", h, eb);
    if (err == ST_OK)
        err = audit_tx(conn, sig, "applied", state_of(inst->status, inst->version),
                       state_of("paused", inst->version), verb_detail(sig), eb);
    return err;
}

static st_err_t resume_tx(PGconn *conn, const st_signal_t *sig, const st_pause_instance_t *inst,
                          st_wake_outcome_t *outcome, st_errbuf_t *eb)
{
    char status[32];
    st_err_t err = st_instance_store_unpause_tx(conn, sig->instance_id, status, sizeof status, eb);
    if (err != ST_OK)
        return err;
    if (status[0] == '\0')
        return reject_tx(conn, sig, inst, "the instance is not paused", outcome, eb);
    *outcome = ST_WAKE_APPLIED;
    int def_paused = 0, released = 0;
    err = definition_paused_tx(conn, inst, &def_paused, eb);
    if (err == ST_OK && !def_paused)
        err = st_signal_buffer_release_held_tx(conn, sig->instance_id, &released, eb);
    if (err != ST_OK)
        return err;
    json_t *h = verb_detail(sig);
    json_object_set_new(h, "actor", json_string(actor_of(sig)));
    json_object_set_new(h, "state_version", json_integer(inst->version));
    json_object_set_new(h, "released", json_integer(released));
    if (def_paused)
        json_object_set_new(h, "definition_paused", json_true());
    err = history_tx(conn, sig->instance_id, "resumed", h, eb);
    json_t *detail = verb_detail(sig);
    json_object_set_new(detail, "released", json_integer(released));
    if (err == ST_OK)
        return audit_tx(conn, sig, "applied", state_of(inst->status, inst->version),
                        state_of(status, inst->version), detail, eb);
    json_decref(detail);
    return err;
}

/* A definition version was resumed: send again what this instance kept, unless it (or
 * its version, paused again since) is still paused. Not an operator's verb on the
 * instance: no version check, no audit row (the API wrote the definition's). */
static st_err_t drain_tx(PGconn *conn, const st_signal_t *sig, const st_pause_instance_t *inst,
                         st_wake_outcome_t *outcome, st_errbuf_t *eb)
{
    *outcome = ST_WAKE_APPLIED;
    int def_paused = 0, released = 0;
    /* An ended instance may have kept a verb (a retry of a failed one) too: it is sent
     * again; anything else it kept is dropped as stale when it arrives. */
    if (strcmp(inst->status, "paused") == 0)
        return ST_OK;
    st_err_t err = definition_paused_tx(conn, inst, &def_paused, eb);
    if (err == ST_OK && !def_paused)
        err = st_signal_buffer_release_held_tx(conn, sig->instance_id, &released, eb);
    if (err == ST_OK && released > 0)
        err = history_tx(conn, sig->instance_id, "resumed",
                         json_pack("{s:s, s:s, s:s, s:i}", "signal_id", sig->signal_id, "scope",
                                   "definition", "actor", actor_of(sig), "released", released),
                         eb);
    return err;
}

static const char *run_status_name(st_run_status_t status)
{
    return status == ST_RUN_COMPLETED ? "completed" : status == ST_RUN_FAILED ? "failed" : "waiting";
}

/* Compact text of a member of `obj` that is not null, else NULL. Caller frees. */
static char *member_text(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return v != NULL && !json_is_null(v) ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

static st_err_t rewind_tx(PGconn *conn, st_defcache_t *cache, const char *node_id,
                          const st_signal_t *sig, const st_pause_instance_t *inst,
                          st_wake_outcome_t *outcome, st_errbuf_t *eb)
{
    const json_t *to_json = json_object_get(sig->payload, "to_version");
    long long to = json_is_integer(to_json) ? (long long)json_integer_value(to_json) : -1;
    char why[160];
    if (to < 1 || to >= inst->version) {
        snprintf(why, sizeof why, "to_version must be from 1 to %lld (the state_version is %lld)",
                 inst->version - 1, inst->version);
        return reject_tx(conn, sig, inst, why, outcome, eb);
    }
    if (inst->snapshot == NULL)
        return reject_tx(conn, sig, inst, "the instance has not started", outcome, eb);
    json_t *old = NULL, *current = NULL;
    st_run_result_t run = {0};
    st_err_t err = st_snapshot_log_get(conn, sig->instance_id, to, &old, eb);
    if (err != ST_OK)
        return err;
    if (old == NULL) {
        snprintf(why, sizeof why, "no snapshot is kept for state_version %lld (only the latest %d are)",
                 to, ST_SNAPSHOT_LOG_KEEP);
        return reject_tx(conn, sig, inst, why, outcome, eb);
    }
    const st_defn_t *defn = NULL;
    json_error_t jerr;
    char *snapshot = NULL, *output = NULL, *error = NULL;
    err = st_defcache_get_tx(cache, conn, inst->definition, inst->definition_version, &defn, eb);
    if (err == ST_OK && (current = json_loads(inst->snapshot, 0, &jerr)) == NULL)
        err = st_err_set(eb, ST_ERR_INTERNAL, "stored snapshot is not JSON: %s", jerr.text);
    if (err == ST_OK) {
        st_errbuf_t why_eb;
        err = st_interp_rewind(defn, old, st_snapshot_seq(current), sig->instance_id, st_now_ms(),
                               &run, &why_eb);
        if (err == ST_ERR_STALE || err == ST_ERR_INVALID) {
            json_decref(old);
            json_decref(current);
            return reject_tx(conn, sig, inst, why_eb.msg, outcome, eb);
        }
        if (err != ST_OK)
            st_err_set(eb, err, "%s", why_eb.msg);
    }
    /* What the instance owns now ends, as for an ended instance (children too); the
     * restored waits' effects below start what they need afresh. */
    if (err == ST_OK)
        err = st_tree_end_tx(conn, sig->instance_id, "rewound", eb);
    const json_t *waiting = json_object_get(run.snapshot, "waiting");
    char until[32] = "";
    if (json_is_integer(json_object_get(waiting, "until_ms")))
        snprintf(until, sizeof until, "%lld", (long long)json_integer_value(json_object_get(waiting, "until_ms")));
    const char *status = strcmp(inst->status, "paused") == 0 && run.status == ST_RUN_WAITING
                             ? "paused" : run_status_name(run.status);
    if (err == ST_OK && (snapshot = json_dumps(run.snapshot, JSON_COMPACT)) == NULL)
        err = st_err_set(eb, ST_ERR_NOMEM, "could not encode the snapshot");
    if (err == ST_OK) {
        output = member_text(run.snapshot, "output");
        error = member_text(run.snapshot, "error");
        st_instance_rewind_t r = {sig->instance_id, inst->version, snapshot,
                                  json_string_value(json_object_get(waiting, "kind")),
                                  json_string_value(json_object_get(waiting, "token")),
                                  until[0] ? until : NULL, status, output, error, sig->signal_id,
                                  node_id};
        err = st_instance_store_rewind_tx(conn, &r, eb);
    }
    if (err == ST_OK && run.status == ST_RUN_WAITING)
        err = st_snapshot_log_keep_tx(conn, sig->instance_id, inst->version + 1, snapshot, eb);
    if (err == ST_OK) {
        json_t *h = verb_detail(sig);
        json_object_set_new(h, "actor", json_string(actor_of(sig)));
        json_object_set_new(h, "undone", json_pack("{s:I, s:I}", "from_version", (json_int_t)(to + 1),
                                                   "to_version", (json_int_t)inst->version));
        json_object_set_new(h, "state_version", json_integer(inst->version + 1));
        json_object_set_new(h, "status", json_string(status));
        err = history_tx(conn, sig->instance_id, "rewound", h, eb);
    }
    if (err == ST_OK) {
        st_parent_t parent = {0};
        if (inst->parent_id != NULL) {
            snprintf(parent.instance_id, sizeof parent.instance_id, "%s", inst->parent_id);
            snprintf(parent.waiting_token, sizeof parent.waiting_token, "%s", inst->parent_token);
        }
        err = st_effects_apply_tx(conn, sig->instance_id, run.effects, run.status, run.snapshot,
                                  inst->parent_id ? &parent : NULL, eb);
    }
    if (err == ST_OK) {
        json_t *after = state_of(status, inst->version + 1);
        json_object_set_new(after, "from_snapshot_version", json_integer(to));
        err = audit_tx(conn, sig, "applied", state_of(inst->status, inst->version), after,
                       verb_detail(sig), eb);
        *outcome = ST_WAKE_APPLIED;
    }
    free(snapshot);
    free(output);
    free(error);
    json_decref(old);
    json_decref(current);
    st_run_result_close(&run);
    return err;
}

st_err_t st_pause_apply_tx(PGconn *conn, st_defcache_t *cache, const char *node_id,
                           const st_signal_t *sig, const st_pause_instance_t *inst,
                           st_wake_outcome_t *outcome, st_errbuf_t *eb)
{
    /* Only Strand's own services may send these (strand.control_signals). */
    st_err_t err = st_verify_signal_tx(conn, sig, eb);
    if (err != ST_OK)
        return err;
    const char *scope = json_string_value(json_object_get(sig->payload, "scope"));
    if (sig->type == ST_SIGNAL_RESUME && scope != NULL && strcmp(scope, "definition") == 0)
        return drain_tx(conn, sig, inst, outcome, eb);
    if (sig->expected_version < 0 || sig->expected_version != inst->version) {
        char why[160];
        snprintf(why, sizeof why, "the instance's state_version is %lld, not %lld", inst->version,
                 sig->expected_version);
        return reject_tx(conn, sig, inst, why, outcome, eb);
    }
    switch (sig->type) {
    case ST_SIGNAL_PAUSE: return pause_tx(conn, sig, inst, outcome, eb);
    case ST_SIGNAL_RESUME: return resume_tx(conn, sig, inst, outcome, eb);
    default: return rewind_tx(conn, cache, node_id, sig, inst, outcome, eb);
    }
}
