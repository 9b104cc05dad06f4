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
    st_kafka_watch_t watch; /* last poll, stuck, lag */
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
    /* repair verbs (repair.c) */
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_RETRY: return st_cmd_retry;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_FAIL: return st_cmd_fail;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_PATCH_VARIABLES: return st_cmd_patch_variables;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_FIRE_TIMER: return st_cmd_fire_timer;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SKIP_WAIT: return st_cmd_skip_wait;
    /* ---- pause ---- */
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_PAUSE: return st_cmd_pause;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_RESUME: return st_cmd_resume;
    case STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_REWIND: return st_cmd_rewind;
    default: return NULL;
    }
}

static int ensure_pg(st_ingress_t *ing)
{
    st_errbuf_t eb;
    int ok = st_pg_reconnect(&ing->conn, ing->svc->cfg.pg_dsn, "strand-ingress",
                             st_api_session_setup, &eb) == ST_OK;
    __atomic_store_n(&ing->pg_up, ok, __ATOMIC_RELEASE);
    if (!ok)
        st_log_warn("ingress could not connect to PostgreSQL", "%s", eb.msg);
    return ok;
}

/* Records a refused message: notice + dead letter, one transaction. `stored` is what
 * the dead letter keeps (credentials already stripped). */
static st_err_t reject(st_ingress_t *ing, const rd_kafka_message_t *msg, const char *target,
                       const char *reason, const json_t *problem, const void *stored,
                       size_t stored_len, int attempts, st_errbuf_t *eb)
{
    if (target == NULL)   /* a refusal that names its instance (a trigger after the final state) */
        target = json_string_value(json_object_get(problem, "instance_id"));
    st_dead_letter_source_t src = {rd_kafka_topic_name(msg->rkt), msg->partition, msg->offset,
                                   target, NULL};
    st_err_t err = st_pg_begin(ing->conn, eb);
    if (err == ST_OK)
        err = st_notice_add_tx(ing->conn, "IngressRejected", target, NULL, reason, problem, eb);
    if (err == ST_OK)
        err = st_dead_letter_add_tx(ing->conn, &src, reason, attempts, ing->svc->cfg.node_id,
                                    stored, stored_len, eb);
    if (err == ST_OK)
        err = st_pg_commit(ing->conn, eb);
    if (err != ST_OK)
        st_pg_rollback(ing->conn);
    else
        st_metric_inc(ing->m_rejected);
    return err;
}

/* What one delivery of a message came to. */
typedef struct {
    st_answer_t answer;
    char target[64];
    uint8_t *stored;      /* the envelope re-encoded without its token; NULL: keep raw */
    size_t stored_len;
} attempt_t;

/* Reads a base-128 varint at *pos; returns 0 when it runs past `len`. */
static int read_varint(const uint8_t *buf, size_t len, size_t *pos, uint64_t *out)
{
    *out = 0;
    for (int shift = 0; shift < 64 && *pos < len; shift += 7) {
        uint8_t b = buf[(*pos)++];
        *out |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 1;
    }
    return 0;
}

/* True when every token field (IngressCommand field 5) on the wire is printable ASCII
 * without spaces, as an HTTP bearer token must be. protobuf-c hands the string over
 * NUL-terminated, so "good-token\0junk" would otherwise read as "good-token". */
static int wire_token_clean(const uint8_t *buf, size_t len)
{
    size_t pos = 0;
    while (pos < len) {
        uint64_t key, n;
        if (!read_varint(buf, len, &pos, &key))
            return 0;
        switch (key & 7) {
        case 0:
            if (!read_varint(buf, len, &pos, &n))
                return 0;
            break;
        case 1:
            pos += 8;
            break;
        case 5:
            pos += 4;
            break;
        case 2:
            if (!read_varint(buf, len, &pos, &n) || n > len - pos)
                return 0;
            if ((key >> 3) == 5)
                for (size_t i = pos; i < pos + n; i++)
                    if (buf[i] < 0x21 || buf[i] > 0x7e)
                        return 0;
            pos += n;
            break;
        default:
            return 0;
        }
    }
    return pos == len;
}

/* Decodes and runs the command once. An oversized message is refused unread; a decoded
 * one is re-encoded without its bearer token into a->stored, for a dead letter. */
