/*
 * test_bulk.c - durable bulk operations (issue 18, item 2) against the real stack.
 *
 * - A filter selects exactly the instances it names (definition, version, status,
 *   business_ref, created_after/before, waiting_kind), frozen at creation: a signal
 *   batch completes those and no other.
 * - Bad input answers 400 (404, 409) and creates no job.
 * - A cancelled job works no item.
 * - The test: a cancel batch over N instances (10,000; STRAND_BULK_N, at least
 *   1,000, and 2,000 by default under ASan) worked by two scheduler replicas, one killed with kill -9
 *   twice mid-run and restarted each time, applies its action exactly once to each
 *   instance: one signal (outbox row), one audit row, one applied signal and one
 *   `cancelled` history entry per instance. Prints the rate (items/s).
 */
#include <curl/curl.h>
#include <pthread.h>
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

#if defined(__SANITIZE_ADDRESS__)
#define DEFAULT_N 2000
#else
#define DEFAULT_N 10000
#endif
#define START_THREADS 8

static char def_a[64], def_b[64], def_big[64];
static int n_big = DEFAULT_N;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A flow that waits for the signal "go", then completes. */
static void import_waiting_flow(const char *name, int version)
{
    char doc[1024];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":%d,\"steps\":["
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"v\":\"state.go.v\"}}]}",
             name, version);
    it_import(NULL, doc);
}

static char *start(const char *definition, int version, const char *business_ref)
{
    char body[512];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"version\":%d%s%s%s}", definition, version,
             business_ref ? ",\"business_ref\":\"" : "", business_ref ? business_ref : "",
             business_ref ? "\"" : "");
    json_t *answer = NULL;
    long status = it_http(IT_API, "POST", "/v1/instances", body, &answer);
    CU_ASSERT_EQUAL(status, 201);
    const char *id = json_string_value(json_object_get(answer, "id"));
    char *copy = id ? strdup(id) : NULL;
    json_decref(answer);
    return copy;
}

/* Polls until `n` instances of `definition` wait (their first wake-up ran). */
static long long wait_waiting(const char *definition, long long n, int timeout_s)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND status = 'waiting'", definition);
    return it_wait_number(sql, n, timeout_s);
}

/* POST /v1/batches; returns the status and the answer in *out (caller decrefs). */
static long create_batch(const char *body, json_t **out)
{
    return it_http(IT_API, "POST", "/v1/batches", body, out);
}

/* Polls GET /v1/batches/{id} until the job is no longer running; returns it. */
static json_t *wait_batch(const char *id, int timeout_s)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/batches/%s", id);
    time_t deadline = time(NULL) + timeout_s;
    for (;;) {
        json_t *job = NULL;
        long status = it_http(IT_API, "GET", path, NULL, &job);
        const char *s = json_string_value(json_object_get(job, "status"));
        if (status == 200 && s != NULL && strcmp(s, "running") != 0)
            return job;
        if (time(NULL) >= deadline)
            return job;
        json_decref(job);
        usleep(100 * 1000);
    }
}

static void test_start_services(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    import_waiting_flow(def_a, 1);
    import_waiting_flow(def_a, 2);
    import_waiting_flow(def_b, 1);
}

