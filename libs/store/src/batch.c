/* batch.c - the owner of strand.batch_jobs and strand.batch_items (see batch.h). */
#include "strand/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/pg.h"

static const char *const sql_job_insert =
    "INSERT INTO strand.batch_jobs (id, action, filter, args, status, created_by)"
    " VALUES ($1::uuid, $2, $3::jsonb, $4::jsonb, 'running', $5)";
/* The selection, frozen: at most $9 rows, numbered in the instances' created order. */
static const char *const sql_items_freeze =
    "INSERT INTO strand.batch_items (job_id, seq, instance_id)"
    " SELECT $1::uuid, row_number() OVER (ORDER BY s.created_at, s.id), s.id FROM"
    " (SELECT i.id, i.created_at FROM strand.instances i"
    "   JOIN strand.runtime_states rs ON rs.instance_id = i.id"
    "   WHERE ($2::text IS NULL OR i.definition_name = $2)"
    "   AND ($3::int IS NULL OR i.definition_version = $3::int)"
    "   AND ($4::text IS NULL OR i.status = $4)"
    "   AND ($5::text IS NULL OR i.business_ref = $5)"
    "   AND ($6::timestamptz IS NULL OR i.created_at >= $6::timestamptz)"
    "   AND ($7::timestamptz IS NULL OR i.created_at < $7::timestamptz)"
    "   AND ($8::text IS NULL OR rs.waiting_kind = $8)"
    "   ORDER BY i.created_at, i.id LIMIT $9::bigint) s";
static const char *const sql_job_total =
    "UPDATE strand.batch_jobs SET total = $2::int,"
    " status = CASE WHEN $2::int = 0 THEN 'completed' ELSE status END,"
    " ended_at = CASE WHEN $2::int = 0 THEN now() END WHERE id = $1::uuid";
static const char *const sql_notify = "SELECT pg_notify('" ST_BATCH_CHANNEL "', $1)";

st_err_t st_batch_create_tx(PGconn *conn, const char *id, const char *action,
                            const json_t *filter_doc, const st_batch_filter_t *filter,
                            const json_t *args, const char *created_by, long long max_items,
                            long long *total, st_errbuf_t *eb)
{
    *total = 0;
    char *filter_text = json_dumps(filter_doc, JSON_COMPACT);
    char *args_text = args ? json_dumps(args, JSON_COMPACT) : strdup("{}");
    if (filter_text == NULL || args_text == NULL) {
        free(filter_text);
        free(args_text);
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode the batch job");
    }
    const char *job_params[] = {id, action, filter_text, args_text, created_by};
    st_err_t err = st_pg_exec(conn, sql_job_insert, 5, job_params, NULL, eb);
    free(filter_text);
    free(args_text);
    if (err != ST_OK)
        return err;
    char limit[24];
    snprintf(limit, sizeof limit, "%lld", max_items + 1);
    const char *item_params[] = {id, filter->definition, filter->version, filter->status,
                                 filter->business_ref, filter->created_after,
                                 filter->created_before, filter->waiting_kind, limit};
    PGresult *res = NULL;
    if ((err = st_pg_exec(conn, sql_items_freeze, 9, item_params, &res, eb)) != ST_OK)
        return err;
    *total = atoll(PQcmdTuples(res));
    PQclear(res);
    if (*total > max_items)
        return st_err_set(eb, ST_ERR_LIMIT,
                          "the filter selects more than %lld instances; narrow it", max_items);
    char total_text[24];
    snprintf(total_text, sizeof total_text, "%lld", *total);
    const char *total_params[] = {id, total_text};
    const char *notify_params[] = {id};
    if ((err = st_pg_exec(conn, sql_job_total, 2, total_params, NULL, eb)) != ST_OK)
        return err;
    return *total > 0 ? st_pg_exec(conn, sql_notify, 1, notify_params, NULL, eb) : ST_OK;
}

/* Arbitrary constant: the transaction advisory lock that serialises job creation
 * (relay.c holds 7306532, the migrations 7306531). */
#define BATCH_CREATE_LOCK_KEY "7306533"

st_err_t st_batch_count_running_tx(PGconn *conn, const char *created_by, long long *all,
                                   long long *mine, st_errbuf_t *eb)
{
    static const char *const sql_lock = "SELECT pg_advisory_xact_lock(" BATCH_CREATE_LOCK_KEY ")";
    /* batch_jobs_running: a partial index over the running jobs only */
    static const char *const sql_count =
        "SELECT count(*), count(*) FILTER (WHERE created_by = $1) FROM strand.batch_jobs"
        " WHERE status = 'running'";
    *all = *mine = 0;
    st_err_t err = st_pg_exec(conn, sql_lock, 0, NULL, NULL, eb);
    if (err != ST_OK)
        return err;
    const char *params[] = {created_by};
    PGresult *res = NULL;
    if ((err = st_pg_exec(conn, sql_count, 1, params, &res, eb)) != ST_OK)
        return err;
    *all = atoll(PQgetvalue(res, 0, 0));
    *mine = atoll(PQgetvalue(res, 0, 1));
    PQclear(res);
    return ST_OK;
}

