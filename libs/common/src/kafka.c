/* kafka.c - librdkafka adapter (see kafka.h). */
#include "strand/kafka.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/log.h"

extern char **environ;

static st_err_t conf_set(rd_kafka_conf_t *conf, const char *key, const char *value,
                         st_errbuf_t *eb)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, key, value, errstr, sizeof errstr) != RD_KAFKA_CONF_OK)
        return st_err_set(eb, ST_ERR_CONFIG, "kafka setting %s: %s", key, errstr);
    return ST_OK;
}

/* Common settings plus STRAND_KAFKA_CONF_* pass-through. */
static st_err_t base_conf(const st_config_t *cfg, rd_kafka_conf_t **out, st_errbuf_t *eb)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char client_id[128];
    snprintf(client_id, sizeof client_id, "strand-%s-%s", cfg->service, cfg->node_id);
    st_err_t err = conf_set(conf, "bootstrap.servers", cfg->kafka_brokers, eb);
    if (err == ST_OK)
        err = conf_set(conf, "client.id", client_id, eb);
    static const char prefix[] = "STRAND_KAFKA_CONF_";
    for (char **env = environ; err == ST_OK && *env != NULL; env++) {
        if (strncmp(*env, prefix, sizeof prefix - 1) != 0)
            continue;
        const char *eq = strchr(*env, '=');
        if (eq == NULL)
            continue;
        char key[128];
        size_t n = 0;
        for (const char *p = *env + sizeof prefix - 1; p < eq && n < sizeof key - 1; p++)
            key[n++] = *p == '_' ? '.' : (char)tolower((unsigned char)*p);
        key[n] = '\0';
        err = conf_set(conf, key, eq + 1, eb);
    }
    if (err != ST_OK) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    *out = conf;
    return ST_OK;
}

st_err_t st_kafka_producer_new(const st_config_t *cfg, const st_kafka_callbacks_t *cbs,
                               rd_kafka_t **out, st_errbuf_t *eb)
{
    rd_kafka_conf_t *conf;
    st_err_t err = base_conf(cfg, &conf, eb);
    if (err != ST_OK)
        return err;
    if ((err = conf_set(conf, "enable.idempotence", "true", eb)) != ST_OK ||
        (err = conf_set(conf, "acks", "all", eb)) != ST_OK ||
        (err = conf_set(conf, "linger.ms", "2", eb)) != ST_OK ||
        (err = conf_set(conf, "message.timeout.ms", "30000", eb)) != ST_OK) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    if (cbs != NULL) {
        if (cbs->on_delivery != NULL)
            rd_kafka_conf_set_dr_msg_cb(conf, cbs->on_delivery);
        if (cbs->on_error != NULL)
            rd_kafka_conf_set_error_cb(conf, cbs->on_error);
        rd_kafka_conf_set_opaque(conf, cbs->opaque);
    }
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return st_err_set(eb, ST_ERR_KAFKA, "could not create Kafka producer: %s", errstr);
    }
    *out = rk;
    return ST_OK;
}

