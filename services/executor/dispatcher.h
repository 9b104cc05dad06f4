/*
 * dispatcher.h - performs outbound calls after commit (docs/architecture.md, invariant 7:
 * no network call inside a database transaction) and reports each outcome as a
 * CALL_RESULT signal.
 *
 * Two threads in the executor:
 *  - the claimer, on the shared deadline loop (libs/common due_loop.c), wakes on
 *    NOTIFY strand_calls and claims pending rows of strand.calls (through libs/common
 *    call.c, the table's owner) with FOR UPDATE SKIP LOCKED, as many as there are
 *    free places (STRAND_EXECUTOR_CALL_CONCURRENCY, 32 by default). A claim marks the
 *    call 'sent' under a lease (STRAND_EXECUTOR_CALL_LEASE_MS) and commits. A call
 *    whose instance no longer waits on its token (cancelled, ended, or moved on) is
 *    marked 'abandoned' at the claim and never sent.
 *  - the runner performs the claimed calls at once, all concurrently, on one libcurl
 *    multi handle, each bounded by its own timeout, so one slow or hung worker delays
 *    no other call. It renews the leases of the calls in flight every third of the
 *    lease, and, in one transaction per call, records the result and enqueues the
 *    CALL_RESULT signal with the call's waiting token.
 * An executor that dies stops renewing: when a lease has passed, the claimer of any
 * executor (woken by that deadline, the earliest lease_until, not by a polling tick)
 * returns the call to 'pending' and sends it again, with the same Idempotency-Key
 * and attempt and the next lease epoch (Strand-Lease-Epoch).
 * The fence: each claimed call has a deadline on this process's monotonic clock, the
 * moment before the claim was issued + lease - margin (max(1 s, lease / 5), at most
 * half the lease); the runner sends a call only before it (one past it is logged,
 * counted in strand_call_lease_lapsed_total and left to the next claim), a renewal
 * moves it only when it succeeded, and only the current epoch's claim renews a lease
 * or records a result (libs/store call.c). Once a minute the claimer also purges the signal dedup window
 * (STRAND_DEDUP_RETENTION_S).
 * Retries are the interpreter's business: it answers a failed result with a durable
 * backoff timer, never a sleep here.
 */
#ifndef STRAND_EXECUTOR_DISPATCHER_H
#define STRAND_EXECUTOR_DISPATCHER_H

#include "strand/err.h"
#include "strand/service.h"

typedef struct st_dispatcher st_dispatcher_t;

/* Starts the dispatcher's threads. Caller stops it with st_dispatcher_stop(). */
st_err_t st_dispatcher_start(st_service_t *svc, st_dispatcher_t **out, st_errbuf_t *eb);

/* Stops claiming, lets the calls in flight finish for up to a few seconds (the rest
 * are left to their leases: another executor sends them again), then frees. */
void st_dispatcher_stop(st_dispatcher_t *d);

#endif
