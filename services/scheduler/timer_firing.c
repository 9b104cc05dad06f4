/* timer_firing.c - due timers become signals (see timer_firing.h). */
#include "timer_firing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/crash_point.h"
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

/* The batch being fired: its transaction, and lateness to observe after the commit. */
typedef struct {
    PGconn *conn;
    double lateness_s[FIRE_BATCH];
    int n;
} fired_t;

/* st_timer_fire_due_tx()'s `fire`: one timer becomes its signal. */
static st_err_t fire_one(const st_timer_due_t *t, void *ctx, st_errbuf_t *eb)
{
    fired_t *fired = ctx;
    st_signal_t sig;
    st_signal_init(&sig, strcmp(t->kind, "retry") == 0 ? ST_SIGNAL_RETRY_DUE : ST_SIGNAL_TIMER_DUE,
                   t->instance_id, -1);
    snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", t->waiting_token);
    sig.due_at_ms = t->due_ms;
    json_error_t jerr;
    sig.payload = json_loads(t->payload, 0, &jerr);
    if (!json_is_object(sig.payload)) {
        json_decref(sig.payload);
        sig.payload = json_object();
    }
    json_object_set_new(sig.payload, "timer_kind", json_string(t->kind));
    st_err_t err = st_signal_enqueue_tx(fired->conn, &sig, eb);
    st_signal_close(&sig);
    if (fired->n < FIRE_BATCH)
        fired->lateness_s[fired->n++] = t->lateness_s;
    return err;
}

static int fire_due(PGconn *conn, void *ctx)
{
    st_timer_firing_t *f = ctx;
    st_errbuf_t eb;
    fired_t fired = {.conn = conn, .n = 0};
    int n = 0;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_timer_fire_due_tx(conn, FIRE_BATCH, fire_one, &fired, &n, &eb);
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_log_warn("could not fire timers", "%s", eb.msg);
        return -1;
    }
    if (n > 0)   /* tests: fired and committed, the signals not yet published from here */
        ST_CRASH_POINT("timer.after_commit");
    for (int i = 0; i < fired.n; i++)
        st_metric_observe(f->m_lateness, fired.lateness_s[i]);
    st_metric_add(f->m_fired, n);
    if (n > 0)
        st_metric_inc(f->m_batches);
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
    double per_shard[ST_TIMER_SHARDS];
    double total = st_timer_count_pending(conn, per_shard, &eb);
    if (total >= 0) {
        for (int shard = 0; shard < ST_TIMER_SHARDS; shard++)
            st_metric_set(f->m_pending_shard[shard], per_shard[shard]);
        st_metric_set(f->m_pending, total);
    }
    if (st_timer_purge_fired(conn, f->svc->cfg.outbox_retention_s, &eb) != ST_OK)
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
    return st_timer_next_due_ms(conn);
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
