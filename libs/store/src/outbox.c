/*
 * outbox.c - the owner of strand.outbox (see outbox.h): the writers' inserts and how
 * they wake the relay, and the relay's and the recovery sweep's statements.
 */
#include "strand/outbox.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/hint.h"
#include "strand/metrics.h"
#include "strand/pg.h"
#include "strand/topics.h"
#include "strand/util.h"

/* ---- waking the relay (writers' side) ---------------------------------------------- */

/* Set once by the first st_outbox_hints_configure() of the process (the first relay
 * started): writers
 * publish outbox hints only in a process that runs a relay (a service); elsewhere
 * (strand-admin, tests) every outbox insert notifies. */
static st_config_t hints_cfg;
static int hints_may_replace;   /* STRAND_WAKE_NOTIFY=fallback and Redis configured */
static st_metric_t *m_hints_missed;
static pthread_key_t hints_key;   /* this thread's outbox_waker_t, freed at its exit */

/* One writing thread's publisher, and whether its outbox inserts skip the notification
 * (its last hint reached the relay leader). */
typedef struct {
    st_hint_t *hint;
    int rely_on_hints;
} outbox_waker_t;

static void waker_free(void *p)
{
    outbox_waker_t *w = p;
    st_hint_free(w->hint);
    free(w);
}

