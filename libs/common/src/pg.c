/* pg.c - PostgreSQL adapter (see pg.h). */
#include "strand/pg.h"

#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "strand/log.h"
#include "strand/metrics.h"

st_err_t st_pg_connect(const char *dsn, const char *app, PGconn **out, st_errbuf_t *eb)
{
    /* Server NOTICEs (e.g. "already exists, skipping") would go to stderr raw;
     * warnings and errors still arrive through results. */
    const char *keys[] = {"dbname", "application_name", "connect_timeout", "options", NULL};
    const char *values[] = {dsn, app, "5", "-c client_min_messages=warning", NULL};
    PGconn *conn = PQconnectdbParams(keys, values, 1 /* expand dbname as a DSN */);
    if (conn == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate a PostgreSQL connection");
    if (PQstatus(conn) != CONNECTION_OK) {
        st_err_t err = st_err_set(eb, ST_ERR_DB, "could not connect to PostgreSQL: %s",
                                  PQerrorMessage(conn));
        PQfinish(conn);
        return err;
    }
    *out = conn;
    return ST_OK;
}

/*
 * The one place where PostgreSQL's SQLSTATE becomes an st_err_t: codes decide, the
 * server's message only describes. Exact codes first, then whole classes; anything
 * else is ST_ERR_INTERNAL (a bug or a schema mismatch, not worth a retry).
 */
static const struct {
    const char *state;          /* five characters, or a two-character class */
    st_err_t err;
} sqlstate_map[] = {
    {"57014", ST_ERR_TIMEOUT},          /* query_canceled: statement_timeout */
    {"40001", ST_ERR_SERIALIZATION},    /* serialization_failure */
    {"40P01", ST_ERR_SERIALIZATION},    /* deadlock_detected */
    {"23505", ST_ERR_DUPLICATE},        /* unique_violation: the row exists already */
    {"22", ST_ERR_INVALID},             /* data exception */
    {"23", ST_ERR_INVALID},             /* integrity constraint violation */
    {"08", ST_ERR_DB},                  /* connection exception */
    {"57", ST_ERR_DB},                  /* operator intervention: shutdown, cannot connect now */
};

st_err_t st_pg_sqlstate_err(const char *state)
{
    if (state == NULL || strlen(state) != 5)
        return ST_ERR_DB;   /* no server answer: the connection failed */
    for (size_t i = 0; i < sizeof sqlstate_map / sizeof sqlstate_map[0]; i++)
        if (strncmp(state, sqlstate_map[i].state, strlen(sqlstate_map[i].state)) == 0)
            return sqlstate_map[i].err;
    return ST_ERR_INTERNAL;
}

static st_err_t translate(PGconn *conn, PGresult *res, st_errbuf_t *eb)
{
    if (PQstatus(conn) != CONNECTION_OK)
        return st_err_set(eb, ST_ERR_DB, "PostgreSQL connection lost: %s",
                          PQerrorMessage(conn));
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);
    return st_err_set(eb, st_pg_sqlstate_err(state), "%s", msg);
}

/*
 * Prepared statements. Parsing, analysing and planning took about 40% of PostgreSQL's
 * CPU in the W1 benchmark, because every statement was sent as text each time. Now a
 * thread remembers, per connection, the statement texts it sends; the second time it
 * sends one it PREPAREs it on the session and runs it by name from then on (so a
 * one-off text never costs an extra round trip). Only SELECT, INSERT, UPDATE, DELETE
 * and WITH statements are prepared. A session is recognised by its backend PID, so a
 * reconnected (or reused) PGconn starts with an empty cache. STRAND_PG_PREPARED=0
 * turns this off, for transaction-mode connection poolers that do not keep prepared
 * statements.
 */
#define STMT_SLOTS 512          /* open-addressing table; at most half of it is filled */
#define STMT_MAX (STMT_SLOTS / 2)
#define CONNS_PER_THREAD 4      /* connections a thread remembers statements for */

typedef struct {
    char *sql;                  /* owned copy of the text; NULL = empty slot */
    uint32_t hash;
    int prepared;               /* PREPAREd on this session as "s<thread>_<slot>" */
} stmt_t;

