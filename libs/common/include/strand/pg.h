/*
 * pg.h - the PostgreSQL adapter: connections, parameterised queries, transactions,
 * SQLSTATE translation into st_err_t, and versioned schema migrations.
 *
 * This is the only module that interprets libpq errors. A PGconn is owned by one
 * thread at a time; services open one per worker thread.
 */
#ifndef STRAND_PG_H
#define STRAND_PG_H

#include <libpq-fe.h>

#include "strand/err.h"

/* The SQL expression for timestamptz `x` as RFC 3339 text in UTC
 * (2026-11-24T02:09:19.379597Z), for times built into jsonb by a query; the API's
 * st_api_time_json() writes columns the same way. */
#define ST_PG_SQL_RFC3339(x) "to_char((" x ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

/* The SQL expression for the whole milliseconds from now (clock_timestamp()) until
 * timestamptz `x`, rounded up: a deadline 0.3 ms away reads 1, so a due loop sleeps to
 * it instead of taking it for due now (0) and looking too early; past deadlines read 0
 * or less. The next-deadline queries of the due loops' owners use it. */
#define ST_PG_SQL_MS_UNTIL(x) "ceil(extract(epoch FROM ((" x ") - clock_timestamp())) * 1000)::bigint"

/* The one SQLSTATE -> st_err_t table: ST_ERR_TIMEOUT (57014, statement_timeout),
 * ST_ERR_SERIALIZATION (40001, 40P01), ST_ERR_DUPLICATE (23505), ST_ERR_INVALID (other
 * class 22/23), ST_ERR_DB (NULL = no server answer, class 08 and the rest of 57),
 * ST_ERR_INTERNAL (anything else). */
st_err_t st_pg_sqlstate_err(const char *state);

/* Opens a connection (application_name = `app`). On success *out is owned by the
 * caller (close with PQfinish()). Fails with ST_ERR_DB and libpq's message. */
st_err_t st_pg_connect(const char *dsn, const char *app, PGconn **out, st_errbuf_t *eb);

/* Runs one parameterised statement. `params` are text values (NULL = SQL NULL).
 * If `res` is not NULL it receives the result (caller frees with PQclear());
 * otherwise the result is freed here. Errors as st_pg_sqlstate_err() maps them, with
 * the server's message in `eb` (a description only: callers decide on the code). */
st_err_t st_pg_exec(PGconn *conn, const char *sql, int nparams, const char *const *params,
                    PGresult **res, st_errbuf_t *eb);

/* Like st_pg_exec() with binary-format parameters allowed: `lengths`/`formats` as in
 * PQexecParams (formats[i] = 1 for binary). */
st_err_t st_pg_exec_bin(PGconn *conn, const char *sql, int nparams,
                        const char *const *params, const int *lengths, const int *formats,
                        PGresult **res, st_errbuf_t *eb);

/* Turns prepared statements on or off for the whole process (default on; services
 * apply STRAND_PG_PREPARED at start-up). When on, st_pg_exec() prepares a SELECT,
 * INSERT, UPDATE, DELETE or WITH text the second time a thread sends it on a session
 * and runs it by name afterwards. Turn off behind transaction-mode poolers. */
void st_pg_set_prepared(int enabled);

/* Like st_pg_exec_bin() with the result format chosen: 0 = text, 1 = binary. */
st_err_t st_pg_exec_format(PGconn *conn, const char *sql, int nparams,
                           const char *const *params, const int *lengths, const int *formats,
                           int result_format, PGresult **res, st_errbuf_t *eb);

/* Opens a transaction on `conn`. The BEGIN itself is sent with the transaction's first
 * statement (one round trip for both), so every statement of the transaction must go
 * through st_pg_exec*() on this thread, never through libpq directly. */
st_err_t st_pg_begin(PGconn *conn, st_errbuf_t *eb);
/* Queues a statement of the open transaction whose result nobody reads (an INSERT of
 * an outbox row, say): it is sent in one round trip with the transaction's next
 * statement or its COMMIT, and its error is returned by that call (the transaction is
 * then aborted, as with any failed statement). Parameters as in st_pg_exec_bin(); they
 * are copied. Without a transaction opened by st_pg_begin() on this thread it runs at
 * once. */
st_err_t st_pg_queue_bin(PGconn *conn, const char *sql, int nparams,
                         const char *const *params, const int *lengths, const int *formats,
                         st_errbuf_t *eb);
/* Commits (sends nothing when no statement ran or was queued since st_pg_begin()). A
 * transaction an earlier failed statement aborted is not committed: that fails with
 * ST_ERR_INTERNAL (PostgreSQL itself answers such a COMMIT with ROLLBACK, no error). */
st_err_t st_pg_commit(PGconn *conn, st_errbuf_t *eb);
/* The transaction's last statement and its COMMIT in one round trip (after a pending
 * BEGIN and queued statements). On success the transaction is committed and `res`
 * (if not NULL) receives the statement's result; on failure nothing is committed and
 * the caller still calls st_pg_rollback(). */
st_err_t st_pg_exec_commit(PGconn *conn, const char *sql, int nparams,
                           const char *const *params, PGresult **res, st_errbuf_t *eb);
/* Rolls back if a transaction is open; never fails (a lost connection is noticed by
 * the next statement). */
void st_pg_rollback(PGconn *conn);
/* Runs after a successful commit of a transaction; `conn` is idle by then. */
typedef void (*st_pg_after_commit_fn)(PGconn *conn);
/* Asks for `fn` to run once after this thread's open transaction on `conn` commits
 * (st_pg_commit() or st_pg_exec_commit()), and not at all if it rolls back or fails;
 * a later call for the same transaction replaces the earlier. Returns 0 when this
 * thread tracks no transaction on `conn` (none was begun with st_pg_begin(), or more
 * were open than it tracks): the caller must then not rely on `fn` running. */
int st_pg_after_commit(PGconn *conn, st_pg_after_commit_fn fn);

/* Applies a service's session settings (SET ...) to a new connection. */
typedef st_err_t (*st_pg_setup_fn)(PGconn *conn, st_errbuf_t *eb);

/* The one reconnect of every service's connection slot: ST_OK at once while `*slot` is
 * up; otherwise closes it, connects anew as `app` and runs `setup` (NULL: none) on the
 * new session, so that session settings survive a server restart (PQreset would drop
 * them). On failure *slot is NULL and the error is returned. `*slot` stays owned by the
 * caller (PQfinish). */
st_err_t st_pg_reconnect(PGconn **slot, const char *dsn, const char *app,
                         st_pg_setup_fn setup, st_errbuf_t *eb);

/* Runs `sql`, which may hold several statements, with the simple query protocol (no
 * parameters; for schema scripts only) and discards its results. A failure is
 * translated as st_pg_exec() does. */
st_err_t st_pg_exec_script(PGconn *conn, const char *sql, st_errbuf_t *eb);

#endif
