/* test_blueprint.c - the lifecycle front end without servers: transitions, hooks
 * routed to consumers, notices for rejected and no-op events, repeating timeouts,
 * final states, stale timers, and validation pointers. */
#include <string.h>

#include "st_test.h"
#include "strand/engine.h"

#define ID "22222222-2222-4222-8222-222222222222"

static const char *blueprint =
    "{\"kind\":\"lifecycle\",\"name\":\"order\",\"version\":1,\"env\":\"test\",\"initial\":\"created\","
    "\"states\":[{\"name\":\"created\"},"
    "  {\"name\":\"paid\",\"timeout\":{\"after\":1000,\"event\":\"remind\",\"repeat\":{\"every\":\"'2s'\",\"max\":2}}},"
    "  {\"name\":\"shipped\",\"final\":true}],"
    "\"events\":[\"pay\",\"remind\",\"ship\"],"
    "\"transitions\":[{\"from\":\"created\",\"event\":\"pay\",\"to\":\"paid\"},"
    "  {\"from\":\"paid\",\"event\":\"remind\",\"to\":\"paid\"},"
    "  {\"from\":\"paid\",\"event\":\"ship\",\"to\":\"shipped\"}],"
    "\"transition_route\":\"app\","
    "\"routes\":{\"app\":{\"consumers\":[\"orders-app\"]},\"billing\":{\"consumers\":[\"billing\"]}},"
    "\"policies\":[{\"when\":{\"event\":\"pay\"},\"hooks\":[{\"code\":\"charge\",\"route\":\"billing\","
    "  \"payload\":{\"cents\":\"event.amount * 100\"}}]}]}";

static st_defn_t *defn;
static long long now = 1795400000000LL;

static int run(json_t **snap, const char *event_text, json_t **effects)
{
    json_error_t jerr;
    json_t *event = json_loads(event_text, 0, &jerr);
    st_run_result_t r;
    st_errbuf_t eb;
    st_err_t err = st_interp_run(defn, *snap, event, ID, now, &r, &eb);
    json_decref(event);
    if (err != ST_OK)
        return -(int)err;
    json_decref(*snap);
    *snap = r.snapshot;
    json_decref(*effects);
    *effects = r.effects;
    return (int)r.status;
}

static int count_type(const json_t *effects, const char *type, const char *field, const char *value)
{
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(effects, i, e)
        if (strcmp(json_string_value(json_object_get(e, "type")), type) == 0 &&
            (field == NULL || strcmp(json_string_value(json_object_get(e, field)) ?: "", value) == 0))
            n++;
    return n;
}

static const char *token(const json_t *snap)
{
    return json_string_value(json_object_get(json_object_get(snap, "waiting"), "token"));
}

