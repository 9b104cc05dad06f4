/*
 * test_http_edge.c - the HTTP edge of the real API, with authentication on, driven
 * through raw sockets where a request must be malformed (issues 16 and 21).
 *
 * Every error is application/problem+json with type, title, status, detail and code:
 * a body over the limit (413), OPTIONS (204 with Allow), 405 with Allow, 404, an
 * impossible date in a query (400). Two Content-Length headers, Content-Length with
 * Transfer-Encoding, a bad Content-Length (400) and a chunked body (411) are refused and
 * the smuggled second request never runs; oversized heads and too many headers are refused (431); a client
 * that trickles its head is cut off at the head deadline; a bearer token followed by
 * a NUL byte is refused. Every timestamp the API answers (instance, list, task,
 * history, runtime, dead letter, definition) is RFC 3339 in UTC with 'T' and 'Z'.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

#define T_ADMIN "edge-admin-token-0123456789"
#define HEAD_TIMEOUT_MS 2000

static char flow[64];
static char instance[40];

/* it_http_request() to the API; `raw` may be NULL. */
static long api(const char *token, const char *method, const char *path, const char *body,
                char **raw, char *ctype, size_t ctype_len)
{
    char *own = NULL;
    long status = it_http_request(IT_API, token, method, path, body, raw ? raw : &own, ctype,
                                  ctype_len);
    free(own);
    return status;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int connect_api(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)it_port(IT_API))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n <= 0)
            return 0;
        data += n;
        len -= (size_t)n;
    }
    return 1;
}

/* Reads until the server closes or `timeout_s` passes; returns the bytes (caller
 * frees) and sets *closed when the server closed the connection. */
static char *read_all(int fd, double timeout_s, int *closed)
{
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    double deadline = now_s() + timeout_s;
    *closed = 0;
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            continue;
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        if (n <= 0) {
            *closed = 1;
            break;
        }
        len += (size_t)n;
        if (len == cap)
            break;
    }
    buf[len] = '\0';
    return buf;
}

/* Sends raw bytes on a new connection and returns all the server answers in 3 s. */
static char *raw_exchange(const char *data, size_t len)
{
    int fd = connect_api(), closed = 0;
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT(send_all(fd, data, len));
    char *answer = read_all(fd, 3.0, &closed);
    close(fd);
    return answer;
}

static int status_of(const char *answer)
{
    int status = 0;
    return sscanf(answer, "HTTP/1.%*d %d", &status) == 1 ? status : 0;
}

static int count_of(const char *haystack, const char *needle)
{
    int n = 0;
    for (const char *p = haystack; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The body of the first answer in `answer`, parsed (caller decrefs). */
static json_t *body_of(const char *answer)
{
    const char *b = strstr(answer, "\r\n\r\n");
    json_error_t jerr;
    return b ? json_loadb(b + 4, strlen(b + 4), JSON_DISABLE_EOF_CHECK, &jerr) : NULL;
}

/* Asserts that a raw answer is one problem+json with `status` and `code`. */
static void expect_raw_problem(const char *what, const char *answer, int status, const char *code)
{
    json_t *p = body_of(answer);
    const char *got = json_string_value(json_object_get(p, "code"));
    if (status_of(answer) != status || got == NULL || strcmp(got, code) != 0)
        fprintf(stderr, "\n%s: got %.300s\n", what, answer);
    CU_ASSERT_EQUAL(status_of(answer), status);
    CU_ASSERT_PTR_NOT_NULL(strstr(answer, "Content-Type: application/problem+json"));
    CU_ASSERT_STRING_EQUAL(got ?: "", code);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(p, "status")), status);
    CU_ASSERT_PTR_NOT_NULL(json_string_value(json_object_get(p, "type")));
    CU_ASSERT_PTR_NOT_NULL(json_string_value(json_object_get(p, "title")));
    CU_ASSERT_PTR_NOT_NULL(json_string_value(json_object_get(p, "detail")));
    CU_ASSERT_PTR_NULL(strstr(answer, "<HTML>"));
    json_decref(p);
}

