/*
 * test_kafka_acl.c - the internal topics are closed (issue 21, item 5).
 *
 * Part 1, on the shared plain broker (no ACLs, as an attacker on an open topic sees it):
 * messages produced straight onto <prefix>signals, not through Strand's outbox, change
 * nothing. A TASK_COMPLETED whose result fails the step's result_schema is refused
 * (dead letter + SignalRefused notice) and the task stays open; a TERMINATE without
 * Strand's record of it does not end the instance. Afterwards the API still completes
 * and terminates them.
 *
 * Part 2, on a second broker this test starts with scripts/stack.sh (own directory and
 * ports, STRAND_KAFKA_SASL=1: SCRAM-SHA-512 and ACLs) and stops at exit: Strand's
 * services run end to end with their SASL principal; the application principal may
 * produce to <prefix>ingress (a START that completes) but is refused <prefix>signals
 * (topic authorization failed), may read <prefix>notices with a group <prefix>app.* but
 * not with Strand's group, and may not read <prefix>signals; a client with a wrong
 * password or none cannot connect.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>

#include "harness.h"
#include "st_test.h"
#include "strand/proto/strand.pb-c.h"
#include "strand/signal.h"
#include "strand/util.h"

static char suffix[48];
static char task_flow[96], quick_flow[96];
static char sasl_dir[256];
static int sasl_port;

/* ---- helpers ----------------------------------------------------------------------- */

/* One query's first value as text into `out` ("" on no row or error). */
static void sql_text(const char *sql, char *out, size_t len)
{
    out[0] = '\0';
    PGconn *conn = PQconnectdb(getenv("STRAND_PG_DSN"));
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0)
        snprintf(out, len, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    PQfinish(conn);
}

typedef struct {
    rd_kafka_resp_err_t delivery;   /* the message's delivery report */
    int delivered;                  /* 1 once a report came */
    rd_kafka_resp_err_t client_err; /* last error_cb error (e.g. __AUTHENTICATION) */
} produce_result_t;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    produce_result_t *r = opaque;
    r->delivery = m->err;
    r->delivered = 1;
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    produce_result_t *r = opaque;
    r->client_err = (rd_kafka_resp_err_t)err;
    fprintf(stderr, "  (client error: %s: %s)\n", rd_kafka_err2name(err), reason);
}

/* Produces `bytes` to `topic` (full name) on `brokers` as an outside producer would,
 * with SASL (the stack's mechanism) when `user` is not NULL (NULL password: none set), and waits
 * for the delivery report (bounded by a 15 s message timeout). Returns the report's
 * error; RD_KAFKA_RESP_ERR__FAIL if the client could not be made. */
static rd_kafka_resp_err_t produce_raw(const char *brokers, const char *user, const char *password,
                                       const char *topic, const char *key, const void *bytes,
                                       size_t len, produce_result_t *r)
{
    memset(r, 0, sizeof *r);
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "message.timeout.ms", "15000", errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "enable.idempotence", "false", errstr, sizeof errstr);
    if (user != NULL) {
        rd_kafka_conf_set(conf, "security.protocol", "SASL_PLAINTEXT", errstr, sizeof errstr);
        const char *mechanism = getenv("STRAND_KAFKA_SASL_MECHANISM");   /* from stack.sh env */
        rd_kafka_conf_set(conf, "sasl.mechanism", mechanism ? mechanism : "SCRAM-SHA-512", errstr,
                          sizeof errstr);
        rd_kafka_conf_set(conf, "sasl.username", user, errstr, sizeof errstr);
        rd_kafka_conf_set(conf, "sasl.password", password ? password : "", errstr, sizeof errstr);
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_opaque(conf, r);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "could not create a producer: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return RD_KAFKA_RESP_ERR__FAIL;
    }
    rd_kafka_resp_err_t err = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
        RD_KAFKA_V_VALUE((void *)bytes, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        time_t deadline = time(NULL) + 30;
        while (!r->delivered && time(NULL) < deadline)
            rd_kafka_poll(rk, 100);
        err = r->delivered ? r->delivery : RD_KAFKA_RESP_ERR__TIMED_OUT;
    }
    rd_kafka_destroy(rk);
    return err;
}

