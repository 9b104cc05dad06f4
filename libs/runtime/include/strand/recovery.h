/*
 * recovery.h - the outbox's recovery sweep (docs/architecture.md, invariant 5).
 *
 * Kafka may lose a message the relay handed it (a topic deleted and recreated, a
 * broker's disk with replication factor 1, retention). For a signal that means an
 * instance waiting forever. The sweep finds signals that were published at least
 * STRAND_RECOVERY_GRACE_S ago, were never applied (no strand.processed_signals row,
 * not dead-lettered) and whose instance has not ended, and publishes them again by
 * marking their outbox row unpublished. The executor's duplicate check drops a copy
 * of a signal that was only slow.
 *
 * Who runs it: the relay leader (one per database, relay.c), on its own connection
 * and thread, at start-up (it begins at the oldest outbox row) and every
 * STRAND_RECOVERY_INTERVAL_S. Bounded: a sweep examines at most STRAND_RECOVERY_BATCH
 * new rows in id order from where the last one stopped (a sweep that found a full
 * batch is followed by the next within a second until it has caught up), and at most
 * as many rows already re-published. A re-published row is watched, with backoff
 * (grace x 2^n, n up to 4), until its signal is applied, its instance ends, or it was
 * re-published RECOVERY_MAX_REPUBLISH times (then a warning names it). Only signals
 * younger than half of STRAND_DEDUP_RETENTION_S are re-published: an older one may
 * have been applied and its dedup record purged since.
 *
 * The outbox purge (relay.c) keeps a signal row until the sweep has passed it
 * (st_recovery_checked_id()) and while it is watched.
 */
#ifndef STRAND_RECOVERY_H
#define STRAND_RECOVERY_H

#include <libpq-fe.h>

#include "strand/config.h"

/* A row re-published this many times without being applied is given up on. */
#define ST_RECOVERY_MAX_REPUBLISH 8

typedef struct st_recovery st_recovery_t;

/* The sweep's state for one relay; `cfg` is copied. Never fails (aborts on no memory).
 * Caller frees with st_recovery_free(). */
st_recovery_t *st_recovery_new(const st_config_t *cfg);
void st_recovery_free(st_recovery_t *rec);

/* Forgets how far the sweep got: the next sweep starts from the oldest row. Called
 * when the relay becomes the leader. */
void st_recovery_restart(st_recovery_t *rec);

/* True when a sweep is due (at once after st_recovery_restart()). */
int st_recovery_due(const st_recovery_t *rec);

/* Milliseconds until the next sweep is due (0: now). */
long long st_recovery_wait_ms(const st_recovery_t *rec);

/* Runs one sweep on `conn` (autocommit; each statement is its own transaction).
 * Returns the number of rows marked for publishing again (the caller's relay then
 * publishes them), or -1 on a database error (logged; the sweep is retried later). */
int st_recovery_sweep(st_recovery_t *rec, PGconn *conn);

/* The highest outbox id every row up to which the sweep has examined (0 before the
 * first sweep). The purge deletes no signal row above it. */
long long st_recovery_checked_id(const st_recovery_t *rec);

#endif
