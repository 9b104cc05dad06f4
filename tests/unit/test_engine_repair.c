/*
 * test_engine_repair.c - the engine's repair verbs (libs/engine repair.c, engine.h
 * st_repair_run): JSON Merge Patch (RFC 7386's examples), retry of a failed instance
 * with parallel branches (every thread alive at the failure comes back, a waiting one
 * opens its wait again), fail then retry, skip-wait's abandon effect, fire-timer, and
 * the verbs' refusals (not applicable: ST_ERR_CONFLICT; bad arguments: ST_ERR_INVALID)
 * that leave the snapshot untouched.
 */
#include "st_test.h"
#include "st_engine_test.h"

static const char *const ID = "00000000-0000-4000-8000-0000000000aa";

static void check_patch(const char *target, const char *patch, const char *want)
{
    json_t *t = st_et_load(target), *p = st_et_load(patch), *w = st_et_load(want);
    json_t *got = st_json_merge_patch(json_object_get(t, "v"), json_object_get(p, "v"));
    CU_ASSERT_TRUE(json_equal(got, json_object_get(w, "v")));
    if (!json_equal(got, json_object_get(w, "v"))) {
        char *g = json_dumps(got, JSON_ENCODE_ANY);
        fprintf(stderr, "\nmerge %s + %s = %s, want %s\n", target, patch, g, want);
        free(g);
    }
    json_decref(got);
    json_decref(t);
    json_decref(p);
    json_decref(w);
}

static void test_merge_patch(void)
{
    /* RFC 7386, appendix A */
    check_patch("{\"v\":{\"a\":\"b\"}}", "{\"v\":{\"a\":\"c\"}}", "{\"v\":{\"a\":\"c\"}}");
    check_patch("{\"v\":{\"a\":\"b\"}}", "{\"v\":{\"b\":\"c\"}}", "{\"v\":{\"a\":\"b\",\"b\":\"c\"}}");
    check_patch("{\"v\":{\"a\":\"b\"}}", "{\"v\":{\"a\":null}}", "{\"v\":{}}");
    check_patch("{\"v\":{\"a\":\"b\",\"b\":\"c\"}}", "{\"v\":{\"a\":null}}", "{\"v\":{\"b\":\"c\"}}");
    check_patch("{\"v\":{\"a\":[\"b\"]}}", "{\"v\":{\"a\":\"c\"}}", "{\"v\":{\"a\":\"c\"}}");
    check_patch("{\"v\":{\"a\":{\"b\":\"c\"}}}", "{\"v\":{\"a\":{\"b\":\"d\",\"c\":null}}}",
                "{\"v\":{\"a\":{\"b\":\"d\"}}}");
    check_patch("{\"v\":{\"a\":\"foo\"}}", "{\"v\":null}", "{\"v\":null}");
    check_patch("{\"v\":{\"e\":null}}", "{\"v\":{\"a\":1}}", "{\"v\":{\"e\":null,\"a\":1}}");
    check_patch("{\"v\":[1,2]}", "{\"v\":{\"a\":\"b\",\"c\":null}}", "{\"v\":{\"a\":\"b\"}}");
    check_patch("{\"v\":{}}", "{\"v\":{\"a\":{\"bb\":{\"ccc\":null}}}}", "{\"v\":{\"a\":{\"bb\":{}}}}");
}

/* Applies `verb` to *snap; on success replaces *snap and returns the run status, else
 * -err with *snap unchanged. *effects (if not NULL) gets the effects. */
static int repair(const st_defn_t *defn, json_t **snap, const st_repair_t *r, json_t **effects)
{
    st_run_result_t res;
    st_errbuf_t eb;
    json_t *before = json_deep_copy(*snap);
    st_err_t err = st_repair_run(defn, *snap, r, ID, 1000, NULL, &res, &eb);
    CU_ASSERT_TRUE(json_equal(before, *snap));   /* the stored snapshot is never touched */
    json_decref(before);
    if (err != ST_OK)
        return -(int)err;
    json_decref(*snap);
    *snap = json_incref(res.snapshot);
    if (effects) {
        json_decref(*effects);
        *effects = json_incref(res.effects);
    }
    int status = (int)res.status;
    st_run_result_close(&res);
    return status;
}

static int count_effects(const json_t *effects, const char *type)
{
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(effects, i, e)
        n += strcmp(json_string_value(json_object_get(e, "type")) ?: "", type) == 0;
    return n;
}

static const char *task_token(const json_t *effects)
{
    size_t i;
    json_t *e;
    json_array_foreach(effects, i, e)
        if (strcmp(json_string_value(json_object_get(e, "type")) ?: "", "open_task") == 0)
            return json_string_value(json_object_get(e, "token"));
    return NULL;
}

/* A parallel: one branch waits on a task, the other fails on bad data. Retry after a
 * patch: the task is opened again (a new token), the failed branch runs again. */
