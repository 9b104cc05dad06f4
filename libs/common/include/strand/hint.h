/*
 * hint.h - optional Redis wake-up hints, published after commit.
 *
 * A hint says "instance X changed" on the Redis channel <prefix>wake, so that waiters
 * (the API's long-polling GET) can look again at once instead of at their timeout.
 * Hints are only an accelerator: nothing depends on their delivery, and with Redis
 * absent (STRAND_REDIS_URL empty) or down everything works, only slower. Publishing
 * never blocks for more than 100 ms; after a failure it is skipped for 5 s.
 */
#ifndef STRAND_HINT_H
#define STRAND_HINT_H

#include "strand/config.h"

typedef struct st_hint st_hint_t;

/* A publisher for one thread. Never fails: without Redis it does nothing.
 * Caller frees with st_hint_free(). */
st_hint_t *st_hint_new(const st_config_t *cfg);
void st_hint_free(st_hint_t *hint);

/* Publishes `instance_id` on <prefix>wake. Call after the transaction committed. */
void st_hint_publish(st_hint_t *hint, const char *instance_id);

/* Parses "redis://host:port" into host and port; returns 0 if it is not one. */
int st_hint_parse_url(const char *url, char *host, size_t host_len, int *port);

#endif
