/*
 * test_api.c - the HTTP API against the real servers, with authentication on.
 *
 * Every endpoint's success and error paths (problem+json with a stable code and the
 * offending field), the authorisation matrix (no token, unknown token, a developer
 * role, a task role holder, an admin: 401 and 403 distinct, operations the developer
 * role does not grant; every permission: test_permissions.c), definition diagrams
 * as SVG with an instance overlay, the definition schema, instance list filters and
 * cursor pagination, task result validation, the retention run, and the request time
 * limit.
 */
#include <curl/curl.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/proto/strand.pb-c.h"

#define T_ADMIN "h7-admin-token-0123456789"
#define T_ALICE "h7-alice-token-0123456789"   /* approver */
#define T_BOB "h7-bob-token-0123456789"       /* shipper */
#define T_CAROL "h7-carol-token-0123456789"   /* developer (defined in the token file) */
#define T_UNKNOWN "h7-nobody-token-0123456789"

static char flow[64], life[64];
static char inst_waiting[40];    /* waits in the approve task */
static char task_approve[40];

/* One request with an optional bearer token. Returns the status; *out the parsed
 * body (may be NULL), *raw the body text, *ctype the Content-Type (all optional). */
static long call(const char *token, const char *method, const char *path, const char *body,
                 json_t **out, char **raw, char *ctype, size_t ctype_len)
{
    char *own = NULL;
    char **text = raw != NULL ? raw : &own;
    long status = it_http_request(IT_API, token, method, path, body, text, ctype, ctype_len);
    if (out != NULL) {
        json_error_t jerr;
        *out = *text ? json_loads(*text, JSON_DECODE_ANY, &jerr) : NULL;
    }
    free(own);
    return status;
}

/* Asserts a problem answer: status, application/problem+json, code, and field. */
static void expect_problem(const char *token, const char *method, const char *path,
                           const char *body, long status, const char *code, const char *field)
{
    json_t *p = NULL;
    char ctype[128] = "";
    long got = call(token, method, path, body, &p, NULL, ctype, sizeof ctype);
    if (got != status || p == NULL ||
        strcmp(json_string_value(json_object_get(p, "code")) ?: "", code) != 0)
        fprintf(stderr, "\n%s %s: got %ld %s\n", method, path, got,
                json_string_value(json_object_get(p, "code")) ?: "(no code)");
    CU_ASSERT_EQUAL(got, status);
    CU_ASSERT_STRING_EQUAL(ctype, "application/problem+json");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(p, "status")), status);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "code")) ?: "", code);
    CU_ASSERT_PTR_NOT_NULL(json_string_value(json_object_get(p, "message")));
    if (field != NULL)
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "field")) ?: "(none)", field);
    json_decref(p);
}

/* Polls the instance until `want` (as admin). Returns 1 when reached. */
static int wait_status(const char *id, const char *want, int timeout_s)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    time_t deadline = time(NULL) + timeout_s;
    while (time(NULL) < deadline) {
        json_t *inst = NULL;
        it_req(IT_API, T_ADMIN, "GET", path, NULL, &inst);
        const char *status = json_string_value(json_object_get(inst, "status"));
        int done = status && strcmp(status, want) == 0;
        json_decref(inst);
        if (done)
            return 1;
        usleep(100 * 1000);
    }
    return 0;
}

static char *start(const char *token, const char *definition, const char *ref, long *status)
{
    char body[300];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"business_ref\":\"%s\",\"input\":{\"n\":1}}",
             definition, ref);
    json_t *a = NULL;
    long s = it_req(IT_API, token, "POST", "/v1/instances", body, &a);
    if (status)
        *status = s;
    const char *id = json_string_value(json_object_get(a, "id"));
    char *copy = id ? strdup(id) : NULL;
    json_decref(a);
    return copy;
}

/* The instance's open task id into `out` ("" if none within 10 s). */
static void first_task_of(const char *instance, char *out, size_t n)
{
    char *id = it_wait_open_task(T_ADMIN, instance, 10);
    snprintf(out, n, "%s", id ? id : "");
    free(id);
}

/* ---- a minimal XML well-formedness check for the SVG -------------------------------- */

/* Returns 1 if tags nest properly (<?..?>, <!..>, comments, self-closing handled). */
static int xml_well_formed(const char *s)
{
    char stack[64][64];
    int depth = 0, roots = 0;
    while ((s = strchr(s, '<')) != NULL) {
        if (strncmp(s, "<!--", 4) == 0) {
            s = strstr(s, "-->");
            if (s == NULL)
                return 0;
            continue;
        }
        const char *end = strchr(s, '>');
        if (end == NULL)
            return 0;
        if (s[1] == '?' || s[1] == '!') {
            s = end + 1;
            continue;
        }
        int closing = s[1] == '/';
        const char *name = s + 1 + closing;
        size_t len = strcspn(name, " \t\r\n/>");
        if (len == 0 || len >= 64)
            return 0;
        if (closing) {
            if (depth == 0 || strncmp(stack[depth - 1], name, len) != 0 || stack[depth - 1][len])
                return 0;
            depth--;
        } else if (end[-1] != '/') {
            if (depth == 64)
                return 0;
            if (depth == 0)
                roots++;
            memcpy(stack[depth], name, len);
            stack[depth][len] = '\0';
            depth++;
        }
        s = end + 1;
    }
    return depth == 0 && roots == 1;
}

/* The class attribute of the <g> with SVG id `id` (Graphviz writes '-' as &#45;). */
static void svg_class(const char *svg, const char *id, char *out, size_t n)
{
    char needle[200];
    char escaped[160];
    size_t j = 0;
    for (const char *p = id; *p && j + 6 < sizeof escaped; p++) {
        if (*p == '-') {
            memcpy(escaped + j, "&#45;", 5);
            j += 5;
        } else {
            escaped[j++] = *p;
        }
    }
    escaped[j] = '\0';
    snprintf(needle, sizeof needle, "<g id=\"%s\" class=\"", escaped);
    const char *p = strstr(svg, needle);
    out[0] = '\0';
    if (p == NULL)
        return;
    p += strlen(needle);
    size_t len = strcspn(p, "\"");
    snprintf(out, n, "%.*s", (int)len, p);
}

/* ---- the cases ---------------------------------------------------------------------- */

