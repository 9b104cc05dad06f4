/*
 * ingress.h - the Kafka ingress topic consumer of strand-api.
 *
 * Consumes IngressCommand envelopes (proto/strand.proto) in group "<prefix>ingress"
 * and runs them through the same st_cmd_* handlers as the HTTP routes. Outcomes:
 * 2xx -> offset committed; 4xx, an undecodable, empty, null (tombstone) or oversized
 * (> STRAND_HTTP_MAX_BODY) message, or 5xx on STRAND_MAX_ATTEMPTS deliveries -> an
 * IngressRejected notice and a dead letter in one transaction, then the offset is
 * committed (the partition never blocks on a message). The dead letter keeps the
 * envelope re-encoded without its token. If even that write fails, it is retried with
 * backoff while the consumer reports itself stuck (/readyz, strand_consumer_stuck).
 */
#ifndef STRAND_API_INGRESS_H
#define STRAND_API_INGRESS_H

#include "strand/auth.h"
#include "strand/err.h"
#include "strand/service.h"

typedef struct st_ingress st_ingress_t;

/* Starts the consumer thread (own PostgreSQL connection). Commands authenticate with
 * the envelope's token against `auth` (borrowed; must outlive the consumer). Caller
 * stops it with st_ingress_stop() after st_service_run() returned. */
st_err_t st_ingress_start(st_service_t *svc, const st_auth_t *auth, st_ingress_t **out,
                          st_errbuf_t *eb);
void st_ingress_stop(st_ingress_t *ing);

/* True while the consumer has a broker connection and PostgreSQL, has polled within
 * STRAND_CONSUMER_POLL_LIMIT_MS and is not stuck on a dead letter it cannot write. */
int st_ingress_ready(const st_ingress_t *ing);

#endif
