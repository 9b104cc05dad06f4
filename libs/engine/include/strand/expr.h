/*
 * expr.h - Strand's expression language (docs/expressions.md).
 *
 * Small, total and bounded: literals, paths into the evaluation scope (input, state,
 * event, ...), arithmetic, comparison, boolean logic, a conditional, and calls to
 * functions from one catalog (built-ins plus plugins registered through the C API).
 * No assignment, no loops, no access to anything outside the scope object. Every
 * evaluation is bounded in nesting depth, node count and string size, and fails with
 * a clear message instead of running away.
 */
#ifndef STRAND_EXPR_H
#define STRAND_EXPR_H

#include <jansson.h>

#include "strand/err.h"

#define ST_EXPR_MAX_DEPTH 64        /* nesting of sub-expressions */
#define ST_EXPR_MAX_NODES 4096      /* size of one parsed expression */
#define ST_EXPR_MAX_STRING 65536    /* default of the string limit (STRAND_EXPR_MAX_STRING,
                                     * st_engine_limits()->max_string) */
#define ST_EXPR_MAX_ARGS 8

typedef struct st_expr st_expr_t;

/* Parses `text`. On success *out is owned by the caller (st_expr_free()). On a
 * syntax error returns ST_ERR_INVALID with "at column N: ..." in `eb`. */
st_err_t st_expr_parse(const char *text, st_expr_t **out, st_errbuf_t *eb);
void st_expr_free(st_expr_t *expr);

/* Evaluates against `scope` (an object whose members are the root names, borrowed).
 * On success *value is a new reference (caller decrefs). Errors (ST_ERR_INVALID for
 * type errors, ST_ERR_LIMIT for bounds: nodes, depth, the string and value limits of
 * st_engine_limits()) carry a message in `eb`. */
st_err_t st_expr_eval(const st_expr_t *expr, const json_t *scope, json_t **value,
                      st_errbuf_t *eb);

/* As st_expr_eval(), charging one unit per node evaluated (and per value measured
 * against the size limits) to *work, the units left in the caller's budget; when
 * *work falls below 0 the evaluation fails with ST_ERR_LIMIT. */
st_err_t st_expr_eval_counted(const st_expr_t *expr, const json_t *scope, json_t **value,
                              long long *work, st_errbuf_t *eb);

/* Parses and evaluates in one call. */
st_err_t st_expr_eval_text(const char *text, const json_t *scope, json_t **value,
                           st_errbuf_t *eb);

/* A plugin function: `args` are borrowed; return a new reference, or NULL after
 * st_err_set(eb, ...) to fail the evaluation. */
typedef json_t *(*st_expr_fn)(json_t *const *args, int nargs, st_errbuf_t *eb);

/* Registers `fn` under `name` with an arity range, replacing a plugin of that name.
 * Built-ins cannot be replaced (ST_ERR_CONFLICT). Not thread-safe: register at
 * start-up, before evaluations run. */
st_err_t st_expr_register_fn(const char *name, int min_args, int max_args, st_expr_fn fn);

/* Truthiness used by conditions: false, null, 0, "" , [] and {} are false. */
int st_expr_truthy(const json_t *value);

#endif
