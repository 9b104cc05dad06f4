/*
 * cmd_notices.c - strandctl's `notices list`: what Strand refused or gave up on, for
 * every instance (docs/api.md, "Notices"). One instance's notices are
 * `instances notices` (cmd_instances.c).
 */
#include "commands.h"
#include "print.h"

int st_ctl_notices_list(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"instance-id", "instance_id", "code", "code", "since",
                                        "since", "limit", "limit", "cursor", "cursor", NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/notices%s", query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_notices);
}
