/*
 * test_limits.c - bounded work (issue 21) end to end on the real servers, with the
 * default limits: a repeat that would hold an executor worker for hours fails with
 * budget_exceeded while the executor keeps serving another instance; a state that
 * grows eightfold per step fails with value_too_large; a start input nested too deep
 * is refused with 400; a definition that starts itself as a subworkflow stops at the
 * subworkflow depth limit; a diagram over the node limit is refused, and while one
 * is drawn another answers 503 diagram_busy and /healthz answers promptly. The limits
 * are the defaults but the diagram node limit (1,000 here). The figures (time to fail,
 * /healthz latency) are printed for the report.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

static char suffix[48];
static char hot_name[80], grow_name[80], plain_name[80], rec_name[80], big_name[80], slow_name[80];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *error_message(const json_t *instance)
{
    const char *m = json_string_value(json_object_get(json_object_get(instance, "error"), "message"));
    return m ? m : "";
}

static const char *error_code(const json_t *instance)
{
    const char *code = json_string_value(json_object_get(json_object_get(instance, "error"), "code"));
    return code ? code : "";
}

/* A flow of `n` waits with a timeout path: 2n nodes to draw, and a layout that grows
 * fast with n (951 steps, 1,902 nodes: 4.5 s of Graphviz on an idle machine; 450
 * steps, 900 nodes: over a second). */
static char *long_flow(const char *name, int n)
{
    size_t cap = (size_t)n * 200 + 256;
    char *doc = malloc(cap);
    size_t len = (size_t)snprintf(doc, cap, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":[", name);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(doc + len, cap - len,
                                "%s{\"id\":\"w%d\",\"type\":\"wait_signal\",\"name\":\"go\",\"timeout\":1000,"
                                "\"on_timeout\":[{\"id\":\"t%d\",\"type\":\"set\",\"values\":{\"v\":\"%d\"}}]}",
                                i ? "," : "", i, i, i);
    snprintf(doc + len, cap - len, "]}");
    return doc;
}

static void test_setup(void)
{
    /* Room for a diagram that takes over a second to draw (the default is 500 nodes,
     * drawn in well under one): test_diagram_does_not_stall needs one being drawn. */
    setenv("STRAND_DIAGRAM_MAX_NODES", "1000", 1);
    CU_ASSERT_FATAL(it_start_all(90));
    /* 40 keys of 30 terms each, repeated 100,000 times: hours of work in one run. */
    char *doc = malloc(65536);
    int len = snprintf(doc, 65536, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
                       "{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"100000\",\"body\":["
                       "{\"id\":\"hot\",\"type\":\"set\",\"values\":{", hot_name);
    for (int k = 0; k < 40; k++) {
        len += snprintf(doc + len, 65536 - len, "%s\"k%d\":\"0", k ? "," : "", k);
        for (int i = 0; i < 30; i++)
            len += snprintf(doc + len, 65536 - len, " + len(input.s)");
        len += snprintf(doc + len, 65536 - len, "\"");
    }
    snprintf(doc + len, 65536 - len, "}}]}]}");
    it_import(NULL, doc);
    /* x = [x, x, x, x, x, x, x, x]: eight times larger per step. */
    snprintf(doc, 65536, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"s\",\"type\":\"set\",\"values\":{\"x\":\"input.s\"}},"
             "{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"6\",\"body\":["
             "{\"id\":\"grow\",\"type\":\"set\",\"values\":{\"x\":\"[state.x, state.x, state.x, state.x,"
             " state.x, state.x, state.x, state.x]\"}}]}]}", grow_name);
    it_import(NULL, doc);
    snprintf(doc, 65536, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"n\":\"input.n + 1\"}}]}", plain_name);
    it_import(NULL, doc);
    /* A definition that starts itself, with no end. */
    snprintf(doc, 65536, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"again\",\"type\":\"subworkflow\",\"definition\":\"%s\",\"input\":{}}]}",
             rec_name, rec_name);
    it_import(NULL, doc);
    free(doc);
    doc = long_flow(big_name, 951);
    it_import(NULL, doc);
    free(doc);
    doc = long_flow(slow_name, 450);
    it_import(NULL, doc);
    free(doc);
}

/* The repeat fails with budget_exceeded (it ran for hours before), and while it runs
 * the executor still finishes another instance. */
