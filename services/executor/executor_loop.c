/*
 * executor_loop.c - the signal pump: a Kafka consumer in group "<prefix>executor" on
 * the signals topic, feeding st_wakeup_run() on a pool of worker threads.
 *
 * Threads: one consumer thread (polls Kafka, dispatches, commits offsets, handles
 * rebalances) and STRAND_EXECUTOR_CONCURRENCY workers, each with its own PostgreSQL
 * connection and definition cache. A message goes to worker hash(key) % N, so one
 * instance's signals are applied in order by one thread at a time.
 *
 * Offsets: every dispatched message is appended to its partition's in-flight list.
 * A worker marks its entry done only after the wake-up (or dead letter) committed.
 * The consumer thread commits, per partition, the offset after the longest done
 * prefix; a message that never completes (stop during a retry) holds its partition's
 * offset back and is redelivered. Commits go out at most every
 * STRAND_EXECUTOR_COMMIT_INTERVAL_MS (each is a write on the broker); a crash replays
 * at most that interval's signals, which the duplicate check drops. On a revoke the
 * consumer waits for the workers to drain, commits, then lets the partitions go
 * (cooperative-sticky: only the partitions that move; see st_kafka_consumer_new()).
 *
 * Per message: decode -> wake-up transaction -> done. A retryable failure (PostgreSQL
 * down) retries the same message with backoff, never skipping it; a permanent failure
 * retries up to STRAND_MAX_ATTEMPTS times, then moves the message to the dead-letter
 * store in one transaction; a null, empty or undecodable message goes there at once. A
 * dead letter that cannot be written is retried with backoff while the worker counts as
 * stuck (/readyz "signals_consumer" down, strand_consumer_stuck).
 *
 * Waking the API: after each commit a worker publishes a Redis hint per applied
 * wake-up. Under STRAND_WAKE_NOTIFY=fallback (with STRAND_REDIS_URL set) its session
 * sets strand.wake_by_hint, so the trigger of migration 0026 skips PostgreSQL's
 * notification, for as long as its last hint reached a subscriber; a hint that reached
 * nobody (Redis down, no API subscribed) is followed at once by that notification,
 * sent after the commit, and the worker notifies in its transactions again until a
 * hint gets through.
 */
#include "executor.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/crash_point.h"
#include "strand/hint.h"
#include "strand/kafka.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/notice.h"
#include "strand/pg.h"
#include "strand/util.h"
#include "wakeup.h"

#define QUEUE_CAPACITY 256

/* One dispatched message; owned by the consumer thread, `done` set by a worker. */
typedef struct inflight {
    rd_kafka_message_t *msg;
    int done;                        /* atomic */
    struct inflight *next;
} inflight_t;

typedef struct {
    int32_t partition;
    inflight_t *head, *tail;
} partition_track_t;

typedef struct worker {
    struct st_executor *ex;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;             /* signalled on push, pop and idle */
    inflight_t *queue[QUEUE_CAPACITY];
    int qhead, qlen;
    int busy;                        /* a message is being processed */
    PGconn *conn;
    st_defcache_t *cache;
    st_hint_t *hint;                 /* optional Redis wake hints */
    int rely_on_hints;               /* the next wake-ups skip PostgreSQL's notification */
    int session_by_hint;             /* `conn` has strand.wake_by_hint on */
    int stuck;                       /* holds a message it could not dead-letter */
} worker_t;

struct st_executor {
    st_service_t *svc;
    pthread_t thread;
    rd_kafka_t *consumer;
    int nworkers;
    worker_t *workers;
    partition_track_t *parts;        /* consumer thread only */
    int nparts, cap_parts;
    int pg_up, kafka_up;             /* atomics, for /readyz */
    int hints_may_replace;           /* STRAND_WAKE_NOTIFY=fallback and Redis configured */
    st_kafka_watch_t watch;          /* last poll, stuck workers, lag */
    st_metric_t *m_applied, *m_dropped, *m_duration, *m_errors, *m_inflight;
    st_metric_t *m_hint_missed;
};

