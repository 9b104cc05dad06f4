/*
 * harness.h - integration-test helpers: start and stop the real service binaries
 * against the stack that scripts/test.sh runs, talk HTTP to them, query PostgreSQL.
 *
 * Reads STRAND_PG_DSN and STRAND_KAFKA_BROKERS (required: the test fails with a
 * clear message without them), STRAND_TEST_BIN_DIR (where the binaries are) and
 * STRAND_TEST_PORT_BASE (first HTTP port, default 18080). Every test program uses a
 * topic prefix of its own so that runs never see each other's messages. Services
 * started here are killed at exit even when a test fails.
 *
 * Every service exit the harness sees is judged (it_stop(), it_stop_all(), it_kill9(),
 * it_start() of a service whose process ended by itself): clean is exit status 0 or
 * death by the signal the test ended it with on purpose (it_kill9(), it_stop() with
 * SIGKILL); a non-zero status, any other signal (ASan aborts) or no exit within the
 * stop timeout is printed with the tail of the service's log and fails the program in
 * it_run_suite(), which also fails it on a sanitizer report (ASan, LeakSanitizer,
 * UBSan) in this run's part of any <log dir>/<test>-*.log.
 */
#ifndef STRAND_IT_HARNESS_H
#define STRAND_IT_HARNESS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { IT_API, IT_EXECUTOR, IT_SCHEDULER, IT_MONITOR, IT_NSERVICES } it_service_t;

/* Reads the environment; returns 0 and prints why if it is incomplete. */
int it_init(const char *test_name);

/* The topic prefix this test's services use, and the build directory. Borrowed. */
const char *it_topic_prefix(void);
const char *it_bin_dir(void);
/* Runs the built strandctl against this test's API (STRAND_API_URL) with `args` (shell
 * words) and bearer `token` (NULL: none); returns its exit status (-1 if it did not
 * run) and, when `out` is not NULL, its stdout and stderr in *out (caller frees). */
int it_strandctl(const char *token, const char *args, char **out);

/* HTTP port of a service. */
int it_port(it_service_t svc);

/* Starts a service binary with the test's environment; its stderr goes to
 * <log dir>/<test>-<service>.log. Returns the pid, or -1. */
pid_t it_start(it_service_t svc);

/* Starts all four services and waits until each /readyz answers 200 (up to
 * `timeout_s`). Returns 1 if all are ready. */
int it_start_all(int timeout_s);

/* Starts another replica of a service (replica >= 1) on its own HTTP port; returns
 * its pid or -1. it_stop_all() stops replicas too. */
pid_t it_start_replica(it_service_t svc, int replica);

/* SIGKILLs a pid started by the harness and reaps it. Its death by that SIGKILL is
 * clean; one that had already ended by itself is judged like any exit. */
void it_kill9(pid_t pid);

/* Runs scripts/stack.sh with `args` (e.g. "restart postgres") against the test's
 * stack; returns its exit status. */
int it_stack(const char *args);

/* Sends `sig` to a running service and waits up to `timeout_s` for it to exit.
 * Returns its exit status, 128+signal if it died of a signal, or -1 on timeout
 * (then it is killed). A status other than 0, a death by another signal than `sig`,
 * or the timeout fails the program (see the top of this file). */
int it_stop(it_service_t svc, int sig, int timeout_s);

/* Stops every running service and replica with SIGTERM (30 s each); returns 1 if all
 * exited with status 0. */
int it_stop_all(void);

/* One HTTP request to a service. Returns the status (-1 if unreachable) and the
 * parsed JSON body in *out if `out` is not NULL (caller decrefs; NULL if not JSON). */
long it_http(it_service_t svc, const char *method, const char *path, const char *body,
             json_t **out);

/* One HTTP request with a bearer `token` (NULL: none). Returns the status (-1 if
 * unreachable); *raw gets the body text or NULL (caller frees); `ctype`, if not NULL,
 * the Content-Type. Times out after 20 s. */
long it_http_request(it_service_t svc, const char *token, const char *method, const char *path,
                     const char *body, char **raw, char *ctype, size_t ctype_len);

/* GET returning the raw body in *text (caller frees). Returns the status. */
long it_http_text(it_service_t svc, const char *path, char **text);

/* Polls `sql` every 50 ms until it returns at least `want` or `timeout_s` pass;
 * returns the last value. */
long long it_wait_number(const char *sql, long long want, int timeout_s);

/* Polls GET /v1/instances/{id} until its status is `want` (NULL: any ended status)
 * and returns the instance (caller decrefs). Returns NULL at the timeout, or at once
 * (after printing the instance) when it ended with another status. */
json_t *it_wait_instance(const char *id, const char *want, int timeout_s);

/* One test of an integration suite. */
typedef struct {
    const char *name;
    void (*fn)(void);
} it_case_t;

/* Runs the cases in order as one CUnit suite, then stops every service and scans the
 * program's logs for sanitizer reports. Returns the process exit status: 0 only if
 * every case ran and passed, every service exit was clean and no log holds a report. */
int it_run_suite(const char *suite, const it_case_t *cases, int ncases);

/* Runs SQL on the test database and returns the first column of the first row as a
 * number (-1 on error). */
long long it_sql_number(const char *sql);

