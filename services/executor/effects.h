/*
 * effects.h - turning the interpreter's effects into rows, inside the wake-up's
 * transaction: tasks, child instances, calls, notices, what an abandoned branch or an
 * ended instance owns, and the parent's wake-up when a child ends. Nothing here does
 * network I/O; calls are performed after commit by the dispatcher and return as signals.
 */
#ifndef STRAND_EXECUTOR_EFFECTS_H
#define STRAND_EXECUTOR_EFFECTS_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/auth.h"
#include "strand/engine.h"
#include "strand/err.h"

/* The parent of a child instance, as recorded when the child was started. */
typedef struct {
    char instance_id[40];
    char waiting_token[128];
} st_parent_t;

/* The token file a child start is checked against: `configured` when STRAND_AUTH_FILE
 * names one, `auth` the loaded file (NULL while it has not loaded: then every checked
 * principal holds nothing). main.c sets it before the workers start and again when a
 * file that did not load at start-up loads; `auth` is borrowed until it is set again.
 * With a token file, a subworkflow step starts its child only while the principal that
 * imported the parent's definition version (strand.definitions.imported_by; NULL, from
 * before migration 0027: not checked) holds instances:start on the child's definition;
 * otherwise no child is created and the parent is woken with CHILD_COMPLETED, status
 * failed, error code child_start_forbidden, so that the step fails as a failed child
 * does. Without one (or with authentication off in it) nothing is checked. */
void st_effects_set_auth(int configured, const st_auth_t *auth);

/* Applies every effect of one run for `instance_id`. An `abandon` effect (a branch the
 * run gave up) ends the task, pending call or child of that wait (strand/tree.h). When
 * the run ended the instance (`status` completed or failed), ends everything it still
 * owns and wakes `parent` (NULL: none) with a CHILD_COMPLETED. Expects the caller to
 * hold the wake-up's transaction. `effects` and `snapshot` are borrowed. An effect of
 * an unknown type fails with ST_ERR_INVALID (and the caller rolls back). */
st_err_t st_effects_apply_tx(PGconn *conn, const char *instance_id, const json_t *effects,
                             st_run_status_t status, const json_t *snapshot,
                             const st_parent_t *parent, st_errbuf_t *eb);

#endif