static int stopping(const st_executor_t *ex)
{
    return st_service_stopping(ex->svc);
}

static void backoff_sleep(st_executor_t *ex, int *backoff_ms)
{
    for (int waited = 0; waited < *backoff_ms && !stopping(ex); waited += 50)
        poll(NULL, 0, 50);
    *backoff_ms = *backoff_ms < 5000 ? *backoff_ms * 2 : 5000;
}

static int ensure_pg(worker_t *w)
{
    if (w->conn != NULL && PQstatus(w->conn) == CONNECTION_OK)
        return 1;
    st_errbuf_t eb;
    if (st_pg_reconnect(&w->conn, w->ex->svc->cfg.pg_dsn, "strand-executor", NULL, &eb) != ST_OK) {
        __atomic_store_n(&w->ex->pg_up, 0, __ATOMIC_RELEASE);
        st_log_warn("executor could not connect to PostgreSQL", "%s", eb.msg);
        return 0;
    }
    __atomic_store_n(&w->ex->pg_up, 1, __ATOMIC_RELEASE);
    w->session_by_hint = 0;   /* a new session notifies until told otherwise */
    return 1;
}

/* ---- waking the API (see the top of this file) ------------------------------------ */

/* Before a wake-up transaction: sets the session's strand.wake_by_hint to match
 * w->rely_on_hints when it differs. A failed SET leaves w->session_by_hint as it was,
 * which is what wake_api() goes by. */
static void sync_wake_mode(worker_t *w)
{
    if (w->session_by_hint == w->rely_on_hints)
        return;
    st_errbuf_t eb;
    const char *sql = w->rely_on_hints ? "SET strand.wake_by_hint = on"
                                       : "SET strand.wake_by_hint = off";
    if (st_pg_exec(w->conn, sql, 0, NULL, NULL, &eb) == ST_OK)
        w->session_by_hint = w->rely_on_hints;
    else
        st_log_warn("could not set the wake notification mode", "%s", eb.msg);
}

/* After the commit of an applied wake-up of `instance_id`: the hint, and PostgreSQL's
 * notification when the transaction skipped it and the hint reached nobody. */
static void wake_api(worker_t *w, const char *instance_id)
{
    st_hint_after_commit(w->hint, w->conn, ST_WAKE_CHANNEL, instance_id, w->session_by_hint,
                         w->ex->hints_may_replace ? &w->rely_on_hints : NULL,
                         w->ex->m_hint_missed);
}

/* ---- one message ---------------------------------------------------------------- */

/* Dead-letters a message in its own transaction; with `sig` (a decoded signal whose
 * wake-up failed with `cause`) its instance's last_error says so in the same
 * transaction. Returns ST_OK once recorded; a failure marks the worker stuck (unready,
 * strand_consumer_stuck) until one succeeds. */