static void test_start_services(void)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/strand-test-api-tokens-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    /* carol develops: definitions, starting and signalling, reading; not terminate,
     * dead letters or the retention run. alice and bob hold task roles only
     * (undefined role names: tasks:read, tasks:act, instances:read). */
    fprintf(f, "{\"roles\": {\"developer\": [\"definitions:*\", \"instances:read\", \"instances:start\","
               "  \"instances:signal\", \"instances:operate\", \"triggers:send\", \"tasks:read\","
               "  \"acks:send\"]},"
               "\"tokens\": ["
               "{\"token\": \"%s\", \"principal\": \"root\", \"roles\": [\"admin\"]},"
               "{\"token\": \"%s\", \"principal\": \"alice\", \"roles\": [\"approver\"]},"
               "{\"token\": \"%s\", \"principal\": \"bob\", \"roles\": [\"shipper\"]},"
               "{\"token\": \"%s\", \"principal\": \"carol\", \"roles\": [\"developer\"]}]}",
            T_ADMIN, T_ALICE, T_BOB, T_CAROL);
    fclose(f);
    setenv("STRAND_API_REQUEST_TIMEOUT_MS", "2500", 1);
    snprintf(flow, sizeof flow, "api_flow_%d", (int)getpid());
    snprintf(life, sizeof life, "api_life_%d", (int)getpid());
    it_start_api_executor(path);
}

static void test_public_and_meta(void)
{
    char *text = NULL, ctype[128];
    CU_ASSERT_EQUAL(call(NULL, "GET", "/healthz", NULL, NULL, NULL, NULL, 0), 200);
    CU_ASSERT_EQUAL(call(NULL, "GET", "/metrics", NULL, NULL, &text, NULL, 0), 200);
    CU_ASSERT_TRUE(text != NULL && strstr(text, "strand_http_requests_total") != NULL);
    free(text);
    json_t *doc = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, NULL, "GET", "/v1/openapi.json", NULL, &doc), 200);
    CU_ASSERT_PTR_NOT_NULL(json_object_get(json_object_get(doc, "paths"),
                                           "/v1/definitions/{name}/{version}/diagram.svg"));
    json_decref(doc);
    /* The definition schema needs a caller, like every /v1 route but the document. */
    expect_problem(NULL, "GET", "/v1/schema/definition", NULL, 401, "unauthenticated", NULL);
    CU_ASSERT_EQUAL(call(T_CAROL, "GET", "/v1/schema/definition", NULL, &doc, NULL, ctype, sizeof ctype), 200);
    CU_ASSERT_STRING_EQUAL(ctype, "application/schema+json");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(doc, "title")) ?: "", "Strand workflow definition");
    json_decref(doc);
    /* Unknown routes and methods are problems too. */
    expect_problem(T_ADMIN, "GET", "/v1/nothing", NULL, 404, "route_not_found", NULL);
    expect_problem(T_ADMIN, "DELETE", "/v1/definitions", NULL, 405, "method_not_allowed", NULL);
}

static void test_definitions(void)
{
    char doc[2048];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"init\",\"type\":\"set\",\"values\":{\"n\":\"input.n\"}},"
             "{\"id\":\"check\",\"type\":\"if\",\"condition\":\"state.n > 0\","
             " \"then\":[{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"approver\"],"
             "   \"result\":\"approval\",\"result_schema\":{\"type\":\"object\",\"required\":[\"approved\"],"
             "   \"additionalProperties\":false,\"properties\":{\"approved\":{\"type\":\"boolean\"},"
             "   \"comment\":{\"type\":\"string\",\"maxLength\":20}}}}],"
             " \"else\":[{\"id\":\"refuse\",\"type\":\"fail\",\"error\":\"'no'\"}]},"
             "{\"id\":\"ship\",\"type\":\"task\",\"name\":\"Ship\",\"roles\":[\"shipper\"]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"ok\":\"state.approval.approved\"}}]}",
             flow);
    json_t *a = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", "/v1/definitions", doc, &a), 201);
    json_decref(a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", "/v1/definitions", doc, NULL), 200);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", "/v1/definitions/validate", doc, &a), 200);
    CU_ASSERT_TRUE(json_is_true(json_object_get(a, "valid")));
    json_decref(a);
    /* Same name and version, other content: immutable. */
    char other[2048];
    snprintf(other, sizeof other, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":"
             "[{\"id\":\"x\",\"type\":\"complete\",\"output\":{}}]}", flow);
    expect_problem(T_CAROL, "POST", "/v1/definitions", other, 409, "definition_exists", "/version");
    expect_problem(T_CAROL, "POST", "/v1/definitions", "{\"kind\":", 400, "invalid_json", "");
    expect_problem(T_CAROL, "POST", "/v1/definitions", "[1]", 400, "invalid_body", "");
    expect_problem(T_CAROL, "POST", "/v1/definitions/validate", "{\"kind\":\"flow\"}", 422,
                   "invalid_definition", "");
    /* A malformed result_schema is refused with its pointer. */
    snprintf(other, sizeof other, "{\"kind\":\"flow\",\"name\":\"%s_bad\",\"version\":1,\"steps\":"
             "[{\"id\":\"t\",\"type\":\"task\",\"name\":\"T\",\"result_schema\":{\"properties\":{\"a\":{\"type\":7}}}}]}",
             flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", "/v1/definitions", other, &a), 422);
    const char *ptr = json_string_value(json_object_get(json_array_get(json_object_get(a, "problems"), 0), "pointer"));
    CU_ASSERT_STRING_EQUAL(ptr ?: "", "/steps/0/result_schema/properties/a/type");
    json_decref(a);
    /* The lifecycle drawn later. */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"lifecycle\",\"name\":\"%s\",\"version\":1,\"env\":\"test\",\"initial\":\"created\","
             "\"states\":[{\"name\":\"created\"},{\"name\":\"paid\"},{\"name\":\"shipped\",\"final\":true},"
             "{\"name\":\"cancelled\",\"final\":true}],"
             "\"events\":[\"pay\",\"ship\",\"cancel\"],"
             "\"transitions\":[{\"from\":\"created\",\"event\":\"pay\",\"to\":\"paid\"},"
             "{\"from\":\"paid\",\"event\":\"ship\",\"to\":\"shipped\"},"
             "{\"from\":\"created\",\"event\":\"cancel\",\"to\":\"cancelled\"}],"
             "\"transition_route\":\"app\",\"routes\":{\"app\":{\"consumers\":[\"orders-app\"]}}}", life);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", "/v1/definitions", doc, NULL), 201);

    char path[256];
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", "/v1/definitions", NULL, &a), 200);
    CU_ASSERT_TRUE(json_array_size(json_object_get(a, "items")) >= 2);
    json_decref(a);
    /* pages: two pages of one follow each other */
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", "/v1/definitions?limit=1", NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "items")), 1);
    const char *next = json_string_value(json_object_get(a, "next_cursor"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(next);
    CURL *esc = curl_easy_init();
    char *cur = curl_easy_escape(esc, next, 0);
    snprintf(path, sizeof path, "/v1/definitions?limit=1&cursor=%s", cur);
    curl_free(cur);
    curl_easy_cleanup(esc);
    json_t *b = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &b), 200);
    json_t *first = json_array_get(json_object_get(a, "items"), 0), *second = json_array_get(json_object_get(b, "items"), 0);
    CU_ASSERT_FALSE(json_equal(json_object_get(first, "name"), json_object_get(second, "name")) &&
                    json_equal(json_object_get(first, "version"), json_object_get(second, "version")));
    json_decref(a);
    json_decref(b);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", "/v1/definitions?kind=lifecycle&limit=500", NULL, &a), 200);
    size_t i;
    json_t *item;
    int lifecycles_only = 1, has_life = 0;
    json_array_foreach(json_object_get(a, "items"), i, item) {
        lifecycles_only &= strcmp(json_string_value(json_object_get(item, "kind")) ?: "", "lifecycle") == 0;
        has_life |= strcmp(json_string_value(json_object_get(item, "name")) ?: "", life) == 0;
    }
    CU_ASSERT_TRUE(lifecycles_only && has_life);
    json_decref(a);
    expect_problem(T_CAROL, "GET", "/v1/definitions?kind=dag", NULL, 400, "invalid_kind", "/kind");
    expect_problem(T_CAROL, "GET", "/v1/definitions?cursor=abc", NULL, 400, "invalid_cursor", "/cursor");
    expect_problem(T_CAROL, "GET", "/v1/definitions?limit=501", NULL, 400, "invalid_limit", "/limit");
    snprintf(path, sizeof path, "/v1/definitions/%s", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(a, "version")), 1);
    CU_ASSERT_PTR_NOT_NULL(json_object_get(a, "canonical"));
    json_decref(a);
    snprintf(path, sizeof path, "/v1/definitions/%s/1", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, NULL), 200);
    snprintf(path, sizeof path, "/v1/definitions/%s/x1", flow);
    expect_problem(T_CAROL, "GET", path, NULL, 400, "invalid_version", "/version");
    expect_problem(T_CAROL, "GET", "/v1/definitions/no_such_definition_h7", NULL, 404,
                   "definition_not_found", NULL);
}

