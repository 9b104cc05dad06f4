/* batch_runner.c - bulk operations worked in chunks (see batch_runner.h). */
#include "batch_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/audit.h"
#include "strand/batch.h"
#include "strand/crash_point.h"
#include "strand/due_loop.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/pg.h"
#include "strand/signal.h"

#define DEFAULT_CHUNK 100
#define MAX_CHUNK 1000
/* While jobs run whose items other replicas hold: how often to look again. */
#define RECHECK_MS 1000

struct st_batch_runner {
    st_due_loop_t *loop;
    int chunk;
    int test_delay_ms;   /* STRAND_TEST_BATCH_CHUNK_DELAY_MS (tests only; see work_chunk()) */
    st_metric_t *m_done, *m_failed, *m_chunk_seconds, *m_running;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int ended(const char *status)
{
    return strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0 ||
           strcmp(status, "cancelled") == 0 || strcmp(status, "terminated") == 0;
}

/* Whether `action` applies to the item's instance as it stands (read under its lock):
 * NULL if it does, else the failure code, with its message in *why. The executor checks
 * again when it applies the signal (expected_version, or the instance having ended). */
static const char *refusal(const char *action, const st_batch_item_t *item, const char **why)
{
    if (!item->found) {
        *why = "the instance no longer exists";
        return "instance_not_found";
    }
    if (strcmp(action, "retry") == 0) {
        if (strcmp(item->status, "failed") == 0 ||
            strcmp(item->last_error_code, "wakeup_dead_lettered") == 0)
            return NULL;
        *why = "retry applies to a failed instance or one whose last wake-up was dead-lettered";
        return "not_applicable";
    }
    if (ended(item->status)) {
        *why = "the instance has already ended";
        return "instance_ended";
    }
    if (strcmp(action, "pause") == 0 && strcmp(item->status, "paused") == 0) {
        *why = "the instance is already paused";
        return "not_applicable";
    }
    if (strcmp(action, "resume") == 0 && strcmp(item->status, "paused") != 0) {
        *why = "resume applies to a paused instance";
        return "not_applicable";
    }
    return NULL;
}

/* The signal an applicable item gets; its id is the item's deterministic one. */
static void build_signal(const st_batch_chunk_t *c, const st_batch_item_t *item, st_signal_t *sig)
{
    const char *a = c->action;
    st_signal_type_t type = strcmp(a, "cancel") == 0      ? ST_SIGNAL_CANCEL
                            : strcmp(a, "terminate") == 0 ? ST_SIGNAL_TERMINATE
                            : strcmp(a, "signal") == 0    ? ST_SIGNAL_EXTERNAL
                            : strcmp(a, "retry") == 0     ? ST_SIGNAL_REPAIR
                            : strcmp(a, "pause") == 0     ? ST_SIGNAL_PAUSE
                                                          : ST_SIGNAL_RESUME;
    /* the operator verbs act on the version read under the lock; the rest on any */
    int versioned = type == ST_SIGNAL_REPAIR || type == ST_SIGNAL_PAUSE || type == ST_SIGNAL_RESUME;
    st_signal_init(sig, type, item->instance_id, versioned ? item->state_version : -1);
    snprintf(sig->signal_id, sizeof sig->signal_id, "%s", item->signal_id);
    const json_t *reason = json_object_get(c->args, "reason");
    if (type == ST_SIGNAL_EXTERNAL) {
        snprintf(sig->name, sizeof sig->name, "%s",
                 json_string_value(json_object_get(c->args, "name")) ?: "");
        const json_t *payload = json_object_get(c->args, "payload");
        sig->payload = json_is_object(payload) ? json_deep_copy(payload) : json_object();
        return;
    }
    sig->payload = json_pack("{s:s, s:s}", "actor", c->created_by, "batch_id", c->job_id);
    if (type == ST_SIGNAL_REPAIR)
        json_object_set_new(sig->payload, "verb", json_string("retry"));
    if (json_is_string(reason))
        json_object_set(sig->payload, "reason", (json_t *)reason);
}

/* Enqueues the item's signal and its audit row ("requested", actor = the job's creator),
 * and marks it done; all in the chunk's transaction. */
static st_err_t apply_tx(PGconn *conn, const st_batch_chunk_t *c, const st_batch_item_t *item,
                         st_errbuf_t *eb)
{
    st_signal_t sig;
    build_signal(c, item, &sig);
    st_err_t err = st_signal_enqueue_tx(conn, &sig, eb);
    if (err == ST_OK) {
        char target[64];
        snprintf(target, sizeof target, "batch:%s", c->job_id);
        json_t *before = json_pack("{s:s, s:I}", "status", item->status, "state_version",
                                   (json_int_t)item->state_version);
        json_t *detail = json_pack("{s:s, s:s}", "batch_id", c->job_id, "signal_id", sig.signal_id);
        const json_t *reason = json_object_get(c->args, "reason");
        if (json_is_string(reason))
            json_object_set(detail, "reason", (json_t *)reason);
        if (sig.name[0])
            json_object_set_new(detail, "name", json_string(sig.name));
        st_audit_entry_t entry = {c->created_by, c->action, "requested", item->instance_id,
                                  target, before, NULL, detail};
        err = st_audit_add_tx(conn, &entry, eb);
        json_decref(before);
        json_decref(detail);
    }
    if (err == ST_OK)
        err = st_batch_item_done_tx(conn, c->job_id, item->seq, sig.signal_id, eb);
    st_signal_close(&sig);
    return err;
}

/* The loop's `process`: one chunk in one transaction. Returns the number of items
 * worked (the chunk size again after a chunk of a job cancelled meanwhile: look again
 * at once), 0 when there was nothing to claim, -1 on a database error (the chunk is
 * rolled back and stays pending). */
static int work_chunk(PGconn *conn, void *ctx)
{
    st_batch_runner_t *r = ctx;
    st_errbuf_t eb;
    st_batch_chunk_t c = {0};
    double started = now_s();
    int done = 0, failed = 0;
    char status[24] = "";
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_batch_claim_tx(conn, r->chunk, &c, &eb);
    if (err == ST_OK && c.nitems == 0) {
        st_pg_rollback(conn);
        return 0;
    }
    for (int i = 0; err == ST_OK && i < c.nitems; i++) {
        const char *why = NULL;
        const char *code = refusal(c.action, &c.items[i], &why);
        if (code == NULL) {
            err = apply_tx(conn, &c, &c.items[i], &eb);
            done++;
        } else {
            err = st_batch_item_failed_tx(conn, c.job_id, c.items[i].seq, code, why, &eb);
            failed++;
        }
        if (err == ST_OK && i == c.nitems / 2)   /* tests: half applied, uncommitted */
            ST_CRASH_POINT("batch.mid_chunk");
    }
    /* Tests only: hold the chunk's transaction open, its signals enqueued and not yet
     * committed, so that a test's kill -9 lands inside it (test_bulk). */
    if (err == ST_OK && r->test_delay_ms > 0) {
        char delay[16];
        snprintf(delay, sizeof delay, "%d", r->test_delay_ms);
        const char *params[] = {delay};
        err = st_pg_exec(conn, "SELECT pg_sleep($1::int / 1000.0) /* batch chunk test delay */", 1,
                         params, NULL, &eb);
    }
    if (err == ST_OK)
        err = st_batch_progress_tx(conn, c.job_id, done, failed, status, sizeof status, &eb);
    if (err == ST_OK && status[0] == '\0') {
        /* cancelled while we worked: nothing of this chunk happens */
        st_pg_rollback(conn);
        int n = c.nitems;
        st_batch_chunk_close(&c);
        return n < r->chunk ? r->chunk : n;
    }
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_log_warn("could not work a batch chunk", "batch=%s: %s", c.job_id, eb.msg);
        st_batch_chunk_close(&c);
        return -1;
    }
    st_metric_add(r->m_done, done);
    st_metric_add(r->m_failed, failed);
    st_metric_observe(r->m_chunk_seconds, now_s() - started);
    if (strcmp(status, "running") != 0)
        st_log_info("batch ended", "batch=%s status=%s", c.job_id, status);
    int n = c.nitems;
    st_batch_chunk_close(&c);
    return n;
}