st_err_t st_batch_cancel_tx(PGconn *conn, const char *id, char *status, size_t len,
                            int *changed, st_errbuf_t *eb)
{
    static const char *const sql_cancel =
        "WITH u AS (UPDATE strand.batch_jobs SET status = 'cancelled', updated_at = now(),"
        "   ended_at = now() WHERE id = $1::uuid AND status = 'running' RETURNING 1)"
        " SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN 'cancelled'"
        "   ELSE (SELECT status FROM strand.batch_jobs WHERE id = $1::uuid) END,"
        " (SELECT count(*) FROM u)";
    const char *params[] = {id};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_cancel, 1, params, &res, eb);
    if (err != ST_OK)
        return err;
    snprintf(status, len, "%s", PQgetisnull(res, 0, 0) ? "" : PQgetvalue(res, 0, 0));
    *changed = strcmp(PQgetvalue(res, 0, 1), "1") == 0;
    PQclear(res);
    return ST_OK;
}

/* The oldest running jobs; a claim tries them in order. */
static const char *const sql_running_jobs =
    "SELECT id, action, args::text, created_by FROM strand.batch_jobs WHERE status = 'running'"
    " ORDER BY created_at, id LIMIT 20";
static const char *const sql_items_claim =
    "SELECT seq, instance_id, md5(job_id::text || '/' || instance_id::text)::uuid"
    " FROM strand.batch_items WHERE job_id = $1::uuid AND state = 'pending'"
    " ORDER BY seq LIMIT $2::int FOR UPDATE SKIP LOCKED";
static const char *const sql_states_lock =
    "SELECT rs.instance_id, i.status, rs.state_version, coalesce(rs.last_error_code, '')"
    " FROM strand.runtime_states rs JOIN strand.instances i ON i.id = rs.instance_id"
    " WHERE rs.instance_id = ANY($1::uuid[]) ORDER BY rs.instance_id FOR UPDATE OF rs";

static int item_order(const void *a, const void *b)
{
    return strcmp(((const st_batch_item_t *)a)->instance_id,
                  ((const st_batch_item_t *)b)->instance_id);
}

/* Reads the claimed items' instances under their row locks into `chunk`. */
static st_err_t lock_states_tx(PGconn *conn, st_batch_chunk_t *chunk, st_errbuf_t *eb)
{
    size_t cap = (size_t)chunk->nitems * 38 + 3, used = 0;
    char *ids = malloc(cap);
    if (ids == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not list a chunk's instances");
    ids[used++] = '{';
    for (int i = 0; i < chunk->nitems; i++)
        used += (size_t)snprintf(ids + used, cap - used, "%s%s", i ? "," : "",
                                 chunk->items[i].instance_id);
    snprintf(ids + used, cap - used, "}");
    const char *params[] = {ids};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_states_lock, 1, params, &res, eb);
    free(ids);
    if (err != ST_OK)
        return err;
    /* Both lists are in instance id order (uuid order is that of their text). */
    int n = PQntuples(res), r = 0;
    for (int i = 0; i < chunk->nitems; i++) {
        st_batch_item_t *item = &chunk->items[i];
        while (r < n && strcmp(PQgetvalue(res, r, 0), item->instance_id) < 0)
            r++;
        if (r < n && strcmp(PQgetvalue(res, r, 0), item->instance_id) == 0) {
            item->found = 1;
            snprintf(item->status, sizeof item->status, "%s", PQgetvalue(res, r, 1));
            item->state_version = atoll(PQgetvalue(res, r, 2));
            snprintf(item->last_error_code, sizeof item->last_error_code, "%s",
                     PQgetvalue(res, r, 3));
        }
    }
    PQclear(res);
    return ST_OK;
}

