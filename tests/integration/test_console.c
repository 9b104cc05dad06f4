/*
 * test_console.c - the web console (issue 19, docs/console.md) in a real browser:
 * Debian's chromium, headless, driven by puppeteer-core (web/test/console.test.mjs)
 * against the real services on the real stack.
 *
 * This program starts the services with four principals (an admin, an approver that
 * holds only a task role, "nobody" with no role, and a viewer), imports the definitions, makes
 * the data the scenarios need (a dead letter, 50 waiting instances), then runs the
 * browser script, which reports each scenario as passed or failed and writes a
 * screenshot of each page. A scenario whose route the tree does not serve yet fails
 * (it is not skipped). Server-side checks of the console's own routes (assets, CSP,
 * SPA fallback, whoami, 403s) are made here too, without a browser.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "strand/proto/strand.pb-c.h"

#define T_ADMIN "console-admin-token-0123456789"
#define T_APPROVER "console-approver-token-0123456789"
#define T_NOBODY "console-nobody-token-0123456789"
#define T_VIEWER "console-viewer-token-0123456789"
#define N_BULK 50

static char task_flow[64], bulk_flow[64], dl_flow[64];
static char task_instance[64], dl_instance[64];
static long long dead_letter_id;

static void test_start(void)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/strand-test-console-tokens-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"tokens\": ["
               "{\"token\": \"%s\", \"principal\": \"root\", \"roles\": [\"admin\"]},"
               "{\"token\": \"%s\", \"principal\": \"alice\", \"roles\": [\"approver\"]},"
               "{\"token\": \"%s\", \"principal\": \"nobody\", \"roles\": []},"
               "{\"token\": \"%s\", \"principal\": \"vera\", \"roles\": [\"viewer\"]}]}",
            T_ADMIN, T_APPROVER, T_NOBODY, T_VIEWER);
    fclose(f);
    setenv("STRAND_AUTH_FILE", path, 1);
    CU_ASSERT_FATAL(it_start_all(90));
    unlink(path);

    int pid = (int)getpid();
    snprintf(task_flow, sizeof task_flow, "ui_task_%d", pid);
    snprintf(bulk_flow, sizeof bulk_flow, "ui_bulk_%d", pid);
    snprintf(dl_flow, sizeof dl_flow, "ui_dl_%d", pid);
    char doc[2048];
    for (int v = 1; v <= 2; v++) {
        snprintf(doc, sizeof doc,
                 "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":%d,\"steps\":["
                 "{\"id\":\"init\",\"type\":\"set\",\"values\":{\"amount\":\"%s\"}},"
                 "{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve order\","
                 " \"roles\":[\"approver\"],\"result\":\"approval\",\"result_schema\":"
                 " {\"type\":\"object\",\"required\":[\"approved\",\"comment\"],"
                 "  \"properties\":{\"approved\":{\"type\":\"boolean\"},"
                 "  \"comment\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":200}}}},"
                 "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"ok\":\"state.approval.approved\"}}]}",
                 task_flow, v, v == 1 ? "100" : "200");
        CU_ASSERT_EQUAL_FATAL(it_req(IT_API, T_ADMIN, "POST", "/v1/definitions", doc, NULL), 201);
    }
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"hold\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", bulk_flow);
    CU_ASSERT_EQUAL_FATAL(it_req(IT_API, T_ADMIN, "POST", "/v1/definitions", doc, NULL), 201);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"hold\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"go\":\"state.go.go\"}}]}", dl_flow);
    CU_ASSERT_EQUAL_FATAL(it_req(IT_API, T_ADMIN, "POST", "/v1/definitions", doc, NULL), 201);

    /* an instance waiting on the approver's task (for the nobody principal's checks) */
    char *id = it_start_instance(T_ADMIN, task_flow, "{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    snprintf(task_instance, sizeof task_instance, "%s", id);
    free(id);
    /* 50 instances waiting for a signal, for the bulk cancel */
    for (int i = 0; i < N_BULK; i++) {
        id = it_start_instance(T_ADMIN, bulk_flow, "{}");
        CU_ASSERT_PTR_NOT_NULL_FATAL(id);
        free(id);
    }
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND status = 'waiting'", bulk_flow);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, N_BULK, 120), N_BULK);

    /* A dead letter: a signal with a wrong payload, for an instance waiting for it,
     * as the executor stores one (the message itself, its topic, the reason). Made here
     * rather than by making the executor fail three times: the console reads and
     * repairs it, which is what is tested. */
    id = it_start_instance(T_ADMIN, dl_flow, "{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    snprintf(dl_instance, sizeof dl_instance, "%s", id);
    free(id);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s'"
             " AND status = 'waiting'", dl_instance);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 60), 1);
    Strand__V1__Signal sig = STRAND__V1__SIGNAL__INIT;
    char signal_id[96];
    snprintf(signal_id, sizeof signal_id, "console-dl-%d", pid);
    sig.envelope_version = 1;
    sig.signal_id = signal_id;
    sig.instance_id = dl_instance;
    sig.type = STRAND__V1__SIGNAL_TYPE__SIGNAL_TYPE_EXTERNAL;
    sig.expected_version = -1;
    sig.name = "go";
    /* a JSON object, as repair's PUT .../payload edits only those (a payload that is not
     * JSON cannot be edited there) */
    static const char bad_payload[] = "{\"go\": \"tru\"}";
    sig.payload.data = (uint8_t *)bad_payload;
    sig.payload.len = strlen(bad_payload);
    uint8_t buf[512];
    size_t len = strand__v1__signal__pack(&sig, buf);
    char hex[1100];
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", buf[i]);
    char insert[2048];
    snprintf(insert, sizeof insert,
             "INSERT INTO strand.dead_letters (source_topic, source_partition, source_offset,"
             " instance_id, reason, attempts, node_id, payload, signal_id)"
             " VALUES ('%ssignals', 0, 0, '%s', 'invalid_payload', 3, 'executor-0',"
             " decode('%s', 'hex'), '%s')",
             it_topic_prefix(), dl_instance, hex, signal_id);
    CU_ASSERT_FATAL(it_sql_exec(insert));
    snprintf(sql, sizeof sql, "SELECT max(id) FROM strand.dead_letters WHERE signal_id = '%s'",
             signal_id);
    dead_letter_id = it_sql_number(sql);
    CU_ASSERT_FATAL(dead_letter_id > 0);
}

