/*
 * executor_loop.c - the signal pump: a Kafka consumer in group "<prefix>executor" on
 * the signals topic, feeding st_wakeup_run() one message at a time.
 *
 * Per message: decode -> wake-up transaction -> commit the offset (only after the
 * database commit). A retryable failure (PostgreSQL down) retries the same message
 * with backoff, never skipping it; a permanent failure retries up to
 * STRAND_MAX_ATTEMPTS times, then moves the message to the dead-letter store in one
 * transaction and commits the offset. On stop, the message in hand either commits or
 * is left uncommitted for redelivery.
 */
#include "executor.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/kafka.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/notice.h"
#include "strand/pg.h"
#include "strand/util.h"
#include "wakeup.h"

struct st_executor {
    st_service_t *svc;
    pthread_t thread;
    rd_kafka_t *consumer;
    PGconn *conn;
    st_defcache_t *cache;
    int pg_up, kafka_up;    /* atomics, for /readyz */
    st_metric_t *m_applied, *m_dropped, *m_duration, *m_errors;
};

static void backoff_sleep(st_executor_t *ex, int *backoff_ms)
{
    for (int waited = 0; waited < *backoff_ms && !st_service_stopping(ex->svc); waited += 50)
        poll(NULL, 0, 50);
    *backoff_ms = *backoff_ms < 5000 ? *backoff_ms * 2 : 5000;
}

static int ensure_pg(st_executor_t *ex)
{
    if (ex->conn != NULL && PQstatus(ex->conn) == CONNECTION_OK)
        return 1;
    if (ex->conn != NULL)
        PQfinish(ex->conn);
    ex->conn = NULL;
    st_errbuf_t eb;
    if (st_pg_connect(ex->svc->cfg.pg_dsn, "strand-executor", &ex->conn, &eb) != ST_OK) {
        __atomic_store_n(&ex->pg_up, 0, __ATOMIC_RELEASE);
        st_log_warn("executor could not connect to PostgreSQL", "%s", eb.msg);
        return 0;
    }
    __atomic_store_n(&ex->pg_up, 1, __ATOMIC_RELEASE);
    return 1;
}

/* Dead-letters a message in its own transaction. Returns ST_OK once recorded. */
static st_err_t dead_letter(st_executor_t *ex, const rd_kafka_message_t *msg,
                            const char *instance_id, const char *reason, int attempts)
{
    st_errbuf_t eb;
    st_dead_letter_source_t src = {rd_kafka_topic_name(msg->rkt), msg->partition,
                                   msg->offset, instance_id};
    st_err_t err = st_pg_begin(ex->conn, &eb);
    if (err == ST_OK)
        err = st_dead_letter_add_tx(ex->conn, &src, reason, attempts, ex->svc->cfg.node_id,
                                    msg->payload, msg->len, &eb);
    if (err == ST_OK)
        err = st_pg_commit(ex->conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(ex->conn);
        st_log_error("could not record a dead letter", "%s", eb.msg);
    } else {
        st_log_warn("message moved to the dead-letter store", "topic=%s partition=%d offset=%lld reason=%s",
                    src.topic, src.partition, (long long)src.offset, reason);
    }
    return err;
}

/* Handles one message until it is committed, dead-lettered, or the service stops.
 * Returns 1 if the offset may be committed. */
static int handle_message(st_executor_t *ex, const rd_kafka_message_t *msg)
{
    st_signal_t sig;
    st_errbuf_t eb;
    int backoff_ms = 100;
    if (st_signal_decode(msg->payload, msg->len, &sig, &eb) != ST_OK) {
        /* Malformed: retrying cannot help. */
        while (!st_service_stopping(ex->svc)) {
            if (ensure_pg(ex) && dead_letter(ex, msg, NULL, eb.msg, 1) == ST_OK)
                return 1;
            backoff_sleep(ex, &backoff_ms);
        }
        return 0;
    }
    int attempts = 0;
    int commit = 0;
    while (!st_service_stopping(ex->svc)) {
        if (!ensure_pg(ex)) {
            backoff_sleep(ex, &backoff_ms);
            continue;
        }
        double started = st_mono_s();
        st_wake_outcome_t outcome = 0;
        st_err_t err = st_wakeup_run(ex->conn, ex->cache, ex->svc->cfg.node_id, &sig,
                                     &outcome, &eb);
        if (err == ST_OK) {
            st_metric_observe(ex->m_duration, st_mono_s() - started);
            st_metric_inc(outcome == ST_WAKE_APPLIED ? ex->m_applied : ex->m_dropped);
            if (outcome != ST_WAKE_APPLIED)
                st_log_info("signal dropped", "signal=%s instance=%s outcome=%s",
                            sig.signal_id, sig.instance_id, st_wake_outcome_name(outcome));
            commit = 1;
            break;
        }
        st_metric_inc(ex->m_errors);
        if (st_err_retryable(err) || PQstatus(ex->conn) != CONNECTION_OK) {
            st_log_warn("wake-up failed, will retry", "instance=%s error=%s: %s",
                        sig.instance_id, st_err_name(err), eb.msg);
            backoff_sleep(ex, &backoff_ms);
            continue;
        }
        attempts++;
        st_log_warn("wake-up failed", "instance=%s attempt=%d error=%s: %s", sig.instance_id,
                    attempts, st_err_name(err), eb.msg);
        if (attempts >= ex->svc->cfg.max_attempts) {
            if (dead_letter(ex, msg, sig.instance_id, eb.msg, attempts) == ST_OK) {
                commit = 1;
                break;
            }
        }
        backoff_sleep(ex, &backoff_ms);
    }
    st_signal_close(&sig);
    return commit;
}

