/*
 * command_pool.h - runs the API's write commands (start, signal, task actions, acks,
 * triggers, rpc) on a small pool of worker threads, each with its own PostgreSQL
 * connection, so that concurrent requests overlap their round trips and share
 * commits instead of queueing behind one connection on the event-loop thread, and so
 * that an RPC waiting on its worker never stalls other requests.
 *
 * The event-loop thread parses and authenticates a request, hands it over with
 * st_command_pool_submit() and goes on; a worker runs the command (which opens and
 * commits its own transaction) and queues the answer; the loop thread sends it. Only
 * the loop thread ever touches libevent or the request.
 */
#ifndef STRAND_API_COMMAND_POOL_H
#define STRAND_API_COMMAND_POOL_H

#include "api.h"

typedef struct st_command_pool st_command_pool_t;

/* The name of every worker thread (top -H, /proc/<pid>/task/<tid>/comm). */
#define ST_COMMAND_WORKER_THREAD "strand-cmd"

/* An RPC-shaped command: like st_cmd_fn with the {name} path parameter as well. */
typedef void (*st_named_cmd_fn)(PGconn *conn, const st_principal_t *who, const char *id,
                                const char *name, const json_t *args, st_answer_t *out);

/* Starts `nworkers` threads (1-64) that connect to `pg_dsn` lazily and answer on the
 * event base `base` (a struct event_base *). Caller frees with st_command_pool_free()
 * after the loop has stopped. */
st_err_t st_command_pool_new(void *base, const char *pg_dsn, int nworkers,
                             st_command_pool_t **out, st_errbuf_t *eb);

/* What the loop thread does with a finished command's answer instead of sending it:
 * `fn` is handed the deferred request (it must answer it, now or later) and the answer
 * (borrowed: closed after `fn` returns; st_api_reply() may take its body), and frees
 * `ctx` (malloc'd; freed with free() instead when the pool shuts down first, and the
 * answer is then sent as it is). */
typedef struct {
    void (*fn)(st_http_req_t *req, st_answer_t *answer, void *ctx);
    void *ctx;
} st_command_then_t;

/* Queues `cmd` (or `named` with `name`, when `cmd` is NULL) for a worker and defers
 * `req`, which is answered later on the loop thread: with the command's answer, or by
 * `then` (NULL: answer directly). Copies `who`, `id`, `name` and `then`; takes
 * ownership of `args`. Call on the loop thread only. */
void st_command_pool_submit(st_command_pool_t *pool, st_http_req_t *req, st_cmd_fn cmd,
                            st_named_cmd_fn named, const st_principal_t *who, const char *id,
                            const char *name, json_t *args, const st_command_then_t *then);

/* Runs the commands `cmd` queued together as groups: a worker takes every queued
 * `cmd` job (up to `max`, at most ST_CMD_GROUP_MAX) and hands them to `group` in one
 * transaction; each job runs alone with `cmd` if the group fails. At most `lanes`
 * groups run at once: while they commit, later `cmd` jobs queue and form the next
 * groups, the way PostgreSQL's group commit shares a WAL flush. `max` 1 turns grouping
 * off. `kind` labels the metrics strand_api_command_groups_total and
 * strand_api_grouped_commands_total. Call before the first submit. */
void st_command_pool_group(st_command_pool_t *pool, const char *kind, st_cmd_fn cmd,
                           st_cmd_group_fn group, int max, int lanes);

/* Lets the workers finish every queued command, joins them, answers what is left and
 * frees the pool. NULL is a no-op. */
void st_command_pool_free(st_command_pool_t *pool);

#endif
