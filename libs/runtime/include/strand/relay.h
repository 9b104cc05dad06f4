/*
 * relay.h - the outbox relay: moves committed strand.outbox rows (outbox.h) to Kafka.
 *
 * Any number of relays run, one a thread in each writing service; one of them, the
 * leader, holds a session advisory lock and publishes (so each key's messages keep
 * their commit order), the others stand by and take over within about a second when the
 * leader's session ends. The leader wakes on LISTEN/NOTIFY or on a Redis hint, claims
 * the oldest rows, produces them with the idempotent producer and marks them published
 * only after their delivery reports succeed, up to the first failure.
 */
#ifndef STRAND_RELAY_H
#define STRAND_RELAY_H

#include "strand/config.h"
#include "strand/err.h"

typedef struct st_relay st_relay_t;

/* Starts the relay thread. It connects (and reconnects) by itself; failures after
 * start are logged and retried, never fatal. Caller stops it with st_relay_stop(). */
st_err_t st_relay_start(const st_config_t *cfg, st_relay_t **out, st_errbuf_t *eb);

/* Asks the relay to finish the batch in hand, waits for it, and frees it. */
void st_relay_stop(st_relay_t *relay);

/* True while this relay is the one publishing (holds the leader lock). */
int st_relay_leading(const st_relay_t *relay);

/* True while the relay has a live PostgreSQL connection and its producer reaches a
 * Kafka broker (a standby is ready too). */
int st_relay_ready(const st_relay_t *relay);

#endif