static void test_retry_parallel(void)
{
    st_defn_t *defn = st_et_compile_steps(
        "[{\"id\":\"fork\",\"type\":\"parallel\",\"join\":\"all\",\"branches\":["
        "  [{\"id\":\"ask\",\"type\":\"task\",\"name\":\"Ask\",\"result\":\"answer\"}],"
        "  [{\"id\":\"t\",\"type\":\"timer\",\"delay\":10},"
        "   {\"id\":\"calc\",\"type\":\"set\",\"values\":{\"n\":\"len(keys(state.word))\"}}]]},"
        " {\"id\":\"end\",\"type\":\"complete\",\"output\":{\"n\":\"state.n\",\"a\":\"state.answer.a\"}}]");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(st_et_run(defn, &snap, st_et_load("{\"type\":\"START\",\"input\":{}}"), ID, 0, &effects),
                    ST_RUN_WAITING);
    char old_task[200];
    snprintf(old_task, sizeof old_task, "%s", task_token(effects) ?: "");
    /* fire the timer of the second branch: its next step fails */
    st_repair_t fire = {.verb = ST_REPAIR_FIRE_TIMER};
    CU_ASSERT_EQUAL(repair(defn, &snap, &fire, &effects), ST_RUN_FAILED);
    const json_t *failure = json_object_get(snap, "failure");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(failure, "step")) ?: "", "/steps/0/branches/1/1");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(failure, "threads")), 3);
    /* retry before the fix fails the same way; patch is refused as not an object */
    st_repair_t bad = {.verb = ST_REPAIR_PATCH_VARIABLES, .patch = NULL};
    CU_ASSERT_EQUAL(repair(defn, &snap, &bad, NULL), -(int)ST_ERR_INVALID);
    json_t *patch = st_et_load("{\"word\":{\"a\":1,\"b\":2}}");
    st_repair_t fix = {.verb = ST_REPAIR_PATCH_VARIABLES, .patch = patch};
    CU_ASSERT_EQUAL(repair(defn, &snap, &fix, NULL), ST_RUN_FAILED);   /* still failed */
    st_repair_t unknown = {.verb = ST_REPAIR_RETRY, .step = "no_such_step"};
    CU_ASSERT_EQUAL(repair(defn, &snap, &unknown, NULL), -(int)ST_ERR_INVALID);
    st_repair_t retry = {.verb = ST_REPAIR_RETRY};
    CU_ASSERT_EQUAL(repair(defn, &snap, &retry, &effects), ST_RUN_WAITING);
    CU_ASSERT_PTR_NULL(json_object_get(snap, "failure"));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(snap, "state"), "n")), 2);
    CU_ASSERT_EQUAL(count_effects(effects, "open_task"), 1);   /* the task again, new token */
    CU_ASSERT_STRING_NOT_EQUAL(task_token(effects) ?: "", old_task);
    char event[400];
    snprintf(event, sizeof event, "{\"type\":\"TASK_COMPLETED\",\"token\":\"%s\",\"payload\":{\"result\":{\"a\":7}}}",
             task_token(effects) ?: "");
    CU_ASSERT_EQUAL(st_et_run(defn, &snap, st_et_load(event), ID, 2000, NULL), ST_RUN_COMPLETED);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(snap, "output"), "a")), 7);
    CU_ASSERT_EQUAL(repair(defn, &snap, &retry, NULL), -(int)ST_ERR_CONFLICT);   /* completed */
    json_decref(patch);
    json_decref(effects);
    json_decref(snap);
    st_defn_free(defn);
}

/* Retry from the parallel step itself (the failed branch's ancestor): the old branches
 * are dropped, the parallel forks anew (one task opened, not two). */
