/*
 * history.h - the owner of strand.history, an instance's timeline (wake-ups, ACK
 * stages, work events, RPCs, ...; GET /v1/instances/{id}/history reads it). Every row
 * is written through here, inside the caller's transaction (_tx).
 */
#ifndef STRAND_HISTORY_H
#define STRAND_HISTORY_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/err.h"

/* The head of the one INSERT, for a statement that must add its row in the same round
 * trip as other writes (the executor's wake-up commit: "... h AS (" ST_HISTORY_INSERT
 * " SELECT ...)"). Columns: instance_id uuid, kind text, detail jsonb. */
#define ST_HISTORY_INSERT "INSERT INTO strand.history (instance_id, kind, detail)"

/* Appends one entry {kind, detail} to `instance_id`'s timeline in the caller's open
 * transaction (or as its own statement). `detail` is borrowed (a JSON object). */
st_err_t st_history_add_tx(PGconn *conn, const char *instance_id, const char *kind,
                           const json_t *detail, st_errbuf_t *eb);

/* The same, queued in the transaction's pipeline (st_pg_queue_bin): it goes out with
 * the next statement or the COMMIT. For the executor's wake-up transaction. */
st_err_t st_history_queue_tx(PGconn *conn, const char *instance_id, const char *kind,
                             const json_t *detail, st_errbuf_t *eb);

#endif
