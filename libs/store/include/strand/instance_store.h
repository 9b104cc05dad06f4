/*
 * instance_store.h - the owner of strand.instances and strand.runtime_states: an
 * instance's row (status, input, output, error) and its runtime state (snapshot,
 * state_version, what it waits for, last error). Every write to either table is a
 * function here, taking the caller's open transaction (_tx); callers pass structs and
 * values, never SQL. Reads may stay near their handlers (docs/architecture.md).
 */
#ifndef STRAND_INSTANCE_STORE_H
#define STRAND_INSTANCE_STORE_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/err.h"

/* ---- arch2: the existing writes, moved here ---------------------------------------- */

/* True for an instance status that is final: completed, failed, cancelled, terminated. */
int st_instance_status_ended(const char *status);

/* A new instance, status pending, with its runtime state at version 0. Every string
 * is borrowed; NULL leaves the column NULL (input_json NULL: {}). */
typedef struct st_instance_new {
    const char *id;                      /* a fresh uuid */
    const char *definition_name;
    const char *definition_version;      /* as text: the pinned version */
    const char *business_ref;
    const char *input_json;
    const char *parent_instance_id;      /* a child: its parent and the parent's wait */
    const char *parent_waiting_token;
    int lifecycle;                       /* a lifecycle's instance (one running per reference) */
} st_instance_new_t;

/* The columns of an instance's view, in this order, over `strand.instances i` joined
 * with `strand.runtime_states rs`: id, definition_name, definition_version,
 * business_ref, status, input, output, error (JSON as text), created_at, updated_at,
 * ended_at, state_version, waiting_kind, waiting_token, waiting_until. */
#define ST_INSTANCE_VIEW_COLUMNS                                                            \
    " i.id, i.definition_name, i.definition_version, i.business_ref, i.status,"             \
    " i.input::text, i.output::text, i.error::text, i.created_at, i.updated_at, i.ended_at," \
    " rs.state_version, rs.waiting_kind, rs.waiting_token, rs.waiting_until"

/* Inserts instance `inst` and its runtime state (version 0), in one round trip.
 * Expects the caller to hold an open transaction on `conn`. */
st_err_t st_instance_add_tx(PGconn *conn, const st_instance_new_t *inst, st_errbuf_t *eb);

/* st_instance_add_tx() that answers with the inserted instance: on success `*view`
 * (caller PQclear()s) holds one row, the columns of ST_INSTANCE_VIEW_COLUMNS as
 * inserted. With `commit` set, the COMMIT of the caller's transaction goes out in the
 * same round trip (with any writes the caller queued, e.g. the START's outbox row);
 * without, the transaction stays open for more statements (a group of starts). On
 * failure the caller rolls back. */
st_err_t st_instance_add_view(PGconn *conn, const st_instance_new_t *inst, int commit,
                              PGresult **view, st_errbuf_t *eb);

/* Ends instance `id` with `status` ("terminated", ...) and `error_json` (NULL: null),
 * ended_at and updated_at now. The caller has locked its runtime state first (the
 * executor's lock order) and written the runtime state's end (st_runtime_state_end_tx).
 * Expects the caller to hold an open transaction on `conn`. */
st_err_t st_instance_end_tx(PGconn *conn, const char *id, const char *status,
                            const char *error_json, st_errbuf_t *eb);

/* Marks instance `id` changed now (updated_at), e.g. after an RPC. Expects the caller
 * to hold an open transaction on `conn`. */
st_err_t st_instance_touch_tx(PGconn *conn, const char *id, st_errbuf_t *eb);

/* Locks instance `id`'s runtime state (FOR UPDATE) and reads it: `*found` 0 when there
 * is none; else `*version` and, when `snapshot` is not NULL, `*snapshot` (caller
 * decrefs; NULL while the instance has not run yet). Expects the caller to hold an
 * open transaction on `conn`. */
st_err_t st_runtime_state_lock_tx(PGconn *conn, const char *id, int *found, long long *version,
                                  json_t **snapshot, st_errbuf_t *eb);

/* Replaces instance `id`'s snapshot with `snapshot` (borrowed; NULL: none), one
 * state_version up; what it waits for is unchanged. Use with an engine call that
 * changed the snapshot (st_snapshot_set_locals()). The caller holds the row's lock
 * (st_runtime_state_lock_tx) in its open transaction on `conn`. */
st_err_t st_runtime_state_put_tx(PGconn *conn, const char *id, const json_t *snapshot,
                                 st_errbuf_t *eb);

