/* test_interp.c - the run-to-wait interpreter: every construct, waiting tokens, stale
 * and out-of-order events, snapshot round trips, and a property test over random
 * event sequences. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_engine_test.h"
#include "st_test.h"
#include "strand/engine.h"

#define ID "11111111-1111-4111-8111-111111111111"
#define NOW 1795400000000LL

/* Runs one event; returns the status (or -err for an error) and replaces *snap. */
static int step(const st_defn_t *defn, json_t **snap, const char *event_text, json_t **effects)
{
    return st_et_run(defn, snap, st_et_load(event_text), ID, NOW, effects);
}

static const char *wait_token(const json_t *snap)
{
    return json_string_value(json_object_get(json_object_get(snap, "waiting"), "token"));
}

static void test_set_if_switch_loops_complete(void)
{
    st_defn_t *d = st_et_compile_steps("["
        "{\"id\":\"s\",\"type\":\"set\",\"values\":{\"n\":\"input.n\",\"sum\":\"0\"}},"
        "{\"id\":\"i\",\"type\":\"if\",\"condition\":\"state.n > 2\",\"then\":[{\"id\":\"big\",\"type\":\"set\",\"values\":{\"size\":\"'big'\"}}],"
        " \"else\":[{\"id\":\"small\",\"type\":\"set\",\"values\":{\"size\":\"'small'\"}}]},"
        "{\"id\":\"sw\",\"type\":\"switch\",\"cases\":[{\"when\":\"state.size == 'small'\",\"steps\":[{\"id\":\"c1\",\"type\":\"set\",\"values\":{\"k\":\"1\"}}]},"
        " {\"when\":\"state.size == 'big'\",\"steps\":[{\"id\":\"c2\",\"type\":\"set\",\"values\":{\"k\":\"2\"}}]}]},"
        "{\"id\":\"w\",\"type\":\"while\",\"condition\":\"state.n > 0\",\"max_iterations\":100,\"body\":["
        " {\"id\":\"acc\",\"type\":\"set\",\"values\":{\"sum\":\"state.sum + state.n\",\"n\":\"state.n - 1\"}}]},"
        "{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"3\",\"body\":[{\"id\":\"rb\",\"type\":\"set\",\"values\":{\"sum\":\"state.sum * 2\"}}]},"
        "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"sum\":\"state.sum\",\"size\":\"state.size\",\"k\":\"state.k\"}}]");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\",\"input\":{\"n\":4}}", &effects), ST_RUN_COMPLETED);
    json_t *out = json_object_get(snap, "output");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(out, "sum")), (4 + 3 + 2 + 1) * 8);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "size")), "big");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(out, "k")), 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(effects, 0), "type")), "complete");
    /* An ended instance takes no more events. */
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"SIGNAL\",\"name\":\"x\"}", NULL), -ST_ERR_STALE);
    json_decref(snap);
    json_decref(effects);
    st_defn_free(d);
}

static void test_loop_bound_and_expression_failure(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"w\",\"type\":\"while\",\"condition\":\"true\",\"max_iterations\":5,"
                                       "\"body\":[{\"id\":\"b\",\"type\":\"set\",\"values\":{\"x\":\"1\"}}]}]");
    json_t *snap = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", NULL), ST_RUN_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(json_object_get(snap, "error"), "message")),
                                  "max_iterations"));
    json_decref(snap);
    st_defn_free(d);
    d = st_et_compile_steps("[{\"id\":\"bad\",\"type\":\"set\",\"values\":{\"x\":\"1 / input.zero\"}}]");
    snap = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\",\"input\":{\"zero\":0}}", NULL), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(snap, "error"), "step")),
                           "/steps/0");
    json_decref(snap);
    st_defn_free(d);
}

