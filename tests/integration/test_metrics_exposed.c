/*
 * test_metrics_exposed.c - the Grafana dashboard and the Prometheus alert rules under
 * deploy/ only use metrics that the services really expose.
 *
 * Starts the four services against the real stack, drives a small workload through
 * them (a flow start, a human task, a timer; a lifecycle trigger whose work event is
 * ACKed, one whose hook is never delivered and so is re-raised, given up and
 * dead-lettered; a rejected transition), captures every service's /metrics, and runs
 * scripts/check_metrics.py over deploy/grafana/strand-dashboard.json and
 * deploy/prometheus/strand-alerts.yaml. Also checks that the workload moved the
 * metrics it should (consumer lag too: it builds up while the executor is down and
 * drains when it is back), that the checker does fail on an unknown metric, and the one-shot
 * strand-admin tool used by the Kubernetes Jobs (migrate a fresh database, create
 * topics under a fresh prefix, bad usage).
 */
#include <libpq-fe.h>
#include <signal.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

static char flow_name[64], lc_name[64];
static char metrics_files[IT_NSERVICES][512];

static const char *log_dir(void)
{
    const char *d = getenv("STRAND_TEST_LOG_DIR");
    return d != NULL && *d != '\0' ? d : "/tmp";
}

static const char *src_dir(void)
{
    const char *d = getenv("STRAND_TEST_SRC_DIR");
    return d != NULL ? d : ".";
}

