/*
 * strand-api: the HTTP ingress. Validates requests, writes state and outbox rows in
 * one transaction, and relays its outbox to Kafka. See README.md in this directory.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "command_pool.h"
#include "diagram.h"
#include "ingress.h"
#include "permissions.h"
#include "wait_loop.h"
#include "strand/engine.h"
#include "strand/log.h"
#include "strand/outbox.h"
#include "strand/pg.h"

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

int st_api_request_timeout_ms = 10000;

st_err_t st_api_session_setup(PGconn *conn, st_errbuf_t *eb)
{
    char sql[80];
    snprintf(sql, sizeof sql, "SET statement_timeout = %d", st_api_request_timeout_ms);
    st_err_t err = st_pg_exec(conn, sql, 0, NULL, NULL, eb);
    /* Times in answers are RFC 3339 in UTC (st_api_time_json()); jsonb renders a
     * timestamptz in the session's zone. */
    return err == ST_OK ? st_pg_exec(conn, "SET TimeZone = 'UTC'", 0, NULL, NULL, eb) : err;
}

/* STRAND_API_REQUEST_TIMEOUT_MS: 100 to 600000, default 10000. */
static int read_request_timeout(void)
{
    const char *text = getenv("STRAND_API_REQUEST_TIMEOUT_MS");
    if (text == NULL || text[0] == '\0')
        return 1;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (*end != '\0' || v < 100 || v > 600000) {
        st_log_error("invalid configuration",
                     "STRAND_API_REQUEST_TIMEOUT_MS must be an integer from 100 to 600000, got \"%s\"",
                     text);
        return 0;
    }
    st_api_request_timeout_ms = (int)v;
    return 1;
}

/* STRAND_API_WORKERS: threads (each with its own PostgreSQL connection) that run write
 * commands; 1 to 64, default 8. */
static int read_command_workers(int *out)
{
    const char *text = getenv("STRAND_API_WORKERS");
    *out = 8;
    if (text == NULL || text[0] == '\0')
        return 1;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (*end != '\0' || v < 1 || v > 64) {
        st_log_error("invalid configuration",
                     "STRAND_API_WORKERS must be an integer from 1 to 64, got \"%s\"", text);
        return 0;
    }
    *out = (int)v;
    return 1;
}