static void test_task_and_stale_tokens(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"t\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"a\"],"
                                       "\"payload\":{\"amount\":\"input.amount\"},\"deadline\":\"'1h'\",\"result\":\"approval\"},"
                                       "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"ok\":\"state.approval.ok\"}}]");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\",\"input\":{\"amount\":7}}", &effects), ST_RUN_WAITING);
    json_t *open = json_array_get(effects, 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(open, "type")), "open_task");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(open, "payload"), "amount")), 7);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(open, "deadline_ms")), NOW + 3600000);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(open, "token")), wait_token(snap));
    json_t *before = json_deep_copy(snap);
    /* A stale token and a wrong event type change nothing. */
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"TASK_COMPLETED\",\"token\":\"old\",\"payload\":{}}", NULL),
                    -ST_ERR_STALE);
    char event[256];
    snprintf(event, sizeof event, "{\"type\":\"TIMER_DUE\",\"token\":\"%s\"}", wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, NULL), -ST_ERR_STALE);
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", NULL), -ST_ERR_STALE);
    CU_ASSERT_TRUE(json_equal(before, snap));
    snprintf(event, sizeof event,
             "{\"type\":\"TASK_COMPLETED\",\"token\":\"%s\",\"payload\":{\"result\":{\"ok\":true}}}",
             wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, NULL), ST_RUN_COMPLETED);
    CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(snap, "output"), "ok")));
    /* The same completion again: the wait is gone. */
    CU_ASSERT_EQUAL(step(d, &snap, event, NULL), -ST_ERR_STALE);
    json_decref(before);
    json_decref(effects);
    json_decref(snap);
    st_defn_free(d);
}

static void test_signal_timeout_and_conflict(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"w\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"sig\",\"timeout\":1000,"
                                       "\"on_timeout\":[{\"id\":\"late\",\"type\":\"set\",\"values\":{\"late\":\"true\"}}]},"
                                       "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"v\":\"state.sig.v\",\"late\":\"state.late\"}}]");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", &effects), ST_RUN_WAITING);
    json_t *timer = json_array_get(effects, 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(timer, "type")), "set_timer");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(timer, "due_ms")), NOW + 1000);
    {
        json_t *waits = st_snapshot_waiting_signals(snap);
        CU_ASSERT_EQUAL(json_array_size(waits), 1);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(waits, 0)) ?: "", "go");
        json_decref(waits);
    }
    /* Another name: the caller should buffer it. */
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"SIGNAL\",\"name\":\"other\"}", NULL), -ST_ERR_CONFLICT);
    json_t *waiting = json_deep_copy(snap);
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"SIGNAL\",\"name\":\"go\",\"payload\":{\"v\":5}}", NULL),
                    ST_RUN_COMPLETED);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(snap, "output"), "v")), 5);
    /* From the same waiting point, the timeout path instead. */
    char event[256];
    snprintf(event, sizeof event, "{\"type\":\"TIMER_DUE\",\"token\":\"%s\"}", wait_token(waiting));
    CU_ASSERT_EQUAL(step(d, &waiting, event, NULL), ST_RUN_COMPLETED);
    CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(waiting, "output"), "late")));
    json_decref(waiting);
    json_decref(effects);
    json_decref(snap);
    st_defn_free(d);
}

static void test_timer_call_retry_and_child(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"p\",\"type\":\"timer\",\"delay\":\"'2s'\"},"
        "{\"id\":\"c\",\"type\":\"call\",\"transport\":\"http\",\"request\":{\"url\":\"'http://w'\",\"body\":{\"n\":\"1\"}},"
        " \"retry\":{\"max_attempts\":2,\"backoff_ms\":100,\"multiplier\":3},\"result\":\"res\"},"
        "{\"id\":\"sub\",\"type\":\"subworkflow\",\"definition\":\"child\",\"input\":{\"x\":\"state.res.v\"},\"result\":\"child\"},"
        "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"child\":\"state.child\"}}]");
    json_t *snap = NULL, *effects = NULL;
    char event[512];
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", &effects), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_array_get(effects, 0), "due_ms")), NOW + 2000);
    snprintf(event, sizeof event, "{\"type\":\"TIMER_DUE\",\"token\":\"%s\"}", wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);
    json_t *call = json_array_get(effects, 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(call, "type")), "make_call");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(call, "attempt")), 1);
    const char *key = json_string_value(json_object_get(call, "idempotency_key"));
    CU_ASSERT_TRUE(key != NULL && strlen(key) > 2 && strcmp(key + strlen(key) - 2, ":c") == 0);
    /* Fails once: a retry timer with backoff 100 ms. */
    snprintf(event, sizeof event, "{\"type\":\"CALL_RESULT\",\"token\":\"%s\",\"payload\":{\"result\":{\"ok\":false}}}",
             wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(effects, 0), "kind")), "retry");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_array_get(effects, 0), "due_ms")), NOW + 100);
    snprintf(event, sizeof event, "{\"type\":\"RETRY_DUE\",\"token\":\"%s\"}", wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_array_get(effects, 0), "attempt")), 2);
    snprintf(event, sizeof event,
             "{\"type\":\"CALL_RESULT\",\"token\":\"%s\",\"payload\":{\"result\":{\"ok\":true,\"body\":{\"v\":9}}}}",
             wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);
    json_t *child = json_array_get(effects, 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(child, "type")), "start_child");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(child, "input"), "x")), 9);
    snprintf(event, sizeof event,
             "{\"type\":\"CHILD_COMPLETED\",\"token\":\"%s\",\"payload\":{\"status\":\"completed\",\"output\":{\"y\":1}}}",
             wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, NULL), ST_RUN_COMPLETED);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(json_object_get(snap, "output"), "child"), "y")), 1);
    json_decref(effects);
    json_decref(snap);
    st_defn_free(d);
}