static void run_once(st_ingress_t *ing, const rd_kafka_message_t *msg, attempt_t *a)
{
    size_t limit = (size_t)ing->svc->cfg.max_body_bytes;
    if (msg->len > limit) {
        char text[160];
        snprintf(text, sizeof text, "the message has %zu bytes, more than the limit of %zu",
                 msg->len, limit);
        st_answer_problem(&a->answer, 413, "message_too_large", text, NULL, NULL);
        free(a->stored);
        a->stored = calloc(1, 1);   /* unread, so kept empty: it may hold a token */
        a->stored_len = 0;
        return;
    }
    st_principal_t who;
    Strand__V1__IngressCommand *cmd =
        msg->len ? strand__v1__ingress_command__unpack(NULL, msg->len, msg->payload) : NULL;
    st_cmd_fn fn = cmd ? command_for(cmd->type) : NULL;
    json_t *args = NULL;
    json_error_t jerr;
    if (cmd == NULL)
        st_answer_problem(&a->answer, 400, "invalid_message",
                          msg->payload == NULL ? "the message has no value (a tombstone)"
                          : msg->len == 0     ? "the message is empty"
                                              : "the message is not a strand.v1.IngressCommand",
                          NULL, NULL);
    else if (cmd->envelope_version != 1)
        st_answer_problem(&a->answer, 400, "invalid_message", "unknown envelope version",
                          "/envelope_version", NULL);
    else if (fn == NULL)
        st_answer_problem(&a->answer, 400, "invalid_message", "unknown command type", "/type",
                          NULL);
    else if ((args = cmd->args.len ? json_loadb((const char *)cmd->args.data, cmd->args.len,
                                                JSON_REJECT_DUPLICATES, &jerr)
                                   : json_object()) == NULL ||
             !json_is_object(args))
        st_answer_problem(&a->answer, 400, "invalid_json", "args must be a JSON object", "/args",
                          NULL);
    else if ((st_auth_enabled(ing->auth) && !wire_token_clean(msg->payload, msg->len)) ||
             st_auth_authenticate(ing->auth, cmd->token[0] ? cmd->token : NULL, &who) != ST_OK)
        st_answer_problem(&a->answer, 401, "unauthenticated",
                          "the command's token is missing or not known", "/token", NULL);
    else if (!st_api_write_limit_take(who.name, 1, &a->answer))
        ;   /* 429 rate_limited: a dead letter (replayable) with that code, like any 4xx */
    else if (st_api_authorize_command(ing->conn, &who, cmd->type,
                                      cmd->target_id[0] ? cmd->target_id : NULL, args, &a->answer))
        fn(ing->conn, &who, cmd->target_id[0] ? cmd->target_id : NULL, args, &a->answer);
    json_decref(args);
    if (cmd == NULL)
        return;
    snprintf(a->target, sizeof a->target, "%s", cmd->target_id);
    /* The credential never reaches a dead letter, the dlq topic or a log. */
    free(a->stored);
    char *token = cmd->token;
    cmd->token = "";
    a->stored_len = strand__v1__ingress_command__get_packed_size(cmd);
    a->stored = malloc(a->stored_len ? a->stored_len : 1);
    if (a->stored != NULL)
        strand__v1__ingress_command__pack(cmd, a->stored);
    else
        a->stored_len = 0;
    cmd->token = token;
    strand__v1__ingress_command__free_unpacked(cmd, NULL);
}

/* Sleeps `*backoff_ms` (in slices, so a stop is seen) and doubles it up to 5 s. */
static void backoff_sleep(st_ingress_t *ing, int *backoff_ms)
{
    for (int waited = 0; waited < *backoff_ms && !st_service_stopping(ing->svc); waited += 50)
        poll(NULL, 0, 50);
    *backoff_ms = *backoff_ms < 5000 ? *backoff_ms * 2 : 5000;
}

/* Runs one message to an outcome that allows committing its offset; returns 0 if the
 * service stopped first. 2xx: done. 4xx, or 5xx on STRAND_MAX_ATTEMPTS deliveries with
 * PostgreSQL up: a dead letter and a notice. A dead-letter write that fails is retried
 * with backoff while the consumer reports itself stuck (unready, metric). */
