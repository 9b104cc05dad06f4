/*
 * test_lifecycle.c - the lifecycle front end on the real servers: a blueprint is
 * imported; triggers over HTTP create the instance per external_ref and move it;
 * each transition and each hook its policies select becomes a work event for the
 * route's consumers, ACKed per consumer; a repeated request_id (DuplicateRequest), an
 * event not allowed from the state (TransitionRejected), an event leading to the
 * current state (NoOpAlreadyInState) and a repeating state timeout (TimeoutTriggered)
 * raise their notices; a final state completes the instance.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/proto/strand.pb-c.h"

static char name[64], ref[80], billing[64];

static long trigger(const char *event, const char *request_id, json_t **answer)
{
    char body[512];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"external_ref\":\"%s\",\"event\":\"%s\","
             "\"request_id\":\"%s\",\"actor\":\"clerk\",\"payload\":{\"amount\":12}}", name, ref,
             event, request_id);
    return it_http(IT_API, "POST", "/v1/triggers", body, answer);
}

static void test_lifecycle(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    char doc[3000];
    snprintf(doc, sizeof doc,
        "{\"kind\":\"lifecycle\",\"name\":\"%s\",\"version\":1,\"env\":\"test\",\"initial\":\"created\","
        "\"states\":[{\"name\":\"created\"},"
        "  {\"name\":\"paid\",\"timeout\":{\"after\":1000,\"event\":\"remind\",\"repeat\":{\"every\":1000,\"max\":2}}},"
        "  {\"name\":\"shipped\",\"final\":true}],"
        "\"events\":[\"pay\",\"remind\",\"ship\"],"
        "\"transitions\":[{\"from\":\"created\",\"event\":\"pay\",\"to\":\"paid\"},"
        "  {\"from\":\"paid\",\"event\":\"remind\",\"to\":\"paid\"},"
        "  {\"from\":\"paid\",\"event\":\"ship\",\"to\":\"shipped\"}],"
        "\"transition_route\":\"app\","
        "\"routes\":{\"app\":{\"consumers\":[\"orders-app\"]},"
        "  \"billing\":{\"consumers\":[{\"consumer\":\"%s\",\"delivery_timeout_s\":60}]}},"
        "\"policies\":[{\"when\":{\"event\":\"pay\"},\"hooks\":[{\"code\":\"charge-card\",\"route\":\"billing\","
        "  \"payload\":{\"amount\":\"event.amount * 100\"}}]}]}", name, billing);
    json_t *answer = NULL;
    long status = it_http(IT_API, "POST", "/v1/definitions", doc, &answer);
    if (status != 201) {
        char *t = json_dumps(answer, 0);
        fprintf(stderr, "\nimport: %ld %s\n", status, t);
        free(t);
    }
    CU_ASSERT_EQUAL_FATAL(status, 201);
    json_decref(answer);
    /* Stored normalised beside the canonical JSON. */
    char q[400];
    snprintf(q, sizeof q, "SELECT count(*) FROM strand.lc_transitions WHERE definition_name = '%s'", name);
    CU_ASSERT_EQUAL(it_sql_number(q), 3);
    snprintf(q, sizeof q, "SELECT count(*) FROM strand.lc_states WHERE definition_name = '%s'"
             " AND ((name = 'created' AND initial) OR (name = 'shipped' AND final))", name);
    CU_ASSERT_EQUAL(it_sql_number(q), 2);
    snprintf(q, sizeof q, "SELECT count(*) FROM strand.lc_hooks WHERE definition_name = '%s'"
             " AND code = 'charge-card' AND route = 'billing' AND when_event = 'pay'", name);
    CU_ASSERT_EQUAL(it_sql_number(q), 1);
    snprintf(q, sizeof q, "SELECT count(*) FROM strand.lc_routes WHERE definition_name = '%s'"
             " AND carries_transitions AND name = 'app'", name);
    CU_ASSERT_EQUAL(it_sql_number(q), 1);

    /* Not allowed from "created": rejected, nothing moves (the instance is created). */
    CU_ASSERT_EQUAL(trigger("ship", "r0", &answer), 202);
    char id[40];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(answer, "instance_id")));
    CU_ASSERT_TRUE(json_is_true(json_object_get(answer, "created")));
    json_decref(answer);
    CU_ASSERT_EQUAL(trigger("pay", "r1", &answer), 202);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "instance_id")) ?: "", id);
    CU_ASSERT_FALSE(json_is_true(json_object_get(answer, "created")));
    json_decref(answer);
    CU_ASSERT_EQUAL(trigger("pay", "r1", &answer), 200);   /* the same request again */
    CU_ASSERT_TRUE(json_is_true(json_object_get(answer, "duplicate")));
    json_decref(answer);
    /* Transition + hook: two work events for this instance, the hook's payload computed. */
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.work_events WHERE instance_id = '%s'"
             " AND event_code IN ('pay', 'charge-card')", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, 20), 2);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.acks a JOIN strand.work_events w USING (ack_guid)"
             " WHERE w.instance_id = '%s' AND w.kind = 'hook' AND a.consumer = '%s'", id, billing);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* The example consumer from the docs acknowledges the billing hook. */
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "%s/examples/strand-example-consumer --brokers %s --topic %swork"
             " --consumer %s --api http://127.0.0.1:%d --max 1 --timeout 60 >> %s/test_lifecycle-consumer.log 2>&1",
             it_bin_dir(), getenv("STRAND_KAFKA_BROKERS"), it_topic_prefix(), billing, it_port(IT_API),
             getenv("STRAND_TEST_LOG_DIR") ? getenv("STRAND_TEST_LOG_DIR") : "/tmp");
    CU_ASSERT_EQUAL(system(cmd), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.acks a JOIN strand.work_events w USING (ack_guid)"
             " WHERE w.instance_id = '%s' AND a.consumer = '%s' AND a.stage = 'done'", id, billing);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 10), 1);
    /* "pay" again from "paid": leads where it already is. */
    CU_ASSERT_EQUAL(trigger("pay", "r2", NULL), 202);
    /* The timeout fires "remind" after 1 s and repeats twice more (max 2). */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.work_events WHERE instance_id = '%s'"
             " AND event_code = 'remind'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 3, 20), 3);
    /* ...and no more: every timer the instance has armed has fired (a fourth remind's
     * would be armed by the third's wake-up), and "ship", sent after them, has been
     * worked after their TIMER_DUE signals (one key, one partition). */
    char timers[256], shipped[256];
    snprintf(timers, sizeof timers, "SELECT (count(*) = 0)::int FROM strand.timers"
             " WHERE instance_id = '%s' AND fired_at IS NULL", id);
    CU_ASSERT_EQUAL(it_wait_number(timers, 1, 10), 1);
    CU_ASSERT_EQUAL(trigger("ship", "r3", NULL), 202);
    snprintf(shipped, sizeof shipped, "SELECT count(*) FROM strand.instances WHERE id = '%s'"
             " AND status = 'completed' AND output->>'state' = 'shipped'", id);
    CU_ASSERT_EQUAL(it_wait_number(shipped, 1, 20), 1);
    CU_ASSERT_EQUAL(it_sql_number(sql), 3);
    /* Notices, counted where they were raised. */
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, "strand_notices_total{code=\"TransitionRejected\"}", 0) >= 1);
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, "strand_notices_total{code=\"NoOpAlreadyInState\"}", 0) >= 1);
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, "strand_notices_total{code=\"TimeoutTriggered\"}", 0) >= 3);
    CU_ASSERT_TRUE(it_metric(IT_API, "strand_notices_total{code=\"DuplicateRequest\"}", 0) >= 1);
    /* The timeline in the snapshot: pay, remind x3, ship. */
    char path[128];
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &answer), 200);
    json_t *timeline = json_object_get(json_object_get(answer, "snapshot"), "timeline");
    CU_ASSERT_EQUAL_FATAL(json_array_size(timeline), 5);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(timeline, 4), "to")), "shipped");
    json_decref(answer);
    /* Bad triggers: clear 4xx, nothing written. */
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/triggers", "{\"definition\":\"x\"}", &answer), 400);
    json_decref(answer);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/triggers",
                            "{\"definition\":\"nope\",\"external_ref\":\"a\",\"event\":\"e\",\"request_id\":\"1\"}",
                            NULL), 404);
    CU_ASSERT_TRUE(it_stop_all());
}

