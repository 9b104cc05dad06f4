/*
 * strand-api: the HTTP ingress. Validates requests, writes state and outbox rows in
 * one transaction, and relays its outbox to Kafka. See README.md in this directory.
 */
#include <stdlib.h>

#include "api.h"
#include "strand/log.h"
#include "strand/outbox.h"
#include "strand/pg.h"

PGconn *st_api_conn(st_api_t *api, st_http_req_t *req)
{
    if (api->conn != NULL && st_pg_ensure(api->conn))
        return api->conn;
    if (api->conn != NULL)
        PQfinish(api->conn);
    api->conn = NULL;
    st_errbuf_t eb;
    if (st_pg_connect(api->svc->cfg.pg_dsn, "strand-api", &api->conn, &eb) != ST_OK) {
        st_log_warn("api could not connect to PostgreSQL", "%s", eb.msg);
        st_http_reply_problem(req, 503, "database_unavailable",
                              "the database is unavailable; retry later", NULL, NULL);
        return NULL;
    }
    return api->conn;
}

void st_api_reply_error(st_http_req_t *req, st_err_t err, const st_errbuf_t *eb)
{
    if (st_err_retryable(err)) {
        st_log_warn("request failed on a transient error", "%s: %s", st_err_name(err), eb->msg);
        st_http_reply_problem(req, 503, "unavailable", "a dependency is unavailable; retry later",
                              NULL, NULL);
    } else {
        st_log_error("request failed", "%s: %s", st_err_name(err), eb->msg);
        st_http_reply_problem(req, 500, "internal", "internal error", NULL, NULL);
    }
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

int main(void)
{
    st_service_t svc;
    st_errbuf_t eb;
    if (st_service_init(&svc, "api", 8080, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        return 1;
    }
    if (st_service_prepare(&svc, &eb) != ST_OK) {
        st_log_error("could not prepare PostgreSQL and Kafka", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_api_t api = {.svc = &svc};
    if (st_pg_connect(svc.cfg.pg_dsn, "strand-api", &api.conn, &eb) != ST_OK)
        st_log_warn("api could not connect to PostgreSQL yet", "%s", eb.msg);
    st_relay_t *relay = NULL;
    if (st_relay_start(&svc.cfg, &relay, &eb) != ST_OK) {
        st_log_error("could not start the outbox relay", "%s", eb.msg);
        st_service_close(&svc);
        return 1;
    }
    st_service_add_ready(&svc, "postgres", pg_ready, &api);
    st_service_add_ready(&svc, "outbox_relay", relay_ready, relay);
    st_api_definitions_register(&api);
    st_api_instances_register(&api);
    st_api_signals_register(&api);
    st_api_dead_letters_register(&api);
    st_api_tasks_register(&api);
    st_log_info("api ready", NULL);
    st_service_run(&svc);
    st_relay_stop(relay);
    if (api.conn != NULL)
        PQfinish(api.conn);
    st_service_close(&svc);
    st_log_info("api stopped", NULL);
    return 0;
}
