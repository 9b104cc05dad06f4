/* call.c - the owner of strand.calls (see call.h). */
#include "strand/call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/pg.h"

static const char *const sql_call_insert =
    "INSERT INTO strand.calls (id, instance_id, waiting_token, transport, request, attempt,"
    " idempotency_key, timeout_ms) VALUES ($1::uuid, $2::uuid, $3, $4, $5::jsonb, $6, $7, $8)";
/* Returns sent calls whose lease has passed (their executor died or lost the
 * database) to 'pending'; the worker will see the same idempotency key. */
static const char *const sql_calls_recover =
    "UPDATE strand.calls c SET status = 'pending', claimed_by = NULL, lease_until = NULL,"
    " updated_at = now() FROM (SELECT id, claimed_by FROM strand.calls WHERE status = 'sent'"
    " AND lease_until < now() ORDER BY lease_until LIMIT 100 FOR UPDATE SKIP LOCKED) old"   /* at most 100 a batch */
    " WHERE c.id = old.id RETURNING c.id, c.instance_id, old.claimed_by";
/* Claims up to $1 pending calls under a lease of $3 ms for node $2. A call whose
 * instance has ended, or whose token no live thread of the instance waits on any more
 * (the engine's snapshot: threads[] not done, their wait.token), is abandoned. */
static const char *const sql_calls_claim =
    "WITH picked AS (SELECT id, instance_id, waiting_token FROM strand.calls"
    "  WHERE status = 'pending' ORDER BY created_at LIMIT $1::int FOR UPDATE SKIP LOCKED),"
    " judged AS (SELECT p.id, EXISTS (SELECT 1 FROM strand.instances i"
    "  JOIN strand.runtime_states r ON r.instance_id = i.id WHERE i.id = p.instance_id"
    "  AND i.status NOT IN ('completed', 'failed', 'cancelled', 'terminated')"
    "  AND jsonb_path_exists(r.snapshot, '$.threads[*] ? (!(@.done == true)).wait.token ? (@ == $t)',"
    "                        jsonb_build_object('t', p.waiting_token))) AS live FROM picked p)"
    " UPDATE strand.calls c SET status = CASE WHEN j.live THEN 'sent' ELSE 'abandoned' END,"
    " claimed_by = CASE WHEN j.live THEN $2 END,"
    " lease_until = CASE WHEN j.live THEN now() + make_interval(secs => $3::int / 1000.0) END,"
    " lease_epoch = c.lease_epoch + CASE WHEN j.live THEN 1 ELSE 0 END,"
    " updated_at = now() FROM judged j WHERE c.id = j.id"
    " RETURNING c.id, c.instance_id, c.waiting_token, c.transport, c.request::text, c.attempt,"
    " c.idempotency_key, c.timeout_ms, c.status, c.lease_epoch";
/* Renews only a lease still held: the claim of that epoch, not lapsed (a lapsed lease
 * is never revived: another executor may be about to claim the call again). Returns
 * the ids renewed. $1 and $2 are parallel arrays of ids and epochs. */
static const char *const sql_calls_renew =
    "UPDATE strand.calls c SET lease_until = now() + make_interval(secs => $3::int / 1000.0)"
    " FROM unnest($1::uuid[], $2::bigint[]) AS h(id, epoch)"
    " WHERE c.id = h.id AND c.lease_epoch = h.epoch AND c.status = 'sent'"
    " AND c.lease_until > now() RETURNING c.id";
static const char *const sql_next_lease =
    "SELECT " ST_PG_SQL_MS_UNTIL("min(lease_until)")
    " FROM strand.calls WHERE status = 'sent'";
/* A result is recorded once, and only by the claim of the call's current epoch: a call
 * another dispatcher claimed again (after this one's lease passed), already answered,
 * or that was abandoned records nothing and signals nothing. */
static const char *const sql_call_result =
    "UPDATE strand.calls SET status = $2, result = $3::jsonb, claimed_by = NULL,"
    " lease_until = NULL, updated_at = now()"
    " WHERE id = $1::uuid AND status IN ('sent', 'pending') AND lease_epoch = $4::bigint"
    " RETURNING 1";

st_err_t st_call_add_tx(PGconn *conn, const st_call_new_t *call, st_errbuf_t *eb)
{
    char attempt[24], timeout[24];
    snprintf(attempt, sizeof attempt, "%lld", call->attempt);
    snprintf(timeout, sizeof timeout, "%lld", call->timeout_ms);
    const char *params[] = {call->id, call->instance_id, call->waiting_token, call->transport,
                            call->request_json, attempt, call->idempotency_key, timeout};
    st_err_t err = st_pg_exec(conn, sql_call_insert, 8, params, NULL, eb);
    if (err == ST_OK)
        err = st_pg_exec(conn, "NOTIFY " ST_CALLS_CHANNEL, 0, NULL, NULL, eb);
    return err;
}

/* A copy of column `col` of row `row`, or NULL when the result has no such column. */
static char *column_dup(PGresult *res, int row, int col)
{
    if (col >= PQnfields(res))
        return NULL;
    char *s = strdup(PQgetvalue(res, row, col));
    if (s == NULL)
        abort();   /* as the rest of the services: no memory is not survivable */
    return s;
}

void st_call_list_free(st_call_row_t *rows, int n)
{
    for (int i = 0; rows != NULL && i < n; i++) {
        free(rows[i].waiting_token);
        free(rows[i].transport);
        free(rows[i].request_json);
        free(rows[i].idempotency_key);
        free(rows[i].claimed_by);
    }
    free(rows);
}

