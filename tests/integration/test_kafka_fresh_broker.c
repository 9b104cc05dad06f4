/*
 * test_kafka_fresh_broker - regression: services started right after a Kafka broker
 * restart, on topics they create themselves, get their partitions within seconds.
 *
 * A just-restarted broker is still loading its coordinators when the services create
 * their topics and subscribe; the first metadata answer does not list the new topics
 * yet. librdkafka looked again only at its next metadata refresh, 5 minutes by
 * default, so the executor had no partitions and nothing ran for 5 minutes
 * (seen 2026-11-23 as a test_slice run hanging after a stack restart). Consumers now
 * refresh topic metadata every 5 s.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

static void test_instance_completes_after_broker_restart(void)
{
    CU_ASSERT_EQUAL_FATAL(it_stack("restart kafka"), 0);
    CU_ASSERT_TRUE_FATAL(it_start_all(90));
    char doc[512], name[64];
    snprintf(name, sizeof name, "fresh-%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"c\",\"type\":\"complete\",\"output\":{\"ok\":true}}]}", name);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 201);
    char body[160];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{}}", name);
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances", body, &answer), 201);
    const char *id = json_string_value(json_object_get(answer, "id"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    /* Well under the 5 minutes of librdkafka's default refresh. */
    json_t *done = it_wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    json_decref(answer);
}

int main(void)
{
    if (!it_init("test_kafka_fresh_broker"))
        return 1;
    static const it_case_t cases[] = {
        {"an instance completes on services started after a broker restart",
         test_instance_completes_after_broker_restart},
    };
    return it_run_suite("kafka_fresh_broker", cases, (int)(sizeof cases / sizeof cases[0]));
}
