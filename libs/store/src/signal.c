/* signal.c - signal envelope codec (see signal.h). */
#include "strand/signal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/proto/strand.pb-c.h"
#include "strand/topics.h"
#include "strand/util.h"

static const char *const type_names[] = {
    [ST_SIGNAL_START] = "START",
    [ST_SIGNAL_TASK_COMPLETED] = "TASK_COMPLETED",
    [ST_SIGNAL_TIMER_DUE] = "TIMER_DUE",
    [ST_SIGNAL_RETRY_DUE] = "RETRY_DUE",
    [ST_SIGNAL_EXTERNAL] = "SIGNAL",
    [ST_SIGNAL_CHILD_COMPLETED] = "CHILD_COMPLETED",
    [ST_SIGNAL_CALL_RESULT] = "CALL_RESULT",
    [ST_SIGNAL_CANCEL] = "CANCEL",
    [ST_SIGNAL_TERMINATE] = "TERMINATE",
    [ST_SIGNAL_CONTINUE] = "CONTINUE",
    [ST_SIGNAL_REPAIR] = "REPAIR",
    [ST_SIGNAL_PAUSE] = "PAUSE",
    [ST_SIGNAL_RESUME] = "RESUME",
    [ST_SIGNAL_REWIND] = "REWIND",
};

void st_signal_init(st_signal_t *sig, st_signal_type_t type, const char *instance_id,
                    long long expected_version)
{
    memset(sig, 0, sizeof *sig);
    st_uuid_new(sig->signal_id);
    snprintf(sig->instance_id, sizeof sig->instance_id, "%s", instance_id);
    sig->type = type;
    sig->expected_version = expected_version;
    sig->occurred_at_ms = st_now_ms();
}

void st_signal_close(st_signal_t *sig)
{
    json_decref(sig->payload);
    sig->payload = NULL;
}

const char *st_signal_type_name(st_signal_type_t type)
{
    if (type < ST_SIGNAL_START || type > ST_SIGNAL_REWIND || type_names[type] == NULL)
        return "UNKNOWN";
    return type_names[type];
}

