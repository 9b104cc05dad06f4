/* test_engine_limits.c - the engine's bounds (issue 21): a run's budget (steps, expression
 * work, wall time), the size of values and of the snapshot, the depth of data entering
 * the engine, and the depth of subworkflows. Each limit fails the instance with its
 * code, leaves a snapshot that reads back, and is a setting (st_engine_set_limits). */
#include <stdlib.h>
#include <string.h>

#include "st_engine_test.h"
#include "st_test.h"
#include "strand/engine.h"

#define ID "22222222-2222-4222-8222-222222222222"
#define NOW 1795400000000LL

/* Runs `event` (taken) as st_et_run; returns the status or -err. */
static int run(const st_defn_t *defn, json_t **snap, json_t *event, json_t **effects)
{
    return st_et_run(defn, snap, event, ID, NOW, effects);
}

static json_t *start(const char *input_text)
{
    json_error_t jerr;
    json_t *input = json_loads(input_text ? input_text : "{}", 0, &jerr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(input);
    return json_pack("{s:s, s:o}", "type", "START", "input", input);
}

static const char *error_code(const json_t *snap)
{
    if (getenv("DEBUG_LIMITS")) {
        char *t = json_dumps(json_object_get(snap, "error"), 0);
        fprintf(stderr, "error: %s\n", t);
        free(t);
    }
    const char *code = json_string_value(json_object_get(json_object_get(snap, "error"), "code"));
    return code ? code : "";
}

static const char *error_message(const json_t *snap)
{
    const char *m = json_string_value(json_object_get(json_object_get(snap, "error"), "message"));
    return m ? m : "";
}

/* A JSON value nested `depth` arrays deep. */
static json_t *nested(int depth)
{
    json_t *v = json_integer(1);
    for (int i = 0; i < depth; i++)
        v = json_pack("[o]", v);
    return v;
}

/* The finding: a repeat of a step with expensive expressions held a worker for hours.
 * Now the run's expression work budget fails the instance with budget_exceeded. */
static void test_repeat_spends_the_work_budget(void)
{
    /* 40 keys, each 30 terms: about 3,600 work units a step */
    char *steps = malloc(65536);
    strcpy(steps, "[{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"100000\",\"body\":["
                  "{\"id\":\"hot\",\"type\":\"set\",\"values\":{");
    for (int k = 0; k < 40; k++) {
        sprintf(steps + strlen(steps), "%s\"k%d\":\"0", k ? "," : "", k);
        for (int i = 0; i < 30; i++)
            strcat(steps, " + len(input.s)");
        strcat(steps, "\"");
    }
    strcat(steps, "}}]}]");
    st_defn_t *d = st_et_compile_steps(steps);
    free(steps);
    json_t *snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, start("{\"s\":\"abc\"}"), NULL), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "budget_exceeded");
    CU_ASSERT_PTR_NOT_NULL(strstr(error_message(snap), "STRAND_RUN_MAX_WORK"));
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(json_object_get(snap, "error"), "step")),
                                  "/steps/0/body/0"));
    json_decref(snap);
    st_defn_free(d);
}

/* Cheap steps: the step budget. */
static void test_step_budget(void)
{
    st_engine_limits_t lim, saved = *st_engine_limits();
    st_engine_limits_default(&lim);
    lim.max_steps = 50;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_engine_set_limits(&lim, &eb), ST_OK);
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"1000\",\"body\":["
                                       "{\"id\":\"b\",\"type\":\"set\",\"values\":{\"x\":\"1\"}}]}]");
    json_t *snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, start(NULL), NULL), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "budget_exceeded");
    CU_ASSERT_PTR_NOT_NULL(strstr(error_message(snap), "STRAND_RUN_MAX_STEPS"));
    json_decref(snap);
    st_defn_free(d);
    st_engine_set_limits(&saved, &eb);
}

static long long fake_now;
static long long fake_clock(void)
{
    return fake_now += 100;   /* every look at the clock: 100 ms later */
}

/* Wall time, with an injected clock. */
static void test_wall_time_budget(void)
{
    st_engine_limits_t lim, saved = *st_engine_limits();
    st_engine_limits_default(&lim);
    lim.max_run_ms = 1000;
    lim.clock_ms = fake_clock;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_engine_set_limits(&lim, &eb), ST_OK);
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"1000\",\"body\":["
                                       "{\"id\":\"b\",\"type\":\"set\",\"values\":{\"x\":\"1\"}}]}]");
    json_t *snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, start(NULL), NULL), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "budget_exceeded");
    CU_ASSERT_PTR_NOT_NULL(strstr(error_message(snap), "STRAND_RUN_MAX_MS"));
    json_decref(snap);
    st_defn_free(d);
    st_engine_set_limits(&saved, &eb);
}

/* The finding: x = [x,x,x,x,x,x,x,x] multiplied the state by 8 per step (2 GB after
 * five steps). The value limit stops it at once, and the instance fails with a code. */
