/*
 * api.h - the API service's commands and HTTP handlers.
 *
 * A command (st_cmd_*) is one validated, transactional operation that writes state and
 * outbox rows in one PostgreSQL transaction; it is shared by the HTTP routes and the
 * Kafka ingress topic, so both paths validate and behave identically. Commands answer
 * with an st_answer_t: an HTTP-style status and a JSON body (a problem for >= 400).
 * Read-only routes (get, list) are plain HTTP handlers. Nothing here runs a step.
 */
#ifndef STRAND_API_H
#define STRAND_API_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/auth.h"
#include "strand/config.h"
#include "strand/err.h"
#include "strand/http.h"
#include "strand/signal.h"
#include "strand/service.h"

#include "answer.h"

typedef struct st_api st_api_t;

/* ---- commands (api_commands: instances.c, signals.c, tasks.c) ---------------------- */

/* Every command: `who` is the authenticated caller, `id` the path id (instance or
 * task; NULL where none), `args` the request object (borrowed). Commands authorise
 * `who` themselves (403 problem). Expects no transaction open on `conn`. */
typedef void (*st_cmd_fn)(PGconn *conn, const st_principal_t *who, const char *id,
                          const json_t *args, st_answer_t *out);

void st_cmd_start(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);

/* The most commands one group runs in one transaction (st_cmd_group_fn). */
#define ST_CMD_GROUP_MAX 64

/* One command of a group (a start: its route authorised the caller, so the request is
 * all it needs). */
typedef struct {
    const json_t *args;   /* borrowed */
    st_answer_t *out;     /* answered by the group function, unless it fails */
} st_cmd_item_t;

/* What became of a group (st_cmd_group_fn). */
typedef enum {
    ST_GROUP_COMMITTED,   /* committed; every item is answered */
    ST_GROUP_RUN_ALONE,   /* rolled back (a statement failed, or the server refused the
                           * COMMIT): nothing is answered, and the caller runs each item
                           * alone with the kind's st_cmd_fn, so that one bad command
                           * never fails the others */
    ST_GROUP_UNKNOWN,     /* the COMMIT got no answer (connection lost), so it may have
                           * committed: every item that ran SQL answers the error, and
                           * none may run again */
} st_group_outcome_t;

/* Runs `n` (1 to ST_CMD_GROUP_MAX) commands of one kind in one transaction on `conn`
 * and commits once, each answering its own item. */
typedef st_group_outcome_t (*st_cmd_group_fn)(PGconn *conn, st_cmd_item_t *items, int n);

/* st_cmd_start for a group of starts: one transaction, one COMMIT and one look-up per
 * distinct definition for all of them (instances.c). */
