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
#include "strand/metrics.h"
#include "strand/topics.h"

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

/*
 * The health of one consumer loop (/readyz, metrics). The loop's thread marks every
 * poll with st_kafka_watch_polled() and reports a message it could not even
 * dead-letter with st_kafka_watch_dead_letter_failed(); a process-wide thread asks the broker, every
 * STRAND_KAFKA_LAG_INTERVAL_MS, for each assigned partition's high watermark and the
 * group's committed offset, so the lag it exports keeps growing while the loop is stuck
 * (librdkafka's own statistics are served by the poll that a stuck loop no longer
 * makes). Metrics: strand_kafka_consumer_partition_lag_messages,
 * strand_kafka_consumer_committed_offset, strand_kafka_consumer_lag_messages (per
 * topic), strand_kafka_consumer_poll_age_seconds, strand_consumer_stuck,
 * strand_consumer_dead_letter_failures_total (docs/operations.md).
 */
#define ST_KAFKA_WATCH_MAX_PARTS 256

typedef struct {
    char group[128];
    int poll_limit_ms;
    long long last_poll_ms;        /* atomic */
    int stuck;                     /* atomic: threads holding a message they cannot dead-letter */
    int fatal;                     /* atomic: the client hit a fatal error (e.g. fenced) */
    rd_kafka_t *rk;                /* set by st_kafka_consumer_new() */
    st_metric_t *m_stuck, *m_dl_failures, *m_poll_age;
    /* Lag thread only: the partitions last reported, so that one that moved away is
     * reported as 0 here (its new owner reports it). */
    int nreported;
    struct { char topic[128]; int32_t partition; } reported[ST_KAFKA_WATCH_MAX_PARTS];
} st_kafka_watch_t;

/* Initialises a caller-owned watch for consumer group `group`; it must outlive the
 * consumer it is given to. */
void st_kafka_watch_init(st_kafka_watch_t *w, const st_config_t *cfg, const char *group);
/* Records a poll (call after every rd_kafka_consumer_poll()). */
void st_kafka_watch_polled(st_kafka_watch_t *w);
/* Counts a failed dead-letter write by one thread of the loop; the first one marks that
 * thread (through its own `*held`, initially 0) as stuck, which makes the loop unready. */
void st_kafka_watch_dead_letter_failed(st_kafka_watch_t *w, int *held);
/* Clears the thread's stuck mark (if `*held`) once its dead letter was written. */
void st_kafka_watch_dead_letter_done(st_kafka_watch_t *w, int *held);
/* Records a consumer error event (a message with err set): a fatal one (static member
 * fenced by another process with the same group.instance.id) is logged with its cause
 * and makes the loop unready for good; others are left to the caller. Returns 1 if
 * it was fatal. */
int st_kafka_watch_error(st_kafka_watch_t *w, rd_kafka_t *rk, rd_kafka_resp_err_t err);
/* True unless the loop is stuck, has hit a fatal error, or has not polled within
 * STRAND_CONSUMER_POLL_LIMIT_MS. */
int st_kafka_watch_ready(const st_kafka_watch_t *w);

/* Optional consumer hooks; any member may be NULL. */
typedef struct {
    /* Replaces librdkafka's default rebalance handling; it must call
     * rd_kafka_incremental_assign()/_unassign() itself under the cooperative protocol
     * (rd_kafka_assign() under an eager one; see st_kafka_rebalance_protocol_eager()). */
    void (*on_rebalance)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque);
    void *opaque;
    /* Borrowed; when set, the consumer is watched for lag (the lag thread uses the
     * handle, so it must be closed with st_kafka_consumer_free()). */
    st_kafka_watch_t *watch;
} st_kafka_consumer_opts_t;

/* Creates a consumer in `group` subscribed to the prefixed `topic` suffixes
 * (NULL-terminated). Offsets are committed only by the caller. Failover settings:
 * cooperative-sticky assignment (a rebalance moves only the partitions that must move),
 * session.timeout.ms = STRAND_KAFKA_SESSION_TIMEOUT_MS (6 s: a dead member's partitions
 * move after that), and, when STRAND_NODE_ID is set, static membership with
 * group.instance.id = "<service>-<node id>" (a restarted replica takes its own partitions
 * back without a rebalance; two live replicas must never share a node id). `opts` may be
 * NULL. Caller frees with st_kafka_consumer_free() (without a watch,
 * rd_kafka_consumer_close() and rd_kafka_destroy() do too). */
st_err_t st_kafka_consumer_new(const st_config_t *cfg, const char *group,
                               const char *const *topics, const st_kafka_consumer_opts_t *opts,
                               rd_kafka_t **out, st_errbuf_t *eb);

/* Stops watching, closes (commits nothing) and destroys a consumer. NULL is a no-op. */
void st_kafka_consumer_free(rd_kafka_t *rk);

/* True if the group runs the eager protocol (an operator set
 * partition.assignment.strategy to range or roundrobin), false for cooperative. */
int st_kafka_rebalance_protocol_eager(rd_kafka_t *rk);

/* Creates every Strand topic that does not exist yet (partitions and replication
 * from the configuration); existing topics are left as they are. Waits for the
 * broker's answer up to `timeout_ms`. */
st_err_t st_kafka_ensure_topics(const st_config_t *cfg, int timeout_ms, st_errbuf_t *eb);

/* True if the client currently has at least one broker connection up. */
int st_kafka_connected(rd_kafka_t *rk);

#endif
