/*
 * answer.c - how the API answers (see answer.h): answers and problems, the one mapping
 * from st_err_t to an HTTP status, replies, page limits, times in RFC 3339, and the
 * PostgreSQL sessions of the API (statement_timeout, reconnecting a slot).
 */
#include "answer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/log.h"
#include "strand/pg.h"

int st_api_request_timeout_ms = 10000;

void st_answer_set(st_answer_t *a, int status, json_t *body)
{
    json_decref(a->body);
    a->status = status;
    a->body = body;
}

void st_answer_problem(st_answer_t *a, int status, const char *code, const char *message,
                       const char *field, json_t *extra)
{
    st_answer_set(a, status, st_http_problem_new(status, code, message, field, extra));
}

const char *st_api_rfc3339(const char *pg, char *out, size_t len)
{
    size_t n = strlen(pg);
    size_t off = 19;
    while (off < n && pg[off] != '+' && pg[off] != '-')
        off++;
    int y, mo, d, h, mi, s, oh = 0, om = 0, os = 0;
    if (n < 22 || off >= n || (pg[10] != ' ' && pg[10] != 'T') ||
        sscanf(pg, "%4d-%2d-%2d%*c%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &s) != 6 ||
        sscanf(pg + off + 1, "%2d:%2d:%2d", &oh, &om, &os) < 1) {
        snprintf(out, len, "%s", pg);   /* infinity, BC dates: as PostgreSQL wrote them */
        return out;
    }
    const char *frac = pg + 19;
    int frac_len = (int)(off - 19);   /* ".379597" or "" */
    int offset = (oh * 3600 + om * 60 + os) * (pg[off] == '-' ? -1 : 1);
    if (offset == 0) {
        snprintf(out, len, "%.10sT%.8s%.*sZ", pg, pg + 11, frac_len, frac);
        return out;
    }
    struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
                    .tm_min = mi, .tm_sec = s};
    time_t t = timegm(&tm) - offset;
    gmtime_r(&t, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s%.*sZ", base, frac_len, frac);
    return out;
}

json_t *st_api_time_json(PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return json_null();
    char buf[64];
    return json_string(st_api_rfc3339(PQgetvalue(res, row, col), buf, sizeof buf));
}

st_err_t st_api_session_setup(PGconn *conn, st_errbuf_t *eb)
{
    char sql[80];
    snprintf(sql, sizeof sql, "SET statement_timeout = %d", st_api_request_timeout_ms);
    st_err_t err = st_pg_exec(conn, sql, 0, NULL, NULL, eb);
    /* Times in answers are RFC 3339 in UTC (st_api_time_json()); jsonb renders a
     * timestamptz in the session's zone. */
    return err == ST_OK ? st_pg_exec(conn, "SET TimeZone = 'UTC'", 0, NULL, NULL, eb) : err;
}

void st_answer_error(st_answer_t *a, st_err_t err, const st_errbuf_t *eb)
{
    if (err == ST_ERR_TIMEOUT) {   /* 57014: the session's statement_timeout fired */
        st_log_warn("request exceeded the time limit", "%s", eb->msg);
        char msg[160];
        snprintf(msg, sizeof msg, "the request took longer than the limit of %d ms; retry later",
                 st_api_request_timeout_ms);
        st_answer_problem(a, 503, "request_timeout", msg, NULL, NULL);
        return;
    }
    if (st_err_retryable(err)) {
        st_log_warn("request failed on a transient error", "%s: %s", st_err_name(err), eb->msg);
        st_answer_problem(a, 503, "unavailable", "a dependency is unavailable; retry later",
                          NULL, NULL);
    } else {
        st_log_error("request failed", "%s: %s", st_err_name(err), eb->msg);
        st_answer_problem(a, 500, "internal", "internal error", NULL, NULL);
    }
}

void st_answer_close(st_answer_t *a)
{
    json_decref(a->body);
    a->body = NULL;
}

PGconn *st_api_connect(PGconn **slot, const char *dsn, st_answer_t *out)
{
    st_errbuf_t eb;
    if (st_pg_reconnect(slot, dsn, "strand-api", st_api_session_setup, &eb) != ST_OK) {
        st_log_warn("api could not connect to PostgreSQL", "%s", eb.msg);
        st_answer_problem(out, 503, "database_unavailable",
                          "the database is unavailable; retry later", NULL, NULL);
        return NULL;
    }
    return *slot;
}

void st_api_reply(st_http_req_t *req, st_answer_t *a)
{
    if (a->status == 0) {
        st_log_error("a command returned without an answer", NULL);
        st_answer_problem(a, 500, "internal", "internal error", NULL, NULL);
    }
    if (a->status >= 400) {
        /* st_http_reply_problem builds the same shape; pass the body through. */
        json_t *body = a->body;
        a->body = NULL;
        st_http_reply_problem(req, a->status,
                              json_string_value(json_object_get(body, "code")),
                              json_string_value(json_object_get(body, "message")),
                              json_string_value(json_object_get(body, "field")), body);
        return;
    }
    st_http_reply_json(req, a->status, a->body);
    a->body = NULL;
}

int st_api_page_limit(st_http_req_t *req, int def, int max, st_answer_t *out)
{
    const char *text = st_http_query(req, "limit");
    if (text == NULL)
        return def;
    int limit = strlen(text) <= 6 && strspn(text, "0123456789") == strlen(text) ? atoi(text) : 0;
    if (limit < 1 || limit > max) {
        char msg[64];
        snprintf(msg, sizeof msg, "limit must be an integer from 1 to %d", max);
        st_answer_problem(out, 400, "invalid_limit", msg, "/limit", NULL);
        return 0;
    }
    return limit;
}

void st_api_reply_error(st_http_req_t *req, st_err_t err, const st_errbuf_t *eb)
{
    st_answer_t answer = {0};
    st_answer_error(&answer, err, eb);
    st_api_reply(req, &answer);
}
