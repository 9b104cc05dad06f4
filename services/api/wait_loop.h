/*
 * wait_loop.h - long polling on an instance: GET /v1/instances/{id}?wait_ms=N&
 * after_version=V answers as soon as the instance's state_version exceeds V or it has
 * ended, or after N ms with its current view; POST /v1/instances?wait_ms=N the same
 * after the start, with V = 0. Wake-ups come from two paths, whichever is first:
 * PostgreSQL notifications on ST_WAKE_CHANNEL (raised by a trigger on
 * strand.runtime_states in every transaction that changes an instance's
 * state_version; always on, so Redis is not needed) and, when STRAND_REDIS_URL is
 * set, Redis hints (channel <prefix>wake, published by the executor after commit).
 * Either path going down and coming back is handled here; after a PostgreSQL outage
 * every parked request looks again, as a notification may have been missed.
 */
#ifndef STRAND_API_WAIT_LOOP_H
#define STRAND_API_WAIT_LOOP_H

#include "api.h"

/* The PostgreSQL channel of instance changes (payload: the instance id); migration
 * 0011's trigger notifies it. */
#define ST_WAKE_CHANNEL "strand_wake"

typedef struct st_waiters st_waiters_t;

/* Creates the waiter table, LISTENs on ST_WAKE_CHANNEL and, when STRAND_REDIS_URL is
 * set, subscribes to Redis hints, both on the service's event loop (each reconnecting
 * by itself). Caller frees with st_waiters_free(). */
st_waiters_t *st_waiters_new(st_api_t *api);
void st_waiters_free(st_waiters_t *w);

/* Parks a deferred request (from st_http_defer()) until the instance moves past
 * `after_version`, or `wait_ms` pass; it is then answered with the instance's view
 * and `status` (200; 201 for a start that waited). Takes ownership of `req`. The
 * caller must have loaded the view after the last hint for the instance (see
 * st_waiters_hinted_since()), or a hint that came before could be missed. */
void st_waiters_park(st_waiters_t *w, st_http_req_t *req, const char *instance_id,
                     long long after_version, int wait_ms, int status);

/* A position in the stream of hints received, for st_waiters_hinted_since(). */
unsigned long long st_waiters_mark(const st_waiters_t *w);

/* True if a hint for `instance_id` may have arrived since `mark` (also when too many
 * hints arrived to tell). Loop thread only. */
int st_waiters_hinted_since(const st_waiters_t *w, const char *instance_id,
                            unsigned long long mark);

/* Loads the instance's current view into `out` (200, or the error problem; the
 * caller closes or replies with it) and returns 1 when a long poll should answer
 * with it: the instance ended, its state_version passed `after_version` (< 0:
 * always), or the view could not be loaded. One query; used by GET and by hints. */
int st_api_instance_view(st_api_t *api, const char *instance_id, long long after_version,
                         st_answer_t *out);

#endif
