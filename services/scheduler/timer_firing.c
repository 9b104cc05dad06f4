/* timer_firing.c - due timers become signals (see timer_firing.h). */
#include "timer_firing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/due_loop.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/timer.h"

#define FIRE_BATCH 500
#define HOUSEKEEPING_EVERY_S 15

struct st_timer_firing {
    st_service_t *svc;
    st_due_loop_t *loop;
    /* Counting pending timers and purging fired ones run on a loop (thread and
     * connection) of their own: inline, every 15 s, they held up the firing of timers
     * due meanwhile (W3's p99 lateness). */
    st_due_loop_t *housekeeping_loop;
    time_t last_housekeeping;
    st_metric_t *m_fired, *m_lateness, *m_pending, *m_batches;
    st_metric_t *m_pending_shard[ST_TIMER_SHARDS];
};

static const char *const sql_timers_claim =
    "WITH due AS (SELECT id FROM strand.timers WHERE fired_at IS NULL"
    "   AND due_at <= statement_timestamp() ORDER BY due_at LIMIT 500 FOR UPDATE SKIP LOCKED)"
    " UPDATE strand.timers t SET fired_at = clock_timestamp() FROM due WHERE t.id = due.id"
    " RETURNING t.instance_id, t.waiting_token, t.kind,"
    " (extract(epoch FROM t.due_at) * 1000)::bigint, t.payload::text,"
    " extract(epoch FROM (clock_timestamp() - t.due_at))";
static const char *const sql_next_due =
    "SELECT (extract(epoch FROM (min(due_at) - clock_timestamp())) * 1000)::bigint"
    " FROM strand.timers WHERE fired_at IS NULL";
static const char *const sql_pending =
    "SELECT shard, count(*) FROM strand.timers WHERE fired_at IS NULL GROUP BY shard";
static const char *const sql_purge =
    "DELETE FROM strand.timers WHERE id IN (SELECT id FROM strand.timers"
    " WHERE fired_at < now() - make_interval(secs => $1) LIMIT 10000)";

static int fire_due(PGconn *conn, void *ctx)
{
    st_timer_firing_t *f = ctx;
    st_errbuf_t eb;
    PGresult *rows = NULL;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_timers_claim, 0, NULL, &rows, &eb);
    int n = err == ST_OK ? PQntuples(rows) : 0;
    for (int i = 0; err == ST_OK && i < n; i++) {
        st_signal_t sig;
        const char *kind = PQgetvalue(rows, i, 2);
        st_signal_init(&sig, strcmp(kind, "retry") == 0 ? ST_SIGNAL_RETRY_DUE : ST_SIGNAL_TIMER_DUE,
                       PQgetvalue(rows, i, 0), -1);
        snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", PQgetvalue(rows, i, 1));
        sig.due_at_ms = atoll(PQgetvalue(rows, i, 3));
        json_error_t jerr;
        sig.payload = json_loads(PQgetvalue(rows, i, 4), 0, &jerr);
        if (!json_is_object(sig.payload)) {
            json_decref(sig.payload);
            sig.payload = json_object();
        }
        json_object_set_new(sig.payload, "timer_kind", json_string(kind));
        err = st_signal_enqueue_tx(conn, &sig, &eb);
        st_signal_close(&sig);
    }
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        PQclear(rows);
        st_log_warn("could not fire timers", "%s", eb.msg);
        return -1;
    }
    for (int i = 0; i < n; i++)
        st_metric_observe(f->m_lateness, atof(PQgetvalue(rows, i, 5)));
    st_metric_add(f->m_fired, n);
    if (n > 0)
        st_metric_inc(f->m_batches);
    PQclear(rows);
    return n;
}

/* The housekeeping loop's `process`: samples the pending gauges and purges fired
 * timers every HOUSEKEEPING_EVERY_S; returns 0 (never a "full batch"). */
