/*
 * strand-executor: runs workflow instances. Consumes the signals topic, runs the
 * interpreter for one instance per wake-up, and commits snapshot + projections +
 * outbox rows in one PostgreSQL transaction; its outbox relay publishes the results.
 * See README.md in this directory.
 */
#include <stdio.h>
#include <stdlib.h>

#include "dispatcher.h"
#include "executor.h"
#include "strand/engine.h"
#include "strand/log.h"
#include "strand/relay.h"
#include "strand/service.h"
#include "strand/util.h"

/* The monotonic clock a run's wall-time budget is measured on. */
static long long mono_ms(void)
{
    return (long long)(st_mono_s() * 1000.0);
}

/* Applies the engine limits of the configuration (docs/configuration.md). */
static st_err_t apply_engine_limits(const st_config_t *cfg, st_errbuf_t *eb)
{
    st_engine_limits_t lim = {
        .max_steps = cfg->run_max_steps, .max_work = cfg->run_max_work,
        .max_run_ms = cfg->run_max_ms, .max_state_bytes = cfg->state_max_bytes,
        .max_value_bytes = cfg->expr_max_value_bytes, .max_string = cfg->expr_max_string,
        .max_data_depth = cfg->data_max_depth,
        .max_subworkflow_depth = cfg->subworkflow_max_depth, .clock_ms = mono_ms};
    return st_engine_set_limits(&lim, eb);
}

static int relay_ready(void *ctx)
{
    return st_relay_ready(ctx);
}

int main(void)
{
    st_service_t svc;
    st_errbuf_t eb;
    if (st_service_init(&svc, "executor", 8081, &eb) != ST_OK ||
        apply_engine_limits(&svc.cfg, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        return 1;
    }
    if (st_service_prepare(&svc, &eb) != ST_OK) {
        st_log_error("could not prepare PostgreSQL and Kafka", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_relay_t *relay = NULL;
    st_executor_t *ex = NULL;
    st_dispatcher_t *dispatcher = NULL;
    if (st_relay_start(&svc.cfg, &relay, &eb) != ST_OK ||
        st_dispatcher_start(&svc, &dispatcher, &eb) != ST_OK ||
        st_executor_start(&svc, &ex, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        __atomic_store_n(&svc.stopping, 1, __ATOMIC_RELEASE);
        st_dispatcher_stop(dispatcher);
        st_relay_stop(relay);
        st_service_close(&svc);
        return 1;
    }
    st_service_add_ready(&svc, "outbox_relay", relay_ready, relay);
    st_log_info("executor ready", NULL);
    st_service_run(&svc);
    st_executor_stop(ex);
    st_dispatcher_stop(dispatcher);
    st_relay_stop(relay);
    st_service_close(&svc);
    st_log_info("executor stopped", NULL);
    return 0;
}