void st_answer_error(st_answer_t *a, st_err_t err, const st_errbuf_t *eb)
{
    if (strstr(eb->msg, "statement timeout") != NULL) {
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
    if (*slot != NULL && st_pg_ensure(*slot))
        return *slot;
    if (*slot != NULL)
        PQfinish(*slot);
    *slot = NULL;
    st_errbuf_t eb;
    if (st_pg_connect(dsn, "strand-api", slot, &eb) != ST_OK ||
        st_api_session_setup(*slot, &eb) != ST_OK) {
        if (*slot != NULL)
            PQfinish(*slot);
        *slot = NULL;
        st_log_warn("api could not connect to PostgreSQL", "%s", eb.msg);
        st_answer_problem(out, 503, "database_unavailable",
                          "the database is unavailable; retry later", NULL, NULL);
        return NULL;
    }
    return *slot;
}

PGconn *st_api_conn(st_api_t *api, st_answer_t *out)
{
    return st_api_connect(&api->conn, api->svc->cfg.pg_dsn, out);
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

/* The HTTP guard: every non-public route needs a known bearer token (401) and the
 * route's permission (403; permissions.c). */
static int authenticate(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *header = st_http_header(req, "Authorization");
    const char *token = st_auth_bearer(header);
    if (st_auth_authenticate(api->auth, token, &api->current) == ST_OK)
        return st_api_authorize(api, req);
    st_http_reply_problem(req, 401, "unauthenticated",
                          token ? "the bearer token is not known"
                          : header ? "the Authorization header must be \"Bearer <token>\" with a token"
                                     " of visible ASCII characters"
                                   : "a bearer token is required",
                          NULL, NULL);
    return 0;
}

PGconn *st_api_conn_or_reply(st_api_t *api, st_http_req_t *req)
{
    st_answer_t answer = {0};
    PGconn *conn = st_api_conn(api, &answer);
    if (conn == NULL)
        st_api_reply(req, &answer);
    return conn;
}

void st_api_reply_error(st_http_req_t *req, st_err_t err, const st_errbuf_t *eb)
{
    st_answer_t answer = {0};
    st_answer_error(&answer, err, eb);
    st_api_reply(req, &answer);
}

static void handle_command(st_http_req_t *req, void *ctx)
{
    st_command_route_t *route = ctx;
    json_t *args = st_http_body_object(req);
    if (args == NULL)
        return;
    st_command_pool_submit(route->api->pool, req, route->cmd, NULL, &route->api->current,
                           st_http_param(req, "id"), NULL, args, NULL);
}

void st_api_route_command(st_api_t *api, const char *pattern, st_cmd_fn cmd)
{
    if (api->nroutes == ST_API_MAX_COMMAND_ROUTES)
        abort();   /* a programming error: raise ST_API_MAX_COMMAND_ROUTES */
    st_command_route_t *route = &api->routes[api->nroutes++];
    route->api = api;
    route->cmd = cmd;
    st_http_route(api->svc->http, "POST", pattern, handle_command, route);
}

static int pg_ready(void *ctx)
{
    st_api_t *api = ctx;
    return api->conn != NULL && PQstatus(api->conn) == CONNECTION_OK;
}

static int relay_ready(void *ctx)
{
    return st_relay_ready(ctx);
}

static int ingress_ready(void *ctx)
{
    return st_ingress_ready(ctx);
}

static void register_routes(st_api_t *api)
{
    st_api_openapi_register(api);
    st_api_definitions_register(api);
    st_api_instances_register(api);
    st_api_signals_register(api);
    st_api_dead_letters_register(api);
    st_api_tasks_register(api);
    st_api_acks_register(api);
    st_api_triggers_register(api);
    st_api_retention_register(api);
    st_api_rpc_register(api);
}

/* The engine limits the API checks data against where it enters (start inputs, signal
 * payloads, task results: 400 when too deep or too large; docs/configuration.md). */
static st_err_t apply_engine_limits(const st_config_t *cfg, st_errbuf_t *eb)
{
    st_engine_limits_t lim;
    st_engine_limits_default(&lim);
    lim.max_state_bytes = cfg->state_max_bytes;
    lim.max_data_depth = cfg->data_max_depth;
    st_diagram_set_max_nodes(cfg->diagram_max_nodes);
    return st_engine_set_limits(&lim, eb);
}

/* strand-api --check-openapi: the route table against docs/openapi.json. */
static int check_openapi(void)
{
    st_service_t svc;
    st_errbuf_t eb;
    if (st_service_init_offline(&svc, "api", &eb) != ST_OK) {
        fprintf(stderr, "strand-api: %s\n", eb.msg);
        return 2;
    }
    st_api_t api = {.svc = &svc};
    register_routes(&api);
    int rc = st_api_check_openapi(&api);
    st_service_close(&svc);
    return rc;
}

/* SIGHUP or a changed STRAND_AUTH_FILE: new tokens take effect, a bad file keeps the
 * old ones (auth.h). */
static void reload_tokens(void *ctx, int forced)
{
    st_errbuf_t eb;
    int reloaded = 0;
    if (st_auth_reload(ctx, forced, &reloaded, &eb) != ST_OK)
        st_log_error("could not reload the token file, keeping the old tokens", "%s", eb.msg);
    else if (reloaded)
        st_log_info("token file reloaded", NULL);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--check-openapi") == 0)
        return check_openapi();
    if (argc > 1) {
        fprintf(stderr, "usage: strand-api [--check-openapi]  (configuration: docs/configuration.md)\n");
        return 2;
    }
    st_service_t svc;
    st_errbuf_t eb;
    int command_workers = 0;
    if (!read_request_timeout() || !read_command_workers(&command_workers))
        return 2;
    if (st_service_init(&svc, "api", 8080, &eb) != ST_OK ||
        apply_engine_limits(&svc.cfg, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        return 1;
    }
    if (st_service_prepare(&svc, &eb) != ST_OK) {
        st_log_error("could not prepare PostgreSQL and Kafka", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_api_t api = {.svc = &svc};
    curl_global_init(CURL_GLOBAL_DEFAULT);   /* before any thread may make an RPC call */
    if (st_command_pool_new(svc.base, svc.cfg.pg_dsn, command_workers, &api.pool, &eb) != ST_OK) {
        st_log_error("could not start the command workers", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    if (st_auth_load(svc.cfg.auth_file, &api.auth, &eb) != ST_OK) {
        st_log_error("could not load the token file", "%s", eb.msg);
        st_service_close(&svc);
        return 2;
    }
    st_service_on_reload(&svc, reload_tokens, api.auth);
    if (!st_auth_enabled(api.auth))
        st_log_write(ST_LOG_WARN, "authentication is off: every caller is an admin",
                     "set STRAND_AUTH_FILE to a token file (docs/api.md)", NULL);
    st_http_set_guard(svc.http, authenticate, &api);
    if (st_pg_connect(svc.cfg.pg_dsn, "strand-api", &api.conn, &eb) != ST_OK ||
        st_api_session_setup(api.conn, &eb) != ST_OK)
        st_log_warn("api could not connect to PostgreSQL yet", "%s", eb.msg);
    st_relay_t *relay = NULL;
    if (st_relay_start(&svc.cfg, &relay, &eb) != ST_OK) {
        st_log_error("could not start the outbox relay", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_ingress_t *ingress = NULL;
    if (st_ingress_start(&svc, api.auth, &ingress, &eb) != ST_OK) {
        st_log_error("could not start the ingress consumer", "%s", eb.msg);
        st_relay_stop(relay);
        st_service_close(&svc);
        return 1;
    }
    st_service_add_ready(&svc, "postgres", pg_ready, &api);
    st_service_add_ready(&svc, "kafka_ingress", ingress_ready, ingress);
    st_service_add_ready(&svc, "outbox_relay", relay_ready, relay);
    api.waiters = st_waiters_new(&api);
    register_routes(&api);
    st_log_info("api ready", NULL);
    st_service_run(&svc);
    st_command_pool_free(api.pool);
    st_waiters_free(api.waiters);
    st_ingress_stop(ingress);
    st_relay_stop(relay);
    if (api.conn != NULL)
        PQfinish(api.conn);
    st_auth_free(api.auth);
    st_service_close(&svc);
    curl_global_cleanup();
    st_log_info("api stopped", NULL);
    return 0;
}
