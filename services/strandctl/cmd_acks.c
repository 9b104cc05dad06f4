/*
 * cmd_acks.c - strandctl's `acks send`: a consumer's acknowledgement of a work event
 * it was delivered, stage delivered or processed (POST /v1/acks; docs/api.md, "ACKs";
 * docs/lifecycle.md).
 */
#include <stdlib.h>

#include "commands.h"

int st_ctl_acks_send(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    json_t *body = json_pack("{s:s, s:s, s:s}", "ack_guid", a->pos[0], "consumer", a->pos[1],
                             "stage", a->pos[2]);
    if (st_ctl_opt(a, "retry-at-ms"))
        json_object_set_new(body, "retry_at_ms", json_integer(atoll(st_ctl_opt(a, "retry-at-ms"))));
    if (!st_ctl_opt_copy(a, "outcome", body, "outcome", 0) ||
        !st_ctl_opt_copy(a, "message", body, "message", 0) ||
        !st_ctl_opt_copy(a, "error", body, "error", 0) ||
        !st_ctl_opt_copy(a, "result", body, "result", 1)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    return st_ctl_post(ctl, "/v1/acks", body, st_ctl_print_object);
}