/* The filter selects exactly what it names; a signal batch completes those only. */
static void test_filter_selects_the_right_instances(void)
{
    char *a1[4], *a2[2], *b1[2];
    for (int i = 0; i < 4; i++)
        a1[i] = start(def_a, 1, i < 2 ? "ref-x" : "ref-y");
    for (int i = 0; i < 2; i++)
        a2[i] = start(def_a, 2, "ref-x");
    for (int i = 0; i < 2; i++)
        b1[i] = start(def_b, 1, "ref-x");
    CU_ASSERT_EQUAL(wait_waiting(def_a, 6, 60), 6);
    CU_ASSERT_EQUAL(wait_waiting(def_b, 2, 60), 2);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT waiting_kind FROM strand.runtime_states WHERE instance_id = '%s'",
             a1[0]);
    char *kind = it_sql_text(sql);
    CU_ASSERT_PTR_NOT_NULL_FATAL(kind);

    char body[1024];
    json_t *job = NULL;
    /* nothing created after now + 1 day: an empty job, completed at once */
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"created_after\":\"2999-01-01\"},"
             "\"action\":\"cancel\"}", def_a);
    CU_ASSERT_EQUAL(create_batch(body, &job), 201);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "total")), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "status")) ?: "", "completed");
    char empty_id[40];
    snprintf(empty_id, sizeof empty_id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);

    /* definition A, version 1, business_ref ref-x, waiting on its kind, created in the
     * last hour, status waiting: a1[0], a1[1] */
    snprintf(body, sizeof body,
             "{\"filter\":{\"definition\":\"%s\",\"version\":1,\"business_ref\":\"ref-x\","
             "\"status\":\"waiting\",\"waiting_kind\":\"%s\",\"created_after\":\"2000-01-01T00:00:00Z\","
             "\"created_before\":\"2999-01-01T00:00:00Z\"},"
             "\"action\":\"signal\",\"args\":{\"name\":\"go\",\"payload\":{\"v\":7},\"reason\":\"filter test\"}}",
             def_a, kind);
    free(kind);
    CU_ASSERT_EQUAL(create_batch(body, &job), 201);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "total")), 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "status")) ?: "", "running");
    char id[40];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    job = wait_batch(id, 60);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "status")) ?: "", "completed");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "done")), 2);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "failed")), 0);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(job, "failures")), 0);
    json_decref(job);
    for (int i = 0; i < 2; i++) {
        json_t *done = it_wait_instance(a1[i], "completed", 60);
        CU_ASSERT_PTR_NOT_NULL(done);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(done, "output"), "v")), 7);
        json_decref(done);
    }
    /* the others still wait */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name IN ('%s', '%s')"
             " AND status = 'waiting'", def_a, def_b);
    CU_ASSERT_EQUAL(it_sql_number(sql), 6);

    /* Frozen at creation; an instance that ended meanwhile is a failed item: cancel
     * every waiting instance of B, after one of them was cancelled on its own. */
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"status\":\"waiting\"},"
             "\"action\":\"cancel\",\"args\":{\"reason\":\"bulk\"}}", def_b);
    it_stop(IT_SCHEDULER, SIGTERM, 30);   /* so that the job waits while B's first ends */
    CU_ASSERT_EQUAL(create_batch(body, &job), 201);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "total")), 2);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    char path[128];
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", b1[0]);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", NULL), 202);
    json_t *ended = it_wait_instance(b1[0], "cancelled", 60);
    CU_ASSERT_PTR_NOT_NULL(ended);
    json_decref(ended);
    char *later = start(def_b, 1, "ref-x");   /* not in the job: selected before it existed */
    CU_ASSERT_EQUAL(wait_waiting(def_b, 2, 60), 2);
    CU_ASSERT_TRUE_FATAL(it_start(IT_SCHEDULER) > 0);
    job = wait_batch(id, 60);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "status")) ?: "", "completed");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "done")), 1);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "failed")), 1);
    json_t *failure = json_array_get(json_object_get(job, "failures"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(failure, "instance_id")) ?: "", b1[0]);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(failure, "error"), "code")) ?: "",
        "instance_ended");
    json_decref(job);
    json_t *cancelled = it_wait_instance(b1[1], "cancelled", 60);
    CU_ASSERT_PTR_NOT_NULL(cancelled);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(cancelled, "error"), "reason")) ?: "", "bulk");
    json_decref(cancelled);
    json_t *still = NULL;
    snprintf(path, sizeof path, "/v1/instances/%s", later);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &still), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(still, "status")) ?: "", "waiting");
    json_decref(still);
    /* the audit: one "requested" row per applied item, actor the creator */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE target = 'batch:%s'"
             " AND outcome = 'requested' AND action = 'cancel' AND actor = 'anonymous'"
             " AND instance_id = '%s'", id, b1[1]);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* listed, newest first, page by page (the cancel job, the signal job, the empty one) */
    json_t *page = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/batches?limit=2", NULL, &page), 200);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_array_get(json_object_get(page, "items"), 0), "id")) ?: "", id);
    const char *cursor = json_string_value(json_object_get(page, "next_cursor"));
    CU_ASSERT_PTR_NOT_NULL(cursor);
    if (cursor != NULL) {
        snprintf(path, sizeof path, "/v1/batches?limit=1&cursor=%s", cursor);
        json_t *next = NULL;
        CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &next), 200);
        CU_ASSERT_STRING_EQUAL(
            json_string_value(json_object_get(json_array_get(json_object_get(next, "items"), 0), "id")) ?: "",
            empty_id);
        json_decref(next);
    }
    json_decref(page);
    for (int i = 0; i < 4; i++)
        free(a1[i]);
    for (int i = 0; i < 2; i++) {
        free(a2[i]);
        free(b1[i]);
    }
    free(later);
}

