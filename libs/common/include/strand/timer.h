/*
 * timer.h - durable timers, the write side. The executor (and later the lifecycle and
 * process code) schedules a timer inside its own transaction; strand-scheduler fires
 * it as a TIMER_DUE (or RETRY_DUE) signal carrying the waiting token. Cancelling or
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

#endif
