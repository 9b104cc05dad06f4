/*
 * test_process.c - processes (the XDB model, docs/processes.md) end to end on the real
 * servers, with the example worker a newcomer runs (examples/signup/signup_worker.py)
 * and the example's own users table (examples/signup/schema.sql):
 *   - the sign-up example: submit, then verify by the verify RPC; and by a 1 s
 *     reminder timer followed by an email-link queue message (deduplicated by its id);
 *   - a forced failure of the global attribute write (the users table's CHECK) that
 *     leaves neither the user row nor the process state changed;
 *   - any_of and all_of waits, parallel next states with dead ends;
 *   - every ID reuse policy;
 *   - a worker that fails twice and is retried with backoff on durable timers;
 *   - bad input: an undeclared rpc, a process whose globals lack their table.
 */
#include <libpq-fe.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/proto/strand.pb-c.h"

static char sfx[40];
static char signup_name[80];
static int worker_port;
static pid_t worker_pid = -1;

static char *read_file(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", getenv("STRAND_TEST_SRC_DIR") ? getenv("STRAND_TEST_SRC_DIR") : ".", rel);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = calloc(1, (size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* The first column of the first row as text ("" when NULL, "<none>" without rows). */
static char *sql_text(const char *sql)
{
    PGconn *conn = PQconnectdb(getenv("STRAND_PG_DSN"));
    PGresult *res = PQexec(conn, sql);
    char *out = strdup(PQresultStatus(res) != PGRES_TUPLES_OK ? "<error>"
                       : PQntuples(res) == 0                 ? "<none>"
                                                             : PQgetvalue(res, 0, 0));
    PQclear(res);
    PQfinish(conn);
    return out;
}

static int sql_text_is(const char *sql, const char *want)
{
    char *got = sql_text(sql);
    int ok = strcmp(got, want) == 0;
    if (!ok)
        fprintf(stderr, "%s\n  -> '%s', want '%s'\n", sql, got, want);
    free(got);
    return ok;
}

/* Replaces every occurrence of `from` in `s` (owned) with `to`. */
static char *replace_all(char *s, const char *from, const char *to)
{
    size_t n = 0, fl = strlen(from), tl = strlen(to);
    for (const char *p = strstr(s, from); p; p = strstr(p + fl, from))
        n++;
    char *out = calloc(1, strlen(s) + n * (tl + 1) + 1), *w = out;
    const char *r = s;
    for (const char *p = strstr(r, from); p; p = strstr(r, from)) {
        memcpy(w, r, (size_t)(p - r));
        w += p - r;
        memcpy(w, to, tl);
        w += tl;
        r = p + fl;
    }
    strcpy(w, r);
    free(s);
    return out;
}

static long import_doc(const char *doc, json_t **answer)
{
    long status = it_http(IT_API, "POST", "/v1/definitions", doc, answer);
    if (status != 201 && answer && *answer) {
        char *text = json_dumps(*answer, JSON_COMPACT);
        fprintf(stderr, "import answered %ld: %s\n", status, text);
        free(text);
    }
    return status;
}

/* Starts `definition` with a process id; returns the instance id (caller frees) or
 * NULL, and the HTTP status in *status. */
static char *start_process(const char *definition, const char *ref, const char *input, long *status)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"business_ref\":\"%s\",\"input\":%s}", definition, ref,
             input);
    json_t *answer = NULL;
    *status = it_http(IT_API, "POST", "/v1/instances", body, &answer);
    if (*status != 201 && *status != 409) {
        char *text = json_dumps(answer, JSON_COMPACT);
        fprintf(stderr, "start answered %ld: %s\n", *status, text ? text : "");
        free(text);
    }
    const char *id = json_string_value(json_object_get(answer, "id"));
    char *copy = *status == 201 && id ? strdup(id) : NULL;
    json_decref(answer);
    return copy;
}

static long post(const char *path, const char *body, json_t **answer)
{
    json_t *got = NULL;
    long status = it_http(IT_API, "POST", path, body, &got);
    if (status >= 400) {
        char *text = json_dumps(got, JSON_COMPACT);
        fprintf(stderr, "POST %s answered %ld: %s\n", path, status, text ? text : "");
        free(text);
    }
    if (answer)
        *answer = got;
    else
        json_decref(got);
    return status;
}

static long signal_queue(const char *id, const char *queue, const char *payload, const char *message_id)
{
    char path[160], body[512];
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    snprintf(body, sizeof body, "{\"name\":\"%s\",\"payload\":%s%s%s%s}", queue, payload,
             message_id ? ",\"request_id\":\"" : "", message_id ? message_id : "", message_id ? "\"" : "");
    return post(path, body, NULL);
}

/* Waits until the history of `id` holds at least `n` entries of `kind`. */
static long long wait_history(const char *id, const char *kind, long long n, int timeout_s)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s' AND kind = '%s'", id,
             kind);
    return it_wait_number(sql, n, timeout_s);
}

