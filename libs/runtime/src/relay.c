/*
 * relay.c - the outbox relay thread (see relay.h; its statements are in outbox.h).
 *
 * States (relay_state_t; relay_step() is the one transition function):
 *
 *   CONNECT --connected--> STANDBY --got the lock, LISTEN--> LEAD <--> WAIT
 *      ^                      |  ^                            |
 *      +----lost session------+  +--stepped down (Kafka away)-+
 *
 * CONNECT: PostgreSQL, retried with backoff. STANDBY: try for the session advisory lock
 * every second. LEAD: claim and publish batches until a claim comes back short, then
 * purge and sweep. WAIT: poll(2) on the notification socket, the Redis hint
 * subscription (while leading, see outbox.h) and the stop pipe, a 30 s timeout (250 ms
 * when writers may rely on hints) being the safety net for a missed notification or
 * hint. A lost
 * connection from any state goes back to CONNECT (and frees the lock for a standby); a
 * leader that cannot reach Kafka for 10 s steps down for 10 s.
 *
 * The leader also purges published rows and runs the recovery sweep (recovery.h): at
 * once when it takes the lead, then every STRAND_RECOVERY_INTERVAL_S, between drains.
 * Notifications that arrive while any of its queries runs are read off the socket
 * with the query's answer and kept by libpq; relay_wait() takes them from there
 * before it sleeps.
 */
#include "strand/relay.h"

#include <errno.h>
#include <hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strand/crash_point.h"
#include "strand/hint.h"
#include "strand/kafka.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/notice.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/recovery.h"
#include "strand/util.h"

#define SAFETY_WAIT_MS 30000
/* When writers may rely on outbox hints (Redis configured, STRAND_WAKE_NOTIFY=fallback)
 * they skip the notification; a hint lost with its writer (killed between its commit
 * and its publish) delays the rows by at most this long. */
#define HINTED_RECHECK_MS 250
#define HINTS_RETRY_S 5             /* after a failed subscription */
#define PURGE_EVERY_S 60
/* Arbitrary constant: the session advisory lock held by the one relay that publishes
 * (the leader). Two relays publishing side by side could send one key's rows out of
 * commit order (rows N and N+1 claimed by different relays, N+1 delivered first). */
#define RELAY_LOCK_KEY "7306532"
#define STANDBY_RETRY_MS 1000       /* a standby tries to take the lead this often */
#define LEADER_KAFKA_DOWN_S 10      /* a leader that cannot reach Kafka this long steps down */
#define RESIGNED_PAUSE_S 10         /* ... and leaves the lead to others this long */

struct st_relay {
    st_config_t cfg;
    pthread_t thread;
    int stop_pipe[2];
    int stopping;       /* atomic */
    int ready;          /* atomic: PostgreSQL connected and LISTENing */
    int kafka_up;       /* atomic: the producer reaches a broker */
    int leader;         /* atomic: this relay holds RELAY_LOCK_KEY and publishes */
    time_t kafka_down_since, resigned_until;
    int backoff_ms;     /* the next pause before a CONNECT retry */
    PGconn *conn;
    rd_kafka_t *producer;
    time_t last_purge;
    st_recovery_t *recovery;   /* the sweep, run while leading */
    /* The leader's subscription to <prefix>outbox hints (NULL: none); see outbox.h. */
    redisContext *hints;
    time_t hints_retry_after;
    char hints_host[200], hints_channel[96];
    int hints_port;     /* 0: writers never rely on hints here (no Redis, or always) */
    int hints_subscribed;   /* 1: subscribed; 0: the last attempt failed; -1: none yet */
    st_metric_t *published, *failed, *set_aside, *lag, *backlog, *leading, *subscribed;
};

static void hints_unsubscribe(st_relay_t *r);

/* Delivery status of one produced row, the message's opaque. Each is its own
 * allocation: the relay frees it once its report came; one whose report has not come
 * when the relay gives up on its batch is marked abandoned and freed by on_delivery
 * when the report comes at last (a later flush, or the purge in st_relay_stop). Reports
 * are served only by rd_kafka_poll/flush on the relay thread (or after it ended), so
 * no lock is needed, and a report for an abandoned batch never marks a row. */
