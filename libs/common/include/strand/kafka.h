/*
 * kafka.h - the librdkafka adapter: producer and consumer construction with Strand's
 * settings, topic creation, and error translation.
 *
 * Producers are idempotent with acks=all. Consumers never auto-commit: callers commit
 * an offset only after the database transaction that consumed it has committed.
 * Extra librdkafka properties (TLS, SASL...) come from environment variables named
 * STRAND_KAFKA_CONF_<property with '.' written as '_'>, e.g.
 * STRAND_KAFKA_CONF_SECURITY_PROTOCOL=ssl sets security.protocol.
 */
#ifndef STRAND_KAFKA_H
#define STRAND_KAFKA_H

#include <librdkafka/rdkafka.h>

#include "strand/config.h"
#include "strand/err.h"

/* The topic suffixes every deployment has (prefixed with STRAND_TOPIC_PREFIX). */
#define ST_TOPIC_SIGNALS "signals"
#define ST_TOPIC_TIMERS  "timers"
#define ST_TOPIC_WORK    "work"
#define ST_TOPIC_NOTICES "notices"
#define ST_TOPIC_INGRESS "ingress"
#define ST_TOPIC_DLQ     "dlq"

/* Callbacks and opaque pointer for a producer; any member may be NULL. */
typedef struct {
    void (*on_delivery)(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque);
    void (*on_error)(rd_kafka_t *rk, int err, const char *reason, void *opaque);
    void *opaque;
} st_kafka_callbacks_t;

/* Creates an idempotent producer (acks=all). Callbacks run from rd_kafka_poll() and
 * rd_kafka_flush(). Caller frees with rd_kafka_destroy(). */
st_err_t st_kafka_producer_new(const st_config_t *cfg, const st_kafka_callbacks_t *cbs,
                               rd_kafka_t **out, st_errbuf_t *eb);

/* Optional consumer hooks; any member may be NULL. */
typedef struct {
    /* Replaces librdkafka's default rebalance handling; it must call
     * rd_kafka_assign() itself (see rd_kafka_conf_set_rebalance_cb()). */
    void (*on_rebalance)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque);
    void *opaque;
} st_kafka_consumer_opts_t;

/* Creates a consumer in `group` subscribed to the prefixed `topic` suffixes
 * (NULL-terminated), with eager (roundrobin) assignment. Offsets are committed only
 * by the caller. `opts` may be NULL.
 * Caller closes with rd_kafka_consumer_close() then rd_kafka_destroy(). */
st_err_t st_kafka_consumer_new(const st_config_t *cfg, const char *group,
                               const char *const *topics, const st_kafka_consumer_opts_t *opts,
                               rd_kafka_t **out, st_errbuf_t *eb);

/* Creates every Strand topic that does not exist yet (partitions and replication
 * from the configuration); existing topics are left as they are. Waits for the
 * broker's answer up to `timeout_ms`. */
st_err_t st_kafka_ensure_topics(const st_config_t *cfg, int timeout_ms, st_errbuf_t *eb);

/* True if the client currently has at least one broker connection up. */
int st_kafka_connected(rd_kafka_t *rk);

#endif
