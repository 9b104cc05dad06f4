/* request.c - idempotency keys in strand.requests (see request.h). */
#include "strand/request.h"

#include <stdio.h>

#include "strand/pg.h"

/* The earlier claim, if any (a key from before migration 0012 has scope_name '' and
 * covers every name), and the insert when there is none; a concurrent claim of the
 * same key waits on the primary key and then inserts nothing. */
static const char *const sql_request_claim =
    "WITH prior AS (SELECT instance_id FROM strand.requests WHERE scope = $1"
    "   AND scope_owner = $2 AND scope_name IN ($3, '') AND request_id = $4 LIMIT 1),"
    " ins AS (INSERT INTO strand.requests (scope, scope_owner, scope_name, request_id, instance_id)"
    "   SELECT $1, $2, $3, $4, $5::uuid WHERE NOT EXISTS (SELECT 1 FROM prior)"
    "   ON CONFLICT (scope, scope_owner, scope_name, request_id) DO NOTHING RETURNING 1)"
    " SELECT (SELECT count(*) FROM ins), (SELECT instance_id::text FROM prior)";
static const char *const sql_request_find =
    "SELECT coalesce(instance_id::text, '') FROM strand.requests WHERE scope = $1"
    " AND scope_owner = $2 AND scope_name IN ($3, '') AND request_id = $4 LIMIT 1";

st_err_t st_request_claim_tx(PGconn *conn, const char *scope, const char *owner,
                             const char *name, const char *request_id,
                             const char *instance_id, int *fresh, char *prior_instance,
                             st_errbuf_t *eb)
{
    const char *params[] = {scope, owner ? owner : "", name ? name : "", request_id,
                            instance_id};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_request_claim, 5, params, &res, eb);
    if (err != ST_OK)
        return err;
    *fresh = PQgetvalue(res, 0, 0)[0] == '1';
    if (prior_instance != NULL)
        snprintf(prior_instance, 37, "%s", PQgetisnull(res, 0, 1) ? "" : PQgetvalue(res, 0, 1));
    PQclear(res);
    return ST_OK;
}

st_err_t st_request_find(PGconn *conn, const char *scope, const char *owner,
                         const char *name, const char *request_id, int *found,
                         char *instance, st_errbuf_t *eb)
{
    const char *params[] = {scope, owner ? owner : "", name ? name : "", request_id};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_request_find, 4, params, &res, eb);
    if (err != ST_OK)
        return err;
    *found = PQntuples(res) > 0;
    if (instance != NULL)
        snprintf(instance, 37, "%s", *found ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    return ST_OK;
}