static void test_bad_input(void)
{
    long long jobs = it_sql_number("SELECT count(*) FROM strand.batch_jobs");
    static const char *const bodies[] = {
        "{}",
        "{\"action\":\"cancel\"}",
        "{\"action\":\"cancel\",\"filter\":{}}",
        "{\"action\":\"cancel\",\"filter\":[]}",
        "{\"action\":\"cancel\",\"filter\":{\"colour\":\"red\"}}",
        "{\"action\":\"cancel\",\"filter\":{\"status\":\"sleeping\"}}",
        "{\"action\":\"cancel\",\"filter\":{\"status\":7}}",
        "{\"action\":\"cancel\",\"filter\":{\"definition\":\"\"}}",
        "{\"action\":\"cancel\",\"filter\":{\"version\":1}}",
        "{\"action\":\"cancel\",\"filter\":{\"definition\":\"x\",\"version\":0}}",
        "{\"action\":\"cancel\",\"filter\":{\"created_after\":\"2026-02-31\"}}",
        "{\"action\":\"cancel\",\"filter\":{\"created_before\":\"yesterday\"}}",
        "{\"action\":\"cancel\",\"filter\":{\"waiting_kind\":5}}",
        "{\"action\":\"explode\",\"filter\":{\"definition\":\"x\"}}",
        "{\"action\":\"signal\",\"filter\":{\"definition\":\"x\"}}",
        "{\"action\":\"signal\",\"filter\":{\"definition\":\"x\"},\"args\":{\"name\":\"go\",\"payload\":[1]}}",
        "{\"action\":\"cancel\",\"filter\":{\"definition\":\"x\"},\"args\":{\"name\":\"go\"}}",
        "{\"action\":\"cancel\",\"filter\":{\"definition\":\"x\"},\"args\":{\"reason\":3}}",
        "{\"action\":\"cancel\",\"filter\":{\"definition\":\"x\"},\"args\":\"now\"}",
        "{\"action\":\"cancel\",\"filter\":{\"definition\":\"x\"},\"dry_run\":true}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        json_t *p = NULL;
        long status = create_batch(bodies[i], &p);
        if (status != 400)
            fprintf(stderr, "\n%s: got %ld\n", bodies[i], status);
        CU_ASSERT_EQUAL(status, 400);
        CU_ASSERT_PTR_NOT_NULL(json_string_value(json_object_get(p, "code")));
        json_decref(p);
    }
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/batches", "not json", NULL), 400);
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM strand.batch_jobs"), jobs);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/batches/nope", NULL, NULL), 400);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/batches/00000000-0000-4000-8000-000000000000", NULL, NULL), 404);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/batches/00000000-0000-4000-8000-000000000000/cancel",
                            "{}", NULL), 404);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/batches/nope/cancel", "{}", NULL), 400);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/batches?status=sleeping", NULL, NULL), 400);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/batches?cursor=abc", NULL, NULL), 400);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/batches?limit=0", NULL, NULL), 400);
    /* too many: an API allowing 2 items per job refuses a filter selecting 4 */
    CU_ASSERT_EQUAL(it_stop(IT_API, SIGTERM, 30), 0);
    setenv("STRAND_BATCH_MAX_ITEMS", "2", 1);
    CU_ASSERT_TRUE_FATAL(it_start(IT_API) > 0);
    unsetenv("STRAND_BATCH_MAX_ITEMS");
    CU_ASSERT_TRUE_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
    json_t *p = NULL;
    char body[256];
    snprintf(body, sizeof body, "{\"action\":\"cancel\",\"filter\":{\"definition\":\"%s\"}}", def_a);
    CU_ASSERT_EQUAL(create_batch(body, &p), 400);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "code")) ?: "", "too_many_instances");
    json_decref(p);
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM strand.batch_jobs"), jobs);
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM strand.batch_items b LEFT JOIN strand.batch_jobs j"
                                  " ON j.id = b.job_id WHERE j.id IS NULL"), 0);
    CU_ASSERT_EQUAL(it_stop(IT_API, SIGTERM, 30), 0);
    CU_ASSERT_TRUE_FATAL(it_start(IT_API) > 0);
    CU_ASSERT_TRUE_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
}

