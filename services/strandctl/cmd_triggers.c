/*
 * cmd_triggers.c - strandctl's `triggers send`: an event to a lifecycle's instance,
 * found by its definition and external reference (POST /v1/triggers,
 * docs/lifecycle.md).
 */
#include <stdlib.h>

#include "commands.h"

int st_ctl_triggers_send(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    json_t *body = json_pack("{s:s, s:s, s:s, s:s}", "definition", a->pos[0], "external_ref",
                             a->pos[1], "event", a->pos[2], "request_id",
                             st_ctl_opt(a, "request-id"));
    if (st_ctl_opt(a, "version"))
        json_object_set_new(body, "version", json_integer(atoll(st_ctl_opt(a, "version"))));
    if (!st_ctl_opt_copy(a, "actor", body, "actor", 0) ||
        !st_ctl_opt_copy(a, "payload", body, "payload", 1)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    return st_ctl_post(ctl, "/v1/triggers", body, st_ctl_print_object);
}
