/*
 * engine.h - the engine core: canonical definitions and the run-to-wait interpreter.
 *
 * A pure library: no I/O, no clocks (time comes in as an argument; the wall-time budget
 * reads a clock the service installs), no globals beyond the function catalog and the
 * limits (both set at start-up). Services compile a definition document once (st_defn_compile)
 * and run instances against it (st_interp_run): given the stored snapshot and one
 * event, the interpreter runs until the instance must wait or ends, and returns the
 * new snapshot plus the effects the service must persist in the same transaction.
 * The document formats and the snapshot are described in docs/definitions.md.
 */
#ifndef STRAND_ENGINE_H
#define STRAND_ENGINE_H

#include <jansson.h>

#include "strand/err.h"
#include "strand/expr.h"

typedef struct st_defn st_defn_t;   /* compiled, validated definition; immutable */

/* Compiles a front-end document into a canonical definition. `doc` is borrowed.
 * The document's "kind" is "flow", "lifecycle" or "process" (docs/definitions.md,
 * docs/lifecycle.md); a stored canonical form compiles again to itself.
 * On success returns ST_OK and *out (caller frees with st_defn_free()); *problems is
 * set to NULL. On failure returns ST_ERR_INVALID and *problems = a new JSON array of
 * {"pointer": "/steps/2/next", "message": "..."} listing every problem found (caller
 * decrefs); nothing is half-built. */
st_err_t st_defn_compile(const json_t *doc, st_defn_t **out, json_t **problems);
void st_defn_free(st_defn_t *defn);
const char *st_defn_name(const st_defn_t *defn);        /* borrowed */
int st_defn_version(const st_defn_t *defn);
const char *st_defn_kind(const st_defn_t *defn);        /* "flow" | "lifecycle" | "process"; borrowed */
const json_t *st_defn_canonical(const st_defn_t *defn); /* borrowed, valid until free */
/* A process's ID reuse policy ("allow_if_no_running", "allow_if_previous_failed",
 * "disallow_reuse", "allow_terminate_if_running"), for the API's start check; NULL for
 * flows and lifecycles. Borrowed; valid until st_defn_free(). */
const char *st_defn_id_reuse_policy(const st_defn_t *defn);

/* Outcome of one run. */
typedef enum { ST_RUN_WAITING = 1, ST_RUN_COMPLETED, ST_RUN_FAILED } st_run_status_t;

typedef struct {
    json_t *snapshot;          /* new snapshot; caller owns */
    json_t *effects;           /* JSON array of effects; caller owns */
    st_run_status_t status;
    /* A process only (NULL for flows and lifecycles), for its timeline: the states its
     * live threads stand in after the run, in thread order, without duplicates (a JSON
     * array of names; the process timeout's daemon thread left out). Caller owns. */
    json_t *waiting_in;
} st_run_result_t;

/* Runs an instance until it must wait or ends. Pure: no I/O.
 * snapshot: NULL for a new instance (the event must then be START), else the stored
 *   snapshot (borrowed).
 * event: {"type": "START"|"TASK_COMPLETED"|"SIGNAL"|"TIMER_DUE"|"RETRY_DUE"|
 *   "CALL_RESULT"|"CHILD_COMPLETED", "token": "...", "name": "...", "payload": {...},
 *   "input": {...} (START only)} (borrowed).
 * now_ms: the caller's wall clock; instance_id: names tokens and idempotency keys.
 * Returns ST_OK with *result filled (release with st_run_result_close()).
 * ST_ERR_STALE: the event answers no current wait (wrong token, ended instance,
 *   START twice); *result is left empty and nothing may change.
 * ST_ERR_INVALID: the snapshot does not fit the definition (st_snapshot_check()).
 * ST_ERR_CONFLICT: a named SIGNAL the instance does not wait for right now; the
 *   caller may buffer it and deliver it when the instance waits for that name.
 * A failing expression or step fails the instance (ST_RUN_FAILED), it is not an
 * error of the call. */
st_err_t st_interp_run(const st_defn_t *defn, const json_t *snapshot, const json_t *event,
                       const char *instance_id, long long now_ms,
                       st_run_result_t *result, st_errbuf_t *eb);

