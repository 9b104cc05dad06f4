/* dispatcher.c - outbound HTTP calls after commit (see dispatcher.h). */
#include "dispatcher.h"

#include <curl/curl.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/due_loop.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/util.h"
#include "strand/worker_http.h"

#define CLAIM_BATCH 16
#define HOUSEKEEPING_EVERY_S 60

struct st_dispatcher {
    st_service_t *svc;
    st_due_loop_t *loop;       /* LISTEN strand_calls, reconnects, stop (libs/common) */
    time_t last_housekeeping;
    st_metric_t *m_calls_ok, *m_calls_failed, *m_duration;
};

/* Calls a crashed dispatcher left 'sent' go back to 'pending' once they are surely
 * over (their timeout plus a minute); the worker sees the same idempotency key. */
static const char *const sql_calls_recover =
    "UPDATE strand.calls SET status = 'pending', updated_at = now() WHERE status = 'sent'"
    " AND updated_at < now() - make_interval(secs => timeout_ms / 1000.0 + 60)";
/* The signal dedup window: older processed-signal ids are forgotten. A redelivery
 * older than the window is still caught by the version and waiting-token checks. */
static const char *const sql_dedup_purge =
    "DELETE FROM strand.processed_signals WHERE signal_id IN (SELECT signal_id"
    " FROM strand.processed_signals WHERE processed_at < now() - make_interval(secs => $1)"
    " LIMIT 10000)";
static const char *const sql_calls_claim =
    "UPDATE strand.calls SET status = 'sent', updated_at = now() WHERE id IN ("
    " SELECT id FROM strand.calls WHERE status = 'pending' ORDER BY created_at"
    " LIMIT 16 FOR UPDATE SKIP LOCKED)"   /* CLAIM_BATCH */
    " RETURNING id, instance_id, waiting_token, transport, request::text, attempt,"
    " idempotency_key, timeout_ms";
static const char *const sql_call_result =
    "UPDATE strand.calls SET status = $2, result = $3::jsonb, updated_at = now()"
    " WHERE id = $1::uuid AND status = 'sent'";

/* Performs one HTTP call; returns the result object for the CALL_RESULT payload. */
static json_t *perform_http(const char *request_text, const char *idempotency_key,
                            long timeout_ms, const char *instance_id, int attempt)
{
    json_error_t jerr;
    json_t *request = json_loads(request_text, 0, &jerr);
    const char *url = json_string_value(json_object_get(request, "url"));
    if (url == NULL || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        json_decref(request);
        return json_pack("{s:b, s:s}", "ok", 0, "error", "the call has no http(s) url");
    }
    const char *method = json_string_value(json_object_get(request, "method"));
    json_t *body_json = json_object_get(request, "body");
    /* The process worker protocol (docs/processes.md) also names the instance, the
     * attempt and the key in the body. */
    const char *protocol = json_string_value(json_object_get(request, "protocol"));
    if (protocol != NULL && strcmp(protocol, "strand.process/1") == 0 && json_is_object(body_json)) {
        json_object_set_new(body_json, "instance_id", json_string(instance_id));
        json_object_set_new(body_json, "attempt", json_integer(attempt));
        json_object_set_new(body_json, "idempotency_key", json_string(idempotency_key));
    }
    char *body = body_json ? json_dumps(body_json, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    st_worker_reply_t reply;
    json_t *result;
    if (st_worker_call(method, url, body, idempotency_key, instance_id,
                       json_object_get(request, "headers"), timeout_ms, &reply) != ST_OK) {
        result = json_pack("{s:b, s:s, s:b}", "ok", 0, "error", reply.error, "timeout",
                           reply.timed_out);
    } else {
        json_t *parsed = reply.body ? json_loads(reply.body, JSON_DECODE_ANY, &jerr) : NULL;
        if (parsed == NULL)
            parsed = reply.body ? json_string(reply.body) : json_null();
        if (parsed == NULL)   /* not UTF-8 */
            parsed = json_null();
        result = json_pack("{s:b, s:i, s:o}", "ok", reply.status >= 200 && reply.status < 300,
                           "status", (int)reply.status, "body", parsed);
    }
    st_worker_reply_close(&reply);
    free(body);
    json_decref(request);
    return result;
}

/* Records the result and enqueues CALL_RESULT in one transaction. */
static st_err_t report_tx(PGconn *conn, PGresult *calls, int row, json_t *result,
                          st_errbuf_t *eb)
{
    int ok = json_is_true(json_object_get(result, "ok"));
    char *result_text = json_dumps(result, JSON_COMPACT);
    const char *params[] = {PQgetvalue(calls, row, 0), ok ? "succeeded" : "failed", result_text};
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_CALL_RESULT, PQgetvalue(calls, row, 1), -1);
    snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", PQgetvalue(calls, row, 2));
    sig.payload = json_pack("{s:s, s:i, s:O}", "call_id", PQgetvalue(calls, row, 0), "attempt",
                            atoi(PQgetvalue(calls, row, 5)), "result", result);
    st_err_t err = st_pg_begin(conn, eb);
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_call_result, 3, params, NULL, eb);
    if (err == ST_OK)
        err = st_signal_enqueue_tx(conn, &sig, eb);
    if (err == ST_OK)
        err = st_pg_commit(conn, eb);
    if (err != ST_OK)
        st_pg_rollback(conn);
    st_signal_close(&sig);
    free(result_text);
    return err;
}

