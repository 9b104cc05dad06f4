/*
 * cmd_audit.c - strandctl's `audit list`: the audit log, who asked for what and
 * whether it was applied (docs/api.md, "Audit log"; docs/operations.md, runbook).
 */
#include "commands.h"
#include "print.h"

int st_ctl_audit_list(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"instance-id", "instance_id", "actor", "actor", "action",
                                        "action", "outcome", "outcome", "since", "since", "limit",
                                        "limit", "cursor", "cursor", NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/audit%s", query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_audit);
}
