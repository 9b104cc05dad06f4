/*
 * verify.h - the executor's own checks of a signal before it is applied, so that a
 * message produced straight onto the signals topic (not through Strand's outbox)
 * changes nothing. Kafka ACLs keep the topic closed (docs/operations.md, "Kafka
 * security"); these checks hold where the ACLs are missing or wrong:
 *
 *   CANCEL, TERMINATE  must have Strand's record (strand.control_signals, written by
 *                      st_signal_enqueue_tx() in the API's transaction); taken here.
 *   TASK_COMPLETED     for a task of this instance waiting on the signal's token: the
 *                      result must conform to the step's result_schema, and the task row
 *                      must say completed with the very result the API recorded.
 *
 * Everything else is left to the usual checks (dedup, version, waiting token).
 */
#ifndef STRAND_EXECUTOR_VERIFY_H
#define STRAND_EXECUTOR_VERIFY_H

#include <libpq-fe.h>

#include "strand/err.h"
#include "strand/signal.h"

/* Checks `sig` inside the wake-up's open transaction on `conn` (instance row locked).
 * ST_OK: go on. ST_ERR_FORBIDDEN: refused, with the reason in `eb`; the caller rolls
 * back and dead-letters the message at once (retrying cannot help). Other errors are
 * database errors. */
st_err_t st_verify_signal_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb);

#endif