typedef struct {
    int done;
    int abandoned;
    rd_kafka_resp_err_t err;
} delivery_t;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
    st_relay_t *r = opaque;
    if (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR)
        __atomic_store_n(&r->kafka_up, 1, __ATOMIC_RELEASE);
    delivery_t *d = msg->_private;
    if (d == NULL)
        return;
    if (d->abandoned) {
        free(d);
        return;
    }
    d->err = msg->err;
    d->done = 1;
}

/* Errors no retry will cure for this message (its size or content), as opposed to a
 * full queue, a broker away or a timeout. */
static int permanent_error(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
        return 1;
    default:
        return 0;
    }
}

static void on_kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    st_relay_t *r = opaque;
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        __atomic_store_n(&r->kafka_up, 0, __ATOMIC_RELEASE);
    st_log_warn("kafka producer error", "%s: %s", rd_kafka_err2name(err), reason);
}

static int relay_stopping(const st_relay_t *r)
{
    return __atomic_load_n(&r->stopping, __ATOMIC_ACQUIRE);
}

/* Sleeps up to `ms`, returning early when stop is requested. */
static void relay_pause(st_relay_t *r, int ms)
{
    struct pollfd pfd = {.fd = r->stop_pipe[0], .events = POLLIN};
    poll(&pfd, 1, ms);
}

/* Marks Kafka reachable again if a metadata request gets through. Only asked while it
 * is marked down (the error callback marks it down): a standby asks every second, and
 * each ask is a request to the broker. */
static void recheck_kafka(st_relay_t *r)
{
    if (!__atomic_load_n(&r->kafka_up, __ATOMIC_ACQUIRE) && st_kafka_connected(r->producer))
        __atomic_store_n(&r->kafka_up, 1, __ATOMIC_RELEASE);
}

static void set_leader(st_relay_t *r, int leader)
{
    __atomic_store_n(&r->leader, leader, __ATOMIC_RELEASE);
    st_metric_set(r->leading, leader);
}

static void relay_disconnect(st_relay_t *r)
{
    __atomic_store_n(&r->ready, 0, __ATOMIC_RELEASE);
    set_leader(r, 0);   /* the session's lock goes with it */
    hints_unsubscribe(r);
    if (r->conn != NULL)
        PQfinish(r->conn);
    r->conn = NULL;
}

static int relay_connect(st_relay_t *r)
{
    /* The leader's lock lives as long as its session: let the server notice a vanished
     * client within about 25 s rather than the kernel's default two hours. */
    static const char *const sql_keepalives =
        "SELECT set_config('tcp_keepalives_idle', '10', false),"
        " set_config('tcp_keepalives_interval', '5', false),"
        " set_config('tcp_keepalives_count', '3', false)";
    st_errbuf_t eb;
    if (st_pg_connect(r->cfg.pg_dsn, "strand-relay", &r->conn, &eb) != ST_OK) {
        st_log_warn("relay could not connect to PostgreSQL", "%s", eb.msg);
        return 0;
    }
    if (st_pg_exec(r->conn, sql_keepalives, 0, NULL, NULL, &eb) != ST_OK)
        st_log_warn("relay could not set TCP keepalives", "%s", eb.msg);
    __atomic_store_n(&r->ready, 1, __ATOMIC_RELEASE);
    recheck_kafka(r);
    return 1;
}

/* A standby's attempt to become the leader: the session lock, then LISTEN. Returns
 * 1 if this relay now leads, 0 if another does, -1 on a database error. */
static int relay_try_lead(st_relay_t *r)
{
    static const char *const sql_try_lead = "SELECT pg_try_advisory_lock(" RELAY_LOCK_KEY ")";
    st_errbuf_t eb;
    PGresult *res = NULL;
    if (st_pg_exec(r->conn, sql_try_lead, 0, NULL, &res, &eb) != ST_OK) {
        st_log_warn("relay could not ask for the lead", "%s", eb.msg);
        return -1;
    }
    int got = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (!got)
        return 0;
    if (st_pg_exec(r->conn, "LISTEN " ST_OUTBOX_CHANNEL, 0, NULL, NULL, &eb) != ST_OK) {
        st_log_warn("relay could not LISTEN", "%s", eb.msg);
        return -1;   /* the caller reconnects, which releases the lock */
    }
    r->kafka_down_since = 0;
    st_recovery_restart(r->recovery);   /* the start-up sweep: from the oldest row */
    set_leader(r, 1);
    st_log_info("this relay now publishes the outbox", NULL);
    return 1;
}