static void test_state_growth_by_copies(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"s\",\"type\":\"set\",\"values\":{\"x\":\"input.s\"}},"
        "{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"30\",\"body\":["
        "{\"id\":\"grow\",\"type\":\"set\",\"values\":{\"x\":\"[state.x, state.x, state.x, state.x,"
        " state.x, state.x, state.x, state.x]\"}}]}]");
    json_t *snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, start("{\"s\":\"0123456789012345678901234567890123456789\"}"), NULL),
                    ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "value_too_large");
    CU_ASSERT_PTR_NOT_NULL(strstr(error_message(snap), "STRAND_EXPR_MAX_VALUE_BYTES"));
    json_decref(snap);
    st_defn_free(d);
    /* Under the value limit but over the state limit: the set step fails with
     * state_too_large (each key copies a value that fits on its own). */
    d = st_et_compile_steps("[{\"id\":\"s\",\"type\":\"set\",\"values\":{\"a\":\"input.big\",\"b\":\"input.big\","
                            "\"c\":\"input.big\",\"d\":\"input.big\",\"e\":\"input.big\"}}]");
    char *big = malloc(900001);
    memset(big, 'q', 900000);
    big[900000] = '\0';
    json_t *ev = json_pack("{s:s, s:{s:s}}", "type", "START", "input", "big", big);
    free(big);
    snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, ev, NULL), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "state_too_large");
    json_decref(snap);
    st_defn_free(d);
}

/* Values that add up: each set is small, the snapshot is not; the run fails and the
 * stored snapshot drops the state. */
static void test_snapshot_size_limit(void)
{
    st_engine_limits_t lim, saved = *st_engine_limits();
    st_engine_limits_default(&lim);
    lim.max_state_bytes = 4096;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_engine_set_limits(&lim, &eb), ST_OK);
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"a\",\"type\":\"set\",\"values\":{\"a\":\"input.s + input.s\"}},"
                                       "{\"id\":\"b\",\"type\":\"set\",\"values\":{\"b\":\"input.s + input.s\"}},"
                                       "{\"id\":\"w\",\"type\":\"wait_signal\",\"name\":\"go\"}]");
    char s[1100];
    memset(s, 's', 1000);
    s[1000] = '\0';
    json_t *ev = json_pack("{s:s, s:{s:s}}", "type", "START", "input", "s", s);
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, ev, &effects), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "state_too_large");
    CU_ASSERT_EQUAL(json_object_size(json_object_get(snap, "state")), 0);
    CU_ASSERT_EQUAL(json_array_size(effects), 1);   /* only the fail effect */
    json_decref(effects);
    json_decref(snap);
    st_defn_free(d);
    st_engine_set_limits(&saved, &eb);
}

/* The finding: data nested 3,000 deep was stored and no wake-up could read it back.
 * A START input, a signal payload and data built step by step are all refused. */
static void test_data_depth(void)
{
    st_errbuf_t eb;
    json_t *deep = nested(3000);
    CU_ASSERT_EQUAL(st_engine_data_check(deep, &eb), ST_ERR_LIMIT);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_DATA_MAX_DEPTH"));
    json_t *ok = nested(60);
    CU_ASSERT_EQUAL(st_engine_data_check(ok, &eb), ST_OK);
    json_decref(ok);
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"w\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"got\"},"
                                       "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"got\":\"state.got\"}}]");
    /* START input */
    json_t *snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:{s:O}}", "type", "START", "input", "x", deep), NULL),
                    ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "data_too_deep");
    CU_ASSERT_EQUAL(json_object_size(json_object_get(snap, "input")), 0);
    json_decref(snap);
    /* a signal payload */
    snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, start(NULL), NULL), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:s, s:{s:O}}", "type", "SIGNAL", "name", "go",
                                            "payload", "x", deep), NULL),
                    ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "data_too_deep");
    CU_ASSERT_PTR_NOT_NULL(strstr(error_message(snap), "event's payload"));
    json_decref(snap);
    st_defn_free(d);
    json_decref(deep);
    /* a task result at the limit, inside the event's envelope {result: ...}, is taken */
    d = st_et_compile_steps("[{\"id\":\"t\",\"type\":\"task\",\"name\":\"T\",\"result\":\"r\"},"
                            "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"r\":\"len(state.r)\"}}]");
    snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, start(NULL), NULL), ST_RUN_WAITING);
    const char *token = json_string_value(json_object_get(json_object_get(snap, "waiting"), "token"));
    json_t *done = json_pack("{s:s, s:s, s:{s:{s:o}}}", "type", "TASK_COMPLETED", "token", token,
                             "payload", "result", "x", nested(63));
    CU_ASSERT_EQUAL(run(d, &snap, done, NULL), ST_RUN_COMPLETED);
    json_decref(snap);
    st_defn_free(d);
    /* built one level per step */
    d = st_et_compile_steps("[{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"200\",\"body\":["
                            "{\"id\":\"wrap\",\"type\":\"set\",\"values\":{\"x\":\"[state.x]\"}}]}]");
    snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, start(NULL), NULL), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "data_too_deep");
    CU_ASSERT_PTR_NOT_NULL(strstr(error_message(snap), "nested deeper"));
    json_decref(snap);
    st_defn_free(d);
}