/* What one wake-up may still spend (st_engine_limits()): steps, expression work units
 * and wall time. A service that runs several events in one wake-up (a START, then the
 * buffered signals it waits for) shares one budget between the runs, so the limits
 * bound the wake-up, not each run. */
typedef struct {
    long long steps_left;
    long long work_left;
    long long deadline_ms;   /* on st_engine_limits()->clock_ms; 0: no wall-time limit */
} st_run_budget_t;

/* Fills a fresh budget from the limits in force (the deadline from their clock, now). */
void st_run_budget_init(st_run_budget_t *budget);

/* st_interp_run() drawing on `budget` (borrowed, updated): a run that finds it spent
 * fails its instance with budget_exceeded. st_interp_run() is this with a fresh one. */
st_err_t st_interp_run_budget(const st_defn_t *defn, const json_t *snapshot, const json_t *event,
                              const char *instance_id, long long now_ms, st_run_budget_t *budget,
                              st_run_result_t *result, st_errbuf_t *eb);

/* Releases the result's JSON values and zeroes it. */
void st_run_result_close(st_run_result_t *result);

/* Rewind (an operator's POST /v1/instances/{id}/rewind): the instance continues from
 * `old`, a snapshot it had earlier (borrowed). Every open wait of `old` is entered
 * afresh: its step runs again (a new task, timer, call or child, a lifecycle's state
 * timeout armed again) with a token drawn above `seq_floor`, the highest token number
 * the instance drew so far (its current snapshot's "seq"), so that nothing started by
 * the undone part can answer a restored wait. Returns as st_interp_run(); ST_ERR_STALE
 * when `old` is an ended instance. */
st_err_t st_interp_rewind(const st_defn_t *defn, const json_t *old, long long seq_floor,
                          const char *instance_id, long long now_ms, st_run_result_t *result,
                          st_errbuf_t *eb);

/* The highest token number `snapshot` drew ("seq"); 0 for NULL. */
long long st_snapshot_seq(const json_t *snapshot);

/* Checks that a stored snapshot fits `defn` (schema version, status, threads, frames
 * and waits pointing at real steps of the definition). st_interp_run() calls it on
 * every snapshot it is given; ST_ERR_INVALID names the bad place in `eb`. */
st_err_t st_snapshot_check(const st_defn_t *defn, const json_t *snapshot, st_errbuf_t *eb);

/* Every signal name the instance waits for right now, without duplicates, in thread
 * order: ["*"] for a lifecycle waiting for triggers, [] when none. A process can wait
 * on several queues at once; deliver a buffered signal whose name is in this list.
 * Caller decrefs the new array. */
json_t *st_snapshot_waiting_signals(const json_t *snapshot);

/* The engine owns the snapshot's shape: code outside libs/engine changes a stored
 * snapshot only through these calls, never by editing its JSON. Each is pure, takes
 * the stored snapshot (borrowed; NULL: an instance that has not run yet) and returns
 * the new one (caller decrefs), NULL for NULL. */

/* `snapshot` with its status set to `status` ("terminated", "cancelled"): an instance
 * ended from outside its wake-up (the API's id reuse). */
json_t *st_snapshot_with_status(const json_t *snapshot, const char *status);

/* `snapshot` with the process's local attributes `locals` (an object, borrowed)
 * written over its state (its other attributes kept): an RPC's answer. */
json_t *st_snapshot_with_locals(const json_t *snapshot, const json_t *locals);

/* ---- limits (docs/configuration.md, "Engine limits") ---------------------------------
 *
 * Every run is bounded: a run that reaches a limit fails its instance with a clear
 * error code (budget_exceeded, value_too_large, state_too_large, data_too_deep,
 * subworkflow_depth_exceeded) instead of holding its worker. The limits are process-wide
 * settings: services set them once at start-up from their configuration. */
