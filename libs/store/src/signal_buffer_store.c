/* signal_buffer_store.c - the owner of strand.signal_buffer (see signal_buffer_store.h). */
#include "strand/signal_buffer_store.h"

#include <stdlib.h>

#include "strand/pg.h"

static const char *const sql_buffer_insert =
    "INSERT INTO strand.signal_buffer (instance_id, name, signal_id, payload)"
    " VALUES ($1::uuid, $2, $3, $4::jsonb)";
/* $2 = a JSON array of the signal names the instance waits for; "*" takes any name. */
static const char *const sql_buffer_take =
    "DELETE FROM strand.signal_buffer WHERE id = (SELECT id FROM strand.signal_buffer"
    " WHERE instance_id = $1::uuid AND envelope IS NULL AND ($2::jsonb ? '*' OR name IN"
    " (SELECT jsonb_array_elements_text($2::jsonb))) ORDER BY id LIMIT 1 FOR UPDATE)"
    " RETURNING signal_id, payload::text, name";
/* Named rows only (held envelopes have their own bound: none); instance_id leads the
 * signal_buffer_by_instance index. */
static const char *const sql_buffer_usage =
    "SELECT count(*), coalesce(sum(octet_length(payload::text)), 0) FROM strand.signal_buffer"
    " WHERE instance_id = $1::uuid AND envelope IS NULL";
static const char *const sql_hold_insert =
    "INSERT INTO strand.signal_buffer (instance_id, name, signal_id, payload, envelope)"
    " VALUES ($1::uuid, $2, $3, '{}', $4::bytea)";
static const char *const sql_held_take =
    "WITH d AS (DELETE FROM strand.signal_buffer WHERE instance_id = $1::uuid"
    "   AND envelope IS NOT NULL RETURNING id, envelope)"
    " SELECT envelope FROM d ORDER BY id";

st_err_t st_signal_buffer_add_named_tx(PGconn *conn, const char *instance_id, const char *name,
                                       const char *signal_id, const char *payload_json,
                                       st_errbuf_t *eb)
{
    const char *params[] = {instance_id, name, signal_id, payload_json};
    return st_pg_exec(conn, sql_buffer_insert, 4, params, NULL, eb);
}

st_err_t st_signal_buffer_named_usage_tx(PGconn *conn, const char *instance_id, long long *count,
                                         long long *bytes, st_errbuf_t *eb)
{
    const char *params[] = {instance_id};
    PGresult *res = NULL;
    *count = *bytes = 0;
    st_err_t err = st_pg_exec(conn, sql_buffer_usage, 1, params, &res, eb);
    if (err == ST_OK && PQntuples(res) == 1) {
        *count = atoll(PQgetvalue(res, 0, 0));
        *bytes = atoll(PQgetvalue(res, 0, 1));
    }
    PQclear(res);
    return err;
}

st_err_t st_signal_buffer_take_tx(PGconn *conn, const char *instance_id, const char *names_json,
                                  PGresult **row, st_errbuf_t *eb)
{
    const char *params[] = {instance_id, names_json};
    return st_pg_exec(conn, sql_buffer_take, 2, params, row, eb);
}

st_err_t st_signal_buffer_add_held_tx(PGconn *conn, const char *instance_id, const char *name,
                                      const char *signal_id, const void *envelope, size_t len,
                                      st_errbuf_t *eb)
{
    const char *params[] = {instance_id, name, signal_id, (const char *)envelope};
    const int lengths[] = {0, 0, 0, (int)len};
    const int formats[] = {0, 0, 0, 1};
    return st_pg_exec_bin(conn, sql_hold_insert, 4, params, lengths, formats, NULL, eb);
}

st_err_t st_signal_buffer_take_held_tx(PGconn *conn, const char *instance_id, PGresult **rows,
                                       st_errbuf_t *eb)
{
    const char *params[] = {instance_id};
    return st_pg_exec_format(conn, sql_held_take, 1, params, NULL, NULL, 1, rows, eb);
}
