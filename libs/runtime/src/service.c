/* service.c - shared service runtime (see service.h). */
#include "strand/service.h"

#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strand/call_allow.h"
#include "strand/kafka.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/pg.h"
#include "strand/schema.h"

/* The stop deadline (STRAND_STOP_TIMEOUT_MS), started by the first stop signal. A stop
 * still running then waits on a dependency that does not answer (librdkafka's close
 * and destroy wait for requests a hung broker never answers; a query can wait on a
 * frozen PostgreSQL): it is cut, with an error line, and the process exits with status 0.
 * Cutting it loses nothing: what the service committed is durable, and what it held
 * uncommitted (consumed messages, claimed rows) goes to another replica, as after a
 * crash. Kubernetes would otherwise kill it at terminationGracePeriodSeconds. */
static int stop_timeout_ms;

static void *stop_deadline_main(void *arg)
{
    (void)arg;
    struct timespec ts = {stop_timeout_ms / 1000, (long)(stop_timeout_ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
    st_log_error("stop did not finish in time; exiting without waiting further",
                 "waited %d ms (STRAND_STOP_TIMEOUT_MS); committed work is durable, "
                 "uncommitted work is redelivered", stop_timeout_ms);
    _exit(0);
}

static void on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
    st_service_t *svc = arg;
    st_log_info("stop signal received, shutting down", "signal=%d", (int)sig);
    if (!__atomic_exchange_n(&svc->stopping, 1, __ATOMIC_ACQ_REL)) {
        stop_timeout_ms = svc->cfg.stop_timeout_ms > 0 ? svc->cfg.stop_timeout_ms : 20000;
        pthread_t deadline;
        if (pthread_create(&deadline, NULL, stop_deadline_main, NULL) == 0)
            pthread_detach(deadline);
        else
            st_log_warn("could not start the stop deadline; the stop may wait", NULL);
    }
    event_base_loopexit(svc->base, NULL);
}

static void run_reloaders(st_service_t *svc, int forced)
{
    for (int i = 0; i < svc->nreload; i++)
        svc->reload_fns[i](svc->reload_ctxs[i], forced);
}

static void on_reload_signal(evutil_socket_t sig, short what, void *arg)
{
    st_log_info("reload signal received, reading files again", "signal=%d", (int)sig);
    run_reloaders(arg, 1);
}

static void on_reload_check(evutil_socket_t fd, short what, void *arg)
{
    run_reloaders(arg, 0);
}

void st_service_on_reload(st_service_t *svc, st_reload_fn fn, void *ctx)
{
    if (svc->nreload == ST_MAX_RELOADERS)
        abort();
    svc->reload_fns[svc->nreload] = fn;
    svc->reload_ctxs[svc->nreload] = ctx;
    svc->nreload++;
}

/* SIGHUP or a changed certificate: new connections use the new pair; a pair that
 * does not load keeps the old one. */
static void reload_tls(void *ctx, int forced)
{
    st_service_t *svc = ctx;
    st_errbuf_t eb;
    int reloaded = 0;
    if (st_http_server_reload_tls(svc->http, forced, &reloaded, &eb) != ST_OK)
        st_log_error("could not reload the TLS certificate, keeping the old one", "%s", eb.msg);
    else if (reloaded)
        st_log_info("TLS certificate reloaded", "file=%s", svc->cfg.tls_cert_file);
}

static void handle_healthz(st_http_req_t *req, void *ctx)
{
    st_http_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

static void handle_readyz(st_http_req_t *req, void *ctx)
{
    st_service_t *svc = ctx;
    json_t *checks = json_object();
    int ready = !st_service_stopping(svc);
    for (int i = 0; i < svc->nready; i++) {
        int ok = svc->ready_fns[i](svc->ready_ctxs[i]);
        ready &= ok != 0;
        json_object_set_new(checks, svc->ready_names[i], json_string(ok ? "up" : "down"));
    }
    st_http_reply_json(req, ready ? 200 : 503,
                       json_pack("{s:s, s:o}", "status", ready ? "ready" : "not ready",
                                 "checks", checks));
}

static void handle_metrics(st_http_req_t *req, void *ctx)
{
    char *text = st_metrics_render();
    st_http_reply_text(req, 200, "text/plain; version=0.0.4", text);
    free(text);
}

static void add_public_routes(st_service_t *svc)
{
    st_http_route_public(svc->http, "GET", "/healthz", handle_healthz, svc);
    st_http_route_public(svc->http, "GET", "/readyz", handle_readyz, svc);
    st_http_route_public(svc->http, "GET", "/metrics", handle_metrics, svc);
}

st_err_t st_service_init_offline(st_service_t *svc, const char *name, st_errbuf_t *eb)
{
    memset(svc, 0, sizeof *svc);
    snprintf(svc->cfg.service, sizeof svc->cfg.service, "%s", name);
    svc->base = event_base_new();
    if (svc->base == NULL)
        return st_err_set(eb, ST_ERR_INTERNAL, "could not create the event loop");
    st_err_t err = st_http_server_new(svc->base, "127.0.0.1", 0, 1 << 20, &svc->http, eb);
    if (err == ST_OK)
        add_public_routes(svc);
    return err;
}

st_err_t st_service_init(st_service_t *svc, const char *name, int default_port,
                         st_errbuf_t *eb)
{
    memset(svc, 0, sizeof *svc);
    st_errbuf_t cfg_eb;
    if (st_config_load(&svc->cfg, name, default_port, &cfg_eb) != ST_OK) {
        fprintf(stderr, "strand-%s: configuration error: %s\n", name, cfg_eb.msg);
        exit(2);
    }
    if (st_call_allow_load_env(&cfg_eb) != ST_OK) {
        fprintf(stderr, "strand-%s: configuration error: %s\n", name, cfg_eb.msg);
        exit(2);
    }
    st_log_init(name, st_log_level_parse(svc->cfg.log_level));
    st_pg_set_prepared(svc->cfg.pg_prepared);
    signal(SIGPIPE, SIG_IGN);
    svc->base = event_base_new();
    if (svc->base == NULL)
        return st_err_set(eb, ST_ERR_INTERNAL, "could not create the event loop");
    st_err_t err = st_http_server_new(svc->base, svc->cfg.http_addr, svc->cfg.http_port,
                                      svc->cfg.max_body_bytes, &svc->http, eb);
    if (err == ST_OK)
        err = st_http_server_set_limits(svc->http, svc->cfg.max_header_bytes,
                                        svc->cfg.max_headers, svc->cfg.header_timeout_ms, eb);
    if (err == ST_OK && svc->cfg.tls_cert_file[0] != '\0') {
        err = st_http_server_set_tls(svc->http, svc->cfg.tls_cert_file, svc->cfg.tls_key_file, eb);
        if (err == ST_OK)
            st_service_on_reload(svc, reload_tls, svc);
    }
    if (err != ST_OK)
        return err;
    add_public_routes(svc);
    /* Created here rather than on first use, so that dashboards and alert rules see a
     * 0 instead of no series (the help text matches notice.c's). */
    st_metrics_counter("strand_dead_letters_total", "Messages moved to the dead-letter store",
                       NULL);
    int sigs[2] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        struct event *ev = evsignal_new(svc->base, sigs[i], on_stop_signal, svc);
        event_add(ev, NULL);
        svc->signal_events[i] = ev;
    }
    struct event *hup = evsignal_new(svc->base, SIGHUP, on_reload_signal, svc);
    struct event *check = event_new(svc->base, -1, EV_PERSIST, on_reload_check, svc);
    struct timeval every = {ST_RELOAD_CHECK_MS / 1000, (ST_RELOAD_CHECK_MS % 1000) * 1000};
    if (hup == NULL || check == NULL || event_add(hup, NULL) != 0 || event_add(check, &every) != 0)
        return st_err_set(eb, ST_ERR_INTERNAL, "could not set up the reload signal");
    svc->reload_events[0] = hup;
    svc->reload_events[1] = check;
    st_log_info("service starting", "node=%s %s=%s:%d", svc->cfg.node_id,
                svc->cfg.tls_cert_file[0] ? "https" : "http", svc->cfg.http_addr,
                svc->cfg.http_port);
    return ST_OK;
}

void st_service_add_ready(st_service_t *svc, const char *name, st_ready_fn fn, void *ctx)
{
    if (svc->nready == ST_MAX_READY_CHECKS)
        abort();
    svc->ready_names[svc->nready] = name;
    svc->ready_fns[svc->nready] = fn;
    svc->ready_ctxs[svc->nready] = ctx;
    svc->nready++;
}

void st_service_run(st_service_t *svc)
{
    if (!st_service_stopping(svc))
        event_base_dispatch(svc->base);
}

int st_service_stopping(const st_service_t *svc)
{
    return __atomic_load_n(&svc->stopping, __ATOMIC_ACQUIRE);
}

/* Runs the loop for up to `ms` so that stop signals are seen while waiting. */
static void wait_serving(st_service_t *svc, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(svc->base, &tv);
    event_base_dispatch(svc->base);
}

st_err_t st_service_prepare(st_service_t *svc, st_errbuf_t *eb)
{
    int backoff_ms = 200;
    for (;;) {
        PGconn *conn = NULL;
        st_err_t err = st_pg_connect(svc->cfg.pg_dsn, "strand-migrate", &conn, eb);
        if (err == ST_OK) {
            err = st_schema_migrate(conn, eb);
            PQfinish(conn);
        }
        if (err == ST_OK)
            err = st_kafka_ensure_topics(&svc->cfg, 10000, eb);
        if (err == ST_OK || !st_err_retryable(err))
            return err;
        st_log_warn("waiting for PostgreSQL and Kafka", "%s", eb->msg);
        wait_serving(svc, backoff_ms);
        if (st_service_stopping(svc))
            return st_err_set(eb, ST_ERR_RETRY, "stopped while waiting for PostgreSQL and Kafka");
        backoff_ms = backoff_ms < 5000 ? backoff_ms * 2 : 5000;
    }
}

void st_service_close(st_service_t *svc)
{
    st_http_server_free(svc->http);
    for (int i = 0; i < 2; i++)
        if (svc->signal_events[i])
            event_free(svc->signal_events[i]);
    for (int i = 0; i < 2; i++)
        if (svc->reload_events[i])
            event_free(svc->reload_events[i]);
    if (svc->base)
        event_base_free(svc->base);
}
