/*
 * due_loop.h - a thread that acts on rows when they fall due, without a polling tick.
 *
 * Shared by the scheduler (timers) and the monitor (ACK deadlines). The thread keeps a
 * PostgreSQL connection that LISTENs on one channel and repeats: claim and handle a
 * batch of due rows (the owner's `process`, which commits); while batches come back
 * full, go again; then sleep until the earliest deadline (the owner's `next_wait_ms`,
 * one index lookup), a NOTIFY on the channel, or a stop request, whichever comes
 * first. Lost connections are re-opened with backoff.
 */
#ifndef STRAND_DUE_LOOP_H
#define STRAND_DUE_LOOP_H

#include <libpq-fe.h>

#include "strand/err.h"
#include "strand/service.h"

typedef struct {
    const char *name;        /* for logs and the application_name */
    /* NOTIFY channel that signals a new or earlier deadline; NULL: none, the loop wakes
     * on its deadlines only (and, not listening, is not signalled by every notifying
     * commit in the database, as PostgreSQL signals all listeners of a database). */
    const char *channel;
    int batch;               /* rows per claim; a full batch means "go again" */
    /* Claims and handles due rows in its own transaction; returns how many, or -1 on a
     * database error (the loop reconnects if the connection is gone). */
    int (*process)(PGconn *conn, void *ctx);
    /* Milliseconds until the earliest deadline; -1 if there is none. */
    long long (*next_wait_ms)(PGconn *conn, void *ctx);
    void *ctx;
} st_due_loop_config_t;

typedef struct st_due_loop st_due_loop_t;

/* Starts the thread; `cfg` is copied. Registers a "postgres" readiness check on svc.
 * Caller stops it with st_due_loop_stop(). */
st_err_t st_due_loop_start(st_service_t *svc, const st_due_loop_config_t *cfg,
                           st_due_loop_t **out, st_errbuf_t *eb);

/* Finishes the batch in hand, stops the thread and frees. */
void st_due_loop_stop(st_due_loop_t *loop);

/* The loop's sleep after a round, in ms; -1: go round again at once. `wait_ms` is the
 * owner's next_wait_ms() (0: something is due now; -1: nothing is pending),
 * `processed` what the round's process() handled, and `looked_again` the loop's state
 * between rounds (starts at 0). A row found due is claimed at once, once; found due
 * again by the round that followed without anything processed, it belongs to another
 * replica, and the loop sleeps a few ms. Exposed for tests/unit/test_due_loop.c. */
int st_due_loop_sleep_ms(long long wait_ms, int processed, int *looked_again);

#endif
