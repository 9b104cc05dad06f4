/*
 * hint.h - optional Redis wake-up hints, published after commit.
 *
 * Two channels. A hint on <prefix>wake says "instance X changed", so that waiters
 * (the API's long polls and start-and-waits) look again at once. A hint on
 * <prefix>outbox says "outbox rows committed", so that the relay leader drains at once
 * (outbox.h); writers rely on it instead of PostgreSQL's notification in the same way
 * as the executor does below. The executor's
 * wake-ups rely on them instead of PostgreSQL's notification while they reach a
 * subscriber (STRAND_WAKE_NOTIFY, services/executor/executor_loop.c); a hint that
 * reached nobody is followed by that notification, and the API rechecks its parked
 * polls every STRAND_WAIT_RECHECK_MS, so a lost hint delays an answer, never loses it.
 * With Redis absent (STRAND_REDIS_URL empty) or down everything works. Publishing never
 * blocks for more than 100 ms; after a failure it is skipped for 5 s.
 */
#ifndef STRAND_HINT_H
#define STRAND_HINT_H

#include <libpq-fe.h>

#include "strand/config.h"
#include "strand/metrics.h"

/* The PostgreSQL channel of instance changes (payload: the instance id): migration
 * 0011's trigger notifies it, the API LISTENs on it. */
#define ST_WAKE_CHANNEL "strand_wake"

/* The Redis channels' names after STRAND_TOPIC_PREFIX. */
#define ST_HINT_WAKE "wake"
#define ST_HINT_OUTBOX "outbox"

typedef struct st_hint st_hint_t;

/* A publisher on <prefix>`channel` (ST_HINT_WAKE or ST_HINT_OUTBOX) for one thread.
 * Never fails: without Redis it does nothing. Caller frees with st_hint_free(). */
st_hint_t *st_hint_new(const st_config_t *cfg, const char *channel);
void st_hint_free(st_hint_t *hint);

/* Publishes `message` (an instance id on ST_HINT_WAKE). Call after the transaction
 * committed. Returns the number of subscribers Redis delivered it to, or -1 when it
 * was not published (no Redis configured, backing off after a failure, or this call
 * failed). */
int st_hint_publish(st_hint_t *hint, const char *message);

/* True when writers may skip PostgreSQL's notification while their hints get through:
 * Redis configured and STRAND_WAKE_NOTIFY=fallback. The one rule for the executor's
 * wake-ups and the outbox writers. */
int st_hint_may_replace_notify(const st_config_t *cfg);

/* After a commit: publishes `message`. When the transaction skipped PostgreSQL's
 * notification (`skipped`) and the hint reached nobody, notifies `pg_channel` with
 * `message` on `conn` instead and counts it in `missed`. With `rely_on_hints` (NULL:
 * the caller never skips), sets it to whether the hint got through, which decides
 * whether the caller's next transaction skips the notification. */
void st_hint_after_commit(st_hint_t *hint, PGconn *conn, const char *pg_channel,
                          const char *message, int skipped, int *rely_on_hints,
                          st_metric_t *missed);

/* Parses "redis://host:port" into host and port; returns 0 if it is not one. */
int st_hint_parse_url(const char *url, char *host, size_t host_len, int *port);

#endif