/* An order blueprint with a final Cancelled state and a reserve-inventory hook on pay;
 * `extra` is spliced into the document (blueprint options). Returns the HTTP status. */
static long import_order(const char *def, int version, const char *extra)
{
    char doc[2000];
    snprintf(doc, sizeof doc,
        "{\"kind\":\"lifecycle\",\"name\":\"%s\",\"version\":%d,\"env\":\"test\",\"initial\":\"Created\"%s,"
        "\"states\":[{\"name\":\"Created\"},{\"name\":\"Paid\"},{\"name\":\"Cancelled\",\"final\":true}],"
        "\"events\":[\"pay\",\"cancel\"],"
        "\"transitions\":[{\"from\":\"Created\",\"event\":\"pay\",\"to\":\"Paid\"},"
        "  {\"from\":\"Created\",\"event\":\"cancel\",\"to\":\"Cancelled\"},"
        "  {\"from\":\"Paid\",\"event\":\"cancel\",\"to\":\"Cancelled\"}],"
        "\"transition_route\":\"app\",\"routes\":{\"app\":{\"consumers\":[\"orders-app\"]}},"
        "\"policies\":[{\"when\":{\"event\":\"pay\"},\"hooks\":[{\"code\":\"reserve-inventory\",\"route\":\"app\"}]}]}",
        def, version, extra ? extra : "");
    json_t *answer = NULL;
    long status = it_http(IT_API, "POST", "/v1/definitions", doc, &answer);
    if (status != 201) {
        char *t = json_dumps(answer, 0);
        fprintf(stderr, "\nimport %s v%d: %ld %s\n", def, version, status, t);
        free(t);
    }
    json_decref(answer);
    return status;
}