/* A leader that cannot reach Kafka lets a relay that can take over. */
static void relay_resign(st_relay_t *r)
{
    st_errbuf_t eb;
    if (st_pg_exec(r->conn, "UNLISTEN *", 0, NULL, NULL, &eb) != ST_OK ||
        st_pg_exec(r->conn, "SELECT pg_advisory_unlock(" RELAY_LOCK_KEY ")", 0, NULL, NULL,
                   &eb) != ST_OK) {
        relay_disconnect(r);   /* ending the session releases the lock too */
    } else {
        set_leader(r, 0);
        hints_unsubscribe(r);
    }
    r->resigned_until = time(NULL) + RESIGNED_PAUSE_S;
    st_log_warn("relay stepped down: Kafka unreachable", "for %d s; another relay may publish",
                LEADER_KAFKA_DOWN_S);
}

/* Sets aside row `i` of `rows` (the claim's columns), which Kafka refused for good:
 * marks it failed and done, and records a dead letter (payload kept up to the dead-
 * letter size rule) and a notice, in the claim's transaction. */
static st_err_t relay_set_aside(st_relay_t *r, PGresult *rows, int i, const char *topic,
                                const void *payload, size_t len, rd_kafka_resp_err_t perr,
                                st_errbuf_t *eb)
{
    const char *id = PQgetvalue(rows, i, ST_OUTBOX_COL_ID);
    const char *signal_id = PQgetisnull(rows, i, ST_OUTBOX_COL_SIGNAL_ID)
                                ? NULL : PQgetvalue(rows, i, ST_OUTBOX_COL_SIGNAL_ID);
    const char *instance_id = PQgetisnull(rows, i, ST_OUTBOX_COL_INSTANCE_ID)
                                  ? NULL : PQgetvalue(rows, i, ST_OUTBOX_COL_INSTANCE_ID);
    char reason[256];
    snprintf(reason, sizeof reason, "outbox row %s (%zu bytes) not publishable: %s", id, len,
             rd_kafka_err2str(perr));
    st_err_t err = st_outbox_set_aside_tx(r->conn, id, reason, eb);
    if (err != ST_OK)
        return err;
    st_dead_letter_source_t src = {.topic = topic, .partition = -1, .offset = -1,
                                   .instance_id = instance_id, .signal_id = signal_id};
    err = st_dead_letter_add_tx(r->conn, &src, reason, 1, r->cfg.node_id, payload, len, eb);
    if (err != ST_OK)
        return err;
    json_t *detail = json_pack("{s:s, s:s, s:I, s:s}", "outbox_id", id, "topic", topic,
                               "bytes", (json_int_t)len, "error", rd_kafka_err2name(perr));
    err = st_notice_add_tx(r->conn, "outbox_row_set_aside", instance_id, signal_id, reason,
                           detail, eb);
    json_decref(detail);
    if (err != ST_OK)
        return err;
    st_metric_inc(r->set_aside);
    st_log_error("outbox row set aside: Kafka will not take it",
                 "id=%s topic=%s bytes=%zu error=%s; dead-lettered", id, topic, len,
                 rd_kafka_err2str(perr));
    return ST_OK;
}

/* Claims up to relay_batch rows in id order, publishes them, and in id order marks
 * the delivered ones and sets aside the ones Kafka refused for good (too large,
 * invalid), up to the first row that may yet go (a retryable failure, or no report).
 * Only the leader calls it. Returns the number of rows claimed, or -1 on a database
 * error. */
