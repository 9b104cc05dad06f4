/*
 * outbox.h - the transactional outbox (owner of strand.outbox).
 *
 * Every message a state change causes is written to strand.outbox in the same
 * PostgreSQL transaction (st_outbox_add_tx); nothing on a transactional path produces
 * to Kafka directly. The relay (relay.h, libs/runtime), a thread in each writing
 * service, moves committed rows to Kafka through the statements below; the recovery
 * sweep (recovery.h) marks lost signal rows for publication again.
 *
 * Waking the relay: an insert notifies strand_outbox at commit, except in a process
 * that runs a relay, with Redis configured and STRAND_WAKE_NOTIFY=fallback, on a
 * thread whose last hint reached the leader: there the insert skips the notification
 * (every notifying commit queues on one database-wide lock through its WAL flush) and
 * the commit publishes a hint on <prefix>outbox (st_pg_after_commit); a hint that
 * reaches nobody is followed by the notification. With hints configured the leader
 * also looks every 250 ms, which bounds a hint lost with its writer. Published rows
 * are purged after STRAND_OUTBOX_RETENTION_S, except signal rows the leader's recovery
 * sweep has not yet seen applied.
 */
#ifndef STRAND_OUTBOX_H
#define STRAND_OUTBOX_H

#include <libpq-fe.h>
#include <stddef.h>

#include "strand/config.h"
#include "strand/err.h"

/* The NOTIFY channel the relay listens on. */
#define ST_OUTBOX_CHANNEL "strand_outbox"

/* ---- writers ------------------------------------------------------------------------ */

/* Appends one message for `topic` (a suffix such as ST_TOPIC_SIGNALS) with partition
 * `key` (may be NULL). Expects the caller to hold an open transaction on `conn`; the
 * insert is queued (st_pg_queue_bin()), so it goes out with the transaction's next
 * statement or its COMMIT and an error in it is reported there. The relay is woken
 * when it commits (a notification or a hint, above). `payload` is copied. */
st_err_t st_outbox_add_tx(PGconn *conn, const char *topic, const char *key,
                          const void *payload, size_t len, st_errbuf_t *eb);

/* Appends an encoded signal (strand.v1.Signal) for the signals topic, keyed by
 * `instance_id`, as st_outbox_add_tx() does, and records its `signal_id` and instance
 * on the row for the recovery sweep (recovery.h). Used by st_signal_enqueue_tx(). */
st_err_t st_outbox_add_signal_tx(PGconn *conn, const char *signal_id, const char *instance_id,
                                 const void *payload, size_t len, st_errbuf_t *eb);

/* Called by each relay at its start (the first call configures the process): from then
 * on this process's writers may skip the notification and rely on Redis hints, as above.
 * Returns 1 when they may (Redis configured, STRAND_WAKE_NOTIFY=fallback), else 0. */
int st_outbox_hints_configure(const st_config_t *cfg);

/* ---- the relay -------------------------------------------------------------------- */

/* The columns of a claim's rows, in order. */
enum {
    ST_OUTBOX_COL_ID, ST_OUTBOX_COL_TOPIC, ST_OUTBOX_COL_KEY, ST_OUTBOX_COL_PAYLOAD,
    ST_OUTBOX_COL_AGE_S, ST_OUTBOX_COL_SIGNAL_ID, ST_OUTBOX_COL_INSTANCE_ID
};

/* Locks the `limit` oldest unpublished rows (FOR UPDATE) in the caller's transaction
 * and returns them in id order, in text format (the payload hex-escaped). Caller
 * PQclear()s `*rows`. */
st_err_t st_outbox_claim_tx(PGconn *conn, int limit, PGresult **rows, st_errbuf_t *eb);

/* Marks published the rows whose ids `ids` lists (an array literal, "{1,2,3}"). */
st_err_t st_outbox_mark_published_tx(PGconn *conn, const char *ids, st_errbuf_t *eb);

/* Marks row `id` failed and done (Kafka refused it for good), with `reason`. */
st_err_t st_outbox_set_aside_tx(PGconn *conn, const char *id, const char *reason,
                                st_errbuf_t *eb);

/* Deletes up to 10,000 rows published more than `retention_s` ago, but no signal row
 * after `checked_id` (the recovery sweep has not examined it) nor one it still
 * watches. */
st_err_t st_outbox_purge(PGconn *conn, int retention_s, long long checked_id, st_errbuf_t *eb);

/* The number of unpublished rows. */
st_err_t st_outbox_backlog(PGconn *conn, long long *count, st_errbuf_t *eb);

/* ---- the recovery sweep (recovery.h) ---------------------------------------------- */

/* What one pass over new rows found. */
typedef struct {
    long long checked_id;   /* every row up to here has been examined */
    int scanned, examined, marked;
    char first[512];        /* a few of the marked rows, for the log */
} st_outbox_sweep_new_t;

/* Examines up to `batch` rows after `checked_id` in id order, up to the first one not
 * published at least `grace_s` ago, and marks unpublished again each signal row created
 * within `window_s` whose signal was never applied while its instance waits (no dedup
 * record, not dead-lettered). */
st_err_t st_outbox_sweep_new(PGconn *conn, long long checked_id, int batch, int grace_s,
                             int window_s, st_outbox_sweep_new_t *out, st_errbuf_t *eb);

/* What one pass over watched rows found. */
typedef struct {
    int again, settled, given_up;
    char first_given_up[512];   /* a few of the rows given up on, for the log */
} st_outbox_sweep_watched_t;

/* Watched rows (published again before) whose backoff ran out: still lost ones are
 * published again (up to `most` times, then given up on), the others settled. */
st_err_t st_outbox_sweep_watched(PGconn *conn, int batch, int grace_s, int window_s,
                                 int most, st_outbox_sweep_watched_t *out, st_errbuf_t *eb);

#endif