static st_err_t dead_letter(worker_t *w, const rd_kafka_message_t *msg, const st_signal_t *sig,
                            st_err_t cause, const char *instance_id, const char *signal_id,
                            const char *reason, int attempts)
{
    st_errbuf_t eb;
    st_dead_letter_source_t src = {rd_kafka_topic_name(msg->rkt), msg->partition,
                                   msg->offset, instance_id,
                                   sig != NULL ? sig->signal_id : signal_id};
    st_err_t err = st_pg_begin(w->conn, &eb);
    if (err == ST_OK)
        err = st_dead_letter_add_tx(w->conn, &src, reason, attempts, w->ex->svc->cfg.node_id,
                                    msg->payload, msg->len, &eb);
    /* A refused signal (verify.h) came from outside Strand: it does not get to write the
     * instance's last_error, which would let a forger overwrite any instance's. */
    if (err == ST_OK && sig != NULL && cause != ST_ERR_FORBIDDEN)
        err = st_wakeup_failed_tx(w->conn, sig, cause, reason, attempts, 1, &eb);
    if (err == ST_OK && sig != NULL && cause == ST_ERR_FORBIDDEN)   /* verify.h: a refusal */
        err = st_notice_add_tx(w->conn, "SignalRefused", sig->instance_id, sig->signal_id,
                               reason, NULL, &eb);
    if (err == ST_OK)
        err = st_pg_commit(w->conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(w->conn);
        st_kafka_watch_dead_letter_failed(&w->ex->watch, &w->stuck);
        st_log_error("could not record a dead letter, will retry",
                     "topic=%s partition=%d offset=%lld: %s", src.topic, src.partition,
                     (long long)src.offset, eb.msg);
    } else {
        st_kafka_watch_dead_letter_done(&w->ex->watch, &w->stuck);
        st_log_warn("message moved to the dead-letter store",
                    "topic=%s partition=%d offset=%lld reason=%s", src.topic, src.partition,
                    (long long)src.offset, reason);
    }
    return err;
}

/* The largest message a worker decodes: a request body (STRAND_HTTP_MAX_BODY) plus
 * the signal's envelope. */
static size_t message_limit(const st_executor_t *ex)
{
    return (size_t)ex->svc->cfg.max_body_bytes + 64 * 1024;
}

/* Decodes `msg` into `sig` (the caller closes it on ST_OK); an oversized, empty or
 * undecodable message is ST_ERR_INVALID with `eb` saying why. */
static st_err_t decode_message(const st_executor_t *ex, const rd_kafka_message_t *msg,
                               st_signal_t *sig, st_errbuf_t *eb)
{
    if (msg->len > message_limit(ex))
        return st_err_set(eb, ST_ERR_INVALID,
                          "the message has %zu bytes, more than the limit of %zu", msg->len,
                          message_limit(ex));
    if (msg->payload == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "the message has no value (a tombstone)");
    return st_signal_decode(msg->payload, msg->len, sig, eb);
}

/* Counts and reports one committed wake-up taking `seconds`; publishes its wake hint. */
static void wakeup_committed(worker_t *w, const st_signal_t *sig, st_wake_outcome_t outcome,
                             double seconds)
{
    st_executor_t *ex = w->ex;
    /* Tests: committed, its offset not yet (a duplicate committed nothing). */
    if (outcome != ST_WAKE_DUPLICATE)
        ST_CRASH_POINT("executor.after_commit");
    st_metric_observe(ex->m_duration, seconds);
    st_metric_inc(outcome == ST_WAKE_APPLIED || outcome == ST_WAKE_BUFFERED ? ex->m_applied
                                                                           : ex->m_dropped);
    if (outcome == ST_WAKE_APPLIED)
        wake_api(w, sig->instance_id);   /* after commit */
    if (outcome != ST_WAKE_APPLIED && outcome != ST_WAKE_BUFFERED)
        st_log_info("signal dropped", "signal=%s instance=%s outcome=%s", sig->signal_id,
                    sig->instance_id, st_wake_outcome_name(outcome));
}

/* Handles one message until it is committed, dead-lettered, or the service stops.
 * Returns 1 if its offset may be committed. */
