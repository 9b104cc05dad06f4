/*
 * cmd_batch.c - strandctl's `batch` commands: create a batch job (one action on every
 * instance a filter selects), list, get and cancel jobs (docs/api.md, "Bulk operations
 * (batches)"; docs/operations.md).
 */
#include "commands.h"
#include "print.h"

int st_ctl_batch_create(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    json_t *filter = json_object(), *args = json_object();
    int ok = st_ctl_opt_copy(a, "definition", filter, "definition", 0) &&
             st_ctl_opt_int(a, "version", filter, "version") &&
             st_ctl_opt_copy(a, "status", filter, "status", 0) &&
             st_ctl_opt_copy(a, "business-ref", filter, "business_ref", 0) &&
             st_ctl_opt_copy(a, "created-after", filter, "created_after", 0) &&
             st_ctl_opt_copy(a, "created-before", filter, "created_before", 0) &&
             st_ctl_opt_copy(a, "waiting-kind", filter, "waiting_kind", 0) &&
             st_ctl_opt_copy(a, "reason", args, "reason", 0) &&
             st_ctl_opt_copy(a, "name", args, "name", 0) &&
             st_ctl_opt_copy(a, "payload", args, "payload", 1);
    json_t *body = json_pack("{s:o, s:s, s:o}", "filter", filter, "action", a->pos[0], "args",
                             args);
    if (!ok) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    return st_ctl_post(ctl, "/v1/batches", body, st_ctl_print_object);
}

int st_ctl_batch_list(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"status", "status", "limit", "limit", "cursor", "cursor",
                                        NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/batches%s", query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_batches);
}

int st_ctl_batch_get(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/batches/%s", a->pos[0]);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_object);
}

int st_ctl_batch_cancel(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/batches/%s/cancel", a->pos[0]);
    return st_ctl_post(ctl, path, json_object(), st_ctl_print_object);
}
