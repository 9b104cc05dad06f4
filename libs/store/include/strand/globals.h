/*
 * globals.h - a process's global attributes: columns of one row of a table in the
 * user's own PostgreSQL schema (docs/processes.md).
 *
 * The declaration is the "globals" member of a process's canonical form:
 *   {"table": "app.users", "key": "id", "columns": {attribute: column}}
 * The row is the one whose key column equals the process id (the instance's
 * business_ref, or its id when it has none). Both functions expect the caller to hold
 * an open transaction: the executor reads the row FOR UPDATE at the start of a wake-up
 * and writes the changed attributes in the same transaction as the snapshot and its
 * outbox rows, so a failed write (a CHECK constraint, a trigger) rolls back both.
 */
#ifndef STRAND_GLOBALS_H
#define STRAND_GLOBALS_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/err.h"

/* Reads the attributes of the row keyed `key` (locked FOR UPDATE) into *out, a new
 * object {attribute: value} (null for every attribute when there is no row). Caller
 * decrefs *out. */
st_err_t st_globals_load_tx(PGconn *conn, const json_t *decl, const char *key, json_t **out,
                            st_errbuf_t *eb);

/* Writes every attribute whose value in `state` differs from `before` (as loaded) to
 * the row keyed `key`, inserting the row when there is none. Nothing changed: no
 * statement. Errors leave the transaction to be rolled back by the caller. */
st_err_t st_globals_store_tx(PGconn *conn, const json_t *decl, const char *key,
                             const json_t *before, const json_t *state, st_errbuf_t *eb);

#endif
