/* recovery.c - the outbox's recovery sweep (see recovery.h). */
#include "strand/recovery.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/log.h"
#include "strand/metrics.h"
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

/* A signal row `e` (with id, signal_id, instance_id) whose signal was never applied
 * while its instance waits: no dedup record (every signal the executor consumed has
 * one, whatever its outcome) and the instance exists and has not ended. */
#define UNAPPLIED(e)                                                                     \
    " " e ".signal_id IS NOT NULL"                                                       \
    " AND NOT EXISTS (SELECT 1 FROM strand.processed_signals p"                          \
    "   WHERE p.signal_id = " e ".signal_id)"                                            \
    " AND EXISTS (SELECT 1 FROM strand.instances i WHERE i.id = " e ".instance_id"       \
    "   AND i.status NOT IN ('completed', 'failed', 'cancelled', 'terminated'))"
/* ... and not in the dead-letter store: no dead letter for its signal id (the
 * executor records it from the envelope, the relay for a row it set aside), none for
 * the same instance and bytes (dead letters written before 0020 carry no signal id),
 * and not a row the relay set aside (failed_at). Checked only on the few rows
 * UNAPPLIED() leaves (a MATERIALIZED step keeps the planner from running it on every
 * examined row). */
#define NOT_DEAD(e)                                                                      \
    " NOT EXISTS (SELECT 1 FROM strand.dead_letters d WHERE d.signal_id = " e ".signal_id)" \
    " AND NOT EXISTS (SELECT 1 FROM strand.outbox o3 WHERE o3.id = " e ".id"            \
    "   AND o3.failed_at IS NOT NULL)"                                                   \
    " AND NOT EXISTS (SELECT 1 FROM strand.dead_letters d JOIN strand.outbox o2"         \
    "   ON o2.id = " e ".id WHERE d.instance_id = " e ".instance_id"                     \
    "   AND d.payload = o2.payload)"

/* New rows: $1 checked id, $2 batch, $3 grace s, $4 window s. Examines the rows after
 * the checked id in id order, up to the first one not published at least the grace
 * period ago, and marks the lost ones unpublished. Answers the new checked id, rows
 * scanned, rows examined, rows marked and a few of them for the log. */
static const char *const sql_sweep_new =
    "WITH scan AS (SELECT id, published_at, created_at, signal_id, instance_id"
    "   FROM strand.outbox WHERE id > $1::bigint ORDER BY id LIMIT $2::int),"
    " edge AS (SELECT coalesce(min(id), 9223372036854775807) AS id FROM scan"
    "   WHERE published_at IS NULL OR published_at > now() - make_interval(secs => $3::int)),"
    " examined AS (SELECT s.* FROM scan s, edge WHERE s.id < edge.id),"
    " unapplied AS MATERIALIZED (SELECT e.id, e.signal_id, e.instance_id FROM examined e"
    "   WHERE e.created_at > now() - make_interval(secs => $4::int) AND" UNAPPLIED("e") "),"
    " lost AS (SELECT u.id FROM unapplied u WHERE" NOT_DEAD("u") "),"
    " marked AS (UPDATE strand.outbox o SET published_at = NULL, recoveries = o.recoveries + 1"
    "   FROM lost l WHERE o.id = l.id AND o.published_at IS NOT NULL"
    "   RETURNING o.id, o.signal_id, o.instance_id)"
    " SELECT coalesce((SELECT max(id) FROM examined), $1::bigint), (SELECT count(*) FROM scan),"
    " (SELECT count(*) FROM examined), (SELECT count(*) FROM marked),"
    " (SELECT string_agg(signal_id || ' for ' || instance_id, ', ')"
    "   FROM (SELECT * FROM marked ORDER BY id LIMIT 5) m)";

/* Watched rows (re-published before) whose backoff ran out: $1 batch, $2 grace s,
 * $3 window s, $4 the most re-publications. Still lost: published again (or given up
 * on at the limit); otherwise settled, no longer watched. Answers the rows published
 * again, settled, given up, and a few given up for the log. */