#define T_SCOPED "bulk-scoped-token-0123456789"
#define T_VIEWER "bulk-viewer-token-0123456789"

/* Expects `status` (and, for 403, the permission named) from a request with `token`. */
static void expect_as(const char *token, const char *method, const char *path, const char *body,
                      long status, const char *perm)
{
    json_t *p = NULL;
    long got = it_req(IT_API, token, method, path, body, &p);
    if (got != status)
        fprintf(stderr, "\n%s %s %s: got %ld, want %ld\n", method, path, body ? body : "", got, status);
    CU_ASSERT_EQUAL(got, status);
    if (perm != NULL)
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "required_permission")) ?: "", perm);
    json_decref(p);
}

/* With authentication on: a grant limited to definition A may create batches whose
 * filter names A, with the action's own permission; reads span definitions. */
static void test_permissions(void)
{
    char file[256];
    snprintf(file, sizeof file, "/tmp/strand-test-bulk-tokens-%d.json", (int)getpid());
    FILE *f = fopen(file, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"roles\": {\"scoped\": [\"instances:operate@%s\", \"instances:read@%s\"]},"
               " \"tokens\": [{\"token\": \"%s\", \"principal\": \"scoped\", \"roles\": [\"scoped\"]},"
               " {\"token\": \"%s\", \"principal\": \"watcher\", \"roles\": [\"viewer\"]}]}",
            def_a, def_a, T_SCOPED, T_VIEWER);
    fclose(f);
    CU_ASSERT_EQUAL(it_stop(IT_API, SIGTERM, 30), 0);
    setenv("STRAND_AUTH_FILE", file, 1);
    CU_ASSERT_TRUE_FATAL(it_start(IT_API) > 0);
    unsetenv("STRAND_AUTH_FILE");
    CU_ASSERT_TRUE_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
    char body[512];
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\"},\"action\":\"cancel\"}", def_b);
    expect_as(T_SCOPED, "POST", "/v1/batches", body, 403, "instances:operate");
    expect_as(T_SCOPED, "POST", "/v1/batches", "{\"filter\":{\"status\":\"terminated\"},\"action\":\"cancel\"}",
              403, "instances:operate");
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"status\":\"terminated\"},"
             "\"action\":\"terminate\"}", def_a);
    expect_as(T_SCOPED, "POST", "/v1/batches", body, 403, "instances:terminate");
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"status\":\"terminated\"},"
             "\"action\":\"signal\",\"args\":{\"name\":\"go\"}}", def_a);
    expect_as(T_SCOPED, "POST", "/v1/batches", body, 403, "instances:signal");
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"status\":\"terminated\"},"
             "\"action\":\"cancel\"}", def_a);
    expect_as(T_SCOPED, "POST", "/v1/batches", body, 201, NULL);   /* selects nothing: completed */
    expect_as(T_SCOPED, "GET", "/v1/batches", NULL, 403, "instances:read");
    expect_as(T_VIEWER, "GET", "/v1/batches", NULL, 200, NULL);
    expect_as(T_VIEWER, "POST", "/v1/batches", body, 403, "instances:operate");
    expect_as(T_VIEWER, "POST", "/v1/batches/00000000-0000-4000-8000-000000000000/cancel", "{}", 403,
              "instances:operate");
    expect_as(NULL, "GET", "/v1/batches", NULL, 401, NULL);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.batch_jobs WHERE created_by = 'scoped'"
             " AND status = 'completed' AND filter->>'definition' = '%s'", def_a);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    unlink(file);
    CU_ASSERT_EQUAL(it_stop(IT_API, SIGTERM, 30), 0);
    CU_ASSERT_TRUE_FATAL(it_start(IT_API) > 0);
    CU_ASSERT_TRUE_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
}