/* POST /v1/triggers for (def, reference); version 0 sends none. */
static long trigger_ref(const char *def, const char *reference, const char *event, const char *request_id,
                        int version, json_t **answer)
{
    char body[600], v[32] = "";
    if (version > 0)
        snprintf(v, sizeof v, ",\"version\":%d", version);
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"external_ref\":\"%s\",\"event\":\"%s\","
             "\"request_id\":\"%s\"%s}", def, reference, event, request_id, v);
    json_t *got = NULL;
    long status = it_http(IT_API, "POST", "/v1/triggers", body, &got);
    if (answer)
        *answer = got;
    else
        json_decref(got);
    return status;
}

static long long count_for_ref(const char *what, const char *def, const char *reference)
{
    char sql[600];
    if (strcmp(what, "instances") == 0)
        snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
                 " AND business_ref = '%s'", def, reference);
    else if (strcmp(what, "running") == 0)
        snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
                 " AND business_ref = '%s' AND status NOT IN ('completed', 'failed', 'cancelled', 'terminated')",
                 def, reference);
    else   /* a work event with this code, any instance of the reference */
        snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.work_events w JOIN strand.instances i"
                 " ON i.id = w.instance_id WHERE i.definition_name = '%s' AND i.business_ref = '%s'"
                 " AND w.event_code = '%s'", def, reference, what);
    return it_sql_number(sql);
}

/* Issue 16: a lifecycle that reached a final state takes no further trigger (no new
 * instance, no hook) unless its blueprint says restart_after_final; a trigger without
 * a version goes to the reference's instance whatever its version; a repeated
 * request_id's DuplicateRequest notice names the instance. */