/* The runtime state of an ended instance: `snapshot` (borrowed; NULL: none; the
 * engine's st_snapshot_with_status()), one state_version up, waiting for nothing;
 * `signal_id` and `node_id` name the signal that ended it and the executor node that
 * applied it (NULL, NULL from outside a wake-up: the API's id reuse). The caller holds
 * the row's lock in its open transaction. */
st_err_t st_runtime_state_end_tx(PGconn *conn, const char *id, const json_t *snapshot,
                                 const char *signal_id, const char *node_id, st_errbuf_t *eb);

/* One CTE body for the retention run's one statement (api retention.c): deletes the
 * instances whose ids the CTE `batch` names, unless `dry` (an SQL boolean) is true;
 * their runtime states and everything else kept for them go by cascade. Returns 1
 * per row. */
#define ST_INSTANCE_PURGE_SQL(batch, dry)                                                   \
    "DELETE FROM strand.instances i USING " batch " b"                                      \
    "   WHERE NOT " dry " AND i.id = b.id RETURNING 1"
/* ---- pause ---- */

/* Pauses instance `id`: status 'paused' when it is pending, running or waiting; *changed
 * is 0 when it was not (already paused, or ended). Expects the caller's transaction. */
st_err_t st_instance_store_pause_tx(PGconn *conn, const char *id, int *changed,
                                    st_errbuf_t *eb);

/* Resumes a paused instance `id`: its status becomes what its runtime state says
 * (pending before START ran, else the snapshot's running or waiting), written into
 * `status` (at least 16 bytes; "" when it was not paused: nothing changed). Expects the
 * caller's transaction. */
st_err_t st_instance_store_unpause_tx(PGconn *conn, const char *id, char *status, size_t len,
                                      st_errbuf_t *eb);

/* What a rewind writes (st_instance_store_rewind_tx); every pointer is borrowed. */
typedef struct {
    const char *id;
    long long old_version;        /* the state_version it replaces (checked) */
    const char *snapshot;         /* JSON text */
    const char *waiting_kind, *waiting_token, *waiting_until_ms;   /* NULL: none */
    const char *status;           /* the instance's status after the rewind */
    const char *output, *error;   /* JSON text or NULL */
    const char *signal_id, *node_id;
} st_instance_rewind_t;

/* Replaces the runtime state of `r->id` at `r->old_version` by the rewound one (version
 * old + 1, last_error cleared) and its projection (status, output, error, ended_at).
 * ST_ERR_CONFLICT when the version moved. Expects the caller's transaction. */
st_err_t st_instance_store_rewind_tx(PGconn *conn, const st_instance_rewind_t *r,
                                     st_errbuf_t *eb);

/* ---- the executor's wake-up (services/executor/wakeup.c) --------------------------- */

/* What one applied run writes (st_runtime_state_queue_run_tx); every string borrowed,
 * JSON as text, NULL for SQL NULL. */
typedef struct {
    const char *instance_id;
    const char *old_version;       /* the state_version read under the lock (checked) */
    const char *snapshot;          /* the engine's new snapshot */
    const char *waiting_kind, *waiting_token, *waiting_until_ms;
    const char *signal_id, *node_id;
    const char *status;            /* the instance's status after the run */
    const char *output, *error;    /* the instance's output and error, or NULL */
    const char *history_detail;    /* the 'wakeup' history entry's detail (an object) */
} st_run_write_t;

/* Queues (st_pg_queue_bin: sent with the transaction's next statement or COMMIT) the
 * run's runtime state (version + 1, last_error set when it failed, else cleared), the
 * instance's projection and its 'wakeup' history entry, in one statement; a version
 * that moved fails the transaction. Expects the caller's open transaction. */
st_err_t st_runtime_state_queue_run_tx(PGconn *conn, const st_run_write_t *w, st_errbuf_t *eb);

/* A failed wake-up's description on the runtime state (no version bump). */
typedef struct {
    const char *instance_id;
    const char *code;              /* "wakeup_failed", "wakeup_dead_lettered" */
    const char *message;           /* NULL: "" */
    const char *error;             /* st_err_name() of the cause */
    const char *signal_id, *signal_type;
    int attempts;
    int dead_lettered;             /* 1: name the dead letter this transaction just wrote */
} st_last_error_t;

/* Sets runtime_states.last_error of `e->instance_id`. Expects the caller's open
 * transaction (the dead letter's INSERT before it, when dead_lettered). */
st_err_t st_runtime_state_set_last_error_tx(PGconn *conn, const st_last_error_t *e,
                                            st_errbuf_t *eb);

#endif