/* Waits until the process waits in the `verify` state with its timer armed: the
 * waitUntil answer is applied. (Entering `verify` is not enough: the waitUntil call's
 * answer is still to come as its own wake-up, and an RPC running beside that wake-up
 * is rightly refused with 409 state_changed, as seen in a CI run.) */
static int wait_verifying(const char *id)
{
    return wait_history(id, "wait_until_answered", 1, 30) >= 1;
}

static void test_setup(void)
{
    snprintf(sfx, sizeof sfx, "%ld_%d", (long)time(NULL), (int)getpid());
    snprintf(signup_name, sizeof signup_name, "signup_%s", sfx);
    /* A dead letter after two failed attempts keeps the atomicity case short. */
    setenv("STRAND_MAX_ATTEMPTS", "2", 1);
    CU_ASSERT_FATAL(it_start_all(90));
    char *schema = read_file("examples/signup/schema.sql");
    CU_ASSERT_PTR_NOT_NULL_FATAL(schema);
    CU_ASSERT_FATAL(it_sql_exec(schema));
    free(schema);

    worker_port = it_port(IT_API) + 30;
    char port[16], script[1024];
    snprintf(port, sizeof port, "%d", worker_port);
    snprintf(script, sizeof script, "%s/examples/signup/signup_worker.py",
             getenv("STRAND_TEST_SRC_DIR") ? getenv("STRAND_TEST_SRC_DIR") : ".");
    worker_pid = fork();
    if (worker_pid == 0) {
        char log[1024];
        snprintf(log, sizeof log, "%s/test_process-worker.log",
                 getenv("STRAND_TEST_LOG_DIR") ? getenv("STRAND_TEST_LOG_DIR") : "/tmp");
        if (freopen(log, "w", stdout) == NULL || freopen(log, "a", stderr) == NULL)
            _exit(126);
        execlp("python3", "python3", script, "--port", port, (char *)NULL);
        _exit(127);
    }
    CU_ASSERT_FATAL(worker_pid > 0);

    /* The example definition, named for this run and pointed at this run's worker. */
    char *doc = read_file("examples/signup/signup.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    char url[64], name[100];
    snprintf(url, sizeof url, "127.0.0.1:%d", worker_port);
    snprintf(name, sizeof name, "\"name\": \"%s\"", signup_name);
    doc = replace_all(doc, "127.0.0.1:8088", url);
    doc = replace_all(doc, "\"name\": \"signup\"", name);
    CU_ASSERT_EQUAL(import_doc(doc, NULL), 201);
    free(doc);
    /* It says so once it owns its port; a stale worker there makes it exit instead (and
     * would answer in its place). */
    char log[1024];
    snprintf(log, sizeof log, "%s/test_process-worker.log",
             getenv("STRAND_TEST_LOG_DIR") ? getenv("STRAND_TEST_LOG_DIR") : "/tmp");
    int listening = 0, exited = 0;
    for (int i = 0; i < 300 && !listening && !exited; i++) {
        char *text = NULL;
        FILE *f = fopen(log, "r");
        if (f != NULL) {
            text = calloc(1, 4097);
            if (text != NULL && fread(text, 1, 4096, f) > 0)
                listening = strstr(text, "signup worker listening on") != NULL;
            fclose(f);
        }
        free(text);
        exited = waitpid(worker_pid, NULL, WNOHANG) != 0;
        if (!listening && !exited)
            usleep(50 * 1000);
    }
    CU_ASSERT_TRUE_FATAL(listening);
    CU_ASSERT_EQUAL_FATAL(waitpid(worker_pid, NULL, WNOHANG), 0);   /* and still running */
}

/* submit -> verify, woken by the verify RPC: the RPC's attribute updates land in the
 * user's row and its queue publish completes the process. */
static void test_signup_verified_by_rpc(void)
{
    char ref[80], sql[300], path[200];
    snprintf(ref, sizeof ref, "alice_%s", sfx);
    long status;
    char *id = start_process(signup_name, ref, "{\"email\":\"alice@example.com\"}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    CU_ASSERT_FATAL(wait_verifying(id));
    snprintf(sql, sizeof sql, "SELECT status || '/' || email FROM app.users WHERE id = '%s'", ref);
    CU_ASSERT_TRUE(sql_text_is(sql, "waiting/alice@example.com"));

    json_t *answer = NULL;
    snprintf(path, sizeof path, "/v1/instances/%s/rpc/verify", id);
    CU_ASSERT_EQUAL(post(path, "{\"input\":{\"source\":\"rpc\"},\"request_id\":\"click-1\"}", &answer), 200);
    CU_ASSERT_STRING_EQUAL_FATAL(json_string_value(json_object_get(answer, "output")) ? json_string_value(json_object_get(answer, "output")) : "", "done");
    json_decref(answer);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(done, "output"), "verified_by")), "rpc");
    json_decref(done);
    snprintf(sql, sizeof sql, "SELECT status || '/' || source FROM app.users WHERE id = '%s'", ref);
    CU_ASSERT_TRUE(sql_text_is(sql, "verified/rpc"));

    /* the timeline: started, both executions, the rpc, the queue message */
    CU_ASSERT_EQUAL(wait_history(id, "process_started", 1, 1), 1);
    CU_ASSERT_EQUAL(wait_history(id, "state_executed", 2, 5), 2);
    CU_ASSERT_EQUAL(wait_history(id, "rpc", 1, 1), 1);
    CU_ASSERT_EQUAL(wait_history(id, "command_result", 1, 1), 1);
    CU_ASSERT_EQUAL(wait_history(id, "wait_until_answered", 1, 1), 1);   /* the worker chose the commands */
    snprintf(path, sizeof path, "/v1/instances/%s/history", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, NULL), 200);

    /* a repeated request_id is answered as a duplicate and changes nothing */
    snprintf(path, sizeof path, "/v1/instances/%s/rpc/verify", id);
    answer = NULL;
    CU_ASSERT_EQUAL(post(path, "{\"input\":{\"source\":\"rpc\"},\"request_id\":\"click-1\"}", &answer), 200);
    CU_ASSERT_TRUE(json_is_true(json_object_get(answer, "duplicate")));
    json_decref(answer);
    CU_ASSERT_EQUAL(wait_history(id, "rpc", 1, 1), 1);
    /* an ended process takes no rpc; an undeclared rpc is a 404 */
    snprintf(path, sizeof path, "/v1/instances/%s/rpc/verify", id);
    CU_ASSERT_EQUAL(post(path, "{}", NULL), 409);
    snprintf(path, sizeof path, "/v1/instances/%s/rpc/nope", id);
    CU_ASSERT_EQUAL(post(path, "{}", NULL), 404);
    CU_ASSERT_EQUAL(wait_history(id, "rpc_failed", 2, 1), 2);   /* refused calls are in the timeline */
    free(id);
}

