/* test_kafka_lag.c - a watched consumer is freed without waiting for the consumer-lag
 * thread's watermark query (librdkafka's mock cluster, for fault injection).
 *
 * librdkafka 2.0.2's rd_kafka_query_watermark_offsets() ignores its timeout and waits
 * until the partition's broker answers, or, broker gone, for as long as it is gone. The
 * lag thread held the lock that st_kafka_consumer_free() takes through that query, so a
 * stop waited for the broker (the executor's, for good, with the broker frozen). Here
 * the partitions' leader, broker 2, answers ListOffsets (the watermark query) 20 s late;
 * the group's coordinator, broker 1, answers at once. Before the fix the free took the
 * 20 s; now the lag thread asks through a client of its own, outside the lock. */
#include "st_test.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "strand/config.h"
#include "strand/kafka.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int assigned(rd_kafka_t *rk)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    int n = rd_kafka_assignment(rk, &parts) == RD_KAFKA_RESP_ERR_NO_ERROR && parts != NULL
                ? parts->cnt : 0;
    if (parts != NULL)
        rd_kafka_topic_partition_list_destroy(parts);
    return n;
}

static void poll_for(rd_kafka_t *rk, int ms)
{
    for (int waited = 0; waited < ms; waited += 100) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(rk, 100);
        if (msg != NULL)
            rd_kafka_message_destroy(msg);
    }
}

static void test_free_does_not_wait_for_a_watermark_query(void)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    CU_ASSERT_EQUAL_FATAL(rd_kafka_conf_set(conf, "test.mock.num.brokers", "2", errstr,
                                            sizeof errstr), RD_KAFKA_CONF_OK);
    rd_kafka_t *owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(owner);
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(owner);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mc);
    CU_ASSERT_EQUAL_FATAL(rd_kafka_mock_topic_create(mc, "signals", 1, 1),
                          RD_KAFKA_RESP_ERR_NO_ERROR);
    CU_ASSERT_EQUAL(rd_kafka_mock_partition_set_leader(mc, "signals", 0, 2),
                    RD_KAFKA_RESP_ERR_NO_ERROR);
    CU_ASSERT_EQUAL(rd_kafka_mock_coordinator_set(mc, "group", "lag-test", 1),
                    RD_KAFKA_RESP_ERR_NO_ERROR);
    setenv("STRAND_KAFKA_BROKERS", rd_kafka_mock_cluster_bootstraps(mc), 1);
    setenv("STRAND_KAFKA_LAG_INTERVAL_MS", "100", 1);
    st_config_t cfg;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_config_load(&cfg, "executor", 8081, &eb), ST_OK);
    static const char *const topics[] = {"signals", NULL};
    static st_kafka_watch_t watch;
    st_kafka_watch_init(&watch, &cfg, "lag-test");
    st_kafka_consumer_opts_t opts = {.watch = &watch};
    rd_kafka_t *rk = NULL;
    CU_ASSERT_EQUAL_FATAL(st_kafka_consumer_new(&cfg, "lag-test", topics, &opts, &rk, &eb),
                          ST_OK);
    for (int i = 0; i < 300 && !assigned(rk); i++)
        poll_for(rk, 100);
    CU_ASSERT_TRUE_FATAL(assigned(rk) > 0);
    poll_for(rk, 2000);   /* the consumer's own offset lookups are done */

    enum { LIST_OFFSETS = 2, SLOW_MS = 20000 };
    CU_ASSERT_EQUAL_FATAL(rd_kafka_mock_broker_push_request_error_rtts(
                              mc, 2, LIST_OFFSETS, 2, RD_KAFKA_RESP_ERR_NO_ERROR, SLOW_MS,
                              RD_KAFKA_RESP_ERR_NO_ERROR, SLOW_MS),
                          RD_KAFKA_RESP_ERR_NO_ERROR);
    poll_for(rk, 1000);   /* a lag round is now waiting for broker 2 */
    double t0 = now_s();
    st_kafka_consumer_free(rk);
    double took = now_s() - t0;
    fprintf(stderr, "\nkafka_lag: watched consumer freed in %.1f s during a %d ms watermark query\n",
            took, SLOW_MS);
    CU_ASSERT_TRUE(took < SLOW_MS / 2000.0);
    unsetenv("STRAND_KAFKA_LAG_INTERVAL_MS");
    rd_kafka_destroy(owner);
}

ST_TEST_MAIN("kafka_lag", ST_TEST(test_free_does_not_wait_for_a_watermark_query))
