/* ack_monitor.c - re-raises and reminders for overdue ACKs (see ack_monitor.h). */
#include "ack_monitor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/due_loop.h"
#include "strand/history.h"
#include "strand/kafka.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/notice.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/util.h"
#include "strand/work.h"

#define CLAIM_BATCH 200
#define BACKOFF_CAP_EXP 6    /* deadlines grow to at most 64 x the stage timeout */

struct st_ack_monitor {
    st_service_t *svc;
    st_due_loop_t *loop;
    PGconn *conn;          /* the loop's connection, set for the batch in hand */
    time_t last_sample;
    st_metric_t *m_reraised, *m_reminded, *m_failed, *m_cycle, *m_pending;
};

static const char *const sql_due_claim =
    "SELECT a.ack_guid, a.consumer, a.stage, a.raises, a.reminders, a.max_raises,"
    " a.delivery_timeout_s, a.processing_timeout_s, w.instance_id, w.envelope, w.event_code,"
    " w.kind, w.waiting_token"
    " FROM strand.acks a JOIN strand.work_events w USING (ack_guid)"
    " WHERE a.due_at <= now() ORDER BY a.due_at LIMIT 200 FOR UPDATE OF a SKIP LOCKED";
static const char *const sql_next_due =
    "SELECT " ST_PG_SQL_MS_UNTIL("min(due_at)")
    " FROM strand.acks WHERE due_at IS NOT NULL";
static const char *const sql_pending =
    "SELECT count(*) FROM strand.acks WHERE due_at IS NOT NULL";

/* Enqueues a failed CALL_RESULT for the wait `token` of `instance`. */
static st_err_t resume_call_tx(st_ack_monitor_t *m, const char *instance, const char *token,
                               const char *guid, const char *consumer, const char *reason,
                               st_errbuf_t *eb)
{
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_CALL_RESULT, instance, -1);
    snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", token);
    sig.payload = json_pack("{s:s, s:s, s:{s:b, s:s, s:b}}", "ack_guid", guid, "consumer",
                            consumer, "result", "ok", 0, "error", reason, "gave_up", 1);
    st_err_t err = sig.payload ? st_signal_enqueue_tx(m->conn, &sig, eb)
                               : st_err_set(eb, ST_ERR_NOMEM, "could not build a call result");
    st_signal_close(&sig);
    return err;
}

