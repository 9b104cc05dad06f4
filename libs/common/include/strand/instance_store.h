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

#endif
