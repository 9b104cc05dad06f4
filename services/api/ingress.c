/* ingress.c - the Kafka ingress consumer (see ingress.h). */
#include "ingress.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "permissions.h"
#include "strand/kafka.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/notice.h"
#include "strand/pg.h"
#include "strand/proto/strand.pb-c.h"

struct st_ingress {
    st_service_t *svc;
    pthread_t thread;
    rd_kafka_t *consumer;
    PGconn *conn;
    const st_auth_t *auth;  /* borrowed from the API */
    int pg_up, kafka_up;   /* atomics */
    st_metric_t *m_accepted, *m_rejected;
};

/* The command for each CommandType; NULL where the type is not (yet) served. */
static st_cmd_fn command_for(Strand__V1__CommandType type)
{
    switch (type) {
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_START: return st_cmd_start;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL: return st_cmd_signal;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL_CORRELATED: return st_cmd_signal_correlated;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_CANCEL: return st_cmd_cancel;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TERMINATE: return st_cmd_terminate;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TASK_ASSIGN: return st_cmd_task_assign;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TASK_RELEASE: return st_cmd_task_release;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TASK_COMPLETE: return st_cmd_task_complete;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_ACK: return st_cmd_ack;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TRIGGER: return st_cmd_trigger;
    default: return NULL;
    }
}

static int ensure_pg(st_ingress_t *ing)
{
    if (ing->conn != NULL && st_pg_ensure(ing->conn)) {
        __atomic_store_n(&ing->pg_up, 1, __ATOMIC_RELEASE);
        return 1;
    }
    if (ing->conn != NULL)
        PQfinish(ing->conn);
    ing->conn = NULL;
    st_errbuf_t eb;
    int ok = st_pg_connect(ing->svc->cfg.pg_dsn, "strand-ingress", &ing->conn, &eb) == ST_OK &&
             st_api_session_setup(ing->conn, &eb) == ST_OK;
    __atomic_store_n(&ing->pg_up, ok, __ATOMIC_RELEASE);
    if (!ok)
        st_log_warn("ingress could not connect to PostgreSQL", "%s", eb.msg);
    return ok;
}

/* Records a refused message: notice + dead letter, one transaction. */
static st_err_t reject(st_ingress_t *ing, const rd_kafka_message_t *msg, const char *target,
                       const json_t *problem, st_errbuf_t *eb)
{
    const char *message = json_string_value(json_object_get(problem, "message"));
    if (target == NULL)   /* a refusal that names its instance (a trigger after the final state) */
        target = json_string_value(json_object_get(problem, "instance_id"));
    st_dead_letter_source_t src = {rd_kafka_topic_name(msg->rkt), msg->partition, msg->offset,
                                   target};
    st_err_t err = st_pg_begin(ing->conn, eb);
    if (err == ST_OK)
        err = st_notice_add_tx(ing->conn, "IngressRejected", target, NULL,
                               message ? message : "refused", problem, eb);
    if (err == ST_OK)
        err = st_dead_letter_add_tx(ing->conn, &src, message ? message : "refused", 1,
                                    ing->svc->cfg.node_id, msg->payload, msg->len, eb);
    if (err == ST_OK)
        err = st_pg_commit(ing->conn, eb);
    if (err != ST_OK)
        st_pg_rollback(ing->conn);
    else
        st_metric_inc(ing->m_rejected);
    return err;
}

/* Runs one message to an outcome that allows committing its offset; returns 0 if the
 * service stopped first. */