/* The console's routes without a browser: assets, headers, the SPA fallback, whoami. */
static void test_routes(void)
{
    char *text = NULL;
    CU_ASSERT_EQUAL(it_http_text(IT_API, "/ui/", &text), 200);
    CU_ASSERT_PTR_NOT_NULL(text ? strstr(text, "<div id=\"app\">") : NULL);
    free(text);
    text = NULL;
    /* a page route answers index.html (the app routes itself); a missing file 404 */
    CU_ASSERT_EQUAL(it_http_text(IT_API, "/ui/instances/00000000-0000-4000-8000-000000000000", &text), 200);
    CU_ASSERT_PTR_NOT_NULL(text ? strstr(text, "<div id=\"app\">") : NULL);
    free(text);
    text = NULL;
    CU_ASSERT_EQUAL(it_http_text(IT_API, "/ui/app-missing.js", &text), 404);
    free(text);
    /* whoami: 401 without a token, the caller with one */
    json_t *a = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, NULL, "GET", "/v1/whoami", NULL, NULL), 401);
    CU_ASSERT_EQUAL(it_req(IT_API, T_NOBODY, "GET", "/v1/whoami", NULL, &a), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "principal")) ?: "", "nobody");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "permissions")), 0);
    json_decref(a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_APPROVER, "GET", "/v1/whoami", NULL, &a), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(json_object_get(a, "roles"), 0)) ?: "",
                           "approver");
    json_decref(a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_NOBODY, "GET", "/v1/overview", NULL, NULL), 403);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", "/v1/overview", NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "per_minute")), 30);
    json_decref(a);
    char path[256];
    snprintf(path, sizeof path, "/v1/instance-counts?definition=%s", bulk_flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(a, "counts"), "waiting")),
                    N_BULK);
    json_decref(a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", "/v1/instance-counts?version=x", NULL, NULL), 400);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", "/v1/instance-counts?created_after=2026-02-30",
                           NULL, NULL), 400);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", "/v1/instance-counts?created_before=yesterday",
                           NULL, NULL), 400);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET",
                           "/v1/instance-counts?created_after=2026-01-01T00:00:00Z", NULL, NULL), 200);
    snprintf(path, sizeof path, "/v1/instances/%s/family", task_instance);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", path, NULL, &a), 200);
    CU_ASSERT_TRUE(json_is_null(json_object_get(a, "parent")));
    json_decref(a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_NOBODY, "GET", path, NULL, NULL), 403);
}

/* The browser scenarios (web/test/console.test.mjs); its exit status is the verdict. */
static void test_browser(void)
{
    const char *src = getenv("STRAND_TEST_SRC_DIR");
    const char *logs = getenv("STRAND_TEST_LOG_DIR");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "STRAND_UI_URL=http://127.0.0.1:%d STRAND_UI_ADMIN_TOKEN=%s STRAND_UI_APPROVER_TOKEN=%s"
             " STRAND_UI_NOBODY_TOKEN=%s STRAND_UI_VIEWER_TOKEN=%s STRAND_UI_TASK_FLOW=%s STRAND_UI_BULK_FLOW=%s"
             " STRAND_UI_BULK_COUNT=%d STRAND_UI_DEAD_LETTER=%lld STRAND_UI_DL_INSTANCE=%s"
             " STRAND_UI_TASK_INSTANCE=%s STRAND_UI_SCREENSHOTS=%s/console-screenshots"
             " timeout -k 10 420 node %s/web/test/console.test.mjs",
             it_port(IT_API), T_ADMIN, T_APPROVER, T_NOBODY, T_VIEWER, task_flow, bulk_flow, N_BULK,
             dead_letter_id, dl_instance, task_instance, logs ? logs : "/tmp", src ? src : ".");
    fflush(stdout);
    int rc = system(cmd);
    CU_ASSERT_EQUAL(rc, 0);
}

int main(void)
{
    if (!it_init("test_console"))
        return 1;
    static const it_case_t cases[] = {
        {"services, principals, definitions, 50 waiting instances, a dead letter", test_start},
        {"console routes: assets, SPA fallback, whoami, overview, counts, family", test_routes},
        {"browser scenarios (chromium, puppeteer-core)", test_browser},
    };
    return it_run_suite("console", cases, sizeof cases / sizeof cases[0]);
}
