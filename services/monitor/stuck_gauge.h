/*
 * stuck_gauge.h - strand-monitor's count of stuck instances (libs/common stuck.h):
 * every STRAND_STUCK_INTERVAL_S (default 60 s) one run of the stuck query sets the
 * gauge strand_instances_stuck{reason=...}. Read-only; a thread of its own (a due
 * loop without a channel, waking on its own deadline only), so a slow count never
 * delays an ACK deadline. Every replica counts the same rows: alert on max().
 */
#ifndef STRAND_MONITOR_STUCK_GAUGE_H
#define STRAND_MONITOR_STUCK_GAUGE_H

#include "strand/err.h"
#include "strand/service.h"

typedef struct st_stuck_gauge st_stuck_gauge_t;

/* Starts the counting thread (the first count runs at once). Caller stops it with
 * st_stuck_gauge_stop(). */
st_err_t st_stuck_gauge_start(st_service_t *svc, st_stuck_gauge_t **out, st_errbuf_t *eb);
/* Stops the thread and frees; NULL is a no-op. */
void st_stuck_gauge_stop(st_stuck_gauge_t *g);

#endif
