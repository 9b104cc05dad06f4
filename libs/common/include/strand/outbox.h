/*
 * outbox.h - the transactional outbox and its relay.
 *
 * Every message a state change causes is written to strand.outbox in the same
 * PostgreSQL transaction (st_outbox_add_tx); nothing on a transactional path produces
 * to Kafka directly. The relay, a thread in each writing service, moves committed rows
 * to Kafka. Any number of relays run; one of them, the leader, holds a session advisory
 * lock and publishes (so each key's messages keep their commit order), the others stand
 * by and take over within about a second when the leader's session ends. The leader
 * wakes on LISTEN/NOTIFY or on a Redis hint, claims the oldest rows, produces them with
 * the idempotent producer and marks them published only after their delivery reports
 * succeed, up to the first failure.
 *
 * Waking the leader: an insert notifies strand_outbox at commit, except in a process
 * that runs a relay, with Redis configured and STRAND_WAKE_NOTIFY=fallback, on a
 * thread whose last hint reached the leader: there the insert skips the notification
 * (every notifying commit queues on one database-wide lock through its WAL flush) and
 * the commit publishes a hint on <prefix>outbox (st_pg_after_commit); a hint that
 * reaches nobody is followed by the notification. With hints configured the leader
 * also looks every 250 ms, which bounds a hint lost with its writer. Published rows are purged after STRAND_OUTBOX_RETENTION_S, except
 * signal rows the leader's recovery sweep (recovery.h) has not yet seen applied.
 */
#ifndef STRAND_OUTBOX_H
#define STRAND_OUTBOX_H

#include <libpq-fe.h>
#include <stddef.h>

#include "strand/config.h"
#include "strand/err.h"

/* The NOTIFY channel the relay listens on. */
#define ST_OUTBOX_CHANNEL "strand_outbox"

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

typedef struct st_relay st_relay_t;

/* Starts the relay thread. It connects (and reconnects) by itself; failures after
 * start are logged and retried, never fatal. Caller stops it with st_relay_stop(). */
st_err_t st_relay_start(const st_config_t *cfg, st_relay_t **out, st_errbuf_t *eb);

/* Asks the relay to finish the batch in hand, waits for it, and frees it. */
void st_relay_stop(st_relay_t *relay);

/* True while this relay is the one publishing (holds the leader lock). */
int st_relay_leading(const st_relay_t *relay);

/* True while the relay has a live PostgreSQL connection and its producer reaches a
 * Kafka broker (a standby is ready too). */
int st_relay_ready(const st_relay_t *relay);

#endif
