/*
 * wait_loop.h - long polling on an instance: GET /v1/instances/{id}?wait_ms=N&
 * after_version=V answers as soon as the instance's state_version exceeds V or it has
 * ended, or after N ms with its current view; POST /v1/instances?wait_ms=N the same
 * after the start, with V = 0. Wake-ups come from three paths, whichever is first:
 * PostgreSQL notifications on ST_WAKE_CHANNEL (raised by a trigger on
 * strand.runtime_states in every transaction that changes an instance's
 * state_version, except the executor's wake-ups while their hints reach a subscriber:
 * strand/hint.h), Redis hints when STRAND_REDIS_URL is set (channel <prefix>wake,
 * published by the executor after commit), and a recheck of every parked request's
 * instance every STRAND_WAIT_RECHECK_MS, which answers what both others missed.
 * Either path going down and coming back is handled here; after a PostgreSQL outage
 * every parked request looks again, as a notification may have been missed.
 */
#ifndef STRAND_API_WAIT_LOOP_H
#define STRAND_API_WAIT_LOOP_H

#include "api.h"

typedef struct st_waiters st_waiters_t;

/* Loads an instance's view and says whether a long poll answers with it; the shape of
 * st_api_instance_view() (instances.c), handed in by main.c so that the wait loop
 * knows no handler. */
typedef int (*st_view_fn)(st_api_t *api, const char *instance_id, long long after_version,
                          st_answer_t *out);

/* Creates the waiter table, LISTENs on ST_WAKE_CHANNEL and, when STRAND_REDIS_URL is
 * set, subscribes to Redis hints, both on the service's event loop (each reconnecting
 * by itself); `view` loads what a woken poll answers. Caller frees with
 * st_waiters_free(). */
st_waiters_t *st_waiters_new(st_api_t *api, st_view_fn view);
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

#endif
