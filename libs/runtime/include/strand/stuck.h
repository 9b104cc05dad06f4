/*
 * stuck.h - stuck detection (issue 18, item 4; ARCHITECTURE.md invariant 12): the one
 * query that finds instances waiting on something that cannot arrive, or whose last
 * wake-up failed. Read-only; it owns no table. Its users: GET /v1/instances/stuck and
 * the "stuck" field of GET /v1/instances/{id}/runtime (strand-api), and the gauge
 * strand_instances_stuck (strand-monitor, every STRAND_STUCK_INTERVAL_S).
 *
 * An instance (status running or waiting) is stuck with the reason:
 *   last_wakeup_failed       its runtime state's last_error is a wake-up that was
 *                            dead-lettered (wakeup_dead_lettered), or that failed
 *                            (wakeup_failed) more than the grace period ago; this
 *                            one also for a pending instance (its START failed);
 *   no_pending_wakeup        nothing can wake it: no open task, no pending timer, no
 *                            call pending or sent, no running child, no ACK the
 *                            monitor still works on, no buffered signal, and no
 *                            deadline (waiting_until), for more than the grace period
 *                            since it last moved;
 *   signal_without_deadline  the same, but what it waits for is an external signal
 *                            (wait_signal without a timeout): one may still come, but
 *                            nothing in Strand will end the wait.
 * A lifecycle resting in a state (waiting kind "trigger") waits for triggers by
 * design and is never listed. The grace period (STRAND_STUCK_GRACE_S, default 60 s)
 * covers a wake-up in flight (a child's end or a call's result travelling as a
 * signal).
 */
#ifndef STRAND_STUCK_H
#define STRAND_STUCK_H

#include <libpq-fe.h>

#include "strand/err.h"

/* The reasons, in the order the count answers them. */
#define ST_STUCK_NREASONS 3
extern const char *const st_stuck_reasons[ST_STUCK_NREASONS];

/* One page of stuck instances, longest stuck first: rows of (instance_id,
 * definition_name, definition_version, status, reason, waiting_kind, since (text
 * timestamptz), since in epoch microseconds, last_error_code). `after_us`/`after_id`
 * (both NULL for the first page) is the last row of the previous page; `reason`
 * (NULL: any) filters. *res is the caller's (PQclear). */
st_err_t st_stuck_page(PGconn *conn, int grace_s, const char *reason, const char *after_us,
                       const char *after_id, int limit, PGresult **res, st_errbuf_t *eb);

/* Whether instance `id` is stuck now: *found 1 with its reason (a static string
 * from st_stuck_reasons) and `since` (RFC 3339, caller's buffer), else 0. */
st_err_t st_stuck_check(PGconn *conn, int grace_s, const char *id, int *found,
                        const char **reason, char *since, size_t since_len, st_errbuf_t *eb);

/* The number of stuck instances per reason (counts[i] for st_stuck_reasons[i]). One
 * pass over the running and waiting instances. */
st_err_t st_stuck_count(PGconn *conn, int grace_s, long long counts[ST_STUCK_NREASONS],
                        st_errbuf_t *eb);

#endif