/* A job cancelled before it was worked works nothing; cancelling again is 409. */
static void test_cancel_a_job(void)
{
    CU_ASSERT_EQUAL(it_stop(IT_SCHEDULER, SIGTERM, 30), 0);
    char body[256];
    json_t *job = NULL;
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"status\":\"waiting\"},"
             "\"action\":\"cancel\"}", def_a);
    CU_ASSERT_EQUAL(create_batch(body, &job), 201);
    long long total = json_integer_value(json_object_get(job, "total"));
    CU_ASSERT_EQUAL(total, 4);   /* a1[2], a1[3], a2[0], a2[1] */
    char id[40], path[128];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    snprintf(path, sizeof path, "/v1/batches/%s/cancel", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", &job), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "status")) ?: "", "cancelled");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "done")), 0);
    json_decref(job);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", &job), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "code")) ?: "", "batch_ended");
    json_decref(job);
    CU_ASSERT_TRUE_FATAL(it_start(IT_SCHEDULER) > 0);
    CU_ASSERT_TRUE(it_wait_http(IT_SCHEDULER, "/readyz", 200, 30));
    /* A marker job created after it: the scheduler claims running jobs oldest first, so
     * one that ignored the cancel would have worked the cancelled job before the
     * marker. The marker signals def_b's one waiting instance (test_filter's `later`). */
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"status\":\"waiting\"},"
             "\"action\":\"signal\",\"args\":{\"name\":\"go\"}}", def_b);
    CU_ASSERT_EQUAL(create_batch(body, &job), 201);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "total")), 1);
    char marker[40];
    snprintf(marker, sizeof marker, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    job = wait_batch(marker, 60);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "status")) ?: "", "completed");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "done")), 1);
    json_decref(job);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.batch_items WHERE job_id = '%s'"
             " AND state <> 'pending'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND status = 'waiting'", def_a);
    CU_ASSERT_EQUAL(it_sql_number(sql), 4);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE target = 'batch:%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);   /* batch_create and batch_cancel */
}

/* strandctl batch create/list/get/cancel reach the routes. */
static void test_strandctl(void)
{
    char args[512], *out = NULL;
    snprintf(args, sizeof args, "--json batch create signal --definition %s --version 1 --status waiting"
             " --business-ref ref-y --name go --payload '{\"v\":1}' --reason ctl", def_a);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, &out), 0);
    json_error_t jerr;
    json_t *job = json_loads(out, 0, &jerr);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "total")), 2);   /* a1[2], a1[3] */
    char id[40];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    free(out);
    job = wait_batch(id, 60);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "done")), 2);
    json_decref(job);
    snprintf(args, sizeof args, "batch get %s", id);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "completed"));
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(NULL, "batch list --limit 1", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, id));
    free(out);
    snprintf(args, sizeof args, "batch cancel %s", id);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, &out), 1);   /* 409: it has ended */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "batch_ended"));
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(NULL, "batch create explode --definition x", &out), 1);
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(NULL, "batch frobnicate", &out), 2);
    free(out);
    snprintf(args, sizeof args, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND status = 'completed' AND output->>'v' = '1'", def_a);
    CU_ASSERT_EQUAL(it_wait_number(args, 2, 60), 2);
}

/* Checks every done item of job `id`: its outbox signal has `type`, the job's
 * deterministic signal id, and expected_version = the state_version its audit row says
 * the item saw under the lock. Returns the number of items checked. */
