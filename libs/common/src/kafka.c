/* kafka.c - librdkafka adapter (see kafka.h). */
#include "strand/kafka.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    /* Every client: a connection whose handshake the broker does not answer fails after
     * 10 s (the Java client's default), not librdkafka's 30 s, the whole grace period
     * Kubernetes gives a pod. test_wakeups' executor log ended on such a 30 s failure
     * when its stop overran. */
    if (err == ST_OK)
        err = conf_set(conf, "socket.connection.setup.timeout.ms", "10000", eb);
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
        {"linger.ms", "5"},
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
    /* The same limit as the topics Strand creates (st_kafka_ensure_topics): a larger
     * message fails at once, and the relay sets its row aside. */
    char max_bytes[16];
    snprintf(max_bytes, sizeof max_bytes, "%d", cfg->kafka_message_max_bytes);
    err = conf_set(conf, "message.max.bytes", max_bytes, eb);
    if (err != ST_OK) {
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

/* ---- consumer health and lag ------------------------------------------------------
 *
 * Lag comes from the broker, not from librdkafka's statistics: those are served by the
 * consumer's own poll, so the figure froze (at 0) exactly while a loop was stuck. A
 * process-wide thread asks, for every watched consumer, its assignment, the group's
 * committed offsets and each partition's high watermark.
 *
 * A round for one consumer has three steps. (1) Under watch_mu, with the consumer's
 * handle: its assignment (local) and the group's committed offsets (rd_kafka_committed,
 * bounded by WATCH_QUERY_MS). st_kafka_consumer_free() takes watch_mu to unregister, so
 * a handle is never used after it is destroyed, and a stop waits at most that long.
 * (2) Without the lock: the high watermarks, asked through the lag thread's own client
 * (lag_client). librdkafka 2.0.2's rd_kafka_query_watermark_offsets() ignores its
 * timeout and waits as long as the partition's broker does not answer; it held the
 * lock once, and a stop with it (test_stop). Now only the lag figures wait.
 * (3) Under watch_mu again, if the consumer is still registered (same slot
 * generation): the gauges. Poll threads never take the lock (atomics only). */
#define WATCH_MAX 16
/* The committed-offsets query waits at most this long, and a round for one consumer
 * stops at its first failure (coordinator or broker down). */
#define WATCH_QUERY_MS 1000
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static st_kafka_watch_t *watched[WATCH_MAX];
static unsigned watch_gen[WATCH_MAX];   /* bumped when a slot is taken or freed */
static int watch_interval_ms = 5000;
static int watch_thread_started;
static rd_kafka_t *lag_client;   /* the lag thread's own handle, kept until exit */

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void st_kafka_watch_init(st_kafka_watch_t *w, const st_config_t *cfg, const char *group)
{
    memset(w, 0, sizeof *w);
    snprintf(w->group, sizeof w->group, "%s", group);
    w->poll_limit_ms = cfg->consumer_poll_limit_ms > 0 ? cfg->consumer_poll_limit_ms : 30000;
    w->last_poll_ms = mono_ms();
    char labels[200];
    snprintf(labels, sizeof labels, "group=\"%s\"", group);
    w->m_stuck = st_metrics_gauge("strand_consumer_stuck",
                                  "Consumer threads holding a message they could not even "
                                  "dead-letter", labels);
    w->m_dl_failures = st_metrics_counter("strand_consumer_dead_letter_failures_total",
                                          "Dead-letter writes that failed", labels);
    w->m_poll_age = st_metrics_gauge("strand_kafka_consumer_poll_age_seconds",
                                     "Seconds since the consumer loop last polled", labels);
}

void st_kafka_watch_polled(st_kafka_watch_t *w)
{
    if (w != NULL)
        __atomic_store_n(&w->last_poll_ms, mono_ms(), __ATOMIC_RELEASE);
}

void st_kafka_watch_dead_letter_failed(st_kafka_watch_t *w, int *held)
{
    if (w == NULL)
        return;
    st_metric_inc(w->m_dl_failures);
    if (*held)
        return;
    *held = 1;
    st_metric_set(w->m_stuck, __atomic_add_fetch(&w->stuck, 1, __ATOMIC_ACQ_REL));
}

void st_kafka_watch_dead_letter_done(st_kafka_watch_t *w, int *held)
{
    if (w == NULL || !*held)
        return;
    *held = 0;
    st_metric_set(w->m_stuck, __atomic_sub_fetch(&w->stuck, 1, __ATOMIC_ACQ_REL));
}

int st_kafka_watch_error(st_kafka_watch_t *w, rd_kafka_t *rk, rd_kafka_resp_err_t err)
{
    if (err != RD_KAFKA_RESP_ERR__FATAL)
        return 0;
    if (w != NULL && __atomic_exchange_n(&w->fatal, 1, __ATOMIC_ACQ_REL))
        return 1;   /* logged already */
    char reason[512] = "";
    rd_kafka_resp_err_t cause = rd_kafka_fatal_error(rk, reason, sizeof reason);
    st_log_error("Kafka consumer stopped by a fatal error",
                 "group=%s error=%s: %s; if another process uses the same STRAND_NODE_ID,"
                 " give each replica its own and restart this one",
                 w ? w->group : "?", rd_kafka_err2name(cause), reason);
    return 1;
}

int st_kafka_watch_ready(const st_kafka_watch_t *w)
{
    if (w == NULL)
        return 1;
    long long age = mono_ms() - __atomic_load_n(&w->last_poll_ms, __ATOMIC_ACQUIRE);
    return !__atomic_load_n(&w->stuck, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&w->fatal, __ATOMIC_ACQUIRE) && age <= w->poll_limit_ms;
}

static const char *const LAG_HELP =
    "Messages not yet consumed by the group, summed over the assigned partitions";

static st_metric_t *lag_gauge(const char *group, const char *topic)
{
    char labels[512];
    snprintf(labels, sizeof labels, "group=\"%s\",topic=\"%s\"", group, topic);
    return st_metrics_gauge("strand_kafka_consumer_lag_messages", LAG_HELP, labels);
}

static void partition_gauges(const char *group, const char *topic, int32_t partition,
                             double lag, double committed)
{
    char labels[512];
    snprintf(labels, sizeof labels, "group=\"%s\",topic=\"%s\",partition=\"%d\"", group, topic,
             (int)partition);
    st_metric_set(st_metrics_gauge("strand_kafka_consumer_partition_lag_messages",
                                   "Broker high watermark minus the group's committed offset, "
                                   "per partition assigned to this consumer", labels), lag);
    if (committed > -2)
        st_metric_set(st_metrics_gauge("strand_kafka_consumer_committed_offset",
                                       "The group's committed offset, per partition assigned "
                                       "to this consumer (-1: none yet)", labels), committed);
}

/* Step 1, under watch_mu: the poll age, and the assignment with the group's committed
 * offsets. Returns the list (the caller's), or NULL to skip the round. */
static rd_kafka_topic_partition_list_t *watch_committed(st_kafka_watch_t *w)
{
    long long age = mono_ms() - __atomic_load_n(&w->last_poll_ms, __ATOMIC_ACQUIRE);
    st_metric_set(w->m_poll_age, (double)age / 1000.0);
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(w->rk, &parts) != RD_KAFKA_RESP_ERR_NO_ERROR || parts == NULL)
        return NULL;
    if (parts->cnt > 0 &&
        rd_kafka_committed(w->rk, parts, WATCH_QUERY_MS) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_topic_partition_list_destroy(parts);
        return NULL;   /* coordinator unreachable: keep the last figures */
    }
    return parts;
}

/* Step 2, without the lock: each partition's high watermark into `high` (low into
 * `low`), through lag_client. Returns 0 at the first failure (broker unreachable). */
static int watch_watermarks(const rd_kafka_topic_partition_list_t *parts, int64_t *low,
                            int64_t *high)
{
    rd_kafka_poll(lag_client, 0);   /* its error events, if any, do not pile up */
    for (int i = 0; i < parts->cnt; i++)
        if (rd_kafka_query_watermark_offsets(lag_client, parts->elems[i].topic,
                                             parts->elems[i].partition, &low[i], &high[i],
                                             WATCH_QUERY_MS) != RD_KAFKA_RESP_ERR_NO_ERROR)
            return 0;
    return 1;
}

/* Step 3, under watch_mu, `w` still registered: the gauges. */
static void watch_report(st_kafka_watch_t *w, const rd_kafka_topic_partition_list_t *parts,
                         const int64_t *low, const int64_t *high)
{
    /* Per topic sums (consumers here have one or a few topics). */
    enum { MAX_TOPICS = 8 };
    const char *topics[MAX_TOPICS];
    double sums[MAX_TOPICS];
    int ntopics = 0;
    for (int i = 0; i < parts->cnt; i++) {
        const rd_kafka_topic_partition_t *p = &parts->elems[i];
        int64_t from = p->offset >= 0 ? p->offset : low[i];
        double lag = high[i] > from ? (double)(high[i] - from) : 0;
        partition_gauges(w->group, p->topic, p->partition, lag,
                         p->offset >= 0 ? (double)p->offset : -1);
        int t = 0;
        while (t < ntopics && strcmp(topics[t], p->topic) != 0)
            t++;
        if (t == ntopics && ntopics < MAX_TOPICS) {
            topics[ntopics] = p->topic;
            sums[ntopics++] = 0;
        }
        if (t < ntopics)
            sums[t] += lag;
    }
    for (int t = 0; t < ntopics; t++)
        st_metric_set(lag_gauge(w->group, topics[t]), sums[t]);
    /* Partitions reported before and no longer ours: 0 here, their new owner reports. */
    for (int r = 0; r < w->nreported; r++) {
        int still = 0;
        for (int i = 0; i < parts->cnt && !still; i++)
            still = parts->elems[i].partition == w->reported[r].partition &&
                    strcmp(parts->elems[i].topic, w->reported[r].topic) == 0;
        if (!still)
            partition_gauges(w->group, w->reported[r].topic, w->reported[r].partition, 0, -2);
    }
    w->nreported = 0;
    for (int i = 0; i < parts->cnt && w->nreported < ST_KAFKA_WATCH_MAX_PARTS; i++) {
        snprintf(w->reported[w->nreported].topic, sizeof w->reported[0].topic, "%s",
                 parts->elems[i].topic);
        w->reported[w->nreported++].partition = parts->elems[i].partition;
    }
}

/* One round for the consumer in `slot` (see the section comment for the steps). */
static void watch_round(int slot)
{
    pthread_mutex_lock(&watch_mu);
    st_kafka_watch_t *w = watched[slot];
    unsigned gen = watch_gen[slot];
    rd_kafka_topic_partition_list_t *parts = w != NULL ? watch_committed(w) : NULL;
    pthread_mutex_unlock(&watch_mu);
    if (parts == NULL)
        return;
    size_t n = parts->cnt > 0 ? (size_t)parts->cnt : 1;
    int64_t *low = calloc(n, sizeof *low), *high = calloc(n, sizeof *high);
    if (low == NULL || high == NULL)
        abort();
    int measured = watch_watermarks(parts, low, high);
    pthread_mutex_lock(&watch_mu);
    if (measured && watched[slot] == w && watch_gen[slot] == gen)
        watch_report(w, parts, low, high);
    pthread_mutex_unlock(&watch_mu);
    free(low);
    free(high);
    rd_kafka_topic_partition_list_destroy(parts);
}

static void *watch_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {watch_interval_ms / 1000, (long)(watch_interval_ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        for (int i = 0; i < WATCH_MAX; i++)
            watch_round(i);
    }
    return NULL;
}

/* The lag thread's client: a consumer handle without a group, used only for watermark
 * queries. NULL (and a warning) if it cannot be made. */
static rd_kafka_t *lag_client_new(const st_config_t *cfg)
{
    static const kafka_setting_t none[] = {{NULL, NULL}};
    rd_kafka_conf_t *conf;
    st_errbuf_t eb;
    if (base_conf(cfg, none, none, &conf, &eb) != ST_OK) {
        st_log_warn("could not configure the consumer lag client", "%s", eb.msg);
        return NULL;
    }
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        st_log_warn("could not create the consumer lag client", "%s", errstr);
    }
    return rk;
}