typedef struct {
    PGconn *conn;
    int backend_pid;
    int count;
    stmt_t slots[STMT_SLOTS];
} conn_stmts_t;

typedef struct {
    unsigned thread_no;         /* makes statement names unique across threads */
    unsigned next_victim;
    conn_stmts_t *conns[CONNS_PER_THREAD];
} thread_stmts_t;

static int prepared_enabled = 1;
static unsigned thread_counter;
static pthread_key_t stmts_key;
static pthread_once_t stmts_key_once = PTHREAD_ONCE_INIT;

void st_pg_set_prepared(int enabled)
{
    prepared_enabled = enabled;
}

static void conn_stmts_clear(conn_stmts_t *c)
{
    for (int i = 0; i < STMT_SLOTS; i++)
        free(c->slots[i].sql);
    memset(c->slots, 0, sizeof c->slots);
    c->count = 0;
}

static void thread_stmts_free(void *arg)
{
    thread_stmts_t *t = arg;
    for (int i = 0; i < CONNS_PER_THREAD; i++)
        if (t->conns[i] != NULL) {
            conn_stmts_clear(t->conns[i]);
            free(t->conns[i]);
        }
    free(t);
}

static void stmts_key_init(void)
{
    pthread_key_create(&stmts_key, thread_stmts_free);
}

/* This thread's statement cache for `conn`'s current session; NULL on no memory. */
static conn_stmts_t *conn_stmts(PGconn *conn)
{
    pthread_once(&stmts_key_once, stmts_key_init);
    thread_stmts_t *t = pthread_getspecific(stmts_key);
    if (t == NULL) {
        if ((t = calloc(1, sizeof *t)) == NULL)
            return NULL;
        t->thread_no = __atomic_add_fetch(&thread_counter, 1, __ATOMIC_RELAXED);
        pthread_setspecific(stmts_key, t);
    }
    int pid = PQbackendPID(conn);
    conn_stmts_t *c = NULL;
    for (int i = 0; i < CONNS_PER_THREAD && c == NULL; i++)
        if (t->conns[i] != NULL && t->conns[i]->conn == conn)
            c = t->conns[i];
    if (c == NULL) {
        unsigned victim = t->next_victim++ % CONNS_PER_THREAD;
        if (t->conns[victim] == NULL && (t->conns[victim] = calloc(1, sizeof *c)) == NULL)
            return NULL;
        c = t->conns[victim];
        conn_stmts_clear(c);
        c->conn = conn;
        c->backend_pid = pid;
    }
    if (c->backend_pid != pid) {   /* a new session behind the same PGconn */
        conn_stmts_clear(c);
        c->backend_pid = pid;
    }
    return c;
}

static int preparable(const char *sql)
{
    static const char *const verbs[] = {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"};
    while (isspace((unsigned char)*sql))
        sql++;
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (strncasecmp(sql, verbs[i], strlen(verbs[i])) == 0)
            return 1;
    return 0;
}

/* Finds `sql` in the cache, adding it (not yet prepared) when there is room. */
static stmt_t *stmt_lookup(conn_stmts_t *c, const char *sql, int *added)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)sql; *p; p++)
        h = (h ^ *p) * 16777619u;
    *added = 0;
    for (uint32_t i = 0; i < STMT_SLOTS; i++) {
        stmt_t *st = &c->slots[(h + i) % STMT_SLOTS];
        if (st->sql == NULL) {
            if (c->count >= STMT_MAX || (st->sql = strdup(sql)) == NULL)
                return NULL;
            st->hash = h;
            c->count++;
            *added = 1;
            return st;
        }
        if (st->hash == h && strcmp(st->sql, sql) == 0)
            return st;
    }
    return NULL;
}

/*
 * Open transactions of this thread. st_pg_begin() sends nothing: the BEGIN goes out in
 * one pipeline with the transaction's first statement. Statements queued with
 * st_pg_queue_bin() (writes nobody reads a result of, such as outbox rows) wait, and go
 * out in that same kind of pipeline ahead of the transaction's next statement or its
 * COMMIT. A transaction that runs nothing sends nothing. Each saved round trip is CPU
 * saved on both ends (a receive, a wake-up and a send each side).
 */
