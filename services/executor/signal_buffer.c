/* signal_buffer.c - what the executor does with signals an instance cannot take now (see
 * signal_buffer.h); the table's SQL is in strand/signal_buffer_store.h. */
#include "signal_buffer.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strand/dedup.h"
#include "strand/history.h"
#include "strand/log.h"
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

/* Keeps a named signal the instance does not wait for yet (or that arrived before it
 * started); it is delivered when the instance waits for that name. */
st_err_t st_signal_buffer_keep_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb)
{
    char *payload = sig->payload ? json_dumps(sig->payload, JSON_COMPACT) : strdup("{}");
    st_err_t err = st_signal_buffer_add_named_tx(conn, sig->instance_id, sig->name, sig->signal_id,
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