/* The 24 h reminder made 1 s: a reminder runs, then the email link's queue message
 * (sent twice with one message id) completes the process. */
static void test_signup_reminder_then_link(void)
{
    char ref[80], sql[300];
    snprintf(ref, sizeof ref, "bob_%s", sfx);
    long status;
    char *id = start_process(signup_name, ref, "{\"email\":\"bob@example.com\",\"reminder_after\":\"1s\"}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.history WHERE instance_id = '%s' AND kind = 'command_result'"
             " AND detail->>'command' = 'timer'", id);
    CU_ASSERT_FATAL(it_wait_number(sql, 1, 30) >= 1);
    char message_id[100];
    snprintf(message_id, sizeof message_id, "link-%s", ref);
    CU_ASSERT_EQUAL(signal_queue(id, "verified", "{\"source\":\"email_link\"}", message_id), 202);
    CU_ASSERT_EQUAL(signal_queue(id, "verified", "{\"source\":\"email_link\"}", message_id), 200);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    const json_t *out = json_object_get(done, "output");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "verified_by")), "email_link");
    CU_ASSERT_TRUE(json_integer_value(json_object_get(out, "reminders")) >= 1);
    json_decref(done);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.history WHERE instance_id = '%s' AND kind = 'command_result'"
             " AND detail->>'queue' = 'verified'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);   /* the duplicate message was not applied */
    snprintf(sql, sizeof sql, "SELECT status || '/' || source FROM app.users WHERE id = '%s'", ref);
    CU_ASSERT_TRUE(sql_text_is(sql, "verified/email_link"));
    free(id);
}

/* True when `value` is an RFC 3339 timestamp in UTC as the API writes them
 * (2026-11-24T02:09:19.379597Z). */
