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
#include "strand/log.h"
#include "strand/outbox.h"
#include "strand/service.h"

static int relay_ready(void *ctx)
{
    return st_relay_ready(ctx);
}

int main(void)
{
    st_service_t svc;
    st_errbuf_t eb;
    if (st_service_init(&svc, "executor", 8081, &eb) != ST_OK) {
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