/* Produces `sig` straight onto this test's signals topic of the shared broker. */
static int forge(const st_signal_t *sig)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    st_errbuf_t eb;
    if (st_signal_encode(sig, &buf, &len, &eb) != ST_OK)
        return 0;
    char topic[160];
    snprintf(topic, sizeof topic, "%ssignals", it_topic_prefix());
    produce_result_t r;
    rd_kafka_resp_err_t err = produce_raw(getenv("STRAND_KAFKA_BROKERS"), NULL, NULL, topic,
                                          sig->instance_id, buf, len, &r);
    free(buf);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        fprintf(stderr, "forged signal not produced: %s\n", rd_kafka_err2name(err));
    return err == RD_KAFKA_RESP_ERR_NO_ERROR;
}


/* ---- part 1: forged signals on an open topic ---------------------------------------- */

static void test_setup(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    char doc[2048];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve\",\"result\":\"approval\","
             " \"result_schema\":{\"type\":\"object\",\"required\":[\"approved\"],"
             "  \"properties\":{\"approved\":{\"type\":\"boolean\"}}}},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"ok\":\"state.approval.approved\"}}]}",
             task_flow);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 201);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"twice\",\"type\":\"set\",\"values\":{\"n\":\"2 * 21\"}},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"n\":\"state.n\"}}]}",
             quick_flow);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 201);
}

static void test_forged_task_completion_refused(void)
{
    char *id = it_start_instance(NULL, task_flow, "{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char *task = it_wait_open_task(NULL, id, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    char sql[512], token[120];
    snprintf(sql, sizeof sql, "SELECT waiting_token FROM strand.tasks WHERE id = '%s'", task);
    sql_text(sql, token, sizeof token);
    CU_ASSERT_FATAL(token[0] != '\0');

    /* The right token and task, a result the schema rejects ("approved" not boolean). */
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_TASK_COMPLETED, id, -1);
    snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", token);
    sig.payload = json_pack("{s:s, s:{s:s}, s:s}", "task_id", task, "result", "approved", "yes",
                            "actor", "mallory");
    CU_ASSERT_FATAL(forge(&sig));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE instance_id = '%s'"
             " AND reason LIKE '%%result_schema%%'", id);
    long long dead = it_wait_number(sql, 1, 30);
    printf("\n  forged TASK_COMPLETED (bad result): dead letters %lld\n", dead);
    CU_ASSERT_EQUAL(dead, 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND status = 'open'",
             task);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    char status[32];
    snprintf(sql, sizeof sql, "SELECT status FROM strand.instances WHERE id = '%s'", id);
    sql_text(sql, status, sizeof status);
    printf("  instance status after it: %s\n", status);
    CU_ASSERT_STRING_NOT_EQUAL(status, "completed");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE signal_id = '%s'",
             sig.signal_id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE key = '%s'"
             " AND topic = 'notices'", id);
    CU_ASSERT_TRUE(it_sql_number(sql) >= 1);   /* SignalRefused */
    st_signal_close(&sig);

    /* The same forgery with a result that conforms: the task is open, Strand recorded no
     * completion, so it is refused as well. */
    st_signal_init(&sig, ST_SIGNAL_TASK_COMPLETED, id, -1);
    snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", token);
    sig.payload = json_pack("{s:s, s:{s:b}}", "task_id", task, "result", "approved", 1);
    CU_ASSERT_FATAL(forge(&sig));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, 30), 2);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND status = 'open'",
             task);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    st_signal_close(&sig);

    /* The task is still consistent: the API completes it and the instance with it. */
    char path[160];
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", task);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"result\":{\"approved\":false}}", NULL), 200);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    CU_ASSERT_TRUE(json_is_false(json_object_get(json_object_get(done, "output"), "ok")));
    json_decref(done);
    free(task);
    free(id);
}

