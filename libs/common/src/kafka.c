/* kafka.c - librdkafka adapter (see kafka.h). */
#include "strand/kafka.h"

#include <ctype.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/log.h"
#include "strand/metrics.h"

extern char **environ;

static st_err_t conf_set(rd_kafka_conf_t *conf, const char *key, const char *value,
                         st_errbuf_t *eb)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, key, value, errstr, sizeof errstr) != RD_KAFKA_CONF_OK)
        return st_err_set(eb, ST_ERR_CONFIG, "kafka setting %s: %s", key, errstr);
    return ST_OK;
}

/* One librdkafka property and its value. */
typedef struct {
    const char *key, *value;
} kafka_setting_t;

/* Applies the client security settings (STRAND_KAFKA_SECURITY_PROTOCOL, SASL user and
 * password, CA file) to `conf`; plaintext sets nothing. config.c has checked them. */
static st_err_t apply_security(const st_config_t *cfg, rd_kafka_conf_t *conf, st_errbuf_t *eb)
{
    const char *protocol = cfg->kafka_security_protocol;
    if (protocol[0] == '\0' || strcmp(protocol, "plaintext") == 0)
        return ST_OK;
    st_err_t err = conf_set(conf, "security.protocol", protocol, eb);
    if (err == ST_OK && strncmp(protocol, "sasl_", 5) == 0) {
        static int warned;   /* once per process; a benign race at worst logs twice */
        if (strncmp(cfg->kafka_sasl_mechanism, "SCRAM", 5) == 0 && rd_kafka_version() < 0x020601ff &&
            !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            st_log_warn("this librdkafka cannot use SCRAM with Kafka 4.x brokers",
                        "librdkafka %s; fixed in 2.6.1 (librdkafka#4895): upgrade it, or use "
                        "STRAND_KAFKA_SASL_MECHANISM=PLAIN over sasl_ssl", rd_kafka_version_str());
        err = conf_set(conf, "sasl.mechanism", cfg->kafka_sasl_mechanism, eb);
        if (err == ST_OK)
            err = conf_set(conf, "sasl.username", cfg->kafka_sasl_username, eb);
        if (err == ST_OK)
            err = conf_set(conf, "sasl.password", cfg->kafka_sasl_password, eb);
    }
    if (err == ST_OK && cfg->kafka_ssl_ca_file[0] != '\0')
        err = conf_set(conf, "ssl.ca.location", cfg->kafka_ssl_ca_file, eb);
    return err;
}

/* Builds a client configuration in three layers: `tunables` (Strand's defaults,
 * NULL-terminated), then every STRAND_KAFKA_CONF_* variable (so an operator can change
 * any of them, or add any other property), then `required` (settings Strand's
 * correctness rests on; they win over the environment). Caller owns `*out`. */
static st_err_t base_conf(const st_config_t *cfg, const kafka_setting_t *tunables,
                          const kafka_setting_t *required, rd_kafka_conf_t **out,
                          st_errbuf_t *eb)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char client_id[128];
    snprintf(client_id, sizeof client_id, "strand-%s-%s", cfg->service, cfg->node_id);
    st_err_t err = conf_set(conf, "bootstrap.servers", cfg->kafka_brokers, eb);
    if (err == ST_OK)
        err = conf_set(conf, "client.id", client_id, eb);
    if (err == ST_OK)
        err = apply_security(cfg, conf, eb);
    for (const kafka_setting_t *t = tunables; err == ST_OK && t->key != NULL; t++)
        err = conf_set(conf, t->key, t->value, eb);
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
    for (const kafka_setting_t *r = required; err == ST_OK && r->key != NULL; r++)
        err = conf_set(conf, r->key, r->value, eb);
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
    static const kafka_setting_t tunables[] = {
        {"linger.ms", "2"},
        {"message.timeout.ms", "30000"},
        {NULL, NULL},
    };
    /* The outbox marks a row published only after an acknowledged, non-duplicated,
     * in-order write. */
    static const kafka_setting_t required[] = {
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {NULL, NULL},
    };
    rd_kafka_conf_t *conf;
    st_err_t err = base_conf(cfg, tunables, required, &conf, eb);
    if (err != ST_OK)
        return err;
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

/* Consumer lag: librdkafka's statistics (every statistics.interval.ms, served by the
 * consumer's own poll) carry consumer_lag per assigned partition; the sum per topic is
 * the gauge strand_kafka_consumer_lag_messages{group,topic}. The group of each consumer
 * handle is kept in a small table, as the statistics JSON does not name it. */
#define LAG_MAX_CONSUMERS 16
static pthread_mutex_t lag_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const rd_kafka_t *rk;
    char group[128];
} lag_groups[LAG_MAX_CONSUMERS];

static const char *const LAG_HELP =
    "Messages not yet consumed by the group, summed over the assigned partitions";

/* Handles are not forgotten when destroyed (that happens in the services' own close
 * paths); a reused address overwrites its slot, and a full table reuses the oldest. */