static int relay_drain_once(st_relay_t *r)
{
    st_errbuf_t eb;
    if (st_pg_begin(r->conn, &eb) != ST_OK)
        goto db_error;
    PGresult *rows = NULL;
    /* Text results: payload arrives hex-escaped and is unescaped per row below. */
    if (st_outbox_claim_tx(r->conn, r->cfg.relay_batch, &rows, &eb) != ST_OK)
        goto db_error;
    int n = PQntuples(rows);
    if (n <= 0) {
        PQclear(rows);
        st_pg_rollback(r->conn);
        return 0;
    }
    delivery_t **status = calloc((size_t)n, sizeof *status);
    unsigned char **payloads = calloc((size_t)n, sizeof *payloads);
    size_t *lengths = calloc((size_t)n, sizeof *lengths);
    if (status == NULL || payloads == NULL || lengths == NULL)
        abort();
    for (int i = 0; i < n; i++) {
        char topic[256];
        st_config_topic(&r->cfg, PQgetvalue(rows, i, ST_OUTBOX_COL_TOPIC), topic, sizeof topic);
        const char *key = PQgetisnull(rows, i, ST_OUTBOX_COL_KEY)
                              ? NULL : PQgetvalue(rows, i, ST_OUTBOX_COL_KEY);
        payloads[i] = PQunescapeBytea(
            (const unsigned char *)PQgetvalue(rows, i, ST_OUTBOX_COL_PAYLOAD), &lengths[i]);
        status[i] = calloc(1, sizeof *status[i]);
        if (status[i] == NULL || payloads[i] == NULL)
            abort();
        rd_kafka_resp_err_t perr;
        for (;;) {
            /* Copied: the payload is freed with the batch, a message may outlive it. */
            perr = rd_kafka_producev(
                r->producer, RD_KAFKA_V_TOPIC(topic),
                RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
                RD_KAFKA_V_VALUE(payloads[i], lengths[i]),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(status[i]),
                RD_KAFKA_V_END);
            if (perr != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                break;
            rd_kafka_poll(r->producer, 100);
        }
        if (perr != RD_KAFKA_RESP_ERR_NO_ERROR) {
            status[i]->done = 1;
            status[i]->err = perr;
        }
    }
    rd_kafka_flush(r->producer, 30000);
    /* In id order: delivered rows are marked, rows refused for good set aside, up to
     * the first row that may yet go. Rows after it stay unpublished even if they were
     * delivered: sending them again after the failed one keeps each key in commit
     * order, and a duplicate is recognised downstream by its signal id, a reordering
     * is not. */
    size_t cap = (size_t)n * 24 + 4, len = 0;
    char *ids = malloc(cap);
    if (ids == NULL)
        abort();
    ids[len++] = '{';
    int delivered = 0, set_aside = 0, failed = 0;
    st_err_t err = ST_OK;
    for (int i = 0; i < n; i++) {
        delivery_t *d = status[i];
        if (!d->done || d->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (!failed && err == ST_OK && d->done && permanent_error(d->err)) {
                char topic[256];
                st_config_topic(&r->cfg, PQgetvalue(rows, i, ST_OUTBOX_COL_TOPIC), topic,
                                sizeof topic);
                err = relay_set_aside(r, rows, i, topic, payloads[i], lengths[i], d->err, &eb);
                set_aside += err == ST_OK;
                continue;
            }
            st_metric_inc(r->failed);
            st_log_warn("could not publish outbox row",
                        "id=%s topic=%s error=%s", PQgetvalue(rows, i, ST_OUTBOX_COL_ID),
                        PQgetvalue(rows, i, ST_OUTBOX_COL_TOPIC),
                        d->done ? rd_kafka_err2str(d->err) : "no delivery report");
            failed = 1;
            continue;
        }
        if (failed)
            continue;
        len += (size_t)snprintf(ids + len, cap - len, "%s%s", delivered ? "," : "",
                                PQgetvalue(rows, i, ST_OUTBOX_COL_ID));
        st_metric_observe(r->lag, atof(PQgetvalue(rows, i, ST_OUTBOX_COL_AGE_S)));
        delivered++;
    }
    ids[len++] = '}';
    ids[len] = '\0';
    for (int i = 0; i < n; i++) {
        PQfreemem(payloads[i]);
        if (status[i]->done)
            free(status[i]);
        else
            status[i]->abandoned = 1;   /* on_delivery frees it when its report comes */
    }
    free(payloads);
    free(lengths);
    free(status);
    PQclear(rows);
    if (err == ST_OK && delivered)
        err = st_outbox_mark_published_tx(r->conn, ids, &eb);
    free(ids);
    if (err == ST_OK && delivered)   /* tests: delivered, the mark not yet committed */
        ST_CRASH_POINT("relay.after_produce");
    if (err != ST_OK || st_pg_commit(r->conn, &eb) != ST_OK)
        goto db_error;
    st_metric_add(r->published, delivered);
    if (delivered + set_aside < n)
        relay_pause(r, 1000);  /* Kafka trouble: do not spin on the same rows */
    return n;

db_error:
    st_log_warn("outbox relay database error", "%s", eb.msg);
    st_pg_rollback(r->conn);
    return -1;
}

/* Deletes published rows older than STRAND_OUTBOX_RETENTION_S, but no signal row the
 * recovery sweep has not examined yet ($2) or still watches (recoveries > 0): until
 * then it may have to be published again. */
static void relay_purge(st_relay_t *r)
{
    time_t now = time(NULL);
    if (now - r->last_purge < PURGE_EVERY_S)
        return;
    r->last_purge = now;
    st_errbuf_t eb;
    if (st_outbox_purge(r->conn, r->cfg.outbox_retention_s,
                        st_recovery_checked_id(r->recovery), &eb) != ST_OK)
        st_log_warn("could not purge published outbox rows", "%s", eb.msg);
    long long backlog = 0;
    if (st_outbox_backlog(r->conn, &backlog, &eb) == ST_OK)
        st_metric_set(r->backlog, (double)backlog);
}

static void hints_unsubscribe(st_relay_t *r)
{
    if (r->hints != NULL)
        redisFree(r->hints);
    r->hints = NULL;
    st_metric_set(r->subscribed, 0);
}

/* Drops the subscription; logged at the first failure and at each loss, at debug
 * while it keeps failing. */
static void hints_failed(st_relay_t *r, const char *why)
{
    if (r->hints_subscribed != 0)
        st_log_warn("relay not subscribed to outbox hints; writers notify PostgreSQL",
                    "%s; retrying every %d s", why, HINTS_RETRY_S);
    else
        st_log_debug("relay could not subscribe to outbox hints", "%s", why);
    r->hints_subscribed = 0;
    hints_unsubscribe(r);
    r->hints_retry_after = time(NULL) + HINTS_RETRY_S;
}

/* The leader subscribes to <prefix>outbox (when Redis is configured and writers may
 * rely on hints), at most every HINTS_RETRY_S after a failure. */
static void hints_subscribe(st_relay_t *r)
{
    if (r->hints != NULL || r->hints_port == 0 || time(NULL) < r->hints_retry_after)
        return;
    struct timeval limit = {0, 200000};
    r->hints = redisConnectWithTimeout(r->hints_host, r->hints_port, limit);
    if (r->hints == NULL || r->hints->err) {
        hints_failed(r, r->hints != NULL ? r->hints->errstr : "no memory");
        return;
    }
    redisSetTimeout(r->hints, limit);
    redisReply *reply = redisCommand(r->hints, "SUBSCRIBE %s", r->hints_channel);
    if (reply == NULL) {
        hints_failed(r, r->hints->errstr);
        return;
    }
    freeReplyObject(reply);
    r->hints_subscribed = 1;
    st_metric_set(r->subscribed, 1);
    st_log_info("relay subscribed to outbox hints", "channel=%s", r->hints_channel);
}

/* Reads every hint that has arrived, without waiting; returns how many. Called before
 * each wait and after each drained batch, so that Redis never holds a backlog of them
 * for this subscriber (its pubsub output limit would drop the subscription). A broken
 * subscription is dropped. */
static int hints_take(st_relay_t *r)
{
    for (int reads = 0; r->hints != NULL && reads < 64; reads++) {
        struct pollfd pfd = {.fd = r->hints->fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) < 1)
            break;
        if (redisBufferRead(r->hints) != REDIS_OK) {
            hints_failed(r, r->hints->errstr[0] ? r->hints->errstr : "connection closed");
            return 0;
        }
    }
    if (r->hints == NULL)
        return 0;
    int n = 0;
    void *reply = NULL;
    while (redisGetReplyFromReader(r->hints, &reply) == REDIS_OK && reply != NULL) {
        freeReplyObject(reply);
        reply = NULL;
        n++;
    }
    return n;
}