#define OPEN_TXS 4

/* A statement waiting to be sent; owns copies of its text and parameters. */
typedef struct queued {
    char *sql;
    int nparams;
    char **params;
    int *lengths, *formats;
    struct queued *next;
} queued_t;

/* The session is part of the key: a PGconn freed without a rollback and another one
 * allocated at the same address must not inherit the BEGIN or the queue. */
typedef struct {
    PGconn *conn;              /* NULL: a free slot */
    int backend_pid;
    int begin_pending;         /* the BEGIN is not sent yet */
    queued_t *queued, **queued_tail;
    st_pg_after_commit_fn after_commit;   /* NULL: none (st_pg_after_commit) */
} open_tx_t;

static __thread open_tx_t open_txs[OPEN_TXS];

static void queued_free(queued_t *q)
{
    while (q != NULL) {
        queued_t *next = q->next;
        for (int i = 0; i < q->nparams; i++)
            free(q->params[i]);
        free(q->params);
        free(q->lengths);
        free(q->formats);
        free(q->sql);
        free(q);
        q = next;
    }
}

static void tx_release(open_tx_t *tx)
{
    if (tx == NULL)
        return;
    queued_free(tx->queued);
    memset(tx, 0, sizeof *tx);
}

/* This thread's open transaction on `conn`'s current session, or NULL. */
static open_tx_t *tx_find(PGconn *conn)
{
    for (int i = 0; i < OPEN_TXS; i++)
        if (open_txs[i].conn == conn) {
            if (open_txs[i].backend_pid == PQbackendPID(conn))
                return &open_txs[i];
            tx_release(&open_txs[i]);   /* a new session: nothing of it was sent */
        }
    return NULL;
}

/* True if `tx` has something to send before its next statement. */
static int tx_has_pending(const open_tx_t *tx)
{
    return tx != NULL && (tx->begin_pending || tx->queued != NULL);
}

/* How a statement is sent: as text, or by the name it was (or is about to be)
 * prepared under. */
typedef struct {
    conn_stmts_t *cache;
    stmt_t *stmt;          /* NULL: send as text */
    char name[32];
} send_plan_t;

static void plan_send(PGconn *conn, const char *sql, send_plan_t *plan)
{
    plan->cache = prepared_enabled && preparable(sql) ? conn_stmts(conn) : NULL;
    int added = 0;
    plan->stmt = plan->cache != NULL ? stmt_lookup(plan->cache, sql, &added) : NULL;
    if (added)
        plan->stmt = NULL;   /* first sighting: text; prepared the next time */
    if (plan->stmt != NULL) {
        thread_stmts_t *t = pthread_getspecific(stmts_key);
        snprintf(plan->name, sizeof plan->name, "s%u_%d", t->thread_no,
                 (int)(plan->stmt - plan->cache->slots));
    }
}

/* Forgets the session's statements when the server says a name is unknown (26000,
 * e.g. after DISCARD ALL behind a pooler); the next sends prepare again. */
static void check_lost_statements(const send_plan_t *plan, const PGresult *r)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (plan->cache != NULL && state != NULL && strcmp(state, "26000") == 0)
        conn_stmts_clear(plan->cache);
}

static int result_ok(const PGresult *r)
{
    ExecStatusType status = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    return status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
}

/* One statement, synchronously. */
static PGresult *exec_plain(PGconn *conn, const char *sql, const send_plan_t *plan,
                            int nparams, const char *const *params, const int *lengths,
                            const int *formats, int result_format)
{
    if (plan->stmt == NULL)
        return PQexecParams(conn, sql, nparams, NULL, params, lengths, formats, result_format);
    if (!plan->stmt->prepared) {
        PGresult *r = PQprepare(conn, plan->name, sql, nparams, NULL);
        if (!result_ok(r))
            return r;   /* the statement's own error, as PQexecParams would give it */
        PQclear(r);
        plan->stmt->prepared = 1;
    }
    PGresult *r = PQexecPrepared(conn, plan->name, nparams, params, lengths, formats,
                                 result_format);
    check_lost_statements(plan, r);
    return r;
}

