/*
 * test_workflows.c - workflow features end to end on the real servers: an HTTP call,
 * a human task completed through the API, an external signal that arrives before the
 * instance waits for it (buffered), a durable timer fired by the scheduler, a parallel
 * join over a subworkflow, and completion with every result mapped into the output.
 * Also: call retries with backoff ending on the failure path, cancellation of a
 * waiting instance, and a stale task completion that changes nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "strand/signal.h"
#include "strand/util.h"
#include <libpq-fe.h>
#include "st_test.h"

static char suffix[48];
static char parent_name[80], child_name[80], retry_name[80], signal_name[80];

static void test_setup(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"double\",\"type\":\"set\",\"values\":{\"twice\":\"input.n * 2\"}},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"twice\":\"state.twice\"}}]}",
             child_name);
    it_import(NULL, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"check\",\"type\":\"call\",\"transport\":\"http\",\"request\":{"
             "  \"url\":\"'http://127.0.0.1:%d/healthz'\",\"method\":\"'GET'\"},\"result\":\"health\"},"
             "{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve order\",\"roles\":[\"approver\"],"
             "  \"payload\":{\"amount\":\"input.amount\"},\"result\":\"approval\"},"
             "{\"id\":\"shipped\",\"type\":\"wait_signal\",\"name\":\"shipped\",\"result\":\"shipment\","
             "  \"timeout\":\"'1h'\",\"on_timeout\":[{\"id\":\"late\",\"type\":\"fail\",\"error\":\"'late'\"}]},"
             "{\"id\":\"pause\",\"type\":\"timer\",\"delay\":300},"
             "{\"id\":\"fork\",\"type\":\"parallel\",\"join\":\"all\",\"branches\":["
             "  [{\"id\":\"mark\",\"type\":\"set\",\"values\":{\"marked\":true}}],"
             "  [{\"id\":\"child\",\"type\":\"subworkflow\",\"definition\":\"%s\","
             "    \"input\":{\"n\":\"input.amount\"},\"result\":\"child\"}]]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{"
             "  \"health\":\"state.health.status\",\"approved\":\"state.approval.ok\","
             "  \"carrier\":\"state.shipment.carrier\",\"twice\":\"state.child.twice\","
             "  \"marked\":\"state.marked\"}}]}",
             parent_name, it_port(IT_API), child_name);
    it_import(NULL, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"flaky\",\"type\":\"call\",\"transport\":\"http\",\"timeout\":500,"
             "  \"request\":{\"url\":\"'http://127.0.0.1:9/nothing-listens'\"},"
             "  \"retry\":{\"max_attempts\":3,\"backoff_ms\":100,\"multiplier\":2},"
             "  \"on_failure\":[{\"id\":\"note\",\"type\":\"set\",\"values\":{\"gave_up\":true}}]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"gave_up\":\"state.gave_up\","
             "  \"attempts\":\"state.flaky.attempts\"}}]}",
             retry_name);
    it_import(NULL, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"by\":\"state.go.by\"}}]}",
             signal_name);
    it_import(NULL, doc);
}

static void test_full_flow(void)
{
    char *id = it_start_instance(NULL, parent_name, "{\"amount\":21}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    /* The signal arrives before the instance waits for it: it must be kept. */
    char path[160], sql[300];
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path,
                            "{\"name\":\"shipped\",\"payload\":{\"carrier\":\"DHL\"}}", NULL), 202);
    char *task = it_wait_open_task(NULL, id, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.signal_buffer WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 10), 1);
    json_t *t = NULL;
    snprintf(path, sizeof path, "/v1/tasks/%s", task);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &t), 200);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(t, "payload"), "amount")), 21);
    json_decref(t);
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", task);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"result\":{\"ok\":true}}", NULL), 200);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"result\":{\"ok\":false}}", NULL), 409);
    json_t *done = it_wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    json_t *out = json_object_get(done, "output");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "health")), "ok");
    CU_ASSERT_TRUE(json_is_true(json_object_get(out, "approved")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "carrier")), "DHL");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(out, "twice")), 42);
    CU_ASSERT_TRUE(json_is_true(json_object_get(out, "marked")));
    json_decref(done);
    /* Exactly once: one task, one child, the timer fired once, the buffer drained. */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE parent_instance_id = '%s'"
             " AND status = 'completed'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.timers WHERE instance_id = '%s'"
             " AND fired_at IS NOT NULL", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.signal_buffer WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    free(task);
    free(id);
}

