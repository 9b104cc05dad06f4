/*
 * acks.c - the ACK command: an application reports, per consumer, that it received
 * (stage "delivered") or finished (stage "processed") a work event, or that it failed
 * (outcome "failed", optionally with retry_at to be re-raised then).
 *
 * ACK state machine per (ack_guid, consumer), in strand.acks:
 *   delivery --delivered--> processing --processed--> done
 *   delivery|processing --processed--> done        (a processed ACK implies delivery)
 *   any open --failed + retry_at--> delivery, due at retry_at
 *   any open --failed--> failed
 * ACKs for a finished stage are harmless no-ops (200, "duplicate": true). For a call
 * awaiting its result, the processed (or failed) ACK also wakes the instance with a
 * CALL_RESULT signal. Every ACK is written to the instance's history (timeline).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "strand/history.h"
#include "strand/notice.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/util.h"
#include "strand/work.h"

static const char *const sql_ack_lock =
    "SELECT a.stage, w.instance_id, w.kind, w.waiting_token FROM strand.acks a"
    " JOIN strand.work_events w USING (ack_guid)"
    " WHERE a.ack_guid = $1::uuid AND a.consumer = $2 FOR UPDATE OF a";

static const char *optional_string(const json_t *args, const char *key, int *bad)
{
    const json_t *v = json_object_get(args, key);
    if (v == NULL || json_is_null(v))
        return NULL;
    if (!json_is_string(v) || json_string_length(v) > 2000) {
        *bad = 1;
        return NULL;
    }
    return json_string_value(v);
}

/* The last millisecond of 9999-12-31 UTC: later instants are out of PostgreSQL's
 * timestamp range (and of any sensible retry). */
#define MAX_RETRY_AT_MS 253402300799999LL

/* {ack_guid, consumer, stage: delivered|processed, outcome?: ok|failed, message?, error?,
 *  retry_at_ms?, result?} */
