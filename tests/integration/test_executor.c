/*
 * test_executor.c - the executor against the real servers: poison messages go to the
 * dead-letter store (table + dlq topic) without blocking their partition, and the API
 * lists, replays and discards them; signals, cancel and terminate are validated and
 * enqueued; a cancelled instance ends and later signals are dropped as stale.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "strand/proto/strand.pb-c.h"
#include "st_test.h"

static char def_name[64];

static void test_start(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    char doc[512];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"greet\",\"type\":\"set\",\"values\":{\"greeting\":\"'hello ' + input.name\"}},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"message\":\"state.greeting\"}}]}",
             def_name);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 201);
}

static void test_poison_message_is_dead_lettered(void)
{
    long long before = it_sql_number("SELECT count(*) FROM strand.dead_letters");
    /* Not a protobuf Signal: the executor must dead-letter it, not crash or stall. */
    CU_ASSERT_EQUAL(it_sql_number("WITH ins AS (INSERT INTO strand.outbox (topic, key, payload)"
                                  " VALUES ('signals', 'poison', '\\xdeadbeef'::bytea) RETURNING 1),"
                                  " n AS (SELECT pg_notify('strand_outbox', ''))"
                                  " SELECT count(*) FROM ins, n"), 1);
    CU_ASSERT_EQUAL(it_wait_number("SELECT count(*) FROM strand.dead_letters", before + 1, 30),
                    before + 1);
    /* The partition is not blocked: a normal instance still completes. */
    char body[256];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{\"name\":\"after\"}}", def_name);
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances", body, &answer), 201);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s'"
             " AND status = 'completed'", json_string_value(json_object_get(answer, "id")));
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    json_decref(answer);
    /* The DLQ topic got the envelope too (through the outbox). */
    CU_ASSERT_TRUE(it_wait_number("SELECT count(*) FROM strand.outbox WHERE topic = 'dlq'"
                               " AND published_at IS NOT NULL", 1, 30) >= 1);
}

static void test_dead_letter_api(void)
{
    json_t *list = NULL;
    CU_ASSERT_EQUAL_FATAL(it_http(IT_API, "GET", "/v1/dead-letters?status=open", NULL, &list), 200);
    json_t *first = json_array_get(json_object_get(list, "items"), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(first);
    long long id = json_integer_value(json_object_get(first, "id"));
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(first, "reason")),
                                  "strand.v1.Signal"));
    json_decref(list);
    char path[128];
    json_t *one = NULL;
    snprintf(path, sizeof path, "/v1/dead-letters/%lld", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, &one), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(one, "payload_base64")), "3q2+7w==");
    json_decref(one);

    /* Replay: the same bytes go back to the signals topic and are dead-lettered again. */
    long long before = it_sql_number("SELECT count(*) FROM strand.dead_letters");
    snprintf(path, sizeof path, "/v1/dead-letters/%lld/replay", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", NULL), 200);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", NULL), 409);   /* at most once */
    CU_ASSERT_EQUAL(it_wait_number("SELECT count(*) FROM strand.dead_letters", before + 1, 30),
                    before + 1);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE id = %lld"
             " AND status = 'replayed'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);

    long long newest = it_sql_number("SELECT max(id) FROM strand.dead_letters");
    snprintf(path, sizeof path, "/v1/dead-letters/%lld/discard", newest);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", NULL), 200);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", NULL), 409);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/dead-letters/abc", NULL, NULL), 400);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/dead-letters/999999999", NULL, NULL), 404);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", "/v1/dead-letters?status=bogus", NULL, NULL), 400);
}

static void test_signal_validation(void)
{
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances/not-a-uuid/signals",
                            "{\"name\":\"x\"}", NULL), 400);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST",
                            "/v1/instances/00000000-0000-4000-8000-000000000000/signals",
                            "{\"name\":\"x\"}", &answer), 404);
    json_decref(answer);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/signals",
                            "{\"name\":\"x\",\"business_ref\":\"nobody\"}", NULL), 404);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/signals", "{\"name\":\"x\"}", &answer), 400);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "field")), "/business_ref");
    json_decref(answer);

    /* A completed instance refuses signals and control requests with 409. */
    char body[256];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{\"name\":\"z\"}}", def_name);
    CU_ASSERT_EQUAL_FATAL(it_http(IT_API, "POST", "/v1/instances", body, &answer), 201);
    char id[40];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(answer, "id")));
    json_decref(answer);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s'"
             " AND status = 'completed'", id);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 30), 1);
    char path[128];
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", &answer), 400);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "field")), "/name");
    json_decref(answer);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"name\":\"go\"}", NULL), 409);
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", NULL), 409);
}

static void test_kafka_ingress(void)
{
    char ref[96], args[384];
    snprintf(ref, sizeof ref, "ingress-%s", def_name);
    snprintf(args, sizeof args, "{\"definition\":\"%s\",\"business_ref\":\"%s\","
             "\"input\":{\"name\":\"kafka\"}}", def_name, ref);
    long long notices = it_sql_number("SELECT count(*) FROM strand.outbox WHERE topic = 'notices'");
    long long dead = it_sql_number("SELECT count(*) FROM strand.dead_letters");
    long long refused_before = it_sql_number(
        "SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE '%ingress'"
        " AND reason LIKE '%definition%'");
    const int start = STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_START;
    CU_ASSERT_TRUE_FATAL(it_produce_command(start, NULL, NULL, args));
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE business_ref = '%s'"
             " AND status = 'completed' AND output->>'message' = 'hello kafka'", ref);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);

    /* Refused by the command (unknown definition): notice + dead letter, no instance. */
    const char *bad_args = "{\"definition\":\"no-such-definition\"}";
    CU_ASSERT_TRUE(it_produce_command(start, NULL, NULL, bad_args));
    /* Not a protobuf at all. */
    const uint8_t junk[] = {0xff, 0xff, 0xff};
    CU_ASSERT_TRUE(it_produce_ingress(junk, sizeof junk));
    CU_ASSERT_EQUAL(it_wait_number("SELECT count(*) FROM strand.dead_letters", dead + 2, 30), dead + 2);
    CU_ASSERT_TRUE(it_sql_number("SELECT count(*) FROM strand.outbox WHERE topic = 'notices'") >=
                   notices + 2);
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM strand.dead_letters WHERE"
                                  " source_topic LIKE '%ingress' AND reason LIKE '%definition%'"),
                    refused_before + 1);
    /* ...and the partition moves on: a good command after the bad ones still runs. */
    snprintf(args, sizeof args, "{\"definition\":\"%s\",\"business_ref\":\"%s-2\"}",
             def_name, ref);
    CU_ASSERT_TRUE(it_produce_command(start, NULL, NULL, args));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE business_ref = '%s-2'",
             ref);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
}

static void test_stop(void)
{
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_executor"))
        return 1;
    snprintf(def_name, sizeof def_name, "exec-%ld-%d", (long)time(NULL), (int)getpid());
    static const it_case_t cases[] = {
        {"start", test_start},
        {"poison message is dead-lettered", test_poison_message_is_dead_lettered},
        {"dead letter API", test_dead_letter_api},
        {"signal validation", test_signal_validation},
        {"kafka ingress", test_kafka_ingress},
        {"stop", test_stop},
    };
    return it_run_suite("executor", cases, (int)(sizeof cases / sizeof cases[0]));
}