static void lag_remember(const rd_kafka_t *rk, const char *group)
{
    static int next;
    pthread_mutex_lock(&lag_mu);
    int slot = -1;
    for (int i = 0; i < LAG_MAX_CONSUMERS && slot < 0; i++)
        if (lag_groups[i].rk == NULL || lag_groups[i].rk == rk)
            slot = i;
    if (slot < 0)
        slot = next++ % LAG_MAX_CONSUMERS;
    lag_groups[slot].rk = rk;
    snprintf(lag_groups[slot].group, sizeof lag_groups[slot].group, "%s", group);
    pthread_mutex_unlock(&lag_mu);
}

static void lag_forget(const rd_kafka_t *rk)
{
    pthread_mutex_lock(&lag_mu);
    for (int i = 0; i < LAG_MAX_CONSUMERS; i++)
        if (lag_groups[i].rk == rk)
            lag_groups[i].rk = NULL;
    pthread_mutex_unlock(&lag_mu);
}

static st_metric_t *lag_gauge(const char *group, const char *topic)
{
    char labels[512];
    snprintf(labels, sizeof labels, "group=\"%s\",topic=\"%s\"", group, topic);
    return st_metrics_gauge("strand_kafka_consumer_lag_messages", LAG_HELP, labels);
}

static int on_stats(rd_kafka_t *rk, char *text, size_t len, void *opaque)
{
    char group[128] = "";
    pthread_mutex_lock(&lag_mu);
    for (int i = 0; i < LAG_MAX_CONSUMERS; i++)
        if (lag_groups[i].rk == rk)
            snprintf(group, sizeof group, "%s", lag_groups[i].group);
    pthread_mutex_unlock(&lag_mu);
    json_t *stats = group[0] != '\0' ? json_loadb(text, len, 0, NULL) : NULL;
    const char *topic;
    json_t *t;
    json_object_foreach(json_object_get(stats, "topics"), topic, t) {
        double lag = 0;
        const char *part;
        json_t *p;
        json_object_foreach(json_object_get(t, "partitions"), part, p) {
            json_int_t n = json_integer_value(json_object_get(p, "consumer_lag"));
            if (strcmp(part, "-1") != 0 && n > 0)
                lag += (double)n;
        }
        st_metric_set(lag_gauge(group, topic), lag);
    }
    json_decref(stats);
    return 0; /* librdkafka frees `text` */
}

st_err_t st_kafka_consumer_new(const st_config_t *cfg, const char *group,
                               const char *const *topics, const st_kafka_consumer_opts_t *opts,
                               rd_kafka_t **out, st_errbuf_t *eb)
{
    static const kafka_setting_t tunables[] = {
        /* Eager, not cooperative-sticky: librdkafka 2.0.2 (Debian 12) closes a
         * cooperative consumer without sending LeaveGroup, so its partitions would
         * stay orphaned until session.timeout.ms (45 s) after every restart. */
        {"partition.assignment.strategy", "roundrobin"},
        {"auto.offset.reset", "earliest"},
        /* The consumer-lag metric (docs/operations.md). */
        {"statistics.interval.ms", "5000"},
        /* A subscribed topic that the broker does not list yet (just created while its
         * controller was still loading, e.g. right after a broker restart) is only
         * looked up again at the next metadata refresh: 5 minutes by default, during
         * which the consumer gets no partitions. */
        {"topic.metadata.refresh.interval.ms", "5000"},
        {NULL, NULL},
    };
    /* Offsets are committed by the caller after its database commit. */
    static const kafka_setting_t required[] = {
        {"enable.auto.commit", "false"},
        {NULL, NULL},
    };
    rd_kafka_conf_t *conf;
    st_err_t err = base_conf(cfg, tunables, required, &conf, eb);
    if (err != ST_OK)
        return err;
    if ((err = conf_set(conf, "group.id", group, eb)) != ST_OK) {
        rd_kafka_conf_destroy(conf);
        return err;
    }
    rd_kafka_conf_set_stats_cb(conf, on_stats);
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
    lag_remember(rk, group);
    int count = 0;
    while (topics[count] != NULL)
        count++;
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(count);
    for (int i = 0; i < count; i++) {
        char name[256];
        rd_kafka_topic_partition_list_add(subs, st_config_topic(cfg, topics[i], name,
                                                                sizeof name),
                                          RD_KAFKA_PARTITION_UA);
        lag_gauge(group, name); /* the series exists from the start, at 0 */
    }
    rd_kafka_resp_err_t rerr = rd_kafka_subscribe(rk, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (rerr != RD_KAFKA_RESP_ERR_NO_ERROR) {
        lag_forget(rk);
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
    static const kafka_setting_t none[] = {{NULL, NULL}};
    rd_kafka_conf_t *conf;
    st_err_t err = base_conf(cfg, none, none, &conf, eb);
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
