/*
 * cmd_retention.c - strandctl's `retention run` (admin): deletes ended instances,
 * resolved dead letters and notices older than a limit (POST /v1/retention/run,
 * docs/api.md, "Retention"); meant for a scheduled job.
 */
#include "commands.h"

int st_ctl_retention_run(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    json_t *body = json_object();
    if (!st_ctl_opt_int(a, "older-than-days", body, "older_than_days") ||
        !st_ctl_opt_int(a, "older-than-s", body, "older_than_s") ||
        !st_ctl_opt_int(a, "limit", body, "limit") ||
        !st_ctl_opt_copy(a, "dry-run", body, "dry_run", 1)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    return st_ctl_post(ctl, "/v1/retention/run", body, st_ctl_print_object);
}
