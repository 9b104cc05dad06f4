/*
 * commands.h - strandctl's command table and what is generated from it.
 *
 * A command is a group and a verb ("instances start"), or a group alone ("health").
 * ONE table (commands.c, st_ctl_commands) lists every command with its positional
 * arguments, its flags, a one-line summary and its handler; from it come
 *   - the parsing of a command line (parse.c): an unknown flag, a flag without its
 *     value, a missing required flag or a wrong number of arguments is a usage error
 *     (exit 2) that names what is wrong;
 *   - the help (help.c): `strandctl --help`, `strandctl GROUP --help`,
 *     `strandctl GROUP VERB --help`;
 *   - the bash completion script (completion.c): `strandctl completion bash`.
 * A new command is one table row and one handler; nothing else lists commands.
 *
 * Handlers live in one file per group (cmd_<group>.c) and read their flags through
 * the st_ctl_opt*() accessors below, by the name the table gives the flag.
 */
#ifndef STRANDCTL_COMMANDS_H
#define STRANDCTL_COMMANDS_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "ctl.h"

#define ST_CTL_MAX_FLAGS 12   /* flags of one command */
#define ST_CTL_MAX_ARGS 8     /* positional arguments of one command */

/* Whether a flag must be given. */
typedef enum {
    ST_CTL_OPTIONAL = 0,
    ST_CTL_REQUIRED,     /* strandctl refuses the command without it (exit 2) */
    ST_CTL_API_NEEDS,    /* shown as needed; the API, not strandctl, refuses without it */
} st_ctl_need_t;

/* One flag: `--name VALUE`. Every command flag in the table takes a value today, as
 * strandctl always parsed them (`--dry-run true`); a flag without one (value NULL, like
 * the global --json) reads as "true" when given. */
typedef struct {
    const char *name;    /* without the leading "--" */
    const char *value;   /* the value's placeholder in help ("N", "JSON"); NULL: no value */
    st_ctl_need_t need;
    const char *help;    /* one line */
} st_ctl_flag_t;

typedef struct st_ctl_cmd st_ctl_cmd_t;

/* A parsed command line, given to the command's handler. */
typedef struct {
    const st_ctl_cmd_t *cmd;              /* the table row; borrowed */
    int npos;                             /* positional arguments after the verb */
    const char *pos[ST_CTL_MAX_ARGS];     /* borrowed from argv */
    const char *values[ST_CTL_MAX_FLAGS]; /* by the index of cmd->flags; NULL: not given;
                                           * the last one given wins; borrowed from argv */
} st_ctl_args_t;

/* Runs one command; returns the exit status (ctl.h). */
typedef int (*st_ctl_handler_fn)(const st_ctl_t *ctl, const st_ctl_args_t *a);

/* A row of the command table. */
struct st_ctl_cmd {
    const char *group;       /* the first word: "instances" */
    const char *verb;        /* the second word: "start"; NULL for a group alone ("health") */
    const char *args;        /* positional arguments as help shows them, optional ones in
                              * brackets: "NAME [VERSION]"; "" for none. A word containing
                              * FILE completes as a file name. */
    const char *summary;     /* one line */
    st_ctl_handler_fn run;
    st_ctl_flag_t flags[ST_CTL_MAX_FLAGS];   /* ends at the first with name NULL */
};

/* ---- the table (commands.c) ---------------------------------------------------------- */

extern const st_ctl_cmd_t st_ctl_commands[];   /* in help order, groups contiguous */
extern const size_t st_ctl_ncommands;
extern const st_ctl_flag_t st_ctl_global_flags[];   /* before the command: --api, --json, --help */
extern const size_t st_ctl_nglobal_flags;

/* The flag `--name` of `cmd` (name given without the dashes), or NULL. Borrowed. */
const st_ctl_flag_t *st_ctl_flag_find(const st_ctl_cmd_t *cmd, const char *name);

/* The number of flags of `cmd`. */
size_t st_ctl_flag_count(const st_ctl_cmd_t *cmd);

/* The first row of `group`, or NULL. Borrowed from the table. */
const st_ctl_cmd_t *st_ctl_group_find(const char *group);

/* True if `group` is a group alone, without verbs ("health"). */
int st_ctl_group_is_verbless(const char *group);

/* ---- parsing and running (parse.c) ---------------------------------------------------- */

/* Parses the words after the global options (argv[0] is the group) and runs the
 * command, or prints help or a usage error. Returns the exit status. */