static void *executor_main(void *arg)
{
    st_executor_t *ex = arg;
    while (!st_service_stopping(ex->svc)) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(ex->consumer, 200);
        if (msg == NULL)
            continue;
        if (msg->err) {
            if (msg->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
                __atomic_store_n(&ex->kafka_up, 0, __ATOMIC_RELEASE);
            if (msg->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                st_log_warn("signals consumer error", "%s", rd_kafka_message_errstr(msg));
            rd_kafka_message_destroy(msg);
            continue;
        }
        __atomic_store_n(&ex->kafka_up, 1, __ATOMIC_RELEASE);
        if (handle_message(ex, msg))
            rd_kafka_commit_message(ex->consumer, msg, 1 /* async */);
        rd_kafka_message_destroy(msg);
    }
    return NULL;
}

static int pg_ready(void *ctx)
{
    st_executor_t *ex = ctx;
    return __atomic_load_n(&ex->pg_up, __ATOMIC_ACQUIRE);
}

static int kafka_ready(void *ctx)
{
    st_executor_t *ex = ctx;
    return __atomic_load_n(&ex->kafka_up, __ATOMIC_ACQUIRE);
}

st_err_t st_executor_start(st_service_t *svc, st_executor_t **out, st_errbuf_t *eb)
{
    st_executor_t *ex = calloc(1, sizeof *ex);
    if (ex == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the executor");
    ex->svc = svc;
    ex->cache = st_defcache_new();
    ex->m_applied = st_metrics_counter("strand_signals_processed_total",
                                       "Signals processed by outcome", "outcome=\"applied\"");
    ex->m_dropped = st_metrics_counter("strand_signals_processed_total",
                                       "Signals processed by outcome", "outcome=\"dropped\"");
    ex->m_errors = st_metrics_counter("strand_wakeup_errors_total",
                                      "Wake-ups that failed and were retried", NULL);
    ex->m_duration = st_metrics_histogram("strand_wakeup_duration_seconds",
                                          "Time of one wake-up transaction", NULL);
    char group[128];
    snprintf(group, sizeof group, "%sexecutor", svc->cfg.topic_prefix);
    static const char *const topics[] = {ST_TOPIC_SIGNALS, NULL};
    st_err_t err = st_kafka_consumer_new(&svc->cfg, group, topics, &ex->consumer, eb);
    if (err != ST_OK) {
        st_defcache_free(ex->cache);
        free(ex);
        return err;
    }
    /* Kafka is "up" for readiness once the consumer has a broker; messages also set it. */
    __atomic_store_n(&ex->kafka_up, st_kafka_connected(ex->consumer), __ATOMIC_RELEASE);
    ensure_pg(ex);
    st_service_add_ready(svc, "postgres", pg_ready, ex);
    st_service_add_ready(svc, "kafka", kafka_ready, ex);
    if (pthread_create(&ex->thread, NULL, executor_main, ex) != 0) {
        rd_kafka_destroy(ex->consumer);
        st_defcache_free(ex->cache);
        free(ex);
        return st_err_set(eb, ST_ERR_INTERNAL, "could not start the executor thread");
    }
    *out = ex;
    return ST_OK;
}

void st_executor_stop(st_executor_t *ex)
{
    if (ex == NULL)
        return;
    pthread_join(ex->thread, NULL);
    rd_kafka_consumer_close(ex->consumer);
    rd_kafka_destroy(ex->consumer);
    if (ex->conn != NULL)
        PQfinish(ex->conn);
    st_defcache_free(ex->cache);
    free(ex);
}