/* One statement of a pipeline. */
typedef struct {
    const char *sql;
    int nparams;
    const char *const *params;
    const int *lengths, *formats;
    int result_format;
    send_plan_t plan;
    int preparing;             /* a PREPARE goes out ahead of it */
} step_t;

/* Queues one step. A statement prepared in this pipeline counts as prepared for the
 * steps after it (the same text twice must not be PREPAREd twice); a failed PREPARE
 * aborts the rest of the pipeline and is undone when its result is read. */
static int step_send(PGconn *conn, step_t *st)
{
    send_plan_t *plan = &st->plan;
    if (plan->stmt == NULL)
        return PQsendQueryParams(conn, st->sql, st->nparams, NULL, st->params, st->lengths,
                                 st->formats, st->result_format);
    if (!plan->stmt->prepared) {
        if (!PQsendPrepare(conn, plan->name, st->sql, st->nparams, NULL))
            return 0;
        st->preparing = 1;
        plan->stmt->prepared = 1;
    }
    return PQsendQueryPrepared(conn, plan->name, st->nparams, st->params, st->lengths,
                               st->formats, st->result_format);
}

/* The next result of the pipeline with the NULL that ends it; NULL if the connection
 * failed. */
static PGresult *pipeline_result(PGconn *conn)
{
    PGresult *r = PQgetResult(conn);
    if (r != NULL) {
        PGresult *extra;
        while ((extra = PQgetResult(conn)) != NULL)
            PQclear(extra);
    }
    return r;
}

/* After a failed send: ends the pipeline, reading and dropping whatever was queued. */
static void pipeline_discard(PGconn *conn)
{
    if (PQpipelineSync(conn)) {
        for (int nulls = 0; nulls < 64 && PQstatus(conn) == CONNECTION_OK;) {
            PGresult *r = PQgetResult(conn);
            if (r == NULL) {
                nulls++;
                continue;
            }
            int synced = PQresultStatus(r) == PGRES_PIPELINE_SYNC;
            PQclear(r);
            if (synced)
                break;
        }
    }
    PQexitPipelineMode(conn);
}

/* Sends `steps` in one pipeline (one round trip). Returns the first failed result, or
 * else the result of steps[answer]. Statements after a failed one are not run. */
static PGresult *exec_pipeline(PGconn *conn, step_t *steps, int nsteps, int answer_step)
{
    if (!PQenterPipelineMode(conn))
        return PQmakeEmptyPGresult(conn, PGRES_FATAL_ERROR);
    int sent = 1;
    for (int i = 0; sent && i < nsteps; i++)
        sent = step_send(conn, &steps[i]);
    if (!sent) {   /* what was queued is thrown away; libpq has the message */
        pipeline_discard(conn);
        return PQmakeEmptyPGresult(conn, PGRES_FATAL_ERROR);
    }
    sent = PQpipelineSync(conn);
    PGresult *answer = NULL, *wanted = NULL;
    for (int i = 0; sent && i < nsteps; i++) {
        step_t *st = &steps[i];
        for (int part = st->preparing ? 0 : 1; sent && part < 2; part++) {
            PGresult *r = pipeline_result(conn);
            if (r == NULL) {
                sent = 0;
                break;
            }
            if (PQresultStatus(r) == PGRES_PIPELINE_ABORTED) {
                PQclear(r);   /* skipped after an earlier error, which is the answer */
                if (part == 0)
                    st->plan.stmt->prepared = 0;   /* its PREPARE did not run */
                continue;
            }
            if (!result_ok(r)) {
                if (part == 0)
                    st->plan.stmt->prepared = 0;
                check_lost_statements(&st->plan, r);
                if (answer == NULL)
                    answer = r;
                else
                    PQclear(r);
                continue;
            }
            if (part == 1 && i == answer_step)
                wanted = r;
            else
                PQclear(r);
        }
    }
    if (sent)
        PQclear(PQgetResult(conn));   /* PGRES_PIPELINE_SYNC */
    PQexitPipelineMode(conn);
    if (answer != NULL) {
        PQclear(wanted);
        return answer;
    }
    if (wanted == NULL || !sent) {   /* the connection failed; libpq has the message */
        PQclear(wanted);
        return PQmakeEmptyPGresult(conn, PGRES_FATAL_ERROR);
    }
    return wanted;
}

