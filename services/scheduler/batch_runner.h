/*
 * batch_runner.h - strand-scheduler's batch loop: works the durable bulk operations
 * of POST /v1/batches (libs/common batch.h owns their tables).
 *
 * The loop claims a chunk of a running job's pending items with FOR UPDATE SKIP
 * LOCKED, locks their instances' runtime states, and in the chunk's one transaction
 * enqueues each applicable item's signal (its signal id is derived from the job and
 * instance ids, so the executor's dedup also guards), writes its audit row (actor: the
 * job's creator), marks each item done or failed and adds the chunk to the job's
 * counters; then commits. A scheduler killed mid-chunk leaves the chunk pending for
 * the next claim, and no item is applied twice. Any number of scheduler replicas share
 * a job. It sleeps until a NOTIFY strand_batches (a job created), or, while jobs run
 * whose items other replicas hold, re-checks every second (a replica that died frees
 * its chunk when its session ends).
 */
#ifndef STRAND_SCHEDULER_BATCH_RUNNER_H
#define STRAND_SCHEDULER_BATCH_RUNNER_H

#include "strand/err.h"
#include "strand/service.h"

typedef struct st_batch_runner st_batch_runner_t;

/* Starts the loop with STRAND_BATCH_CHUNK items per transaction (default 100, 1 to
 * 1000). Caller stops it with st_batch_runner_stop(). */
st_err_t st_batch_runner_start(st_service_t *svc, st_batch_runner_t **out, st_errbuf_t *eb);
/* Finishes the chunk in hand, stops the loop and frees. NULL is a no-op. */
void st_batch_runner_stop(st_batch_runner_t *r);

#endif
