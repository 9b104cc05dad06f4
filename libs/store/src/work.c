/* work.c - work events and ACK rows (see work.h). */
#include "strand/work.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/history.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/proto/strand.pb-c.h"
#include "strand/topics.h"
#include "strand/util.h"

static const char *const sql_work_insert =
    "INSERT INTO strand.work_events (ack_guid, instance_id, kind, event_code, waiting_token,"
    " envelope) VALUES ($1::uuid, $2::uuid, $3, $4, $5, $6)";
static const char *const sql_ack_insert =
    "INSERT INTO strand.acks (ack_guid, consumer, due_at, delivery_timeout_s,"
    " processing_timeout_s, max_raises)"
    " VALUES ($1::uuid, $2, now() + make_interval(secs => $3::int), $3, $4, $5)";

/* Reads one consumer entry; returns 0 if it is malformed. */
static int consumer_settings(const json_t *item, const char **name, int *delivery,
                             int *processing, int *max_raises)
{
    *delivery = ST_WORK_DELIVERY_TIMEOUT_S;
    *processing = ST_WORK_PROCESSING_TIMEOUT_S;
    *max_raises = ST_WORK_MAX_RAISES;
    if (json_is_string(item)) {
        *name = json_string_value(item);
        return **name != '\0';
    }
    *name = json_string_value(json_object_get(item, "consumer"));
    const json_t *d = json_object_get(item, "delivery_timeout_s");
    const json_t *p = json_object_get(item, "processing_timeout_s");
    const json_t *m = json_object_get(item, "max_raises");
    if (json_is_integer(d))
        *delivery = (int)json_integer_value(d);
    if (json_is_integer(p))
        *processing = (int)json_integer_value(p);
    if (json_is_integer(m))
        *max_raises = (int)json_integer_value(m);
    return *name != NULL && **name != '\0' && *delivery > 0 && *processing > 0 && *max_raises >= 0;
}

