/*
 * tree.h - what an instance owns, and how its end reaches it (docs/architecture.md,
 * invariant 12): its open tasks, its pending calls, its running child instances, and
 * its parent's wait. The one place that rule is written; the executor (an instance
 * that completes, fails, is cancelled or terminated, or abandons a branch) and the API
 * (a run replaced under allow_terminate_if_running) call it inside their transaction.
 *
 * Tasks are cancelled with a `cancelled` task event; pending calls (not yet sent) are
 * marked `cancelled` so the dispatcher never sends them (a call already sent answers a
 * stale wait and is dropped); a Kafka-transport call's ACKs still awaited get stage
 * `cancelled`, so strand-monitor stops re-raising its work event; children get a CANCEL (or a TERMINATE when the parent was
 * terminated) that carries the waiting token the parent waited on, which tells the
 * child not to wake its parent back. Timers need nothing: the wait they answer is gone,
 * so they fire as stale signals (timer.h).
 */
#ifndef STRAND_TREE_H
#define STRAND_TREE_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/err.h"
#include "strand/signal.h"

/* Ends everything instance `instance_id` owns because it ended with `status`
 * ("completed", "failed", "cancelled", "terminated"): every open or assigned task,
 * every pending call (and awaited ACK of a Kafka-transport call), every child that has not ended (TERMINATE for "terminated",
 * else CANCEL). Expects the caller to hold an open transaction on `conn`. */
st_err_t st_tree_end_tx(PGconn *conn, const char *instance_id, const char *status,
                        st_errbuf_t *eb);

/* Ends what one abandoned wait of a still-running instance owns (a `join: any` branch
 * that lost, a branch cut short): the task, pending call or child started for the wait
 * `token`. Expects the caller to hold an open transaction on `conn`. */
st_err_t st_tree_abandon_tx(PGconn *conn, const char *instance_id, const char *token,
                            st_errbuf_t *eb);

/* True when `sig` (a CANCEL or TERMINATE) was sent by the parent of the instance it
 * targets, i.e. it carries the token `parent_token` that parent waited on: the child
 * must then not wake the parent, which has moved on or ended. */
int st_tree_from_parent(const st_signal_t *sig, const char *parent_token);

/* Wakes parent `parent_id`'s wait `parent_token` with a CHILD_COMPLETED for child
 * `child_id` that ended with `status`; `output` and `error` (borrowed, NULL: null) are
 * the child's. Expects the caller to hold an open transaction on `conn`. */
st_err_t st_tree_notify_parent_tx(PGconn *conn, const char *child_id, const char *parent_id,
                                  const char *parent_token, const char *status,
                                  const json_t *output, const json_t *error, st_errbuf_t *eb);

#endif
