/*
 * wakeup.h - one wake-up of one instance: the executor's unit of work.
 *
 * Given a decoded signal, st_wakeup_run() opens one PostgreSQL transaction, records
 * the signal id (dedup), locks the instance's runtime state, checks the expected
 * version and terminal status, runs the interpreter to the next wait, and writes the
 * new snapshot, the instance projection, history and an outbox row per effect. It
 * commits once. It does no network I/O besides PostgreSQL and never touches Kafka:
 * the caller commits the consumer offset after this returns ST_OK.
 */
#ifndef STRAND_EXECUTOR_WAKEUP_H
#define STRAND_EXECUTOR_WAKEUP_H

#include <libpq-fe.h>

#include "strand/engine.h"
#include "strand/err.h"
#include "strand/signal.h"

typedef enum {
    ST_WAKE_APPLIED = 1,   /* the signal ran and its effects committed */
    ST_WAKE_DUPLICATE,     /* this signal id was processed before: nothing changed */
    ST_WAKE_STALE,         /* wrong version/token or instance ended: dropped with a notice */
    ST_WAKE_UNKNOWN,       /* no such instance: dropped with a notice */
    ST_WAKE_BUFFERED,      /* a named signal the instance does not wait for yet: kept */
} st_wake_outcome_t;

typedef struct st_defcache st_defcache_t;

/* A cache of compiled definitions keyed by (name, version); definitions are
 * immutable, so entries never go stale. Not thread-safe: one per worker thread. */
st_defcache_t *st_defcache_new(void);
void st_defcache_free(st_defcache_t *cache);

/* The compiled definition (name, version), loaded inside the caller's transaction on a
 * miss. Borrowed; valid until st_defcache_free(). ST_ERR_NOT_FOUND: not imported. */
st_err_t st_defcache_get_tx(st_defcache_t *cache, PGconn *conn, const char *name, int version,
                            const st_defn_t **out, st_errbuf_t *eb);

/* Processes `sig` on `conn` (no transaction open). On ST_OK *outcome says what
 * happened. Retryable errors (database) leave nothing written; the caller retries.
 * Permanent errors also leave nothing written; the caller dead-letters after
 * bounded attempts. */
st_err_t st_wakeup_run(PGconn *conn, st_defcache_t *cache, const char *node_id,
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

/* ---- pause: wake-ups kept while an instance or its definition version is paused ---- */

/* Keeps `sig` (whole envelope) in strand.signal_buffer because its instance or its
 * definition version is paused; records the signal id as buffered and a history entry
 * "signal_held". Expects the wake-up's open transaction. */
st_err_t st_wakeup_hold_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb);

/* Sends again, in arrival order, every signal kept for `instance_id` by
 * st_wakeup_hold_tx(): each is deleted from the buffer and enqueued (outbox) under a new
 * signal id in the caller's transaction, so a crash either keeps them all or sends them
 * all. *released is how many. */
st_err_t st_wakeup_release_held_tx(PGconn *conn, const char *instance_id, int *released,
                                   st_errbuf_t *eb);

#endif
