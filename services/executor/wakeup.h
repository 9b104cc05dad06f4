/*
 * wakeup.h - one wake-up of one instance: the executor's unit of work.
 *
 * Given a decoded signal, st_wakeup_run() opens one PostgreSQL transaction, records
 * the signal id (dedup), locks the instance's runtime state, checks the expected
 * version and terminal status, runs the interpreter to the next wait, and writes the
 * new snapshot, the instance projection, history and an outbox row per effect. It
 * commits once (st_wakeup_run_tx(): inside the caller's transaction, which may hold
 * other wake-ups). It does no network I/O besides PostgreSQL and never touches Kafka:
 * the caller commits the consumer offset after this returns ST_OK.
 */
#ifndef STRAND_EXECUTOR_WAKEUP_H
#define STRAND_EXECUTOR_WAKEUP_H

#include <libpq-fe.h>

#include "strand/engine.h"
#include "strand/err.h"
#include "strand/signal.h"

#include "defcache.h"
#include "outcome.h"


/* Processes `sig` on `conn` (no transaction open). On ST_OK *outcome says what
 * happened. Retryable errors (database) leave nothing written; the caller retries.
 * Permanent errors also leave nothing written; the caller dead-letters after
 * bounded attempts. */
st_err_t st_wakeup_run(PGconn *conn, st_defcache_t *cache, const char *node_id,
                       const st_signal_t *sig, st_wake_outcome_t *outcome, st_errbuf_t *eb);

/* st_wakeup_run() inside the caller's open transaction on `conn`, which may hold
 * other wake-ups (the executor groups queued signals of different instances into one
 * commit). Neither commits nor rolls back: on ST_OK the caller commits; on an error
 * what this wake-up wrote is still in the transaction, and the caller must roll the
 * whole transaction back (and may then retry each signal alone). */
st_err_t st_wakeup_run_tx(PGconn *conn, st_defcache_t *cache, const char *node_id,
                          const st_signal_t *sig, st_wake_outcome_t *outcome, st_errbuf_t *eb);

/* Records on the instance's runtime state (last_error_code, last_error) that a
 * wake-up for `sig` failed with `cause` and `message` after `attempts` attempts:
 * "wakeup_failed" (it is retried), or with `dead_lettered` "wakeup_dead_lettered",
 * naming the dead letter the caller's transaction just wrote (st_dead_letter_add_tx()
 * on `conn`). Expects the caller's open transaction. The next applied wake-up clears
 * it (or sets "instance_failed" when the instance failed). */
st_err_t st_wakeup_failed_tx(PGconn *conn, const st_signal_t *sig, st_err_t cause,
                             const char *message, int attempts, int dead_lettered,
                             st_errbuf_t *eb);

/* st_wakeup_failed_tx() (not dead-lettered) in its own transaction on `conn` (none
 * open); a failure to record is logged, not returned: the wake-up is retried anyway. */
void st_wakeup_failed(PGconn *conn, const st_signal_t *sig, st_err_t cause, const char *message,
                      int attempts);

/* Name of an outcome ("applied", "duplicate", ...); static storage. */
const char *st_wake_outcome_name(st_wake_outcome_t outcome);



#endif
