/*
 * strand-monitor: owns ACK deadlines. Re-raises work events whose delivery is
 * overdue, reminds when processing is overdue, and gives up with a notice and a dead
 * letter after the route's cap (ack_monitor.c). Its outbox relay publishes the
 * re-raises and notices. It also counts stuck instances (stuck_gauge.c). See
 * README.md in this directory.
 */
#include "ack_monitor.h"
#include "stuck_gauge.h"
#include "strand/log.h"
#include "strand/relay.h"
#include "strand/service.h"

static int relay_ready(void *ctx)
{
    return st_relay_ready(ctx);
}

int main(void)
{
    st_service_t svc;
    st_errbuf_t eb;
    if (st_service_init(&svc, "monitor", 8083, &eb) != ST_OK ||
        st_service_prepare(&svc, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_relay_t *relay = NULL;
    st_ack_monitor_t *monitor = NULL;
    st_stuck_gauge_t *stuck = NULL;
    if (st_relay_start(&svc.cfg, &relay, &eb) != ST_OK ||
        st_ack_monitor_start(&svc, &monitor, &eb) != ST_OK ||
        st_stuck_gauge_start(&svc, &stuck, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        st_ack_monitor_stop(monitor);
        st_relay_stop(relay);
        st_service_close(&svc);
        return 1;
    }
    st_service_add_ready(&svc, "outbox_relay", relay_ready, relay);
    st_log_info("monitor ready", NULL);
    st_service_run(&svc);
    st_stuck_gauge_stop(stuck);
    st_ack_monitor_stop(monitor);
    st_relay_stop(relay);
    st_service_close(&svc);
    st_log_info("monitor stopped", NULL);
    return 0;
}
