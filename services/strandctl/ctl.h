/*
 * ctl.h - what every strandctl command shares: the session (the API's address and the
 * output form), requests to the API, and the printing of its answers and problems.
 *
 * The layer under the command handlers (cmd_*.c): a handler builds a path and a body,
 * then calls st_ctl_run(), st_ctl_post() or st_ctl_run_raw(), which print the answer
 * (human form, or the API's JSON under --json) and return the exit status. The human
 * forms of lists live in print.c (print.h).
 *
 * Exit statuses, for every command: ST_CTL_OK success, ST_CTL_REFUSED the API refused or
 * failed (its problem printed), ST_CTL_USAGE a usage error, ST_CTL_UNREACHABLE the API
 * could not be reached.
 */
#ifndef STRANDCTL_CTL_H
#define STRANDCTL_CTL_H

#include <jansson.h>

enum {
    ST_CTL_OK = 0,
    ST_CTL_REFUSED = 1,
    ST_CTL_USAGE = 2,
    ST_CTL_UNREACHABLE = 3,
};

/* The session: from the global options (main.c). */
typedef struct {
    const char *api;   /* base URL, no trailing path; borrowed from argv or the environment */
    int json_output;   /* --json: print the API's JSON as it is (indented) */
} st_ctl_t;

/* How an answer of 2xx is printed in the human form. */
typedef void (*st_ctl_human_fn)(const json_t *answer);

/* ---- requests ------------------------------------------------------------------------ */

/* Performs one request with the bearer token of STRAND_API_TOKEN, if set. Returns the
 * HTTP status, or -1 (after a message on stderr) if the API could not be reached; the
 * parsed body in *out (caller decrefs; NULL for an empty or non-JSON body). */
long st_ctl_request(const st_ctl_t *ctl, const char *method, const char *path, const char *body,
                    json_t **out);

/* Sends a request and prints the answer: its problem on stderr for a non-2xx, the JSON
 * under --json, else `human`. `body` is borrowed (NULL: none). Returns the exit status. */
int st_ctl_run(const st_ctl_t *ctl, const char *method, const char *path, const char *body,
               st_ctl_human_fn human);

/* POSTs `body` to `path` and prints the answer as st_ctl_run() does. Takes ownership of
 * `body`. Returns the exit status. */
int st_ctl_post(const st_ctl_t *ctl, const char *path, json_t *body, st_ctl_human_fn human);

/* GETs a document that is not JSON (SVG, metrics) and copies it to stdout as it is.
 * Returns the exit status. */
int st_ctl_run_raw(const st_ctl_t *ctl, const char *path);

/* ---- printing ------------------------------------------------------------------------- */

/* Prints an API problem ({code, message, field, problems}) on stderr as
 * "error STATUS CODE: MESSAGE at FIELD". `body` is borrowed and may be NULL. */
void st_ctl_print_problem(const json_t *body, long status);

/* Prints a flat object as "key value" lines, nested values as compact JSON. */
void st_ctl_print_object(const json_t *obj);

/* ---- input ----------------------------------------------------------------------------- */

/* Reads a whole file, or stdin for "-". Returns the text (caller frees), or NULL after
 * a message on stderr. */
char *st_ctl_read_file(const char *path);

/* URL-escapes `text` into `out` (at most `len` bytes, always terminated). */
void st_ctl_escape(const char *text, char *out, size_t len);

#endif