static int is_rfc3339_utc(const json_t *value)
{
    regex_t re;
    if (!json_is_string(value) ||
        regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?Z$",
                REG_EXTENDED | REG_NOSUB) != 0)
        return 0;
    int ok = regexec(&re, json_string_value(value), 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* The worker's decision sets source = 'hacker', which the table's CHECK refuses: the
 * wake-up rolls back whole (decision, snapshot, outbox) and ends as a dead letter. */
static void test_attribute_write_failure_is_atomic(void)
{
    char ref[80], sql[400];
    snprintf(ref, sizeof ref, "mallory_%s", sfx);
    long status;
    char *id = start_process(signup_name, ref, "{\"email\":\"m@example.com\"}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    CU_ASSERT_FATAL(wait_verifying(id));
    CU_ASSERT_EQUAL(signal_queue(id, "verified", "{\"source\":\"hacker\"}", NULL), 202);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE instance_id = '%s'", id);
    CU_ASSERT_FATAL(it_wait_number(sql, 1, 60) >= 1);
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states WHERE instance_id = '%s'", id);
    long long version = it_sql_number(sql);
    /* Nothing after the dead letter either (a redelivery, a retry): a marker sent after
     * it has been worked, and the version has not moved. */
    CU_ASSERT_TRUE(it_marker_worked(id));
    CU_ASSERT_EQUAL(it_sql_number(sql), version);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT status || '/' || coalesce(source, '-') FROM app.users WHERE id = '%s'", ref);
    CU_ASSERT_TRUE(sql_text_is(sql, "waiting/-"));
    snprintf(sql, sizeof sql, "SELECT status FROM strand.instances WHERE id = '%s'", id);
    CU_ASSERT_TRUE(sql_text_is(sql, "waiting"));
    /* the decision is not in the timeline: only submit's execution is */
    CU_ASSERT_EQUAL(wait_history(id, "state_executed", 0, 1), 1);
    snprintf(sql, sizeof sql, "SELECT reason FROM strand.dead_letters WHERE instance_id = '%s' LIMIT 1", id);
    char *reason = sql_text(sql);
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "app.users"));
    free(reason);
    /* The failure is visible where an operator looks (issue 16: it looked cleanly
     * waiting): the runtime view carries last_error and its code... */
    char path[200];
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", id);
    json_t *view = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &view), 200);
    const json_t *last_error = json_object_get(view, "last_error");
    char *text = json_dumps(last_error, JSON_COMPACT | JSON_ENCODE_ANY);
    printf("\n  runtime view after the dead letter: last_error_code=%s last_error=%s\n",
           json_string_value(json_object_get(view, "last_error_code")) ?: "null", text ? text : "");
    free(text);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(view, "last_error_code")) ?: "", "wakeup_dead_lettered");
    CU_ASSERT_TRUE(json_is_object(last_error));
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(last_error, "message")) ?: "", "app.users"));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(last_error, "attempts")), 2);
    CU_ASSERT_TRUE(json_integer_value(json_object_get(last_error, "dead_letter_id")) > 0);
    CU_ASSERT_TRUE(is_rfc3339_utc(json_object_get(last_error, "at")));
    json_decref(view);
    /* ...until the instance recovers: the operator lifts the cause (the CHECK, for new
     * rows only) and replays the dead letter, which applies and clears it. */
    CU_ASSERT_FATAL(it_sql_exec("ALTER TABLE app.users DROP CONSTRAINT users_source_check"));
    snprintf(sql, sizeof sql, "SELECT id FROM strand.dead_letters WHERE instance_id = '%s' ORDER BY id DESC LIMIT 1", id);
    snprintf(path, sizeof path, "/v1/dead-letters/%lld/replay", it_sql_number(sql));
    CU_ASSERT_EQUAL(post(path, "{}", NULL), 200);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_FATAL(it_sql_exec("ALTER TABLE app.users ADD CONSTRAINT users_source_check"
                                " CHECK (source IN ('email_link', 'rpc', 'support')) NOT VALID"));
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &view), 200);
    CU_ASSERT_TRUE(json_is_null(json_object_get(view, "last_error")));
    CU_ASSERT_TRUE(json_is_null(json_object_get(view, "last_error_code")));
    json_decref(view);
    free(id);
}

/* An instance that fails says so in the runtime view too (last_error_code
 * instance_failed, last_error.error the instance's error). */
static void test_failed_instance_shows_last_error(void)
{
    char doc[400], name[80];
    snprintf(name, sizeof name, "failing_%s", sfx);
    snprintf(doc, sizeof doc, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"boom\",\"type\":\"fail\",\"error\":\"'boom'\"}]}", name);
    CU_ASSERT_EQUAL_FATAL(import_doc(doc, NULL), 201);
    long status;
    char *id = start_process(name, "fails", "{}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    json_t *failed = it_wait_instance(id, "failed", 30);
    CU_ASSERT_PTR_NOT_NULL(failed);
    json_decref(failed);
    char path[200];
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", id);
    json_t *view = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &view), 200);
    char *text = json_dumps(json_object_get(view, "last_error"), JSON_COMPACT | JSON_ENCODE_ANY);
    printf("\n  failed instance: last_error_code=%s last_error=%s\n",
           json_string_value(json_object_get(view, "last_error_code")) ?: "null", text ? text : "");
    free(text);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(view, "last_error_code")) ?: "", "instance_failed");
    CU_ASSERT_PTR_NOT_NULL(json_object_get(json_object_get(view, "last_error"), "error"));
    CU_ASSERT_TRUE(is_rfc3339_utc(json_object_get(json_object_get(view, "last_error"), "at")));
    json_decref(view);
    free(id);
}

/* Issue 16: message ids and RPC request ids are scoped per instance. The same id sent
 * to two processes is applied on both (it was answered 200 duplicate on the second
 * and dropped). */