/* Runs a shell command; returns its exit status (or -1). */
static int run(const char *cmd)
{
    int rc = system(cmd);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_workload(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    char doc[2500], body[512], path[200], sql[512];
    json_t *answer = NULL;

    /* Flow: a human task, then a timer. */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"approver\"],"
             "  \"result\":\"approval\"},"
             "{\"id\":\"pause\",\"type\":\"timer\",\"delay\":200},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"ok\":\"state.approval.ok\"}}]}",
             flow_name);
    CU_ASSERT_EQUAL_FATAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 201);
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{}}", flow_name);
    CU_ASSERT_EQUAL_FATAL(it_http(IT_API, "POST", "/v1/instances", body, &answer), 201);
    char id[40];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(answer, "id")) ?: "");
    json_decref(answer);
    char *task = it_wait_open_task(NULL, id, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", task);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"result\":{\"ok\":true}}", NULL), 200);
    free(task);
    json_t *done = it_wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);

    /* Lifecycle: the transition's work event is ACKed; the hook's consumer never
     * answers, so it is re-raised once, then given up (a dead letter). */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"lifecycle\",\"name\":\"%s\",\"version\":1,\"env\":\"test\","
             "\"initial\":\"created\",\"states\":[{\"name\":\"created\"},{\"name\":\"paid\"},"
             "  {\"name\":\"shipped\",\"final\":true}],"
             "\"events\":[\"pay\",\"ship\"],"
             "\"transitions\":[{\"from\":\"created\",\"event\":\"pay\",\"to\":\"paid\"},"
             "  {\"from\":\"paid\",\"event\":\"ship\",\"to\":\"shipped\"}],"
             "\"transition_route\":\"app\","
             "\"routes\":{\"app\":{\"consumers\":[\"orders-app\"]},"
             "  \"billing\":{\"consumers\":[{\"consumer\":\"silent-billing\",\"delivery_timeout_s\":1,"
             "    \"max_raises\":1}]}},"
             "\"policies\":[{\"when\":{\"event\":\"pay\"},\"hooks\":[{\"code\":\"charge\","
             "  \"route\":\"billing\"}]}]}", lc_name);
    CU_ASSERT_EQUAL_FATAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 201);
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"external_ref\":\"m-1\",\"event\":\"ship\","
             "\"request_id\":\"m-r0\",\"actor\":\"clerk\",\"payload\":{}}", lc_name);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/triggers", body, NULL), 202); /* rejected */
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"external_ref\":\"m-1\",\"event\":\"pay\","
             "\"request_id\":\"m-r1\",\"actor\":\"clerk\",\"payload\":{}}", lc_name);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/triggers", body, NULL), 202);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.acks a JOIN strand.work_events w"
             " USING (ack_guid) JOIN strand.instances i ON i.id = w.instance_id"
             " WHERE i.definition_name = '%s' AND a.consumer = 'orders-app'",
             lc_name);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    snprintf(sql, sizeof sql, "SELECT a.ack_guid FROM strand.acks a JOIN strand.work_events w"
             " USING (ack_guid) JOIN strand.instances i ON i.id = w.instance_id"
             " WHERE i.definition_name = '%s' AND a.consumer = 'orders-app'",
             lc_name);
    char *guid = it_sql_text(sql);
    CU_ASSERT_PTR_NOT_NULL_FATAL(guid);
    snprintf(body, sizeof body, "{\"ack_guid\":\"%s\",\"consumer\":\"orders-app\","
             "\"stage\":\"delivered\"}", guid);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/acks", body, NULL), 200);
    free(guid);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.acks a JOIN strand.work_events w"
             " USING (ack_guid) JOIN strand.instances i ON i.id = w.instance_id"
             " WHERE i.definition_name = '%s' AND a.consumer = 'silent-billing'"
             " AND a.stage = 'failed'", lc_name);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);

    /* The metrics moved with the workload (counters live in the process that did it). */
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, "strand_signals_processed_total{outcome=\"applied\"}", -1) >= 3);
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, "strand_wakeup_duration_seconds_count", -1) >= 3);
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, "strand_pg_transactions_total{outcome=\"commit\"}", -1) >= 3);
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, "strand_pg_transaction_duration_seconds_count", -1) >= 3);
    CU_ASSERT_TRUE(it_metric(IT_SCHEDULER, "strand_timers_fired_total", -1) >= 1);
    CU_ASSERT_TRUE(it_metric(IT_SCHEDULER, "strand_timer_lateness_seconds_count", -1) >= 1);
    /* the batch loop's series exist from start-up (docs/operations.md) */
    CU_ASSERT_TRUE(it_metric(IT_SCHEDULER, "strand_batch_items_total{outcome=\"done\"}", -1) >= 0);
    CU_ASSERT_TRUE(it_metric(IT_SCHEDULER, "strand_batch_items_total{outcome=\"failed\"}", -1) >= 0);
    CU_ASSERT_TRUE(it_metric(IT_MONITOR, "strand_ack_raises_total{stage=\"delivery\"}", -1) >= 1);
    CU_ASSERT_TRUE(it_metric(IT_MONITOR, "strand_ack_failures_total", -1) >= 1);
    CU_ASSERT_TRUE(it_metric(IT_MONITOR, "strand_dead_letters_total", -1) >= 1);
    CU_ASSERT_TRUE(it_metric(IT_API, "strand_http_requests_total{route=\"/v1/acks\",method=\"POST\","
                                     "status=\"200\"}", -1) >= 1);
    /* Every service's relay claims from the one outbox table, so any of them may have
     * published the workload's rows. */
    double relayed = 0;
    for (int s = 0; s < IT_NSERVICES; s++)
        relayed += it_metric((it_service_t)s, "strand_outbox_relay_lag_seconds_count", -1);
    CU_ASSERT_TRUE(relayed >= 1);
    /* Consumer lag: the executor's group on its signals topic, 0 once it caught up. */
    char series[300];
    snprintf(series, sizeof series,
             "strand_kafka_consumer_lag_messages{group=\"%sexecutor\",topic=\"%ssignals\"}",
             it_topic_prefix(), it_topic_prefix());
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, series, -1) >= 0);
    /* The per-partition series appear with the lag thread's first round after the
     * assignment. */
    int partition_series = 0;
    for (int i = 0; i < 100 && !partition_series; i++) {
        char *text = NULL;
        it_http_text(IT_EXECUTOR, "/metrics", &text);
        partition_series = text && strstr(text, "strand_kafka_consumer_committed_offset{");
        free(text);
        if (!partition_series)
            usleep(100 * 1000);
    }
    CU_ASSERT_TRUE(partition_series);

    /* Capture every service's /metrics for the check below. */
    static const char *const names[IT_NSERVICES] = {"api", "executor", "scheduler", "monitor"};
    for (int s = 0; s < IT_NSERVICES; s++) {
        char *text = NULL;
        CU_ASSERT_EQUAL(it_http_text((it_service_t)s, "/metrics", &text), 200);
        snprintf(metrics_files[s], sizeof metrics_files[s], "%s/test_metrics_exposed-%s.prom",
                 log_dir(), names[s]);
        FILE *f = fopen(metrics_files[s], "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fputs(text ? text : "", f);
        fclose(f);
        free(text);
    }
}

/* Consumer lag is real: signals produced while the executor is down show up as lag
 * of its group once it is back, and drain to 0. */