static void test_repeat_budget(void)
{
    double t0 = now_s();
    char *hot = it_start_instance(NULL, hot_name, "{\"s\":\"abc\"}");
    char *plain = it_start_instance(NULL, plain_name, "{\"n\":41}");
    json_t *p = plain ? it_wait_instance(plain, "completed", 60) : NULL;
    CU_ASSERT_PTR_NOT_NULL(p);
    printf("\n  another instance completed %.2f s after the hot start\n", now_s() - t0);
    json_decref(p);
    json_t *h = hot ? it_wait_instance(hot, "failed", 60) : NULL;
    CU_ASSERT_PTR_NOT_NULL(h);
    printf("  the hot repeat ended with %s after %.2f s: %s\n", h ? error_code(h) : "(nothing)",
           now_s() - t0, h ? error_message(h) : "");
    CU_ASSERT_STRING_EQUAL(h ? error_code(h) : "", "budget_exceeded");
    json_decref(h);
    /* ...and the executor serves the next one as well. */
    char *again = it_start_instance(NULL, plain_name, "{\"n\":1}");
    json_t *a = again ? it_wait_instance(again, "completed", 60) : NULL;
    CU_ASSERT_PTR_NOT_NULL(a);
    json_decref(a);
    free(again);
    free(hot);
    free(plain);
}

/* The state multiplied by 8 per step fails with a code instead of growing to GBs. */
static void test_state_growth(void)
{
    char *id = it_start_instance(NULL, grow_name, "{\"s\":\"0123456789012345678901234567890123456789"
                                "012345678901234567890123456789012345678901234567890123456789\"}");
    json_t *inst = id ? it_wait_instance(id, "failed", 60) : NULL;
    CU_ASSERT_PTR_NOT_NULL(inst);
    printf("\n  the growing state ended with %s: %s\n", inst ? error_code(inst) : "(nothing)",
           inst ? error_message(inst) : "");
    CU_ASSERT_STRING_EQUAL(inst ? error_code(inst) : "", "value_too_large");
    json_decref(inst);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT octet_length(snapshot::text) FROM strand.runtime_states"
             " WHERE instance_id = '%s'", id ? id : "00000000-0000-4000-8000-000000000000");
    long long bytes = it_sql_number(sql);
    printf("  stored snapshot: %lld bytes\n", bytes);
    CU_ASSERT_TRUE(bytes > 0 && bytes < 4 << 20);
    free(id);
}

/* Data nested deeper than the limit is refused where it enters: 400, nothing stored. */
static void test_deep_input_refused(void)
{
    int depth = 200;
    char *input = malloc((size_t)depth * 2 + 64);
    size_t n = 0;
    n += (size_t)sprintf(input + n, "{\"x\":");
    for (int i = 0; i < depth; i++)
        input[n++] = '[';
    input[n++] = '1';
    for (int i = 0; i < depth; i++)
        input[n++] = ']';
    input[n++] = '}';
    input[n] = '\0';
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'",
             plain_name);
    long long before = it_sql_number(sql);
    size_t cap = n + 256;
    char *body = malloc(cap);
    snprintf(body, cap, "{\"definition\":\"%s\",\"input\":%s}", plain_name, input);
    json_t *answer = NULL;
    long status = it_http(IT_API, "POST", "/v1/instances", body, &answer);
    const char *message = json_string_value(json_object_get(answer, "message"));
    printf("\n  a start input %d deep: %ld %s\n", depth, status, message ? message : "");
    CU_ASSERT_EQUAL(status, 400);
    const char *code = json_string_value(json_object_get(answer, "code"));
    CU_ASSERT_STRING_EQUAL(code ? code : "", "limit_exceeded");
    CU_ASSERT_EQUAL(it_sql_number(sql), before);
    json_decref(answer);
    /* The other doors data comes in by: a signal's payload, a task's result, a trigger's
     * payload. Each is refused before anything is looked up or written. */
    static const struct { const char *path, *field, *fmt; } doors[] = {
        {"/v1/instances/00000000-0000-4000-8000-000000000000/signals", "/payload",
         "{\"name\":\"go\",\"payload\":%s}"},
        {"/v1/tasks/00000000-0000-4000-8000-000000000000/complete", "/result", "{\"result\":%s}"},
        {"/v1/triggers", "/payload", "{\"definition\":\"x\",\"external_ref\":\"r\",\"event\":\"e\","
         "\"request_id\":\"q\",\"payload\":%s}"},
    };
    for (size_t i = 0; i < sizeof doors / sizeof doors[0]; i++) {
        snprintf(body, cap, doors[i].fmt, input);
        answer = NULL;
        status = it_http(IT_API, "POST", doors[i].path, body, &answer);
        const char *c = json_string_value(json_object_get(answer, "code"));
        const char *f = json_string_value(json_object_get(answer, "field"));
        printf("  %s %s %d deep: %ld %s\n", doors[i].path, doors[i].field, depth, status, c ? c : "");
        CU_ASSERT_EQUAL(status, 400);
        CU_ASSERT_STRING_EQUAL(c ? c : "", "limit_exceeded");
        CU_ASSERT_STRING_EQUAL(f ? f : "", doors[i].field);
        json_decref(answer);
    }
    free(body);
    free(input);
}

