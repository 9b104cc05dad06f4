/*
 * parse.c - from the words after the global options to a handler's call, driven by
 * the command table (commands.h), and the handlers' accessors of their flags.
 *
 *   GROUP [VERB] [ARG | --flag VALUE | --help]...
 *
 * Flags and arguments may come in any order after the verb; a flag's value is the next
 * word, whatever it is, unless that word is one of the command's flags or --help (then
 * the value is missing). "--help" or "-h" anywhere after the group prints help. Every
 * error is a usage error (exit 2) with a message naming what is wrong, then the
 * command's usage on stderr; help goes to stdout (exit 0).
 */
#include "commands.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* "--help" or "-h", wherever it stands, asks for the help of the command so far. */
static int is_help(const char *word)
{
    return strcmp(word, "--help") == 0 || strcmp(word, "-h") == 0;
}

/* "group verb" or "group" into `buf`; returns `buf`. */
static const char *cmd_name(const st_ctl_cmd_t *cmd, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", cmd->group, cmd->verb ? " " : "", cmd->verb ? cmd->verb : "");
    return buf;
}

/* How many positional arguments `cmd` takes: the words of cmd->args, those in
 * brackets optional (one bracketed word per optional argument). */
static void arg_range(const st_ctl_cmd_t *cmd, int *min, int *max)
{
    *min = *max = 0;
    for (const char *p = cmd->args; *p != '\0';) {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        (*max)++;
        if (*p != '[')
            (*min)++;
        while (*p != '\0' && *p != ' ')
            p++;
    }
}

/* Prints "strandctl: <message>" and the command's usage on stderr; returns 2. */
static int usage_error(const st_ctl_cmd_t *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(const st_ctl_cmd_t *cmd, const char *fmt, ...)
{
    char name[64];
    va_list ap;
    va_start(ap, fmt);
    fputs("strandctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fputs("usage: ", stderr);
    st_ctl_help_usage(stderr, cmd, "       ");
    fprintf(stderr, "'strandctl %s --help' describes its options.\n",
            cmd_name(cmd, name, sizeof name));
    return ST_CTL_USAGE;
}

/* True if `word` is one of `cmd`'s flags or a request for help: a flag that needs a
 * value and is followed by one of these was given without its value. */
static int is_flag_word(const st_ctl_cmd_t *cmd, const char *word)
{
    return is_help(word) ||
           (strncmp(word, "--", 2) == 0 && st_ctl_flag_find(cmd, word + 2) != NULL);
}

/* Fills `a` from the words after the verb. Returns -1 when the command may run, else
 * the exit status after printing help (0) or a usage error (2). */
static int parse(const st_ctl_cmd_t *cmd, int argc, char **argv, st_ctl_args_t *a)
{
    char name[64];
    cmd_name(cmd, name, sizeof name);
    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            st_ctl_help_command(stdout, cmd);
            return ST_CTL_OK;
        }
    }
    for (int i = 0; i < argc; i++) {
        const char *word = argv[i];
        if (strncmp(word, "--", 2) != 0) {   /* "-" (stdin) and "-5" are arguments */
            if (a->npos == ST_CTL_MAX_ARGS)
                return usage_error(cmd, "%s: too many arguments", name);
            a->pos[a->npos++] = word;
            continue;
        }
        const st_ctl_flag_t *flag = st_ctl_flag_find(cmd, word + 2);
        if (flag == NULL) {
            int global = strcmp(word, "--json") == 0 || strcmp(word, "--api") == 0;
            return usage_error(cmd, "%s: unknown option %s%s", name, word,
                               global ? " (a global option: put it before the command)" : "");
        }
        size_t index = (size_t)(flag - cmd->flags);
        if (flag->value == NULL) {
            a->values[index] = "true";
            continue;
        }
        if (i + 1 >= argc || is_flag_word(cmd, argv[i + 1]))
            return usage_error(cmd, "%s: %s needs a value (%s)", name, word, flag->value);
        a->values[index] = argv[++i];
    }
    int min, max;
    arg_range(cmd, &min, &max);
    if (a->npos < min)
        return usage_error(cmd, "%s needs %s", name, cmd->args);
    if (a->npos > max)
        return usage_error(cmd, "%s: unexpected argument '%s'", name, a->pos[max]);
    for (size_t i = 0; i < st_ctl_flag_count(cmd); i++) {
        const st_ctl_flag_t *flag = &cmd->flags[i];
        if (flag->need == ST_CTL_REQUIRED && a->values[i] == NULL)
            return usage_error(cmd, "%s needs --%s %s (%s)", name, flag->name, flag->value,
                               flag->help);
    }
    return -1;
}