static void test_retry_from_fork(void)
{
    st_defn_t *defn = st_et_compile_steps(
        "[{\"id\":\"fork\",\"type\":\"parallel\",\"join\":\"all\",\"branches\":["
        "  [{\"id\":\"ask\",\"type\":\"task\",\"name\":\"Ask\",\"result\":\"answer\"}],"
        "  [{\"id\":\"t\",\"type\":\"timer\",\"delay\":10},"
        "   {\"id\":\"calc\",\"type\":\"set\",\"values\":{\"n\":\"len(keys(state.word))\"}}]]},"
        " {\"id\":\"end\",\"type\":\"complete\",\"output\":{\"n\":\"state.n\"}}]");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(st_et_run(defn, &snap, st_et_load("{\"type\":\"START\",\"input\":{}}"), ID, 0, NULL),
                    ST_RUN_WAITING);
    st_repair_t fire = {.verb = ST_REPAIR_FIRE_TIMER};
    CU_ASSERT_EQUAL(repair(defn, &snap, &fire, NULL), ST_RUN_FAILED);
    json_t *patch = st_et_load("{\"word\":{\"a\":1}}");
    st_repair_t fix = {.verb = ST_REPAIR_PATCH_VARIABLES, .patch = patch};
    CU_ASSERT_EQUAL(repair(defn, &snap, &fix, NULL), ST_RUN_FAILED);
    st_repair_t retry = {.verb = ST_REPAIR_RETRY, .step = "fork"};
    CU_ASSERT_EQUAL(repair(defn, &snap, &retry, &effects), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(count_effects(effects, "open_task"), 1);
    CU_ASSERT_EQUAL(count_effects(effects, "set_timer"), 1);
    size_t live = 0, i;
    json_t *t;
    json_array_foreach(json_object_get(snap, "threads"), i, t)
        live += !json_is_true(json_object_get(t, "done"));
    CU_ASSERT_EQUAL(live, 3);   /* the main line and the two new branches */
    CU_ASSERT_EQUAL(json_array_size(json_object_get(snap, "threads")), 3);
    json_decref(patch);
    json_decref(effects);
    json_decref(snap);
    st_defn_free(defn);
}

/* A process failed by its timeout: retry arms the timeout again (it does not fail at
 * once), and the state's wait is opened again. */
static void test_retry_process_timeout(void)
{
    st_defn_t *defn = st_et_compile_doc(
        "{\"kind\":\"process\",\"name\":\"p\",\"version\":1,\"timeout\":1000,\"queues\":[\"go\"],"
        "\"start\":[\"hold\"],\"states\":[{\"id\":\"hold\",\"wait_until\":{\"commands\":["
        "{\"type\":\"queue\",\"name\":\"go\"}]},\"next\":[\"done\"]},{\"id\":\"done\",\"complete\":{}}]}");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(st_et_run(defn, &snap, st_et_load("{\"type\":\"START\",\"input\":{}}"), ID, 0, NULL),
                    ST_RUN_WAITING);
    st_repair_t fire = {.verb = ST_REPAIR_FIRE_TIMER};
    CU_ASSERT_EQUAL(repair(defn, &snap, &fire, NULL), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(snap, "error"), "code")) ?: "",
                           "process_timeout");
    st_repair_t retry = {.verb = ST_REPAIR_RETRY};
    CU_ASSERT_EQUAL(repair(defn, &snap, &retry, &effects), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(count_effects(effects, "set_timer"), 1);   /* the timeout, again */
    json_t *names = st_snapshot_waiting_signals(snap);
    CU_ASSERT_EQUAL(json_array_size(names), 1);   /* the queue again */
    json_decref(names);
    json_decref(effects);
    json_decref(snap);
    st_defn_free(defn);
}

/* fail ends it with the operator's error; retry reopens the wait; skip-wait answers
 * the task with an abandon effect first; fire-timer needs a timer. */
static void test_fail_retry_skip(void)
{
    st_defn_t *defn = st_et_compile_steps(
        "[{\"id\":\"ask\",\"type\":\"task\",\"name\":\"Ask\",\"result\":\"answer\"},"
        " {\"id\":\"end\",\"type\":\"complete\",\"output\":{\"a\":\"state.answer.a\"}}]");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(st_et_run(defn, &snap, st_et_load("{\"type\":\"START\",\"input\":{}}"), ID, 0, NULL),
                    ST_RUN_WAITING);
    st_repair_t retry = {.verb = ST_REPAIR_RETRY};
    CU_ASSERT_EQUAL(repair(defn, &snap, &retry, NULL), -(int)ST_ERR_CONFLICT);   /* not failed */
    st_repair_t fire = {.verb = ST_REPAIR_FIRE_TIMER};
    CU_ASSERT_EQUAL(repair(defn, &snap, &fire, NULL), -(int)ST_ERR_CONFLICT);    /* no timer */
    json_t *noerr = st_et_load("{\"message\":\"no code\"}");
    st_repair_t bad_fail = {.verb = ST_REPAIR_FAIL, .error = noerr};
    CU_ASSERT_EQUAL(repair(defn, &snap, &bad_fail, NULL), -(int)ST_ERR_INVALID);
    json_t *error = st_et_load("{\"code\":\"ops\",\"message\":\"stop\"}");
    st_repair_t fail = {.verb = ST_REPAIR_FAIL, .error = error};
    CU_ASSERT_EQUAL(repair(defn, &snap, &fail, &effects), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(snap, "error"), "code")) ?: "", "ops");
    CU_ASSERT_EQUAL(count_effects(effects, "fail"), 1);
    CU_ASSERT_EQUAL(repair(defn, &snap, &fail, NULL), -(int)ST_ERR_CONFLICT);    /* failed already */
    CU_ASSERT_EQUAL(repair(defn, &snap, &retry, &effects), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(count_effects(effects, "open_task"), 1);
    json_t *payload = st_et_load("{\"a\":3}");
    st_repair_t skip = {.verb = ST_REPAIR_SKIP_WAIT, .payload = payload};
    CU_ASSERT_EQUAL(repair(defn, &snap, &skip, &effects), ST_RUN_COMPLETED);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(effects, 0), "type")) ?: "", "abandon");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(snap, "output"), "a")), 3);
    json_decref(payload);
    json_decref(error);
    json_decref(noerr);
    json_decref(effects);
    json_decref(snap);
    st_defn_free(defn);
}

ST_TEST_MAIN("engine_repair", ST_TEST(test_merge_patch), ST_TEST(test_retry_parallel), ST_TEST(test_retry_from_fork),
             ST_TEST(test_retry_process_timeout),
             ST_TEST(test_fail_retry_skip))
