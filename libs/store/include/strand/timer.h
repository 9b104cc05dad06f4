/*
 * timer.h - durable timers, the owner of strand.timers. The executor schedules a timer
 * inside its own transaction (timer steps, retries, call timeouts, lifecycle state
 * timeouts); strand-scheduler fires it (st_timer_fire_due_tx) as a TIMER_DUE (or
 * RETRY_DUE) signal carrying the waiting token. Cancelling or
 * rescheduling is logical: a newer wait has a newer token, and the executor drops the
 * stale signal, so correctness never depends on deleting a row or a message.
 */
#ifndef STRAND_TIMER_H
#define STRAND_TIMER_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/err.h"

/* Timers are spread over this many shards (a hash of the instance id); scheduler
 * replicas split the shards between them. Fixed for the life of a database. */
#define ST_TIMER_SHARDS 64

/* NOTIFY channel raised when a timer is scheduled (payload: "<shard> <due ms>"). */
#define ST_TIMER_CHANNEL "strand_timers"

/* The shard of an instance. */
int st_timer_shard(const char *instance_id);

/* Inserts a timer row (kind: "timer", "retry", "state_timeout", "process_timeout") due
 * at `due_ms` for the wait `waiting_token`, and notifies the schedulers at commit.
 * `payload` (borrowed, may be NULL) travels in the fired signal. Expects the caller to
 * hold an open transaction on `conn`. */
st_err_t st_timer_schedule_tx(PGconn *conn, const char *instance_id, const char *waiting_token,
                              const char *kind, long long due_ms, const json_t *payload,
                              st_errbuf_t *eb);

/* One due timer claimed by st_timer_fire_due_tx(); the strings live until `fire`
 * returns. */
typedef struct {
    const char *instance_id;
    const char *waiting_token;
    const char *kind;
    long long due_ms;
    const char *payload;       /* JSON text */
    double lateness_s;         /* firing time minus due time */
} st_timer_due_t;

/* Claims up to `limit` due timers (FOR UPDATE SKIP LOCKED, so replicas never share
 * one), marks them fired and calls `fire` for each, all in the caller's open
 * transaction: they stay unfired unless it commits. Stops at the first error `fire`
 * returns. Sets *n to the number claimed. */
st_err_t st_timer_fire_due_tx(PGconn *conn, int limit,
                              st_err_t (*fire)(const st_timer_due_t *t, void *ctx,
                                               st_errbuf_t *eb),
                              void *ctx, int *n, st_errbuf_t *eb);

/* Milliseconds until the earliest unfired timer is due (0 if overdue), or -1 for none. */
long long st_timer_next_due_ms(PGconn *conn);

/* Unfired timers per shard, into `per_shard` (ST_TIMER_SHARDS entries); returns the
 * total, or -1 on a database error. */
double st_timer_count_pending(PGconn *conn, double *per_shard, st_errbuf_t *eb);

/* Deletes up to 10000 timers fired more than `retention_s` ago. */
st_err_t st_timer_purge_fired(PGconn *conn, int retention_s, st_errbuf_t *eb);

/* The retention run's part, for its one statement (a CTE body): deletes the timers of
 * the instances in the CTE named `batch` (column id) unless `dry`, a boolean SQL
 * expression. Both are SQL text literals. */
#define ST_TIMER_PURGE_SQL(batch, dry)                                                     \
    "DELETE FROM strand.timers t USING " batch " b WHERE NOT " dry                         \
    " AND t.instance_id = b.id RETURNING 1"

#endif