static void test_parallel_join_all_and_any(void)
{
    const char *all = "[{\"id\":\"par\",\"type\":\"parallel\",\"branches\":["
        "[{\"id\":\"a\",\"type\":\"task\",\"name\":\"A\"}],"
        "[{\"id\":\"b\",\"type\":\"wait_signal\",\"name\":\"b\"}]]},"
        "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"a\":\"state.a\",\"b\":\"state.b\"}}]";
    st_defn_t *d = st_et_compile_steps(all);
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", &effects), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(json_array_size(effects), 1);   /* the task; the signal wait has no effect */
    char token[128], event[256];
    snprintf(token, sizeof token, "%s", json_string_value(json_object_get(json_array_get(effects, 0), "token")));
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"SIGNAL\",\"name\":\"b\",\"payload\":{\"v\":2}}", NULL), ST_RUN_WAITING);
    snprintf(event, sizeof event, "{\"type\":\"TASK_COMPLETED\",\"token\":\"%s\",\"payload\":{\"result\":{\"v\":1}}}", token);
    CU_ASSERT_EQUAL(step(d, &snap, event, NULL), ST_RUN_COMPLETED);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(json_object_get(snap, "output"), "b"), "v")), 2);
    json_decref(snap);
    st_defn_free(d);

    char any[1024];
    snprintf(any, sizeof any, "%s", all);
    char *at = strstr(any, "\"branches\"");
    memmove(at + 14, at, strlen(at) + 1);
    memcpy(at, "\"join\":\"any\", ", 14);
    d = st_et_compile_steps(any);
    snap = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", &effects), ST_RUN_WAITING);
    snprintf(token, sizeof token, "%s", json_string_value(json_object_get(json_array_get(effects, 0), "token")));
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"SIGNAL\",\"name\":\"b\"}", NULL), ST_RUN_COMPLETED);
    /* The losing branch's task is now stale. */
    snprintf(event, sizeof event, "{\"type\":\"TASK_COMPLETED\",\"token\":\"%s\",\"payload\":{}}", token);
    CU_ASSERT_EQUAL(step(d, &snap, event, NULL), -ST_ERR_STALE);
    json_decref(effects);
    json_decref(snap);
    st_defn_free(d);
}

/* A `join: any` branch that lost while the instance goes on: its task, call and child
 * waits come back as `abandon` effects (the executor ends what they own); an instance
 * that ends emits none (the executor ends everything it owns). A child cancelled on
 * its own fails the wait with code child_cancelled, into on_failure when there is one. */
