/*
 * definition_store.h - the owner of strand.definitions and of a lifecycle blueprint's
 * normalised rows (strand.lc_states, lc_events, lc_transitions, lc_routes, lc_hooks;
 * migration 0007). Definitions are immutable: a (name, version) is inserted once, and a
 * lifecycle's lc_* rows are written with it, in the same transaction, from its
 * canonical JSON. Callers pass text the engine already serialised (st_defn_canonical())
 * and never SQL; the engine itself is not needed here. Each version records the
 * principal that imported it (imported_by), whose grants the executor checks again
 * when one of its subworkflow steps starts another definition.
 *
 * Reads of these tables elsewhere (the executor's definition cache, starts, triggers)
 * still sit near their handlers (docs/architecture.md allows it).
 */
#ifndef STRAND_DEFINITION_STORE_H
#define STRAND_DEFINITION_STORE_H

#include <libpq-fe.h>

#include "strand/err.h"

/* ---- writes ---------------------------------------------------------------------- */

/* A compiled definition to insert. Every string is borrowed. */
typedef struct st_definition_new {
    const char *name;
    int version;
    const char *kind;             /* "flow", "lifecycle" or "process" */
    const char *source_json;      /* the imported document, as JSON text */
    const char *canonical_json;   /* its canonical form, as JSON text */
    const char *imported_by;      /* the importing principal (migration 0027); NULL:
                                     none recorded */
} st_definition_new_t;

/* Inserts definition `def` unless its (name, version) exists: *inserted is 1 when this
 * call inserted it, 0 when the pair was already there (nothing is written then, its
 * importer included; compare with st_definition_same()). A lifecycle ("lifecycle" kind) that is inserted gets its
 * blueprint's lc_* rows too, from `canonical_json`, one statement per table. Expects the
 * caller's open transaction; on failure the caller rolls back. */
st_err_t st_definition_add_tx(PGconn *conn, const st_definition_new_t *def, int *inserted,
                              st_errbuf_t *eb);

/* ---- reads ----------------------------------------------------------------------- */

/* *same = 1 when `name` v`version` exists and its canonical form equals
 * `canonical_json` (as jsonb), 0 otherwise (different content, or no such row). For a
 * re-import that st_definition_add_tx() did not insert. Borrowed strings; needs no
 * transaction. */
st_err_t st_definition_same(PGconn *conn, const char *name, int version,
                            const char *canonical_json, int *same, st_errbuf_t *eb);

/* One page of definitions by (name, version), after (`after_name`, `after_version`)
 * when `after_name` is not NULL (`after_version`: the version as decimal text), at most
 * `limit` rows, only of `kind` and names starting with `name_prefix` when those are not
 * NULL. *rows (caller PQclear()s) has the columns name, version, kind, created_at.
 * Borrowed strings. */
st_err_t st_definition_list(PGconn *conn, const char *after_name, const char *after_version,
                            int limit, const char *kind, const char *name_prefix,
                            PGresult **rows, st_errbuf_t *eb);

/* Definition `name` at `version` (decimal text, as the request gave it; NULL: its
 * latest version): *row (caller PQclear()s) has zero rows or one, with the columns
 * name, version, kind, source (JSON text), canonical (JSON text), created_at. A version
 * the server cannot read as an int fails as the server says. Borrowed strings. */
st_err_t st_definition_find(PGconn *conn, const char *name, const char *version,
                            PGresult **row, st_errbuf_t *eb);

/* The canonical form of `name` at `version` (decimal text): *row (caller PQclear()s)
 * has zero rows or one, with one column, canonical (JSON text). Borrowed strings. */
st_err_t st_definition_find_canonical(PGconn *conn, const char *name, const char *version,
                                      PGresult **row, st_errbuf_t *eb);

#endif