int st_ctl_dispatch(const st_ctl_t *ctl, int argc, char **argv);

/* The value of flag `name` (without dashes), or NULL when not given. Borrowed from argv. */
const char *st_ctl_opt(const st_ctl_args_t *a, const char *name);

/* Copies flag `name` into `body` as `field`: a string, or parsed JSON when `as_json`.
 * Returns 0 (after a message on stderr) if the JSON does not parse; 1 otherwise,
 * also when the flag was not given. */
int st_ctl_opt_copy(const st_ctl_args_t *a, const char *name, json_t *body, const char *field,
                    int as_json);

/* Copies flag `name` into `body` as the integer `field`. Returns 0 (after a message
 * on stderr) if it is not an integer; 1 otherwise, also when not given. */
int st_ctl_opt_int(const st_ctl_args_t *a, const char *name, json_t *body, const char *field);

/* Writes "?param=value&..." (URL-escaped, "" when none given) into `query` for the
 * flags given of `pairs`: {flag, query parameter, flag, parameter, ..., NULL}. */
void st_ctl_opt_query(const st_ctl_args_t *a, const char *const *pairs, char *query, size_t len);

/* ---- help (help.c) --------------------------------------------------------------------- */

/* The summary of every command, the global flags, the environment and exit statuses. */
void st_ctl_help_all(FILE *out);

/* The usage line and summary of every verb of `group`. */
void st_ctl_help_group(FILE *out, const char *group);

/* A short list of the verbs of `group`, for a usage error. */
void st_ctl_help_verbs(FILE *out, const char *group);

/* The usage line, summary and every flag of `cmd`. */
void st_ctl_help_command(FILE *out, const st_ctl_cmd_t *cmd);

/* One command's usage: "strandctl GROUP VERB ARGS [--flag V] ...", wrapped, indented. */
void st_ctl_help_usage(FILE *out, const st_ctl_cmd_t *cmd, const char *indent);

/* ---- the handlers, one file per group --------------------------------------------------- */

/* cmd_definitions.c */
int st_ctl_definitions_import(const st_ctl_t *ctl, const st_ctl_args_t *a);   /* and validate */
int st_ctl_definitions_list(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_definitions_get(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_definitions_diagram(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_definitions_schema(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_definitions_pause(const st_ctl_t *ctl, const st_ctl_args_t *a);    /* and resume */

/* cmd_instances.c */
int st_ctl_instances_start(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_get(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_list(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_history(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_runtime(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_wait(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_signal(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_rpc(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_notices(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_task_events(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_stuck(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_instances_cancel(const st_ctl_t *ctl, const st_ctl_args_t *a);     /* and terminate */

/* cmd_instances_repair.c: the operator verbs that take --expected-version */
int st_ctl_instances_pause(const st_ctl_t *ctl, const st_ctl_args_t *a);  /* resume, rewind */
int st_ctl_instances_repair(const st_ctl_t *ctl, const st_ctl_args_t *a); /* retry, fail, ... */

/* cmd_signals.c, cmd_triggers.c, cmd_acks.c */
int st_ctl_signals_send(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_triggers_send(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_acks_send(const st_ctl_t *ctl, const st_ctl_args_t *a);

/* cmd_tasks.c */
int st_ctl_tasks_list(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_tasks_get(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_tasks_events(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_tasks_act(const st_ctl_t *ctl, const st_ctl_args_t *a);   /* assign, release, complete */

/* cmd_dead_letters.c */
int st_ctl_dead_letters_list(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_dead_letters_get(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_dead_letters_resolve(const st_ctl_t *ctl, const st_ctl_args_t *a); /* replay, discard */
int st_ctl_dead_letters_edit(const st_ctl_t *ctl, const st_ctl_args_t *a);

/* cmd_notices.c, cmd_audit.c */
int st_ctl_notices_list(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_audit_list(const st_ctl_t *ctl, const st_ctl_args_t *a);

/* cmd_retention.c, cmd_batch.c */
int st_ctl_retention_run(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_batch_create(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_batch_list(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_batch_get(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_batch_cancel(const st_ctl_t *ctl, const st_ctl_args_t *a);

/* cmd_server.c: the API server itself */
int st_ctl_health(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_metrics(const st_ctl_t *ctl, const st_ctl_args_t *a);
int st_ctl_openapi(const st_ctl_t *ctl, const st_ctl_args_t *a);

/* completion.c */
int st_ctl_completion_bash(const st_ctl_t *ctl, const st_ctl_args_t *a);

#endif
