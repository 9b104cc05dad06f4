/* signal_buffer.c - what the executor does with signals an instance cannot take now (see
 * signal_buffer.h); the table's SQL is in strand/signal_buffer_store.h. */
#include "signal_buffer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/config.h"
#include "strand/dedup.h"
#include "strand/history.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/notice.h"
#include "strand/signal_buffer_store.h"
#include "strand/util.h"

/* Queues a timeline entry (strand.history's owner: history.c); steals `detail`. */
static st_err_t history_steal_tx(PGconn *conn, const char *instance_id, const char *kind,
                                 json_t *detail, st_errbuf_t *eb)
{
    st_err_t err = st_history_queue_tx(conn, instance_id, kind, detail, eb);
    json_decref(detail);
    return err;
}

/* ---- the bound on kept named signals ---------------------------------------------- */

/* STRAND_SIGNAL_BUFFER_MAX and STRAND_SIGNAL_BUFFER_MAX_BYTES. The executor's
 * st_service_init() validated them at start-up (config.c); they are read once more
 * here, on first use, so that nothing else has to hand them over. */
static struct {
    pthread_once_t once;
    long long max_signals, max_bytes;
    st_metric_t *m_refused;
} bound = {PTHREAD_ONCE_INIT, 100, 1 << 20, NULL};

static void bound_load(void)
{
    st_config_t *cfg = malloc(sizeof *cfg);
    st_errbuf_t eb;
    if (cfg != NULL && st_config_load(cfg, "executor", 0, &eb) == ST_OK) {
        bound.max_signals = cfg->signal_buffer_max;
        bound.max_bytes = cfg->signal_buffer_max_bytes;
    } else {
        st_log_warn("could not read the signal buffer's bound; using the defaults", "%s",
                    cfg != NULL ? eb.msg : "out of memory");
    }
    free(cfg);
    bound.m_refused = st_metrics_counter("strand_signal_buffer_refused_total",
                                         "Named signals not kept: their instance's buffer was full",
                                         NULL);
}

/* Drops `sig` instead of keeping it: its dedup outcome "refused" and a notice
 * SignalBufferFull naming the instance, the signal and the bound. The wake-up commits
 * as usual, so the consumer moves on. */
static st_err_t refuse_tx(PGconn *conn, const st_signal_t *sig, long long count, long long bytes,
                          long long payload_bytes, st_errbuf_t *eb)
{
    st_err_t err = st_dedup_set_outcome_tx(conn, sig->signal_id, "refused", eb);
    if (err != ST_OK)
        return err;
    char why[512];
    snprintf(why, sizeof why,
             "instance %s does not wait for signal \"%.120s\" and already keeps %lld signals"
             " (%lld bytes) it does not wait for; the bound is %lld signals and %lld bytes"
             " (STRAND_SIGNAL_BUFFER_MAX, STRAND_SIGNAL_BUFFER_MAX_BYTES): the signal (%lld bytes)"
             " was not kept", sig->instance_id, sig->name, count, bytes, bound.max_signals,
             bound.max_bytes, payload_bytes);
    json_t *detail = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "name", sig->name, "buffered",
                               (json_int_t)count, "buffered_bytes", (json_int_t)bytes,
                               "payload_bytes", (json_int_t)payload_bytes, "max_signals",
                               (json_int_t)bound.max_signals, "max_bytes",
                               (json_int_t)bound.max_bytes);
    err = st_notice_add_tx(conn, "SignalBufferFull", sig->instance_id, sig->signal_id, why, detail,
                           eb);
    json_decref(detail);
    if (err == ST_OK)
        st_metric_inc(bound.m_refused);
    return err;
}

/* Keeps a named signal the instance does not wait for yet (or that arrived before it
 * started); it is delivered when the instance waits for that name. Within the bound
 * only: beyond it the signal is refused (refuse_tx()). */
st_err_t st_signal_buffer_keep_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb)
{
    pthread_once(&bound.once, bound_load);
    char *payload = sig->payload ? json_dumps(sig->payload, JSON_COMPACT) : strdup("{}");
    if (payload == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode a signal's payload");
    long long count = 0, bytes = 0, payload_bytes = (long long)strlen(payload);
    st_err_t err = st_signal_buffer_named_usage_tx(conn, sig->instance_id, &count, &bytes, eb);
    if (err == ST_OK && (count + 1 > bound.max_signals || bytes + payload_bytes > bound.max_bytes)) {
        free(payload);
        return refuse_tx(conn, sig, count, bytes, payload_bytes, eb);
    }
    if (err == ST_OK)
        err = st_signal_buffer_add_named_tx(conn, sig->instance_id, sig->name, sig->signal_id,
                                            payload, eb);
    free(payload);
    if (err == ST_OK)
        err = st_dedup_set_outcome_tx(conn, sig->signal_id, "buffered", eb);
    if (err == ST_OK)
        err = history_steal_tx(conn, sig->instance_id, "signal_buffered",
                               json_pack("{s:s, s:s}", "signal_id", sig->signal_id, "name", sig->name),
                               eb);
    return err;
}

st_err_t st_signal_buffer_hold_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    st_err_t err = st_signal_encode(sig, &buf, &len, eb);
    if (err != ST_OK)
        return err;
    err = st_signal_buffer_add_held_tx(conn, sig->instance_id,
                                       sig->name[0] ? sig->name : st_signal_type_name(sig->type),
                                       sig->signal_id, buf, len, eb);
    free(buf);
    if (err == ST_OK)
        err = st_dedup_set_outcome_tx(conn, sig->signal_id, "buffered", eb);
    if (err == ST_OK)
        err = history_steal_tx(conn, sig->instance_id, "signal_held",
                               json_pack("{s:s, s:s, s:s}", "signal_id", sig->signal_id, "signal_type",
                                         st_signal_type_name(sig->type), "name", sig->name),
                               eb);
    return err;
}

st_err_t st_signal_buffer_release_held_tx(PGconn *conn, const char *instance_id, int *released,
                                   st_errbuf_t *eb)
{
    PGresult *res = NULL;
    *released = 0;
    st_err_t err = st_signal_buffer_take_held_tx(conn, instance_id, &res, eb);
    for (int i = 0; err == ST_OK && i < PQntuples(res); i++) {
        st_signal_t sig;
        if (st_signal_decode(PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0), &sig, eb) != ST_OK) {
            /* cannot happen (Strand encoded it); kept out of the way with a log line */
            st_log_warn("a held signal could not be decoded; dropped", "instance=%s: %s", instance_id,
                        eb->msg);
            continue;
        }
        st_uuid_new(sig.signal_id);   /* a new delivery: the first id is recorded as buffered */
        err = st_signal_enqueue_tx(conn, &sig, eb);
        st_signal_close(&sig);
        if (err == ST_OK)
            (*released)++;
    }
    PQclear(res);
    return err;
}

