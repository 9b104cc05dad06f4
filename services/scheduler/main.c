/*
 * strand-scheduler: fires durable timers (timer steps, retry backoff, state and
 * process timeouts) as signals through the outbox (timer_firing.c). Its outbox relay
 * publishes them; and works bulk operations (batch_runner.c). See README.md in this
 * directory.
 */
#include "batch_runner.h"
#include "strand/log.h"
#include "strand/relay.h"
#include "strand/service.h"
#include "timer_firing.h"

static int relay_ready(void *ctx)
{
    return st_relay_ready(ctx);
}

int main(void)
{
    st_service_t svc;
    st_errbuf_t eb;
    if (st_service_init(&svc, "scheduler", 8082, &eb) != ST_OK ||
        st_service_prepare(&svc, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_relay_t *relay = NULL;
    st_timer_firing_t *firing = NULL;
    st_batch_runner_t *batches = NULL;
    if (st_relay_start(&svc.cfg, &relay, &eb) != ST_OK ||
        st_timer_firing_start(&svc, &firing, &eb) != ST_OK ||
        st_batch_runner_start(&svc, &batches, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        st_timer_firing_stop(firing);
        st_relay_stop(relay);
        st_service_close(&svc);
        return 1;
    }
    st_service_add_ready(&svc, "outbox_relay", relay_ready, relay);
    st_log_info("scheduler ready", NULL);
    st_service_run(&svc);
    st_batch_runner_stop(batches);
    st_timer_firing_stop(firing);
    st_relay_stop(relay);
    st_service_close(&svc);
    st_log_info("scheduler stopped", NULL);
    return 0;
}