static void test_consumer_lag(void)
{
    CU_ASSERT_EQUAL_FATAL(it_stop(IT_EXECUTOR, SIGTERM, 30), 0);
    char body[256];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{}}", flow_name);
    for (int i = 0; i < 40; i++)
        CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances", body, NULL), 201);
    /* The START signals are on Kafka once the API's relay published them. */
    CU_ASSERT_EQUAL(it_wait_number("SELECT (count(*) = 0)::int FROM strand.outbox"
                                   " WHERE topic = 'signals' AND published_at IS NULL", 1, 20), 1);
    setenv("STRAND_KAFKA_LAG_INTERVAL_MS", "100", 1);
    CU_ASSERT_TRUE_FATAL(it_start(IT_EXECUTOR) > 0);
    setenv("STRAND_KAFKA_LAG_INTERVAL_MS", "1000", 1);
    char series[300];
    snprintf(series, sizeof series,
             "strand_kafka_consumer_lag_messages{group=\"%sexecutor\",topic=\"%ssignals\"}",
             it_topic_prefix(), it_topic_prefix());
    double max_lag = -1, last = -1;
    time_t deadline = time(NULL) + 30;
    while (time(NULL) < deadline) {
        last = it_metric(IT_EXECUTOR, series, -1);
        if (last > max_lag)
            max_lag = last;
        if (max_lag > 0 && last == 0)
            break;
        usleep(20 * 1000);
    }
    printf(" (max lag %.0f, last %.0f) ", max_lag, last);
    CU_ASSERT_TRUE(max_lag > 0);
    CU_ASSERT_TRUE(last == 0);
}

static int check(const char *dashboard, const char *rules)
{
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "python3 %s/scripts/check_metrics.py", src_dir());
    if (dashboard)
        n += snprintf(cmd + n, sizeof cmd - n, " --dashboard %s", dashboard);
    if (rules)
        n += snprintf(cmd + n, sizeof cmd - n, " --rules %s", rules);
    for (int s = 0; s < IT_NSERVICES; s++)
        n += snprintf(cmd + n, sizeof cmd - n, " %s", metrics_files[s]);
    return run(cmd);
}