static int check_versioned_signals(const char *id, int type)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT string_agg(b.signal_id || ' ' || encode(o.payload, 'hex') || ' '"
             " || (a.before->>'state_version'), ',' ORDER BY b.seq)"
             " FROM strand.batch_items b JOIN strand.outbox o ON o.signal_id = b.signal_id"
             " JOIN strand.audit_log a ON a.target = 'batch:' || b.job_id AND a.instance_id = b.instance_id"
             " WHERE b.job_id = '%s' AND b.state = 'done'", id);
    char *rows = it_sql_text(sql);
    int checked = 0;
    for (char *save = NULL, *row = rows ? strtok_r(rows, ",", &save) : NULL; row != NULL;
         row = strtok_r(NULL, ",", &save)) {
        char sid[64], hex[4096];
        long long version = -2;
        CU_ASSERT_EQUAL_FATAL(sscanf(row, "%63s %4095s %lld", sid, hex, &version), 3);
        size_t len = strlen(hex) / 2;
        uint8_t bytes[2048];
        for (size_t i = 0; i < len && i < sizeof bytes; i++)
            sscanf(hex + 2 * i, "%2hhx", &bytes[i]);
        Strand__V1__Signal *msg = strand__v1__signal__unpack(NULL, len, bytes);
        CU_ASSERT_PTR_NOT_NULL_FATAL(msg);
        CU_ASSERT_EQUAL((int)msg->type, type);
        CU_ASSERT_STRING_EQUAL(msg->signal_id, sid);
        CU_ASSERT_EQUAL(msg->expected_version, version);
        CU_ASSERT_TRUE(version >= 1);
        json_error_t jerr;
        json_t *payload = json_loadb((const char *)msg->payload.data, msg->payload.len, 0, &jerr);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(payload, "actor")) ?: "", "anonymous");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(payload, "batch_id")) ?: "", id);
        if (type == STRAND__V1__SIGNAL_TYPE__SIGNAL_TYPE_REPAIR)
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(payload, "verb")) ?: "", "retry");
        json_decref(payload);
        strand__v1__signal__free_unpacked(msg, NULL);
        checked++;
    }
    free(rows);
    return checked;
}

/* retry, pause and resume enqueue the operator control signals (REPAIR, PAUSE,
 * RESUME) with the version read under the lock, where they apply; elsewhere the item
 * fails with not_applicable. (The executor's handling of them is the repair and pause
 * work's; this tree checks what the batch sends.) */
static void test_versioned_actions(void)
{
    char body[512], id[40];
    json_t *job = NULL;
    /* retry: def_a v2's two instances wait, they have not failed: both fail, job failed */
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"version\":2,\"status\":\"waiting\"},"
             "\"action\":\"retry\"}", def_a);
    CU_ASSERT_EQUAL(create_batch(body, &job), 201);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "total")), 2);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    job = wait_batch(id, 60);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "status")) ?: "", "failed");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "failed")), 2);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(job, "failures")), 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(
                               json_array_get(json_object_get(job, "failures"), 1), "error"), "code")) ?: "",
                           "not_applicable");
    json_decref(job);
    /* pause: both apply, with PAUSE and their versions */
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"version\":2,\"status\":\"waiting\"},"
             "\"action\":\"pause\",\"args\":{\"reason\":\"maintenance\"}}", def_a);
    CU_ASSERT_EQUAL(create_batch(body, &job), 201);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    job = wait_batch(id, 60);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "status")) ?: "", "completed");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "done")), 2);
    json_decref(job);
    CU_ASSERT_EQUAL(check_versioned_signals(id, STRAND__V1__SIGNAL_TYPE__SIGNAL_TYPE_PAUSE), 2);
    /* resume: applies to the instances the pause paused (where the executor applies
     * PAUSE), else fails as not paused; either way every item is worked once */
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"version\":2},"
             "\"action\":\"resume\"}", def_a);
    CU_ASSERT_EQUAL(create_batch(body, &job), 201);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    job = wait_batch(id, 60);
    long long done = json_integer_value(json_object_get(job, "done"));
    CU_ASSERT_EQUAL(done + json_integer_value(json_object_get(job, "failed")), 2);
    json_decref(job);
    CU_ASSERT_EQUAL(check_versioned_signals(id, STRAND__V1__SIGNAL_TYPE__SIGNAL_TYPE_RESUME), done);
}

/* ---- the test ---------------------------------------------------------------- */

typedef struct {
    int from, to;
    int started;
} starter_t;

