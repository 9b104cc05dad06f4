/*
 * api.h - the API service's commands and HTTP handlers.
 *
 * A command (st_cmd_*) is one validated, transactional operation that writes state and
 * outbox rows in one PostgreSQL transaction; it is shared by the HTTP routes and the
 * Kafka ingress topic, so both paths validate and behave identically. Commands answer
 * with an st_answer_t: an HTTP-style status and a JSON body (a problem for >= 400).
 * Read-only routes (get, list) are plain HTTP handlers. Nothing here runs a step.
 */
#ifndef STRAND_API_H
#define STRAND_API_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/auth.h"
#include "strand/err.h"
#include "strand/http.h"
#include "strand/service.h"

typedef struct st_api st_api_t;

/* ---- answers ---------------------------------------------------------------------- */

typedef struct {
    int status;        /* 0 until set */
    json_t *body;      /* owned */
} st_answer_t;

/* Sets the answer; steals `body`. */
void st_answer_set(st_answer_t *a, int status, json_t *body);
/* Sets a problem answer {status, code, message, field?}; `extra` (may be NULL) is
 * merged into the body and stolen. */
void st_answer_problem(st_answer_t *a, int status, const char *code, const char *message,
                       const char *field, json_t *extra);
/* Sets the answer for a failed database path: 503 for retryable errors, else 500. */
void st_answer_error(st_answer_t *a, st_err_t err, const st_errbuf_t *eb);
/* Releases the body. */
void st_answer_close(st_answer_t *a);

/* ---- commands (api_commands: instances.c, signals.c, tasks.c) ---------------------- */

/* True for an instance status that is final: completed, failed, cancelled, terminated. */
int st_api_status_ended(const char *status);

/* Every command: `who` is the authenticated caller, `id` the path id (instance or
 * task; NULL where none), `args` the request object (borrowed). Commands authorise
 * `who` themselves (403 problem). Expects no transaction open on `conn`. */
typedef void (*st_cmd_fn)(PGconn *conn, const st_principal_t *who, const char *id,
                          const json_t *args, st_answer_t *out);

void st_cmd_start(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_signal(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_signal_correlated(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_cancel(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_terminate(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_task_assign(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_task_release(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_task_complete(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);

void st_cmd_trigger(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                    st_answer_t *out);
void st_cmd_ack(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                st_answer_t *out);
/* Admin only: purges instances ended before the cutoff and resolved dead letters
 * (retention.c). */
void st_cmd_retention_run(PGconn *conn, const st_principal_t *who, const char *id,
                          const json_t *args, st_answer_t *out);

/* ---- HTTP (main.c) ------------------------------------------------------------------ */

#define ST_API_MAX_COMMAND_ROUTES 16

/* A POST route bound to a command. */
typedef struct {
    st_api_t *api;
    st_cmd_fn cmd;
} st_command_route_t;

struct st_api {
    st_service_t *svc;
    PGconn *conn;      /* the HTTP thread's connection; owned; reconnected on demand */
    st_auth_t *auth;   /* owned */
    st_principal_t current;   /* the caller of the request being handled (HTTP thread) */
    st_command_route_t routes[ST_API_MAX_COMMAND_ROUTES];
    struct st_waiters *waiters;   /* long polls (wait_loop.c) */
    struct st_command_pool *pool; /* write commands off the loop (command_pool.c) */
    int nroutes;
};

/* A PostgreSQL timestamptz text ("2026-11-24 02:09:19.379597+00") as RFC 3339 in
 * UTC ("2026-11-24T02:09:19.379597Z"), written into `out`; returns `out`. Text it
 * does not recognise (infinity) is copied as it is. */
const char *st_api_rfc3339(const char *pg, char *out, size_t len);
/* Column `col` of a timestamptz as a JSON string in RFC 3339 UTC, or JSON null.
 * Every time in an API answer goes through here. Caller owns the reference. */
json_t *st_api_time_json(PGresult *res, int row, int col);
/* The SQL expression for a timestamptz inside jsonb built by a query, in RFC 3339 UTC
 * like st_api_time_json() (`x` is the column). */
#define ST_API_SQL_TIME(x) "to_char((" x ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

/* The request time limit (STRAND_API_REQUEST_TIMEOUT_MS, default 10000): every
 * statement of an API or ingress connection is cancelled past it, and the request
 * answers 503 request_timeout. */
extern int st_api_request_timeout_ms;
/* Applies the session settings (statement_timeout) to a new connection. */
st_err_t st_api_session_setup(PGconn *conn, st_errbuf_t *eb);

/* Returns the HTTP thread's live connection, reconnecting if needed; on failure sets a
 * 503 answer and returns NULL. */
PGconn *st_api_conn(st_api_t *api, st_answer_t *out);
/* Returns the live connection in `*slot`, (re)connecting to `dsn` with the API's session
 * settings if needed; on failure sets a 503 answer and returns NULL. The connection
 * stays owned by `*slot`; any thread may use this for a slot of its own. */
PGconn *st_api_connect(PGconn **slot, const char *dsn, st_answer_t *out);

/* Sends the answer (problem+json for >= 400) and releases it. */
void st_api_reply(st_http_req_t *req, st_answer_t *a);

/* The `limit` query parameter of a list route: `def` when absent, else an integer from
 * 1 to `max`. Returns it, or 0 after setting a 400 invalid_limit problem in `out`. */
int st_api_page_limit(st_http_req_t *req, int def, int max, st_answer_t *out);


/* For read-only HTTP handlers: st_api_conn() that answers the 503 itself. */
PGconn *st_api_conn_or_reply(st_api_t *api, st_http_req_t *req);
/* For read-only HTTP handlers: st_answer_error() sent at once. */
void st_api_reply_error(st_http_req_t *req, st_err_t err, const st_errbuf_t *eb);

/* Registers a POST route that runs `cmd` with the JSON body and the {id} parameter. */
void st_api_route_command(st_api_t *api, const char *pattern, st_cmd_fn cmd);

void st_api_definitions_register(st_api_t *api);
void st_api_instances_register(st_api_t *api);
void st_api_signals_register(st_api_t *api);
void st_api_dead_letters_register(st_api_t *api);
void st_api_tasks_register(st_api_t *api);
void st_api_acks_register(st_api_t *api);
void st_api_triggers_register(st_api_t *api);
void st_api_openapi_register(st_api_t *api);
void st_api_retention_register(st_api_t *api);
/* A process's RPCs (rpc.c): POST /v1/instances/{id}/rpc/{name}. */
void st_api_rpc_register(st_api_t *api);
void st_cmd_rpc(PGconn *conn, const st_principal_t *who, const char *id, const char *name,
                const json_t *args, st_answer_t *out);

/* Compares the router with docs/openapi.json; prints mismatches; 0 when they agree. */
int st_api_check_openapi(st_api_t *api);

#endif