static void test_instances(void)
{
    long status = 0;
    char *id = start(T_CAROL, flow, "order-h7-1", &status);
    CU_ASSERT_EQUAL(status, 201);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    snprintf(inst_waiting, sizeof inst_waiting, "%s", id);
    free(id);
    CU_ASSERT_FATAL(wait_status(inst_waiting, "waiting", 30));
    first_task_of(inst_waiting, task_approve, sizeof task_approve);
    CU_ASSERT_FATAL(task_approve[0] != '\0');

    /* request_id makes a start idempotent. */
    char body[300];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"request_id\":\"h7-rid-%d\"}", flow, (int)getpid());
    json_t *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", "/v1/instances", body, &a), 201);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", "/v1/instances", body, &b), 200);
    CU_ASSERT_TRUE(json_equal(json_object_get(a, "id"), json_object_get(b, "id")));
    json_decref(a);
    json_decref(b);
    expect_problem(T_CAROL, "POST", "/v1/instances", "{\"definition\":\"\"}", 400, "invalid_field", "/definition");
    expect_problem(T_CAROL, "POST", "/v1/instances", "{\"definition\":\"x\",\"input\":[1]}", 400, "invalid_field", "/input");
    expect_problem(T_CAROL, "POST", "/v1/instances", "{\"definition\":\"no_such_def_h7\"}", 404,
                   "definition_not_found", "/definition");

    /* Three more with one business reference, for filters and pages. */
    for (int i = 0; i < 3; i++) {
        char *x = start(T_CAROL, flow, "batch-h7", NULL);
        CU_ASSERT_PTR_NOT_NULL(x);
        free(x);
    }
    char path[512];
    snprintf(path, sizeof path, "/v1/instances?definition=%s&business_ref=batch-h7&limit=2", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "items")), 2);
    const char *cursor = json_string_value(json_object_get(a, "next_cursor"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cursor);
    snprintf(path, sizeof path, "/v1/instances?definition=%s&business_ref=batch-h7&limit=2&cursor=%s", flow, cursor);
    json_decref(a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "items")), 1);
    CU_ASSERT_TRUE(json_is_null(json_object_get(a, "next_cursor")));
    json_decref(a);
    /* Time range: everything of this run is after 2000 and before 2100; none after 2100. */
    snprintf(path, sizeof path, "/v1/instances?definition=%s&created_after=2000-01-01T00:00:00Z&created_before=2100-01-01", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "items")), 5);
    json_decref(a);
    snprintf(path, sizeof path, "/v1/instances?definition=%s&created_after=2100-01-01", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "items")), 0);
    json_decref(a);
    /* Version: all five run version 1; none runs version 2 (the list used to ignore it,
     * and the console filtered one page at a time in the browser). */
    snprintf(path, sizeof path, "/v1/instances?definition=%s&version=1", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "items")), 5);
    json_decref(a);
    snprintf(path, sizeof path, "/v1/instances?definition=%s&version=2", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "items")), 0);
    json_decref(a);
    expect_problem(T_CAROL, "GET", "/v1/instances?version=two", NULL, 400, "invalid_version", "/version");
    snprintf(path, sizeof path, "/v1/instances?definition=%s&status=waiting&business_ref=order-h7-1", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "items")), 1);
    json_decref(a);
    expect_problem(T_CAROL, "GET", "/v1/instances?created_after=yesterday", NULL, 400, "invalid_time", "/created_after");
    expect_problem(T_CAROL, "GET", "/v1/instances?created_before=2026-02-30T25:00", NULL, 400, "invalid_time", "/created_before");
    expect_problem(T_CAROL, "GET", "/v1/instances?limit=0", NULL, 400, "invalid_limit", "/limit");
    expect_problem(T_CAROL, "GET", "/v1/instances?limit=501", NULL, 400, "invalid_limit", "/limit");
    expect_problem(T_CAROL, "GET", "/v1/instances?cursor=garbage", NULL, 400, "invalid_cursor", "/cursor");

    /* get, history, runtime ("why is it waiting") */
    snprintf(path, sizeof path, "/v1/instances/%s", inst_waiting);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(a, "waiting"), "kind")) ?: "", "task");
    json_decref(a);
    snprintf(path, sizeof path, "/v1/instances/%s/history", inst_waiting);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_TRUE(json_array_size(json_object_get(a, "items")) >= 1);
    json_decref(a);
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", inst_waiting);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "open_tasks")), 1);
    CU_ASSERT_TRUE(json_is_array(json_object_get(a, "waiting_for_signals")) &&
                   json_array_size(json_object_get(a, "waiting_for_signals")) == 0);
    CU_ASSERT_TRUE(json_is_array(json_object_get(a, "pending_timers")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(a, "waiting"), "kind")) ?: "", "task");
    json_decref(a);
    expect_problem(T_CAROL, "GET", "/v1/instances/not-a-uuid/runtime", NULL, 400, "invalid_id", "/id");
    expect_problem(T_CAROL, "GET", "/v1/instances/00000000-0000-4000-8000-000000000000", NULL, 404,
                   "instance_not_found", NULL);
    expect_problem(T_CAROL, "GET", "/v1/instances/00000000-0000-4000-8000-000000000000/runtime", NULL,
                   404, "instance_not_found", NULL);
}

