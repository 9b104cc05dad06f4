/*
 * audit.h - the owner of strand.audit_log: one row per operator action (who, what,
 * on which instance or object, when, before and after). Written inside the caller's
 * transaction, so an action and its audit row commit or roll back together.
 */
#ifndef STRAND_AUDIT_H
#define STRAND_AUDIT_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/err.h"

/* One audit row. Every pointer is borrowed; NULL leaves a column NULL (detail: '{}'). */
typedef struct {
    const char *actor;        /* principal name; NULL or "" is written as "system" */
    const char *action;       /* e.g. "cancel", "retry", "patch_variables" */
    const char *outcome;      /* "requested", "applied" or "rejected" */
    const char *instance_id;  /* the instance acted on, or NULL */
    const char *target;       /* another object acted on ("dead_letter:17"), or NULL */
    const json_t *before;     /* the state before (any JSON), or NULL */
    const json_t *after;      /* the state after, or NULL */
    const json_t *detail;     /* the request's arguments, reason, error..., or NULL */
} st_audit_entry_t;

/* Appends `entry` to the audit log in the caller's open transaction (or as its own
 * statement). ST_ERR_INVALID when actor/action/outcome are missing. */
st_err_t st_audit_add_tx(PGconn *conn, const st_audit_entry_t *entry, st_errbuf_t *eb);

#endif