static void test_forged_terminate_refused(void)
{
    char *id = it_start_instance(NULL, task_flow, "{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char *task = it_wait_open_task(NULL, id, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_TERMINATE, id, -1);
    sig.payload = json_pack("{s:s}", "reason", "forged");
    CU_ASSERT_FATAL(forge(&sig));
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE instance_id = '%s'"
             " AND reason LIKE 'TERMINATE signal %s refused%%'", id, sig.signal_id);
    long long dead = it_wait_number(sql, 1, 30);
    char status[32];
    snprintf(sql, sizeof sql, "SELECT status FROM strand.instances WHERE id = '%s'", id);
    sql_text(sql, status, sizeof status);
    printf("\n  forged TERMINATE: dead letters %lld, instance status %s\n", dead, status);
    CU_ASSERT_EQUAL(dead, 1);
    CU_ASSERT_STRING_NOT_EQUAL(status, "terminated");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND status = 'open'",
             task);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* a forger does not get to write the instance's last_error either */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.runtime_states WHERE instance_id = '%s'"
             " AND last_error IS NULL AND last_error_code IS NULL", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    st_signal_close(&sig);

    /* Through the API (an admin: authentication is off) it ends the instance. */
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s/terminate", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"reason\":\"admin\"}", NULL), 202);
    json_t *done = it_wait_instance(id, "terminated", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.control_signals WHERE instance_id = '%s'",
             id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);   /* the record was taken as it was applied */
    free(task);
    free(id);
}

/* ---- part 2: a SASL broker with ACLs --------------------------------------------------- */

/* Runs scripts/stack.sh `args` against the SASL broker's directory and ports. */
static int sasl_stack(const char *args)
{
    const char *src = getenv("STRAND_TEST_SRC_DIR");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "STRAND_STACK_DIR='%s' STRAND_KAFKA_PORT=%d STRAND_KAFKA_SASL=1 STRAND_KAFKA_HEAP=384m "
             "STRAND_TOPIC_PREFIX='%s' '%s/scripts/stack.sh' %s",
             sasl_dir, sasl_port, it_topic_prefix(), src ? src : ".", args);
    return system(cmd);
}

static void stop_sasl_broker(void)
{
    if (sasl_dir[0] == '\0')
        return;
    sasl_stack("stop kafka >/dev/null 2>&1");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sasl_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", sasl_dir);
    sasl_dir[0] = '\0';
}

/* `scripts/stack.sh env` of the SASL broker (caller frees), or NULL. */
static char *sasl_stack_env(void)
{
    const char *src = getenv("STRAND_TEST_SRC_DIR");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "STRAND_STACK_DIR='%s' STRAND_KAFKA_PORT=%d '%s/scripts/stack.sh' env",
             sasl_dir, sasl_port, src ? src : ".");
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return NULL;
    char *text = calloc(1, 8192);
    size_t n = text ? fread(text, 1, 8191, p) : 0;
    (void)n;
    pclose(p);
    return text;
}

/* The value of `export NAME=value` in `env` (caller frees), or NULL. */
static char *env_value(const char *env, const char *name)
{
    char needle[128];
    snprintf(needle, sizeof needle, "export %s=", name);
    const char *p = strstr(env, needle);
    if (p == NULL)
        return NULL;
    p += strlen(needle);
    size_t len = strcspn(p, "\n");
    if (len >= 2 && p[0] == '"' && p[len - 1] == '"')
        p++, len -= 2;
    return strndup(p, len);
}

static char app_password[128], brokers[64];