static int handle_message(worker_t *w, const rd_kafka_message_t *msg)
{
    st_executor_t *ex = w->ex;
    st_signal_t sig;
    st_errbuf_t eb;
    int backoff_ms = 100;
    size_t limit = message_limit(ex);
    st_err_t decoded = decode_message(ex, msg, &sig, &eb);
    if (decoded != ST_OK) {
        /* Malformed or oversized: retrying cannot help. An oversized envelope that still
         * decodes names its signal and instance: the dead letter records them, so the
         * recovery sweep does not publish it again (its payload is too large to keep). */
        char known_signal[40] = "", known_instance[40] = "";
        st_signal_t big;
        st_errbuf_t ignored;
        if (msg->len > limit && msg->payload != NULL &&
            st_signal_decode(msg->payload, msg->len, &big, &ignored) == ST_OK) {
            snprintf(known_signal, sizeof known_signal, "%s", big.signal_id);
            snprintf(known_instance, sizeof known_instance, "%s", big.instance_id);
            st_signal_close(&big);
        }
        while (!stopping(ex)) {
            if (ensure_pg(w) &&
                dead_letter(w, msg, NULL, ST_OK, known_instance[0] ? known_instance : NULL,
                            known_signal[0] ? known_signal : NULL, eb.msg, 1) == ST_OK)
                return 1;
            backoff_sleep(ex, &backoff_ms);
        }
        st_kafka_watch_dead_letter_done(&ex->watch, &w->stuck);   /* stopped while stuck */
        return 0;
    }
    int attempts = 0;
    int commit = 0;
    while (!stopping(ex)) {
        if (!ensure_pg(w)) {
            backoff_sleep(ex, &backoff_ms);
            continue;
        }
        sync_wake_mode(w);
        double started = st_mono_s();
        st_wake_outcome_t outcome = 0;
        st_err_t err = st_wakeup_run(w->conn, w->cache, ex->svc->cfg.node_id, &sig, &outcome,
                                     &eb);
        if (err == ST_OK) {
            wakeup_committed(w, &sig, outcome, st_mono_s() - started);
            commit = 1;
            break;
        }
        st_metric_inc(ex->m_errors);
        if (st_err_retryable(err) || PQstatus(w->conn) != CONNECTION_OK) {
            st_log_warn("wake-up failed, will retry", "instance=%s error=%s: %s",
                        sig.instance_id, st_err_name(err), eb.msg);
            backoff_sleep(ex, &backoff_ms);
            continue;
        }
        attempts++;
        st_log_warn("wake-up failed", "instance=%s attempt=%d error=%s: %s", sig.instance_id,
                    attempts, st_err_name(err), eb.msg);
        /* A refused signal (verify.h) is dead-lettered at once: retrying cannot help. */
        if ((attempts >= ex->svc->cfg.max_attempts || err == ST_ERR_FORBIDDEN) &&
            dead_letter(w, msg, &sig, err, sig.instance_id, NULL, eb.msg, attempts) == ST_OK) {
            commit = 1;
            break;
        }
        st_wakeup_failed(w->conn, &sig, err, eb.msg, attempts);   /* last_error, then retry */
        backoff_sleep(ex, &backoff_ms);
    }
    st_kafka_watch_dead_letter_done(&ex->watch, &w->stuck);
    st_signal_close(&sig);
    return commit;
}

/* Applies `n` (2 or more) queued messages in one transaction, in queue order, and
 * commits once (STRAND_EXECUTOR_GROUP_MAX). Returns 1 when all are committed; 0 when
 * nothing was written (a message does not decode, PostgreSQL is away, or a wake-up or
 * the commit failed): the caller then handles each message alone, with its retries and
 * dead-lettering. */
static int handle_group(worker_t *w, inflight_t *const *items, int n)
{
    st_executor_t *ex = w->ex;
    st_signal_t *sigs = calloc((size_t)n, sizeof *sigs);
    st_wake_outcome_t *outcomes = calloc((size_t)n, sizeof *outcomes);
    st_errbuf_t eb;
    int decoded = 0, ok = 0;
    if (sigs == NULL || outcomes == NULL)
        goto out;
    for (; decoded < n; decoded++)
        if (decode_message(ex, items[decoded]->msg, &sigs[decoded], &eb) != ST_OK)
            goto out;
    if (!ensure_pg(w))
        goto out;
    sync_wake_mode(w);
    double started = st_mono_s();
    st_err_t err = st_pg_begin(w->conn, &eb);
    for (int i = 0; i < n && err == ST_OK; i++)
        err = st_wakeup_run_tx(w->conn, w->cache, ex->svc->cfg.node_id, &sigs[i], &outcomes[i],
                               &eb);
    if (err == ST_OK)
        err = st_pg_commit(w->conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(w->conn);
        st_log_debug("wake-up group rolled back, applying its signals one by one",
                     "signals=%d error=%s: %s", n, st_err_name(err), eb.msg);
        goto out;
    }
    double each = (st_mono_s() - started) / n;
    for (int i = 0; i < n; i++)
        wakeup_committed(w, &sigs[i], outcomes[i], each);
    ok = 1;
out:
    for (int i = 0; i < decoded; i++)
        st_signal_close(&sigs[i]);
    free(sigs);
    free(outcomes);
    return ok;
}