static void test_ids_scoped_per_instance(void)
{
    char ref[4][80];
    char *id[4];
    long status;
    for (int i = 0; i < 4; i++) {
        snprintf(ref[i], sizeof ref[i], "scoped%d_%s", i, sfx);
        id[i] = start_process(signup_name, ref[i], "{\"email\":\"s@example.com\"}", &status);
        CU_ASSERT_EQUAL_FATAL(status, 201);
    }
    for (int i = 0; i < 4; i++)
        CU_ASSERT_FATAL(wait_verifying(id[i]));
    /* one message id, two instances: both 202 */
    long first = signal_queue(id[0], "verified", "{\"source\":\"email_link\"}", "msg-shared");
    long second = signal_queue(id[1], "verified", "{\"source\":\"email_link\"}", "msg-shared");
    long again = signal_queue(id[1], "verified", "{\"source\":\"email_link\"}", "msg-shared");
    printf("\n  message id on two instances: %ld, %ld; repeat on the second: %ld\n", first, second, again);
    CU_ASSERT_EQUAL(first, 202);
    CU_ASSERT_EQUAL(second, 202);
    CU_ASSERT_EQUAL(again, 200);   /* still deduplicated on one instance */
    /* one RPC request id, two instances: both calls applied */
    char path[200];
    json_t *answer[2] = {NULL, NULL};
    long rpc_status[2];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/v1/instances/%s/rpc/verify", id[2 + i]);
        rpc_status[i] = post(path, "{\"input\":{\"source\":\"rpc\"},\"request_id\":\"click-shared\"}", &answer[i]);
    }
    printf("  rpc request id on two instances: %ld duplicate=%d, %ld duplicate=%d\n", rpc_status[0],
           json_is_true(json_object_get(answer[0], "duplicate")), rpc_status[1],
           json_is_true(json_object_get(answer[1], "duplicate")));
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(rpc_status[i], 200);
        CU_ASSERT_FALSE(json_is_true(json_object_get(answer[i], "duplicate")));
        json_decref(answer[i]);
    }
    for (int i = 0; i < 4; i++) {
        json_t *done = it_wait_instance(id[i], "completed", 30);
        CU_ASSERT_PTR_NOT_NULL(done);
        json_decref(done);
        char sql[300];
        if (i < 2)   /* the message applied once on each */
            snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
                     " AND kind = 'command_result' AND detail->>'queue' = 'verified'", id[i]);
        else         /* the rpc applied once on each */
            snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
                     " AND kind = 'rpc'", id[i]);
        CU_ASSERT_EQUAL(it_sql_number(sql), 1);
        free(id[i]);
    }
}

static char *import_static(const char *name, const char *policy, const char *body)
{
    char doc[4096];
    snprintf(doc, sizeof doc, "{\"kind\":\"process\",\"name\":\"%s_%s\",\"version\":1%s%s%s,%s}", name, sfx,
             policy ? ",\"id_reuse_policy\":\"" : "", policy ? policy : "", policy ? "\"" : "", body);
    char *doc2 = replace_all(strdup(doc), "WORKER", "");
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", worker_port);
    doc2 = replace_all(doc2, "URL", url);
    CU_ASSERT_EQUAL(import_doc(doc2, NULL), 201);
    free(doc2);
    char full[120];
    snprintf(full, sizeof full, "%s_%s", name, sfx);
    return strdup(full);
}

/* any_of: the queue message beats a 60 s timer; all_of: both a queue message and a
 * 1 s timer are needed. The command results reach the output and the timeline. */
static void test_any_of_and_all_of(void)
{
    char *name = import_static(
        "waits", NULL,
        "\"queues\":[\"a\",\"b\"],\"start\":[\"one\"],\"states\":["
        "{\"id\":\"one\",\"wait_until\":{\"combine\":\"any_of\",\"commands\":[{\"type\":\"timer\",\"delay\":\"'60s'\"},"
        "{\"type\":\"queue\",\"name\":\"a\"}]},\"next\":[\"two\"]},"
        "{\"id\":\"two\",\"wait_until\":{\"combine\":\"all_of\",\"commands\":[{\"type\":\"queue\",\"name\":\"b\"},"
        "{\"type\":\"timer\",\"delay\":\"'1s'\"}]},\"next\":[\"done\"]},"
        "{\"id\":\"done\",\"complete\":{\"a\":\"state.a\",\"b\":\"state.b\",\"fired\":\"state.fired\"}}]");
    char ref[80];
    snprintf(ref, sizeof ref, "waits_%s", sfx);
    long status;
    char *id = start_process(name, ref, "{}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    CU_ASSERT_EQUAL(wait_history(id, "process_started", 1, 10), 1);
    CU_ASSERT_EQUAL(signal_queue(id, "a", "{\"n\":1}", NULL), 202);
    CU_ASSERT_EQUAL(wait_history(id, "command_result", 1, 10), 1);
    /* all_of: its 1 s timer has fired (a second result), and without b it still waits */
    CU_ASSERT_EQUAL(wait_history(id, "command_result", 2, 10), 2);
    json_t *inst = NULL;
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    it_http(IT_API, "GET", path, NULL, &inst);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(inst, "status")), "waiting");   /* all_of waits */
    json_decref(inst);
    CU_ASSERT_EQUAL(signal_queue(id, "b", "{\"n\":2}", NULL), 202);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    const json_t *out = json_object_get(done, "output");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(out, "a"), "n")), 1);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(out, "b"), "n")), 2);
    json_decref(done);
    /* a, then b and the timer (in either order) */
    CU_ASSERT_EQUAL(wait_history(id, "command_result", 3, 5), 3);
    free(id);
    free(name);
}

