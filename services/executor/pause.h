/*
 * pause.h - the operator verbs PAUSE, RESUME and REWIND as the executor applies them
 * (issue 18; the API side is services/api/pause.c; docs/api.md "Pause, resume and
 * rewind").
 *
 * Each arrives as a control signal carrying the instance's state_version the operator
 * saw (expected_version) and the principal's name (payload "actor"). The executor
 * re-checks it under the instance's row lock: a stale or inapplicable verb is dropped
 * with a StaleSignal notice and an audit row "rejected"; an applied one writes an audit
 * row "applied" with the state before and after, and a history entry.
 *
 *   PAUSE   status 'paused'; every later wake-up but CANCEL/TERMINATE is kept
 *           (st_signal_buffer_hold_tx). The state_version does not move.
 *   RESUME  the status the runtime state says; what was kept is sent again in arrival
 *           order (st_signal_buffer_release_held_tx), unless the definition version is still
 *           paused. A RESUME with payload {"scope": "definition"} (sent by the API when a
 *           definition version is resumed, one per instance that has kept signals) only
 *           sends them again, if neither the instance nor its version is paused.
 *   REWIND  payload {"to_version": N}: the instance continues from the snapshot it had
 *           at state_version N (strand.snapshot_log). What it owns now (tasks, pending
 *           calls, children) is ended as for an ended instance (strand/tree.h); the
 *           restored waits are entered afresh (st_interp_rewind); state_version moves
 *           on by one; history keeps everything, plus an entry "rewound" naming the
 *           versions undone.
 */
#ifndef STRAND_EXECUTOR_PAUSE_H
#define STRAND_EXECUTOR_PAUSE_H

#include <libpq-fe.h>

#include "strand/err.h"
#include "strand/signal.h"
#include "defcache.h"
#include "outcome.h"

/* What the wake-up read of the instance under its row lock. Borrowed strings. */
typedef struct {
    long long version;            /* state_version */
    const char *status;           /* instances.status */
    const char *definition;
    int definition_version;
    const char *snapshot;         /* JSON text; NULL before START ran */
    const char *parent_id;        /* NULL: no parent */
    const char *parent_token;
} st_pause_instance_t;

/* 1 for PAUSE, RESUME and REWIND. */
int st_pause_signal(st_signal_type_t type);

/* Applies (or rejects) the verb `sig` to the instance described by `inst`, inside the
 * wake-up's transaction, after the signal id was recorded. *outcome: ST_WAKE_APPLIED or
 * ST_WAKE_STALE. An error rolls the wake-up back (ST_ERR_FORBIDDEN when Strand has no
 * record of sending the signal: it is dead-lettered). */
st_err_t st_pause_apply_tx(PGconn *conn, st_defcache_t *cache, const char *node_id,
                           const st_signal_t *sig, const st_pause_instance_t *inst,
                           st_wake_outcome_t *outcome, st_errbuf_t *eb);

#endif
