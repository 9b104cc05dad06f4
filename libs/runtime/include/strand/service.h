/*
 * service.h - what every Strand executable shares at run time: configuration,
 * logging, the HTTP port with /healthz, /readyz and /metrics, the libevent loop, and
 * graceful shutdown on SIGTERM/SIGINT.
 *
 * A service's main() calls st_service_init(), registers its routes and readiness
 * checks, starts its worker threads, calls st_service_run() (which returns when a
 * stop signal arrives), stops its threads, and calls st_service_close().
 */
#ifndef STRAND_SERVICE_H
#define STRAND_SERVICE_H

#include "strand/config.h"
#include "strand/err.h"
#include "strand/http.h"

#define ST_MAX_READY_CHECKS 8
#define ST_MAX_RELOADERS 4
/* How often reloaders are asked to look for changed files (docs/operations.md). */
#define ST_RELOAD_CHECK_MS 5000

/* Returns nonzero when the component it checks is up. */
typedef int (*st_ready_fn)(void *ctx);

/* Re-reads something from disk (the token file, a TLS certificate). `forced`: SIGHUP
 * asked for it, read even if unchanged; 0: the periodic check, read only if changed.
 * Runs on the event-loop thread. */
typedef void (*st_reload_fn)(void *ctx, int forced);

typedef struct {
    st_config_t cfg;
    void *base;                  /* struct event_base * */
    st_http_server_t *http;
    int stopping;                /* set once a stop signal arrived; read atomically */
    int nready;
    const char *ready_names[ST_MAX_READY_CHECKS];
    st_ready_fn ready_fns[ST_MAX_READY_CHECKS];
    void *ready_ctxs[ST_MAX_READY_CHECKS];
    void *signal_events[2];
    int nreload;
    st_reload_fn reload_fns[ST_MAX_RELOADERS];
    void *reload_ctxs[ST_MAX_RELOADERS];
    void *reload_events[2];      /* SIGHUP and the periodic check */
} st_service_t;

/* Loads configuration (exits the process with status 2 and a clear message on bad
 * configuration), initialises logging, binds the HTTP port and registers the
 * health, readiness and metrics routes; SIGHUP runs the reloaders. */
st_err_t st_service_init(st_service_t *svc, const char *name, int default_port,
                         st_errbuf_t *eb);

/* For tools that only inspect a service's route table: an event loop and an HTTP
 * server on an ephemeral loopback port, with the public routes; no configuration is
 * read and nothing is connected. Free with st_service_close(). */
st_err_t st_service_init_offline(st_service_t *svc, const char *name, st_errbuf_t *eb);

/* Adds a readiness check; /readyz answers 200 only when all of them pass. `name`
 * must be a string literal or otherwise outlive the service. */
void st_service_add_ready(st_service_t *svc, const char *name, st_ready_fn fn, void *ctx);

/* Adds a reloader, called on SIGHUP (forced) and every ST_RELOAD_CHECK_MS (not
 * forced). Every service takes SIGHUP (it does not stop a service). */
void st_service_on_reload(st_service_t *svc, st_reload_fn fn, void *ctx);

/* Runs the event loop until SIGTERM or SIGINT. */
void st_service_run(st_service_t *svc);

/* True once a stop signal arrived; worker threads poll it between units of work. */
int st_service_stopping(const st_service_t *svc);

/* Idempotent start-up: applies pending schema migrations and creates missing Kafka
 * topics, retrying with backoff while PostgreSQL or Kafka is unreachable, until it
 * succeeds, a permanent error occurs, or a stop signal arrives. */
st_err_t st_service_prepare(st_service_t *svc, st_errbuf_t *eb);

/* Frees the HTTP server and the event loop. */
void st_service_close(st_service_t *svc);

#endif