/* Recovery of abandoned calls and the dedup purge: bounded, indexed, once a minute. */
static int housekeeping(st_dispatcher_t *d, PGconn *conn)
{
    if (time(NULL) - d->last_housekeeping < HOUSEKEEPING_EVERY_S)
        return 1;
    st_errbuf_t eb;
    char secs[16];
    snprintf(secs, sizeof secs, "%d", d->svc->cfg.dedup_retention_s);
    const char *params[] = {secs};
    if (st_pg_exec(conn, sql_calls_recover, 0, NULL, NULL, &eb) != ST_OK ||
        st_pg_exec(conn, sql_dedup_purge, 1, params, NULL, &eb) != ST_OK) {
        st_log_warn("executor housekeeping failed", "%s", eb.msg);
        return 0;
    }
    d->last_housekeeping = time(NULL);
    return 1;
}

/* Claims a batch and performs it (the due loop's `process`). Returns rows claimed,
 * -1 on a database error. */
static int dispatch_batch(PGconn *conn, void *ctx)
{
    st_dispatcher_t *d = ctx;
    if (!housekeeping(d, conn))
        return -1;
    st_errbuf_t eb;
    PGresult *calls = NULL;
    if (st_pg_exec(conn, sql_calls_claim, 0, NULL, &calls, &eb) != ST_OK) {
        st_log_warn("could not claim calls", "%s", eb.msg);
        return -1;
    }
    int n = PQntuples(calls);
    for (int i = 0; i < n; i++) {
        double started = st_mono_s();
        json_t *result;
        const char *transport = PQgetvalue(calls, i, 3);
        if (strcmp(transport, "http") == 0)
            result = perform_http(PQgetvalue(calls, i, 4), PQgetvalue(calls, i, 6),
                                  atol(PQgetvalue(calls, i, 7)), PQgetvalue(calls, i, 1),
                                  atoi(PQgetvalue(calls, i, 5)));
        else
            result = json_pack("{s:b, s:s}", "ok", 0, "error", "unsupported call transport");
        st_metric_observe(d->m_duration, st_mono_s() - started);
        st_metric_inc(json_is_true(json_object_get(result, "ok")) ? d->m_calls_ok
                                                                   : d->m_calls_failed);
        /* The result must reach the database; a crash before this line makes the
         * recovery sweep send the call again with the same idempotency key. */
        while (report_tx(conn, calls, i, result, &eb) != ST_OK && !st_service_stopping(d->svc)) {
            st_log_warn("could not record a call result, retrying", "%s", eb.msg);
            poll(NULL, 0, 500);
            st_pg_ensure(conn);
        }
        json_decref(result);
    }
    PQclear(calls);
    return n;
}

/* New calls arrive by NOTIFY; the only deadline of its own is the next housekeeping. */
static long long next_wait_ms(PGconn *conn, void *ctx)
{
    st_dispatcher_t *d = ctx;
    long long left = (long long)(d->last_housekeeping + HOUSEKEEPING_EVERY_S - time(NULL)) * 1000;
    return left > 0 ? left : 0;
}

st_err_t st_dispatcher_start(st_service_t *svc, st_dispatcher_t **out, st_errbuf_t *eb)
{
    st_dispatcher_t *d = calloc(1, sizeof *d);
    if (d == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the dispatcher");
    d->svc = svc;
    d->m_calls_ok = st_metrics_counter("strand_calls_total", "Outbound calls by outcome",
                                       "outcome=\"ok\"");
    d->m_calls_failed = st_metrics_counter("strand_calls_total", "Outbound calls by outcome",
                                           "outcome=\"failed\"");
    d->m_duration = st_metrics_histogram("strand_call_duration_seconds",
                                         "Duration of outbound calls", NULL);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    st_due_loop_config_t cfg = {"dispatcher", ST_CALLS_CHANNEL, CLAIM_BATCH, dispatch_batch,
                                next_wait_ms, d};
    st_err_t err = st_due_loop_start(svc, &cfg, &d->loop, eb);
    if (err != ST_OK) {
        curl_global_cleanup();
        free(d);
        return err;
    }
    *out = d;
    return ST_OK;
}

void st_dispatcher_stop(st_dispatcher_t *d)
{
    if (d == NULL)
        return;
    st_due_loop_stop(d->loop);
    curl_global_cleanup();
    free(d);
}
