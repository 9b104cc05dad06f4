/*
 * test_crash.c - exactly-once under crashes and server restarts, on the real servers.
 *
 * N instances of a definition with a human task, a durable timer and an external
 * signal are driven to completion by two executor replicas while the test kills -9 an
 * executor replica and the API (whose relay publishes) at random moments and restarts
 * them, and restarts PostgreSQL and the Kafka broker mid-run. Afterwards every
 * instance must be completed exactly once: one task each, one fired timer each, and
 * as many wake-up history entries as applied signals (no duplicate effects), with the
 * right output. N = STRAND_CRASH_N (default 300); the closing notes report a run with
 * 1,000.
 *
 * The fault moments are drawn from a seed, STRAND_TEST_SEED or the clock, printed
 * first with each fault as it happens (instance index and seconds into the run): a
 * failed run is replayed with the same STRAND_TEST_SEED (and STRAND_CRASH_N).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

static char def_name[64];
static int n_instances = 300;
static char **ids;
static unsigned seed;
static struct timespec run_start;

/* Seconds since the run began, for the fault log. */
static double run_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - run_start.tv_sec) + (now.tv_nsec - run_start.tv_nsec) / 1e9;
}

static void import_definition(void)
{
    char doc[2048];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"approver\"],\"result\":\"approval\"},"
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"go\"},"
             "{\"id\":\"pause\",\"type\":\"timer\",\"delay\":200},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"n\":\"input.n\",\"ok\":\"state.approval.ok\","
             "  \"go\":\"state.go.v\"}}]}", def_name);
    CU_ASSERT_EQUAL_FATAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 201);
}

/* HTTP with retries: the API may be down for a moment while it is being killed. */
static long http_retry(const char *method, const char *path, const char *body, json_t **out)
{
    long status = -1;
    for (int attempt = 0; attempt < 200; attempt++) {
        if (out) {
            json_decref(*out);
            *out = NULL;
        }
        status = it_http(IT_API, method, path, body, out);
        if (status > 0 && status < 500)
            return status;
        usleep(100 * 1000);
    }
    return status;
}

static long long sql(const char *fmt, const char *arg)
{
    char text[512];
    snprintf(text, sizeof text, fmt, arg);
    long long v;
    for (int attempt = 0; attempt < 100; attempt++) {   /* PostgreSQL may be restarting */
        if ((v = it_sql_number(text)) >= 0)
            return v;
        usleep(200 * 1000);
    }
    return -1;
}