/* Sleep until a NOTIFY when no job runs; while one does (its items held by another
 * replica, or its last chunk in flight there), look again every RECHECK_MS. */
static long long next_wait_ms(PGconn *conn, void *ctx)
{
    st_batch_runner_t *r = ctx;
    long long running = st_batch_running_count(conn);
    if (running >= 0)
        st_metric_set(r->m_running, (double)running);
    return running > 0 ? RECHECK_MS : -1;
}

st_err_t st_batch_runner_start(st_service_t *svc, st_batch_runner_t **out, st_errbuf_t *eb)
{
    st_batch_runner_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the batch loop");
    const char *chunk = getenv("STRAND_BATCH_CHUNK");
    r->chunk = chunk != NULL ? atoi(chunk) : DEFAULT_CHUNK;
    if (r->chunk < 1 || r->chunk > MAX_CHUNK) {
        free(r);
        return st_err_set(eb, ST_ERR_CONFIG, "STRAND_BATCH_CHUNK must be an integer from 1 to %d",
                          MAX_CHUNK);
    }
    const char *delay = getenv("STRAND_TEST_BATCH_CHUNK_DELAY_MS");
    r->test_delay_ms = delay != NULL ? atoi(delay) : 0;
    if (r->test_delay_ms > 5000)
        r->test_delay_ms = 5000;
    r->m_done = st_metrics_counter("strand_batch_items_total",
                                   "Batch items worked: done = action enqueued, failed = did not apply",
                                   "outcome=\"done\"");
    r->m_failed = st_metrics_counter("strand_batch_items_total",
                                     "Batch items worked: done = action enqueued, failed = did not apply",
                                     "outcome=\"failed\"");
    r->m_chunk_seconds = st_metrics_histogram("strand_batch_chunk_duration_seconds",
                                              "One batch chunk: claim, enqueue, commit", NULL);
    r->m_running = st_metrics_gauge("strand_batches_running",
                                    "Batch jobs running (sampled when the batch loop sleeps)", NULL);
    st_due_loop_config_t cfg = {"scheduler-batches", ST_BATCH_CHANNEL, r->chunk, work_chunk,
                                next_wait_ms, r};
    st_err_t err = st_due_loop_start(svc, &cfg, &r->loop, eb);
    if (err != ST_OK) {
        free(r);
        return err;
    }
    *out = r;
    return ST_OK;
}

void st_batch_runner_stop(st_batch_runner_t *r)
{
    if (r == NULL)
        return;
    st_due_loop_stop(r->loop);
    free(r);
}