/* The row of `group` `verb`, or NULL. */
static const st_ctl_cmd_t *verb_find(const char *group, const char *verb)
{
    for (size_t i = 0; i < st_ctl_ncommands; i++) {
        const st_ctl_cmd_t *cmd = &st_ctl_commands[i];
        if (strcmp(cmd->group, group) == 0 && cmd->verb != NULL && strcmp(cmd->verb, verb) == 0)
            return cmd;
    }
    return NULL;
}

int st_ctl_dispatch(const st_ctl_t *ctl, int argc, char **argv)
{
    const char *group = argv[0];
    const st_ctl_cmd_t *cmd = st_ctl_group_find(group);
    if (cmd == NULL) {
        fprintf(stderr, "strandctl: unknown command '%s'; 'strandctl --help' lists them\n", group);
        return ST_CTL_USAGE;
    }
    int first = 1;   /* the first word after the command */
    if (cmd->verb != NULL) {
        const char *verb = argc > 1 ? argv[1] : NULL;
        if (verb != NULL && is_help(verb)) {
            st_ctl_help_group(stdout, group);
            return ST_CTL_OK;
        }
        if (verb == NULL || strncmp(verb, "-", 1) == 0) {
            fprintf(stderr, "strandctl: %s needs a command\n", group);
            st_ctl_help_verbs(stderr, group);
            return ST_CTL_USAGE;
        }
        cmd = verb_find(group, verb);
        if (cmd == NULL) {
            fprintf(stderr, "strandctl: unknown command '%s %s'\n", group, verb);
            st_ctl_help_verbs(stderr, group);
            return ST_CTL_USAGE;
        }
        first = 2;
    }
    st_ctl_args_t a = {.cmd = cmd};
    int rc = parse(cmd, argc - first, argv + first, &a);
    return rc >= 0 ? rc : cmd->run(ctl, &a);
}

/* ---- the handlers' accessors ------------------------------------------------------------ */

const char *st_ctl_opt(const st_ctl_args_t *a, const char *name)
{
    const st_ctl_flag_t *flag = st_ctl_flag_find(a->cmd, name);
    return flag ? a->values[flag - a->cmd->flags] : NULL;
}

int st_ctl_opt_copy(const st_ctl_args_t *a, const char *name, json_t *body, const char *field,
                    int as_json)
{
    const char *value = st_ctl_opt(a, name);
    if (value == NULL)
        return 1;
    if (!as_json) {
        json_object_set_new(body, field, json_string(value));
        return 1;
    }
    json_error_t jerr;
    json_t *parsed = json_loads(value, JSON_DECODE_ANY, &jerr);
    if (parsed == NULL) {
        fprintf(stderr, "strandctl: --%s is not valid JSON: %s\n", name, jerr.text);
        return 0;
    }
    json_object_set_new(body, field, parsed);
    return 1;
}

int st_ctl_opt_int(const st_ctl_args_t *a, const char *name, json_t *body, const char *field)
{
    const char *value = st_ctl_opt(a, name);
    if (value == NULL)
        return 1;
    char *end = NULL;
    long long v = strtoll(value, &end, 10);
    if (*value == '\0' || *end != '\0') {
        fprintf(stderr, "strandctl: --%s must be an integer\n", name);
        return 0;
    }
    json_object_set_new(body, field, json_integer(v));
    return 1;
}

void st_ctl_opt_query(const st_ctl_args_t *a, const char *const *pairs, char *query, size_t len)
{
    CURL *curl = curl_easy_init();
    query[0] = '\0';
    for (int i = 0; pairs[i] != NULL; i += 2) {
        const char *value = st_ctl_opt(a, pairs[i]);
        if (value == NULL)
            continue;
        char *escaped = curl_easy_escape(curl, value, 0);
        size_t used = strlen(query);
        snprintf(query + used, len - used, "%s%s=%s", used ? "&" : "?", pairs[i + 1], escaped);
        curl_free(escaped);
    }
    curl_easy_cleanup(curl);
}