static void test_sasl_broker_start(void)
{
    CU_ASSERT_FATAL(it_stop_all());
    const char *base = getenv("STRAND_TEST_PORT_BASE");
    sasl_port = (base ? atoi(base) : 18080) + 60;
    snprintf(sasl_dir, sizeof sasl_dir, "/tmp/strand-sasl-XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(sasl_dir));
    atexit(stop_sasl_broker);
    time_t started = time(NULL);
    int rc = sasl_stack("start kafka");
    printf("\n  SASL broker on port %d started in %ld s (rc %d)\n", sasl_port,
           (long)(time(NULL) - started), rc);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    char *env = sasl_stack_env();
    CU_ASSERT_PTR_NOT_NULL_FATAL(env);
    static const char *const names[] = {"STRAND_KAFKA_BROKERS", "STRAND_KAFKA_SECURITY_PROTOCOL",
                                        "STRAND_KAFKA_SASL_MECHANISM", "STRAND_KAFKA_SASL_USERNAME",
                                        "STRAND_KAFKA_SASL_PASSWORD"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *v = env_value(env, names[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        setenv(names[i], v, 1);   /* the services started next inherit them */
        free(v);
    }
    printf("  services and clients use SASL mechanism %s\n", getenv("STRAND_KAFKA_SASL_MECHANISM"));
    char *v = env_value(env, "STRAND_STACK_KAFKA_APP_PASSWORD");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    snprintf(app_password, sizeof app_password, "%s", v);
    free(v);
    snprintf(brokers, sizeof brokers, "%s", getenv("STRAND_KAFKA_BROKERS"));
    free(env);
}

static void test_services_work_with_sasl(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    char *id = it_start_instance(NULL, quick_flow, "{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(done, "output"), "n")), 42);
    json_decref(done);
    free(id);
}

static void test_app_principal(void)
{
    char topic[160];
    produce_result_t r;
    /* The application principal may produce commands to ingress: a START that runs. */
    char args[256], ref[64];
    snprintf(ref, sizeof ref, "acl-%s", suffix);
    snprintf(args, sizeof args, "{\"definition\":\"%s\",\"input\":{},\"business_ref\":\"%s\"}",
             quick_flow, ref);
    uint8_t buf[1024];
    size_t len = it_pack_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_START, NULL, NULL, args, buf,
                                 sizeof buf);
    CU_ASSERT_FATAL(len > 0);
    snprintf(topic, sizeof topic, "%singress", it_topic_prefix());
    rd_kafka_resp_err_t err = produce_raw(brokers, "app", app_password, topic, ref, buf, len, &r);
    printf("\n  app -> %s: %s\n", topic, rd_kafka_err2name(err));
    CU_ASSERT_EQUAL(err, RD_KAFKA_RESP_ERR_NO_ERROR);
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE business_ref = '%s'"
             " AND status = 'completed'", ref);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 60), 1);

    /* ...but not signals: a forged TERMINATE is refused by the broker. */
    char *victim = it_start_instance(NULL, task_flow, "{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(victim);
    char *task = it_wait_open_task(NULL, victim, 30);
    CU_ASSERT_PTR_NOT_NULL(task);
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_TERMINATE, victim, -1);
    uint8_t *bytes = NULL;
    size_t blen = 0;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_signal_encode(&sig, &bytes, &blen, &eb), ST_OK);
    snprintf(topic, sizeof topic, "%ssignals", it_topic_prefix());
    err = produce_raw(brokers, "app", app_password, topic, victim, bytes, blen, &r);
    printf("  app -> %s: %s\n", topic, rd_kafka_err2name(err));
    CU_ASSERT_EQUAL(err, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);

    /* A wrong password and no credentials at all: no connection, nothing delivered. */
    err = produce_raw(brokers, "app", "wrong-password", topic, victim, bytes, blen, &r);
    printf("  wrong password -> %s: %s (client error %s)\n", topic, rd_kafka_err2name(err),
           rd_kafka_err2name(r.client_err));
    CU_ASSERT_NOT_EQUAL(err, RD_KAFKA_RESP_ERR_NO_ERROR);
    CU_ASSERT_EQUAL(r.client_err, RD_KAFKA_RESP_ERR__AUTHENTICATION);
    err = produce_raw(brokers, NULL, NULL, topic, victim, bytes, blen, &r);
    printf("  no credentials -> %s: %s (client error %s)\n", topic, rd_kafka_err2name(err),
           rd_kafka_err2name(r.client_err));
    CU_ASSERT_NOT_EQUAL(err, RD_KAFKA_RESP_ERR_NO_ERROR);
    free(bytes);
    st_signal_close(&sig);

    char status[32];
    snprintf(sql, sizeof sql, "SELECT status FROM strand.instances WHERE id = '%s'", victim);
    sql_text(sql, status, sizeof status);
    CU_ASSERT_STRING_NOT_EQUAL(status, "terminated");
    free(task);
    free(victim);
}

