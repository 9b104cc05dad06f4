/*
 * dispatcher.h - performs outbound calls after commit (invariant 7: no network call
 * inside a database transaction) and reports each outcome as a CALL_RESULT signal.
 *
 * A thread in the executor, on the shared deadline loop (libs/common due_loop.c).
 * It wakes on NOTIFY strand_calls, claims pending rows of
 * strand.calls with FOR UPDATE SKIP LOCKED and marks them sent (commit), performs the
 * HTTP POST with the call's timeout and an Idempotency-Key header, then, in one
 * transaction, records the result and enqueues the CALL_RESULT signal with the call's
 * waiting token. At start-up and then at most once a minute, a bounded, indexed
 * sweep returns calls left 'sent' by a crashed dispatcher to 'pending' (workers see
 * the same idempotency key again) and purges the signal dedup window
 * (STRAND_DEDUP_RETENTION_S).
 * Retries are the interpreter's business: it answers a failed result with a durable
 * backoff timer, never a sleep here.
 */
#ifndef STRAND_EXECUTOR_DISPATCHER_H
#define STRAND_EXECUTOR_DISPATCHER_H

#include "strand/err.h"
#include "strand/service.h"

/* NOTIFY channel raised with each new call (effects.c), in the call's transaction. */
#define ST_CALLS_CHANNEL "strand_calls"

typedef struct st_dispatcher st_dispatcher_t;

/* Starts the dispatcher thread. Caller stops it with st_dispatcher_stop(). */
st_err_t st_dispatcher_start(st_service_t *svc, st_dispatcher_t **out, st_errbuf_t *eb);

/* Finishes the call in hand (bounded by its timeout), then stops and frees. */
void st_dispatcher_stop(st_dispatcher_t *d);

#endif