static void test_diagram(void)
{
    char path[512], *svg = NULL, ctype[128] = "", cls[64];
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg", flow);
    CU_ASSERT_EQUAL(call(T_CAROL, "GET", path, NULL, NULL, &svg, ctype, sizeof ctype), 200);
    CU_ASSERT_STRING_EQUAL(ctype, "image/svg+xml");
    CU_ASSERT_FATAL(svg != NULL);
    CU_ASSERT_TRUE(xml_well_formed(svg));
    static const char *const ids[] = {"start", "step-init", "step-check", "step-approve",
                                      "step-refuse", "step-ship", "step-done", "end"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        svg_class(svg, ids[i], cls, sizeof cls);
        CU_ASSERT_STRING_EQUAL(cls, "node");   /* present, and no overlay without an instance */
    }
    free(svg);
    /* The overlay: init and check are on the path, approve is where it waits, the
     * rest not reached. */
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=%s", flow, inst_waiting);
    CU_ASSERT_EQUAL(call(T_CAROL, "GET", path, NULL, NULL, &svg, NULL, 0), 200);
    CU_ASSERT_FATAL(svg != NULL);
    CU_ASSERT_TRUE(xml_well_formed(svg));
    static const char *const want[][2] = {{"start", "node visited"}, {"step-init", "node visited"},
                                          {"step-check", "node visited"}, {"step-approve", "node waiting"},
                                          {"step-refuse", "node"}, {"step-ship", "node"},
                                          {"step-done", "node"}, {"end", "node"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        svg_class(svg, want[i][0], cls, sizeof cls);
        if (strcmp(cls, want[i][1]) != 0)
            fprintf(stderr, "\n%s: class \"%s\", want \"%s\"\n", want[i][0], cls, want[i][1]);
        CU_ASSERT_STRING_EQUAL(cls, want[i][1]);
    }
    free(svg);
    /* Errors */
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=nope", flow);
    expect_problem(T_CAROL, "GET", path, NULL, 400, "invalid_id", "/instance");
    snprintf(path, sizeof path, "/v1/definitions/%s/0/diagram.svg", flow);
    expect_problem(T_CAROL, "GET", path, NULL, 400, "invalid_version", "/version");
    snprintf(path, sizeof path, "/v1/definitions/%s/9/diagram.svg", flow);
    expect_problem(T_CAROL, "GET", path, NULL, 404, "definition_not_found", NULL);
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=00000000-0000-4000-8000-000000000000", flow);
    expect_problem(T_CAROL, "GET", path, NULL, 404, "instance_not_found", "/instance");
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=%s", life, inst_waiting);
    expect_problem(T_CAROL, "GET", path, NULL, 409, "instance_definition_mismatch", "/instance");

    /* A process: its states and next edges. Its instance waits in verify for the
     * queue "verified"; signalled, it moves to submit, whose call has no URL and fails. */
    char process_doc[1024];
    snprintf(process_doc, sizeof process_doc,
             "{\"kind\":\"process\",\"name\":\"%s_proc\",\"version\":1,\"queues\":[\"verified\"],"
             "\"start\":[\"verify\"],\"states\":["
             "{\"id\":\"verify\",\"wait_until\":{\"combine\":\"any_of\",\"commands\":[{\"type\":\"timer\","
             "\"delay\":\"'1h'\"},{\"type\":\"queue\",\"name\":\"verified\"}]},\"next\":[\"submit\"]},"
             "{\"id\":\"submit\",\"execute\":{\"transport\":\"http\",\"request\":{\"a\":\"1\"}},\"next\":[\"welcome\"]},"
             "{\"id\":\"welcome\",\"complete\":{\"ok\":true}}]}", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", "/v1/definitions", process_doc, NULL), 201);
    snprintf(path, sizeof path, "/v1/definitions/%s_proc/1/diagram.svg", flow);
    CU_ASSERT_EQUAL(call(T_CAROL, "GET", path, NULL, NULL, &svg, NULL, 0), 200);
    CU_ASSERT_FATAL(svg != NULL);
    CU_ASSERT_TRUE(xml_well_formed(svg));
    static const char *const states[] = {"start", "state-submit", "state-verify", "state-welcome"};
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        svg_class(svg, states[i], cls, sizeof cls);
        CU_ASSERT_STRING_EQUAL(cls, "node");
    }
    free(svg);
    char proc_name[96];
    snprintf(proc_name, sizeof proc_name, "%s_proc", flow);
    char *pid_ = start(T_CAROL, proc_name, proc_name, NULL);   /* a process id of its own */
    CU_ASSERT_PTR_NOT_NULL_FATAL(pid_);
    CU_ASSERT_TRUE(wait_status(pid_, "waiting", 30));
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", pid_);
    json_t *rt = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &rt), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(json_object_get(rt, "waiting_for_signals"), 0)) ?: "",
                           "verified");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(rt, "pending_timers")), 1);
    json_decref(rt);
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=%s", proc_name, pid_);
    CU_ASSERT_EQUAL(call(T_CAROL, "GET", path, NULL, NULL, &svg, NULL, 0), 200);
    CU_ASSERT_FATAL(svg != NULL);
    svg_class(svg, "state-verify", cls, sizeof cls);
    CU_ASSERT_STRING_EQUAL(cls, "node waiting");
    svg_class(svg, "start", cls, sizeof cls);
    CU_ASSERT_STRING_EQUAL(cls, "node visited");
    svg_class(svg, "state-submit", cls, sizeof cls);
    CU_ASSERT_STRING_EQUAL(cls, "node");
    free(svg);
    snprintf(path, sizeof path, "/v1/instances/%s/signals", pid_);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", path, "{\"name\":\"verified\"}", NULL), 202);
    CU_ASSERT_TRUE(wait_status(pid_, "failed", 30));
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=%s", proc_name, pid_);
    CU_ASSERT_EQUAL(call(T_CAROL, "GET", path, NULL, NULL, &svg, NULL, 0), 200);
    CU_ASSERT_FATAL(svg != NULL);
    svg_class(svg, "state-submit", cls, sizeof cls);
    CU_ASSERT_STRING_EQUAL(cls, "node failed");
    free(svg);
    free(pid_);

    /* A lifecycle: created -pay-> paid; the instance waits in paid. */
    char body[512];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"external_ref\":\"h7-order\",\"event\":\"pay\","
             "\"request_id\":\"h7-pay-%d\",\"actor\":\"clerk\"}", life, (int)getpid());
    json_t *a = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", "/v1/triggers", body, &a), 202);
    char lid[40] = "";
    snprintf(lid, sizeof lid, "%s", json_string_value(json_object_get(a, "instance_id")) ?: "");
    json_decref(a);
    CU_ASSERT_FATAL(lid[0] != '\0');
    snprintf(path, sizeof path, "/v1/instances/%s", lid);
    int moved = 0;
    for (int i = 0; i < 300 && !moved; i++) {
        it_req(IT_API, T_CAROL, "GET", path, NULL, &a);
        moved = json_integer_value(json_object_get(a, "state_version")) >= 2 ||
                (json_object_get(a, "state_version") && json_integer_value(json_object_get(a, "state_version")) >= 1 &&
                 json_string_value(json_object_get(a, "status")) &&
                 strcmp(json_string_value(json_object_get(a, "status")), "waiting") == 0);
        json_decref(a);
        if (!moved)
            usleep(100 * 1000);
    }
    CU_ASSERT_TRUE(moved);
    char cls2[64] = "";
    for (int i = 0; i < 100; i++) {   /* until the trigger has been applied */
        snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=%s", life, lid);
        CU_ASSERT_EQUAL(call(T_CAROL, "GET", path, NULL, NULL, &svg, NULL, 0), 200);
        svg_class(svg ?: "", "state-paid", cls2, sizeof cls2);
        if (strcmp(cls2, "node waiting") == 0)
            break;
        free(svg);
        svg = NULL;
        usleep(100 * 1000);
    }
    CU_ASSERT_FATAL(svg != NULL);
    CU_ASSERT_TRUE(xml_well_formed(svg));
    CU_ASSERT_STRING_EQUAL(cls2, "node waiting");
    svg_class(svg, "state-created", cls, sizeof cls);
    CU_ASSERT_STRING_EQUAL(cls, "node visited");
    svg_class(svg, "state-shipped", cls, sizeof cls);
    CU_ASSERT_STRING_EQUAL(cls, "node");
    svg_class(svg, "state-cancelled", cls, sizeof cls);
    CU_ASSERT_STRING_EQUAL(cls, "node");
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "class=\"edge visited\""));
    free(svg);
}

