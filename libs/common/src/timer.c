/* timer.c - scheduling durable timers inside the caller's transaction (see timer.h). */
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