st_err_t st_signal_encode(const st_signal_t *sig, uint8_t **buf, size_t *len,
                          st_errbuf_t *eb)
{
    Strand__V1__Signal msg = STRAND__V1__SIGNAL__INIT;
    msg.envelope_version = ST_SIGNAL_ENVELOPE_VERSION;
    msg.signal_id = (char *)sig->signal_id;
    msg.instance_id = (char *)sig->instance_id;
    msg.type = (Strand__V1__SignalType)sig->type;
    msg.expected_version = sig->expected_version;
    msg.waiting_token = (char *)sig->waiting_token;
    msg.occurred_at_ms = sig->occurred_at_ms;
    msg.due_at_ms = sig->due_at_ms;
    msg.name = (char *)sig->name;
    msg.attempt = sig->attempt;
    char *payload = sig->payload ? json_dumps(sig->payload, JSON_COMPACT) : strdup("{}");
    if (payload == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode the signal payload");
    msg.payload.data = (uint8_t *)payload;
    msg.payload.len = strlen(payload);
    *len = strand__v1__signal__get_packed_size(&msg);
    *buf = malloc(*len ? *len : 1);
    if (*buf == NULL) {
        free(payload);
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode the signal");
    }
    strand__v1__signal__pack(&msg, *buf);
    free(payload);
    return ST_OK;
}

st_err_t st_signal_decode(const void *buf, size_t len, st_signal_t *out, st_errbuf_t *eb)
{
    memset(out, 0, sizeof *out);
    Strand__V1__Signal *msg = strand__v1__signal__unpack(NULL, len, buf);
    if (msg == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "the message is not a strand.v1.Signal");
    st_err_t err = ST_OK;
    if (msg->envelope_version != ST_SIGNAL_ENVELOPE_VERSION)
        err = st_err_set(eb, ST_ERR_INVALID, "unknown signal envelope version %u",
                         msg->envelope_version);
    else if (msg->signal_id[0] == '\0' || strlen(msg->signal_id) >= sizeof out->signal_id)
        err = st_err_set(eb, ST_ERR_INVALID, "the signal has no valid signal_id");
    else if (!st_uuid_valid(msg->instance_id))
        err = st_err_set(eb, ST_ERR_INVALID, "the signal's instance_id is not a UUID");
    else if ((int)msg->type < 1 || (int)msg->type > (int)ST_SIGNAL_REWIND ||
             strcmp(st_signal_type_name((st_signal_type_t)msg->type), "UNKNOWN") == 0)
        err = st_err_set(eb, ST_ERR_INVALID, "unknown signal type %d", (int)msg->type);
    else if (strlen(msg->waiting_token) >= sizeof out->waiting_token ||
             strlen(msg->name) >= sizeof out->name)
        err = st_err_set(eb, ST_ERR_INVALID, "the signal's token or name is too long");
    if (err == ST_OK) {
        json_error_t jerr;
        out->payload = msg->payload.len
                           ? json_loadb((const char *)msg->payload.data, msg->payload.len, 0, &jerr)
                           : json_object();
        if (!json_is_object(out->payload)) {
            json_decref(out->payload);
            out->payload = NULL;
            err = st_err_set(eb, ST_ERR_INVALID, "the signal payload is not a JSON object");
        }
    }
    if (err == ST_OK) {
        snprintf(out->signal_id, sizeof out->signal_id, "%s", msg->signal_id);
        snprintf(out->instance_id, sizeof out->instance_id, "%s", msg->instance_id);
        out->type = (st_signal_type_t)msg->type;
        out->expected_version = msg->expected_version;
        snprintf(out->waiting_token, sizeof out->waiting_token, "%s", msg->waiting_token);
        out->occurred_at_ms = msg->occurred_at_ms;
        out->due_at_ms = msg->due_at_ms;
        snprintf(out->name, sizeof out->name, "%s", msg->name);
        out->attempt = msg->attempt;
    }
    strand__v1__signal__free_unpacked(msg, NULL);
    return err;
}

/* strand.control_signals (migration 0016): Strand's record of each signal that ends an
 * instance. This module owns the table. */
static const char *const sql_control_record =
    "INSERT INTO strand.control_signals (signal_id, instance_id, type)"
    " SELECT $1, $2::uuid, $3 WHERE EXISTS (SELECT 1 FROM strand.instances WHERE id = $2::uuid)"
    " ON CONFLICT (signal_id) DO NOTHING";
static const char *const sql_control_take =
    "DELETE FROM strand.control_signals WHERE signal_id = $1 AND instance_id = $2::uuid"
    " AND type = $3 RETURNING 1";

int st_signal_needs_record(st_signal_type_t type)
{
    return type == ST_SIGNAL_CANCEL || type == ST_SIGNAL_TERMINATE || type == ST_SIGNAL_REPAIR ||
           type == ST_SIGNAL_PAUSE || type == ST_SIGNAL_RESUME || type == ST_SIGNAL_REWIND;
}

st_err_t st_signal_enqueue_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb)
{
    uint8_t *buf;
    size_t len = 0;
    st_err_t err = st_signal_encode(sig, &buf, &len, eb);
    if (err != ST_OK)
        return err;
    err = st_outbox_add_signal_tx(conn, sig->signal_id, sig->instance_id, buf, len, eb);
    free(buf);
    if (err == ST_OK && st_signal_needs_record(sig->type) && st_uuid_valid(sig->instance_id)) {
        const char *params[] = {sig->signal_id, sig->instance_id, st_signal_type_name(sig->type)};
        err = st_pg_exec(conn, sql_control_record, 3, params, NULL, eb);
    }
    return err;
}

st_err_t st_signal_take_record_tx(PGconn *conn, const st_signal_t *sig, int *found,
                                  st_errbuf_t *eb)
{
    const char *params[] = {sig->signal_id, sig->instance_id, st_signal_type_name(sig->type)};
    PGresult *res = NULL;
    *found = 0;
    st_err_t err = st_pg_exec(conn, sql_control_take, 3, params, &res, eb);
    if (err == ST_OK)
        *found = PQntuples(res) == 1;
    PQclear(res);
    return err;
}
