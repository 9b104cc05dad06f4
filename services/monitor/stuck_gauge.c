/* stuck_gauge.c - the strand_instances_stuck gauge (see stuck_gauge.h). */
#include "stuck_gauge.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "strand/due_loop.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/stuck.h"
#include "strand/util.h"

struct st_stuck_gauge {
    st_service_t *svc;
    st_due_loop_t *loop;
    time_t last;   /* when the last count ran (0: never) */
    st_metric_t *m_stuck[ST_STUCK_NREASONS];
    st_metric_t *m_seconds;
};

/* The loop's `process`: counts once the interval has passed; returns 0 (never a "full
 * batch"), or -1 on a database error (the loop reconnects). */
static int count_stuck(PGconn *conn, void *ctx)
{
    st_stuck_gauge_t *g = ctx;
    time_t now = time(NULL);
    if (g->last != 0 && now - g->last < g->svc->cfg.stuck_interval_s)
        return 0;
    g->last = now;
    long long counts[ST_STUCK_NREASONS];
    st_errbuf_t eb;
    double started = st_mono_s();
    if (st_stuck_count(conn, g->svc->cfg.stuck_grace_s, counts, &eb) != ST_OK) {
        st_log_warn("could not count stuck instances", "%s", eb.msg);
        return -1;
    }
    st_metric_observe(g->m_seconds, st_mono_s() - started);
    for (int i = 0; i < ST_STUCK_NREASONS; i++)
        st_metric_set(g->m_stuck[i], (double)counts[i]);
    return 0;
}

static long long wait_ms(PGconn *conn, void *ctx)
{
    st_stuck_gauge_t *g = ctx;
    long long left = (long long)(g->last + g->svc->cfg.stuck_interval_s - time(NULL));
    return left <= 0 ? 0 : left * 1000;
}

st_err_t st_stuck_gauge_start(st_service_t *svc, st_stuck_gauge_t **out, st_errbuf_t *eb)
{
    st_stuck_gauge_t *g = calloc(1, sizeof *g);
    if (g == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the stuck gauge");
    g->svc = svc;
    for (int i = 0; i < ST_STUCK_NREASONS; i++) {
        char labels[64];
        snprintf(labels, sizeof labels, "reason=\"%s\"", st_stuck_reasons[i]);
        g->m_stuck[i] = st_metrics_gauge("strand_instances_stuck",
                                         "Running or waiting instances that nothing can wake, or"
                                         " whose last wake-up failed (stuck.h; sampled every"
                                         " STRAND_STUCK_INTERVAL_S)", labels);
    }
    g->m_seconds = st_metrics_histogram("strand_stuck_query_seconds",
                                        "Duration of one stuck count", NULL);
    st_due_loop_config_t cfg = {"monitor-stuck", NULL, 1, count_stuck, wait_ms, g};
    st_err_t err = st_due_loop_start(svc, &cfg, &g->loop, eb);
    if (err != ST_OK) {
        free(g);
        return err;
    }
    *out = g;
    return ST_OK;
}

void st_stuck_gauge_stop(st_stuck_gauge_t *g)
{
    if (g == NULL)
        return;
    st_due_loop_stop(g->loop);
    free(g);
}
