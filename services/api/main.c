/*
 * strand-api: the HTTP ingress. Validates requests, writes state and outbox rows in
 * one transaction, and relays its outbox to Kafka. See README.md in this directory.
 *
 * This file is start-up only: configuration, the authentication guard, readiness and
 * the wiring of the parts (answers: answer.c; routes: routes.c; commands off the loop:
 * command_pool.c; long polls: wait_loop.c; the Kafka ingress: ingress.c).
 */
#include <curl/curl.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "command_pool.h"
#include "strand/diagram.h"
#include "ingress.h"
#include "permissions.h"
#include "wait_loop.h"
#include "strand/engine.h"
#include "strand/log.h"
#include "strand/pg.h"
#include "strand/relay.h"

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

/* Every second while a write rate is set: one audit row per principal whose refusal
 * window ended (permissions.c). On the loop thread, with its connection. */
static void on_write_limit_flush(evutil_socket_t fd, short what, void *ctx)
{
    (void)fd;
    (void)what;
    st_api_write_limit_flush(ctx, 0);
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
    st_api_register_routes(&api);
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
    if (st_service_init(&svc, "api", 8080, &eb) != ST_OK ||
        apply_engine_limits(&svc.cfg, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        return 1;
    }
    st_api_request_timeout_ms = svc.cfg.api_request_timeout_ms;
    if (st_service_prepare(&svc, &eb) != ST_OK) {
        st_log_error("could not prepare PostgreSQL and Kafka", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_api_t api = {.svc = &svc};
    st_api_reads_configure(&svc.cfg);
    st_api_batches_configure(&svc.cfg);
    st_api_write_limit_configure(&svc.cfg);
    curl_global_init(CURL_GLOBAL_DEFAULT);   /* before any thread may make an RPC call */
    if (st_command_pool_new(svc.base, svc.cfg.pg_dsn, svc.cfg.api_workers, &api.pool, &eb) !=
        ST_OK) {
        st_log_error("could not start the command workers", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_command_pool_group(api.pool, "start", st_cmd_start, st_cmd_start_group,
                          svc.cfg.api_start_group_max, svc.cfg.api_start_lanes);
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
    api.waiters = st_waiters_new(&api, st_api_instance_view);
    st_api_register_routes(&api);
    struct event *write_limit_flush = NULL;
    if (st_api_write_limit_enabled()) {
        struct timeval every = {1, 0};
        write_limit_flush = event_new(svc.base, -1, EV_PERSIST, on_write_limit_flush, &api);
        if (write_limit_flush == NULL || event_add(write_limit_flush, &every) != 0)
            st_log_warn("could not schedule the rate limit's audit", "%s",
                        "refusals are audited only at stop");
        st_log_info("write rate limit on", "%d writes/s per principal, bursts of %d",
                    svc.cfg.api_write_rate,
                    svc.cfg.api_write_burst > 0 ? svc.cfg.api_write_burst : svc.cfg.api_write_rate);
    }
    st_log_info("api ready", NULL);
    st_service_run(&svc);
    if (write_limit_flush != NULL)
        event_free(write_limit_flush);
    st_command_pool_free(api.pool);
    st_waiters_free(api.waiters);
    st_ingress_stop(ingress);
    st_api_write_limit_flush(&api, 1);   /* the windows still open, audited now */
    st_relay_stop(relay);
    if (api.conn != NULL)
        PQfinish(api.conn);
    st_auth_free(api.auth);
    st_service_close(&svc);
    curl_global_cleanup();
    st_log_info("api stopped", NULL);
    return 0;
}