typedef struct {
    long long max_steps;         /* steps one run may execute (STRAND_RUN_MAX_STEPS) */
    long long max_work;          /* expression work units one run may spend (STRAND_RUN_MAX_WORK) */
    long long max_run_ms;        /* wall time of one run, checked between steps
                                  * (STRAND_RUN_MAX_MS); needs clock_ms */
    long long max_state_bytes;   /* JSON size of the snapshot, and of any value stored in
                                  * it or sent out by a step (STRAND_STATE_MAX_BYTES) */
    long long max_value_bytes;   /* JSON size of one array or object an expression builds
                                  * (STRAND_EXPR_MAX_VALUE_BYTES) */
    long long max_string;        /* longest string an expression builds (STRAND_EXPR_MAX_STRING) */
    int max_data_depth;          /* nesting of arrays/objects in data (STRAND_DATA_MAX_DEPTH) */
    int max_subworkflow_depth;   /* children below a root instance (STRAND_SUBWORKFLOW_MAX_DEPTH) */
    long long (*clock_ms)(void); /* monotonic clock for max_run_ms; NULL: no wall-time limit */
} st_engine_limits_t;

/* The defaults (safe for a shared executor); see docs/configuration.md. */
void st_engine_limits_default(st_engine_limits_t *out);

/* Replaces the process-wide limits (copied). ST_ERR_CONFIG when a value is out of its
 * range (named in `eb`). Not thread-safe: call at start-up, before any run. */
st_err_t st_engine_set_limits(const st_engine_limits_t *limits, st_errbuf_t *eb);

/* The limits in force; borrowed, static storage. */
const st_engine_limits_t *st_engine_limits(void);

/* Checks data entering the engine from outside (a start input, a signal payload, a task
 * or call result) against max_data_depth and max_state_bytes. ST_ERR_LIMIT with a
 * message naming the limit when it does not fit; the API answers 400 with it. */
st_err_t st_engine_data_check(const json_t *value, st_errbuf_t *eb);

/* ---- repair: operator verbs on one instance (docs/api.md, "Repairing an instance") ----
 *
 * Each verb takes the stored snapshot and returns the repaired run's result, like
 * st_interp_run(): pure, no I/O; the service persists it under the instance's lock.
 * Which verb applies to which kind and status is in docs/api.md. */
typedef enum {
    ST_REPAIR_RETRY = 1,       /* run a failed instance again from the failed (or a named) step */
    ST_REPAIR_FAIL,            /* fail the instance with an operator's error */
    ST_REPAIR_PATCH_VARIABLES, /* JSON Merge Patch (RFC 7386) of the instance's variables */
    ST_REPAIR_FIRE_TIMER,      /* the current wait's timer fires now */
    ST_REPAIR_SKIP_WAIT,       /* the current wait completes as if its event came */
} st_repair_verb_t;

typedef struct {
    st_repair_verb_t verb;
    const char *step;          /* retry: step id, JSON pointer, or a process state / lifecycle
                                * state name; NULL: the step that failed. Borrowed. */
    const json_t *error;       /* fail: {code, message}; borrowed */
    const json_t *patch;       /* patch_variables: the merge patch (an object); borrowed */
    const json_t *payload;     /* skip_wait: the event's data (an object) or NULL; borrowed */
} st_repair_t;

/* "retry", "fail", "patch_variables", "fire_timer", "skip_wait"; static storage. */
const char *st_repair_verb_name(st_repair_verb_t verb);
/* The verb named `name` (as st_repair_verb_name()); 0 when none. */
st_repair_verb_t st_repair_verb_parse(const char *name);

/* Applies `repair` to `snapshot` (borrowed; the stored one) of an instance of `defn`.
 * `budget` may be NULL (a fresh one). On ST_OK *result holds the new snapshot, the
 * effects to persist and the status (release with st_run_result_close()); the verbs that
 * run steps (retry, fire_timer, skip_wait) run until the instance waits or ends.
 * ST_ERR_INVALID: bad arguments (a patch that is not an object or whose result does not
 * fit the limits, an error without code, an unknown step), named in `eb`.
 * ST_ERR_CONFLICT: the verb does not apply to this kind, status or wait (`eb` says why).
 * Nothing is changed on error. */
st_err_t st_repair_run(const st_defn_t *defn, const json_t *snapshot, const st_repair_t *repair,
                       const char *instance_id, long long now_ms, st_run_budget_t *budget,
                       st_run_result_t *result, st_errbuf_t *eb);

/* RFC 7386 JSON Merge Patch: `patch` applied to `target` (both borrowed). Returns a new
 * value (caller decrefs): a non-object patch replaces the target, null members delete. */
json_t *st_json_merge_patch(const json_t *target, const json_t *patch);

#define ST_SNAPSHOT_SCHEMA_VERSION 1

#endif