/* Waits for a notification, a hint, a stop request, the safety timeout or the next
 * sweep. */
static void relay_wait(st_relay_t *r)
{
    /* Notifications that arrived while a claim query ran are already buffered in
     * libpq; the socket will not signal them again. */
    PQconsumeInput(r->conn);
    PGnotify *pending = PQnotifies(r->conn);
    int hinted = hints_take(r);
    if (pending != NULL || hinted > 0) {
        for (; pending != NULL; pending = PQnotifies(r->conn))
            PQfreemem(pending);
        return;
    }
    hints_subscribe(r);
    struct pollfd pfd[3] = {{.fd = PQsocket(r->conn), .events = POLLIN},
                            {.fd = r->stop_pipe[0], .events = POLLIN},
                            {.fd = r->hints != NULL ? r->hints->fd : -1, .events = POLLIN}};
    int kafka_up = __atomic_load_n(&r->kafka_up, __ATOMIC_ACQUIRE);
    /* Writers may rely on hints even while this leader is not subscribed (another
     * subscriber counts for them), so the short recheck holds whenever they may. */
    int wait_ms = !kafka_up ? 1000 : r->hints_port != 0 ? HINTED_RECHECK_MS : SAFETY_WAIT_MS;
    long long sweep_in = st_recovery_wait_ms(r->recovery);
    if (kafka_up && sweep_in < wait_ms)   /* no sweep while Kafka is down (relay_main) */
        wait_ms = (int)sweep_in;
    poll(pfd, 3, wait_ms);
    hints_take(r);
    rd_kafka_poll(r->producer, 0);   /* serve error callbacks */
    recheck_kafka(r);
    PQconsumeInput(r->conn);
    PGnotify *note;
    while ((note = PQnotifies(r->conn)) != NULL)
        PQfreemem(note);
}