static size_t discard(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    return size * nmemb;
}

static void *starter_main(void *arg)
{
    starter_t *s = arg;
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    char url[256], body[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/instances", it_port(IT_API));
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    for (int i = s->from; i < s->to; i++) {
        snprintf(body, sizeof body, "{\"definition\":\"%s\",\"request_id\":\"%s-%d\"}", def_big,
                 def_big, i);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
        for (int attempt = 0; attempt < 20; attempt++) {
            long status = -1;
            if (curl_easy_perform(curl) == CURLE_OK)
                curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
            if (status == 201 || status == 200) {
                s->started++;
                break;
            }
            usleep(100 * 1000);
        }
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return NULL;
}

static long long job_number(const char *id, const char *column)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT %s FROM strand.batch_jobs WHERE id = '%s'", column, id);
    return it_sql_number(sql);
}

static void test_ten_thousand_killed_twice(void)
{
    import_waiting_flow(def_big, 1);
    /* Start N instances (8 clients), and let each reach its wait. */
    double t0 = now_s();
    pthread_t threads[START_THREADS];
    starter_t starters[START_THREADS];
    for (int t = 0; t < START_THREADS; t++) {
        starters[t] = (starter_t){n_big * t / START_THREADS, n_big * (t + 1) / START_THREADS, 0};
        pthread_create(&threads[t], NULL, starter_main, &starters[t]);
    }
    int started = 0;
    for (int t = 0; t < START_THREADS; t++) {
        pthread_join(threads[t], NULL);
        started += starters[t].started;
    }
    CU_ASSERT_EQUAL_FATAL(started, n_big);
    CU_ASSERT_EQUAL_FATAL(wait_waiting(def_big, n_big, 400), n_big);
    fprintf(stderr, "\nbulk: %d instances started and waiting in %.1f s\n", n_big, now_s() - t0);

    /* Two scheduler replicas share the job; one is killed -9 twice mid-run, inside a
     * chunk's transaction: it holds each chunk open 200 ms after enqueueing its
     * signals, and the test kills it while it does (pg_stat_activity shows it). */
    setenv("STRAND_TEST_BATCH_CHUNK_DELAY_MS", "200", 1);
    pid_t replica = it_start_replica(IT_SCHEDULER, 1);
    CU_ASSERT_FATAL(replica > 0);
    char body[256];
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\"},\"action\":\"cancel\","
             "\"args\":{\"reason\":\"bulk crash test\"}}", def_big);
    json_t *job = NULL;
    double created = now_s();
    CU_ASSERT_EQUAL_FATAL(create_batch(body, &job), 201);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "total")), n_big);
    char id[40];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    int kills = 0;
    long long killed_at[2] = {-1, -1};
    double deadline = now_s() + 300;
    while (now_s() < deadline) {
        long long done = job_number(id, "done");
        if (kills < 2 && done >= (long long)n_big * (kills + 1) / 3 &&
            it_sql_number("SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                          " AND query LIKE '%batch chunk test delay%' AND pid <> pg_backend_pid()") > 0) {
            /* mid-run, mid-chunk: the job is still running with items left, and the
             * replica sits in a chunk's open transaction */
            killed_at[kills] = done;
            it_kill9(replica);
            replica = it_start_replica(IT_SCHEDULER, 1);
            CU_ASSERT_FATAL(replica > 0);
            kills++;
        }
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT (status <> 'running')::int FROM strand.batch_jobs WHERE id = '%s'", id);
        if (it_sql_number(sql) == 1)
            break;
        usleep(20 * 1000);
    }
    unsetenv("STRAND_TEST_BATCH_CHUNK_DELAY_MS");
    double worked = now_s() - created;
    job = wait_batch(id, 10);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(job, "status")) ?: "", "completed");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "total")), n_big);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "done")), n_big);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(job, "failed")), 0);
    json_decref(job);
    CU_ASSERT_EQUAL(kills, 2);
    CU_ASSERT_TRUE(killed_at[0] >= 0 && killed_at[0] < n_big);
    CU_ASSERT_TRUE(killed_at[1] >= 0 && killed_at[1] < n_big);

    /* Every instance ends cancelled. */
    char sql[1024];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND status = 'cancelled'", def_big);
    long long cancelled = it_wait_number(sql, n_big, 400);
    double applied = now_s() - created;
    CU_ASSERT_EQUAL(cancelled, n_big);
    /* Exactly once per instance: one item done, one signal in the outbox, one audit row,
     * one applied signal, one `cancelled` history entry, and nothing more anywhere. */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.batch_items WHERE job_id = '%s'"
             " AND state = 'done'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), n_big);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT b.instance_id FROM strand.batch_items b"
             " JOIN strand.outbox o ON o.signal_id = b.signal_id AND o.instance_id = b.instance_id"
             " WHERE b.job_id = '%s' GROUP BY b.instance_id HAVING count(*) = 1) z", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), n_big);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.outbox o JOIN strand.instances i ON i.id = o.instance_id"
             " WHERE i.definition_name = '%s' AND o.topic = 'signals'", def_big);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2LL * n_big);   /* START + the batch's CANCEL */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT instance_id FROM strand.audit_log WHERE target = 'batch:%s'"
             " AND outcome = 'requested' GROUP BY instance_id HAVING count(*) = 1) z", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), n_big);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE target = 'batch:%s'"
             " AND outcome = 'requested'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), n_big);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.processed_signals p JOIN strand.batch_items b"
             " ON b.signal_id = p.signal_id WHERE b.job_id = '%s' AND p.outcome = 'applied'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), n_big);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT h.instance_id FROM strand.history h"
             " JOIN strand.instances i ON i.id = h.instance_id WHERE i.definition_name = '%s'"
             " AND h.kind = 'cancelled' GROUP BY h.instance_id HAVING count(*) = 1) z", def_big);
    CU_ASSERT_EQUAL(it_sql_number(sql), n_big);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.history h JOIN strand.instances i ON i.id = h.instance_id"
             " WHERE i.definition_name = '%s' AND h.kind = 'cancelled'", def_big);
    CU_ASSERT_EQUAL(it_sql_number(sql), n_big);
    snprintf(sql, sizeof sql,
             "SELECT extract(epoch FROM ended_at - created_at) * 1000 FROM strand.batch_jobs"
             " WHERE id = '%s'", id);
    long long job_ms = it_sql_number(sql);
    fprintf(stderr,
            "bulk: %d items, 2 replicas, one killed -9 at %lld and %lld items done;"
            " job worked in %.1f s by the database's clock (%.0f items/s; %.1f s seen by the test),"
            " all %d instances cancelled after %.1f s (%.0f instances/s end to end)\n",
            n_big, killed_at[0], killed_at[1], job_ms / 1000.0,
            job_ms > 0 ? n_big * 1000.0 / (double)job_ms : 0.0, worked, n_big, applied,
            n_big / applied);
    it_kill9(replica);
}

