/* recovery.c - the outbox's recovery sweep (see recovery.h). */
#include "strand/recovery.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/util.h"

#define CATCH_UP_MS 1000       /* a sweep that found a full batch: the next one this soon */
#define RETRY_MS 5000          /* after a database error */

struct st_recovery {
    int batch, grace_s, window_s, interval_s;
    long long checked_id;      /* every row up to here has been examined */
    long long next_ms;         /* st_now_ms() of the next sweep; 0: at once */
    st_metric_t *m_republished, *m_given_up, *m_sweeps;
};

st_recovery_t *st_recovery_new(const st_config_t *cfg)
{
    st_recovery_t *rec = calloc(1, sizeof *rec);
    if (rec == NULL)
        abort();
    rec->batch = cfg->recovery_batch;
    rec->grace_s = cfg->recovery_grace_s;
    rec->interval_s = cfg->recovery_interval_s;
    rec->window_s = cfg->dedup_retention_s / 2;
    rec->m_republished = st_metrics_counter(
        "strand_outbox_recovered_total",
        "Signals published again by the recovery sweep (published, never applied)", NULL);
    rec->m_given_up = st_metrics_counter(
        "strand_outbox_recovery_given_up_total",
        "Signals the recovery sweep stopped publishing again (never applied)", NULL);
    rec->m_sweeps = st_metrics_counter("strand_outbox_recovery_sweeps_total",
                                       "Recovery sweeps run by the relay leader", NULL);
    return rec;
}

void st_recovery_free(st_recovery_t *rec)
{
    free(rec);
}

void st_recovery_restart(st_recovery_t *rec)
{
    rec->checked_id = 0;
    rec->next_ms = 0;
}

int st_recovery_due(const st_recovery_t *rec)
{
    return st_now_ms() >= rec->next_ms;
}

long long st_recovery_wait_ms(const st_recovery_t *rec)
{
    long long left = rec->next_ms - st_now_ms();
    return left > 0 ? left : 0;
}

long long st_recovery_checked_id(const st_recovery_t *rec)
{
    return rec->checked_id;
}

int st_recovery_sweep(st_recovery_t *rec, PGconn *conn)
{
    st_errbuf_t eb;
    st_outbox_sweep_new_t fresh;
    if (st_outbox_sweep_new(conn, rec->checked_id, rec->batch, rec->grace_s, rec->window_s,
                            &fresh, &eb) != ST_OK) {
        st_log_warn("could not run the outbox recovery sweep", "%s", eb.msg);
        rec->next_ms = st_now_ms() + RETRY_MS;
        return -1;
    }
    rec->checked_id = fresh.checked_id;
    int scanned = fresh.scanned, examined = fresh.examined, marked = fresh.marked;
    if (marked > 0)
        st_log_warn("signals published again: published but never applied",
                    "count=%d after %d s; first: %s", marked, rec->grace_s, fresh.first);
    st_outbox_sweep_watched_t watched;
    if (st_outbox_sweep_watched(conn, rec->batch, rec->grace_s, rec->window_s,
                                ST_RECOVERY_MAX_REPUBLISH, &watched, &eb) != ST_OK) {
        st_log_warn("could not run the outbox recovery sweep", "%s", eb.msg);
        rec->next_ms = st_now_ms() + RETRY_MS;
        return -1;
    }
    int again = watched.again, given_up = watched.given_up;
    if (again > 0)
        st_log_warn("signals published again: still not applied", "count=%d", again);
    if (given_up > 0)
        st_log_error("signals not applied after being published again; given up",
                     "count=%d after %d publications; first: %s", given_up,
                     ST_RECOVERY_MAX_REPUBLISH + 1, watched.first_given_up);
    st_metric_inc(rec->m_sweeps);
    st_metric_add(rec->m_republished, marked + again);
    st_metric_add(rec->m_given_up, given_up);
    /* A full batch, all of it old enough: more is waiting behind it. */
    int behind = scanned == rec->batch && examined == scanned;
    rec->next_ms = st_now_ms() + (behind ? CATCH_UP_MS : (long long)rec->interval_s * 1000);
    return marked + again;
}