/* Runs `sql` (may be NULL: nothing) and then, if `commit`, COMMIT, with what `tx` has
 * pending (BEGIN, queued statements) ahead of them in one round trip. Returns the
 * first failure, or the statement's result (the COMMIT's without a statement). The
 * queue is emptied whatever happens. */
static PGresult *exec_with_pending(PGconn *conn, open_tx_t *tx, const char *sql, int nparams,
                                   const char *const *params, const int *lengths,
                                   const int *formats, int result_format, int commit)
{
    int count = 2 + (tx != NULL);
    for (queued_t *q = tx ? tx->queued : NULL; q != NULL; q = q->next)
        count++;
    step_t *steps = calloc((size_t)count, sizeof *steps);
    if (steps == NULL)
        return NULL;
    int n = 0;
    if (tx != NULL && tx->begin_pending)
        steps[n++] = (step_t){.sql = "BEGIN"};
    for (queued_t *q = tx ? tx->queued : NULL; q != NULL; q = q->next) {
        steps[n] = (step_t){.sql = q->sql, .nparams = q->nparams,
                            .params = (const char *const *)q->params, .lengths = q->lengths,
                            .formats = q->formats};
        plan_send(conn, q->sql, &steps[n].plan);
        n++;
    }
    int answer_step = -1;
    if (sql != NULL) {
        steps[n] = (step_t){.sql = sql, .nparams = nparams, .params = params,
                            .lengths = lengths, .formats = formats,
                            .result_format = result_format};
        plan_send(conn, sql, &steps[n].plan);
        answer_step = n++;
    }
    if (commit) {
        steps[n] = (step_t){.sql = "COMMIT"};
        if (answer_step < 0)
            answer_step = n;
        n++;
    }
    PGresult *r = exec_pipeline(conn, steps, n, answer_step);
    free(steps);
    if (tx != NULL) {
        tx->begin_pending = 0;
        queued_free(tx->queued);
        tx->queued = NULL;
        tx->queued_tail = &tx->queued;
    }
    return r;
}

/* Runs one statement: prepared when this thread sent it on this session before, and
 * after a pending BEGIN in the same round trip. */
static PGresult *exec_statement(PGconn *conn, const char *sql, int nparams,
                                const char *const *params, const int *lengths,
                                const int *formats, int result_format)
{
    open_tx_t *tx = tx_find(conn);
    if (tx_has_pending(tx))
        return exec_with_pending(conn, tx, sql, nparams, params, lengths, formats,
                                 result_format, 0);
    send_plan_t plan;
    plan_send(conn, sql, &plan);
    return exec_plain(conn, sql, &plan, nparams, params, lengths, formats, result_format);
}

/* Turns a result into `*res` (or frees it) and an error code. */
static st_err_t take_result(PGconn *conn, PGresult *r, PGresult **res, st_errbuf_t *eb)
{
    if (!result_ok(r)) {
        st_err_t err = translate(conn, r, eb);
        PQclear(r);
        return err;
    }
    if (res != NULL)
        *res = r;
    else
        PQclear(r);
    return ST_OK;
}

st_err_t st_pg_exec_format(PGconn *conn, const char *sql, int nparams,
                           const char *const *params, const int *lengths, const int *formats,
                           int result_format, PGresult **res, st_errbuf_t *eb)
{
    if (res != NULL)
        *res = NULL;
    PGresult *r = exec_statement(conn, sql, nparams, params, lengths, formats, result_format);
    return take_result(conn, r, res, eb);
}

