/*
 * retention.c - the retention run (admin): purges instances that ended before a
 * cutoff, with everything kept for them (runtime state, tasks and task events,
 * history, calls, buffered signals, work events and ACKs by cascade; timers,
 * processed-signal records and start idempotency keys explicitly), dead letters
 * that were replayed or discarded before the cutoff, and notices older than the
 * cutoff or than STRAND_NOTICE_RETENTION_S, whichever is more recent, and batch jobs
 * that ended before the cutoff (with their items). Running and waiting instances,
 * running batches and open dead letters are never touched. One transaction per run,
 * at most `limit` instances, `limit` notices and `limit` batches; `more` says whether
 * another run has work left. A run that deletes (not a dry run) writes an audit row.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "strand/audit.h"
#include "strand/batch.h"
#include "strand/dedup.h"
#include "strand/instance_store.h"
#include "strand/notice.h"
#include "strand/pg.h"
#include "strand/request.h"
#include "strand/timer.h"

#define DEFAULT_LIMIT 10000
#define MAX_LIMIT 100000
#define MAX_AGE_S (100LL * 366 * 86400)

/* $1 cutoff age in seconds, $2 limit, $3 dry run, $4 the notice retention in seconds. */
static const char *const sql_retention_run =
    "WITH victims AS ("
    "  SELECT id FROM strand.instances"
    "  WHERE status IN ('completed', 'failed', 'cancelled', 'terminated')"
    "    AND ended_at < now() - make_interval(secs => $1::bigint)"
    "  ORDER BY ended_at LIMIT $2::int + 1),"
    " batch AS (SELECT id FROM victims LIMIT $2::int),"
    " del_timers AS (" ST_TIMER_PURGE_SQL("batch", "$3::boolean") "),"
    " del_processed AS (" ST_DEDUP_PURGE_SQL("batch", "$3::boolean") "),"
    " del_requests AS (" ST_REQUEST_PURGE_SQL("batch", "$3::boolean") "),"
    " del_instances AS (" ST_INSTANCE_PURGE_SQL("batch", "$3::boolean") "),"
    " letters AS (SELECT id FROM strand.dead_letters"
    "   WHERE status IN ('replayed', 'discarded')"
    "     AND created_at < now() - make_interval(secs => $1::bigint)),"
    " del_letters AS (" ST_DEAD_LETTER_PURGE_SQL("letters", "$3::boolean") "),"
    " aged AS (SELECT id FROM strand.notices WHERE at < now() - make_interval(secs =>"
    "   least($1::bigint, $4::bigint)) ORDER BY at LIMIT $2::int + 1),"
    " notice_batch AS (SELECT id FROM aged LIMIT $2::int),"
    " del_notices AS (" ST_NOTICE_PURGE_SQL("notice_batch", "$3::boolean") "),"
    " ended_jobs AS (SELECT id FROM strand.batch_jobs WHERE ended_at IS NOT NULL"
    "   AND ended_at < now() - make_interval(secs => $1::bigint) ORDER BY ended_at LIMIT $2::int + 1),"
    " job_batch AS (SELECT id FROM ended_jobs LIMIT $2::int),"
    " del_jobs AS (" ST_BATCH_PURGE_SQL("job_batch", "$3::boolean") ")"
    " SELECT (SELECT count(*) FROM batch),"
    " (SELECT count(*) FROM victims) > $2::int OR (SELECT count(*) FROM aged) > $2::int"
    "   OR (SELECT count(*) FROM ended_jobs) > $2::int,"
    " (SELECT count(*) FROM letters), (SELECT count(*) FROM del_timers),"
    " (SELECT count(*) FROM del_processed), (SELECT count(*) FROM del_requests),"
    " (SELECT count(*) FROM del_instances), (SELECT count(*) FROM del_letters),"
    " now() - make_interval(secs => $1::bigint), (SELECT count(*) FROM notice_batch),"
    " (SELECT count(*) FROM del_notices), (SELECT count(*) FROM job_batch),"
    " (SELECT count(*) FROM del_jobs)";

/* Reads a non-negative integer field; returns 0 and answers 400 if it is malformed. */
static int int_field(const json_t *args, const char *key, long long min, long long max,
                     long long *out, st_answer_t *answer)
{
    const json_t *v = json_object_get(args, key);
    if (v == NULL || json_is_null(v))
        return 1;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        char msg[120], field[64];
        snprintf(msg, sizeof msg, "%s must be an integer from %lld to %lld", key, min, max);
        snprintf(field, sizeof field, "/%s", key);
        st_answer_problem(answer, 400, "invalid_field", msg, field, NULL);
        return 0;
    }
    *out = json_integer_value(v);
    return 1;
}