st_err_t st_call_claim(PGconn *conn, int limit, const char *node_id, int lease_ms,
                       st_call_row_t **out, int *n, st_errbuf_t *eb)
{
    char limit_text[16], lease_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    snprintf(lease_text, sizeof lease_text, "%d", lease_ms);
    const char *params[] = {limit_text, node_id, lease_text};
    PGresult *res = NULL;
    *out = NULL;
    *n = 0;
    st_err_t err = st_pg_exec(conn, sql_calls_claim, 3, params, &res, eb);
    if (err != ST_OK)
        return err;
    int rows = PQntuples(res);
    st_call_row_t *list = rows > 0 ? calloc((size_t)rows, sizeof *list) : NULL;
    if (rows > 0 && list == NULL)
        abort();
    for (int i = 0; i < rows; i++) {
        st_call_row_t *c = &list[i];
        snprintf(c->id, sizeof c->id, "%s", PQgetvalue(res, i, 0));
        snprintf(c->instance_id, sizeof c->instance_id, "%s", PQgetvalue(res, i, 1));
        c->waiting_token = column_dup(res, i, 2);
        c->transport = column_dup(res, i, 3);
        c->request_json = column_dup(res, i, 4);
        c->attempt = atoi(PQgetvalue(res, i, 5));
        c->idempotency_key = column_dup(res, i, 6);
        c->timeout_ms = atol(PQgetvalue(res, i, 7));
        c->abandoned = strcmp(PQgetvalue(res, i, 8), "abandoned") == 0;
        c->lease_epoch = atoll(PQgetvalue(res, i, 9));
    }
    PQclear(res);
    *out = list;
    *n = rows;
    return ST_OK;
}

st_err_t st_call_recover_lapsed(PGconn *conn, st_call_row_t **out, int *n, st_errbuf_t *eb)
{
    PGresult *res = NULL;
    *out = NULL;
    *n = 0;
    st_err_t err = st_pg_exec(conn, sql_calls_recover, 0, NULL, &res, eb);
    if (err != ST_OK)
        return err;
    int rows = PQntuples(res);
    st_call_row_t *list = rows > 0 ? calloc((size_t)rows, sizeof *list) : NULL;
    if (rows > 0 && list == NULL)
        abort();
    for (int i = 0; i < rows; i++) {
        snprintf(list[i].id, sizeof list[i].id, "%s", PQgetvalue(res, i, 0));
        snprintf(list[i].instance_id, sizeof list[i].instance_id, "%s", PQgetvalue(res, i, 1));
        list[i].claimed_by = column_dup(res, i, 2);
    }
    PQclear(res);
    *out = list;
    *n = rows;
    return ST_OK;
}

st_err_t st_call_renew_leases(PGconn *conn, const char *const *ids,
                              const long long *epochs, size_t n, int lease_ms,
                              int *renewed, st_errbuf_t *eb)
{
    for (size_t i = 0; i < n; i++)
        renewed[i] = 0;
    if (n == 0)
        return ST_OK;
    char *text = malloc(n * 37 + 3);
    char *epoch_text = malloc(n * 21 + 3);
    if (text == NULL || epoch_text == NULL) {
        free(text);
        free(epoch_text);
        return st_err_set(eb, ST_ERR_NOMEM, "could not list call ids");
    }
    size_t len = 0, elen = 0;
    text[len++] = '{';
    epoch_text[elen++] = '{';
    for (size_t i = 0; i < n; i++) {
        memcpy(text + len, ids[i], 36);
        len += 36;
        text[len++] = ',';
        elen += (size_t)snprintf(epoch_text + elen, 22, "%lld,", epochs[i]);
    }
    text[len - 1] = '}';
    text[len] = '\0';
    epoch_text[elen - 1] = '}';
    epoch_text[elen] = '\0';
    char lease_text[16];
    snprintf(lease_text, sizeof lease_text, "%d", lease_ms);
    const char *params[] = {text, epoch_text, lease_text};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_calls_renew, 3, params, &res, eb);
    for (int r = 0; err == ST_OK && r < PQntuples(res); r++)
        for (size_t i = 0; i < n; i++)
            if (strcmp(PQgetvalue(res, r, 0), ids[i]) == 0)
                renewed[i] = 1;
    PQclear(res);
    free(text);
    free(epoch_text);
    return err;
}

st_err_t st_call_next_lease_ms(PGconn *conn, long long *ms, int *has, st_errbuf_t *eb)
{
    PGresult *res = NULL;
    *has = 0;
    st_err_t err = st_pg_exec(conn, sql_next_lease, 0, NULL, &res, eb);
    if (err == ST_OK && !PQgetisnull(res, 0, 0)) {
        *ms = atoll(PQgetvalue(res, 0, 0));
        *has = 1;
    }
    PQclear(res);
    return err;
}

st_err_t st_call_record_result_tx(PGconn *conn, const char *id, long long lease_epoch,
                                  int succeeded, const char *result_json, int *recorded,
                                  st_errbuf_t *eb)
{
    char epoch[24];
    snprintf(epoch, sizeof epoch, "%lld", lease_epoch);
    const char *params[] = {id, succeeded ? "succeeded" : "failed", result_json, epoch};
    PGresult *res = NULL;
    *recorded = 0;
    st_err_t err = st_pg_exec(conn, sql_call_result, 4, params, &res, eb);
    if (err == ST_OK)
        *recorded = PQntuples(res) > 0;
    PQclear(res);
    return err;
}