static void test_abandoned_branches_and_ended_children(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"par\",\"type\":\"parallel\",\"join\":\"any\",\"branches\":["
        "[{\"id\":\"a\",\"type\":\"task\",\"name\":\"A\"}],"
        "[{\"id\":\"k\",\"type\":\"subworkflow\",\"definition\":\"kid\"}],"
        "[{\"id\":\"b\",\"type\":\"wait_signal\",\"name\":\"b\"}]]},"
        "{\"id\":\"c\",\"type\":\"subworkflow\",\"definition\":\"kid\",\"result\":\"c\","
        " \"on_failure\":[{\"id\":\"f\",\"type\":\"set\",\"values\":{\"why\":\"state.c.code\"}}]},"
        "{\"id\":\"d\",\"type\":\"subworkflow\",\"definition\":\"kid\"}]");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", &effects), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(json_array_size(effects), 2);   /* open_task, start_child */
    char task_token[128], child_token[128], event[300];
    snprintf(task_token, sizeof task_token, "%s", json_string_value(json_object_get(json_array_get(effects, 0), "token")));
    snprintf(child_token, sizeof child_token, "%s", json_string_value(json_object_get(json_array_get(effects, 1), "token")));
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"SIGNAL\",\"name\":\"b\"}", &effects), ST_RUN_WAITING);
    int abandoned_task = 0, abandoned_child = 0;
    size_t i;
    json_t *e;
    json_array_foreach(effects, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "type")), "abandon") != 0)
            continue;
        const char *token = json_string_value(json_object_get(e, "token"));
        abandoned_task += strcmp(token, task_token) == 0;
        abandoned_child += strcmp(token, child_token) == 0;
    }
    CU_ASSERT_EQUAL(abandoned_task, 1);
    CU_ASSERT_EQUAL(abandoned_child, 1);
    /* step c: the child is cancelled on its own: on_failure sees child_cancelled */
    snprintf(event, sizeof event, "{\"type\":\"CHILD_COMPLETED\",\"token\":\"%s\",\"payload\":"
             "{\"status\":\"cancelled\",\"error\":{\"code\":\"cancelled\"}}}", wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(snap, "state"), "why")),
                           "child_cancelled");
    /* step d has no on_failure: a terminated child fails the instance with its code */
    snprintf(event, sizeof event, "{\"type\":\"CHILD_COMPLETED\",\"token\":\"%s\",\"payload\":"
             "{\"status\":\"terminated\",\"error\":{\"code\":\"terminated\"}}}", wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(snap, "error"), "code")),
                           "child_terminated");
    json_array_foreach(effects, i, e)
        CU_ASSERT_STRING_NOT_EQUAL(json_string_value(json_object_get(e, "type")), "abandon");
    json_decref(effects);
    json_decref(snap);
    st_defn_free(d);
}

/* Property: random events against a waiting instance are either applied or refused as
 * stale/conflict, and a refused event never changes the snapshot. */
static void test_random_events_never_corrupt(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"loop\",\"type\":\"while\",\"condition\":\"true\",\"max_iterations\":1000,\"body\":["
        "{\"id\":\"t\",\"type\":\"task\",\"name\":\"T\",\"result\":\"t\"},"
        "{\"id\":\"s\",\"type\":\"wait_signal\",\"name\":\"s\",\"result\":\"s\"},"
        "{\"id\":\"z\",\"type\":\"timer\",\"delay\":10}]}]");
    json_t *snap = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", NULL), ST_RUN_WAITING);
    static const char *const types[] = {"TASK_COMPLETED", "SIGNAL", "TIMER_DUE", "CALL_RESULT", "CHILD_COMPLETED"};
    srand(7);
    int applied = 0;
    for (int i = 0; i < 2000; i++) {
        const char *type = types[rand() % 5];
        int use_current = rand() % 2;
        char event[300];
        if (strcmp(type, "SIGNAL") == 0 && rand() % 2)
            snprintf(event, sizeof event, "{\"type\":\"SIGNAL\",\"name\":\"%s\"}", rand() % 2 ? "s" : "q");
        else
            snprintf(event, sizeof event, "{\"type\":\"%s\",\"token\":\"%s\",\"payload\":{}}", type,
                     use_current ? wait_token(snap) : "bogus");
        json_t *before = json_deep_copy(snap);
        int rc = step(d, &snap, event, NULL);
        if (rc < 0) {
            CU_ASSERT_TRUE(rc == -ST_ERR_STALE || rc == -ST_ERR_CONFLICT);
            CU_ASSERT_TRUE(json_equal(before, snap));
        } else {
            CU_ASSERT_EQUAL(rc, ST_RUN_WAITING);
            applied++;
        }
        CU_ASSERT_PTR_NOT_NULL(wait_token(snap));
        json_decref(before);
    }
    CU_ASSERT_TRUE(applied > 100);
    json_decref(snap);
    st_defn_free(d);
}


/* Regression: a call inside a loop used to repeat its idempotency key on every
 * iteration (<instance>:<step>:<attempt>), so a worker deduplicating on it would drop
 * the second call. The key now names the visit; a retry keeps it whole (issue 16: it
 * used to end in the attempt number, so a worker keyed by it acted twice). */
