/*
 * cmd_dead_letters.c - strandctl's `dead-letters` commands: list, get, replay, discard
 * and edit (a dead-lettered signal's payload); docs/api.md, "Dead letters".
 */
#include <stdlib.h>

#include "commands.h"
#include "print.h"

int st_ctl_dead_letters_list(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"status", "status", "limit", "limit", "cursor", "cursor",
                                        NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/dead-letters%s", query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_dead_letters);
}

int st_ctl_dead_letters_get(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/dead-letters/%s", a->pos[0]);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_object);
}

/* replay or discard ID, the verb being the route's last segment. */
int st_ctl_dead_letters_resolve(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/dead-letters/%s/%s", a->pos[0], a->cmd->verb);
    return st_ctl_post(ctl, path, json_object(), st_ctl_print_object);
}

int st_ctl_dead_letters_edit(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    json_t *body = json_object();
    if (!st_ctl_opt_copy(a, "payload", body, "payload", 1)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    snprintf(path, sizeof path, "/v1/dead-letters/%s/payload", a->pos[0]);
    int rc = st_ctl_run(ctl, "PUT", path, text, st_ctl_print_object);
    free(text);
    return rc;
}
