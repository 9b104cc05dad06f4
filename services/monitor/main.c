/*
 * strand-monitor: owns ACK tracking and deadlines, re-raises and reminders, notices.
 *
 * Walking-skeleton state: the service starts, applies migrations, creates topics,
 * serves /healthz, /readyz and /metrics and shuts down cleanly; ACK tracking is not
 * implemented yet (issue 6), so it consumes nothing and leaves the ACK topics'
 * messages for the real implementation. See README.md in this directory.
 */
#include "strand/log.h"
#include "strand/service.h"

int main(void)
{
    st_service_t svc;
    st_errbuf_t eb;
    if (st_service_init(&svc, "monitor", 8083, &eb) != ST_OK ||
        st_service_prepare(&svc, &eb) != ST_OK ||
        st_service_add_dependency_checks(&svc, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_log_info("monitor ready", NULL);
    st_service_run(&svc);
    st_service_close(&svc);
    st_log_info("monitor stopped", NULL);
    return 0;
}
