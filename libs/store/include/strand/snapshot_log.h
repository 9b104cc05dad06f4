/*
 * snapshot_log.h - the owner of strand.snapshot_log (migration 0024): the snapshot each
 * applied wake-up produced, by the state_version it produced, so that an operator can
 * rewind an instance to an earlier one (POST /v1/instances/{id}/rewind). Only the
 * latest ST_SNAPSHOT_LOG_KEEP versions of an instance are kept; a deleted instance
 * takes its rows with it.
 */
#ifndef STRAND_SNAPSHOT_LOG_H
#define STRAND_SNAPSHOT_LOG_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/err.h"

/* How many of an instance's latest versions are kept (older ones are deleted as new
 * ones are written): the depth of a rewind. */
#define ST_SNAPSHOT_LOG_KEEP 64

/* Keeps `snapshot_text` (the JSON text written to the runtime state) as the snapshot of
 * `instance_id` at `state_version` and drops those older than ST_SNAPSHOT_LOG_KEEP
 * versions. Callers keep only snapshots of a waiting instance (an ended one is no
 * place to continue from). Queued (st_pg_queue_bin): it travels with the transaction's next statement
 * or COMMIT. Borrowed strings. Expects the caller's open transaction. */
st_err_t st_snapshot_log_keep_tx(PGconn *conn, const char *instance_id,
                                 long long state_version, const char *snapshot_text,
                                 st_errbuf_t *eb);

/* The snapshot kept for `instance_id` at `state_version` into *out (caller decrefs),
 * or NULL when none is kept. Expects the caller's transaction (or none). */
st_err_t st_snapshot_log_get(PGconn *conn, const char *instance_id, long long state_version,
                             json_t **out, st_errbuf_t *eb);

#endif