/* Puts raw bytes on the test's ingress topic the way an application producer would
 * (an outbox row the services' relay publishes). Returns 1 on success. */
int it_produce_ingress(const void *bytes, size_t len);

/* One HTTP request with a bearer `token` (NULL: none). Returns the status (-1 if
 * unreachable) and the parsed JSON body in *out if `out` is not NULL (caller
 * decrefs; NULL if not JSON). it_http() is this without a token. */
long it_req(it_service_t svc, const char *token, const char *method, const char *path,
            const char *body, json_t **out);

/* POST /v1/instances {"definition": definition, "input": input} (input NULL: {}) with
 * `token`; asserts 201. Returns the new instance id (caller frees), NULL unless 201. */
char *it_start_instance(const char *token, const char *definition, const char *input);

/* POST /v1/definitions with the JSON document `doc` and `token`; asserts 201 and
 * prints the answer when it is not 201. */
void it_import(const char *token, const char *doc);

/* Polls GET /v1/tasks?instance_id=...&status=open (with `token`) until the instance
 * has an open task; returns the first one's id (caller frees) or NULL after
 * `timeout_s`. */
char *it_wait_open_task(const char *token, const char *instance_id, int timeout_s);

/* Runs `sql` on the test database; returns the first column of the first row as a new
 * string (caller frees), or NULL on error, no row or SQL NULL. */
char *it_sql_text(const char *sql);

/* Polls `sql` every 50 ms until it_sql_text() answers a value; returns it (caller
 * frees) or NULL after `timeout_s`. */
char *it_wait_text(const char *sql, int timeout_s);

/* The value of one exact series (`name{labels}`) on a service's /metrics, or `absent`
 * when the series (or the service) is not there. */
double it_metric(it_service_t svc, const char *series, double absent);

/* Polls GET `path` on a service every 100 ms until it answers `want` (e.g. /readyz and
 * 200, or 503 while a dependency is down). Returns 1 when it did within `timeout_s`. */
int it_wait_http(it_service_t svc, const char *path, long want, int timeout_s);

/* Packs an IngressCommand (envelope version 1) of `type` (a Strand__V1__CommandType)
 * with `token` and `target` (each NULL: not set) and `args` (JSON text) into `buf`
 * (`cap` bytes, the caller's). Returns the packed length, or 0 if it does not fit. */
size_t it_pack_command(int type, const char *token, const char *target, const char *args,
                       uint8_t *buf, size_t cap);

/* it_pack_command() put on the ingress topic with it_produce_ingress(), as an
 * application's producer would. Returns 1 on success. */
int it_produce_command(int type, const char *token, const char *target, const char *args);

/* Runs one SQL statement on the test database; returns 1 if it succeeded (a command or
 * a query), else prints the error and returns 0. */
int it_sql_exec(const char *sql);

/* Connects to the test database (stopping the test if it cannot) and runs `first`, a
 * command without rows (asserted to succeed), e.g. "LISTEN strand_wake". Caller
 * PQfinish()es. */
PGconn *it_pg_session(const char *first);

/* Connects to the test database (stopping the test if it cannot) and opens a
 * transaction, for the *_tx functions a Strand writer calls. End it with
 * it_pg_commit(), which also closes the connection. */
PGconn *it_pg_begin(void);

/* Commits the transaction it_pg_begin() opened and closes `conn`. */
void it_pg_commit(PGconn *conn);

/* Starts the API and the executor only (the API reads its tokens from `auth_file`, which
 * is removed once the API is up; NULL: no STRAND_AUTH_FILE change) and waits up to 60 s
 * for the API's /readyz to answer 200. Stops the test (fatal assert) if either does
 * not start or the API is not ready. */
void it_start_api_executor(const char *auth_file);

/* ---- forcing an order, and "nothing else happened" ---------------------------------- */

/* A row lock the test holds in a transaction of its own: whatever needs the row meanwhile
 * (an API check, a wake-up) queues behind it, and PostgreSQL grants a row lock to its
 * waiters in the order they queued, so releasing it once the first is seen waiting
 * decides which runs first. */
typedef struct {
    PGconn *conn;
    int pid;          /* the lock's backend, for it_wait_queued() */
} it_row_lock_t;

/* Locks the row of strand.`table` whose `key` is `id` (FOR UPDATE); returns 1 if it
 * holds it (asserted). Release with it_unlock_row(). */
int it_lock_row(it_row_lock_t *l, const char *table, const char *key, const char *id);

/* Commits the lock's transaction: the row is free again. */
void it_unlock_row(it_row_lock_t *l);

/* Waits until `n` sessions of application `app` ("strand-api", "strand-executor") queue
 * behind the lock, directly or behind another waiter; returns 1 when they do within 30 s
 * (asserted). */
int it_wait_queued(const it_row_lock_t *l, const char *app, int n);

/* Puts a marker behind every signal already in the outbox for instance `id`: an EXTERNAL
 * signal named "marker" with expected_version 0 (so the executor drops it as stale,
 * whatever the instance's state, and changes nothing), keyed by the instance like its
 * signals, so the relay publishes it after them to their partition and the executor works
 * it after them on the same worker. Returns 1 once the executor recorded it in
 * processed_signals (within 30 s): then every signal sent to `id` before it has been
 * worked. Its signal id starts with "it-marker-". */
int it_marker_worked(const char *id);

#endif
