/*
 * test_failover.c - an executor killed with -9 under load stops only its own partitions,
 * and only for about the session timeout (issue 15).
 *
 * Two executors share the signals topic (8 partitions). Twice the test starts N
 * instances (STRAND_FAILOVER_N, default 400) of a flow with a 300 ms durable timer at
 * a steady pace and kills one executor with -9 a third of the way in: the first time
 * it stays dead, the second time it is restarted at once with the same node id (a pod
 * restart). Each time it prints the longest time an instance took from start to
 * completion (the flow itself takes ~0.3 s, so this is the longest stall any instance
 * saw) and the longest gap between two consecutive completions, and asserts that every
 * instance completes and that the longest stall stays under a generous 30 s (the
 * target is under 10 s: the 6 s session timeout plus a rebalance; before, the broker's
 * 45 s default plus an eager rebalance that stopped the survivor too).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "harness.h"
#include "st_test.h"

static char def_name[64];
static int n_instances = 400;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Starts n_instances (business refs "<tag>-<i>") at ~25/s, kills replica 1 a third of
 * the way in (and with `restart` starts it again at once, with the same node id), waits
 * for all to complete and prints and returns the longest start-to-completion in ms. */
static long long run_phase(const char *tag, pid_t *replica, int restart)
{
    double started = now_s();
    int killed = 0;
    for (int i = 0; i < n_instances; i++) {
        if (!killed && i >= n_instances / 3) {
            it_kill9(*replica);
            killed = 1;
            printf("\n    %s: killed executor replica 1 (pid %d) after %d starts, at %.1f s", tag,
                   (int)*replica, i, now_s() - started);
            if (restart) {
                *replica = it_start_replica(IT_EXECUTOR, 1);
                CU_ASSERT(*replica > 0);
                printf("; restarted it at once (pid %d)", (int)*replica);
            }
            printf("\n");
        }
        char body[256];
        snprintf(body, sizeof body,
                 "{\"definition\":\"%s\",\"business_ref\":\"%s-%d\",\"input\":{\"n\":%d}}",
                 def_name, tag, i, i);
        CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances", body, NULL), 201);
        usleep(40 * 1000);   /* ~25 starts per second */
    }
    char sql[600], where[200];
    snprintf(where, sizeof where, "definition_name = '%s' AND business_ref LIKE '%s-%%'",
             def_name, tag);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE %s"
             " AND status = 'completed'", where);
    long long done = it_wait_number(sql, n_instances, 180);
    printf("    %s: %lld of %d instances completed, %.1f s after the first start\n", tag, done,
           n_instances, now_s() - started);
    CU_ASSERT_EQUAL(done, n_instances);
    snprintf(sql, sizeof sql, "SELECT (1000 * max(extract(epoch FROM ended_at - created_at)))::bigint"
             " FROM strand.instances WHERE %s", where);
    long long longest_ms = it_sql_number(sql);
    snprintf(sql, sizeof sql,
             "SELECT (1000 * coalesce(max(extract(epoch FROM gap)), 0))::bigint FROM (SELECT"
             " ended_at - lag(ended_at) OVER (ORDER BY ended_at) AS gap FROM strand.instances"
             " WHERE %s AND ended_at IS NOT NULL) g", where);
    long long gap_ms = it_sql_number(sql);
    snprintf(sql, sizeof sql, "SELECT (1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY"
             " extract(epoch FROM ended_at - created_at)))::bigint FROM strand.instances"
             " WHERE %s", where);
    long long median_ms = it_sql_number(sql);
    printf("    %s: longest start-to-completion %.1f s (median %.2f s); longest gap between"
           " completions %.1f s\n", tag, longest_ms / 1000.0, median_ms / 1000.0,
           gap_ms / 1000.0);
    return longest_ms;
}

static void test_failover(void)
{
    const char *n_env = getenv("STRAND_FAILOVER_N");
    if (n_env != NULL && atoi(n_env) > 0)
        n_instances = atoi(n_env);
    setenv("STRAND_TOPIC_PARTITIONS", "8", 1);
    CU_ASSERT_FATAL(it_start_all(90));
    pid_t replica = it_start_replica(IT_EXECUTOR, 1);
    CU_ASSERT_FATAL(replica > 0);
    snprintf(def_name, sizeof def_name, "failover_%d", (int)getpid());
    char doc[1024];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"greet\",\"type\":\"set\",\"values\":{\"n\":\"input.n\"}},"
             "{\"id\":\"pause\",\"type\":\"timer\",\"delay\":300},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"n\":\"state.n\"}}]}",
             def_name);
    CU_ASSERT_EQUAL_FATAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 201);
    /* Both executors in the group with their share of the partitions (cooperative
     * assignment takes two rounds). */
    sleep(10);
    /* A replica that dies and stays away: its partitions move to the survivor. */
    long long killed_ms = run_phase("killed", &replica, 0);
    CU_ASSERT(killed_ms >= 0 && killed_ms < 30000);

    /* A replica that dies and comes back at once (a pod restart). */
    replica = it_start_replica(IT_EXECUTOR, 1);
    CU_ASSERT_FATAL(replica > 0);
    sleep(10);
    long long restarted_ms = run_phase("restarted", &replica, 1);
    CU_ASSERT(restarted_ms >= 0 && restarted_ms < 30000);
}

/* Two processes with one node id: the broker fences the older static member; it says
 * why in its log and turns unready instead of consuming on as a zombie. */
static void test_duplicate_node_id_is_reported(void)
{
    char errstr[256], group[200], instance[200], topic[200];
    snprintf(group, sizeof group, "%sexecutor", it_topic_prefix());
    snprintf(instance, sizeof instance, "executor-executor-0");   /* the main executor's */
    snprintf(topic, sizeof topic, "%ssignals", it_topic_prefix());
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *settings[][2] = {
        {"bootstrap.servers", getenv("STRAND_KAFKA_BROKERS")}, {"group.id", group},
        {"group.instance.id", instance}, {"enable.auto.commit", "false"},
        {"partition.assignment.strategy", "cooperative-sticky"}, {"session.timeout.ms", "6000"},
    };
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        CU_ASSERT_EQUAL(rd_kafka_conf_set(conf, settings[i][0], settings[i][1], errstr,
                                          sizeof errstr), RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rk);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(subs, topic, RD_KAFKA_PARTITION_UA);
    CU_ASSERT_EQUAL(rd_kafka_subscribe(rk, subs), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(subs);
    int unready = 0;
    double started = now_s();
    while (!unready && now_s() - started < 40) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(rk, 200);
        if (msg != NULL)
            rd_kafka_message_destroy(msg);
        unready = it_http(IT_EXECUTOR, "GET", "/readyz", NULL, NULL) == 503;
    }
    printf("\n    duplicate node id: the fenced executor unready after %.1f s\n",
           now_s() - started);
    CU_ASSERT_TRUE(unready);
    rd_kafka_destroy(rk);
}

int main(void)
{
    if (!it_init("test_failover"))
        return 1;
    static const it_case_t cases[] = {
        {"two executors under load, one killed -9: a stall of seconds", test_failover},
        {"two processes with one node id: the fenced one is unready",
         test_duplicate_node_id_is_reported},
    };
    return it_run_suite("failover", cases, sizeof cases / sizeof cases[0]);
}
