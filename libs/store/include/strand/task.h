/*
 * task.h - the owner of strand.tasks and strand.task_events: a human task an instance
 * waits on, and what happened to it (created, assigned, released, completed,
 * cancelled). The executor opens tasks, the API moves them, an instance's end cancels
 * them (tree.c); all through here, in the caller's transaction (_tx).
 */
#ifndef STRAND_TASK_H
#define STRAND_TASK_H

#include <libpq-fe.h>

#include "strand/err.h"

/* Opens task `id` (status open) for the wait `waiting_token` of `instance_id`, with its
 * `created` event. `roles_json` is a JSON array of role names, `payload_json` an object,
 * `deadline_ms` epoch milliseconds as text (NULL: none). */
st_err_t st_task_open_tx(PGconn *conn, const char *id, const char *instance_id,
                         const char *name, const char *roles_json, const char *payload_json,
                         const char *waiting_token, const char *deadline_ms, st_errbuf_t *eb);

/* Moves task `id` to `status` ("assigned", "open", "completed") with `assignee` (NULL:
 * none) and records the event `event_kind` by `actor` with `detail_json`. The caller
 * has locked the row and checked the move. */
st_err_t st_task_move_tx(PGconn *conn, const char *id, const char *status, const char *assignee,
                         const char *event_kind, const char *actor, const char *detail_json,
                         st_errbuf_t *eb);

/* Two CTEs for tree.c's one end-of-instance statement: cancels the open and assigned
 * tasks of `instance` (those of the wait `token` only unless it is NULL) with a
 * `cancelled` event carrying `detail`. Arguments are SQL expressions as text literals;
 * the CTEs are named t (the cancelled ids) and e. */
#define ST_TASK_CANCEL_CTES(instance, token, detail)                                        \
    "t AS (UPDATE strand.tasks SET status = 'cancelled'"                                    \
    "   WHERE instance_id = " instance " AND status IN ('open', 'assigned')"                \
    "   AND (" token "::text IS NULL OR waiting_token = " token ") RETURNING id),"           \
    " e AS (INSERT INTO strand.task_events (task_id, kind, detail)"                         \
    "   SELECT id, 'cancelled', " detail " FROM t)"

#endif