int main(void)
{
    if (!it_init("test_bulk"))
        return 1;
    const char *n = getenv("STRAND_BULK_N");
    if (n != NULL && atoi(n) > 0)
        n_big = atoi(n) < 1000 ? 1000 : atoi(n);   /* enough chunks to kill a worker mid-run */
    snprintf(def_a, sizeof def_a, "bulk-a-%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(def_b, sizeof def_b, "bulk-b-%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(def_big, sizeof def_big, "bulk-n-%ld-%d", (long)time(NULL), (int)getpid());
    curl_global_init(CURL_GLOBAL_DEFAULT);
    static const it_case_t cases[] = {
        {"start the services", test_start_services},
        {"a filter selects exactly its instances, frozen at creation", test_filter_selects_the_right_instances},
        {"bad input: 400 and no job", test_bad_input},
        {"permissions: limited grants name the definition", test_permissions},
        {"a cancelled job works nothing", test_cancel_a_job},
        {"strandctl batch", test_strandctl},
        {"retry, pause, resume: versioned control signals", test_versioned_actions},
        {"N instances, a worker killed -9 twice: each action applied once", test_ten_thousand_killed_twice},
    };
    int rc = it_run_suite("bulk", cases, (int)(sizeof cases / sizeof cases[0]));
    curl_global_cleanup();
    return rc;
}