static void test_call_retries_then_failure_path(void)
{
    char *id = it_start_instance(NULL, retry_name, "{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    json_t *out = json_object_get(done, "output");
    CU_ASSERT_TRUE(json_is_true(json_object_get(out, "gave_up")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(out, "attempts")), 3);
    json_decref(done);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.calls WHERE instance_id = '%s'"
             " AND status = 'failed'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 3);
    snprintf(sql, sizeof sql, "SELECT count(DISTINCT idempotency_key) FROM strand.calls"
             " WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);   /* one key for the call, on every attempt */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.timers WHERE instance_id = '%s'"
             " AND kind = 'retry' AND fired_at IS NOT NULL", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);
    free(id);
}

static void test_cancel_waiting_instance(void)
{
    char *id = it_start_instance(NULL, parent_name, "{\"amount\":5}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char *task = it_wait_open_task(NULL, id, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"reason\":\"customer withdrew\"}", NULL), 202);
    json_t *done = it_wait_instance(id, "cancelled", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    snprintf(path, sizeof path, "/v1/tasks/%s", task);
    json_t *t = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &t), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(t, "status")), "cancelled");
    json_decref(t);
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", task);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"result\":{}}", NULL), 409);
    free(task);
    free(id);
}

/* A client that retries a request whose answer it lost (same request_id) gets the same
 * answer, also when the first request ended the instance: 200 duplicate, not 409. A
 * new request id on the ended instance is still refused. */
static void test_retry_after_end_is_a_duplicate(void)
{
    char path[160];
    char *id = it_start_instance(NULL, signal_name, "{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    const char *body = "{\"name\":\"go\",\"payload\":{\"by\":\"first\"},\"request_id\":\"go-1\"}";
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, body, NULL), 202);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, body, &answer), 200);
    CU_ASSERT_TRUE(json_is_true(json_object_get(answer, "duplicate")));
    json_decref(answer);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path,
                            "{\"name\":\"go\",\"request_id\":\"go-2\"}", NULL), 409);
    free(id);

    /* the same for a cancel that ended the instance */
    id = it_start_instance(NULL, signal_name, "{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"request_id\":\"stop-1\"}", NULL), 202);
    done = it_wait_instance(id, "cancelled", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"request_id\":\"stop-1\"}", &answer), 200);
    CU_ASSERT_TRUE(json_is_true(json_object_get(answer, "duplicate")));
    json_decref(answer);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"request_id\":\"stop-2\"}", NULL), 409);
    free(id);
}

/* Enqueues a signal through the outbox, as any Strand writer would. */
static void inject(st_signal_t *sig)
{
    st_errbuf_t eb;
    PGconn *conn = it_pg_begin();
    CU_ASSERT_EQUAL(st_signal_enqueue_tx(conn, sig, &eb), ST_OK);
    it_pg_commit(conn);
}

