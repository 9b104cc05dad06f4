/*
 * dedup.h - the owner of strand.processed_signals: the signal ids an executor has
 * consumed, with what became of each (applied, duplicate, stale, buffered, ...). A
 * signal id recorded here is never applied again (docs/architecture.md, invariant 2);
 * the recovery sweep reads it to find signals Kafka lost. Ids older than
 * STRAND_DEDUP_RETENTION_S are forgotten; the version and waiting-token checks still
 * catch an older redelivery.
 */
#ifndef STRAND_DEDUP_H
#define STRAND_DEDUP_H

#include <libpq-fe.h>

#include "strand/err.h"

/* A CTE body for the wake-up's one dedup-and-lock statement: records signal id `id`
 * of instance `instance` (SQL expressions, e.g. "$1", "$2::uuid") as applied, and
 * returns one row only when this statement recorded it (a duplicate inserts nothing). */
#define ST_DEDUP_RECORD_SQL(id, instance)                                                   \
    "INSERT INTO strand.processed_signals (signal_id, instance_id, outcome)"                \
    " VALUES (" id ", " instance ", 'applied') ON CONFLICT (signal_id) DO NOTHING RETURNING 1"

/* Sets what became of a recorded signal (`outcome`: "duplicate", "stale", "buffered",
 * ...), in the caller's transaction. */
st_err_t st_dedup_set_outcome_tx(PGconn *conn, const char *signal_id, const char *outcome,
                                 st_errbuf_t *eb);

/* *fresh = 1 when the caller's open transaction recorded `signal_id` (first sight). */
st_err_t st_dedup_recorded_here_tx(PGconn *conn, const char *signal_id, int *fresh,
                                   st_errbuf_t *eb);

/* Forgets up to 10000 ids recorded more than `retention_s` ago. */
st_err_t st_dedup_purge(PGconn *conn, int retention_s, st_errbuf_t *eb);

/* The retention run's part, for its one statement (a CTE body): deletes the records of
 * the instances in the CTE named `batch` (column id) unless `dry`, a boolean SQL
 * expression. Both are SQL text literals. */
#define ST_DEDUP_PURGE_SQL(batch, dry)                                                      \
    "DELETE FROM strand.processed_signals p USING " batch " b WHERE NOT " dry               \
    " AND p.instance_id = b.id RETURNING 1"

#endif
