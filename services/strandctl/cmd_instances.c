/*
 * cmd_instances.c - strandctl's `instances` commands that start, read, wait for and
 * signal instances, and cancel or terminate them (the rows in commands.c; routes in
 * docs/api.md, "Instances"). The operator verbs that take --expected-version are in
 * cmd_instances_repair.c.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "print.h"

int st_ctl_instances_start(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    json_t *body = json_pack("{s:s}", "definition", a->pos[0]);
    if (st_ctl_opt(a, "version"))
        json_object_set_new(body, "version", json_integer(atoll(st_ctl_opt(a, "version"))));
    if (!st_ctl_opt_copy(a, "input", body, "input", 1) ||
        !st_ctl_opt_copy(a, "business-ref", body, "business_ref", 0) ||
        !st_ctl_opt_copy(a, "request-id", body, "request_id", 0)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    return st_ctl_post(ctl, "/v1/instances", body, st_ctl_print_object);
}

int st_ctl_instances_get(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/instances/%s", a->pos[0]);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_object);
}

int st_ctl_instances_list(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"definition", "definition", "status", "status",
                                        "business-ref", "business_ref", "limit", "limit",
                                        "created-after", "created_after", "created-before",
                                        "created_before", "cursor", "cursor", NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/instances%s", query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_list);
}

int st_ctl_instances_history(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"after", "after", "limit", "limit", NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/instances/%s/history%s", a->pos[0], query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_history);
}

int st_ctl_instances_runtime(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", a->pos[0]);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_object);
}

/* Long-polls the instance (the API answers when it changes) until it ends or `timeout`
 * seconds pass; prints its last view. Exit 0 if it ended, 1 if not (or refused). */
static int wait_instance(const st_ctl_t *ctl, const char *id, const char *timeout)
{
    char path[256];
    time_t deadline = time(NULL) + atoi(timeout);
    long long version = -1;
    for (;;) {
        json_t *answer = NULL;
        long left_ms = (long)(deadline - time(NULL)) * 1000;
        if (version < 0 || left_ms <= 0)
            snprintf(path, sizeof path, "/v1/instances/%s", id);
        else
            snprintf(path, sizeof path, "/v1/instances/%s?wait_ms=%ld&after_version=%lld", id,
                     left_ms < 20000 ? left_ms : 20000, version);
        long code = st_ctl_request(ctl, "GET", path, NULL, &answer);
        version = json_integer_value(json_object_get(answer, "state_version"));
        const char *st = json_string_value(json_object_get(answer, "status"));
        int ended = st && (strcmp(st, "completed") == 0 || strcmp(st, "failed") == 0 ||
                           strcmp(st, "cancelled") == 0 || strcmp(st, "terminated") == 0);
        if (code < 0 || code >= 300 || ended || time(NULL) >= deadline) {
            int rc = code < 0 ? ST_CTL_UNREACHABLE : code >= 300 ? ST_CTL_REFUSED
                                                   : ended       ? ST_CTL_OK
                                                                 : ST_CTL_REFUSED;
            if (code >= 300)
                st_ctl_print_problem(answer, code);
            else if (answer && ctl->json_output) {
                char *text = json_dumps(answer, JSON_INDENT(2));
                puts(text);
                free(text);
            } else if (answer) {
                st_ctl_print_object(answer);
            }
            if (!ended && code >= 200 && code < 300)
                fprintf(stderr, "strandctl: instance still %s after %s s\n", st, timeout);
            json_decref(answer);
            return rc;
        }
        json_decref(answer);
    }
}

int st_ctl_instances_wait(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    const char *timeout = st_ctl_opt(a, "timeout");
    return wait_instance(ctl, a->pos[0], timeout ? timeout : "60");
}

int st_ctl_instances_signal(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    json_t *body = json_pack("{s:s}", "name", a->pos[1]);
    if (!st_ctl_opt_copy(a, "payload", body, "payload", 1) ||
        !st_ctl_opt_copy(a, "request-id", body, "request_id", 0)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    snprintf(path, sizeof path, "/v1/instances/%s/signals", a->pos[0]);
    return st_ctl_post(ctl, path, body, st_ctl_print_object);
}

int st_ctl_instances_rpc(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    json_t *body = json_object();
    if (!st_ctl_opt_copy(a, "input", body, "input", 1) ||
        !st_ctl_opt_copy(a, "request-id", body, "request_id", 0)) {
        json_decref(body);
        return ST_CTL_USAGE;
    }
    snprintf(path, sizeof path, "/v1/instances/%s/rpc/%s", a->pos[0], a->pos[1]);
    return st_ctl_post(ctl, path, body, st_ctl_print_object);
}

int st_ctl_instances_notices(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"code", "code", "since", "since", "limit", "limit",
                                        "cursor", "cursor", NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/instances/%s/notices%s", a->pos[0], query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_notices);
}

int st_ctl_instances_task_events(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"limit", "limit", "cursor", "cursor", NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/instances/%s/task-events%s", a->pos[0], query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_task_events);
}

int st_ctl_instances_stuck(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"reason", "reason", "limit", "limit", "cursor", "cursor",
                                        NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/instances/stuck%s", query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_stuck);
}

/* cancel or terminate ID, the verb being the route's last segment. */
int st_ctl_instances_cancel(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024];
    json_t *body = json_object();
    st_ctl_opt_copy(a, "reason", body, "reason", 0);
    snprintf(path, sizeof path, "/v1/instances/%s/%s", a->pos[0], a->cmd->verb);
    return st_ctl_post(ctl, path, body, st_ctl_print_object);
}