/* Handles one claimed row inside the batch's transaction. */
static st_err_t handle_due_tx(st_ack_monitor_t *m, PGresult *rows, int i, st_errbuf_t *eb)
{
    const char *guid = PQgetvalue(rows, i, 0);
    const char *consumer = PQgetvalue(rows, i, 1);
    int delivery = strcmp(PQgetvalue(rows, i, 2), "delivery") == 0;
    int count = atoi(PQgetvalue(rows, i, delivery ? 3 : 4));
    int max_raises = atoi(PQgetvalue(rows, i, 5));
    const char *instance = PQgetvalue(rows, i, 8);
    const char *event_code = PQgetvalue(rows, i, 10);
    size_t len = 0;
    unsigned char *envelope = PQunescapeBytea((const unsigned char *)PQgetvalue(rows, i, 9), &len);
    if (envelope == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not read a work event");
    json_t *detail = json_pack("{s:s, s:s, s:s, s:s, s:i}", "ack_guid", guid, "consumer", consumer,
                               "event_code", event_code, "stage", delivery ? "delivery" : "processing",
                               "raises", count + 1);
    st_err_t err;
    const char *code, *history_kind;
    if (count < max_raises) {
        err = st_outbox_add_tx(m->conn, ST_TOPIC_WORK, instance, envelope, len, eb);
        if (err == ST_OK)
            err = st_ack_move_tx(m->conn, guid, consumer,
                                 delivery ? ST_ACK_RERAISED : ST_ACK_REMINDED, NULL, NULL, NULL, eb);
        code = delivery ? "DeliveryRetryRaised" : "ProcessingReminderRaised";
        history_kind = delivery ? "work_reraised" : "work_reminded";
        st_metric_inc(delivery ? m->m_reraised : m->m_reminded);
    } else {
        char reason[200];
        snprintf(reason, sizeof reason, "%s not acknowledged after %d raises",
                 delivery ? "delivery" : "processing", count);
        err = st_ack_move_tx(m->conn, guid, consumer, ST_ACK_GIVEN_UP, reason, NULL, NULL, eb);
        char topic[128];
        st_dead_letter_source_t src = {st_config_topic(&m->svc->cfg, ST_TOPIC_WORK, topic, sizeof topic),
                                       -1, -1, instance, NULL};
        if (err == ST_OK)
            err = st_dead_letter_add_tx(m->conn, &src, reason, count, m->svc->cfg.node_id,
                                        envelope, len, eb);
        /* A give-up raises nothing: it reports the raises made, as the ACK row and the
         * dead letter do (count + 1 said one more). */
        json_object_set_new(detail, "raises", json_integer(count));
        /* A call's instance waits for a result that will not come: answer it with a
         * failed one, so the step's retry or on_failure applies (a wait answered by
         * now, by another consumer or the call's timeout, drops this as stale). */
        if (err == ST_OK && strcmp(PQgetvalue(rows, i, 11), "call") == 0 &&
            !PQgetisnull(rows, i, 12))
            err = resume_call_tx(m, instance, PQgetvalue(rows, i, 12), guid, consumer, reason, eb);
        code = "DispatchFailure";
        history_kind = "work_failed";
        st_metric_inc(m->m_failed);
    }
    if (err == ST_OK)
        err = st_notice_add_tx(m->conn, code, instance, NULL, code, detail, eb);
    if (err == ST_OK) {
        json_object_set_new(detail, "notice", json_string(code));
        err = st_history_add_tx(m->conn, instance, history_kind, detail, eb);
    }
    json_decref(detail);
    PQfreemem(envelope);
    return err;
}

/* One batch in one transaction; returns rows handled or -1 on a database error. */
static int process_due(PGconn *conn, void *ctx)
{
    st_ack_monitor_t *m = ctx;
    m->conn = conn;
    st_errbuf_t eb;
    double started = st_mono_s();
    PGresult *rows = NULL;
    st_err_t err = st_pg_begin(m->conn, &eb);
    if (err == ST_OK)
        err = st_pg_exec(m->conn, sql_due_claim, 0, NULL, &rows, &eb);
    int n = err == ST_OK ? PQntuples(rows) : 0;
    for (int i = 0; err == ST_OK && i < n; i++)
        err = handle_due_tx(m, rows, i, &eb);
    if (err == ST_OK)
        err = st_pg_commit(m->conn, &eb);
    PQclear(rows);
    if (err != ST_OK) {
        st_pg_rollback(m->conn);
        st_log_warn("ACK monitor cycle failed", "%s", eb.msg);
        return -1;
    }
    st_metric_observe(m->m_cycle, st_mono_s() - started);
    return n;
}

static void sample_pending(st_ack_monitor_t *m)
{
    st_errbuf_t eb;
    PGresult *res = NULL;
    if (st_pg_exec(m->conn, sql_pending, 0, NULL, &res, &eb) == ST_OK)
        st_metric_set(m->m_pending, atof(PQgetvalue(res, 0, 0)));
    PQclear(res);
}

/* Milliseconds until the earliest ACK deadline, or -1 if there is none. */
static long long next_wait_ms(PGconn *conn, void *ctx)
{
    st_ack_monitor_t *m = ctx;
    if (time(NULL) - m->last_sample >= 15) {
        sample_pending(m);
        m->last_sample = time(NULL);
    }
    st_errbuf_t eb;
    PGresult *res = NULL;
    long long wait = -1;
    if (st_pg_exec(conn, sql_next_due, 0, NULL, &res, &eb) == ST_OK && !PQgetisnull(res, 0, 0)) {
        long long ms = atoll(PQgetvalue(res, 0, 0));
        wait = ms < 0 ? 0 : ms + 1;
    }
    PQclear(res);
    return wait;
}

st_err_t st_ack_monitor_start(st_service_t *svc, st_ack_monitor_t **out, st_errbuf_t *eb)
{
    st_ack_monitor_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the ACK monitor");
    m->svc = svc;
    m->m_reraised = st_metrics_counter("strand_ack_raises_total", "Work events re-raised or reminded",
                                       "stage=\"delivery\"");
    m->m_reminded = st_metrics_counter("strand_ack_raises_total", "Work events re-raised or reminded",
                                       "stage=\"processing\"");
    m->m_failed = st_metrics_counter("strand_ack_failures_total",
                                     "ACK stages given up after max raises", NULL);
    m->m_cycle = st_metrics_histogram("strand_monitor_cycle_seconds",
                                      "Duration of one ACK monitor batch", NULL);
    m->m_pending = st_metrics_gauge("strand_acks_pending",
                                    "ACK stages with a deadline (sampled every 15 s)", NULL);
    st_due_loop_config_t cfg = {"monitor", ST_WORK_CHANNEL, CLAIM_BATCH, process_due,
                                next_wait_ms, m};
    st_err_t err = st_due_loop_start(svc, &cfg, &m->loop, eb);
    if (err != ST_OK) {
        free(m);
        return err;
    }
    *out = m;
    return ST_OK;
}

void st_ack_monitor_stop(st_ack_monitor_t *m)
{
    if (m == NULL)
        return;
    st_due_loop_stop(m->loop);
    free(m);
}
