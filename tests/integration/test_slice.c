/*
 * test_slice.c - the first vertical slice through the real servers.
 *
 * Import a definition over HTTP; start instances over HTTP (the API writes instance,
 * runtime state and a START signal in the outbox in one transaction); the relay
 * publishes to Kafka; the executor runs each instance to completion; GET shows it
 * completed. Also: idempotent import and start, clear 4xx errors, exactly-once effect
 * under a redelivered START, graceful SIGTERM, and an identical second start-up.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/proto/strand.pb-c.h"

#define BATCH 25

static char def_name[64];

static char *definition_json(const char *greeting_expr)
{
    json_t *doc = json_pack(
        "{s:s, s:s, s:i, s:[{s:s, s:s, s:{s:s}}, {s:s, s:s, s:{s:s}}]}", "kind", "flow",
        "name", def_name, "version", 1, "steps", "id", "greet", "type", "set", "values",
        "greeting", greeting_expr, "id", "done", "type", "complete", "output", "message",
        "state.greeting");
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return text;
}

/* Starts one instance; returns its id (caller frees) or NULL. */
static char *start_instance(const char *name, const char *request_id, long *status_out)
{
    json_t *body = json_pack("{s:s, s:{s:s}}", "definition", def_name, "input", "name", name);
    if (request_id != NULL)
        json_object_set_new(body, "request_id", json_string(request_id));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    json_t *answer = NULL;
    long status = it_http(IT_API, "POST", "/v1/instances", text, &answer);
    free(text);
    if (status_out)
        *status_out = status;
    const char *id = json_string_value(json_object_get(answer, "id"));
    char *copy = id ? strdup(id) : NULL;
    json_decref(answer);
    return copy;
}

static void test_services_start(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    json_t *ready = NULL;
    CU_ASSERT_EQUAL(it_http(IT_EXECUTOR, "GET", "/readyz", NULL, &ready), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(ready, "checks"),
                                                             "kafka")), "up");
    json_decref(ready);
    CU_ASSERT_EQUAL(it_http(IT_SCHEDULER, "GET", "/healthz", NULL, NULL), 200);
}

static void test_import_definition(void)
{
    char *doc = definition_json("'hello ' + input.name");
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", doc, &answer), 201);
    json_decref(answer);
    /* Same content again: idempotent. */
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 200);
    free(doc);
    /* Different content, same name and version: refused, immutable. */
    doc = definition_json("'bye ' + input.name");
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", doc, &answer), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "code")),
                           "definition_exists");
    json_decref(answer);
    free(doc);
    char path[128];
    snprintf(path, sizeof path, "/v1/definitions/%s/1", def_name);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &answer), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "kind")), "flow");
    json_decref(answer);
}

static void test_invalid_definition_changes_nothing(void)
{
    const char *bad = "{\"kind\":\"flow\",\"name\":\"broken\",\"version\":1,"
                      "\"steps\":[{\"id\":\"a\",\"type\":\"no-such-step\"}]}";
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", bad, &answer), 422);
    json_t *problems = json_object_get(answer, "problems");
    CU_ASSERT_TRUE(json_array_size(problems) >= 1);
    CU_ASSERT_PTR_NOT_NULL(json_string_value(json_object_get(json_array_get(problems, 0),
                                                             "pointer")));
    json_decref(answer);
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM strand.definitions WHERE name = 'broken'"), 0);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", "{not json", &answer), 400);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "code")), "invalid_json");
    json_decref(answer);
}

static void test_batch_runs_to_completion(void)
{
    char *ids[BATCH];
    for (int i = 0; i < BATCH; i++) {
        char name[32];
        snprintf(name, sizeof name, "user%d", i);
        long status = 0;
        ids[i] = start_instance(name, NULL, &status);
        CU_ASSERT_EQUAL(status, 201);
        CU_ASSERT_PTR_NOT_NULL(ids[i]);
    }
    for (int i = 0; i < BATCH; i++) {
        if (ids[i] == NULL)
            continue;
        json_t *done = it_wait_instance(ids[i], NULL, 60);
        CU_ASSERT_PTR_NOT_NULL(done);
        if (done != NULL) {
            char expected[48];
            snprintf(expected, sizeof expected, "hello user%d", i);
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(done, "status")), "completed");
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(
                                       json_object_get(done, "output"), "message")), expected);
            CU_ASSERT_EQUAL(json_integer_value(json_object_get(done, "state_version")), 1);
        }
        json_decref(done);
        free(ids[i]);
    }
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.history h JOIN strand.instances i ON i.id = h.instance_id"
             " WHERE i.definition_name = '%s' AND h.kind = 'wakeup'", def_name);
    CU_ASSERT_EQUAL(it_sql_number(sql), BATCH);
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM strand.outbox WHERE published_at IS NULL"
                                  " AND created_at < now() - interval '10 seconds'"), 0);
}

