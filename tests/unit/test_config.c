/* test_config.c - environment configuration: defaults and clear errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "st_test.h"
#include "strand/config.h"
#include "strand/kafka.h"

static void clear_env(void)
{
    const char *vars[] = {"STRAND_PG_DSN", "STRAND_HTTP_PORT", "STRAND_LOG_LEVEL",
                          "STRAND_REDIS_URL", "STRAND_TOPIC_PREFIX", "STRAND_MAX_ATTEMPTS",
                          "STRAND_KAFKA_BROKERS", "STRAND_RECOVERY_INTERVAL_S",
                          "STRAND_RECOVERY_BATCH", "STRAND_RECOVERY_GRACE_S",
                          "STRAND_WAKE_NOTIFY", "STRAND_WAIT_RECHECK_MS",
                          "STRAND_API_WORKERS", "STRAND_API_START_GROUP_MAX",
                          "STRAND_API_START_LANES", "STRAND_API_REQUEST_TIMEOUT_MS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void test_defaults(void)
{
    clear_env();
    st_config_t cfg;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_config_load(&cfg, "api", 8080, &eb), ST_OK);
    CU_ASSERT_EQUAL(cfg.http_port, 8080);
    CU_ASSERT_STRING_EQUAL(cfg.topic_prefix, "strand.");
    CU_ASSERT_STRING_EQUAL(cfg.redis_url, "");
    CU_ASSERT_EQUAL(cfg.max_attempts, 5);
    CU_ASSERT_EQUAL(cfg.dedup_retention_s, 7 * 86400);
    CU_ASSERT_EQUAL(cfg.recovery_interval_s, 60);
    CU_ASSERT_EQUAL(cfg.recovery_batch, 10000);
    CU_ASSERT_EQUAL(cfg.recovery_grace_s, 120);
    CU_ASSERT_EQUAL(cfg.kafka_session_timeout_ms, 6000);
    CU_ASSERT_EQUAL(cfg.consumer_poll_limit_ms, 30000);
    CU_ASSERT_EQUAL(cfg.kafka_lag_interval_ms, 5000);
    CU_ASSERT_STRING_EQUAL(cfg.wake_notify, "fallback");
    CU_ASSERT_EQUAL(cfg.wait_recheck_ms, 250);
    CU_ASSERT_EQUAL(cfg.api_workers, 8);
    CU_ASSERT_EQUAL(cfg.api_start_group_max, 32);
    CU_ASSERT_EQUAL(cfg.api_start_lanes, 2);
    CU_ASSERT_EQUAL(cfg.api_request_timeout_ms, 10000);
    char topic[64];
    CU_ASSERT_STRING_EQUAL(st_config_topic(&cfg, "signals", topic, sizeof topic),
                           "strand.signals");
}

static void test_overrides(void)
{
    clear_env();
    setenv("STRAND_HTTP_PORT", "9999", 1);
    setenv("STRAND_TOPIC_PREFIX", "t1.", 1);
    st_config_t cfg;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_config_load(&cfg, "executor", 8081, &eb), ST_OK);
    CU_ASSERT_EQUAL(cfg.http_port, 9999);
    CU_ASSERT_STRING_EQUAL(cfg.topic_prefix, "t1.");
    clear_env();
}

static void test_rejects_bad_values(void)
{
    st_config_t cfg;
    st_errbuf_t eb;
    clear_env();
    setenv("STRAND_HTTP_PORT", "80x", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_HTTP_PORT"));
    setenv("STRAND_HTTP_PORT", "70000", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    clear_env();
    setenv("STRAND_LOG_LEVEL", "loud", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_LOG_LEVEL"));
    clear_env();
    setenv("STRAND_REDIS_URL", "localhost:6379", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    clear_env();
    setenv("STRAND_KAFKA_BROKERS", "", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    /* The recovery sweep's bounds (docs/configuration.md). */
    clear_env();
    setenv("STRAND_RECOVERY_INTERVAL_S", "0", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_RECOVERY_INTERVAL_S"));
    clear_env();
    setenv("STRAND_RECOVERY_BATCH", "-5", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    clear_env();
    setenv("STRAND_RECOVERY_GRACE_S", "soon", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    /* The wake-up paths (docs/configuration.md). */
    clear_env();
    setenv("STRAND_WAKE_NOTIFY", "sometimes", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "executor", 8081, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_WAKE_NOTIFY"));
    setenv("STRAND_WAKE_NOTIFY", "always", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "executor", 8081, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(cfg.wake_notify, "always");
    clear_env();
    setenv("STRAND_WAIT_RECHECK_MS", "5", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_WAIT_RECHECK_MS"));
    /* The API's command pool (docs/configuration.md): a group holds at most 64 starts. */
    const char *const api_bad[][2] = {{"STRAND_API_WORKERS", "0"},
                                      {"STRAND_API_START_GROUP_MAX", "65"},
                                      {"STRAND_API_START_GROUP_MAX", "0"},
                                      {"STRAND_API_START_LANES", "two"},
                                      {"STRAND_API_REQUEST_TIMEOUT_MS", "99"}};
    for (size_t i = 0; i < sizeof api_bad / sizeof api_bad[0]; i++) {
        clear_env();
        setenv(api_bad[i][0], api_bad[i][1], 1);
        CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
        CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, api_bad[i][0]));
    }
    clear_env();
    setenv("STRAND_API_START_GROUP_MAX", "1", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_OK);
    CU_ASSERT_EQUAL(cfg.api_start_group_max, 1);
    clear_env();
}

/* Value of librdkafka property `key` on a client, into `buf`. */
static const char *kafka_setting(rd_kafka_t *rk, const char *key, char *buf, size_t len)
{
    size_t n = len;
    if (rd_kafka_conf_get(rd_kafka_conf(rk), key, buf, &n) != RD_KAFKA_CONF_OK)
        snprintf(buf, len, "?");
    return buf;
}

/* STRAND_KAFKA_CONF_* wins over Strand's tunable defaults, not over the settings the
 * outbox and offset handling rest on. No broker is needed to build a client. */
static void test_kafka_overrides(void)
{
    clear_env();
    setenv("STRAND_KAFKA_BROKERS", "127.0.0.1:1", 1);
    setenv("STRAND_KAFKA_CONF_LINGER_MS", "7", 1);
    setenv("STRAND_KAFKA_CONF_ACKS", "1", 1);
    setenv("STRAND_KAFKA_CONF_STATISTICS_INTERVAL_MS", "0", 1);
    setenv("STRAND_KAFKA_CONF_ENABLE_AUTO_COMMIT", "true", 1);
    st_config_t cfg;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_config_load(&cfg, "api", 8080, &eb), ST_OK);
    char v[64];
    rd_kafka_t *producer = NULL;
    CU_ASSERT_EQUAL_FATAL(st_kafka_producer_new(&cfg, NULL, &producer, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(kafka_setting(producer, "linger.ms", v, sizeof v), "7");
    CU_ASSERT_STRING_EQUAL(kafka_setting(producer, "acks", v, sizeof v), "-1");   /* all */
    CU_ASSERT_STRING_EQUAL(kafka_setting(producer, "enable.idempotence", v, sizeof v), "true");
    CU_ASSERT_STRING_EQUAL(kafka_setting(producer, "message.timeout.ms", v, sizeof v), "30000");
    rd_kafka_destroy(producer);
    const char *topics[] = {ST_TOPIC_SIGNALS, NULL};
    rd_kafka_t *consumer = NULL;
    CU_ASSERT_EQUAL_FATAL(st_kafka_consumer_new(&cfg, "g", topics, NULL, &consumer, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(kafka_setting(consumer, "statistics.interval.ms", v, sizeof v), "0");
    CU_ASSERT_STRING_EQUAL(kafka_setting(consumer, "enable.auto.commit", v, sizeof v), "false");
    CU_ASSERT_STRING_EQUAL(kafka_setting(consumer, "topic.metadata.refresh.interval.ms", v,
                                         sizeof v), "5000");
    /* Failover: cooperative-sticky, the session timeout from the configuration. */
    CU_ASSERT_STRING_EQUAL(kafka_setting(consumer, "partition.assignment.strategy", v, sizeof v),
                           "cooperative-sticky");
    char want[64];
    snprintf(want, sizeof want, "%d", cfg.kafka_session_timeout_ms);
    CU_ASSERT_STRING_EQUAL(kafka_setting(consumer, "session.timeout.ms", v, sizeof v), want);
    rd_kafka_destroy(consumer);
    /* Static membership only with an explicit node id, named after service and node. */
    setenv("STRAND_NODE_ID", "pod-7", 1);
    snprintf(cfg.node_id, sizeof cfg.node_id, "pod-7");
    CU_ASSERT_EQUAL_FATAL(st_kafka_consumer_new(&cfg, "g", topics, NULL, &consumer, &eb), ST_OK);
    snprintf(want, sizeof want, "%s-pod-7", cfg.service);
    CU_ASSERT_STRING_EQUAL(kafka_setting(consumer, "group.instance.id", v, sizeof v), want);
    rd_kafka_destroy(consumer);
    unsetenv("STRAND_NODE_ID");
    unsetenv("STRAND_KAFKA_CONF_LINGER_MS");
    unsetenv("STRAND_KAFKA_CONF_ACKS");
    unsetenv("STRAND_KAFKA_CONF_STATISTICS_INTERVAL_MS");
    unsetenv("STRAND_KAFKA_CONF_ENABLE_AUTO_COMMIT");
    clear_env();
}

/* Kafka client security: checked at load (clear errors), applied to every client. */
static void test_kafka_security(void)
{
    static const char *const vars[] = {"STRAND_KAFKA_SECURITY_PROTOCOL", "STRAND_KAFKA_SASL_MECHANISM",
                                       "STRAND_KAFKA_SASL_USERNAME", "STRAND_KAFKA_SASL_PASSWORD",
                                       "STRAND_KAFKA_SASL_PASSWORD_FILE"};
    clear_env();
    st_config_t cfg;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(cfg.kafka_security_protocol, "plaintext");
    setenv("STRAND_KAFKA_SECURITY_PROTOCOL", "tls", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_KAFKA_SECURITY_PROTOCOL"));
    setenv("STRAND_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT", 1);
    setenv("STRAND_KAFKA_SASL_USERNAME", "strand", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);   /* no password */
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_KAFKA_SASL_PASSWORD"));
    setenv("STRAND_KAFKA_SASL_MECHANISM", "GSSAPI", 1);
    setenv("STRAND_KAFKA_SASL_PASSWORD", "p", 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_KAFKA_SASL_MECHANISM"));
    unsetenv("STRAND_KAFKA_SASL_MECHANISM");
    char path[] = "/tmp/strand-test-secret-XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(write(fd, "s3cret\n", 7), 7);
    close(fd);
    setenv("STRAND_KAFKA_SASL_PASSWORD_FILE", path, 1);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);   /* both */
    unsetenv("STRAND_KAFKA_SASL_PASSWORD");
    CU_ASSERT_EQUAL_FATAL(st_config_load(&cfg, "api", 8080, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(cfg.kafka_security_protocol, "sasl_plaintext");
    CU_ASSERT_STRING_EQUAL(cfg.kafka_sasl_mechanism, "SCRAM-SHA-512");
    CU_ASSERT_STRING_EQUAL(cfg.kafka_sasl_password, "s3cret");
    rd_kafka_t *producer = NULL;
    char v[64];
    CU_ASSERT_EQUAL_FATAL(st_kafka_producer_new(&cfg, NULL, &producer, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(kafka_setting(producer, "security.protocol", v, sizeof v), "sasl_plaintext");
    CU_ASSERT_STRING_EQUAL(kafka_setting(producer, "sasl.mechanisms", v, sizeof v), "SCRAM-SHA-512");
    CU_ASSERT_STRING_EQUAL(kafka_setting(producer, "sasl.username", v, sizeof v), "strand");
    rd_kafka_destroy(producer);
    unlink(path);
    CU_ASSERT_EQUAL(st_config_load(&cfg, "api", 8080, &eb), ST_ERR_CONFIG);   /* file gone */
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, path));
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    clear_env();
}

ST_TEST_MAIN("config", ST_TEST(test_defaults), ST_TEST(test_overrides),
             ST_TEST(test_rejects_bad_values), ST_TEST(test_kafka_overrides),
             ST_TEST(test_kafka_security))