/* ---- workers --------------------------------------------------------------------- */

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    int group_max = w->ex->svc->cfg.executor_group_max;
    inflight_t *group[QUEUE_CAPACITY];
    if (group_max > QUEUE_CAPACITY)
        group_max = QUEUE_CAPACITY;
    ensure_pg(w);
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->qlen == 0 && !stopping(w->ex))
            pthread_cond_wait(&w->cond, &w->lock);
        if (stopping(w->ex))
            break;   /* queued messages stay uncommitted and are redelivered */
        int n = 0;
        while (w->qlen > 0 && n < group_max) {
            group[n++] = w->queue[w->qhead];
            w->qhead = (w->qhead + 1) % QUEUE_CAPACITY;
            w->qlen--;
        }
        w->busy = 1;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        if (n > 1 && handle_group(w, group, n)) {
            for (int i = 0; i < n; i++)
                __atomic_store_n(&group[i]->done, 1, __ATOMIC_RELEASE);
        } else {
            for (int i = 0; i < n; i++)
                if (handle_message(w, group[i]->msg))
                    __atomic_store_n(&group[i]->done, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_lock(&w->lock);
        w->busy = 0;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Queues a message on its worker, waiting while that worker's queue is full. */
static void dispatch(st_executor_t *ex, inflight_t *item)
{
    const rd_kafka_message_t *msg = item->msg;
    uint32_t hash = 2166136261u;   /* FNV-1a of the key: the instance id */
    for (size_t i = 0; i < msg->key_len; i++)
        hash = (hash ^ ((const uint8_t *)msg->key)[i]) * 16777619u;
    worker_t *w = &ex->workers[hash % (uint32_t)ex->nworkers];
    pthread_mutex_lock(&w->lock);
    while (w->qlen == QUEUE_CAPACITY && !stopping(ex))
        pthread_cond_wait(&w->cond, &w->lock);
    if (w->qlen < QUEUE_CAPACITY) {
        w->queue[(w->qhead + w->qlen) % QUEUE_CAPACITY] = item;
        w->qlen++;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
}

/* Waits until every worker's queue is empty and no message is in hand. */
static void drain_workers(st_executor_t *ex)
{
    for (int i = 0; i < ex->nworkers; i++) {
        worker_t *w = &ex->workers[i];
        pthread_mutex_lock(&w->lock);
        while ((w->qlen > 0 || w->busy) && !stopping(ex))
            pthread_cond_wait(&w->cond, &w->lock);
        pthread_mutex_unlock(&w->lock);
    }
}

/* ---- offsets (consumer thread only) ---------------------------------------------- */

static partition_track_t *track_get(st_executor_t *ex, int32_t partition)
{
    for (int i = 0; i < ex->nparts; i++)
        if (ex->parts[i].partition == partition)
            return &ex->parts[i];
    if (ex->nparts == ex->cap_parts) {
        ex->cap_parts = ex->cap_parts ? ex->cap_parts * 2 : 16;
        ex->parts = realloc(ex->parts, (size_t)ex->cap_parts * sizeof *ex->parts);
        if (ex->parts == NULL)
            abort();
    }
    partition_track_t *t = &ex->parts[ex->nparts++];
    memset(t, 0, sizeof *t);
    t->partition = partition;
    return t;
}

/* Commits, per partition, past the longest prefix of done messages. With `forget`,
 * also drops what is not done (used on revoke and stop: it will be redelivered). */
static void commit_done(st_executor_t *ex, int sync, int forget)
{
    rd_kafka_topic_partition_list_t *offsets = rd_kafka_topic_partition_list_new(8);
    int64_t inflight = 0;
    for (int i = 0; i < ex->nparts; i++) {
        partition_track_t *t = &ex->parts[i];
        rd_kafka_message_t *last = NULL;
        while (t->head != NULL && __atomic_load_n(&t->head->done, __ATOMIC_ACQUIRE)) {
            inflight_t *item = t->head;
            t->head = item->next;
            if (last != NULL)
                rd_kafka_message_destroy(last);
            last = item->msg;
            free(item);
        }
        if (t->head == NULL)
            t->tail = NULL;
        if (last != NULL) {
            rd_kafka_topic_partition_list_add(offsets, rd_kafka_topic_name(last->rkt),
                                              last->partition)->offset = last->offset + 1;
            rd_kafka_message_destroy(last);
        }
        while (forget && t->head != NULL) {
            inflight_t *item = t->head;
            t->head = item->next;
            rd_kafka_message_destroy(item->msg);
            free(item);
        }
        if (forget)
            t->tail = NULL;
        for (inflight_t *p = t->head; p != NULL; p = p->next)
            inflight++;
    }
    if (offsets->cnt > 0) {
        rd_kafka_resp_err_t err = rd_kafka_commit(ex->consumer, offsets, sync ? 0 : 1);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
            st_log_warn("could not commit offsets", "%s", rd_kafka_err2str(err));
    }
    rd_kafka_topic_partition_list_destroy(offsets);
    st_metric_set(ex->m_inflight, (double)inflight);
}

/* Drops the tracking of partitions that left this member (all done after a drain,
 * unless stopping: then they are redelivered to the next owner). */
static void forget_partitions(st_executor_t *ex, const rd_kafka_topic_partition_list_t *gone)
{
    for (int i = 0; i < ex->nparts; i++) {
        partition_track_t *t = &ex->parts[i];
        int revoked = 0;
        for (int j = 0; j < gone->cnt && !revoked; j++)
            revoked = gone->elems[j].partition == t->partition;
        if (!revoked)
            continue;
        while (t->head != NULL) {
            inflight_t *item = t->head;
            t->head = item->next;
            rd_kafka_message_destroy(item->msg);
            free(item);
        }
        t->tail = NULL;
    }
}

/* Cooperative (the default): only the partitions that move are revoked, the others
 * keep being consumed through the rebalance. Eager (an operator's override): all are
 * revoked and the whole assignment is replaced. */
static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque)
{
    st_executor_t *ex = opaque;
    int eager = st_kafka_rebalance_protocol_eager(rk);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        st_log_info("partitions assigned", "count=%d protocol=%s", partitions->cnt,
                    eager ? "eager" : "cooperative");
        rd_kafka_error_t *error = NULL;
        if (eager)
            rd_kafka_assign(rk, partitions);
        else
            error = rd_kafka_incremental_assign(rk, partitions);
        if (error != NULL) {
            st_log_error("could not take assigned partitions", "%s",
                         rd_kafka_error_string(error));
            rd_kafka_error_destroy(error);
        }
        __atomic_store_n(&ex->kafka_up, 1, __ATOMIC_RELEASE);
        return;
    }
    /* Revoke (or lost): let the work in hand finish and commit before the partitions
     * move. A lost assignment may already belong to another member: its commit is
     * asynchronous (it may fail), and the new owner's duplicate check drops what is
     * replayed. */
    st_log_info("partitions revoked", "count=%d protocol=%s", partitions->cnt,
                eager ? "eager" : "cooperative");
    drain_workers(ex);
    /* A lost assignment (session timed out) has no generation to commit under. */
    int lost = rd_kafka_assignment_lost(rk);
    commit_done(ex, !lost, 0);
    forget_partitions(ex, partitions);
    if (eager) {
        rd_kafka_assign(rk, NULL);
    } else {
        rd_kafka_error_t *error = rd_kafka_incremental_unassign(rk, partitions);
        if (error != NULL) {
            st_log_error("could not release revoked partitions", "%s",
                         rd_kafka_error_string(error));
            rd_kafka_error_destroy(error);
        }
    }
}

/* ---- the consumer thread --------------------------------------------------------- */

static void *consumer_main(void *arg)
{
    st_executor_t *ex = arg;
    long long last_commit = st_now_ms();
    while (!stopping(ex)) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(ex->consumer, 100);
        st_kafka_watch_polled(&ex->watch);
        if (msg != NULL && msg->err) {
            if (msg->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
                __atomic_store_n(&ex->kafka_up, 0, __ATOMIC_RELEASE);
            if (!st_kafka_watch_error(&ex->watch, ex->consumer, msg->err) &&
                msg->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                st_log_warn("signals consumer error", "%s", rd_kafka_message_errstr(msg));
            rd_kafka_message_destroy(msg);
            msg = NULL;
        }
        if (msg != NULL) {
            __atomic_store_n(&ex->kafka_up, 1, __ATOMIC_RELEASE);
            inflight_t *item = calloc(1, sizeof *item);
            if (item == NULL)
                abort();
            item->msg = msg;
            partition_track_t *t = track_get(ex, msg->partition);
            if (t->tail != NULL)
                t->tail->next = item;
            else
                t->head = item;
            t->tail = item;
            dispatch(ex, item);
        }
        long long now = st_now_ms();
        if (now - last_commit >= ex->svc->cfg.executor_commit_interval_ms) {
            commit_done(ex, 0, 0);
            last_commit = now;
        }
    }
    /* Stop: wake the workers, wait for the messages in hand, commit what finished. */
    for (int i = 0; i < ex->nworkers; i++) {
        pthread_mutex_lock(&ex->workers[i].lock);
        pthread_cond_broadcast(&ex->workers[i].cond);
        pthread_mutex_unlock(&ex->workers[i].lock);
    }
    for (int i = 0; i < ex->nworkers; i++)
        pthread_join(ex->workers[i].thread, NULL);
    commit_done(ex, 1, 1);
    return NULL;
}

static int pg_ready(void *ctx)
{
    st_executor_t *ex = ctx;
    return __atomic_load_n(&ex->pg_up, __ATOMIC_ACQUIRE);
}

static int kafka_ready(void *ctx)
{
    st_executor_t *ex = ctx;
    return __atomic_load_n(&ex->kafka_up, __ATOMIC_ACQUIRE);
}

/* The consumer thread polled within STRAND_CONSUMER_POLL_LIMIT_MS and no worker holds a
 * message it cannot dead-letter. */
static int consumer_ready(void *ctx)
{
    st_executor_t *ex = ctx;
    return st_kafka_watch_ready(&ex->watch);
}

static void free_executor(st_executor_t *ex)
{
    for (int i = 0; ex->workers != NULL && i < ex->nworkers; i++) {
        if (ex->workers[i].conn != NULL)
            PQfinish(ex->workers[i].conn);
        st_defcache_free(ex->workers[i].cache);
        st_hint_free(ex->workers[i].hint);
        pthread_mutex_destroy(&ex->workers[i].lock);
        pthread_cond_destroy(&ex->workers[i].cond);
    }
    free(ex->workers);
    free(ex->parts);
    free(ex);
}

st_err_t st_executor_start(st_service_t *svc, st_executor_t **out, st_errbuf_t *eb)
{
    st_executor_t *ex = calloc(1, sizeof *ex);
    if (ex == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the executor");
    ex->svc = svc;
    ex->hints_may_replace = st_hint_may_replace_notify(&svc->cfg);
    ex->nworkers = svc->cfg.executor_concurrency;
    ex->workers = calloc((size_t)ex->nworkers, sizeof *ex->workers);
    if (ex->workers == NULL) {
        free(ex);
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the executor");
    }
    for (int i = 0; i < ex->nworkers; i++) {
        ex->workers[i].ex = ex;
        ex->workers[i].cache = st_defcache_new();
        ex->workers[i].hint = st_hint_new(&svc->cfg, ST_HINT_WAKE);
        ex->workers[i].rely_on_hints = ex->hints_may_replace;
        pthread_mutex_init(&ex->workers[i].lock, NULL);
        pthread_cond_init(&ex->workers[i].cond, NULL);
    }
    ex->m_applied = st_metrics_counter("strand_signals_processed_total",
                                       "Signals processed by outcome", "outcome=\"applied\"");
    ex->m_dropped = st_metrics_counter("strand_signals_processed_total",
                                       "Signals processed by outcome", "outcome=\"dropped\"");
    ex->m_errors = st_metrics_counter("strand_wakeup_errors_total",
                                      "Wake-ups that failed and were retried", NULL);
    ex->m_duration = st_metrics_histogram("strand_wakeup_duration_seconds",
                                          "Time of one wake-up transaction", NULL);
    ex->m_inflight = st_metrics_gauge("strand_executor_inflight_messages",
                                      "Consumed signals not yet committed", NULL);
    ex->m_hint_missed = st_metrics_counter("strand_wake_hints_missed_total",
                                           "Wake-ups whose Redis hint reached no subscriber, "
                                           "notified through PostgreSQL after the commit",
                                           NULL);
    char group[128];
    snprintf(group, sizeof group, "%sexecutor", svc->cfg.topic_prefix);
    static const char *const topics[] = {ST_TOPIC_SIGNALS, NULL};
    st_kafka_watch_init(&ex->watch, &svc->cfg, group);
    st_kafka_consumer_opts_t opts = {.on_rebalance = on_rebalance, .opaque = ex,
                                     .watch = &ex->watch};
    st_err_t err = st_kafka_consumer_new(&svc->cfg, group, topics, &opts, &ex->consumer, eb);
    if (err != ST_OK) {
        free_executor(ex);
        return err;
    }
    /* Kafka is "up" for readiness once the consumer has a broker; assignment and
     * messages keep it current. */
    __atomic_store_n(&ex->kafka_up, st_kafka_connected(ex->consumer), __ATOMIC_RELEASE);
    st_service_add_ready(svc, "postgres", pg_ready, ex);
    st_service_add_ready(svc, "kafka", kafka_ready, ex);
    st_service_add_ready(svc, "signals_consumer", consumer_ready, ex);
    int started = 0;
    for (; started < ex->nworkers; started++)
        if (pthread_create(&ex->workers[started].thread, NULL, worker_main,
                           &ex->workers[started]) != 0)
            break;
    if (started < ex->nworkers ||
        pthread_create(&ex->thread, NULL, consumer_main, ex) != 0) {
        __atomic_store_n(&svc->stopping, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < started; i++) {
            pthread_mutex_lock(&ex->workers[i].lock);
            pthread_cond_broadcast(&ex->workers[i].cond);
            pthread_mutex_unlock(&ex->workers[i].lock);
            pthread_join(ex->workers[i].thread, NULL);
        }
        st_kafka_consumer_free(ex->consumer);
        free_executor(ex);
        return st_err_set(eb, ST_ERR_INTERNAL, "could not start the executor threads");
    }
    *out = ex;
    return ST_OK;
}

void st_executor_stop(st_executor_t *ex)
{
    if (ex == NULL)
        return;
    pthread_join(ex->thread, NULL);
    st_kafka_consumer_free(ex->consumer);
    free_executor(ex);
}
