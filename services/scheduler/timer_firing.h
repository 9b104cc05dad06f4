/*
 * timer_firing.h - strand-scheduler's firing loop.
 *
 * Due timers are claimed with FOR UPDATE SKIP LOCKED and, in the same transaction,
 * marked fired and turned into TIMER_DUE (or RETRY_DUE) signals in the outbox, so a
 * timer fires exactly once in effect however many scheduler replicas run, and a
 * scheduler killed mid-batch leaves its batch unfired for the next claim. The loop
 * sleeps until the earliest pending due time (one lookup on the partial index
 * timers_due) or a NOTIFY strand_timers from a newly scheduled timer; there is no
 * polling tick and no timer is held in memory.
 */
#ifndef STRAND_SCHEDULER_FIRING_H
#define STRAND_SCHEDULER_FIRING_H

#include "strand/err.h"
#include "strand/service.h"

typedef struct st_timer_firing st_timer_firing_t;

st_err_t st_timer_firing_start(st_service_t *svc, st_timer_firing_t **out, st_errbuf_t *eb);
void st_timer_firing_stop(st_timer_firing_t *f);

#endif
