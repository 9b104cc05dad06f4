/*
 * cmd_instances_repair.c - strandctl's `instances` operator verbs, each taking the
 * --expected-version N that 'instances get' shows: pause, resume and rewind
 * (docs/api.md, "Pause, resume and rewind"), and the repair verbs retry, fail,
 * patch-variables, fire-timer and skip-wait (docs/api.md, "Repairing an instance").
 * The table (commands.c) makes --expected-version required; the API answers 409
 * version_mismatch when the instance has moved since.
 */
#include <stdlib.h>
#include <string.h>

#include "commands.h"

/* pause, resume or rewind ID, the verb being the route's last segment. The versions
 * go as JSON, so that the API judges a value that is not a number. */
int st_ctl_instances_pause(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    json_t *body = json_object();
    if (!st_ctl_opt_copy(a, "expected-version", body, "expected_version", 1) ||
        !st_ctl_opt_copy(a, "to-version", body, "to_version", 1)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    st_ctl_opt_copy(a, "reason", body, "reason", 0);
    snprintf(path, sizeof path, "/v1/instances/%s/%s", a->pos[0], a->cmd->verb);
    return st_ctl_post(ctl, path, body, st_ctl_print_object);
}

/* The route of each repair verb (its last segment). */
static const char *repair_route(const char *verb)
{
    static const char *const routes[][2] = {
        {"retry", "retry"},           {"fail", "fail"},           {"patch-variables", "variables"},
        {"fire-timer", "fire-timer"}, {"skip-wait", "skip-wait"},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(verb, routes[i][0]) == 0)
            return routes[i][1];
    return NULL;
}

/* retry, fail, patch-variables, fire-timer, skip-wait ID: each verb's table row
 * declares only its own flags, so the others read as absent here. */
int st_ctl_instances_repair(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    const char *verb = a->cmd->verb;
    const char *route = repair_route(verb);
    const char *ev = st_ctl_opt(a, "expected-version");
    if (route == NULL || ev == NULL || *ev == '\0' || strspn(ev, "0123456789") != strlen(ev)) {
        fprintf(stderr, "strandctl: %s needs --expected-version N (the state_version that "
                        "'instances get' shows)\n", verb);
        return ST_CTL_USAGE;
    }
    json_t *body = json_pack("{s:I}", "expected_version", (json_int_t)atoll(ev));
    st_ctl_opt_copy(a, "reason", body, "reason", 0);
    st_ctl_opt_copy(a, "step", body, "step", 0);
    if (st_ctl_opt(a, "code"))
        json_object_set_new(body, "error", json_pack("{s:s}", "code", st_ctl_opt(a, "code")));
    if (st_ctl_opt(a, "message") && json_object_get(body, "error"))
        json_object_set_new(json_object_get(body, "error"), "message",
                            json_string(st_ctl_opt(a, "message")));
    if (!st_ctl_opt_copy(a, "patch", body, "patch", 1) ||
        !st_ctl_opt_copy(a, "payload", body, "payload", 1)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    snprintf(path, sizeof path, "/v1/instances/%s/%s", a->pos[0], route);
    return st_ctl_post(ctl, path, body, st_ctl_print_object);
}