/* A definition that starts itself stops at the subworkflow depth limit (10): the
 * deepest child fails with subworkflow_depth_exceeded and every ancestor fails. */
static void test_self_recursion_stops(void)
{
    double t0 = now_s();
    char *id = it_start_instance(NULL, rec_name, "{}");
    json_t *root = id ? it_wait_instance(id, "failed", 90) : NULL;
    CU_ASSERT_PTR_NOT_NULL(root);
    printf("\n  the root failed with %s after %.2f s\n", root ? error_code(root) : "(none)", now_s() - t0);
    CU_ASSERT_STRING_EQUAL(root ? error_code(root) : "", "child_failed");
    json_decref(root);
    sleep(2);   /* nothing more may start */
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'", rec_name);
    long long total = it_sql_number(sql);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND error->>'code' = 'subworkflow_depth_exceeded'", rec_name);
    long long deepest = it_sql_number(sql);
    printf("  instances: %lld (root + 10 levels), failed at the limit: %lld\n", total, deepest);
    CU_ASSERT_EQUAL(total, 11);
    CU_ASSERT_EQUAL(deepest, 1);
    free(id);
}

typedef struct {
    const char *path;
    long status;
    double seconds;
    volatile int done;
} draw_t;

static void *draw(void *arg)
{
    draw_t *d = arg;
    double t0 = now_s();
    char *raw = NULL;
    d->status = it_http_request(IT_API, NULL, "GET", d->path, NULL, &raw, NULL, 0);
    d->seconds = now_s() - t0;
    free(raw);
    d->done = 1;
    return NULL;
}

/* Polls /healthz every 20 ms until `*done`: each poll must answer 200 within 2 s (it
 * answers in milliseconds; the bound only keeps a busy machine from failing it).
 * Returns the slowest answer in seconds; *polls gets the count. */
static double healthz_until(volatile int *done, int *polls)
{
    double worst = 0;
    *polls = 0;
    while (!*done) {
        double t0 = now_s();
        long status = it_http(IT_API, "GET", "/healthz", NULL, NULL);
        double took = now_s() - t0;
        if (status != 200 || took >= 2.0)
            fprintf(stderr, "\n  /healthz answered %ld in %.3f s while a diagram was drawn\n", status, took);
        CU_ASSERT_EQUAL(status, 200);
        CU_ASSERT_TRUE(took < 2.0);
        if (took > worst)
            worst = took;
        (*polls)++;
        usleep(20 * 1000);
    }
    return worst;
}

/* The slow diagram, drawn by a client that retries on 503 diagram_busy as the answer
 * asks ("retry shortly"): a probe may hold the drawing for the few milliseconds a
 * small diagram takes just when this one tries. */
typedef struct {
    char path[200];
    long status;
    char ctype[64];
    int attempts;
    double seconds;
    volatile int done;
} slow_draw_t;

static void *slow_draw(void *arg)
{
    slow_draw_t *d = arg;
    double t0 = now_s();
    do {
        char *raw = NULL;
        d->attempts++;
        d->status = it_http_request(IT_API, NULL, "GET", d->path, NULL, &raw, d->ctype, sizeof d->ctype);
        free(raw);
        if (d->status == 503)
            usleep(20 * 1000);
    } while (d->status == 503 && d->attempts < 200);
    d->seconds = now_s() - t0;
    d->done = 1;
    return NULL;
}

/* Asks for the small diagram again and again until the slow one is drawn, counting
 * 503 diagram_busy answers (only the slow diagram can hold the drawing then: the
 * probes come one at a time) and 200s. */