/* The finding: a definition that starts itself recursed without a depth limit. A
 * child's depth is its parent's + 1 (START's payload carries it); past the limit the
 * subworkflow step fails with subworkflow_depth_exceeded and starts nothing. */
static void test_subworkflow_depth(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"me\",\"type\":\"subworkflow\",\"definition\":\"t\",\"input\":{}}]");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:{}, s:{s:i}}", "type", "START", "input",
                                            "payload", "depth", 3), &effects), ST_RUN_WAITING);
    json_t *child = json_array_get(effects, 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(child, "type")), "start_child");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(child, "depth")), 4);
    json_decref(snap);
    /* a root instance's child is at depth 1 */
    snap = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, start(NULL), &effects), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_array_get(effects, 0), "depth")), 1);
    json_decref(snap);
    /* at the limit: no child, a clear failure */
    snap = NULL;
    int max = st_engine_limits()->max_subworkflow_depth;
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:{}, s:{s:i}}", "type", "START", "input",
                                            "payload", "depth", max), &effects), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(snap), "subworkflow_depth_exceeded");
    CU_ASSERT_EQUAL(json_array_size(effects), 1);   /* the fail effect; no start_child */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(effects, 0), "type")), "fail");
    json_decref(effects);
    json_decref(snap);
    st_defn_free(d);
}

/* One budget for a wake-up: the runs that share it (a START, then a buffered signal
 * fed in the same wake-up) draw on the same steps. */
static void test_budget_shared_by_a_wakeup(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"a\",\"type\":\"set\",\"values\":{\"x\":\"1\"}},"
                                       "{\"id\":\"w\",\"type\":\"wait_signal\",\"name\":\"go\"},"
                                       "{\"id\":\"b\",\"type\":\"set\",\"values\":{\"y\":\"2\"}},"
                                       "{\"id\":\"done\",\"type\":\"complete\"}]");
    st_run_budget_t budget = {.steps_left = 3, .work_left = 1000000, .deadline_ms = 0};
    st_run_result_t r1, r2;
    st_errbuf_t eb;
    json_t *ev = start(NULL);
    CU_ASSERT_EQUAL_FATAL(st_interp_run_budget(d, NULL, ev, ID, NOW, &budget, &r1, &eb), ST_OK);
    json_decref(ev);
    CU_ASSERT_EQUAL(r1.status, ST_RUN_WAITING);
    CU_ASSERT_EQUAL(budget.steps_left, 1);
    ev = json_pack("{s:s, s:s, s:{}}", "type", "SIGNAL", "name", "go", "payload");
    CU_ASSERT_EQUAL_FATAL(st_interp_run_budget(d, r1.snapshot, ev, ID, NOW, &budget, &r2, &eb), ST_OK);
    CU_ASSERT_EQUAL(r2.status, ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(error_code(r2.snapshot), "budget_exceeded");
    st_run_result_close(&r2);
    /* a fresh budget (st_interp_run) completes the same instance */
    CU_ASSERT_EQUAL_FATAL(st_interp_run(d, r1.snapshot, ev, ID, NOW, &r2, &eb), ST_OK);
    CU_ASSERT_EQUAL(r2.status, ST_RUN_COMPLETED);
    st_run_result_close(&r2);
    st_run_result_close(&r1);
    json_decref(ev);
    st_defn_free(d);
}

static void test_settings_are_checked(void)
{
    st_engine_limits_t lim, saved = *st_engine_limits();
    st_errbuf_t eb;
    st_engine_limits_default(&lim);
    CU_ASSERT_EQUAL(lim.max_data_depth, 64);
    CU_ASSERT_EQUAL(lim.max_subworkflow_depth, 10);
    lim.max_data_depth = 0;
    CU_ASSERT_EQUAL(st_engine_set_limits(&lim, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "max_data_depth"));
    CU_ASSERT_EQUAL(st_engine_limits()->max_data_depth, saved.max_data_depth);   /* unchanged */
}

ST_TEST_MAIN("engine_limits", ST_TEST(test_repeat_spends_the_work_budget), ST_TEST(test_step_budget),
             ST_TEST(test_wall_time_budget), ST_TEST(test_state_growth_by_copies),
             ST_TEST(test_snapshot_size_limit), ST_TEST(test_data_depth),
             ST_TEST(test_subworkflow_depth), ST_TEST(test_budget_shared_by_a_wakeup),
             ST_TEST(test_settings_are_checked))