/* Subscribes to `topic` (full name) with consumer group `group` as the app principal
 * and polls up to 20 s: returns the first error the consumer reports, or NO_ERROR once
 * it has been assigned partitions (it may read). */
static rd_kafka_resp_err_t consume_as_app(const char *topic, const char *group)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *mechanism = getenv("STRAND_KAFKA_SASL_MECHANISM");
    rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "security.protocol", "SASL_PLAINTEXT", errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "sasl.mechanism", mechanism ? mechanism : "SCRAM-SHA-512", errstr,
                      sizeof errstr);
    rd_kafka_conf_set(conf, "sasl.username", "app", errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "sasl.password", app_password, errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return RD_KAFKA_RESP_ERR__FAIL;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    time_t deadline = time(NULL) + 20;
    int done = err != RD_KAFKA_RESP_ERR_NO_ERROR;
    while (!done && time(NULL) < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (m != NULL) {
            if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                err = m->err;
                done = 1;
            }
            rd_kafka_message_destroy(m);
        }
        rd_kafka_topic_partition_list_t *assigned = NULL;
        if (!done && rd_kafka_assignment(rk, &assigned) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            done = assigned->cnt > 0;
            rd_kafka_topic_partition_list_destroy(assigned);
        }
    }
    if (!done)
        err = RD_KAFKA_RESP_ERR__TIMED_OUT;
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return err;
}

static void test_app_consumers(void)
{
    char topic[160], group[160], bad_group[160];
    const char *prefix = it_topic_prefix();
    snprintf(group, sizeof group, "%sapp.test", prefix);
    snprintf(bad_group, sizeof bad_group, "%sexecutor", prefix);
    snprintf(topic, sizeof topic, "%snotices", prefix);
    rd_kafka_resp_err_t err = consume_as_app(topic, group);
    printf("\n  app reads %s as %s: %s\n", topic, group, rd_kafka_err2name(err));
    CU_ASSERT_EQUAL(err, RD_KAFKA_RESP_ERR_NO_ERROR);
    err = consume_as_app(topic, bad_group);   /* Strand's group: taking partitions away */
    printf("  app reads %s as %s: %s\n", topic, bad_group, rd_kafka_err2name(err));
    CU_ASSERT_EQUAL(err, RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED);
    snprintf(topic, sizeof topic, "%ssignals", prefix);
    err = consume_as_app(topic, group);
    printf("  app reads %s as %s: %s\n", topic, group, rd_kafka_err2name(err));
    CU_ASSERT_EQUAL(err, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
}

static void test_stop(void)
{
    CU_ASSERT_TRUE(it_stop_all());
    stop_sasl_broker();
}

int main(void)
{
    if (!it_init("test_kafka_acl"))
        return 1;
    signal(SIGPIPE, SIG_IGN);
    snprintf(suffix, sizeof suffix, "%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(task_flow, sizeof task_flow, "acl-task-%s", suffix);
    snprintf(quick_flow, sizeof quick_flow, "acl-quick-%s", suffix);
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"a forged TASK_COMPLETED is refused and the task stays open",
         test_forged_task_completion_refused},
        {"a forged TERMINATE does not end the instance", test_forged_terminate_refused},
        {"a SASL/SCRAM broker with ACLs", test_sasl_broker_start},
        {"the services run end to end with SASL", test_services_work_with_sasl},
        {"the app principal: ingress yes, signals no; no credentials, no connection",
         test_app_principal},
        {"the app principal reads notices with its own groups only, never signals",
         test_app_consumers},
        {"stop", test_stop},
    };
    return it_run_suite("kafka_acl", cases, (int)(sizeof cases / sizeof cases[0]));
}