static void test_start_is_idempotent_by_request_id(void)
{
    long first = 0, second = 0;
    char request_id[96];
    snprintf(request_id, sizeof request_id, "req-%s", def_name);
    char *a = start_instance("ada", request_id, &first);
    char *b = start_instance("ada", request_id, &second);
    CU_ASSERT_EQUAL(first, 201);
    CU_ASSERT_EQUAL(second, 200);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_STRING_EQUAL(a, b);
    json_t *done = it_wait_instance(a, NULL, 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(done, "output"),
                                                             "message")), "hello ada");
    json_decref(done);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND input->>'name' = 'ada'", def_name);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    free(a);
    free(b);
}

typedef struct {
    const char *request_id;
    long status;
    char *id;
} racer_t;

static void *race_start(void *arg)
{
    racer_t *r = arg;
    r->id = start_instance("eve", r->request_id, &r->status);
    return NULL;
}

/* Starts racing on one request_id: exactly one creates (201), every other answers 200
 * with the same instance, also one that waited on the first's uncommitted claim. */
static void test_concurrent_starts_share_one_request_id(void)
{
    enum { N = 8 };
    char request_id[96];
    snprintf(request_id, sizeof request_id, "race-%s", def_name);
    racer_t racers[N];
    pthread_t threads[N];
    for (int i = 0; i < N; i++) {
        racers[i] = (racer_t){.request_id = request_id};
        CU_ASSERT_FATAL(pthread_create(&threads[i], NULL, race_start, &racers[i]) == 0);
    }
    int created = 0, repeated = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(threads[i], NULL);
        created += racers[i].status == 201;
        repeated += racers[i].status == 200;
        CU_ASSERT_PTR_NOT_NULL(racers[i].id);
        if (racers[i].id != NULL && racers[0].id != NULL)
            CU_ASSERT_STRING_EQUAL(racers[i].id, racers[0].id);
    }
    printf("\n  %d racing starts on one request_id: %d created, %d answered the same instance\n",
           N, created, repeated);
    CU_ASSERT_EQUAL(created, 1);
    CU_ASSERT_EQUAL(repeated, N - 1);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND input->>'name' = 'eve'", def_name);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    for (int i = 0; i < N; i++)
        free(racers[i].id);
}

static void test_redelivered_start_is_applied_once(void)
{
    long status = 0;
    char *id = start_instance("bob", NULL, &status);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, NULL, 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    /* Publish the very same START envelope again, as a redelivery would. */
    char sql[512];
    snprintf(sql, sizeof sql,
             "WITH again AS (INSERT INTO strand.outbox (topic, key, payload)"
             " SELECT topic, key, payload FROM strand.outbox WHERE key = '%s' AND topic = 'signals'"
             " RETURNING 1), notified AS (SELECT pg_notify('strand_outbox', '')) "
             "SELECT count(*) FROM again, notified", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* The executor records the duplicate; wait for it, then check nothing re-ran. */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.processed_signals WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    time_t deadline = time(NULL) + 20;
    long long published = 0;
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE key = '%s' AND"
             " topic = 'signals' AND published_at IS NOT NULL", id);
    while (time(NULL) < deadline && (published = it_sql_number(sql)) < 2)
        usleep(50 * 1000);
    CU_ASSERT_EQUAL(published, 2);
    /* The duplicate has been worked once a marker sent after it has. */
    CU_ASSERT_TRUE(it_marker_worked(id));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE instance_id = '%s'"
             " AND signal_id NOT LIKE 'it-marker-%%'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.history WHERE instance_id = '%s' AND kind = 'wakeup'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states"
             " WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    free(id);
}

static void test_history_and_runtime_views(void)
{
    long status = 0;
    char *id = start_instance("views", NULL, &status);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, NULL, 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    char path[128];
    json_t *answer = NULL;
    snprintf(path, sizeof path, "/v1/instances/%s/history", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &answer), 200);
    json_t *first = json_array_get(json_object_get(answer, "items"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(first, "kind")), "wakeup");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(first, "detail"),
                                                             "signal_type")), "START");
    json_decref(answer);
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &answer), 200);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(answer, "state_version")), 1);
    CU_ASSERT_TRUE(json_is_null(json_object_get(answer, "waiting")));
    CU_ASSERT_EQUAL(json_array_size(json_object_get(answer, "open_tasks")), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(answer, "snapshot"),
                                                             "status")), "completed");
    json_decref(answer);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/instances/00000000-0000-4000-8000-000000000000/runtime",
                            NULL, NULL), 404);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/instances/x/history", NULL, NULL), 400);
    free(id);
}

static void test_bad_requests(void)
{
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/instances/not-a-uuid", NULL, &answer), 400);
    json_decref(answer);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/instances/00000000-0000-4000-8000-000000000000",
                            NULL, NULL), 404);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances",
                            "{\"definition\":\"no-such-definition\"}", &answer), 404);
    json_decref(answer);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances", "{\"definition\":7}", &answer), 400);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "field")), "/definition");
    json_decref(answer);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances", "[]", NULL), 400);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/no-such-route", NULL, NULL), 404);
    CU_ASSERT_EQUAL(it_http(IT_API, "DELETE", "/v1/definitions", NULL, NULL), 405);
}