st_err_t st_pg_exec_bin(PGconn *conn, const char *sql, int nparams,
                        const char *const *params, const int *lengths, const int *formats,
                        PGresult **res, st_errbuf_t *eb)
{
    return st_pg_exec_format(conn, sql, nparams, params, lengths, formats, 0, res, eb);
}

st_err_t st_pg_exec(PGconn *conn, const char *sql, int nparams, const char *const *params,
                    PGresult **res, st_errbuf_t *eb)
{
    return st_pg_exec_bin(conn, sql, nparams, params, NULL, NULL, res, eb);
}

/* Transaction metrics: a thread runs one transaction at a time on a connection, so
 * the start of the open transaction is kept per thread, tagged with its connection. */
static __thread PGconn *tx_conn;
static __thread double tx_started;

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static st_metric_t *tx_duration, *tx_commits, *tx_rollbacks, *tx_failures;
static pthread_once_t tx_metrics_once = PTHREAD_ONCE_INIT;

static void tx_metrics_init(void)
{
    const char *help = "Transactions ended, by outcome";
    tx_duration = st_metrics_histogram("strand_pg_transaction_duration_seconds",
                                       "PostgreSQL transaction time, BEGIN to COMMIT", NULL);
    tx_commits = st_metrics_counter("strand_pg_transactions_total", help, "outcome=\"commit\"");
    tx_rollbacks = st_metrics_counter("strand_pg_transactions_total", help,
                                      "outcome=\"rollback\"");
    tx_failures = st_metrics_counter("strand_pg_transactions_total", help,
                                     "outcome=\"commit_failed\"");
}

/* Records the end of the transaction begun on `conn` by this thread, if any. */
static void tx_end(PGconn *conn, const char *outcome)
{
    pthread_once(&tx_metrics_once, tx_metrics_init);
    if (tx_conn != conn)
        return;
    tx_conn = NULL;
    if (strcmp(outcome, "commit") == 0) {
        st_metric_observe(tx_duration, monotonic_s() - tx_started);
        st_metric_inc(tx_commits);
    } else if (strcmp(outcome, "rollback") == 0) {
        st_metric_inc(tx_rollbacks);
    } else {
        st_metric_inc(tx_failures);
    }
}

st_err_t st_pg_begin(PGconn *conn, st_errbuf_t *eb)
{
    if (PQstatus(conn) != CONNECTION_OK)
        return st_err_set(eb, ST_ERR_DB, "PostgreSQL connection lost: %s", PQerrorMessage(conn));
    tx_release(tx_find(conn));   /* a second begin on one connection replaces the first */
    open_tx_t *tx = NULL;
    for (int i = 0; i < OPEN_TXS && tx == NULL; i++)
        if (open_txs[i].conn == NULL)
            tx = &open_txs[i];
    if (tx != NULL) {
        tx->conn = conn;
        tx->backend_pid = PQbackendPID(conn);
        tx->begin_pending = 1;
        tx->queued = NULL;
        tx->queued_tail = &tx->queued;
    } else {   /* more open transactions in one thread than slots: send it now */
        st_err_t err = st_pg_exec(conn, "BEGIN", 0, NULL, NULL, eb);
        if (err != ST_OK)
            return err;
    }
    tx_conn = conn;
    tx_started = monotonic_s();
    return ST_OK;
}

st_err_t st_pg_queue_bin(PGconn *conn, const char *sql, int nparams,
                         const char *const *params, const int *lengths, const int *formats,
                         st_errbuf_t *eb)
{
    open_tx_t *tx = tx_find(conn);
    if (tx == NULL)
        return st_pg_exec_bin(conn, sql, nparams, params, lengths, formats, NULL, eb);
    queued_t *q = calloc(1, sizeof *q);
    int ok = q != NULL && (q->sql = strdup(sql)) != NULL;
    if (ok && nparams > 0) {
        q->params = calloc((size_t)nparams, sizeof *q->params);
        q->lengths = calloc((size_t)nparams, sizeof *q->lengths);
        q->formats = calloc((size_t)nparams, sizeof *q->formats);
        ok = q->params != NULL && q->lengths != NULL && q->formats != NULL;
        q->nparams = ok ? nparams : 0;
    }
    for (int i = 0; ok && i < nparams; i++) {
        if (params[i] == NULL)
            continue;
        int binary = formats != NULL && formats[i] == 1;
        size_t len = binary ? (size_t)lengths[i] : strlen(params[i]);
        q->formats[i] = binary;
        q->lengths[i] = (int)len;
        ok = (q->params[i] = malloc(len + 1)) != NULL;
        if (ok) {
            memcpy(q->params[i], params[i], len);
            q->params[i][len] = '\0';
        }
    }
    if (!ok) {
        queued_free(q);
        return st_err_set(eb, ST_ERR_NOMEM, "could not queue a statement");
    }
    *tx->queued_tail = q;
    tx->queued_tail = &q->next;
    return ST_OK;
}

