/*
 * cmd_server.c - strandctl's commands about the API server itself, each a group
 * without verbs: `health` (GET /readyz), `metrics` (GET /metrics, Prometheus text as
 * it is) and `openapi` (GET /v1/openapi.json).
 */
#include "commands.h"

int st_ctl_health(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    return st_ctl_run(ctl, "GET", "/readyz", NULL, st_ctl_print_object);
}

int st_ctl_metrics(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    return st_ctl_run_raw(ctl, "/metrics");
}

int st_ctl_openapi(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    return st_ctl_run(ctl, "GET", "/v1/openapi.json", NULL, st_ctl_print_object);
}