static void test_start_services(void)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/strand-test-edge-tokens-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"tokens\": [{\"token\": \"%s\", \"principal\": \"root\", \"roles\": [\"admin\"]}]}",
            T_ADMIN);
    fclose(f);
    setenv("STRAND_HTTP_MAX_BODY", "4096", 1);
    setenv("STRAND_HTTP_MAX_HEADER_BYTES", "8192", 1);
    setenv("STRAND_HTTP_MAX_HEADERS", "50", 1);
    char ms[16];
    snprintf(ms, sizeof ms, "%d", HEAD_TIMEOUT_MS);
    setenv("STRAND_HTTP_HEADER_TIMEOUT_MS", ms, 1);
    it_start_api_executor(path);
    /* A definition that waits in a task, for instance, task and history outputs. */
    snprintf(flow, sizeof flow, "edge_flow_%d", (int)getpid());
    char doc[512];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"t\",\"type\":\"task\",\"name\":\"T\",\"roles\":[\"admin\"]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", flow);
    CU_ASSERT_EQUAL_FATAL(api(T_ADMIN, "POST", "/v1/definitions", doc, NULL,
                                          NULL, 0), 201);
    char body[200], *raw = NULL;
    snprintf(body, sizeof body, "{\"definition\":\"%s\"}", flow);
    CU_ASSERT_EQUAL_FATAL(api(T_ADMIN, "POST", "/v1/instances", body, &raw,
                                          NULL, 0), 201);
    json_error_t jerr;
    json_t *a = json_loads(raw ?: "", 0, &jerr);
    snprintf(instance, sizeof instance, "%s", json_string_value(json_object_get(a, "id")) ?: "");
    json_decref(a);
    free(raw);
}

/* ---- problems for every error ---------------------------------------------------- */

static long problem_call(const char *method, const char *path, const char *body, json_t **out,
                         char *ctype, size_t ctype_len)
{
    char *raw = NULL;
    long status = api(T_ADMIN, method, path, body, &raw, ctype, ctype_len);
    json_error_t jerr;
    *out = raw ? json_loads(raw, 0, &jerr) : NULL;
    free(raw);
    return status;
}

static void test_problems(void)
{
    /* A body over the limit (4096 here): the documented problem, not libevent's HTML. */
    char big[5200];
    memset(big, ' ', sizeof big - 1);
    big[0] = '{';
    big[sizeof big - 2] = '}';
    big[sizeof big - 1] = '\0';
    json_t *p = NULL;
    char ctype[128] = "";
    long s = problem_call("POST", "/v1/instances", big, &p, ctype, sizeof ctype);
    printf("\n  body over the limit: %ld %s\n", s, ctype);
    CU_ASSERT_EQUAL(s, 413);
    CU_ASSERT_STRING_EQUAL(ctype, "application/problem+json");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "code")) ?: "", "body_too_large");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "title")) ?: "", "Content Too Large");
    json_decref(p);
    /* The same with a raw head that announces too much (no body sent). */
    static const char too_long[] = "POST /v1/instances HTTP/1.1\r\nHost: x\r\nContent-Length: 999999\r\n\r\n";
    char *ans = raw_exchange(too_long, strlen(too_long));
    expect_raw_problem("content-length over the limit", ans, 413, "body_too_large");
    free(ans);
    /* 404, and 405 with Allow. */
    s = problem_call("GET", "/v1/nothing", NULL, &p, ctype, sizeof ctype);
    CU_ASSERT_EQUAL(s, 404);
    CU_ASSERT_STRING_EQUAL(ctype, "application/problem+json");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "type")) ?: "",
                           "urn:strand:problem:route_not_found");
    json_decref(p);
    static const char del[] = "DELETE /v1/definitions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              T_ADMIN "\r\n\r\n";
    ans = raw_exchange(del, strlen(del));
    expect_raw_problem("405", ans, 405, "method_not_allowed");
    CU_ASSERT_PTR_NOT_NULL(strstr(ans, "\r\nAllow: POST, GET, OPTIONS\r\n"));
    free(ans);
    /* OPTIONS: an answer with Allow, not HTML. */
    static const char opt[] = "OPTIONS /v1/instances HTTP/1.1\r\nHost: x\r\n\r\n";
    ans = raw_exchange(opt, strlen(opt));
    printf("  OPTIONS: %.60s\n", ans);
    CU_ASSERT_EQUAL(status_of(ans), 204);
    CU_ASSERT_PTR_NOT_NULL(strstr(ans, "\r\nAllow: POST, GET, OPTIONS\r\n"));
    CU_ASSERT_PTR_NULL(strstr(ans, "<HTML>"));
    /* the status line's reason phrase is the status's own (it said "Client Error" for
     * every 2xx) */
    CU_ASSERT_EQUAL(strncmp(ans, "HTTP/1.1 204 No Content\r\n", strlen("HTTP/1.1 204 No Content\r\n")), 0);
    free(ans);
    /* A bad Content-Length. */
    static const char badcl[] = "POST /v1/instances HTTP/1.1\r\nHost: x\r\nContent-Length: 12x\r\n\r\n";
    ans = raw_exchange(badcl, strlen(badcl));
    expect_raw_problem("bad content-length", ans, 400, "invalid_content_length");
    free(ans);
    /* An unknown method. */
    static const char brew[] = "BREW /v1/instances HTTP/1.1\r\nHost: x\r\n\r\n";
    ans = raw_exchange(brew, strlen(brew));
    expect_raw_problem("unknown method", ans, 501, "method_not_implemented");
    free(ans);
    /* Invalid query values: impossible dates, bad numbers. */
    static const char *const bad_queries[] = {
        "/v1/instances?created_after=2026-02-31", "/v1/instances?created_before=2026-04-31T00:00:00Z",
        "/v1/instances?created_after=2026-13-01", "/v1/instances?created_after=2026-11-24T25:00:00Z",
        "/v1/instances?created_after=2026-11-24T10:00:61Z", "/v1/instances?created_after=2025-02-29",
        "/v1/instances?limit=abc", "/v1/instances?limit=0",
        "/v1/instances?cursor=abc_00000000-0000-4000-8000-000000000000",
    };
    for (size_t i = 0; i < sizeof bad_queries / sizeof *bad_queries; i++) {
        s = problem_call("GET", bad_queries[i], NULL, &p, ctype, sizeof ctype);
        if (s != 400)
            fprintf(stderr, "\n%s: %ld\n", bad_queries[i], s);
        CU_ASSERT_EQUAL(s, 400);
        CU_ASSERT_STRING_EQUAL(ctype, "application/problem+json");
        json_decref(p);
    }
    s = problem_call("GET", "/v1/instances?created_after=2024-02-29T23:59:59.5%2B01:00", NULL, &p,
                     ctype, sizeof ctype);
    CU_ASSERT_EQUAL(s, 200);
    json_decref(p);
}