st_err_t st_work_emit_tx(PGconn *conn, const st_work_event_t *ev, char ack_guid[37],
                         st_errbuf_t *eb)
{
    size_t nconsumers = json_array_size(ev->consumers);
    if (nconsumers == 0)
        return st_err_set(eb, ST_ERR_INVALID, "a work event needs at least one consumer");
    char **names = calloc(nconsumers, sizeof *names);
    if (names == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode a work event");
    for (size_t i = 0; i < nconsumers; i++) {
        const char *name;
        int d, p, m;
        if (!consumer_settings(json_array_get(ev->consumers, i), &name, &d, &p, &m)) {
            free(names);
            return st_err_set(eb, ST_ERR_INVALID, "consumer %zu of a work event is malformed", i);
        }
        names[i] = (char *)name;
    }
    st_uuid_new(ack_guid);
    char *payload = ev->payload ? json_dumps(ev->payload, JSON_COMPACT) : strdup("{}");
    Strand__V1__WorkEvent msg = STRAND__V1__WORK_EVENT__INIT;
    msg.envelope_version = 1;
    msg.ack_guid = ack_guid;
    msg.kind = (char *)ev->kind;
    msg.event_code = (char *)ev->event_code;
    msg.external_ref = (char *)(ev->external_ref ? ev->external_ref : "");
    msg.env_code = (char *)(ev->env_code ? ev->env_code : "");
    msg.definition = (char *)(ev->definition ? ev->definition : "");
    msg.definition_version = ev->definition_version;
    msg.instance_id = (char *)ev->instance_id;
    msg.occurred_at_ms = st_now_ms();
    msg.n_consumers = nconsumers;
    msg.consumers = names;
    msg.payload.data = (uint8_t *)payload;
    msg.payload.len = payload ? strlen(payload) : 0;
    size_t len = strand__v1__work_event__get_packed_size(&msg);
    uint8_t *buf = malloc(len ? len : 1);
    if (payload == NULL || buf == NULL) {
        free(payload);
        free(buf);
        free(names);
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode a work event");
    }
    strand__v1__work_event__pack(&msg, buf);
    const char *params[] = {ack_guid, ev->instance_id, ev->kind, ev->event_code,
                            ev->waiting_token, (const char *)buf};
    int lengths[] = {0, 0, 0, 0, 0, (int)len};
    int formats[] = {0, 0, 0, 0, 0, 1};
    st_err_t err = st_pg_exec_bin(conn, sql_work_insert, 6, params, lengths, formats, NULL, eb);
    for (size_t i = 0; err == ST_OK && i < nconsumers; i++) {
        const char *name;
        int d, p, m;
        consumer_settings(json_array_get(ev->consumers, i), &name, &d, &p, &m);
        char ds[16], ps[16], ms[16];
        snprintf(ds, sizeof ds, "%d", d);
        snprintf(ps, sizeof ps, "%d", p);
        snprintf(ms, sizeof ms, "%d", m);
        const char *ack_params[] = {ack_guid, name, ds, ps, ms};
        err = st_pg_exec(conn, sql_ack_insert, 5, ack_params, NULL, eb);
    }
    if (err == ST_OK)
        err = st_outbox_add_tx(conn, ST_TOPIC_WORK, ev->instance_id, buf, len, eb);
    if (err == ST_OK) {
        json_t *detail = json_pack("{s:s, s:s, s:s, s:O}", "ack_guid", ack_guid, "kind", ev->kind,
                                   "event_code", ev->event_code, "consumers", ev->consumers);
        err = st_history_add_tx(conn, ev->instance_id, "work_raised", detail, eb);
        json_decref(detail);
    }
    if (err == ST_OK)
        err = st_pg_exec(conn, "NOTIFY " ST_WORK_CHANNEL, 0, NULL, NULL, eb);
    free(buf);
    free(payload);
    free(names);
    return err;
}

st_err_t st_ack_move_tx(PGconn *conn, const char *ack_guid, const char *consumer,
                        st_ack_move_t move, const char *error, const char *message,
                        const char *retry_at_ms, st_errbuf_t *eb)
{
    /* Parameters: $1 ack_guid, $2 consumer, then as `args` says. */
    static const struct {
        const char *sql;
        const char *args;   /* e: error, m: message, r: retry_at_ms */
    } moves[] = {
        [ST_ACK_DELIVERED] = {"UPDATE strand.acks SET stage = 'processing', delivered_at = now(),"
                              " due_at = now() + make_interval(secs => processing_timeout_s),"
                              " message = $3, updated_at = now()"
                              " WHERE ack_guid = $1::uuid AND consumer = $2", "m"},
        [ST_ACK_PROCESSED] = {"UPDATE strand.acks SET stage = 'done', outcome = 'ok',"
                              " delivered_at = coalesce(delivered_at, now()), processed_at = now(),"
                              " due_at = NULL, message = $3, updated_at = now()"
                              " WHERE ack_guid = $1::uuid AND consumer = $2", "m"},
        [ST_ACK_RETRY] = {"UPDATE strand.acks SET stage = 'delivery', outcome = 'failed', error = $3,"
                          " message = $4, retry_at = to_timestamp($5::double precision / 1000.0),"
                          " due_at = to_timestamp($5::double precision / 1000.0), updated_at = now()"
                          " WHERE ack_guid = $1::uuid AND consumer = $2", "emr"},
        [ST_ACK_FAILED] = {"UPDATE strand.acks SET stage = 'failed', outcome = 'failed', error = $3,"
                           " message = $4, due_at = NULL, updated_at = now()"
                           " WHERE ack_guid = $1::uuid AND consumer = $2", "em"},
        [ST_ACK_RERAISED] = {"UPDATE strand.acks SET raises = raises + 1, updated_at = now(),"
                             " due_at = now() + make_interval(secs => delivery_timeout_s"
                             " * power(2, least(raises + 1, 6)))"
                             " WHERE ack_guid = $1::uuid AND consumer = $2", ""},
        [ST_ACK_REMINDED] = {"UPDATE strand.acks SET reminders = reminders + 1, updated_at = now(),"
                             " due_at = now() + make_interval(secs => processing_timeout_s"
                             " * power(2, least(reminders + 1, 6)))"
                             " WHERE ack_guid = $1::uuid AND consumer = $2", ""},
        [ST_ACK_GIVEN_UP] = {"UPDATE strand.acks SET stage = 'failed', due_at = NULL, updated_at = now(),"
                             " error = coalesce(error, $3) WHERE ack_guid = $1::uuid AND consumer = $2",
                             "e"},
    };
    if ((int)move < 0 || (size_t)move >= sizeof moves / sizeof moves[0])
        return st_err_set(eb, ST_ERR_INVALID, "unknown ACK move %d", (int)move);
    const char *params[5] = {ack_guid, consumer};
    int n = 2;
    for (const char *a = moves[move].args; *a; a++)
        params[n++] = *a == 'e' ? error : *a == 'm' ? message : retry_at_ms;
    return st_pg_exec(conn, moves[move].sql, n, params, NULL, eb);
}