static void test_run_with_kills_and_restarts(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    pid_t replica = it_start_replica(IT_EXECUTOR, 1);
    CU_ASSERT_FATAL(replica > 0);
    import_definition();
    ids = calloc((size_t)n_instances, sizeof *ids);
    srand(seed);
    int kills = 0, restarts = 0;
    /* The moments of the faults are random within the run (from the printed seed). */
    int kill_executor_at = n_instances / 8 + rand() % (n_instances / 4 + 1);
    int kill_api_at = n_instances / 2 + rand() % (n_instances / 4 + 1);
    int restart_pg_at = rand() % n_instances;
    fprintf(stderr, "\ncrash test: seed %u, %d instances: executor replica kill -9 after instance %d,"
            " API kill -9 after %d, PostgreSQL restart after %d, Kafka restart at the first drive\n",
            seed, n_instances, kill_executor_at, kill_api_at, restart_pg_at);
    clock_gettime(CLOCK_MONOTONIC, &run_start);
    for (int i = 0; i < n_instances; i++) {
        char body[256], request_id[96];
        snprintf(request_id, sizeof request_id, "%s-%d", def_name, i);
        snprintf(body, sizeof body, "{\"definition\":\"%s\",\"request_id\":\"%s\",\"input\":{\"n\":%d}}",
                 def_name, request_id, i);
        json_t *answer = NULL;
        long status = http_retry("POST", "/v1/instances", body, &answer);
        CU_ASSERT(status == 201 || status == 200);   /* 200: a retried start, same instance */
        const char *id = json_string_value(json_object_get(answer, "id"));
        ids[i] = id ? strdup(id) : NULL;
        json_decref(answer);
        /* Half the signals arrive before the instance waits for them (buffered). */
        if (ids[i] && i % 2 == 0) {
            char path[128];
            snprintf(path, sizeof path, "/v1/instances/%s/signals", ids[i]);
            snprintf(body, sizeof body, "{\"name\":\"go\",\"payload\":{\"v\":%d},\"request_id\":\"go-%s\"}", i, ids[i]);
            http_retry("POST", path, body, NULL);
        }
        if (i == kill_executor_at) {   /* kill -9 an executor replica mid-run, restart it */
            fprintf(stderr, "crash test: %.2f s, instance %d: kill -9 executor replica (pid %d)\n",
                    run_s(), i, (int)replica);
            it_kill9(replica);
            replica = it_start_replica(IT_EXECUTOR, 1);
            kills++;
        }
        if (i == kill_api_at) {   /* kill -9 the API (and its relay), restart it */
            fprintf(stderr, "crash test: %.2f s, instance %d: kill -9 API\n", run_s(), i);
            it_stop(IT_API, SIGKILL, 5);
            it_start(IT_API);
            kills++;
        }
        if (i == restart_pg_at) {
            fprintf(stderr, "crash test: %.2f s, instance %d: restart PostgreSQL\n", run_s(), i);
            CU_ASSERT_EQUAL(it_stack("restart postgres"), 0);
            restarts++;
        }
    }
    /* Drive: complete tasks and send the remaining signals until everything is done. */
    time_t deadline = time(NULL) + 240;
    int kafka_restarted = 0;
    long long completed = 0;
    while (time(NULL) < deadline) {
        json_t *page = NULL;
        char path[256];
        snprintf(path, sizeof path, "/v1/tasks?status=open&limit=500&role=approver");
        if (http_retry("GET", path, NULL, &page) == 200) {
            size_t i;
            json_t *task;
            json_array_foreach(json_object_get(page, "items"), i, task) {
                snprintf(path, sizeof path, "/v1/tasks/%s/complete",
                         json_string_value(json_object_get(task, "id")));
                http_retry("POST", path, "{\"result\":{\"ok\":true}}", NULL);
            }
        }
        json_decref(page);
        for (int i = 1; i < n_instances; i += 2) {
            if (ids[i] == NULL)
                continue;
            char body[256];
            snprintf(path, sizeof path, "/v1/instances/%s/signals", ids[i]);
            snprintf(body, sizeof body, "{\"name\":\"go\",\"payload\":{\"v\":%d},\"request_id\":\"go-%s\"}", i, ids[i]);
            http_retry("POST", path, body, NULL);   /* idempotent by request_id; 409 once ended */
        }
        if (!kafka_restarted) {
            fprintf(stderr, "crash test: %.2f s, drive: restart Kafka\n", run_s());
            CU_ASSERT_EQUAL(it_stack("restart kafka"), 0);
            kafka_restarted = 1;
            restarts++;
        }
        completed = sql("SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
                        " AND status = 'completed'", def_name);
        if (completed == n_instances)
            break;
        sleep(1);
    }
    fprintf(stderr, "crash test: seed %u, %d instances, %d kills, %d server restarts, %lld completed"
            " after %.1f s\n", seed, n_instances, kills, restarts, completed, run_s());
    CU_ASSERT_EQUAL(completed, n_instances);
    /* Exactly once, per instance and in total. */
    CU_ASSERT_EQUAL(sql("SELECT count(*) FROM strand.instances WHERE definition_name = '%s'", def_name),
                    n_instances);
    CU_ASSERT_EQUAL(sql("SELECT count(*) FROM strand.tasks t JOIN strand.instances i ON i.id = t.instance_id"
                        " WHERE i.definition_name = '%s'", def_name), n_instances);
    CU_ASSERT_EQUAL(sql("SELECT count(*) FROM strand.timers t JOIN strand.instances i ON i.id = t.instance_id"
                        " WHERE i.definition_name = '%s' AND t.fired_at IS NOT NULL", def_name), n_instances);
    CU_ASSERT_EQUAL(sql("SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
                        " AND (output->>'n')::int >= 0 AND output->>'ok' = 'true'"
                        " AND output->>'go' = output->>'n'", def_name), n_instances);
    /* Every applied or buffered signal left exactly one history entry; nothing else did. */
    CU_ASSERT_EQUAL(sql("SELECT count(*) FROM strand.history h JOIN strand.instances i ON i.id = h.instance_id"
                        " WHERE i.definition_name = '%s' AND h.kind = 'wakeup'", def_name),
                    sql("SELECT count(*) FROM strand.processed_signals p JOIN strand.instances i"
                        " ON i.id = p.instance_id WHERE i.definition_name = '%s' AND p.outcome = 'applied'",
                        def_name));
    /* START + task completion + signal + timer: four applied wake-ups per instance,
     * whether the signal came early (buffered, delivered inside the task's wake-up,
     * then three wake-ups) or late (four). */
    long long wakeups = sql("SELECT count(*) FROM strand.history h JOIN strand.instances i ON"
                            " i.id = h.instance_id WHERE i.definition_name = '%s' AND h.kind = 'wakeup'", def_name);
    long long buffered = sql("SELECT count(*) FROM strand.history h JOIN strand.instances i ON"
                             " i.id = h.instance_id WHERE i.definition_name = '%s' AND h.kind = 'signal_buffered'",
                             def_name);
    CU_ASSERT_EQUAL(wakeups + buffered, 4LL * n_instances);
    for (int i = 0; i < n_instances; i++)
        free(ids[i]);
    free(ids);
    it_kill9(replica);
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_crash"))
        return 1;
    const char *n = getenv("STRAND_CRASH_N");
    if (n != NULL && atoi(n) > 0)
        n_instances = atoi(n);
    snprintf(def_name, sizeof def_name, "crash-%ld-%d", (long)time(NULL), (int)getpid());
    const char *seed_env = getenv("STRAND_TEST_SEED");
    seed = seed_env != NULL && seed_env[0] != '\0' ? (unsigned)strtoul(seed_env, NULL, 10)
                                                  : (unsigned)time(NULL) ^ (unsigned)getpid();
    fprintf(stderr, "test_crash: seed %u (replay: STRAND_TEST_SEED=%u STRAND_CRASH_N=%d)\n", seed,
            seed, n_instances);
    static const it_case_t cases[] = {
        {"kills and restarts: every instance completes exactly once", test_run_with_kills_and_restarts},
    };
    return it_run_suite("crash", cases, (int)(sizeof cases / sizeof cases[0]));
}