static void test_flow_of_a_lifecycle(void)
{
    json_error_t jerr;
    json_t *doc = json_loads(blueprint, 0, &jerr);
    json_t *problems = NULL;
    CU_ASSERT_EQUAL_FATAL(st_defn_compile(doc, &defn, &problems), ST_OK);
    json_decref(doc);
    CU_ASSERT_STRING_EQUAL(st_defn_kind(defn), "lifecycle");
    json_t *snap = NULL, *fx = NULL;
    CU_ASSERT_EQUAL(run(&snap, "{\"type\":\"START\",\"input\":{\"external_ref\":\"o-1\"}}", &fx), ST_RUN_WAITING);
    {
        json_t *waits = st_snapshot_waiting_signals(snap);
        CU_ASSERT_EQUAL(json_array_size(waits), 1);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(waits, 0)) ?: "", "*");
        json_decref(waits);
    }
    /* ship is not allowed from created */
    CU_ASSERT_EQUAL(run(&snap, "{\"type\":\"SIGNAL\",\"name\":\"ship\"}", &fx), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(count_type(fx, "emit_notice", "code", "TransitionRejected"), 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(snap, "current")), "created");
    /* pay: transition event, hook with computed payload, the state timeout armed */
    CU_ASSERT_EQUAL(run(&snap, "{\"type\":\"SIGNAL\",\"name\":\"pay\",\"payload\":{\"payload\":{\"amount\":12}}}", &fx),
                    ST_RUN_WAITING);
    CU_ASSERT_EQUAL(count_type(fx, "emit_work", "kind", "transition"), 1);
    CU_ASSERT_EQUAL(count_type(fx, "emit_work", "kind", "hook"), 1);
    size_t i;
    json_t *e;
    json_array_foreach(fx, i, e)
        if (strcmp(json_string_value(json_object_get(e, "kind")) ?: "", "hook") == 0) {
            CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(e, "payload"), "cents")), 1200);
            CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(json_object_get(e, "consumers"), 0)), "billing");
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e, "external_ref")), "o-1");
        }
    CU_ASSERT_EQUAL(count_type(fx, "set_timer", "kind", "state_timeout"), 1);
    /* pay again: already where it leads */
    CU_ASSERT_EQUAL(run(&snap, "{\"type\":\"SIGNAL\",\"name\":\"pay\"}", &fx), ST_RUN_WAITING);
    CU_ASSERT_EQUAL(count_type(fx, "emit_notice", "code", "NoOpAlreadyInState"), 1);
    /* timeout fires remind, then repeats every 2 s at most twice */
    char event[300];
    for (int round = 0; round < 3; round++) {
        char tok[200];
        snprintf(tok, sizeof tok, "%s", token(snap) ?: "");
        CU_ASSERT_TRUE(tok[0] != '\0');
        snprintf(event, sizeof event, "{\"type\":\"TIMER_DUE\",\"token\":\"%s\"}", tok);
        CU_ASSERT_EQUAL(run(&snap, event, &fx), ST_RUN_WAITING);
        CU_ASSERT_EQUAL(count_type(fx, "emit_notice", "code", "TimeoutTriggered"), 1);
        CU_ASSERT_EQUAL(count_type(fx, "emit_work", "event_code", "remind"), 1);
        CU_ASSERT_EQUAL(count_type(fx, "set_timer", NULL, NULL), round < 2 ? 1 : 0);
        /* the used token is stale now */
        CU_ASSERT_EQUAL(run(&snap, event, &fx), -ST_ERR_STALE);
    }
    CU_ASSERT_PTR_NULL(token(snap));
    CU_ASSERT_EQUAL(run(&snap, "{\"type\":\"SIGNAL\",\"name\":\"ship\"}", &fx), ST_RUN_COMPLETED);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(snap, "timeline")), 5);
    CU_ASSERT_EQUAL(run(&snap, "{\"type\":\"SIGNAL\",\"name\":\"pay\"}", &fx), -ST_ERR_STALE);
    json_decref(snap);
    json_decref(fx);
    st_defn_free(defn);
}

static void test_validation_pointers(void)
{
    const char *bad = "{\"kind\":\"lifecycle\",\"name\":\"b\",\"version\":1,\"initial\":\"zz\","
        "\"states\":[{\"name\":\"a\"},{\"name\":\"a\"},{\"name\":\"c\",\"timeout\":{\"after\":\"'x\"}}],"
        "\"events\":[\"go\", 3],\"transitions\":[{\"from\":\"a\",\"event\":\"nope\",\"to\":\"q\"},"
        "{\"from\":\"a\",\"event\":\"nope\",\"to\":\"a\"}],"
        "\"routes\":{\"r\":{\"consumers\":[]}},\"transition_route\":\"missing\",\"restart_after_final\":\"yes\","
        "\"policies\":[{\"when\":{\"to\":\"ghost\"},\"hooks\":[{\"route\":\"none\"}]}]}";
    json_error_t jerr;
    json_t *doc = json_loads(bad, 0, &jerr);
    st_defn_t *d = NULL;
    json_t *problems = NULL;
    CU_ASSERT_EQUAL(st_defn_compile(doc, &d, &problems), ST_ERR_INVALID);
    char *text = json_dumps(problems, 0);
    static const char *const expected[] = {"/env", "/initial", "/transition_route", "/states/1/name",
        "/states/2/timeout/after", "/states/2/timeout/event", "/events/1", "/transitions/0/to",
        "/transitions/0/event", "/transitions/1/event", "/routes/r/consumers", "/policies/0/when",
        "/policies/0/hooks/0/route", "/policies/0/hooks/0/code", "unreachable", "/restart_after_final", NULL};
    for (int i = 0; expected[i]; i++) {
        if (!strstr(text, expected[i]))
            fprintf(stderr, "\nmissing %s in %s\n", expected[i], text);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, expected[i]));
    }
    free(text);
    json_decref(problems);
    json_decref(doc);
}

ST_TEST_MAIN("blueprint", ST_TEST(test_flow_of_a_lifecycle), ST_TEST(test_validation_pointers))