/* The authorisation matrix: each route against each kind of caller (every permission
 * against every route: test_permissions.c). */
static void test_authorisation_matrix(void)
{
    enum { NONE, UNKNOWN, CAROL, ALICE, ADMIN, NCALLERS };
    static const char *const tokens[NCALLERS] = {NULL, T_UNKNOWN, T_CAROL, T_ALICE, T_ADMIN};
    char task_assign[128], terminate[128], inst[128];
    snprintf(task_assign, sizeof task_assign, "/v1/tasks/%s/release", task_approve);
    snprintf(terminate, sizeof terminate, "/v1/instances/00000000-0000-4000-8000-000000000000/terminate");
    snprintf(inst, sizeof inst, "/v1/instances/%s", inst_waiting);
    /* want: the status for CAROL, ALICE and ADMIN (NONE/UNKNOWN always 401). A 0
     * means "anything but 401 and 403". */
    struct {
        const char *method, *path, *body;
        long want[3];
    } rows[] = {
        /* a task role (alice) reads tasks and instances, not definitions or dead letters */
        {"GET", "/v1/definitions", NULL, {200, 403, 200}},
        {"GET", "/v1/schema/definition", NULL, {200, 403, 200}},
        {"GET", inst, NULL, {200, 200, 200}},
        {"GET", "/v1/tasks?role=approver", NULL, {200, 200, 200}},
        /* dead letters hold refused messages: dead-letters:read (operator, admin) only */
        {"GET", "/v1/dead-letters", NULL, {403, 403, 200}},
        {"POST", "/v1/instances", "{\"definition\":\"no_such_def_matrix\"}", {404, 403, 404}},
        /* operations carol's role does not grant */
        {"POST", terminate, "{}", {403, 403, 404}},
        {"POST", "/v1/dead-letters/999999999/replay", "{}", {403, 403, 409}},
        {"POST", "/v1/dead-letters/999999999/discard", "{}", {403, 403, 409}},
        {"POST", "/v1/retention/run", "{\"older_than_days\":36500,\"dry_run\":true}", {403, 403, 200}},
        /* task actions: the task's role (approver) or admin; releasing an open task
         * is a state conflict, which shows the caller passed authorisation */
        {"POST", task_assign, "{}", {403, 409, 409}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        for (int c = 0; c < NCALLERS; c++) {
            json_t *p = NULL;
            long got = it_req(IT_API, tokens[c], rows[r].method, rows[r].path, rows[r].body, &p);
            long want = c < CAROL ? 401 : rows[r].want[c - CAROL];
            int ok = want == 0 ? (got != 401 && got != 403 && got > 0) : got == want;
            if (!ok)
                fprintf(stderr, "\nauth matrix: %s %s as caller %d: got %ld, want %ld\n",
                        rows[r].method, rows[r].path, c, got, want);
            CU_ASSERT_TRUE(ok);
            if (got == 401)
                CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "code")) ?: "", "unauthenticated");
            if (got == 403)
                CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "code")) ?: "", "forbidden");
            json_decref(p);
        }
    }
    /* A malformed Authorization header is a 401 as well. */
    expect_problem("", "GET", "/v1/definitions", NULL, 401, "unauthenticated", NULL);
}