st_err_t st_batch_claim_tx(PGconn *conn, int limit, st_batch_chunk_t *out, st_errbuf_t *eb)
{
    memset(out, 0, sizeof *out);
    PGresult *jobs = NULL;
    st_err_t err = st_pg_exec(conn, sql_running_jobs, 0, NULL, &jobs, eb);
    if (err != ST_OK)
        return err;
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    for (int j = 0; j < PQntuples(jobs) && err == ST_OK && out->nitems == 0; j++) {
        const char *params[] = {PQgetvalue(jobs, j, 0), limit_text};
        PGresult *items = NULL;
        if ((err = st_pg_exec(conn, sql_items_claim, 2, params, &items, eb)) != ST_OK)
            break;
        int n = PQntuples(items);
        if (n > 0) {
            out->items = calloc((size_t)n, sizeof *out->items);
            if (out->items == NULL) {
                PQclear(items);
                err = st_err_set(eb, ST_ERR_NOMEM, "could not hold a chunk");
                break;
            }
            snprintf(out->job_id, sizeof out->job_id, "%s", PQgetvalue(jobs, j, 0));
            snprintf(out->action, sizeof out->action, "%s", PQgetvalue(jobs, j, 1));
            snprintf(out->created_by, sizeof out->created_by, "%s", PQgetvalue(jobs, j, 3));
            json_error_t jerr;
            out->args = json_loads(PQgetvalue(jobs, j, 2), 0, &jerr);
            if (!json_is_object(out->args)) {
                json_decref(out->args);
                out->args = json_object();
            }
            for (int i = 0; i < n; i++) {
                out->items[i].seq = atoi(PQgetvalue(items, i, 0));
                snprintf(out->items[i].instance_id, sizeof out->items[i].instance_id, "%s",
                         PQgetvalue(items, i, 1));
                snprintf(out->items[i].signal_id, sizeof out->items[i].signal_id, "%s",
                         PQgetvalue(items, i, 2));
            }
            out->nitems = n;
            qsort(out->items, (size_t)n, sizeof *out->items, item_order);
            err = lock_states_tx(conn, out, eb);
        }
        PQclear(items);
    }
    PQclear(jobs);
    if (err != ST_OK)
        st_batch_chunk_close(out);
    return err;
}

void st_batch_chunk_close(st_batch_chunk_t *chunk)
{
    json_decref(chunk->args);
    free(chunk->items);
    memset(chunk, 0, sizeof *chunk);
}

st_err_t st_batch_item_done_tx(PGconn *conn, const char *job_id, int seq, const char *signal_id,
                               st_errbuf_t *eb)
{
    static const char *const sql_done =
        "UPDATE strand.batch_items SET state = 'done', signal_id = $3, worked_at = now()"
        " WHERE job_id = $1::uuid AND seq = $2::int AND state = 'pending'";
    char seq_text[16];
    snprintf(seq_text, sizeof seq_text, "%d", seq);
    const char *params[] = {job_id, seq_text, signal_id};
    return st_pg_queue_bin(conn, sql_done, 3, params, NULL, NULL, eb);
}

st_err_t st_batch_item_failed_tx(PGconn *conn, const char *job_id, int seq, const char *code,
                                 const char *message, st_errbuf_t *eb)
{
    static const char *const sql_failed =
        "UPDATE strand.batch_items SET state = 'failed', worked_at = now(),"
        " error = jsonb_build_object('code', $3::text, 'message', $4::text)"
        " WHERE job_id = $1::uuid AND seq = $2::int AND state = 'pending'";
    char seq_text[16];
    snprintf(seq_text, sizeof seq_text, "%d", seq);
    const char *params[] = {job_id, seq_text, code, message};
    return st_pg_queue_bin(conn, sql_failed, 4, params, NULL, NULL, eb);
}

st_err_t st_batch_progress_tx(PGconn *conn, const char *job_id, int done, int failed,
                              char *status, size_t len, st_errbuf_t *eb)
{
    /* Under the job's row lock, and re-evaluated on its newest version when another
     * worker's chunk committed first: the counters never lose an update. */
    static const char *const sql_progress =
        "UPDATE strand.batch_jobs SET done = done + $2::int, failed = failed + $3::int,"
        " updated_at = now(),"
        " status = CASE WHEN done + failed + $2::int + $3::int >= total"
        "   THEN CASE WHEN done + $2::int = 0 THEN 'failed' ELSE 'completed' END ELSE status END,"
        " ended_at = CASE WHEN done + failed + $2::int + $3::int >= total THEN now() END"
        " WHERE id = $1::uuid AND status = 'running' RETURNING status";
    char done_text[16], failed_text[16];
    snprintf(done_text, sizeof done_text, "%d", done);
    snprintf(failed_text, sizeof failed_text, "%d", failed);
    const char *params[] = {job_id, done_text, failed_text};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_progress, 3, params, &res, eb);
    if (err != ST_OK)
        return err;
    snprintf(status, len, "%s", PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    return ST_OK;
}

long long st_batch_running_count(PGconn *conn)
{
    static const char *const sql_running =
        "SELECT count(*) FROM strand.batch_jobs WHERE status = 'running'";
    st_errbuf_t eb;
    PGresult *res = NULL;
    long long n = -1;
    if (st_pg_exec(conn, sql_running, 0, NULL, &res, &eb) == ST_OK)
        n = atoll(PQgetvalue(res, 0, 0));
    PQclear(res);
    return n;
}
