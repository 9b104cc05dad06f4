/*
 * batch.h - the owner of strand.batch_jobs and strand.batch_items (migration 0025):
 * durable bulk operations over instances (issue 18, item 2).
 *
 * A job is created with its filter and action, and in the same transaction the ids of
 * every instance the filter selects are frozen as its items (st_batch_create_tx).
 * Workers claim pending items in chunks with FOR UPDATE SKIP LOCKED
 * (st_batch_claim_tx), and in the chunk's one transaction enqueue each item's signal,
 * mark it done or failed (st_batch_item_done_tx, st_batch_item_failed_tx) and add the
 * chunk to the job's counters (st_batch_progress_tx), so any number of workers share a
 * job, a worker killed mid-chunk leaves the chunk pending, and no item is applied
 * twice. Every function taking `conn` expects the caller's open transaction (_tx).
 * Reads for the API (list, get) stay near their handler (services/api/batches.c).
 */
#ifndef STRAND_BATCH_H
#define STRAND_BATCH_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>

#include "strand/err.h"

/* NOTIFY channel: a job was created; batch workers LISTEN on it. */
#define ST_BATCH_CHANNEL "strand_batches"

/* What a job selects. Every field is borrowed text; NULL: no condition. `version`
 * is a decimal, the times are timestamps PostgreSQL parses (already validated). */
typedef struct {
    const char *definition;
    const char *version;
    const char *status;
    const char *business_ref;
    const char *created_after;   /* created_at >= */
    const char *created_before;  /* created_at < */
    const char *waiting_kind;    /* runtime_states.waiting_kind */
} st_batch_filter_t;

/* Inserts job `id` (a UUID the caller made) with `action`, the request's `filter_doc`
 * and `args` (both stored as given; borrowed) and `created_by`, freezes the ids of the
 * instances `filter` selects as its items (ordered by created_at, id) and notifies
 * ST_BATCH_CHANNEL at commit. A job that selects nothing is created completed.
 * *total gets the number of items. Fails with ST_ERR_LIMIT, after inserting, when the
 * filter selects more than `max_items` (the caller rolls back). */
st_err_t st_batch_create_tx(PGconn *conn, const char *id, const char *action,
                            const json_t *filter_doc, const st_batch_filter_t *filter,
                            const json_t *args, const char *created_by, long long max_items,
                            long long *total, st_errbuf_t *eb);

/* The running-job bounds (STRAND_BATCH_MAX_RUNNING and its per-principal twin):
 * takes the transaction-scoped advisory lock that serialises job creation across API
 * replicas, then counts the running jobs: *all of them, *mine those `created_by`
 * created. Call it first in the creating transaction (before st_batch_create_tx), so
 * that two creations never both see room for one more: the lock is held until the
 * caller's transaction ends, and under READ COMMITTED the count, a statement after the
 * lock, sees every creation committed before it. */
st_err_t st_batch_count_running_tx(PGconn *conn, const char *created_by, long long *all,
                                   long long *mine, st_errbuf_t *eb);

/* Cancels job `id` if it is running: its pending items are never worked (a chunk in
 * flight when this commits is rolled back by its st_batch_progress_tx). `status` gets
 * the job's status afterwards ("cancelled", or the final status it had already), or
 * "" when there is no such job; *changed is 1 when this call cancelled it. */
st_err_t st_batch_cancel_tx(PGconn *conn, const char *id, char *status, size_t len,
                            int *changed, st_errbuf_t *eb);

/* One claimed item, with its instance as read under the runtime-state row lock. */
typedef struct {
    int seq;
    char instance_id[40];
    char signal_id[40];         /* deterministic: md5(job id '/' instance id) as a UUID */
    int found;                  /* 0: the instance no longer exists */
    char status[24];            /* the instance's status */
    long long state_version;
    char last_error_code[48];   /* runtime_states.last_error_code, or "" */
} st_batch_item_t;

/* A chunk of one job. Release with st_batch_chunk_close(). */
typedef struct {
    char job_id[40];
    char action[16];
    char created_by[128];
    json_t *args;               /* owned */
    int nitems;
    st_batch_item_t *items;     /* owned; ordered by instance id (the lock order) */
} st_batch_chunk_t;

/* Claims up to `limit` pending items of the oldest running job that has items no
 * other worker holds (FOR UPDATE SKIP LOCKED), and locks their instances' runtime
 * states (FOR UPDATE, in instance id order, so two workers never deadlock). The locks
 * last until the caller's transaction ends. out->nitems is 0 when there is nothing to
 * claim. */
st_err_t st_batch_claim_tx(PGconn *conn, int limit, st_batch_chunk_t *out, st_errbuf_t *eb);
void st_batch_chunk_close(st_batch_chunk_t *chunk);

/* Marks a claimed item done, naming the signal enqueued for it (queued: sent with the
 * transaction's next statement). */
st_err_t st_batch_item_done_tx(PGconn *conn, const char *job_id, int seq, const char *signal_id,
                               st_errbuf_t *eb);
/* Marks a claimed item failed with {code, message} (queued likewise). */
st_err_t st_batch_item_failed_tx(PGconn *conn, const char *job_id, int seq, const char *code,
                                 const char *message, st_errbuf_t *eb);

/* Adds a worked chunk to job `job_id`'s counters, and ends the job once every item was
 * worked: completed, or failed when no item applied. Only a running job is updated:
 * `status` gets its status afterwards, or "" when it is no longer running (cancelled
 * meanwhile: the caller rolls the chunk back). */
st_err_t st_batch_progress_tx(PGconn *conn, const char *job_id, int done, int failed,
                              char *status, size_t len, st_errbuf_t *eb);

/* Number of running jobs, or -1 on a database error. */
long long st_batch_running_count(PGconn *conn);

/* One CTE body for the retention run's one statement (api retention.c): deletes the
 * batch jobs whose ids the CTE `jobs` names (their items go by cascade), unless `dry`
 * (an SQL boolean) is true. Returns 1 per job. */
#define ST_BATCH_PURGE_SQL(jobs, dry)                                                       \
    "DELETE FROM strand.batch_jobs b USING " jobs " j WHERE NOT " dry                       \
    " AND b.id = j.id RETURNING 1"

#endif