st_err_t st_pg_exec_commit(PGconn *conn, const char *sql, int nparams,
                           const char *const *params, PGresult **res, st_errbuf_t *eb)
{
    if (res != NULL)
        *res = NULL;
    open_tx_t *tx = tx_find(conn);
    st_pg_after_commit_fn after = tx != NULL ? tx->after_commit : NULL;
    PGresult *r = exec_with_pending(conn, tx, sql, nparams, params, NULL, NULL, 0, 1);
    tx_release(tx);
    st_err_t err = take_result(conn, r, res, eb);
    tx_end(conn, err == ST_OK ? "commit" : "commit_failed");
    if (err == ST_OK && after != NULL)
        after(conn);
    return err;
}

st_err_t st_pg_commit(PGconn *conn, st_errbuf_t *eb)
{
    open_tx_t *tx = tx_find(conn);
    st_pg_after_commit_fn after = tx != NULL ? tx->after_commit : NULL;
    st_err_t err = ST_OK;
    if (tx == NULL || tx->queued != NULL || !tx->begin_pending) {   /* else nothing was sent */
        PGresult *r = NULL;
        err = take_result(conn, exec_with_pending(conn, tx, NULL, 0, NULL, NULL, NULL, 0, 1), &r,
                          eb);
        /* PostgreSQL answers the COMMIT of a transaction that an earlier (ignored)
         * failure aborted with the tag ROLLBACK and no error: nothing was committed. */
        if (err == ST_OK && strcmp(PQcmdStatus(r), "ROLLBACK") == 0)
            err = st_err_set(eb, ST_ERR_INTERNAL,
                             "the transaction was rolled back at its COMMIT: an earlier statement"
                             " of it failed");
        PQclear(r);
    }
    tx_release(tx);
    tx_end(conn, err == ST_OK ? "commit" : "commit_failed");
    if (err == ST_OK && after != NULL)
        after(conn);
    return err;
}

int st_pg_after_commit(PGconn *conn, st_pg_after_commit_fn fn)
{
    open_tx_t *tx = tx_find(conn);
    if (tx == NULL)
        return 0;
    tx->after_commit = fn;
    return 1;
}

void st_pg_rollback(PGconn *conn)
{
    tx_release(tx_find(conn));
    tx_end(conn, "rollback");
    if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        PGresult *r = PQexec(conn, "ROLLBACK");
        PQclear(r);
    }
}

st_err_t st_pg_reconnect(PGconn **slot, const char *dsn, const char *app,
                         st_pg_setup_fn setup, st_errbuf_t *eb)
{
    if (*slot != NULL && PQstatus(*slot) == CONNECTION_OK)
        return ST_OK;
    if (*slot != NULL)
        PQfinish(*slot);
    *slot = NULL;
    st_err_t err = st_pg_connect(dsn, app, slot, eb);
    if (err == ST_OK && setup != NULL && (err = setup(*slot, eb)) != ST_OK) {
        PQfinish(*slot);
        *slot = NULL;
    }
    return err;
}

st_err_t st_pg_exec_script(PGconn *conn, const char *sql, st_errbuf_t *eb)
{
    PGresult *r = PQexec(conn, sql);
    st_err_t err = ST_OK;
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        err = translate(conn, r, eb);
    PQclear(r);
    return err;
}