typedef struct {
    char path[200];
    const volatile int *stop;
    int busy, drawn, other;
    long other_status;
} probe_t;

static void *probe(void *arg)
{
    probe_t *p = arg;
    while (!*p->stop) {
        json_t *answer = NULL;
        long status = it_http(IT_API, "GET", p->path, NULL, &answer);
        const char *code = json_string_value(json_object_get(answer, "code"));
        if (status == 503 && code != NULL && strcmp(code, "diagram_busy") == 0)
            p->busy++;
        else if (status == 200)
            p->drawn++;
        else {
            p->other++;
            p->other_status = status;
        }
        json_decref(answer);
        usleep(10 * 1000);
    }
    return NULL;
}

/* Diagrams are drawn on the command pool, one at a time, up to the node limit (here
 * 1,000: test_setup). A 1,902-node diagram is refused over the limit (422) while
 * /healthz answers. A 900-node one takes long enough to draw (over a second) that
 * requests for another diagram meanwhile answer 503 diagram_busy, while every /healthz
 * poll answers 200 promptly; then it is drawn (200 image/svg+xml), and the next
 * diagram is drawn again. */
static void test_diagram_does_not_stall(void)
{
    char path[200];
    int polls = 0;
    printf("\n");
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg", big_name);
    draw_t big = {path, 0, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, draw, &big);
    double worst = healthz_until(&big.done, &polls);
    pthread_join(th, NULL);
    printf("  %s: %ld in %.2f s; /healthz polled %d times, slowest %.3f s\n", big.path, big.status,
           big.seconds, polls, worst);
    CU_ASSERT_EQUAL(big.status, 422);

    slow_draw_t slow = {.status = 0};
    snprintf(slow.path, sizeof slow.path, "/v1/definitions/%s/1/diagram.svg", slow_name);
    probe_t pr = {.stop = &slow.done};
    snprintf(pr.path, sizeof pr.path, "/v1/definitions/%s/1/diagram.svg", plain_name);
    pthread_t slow_th, probe_th;
    pthread_create(&slow_th, NULL, slow_draw, &slow);
    pthread_create(&probe_th, NULL, probe, &pr);
    worst = healthz_until(&slow.done, &polls);
    pthread_join(slow_th, NULL);
    pthread_join(probe_th, NULL);
    printf("  %s: %ld (%s) in %.2f s after %d attempt(s); meanwhile another diagram answered"
           " 503 diagram_busy %d times and 200 %d times; /healthz polled %d times, slowest %.3f s\n",
           slow.path, slow.status, slow.ctype, slow.seconds, slow.attempts, pr.busy, pr.drawn, polls,
           worst);
    CU_ASSERT_EQUAL(slow.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(slow.ctype, "image/svg+xml"));
    CU_ASSERT_TRUE(pr.busy >= 1);
    if (pr.other > 0)
        fprintf(stderr, "\n  another diagram answered %ld (%d times)\n", pr.other_status, pr.other);
    CU_ASSERT_EQUAL(pr.other, 0);
    CU_ASSERT_TRUE(polls >= 1);
    /* the drawing is free again */
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", pr.path, NULL, NULL), 200);
}

static void test_stop(void)
{
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_limits"))
        return 1;
    snprintf(suffix, sizeof suffix, "%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(hot_name, sizeof hot_name, "hot-%s", suffix);
    snprintf(grow_name, sizeof grow_name, "grow-%s", suffix);
    snprintf(plain_name, sizeof plain_name, "plain-%s", suffix);
    snprintf(rec_name, sizeof rec_name, "rec-%s", suffix);
    snprintf(big_name, sizeof big_name, "big-%s", suffix);
    snprintf(slow_name, sizeof slow_name, "slow-%s", suffix);
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"a repeat's budget fails the instance; the executor keeps serving", test_repeat_budget},
        {"a state growing eightfold per step fails with a code", test_state_growth},
        {"a start input nested too deep is refused with 400", test_deep_input_refused},
        {"a self-recursive subworkflow stops at the depth limit", test_self_recursion_stops},
        {"diagrams: one at a time (503 diagram_busy), /healthz answers meanwhile", test_diagram_does_not_stall},
        {"stop", test_stop},
    };
    return it_run_suite("limits", cases, (int)(sizeof cases / sizeof cases[0]));
}