/* The worker decides two next states in parallel; one is a dead end (its thread
 * stops), the other waits for a queue and completes the process. */
static void test_parallel_next_states_and_dead_ends(void)
{
    char *name = import_static(
        "fan", NULL,
        "\"queues\":[\"go\"],\"start\":[\"fan\"],\"states\":["
        "{\"id\":\"fan\",\"execute\":{\"transport\":\"http\",\"url\":\"URL/demo/branch\"},\"next\":[\"x\",\"y\"]},"
        "{\"id\":\"x\",\"next\":[]},"
        "{\"id\":\"y\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"go\"}]},"
        "\"complete\":{\"go\":\"state.go\"}}]");
    char ref[80];
    snprintf(ref, sizeof ref, "fan_%s", sfx);
    long status;
    char *id = start_process(name, ref, "{\"branches\":[\"x\",\"y\"]}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.history WHERE instance_id = '%s' AND kind = 'state_executed'"
             " AND detail->'waiting_in' = '[\"y\"]'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);   /* x ended at once: only y lives */
    snprintf(sql, sizeof sql, "SELECT status FROM strand.instances WHERE id = '%s'", id);
    CU_ASSERT_TRUE(sql_text_is(sql, "waiting"));
    CU_ASSERT_EQUAL(signal_queue(id, "go", "{\"ok\":true}", NULL), 202);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(json_object_get(done, "output"), "go"), "ok")));
    json_decref(done);

    /* every thread a dead end: the process completes with no output */
    snprintf(ref, sizeof ref, "fan2_%s", sfx);
    id = (free(id), start_process(name, ref, "{\"branches\":[\"x\",\"x\"]}", &status));
    CU_ASSERT_EQUAL_FATAL(status, 201);
    done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    free(id);
    free(name);
}

/* An RPC's answer writes a local attribute into the snapshot's state (through the
 * engine, st_snapshot_with_locals): the other locals are kept, the state version moves
 * by one, and the process goes on from there. */
static void test_rpc_writes_local_attributes(void)
{
    char *name = import_static(
        "rpclocal", NULL,
        "\"attributes\":{\"local\":{\"n\":{\"default\":0},\"keep\":{\"default\":\"k\"}}},"
        "\"queues\":[\"q\"],\"rpcs\":[{\"name\":\"set\",\"url\":\"URL/demo/rpc\"}],"
        "\"start\":[\"main\"],\"states\":["
        "{\"id\":\"main\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"q\"}]},\"next\":[]}]");
    char ref[80], path[200], sql[400];
    snprintf(ref, sizeof ref, "rpclocal_%s", sfx);
    long status;
    char *id = start_process(name, ref, "{}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    CU_ASSERT_EQUAL(wait_history(id, "process_started", 1, 10), 1);
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states WHERE instance_id = '%s'", id);
    char *before = sql_text(sql);
    snprintf(path, sizeof path, "/v1/instances/%s/rpc/set", id);
    CU_ASSERT_EQUAL(post(path, "{\"input\":{\"attributes\":{\"n\":5}}}", NULL), 200);
    snprintf(sql, sizeof sql,
             "SELECT (snapshot->'state')::text || ' ' || state_version - %s"
             " FROM strand.runtime_states WHERE instance_id = '%s'", before, id);
    CU_ASSERT_TRUE(sql_text_is(sql, "{\"n\": 5, \"keep\": \"k\"} 1"));
    free(before);
    free(id);
    free(name);
}

/* An RPC starts a new thread in a state its declaration lists (threads); that thread's
 * execute completes the process while the main thread still waits. */
static void test_rpc_starts_a_thread(void)
{
    char *name = import_static(
        "rpcthread", NULL,
        "\"queues\":[\"q\"],\"rpcs\":[{\"name\":\"kick\",\"url\":\"URL/demo/rpc\",\"threads\":[\"side\"]}],"
        "\"start\":[\"main\"],\"states\":["
        "{\"id\":\"main\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"q\"}]},\"next\":[]},"
        "{\"id\":\"side\",\"execute\":{\"transport\":\"http\",\"url\":\"URL/demo/decide\"}}]");
    char ref[80], path[200];
    snprintf(ref, sizeof ref, "rpcthread_%s", sfx);
    long status;
    char *id = start_process(name, ref, "{\"decisions\":{\"side\":{\"complete\":{\"by\":\"side\"}}}}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    CU_ASSERT_EQUAL(wait_history(id, "process_started", 1, 10), 1);
    snprintf(path, sizeof path, "/v1/instances/%s/rpc/kick", id);
    CU_ASSERT_EQUAL(post(path, "{\"input\":{\"next\":[\"main\"]}}", NULL), 502);   /* not in threads */
    CU_ASSERT_EQUAL(post(path, "{\"input\":{\"next\":[\"side\"]}}", NULL), 200);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(done, "output"), "by")), "side");
    json_decref(done);
    free(id);
    free(name);
}