/* POST /v1/retention/run {older_than_days | older_than_s, limit?, dry_run?} (admin). */
void st_cmd_retention_run(PGconn *conn, const st_principal_t *who, const char *unused_id,
                          const json_t *args, st_answer_t *out)
{
    if (!st_principal_has_role(who, "admin")) {
        st_answer_problem(out, 403, "forbidden", "the retention run needs the admin role", NULL,
                          json_pack("{s:s}", "required_role", "admin"));
        return;
    }
    long long days = -1, secs = -1, limit = DEFAULT_LIMIT;
    const json_t *dry = json_object_get(args, "dry_run");
    if (!int_field(args, "older_than_days", 1, MAX_AGE_S / 86400, &days, out) ||
        !int_field(args, "older_than_s", 0, MAX_AGE_S, &secs, out) ||
        !int_field(args, "limit", 1, MAX_LIMIT, &limit, out))
        return;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)args, key, v) {
        if (strcmp(key, "older_than_days") && strcmp(key, "older_than_s") && strcmp(key, "limit") &&
            strcmp(key, "dry_run")) {
            char msg[200], field[160];
            snprintf(msg, sizeof msg, "unknown field '%.100s' (older_than_days, older_than_s, limit, dry_run)", key);
            snprintf(field, sizeof field, "/%.100s", key);
            st_answer_problem(out, 400, "invalid_field", msg, field, NULL);
            return;
        }
    }
    if ((days < 0) == (secs < 0)) {
        st_answer_problem(out, 400, "invalid_field",
                          "give exactly one of older_than_days and older_than_s", "/older_than_days",
                          NULL);
        return;
    }
    if (dry != NULL && !json_is_boolean(dry)) {
        st_answer_problem(out, 400, "invalid_field", "dry_run must be true or false", "/dry_run", NULL);
        return;
    }
    char age[24], lim[24], notice_age[24];
    snprintf(age, sizeof age, "%lld", days >= 0 ? days * 86400 : secs);
    snprintf(lim, sizeof lim, "%lld", limit);
    snprintf(notice_age, sizeof notice_age, "%d", st_api_notice_retention_s);
    const char *params[] = {age, lim, json_is_true(dry) ? "true" : "false", notice_age};
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_retention_run, 4, params, &res, &eb);
    if (err == ST_OK && !json_is_true(dry)) {
        json_t *detail = json_pack(
            "{s:I, s:I, s:{s:I, s:I, s:I, s:I}}", "older_than_s", (json_int_t)atoll(age), "limit",
            (json_int_t)limit, "deleted", "instances", (json_int_t)atoll(PQgetvalue(res, 0, 6)),
            "dead_letters", (json_int_t)atoll(PQgetvalue(res, 0, 7)), "notices",
            (json_int_t)atoll(PQgetvalue(res, 0, 10)), "batches",
            (json_int_t)atoll(PQgetvalue(res, 0, 12)));
        st_audit_entry_t entry = {who->name, "retention_run", "applied", NULL, NULL, NULL, NULL,
                                  detail};
        err = st_audit_add_tx(conn, &entry, &eb);
        json_decref(detail);
    }
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        PQclear(res);
        st_answer_error(out, err, &eb);
        return;
    }
    json_t *body = json_pack(
        "{s:b, s:o, s:I, s:b, s:I, s:I, s:I}", "dry_run", json_is_true(dry), "cutoff",
        st_api_time_json(res, 0, 8), "instances", (json_int_t)atoll(PQgetvalue(res, 0, 0)),
        "more", strcmp(PQgetvalue(res, 0, 1), "t") == 0, "dead_letters",
        (json_int_t)atoll(PQgetvalue(res, 0, 2)), "notices",
        (json_int_t)atoll(PQgetvalue(res, 0, 9)), "batches",
        (json_int_t)atoll(PQgetvalue(res, 0, 11)));
    if (!json_is_true(dry))
        json_object_set_new(body, "deleted",
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "instances",
                                      (json_int_t)atoll(PQgetvalue(res, 0, 6)), "timers",
                                      (json_int_t)atoll(PQgetvalue(res, 0, 3)), "processed_signals",
                                      (json_int_t)atoll(PQgetvalue(res, 0, 4)), "requests",
                                      (json_int_t)atoll(PQgetvalue(res, 0, 5)), "dead_letters",
                                      (json_int_t)atoll(PQgetvalue(res, 0, 7)), "notices",
                                      (json_int_t)atoll(PQgetvalue(res, 0, 10)), "batches",
                                      (json_int_t)atoll(PQgetvalue(res, 0, 12))));
    PQclear(res);
    st_answer_set(out, 200, body);
}

void st_api_retention_register(st_api_t *api)
{
    st_api_route_command(api, "/v1/retention/run", st_cmd_retention_run);
}
