/*
 * help.c - strandctl's help, generated from the command table (commands.h):
 * `strandctl --help` (every command), `strandctl GROUP --help` (its verbs with their
 * flags) and `strandctl GROUP VERB --help` (one command, each flag explained).
 * Requested help goes to stdout; parse.c prints the same text on stderr after a
 * usage error.
 */
#include "commands.h"

#include <string.h>

#define WIDTH 92        /* wrap usage lines before this column */
#define NAME_COLUMN 36  /* where summaries start in the list of every command */
#define FLAG_COLUMN 24  /* where a flag's help starts */

/* A line being written: its column, where its continuation lines start, and whether
 * nothing has been written on it since the start or the last wrap. */
typedef struct {
    FILE *out;
    int col;
    int indent;
    int fresh;
} line_t;

/* The line starting at column `col` (the caller has written that much). */
static line_t line_at(FILE *out, int col, int indent)
{
    line_t line = {out, col, indent, 1};
    return line;
}

/* Writes `word`, after a space, or on a new line at the indent if it would pass WIDTH. */
static void put_word(line_t *l, const char *word)
{
    int len = (int)strlen(word);
    if (!l->fresh && l->col + 1 + len > WIDTH) {
        fprintf(l->out, "\n%*s", l->indent, "");
        l->col = l->indent;
        l->fresh = 1;
    }
    if (!l->fresh) {
        fputc(' ', l->out);
        l->col++;
    }
    fputs(word, l->out);
    l->col += len;
    l->fresh = 0;
}

/* Writes the words of `text`, wrapped. */
static void put_text(line_t *l, const char *text)
{
    char word[160];
    for (const char *p = text; *p != '\0';) {
        size_t n = strcspn(p, " ");
        if (n > 0) {
            snprintf(word, sizeof word, "%.*s", (int)n, p);
            put_word(l, word);
        }
        p += n + (p[n] == ' ');
    }
}

/* Writes the usage of `cmd` and a newline: "strandctl GROUP VERB ARGS [--flag V]...",
 * from "VERB" on unless `full`. */
static void put_usage(line_t *l, const st_ctl_cmd_t *cmd, int full)
{
    char word[160];
    if (full) {
        put_word(l, "strandctl");
        put_word(l, cmd->group);
    }
    if (cmd->verb != NULL)
        put_word(l, cmd->verb);
    put_text(l, cmd->args);
    for (size_t i = 0; i < st_ctl_flag_count(cmd); i++) {
        const st_ctl_flag_t *f = &cmd->flags[i];
        int optional = f->need == ST_CTL_OPTIONAL;
        snprintf(word, sizeof word, "%s--%s%s%s%s", optional ? "[" : "", f->name,
                 f->value ? " " : "", f->value ? f->value : "", optional ? "]" : "");
        put_word(l, word);
    }
    fputc('\n', l->out);
}

void st_ctl_help_usage(FILE *out, const st_ctl_cmd_t *cmd, const char *indent)
{
    line_t l = line_at(out, (int)strlen(indent), (int)strlen(indent) + 4);
    put_usage(&l, cmd, 1);
}

/* Writes one flag's line: "  --name VALUE   help (required)", the help wrapped. */
static void put_flag(FILE *out, const st_ctl_flag_t *f)
{
    char left[80];
    snprintf(left, sizeof left, "--%s%s%s", f->name, f->value ? " " : "", f->value ? f->value : "");
    fprintf(out, "  %-*s ", FLAG_COLUMN - 3, left);
    line_t l = line_at(out, FLAG_COLUMN, FLAG_COLUMN);
    put_text(&l, f->help);
    if (f->need == ST_CTL_REQUIRED)
        put_text(&l, "(required)");
    else if (f->need == ST_CTL_API_NEEDS)
        put_text(&l, "(needed: the API refuses the command without it)");
    fputc('\n', out);
}

static void put_footer(FILE *out)
{
    fputs("Environment: STRAND_API_URL (default http://127.0.0.1:8080), STRAND_API_TOKEN\n"
          "(a bearer token, when the API asks for one).\n"
          "Exit status: 0 success, 1 the API refused or failed (its problem printed), 2 usage\n"
          "error, 3 the API could not be reached.\n",
          out);
}

