/*
 * cmd_signals.c - strandctl's `signals send`: a signal to the running instance with a
 * business reference (POST /v1/signals; docs/api.md, "Signals, cancel, terminate"). A
 * signal to one instance by its id is `instances signal` (cmd_instances.c).
 */
#include "commands.h"

int st_ctl_signals_send(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    json_t *body = json_pack("{s:s, s:s}", "name", a->pos[0], "business_ref",
                             st_ctl_opt(a, "business-ref"));
    if (!st_ctl_opt_copy(a, "definition", body, "definition", 0) ||
        !st_ctl_opt_copy(a, "payload", body, "payload", 1)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    return st_ctl_post(ctl, "/v1/signals", body, st_ctl_print_object);
}