/* The relay's states (the header comment draws them); relay_step() is the one place
 * that moves between them. */
typedef enum {
    RELAY_CONNECT,   /* no PostgreSQL session: connect, with backoff */
    RELAY_STANDBY,   /* connected; another relay leads: ask for the lock every second */
    RELAY_LEAD,      /* leading: drain, purge, sweep; step down when Kafka stays away */
    RELAY_WAIT,      /* leading, drained: sleep until a notification or a deadline */
} relay_state_t;

/* Does the work of state `s` once and returns the next state. Relay thread only. */
static relay_state_t relay_step(st_relay_t *r, relay_state_t s)
{
    switch (s) {
    case RELAY_CONNECT:
        if (!relay_connect(r)) {
            relay_pause(r, r->backoff_ms);
            r->backoff_ms = r->backoff_ms < 5000 ? r->backoff_ms * 2 : 5000;
            return RELAY_CONNECT;
        }
        r->backoff_ms = 100;
        return RELAY_STANDBY;
    case RELAY_STANDBY: {
        rd_kafka_poll(r->producer, 0);   /* serve error callbacks (a standby produces nothing) */
        recheck_kafka(r);
        int led = time(NULL) >= r->resigned_until ? relay_try_lead(r) : 0;
        if (led < 0) {
            relay_disconnect(r);
            return RELAY_CONNECT;
        }
        if (led == 0) {   /* another relay publishes: stand by */
            relay_pause(r, STANDBY_RETRY_MS);
            return RELAY_STANDBY;
        }
        return RELAY_LEAD;
    }
    case RELAY_LEAD: {
        int n = 0;
        while (!relay_stopping(r) && (n = relay_drain_once(r)) == r->cfg.relay_batch)
            hints_take(r);   /* what they announce is being drained anyway */
        if (n < 0 || PQstatus(r->conn) != CONNECTION_OK) {
            relay_disconnect(r);
            return RELAY_CONNECT;
        }
        relay_purge(r);
        /* Not while Kafka is unreachable: signals wait unconsumed then, not lost. */
        if (__atomic_load_n(&r->kafka_up, __ATOMIC_ACQUIRE) && st_recovery_due(r->recovery) &&
            st_recovery_sweep(r->recovery, r->conn) > 0)
            return RELAY_LEAD;   /* publish what it marked at once */
        if (PQstatus(r->conn) != CONNECTION_OK) {
            relay_disconnect(r);
            return RELAY_CONNECT;
        }
        if (__atomic_load_n(&r->kafka_up, __ATOMIC_ACQUIRE)) {
            r->kafka_down_since = 0;
        } else if (r->kafka_down_since == 0) {
            r->kafka_down_since = time(NULL);
        } else if (time(NULL) - r->kafka_down_since >= LEADER_KAFKA_DOWN_S) {
            relay_resign(r);
            return r->conn == NULL ? RELAY_CONNECT : RELAY_STANDBY;
        }
        return RELAY_WAIT;
    }
    case RELAY_WAIT:
        relay_wait(r);
        return RELAY_LEAD;
    }
    return RELAY_CONNECT;
}

