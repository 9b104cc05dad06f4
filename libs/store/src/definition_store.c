/* definition_store.c - the owner of strand.definitions and the lc_* blueprint tables
 * (see definition_store.h). */
#include "strand/definition_store.h"

#include <stdio.h>
#include <string.h>

#include "strand/pg.h"

static const char *const sql_definition_insert =
    "INSERT INTO strand.definitions (name, version, kind, source, canonical, imported_by)"
    " VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6) ON CONFLICT (name, version) DO NOTHING"
    " RETURNING 1";
static const char *const sql_definition_same =
    "SELECT canonical = $3::jsonb FROM strand.definitions WHERE name = $1 AND version = $2";
static const char *const sql_definition_list =
    "SELECT name, version, kind, created_at FROM strand.definitions"
    " WHERE ($1::text IS NULL OR (name, version) > ($1::text, $2::int))"
    "   AND ($4::text IS NULL OR kind = $4)"
    "   AND ($5::text IS NULL OR starts_with(name, $5))"
    " ORDER BY name, version LIMIT $3::int";
static const char *const sql_definition_get =
    "SELECT name, version, kind, source::text, canonical::text, created_at"
    " FROM strand.definitions WHERE name = $1 AND ($2::int IS NULL OR version = $2::int)"
    " ORDER BY version DESC LIMIT 1";
static const char *const sql_definition_canonical =
    "SELECT canonical::text FROM strand.definitions WHERE name = $1 AND version = $2::int";

/* A lifecycle blueprint's normalised rows, from the canonical JSON ($3), one statement
 * per table; $1, $2 = name, version. */
static const char *const sql_blueprint[] = {
    "INSERT INTO strand.lc_states SELECT $1, $2::int, s->>'name', coalesce((s->>'final')::boolean, false),"
    " s->>'name' = ($3::jsonb)->>'initial', s->'timeout' FROM jsonb_array_elements(($3::jsonb)->'states') s",
    "INSERT INTO strand.lc_events SELECT DISTINCT $1, $2::int, e FROM jsonb_array_elements_text(($3::jsonb)->'events') e",
    "INSERT INTO strand.lc_transitions SELECT $1, $2::int, t->>'from', t->>'event', t->>'to'"
    " FROM jsonb_array_elements(($3::jsonb)->'transitions') t",
    "INSERT INTO strand.lc_routes SELECT $1, $2::int, r.key, r.value->'consumers',"
    " r.key = ($3::jsonb)->>'transition_route' FROM jsonb_each(($3::jsonb)->'routes') r",
    "INSERT INTO strand.lc_hooks SELECT $1, $2::int, p.ord - 1, h.ord - 1, p.v->'when'->>'from',"
    " p.v->'when'->>'to', p.v->'when'->>'event', h.v->>'code', h.v->>'route', coalesce(h.v->'payload', '{}')"
    " FROM jsonb_array_elements(coalesce(($3::jsonb)->'policies', '[]')) WITH ORDINALITY p(v, ord),"
    " jsonb_array_elements(p.v->'hooks') WITH ORDINALITY h(v, ord)",
};

/* Writes a lifecycle blueprint's lc_* rows inside the caller's transaction. */
static st_err_t blueprint_add_tx(PGconn *conn, const char *name, const char *version,
                                 const char *canonical_json, st_errbuf_t *eb)
{
    const char *params[] = {name, version, canonical_json};
    st_err_t err = ST_OK;
    for (size_t i = 0; err == ST_OK && i < sizeof sql_blueprint / sizeof sql_blueprint[0]; i++)
        err = st_pg_exec(conn, sql_blueprint[i], 3, params, NULL, eb);
    return err;
}

st_err_t st_definition_add_tx(PGconn *conn, const st_definition_new_t *def, int *inserted,
                              st_errbuf_t *eb)
{
    char version[16];
    snprintf(version, sizeof version, "%d", def->version);
    const char *params[] = {def->name, version, def->kind, def->source_json,
                            def->canonical_json, def->imported_by};
    PGresult *res = NULL;
    *inserted = 0;
    st_err_t err = st_pg_exec(conn, sql_definition_insert, 6, params, &res, eb);
    if (err == ST_OK)
        *inserted = PQntuples(res) == 1;
    PQclear(res);
    /* a blueprint's rows go with its definition, only when this call inserted it */
    if (err == ST_OK && *inserted && strcmp(def->kind, "lifecycle") == 0)
        err = blueprint_add_tx(conn, def->name, version, def->canonical_json, eb);
    return err;
}

st_err_t st_definition_same(PGconn *conn, const char *name, int version,
                            const char *canonical_json, int *same, st_errbuf_t *eb)
{
    char version_text[16];
    snprintf(version_text, sizeof version_text, "%d", version);
    const char *params[] = {name, version_text, canonical_json};
    PGresult *res = NULL;
    *same = 0;
    st_err_t err = st_pg_exec(conn, sql_definition_same, 3, params, &res, eb);
    if (err == ST_OK)
        *same = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    return err;
}

st_err_t st_definition_list(PGconn *conn, const char *after_name, const char *after_version,
                            int limit, const char *kind, const char *name_prefix,
                            PGresult **rows, st_errbuf_t *eb)
{
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *params[] = {after_name, after_name ? after_version : NULL, limit_text, kind,
                            name_prefix};
    return st_pg_exec(conn, sql_definition_list, 5, params, rows, eb);
}

st_err_t st_definition_find(PGconn *conn, const char *name, const char *version,
                            PGresult **row, st_errbuf_t *eb)
{
    const char *params[] = {name, version};
    return st_pg_exec(conn, sql_definition_get, 2, params, row, eb);
}

st_err_t st_definition_find_canonical(PGconn *conn, const char *name, const char *version,
                                      PGresult **row, st_errbuf_t *eb)
{
    const char *params[] = {name, version};
    return st_pg_exec(conn, sql_definition_canonical, 2, params, row, eb);
}