/* An RPC runs on an API worker thread: while one waits 3 s for its worker, a start and
 * a read of the same API are answered (they used to queue behind it on the loop). */
typedef struct {
    char path[200];
    long status;
    volatile int done;
} slow_rpc_t;

static void *post_slow_rpc(void *arg)
{
    slow_rpc_t *call = arg;
    call->status = it_http(IT_API, "POST", call->path, "{\"input\":{\"sleep_ms\":3000}}", NULL);
    __atomic_store_n(&call->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void test_rpc_does_not_stall_the_api(void)
{
    char *name = import_static(
        "slowrpc", NULL,
        "\"queues\":[\"q\"],\"rpcs\":[{\"name\":\"slow\",\"url\":\"URL/demo/slow_rpc\",\"timeout_ms\":10000}],"
        "\"start\":[\"main\"],\"states\":["
        "{\"id\":\"main\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"q\"}]},\"next\":[]}]");
    char ref[80];
    snprintf(ref, sizeof ref, "slowrpc_%s", sfx);
    long status;
    char *id = start_process(name, ref, "{}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    CU_ASSERT_EQUAL(wait_history(id, "process_started", 1, 10), 1);
    slow_rpc_t call = {.status = 0};
    snprintf(call.path, sizeof call.path, "/v1/instances/%s/rpc/slow", id);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, post_slow_rpc, &call), 0);
    usleep(300 * 1000);   /* the RPC is with the worker now */
    char ref2[96];
    snprintf(ref2, sizeof ref2, "slowrpc2_%s", sfx);
    char *other = start_process(name, ref2, "{}", &status);
    CU_ASSERT_EQUAL(status, 201);
    char path[200];
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, NULL), 200);
    CU_ASSERT_EQUAL(__atomic_load_n(&call.done, __ATOMIC_ACQUIRE), 0);   /* still in flight */
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(call.status, 200);
    free(other);
    free(id);
    free(name);
}

/* A process that waits for queue q, then asks the worker for its decision:
 * input.decisions.s is {complete: ...} or {fail: ...}. */
static const char *DECIDE =
    "\"queues\":[\"q\"],\"start\":[\"s\"],\"states\":["
    "{\"id\":\"s\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"q\"}]},"
    "\"execute\":{\"transport\":\"http\",\"url\":\"URL/demo/decide\"}}]";

static char *run_to_end(const char *name, const char *ref, const char *decision, const char *want)
{
    char input[200];
    snprintf(input, sizeof input, "{\"decisions\":{\"s\":%s}}", decision);
    long status;
    char *id = start_process(name, ref, input, &status);
    CU_ASSERT_EQUAL(status, 201);
    if (id == NULL)
        return NULL;
    CU_ASSERT_EQUAL(signal_queue(id, "q", "{}", NULL), 202);
    json_t *done = it_wait_instance(id, want, 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    return id;
}

static void test_id_reuse_policies(void)
{
    char ref[80];
    long status;
    const char *ok = "{\"complete\":{\"ok\":true}}", *bad = "{\"fail\":\"no\"}";

    /* allow_if_no_running (the default): not while one runs; again once it ended */
    char *name = import_static("reuse_default", NULL, DECIDE);
    snprintf(ref, sizeof ref, "r1_%s", sfx);
    char *first = start_process(name, ref, "{\"decisions\":{\"s\":{\"complete\":{}}}}", &status);
    CU_ASSERT_EQUAL(status, 201);
    free(start_process(name, ref, "{}", &status));
    CU_ASSERT_EQUAL(status, 409);
    CU_ASSERT_EQUAL(signal_queue(first, "q", "{}", NULL), 202);
    json_decref(it_wait_instance(first, "completed", 30));
    free(run_to_end(name, ref, ok, "completed"));
    free(first);
    free(name);

    /* disallow_reuse: never again */
    name = import_static("reuse_never", "disallow_reuse", DECIDE);
    snprintf(ref, sizeof ref, "r2_%s", sfx);
    free(run_to_end(name, ref, bad, "failed"));
    free(start_process(name, ref, "{}", &status));
    CU_ASSERT_EQUAL(status, 409);
    free(name);

    /* allow_if_previous_failed: after a failure yes, after a completion no */
    name = import_static("reuse_failed", "allow_if_previous_failed", DECIDE);
    snprintf(ref, sizeof ref, "r3_%s", sfx);
    free(run_to_end(name, ref, bad, "failed"));
    free(run_to_end(name, ref, ok, "completed"));
    free(start_process(name, ref, "{}", &status));
    CU_ASSERT_EQUAL(status, 409);
    free(name);

    /* allow_terminate_if_running: the new run ends the running one */
    name = import_static("reuse_terminate", "allow_terminate_if_running", DECIDE);
    snprintf(ref, sizeof ref, "r4_%s", sfx);
    first = start_process(name, ref, "{}", &status);
    CU_ASSERT_EQUAL(status, 201);
    char *second = run_to_end(name, ref, ok, "completed");
    CU_ASSERT_PTR_NOT_NULL(second);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT status FROM strand.instances WHERE id = '%s'", first);
    CU_ASSERT_TRUE(sql_text_is(sql, "terminated"));
    free(first);
    free(second);
    free(name);
}

/* The worker answers 503 twice: Strand retries on durable timers with backoff and the
 * same idempotency key on every attempt, and the third attempt's decision completes it. */
static void test_worker_retried_with_backoff(void)
{
    char *name = import_static(
        "flaky", NULL,
        "\"start\":[\"s\"],\"states\":[{\"id\":\"s\",\"execute\":{\"transport\":\"http\",\"url\":\"URL/demo/flaky\","
        "\"retry\":{\"max_attempts\":4,\"backoff_ms\":300,\"multiplier\":2}}}]");
    char ref[80];
    snprintf(ref, sizeof ref, "flaky_%s", sfx);
    long status;
    char *id = start_process(name, ref, "{}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(done, "output"), "attempts")), 3);
    json_decref(done);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(DISTINCT idempotency_key) FROM strand.calls WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.timers WHERE instance_id = '%s' AND kind = 'retry'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);
    CU_ASSERT_EQUAL(wait_history(id, "state_execute_failed", 2, 1), 2);
    /* the second wait was twice the first: 300 ms, then 600 ms */
    snprintf(sql, sizeof sql,
             "SELECT (extract(epoch FROM max(due_at) - min(due_at)) * 1000)::bigint FROM strand.timers"
             " WHERE instance_id = '%s' AND kind = 'retry'", id);
    CU_ASSERT_TRUE(it_sql_number(sql) >= 600);
    free(id);
    free(name);
}

/* The process timeout is a durable timer of the scheduler: a process that waits for a
 * queue message that never comes fails with process_timeout. */
static void test_process_timeout(void)
{
    char *name = import_static("timeout", NULL,
                               "\"timeout\":\"'1s'\",\"queues\":[\"never\"],\"start\":[\"s\"],\"states\":["
                               "{\"id\":\"s\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"never\"}]},"
                               "\"complete\":{}}]");
    char ref[80];
    snprintf(ref, sizeof ref, "timeout_%s", sfx);
    long status;
    char *id = start_process(name, ref, "{}", &status);
    CU_ASSERT_EQUAL_FATAL(status, 201);
    json_t *failed = it_wait_instance(id, "failed", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(failed);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(failed, "error"), "code")),
                           "process_timeout");
    json_decref(failed);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.timers WHERE instance_id = '%s' AND fired_at IS NOT NULL", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    free(id);
    free(name);
}