static void *relay_main(void *arg)
{
    st_relay_t *r = arg;
    relay_state_t s = RELAY_CONNECT;
    r->backoff_ms = 100;
    while (!relay_stopping(r))
        s = relay_step(r, s);
    relay_disconnect(r);
    return NULL;
}

st_err_t st_relay_start(const st_config_t *cfg, st_relay_t **out, st_errbuf_t *eb)
{
    st_relay_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the relay");
    r->cfg = *cfg;
    if (st_outbox_hints_configure(cfg) &&
        st_hint_parse_url(cfg->redis_url, r->hints_host, sizeof r->hints_host, &r->hints_port))
        snprintf(r->hints_channel, sizeof r->hints_channel, "%s" ST_HINT_OUTBOX,
                 cfg->topic_prefix);
    else
        r->hints_port = 0;
    r->recovery = st_recovery_new(cfg);
    r->published = st_metrics_counter("strand_outbox_published_total",
                                      "Outbox rows published to Kafka", NULL);
    r->failed = st_metrics_counter("strand_outbox_publish_failures_total",
                                   "Outbox rows whose delivery failed (retried)", NULL);
    r->set_aside = st_metrics_counter("strand_outbox_set_aside_total",
                                      "Outbox rows Kafka refused for good (too large, invalid),"
                                      " dead-lettered and skipped", NULL);
    r->lag = st_metrics_histogram("strand_outbox_relay_lag_seconds",
                                  "Time from outbox insert to Kafka delivery", NULL);
    r->backlog = st_metrics_gauge("strand_outbox_backlog",
                                  "Unpublished outbox rows (sampled every minute)", NULL);
    r->leading = st_metrics_gauge("strand_outbox_relay_leader",
                                  "1 while this process's relay is the one publishing the outbox",
                                  NULL);
    r->subscribed = st_metrics_gauge("strand_outbox_relay_hints_subscribed",
                                     "1 while this process's relay leader is subscribed to"
                                     " Redis outbox hints", NULL);
    r->hints_subscribed = -1;
    st_kafka_callbacks_t cbs = {on_delivery, on_kafka_error, r};
    st_err_t err = st_kafka_producer_new(cfg, &cbs, &r->producer, eb);
    if (err != ST_OK) {
        st_recovery_free(r->recovery);
        free(r);
        return err;
    }
    if (pipe(r->stop_pipe) != 0 ||
        pthread_create(&r->thread, NULL, relay_main, r) != 0) {
        rd_kafka_destroy(r->producer);
        st_recovery_free(r->recovery);
        free(r);
        return st_err_set(eb, ST_ERR_INTERNAL, "could not start the relay thread: %s",
                          strerror(errno));
    }
    *out = r;
    return ST_OK;
}

void st_relay_stop(st_relay_t *r)
{
    if (r == NULL)
        return;
    __atomic_store_n(&r->stopping, 1, __ATOMIC_RELEASE);
    ssize_t ignored = write(r->stop_pipe[1], "x", 1);
    (void)ignored;
    pthread_join(r->thread, NULL);
    rd_kafka_flush(r->producer, 5000);
    /* What is still queued or in flight is given up: purging it serves its reports
     * (on_delivery frees their abandoned status), so none comes after the relay. */
    rd_kafka_purge(r->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(r->producer, 1000);
    rd_kafka_destroy(r->producer);
    close(r->stop_pipe[0]);
    close(r->stop_pipe[1]);
    st_recovery_free(r->recovery);
    free(r);
}

int st_relay_leading(const st_relay_t *r)
{
    return r != NULL && __atomic_load_n(&r->leader, __ATOMIC_ACQUIRE);
}

int st_relay_ready(const st_relay_t *r)
{
    return r != NULL && __atomic_load_n(&r->ready, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&r->kafka_up, __ATOMIC_ACQUIRE);
}