static void test_final_state_and_versions(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    char def[96], def2[96], reference[96], sql[700];
    snprintf(def, sizeof def, "%s-final", name);
    snprintf(def2, sizeof def2, "%s-restart", name);
    snprintf(reference, sizeof reference, "%s-a", ref);
    CU_ASSERT_EQUAL_FATAL(import_order(def, 1, NULL), 201);
    CU_ASSERT_EQUAL_FATAL(import_order(def2, 1, ",\"restart_after_final\":true"), 201);

    /* cancel: Created -> Cancelled (final) */
    json_t *answer = NULL;
    CU_ASSERT_EQUAL_FATAL(trigger_ref(def, reference, "cancel", "c1", 0, &answer), 202);
    char id[40];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(answer, "instance_id")) ?: "");
    json_decref(answer);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s' AND status = 'completed'"
             " AND output->>'state' = 'Cancelled'", id);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 20), 1);
    /* pay after the final state: refused, nothing opened, nothing raised */
    long status = trigger_ref(def, reference, "pay", "p1", 0, &answer);
    char *text = json_dumps(answer, JSON_COMPACT);
    printf("\n  pay after Cancelled: %ld %s\n", status, text ? text : "");
    free(text);
    CU_ASSERT_EQUAL(status, 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "code")) ?: "", "transition_rejected");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "instance_id")) ?: "", id);
    json_decref(answer);
    /* What a wrongly accepted trigger would have raised: a new instance (the API's own
     * insert, there with its answer) or a signal to this one, worked before a marker
     * sent after it. */
    CU_ASSERT_TRUE(it_marker_worked(id));
    CU_ASSERT_EQUAL(count_for_ref("instances", def, reference), 1);
    CU_ASSERT_EQUAL(count_for_ref("reserve-inventory", def, reference), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE topic = 'notices' AND key = '%s'"
             " AND position('TransitionRejected'::bytea in payload) > 0", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* the refused request id was not used up: the same request still refuses */
    CU_ASSERT_EQUAL(trigger_ref(def, reference, "pay", "p1", 0, NULL), 409);

    /* A blueprint that opts in starts a new instance after the final state. */
    CU_ASSERT_EQUAL(trigger_ref(def2, reference, "cancel", "c1", 0, &answer), 202);
    char first[40];
    snprintf(first, sizeof first, "%s", json_string_value(json_object_get(answer, "instance_id")) ?: "");
    json_decref(answer);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s' AND status = 'completed'", first);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 20), 1);
    CU_ASSERT_EQUAL(trigger_ref(def2, reference, "pay", "p1", 0, &answer), 202);
    CU_ASSERT_TRUE(json_is_true(json_object_get(answer, "created")));
    CU_ASSERT_STRING_NOT_EQUAL(json_string_value(json_object_get(answer, "instance_id")) ?: first, first);
    json_decref(answer);
    CU_ASSERT_EQUAL(count_for_ref("instances", def2, reference), 2);

    /* Versions: an instance on v1, then v2 imported; a trigger without a version goes
     * to the v1 instance, one naming v2 is refused, and one instance runs. */
    char vref[96];
    snprintf(vref, sizeof vref, "%s-v", ref);
    CU_ASSERT_EQUAL(trigger_ref(def, vref, "pay", "v-p1", 0, &answer), 202);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(answer, "instance_id")) ?: "");
    json_decref(answer);
    CU_ASSERT_EQUAL_FATAL(import_order(def, 2, NULL), 201);
    /* the unique key itself: a second running lifecycle instance for the reference,
     * on the new version, is refused by PostgreSQL (the query errs: -1) */
    snprintf(sql, sizeof sql, "WITH x AS (INSERT INTO strand.instances (id, definition_name, definition_version,"
             " business_ref, status, lifecycle) VALUES (gen_random_uuid(), '%s', 2, '%s', 'waiting', true)"
             " RETURNING 1) SELECT count(*) FROM x", def, vref);
    fprintf(stderr, "(a unique-violation error is expected next)\n");
    CU_ASSERT_EQUAL(it_sql_number(sql), -1);
    CU_ASSERT_EQUAL(trigger_ref(def, vref, "cancel", "v-c2", 2, &answer), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "code")) ?: "", "version_conflict");
    json_decref(answer);
    CU_ASSERT_EQUAL(trigger_ref(def, vref, "cancel", "v-c1", 0, &answer), 202);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "instance_id")) ?: "", id);
    CU_ASSERT_FALSE(json_is_true(json_object_get(answer, "created")));
    json_decref(answer);
    CU_ASSERT_EQUAL(count_for_ref("instances", def, vref), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s' AND status = 'completed'"
             " AND definition_version = 1 AND output->>'state' = 'Cancelled'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 20), 1);
    CU_ASSERT_EQUAL(count_for_ref("instances", def, vref), 1);

    /* A repeated request_id: 200 duplicate, and its DuplicateRequest notice names the
     * instance (its outbox row is keyed by the instance id). */
    CU_ASSERT_EQUAL(trigger_ref(def, vref, "pay", "v-p1", 0, &answer), 200);
    CU_ASSERT_TRUE(json_is_true(json_object_get(answer, "duplicate")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "instance_id")) ?: "", id);
    json_decref(answer);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE topic = 'notices' AND key = '%s'"
             " AND position('DuplicateRequest'::bytea in payload) > 0", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    CU_ASSERT_TRUE(it_stop_all());
}

static void test_invalid_blueprint(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    const char *bad = "{\"kind\":\"lifecycle\",\"name\":\"bad-bp\",\"version\":1,\"env\":\"t\",\"initial\":\"a\","
        "\"states\":[{\"name\":\"a\"},{\"name\":\"b\"},{\"name\":\"island\"},"
        "  {\"name\":\"c\",\"timeout\":{\"after\":1000}}],"
        "\"events\":[\"go\"],\"transitions\":[{\"from\":\"a\",\"event\":\"go\",\"to\":\"b\"},"
        "  {\"from\":\"b\",\"event\":\"go\",\"to\":\"nowhere\"}],"
        "\"transition_route\":\"app\",\"routes\":{\"app\":{\"consumers\":[]}}}";
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", bad, &answer), 422);
    char *text = json_dumps(json_object_get(answer, "problems"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "/transitions/1/to"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "unreachable"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "/states/3/timeout/event"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "/routes/app/consumers"));
    free(text);
    json_decref(answer);
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_lifecycle"))
        return 1;
    snprintf(name, sizeof name, "order-lc-%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(ref, sizeof ref, "order-%d", (int)getpid());
    /* Consumers are named per run: the monitor may re-raise other runs' events into
     * this run's topic when runs share a database (one database, one deployment). */
    snprintf(billing, sizeof billing, "billing-%ld-%d", (long)time(NULL), (int)getpid());
    static const it_case_t cases[] = {
        {"triggers, hooks, notices, timeouts", test_lifecycle},
        {"invalid blueprint", test_invalid_blueprint},
        {"final state and versions", test_final_state_and_versions},
    };
    return it_run_suite("lifecycle", cases, (int)(sizeof cases / sizeof cases[0]));
}