static void test_tasks(void)
{
    char path[256], body[256];
    json_t *a = NULL;
    /* list by role, assignee, status */
    CU_ASSERT_EQUAL(it_req(IT_API, T_ALICE, "GET", "/v1/tasks?role=approver&status=open&limit=500", NULL, &a), 200);
    size_t i;
    json_t *t;
    int found = 0;
    json_array_foreach(json_object_get(a, "items"), i, t)
        found |= strcmp(json_string_value(json_object_get(t, "id")) ?: "", task_approve) == 0;
    CU_ASSERT_TRUE(found);
    json_decref(a);
    expect_problem(T_ALICE, "GET", "/v1/tasks?status=lost", NULL, 400, "invalid_status", "/status");
    expect_problem(T_ALICE, "GET", "/v1/tasks?instance_id=x", NULL, 400, "invalid_id", "/instance_id");
    snprintf(path, sizeof path, "/v1/tasks/%s", task_approve);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ALICE, "GET", path, NULL, &a), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "status")) ?: "", "open");
    json_decref(a);
    expect_problem(T_ALICE, "GET", "/v1/tasks/00000000-0000-4000-8000-000000000000", NULL, 404, "task_not_found", NULL);

    /* assign: bob lacks the role; alice takes it; bob cannot act on it; alice cannot
     * assign it to someone else (admins can). */
    snprintf(path, sizeof path, "/v1/tasks/%s/assign", task_approve);
    expect_problem(T_BOB, "POST", path, "{}", 403, "forbidden", NULL);
    expect_problem(T_ALICE, "POST", path, "{\"assignee\":\"dave\"}", 403, "forbidden", NULL);
    expect_problem(T_ALICE, "POST", path, "{\"assignee\":5}", 400, "invalid_field", "/assignee");
    CU_ASSERT_EQUAL(it_req(IT_API, T_ALICE, "POST", path, "{}", &a), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "assignee")) ?: "", "alice");
    json_decref(a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ALICE, "GET", "/v1/tasks?assignee=alice&status=assigned", NULL, &a), 200);
    CU_ASSERT_TRUE(json_array_size(json_object_get(a, "items")) >= 1);
    json_decref(a);
    /* release and take again */
    snprintf(path, sizeof path, "/v1/tasks/%s/release", task_approve);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ALICE, "POST", path, "{}", NULL), 200);
    expect_problem(T_ALICE, "POST", path, "{}", 409, "task_state", NULL);
    snprintf(path, sizeof path, "/v1/tasks/%s/assign", task_approve);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{\"assignee\":\"alice\"}", NULL), 200);

    /* complete: the result must match the step's result_schema */
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", task_approve);
    expect_problem(T_ALICE, "POST", path, "{\"result\":[]}", 400, "invalid_field", "/result");
    expect_problem(T_ALICE, "POST", path, "{\"result\":{}}", 422, "invalid_result", "/result/approved");
    expect_problem(T_ALICE, "POST", path, "{\"result\":{\"approved\":\"yes\"}}", 422, "invalid_result",
                   "/result/approved");
    expect_problem(T_ALICE, "POST", path, "{\"result\":{\"approved\":true,\"extra\":1}}", 422,
                   "invalid_result", "/result/extra");
    expect_problem(T_ALICE, "POST", path,
                   "{\"result\":{\"approved\":true,\"comment\":\"far too long for twenty\"}}", 422,
                   "invalid_result", "/result/comment");
    snprintf(body, sizeof body, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND status = 'assigned'",
             task_approve);
    CU_ASSERT_EQUAL(it_sql_number(body), 1);   /* refused completions changed nothing */
    CU_ASSERT_EQUAL(it_req(IT_API, T_ALICE, "POST", path, "{\"result\":{\"approved\":true,\"comment\":\"ok\"}}", &a), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "status")) ?: "", "completed");
    json_decref(a);
    expect_problem(T_ALICE, "POST", path, "{\"result\":{\"approved\":true}}", 409, "task_state", NULL);
    expect_problem(T_ALICE, "POST", "/v1/tasks/nope/complete", "{}", 400, "invalid_id", "/id");

    /* The instance moves to the ship task (shipper role). */
    char ship[40] = "";
    for (int k = 0; k < 100 && ship[0] == '\0'; k++) {
        snprintf(path, sizeof path, "/v1/tasks?instance_id=%s&status=open&role=shipper", inst_waiting);
        it_req(IT_API, T_BOB, "GET", path, NULL, &a);
        const char *id = json_string_value(json_object_get(json_array_get(json_object_get(a, "items"), 0), "id"));
        if (id)
            snprintf(ship, sizeof ship, "%s", id);
        json_decref(a);
        if (ship[0] == '\0')
            usleep(100 * 1000);
    }
    CU_ASSERT_FATAL(ship[0] != '\0');
    /* The request time limit: with the task row locked elsewhere the completion waits
     * past STRAND_API_REQUEST_TIMEOUT_MS (2.5 s here), answers 503 and changes nothing. */
    PGconn *locker = PQconnectdb(getenv("STRAND_PG_DSN"));
    CU_ASSERT_FATAL(PQstatus(locker) == CONNECTION_OK);
    PQclear(PQexec(locker, "BEGIN"));
    snprintf(body, sizeof body, "SELECT 1 FROM strand.tasks WHERE id = '%s' FOR UPDATE", ship);
    PGresult *res = PQexec(locker, body);
    CU_ASSERT_EQUAL(PQresultStatus(res), PGRES_TUPLES_OK);
    PQclear(res);
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", ship);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    expect_problem(T_BOB, "POST", path, "{\"result\":{}}", 503, "request_timeout", NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CU_ASSERT_TRUE(waited >= 2.4 && waited < 15);
    PQclear(PQexec(locker, "ROLLBACK"));
    PQfinish(locker);
    snprintf(body, sizeof body, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND status = 'open'", ship);
    CU_ASSERT_EQUAL(it_sql_number(body), 1);
    /* the API's connection is usable again */
    CU_ASSERT_EQUAL(it_req(IT_API, T_BOB, "POST", path, "{\"result\":{}}", NULL), 200);
    CU_ASSERT_TRUE(wait_status(inst_waiting, "completed", 30));
}

static void test_signals_cancel_terminate(void)
{
    char *id = start(T_CAROL, flow, "sig-h7", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char path[256];
    CU_ASSERT_TRUE(wait_status(id, "waiting", 30));
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    expect_problem(T_CAROL, "POST", path, "{\"payload\":{}}", 400, "invalid_field", "/name");
    json_t *a = NULL;
    long s = it_req(IT_API, T_CAROL, "POST", path, "{\"name\":\"poke\",\"request_id\":\"h7-poke\"}", &a);
    CU_ASSERT_EQUAL(s, 202);
    json_decref(a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", path, "{\"name\":\"poke\",\"request_id\":\"h7-poke\"}", &a), 200);
    CU_ASSERT_TRUE(json_is_true(json_object_get(a, "duplicate")));
    json_decref(a);
    expect_problem(T_CAROL, "POST", "/v1/signals", "{\"business_ref\":\"no-such-ref-h7\",\"name\":\"x\"}", 404,
                   "instance_not_found", NULL);
    /* terminate: admin only */
    snprintf(path, sizeof path, "/v1/instances/%s/terminate", id);
    expect_problem(T_CAROL, "POST", path, "{}", 403, "forbidden", NULL);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{\"reason\":\"test\"}", NULL), 202);
    CU_ASSERT_TRUE(wait_status(id, "terminated", 30));
    expect_problem(T_ADMIN, "POST", path, "{}", 409, "instance_ended", NULL);
    free(id);
    /* cancel: any caller */
    id = start(T_CAROL, flow, "cancel-h7", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE(wait_status(id, "waiting", 30));
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", id);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "POST", path, "{\"reason\":\"no longer needed\"}", NULL), 202);
    CU_ASSERT_TRUE(wait_status(id, "cancelled", 30));
    free(id);
    expect_problem(T_CAROL, "POST", "/v1/instances/00000000-0000-4000-8000-000000000000/cancel", "{}", 404,
                   "instance_not_found", NULL);
}

static void test_dead_letters_acks_triggers(void)
{
    long long dl = it_sql_number(
        "INSERT INTO strand.dead_letters (source_topic, reason, attempts, node_id, payload)"
        " VALUES ('h7.test', 'test letter', 1, 'test', '\\x0102') RETURNING id");
    CU_ASSERT_FATAL(dl > 0);
    char path[128];
    json_t *a = NULL;
    expect_problem(T_CAROL, "GET", "/v1/dead-letters?status=open", NULL, 403, "forbidden", NULL);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", "/v1/dead-letters?status=open", NULL, &a), 200);
    CU_ASSERT_TRUE(json_array_size(json_object_get(a, "items")) >= 1);
    json_decref(a);
    snprintf(path, sizeof path, "/v1/dead-letters/%lld", dl);
    expect_problem(T_CAROL, "GET", path, NULL, 403, "forbidden", NULL);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", path, NULL, &a), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "payload_base64")) ?: "", "AQI=");
    json_decref(a);
    expect_problem(T_ADMIN, "GET", "/v1/dead-letters/999999999", NULL, 404, "dead_letter_not_found", NULL);
    snprintf(path, sizeof path, "/v1/dead-letters/%lld/discard", dl);
    expect_problem(T_ALICE, "POST", path, "{}", 403, "forbidden", NULL);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{}", NULL), 200);
    expect_problem(T_ADMIN, "POST", path, "{}", 409, "dead_letter_not_open", NULL);
    snprintf(path, sizeof path, "/v1/dead-letters/%lld/replay", dl);
    expect_problem(T_ADMIN, "POST", path, "{}", 409, "dead_letter_not_open", NULL);

    expect_problem(T_CAROL, "POST", "/v1/acks",
                   "{\"ack_guid\":\"00000000-0000-4000-8000-000000000000\",\"consumer\":\"c\",\"stage\":\"delivered\"}",
                   404, "ack_not_found", NULL);
    expect_problem(T_CAROL, "POST", "/v1/acks", "{\"consumer\":\"c\",\"stage\":\"delivered\"}", 400,
                   "invalid_field", "/ack_guid");
    expect_problem(T_CAROL, "POST", "/v1/triggers", "{\"definition\":\"x\"}", 400, "invalid_field", "/external_ref");
    expect_problem(T_CAROL, "POST", "/v1/triggers",
                   "{\"definition\":\"no_such_life_h7\",\"external_ref\":\"r\",\"event\":\"e\",\"request_id\":\"q\"}",
                   404, "definition_not_found", "/definition");
}

/* The Kafka ingress with authentication on: an unknown token (401), a caller without
 * the role (403) and a bad task result (422) each become a dead letter and an
 * IngressRejected notice and change nothing; a good command after them is accepted. */
static void test_ingress_authorisation(void)
{
    char path[512], instance[40] = "", task[40] = "", sql[600];
    json_t *a = NULL;
    snprintf(path, sizeof path, "/v1/instances?definition=%s&business_ref=batch-h7&limit=1", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_CAROL, "GET", path, NULL, &a), 200);
    snprintf(instance, sizeof instance, "%s",
             json_string_value(json_object_get(json_array_get(json_object_get(a, "items"), 0), "id")) ?: "");
    json_decref(a);
    CU_ASSERT_FATAL(instance[0] != '\0');
    first_task_of(instance, task, sizeof task);
    CU_ASSERT_FATAL(task[0] != '\0');
    long long letters = it_sql_number("SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE '%ingress'");
    long long notices = it_sql_number("SELECT count(*) FROM strand.outbox WHERE topic = 'notices'");
    double accepted = it_metric(IT_API, "strand_ingress_commands_total{outcome=\"accepted\"}", 0);

    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL, T_UNKNOWN, instance,
                                      "{\"name\":\"x\"}"));
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TERMINATE, T_CAROL, instance, "{}"));
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TASK_COMPLETE, T_ALICE, task,
                                      "{\"result\":{\"approved\":\"maybe\"}}"));
    CU_ASSERT_EQUAL(it_wait_number("SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE '%ingress'",
                                   letters + 3, 60), letters + 3);
    CU_ASSERT_TRUE(it_sql_number("SELECT count(*) FROM strand.outbox WHERE topic = 'notices'") >= notices + 3);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE '%%ingress'"
             " AND instance_id = '%s' AND reason LIKE '%%token%%'", instance);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE '%%ingress'"
             " AND instance_id = '%s' AND reason LIKE '%%instances:terminate%%'", instance);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE '%%ingress'"
             " AND instance_id = '%s' AND reason LIKE '%%result_schema%%'", task);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* nothing changed */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s' AND status = 'waiting'", instance);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND status = 'open'", task);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* the partition moves on: a good command is accepted */
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TASK_ASSIGN, T_ALICE, task, "{}"));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND assignee = 'alice'", task);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 60), 1);
    CU_ASSERT_TRUE(it_metric(IT_API, "strand_ingress_commands_total{outcome=\"accepted\"}", 0) >= accepted + 1);
    /* a refused ingress command is kept without its token: with authentication on, a
     * replay could only be refused again, so it is answered 409 and the letter stays open */
    snprintf(sql, sizeof sql, "SELECT id FROM strand.dead_letters WHERE source_topic LIKE '%%ingress'"
             " AND instance_id = '%s' AND reason LIKE '%%instances:terminate%%'", instance);
    long long letter = it_sql_number(sql);
    CU_ASSERT_FATAL(letter > 0);
    snprintf(path, sizeof path, "/v1/dead-letters/%lld/replay", letter);
    expect_problem(T_ADMIN, "POST", path, "{}", 409, "replay_needs_token", NULL);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE id = %lld AND status = 'open'",
             letter);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
}