static void watch_add(st_kafka_watch_t *w, const st_config_t *cfg)
{
    pthread_mutex_lock(&watch_mu);
    if (!watch_thread_started) {
        lag_client = lag_client_new(cfg);
        watch_interval_ms = cfg->kafka_lag_interval_ms > 0 ? cfg->kafka_lag_interval_ms : 5000;
        pthread_t thread;
        if (lag_client != NULL && pthread_create(&thread, NULL, watch_main, NULL) == 0) {
            pthread_detach(thread);
            watch_thread_started = 1;
        } else {
            st_log_warn("could not start the consumer lag thread", NULL);
        }
    }
    for (int i = 0; i < WATCH_MAX; i++)
        if (watched[i] == NULL) {
            watched[i] = w;
            watch_gen[i]++;
            break;
        }
    pthread_mutex_unlock(&watch_mu);
}

static void watch_remove(const rd_kafka_t *rk)
{
    pthread_mutex_lock(&watch_mu);
    for (int i = 0; i < WATCH_MAX; i++)
        if (watched[i] != NULL && watched[i]->rk == rk) {
            watched[i] = NULL;
            watch_gen[i]++;
        }
    pthread_mutex_unlock(&watch_mu);
}

st_err_t st_kafka_consumer_new(const st_config_t *cfg, const char *group,
                               const char *const *topics, const st_kafka_consumer_opts_t *opts,
                               rd_kafka_t **out, st_errbuf_t *eb)
{
    /* Failover (docs/operations.md, "Consumer failover"): a dead member's partitions
     * move after session.timeout.ms; cooperative-sticky moves only those, survivors
     * keep theirs and go on consuming through the rebalance. */
    char session[16], heartbeat[16];
    int session_ms = cfg->kafka_session_timeout_ms > 0 ? cfg->kafka_session_timeout_ms : 6000;
    snprintf(session, sizeof session, "%d", session_ms);
    snprintf(heartbeat, sizeof heartbeat, "%d", session_ms / 4 > 100 ? session_ms / 4 : 100);
    const kafka_setting_t tunables[] = {
        {"partition.assignment.strategy", "cooperative-sticky"},
        {"session.timeout.ms", session},
        {"heartbeat.interval.ms", heartbeat},
        {"auto.offset.reset", "earliest"},
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
    err = conf_set(conf, "group.id", group, eb);
    /* Static membership only with an explicit node id: the host-name default is shared
     * by two processes on one machine, and two live members with one group.instance.id
     * fence each other. */
    const char *node_env = getenv("STRAND_NODE_ID");
    if (err == ST_OK && node_env != NULL && node_env[0] != '\0') {
        char instance_id[160];
        snprintf(instance_id, sizeof instance_id, "%s-%s", cfg->service, cfg->node_id);
        err = conf_set(conf, "group.instance.id", instance_id, eb);
    }
    if (err != ST_OK) {
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
        lag_gauge(group, name); /* the series exists from the start, at 0 */
    }
    rd_kafka_resp_err_t rerr = rd_kafka_subscribe(rk, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (rerr != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_destroy(rk);
        return st_err_set(eb, ST_ERR_KAFKA, "could not subscribe: %s", rd_kafka_err2str(rerr));
    }
    if (opts != NULL && opts->watch != NULL) {
        opts->watch->rk = rk;
        watch_add(opts->watch, cfg);
    }
    *out = rk;
    return ST_OK;
}

void st_kafka_consumer_free(rd_kafka_t *rk)
{
    if (rk == NULL)
        return;
    watch_remove(rk);
    /* librdkafka 2.0 can hang in rd_kafka_consumer_close() when a cooperative
     * assignment arrives while it closes (librdkafka issue 4527): unsubscribe and let
     * the revocation run first, for a bounded time. Unsubscribing is also what makes a
     * dynamic (non-static) cooperative member leave the group at once; close alone
     * does not in 2.0. Messages polled here are dropped uncommitted and redelivered to
     * the next owner. */
    rd_kafka_unsubscribe(rk);
    for (int i = 0; i < 50; i++) {
        rd_kafka_topic_partition_list_t *parts = NULL;
        int left = rd_kafka_assignment(rk, &parts) == RD_KAFKA_RESP_ERR_NO_ERROR && parts != NULL
                       ? parts->cnt : 0;
        if (parts != NULL)
            rd_kafka_topic_partition_list_destroy(parts);
        if (left == 0)
            break;
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(rk, 100);
        if (msg != NULL)
            rd_kafka_message_destroy(msg);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

int st_kafka_rebalance_protocol_eager(rd_kafka_t *rk)
{
    const char *proto = rd_kafka_rebalance_protocol(rk);
    return proto == NULL || strcmp(proto, "COOPERATIVE") != 0;
}

st_err_t st_kafka_ensure_topics(const st_config_t *cfg, int timeout_ms, st_errbuf_t *eb)
{
    static const char *const suffixes[] = {ST_TOPIC_SIGNALS, ST_TOPIC_WORK, ST_TOPIC_NOTICES,
                                           ST_TOPIC_INGRESS, ST_TOPIC_DLQ};
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
        /* The producer's message.max.bytes (st_kafka_producer_new): the two agree. */
        char max_bytes[16];
        snprintf(max_bytes, sizeof max_bytes, "%d", cfg->kafka_message_max_bytes);
        if (topics[i] != NULL)
            rd_kafka_NewTopic_set_config(topics[i], "max.message.bytes", max_bytes);
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
