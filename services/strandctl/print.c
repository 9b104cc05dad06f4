/*
 * print.c - the human-readable forms of the API's list answers (print.h). Column
 * widths and hints are part of strandctl's output: scripts and tests read them.
 */
#include "print.h"

#include <stdio.h>
#include <stdlib.h>

/* Prints the "next page" hint of a list answer. */
static void print_next(const json_t *answer)
{
    const char *next = json_string_value(json_object_get(answer, "next_cursor"));
    if (next != NULL)
        printf("(more: --cursor %s)\n", next);
}

/* The string at `key`, or `absent`. Borrowed from `obj`. */
static const char *str_or(const json_t *obj, const char *key, const char *absent)
{
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : absent;
}

static void print_instance_row(const json_t *item)
{
    const json_t *def = json_object_get(item, "definition");
    printf("%-36s  %-10s  %s v%lld  %s\n", json_string_value(json_object_get(item, "id")),
           json_string_value(json_object_get(item, "status")),
           json_string_value(json_object_get(def, "name")),
           (long long)json_integer_value(json_object_get(def, "version")),
           json_string_value(json_object_get(item, "created_at")));
}

void st_ctl_print_list(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item) {
        if (json_object_get(item, "id") != NULL)
            print_instance_row(item);
        else
            printf("%-30s v%-4lld %s\n", json_string_value(json_object_get(item, "name")),
                   (long long)json_integer_value(json_object_get(item, "version")),
                   json_string_value(json_object_get(item, "kind")));
    }
    print_next(answer);
}

void st_ctl_print_history(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item) {
        char *detail = json_dumps(json_object_get(item, "detail"), JSON_COMPACT | JSON_ENCODE_ANY);
        printf("%-6lld  %-30s  %-16s  %s\n", (long long)json_integer_value(json_object_get(item, "id")),
               json_string_value(json_object_get(item, "at")),
               json_string_value(json_object_get(item, "kind")), detail ? detail : "");
        free(detail);
    }
    const char *next = json_string_value(json_object_get(answer, "next_after"));
    if (next != NULL)
        printf("(more: --after %s)\n", next);
}

void st_ctl_print_notices(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-8lld  %-27s  %-22s  %-36s  %s\n",
               (long long)json_integer_value(json_object_get(item, "id")), str_or(item, "at", ""),
               str_or(item, "code", ""), str_or(item, "instance_id", "-"), str_or(item, "message", ""));
    print_next(answer);
}

void st_ctl_print_task_events(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-8lld  %-27s  %-36s  %-20s  %-10s  %s\n",
               (long long)json_integer_value(json_object_get(item, "id")), str_or(item, "at", ""),
               str_or(item, "task_id", ""), str_or(item, "task_name", ""), str_or(item, "kind", ""),
               str_or(item, "actor", "-"));
    print_next(answer);
}

void st_ctl_print_audit(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item) {
        const char *on = str_or(item, "instance_id", NULL);
        printf("%-8lld  %-27s  %-12s  %-20s  %-9s  %s\n",
               (long long)json_integer_value(json_object_get(item, "id")), str_or(item, "at", ""),
               str_or(item, "actor", ""), str_or(item, "action", ""), str_or(item, "outcome", ""),
               on ? on : str_or(item, "target", "-"));
    }
    print_next(answer);
}

void st_ctl_print_stuck(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-36s  %-24s  %-8s  %-24s v%-4lld since %s\n", str_or(item, "instance_id", ""),
               str_or(item, "reason", ""), str_or(item, "waiting_kind", "-"),
               str_or(item, "definition", ""),
               (long long)json_integer_value(json_object_get(item, "version")),
               str_or(item, "since", ""));
    print_next(answer);
}

void st_ctl_print_tasks(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item) {
        const char *assignee = json_string_value(json_object_get(item, "assignee"));
        printf("%-36s  %-9s  %-24s  %s\n", json_string_value(json_object_get(item, "id")),
               json_string_value(json_object_get(item, "status")),
               json_string_value(json_object_get(item, "name")), assignee ? assignee : "-");
    }
    print_next(answer);
}

void st_ctl_print_dead_letters(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-8lld  %-9s  %-24s  %s\n", (long long)json_integer_value(json_object_get(item, "id")),
               json_string_value(json_object_get(item, "status")),
               json_string_value(json_object_get(item, "source_topic")),
               json_string_value(json_object_get(item, "reason")));
    print_next(answer);
}

void st_ctl_print_batches(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-36s  %-9s  %-9s  %lld/%lld done, %lld failed  %s\n",
               json_string_value(json_object_get(item, "id")),
               json_string_value(json_object_get(item, "status")),
               json_string_value(json_object_get(item, "action")),
               (long long)json_integer_value(json_object_get(item, "done")),
               (long long)json_integer_value(json_object_get(item, "total")),
               (long long)json_integer_value(json_object_get(item, "failed")),
               json_string_value(json_object_get(item, "created_at")));
    print_next(answer);
}
