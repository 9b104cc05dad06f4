/*
 * test_clean_4xx.c - requests that are wrong get a clean 4xx, and every answer carries
 * the headers a browser needs to not misread it (issue 33, "Fences"), on the real API:
 *  - invalid UTF-8 in a request path or a query value (a lone 0xFF, an overlong "/",
 *    a surrogate, a truncated sequence, a code point above U+10FFFF, a raw 0xFF byte)
 *    answers 400 invalid_utf8 (a problem naming the parameter), on every route,
 *    before authentication; it answered 500, or 400 invalid_time on
 *    /v1/instance-counts, before. Valid UTF-8 (é, €) still passes;
 *  - a trigger's `actor` must be a string (a number, bool, array or object answered
 *    202), and a trigger's bad field is the one named (a number as `event` was
 *    reported as /external_ref); a cancel's or terminate's `reason` must be a string (a
 *    number was dropped silently: 202); an ACK's bad `error` is named /error (it was
 *    named /message);
 *  - every answer, from a route, the router (404, 405, OPTIONS), the guard (401), the
 *    request edge (a refused head) or a parked long poll, carries exactly one
 *    X-Content-Type-Options: nosniff; a definition's SVG diagram carries a
 *    Content-Security-Policy that forbids scripts and anything fetched.
 * Requests are written on a raw socket, byte for byte (no client re-encodes them).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

#define T_ADMIN "c4-admin-token-0123456789"
#define SVG_CSP "default-src 'none'; style-src 'unsafe-inline'"

static char token_path[256];
static char suffix[32], flow[64], life[64];
static char instance_id[40];

/* ---- one raw request ------------------------------------------------------------------ */

typedef struct {
    long status;     /* -1: no answer */
    char *text;      /* the whole answer, head and body (owned) */
    const char *body;
    json_t *json;    /* the body parsed, or NULL */
} answer_t;

static void answer_free(answer_t *a)
{
    free(a->text);
    json_decref(a->json);
    memset(a, 0, sizeof *a);
}

/* Sends `len` bytes as they are on a new connection to the API and reads the answer
 * until the server closes it (the requests ask for Connection: close). */
static answer_t send_raw(const char *bytes, size_t len)
{
    answer_t a = {.status = -1};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)it_port(IT_API))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        send(fd, bytes, len, MSG_NOSIGNAL) != (ssize_t)len) {
        close(fd);
        return a;
    }
    size_t cap = 65536, used = 0;
    a.text = malloc(cap);
    for (;;) {
        if (used + 4096 > cap)
            a.text = realloc(a.text, cap *= 2);
        ssize_t got = recv(fd, a.text + used, cap - used - 1, 0);
        if (got <= 0)
            break;
        used += (size_t)got;
    }
    close(fd);
    a.text[used] = '\0';
    char *end = strstr(a.text, "\r\n\r\n");
    if (strncmp(a.text, "HTTP/1.1 ", 9) != 0 || end == NULL)
        return a;
    a.status = atol(a.text + 9);
    a.body = end + 4;
    json_error_t jerr;
    a.json = json_loads(a.body, JSON_DECODE_ANY, &jerr);
    return a;
}

/* `method` `target` (bytes as given) with the admin token unless `token` is 0, and a
 * JSON body when `body` is not NULL. */
static answer_t request(const char *method, const char *target, const char *body, int token)
{
    char head[4096];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s",
                     method, target, token ? "Authorization: Bearer " T_ADMIN "\r\n" : "");
    if (body != NULL)
        n += snprintf(head + n, sizeof head - (size_t)n,
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n", strlen(body));
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n%s", body ? body : "");
    return send_raw(head, (size_t)n);
}

/* How many times the answer's head carries header `name` (any case); the last value
 * goes to `value` when not NULL. */