static void test_stale_signals_change_nothing(void)
{
    char *id = it_start_instance(NULL, parent_name, "{\"amount\":1}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char *task = it_wait_open_task(NULL, id, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    char sql[2048];
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states WHERE instance_id = '%s'", id);
    long long version = it_sql_number(sql);
    /* A task completion for a wait that is not the current one, a timer for an old
     * token, and a signal expecting an old state version. */
    st_signal_t stale[3];
    st_signal_init(&stale[0], ST_SIGNAL_TASK_COMPLETED, id, -1);
    snprintf(stale[0].waiting_token, sizeof stale[0].waiting_token, "%s/999", id);
    st_signal_init(&stale[1], ST_SIGNAL_TIMER_DUE, id, -1);
    snprintf(stale[1].waiting_token, sizeof stale[1].waiting_token, "%s/1", id);
    st_signal_init(&stale[2], ST_SIGNAL_EXTERNAL, id, version - 1);
    snprintf(stale[2].name, sizeof stale[2].name, "shipped");
    for (int i = 0; i < 3; i++) {
        inject(&stale[i]);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE signal_id = '%s'"
                 " AND outcome = 'stale'", stale[i].signal_id);
        CU_ASSERT_EQUAL(it_wait_number(sql, 1, 20), 1);
        st_signal_close(&stale[i]);
    }
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), version);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE instance_id = '%s' AND status = 'open'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s/terminate", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"reason\":\"test over\"}", NULL), 202);
    json_t *done = it_wait_instance(id, "terminated", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    free(task);
    free(id);

    /* A signal for an instance that does not exist, delivered twice: one dedup row
     * (outcome unknown_instance) and one UnknownInstance notice; the redelivery is
     * recognised as a duplicate. */
    char ghost[37];
    st_uuid_new(ghost);
    st_signal_t lost;
    st_signal_init(&lost, ST_SIGNAL_EXTERNAL, ghost, -1);
    snprintf(lost.name, sizeof lost.name, "shipped");
    inject(&lost);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE signal_id = '%s'"
             " AND outcome = 'unknown_instance'", lost.signal_id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 20), 1);
    inject(&lost);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE key = '%s'"
             " AND topic = 'signals' AND published_at IS NOT NULL", ghost);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, 20), 2);
    /* The redelivery has been worked once a later signal to the same key (same
     * partition, same executor worker, so in order) has: a marker of its own. */
    st_signal_t marker;
    st_signal_init(&marker, ST_SIGNAL_EXTERNAL, ghost, -1);
    snprintf(marker.name, sizeof marker.name, "marker");
    inject(&marker);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE signal_id = '%s'"
             " AND outcome = 'unknown_instance'", marker.signal_id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 20), 1);
    /* one UnknownInstance notice for the signal delivered twice, one for the marker */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE key = '%s'"
             " AND topic = 'notices' AND position(convert_to('%s', 'UTF8') in payload) > 0",
             ghost, lost.signal_id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE key = '%s'"
             " AND topic = 'notices'", ghost);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);
    st_signal_close(&marker);
    st_signal_close(&lost);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Long polling: an unchanged instance is answered at wait_ms; a change (a task
 * completed by another process) answers the parked request at once through the Redis
 * hint the executor publishes after commit. */
static void test_long_poll_woken_by_hint(void)
{
    if (getenv("STRAND_REDIS_URL") == NULL || getenv("STRAND_REDIS_URL")[0] == '\0') {
        CU_FAIL("the test stack must provide STRAND_REDIS_URL");
        return;
    }
    char *id = it_start_instance(NULL, parent_name, "{\"amount\":3}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char *task = it_wait_open_task(NULL, id, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    char path[256];
    json_t *answer = NULL;
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &answer), 200);
    long long version = json_integer_value(json_object_get(answer, "state_version"));
    json_decref(answer);
    snprintf(path, sizeof path, "/v1/instances/%s?wait_ms=400&after_version=%lld", id, version);
    double t0 = now_s();
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &answer), 200);
    double waited = now_s() - t0;
    CU_ASSERT_TRUE(waited >= 0.35);   /* nothing changed: answered at the timeout */
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(answer, "state_version")), version);
    json_decref(answer);
    pid_t child = fork();
    if (child == 0) {   /* another client completes the task a moment later */
        usleep(300 * 1000);
        char complete[128];
        snprintf(complete, sizeof complete, "/v1/tasks/%s/complete", task);
        _exit(it_http(IT_API, "POST", complete, "{\"result\":{\"ok\":true}}", NULL) == 200 ? 0 : 1);
    }
    snprintf(path, sizeof path, "/v1/instances/%s?wait_ms=20000&after_version=%lld", id, version);
    t0 = now_s();
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &answer), 200);
    waited = now_s() - t0;
    fprintf(stderr, "\nlong poll woke after %.3f s\n", waited);
    CU_ASSERT_TRUE(waited < 10.0);   /* far before the 20 s timeout */
    CU_ASSERT_TRUE(json_integer_value(json_object_get(answer, "state_version")) > version);
    json_decref(answer);
    int status = 0;
    waitpid(child, &status, 0);
    CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/instances/00000000-0000-4000-8000-000000000000?wait_ms=99999",
                            NULL, NULL), 400);
    snprintf(path, sizeof path, "/v1/instances/%s/terminate", id);
    it_http(IT_API, "POST", path, "{}", NULL);
    free(task);
    free(id);
}

