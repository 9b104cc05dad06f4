/*
 * answer.h - how the API answers, for every handler and command: an st_answer_t (an
 * HTTP status and a JSON body, problem+json for >= 400), the one mapping from st_err_t
 * to a status (st_answer_error), replies, and the API's PostgreSQL sessions. Knows
 * nothing of routes or of the service (answer.c).
 */
#ifndef STRAND_API_ANSWER_H
#define STRAND_API_ANSWER_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>

#include "strand/err.h"
#include "strand/http.h"

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
/* The one st_err_t -> HTTP mapping of a failed path: ST_ERR_TIMEOUT (the request's
 * statement_timeout) 503 request_timeout, other retryable codes 503 unavailable, the
 * rest 500 internal. The code decides; `eb` only goes to the log. */
void st_answer_error(st_answer_t *a, st_err_t err, const st_errbuf_t *eb);
/* Releases the body. */
void st_answer_close(st_answer_t *a);

/* ---- sessions ---------------------------------------------------------------------- */

/* Returns the live connection in `*slot`, (re)connecting to `dsn` with the API's session
 * settings if needed; on failure sets a 503 answer and returns NULL. The connection
 * stays owned by `*slot`; any thread may use this for a slot of its own. */
PGconn *st_api_connect(PGconn **slot, const char *dsn, st_answer_t *out);

/* ---- replies ----------------------------------------------------------------------- */

/* Sends the answer (problem+json for >= 400) and releases it. */
void st_api_reply(st_http_req_t *req, st_answer_t *a);

/* The `limit` query parameter of a list route: `def` when absent, else an integer from
 * 1 to `max`. Returns it, or 0 after setting a 400 invalid_limit problem in `out`. */
int st_api_page_limit(st_http_req_t *req, int def, int max, st_answer_t *out);

/* For read-only HTTP handlers: st_answer_error() sent at once. */
void st_api_reply_error(st_http_req_t *req, st_err_t err, const st_errbuf_t *eb);

/* ---- times -------------------------------------------------------------------------- */

/* A PostgreSQL timestamptz text ("2026-11-24 02:09:19.379597+00") as RFC 3339 in
 * UTC ("2026-11-24T02:09:19.379597Z"), written into `out`; returns `out`. Text it
 * does not recognise (infinity) is copied as it is. */
const char *st_api_rfc3339(const char *pg, char *out, size_t len);
/* Column `col` of a timestamptz as a JSON string in RFC 3339 UTC, or JSON null.
 * Every time in an API answer goes through here. Caller owns the reference. */
json_t *st_api_time_json(PGresult *res, int row, int col);

/* The request time limit (STRAND_API_REQUEST_TIMEOUT_MS, default 10000): every
 * statement of an API or ingress connection is cancelled past it, and the request
 * answers 503 request_timeout. */
extern int st_api_request_timeout_ms;
/* Applies the session settings (statement_timeout) to a new connection. */
st_err_t st_api_session_setup(PGconn *conn, st_errbuf_t *eb);

#endif