static int header_count(const answer_t *a, const char *name, char *value, size_t value_len)
{
    int n = 0;
    size_t nlen = strlen(name);
    if (value != NULL)
        value[0] = '\0';
    if (a->body == NULL)
        return 0;
    for (const char *line = strstr(a->text, "\r\n"); line != NULL && line + 2 < a->body;
         line = strstr(line + 2, "\r\n")) {
        const char *start = line + 2;
        if (strncasecmp(start, name, nlen) != 0 || start[nlen] != ':')
            continue;
        n++;
        if (value != NULL) {
            const char *v = start + nlen + 1, *e = strstr(v, "\r\n");
            while (*v == ' ')
                v++;
            snprintf(value, value_len, "%.*s", (int)(e - v), v);
        }
    }
    return n;
}

static const char *member(const answer_t *a, const char *key)
{
    return json_string_value(json_object_get(a->json, key)) ?: "(none)";
}

/* Asserts a problem: `status`, application/problem+json with the RFC 9457 members,
 * `code`, and `field` ("" : no field member). */
static void expect_problem(const char *method, const char *target, const char *body, int token,
                           long status, const char *code, const char *field)
{
    answer_t a = request(method, target, body, token);
    char ctype[128], type[160];
    header_count(&a, "Content-Type", ctype, sizeof ctype);
    snprintf(type, sizeof type, "urn:strand:problem:%s", code);
    const char *got_field = json_string_value(json_object_get(a.json, "field"));
    int ok = a.status == status && strcmp(member(&a, "code"), code) == 0 &&
             strcmp(got_field ?: "", field) == 0;
    printf("\n  %-6s %-58s %ld %s%s%s", method, target, a.status, member(&a, "code"),
           got_field ? " " : "", got_field ?: "");
    if (!ok)
        printf("   <- want %ld %s %s", status, code, field);
    CU_ASSERT_EQUAL(a.status, status);
    CU_ASSERT_STRING_EQUAL(ctype, "application/problem+json");
    CU_ASSERT_STRING_EQUAL(member(&a, "code"), code);
    CU_ASSERT_STRING_EQUAL(member(&a, "type"), type);
    CU_ASSERT_STRING_EQUAL(member(&a, "title"), "Bad Request");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(a.json, "status")), status);
    CU_ASSERT_STRING_EQUAL(member(&a, "detail"), member(&a, "message"));
    CU_ASSERT_STRING_EQUAL(got_field ?: "", field);
    answer_free(&a);
}

static long status_of(const char *method, const char *target, const char *body)
{
    answer_t a = request(method, target, body, 1);
    long status = a.status;
    if (status >= 400)
        printf("\n  %s %s: %ld %s", method, target, status, member(&a, "code"));
    answer_free(&a);
    return status;
}

/* ---- the cases ------------------------------------------------------------------------ */

static int write_tokens(void)
{
    FILE *f = fopen(token_path, "w");
    if (f == NULL)
        return 0;
    fprintf(f, "{\"tokens\": [{\"token\": \"%s\", \"principal\": \"root\", \"roles\": [\"admin\"]}]}",
            T_ADMIN);
    return fclose(f) == 0;
}

static void test_start(void)
{
    snprintf(suffix, sizeof suffix, "%d", (int)getpid());
    snprintf(flow, sizeof flow, "c4_flow_%s", suffix);
    snprintf(life, sizeof life, "c4_life_%s", suffix);
    snprintf(token_path, sizeof token_path, "/tmp/strand-test-c4-tokens-%s.json", suffix);
    CU_ASSERT_FATAL(write_tokens());
    setenv("STRAND_AUTH_FILE", token_path, 1);
    CU_ASSERT_FATAL(it_start(IT_API) > 0);
    CU_ASSERT_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
    unlink(token_path);
    char doc[1024];
    /* a task keeps an instance open (no executor runs here anyway) */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"approver\"]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", flow);
    CU_ASSERT_EQUAL_FATAL(status_of("POST", "/v1/definitions", doc), 201);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"lifecycle\",\"name\":\"%s\",\"version\":1,\"env\":\"test\",\"initial\":\"created\","
             "\"states\":[{\"name\":\"created\"},{\"name\":\"paid\",\"final\":true}],\"events\":[\"pay\"],"
             "\"transitions\":[{\"from\":\"created\",\"event\":\"pay\",\"to\":\"paid\"}],"
             "\"transition_route\":\"app\",\"routes\":{\"app\":{\"consumers\":[\"orders-app\"]}}}", life);
    CU_ASSERT_EQUAL_FATAL(status_of("POST", "/v1/definitions", doc), 201);
    snprintf(doc, sizeof doc, "{\"definition\":\"%s\",\"input\":{}}", flow);
    answer_t a = request("POST", "/v1/instances", doc, 1);
    CU_ASSERT_EQUAL_FATAL(a.status, 201);
    snprintf(instance_id, sizeof instance_id, "%s", member(&a, "id"));
    answer_free(&a);
}