static void test_list_paginates(void)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/instances?definition=%s&limit=10", def_name);
    json_t *page = NULL;
    CU_ASSERT_EQUAL_FATAL(it_http(IT_API, "GET", path, NULL, &page), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(page, "items")), 10);
    const char *cursor = json_string_value(json_object_get(page, "next_cursor"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cursor);
    snprintf(path, sizeof path, "/v1/instances?definition=%s&limit=500&cursor=%s", def_name, cursor);
    json_t *rest = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &rest), 200);
    /* BATCH + ada + eve + bob + views instances in all; pages must not overlap. */
    CU_ASSERT_EQUAL(json_array_size(json_object_get(rest, "items")), BATCH + 4 - 10);
    json_decref(page);
    json_decref(rest);
}

/* Reads one sample's value from Prometheus text; -1 if absent. */
static double sample_value(const char *text, const char *series)
{
    char needle[256];
    snprintf(needle, sizeof needle, "\n%s ", series);
    const char *p = text ? strstr(text, needle) : NULL;
    return p ? atof(p + strlen(needle)) : -1;
}

static void test_metrics_exposed(void)
{
    char *text = NULL;
    CU_ASSERT_EQUAL(it_http_text(IT_EXECUTOR, "/metrics", &text), 200);
    /* BATCH + ada + bob were applied by this executor process. */
    CU_ASSERT_TRUE(sample_value(text, "strand_signals_processed_total{outcome=\"applied\"}") >= BATCH + 2);
    CU_ASSERT_TRUE(sample_value(text, "strand_signals_processed_total{outcome=\"dropped\"}") >= 1);
    CU_ASSERT_TRUE(sample_value(text, "strand_wakeup_duration_seconds_count") >= BATCH + 2);
    free(text);
    /* Every service's relay claims from the one outbox; together they published
     * every START. */
    double published = 0;
    for (int svc = 0; svc < IT_NSERVICES; svc++) {
        CU_ASSERT_EQUAL(it_http_text((it_service_t)svc, "/metrics", &text), 200);
        double value = sample_value(text, "strand_outbox_published_total");
        published += value > 0 ? value : 0;
        free(text);
    }
    CU_ASSERT_TRUE(published >= BATCH + 2);
    CU_ASSERT_EQUAL(it_http_text(IT_API, "/metrics", &text), 200);
    CU_ASSERT_TRUE(sample_value(text, "strand_http_requests_total{route=\"/v1/instances\",method=\"POST\",status=\"201\"}") >= BATCH);
    free(text);
}

static void test_graceful_stop_and_identical_restart(void)
{
    long long migrations = it_sql_number("SELECT count(*) FROM strand.schema_migrations");
    CU_ASSERT_TRUE(migrations >= 1);
    /* 0008: ANALYZE skips the payload columns nobody filters on. */
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM pg_attribute WHERE attstattarget = 0 AND"
                                  " attrelid IN ('strand.runtime_states'::regclass, 'strand.outbox'::regclass)"
                                  " AND attname IN ('snapshot', 'last_error', 'payload')"), 3);
    CU_ASSERT_TRUE(it_stop_all());
    /* Second start-up on the same database and topics takes the same path. */
    CU_ASSERT_FATAL(it_start_all(90));
    long status = 0;
    char *id = start_instance("again", NULL, &status);
    CU_ASSERT_EQUAL(status, 201);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, NULL, 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(done, "status")), "completed");
    json_decref(done);
    free(id);
    /* The restart applied nothing new and nothing twice. */
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM strand.schema_migrations"), migrations);
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_slice"))
        return 1;
    snprintf(def_name, sizeof def_name, "hello-%ld-%d", (long)time(NULL), (int)getpid());
    static const it_case_t cases[] = {
        {"services start", test_services_start},
        {"import definition", test_import_definition},
        {"invalid definition changes nothing", test_invalid_definition_changes_nothing},
        {"batch runs to completion", test_batch_runs_to_completion},
        {"start is idempotent by request_id", test_start_is_idempotent_by_request_id},
        {"concurrent starts share one request_id", test_concurrent_starts_share_one_request_id},
        {"redelivered START is applied once", test_redelivered_start_is_applied_once},
        {"history and runtime views", test_history_and_runtime_views},
        {"bad requests get clear errors", test_bad_requests},
        {"list paginates", test_list_paginates},
        {"metrics exposed", test_metrics_exposed},
        {"graceful stop and identical restart", test_graceful_stop_and_identical_restart},
    };
    return it_run_suite("slice", cases, (int)(sizeof cases / sizeof cases[0]));
}