static void test_call_in_loop_gets_a_key_per_visit(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"2\",\"body\":["
        "{\"id\":\"c\",\"type\":\"call\",\"transport\":\"http\",\"request\":{},"
        " \"retry\":{\"max_attempts\":2,\"backoff_ms\":10}}]}]");
    json_t *snap = NULL, *effects = NULL;
    char event[512], first[300], retry[300], second[300];
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", &effects), ST_RUN_WAITING);
    snprintf(first, sizeof first, "%s", json_string_value(json_object_get(json_array_get(effects, 0), "idempotency_key")));
    snprintf(event, sizeof event, "{\"type\":\"CALL_RESULT\",\"token\":\"%s\",\"payload\":{\"result\":{\"ok\":false}}}",
             wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);
    snprintf(event, sizeof event, "{\"type\":\"RETRY_DUE\",\"token\":\"%s\"}", wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);
    snprintf(retry, sizeof retry, "%s", json_string_value(json_object_get(json_array_get(effects, 0), "idempotency_key")));
    snprintf(event, sizeof event, "{\"type\":\"CALL_RESULT\",\"token\":\"%s\",\"payload\":{\"result\":{\"ok\":true}}}",
             wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);   /* second iteration */
    snprintf(second, sizeof second, "%s", json_string_value(json_object_get(json_array_get(effects, 0), "idempotency_key")));
    CU_ASSERT_EQUAL(strcmp(first + strlen(first) - 2, ":c"), 0);
    CU_ASSERT_STRING_EQUAL(first, retry);   /* same call, other attempt: same key */
    CU_ASSERT_STRING_NOT_EQUAL(first, second);
    json_decref(snap);
    json_decref(effects);
    st_defn_free(d);
}

/* Regression (issue 16): a Kafka call's timeout set no timer, so a call nobody answered
 * waited for ever. The timeout is now a durable timer on the call's own token; when it
 * fires first, the attempt fails (retry, then on_failure), and a late result is stale. */
static void test_kafka_call_timeout_is_a_timer(void)
{
    st_defn_t *d = st_et_compile_steps("[{\"id\":\"k\",\"type\":\"call\",\"transport\":\"kafka\","
        " \"consumers\":[\"billing\"],\"request\":{},\"timeout\":1500,"
        " \"retry\":{\"max_attempts\":2,\"backoff_ms\":10},"
        " \"on_failure\":[{\"id\":\"n\",\"type\":\"set\",\"values\":{\"gave_up\":true}}]},"
        "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"gave_up\":\"state.gave_up\","
        " \"timeout\":\"state.k.error.timeout\"}}]");
    json_t *snap = NULL, *effects = NULL;
    char event[512], token[200];
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", &effects), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(json_array_size(effects), 2);
    json_t *timer = json_array_get(effects, 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(timer, "type")), "set_timer");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(timer, "kind")), "call_timeout");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(timer, "due_ms")), NOW + 1500);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(timer, "token")), wait_token(snap));
    /* the timeout fires first: a retry timer */
    snprintf(token, sizeof token, "%s", wait_token(snap));
    snprintf(event, sizeof event, "{\"type\":\"TIMER_DUE\",\"token\":\"%s\"}", token);
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(effects, 0), "kind")), "retry");
    /* the first attempt's late result is stale */
    snprintf(event, sizeof event, "{\"type\":\"CALL_RESULT\",\"token\":\"%s\",\"payload\":{\"result\":{\"ok\":true}}}", token);
    CU_ASSERT_NOT_EQUAL(step(d, &snap, event, &effects), ST_RUN_COMPLETED);
    snprintf(event, sizeof event, "{\"type\":\"RETRY_DUE\",\"token\":\"%s\"}", wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_WAITING);
    snprintf(event, sizeof event, "{\"type\":\"TIMER_DUE\",\"token\":\"%s\"}", wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, event, &effects), ST_RUN_COMPLETED);
    CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(snap, "output"), "gave_up")));
    CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(snap, "output"), "timeout")));
    json_decref(snap);
    json_decref(effects);
    st_defn_free(d);
}

/* Rewind (st_interp_rewind): the restored waits are entered afresh with tokens above
 * the floor (a new task, a timer from its full duration), a parallel's branches each;
 * the tokens of the undone part answer nothing; an ended snapshot is refused. */