static const char *const sql_sweep_watched =
    "WITH due AS (SELECT id, signal_id, instance_id, recoveries, created_at FROM strand.outbox"
    "   WHERE recoveries > 0 AND published_at IS NOT NULL"
    "   AND published_at < now() - make_interval(secs => $2::int * power(2, least(recoveries, 4)))"
    "   ORDER BY id LIMIT $1::int),"
    " unapplied AS MATERIALIZED (SELECT e.id, e.recoveries, e.signal_id, e.instance_id"
    "   FROM due e WHERE e.created_at > now() - make_interval(secs => $3::int) AND"
    UNAPPLIED("e") "),"
    " lost AS (SELECT * FROM unapplied u WHERE" NOT_DEAD("u") "),"
    " again AS (UPDATE strand.outbox o SET published_at = NULL, recoveries = o.recoveries + 1"
    "   FROM lost l WHERE o.id = l.id AND l.recoveries < $4::int RETURNING o.id),"
    " settled AS (UPDATE strand.outbox o SET recoveries = 0 FROM due d WHERE o.id = d.id"
    "   AND NOT EXISTS (SELECT 1 FROM lost l WHERE l.id = d.id AND l.recoveries < $4::int)"
    "   RETURNING o.id)"
    " SELECT (SELECT count(*) FROM again), (SELECT count(*) FROM settled),"
    " (SELECT count(*) FROM lost WHERE recoveries >= $4::int),"
    " (SELECT string_agg(signal_id || ' for ' || instance_id, ', ')"
    "   FROM (SELECT * FROM lost WHERE recoveries >= $4::int ORDER BY id LIMIT 5) g)";

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
    char checked[24], batch[16], grace[16], window[16], most[16];
    snprintf(checked, sizeof checked, "%lld", rec->checked_id);
    snprintf(batch, sizeof batch, "%d", rec->batch);
    snprintf(grace, sizeof grace, "%d", rec->grace_s);
    snprintf(window, sizeof window, "%d", rec->window_s);
    snprintf(most, sizeof most, "%d", ST_RECOVERY_MAX_REPUBLISH);
    const char *new_params[] = {checked, batch, grace, window};
    const char *watched_params[] = {batch, grace, window, most};
    st_errbuf_t eb;
    PGresult *res = NULL;
    if (st_pg_exec(conn, sql_sweep_new, 4, new_params, &res, &eb) != ST_OK) {
        st_log_warn("could not run the outbox recovery sweep", "%s", eb.msg);
        rec->next_ms = st_now_ms() + RETRY_MS;
        return -1;
    }
    rec->checked_id = atoll(PQgetvalue(res, 0, 0));
    int scanned = atoi(PQgetvalue(res, 0, 1)), examined = atoi(PQgetvalue(res, 0, 2));
    int marked = atoi(PQgetvalue(res, 0, 3));
    if (marked > 0)
        st_log_warn("signals published again: published but never applied",
                    "count=%d after %d s; first: %s", marked, rec->grace_s,
                    PQgetvalue(res, 0, 4));
    PQclear(res);
    res = NULL;
    if (st_pg_exec(conn, sql_sweep_watched, 4, watched_params, &res, &eb) != ST_OK) {
        st_log_warn("could not run the outbox recovery sweep", "%s", eb.msg);
        rec->next_ms = st_now_ms() + RETRY_MS;
        return -1;
    }
    int again = atoi(PQgetvalue(res, 0, 0)), given_up = atoi(PQgetvalue(res, 0, 2));
    if (again > 0)
        st_log_warn("signals published again: still not applied", "count=%d", again);
    if (given_up > 0)
        st_log_error("signals not applied after being published again; given up",
                     "count=%d after %d publications; first: %s", given_up,
                     ST_RECOVERY_MAX_REPUBLISH + 1, PQgetvalue(res, 0, 3));
    PQclear(res);
    st_metric_inc(rec->m_sweeps);
    st_metric_add(rec->m_republished, marked + again);
    st_metric_add(rec->m_given_up, given_up);
    /* A full batch, all of it old enough: more is waiting behind it. */
    int behind = scanned == rec->batch && examined == scanned;
    rec->next_ms = st_now_ms() + (behind ? CATCH_UP_MS : (long long)rec->interval_s * 1000);
    return marked + again;
}