/* A start that waits (POST /v1/instances?wait_ms=N) answers 201 once the first wake-up
 * ran: with the finished instance for a flow without waits, with the waiting one
 * otherwise, through the Redis hint, long before N. A bad wait_ms is refused before
 * anything is started. */
static void test_start_and_wait(void)
{
    char name[96], doc[512], body[256];
    snprintf(name, sizeof name, "quick-%s", suffix);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"a\",\"type\":\"set\",\"values\":{\"x\":\"input.i + 1\"}},"
             "{\"id\":\"c\",\"type\":\"complete\",\"output\":{\"x\":\"state.x\"}}]}", name);
    it_import(NULL, doc);
    for (int i = 0; i < 5; i++) {
        snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{\"i\":%d}}", name, i);
        json_t *answer = NULL;
        double t0 = now_s();
        CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances?wait_ms=20000", body, &answer), 201);
        double waited = now_s() - t0;
        CU_ASSERT_TRUE(waited < 10.0);   /* the hint, not the 20 s timeout */
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "status")) ?: "", "completed");
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(answer, "output"), "x")), i + 1);
        json_decref(answer);
    }
    /* a flow that waits for a task: answered with the waiting instance */
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{\"amount\":3}}", parent_name);
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances?wait_ms=20000", body, &answer), 201);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "status")) ?: "", "waiting");
    CU_ASSERT_TRUE(json_integer_value(json_object_get(answer, "state_version")) >= 1);
    const char *id = json_string_value(json_object_get(answer, "id"));
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s/terminate", id ? id : "none");
    it_http(IT_API, "POST", path, "{}", NULL);
    json_decref(answer);
    /* wait_ms 0: the plain start, answered before the wake-up */
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{\"i\":9}}", name);
    answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances?wait_ms=0", body, &answer), 201);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(answer, "state_version")), 0);
    json_decref(answer);
    /* refused, and nothing started */
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'", name);
    long long before = it_sql_number(sql);
    static const char *const bad[] = {"abc", "10abc", "-1", "60001", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char url[64];
        snprintf(url, sizeof url, "/v1/instances?wait_ms=%s", bad[i]);
        answer = NULL;
        CU_ASSERT_EQUAL(it_http(IT_API, "POST", url, body, &answer), 400);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "code")) ?: "", "invalid_wait");
        json_decref(answer);
    }
    CU_ASSERT_EQUAL(it_sql_number(sql), before);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/instances/00000000-0000-4000-8000-000000000000?wait_ms=5x",
                            NULL, NULL), 400);
}

static void test_stop(void)
{
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_workflows"))
        return 1;
    snprintf(suffix, sizeof suffix, "%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(parent_name, sizeof parent_name, "order-%s", suffix);
    snprintf(child_name, sizeof child_name, "double-%s", suffix);
    snprintf(retry_name, sizeof retry_name, "retry-%s", suffix);
    snprintf(signal_name, sizeof signal_name, "signal-%s", suffix);
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"call, task, buffered signal, timer, parallel subworkflow", test_full_flow},
        {"call retries with backoff, then the failure path", test_call_retries_then_failure_path},
        {"cancel a waiting instance", test_cancel_waiting_instance},
        {"a retry after the end is a duplicate", test_retry_after_end_is_a_duplicate},
        {"stale signals change nothing", test_stale_signals_change_nothing},
        {"long poll woken by a Redis hint", test_long_poll_woken_by_hint},
        {"a start that waits for its first wake-up", test_start_and_wait},
        {"stop", test_stop},
    };
    return it_run_suite("workflows", cases, (int)(sizeof cases / sizeof cases[0]));
}