static void test_rewind_reenters_waits(void)
{
    st_defn_t *d = st_et_compile_steps("["
        "{\"id\":\"t\",\"type\":\"task\",\"name\":\"T\"},"
        "{\"id\":\"p\",\"type\":\"parallel\",\"branches\":["
        "  [{\"id\":\"w\",\"type\":\"timer\",\"delay\":1000}],"
        "  [{\"id\":\"s\",\"type\":\"wait_signal\",\"name\":\"go\"}]]},"
        "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]");
    json_t *snap = NULL, *effects = NULL;
    CU_ASSERT_EQUAL(step(d, &snap, "{\"type\":\"START\"}", NULL), ST_RUN_WAITING);
    json_t *at_task = json_deep_copy(snap);
    char ev[300];
    snprintf(ev, sizeof ev, "{\"type\":\"TASK_COMPLETED\",\"token\":\"%s\",\"payload\":{\"result\":{}}}",
             wait_token(snap));
    CU_ASSERT_EQUAL(step(d, &snap, ev, NULL), ST_RUN_WAITING);
    long long floor = st_snapshot_seq(snap);
    json_t *in_parallel = json_deep_copy(snap);
    /* back to the task: a new task with a token above the floor */
    st_run_result_t run = {0};
    st_errbuf_t eb;
    CU_ASSERT_EQUAL(st_interp_rewind(d, at_task, floor, ID, NOW, &run, &eb), ST_OK);
    CU_ASSERT_EQUAL(run.status, ST_RUN_WAITING);
    CU_ASSERT_EQUAL(json_array_size(run.effects), 1);
    json_t *e = json_array_get(run.effects, 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e, "type")), "open_task");
    char want[80];
    snprintf(want, sizeof want, "%s/%lld", ID, floor + 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e, "token")), want);
    CU_ASSERT_STRING_EQUAL(wait_token(run.snapshot), want);
    /* the old task's token answers nothing now */
    json_t *rewound = json_incref(run.snapshot);
    st_run_result_close(&run);
    snprintf(ev, sizeof ev, "{\"type\":\"TASK_COMPLETED\",\"token\":\"%s/1\",\"payload\":{\"result\":{}}}", ID);
    CU_ASSERT_EQUAL(step(d, &rewound, ev, NULL), -ST_ERR_STALE);
    json_decref(rewound);
    /* back into the parallel: the timer branch sets a new timer, the signal branch waits again */
    CU_ASSERT_EQUAL(st_interp_rewind(d, in_parallel, floor + 5, ID, NOW + 500, &run, &eb), ST_OK);
    int timers = 0;
    size_t i;
    json_array_foreach(run.effects, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "type")), "set_timer") == 0) {
            timers++;
            CU_ASSERT_EQUAL(json_integer_value(json_object_get(e, "due_ms")), NOW + 500 + 1000);
        }
    }
    CU_ASSERT_EQUAL(timers, 1);
    CU_ASSERT_TRUE(st_snapshot_seq(run.snapshot) > floor + 5);
    json_t *names = st_snapshot_waiting_signals(run.snapshot);
    CU_ASSERT_EQUAL(json_array_size(names), 1);
    json_decref(names);
    st_run_result_close(&run);
    /* an ended snapshot cannot be rewound to */
    json_t *ended = json_pack("{s:s}", "status", "completed");
    CU_ASSERT_EQUAL(st_interp_rewind(d, ended, floor, ID, NOW, &run, &eb), ST_ERR_STALE);
    json_decref(ended);
    json_decref(at_task);
    json_decref(in_parallel);
    json_decref(snap);
    json_decref(effects);
    st_defn_free(d);
}

ST_TEST_MAIN("interp", ST_TEST(test_set_if_switch_loops_complete),
             ST_TEST(test_loop_bound_and_expression_failure), ST_TEST(test_task_and_stale_tokens),
             ST_TEST(test_signal_timeout_and_conflict), ST_TEST(test_timer_call_retry_and_child),
             ST_TEST(test_parallel_join_all_and_any),
             ST_TEST(test_abandoned_branches_and_ended_children), ST_TEST(test_random_events_never_corrupt),
             ST_TEST(test_call_in_loop_gets_a_key_per_visit),
             ST_TEST(test_kafka_call_timeout_is_a_timer), ST_TEST(test_rewind_reenters_waits))