void st_ctl_help_all(FILE *out)
{
    fputs("usage: strandctl [--api URL] [--json] GROUP VERB [ARGUMENT | --FLAG VALUE]...\n"
          "\n"
          "The command-line client of the Strand API: human-readable output, or the API's JSON\n"
          "with --json.\n"
          "\n"
          "Global options (before the command):\n",
          out);
    for (size_t i = 0; i < st_ctl_nglobal_flags; i++)
        put_flag(out, &st_ctl_global_flags[i]);
    fputs("\nCommands ('strandctl GROUP VERB --help' lists a command's flags):\n", out);
    for (size_t i = 0; i < st_ctl_ncommands; i++) {
        const st_ctl_cmd_t *cmd = &st_ctl_commands[i];
        char left[128];
        /* a blank line between groups, none between the groups without verbs */
        if (i > 0 && strcmp(cmd->group, st_ctl_commands[i - 1].group) != 0 &&
            (cmd->verb != NULL || st_ctl_commands[i - 1].verb != NULL))
            fputc('\n', out);
        snprintf(left, sizeof left, "%s%s%s%s%s", cmd->group, cmd->verb ? " " : "",
                 cmd->verb ? cmd->verb : "", *cmd->args ? " " : "", cmd->args);
        if ((int)strlen(left) + 3 > NAME_COLUMN)
            fprintf(out, "  %s\n%*s", left, NAME_COLUMN, "");
        else
            fprintf(out, "  %-*s ", NAME_COLUMN - 3, left);
        line_t l = line_at(out, NAME_COLUMN, NAME_COLUMN);
        put_text(&l, cmd->summary);
        fputc('\n', out);
    }
    fputc('\n', out);
    put_footer(out);
}

void st_ctl_help_group(FILE *out, const char *group)
{
    const st_ctl_cmd_t *first = st_ctl_group_find(group);
    if (first == NULL)
        return;
    if (first->verb == NULL) {
        st_ctl_help_command(out, first);
        return;
    }
    fprintf(out, "usage: strandctl [--api URL] [--json] %s VERB [ARGUMENT | --FLAG VALUE]...\n\n"
            "Verbs ('strandctl %s VERB --help' explains a verb's flags):\n", group, group);
    for (const st_ctl_cmd_t *cmd = first; cmd < st_ctl_commands + st_ctl_ncommands &&
                                          strcmp(cmd->group, group) == 0; cmd++) {
        fputs("  ", out);
        line_t usage = line_at(out, 2, 8);
        put_usage(&usage, cmd, 0);
        fputs("      ", out);
        line_t summary = line_at(out, 6, 6);
        put_text(&summary, cmd->summary);
        fputc('\n', out);
    }
}

void st_ctl_help_verbs(FILE *out, const char *group)
{
    const st_ctl_cmd_t *first = st_ctl_group_find(group);
    if (first == NULL || first->verb == NULL)
        return;
    fprintf(out, "verbs of %s:", group);
    line_t l = line_at(out, (int)strlen(group) + 10, 2);
    l.fresh = 0;   /* a space after the colon */
    for (const st_ctl_cmd_t *cmd = first; cmd < st_ctl_commands + st_ctl_ncommands &&
                                          strcmp(cmd->group, group) == 0; cmd++)
        put_word(&l, cmd->verb);
    fprintf(out, "\n'strandctl %s --help' describes them.\n", group);
}

void st_ctl_help_command(FILE *out, const st_ctl_cmd_t *cmd)
{
    fputs("usage: ", out);
    st_ctl_help_usage(out, cmd, "       ");
    fputc('\n', out);
    line_t l = line_at(out, 0, 0);
    put_text(&l, cmd->summary);
    fputs("\n\n", out);
    fputs("Flags:\n", out);
    for (size_t i = 0; i < st_ctl_flag_count(cmd); i++)
        put_flag(out, &cmd->flags[i]);
    fprintf(out, "  %-*s this help\n", FLAG_COLUMN - 3, "--help");
    fputs("Global options, before the command: --api URL, --json ('strandctl --help').\n", out);
}