st_err_t st_kafka_consumer_new(const st_config_t *cfg, const char *group,
                               const char *const *topics, const st_kafka_consumer_opts_t *opts,
                               rd_kafka_t **out, st_errbuf_t *eb)
{
    rd_kafka_conf_t *conf;
    st_err_t err = base_conf(cfg, &conf, eb);
    if (err != ST_OK)
        return err;
    if ((err = conf_set(conf, "group.id", group, eb)) != ST_OK ||
        (err = conf_set(conf, "enable.auto.commit", "false", eb)) != ST_OK ||
        (err = conf_set(conf, "auto.offset.reset", "earliest", eb)) != ST_OK ||
        /* Eager, not cooperative-sticky: librdkafka 2.0.2 (Debian 12) closes a
         * cooperative consumer without sending LeaveGroup, so its partitions would
         * stay orphaned until session.timeout.ms (45 s) after every restart. */
        (err = conf_set(conf, "partition.assignment.strategy", "roundrobin", eb)) != ST_OK ||
        (err = conf_set(conf, "fetch.wait.max.ms", "10", eb)) != ST_OK) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    if (opts != NULL) {
        if (opts->on_rebalance != NULL)
            rd_kafka_conf_set_rebalance_cb(conf, opts->on_rebalance);
        rd_kafka_conf_set_opaque(conf, opts->opaque);
    }
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return st_err_set(eb, ST_ERR_KAFKA, "could not create Kafka consumer: %s", errstr);
    }
    rd_kafka_poll_set_consumer(rk);
    int count = 0;
    while (topics[count] != NULL)
        count++;
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(count);
    for (int i = 0; i < count; i++) {
        char name[256];
        rd_kafka_topic_partition_list_add(subs, st_config_topic(cfg, topics[i], name,
                                                                sizeof name),
                                          RD_KAFKA_PARTITION_UA);
    }
    rd_kafka_resp_err_t rerr = rd_kafka_subscribe(rk, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (rerr != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_destroy(rk);
        return st_err_set(eb, ST_ERR_KAFKA, "could not subscribe: %s", rd_kafka_err2str(rerr));
    }
    *out = rk;
    return ST_OK;
}

st_err_t st_kafka_ensure_topics(const st_config_t *cfg, int timeout_ms, st_errbuf_t *eb)
{
    static const char *const suffixes[] = {ST_TOPIC_SIGNALS, ST_TOPIC_TIMERS, ST_TOPIC_WORK,
                                           ST_TOPIC_NOTICES, ST_TOPIC_INGRESS, ST_TOPIC_DLQ};
    enum { NTOPICS = sizeof suffixes / sizeof suffixes[0] };
    rd_kafka_conf_t *conf;
    st_err_t err = base_conf(cfg, &conf, eb);
    if (err != ST_OK)
        return err;
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return st_err_set(eb, ST_ERR_KAFKA, "could not create Kafka admin client: %s", errstr);
    }
    rd_kafka_NewTopic_t *topics[NTOPICS];
    for (int i = 0; i < NTOPICS; i++) {
        char name[256];
        topics[i] = rd_kafka_NewTopic_new(st_config_topic(cfg, suffixes[i], name, sizeof name),
                                          cfg->topic_partitions, cfg->topic_replication,
                                          errstr, sizeof errstr);
    }
    rd_kafka_queue_t *queue = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_operation_timeout(opts, timeout_ms, errstr, sizeof errstr);
    rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, errstr, sizeof errstr);
    rd_kafka_CreateTopics(rk, topics, NTOPICS, opts, queue);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(queue, timeout_ms + 2000);
    if (ev == NULL) {
        err = st_err_set(eb, ST_ERR_TIMEOUT, "Kafka did not answer topic creation within %d ms",
                         timeout_ms);
    } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        err = st_err_set(eb, ST_ERR_KAFKA, "could not create topics: %s",
                         rd_kafka_event_error_string(ev));
    } else {
        size_t n = 0;
        const rd_kafka_topic_result_t **results =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
        for (size_t i = 0; i < n && err == ST_OK; i++) {
            rd_kafka_resp_err_t terr = rd_kafka_topic_result_error(results[i]);
            if (terr == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
                continue;
            if (terr != RD_KAFKA_RESP_ERR_NO_ERROR)
                err = st_err_set(eb, ST_ERR_KAFKA, "could not create topic %s: %s",
                                 rd_kafka_topic_result_name(results[i]),
                                 rd_kafka_topic_result_error_string(results[i]));
            else
                st_log_info("created topic", "%s", rd_kafka_topic_result_name(results[i]));
        }
    }
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_NewTopic_destroy_array(topics, NTOPICS);
    rd_kafka_queue_destroy(queue);
    rd_kafka_destroy(rk);
    return err;
}

int st_kafka_connected(rd_kafka_t *rk)
{
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(rk, 0, NULL, &md, 2000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return 0;
    int ok = md->broker_cnt > 0;
    rd_kafka_metadata_destroy(md);
    return ok;
}