/* strandctl reaches the routes, prints problems, and exits 0/1/2/3. */
static void test_strandctl(void)
{
    char args[512], *out = NULL;
    snprintf(args, sizeof args, "--json definitions get %s 1", flow);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, args, &out), 0);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(doc, "name")) ?: "", flow);
    json_decref(doc);
    free(out);
    snprintf(args, sizeof args, "definitions diagram %s 1", flow);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, args, &out), 0);
    CU_ASSERT_TRUE(xml_well_formed(out));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "step&#45;approve"));
    free(out);
    snprintf(args, sizeof args, "instances list --definition %s --business-ref batch-h7 --created-after 2000-01-01", flow);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, args, &out), 0);
    int lines = 0;
    for (const char *c = out; *c; c++)
        lines += *c == '\n';
    CU_ASSERT_EQUAL(lines, 3);
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(T_ADMIN, "--json retention run --older-than-days 36500 --dry-run true", &out), 0);
    doc = json_loads(out, 0, &jerr);
    CU_ASSERT_TRUE(json_is_true(json_object_get(doc, "dry_run")));
    json_decref(doc);
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, "retention run --older-than-days 1", &out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "error 403 forbidden"));
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, "instances get 00000000-0000-4000-8000-000000000000", &out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "error 404 instance_not_found"));
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, "instances list --created-before tomorrow", &out), 1);
    CU_ASSERT_TRUE(strstr(out, "invalid_time") != NULL && strstr(out, "/created_before") != NULL);
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(NULL, "definitions list", &out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "error 401 unauthenticated"));
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, "definitions schema", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "Strand workflow definition"));
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, "metrics", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "strand_http_requests_total"));
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, "no-such-command", &out), 2);
    free(out);
    CU_ASSERT_EQUAL(it_strandctl(T_CAROL, "--api http://127.0.0.1:1 health", &out), 3);
    free(out);
}