static void test_dashboard_and_alerts_use_exposed_metrics(void)
{
    char dashboard[600], rules[600];
    snprintf(dashboard, sizeof dashboard, "%s/deploy/grafana/strand-dashboard.json", src_dir());
    snprintf(rules, sizeof rules, "%s/deploy/prometheus/strand-alerts.yaml", src_dir());
    CU_ASSERT_EQUAL(run("python3 -c 'import yaml'"), 0);
    CU_ASSERT_EQUAL(check(dashboard, rules), 0);

    /* The checker is not a rubber stamp: an unknown metric, a histogram used
     * without _bucket and an unknown label all fail it. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/test_metrics_exposed-bad-rules.yaml", log_dir());
    FILE *f = fopen(bad, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("groups:\n- name: bad\n  rules:\n"
          "  - alert: Unknown\n    expr: rate(strand_no_such_metric_total[5m]) > 0\n"
          "    labels: {severity: warning}\n    annotations: {summary: x}\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(check(NULL, bad), 1);
    f = fopen(bad, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("groups:\n- name: bad\n  rules:\n"
          "  - alert: Bare\n    expr: rate(strand_wakeup_duration_seconds[5m]) > 0\n"
          "    labels: {severity: warning}\n    annotations: {summary: x}\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(check(NULL, bad), 1);
    f = fopen(bad, "w");   /* a label the metric does not carry */
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("groups:\n- name: bad\n  rules:\n"
          "  - alert: Label\n    expr: rate(strand_ack_raises_total{phase=\"delivery\"}[5m]) > 0\n"
          "    labels: {severity: warning}\n    annotations: {summary: x}\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(check(NULL, bad), 1);
}

/* Number of topics named `prefix*` the broker knows, or -1. */
static int count_topics(const char *prefix)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", getenv("STRAND_KAFKA_BROKERS"), errstr,
                      sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL)
        return -1;
    const struct rd_kafka_metadata *md = NULL;
    int count = -1;
    if (rd_kafka_metadata(rk, 1, NULL, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        count = 0;
        for (int i = 0; i < md->topic_cnt; i++)
            if (strncmp(md->topics[i].topic, prefix, strlen(prefix)) == 0 &&
                md->topics[i].partition_cnt == 2)
                count++;
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_destroy(rk);
    return count;
}

static void test_admin_one_shot(void)
{
    char cmd[2048], admin[600], dsn[700], adm_dsn[700], db[64];
    snprintf(admin, sizeof admin, "%s/services/admin/strand-admin", it_bin_dir());
    const char *logs = log_dir();

    /* Bad usage: exit 2, nothing done. */
    snprintf(cmd, sizeof cmd, "%s frobnicate 2>>%s/test_metrics_exposed-admin.log", admin, logs);
    CU_ASSERT_EQUAL(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s --wait-seconds soon migrate 2>>%s/test_metrics_exposed-admin.log",
             admin, logs);
    CU_ASSERT_EQUAL(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s 2>>%s/test_metrics_exposed-admin.log", admin, logs);
    CU_ASSERT_EQUAL(run(cmd), 2);
    /* Unreachable PostgreSQL, no waiting: exit 1, promptly. */
    time_t t0 = time(NULL);
    snprintf(cmd, sizeof cmd, "STRAND_PG_DSN='host=127.0.0.1 port=1 dbname=x user=x' %s"
             " --wait-seconds 0 migrate 2>>%s/test_metrics_exposed-admin.log", admin, logs);
    CU_ASSERT_EQUAL(run(cmd), 1);
    CU_ASSERT_TRUE(time(NULL) - t0 < 10);

    /* migrate: a fresh database gets the schema; a second run is a no-op. */
    snprintf(db, sizeof db, "strand_admin_%ld", (long)getpid());
    snprintf(adm_dsn, sizeof adm_dsn, "%s user=postgres dbname=postgres", getenv("STRAND_PG_DSN"));
    PGconn *conn = PQconnectdb(adm_dsn);
    CU_ASSERT_EQUAL_FATAL(PQstatus(conn), CONNECTION_OK);
    snprintf(cmd, sizeof cmd, "CREATE DATABASE %s OWNER strand", db);
    PGresult *res = PQexec(conn, cmd);
    CU_ASSERT_EQUAL(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    snprintf(dsn, sizeof dsn, "%s dbname=%s", getenv("STRAND_PG_DSN"), db);
    for (int round = 0; round < 2; round++) {
        snprintf(cmd, sizeof cmd, "STRAND_PG_DSN='%s' %s --wait-seconds 10 migrate"
                 " 2>>%s/test_metrics_exposed-admin.log", dsn, admin, logs);
        CU_ASSERT_EQUAL(run(cmd), 0);
    }
    PGconn *fresh = PQconnectdb(dsn);
    CU_ASSERT_EQUAL(PQstatus(fresh), CONNECTION_OK);
    res = PQexec(fresh, "SELECT (SELECT count(*) FROM strand.schema_migrations),"
                        " to_regclass('strand.instances') IS NOT NULL,"
                        " (SELECT count(*) FROM strand.schema_migrations)"
                        "   = (SELECT count(DISTINCT version) FROM strand.schema_migrations)");
    CU_ASSERT_EQUAL(PQresultStatus(res), PGRES_TUPLES_OK);
    if (PQresultStatus(res) == PGRES_TUPLES_OK) {
        CU_ASSERT_TRUE(atoi(PQgetvalue(res, 0, 0)) >= 1);
        CU_ASSERT_STRING_EQUAL(PQgetvalue(res, 0, 1), "t");
        CU_ASSERT_STRING_EQUAL(PQgetvalue(res, 0, 2), "t");
    }
    PQclear(res);
    PQfinish(fresh);
    snprintf(cmd, sizeof cmd, "DROP DATABASE IF EXISTS %s WITH (FORCE)", db);
    PQclear(PQexec(conn, cmd));
    PQfinish(conn);

    /* create-topics: a fresh prefix gets its topics with the asked partition count;
     * a second run is a no-op. */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "admin%ld.", (long)getpid());
    CU_ASSERT_EQUAL(count_topics(prefix), 0);
    for (int round = 0; round < 2; round++) {
        snprintf(cmd, sizeof cmd, "STRAND_TOPIC_PREFIX=%s STRAND_TOPIC_PARTITIONS=2"
                 " STRAND_TOPIC_REPLICATION=1 %s --wait-seconds 30 create-topics"
                 " 2>>%s/test_metrics_exposed-admin.log", prefix, admin, logs);
        CU_ASSERT_EQUAL(run(cmd), 0);
    }
    CU_ASSERT_TRUE(count_topics(prefix) >= 5);
}

int main(void)
{
    if (!it_init("test_metrics_exposed"))
        return 1;
    /* Consumer lag asked from the broker every second instead of every 5 s. */
    setenv("STRAND_KAFKA_LAG_INTERVAL_MS", "1000", 1);
    snprintf(flow_name, sizeof flow_name, "metrics-flow-%ld", (long)time(NULL));
    snprintf(lc_name, sizeof lc_name, "metrics-lc-%ld", (long)time(NULL));
    static const it_case_t cases[] = {
        {"workload through the four services", test_workload},
        {"dashboard and alert rules use exposed metrics", test_dashboard_and_alerts_use_exposed_metrics},
        {"consumer lag builds up and drains", test_consumer_lag},
        {"strand-admin migrate and create-topics", test_admin_one_shot},
    };
    return it_run_suite("metrics_exposed", cases, 4);
}
