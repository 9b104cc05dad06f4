/*
 * strandctl: the command-line client of the Strand API.
 *
 *   strandctl [--api URL] [--json] GROUP VERB [ARGUMENT | --FLAG VALUE]...
 *
 * Human-readable output by default, the API's JSON with --json. The API address comes
 * from --api or STRAND_API_URL (default http://127.0.0.1:8080); a bearer token, if
 * needed, from STRAND_API_TOKEN. Exit status: 0 success, 1 the API refused or failed,
 * 2 usage error, 3 the API could not be reached.
 *
 * This file reads the global options only. The commands are rows of one table
 * (commands.c), which drives parsing (parse.c), help (help.c) and the bash completion
 * (completion.c); their handlers are one file per group (cmd_<group>.c), over the
 * requests and printing of ctl.c and print.c. See README.md.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

/* The global flag named by `word` ("--api"), or NULL. Borrowed from the table. */
static const st_ctl_flag_t *global_flag(const char *word)
{
    if (strncmp(word, "--", 2) != 0)
        return NULL;
    for (size_t i = 0; i < st_ctl_nglobal_flags; i++)
        if (strcmp(st_ctl_global_flags[i].name, word + 2) == 0)
            return &st_ctl_global_flags[i];
    return NULL;
}

int main(int argc, char **argv)
{
    const char *env_api = getenv("STRAND_API_URL");
    st_ctl_t ctl = {env_api ? env_api : "http://127.0.0.1:8080", 0};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const st_ctl_flag_t *flag = global_flag(argv[i]);
        if (strcmp(argv[i], "-h") == 0 || (flag && strcmp(flag->name, "help") == 0)) {
            st_ctl_help_all(stdout);
            return ST_CTL_OK;
        }
        if (flag == NULL) {
            fprintf(stderr, "strandctl: unknown option %s; 'strandctl --help' lists the options\n",
                    argv[i]);
            return ST_CTL_USAGE;
        }
        if (flag->value != NULL && i + 1 >= argc) {
            fprintf(stderr, "strandctl: %s needs a value (%s)\n", argv[i], flag->value);
            return ST_CTL_USAGE;
        }
        if (strcmp(flag->name, "json") == 0)
            ctl.json_output = 1;
        else if (strcmp(flag->name, "api") == 0)
            ctl.api = argv[++i];
    }
    if (i >= argc) {
        st_ctl_help_all(stderr);
        return ST_CTL_USAGE;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = st_ctl_dispatch(&ctl, argc - i, argv + i);
    curl_global_cleanup();
    return rc;
}
