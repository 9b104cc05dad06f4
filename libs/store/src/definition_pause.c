/* definition_pause.c - the owner of strand.definition_pauses (see definition_pause.h). */
#include "strand/definition_pause.h"

#include <stdio.h>
#include <string.h>

#include "strand/pg.h"

static const char *const sql_pause_add =
    "INSERT INTO strand.definition_pauses (definition_name, definition_version, paused_by, reason)"
    " VALUES ($1, $2::int, $3, $4) ON CONFLICT DO NOTHING RETURNING 1";
static const char *const sql_pause_remove =
    "DELETE FROM strand.definition_pauses WHERE definition_name = $1 AND definition_version = $2::int"
    " RETURNING 1";
static const char *const sql_pause_lock =
    "SELECT 1 FROM strand.definition_pauses WHERE definition_name = $1 AND definition_version = $2::int"
    " FOR SHARE";
static const char *const sql_pause_get =
    "SELECT 1 FROM strand.definition_pauses WHERE definition_name = $1 AND definition_version = $2::int";

/* Runs `sql` on (name, version[, extra...]) and sets *rows to the number of rows. */
static st_err_t run(PGconn *conn, const char *sql, const char *name, int version,
                    const char *actor, const char *reason, int nparams, int *rows,
                    st_errbuf_t *eb)
{
    char version_text[16];
    snprintf(version_text, sizeof version_text, "%d", version);
    const char *params[] = {name, version_text, actor, reason};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql, nparams, params, &res, eb);
    if (err == ST_OK)
        *rows = PQntuples(res);
    PQclear(res);
    return err;
}

st_err_t st_definition_pause_add_tx(PGconn *conn, const char *name, int version,
                                    const char *actor, const char *reason, int *changed,
                                    st_errbuf_t *eb)
{
    return run(conn, sql_pause_add, name, version, actor && actor[0] ? actor : "system", reason,
               4, changed, eb);
}

st_err_t st_definition_pause_remove_tx(PGconn *conn, const char *name, int version,
                                       int *changed, st_errbuf_t *eb)
{
    return run(conn, sql_pause_remove, name, version, NULL, NULL, 2, changed, eb);
}

st_err_t st_definition_pause_lock_tx(PGconn *conn, const char *name, int version, int *paused,
                                     st_errbuf_t *eb)
{
    return run(conn, sql_pause_lock, name, version, NULL, NULL, 2, paused, eb);
}

st_err_t st_definition_pause_get(PGconn *conn, const char *name, int version, int *paused,
                                 st_errbuf_t *eb)
{
    return run(conn, sql_pause_get, name, version, NULL, NULL, 2, paused, eb);
}
