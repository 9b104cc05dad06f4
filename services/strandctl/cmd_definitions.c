/*
 * cmd_definitions.c - strandctl's `definitions` commands: import, validate, list, get,
 * diagram, schema, and a definition version's pause and resume (the rows in
 * commands.c; routes in docs/api.md, "Definitions").
 */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "print.h"

int st_ctl_definitions_import(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    int import = strcmp(a->cmd->verb, "import") == 0;
    char *body = st_ctl_read_file(a->pos[0]);
    if (body == NULL)
        return ST_CTL_USAGE;
    int rc = st_ctl_run(ctl, "POST", import ? "/v1/definitions" : "/v1/definitions/validate", body,
                        st_ctl_print_object);
    free(body);
    return rc;
}

int st_ctl_definitions_list(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    static const char *const pairs[] = {"kind", "kind", "limit", "limit", "cursor", "cursor", NULL};
    char path[1024], query[900];
    st_ctl_opt_query(a, pairs, query, sizeof query);
    snprintf(path, sizeof path, "/v1/definitions%s", query);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_list);
}

int st_ctl_definitions_get(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024], name[700];
    st_ctl_escape(a->pos[0], name, sizeof name);
    if (a->npos == 2)
        snprintf(path, sizeof path, "/v1/definitions/%s/%s", name, a->pos[1]);
    else
        snprintf(path, sizeof path, "/v1/definitions/%s", name);
    return st_ctl_run(ctl, "GET", path, NULL, st_ctl_print_object);
}

int st_ctl_definitions_diagram(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1100], name[700], inst[300] = "";   /* room for both escaped parts */
    const char *instance = st_ctl_opt(a, "instance");
    st_ctl_escape(a->pos[0], name, sizeof name);
    if (instance != NULL)
        st_ctl_escape(instance, inst, sizeof inst);
    snprintf(path, sizeof path, "/v1/definitions/%s/%s/diagram.svg%s%s", name, a->pos[1],
             instance ? "?instance=" : "", inst);
    return st_ctl_run_raw(ctl, path);
}

int st_ctl_definitions_schema(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    return st_ctl_run(ctl, "GET", "/v1/schema/definition", NULL, st_ctl_print_object);
}

/* pause or resume NAME VERSION, the verb being the route's last segment. */
int st_ctl_definitions_pause(const st_ctl_t *ctl, const st_ctl_args_t *a)
{
    char path[1024], name[700], version[200];
    st_ctl_escape(a->pos[0], name, sizeof name);
    st_ctl_escape(a->pos[1], version, sizeof version);
    snprintf(path, sizeof path, "/v1/definitions/%s/%s/%s", name, version, a->cmd->verb);
    json_t *body = json_object();
    st_ctl_opt_copy(a, "reason", body, "reason", 0);
    return st_ctl_post(ctl, path, body, st_ctl_print_object);
}