static int handle(st_ingress_t *ing, const rd_kafka_message_t *msg)
{
    int backoff_ms = 100;
    while (!st_service_stopping(ing->svc)) {
        if (!ensure_pg(ing)) {
            poll(NULL, 0, backoff_ms);
            backoff_ms = backoff_ms < 5000 ? backoff_ms * 2 : 5000;
            continue;
        }
        st_answer_t answer = {0};
        st_principal_t who;
        char target[64] = "";
        Strand__V1__IngressCommand *cmd =
            strand__v1__ingress_command__unpack(NULL, msg->len, msg->payload);
        st_cmd_fn fn = cmd ? command_for(cmd->type) : NULL;
        json_t *args = NULL;
        json_error_t jerr;
        if (cmd == NULL)
            st_answer_problem(&answer, 400, "invalid_message",
                              "the message is not a strand.v1.IngressCommand", NULL, NULL);
        else if (cmd->envelope_version != 1)
            st_answer_problem(&answer, 400, "invalid_message", "unknown envelope version",
                              "/envelope_version", NULL);
        else if (fn == NULL)
            st_answer_problem(&answer, 400, "invalid_message", "unknown command type", "/type",
                              NULL);
        else if ((args = cmd->args.len ? json_loadb((const char *)cmd->args.data, cmd->args.len,
                                                    JSON_REJECT_DUPLICATES, &jerr)
                                       : json_object()) == NULL ||
                 !json_is_object(args))
            st_answer_problem(&answer, 400, "invalid_json", "args must be a JSON object", "/args",
                              NULL);
        else if (st_auth_authenticate(ing->auth, cmd->token[0] ? cmd->token : NULL, &who) != ST_OK)
            st_answer_problem(&answer, 401, "unauthenticated",
                              "the command's token is missing or not known", "/token", NULL);
        else if (st_api_authorize_command(ing->conn, &who, cmd->type,
                                          cmd->target_id[0] ? cmd->target_id : NULL, args, &answer))
            fn(ing->conn, &who, cmd->target_id[0] ? cmd->target_id : NULL, args, &answer);
        if (cmd != NULL)
            snprintf(target, sizeof target, "%s", cmd->target_id);
        json_decref(args);
        if (cmd != NULL)
            strand__v1__ingress_command__free_unpacked(cmd, NULL);
        int status = answer.status;
        int done = 0;
        if (status >= 200 && status < 300) {
            st_metric_inc(ing->m_accepted);
            done = 1;
        } else if (status >= 400 && status < 500) {
            st_errbuf_t eb;
            if (reject(ing, msg, target[0] ? target : NULL, answer.body, &eb) == ST_OK)
                done = 1;
            else
                st_log_warn("could not record a refused ingress command", "%s", eb.msg);
        }
        st_answer_close(&answer);
        if (done)
            return 1;
        poll(NULL, 0, backoff_ms);   /* 5xx: PostgreSQL trouble; the same message again */
        backoff_ms = backoff_ms < 5000 ? backoff_ms * 2 : 5000;
    }
    return 0;
}

static void *ingress_main(void *arg)
{
    st_ingress_t *ing = arg;
    ensure_pg(ing);
    while (!st_service_stopping(ing->svc)) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(ing->consumer, 200);
        if (msg == NULL)
            continue;
        if (msg->err) {
            if (msg->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
                __atomic_store_n(&ing->kafka_up, 0, __ATOMIC_RELEASE);
            else if (msg->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                st_log_warn("ingress consumer error", "%s", rd_kafka_message_errstr(msg));
        } else {
            __atomic_store_n(&ing->kafka_up, 1, __ATOMIC_RELEASE);
            if (handle(ing, msg))
                rd_kafka_commit_message(ing->consumer, msg, 1);
        }
        rd_kafka_message_destroy(msg);
    }
    return NULL;
}

st_err_t st_ingress_start(st_service_t *svc, const st_auth_t *auth, st_ingress_t **out,
                          st_errbuf_t *eb)
{
    st_ingress_t *ing = calloc(1, sizeof *ing);
    if (ing == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the ingress consumer");
    ing->svc = svc;
    ing->auth = auth;
    ing->m_accepted = st_metrics_counter("strand_ingress_commands_total",
                                         "Ingress commands by outcome", "outcome=\"accepted\"");
    ing->m_rejected = st_metrics_counter("strand_ingress_commands_total",
                                         "Ingress commands by outcome", "outcome=\"rejected\"");
    char group[128];
    snprintf(group, sizeof group, "%singress", svc->cfg.topic_prefix);
    static const char *const topics[] = {ST_TOPIC_INGRESS, NULL};
    st_err_t err = st_kafka_consumer_new(&svc->cfg, group, topics, NULL, &ing->consumer, eb);
    if (err != ST_OK) {
        free(ing);
        return err;
    }
    __atomic_store_n(&ing->kafka_up, st_kafka_connected(ing->consumer), __ATOMIC_RELEASE);
    if (pthread_create(&ing->thread, NULL, ingress_main, ing) != 0) {
        rd_kafka_destroy(ing->consumer);
        free(ing);
        return st_err_set(eb, ST_ERR_INTERNAL, "could not start the ingress thread");
    }
    *out = ing;
    return ST_OK;
}

void st_ingress_stop(st_ingress_t *ing)
{
    if (ing == NULL)
        return;
    pthread_join(ing->thread, NULL);
    rd_kafka_consumer_close(ing->consumer);
    rd_kafka_destroy(ing->consumer);
    if (ing->conn != NULL)
        PQfinish(ing->conn);
    free(ing);
}

int st_ingress_ready(const st_ingress_t *ing)
{
    return ing != NULL && __atomic_load_n(&ing->pg_up, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&ing->kafka_up, __ATOMIC_ACQUIRE);
}
