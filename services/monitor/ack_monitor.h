/*
 * ack_monitor.h - the ACK deadline loop of strand-monitor.
 *
 * Finds overdue ACK stages only through the partial index on strand.acks.due_at,
 * claims them with FOR UPDATE SKIP LOCKED (so several monitor replicas never raise
 * the same deadline twice), and per row, in one transaction:
 *   delivery pending past its deadline  -> re-raise the stored WorkEvent bytes (same
 *     ack_guid, same contents) through the outbox, DeliveryRetryRaised notice, next
 *     deadline after exponential backoff;
 *   processing pending past its deadline -> the same as a reminder,
 *     ProcessingReminderRaised notice;
 *   either after max_raises -> stage failed, DispatchFailure notice, dead letter.
 * It sleeps until the earliest due_at or a NOTIFY strand_acks, never on a fixed tick.
 */
#ifndef STRAND_MONITOR_ACK_H
#define STRAND_MONITOR_ACK_H

#include "strand/err.h"
#include "strand/service.h"

typedef struct st_ack_monitor st_ack_monitor_t;

/* Starts the loop thread and registers its readiness check. */
st_err_t st_ack_monitor_start(st_service_t *svc, st_ack_monitor_t **out, st_errbuf_t *eb);
/* Finishes the batch in hand, stops and frees. */
void st_ack_monitor_stop(st_ack_monitor_t *m);

#endif