/* ---- the hard edge -------------------------------------------------------------- */

static long long instances_of(const char *ref)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE business_ref = '%s'", ref);
    return it_sql_number(sql);
}

static void test_smuggling(void)
{
    char ref[64], inner[256], req[1024];
    snprintf(ref, sizeof ref, "smuggled-%d", (int)getpid());
    snprintf(inner, sizeof inner, "{\"definition\":\"%s\",\"business_ref\":\"%s\"}", flow, ref);
    /* Two Content-Length headers: the first covers nothing, the second the smuggled
     * request. Before the fix, the smuggled start ran. */
    char smuggled[600];
    snprintf(smuggled, sizeof smuggled,
             "POST /v1/instances HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " T_ADMIN
             "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(inner), inner);
    snprintf(req, sizeof req,
             "GET /v1/definitions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " T_ADMIN
             "\r\nContent-Length: 0\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(smuggled), smuggled);
    char *ans = raw_exchange(req, strlen(req));
    printf("\n  two Content-Length: %.40s; answers %d; smuggled instances %lld\n", ans,
           count_of(ans, "HTTP/1.1 "), instances_of(ref));
    expect_raw_problem("two content-length", ans, 400, "duplicate_content_length");
    CU_ASSERT_EQUAL(count_of(ans, "HTTP/1.1 "), 1);
    free(ans);
    /* Content-Length and Transfer-Encoding together. */
    snprintf(req, sizeof req,
             "POST /v1/definitions/validate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " T_ADMIN
             "\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", smuggled);
    ans = raw_exchange(req, strlen(req));
    expect_raw_problem("content-length with transfer-encoding", ans, 400,
                       "content_length_with_transfer_encoding");
    CU_ASSERT_EQUAL(count_of(ans, "HTTP/1.1 "), 1);
    free(ans);
    /* A chunked body is refused (bodies need a Content-Length), and nothing after it
     * on the connection runs. */
    snprintf(req, sizeof req,
             "POST /v1/definitions/validate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " T_ADMIN
             "\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n%s", smuggled);
    ans = raw_exchange(req, strlen(req));
    expect_raw_problem("chunked", ans, 411, "length_required");
    CU_ASSERT_EQUAL(count_of(ans, "HTTP/1.1 "), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(ans, "Connection: close"));
    free(ans);
    /* A request target that is not a path, and CONNECT. */
    static const char abs_target[] = "GET //x:y/z HTTP/1.1\r\nHost: x\r\n\r\n";
    ans = raw_exchange(abs_target, strlen(abs_target));
    expect_raw_problem("target //x:y", ans, 400, "invalid_request_line");
    free(ans);
    static const char connect_req[] = "CONNECT a:b HTTP/1.1\r\nHost: x\r\n\r\n";
    ans = raw_exchange(connect_req, strlen(connect_req));
    expect_raw_problem("CONNECT", ans, 501, "method_not_implemented");
    free(ans);
    /* A smuggled start would have been parsed, and queued for the API's command
     * workers, before its connection's first answer was written; a start sent after all
     * of them on a connection of its own is queued behind it. Once that one is
     * answered, the smuggled ones would be there. */
    char marker[256], marker_ref[80];
    snprintf(marker_ref, sizeof marker_ref, "%s-marker", ref);
    snprintf(marker, sizeof marker, "{\"definition\":\"%s\",\"business_ref\":\"%s\"}", flow,
             marker_ref);
    CU_ASSERT_EQUAL(api(T_ADMIN, "POST", "/v1/instances", marker, NULL, NULL, 0), 201);
    CU_ASSERT_EQUAL(instances_of(marker_ref), 1);
    CU_ASSERT_EQUAL(instances_of(ref), 0);
    /* A well-formed keep-alive pair still runs both. */
    snprintf(req, sizeof req,
             "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    ans = raw_exchange(req, strlen(req));
    CU_ASSERT_EQUAL(count_of(ans, "HTTP/1.1 200"), 2);
    free(ans);
}

static void test_head_limits(void)
{
    /* One header bigger than the head limit (8192 here). */
    size_t n = 20000;
    char *req = malloc(n + 200);
    int len = snprintf(req, 200, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(req + len, 'a', n);
    memcpy(req + len + n, "\r\n\r\n", 5);
    char *ans = raw_exchange(req, (size_t)len + n + 4);
    printf("\n  20 kB header: %.40s\n", ans);
    expect_raw_problem("oversized head", ans, 431, "headers_too_large");
    free(ans);
    /* More header fields than the limit (50 here), each small. */
    len = snprintf(req, n, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 60; i++)
        len += snprintf(req + len, n - (size_t)len, "X-H%d: v\r\n", i);
    len += snprintf(req + len, n - (size_t)len, "\r\n");
    ans = raw_exchange(req, (size_t)len);
    expect_raw_problem("too many headers", ans, 431, "too_many_headers");
    free(ans);
    free(req);
    /* A client that keeps sending an endless head is refused once past the limit,
     * without the server buffering it. */
    int fd = connect_api(), closed = 0;
    CU_ASSERT_FATAL(fd >= 0);
    const char *start = "GET /healthz HTTP/1.1\r\nX-Endless: ";
    send_all(fd, start, strlen(start));
    char chunk[4096];
    memset(chunk, 'b', sizeof chunk);
    size_t sent = 0;
    for (int i = 0; i < 64 && send_all(fd, chunk, sizeof chunk); i++)
        sent += sizeof chunk;
    ans = read_all(fd, 3.0, &closed);
    printf("  endless head: sent %zu bytes, answer %.40s, closed %d\n", sent, ans, closed);
    CU_ASSERT_EQUAL(status_of(ans), 431);
    free(ans);
    close(fd);
}

static void test_trickle(void)
{
    int fd = connect_api(), closed = 0;
    CU_ASSERT_FATAL(fd >= 0);
    const char *head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    double t0 = now_s(), cut = 0;
    send_all(fd, head, strlen(head));
    /* One byte every 200 ms: never idle long enough for the inactivity timeout. */
    for (int i = 0; i < 100; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) > 0) {
            char b[256];
            if (recv(fd, b, sizeof b, 0) <= 0) {
                closed = 1;
                break;
            }
        }
        if (!send_all(fd, "c", 1)) {
            closed = 1;
            break;
        }
    }
    cut = now_s() - t0;
    printf("\n  trickling client: cut off %d after %.1f s (deadline %d ms)\n", closed, cut,
           HEAD_TIMEOUT_MS);
    CU_ASSERT(closed);
    CU_ASSERT(cut < HEAD_TIMEOUT_MS / 1000.0 + 10);
    close(fd);
    /* A normal request afterwards is served. */
    CU_ASSERT_EQUAL(api(NULL, "GET", "/healthz", NULL, NULL, NULL, 0), 200);
}

static void test_token_with_nul(void)
{
    static const char head[] = "GET /v1/definitions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " T_ADMIN;
    char req[512];
    size_t len = strlen(head);
    memcpy(req, head, len);
    req[len++] = '\0';
    memcpy(req + len, "junk\r\n\r\n", 8);
    len += 8;
    char *ans = raw_exchange(req, len);
    printf("\n  token + NUL + junk: %.40s\n", ans);
    CU_ASSERT_NOT_EQUAL(status_of(ans), 200);
    CU_ASSERT_TRUE(status_of(ans) == 400 || status_of(ans) == 401);
    CU_ASSERT_PTR_NOT_NULL(strstr(ans, "application/problem+json"));
    free(ans);
    /* A tab and junk after the token (a header value may hold a tab): 401. */
    static const char tab[] = "GET /v1/definitions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " T_ADMIN
                              "\tjunk\r\n\r\n";
    ans = raw_exchange(tab, strlen(tab));
    expect_raw_problem("token + tab + junk", ans, 401, "unauthenticated");
    free(ans);
    /* The same token alone works. */
    CU_ASSERT_EQUAL(api(T_ADMIN, "GET", "/v1/definitions", NULL, NULL, NULL, 0), 200);
}

/* A parked long poll whose client leaves: the edge's close callback marks it gone, and
 * its later answer only frees it (under ASan: no use after free). */
static void test_long_poll_client_leaves(void)
{
    char req[512];
    snprintf(req, sizeof req,
             "GET /v1/instances/%s?wait_ms=1500 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             T_ADMIN "\r\n\r\n", instance);
    for (int i = 0; i < 3; i++) {
        int fd = connect_api();
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT(send_all(fd, req, strlen(req)));
        usleep(200 * 1000);
        close(fd);
    }
    /* One that stays gets its answer at wait_ms. */
    int fd = connect_api(), closed = 0;
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT(send_all(fd, req, strlen(req)));
    char *ans = read_all(fd, 4.0, &closed);
    CU_ASSERT_EQUAL(status_of(ans), 200);
    free(ans);
    close(fd);
    CU_ASSERT_EQUAL(api(NULL, "GET", "/healthz", NULL, NULL, NULL, 0), 200);
}

/* ---- timestamps ---------------------------------------------------------------- */

static regex_t rfc3339;
static int bad_times;

/* Checks every member named *_at, "at" or "until" in `v`, recursively. */
static void check_times(const char *where, json_t *v)
{
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e)
            check_times(where, e);
        return;
    }
    if (!json_is_object(v))
        return;
    const char *k;
    json_t *e;
    json_object_foreach(v, k, e) {
        size_t kl = strlen(k);
        int is_time = strcmp(k, "at") == 0 || strcmp(k, "until") == 0 || strcmp(k, "cutoff") == 0 ||
                      (kl > 3 && strcmp(k + kl - 3, "_at") == 0);
        if (is_time && json_is_string(e)) {
            if (regexec(&rfc3339, json_string_value(e), 0, NULL, 0) != 0) {
                fprintf(stderr, "\n%s: %s = \"%s\" is not RFC 3339 UTC\n", where, k,
                        json_string_value(e));
                bad_times++;
            }
        } else if (is_time && !json_is_null(e)) {
            bad_times++;
        } else {
            check_times(where, e);
        }
    }
}

static int checked_paths;

static void check_path(const char *path)
{
    char *raw = NULL;
    long s = api(T_ADMIN, "GET", path, NULL, &raw, NULL, 0);
    json_error_t jerr;
    json_t *doc = raw ? json_loads(raw, 0, &jerr) : NULL;
    if (s != 200)
        fprintf(stderr, "\n%s: %ld\n", path, s);
    CU_ASSERT_EQUAL(s, 200);
    check_times(path, doc);
    checked_paths++;
    json_decref(doc);
    free(raw);
}

static void test_timestamps(void)
{
    CU_ASSERT_FATAL(regcomp(&rfc3339,
                            "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,6})?Z$",
                            REG_EXTENDED | REG_NOSUB) == 0);
    char path[256], *raw = NULL;
    /* The start's own answer. */
    char body[200];
    snprintf(body, sizeof body, "{\"definition\":\"%s\"}", flow);
    CU_ASSERT_EQUAL(api(T_ADMIN, "POST", "/v1/instances", body, &raw, NULL, 0), 201);
    json_error_t jerr;
    json_t *doc = json_loads(raw ?: "", 0, &jerr);
    check_times("POST /v1/instances", doc);
    CU_ASSERT_PTR_NOT_NULL(json_string_value(json_object_get(doc, "created_at")));
    printf("\n  created_at: %s\n", json_string_value(json_object_get(doc, "created_at")) ?: "-");
    json_decref(doc);
    free(raw);
    /* Wait for the task, so that task, history and runtime hold times. */
    char task[40] = "";
    snprintf(path, sizeof path, "/v1/tasks?instance_id=%s", instance);
    for (int i = 0; i < 200 && task[0] == '\0'; i++) {
        raw = NULL;
        api(T_ADMIN, "GET", path, NULL, &raw, NULL, 0);
        doc = json_loads(raw ?: "", 0, &jerr);
        const char *id = json_string_value(json_object_get(json_array_get(json_object_get(doc, "items"), 0), "id"));
        if (id != NULL)
            snprintf(task, sizeof task, "%s", id);
        json_decref(doc);
        free(raw);
        if (task[0] == '\0')
            usleep(100 * 1000);
    }
    CU_ASSERT_FATAL(task[0] != '\0');
    long long dl = it_sql_number(
        "INSERT INTO strand.dead_letters (source_topic, reason, attempts, node_id, payload)"
        " VALUES ('edge.test', 'test letter', 1, 'test', '\\x0102') RETURNING id");
    CU_ASSERT_FATAL(dl > 0);
    snprintf(path, sizeof path, "/v1/instances/%s", instance);
    check_path(path);
    snprintf(path, sizeof path, "/v1/instances?definition=%s", flow);
    check_path(path);
    snprintf(path, sizeof path, "/v1/instances/%s/history", instance);
    check_path(path);
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", instance);
    check_path(path);
    snprintf(path, sizeof path, "/v1/tasks?instance_id=%s", instance);
    check_path(path);
    snprintf(path, sizeof path, "/v1/tasks/%s", task);
    check_path(path);
    check_path("/v1/dead-letters");
    snprintf(path, sizeof path, "/v1/dead-letters/%lld", dl);
    check_path(path);
    check_path("/v1/definitions");
    snprintf(path, sizeof path, "/v1/definitions/%s/1", flow);
    check_path(path);
    printf("  %d outputs checked, %d timestamps not RFC 3339\n", checked_paths, bad_times);
    CU_ASSERT_EQUAL(bad_times, 0);
    /* The runtime view holds the task's deadline-less entry and pending timers; a
     * history entry has an "at". */
    regfree(&rfc3339);
}

int main(void)
{
    if (!it_init("test_http_edge"))
        return 1;
    static const it_case_t cases[] = {
        {"services start with a token file and small limits", test_start_services},
        {"every error is problem+json; OPTIONS; 405 Allow; bad query values", test_problems},
        {"two Content-Length, CL with TE, chunked, bad targets: nothing smuggled", test_smuggling},
        {"head size and header count limits", test_head_limits},
        {"a trickling client is cut off at the head deadline", test_trickle},
        {"a bearer token followed by NUL is refused", test_token_with_nul},
        {"a long poll whose client leaves", test_long_poll_client_leaves},
        {"every timestamp is RFC 3339 UTC", test_timestamps},
    };
    int rc = it_run_suite("http_edge", cases, (int)(sizeof cases / sizeof cases[0]));
    char path[256];   /* test_start_services()'s token file; the services have stopped */
    snprintf(path, sizeof path, "/tmp/strand-test-edge-tokens-%d.json", (int)getpid());
    unlink(path);
    return rc;
}