void st_cmd_ack(PGconn *conn, const st_principal_t *who, const char *unused_id,
                const json_t *args, st_answer_t *out)
{
    const char *guid = json_string_value(json_object_get(args, "ack_guid"));
    const char *consumer = json_string_value(json_object_get(args, "consumer"));
    const char *stage = json_string_value(json_object_get(args, "stage"));
    const json_t *outcome_json = json_object_get(args, "outcome");
    const char *outcome = outcome_json ? json_string_value(outcome_json) : "ok";
    const json_t *retry = json_object_get(args, "retry_at_ms");
    const json_t *result = json_object_get(args, "result");
    int bad_message = 0, bad_error = 0;
    const char *message = optional_string(args, "message", &bad_message);
    const char *error = optional_string(args, "error", &bad_error);
    const char *field = NULL, *problem = NULL;
    if (!st_uuid_valid(guid))
        field = "/ack_guid", problem = "ack_guid must be a UUID";
    else if (consumer == NULL || *consumer == '\0')
        field = "/consumer", problem = "consumer must be a non-empty string";
    else if (stage == NULL || (strcmp(stage, "delivered") != 0 && strcmp(stage, "processed") != 0))
        field = "/stage", problem = "stage must be delivered or processed";
    else if (outcome == NULL || (strcmp(outcome, "ok") != 0 && strcmp(outcome, "failed") != 0))
        field = "/outcome", problem = "outcome must be ok or failed";
    else if (retry != NULL && !json_is_null(retry) &&
             (!json_is_integer(retry) || json_integer_value(retry) <= 0 ||
              json_integer_value(retry) > MAX_RETRY_AT_MS))
        field = "/retry_at_ms", problem = "retry_at_ms must be a positive integer (ms since the "
                                          "epoch) no later than 9999-12-31";
    else if (result != NULL && !json_is_null(result) && !json_is_object(result))
        field = "/result", problem = "result must be a JSON object";
    else if (bad_message || bad_error)
        field = bad_message ? "/message" : "/error",
        problem = "message and error must be strings of at most 2000 characters";
    if (field != NULL) {
        st_answer_problem(out, 400, "invalid_field", problem, field, NULL);
        return;
    }
    int failed = strcmp(outcome, "failed") == 0;
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_signal_t sig = {0};
    const char *lock_params[] = {guid, consumer};
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_pg_exec(conn, sql_ack_lock, 2, lock_params, &res, &eb);
    if (err != ST_OK)
        goto done;
    if (PQntuples(res) == 0) {
        st_answer_problem(out, 404, "ack_not_found", "no such ack_guid for this consumer", NULL,
                          NULL);
        goto done;
    }
    const char *current = PQgetvalue(res, 0, 0);
    const char *instance = PQgetvalue(res, 0, 1);
    int is_call = strcmp(PQgetvalue(res, 0, 2), "call") == 0 && !PQgetisnull(res, 0, 3);
    int open = strcmp(current, "delivery") == 0 || strcmp(current, "processing") == 0;
    int noop = !open || (!failed && strcmp(stage, "delivered") == 0 &&
                         strcmp(current, "processing") == 0);
    const char *now_stage = current;
    if (!noop) {
        char retry_text[24] = "";
        if (json_is_integer(retry))
            snprintf(retry_text, sizeof retry_text, "%lld", (long long)json_integer_value(retry));
        if (failed && retry_text[0]) {
            err = st_ack_move_tx(conn, guid, consumer, ST_ACK_RETRY, error, message, retry_text,
                                 &eb);
            now_stage = "delivery";
        } else if (failed) {
            err = st_ack_move_tx(conn, guid, consumer, ST_ACK_FAILED, error, message, NULL, &eb);
            now_stage = "failed";
        } else {
            int delivered = strcmp(stage, "delivered") == 0;
            err = st_ack_move_tx(conn, guid, consumer,
                                 delivered ? ST_ACK_DELIVERED : ST_ACK_PROCESSED, NULL, message,
                                 NULL, &eb);
            now_stage = delivered ? "processing" : "done";
        }
        if (err == ST_OK && failed) {
            json_t *detail = json_pack("{s:s, s:s, s:s?, s:O?}", "ack_guid", guid, "consumer", consumer,
                                       "error", error, "retry_at_ms", retry);
            err = st_notice_add_tx(conn, "ConsumerFailure", instance, NULL,
                                   error ? error : "the consumer reported a failure", detail, &eb);
            json_decref(detail);
        }
        if (err == ST_OK) {
            json_t *detail = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "ack_guid", guid,
                                       "consumer", consumer, "stage", stage, "outcome", outcome,
                                       "now", now_stage, "by", who->name);
            err = st_history_add_tx(conn, instance, "ack", detail, &eb);
            json_decref(detail);
        }
        /* A call's result goes back to the waiting instance. */
        if (err == ST_OK && is_call && (strcmp(now_stage, "done") == 0 ||
                                        strcmp(now_stage, "failed") == 0)) {
            st_signal_init(&sig, ST_SIGNAL_CALL_RESULT, instance, -1);
            snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", PQgetvalue(res, 0, 3));
            sig.payload = json_pack("{s:s, s:{s:b, s:O, s:s?}}", "ack_guid", guid, "result",
                                    "ok", !failed, "body",
                                    json_is_object(result) ? result : json_null(), "error", error);
            err = st_signal_enqueue_tx(conn, &sig, &eb);
        }
        if (err == ST_OK)
            err = st_pg_exec(conn, "NOTIFY " ST_WORK_CHANNEL, 0, NULL, NULL, &eb);
    }
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err == ST_OK)
        st_answer_set(out, 200, json_pack("{s:s, s:s, s:s, s:b}", "ack_guid", guid, "consumer",
                                          consumer, "stage", now_stage, "duplicate", noop));
done:
    if (out->status == 0)
        st_answer_error(out, err == ST_OK ? ST_ERR_INTERNAL : err, &eb);
    st_pg_rollback(conn);
    PQclear(res);
    st_signal_close(&sig);
}

void st_api_acks_register(st_api_t *api)
{
    st_api_route_command(api, "/v1/acks", st_cmd_ack);
}
