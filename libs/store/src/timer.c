/* timer.c - durable timers: scheduling, firing, counting, purging (see timer.h). */
#include "strand/timer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/pg.h"

int st_timer_shard(const char *instance_id)
{
    uint32_t hash = 2166136261u;   /* FNV-1a */
    for (const char *p = instance_id; *p; p++)
        hash = (hash ^ (uint8_t)*p) * 16777619u;
    return (int)(hash % ST_TIMER_SHARDS);
}

st_err_t st_timer_schedule_tx(PGconn *conn, const char *instance_id, const char *waiting_token,
                              const char *kind, long long due_ms, const json_t *payload,
                              st_errbuf_t *eb)
{
    static const char *const sql_timer_insert =
        "INSERT INTO strand.timers (instance_id, waiting_token, kind, shard, due_at, payload)"
        " VALUES ($1::uuid, $2, $3, $4, to_timestamp($5::double precision / 1000.0), $6::jsonb)";
    char shard[16], due[24], note[64];
    int s = st_timer_shard(instance_id);
    snprintf(shard, sizeof shard, "%d", s);
    snprintf(due, sizeof due, "%lld", due_ms);
    char *payload_text = payload ? json_dumps(payload, JSON_COMPACT) : strdup("{}");
    const char *params[] = {instance_id, waiting_token, kind, shard, due, payload_text};
    st_err_t err = st_pg_exec(conn, sql_timer_insert, 6, params, NULL, eb);
    free(payload_text);
    if (err != ST_OK)
        return err;
    snprintf(note, sizeof note, "%d %lld", s, due_ms);
    const char *notify_params[] = {note};
    return st_pg_exec(conn, "SELECT pg_notify('" ST_TIMER_CHANNEL "', $1)", 1, notify_params, NULL, eb);
}

st_err_t st_timer_fire_due_tx(PGconn *conn, int limit,
                              st_err_t (*fire)(const st_timer_due_t *t, void *ctx,
                                               st_errbuf_t *eb),
                              void *ctx, int *n, st_errbuf_t *eb)
{
    static const char *const sql_timers_claim =
        "WITH due AS (SELECT id FROM strand.timers WHERE fired_at IS NULL"
        "   AND due_at <= statement_timestamp() ORDER BY due_at LIMIT $1::int"
        "   FOR UPDATE SKIP LOCKED)"
        " UPDATE strand.timers t SET fired_at = clock_timestamp() FROM due WHERE t.id = due.id"
        " RETURNING t.instance_id, t.waiting_token, t.kind,"
        " (extract(epoch FROM t.due_at) * 1000)::bigint, t.payload::text,"
        " extract(epoch FROM (clock_timestamp() - t.due_at))";
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *params[] = {limit_text};
    PGresult *rows = NULL;
    *n = 0;
    st_err_t err = st_pg_exec(conn, sql_timers_claim, 1, params, &rows, eb);
    if (err != ST_OK)
        return err;
    *n = PQntuples(rows);
    for (int i = 0; err == ST_OK && i < *n; i++) {
        st_timer_due_t t = {PQgetvalue(rows, i, 0), PQgetvalue(rows, i, 1), PQgetvalue(rows, i, 2),
                            atoll(PQgetvalue(rows, i, 3)), PQgetvalue(rows, i, 4),
                            atof(PQgetvalue(rows, i, 5))};
        err = fire(&t, ctx, eb);
    }
    PQclear(rows);
    return err;
}

long long st_timer_next_due_ms(PGconn *conn)
{
    static const char *const sql_next_due =
        "SELECT " ST_PG_SQL_MS_UNTIL("min(due_at)")
        " FROM strand.timers WHERE fired_at IS NULL";
    st_errbuf_t eb;
    PGresult *res = NULL;
    long long wait = -1;
    if (st_pg_exec(conn, sql_next_due, 0, NULL, &res, &eb) == ST_OK && !PQgetisnull(res, 0, 0)) {
        long long ms = atoll(PQgetvalue(res, 0, 0));
        wait = ms < 0 ? 0 : ms;
    }
    PQclear(res);
    return wait;
}

double st_timer_count_pending(PGconn *conn, double *per_shard, st_errbuf_t *eb)
{
    static const char *const sql_pending =
        "SELECT shard, count(*) FROM strand.timers WHERE fired_at IS NULL GROUP BY shard";
    PGresult *res = NULL;
    if (st_pg_exec(conn, sql_pending, 0, NULL, &res, eb) != ST_OK)
        return -1;
    double total = 0;
    for (int shard = 0; shard < ST_TIMER_SHARDS; shard++)
        per_shard[shard] = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        int shard = atoi(PQgetvalue(res, i, 0));
        double n = atof(PQgetvalue(res, i, 1));
        if (shard >= 0 && shard < ST_TIMER_SHARDS)
            per_shard[shard] = n;
        total += n;
    }
    PQclear(res);
    return total;
}

st_err_t st_timer_purge_fired(PGconn *conn, int retention_s, st_errbuf_t *eb)
{
    static const char *const sql_purge =
        "DELETE FROM strand.timers WHERE id IN (SELECT id FROM strand.timers"
        " WHERE fired_at < now() - make_interval(secs => $1) LIMIT 10000)";
    char secs[16];
    snprintf(secs, sizeof secs, "%d", retention_s);
    const char *params[] = {secs};
    return st_pg_exec(conn, sql_purge, 1, params, NULL, eb);
}
