/*
 * executor.h - the executor's signal pump (executor_loop.c), started by main.c.
 */
#ifndef STRAND_EXECUTOR_H
#define STRAND_EXECUTOR_H

#include "strand/err.h"
#include "strand/service.h"

typedef struct st_executor st_executor_t;

/* Creates the signals consumer and starts the pump thread; registers the postgres
 * and kafka readiness checks on `svc`. Caller stops it with st_executor_stop(). */
st_err_t st_executor_start(st_service_t *svc, st_executor_t **out, st_errbuf_t *eb);

/* Waits for the pump to finish the message in hand (call after st_service_run()
 * returned), closes the consumer and frees everything. */
void st_executor_stop(st_executor_t *ex);

#endif
