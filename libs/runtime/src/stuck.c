/* stuck.c - stuck detection: the one query (see stuck.h). */
#include "strand/stuck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/pg.h"

const char *const st_stuck_reasons[ST_STUCK_NREASONS] = {
    "last_wakeup_failed", "no_pending_wakeup", "signal_without_deadline"};

/* THE stuck query. $1 the grace period in seconds, $2 one instance id or NULL (all).
 * Answers (id, definition_name, definition_version, status, reason, waiting_kind,
 * since, since_us, last_error_code) for every stuck instance. Each "way out" is a
 * NOT EXISTS the planner turns into an anti-join: one pass over the running and
 * waiting instances and one over each open set (tasks, pending timers, calls,
 * children, ACKs, buffered signals). Keep stuck.h's description in step with it. */
#define STUCK_SQL                                                                           \
    "WITH c AS (SELECT i.id, i.definition_name, i.definition_version, i.status,"           \
    "   rs.waiting_kind, rs.waiting_until, rs.last_error_code,"                             \
    "   coalesce(rs.last_executed_at, i.updated_at) AS moved_at,"                           \
    "   CASE WHEN rs.last_error_code = 'wakeup_dead_lettered' THEN true"                   \
    "     WHEN rs.last_error_code = 'wakeup_failed' THEN"                                   \
    "       coalesce((rs.last_error->>'at')::timestamptz, i.updated_at)"                    \
    "         < now() - make_interval(secs => $1::int)"                                     \
    "     ELSE false END AS failed,"                                                        \
    "   CASE WHEN rs.last_error_code LIKE 'wakeup%' THEN"                                   \
    "     coalesce((rs.last_error->>'at')::timestamptz, i.updated_at) END AS failed_at"     \
    "  FROM strand.instances i JOIN strand.runtime_states rs ON rs.instance_id = i.id"     \
    "  WHERE i.status IN ('pending', 'running', 'waiting')"                                 \
    "    AND ($2::uuid IS NULL OR i.id = $2::uuid)),"                                       \
    " s AS (SELECT c.*, CASE WHEN c.failed THEN 'last_wakeup_failed'"                       \
    "     WHEN c.waiting_kind = 'signal' THEN 'signal_without_deadline'"                    \
    "     ELSE 'no_pending_wakeup' END AS reason,"                                          \
    "   CASE WHEN c.failed THEN c.failed_at ELSE c.moved_at END AS since"                   \
    "  FROM c WHERE c.failed"                                                               \
    "   OR (c.status <> 'pending' AND c.moved_at < now() - make_interval(secs => $1::int)"  \
    "    AND c.waiting_until IS NULL AND c.waiting_kind IS DISTINCT FROM 'trigger'"         \
    "    AND NOT EXISTS (SELECT 1 FROM strand.tasks t WHERE t.instance_id = c.id"           \
    "      AND t.status IN ('open', 'assigned'))"                                           \
    "    AND NOT EXISTS (SELECT 1 FROM strand.timers tm WHERE tm.instance_id = c.id"        \
    "      AND tm.fired_at IS NULL)"                                                        \
    "    AND NOT EXISTS (SELECT 1 FROM strand.calls cl WHERE cl.instance_id = c.id"         \
    "      AND cl.status IN ('pending', 'sent'))"                                           \
    "    AND NOT EXISTS (SELECT 1 FROM strand.instances ch WHERE ch.parent_instance_id = c.id" \
    "      AND ch.status NOT IN ('completed', 'failed', 'cancelled', 'terminated'))"        \
    "    AND NOT EXISTS (SELECT 1 FROM strand.acks a JOIN strand.work_events w"             \
    "      USING (ack_guid) WHERE w.instance_id = c.id AND a.due_at IS NOT NULL)"           \
    "    AND NOT EXISTS (SELECT 1 FROM strand.signal_buffer b WHERE b.instance_id = c.id)))"

static const char *const sql_stuck_page =
    STUCK_SQL
    " SELECT id, definition_name, definition_version, status, reason, waiting_kind, since,"
    " (extract(epoch FROM since) * 1000000)::bigint, last_error_code FROM s"
    " WHERE ($3::text IS NULL OR reason = $3)"
    "   AND ($4::bigint IS NULL OR ((extract(epoch FROM since) * 1000000)::bigint, id)"
    "        > ($4::bigint, $5::uuid))"
    " ORDER BY (extract(epoch FROM since) * 1000000)::bigint, id LIMIT $6::int";

static const char *const sql_stuck_one =
    STUCK_SQL " SELECT reason, " ST_PG_SQL_RFC3339("since") " FROM s";

static const char *const sql_stuck_count =
    STUCK_SQL " SELECT reason, count(*) FROM s GROUP BY reason";

st_err_t st_stuck_page(PGconn *conn, int grace_s, const char *reason, const char *after_us,
                       const char *after_id, int limit, PGresult **res, st_errbuf_t *eb)
{
    char grace[16], lim[16];
    snprintf(grace, sizeof grace, "%d", grace_s);
    snprintf(lim, sizeof lim, "%d", limit);
    const char *params[] = {grace, NULL, reason, after_us, after_id, lim};
    return st_pg_exec(conn, sql_stuck_page, 6, params, res, eb);
}

/* The static name of `reason`, or NULL if it is none of them. */
static const char *reason_name(const char *reason)
{
    for (int i = 0; i < ST_STUCK_NREASONS; i++)
        if (strcmp(reason, st_stuck_reasons[i]) == 0)
            return st_stuck_reasons[i];
    return NULL;
}

st_err_t st_stuck_check(PGconn *conn, int grace_s, const char *id, int *found,
                        const char **reason, char *since, size_t since_len, st_errbuf_t *eb)
{
    char grace[16];
    snprintf(grace, sizeof grace, "%d", grace_s);
    const char *params[] = {grace, id};
    PGresult *res = NULL;
    *found = 0;
    st_err_t err = st_pg_exec(conn, sql_stuck_one, 2, params, &res, eb);
    if (err != ST_OK)
        return err;
    if (PQntuples(res) > 0 && (*reason = reason_name(PQgetvalue(res, 0, 0))) != NULL) {
        *found = 1;
        snprintf(since, since_len, "%s", PQgetvalue(res, 0, 1));
    }
    PQclear(res);
    return ST_OK;
}

st_err_t st_stuck_count(PGconn *conn, int grace_s, long long counts[ST_STUCK_NREASONS],
                        st_errbuf_t *eb)
{
    char grace[16];
    snprintf(grace, sizeof grace, "%d", grace_s);
    const char *params[] = {grace, NULL};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_stuck_count, 2, params, &res, eb);
    if (err != ST_OK)
        return err;
    for (int i = 0; i < ST_STUCK_NREASONS; i++)
        counts[i] = 0;
    for (int r = 0; r < PQntuples(res); r++)
        for (int i = 0; i < ST_STUCK_NREASONS; i++)
            if (strcmp(PQgetvalue(res, r, 0), st_stuck_reasons[i]) == 0)
                counts[i] = atoll(PQgetvalue(res, r, 1));
    PQclear(res);
    return ST_OK;
}