/* Invalid UTF-8 in the path or a query value: 400 invalid_utf8 naming the parameter. */
static void test_invalid_utf8(void)
{
    static const struct {
        const char *target, *field;
    } cases[] = {
        {"/v1/definitions/x%FF", "/name"},
        {"/v1/definitions/x%FF/1/diagram.svg", "/name"},
        {"/v1/instances?business_ref=%FF", "/business_ref"},
        {"/v1/instances?definition=%C0%AF", "/definition"},           /* overlong "/" */
        {"/v1/instances?business_ref=%ED%A0%80", "/business_ref"},    /* a surrogate */
        {"/v1/instances?business_ref=ab%E2%82", "/business_ref"},     /* truncated */
        {"/v1/instances?business_ref=%F4%90%80%80", "/business_ref"}, /* above U+10FFFF */
        {"/v1/instances?limit=5&business_ref=%FF", "/business_ref"},  /* not the first */
        {"/v1/audit?actor=%FF", "/actor"},
        {"/v1/tasks?role=%FF", "/role"},
        {"/v1/notices?code=%FF", "/code"},
        {"/v1/instance-counts?business_ref=%FF", "/business_ref"},
        {"/v1/dead-letters?status=%FF", "/status"},
        {"/v1/nothing?unused=%FF", "/unused"},    /* any parameter, any route */
        {"/v1/nothing%FF", ""},                   /* no route: no parameter to name */
        {"/v1/definitions/x\xFF", "/name"},       /* a raw byte, not escaped */
        {"/v1/instances?business_ref=\xC3", "/business_ref"},
        {"/v1/instances?odd%FFname=1", ""},       /* a name that is not text: not named */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_problem("GET", cases[i].target, NULL, 1, 400, "invalid_utf8", cases[i].field);
    char target[200];
    snprintf(target, sizeof target, "/v1/instances/%s/notices?code=%%FF", instance_id);
    expect_problem("GET", target, NULL, 1, 400, "invalid_utf8", "/code");
    /* a command route and a path parameter in the middle */
    expect_problem("POST", "/v1/instances/%FF/cancel", "{}", 1, 400, "invalid_utf8", "/id");
    /* before authentication, like the request edge's refusals */
    expect_problem("GET", "/v1/instances?business_ref=%FF", NULL, 0, 400, "invalid_utf8",
                   "/business_ref");
    printf("\n");
}

/* Valid UTF-8 is not refused. */
static void test_valid_utf8(void)
{
    CU_ASSERT_EQUAL(status_of("GET", "/v1/instances?business_ref=caf%C3%A9", NULL), 200);
    CU_ASSERT_EQUAL(status_of("GET", "/v1/instances?business_ref=%F0%9F%98%80", NULL), 200);
    CU_ASSERT_EQUAL(status_of("GET", "/v1/instance-counts?business_ref=caf%C3%A9", NULL), 200);
    answer_t a = request("GET", "/v1/definitions/%E2%82%AC", NULL, 1);
    CU_ASSERT_EQUAL(a.status, 404);
    CU_ASSERT_STRING_EQUAL(member(&a, "code"), "definition_not_found");
    answer_free(&a);
}

/* A trigger's actor must be a non-empty string; each bad field is the one named. */
static void test_trigger_fields(void)
{
    static const char *const bad_actors[] = {"5", "true", "[\"x\"]", "{\"name\":\"x\"}", "\"\""};
    char body[512];
    for (size_t i = 0; i < sizeof bad_actors / sizeof bad_actors[0]; i++) {
        snprintf(body, sizeof body,
                 "{\"definition\":\"%s\",\"external_ref\":\"ref-%zu\",\"event\":\"pay\","
                 "\"request_id\":\"bad-actor-%zu\",\"actor\":%s}", life, i, i, bad_actors[i]);
        expect_problem("POST", "/v1/triggers", body, 1, 400, "invalid_field", "/actor");
    }
    snprintf(body, sizeof body,
             "{\"definition\":\"%s\",\"external_ref\":\"ref-e\",\"event\":5,\"request_id\":\"r-e\"}", life);
    expect_problem("POST", "/v1/triggers", body, 1, 400, "invalid_field", "/event");
    snprintf(body, sizeof body,
             "{\"definition\":\"%s\",\"external_ref\":\"ref-r\",\"event\":\"pay\",\"request_id\":7}", life);
    expect_problem("POST", "/v1/triggers", body, 1, 400, "invalid_field", "/request_id");
    expect_problem("POST", "/v1/triggers",
                   "{\"definition\":5,\"external_ref\":\"x\",\"event\":\"pay\",\"request_id\":\"r\"}", 1,
                   400, "invalid_field", "/definition");
    /* a string actor, or none: accepted */
    snprintf(body, sizeof body,
             "{\"definition\":\"%s\",\"external_ref\":\"ref-ok\",\"event\":\"pay\",\"request_id\":\"ok-1\","
             "\"actor\":\"checkout\"}", life);
    CU_ASSERT_EQUAL(status_of("POST", "/v1/triggers", body), 202);
    snprintf(body, sizeof body,
             "{\"definition\":\"%s\",\"external_ref\":\"ref-ok2\",\"event\":\"pay\",\"request_id\":\"ok-2\","
             "\"actor\":null}", life);
    CU_ASSERT_EQUAL(status_of("POST", "/v1/triggers", body), 202);
    printf("\n");
}

/* Other optional string fields of command bodies. */
static void test_other_string_fields(void)
{
    char target[200];
    snprintf(target, sizeof target, "/v1/instances/%s/cancel", instance_id);
    expect_problem("POST", target, "{\"reason\":5}", 1, 400, "invalid_field", "/reason");
    expect_problem("POST", target, "{\"reason\":{\"why\":\"x\"}}", 1, 400, "invalid_field", "/reason");
    snprintf(target, sizeof target, "/v1/instances/%s/terminate", instance_id);
    expect_problem("POST", target, "{\"reason\":[1]}", 1, 400, "invalid_field", "/reason");
    static const char ack[] = "{\"ack_guid\":\"0b5e7f6e-6f53-4b39-9a43-3f2f5c1b8a11\",\"consumer\":\"c\","
                              "\"stage\":\"processed\",";
    char body[300];
    snprintf(body, sizeof body, "%s\"error\":5}", ack);
    expect_problem("POST", "/v1/acks", body, 1, 400, "invalid_field", "/error");
    snprintf(body, sizeof body, "%s\"message\":5}", ack);
    expect_problem("POST", "/v1/acks", body, 1, 400, "invalid_field", "/message");
    /* a string reason is accepted (and the instance is cancelled: the last request) */
    snprintf(target, sizeof target, "/v1/instances/%s/cancel", instance_id);
    CU_ASSERT_EQUAL(status_of("POST", target, "{\"reason\":\"done testing\"}"), 202);
    printf("\n");
}

/* Exactly one nosniff on every kind of answer. */
static void test_nosniff_everywhere(void)
{
    char long_poll[200];
    snprintf(long_poll, sizeof long_poll, "/v1/instances/%s?wait_ms=200&after_version=999999", instance_id);
    static const char refused_head[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\001b\r\n\r\n";
    struct {
        const char *what, *method, *target, *body;
        int token;
        long status;
    } cases[] = {
        {"a read", "GET", "/v1/instances?limit=1", NULL, 1, 200},
        {"a long poll answered later", "GET", long_poll, NULL, 1, 200},
        {"a command", "POST", "/v1/triggers", "{}", 1, 400},
        {"health", "GET", "/healthz", NULL, 0, 200},
        {"metrics", "GET", "/metrics", NULL, 0, 200},
        {"the OpenAPI document", "GET", "/v1/openapi.json", NULL, 0, 200},
        {"the console", "GET", "/ui/", NULL, 0, 200},
        {"no token", "GET", "/v1/instances", NULL, 0, 401},
        {"no route", "GET", "/v1/nothing", NULL, 1, 404},
        {"wrong method", "DELETE", "/v1/definitions", NULL, 1, 405},
        {"OPTIONS", "OPTIONS", "/v1/definitions", NULL, 1, 204},
        {"invalid UTF-8", "GET", "/v1/definitions/%FF", NULL, 1, 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] + 1; i++) {
        int edge = i == sizeof cases / sizeof cases[0];
        answer_t a = edge ? send_raw(refused_head, sizeof refused_head - 1)
                          : request(cases[i].method, cases[i].target, cases[i].body, cases[i].token);
        char value[64];
        int n = header_count(&a, "X-Content-Type-Options", value, sizeof value);
        printf("\n  %-28s %ld  X-Content-Type-Options x%d %s", edge ? "a head the edge refused" : cases[i].what,
               a.status, n, value);
        CU_ASSERT_EQUAL(a.status, edge ? 400 : cases[i].status);
        CU_ASSERT_EQUAL(n, 1);
        CU_ASSERT_STRING_EQUAL(value, "nosniff");
        answer_free(&a);
    }
    printf("\n");
}

/* The diagram, opened on its own, runs no script and fetches nothing. */
static void test_diagram_csp(void)
{
    char target[300];
    for (int overlay = 0; overlay < 2; overlay++) {
        snprintf(target, sizeof target, "/v1/definitions/%s/1/diagram.svg%s%s", flow,
                 overlay ? "?instance=" : "", overlay ? instance_id : "");
        answer_t a = request("GET", target, NULL, 1);
        char ctype[64], csp[200], nosniff[32];
        header_count(&a, "Content-Type", ctype, sizeof ctype);
        int ncsp = header_count(&a, "Content-Security-Policy", csp, sizeof csp);
        header_count(&a, "X-Content-Type-Options", nosniff, sizeof nosniff);
        printf("\n  diagram%s: %ld %s, CSP x%d \"%s\", nosniff \"%s\"", overlay ? " (overlay)" : "",
               a.status, ctype, ncsp, csp, nosniff);
        CU_ASSERT_EQUAL(a.status, 200);
        CU_ASSERT_STRING_EQUAL(ctype, "image/svg+xml");
        CU_ASSERT_EQUAL(ncsp, 1);
        CU_ASSERT_STRING_EQUAL(csp, SVG_CSP);
        CU_ASSERT_STRING_EQUAL(nosniff, "nosniff");
        /* what the policy allows is all the drawing needs: no script, nothing fetched */
        CU_ASSERT_PTR_NOT_NULL(a.body ? strstr(a.body, "<svg") : NULL);
        CU_ASSERT_PTR_NULL(a.body ? strcasestr(a.body, "<script") : "");
        CU_ASSERT_PTR_NULL(a.body ? strstr(a.body, "href=\"http") : "");
        CU_ASSERT_PTR_NULL(a.body ? strstr(a.body, "@import") : "");
        answer_free(&a);
    }
    printf("\n");
}

int main(void)
{
    if (!it_init("test_clean_4xx"))
        return 1;
    static const it_case_t cases[] = {
        {"the API starts with a token file", test_start},
        {"invalid UTF-8 in a path or query: 400 invalid_utf8", test_invalid_utf8},
        {"valid UTF-8 passes", test_valid_utf8},
        {"a trigger's actor must be a string; bad fields named", test_trigger_fields},
        {"other optional string fields are checked", test_other_string_fields},
        {"nosniff on every answer", test_nosniff_everywhere},
        {"the SVG diagram carries a Content-Security-Policy", test_diagram_csp},
    };
    int rc = it_run_suite("clean_4xx", cases, (int)(sizeof cases / sizeof cases[0]));
    unlink(token_path);
    return rc;
}
