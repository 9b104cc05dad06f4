/*
 * api.h - the HTTP API's handlers (definitions.c, instances.c), registered by main.c.
 *
 * Handlers run on the event-loop thread with the service's one PostgreSQL connection;
 * each request that writes does so in one transaction, with its messages in the
 * outbox. Handlers never run workflow steps.
 */
#ifndef STRAND_API_H
#define STRAND_API_H

#include <libpq-fe.h>

#include "strand/err.h"
#include "strand/http.h"
#include "strand/service.h"

typedef struct {
    st_service_t *svc;
    PGconn *conn;      /* owned; reconnected on demand */
} st_api_t;

/* Returns the live connection, reconnecting if needed, or NULL after answering 503. */
PGconn *st_api_conn(st_api_t *api, st_http_req_t *req);

/* Answers a st_err_t from a database path as a problem (503 for retryable ones). */
void st_api_reply_error(st_http_req_t *req, st_err_t err, const st_errbuf_t *eb);

void st_api_definitions_register(st_api_t *api);
void st_api_instances_register(st_api_t *api);
void st_api_signals_register(st_api_t *api);
void st_api_dead_letters_register(st_api_t *api);
void st_api_tasks_register(st_api_t *api);

#endif