static int handle(st_ingress_t *ing, const rd_kafka_message_t *msg)
{
    int backoff_ms = 100, attempts = 0, done = 0, held = 0;
    attempt_t a = {0};
    char reason[512] = "";
    /* Phase 1: the command itself. */
    while (!st_service_stopping(ing->svc)) {
        if (!ensure_pg(ing)) {
            backoff_sleep(ing, &backoff_ms);
            continue;
        }
        st_answer_close(&a.answer);
        memset(&a.answer, 0, sizeof a.answer);
        run_once(ing, msg, &a);
        attempts++;
        int status = a.answer.status;
        const char *message = json_string_value(json_object_get(a.answer.body, "message"));
        if (status >= 200 && status < 300) {
            st_metric_inc(ing->m_accepted);
            done = 1;
            break;
        }
        if (status >= 400 && status < 500) {
            snprintf(reason, sizeof reason, "%s", message ? message : "refused");
            break;
        }
        if (attempts >= ing->svc->cfg.max_attempts) {
            snprintf(reason, sizeof reason, "the command failed %d times (status %d): %s",
                     attempts, status, message ? message : "no message");
            break;
        }
        st_log_warn("ingress command failed, will retry", "topic=%s partition=%d offset=%lld "
                    "attempt=%d status=%d", rd_kafka_topic_name(msg->rkt), (int)msg->partition,
                    (long long)msg->offset, attempts, status);
        backoff_sleep(ing, &backoff_ms);
    }
    /* Phase 2: the dead letter, however long it takes; the offset waits for it. */
    backoff_ms = 100;
    while (!done && reason[0] != '\0' && !st_service_stopping(ing->svc)) {
        st_errbuf_t eb;
        if (ensure_pg(ing) &&
            reject(ing, msg, a.target[0] ? a.target : NULL, reason, a.answer.body,
                   a.stored ? (const void *)a.stored : msg->payload,
                   a.stored ? a.stored_len : msg->len, attempts, &eb) == ST_OK) {
            st_kafka_watch_dead_letter_done(&ing->watch, &held);
            done = 1;
            break;
        }
        st_kafka_watch_dead_letter_failed(&ing->watch, &held);
        st_log_error("could not record a refused ingress command, will retry",
                     "topic=%s partition=%d offset=%lld: %s", rd_kafka_topic_name(msg->rkt),
                     (int)msg->partition, (long long)msg->offset,
                     ing->conn ? eb.msg : "no PostgreSQL connection");
        backoff_sleep(ing, &backoff_ms);
    }
    st_kafka_watch_dead_letter_done(&ing->watch, &held);   /* stopped while stuck */
    st_answer_close(&a.answer);
    free(a.stored);
    return done;
}

static void *ingress_main(void *arg)
{
    st_ingress_t *ing = arg;
    ensure_pg(ing);
    while (!st_service_stopping(ing->svc)) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(ing->consumer, 200);
        st_kafka_watch_polled(&ing->watch);
        if (msg == NULL)
            continue;
        if (msg->err) {
            if (msg->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
                __atomic_store_n(&ing->kafka_up, 0, __ATOMIC_RELEASE);
            else if (!st_kafka_watch_error(&ing->watch, ing->consumer, msg->err) &&
                     msg->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
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
    st_kafka_watch_init(&ing->watch, &svc->cfg, group);
    st_kafka_consumer_opts_t opts = {.watch = &ing->watch};
    st_err_t err = st_kafka_consumer_new(&svc->cfg, group, topics, &opts, &ing->consumer, eb);
    if (err != ST_OK) {
        free(ing);
        return err;
    }
    __atomic_store_n(&ing->kafka_up, st_kafka_connected(ing->consumer), __ATOMIC_RELEASE);
    if (pthread_create(&ing->thread, NULL, ingress_main, ing) != 0) {
        st_kafka_consumer_free(ing->consumer);
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
    st_kafka_consumer_free(ing->consumer);
    if (ing->conn != NULL)
        PQfinish(ing->conn);
    free(ing);
}

int st_ingress_ready(const st_ingress_t *ing)
{
    return ing != NULL && __atomic_load_n(&ing->pg_up, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&ing->kafka_up, __ATOMIC_ACQUIRE) && st_kafka_watch_ready(&ing->watch);
}