static void test_retention(void)
{
    /* Backdate the ended instances of this run; the waiting one is never touched. */
    char sql[600];
    snprintf(sql, sizeof sql,
             "WITH u AS (UPDATE strand.instances SET ended_at = now() - interval '40 days'"
             " WHERE definition_name = '%s' AND ended_at IS NOT NULL RETURNING 1) SELECT count(*) FROM u",
             flow);
    long long ended = it_sql_number(sql);
    CU_ASSERT_TRUE(ended >= 3);   /* completed, terminated, cancelled */
    /* An ended batch job (it selected nothing: completed at once), backdated too: the
     * retention run purges it with its items (they used to be kept for ever). */
    json_t *job = NULL;
    char body[200];
    snprintf(body, sizeof body, "{\"filter\":{\"business_ref\":\"none-%s\"},\"action\":\"cancel\"}", flow);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", "/v1/batches", body, &job), 201);
    char job_path[128];
    snprintf(job_path, sizeof job_path, "/v1/batches/%s", json_string_value(json_object_get(job, "id")) ?: "");
    char job_sql[300];
    snprintf(job_sql, sizeof job_sql, "UPDATE strand.batch_jobs SET ended_at = now() - interval '40 days'"
             " WHERE id = '%s' AND ended_at IS NOT NULL", json_string_value(json_object_get(job, "id")) ?: "");
    CU_ASSERT_TRUE(it_sql_exec(job_sql));
    json_decref(job);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'", flow);
    long long before = it_sql_number(sql);
    expect_problem(T_ADMIN, "POST", "/v1/retention/run", "{}", 400, "invalid_field", "/older_than_days");
    expect_problem(T_ADMIN, "POST", "/v1/retention/run", "{\"older_than_days\":0}", 400, "invalid_field",
                   "/older_than_days");
    expect_problem(T_ADMIN, "POST", "/v1/retention/run", "{\"older_than_days\":30,\"dry_run\":1}", 400,
                   "invalid_field", "/dry_run");
    expect_problem(T_ADMIN, "POST", "/v1/retention/run", "{\"older_than_days\":30,\"keep\":1}", 400,
                   "invalid_field", "/keep");
    json_t *a = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", "/v1/retention/run", "{\"older_than_days\":30,\"dry_run\":true}", &a), 200);
    CU_ASSERT_TRUE(json_integer_value(json_object_get(a, "instances")) >= ended);
    json_decref(a);
    CU_ASSERT_EQUAL(it_sql_number(sql), before);   /* a dry run deletes nothing */
    int more = 1;
    long long deleted = 0, deleted_batches = 0;
    for (int i = 0; i < 100 && more; i++) {
        CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", "/v1/retention/run", "{\"older_than_days\":30,\"limit\":2}", &a), 200);
        deleted += json_integer_value(json_object_get(json_object_get(a, "deleted"), "instances"));
        deleted_batches += json_integer_value(json_object_get(json_object_get(a, "deleted"), "batches"));
        more = json_is_true(json_object_get(a, "more"));
        json_decref(a);
    }
    CU_ASSERT_TRUE(deleted >= ended);
    CU_ASSERT_EQUAL(it_sql_number(sql), before - ended);
    CU_ASSERT_TRUE(deleted_batches >= 1);
    expect_problem(T_ADMIN, "GET", job_path, NULL, 404, "batch_not_found", NULL);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks t JOIN strand.instances i ON i.id = t.instance_id"
             " WHERE i.definition_name = '%s' AND i.ended_at IS NOT NULL", flow);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND ended_at IS NULL", flow);
    CU_ASSERT_EQUAL(it_sql_number(sql), 3);   /* the three waiting ones stay */
    char path[128];
    snprintf(path, sizeof path, "/v1/instances/%s", inst_waiting);
    expect_problem(T_CAROL, "GET", path, NULL, 404, "instance_not_found", NULL);   /* it completed */
}

int main(void)
{
    if (!it_init("test_api"))
        return 1;
    static const it_case_t cases[] = {
        {"services start with a token file", test_start_services},
        {"public routes, openapi, schema, unknown routes", test_public_and_meta},
        {"definitions: import, validate, list, get and their errors", test_definitions},
        {"instances: start, filters, pages, get, history, runtime", test_instances},
        {"diagram SVG with an instance overlay", test_diagram},
        {"authorisation matrix", test_authorisation_matrix},
        {"tasks: list, get, assign, release, complete with result validation, time limit", test_tasks},
        {"signals, cancel, terminate", test_signals_cancel_terminate},
        {"dead letters, acks, triggers", test_dead_letters_acks_triggers},
        {"kafka ingress: unknown token, missing role, bad result", test_ingress_authorisation},
        {"strandctl", test_strandctl},
        {"retention run", test_retention},
    };
    return it_run_suite("api", cases, (int)(sizeof cases / sizeof cases[0]));
}