static int housekeeping(PGconn *conn, void *ctx)
{
    st_timer_firing_t *f = ctx;
    time_t now = time(NULL);
    if (now - f->last_housekeeping < HOUSEKEEPING_EVERY_S)
        return 0;
    f->last_housekeeping = now;
    st_errbuf_t eb;
    PGresult *res = NULL;
    if (st_pg_exec(conn, sql_pending, 0, NULL, &res, &eb) == ST_OK) {
        double total = 0, per_shard[ST_TIMER_SHARDS] = {0};
        for (int i = 0; i < PQntuples(res); i++) {
            int shard = atoi(PQgetvalue(res, i, 0));
            double n = atof(PQgetvalue(res, i, 1));
            if (shard >= 0 && shard < ST_TIMER_SHARDS)
                per_shard[shard] = n;
            total += n;
        }
        for (int shard = 0; shard < ST_TIMER_SHARDS; shard++)
            st_metric_set(f->m_pending_shard[shard], per_shard[shard]);
        st_metric_set(f->m_pending, total);
    }
    PQclear(res);
    char secs[16];
    snprintf(secs, sizeof secs, "%d", f->svc->cfg.outbox_retention_s);
    const char *params[] = {secs};
    if (st_pg_exec(conn, sql_purge, 1, params, NULL, &eb) != ST_OK)
        st_log_warn("could not purge fired timers", "%s", eb.msg);
    return 0;
}

static long long housekeeping_wait_ms(PGconn *conn, void *ctx)
{
    st_timer_firing_t *f = ctx;
    long long left = (long long)(f->last_housekeeping + HOUSEKEEPING_EVERY_S - time(NULL));
    return left <= 0 ? 0 : left * 1000;
}

static long long next_wait_ms(PGconn *conn, void *ctx)
{
    st_errbuf_t eb;
    PGresult *res = NULL;
    long long wait = -1;
    if (st_pg_exec(conn, sql_next_due, 0, NULL, &res, &eb) == ST_OK && !PQgetisnull(res, 0, 0)) {
        long long ms = atoll(PQgetvalue(res, 0, 0));
        wait = ms < 0 ? 0 : ms;
    }
    PQclear(res);
    return wait;
}

st_err_t st_timer_firing_start(st_service_t *svc, st_timer_firing_t **out, st_errbuf_t *eb)
{
    st_timer_firing_t *f = calloc(1, sizeof *f);
    if (f == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the timer loop");
    f->svc = svc;
    f->m_fired = st_metrics_counter("strand_timers_fired_total", "Timers fired", NULL);
    f->m_lateness = st_metrics_histogram("strand_timer_lateness_seconds",
                                         "Firing time minus due time", NULL);
    f->m_pending = st_metrics_gauge("strand_timers_pending",
                                    "Timers not yet fired (sampled every 15 s)", NULL);
    f->m_batches = st_metrics_counter("strand_timer_batches_total", "Firing batches committed", NULL);
    for (int shard = 0; shard < ST_TIMER_SHARDS; shard++) {
        char labels[32];
        snprintf(labels, sizeof labels, "shard=\"%d\"", shard);
        f->m_pending_shard[shard] = st_metrics_gauge("strand_timers_pending_by_shard",
                                                     "Timers not yet fired per shard (sampled every 15 s)",
                                                     labels);
    }
    st_due_loop_config_t cfg = {"scheduler", ST_TIMER_CHANNEL, FIRE_BATCH, fire_due,
                                next_wait_ms, f};
    /* No channel: it wakes on its own deadline only. */
    st_due_loop_config_t hk = {"scheduler-housekeeping", NULL, 1, housekeeping,
                               housekeeping_wait_ms, f};
    st_err_t err = st_due_loop_start(svc, &cfg, &f->loop, eb);
    if (err == ST_OK && (err = st_due_loop_start(svc, &hk, &f->housekeeping_loop, eb)) != ST_OK)
        st_due_loop_stop(f->loop);
    if (err != ST_OK) {
        free(f);
        return err;
    }
    *out = f;
    return ST_OK;
}

void st_timer_firing_stop(st_timer_firing_t *f)
{
    if (f == NULL)
        return;
    st_due_loop_stop(f->housekeeping_loop);
    st_due_loop_stop(f->loop);
    free(f);
}