int st_outbox_hints_configure(const st_config_t *cfg)
{
    static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
    static int configured;
    pthread_mutex_lock(&once);
    if (!configured) {
        configured = 1;
        hints_cfg = *cfg;
        m_hints_missed = st_metrics_counter("strand_outbox_hints_missed_total",
                                            "Outbox commits whose Redis hint reached no relay,"
                                            " so the writer notified PostgreSQL", NULL);
        if (pthread_key_create(&hints_key, waker_free) != 0)
            abort();
        __atomic_store_n(&hints_may_replace, st_hint_may_replace_notify(cfg), __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&once);
    return __atomic_load_n(&hints_may_replace, __ATOMIC_ACQUIRE);
}

/* This thread's waker, or NULL in a process without a relay or without hints. */
static outbox_waker_t *waker(void)
{
    if (!__atomic_load_n(&hints_may_replace, __ATOMIC_ACQUIRE))
        return NULL;
    outbox_waker_t *w = pthread_getspecific(hints_key);
    if (w == NULL) {
        w = calloc(1, sizeof *w);
        if (w == NULL)
            abort();
        w->hint = st_hint_new(&hints_cfg, ST_HINT_OUTBOX);
        w->rely_on_hints = 1;   /* a hint that reaches nobody is followed by NOTIFY */
        pthread_setspecific(hints_key, w);
    }
    return w;
}

/* After the commit of outbox rows inserted without the notification: the hint, and
 * the notification when it reached no relay leader (none subscribed, Redis down).
 * Registered only by a thread that has a waker. */
static void outbox_committed_unnotified(PGconn *conn)
{
    outbox_waker_t *w = waker();
    st_hint_after_commit(w->hint, conn, ST_OUTBOX_CHANNEL, "", 1, &w->rely_on_hints,
                         m_hints_missed);
}

/* After the commit of outbox rows inserted with the notification: a hint that gets
 * through lets this thread's next inserts skip it. */
static void outbox_committed_notified(PGconn *conn)
{
    outbox_waker_t *w = waker();
    st_hint_after_commit(w->hint, conn, ST_OUTBOX_CHANNEL, "", 0, &w->rely_on_hints,
                         m_hints_missed);
}

/* Queues an outbox insert: `sql_notify` (it notifies the relay at commit), or
 * `sql_quiet` (it does not) when this thread's hints reach the relay leader and the
 * transaction's commit can publish one (st_pg_after_commit). */
static st_err_t outbox_queue(PGconn *conn, const char *sql_notify, const char *sql_quiet,
                             int nparams, const char *const *params, const int *lengths,
                             const int *formats, st_errbuf_t *eb)
{
    outbox_waker_t *w = waker();
    int quiet = w != NULL && w->rely_on_hints &&
                st_pg_after_commit(conn, outbox_committed_unnotified);
    if (!quiet && w != NULL)
        st_pg_after_commit(conn, outbox_committed_notified);
    return st_pg_queue_bin(conn, quiet ? sql_quiet : sql_notify, nparams, params, lengths,
                           formats, eb);
}

#define OUTBOX_INSERT                                                                    \
    "WITH ins AS (INSERT INTO strand.outbox (topic, key, payload) VALUES ($1, $2, $3))"
#define OUTBOX_INSERT_SIGNAL                                                                 \
    "WITH ins AS (INSERT INTO strand.outbox (topic, key, payload, signal_id, instance_id)" \
    " VALUES ('" ST_TOPIC_SIGNALS "', $1, $2, $3, $4::uuid))"
#define OUTBOX_NOTIFY " SELECT pg_notify('" ST_OUTBOX_CHANNEL "', '')"
#define OUTBOX_QUIET " SELECT 1"

st_err_t st_outbox_add_tx(PGconn *conn, const char *topic, const char *key,
                          const void *payload, size_t len, st_errbuf_t *eb)
{
    /* The insert and the notification (delivered at commit) in one statement, queued:
     * it goes out with the transaction's next statement or its COMMIT. */
    const char *params[] = {topic, key, payload};
    int lengths[] = {0, 0, (int)len};
    int formats[] = {0, 0, 1};
    return outbox_queue(conn, OUTBOX_INSERT OUTBOX_NOTIFY, OUTBOX_INSERT OUTBOX_QUIET, 3, params,
                        lengths, formats, eb);
}

st_err_t st_outbox_add_signal_tx(PGconn *conn, const char *signal_id, const char *instance_id,
                                 const void *payload, size_t len, st_errbuf_t *eb)
{
    /* An id that is no UUID is not tracked (the executor drops its signal anyway). */
    const char *params[] = {instance_id, payload, signal_id,
                            st_uuid_valid(instance_id) ? instance_id : NULL};
    int lengths[] = {0, (int)len, 0, 0};
    int formats[] = {0, 1, 0, 0};
    return outbox_queue(conn, OUTBOX_INSERT_SIGNAL OUTBOX_NOTIFY,
                        OUTBOX_INSERT_SIGNAL OUTBOX_QUIET, 4, params, lengths, formats, eb);
}

/* ---- the relay's statements ------------------------------------------------------- */

st_err_t st_outbox_claim_tx(PGconn *conn, int limit, PGresult **rows, st_errbuf_t *eb)
{
    static const char *const sql_outbox_claim =
        "SELECT id, topic, key, payload,"
        " extract(epoch FROM (clock_timestamp() - created_at)), signal_id, instance_id"
        " FROM strand.outbox WHERE published_at IS NULL"
        " ORDER BY id LIMIT $1 FOR UPDATE";
    char n[16];
    snprintf(n, sizeof n, "%d", limit);
    const char *params[] = {n};
    /* Text results: payload arrives hex-escaped (PQunescapeBytea). */
    return st_pg_exec(conn, sql_outbox_claim, 1, params, rows, eb);
}

st_err_t st_outbox_mark_published_tx(PGconn *conn, const char *ids, st_errbuf_t *eb)
{
    static const char *const sql_outbox_mark =
        "UPDATE strand.outbox SET published_at = now() WHERE id = ANY($1::bigint[])";
    const char *params[] = {ids};
    return st_pg_exec(conn, sql_outbox_mark, 1, params, NULL, eb);
}

st_err_t st_outbox_set_aside_tx(PGconn *conn, const char *id, const char *reason,
                                st_errbuf_t *eb)
{
    static const char *const sql_outbox_set_aside =
        "UPDATE strand.outbox SET published_at = now(), failed_at = now(), publish_error = $2"
        " WHERE id = $1::bigint";
    const char *params[] = {id, reason};
    return st_pg_exec(conn, sql_outbox_set_aside, 2, params, NULL, eb);
}

st_err_t st_outbox_purge(PGconn *conn, int retention_s, long long checked_id, st_errbuf_t *eb)
{
    static const char *const sql_outbox_purge =
        "DELETE FROM strand.outbox WHERE id IN (SELECT id FROM strand.outbox"
        " WHERE published_at < now() - make_interval(secs => $1) AND recoveries = 0"
        " AND (signal_id IS NULL OR id <= $2::bigint) LIMIT 10000)";
    char secs[16], checked[24];
    snprintf(secs, sizeof secs, "%d", retention_s);
    snprintf(checked, sizeof checked, "%lld", checked_id);
    const char *params[] = {secs, checked};
    return st_pg_exec(conn, sql_outbox_purge, 2, params, NULL, eb);
}

st_err_t st_outbox_backlog(PGconn *conn, long long *count, st_errbuf_t *eb)
{
    static const char *const sql_outbox_backlog =
        "SELECT count(*) FROM strand.outbox WHERE published_at IS NULL";
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_outbox_backlog, 0, NULL, &res, eb);
    if (err == ST_OK) {
        *count = atoll(PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    return err;
}

/* ---- the recovery sweep's statements (recovery.h) --------------------------------- */

/* A signal row `e` (with id, signal_id, instance_id) whose signal was never applied
 * while its instance waits: no dedup record (every signal the executor consumed has
 * one, whatever its outcome) and the instance exists and has not ended. */
#define UNAPPLIED(e)                                                                     \
    " " e ".signal_id IS NOT NULL"                                                       \
    " AND NOT EXISTS (SELECT 1 FROM strand.processed_signals p"                          \
    "   WHERE p.signal_id = " e ".signal_id)"                                            \
    " AND EXISTS (SELECT 1 FROM strand.instances i WHERE i.id = " e ".instance_id"       \
    "   AND i.status NOT IN ('completed', 'failed', 'cancelled', 'terminated'))"
/* ... and not in the dead-letter store: no dead letter for its signal id (the
 * executor records it from the envelope, the relay for a row it set aside), none for
 * the same instance and bytes (dead letters written before 0020 carry no signal id),
 * and not a row the relay set aside (failed_at). Checked only on the few rows
 * UNAPPLIED() leaves (a MATERIALIZED step keeps the planner from running it on every
 * examined row). */
#define NOT_DEAD(e)                                                                      \
    " NOT EXISTS (SELECT 1 FROM strand.dead_letters d WHERE d.signal_id = " e ".signal_id)" \
    " AND NOT EXISTS (SELECT 1 FROM strand.outbox o3 WHERE o3.id = " e ".id"            \
    "   AND o3.failed_at IS NOT NULL)"                                                   \
    " AND NOT EXISTS (SELECT 1 FROM strand.dead_letters d JOIN strand.outbox o2"         \
    "   ON o2.id = " e ".id WHERE d.instance_id = " e ".instance_id"                     \
    "   AND d.payload = o2.payload)"

/* New rows: $1 checked id, $2 batch, $3 grace s, $4 window s. Examines the rows after
 * the checked id in id order, up to the first one not published at least the grace
 * period ago, and marks the lost ones unpublished. Answers the new checked id, rows
 * scanned, rows examined, rows marked and a few of them for the log. */
static const char *const sql_sweep_new =
    "WITH scan AS (SELECT id, published_at, created_at, signal_id, instance_id"
    "   FROM strand.outbox WHERE id > $1::bigint ORDER BY id LIMIT $2::int),"
    " edge AS (SELECT coalesce(min(id), 9223372036854775807) AS id FROM scan"
    "   WHERE published_at IS NULL OR published_at > now() - make_interval(secs => $3::int)),"
    " examined AS (SELECT s.* FROM scan s, edge WHERE s.id < edge.id),"
    " unapplied AS MATERIALIZED (SELECT e.id, e.signal_id, e.instance_id FROM examined e"
    "   WHERE e.created_at > now() - make_interval(secs => $4::int) AND" UNAPPLIED("e") "),"
    " lost AS (SELECT u.id FROM unapplied u WHERE" NOT_DEAD("u") "),"
    " marked AS (UPDATE strand.outbox o SET published_at = NULL, recoveries = o.recoveries + 1"
    "   FROM lost l WHERE o.id = l.id AND o.published_at IS NOT NULL"
    "   RETURNING o.id, o.signal_id, o.instance_id)"
    " SELECT coalesce((SELECT max(id) FROM examined), $1::bigint), (SELECT count(*) FROM scan),"
    " (SELECT count(*) FROM examined), (SELECT count(*) FROM marked),"
    " (SELECT string_agg(signal_id || ' for ' || instance_id, ', ')"
    "   FROM (SELECT * FROM marked ORDER BY id LIMIT 5) m)";

/* Watched rows (re-published before) whose backoff ran out: $1 batch, $2 grace s,
 * $3 window s, $4 the most re-publications. Still lost: published again (or given up
 * on at the limit); otherwise settled, no longer watched. Answers the rows published
 * again, settled, given up, and a few given up for the log. */
static const char *const sql_sweep_watched =
    "WITH due AS (SELECT id, signal_id, instance_id, recoveries, created_at FROM strand.outbox"
    "   WHERE recoveries > 0 AND published_at IS NOT NULL"
    "   AND published_at < now() - make_interval(secs => $2::int * power(2, least(recoveries, 4)))"
    "   ORDER BY id LIMIT $1::int),"
    " unapplied AS MATERIALIZED (SELECT e.id, e.recoveries, e.signal_id, e.instance_id"
    "   FROM due e WHERE e.created_at > now() - make_interval(secs => $3::int) AND"
    UNAPPLIED("e") "),"
    " lost AS (SELECT * FROM unapplied u WHERE" NOT_DEAD("u") "),"
    " again AS (UPDATE strand.outbox o SET published_at = NULL, recoveries = o.recoveries + 1"
    "   FROM lost l WHERE o.id = l.id AND l.recoveries < $4::int RETURNING o.id),"
    " settled AS (UPDATE strand.outbox o SET recoveries = 0 FROM due d WHERE o.id = d.id"
    "   AND NOT EXISTS (SELECT 1 FROM lost l WHERE l.id = d.id AND l.recoveries < $4::int)"
    "   RETURNING o.id)"
    " SELECT (SELECT count(*) FROM again), (SELECT count(*) FROM settled),"
    " (SELECT count(*) FROM lost WHERE recoveries >= $4::int),"
    " (SELECT string_agg(signal_id || ' for ' || instance_id, ', ')"
    "   FROM (SELECT * FROM lost WHERE recoveries >= $4::int ORDER BY id LIMIT 5) g)";

st_err_t st_outbox_sweep_new(PGconn *conn, long long checked_id, int batch, int grace_s,
                             int window_s, st_outbox_sweep_new_t *out, st_errbuf_t *eb)
{
    char checked[24], nbatch[16], grace[16], window[16];
    snprintf(checked, sizeof checked, "%lld", checked_id);
    snprintf(nbatch, sizeof nbatch, "%d", batch);
    snprintf(grace, sizeof grace, "%d", grace_s);
    snprintf(window, sizeof window, "%d", window_s);
    const char *params[] = {checked, nbatch, grace, window};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_sweep_new, 4, params, &res, eb);
    if (err != ST_OK)
        return err;
    out->checked_id = atoll(PQgetvalue(res, 0, 0));
    out->scanned = atoi(PQgetvalue(res, 0, 1));
    out->examined = atoi(PQgetvalue(res, 0, 2));
    out->marked = atoi(PQgetvalue(res, 0, 3));
    snprintf(out->first, sizeof out->first, "%s", PQgetvalue(res, 0, 4));
    PQclear(res);
    return ST_OK;
}

st_err_t st_outbox_sweep_watched(PGconn *conn, int batch, int grace_s, int window_s,
                                 int most, st_outbox_sweep_watched_t *out, st_errbuf_t *eb)
{
    char nbatch[16], grace[16], window[16], nmost[16];
    snprintf(nbatch, sizeof nbatch, "%d", batch);
    snprintf(grace, sizeof grace, "%d", grace_s);
    snprintf(window, sizeof window, "%d", window_s);
    snprintf(nmost, sizeof nmost, "%d", most);
    const char *params[] = {nbatch, grace, window, nmost};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_sweep_watched, 4, params, &res, eb);
    if (err != ST_OK)
        return err;
    out->again = atoi(PQgetvalue(res, 0, 0));
    out->settled = atoi(PQgetvalue(res, 0, 1));
    out->given_up = atoi(PQgetvalue(res, 0, 2));
    snprintf(out->first_given_up, sizeof out->first_given_up, "%s", PQgetvalue(res, 0, 3));
    PQclear(res);
    return ST_OK;
}