static void test_bad_input(void)
{
    json_t *answer = NULL;
    char doc[1024];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"process\",\"name\":\"bad_%s\",\"version\":1,\"attributes\":{\"global\":{\"x\":{}}},"
             "\"start\":[\"s\"],\"states\":[{\"id\":\"s\",\"next\":[]}]}", sfx);
    long status = it_http(IT_API, "POST", "/v1/definitions", doc, &answer);
    char *text = json_dumps(answer, JSON_COMPACT);
    if (status != 422)
        fprintf(stderr, "import answered %ld: %s\n", status, text ? text : "");
    CU_ASSERT_EQUAL(status, 422);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "/global_table"));
    free(text);
    json_decref(answer);
    CU_ASSERT_EQUAL(post("/v1/instances/not-a-uuid/rpc/verify", "{}", NULL), 400);
    CU_ASSERT_EQUAL(post("/v1/instances/00000000-0000-0000-0000-000000000000/rpc/verify", "{}", NULL), 404);
}

static void test_teardown(void)
{
    if (worker_pid > 0) {
        kill(worker_pid, SIGTERM);
        waitpid(worker_pid, NULL, 0);
        worker_pid = -1;
    }
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_process"))
        return 1;
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"signup verified by rpc", test_signup_verified_by_rpc},
        {"signup reminder then link", test_signup_reminder_then_link},
        {"attribute write failure is atomic", test_attribute_write_failure_is_atomic},
        {"ids scoped per instance", test_ids_scoped_per_instance},
        {"failed instance shows last_error", test_failed_instance_shows_last_error},
        {"any_of and all_of", test_any_of_and_all_of},
        {"parallel next states and dead ends", test_parallel_next_states_and_dead_ends},
        {"rpc starts a thread", test_rpc_starts_a_thread},
        {"rpc writes local attributes", test_rpc_writes_local_attributes},
        {"rpc does not stall the api", test_rpc_does_not_stall_the_api},
        {"id reuse policies", test_id_reuse_policies},
        {"worker retried with backoff", test_worker_retried_with_backoff},
        {"process timeout", test_process_timeout},
        {"bad input", test_bad_input},
        {"teardown", test_teardown},
    };
    int rc = it_run_suite("process", cases, (int)(sizeof cases / sizeof cases[0]));
    if (worker_pid > 0)
        kill(worker_pid, SIGTERM);
    return rc;
}