st_group_outcome_t st_cmd_start_group(PGconn *conn, st_cmd_item_t *items, int n);
void st_cmd_signal(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_signal_correlated(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_cancel(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_terminate(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_task_assign(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_task_release(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_task_complete(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);

void st_cmd_trigger(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                    st_answer_t *out);
void st_cmd_ack(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                st_answer_t *out);
/* Bulk operations (batches.c): POST /v1/batches creates a job over the instances its
 * filter selects (frozen at creation); POST /v1/batches/{id}/cancel stops it. */
void st_cmd_batch_create(PGconn *conn, const st_principal_t *who, const char *id,
                         const json_t *args, st_answer_t *out);
void st_cmd_batch_cancel(PGconn *conn, const st_principal_t *who, const char *id,
                         const json_t *args, st_answer_t *out);
/* The batches' bounds from the service's configuration: STRAND_BATCH_MAX_PAYLOAD_BYTES,
 * STRAND_BATCH_MAX_RUNNING, STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL. Called once by
 * main.c before the routes serve. */
void st_api_batches_configure(const st_config_t *cfg);
/* Admin only: purges instances ended before the cutoff and resolved dead letters
 * (retention.c). */
void st_cmd_retention_run(PGconn *conn, const st_principal_t *who, const char *id,
                          const json_t *args, st_answer_t *out);

/* ---- the service and its routes ------------------------------------------------------------------ */

#define ST_API_MAX_COMMAND_ROUTES 40

/* A POST route bound to a command. */
typedef struct {
    st_api_t *api;
    st_cmd_fn cmd;
} st_command_route_t;

struct st_api {
    st_service_t *svc;
    PGconn *conn;      /* the HTTP thread's connection; owned; reconnected on demand */
    st_auth_t *auth;   /* owned */
    st_principal_t current;   /* the caller of the request being handled (HTTP thread) */
    st_command_route_t routes[ST_API_MAX_COMMAND_ROUTES];
    struct st_waiters *waiters;   /* long polls (wait_loop.c) */
    struct st_command_pool *pool; /* write commands off the loop (command_pool.c) */
    int nroutes;
};

/* Returns the HTTP thread's live connection, reconnecting if needed; on failure sets a
 * 503 answer and returns NULL. */
static inline PGconn *st_api_conn(st_api_t *api, st_answer_t *out)
{
    return st_api_connect(&api->conn, api->svc->cfg.pg_dsn, out);
}
/* For read-only HTTP handlers: st_api_conn() that answers the 503 itself. */
static inline PGconn *st_api_conn_or_reply(st_api_t *api, st_http_req_t *req)
{
    st_answer_t answer = {0};
    PGconn *conn = st_api_conn(api, &answer);
    if (conn == NULL)
        st_api_reply(req, &answer);
    return conn;
}
/* Registers a POST route that runs `cmd` with the JSON body and the {id} parameter, on
 * the command pool (command_pool.c). */
void st_api_route_command(st_api_t *api, const char *pattern, st_cmd_fn cmd);

/* Registers every route (routes.c): the one caller of the *_register functions below. */
void st_api_register_routes(st_api_t *api);

void st_api_definitions_register(st_api_t *api);
void st_api_instances_register(st_api_t *api);
void st_api_signals_register(st_api_t *api);
void st_api_dead_letters_register(st_api_t *api);
void st_api_tasks_register(st_api_t *api);
void st_api_acks_register(st_api_t *api);
void st_api_triggers_register(st_api_t *api);
void st_api_openapi_register(st_api_t *api);
void st_api_retention_register(st_api_t *api);
void st_api_batches_register(st_api_t *api);
/* An operator's verb on one instance (repair.c, pause.c), after the caller checked it
 * under the row lock: enqueues control signal `sig` (its payload names the "actor";
 * expected_version = `current`) and writes the audit row "requested" for `action`
 * (before: `status` and `current`; detail: the payload without the actor, with the
 * signal id and expected_version), in the caller's open transaction; signals.c. */
st_err_t st_api_enqueue_verb_tx(PGconn *conn, st_signal_t *sig, const char *action,
                                const char *status, long long current, st_errbuf_t *eb);
/* The repair verbs (repair.c): retry, fail, variables, fire-timer, skip-wait, and
 * PUT /v1/dead-letters/{id}/payload. Each command takes {expected_version, ...}. */
void st_api_repair_register(st_api_t *api);
void st_cmd_retry(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                  st_answer_t *out);
void st_cmd_fail(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                 st_answer_t *out);
void st_cmd_patch_variables(PGconn *conn, const st_principal_t *who, const char *id,
                            const json_t *args, st_answer_t *out);
void st_cmd_fire_timer(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                       st_answer_t *out);
void st_cmd_skip_wait(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                      st_answer_t *out);
/* The web console (console.c): /ui/ and the reads it needs (whoami, overview,
 * instance counts, an instance's family). */
void st_api_console_register(st_api_t *api);
/* A process's RPCs (rpc.c): POST /v1/instances/{id}/rpc/{name}. */
void st_api_rpc_register(st_api_t *api);
void st_cmd_rpc(PGconn *conn, const st_principal_t *who, const char *id, const char *name,
                const json_t *args, st_answer_t *out);

/* ---- pause ---- pause, resume and rewind of an instance; pause/resume of a definition
 * version (pause.c). {expected_version, reason?, to_version (rewind)} */
void st_cmd_pause(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                  st_answer_t *out);
void st_cmd_resume(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_cmd_rewind(PGconn *conn, const st_principal_t *who, const char *id, const json_t *args,
                   st_answer_t *out);
void st_api_pause_register(st_api_t *api);

/* ---- instances.c, for the long polls of wait_loop.c ------------------------------ */

/* Loads the instance's current view into `out` (200, or the error problem; the
 * caller closes or replies with it) and returns 1 when a long poll should answer
 * with it: the instance ended, its state_version passed `after_version` (< 0:
 * always), or the view could not be loaded. One query; used by GET and by hints. */
int st_api_instance_view(st_api_t *api, const char *instance_id, long long after_version,
                         st_answer_t *out);

/* True for a time filter this API accepts: an RFC 3339 / ISO 8601 date or timestamp
 * that exists ("2026-11-23", "2026-11-23T10:00:00Z"); instances.c. */
int st_api_valid_time(const char *text);
/* ---- reads.c: notices, task events, the audit log, stuck instances ------------------ */

/* The GET routes of reads.c; registered before st_api_instances_register() (the
 * router matches in order, and /v1/instances/stuck is not an instance id). */
void st_api_reads_register(st_api_t *api);
/* The settings reads.c and the retention run use, from the service's configuration:
 * STRAND_NOTICE_RETENTION_S and STRAND_STUCK_GRACE_S. Called once by main.c. */
extern int st_api_notice_retention_s;
extern int st_api_stuck_grace_s;
void st_api_reads_configure(const st_config_t *cfg);
/* The runtime view's "stuck" field for `instance_id`: {reason, since}, or JSON null
 * when it is not stuck (or on error: *err says). Caller owns the reference. */
json_t *st_api_stuck_json(PGconn *conn, const char *instance_id, st_err_t *err,
                          st_errbuf_t *eb);

/* ---- the write rate limit (permissions.c; docs/security.md, "Amplification") ------- */

/* Reads STRAND_API_WRITE_RATE, STRAND_API_WRITE_BURST and
 * STRAND_API_WRITE_AUDIT_WINDOW_S; called once by main.c before any request or ingress
 * command. With the rate 0 (the default) every write passes. */
void st_api_write_limit_configure(const st_config_t *cfg);
/* True when a write rate is set. */
int st_api_write_limit_enabled(void);
/* Takes one write of `principal`'s bucket (one per API process): returns 1 when it may
 * go on; else sets 429 rate_limited in `out` (with `retry_after_s`, for the
 * Retry-After header) and returns 0. `via_ingress`: a Kafka ingress command (0: HTTP).
 * Any thread. The HTTP guard (st_api_authorize) calls it for every POST, PUT, PATCH
 * and DELETE; the ingress for every command. */
int st_api_write_limit_take(const char *principal, int via_ingress, st_answer_t *out);
/* Writes one audit row "rate_limited" (outcome "rejected", detail {refused, http,
 * ingress, window_from, window_s, rate, burst}) per principal whose refusal window
 * ended (`all`: every open window, at stop), on the loop thread's connection (a row
 * that cannot be written is logged as lost), and forgets idle principals. main.c calls
 * it every second on the loop thread; it touches PostgreSQL only when a window ended. */
void st_api_write_limit_flush(st_api_t *api, int all);

/* Compares the router with docs/openapi.json; prints mismatches; 0 when they agree. */
int st_api_check_openapi(st_api_t *api);

#endif
