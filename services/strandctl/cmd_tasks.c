/*
 * cmd_tasks.c - strandctl's `tasks` commands: list, get, events, and the actions
 * assign, release and complete (docs/api.md, "Tasks"). An instance's task events
 * are `instances task-events` (cmd_instances.c).
 */
#include "commands.h"
#include "print.h"

int st_ctl_tasks_list(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"role", "role", "assignee", "assignee", "status", "status",
                                        "instance-id", "instance_id", "limit", "limit", "cursor",
                                        "cursor", NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/tasks%s", query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_tasks);
}

int st_ctl_tasks_get(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/tasks/%s", a->pos[0]);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_object);
}

int st_ctl_tasks_events(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"limit", "limit", "cursor", "cursor", NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/tasks/%s/events%s", a->pos[0], query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_task_events);
}

/* assign, release or complete ID, the verb being the route's last segment; each row
 * declares its own flag (assign --assignee, complete --result). */
int st_ctl_tasks_act(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    json_t *body = json_object();
    if (!st_ctl_opt_copy(a, "assignee", body, "assignee", 0) ||
        !st_ctl_opt_copy(a, "result", body, "result", 1)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    snprintf(path, sizeof path, "/v1/tasks/%s/%s", a->pos[0], a->cmd->verb);
    return st_ctl_post(ctl, path, body, st_ctl_print_object);
}
