/*
 * test_edge_security.c - where calls may go and who may send commands (issue 21), on the
 * real services:
 *  - STRAND_CALL_ALLOW: a flow call to the API itself (http://127.0.0.1:<api>/v1/
 *    dead-letters), to the cloud metadata address (169.254.169.254) or to a loopback
 *    port not listed fails at once with call_refused (no retries, the target never
 *    hit), while the listed worker answers; "localhost" (a name resolving to a loopback
 *    address) is refused although 127.0.0.1:<worker> is listed, since only the address
 *    actually connected to counts; a redirect from the allowed worker to a refused
 *    address is not followed;
 *  - the Kafka ingress refuses a token with a NUL byte (a valid token followed by NUL
 *    and junk), as the HTTP edge does;
 *  - the token file (STRAND_AUTH_FILE) is read again on SIGHUP and when it changes,
 *    and a broken file keeps the tokens in force;
 *  - an API replica with STRAND_HTTP_TLS_CERT_FILE/KEY_FILE (a self-signed pair made
 *    with openssl here) answers over https, refuses plain http on its port, keeps the
 *    HTTP edge's checks (a control character in a header: 400), and serves a replaced
 *    certificate after SIGHUP or, without a signal, after the periodic check.
 * The test runs a small HTTP worker (allowed) and a trap (not allowed) in-process.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sys/stat.h>

#include "harness.h"
#include "st_test.h"
#include "strand/proto/strand.pb-c.h"

#define T_ADMIN "edge-admin-token-0123456789"

#define T_NEW "edge-new-token-0123456789"
#define T_THIRD "edge-third-token-0123456789"

static int worker_port, trap_port;
static pid_t api_pid;
static char token_path[256];
static int trap_hits;
static char suffix[32];

/* ---- the worker and the trap ------------------------------------------------------- */

typedef struct {
    int lfd;
    int is_trap;
} listener_t;

/* Answers one request: /ok 200, /redirect 302 to the trap; the trap counts its hits. */
static void *serve_one(void *arg)
{
    long packed = (long)arg;
    int fd = (int)(packed >> 1), is_trap = (int)(packed & 1);
    char buf[8192];
    size_t len = 0;
    while (len + 1 < sizeof buf) {
        ssize_t got = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (got <= 0)
            break;
        len += (size_t)got;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n") != NULL)
            break;
    }
    buf[len] = '\0';
    char path[128] = "";
    sscanf(buf, "%*15s %127s", path);
    char answer[512];
    int n;
    if (is_trap) {
        __atomic_add_fetch(&trap_hits, 1, __ATOMIC_SEQ_CST);
        n = snprintf(answer, sizeof answer, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                            "Content-Length: 15\r\nConnection: close\r\n\r\n{\"trapped\":true}");
    } else if (strcmp(path, "/redirect") == 0) {
        n = snprintf(answer, sizeof answer,
                     "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/secret\r\n"
                     "Content-Length: 0\r\nConnection: close\r\n\r\n", trap_port);
    } else {
        n = snprintf(answer, sizeof answer, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                            "Content-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}");
    }
    ssize_t sent = send(fd, answer, (size_t)n, MSG_NOSIGNAL);
    (void)sent;
    close(fd);
    return NULL;
}

static void *accept_loop(void *arg)
{
    listener_t *l = arg;
    for (;;) {
        int fd = accept(l->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_t t;
        if (pthread_create(&t, NULL, serve_one, (void *)(((long)fd << 1) | l->is_trap)) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
    return NULL;
}

/* Listens on 127.0.0.1 from `port` on (the next free of ten); returns the port or 0. */
static int listen_on(int port, int is_trap)
{
    static listener_t ls[2];
    listener_t *l = &ls[is_trap];
    l->is_trap = is_trap;
    l->lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 10; i++) {
        addr.sin_port = htons((uint16_t)(port + i));
        if (bind(l->lfd, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(l->lfd, 64) == 0) {
            pthread_t t;
            pthread_create(&t, NULL, accept_loop, l);
            return port + i;
        }
    }
    perror("test listener");
    return 0;
}

/* ---- helpers -------------------------------------------------------------------------- */

static long api(const char *method, const char *path, const char *body, json_t **out)
{
    char *raw = NULL;
    long status = it_http_request(IT_API, T_ADMIN, method, path, body, &raw, NULL, 0);
    if (out != NULL) {
        json_error_t jerr;
        *out = raw ? json_loads(raw, 0, &jerr) : NULL;
    }
    free(raw);
    return status;
}

/* Imports flow edge_<name>_<suffix>: one call to `url`, with three attempts. */
static void import_call(const char *name, const char *url)
{
    char doc[1024];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"edge_%s_%s\",\"version\":1,\"steps\":["
             "{\"id\":\"c\",\"type\":\"call\",\"transport\":\"http\",\"timeout\":5000,"
             "\"request\":{\"url\":\"'%s'\",\"method\":\"'GET'\"},"
             "\"retry\":{\"max_attempts\":3,\"backoff_ms\":200}},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"answer\":\"state.c\"}}]}",
             name, suffix, url);
    json_t *answer = NULL;
    long status = api("POST", "/v1/definitions", doc, &answer);
    if (status != 201) {
        char *text = json_dumps(answer, JSON_COMPACT);
        fprintf(stderr, "import %s answered %ld: %s\n", name, status, text);
        free(text);
    }
    CU_ASSERT_EQUAL(status, 201);
    json_decref(answer);
}

/* Starts an instance of flow `name` and waits until it ends; returns it (caller
 * decrefs) or NULL. */
static json_t *run(const char *name)
{
    char body[256], path[128];
    snprintf(body, sizeof body, "{\"definition\":\"edge_%s_%s\",\"input\":{}}", name, suffix);
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(api("POST", "/v1/instances", body, &answer), 201);
    const char *id = json_string_value(json_object_get(answer, "id"));
    if (id == NULL) {
        json_decref(answer);
        return NULL;
    }
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    json_decref(answer);
    for (int i = 0; i < 600; i++) {
        json_t *inst = NULL;
        api("GET", path, NULL, &inst);
        const char *status = json_string_value(json_object_get(inst, "status"));
        if (status && (strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0))
            return inst;
        json_decref(inst);
        usleep(100 * 1000);
    }
    return NULL;
}

/* Runs flow `name` and checks it failed with call_refused after one attempt. */
static void expect_refused(const char *name)
{
    json_t *inst = run(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(inst);
    char *text = json_dumps(json_object_get(inst, "error"), JSON_COMPACT);
    printf("\n  %s: %s %s", name, json_string_value(json_object_get(inst, "status")), text);
    const json_t *error = json_object_get(inst, "error");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(inst, "status")), "failed");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(error, "code")) ?: "", "call_refused");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(error, "attempts")), 1);
    free(text);
    json_decref(inst);
}

/* Writes the token file with admin tokens `a` and `b` (NULL: none) as a new file
 * renamed over the old one, the way a Secret update or an editor replaces it. */
static int write_tokens(const char *a, const char *b)
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", token_path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return 0;
    fprintf(f, "{\"tokens\": [{\"token\": \"%s\", \"principal\": \"root\", \"roles\": [\"admin\"]}", a);
    if (b != NULL)
        fprintf(f, ", {\"token\": \"%s\", \"principal\": \"second\", \"roles\": [\"admin\"]}", b);
    fprintf(f, "]}");
    return fclose(f) == 0 && rename(tmp, token_path) == 0;
}

/* GET /v1/definitions with `token`: the status. */
static long with_token(const char *token)
{
    char *raw = NULL;
    long status = it_http_request(IT_API, token, "GET", "/v1/definitions", NULL, &raw, NULL, 0);
    free(raw);
    return status;
}

/* Polls until `token` answers `want` or `timeout_s` pass; returns the last status. */
static long wait_token(const char *token, long want, int timeout_s, double *took)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long status;
    for (int i = 0; (status = with_token(token)) != want && i < timeout_s * 10; i++)
        usleep(100 * 1000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    return status;
}

/* ---- the cases ------------------------------------------------------------------------ */

static void test_start(void)
{
    snprintf(suffix, sizeof suffix, "%d", (int)getpid());
    worker_port = listen_on(it_port(IT_API) + 30, 0);
    trap_port = listen_on(it_port(IT_API) + 20, 1);
    CU_ASSERT_FATAL(worker_port > 0 && trap_port > 0);
    char allow[128];
    snprintf(token_path, sizeof token_path, "/tmp/strand-test-edge-tokens-%d.json", (int)getpid());
    CU_ASSERT_FATAL(write_tokens(T_ADMIN, NULL));
    setenv("STRAND_AUTH_FILE", token_path, 1);
    /* Only the worker; "example.com" stands for a public host the operator lists. */
    snprintf(allow, sizeof allow, "example.com, 127.0.0.1:%d", worker_port);
    setenv("STRAND_CALL_ALLOW", allow, 1);
    CU_ASSERT_FATAL((api_pid = it_start(IT_API)) > 0);
    CU_ASSERT_FATAL(it_start(IT_EXECUTOR) > 0);
    CU_ASSERT_FATAL(it_start(IT_SCHEDULER) > 0);   /* retries wait on timers */
    int ready = 0;
    for (int i = 0; i < 900 && !ready; i++) {
        ready = it_http(IT_API, "GET", "/readyz", NULL, NULL) == 200 &&
                it_http(IT_EXECUTOR, "GET", "/readyz", NULL, NULL) == 200 &&
                it_http(IT_SCHEDULER, "GET", "/readyz", NULL, NULL) == 200;
        if (!ready)
            usleep(100 * 1000);
    }
    CU_ASSERT_FATAL(ready);
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ok", worker_port);
    import_call("allowed", url);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/dead-letters", it_port(IT_API));
    import_call("api", url);
    import_call("metadata", "http://169.254.169.254/latest/meta-data/");
    snprintf(url, sizeof url, "http://127.0.0.1:%d/secret", trap_port);
    import_call("trap", url);
    snprintf(url, sizeof url, "http://localhost:%d/ok", worker_port);
    import_call("localhost", url);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/redirect", worker_port);
    import_call("redirect", url);
}

/* The listed worker answers. */
static void test_allowed_worker(void)
{
    json_t *inst = run("allowed");
    CU_ASSERT_PTR_NOT_NULL_FATAL(inst);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(inst, "status")), "completed");
    json_decref(inst);
}

/* The API, the metadata address and an unlisted loopback port: refused, not retried,
 * never reached. */
static void test_refused_targets(void)
{
    double t0 = (double)time(NULL);
    expect_refused("api");
    expect_refused("metadata");
    expect_refused("trap");
    printf("\n  three refused calls ended in %.0f s; trap hits %d\n", (double)time(NULL) - t0,
           trap_hits);
    CU_ASSERT_EQUAL(__atomic_load_n(&trap_hits, __ATOMIC_SEQ_CST), 0);
}

/* "localhost" resolves to 127.0.0.1: the address counts, not the name. */
static void test_name_resolving_to_loopback(void)
{
    expect_refused("localhost");
}

/* A redirect to the trap is not followed: the call fails on the 302. */
static void test_redirect_not_followed(void)
{
    json_t *inst = run("redirect");
    CU_ASSERT_PTR_NOT_NULL_FATAL(inst);
    char *text = json_dumps(json_object_get(inst, "error"), JSON_COMPACT);
    printf("\n  redirect: %s %s\n", json_string_value(json_object_get(inst, "status")), text);
    free(text);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(inst, "status")), "failed");
    const json_t *result = json_object_get(json_object_get(inst, "error"), "result");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(result, "status")), 302);
    CU_ASSERT_EQUAL(__atomic_load_n(&trap_hits, __ATOMIC_SEQ_CST), 0);
    json_decref(inst);
}

/* Publishes a START whose token is `token` with byte `nul_at` (if >= 0) made a NUL. */
static int produce_start(const char *token, int nul_at, const char *ref)
{
    char args[300];
    snprintf(args, sizeof args, "{\"definition\":\"edge_allowed_%s\",\"business_ref\":\"%s\"}",
             suffix, ref);
    Strand__V1__IngressCommand cmd = STRAND__V1__INGRESS_COMMAND__INIT;
    cmd.envelope_version = 1;
    cmd.type = STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_START;
    cmd.token = (char *)token;
    cmd.target_id = "";
    cmd.args.data = (uint8_t *)args;
    cmd.args.len = strlen(args);
    uint8_t buf[1024];
    size_t len = strand__v1__ingress_command__pack(&cmd, buf);
    if (nul_at >= 0) {
        uint8_t *at = memmem(buf, len, token, strlen(token));
        if (at == NULL)
            return 0;
        at[nul_at] = 0;
    }
    return it_produce_ingress(buf, len);
}

/* A token with a NUL in the envelope is refused (401, a dead letter), the clean one
 * starts its instance. */
static void test_ingress_token_with_nul(void)
{
    char bad_ref[64], good_ref[64], sql[400];
    snprintf(bad_ref, sizeof bad_ref, "edge-nul-%s", suffix);
    snprintf(good_ref, sizeof good_ref, "edge-clean-%s", suffix);
    const char *letters_sql = "SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE"
                              " '%ingress' AND reason LIKE '%token%'";
    long long letters = it_sql_number(letters_sql);
    /* the admin token, a NUL, and junk: strlen() would read only the admin token */
    CU_ASSERT_TRUE(produce_start(T_ADMIN "Xjunk", (int)strlen(T_ADMIN), bad_ref));
    CU_ASSERT_TRUE(produce_start(T_ADMIN, -1, good_ref));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE business_ref = '%s'",
             good_ref);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 60), 1);
    CU_ASSERT_EQUAL(it_wait_number(letters_sql, letters + 1, 60), letters + 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE business_ref = '%s'",
             bad_ref);
    long long bad = it_sql_number(sql);
    printf("\n  ingress: instances started with a NUL token: %lld (want 0)\n", bad);
    CU_ASSERT_EQUAL(bad, 0);
}

/* Lines of the API's log (appended to across runs) that contain `what`. */
static int log_count(const char *what)
{
    char path[600], line[4096];
    snprintf(path, sizeof path, "%s/test_edge_security-api.log", getenv("STRAND_TEST_LOG_DIR") ?: "/tmp");
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        n += strstr(line, what) != NULL;
    if (f != NULL)
        fclose(f);
    return n;
}

/* The token file is read again on SIGHUP and when it changes; a broken one keeps the
 * tokens in force. */
static void test_token_file_reload(void)
{
    double took;
    CU_ASSERT_EQUAL(with_token(T_NEW), 401);
    /* a new token, then SIGHUP */
    CU_ASSERT_FATAL(write_tokens(T_ADMIN, T_NEW));
    kill(api_pid, SIGHUP);
    CU_ASSERT_EQUAL(wait_token(T_NEW, 200, 10, &took), 200);
    printf("\n  token file + SIGHUP: new token accepted after %.2f s", took);
    /* a broken file: the old tokens stay, the API stays up, an error is logged */
    int errors_before = log_count("could not reload the token file");
    FILE *f = fopen(token_path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"tokens\": [ this is not JSON");
    fclose(f);
    kill(api_pid, SIGHUP);
    /* The reload has been tried once the API says it failed; the tokens in force after
     * that are still the old ones. */
    int logged = 0;
    for (int i = 0; i < 100 && !logged; i++) {
        logged = log_count("could not reload the token file") > errors_before;
        if (!logged)
            usleep(100 * 1000);
    }
    CU_ASSERT_TRUE(logged);
    CU_ASSERT_EQUAL(with_token(T_NEW), 200);
    CU_ASSERT_EQUAL(with_token(T_ADMIN), 200);
    /* a changed file without a signal: picked up by the periodic check */
    CU_ASSERT_FATAL(write_tokens(T_ADMIN, T_THIRD));
    CU_ASSERT_EQUAL(wait_token(T_THIRD, 200, 30, &took), 200);
    printf("\n  token file changed, no signal: new token accepted after %.2f s", took);
    CU_ASSERT_EQUAL(with_token(T_NEW), 401);
    CU_ASSERT_EQUAL(with_token(T_ADMIN), 200);
    printf("\n");
    unlink(token_path);
}

/* ---- TLS ---- */

static char tls_dir[128];
static pid_t tls_pid;

static int tls_port(void)
{
    return it_port(IT_API) + 44;   /* replica 1 of the API (harness.c) */
}

static size_t keep_text(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    (void)arg;
    return size * n;
}

/* GET `path` on the TLS replica over `scheme` ("https" or "http"). Returns the status
 * (-1: no HTTP answer); `cn` gets the served certificate's subject (https). */
static long tls_get(const char *scheme, const char *path, const char *token, char *cn, size_t cn_len)
{
    char url[256], auth[200];
    snprintf(url, sizeof url, "%s://127.0.0.1:%d%s", scheme, tls_port(), path);
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = NULL;
    if (token != NULL) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append(NULL, auth);
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);   /* self-signed */
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
    curl_easy_setopt(curl, CURLOPT_CERTINFO, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, keep_text);
    long status = -1;
    if (cn != NULL)
        cn[0] = '\0';
    if (curl_easy_perform(curl) == CURLE_OK) {
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        struct curl_certinfo *ci = NULL;
        if (cn != NULL && curl_easy_getinfo(curl, CURLINFO_CERTINFO, &ci) == CURLE_OK && ci &&
            ci->num_of_certs > 0)
            for (struct curl_slist *l = ci->certinfo[0]; l != NULL; l = l->next)
                if (strncmp(l->data, "Subject:", 8) == 0)
                    snprintf(cn, cn_len, "%s", l->data + 8);
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return status;
}

/* Makes a self-signed pair <tls_dir>/<name>.crt and .key with subject CN=<name>. */
static int make_pair(const char *name)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=%s -keyout %s/%s.key"
             " -out %s/%s.crt >/dev/null 2>&1", name, tls_dir, name, tls_dir, name);
    return system(cmd) == 0;
}

/* Installs pair `name` as the served tls.crt and tls.key (key first, each renamed over). */
static int install_pair(const char *name)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd,
             "cp %1$s/%2$s.key %1$s/new.key && mv %1$s/new.key %1$s/tls.key && "
             "cp %1$s/%2$s.crt %1$s/new.crt && mv %1$s/new.crt %1$s/tls.crt", tls_dir, name);
    return system(cmd) == 0;
}

/* Polls until the served certificate's subject contains `want`; returns 1 if it did. */
static int wait_cert(const char *want, int timeout_s, double *took)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char cn[256] = "";
    int seen = 0;
    /* bounded by time: an attempt can take its whole 10 s timeout (a server that does
     * not speak TLS holds the handshake's bytes as a partial head) */
    for (;;) {
        seen = tls_get("https", "/healthz", NULL, cn, sizeof cn) == 200 && strstr(cn, want) != NULL;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (seen || t1.tv_sec - t0.tv_sec >= timeout_s)
            break;
        usleep(100 * 1000);
    }
    *took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    return seen;
}

static void test_tls_listener(void)
{
    snprintf(tls_dir, sizeof tls_dir, "/tmp/strand-test-edge-tls-%d", (int)getpid());
    mkdir(tls_dir, 0700);
    CU_ASSERT_FATAL(make_pair("cert-one") && make_pair("cert-two") && install_pair("cert-one"));
    char cert[200], key[200];
    snprintf(cert, sizeof cert, "%s/tls.crt", tls_dir);
    snprintf(key, sizeof key, "%s/tls.key", tls_dir);
    CU_ASSERT_FATAL(write_tokens(T_ADMIN, NULL));
    setenv("STRAND_HTTP_TLS_CERT_FILE", cert, 1);
    setenv("STRAND_HTTP_TLS_KEY_FILE", key, 1);
    tls_pid = it_start_replica(IT_API, 1);
    unsetenv("STRAND_HTTP_TLS_CERT_FILE");
    unsetenv("STRAND_HTTP_TLS_KEY_FILE");
    CU_ASSERT_FATAL(tls_pid > 0);
    double took;
    CU_ASSERT_FATAL(wait_cert("cert-one", 90, &took));
    /* https answers, with authentication as usual */
    CU_ASSERT_EQUAL(tls_get("https", "/v1/definitions", T_ADMIN, NULL, 0), 200);
    CU_ASSERT_EQUAL(tls_get("https", "/v1/definitions", NULL, NULL, 0), 401);
    /* plain http on the TLS port: no HTTP answer */
    long plain = tls_get("http", "/healthz", NULL, NULL, 0);
    printf("\n  tls: plain http on the https port answered %ld", plain);
    CU_ASSERT_EQUAL(plain, -1);
    /* the edge still checks the (decrypted) head: a control character is a 400 */
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%d/", tls_port());
    CURL *curl = curl_easy_init();
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
    curl_easy_setopt(curl, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
    char answer[2048] = "";
    size_t got = 0;
    if (curl_easy_perform(curl) == CURLE_OK) {
        static const char head[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\001b\r\n\r\n";
        size_t sent = 0;
        curl_easy_send(curl, head, sizeof head - 1, &sent);
        for (int i = 0; i < 100 && got < 12; i++) {
            size_t n = 0;
            CURLcode rc = curl_easy_recv(curl, answer + got, sizeof answer - 1 - got, &n);
            if (rc == CURLE_AGAIN) {
                usleep(50 * 1000);
                continue;
            }
            if (rc != CURLE_OK || n == 0)
                break;
            got += n;
        }
    }
    answer[got] = '\0';
    curl_easy_cleanup(curl);
    printf("\n  tls: a head with a control character answered \"%.12s\"", answer);
    CU_ASSERT_EQUAL(strncmp(answer, "HTTP/1.1 400", 12), 0);
    /* a new certificate: SIGHUP */
    CU_ASSERT_FATAL(install_pair("cert-two"));
    kill(tls_pid, SIGHUP);
    CU_ASSERT_TRUE(wait_cert("cert-two", 10, &took));
    printf("\n  tls: certificate replaced + SIGHUP: served after %.2f s", took);
    /* and back, without a signal: the periodic check */
    CU_ASSERT_FATAL(install_pair("cert-one"));
    CU_ASSERT_TRUE(wait_cert("cert-one", 30, &took));
    printf("\n  tls: certificate replaced, no signal: served after %.2f s\n", took);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tls_dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

int main(void)
{
    if (!it_init("test_edge_security"))
        return 1;
    static const it_case_t cases[] = {
        {"services start with an allow-list and a token file", test_start},
        {"the listed worker answers", test_allowed_worker},
        {"the API, metadata and unlisted ports: call_refused", test_refused_targets},
        {"a name resolving to loopback is refused", test_name_resolving_to_loopback},
        {"a redirect is not followed", test_redirect_not_followed},
        {"kafka ingress: a token with a NUL is refused", test_ingress_token_with_nul},
        {"the token file is reloaded without restart", test_token_file_reload},
        {"the API over TLS, its certificate reloaded", test_tls_listener},
    };
    int rc = it_run_suite("edge_security", cases, (int)(sizeof cases / sizeof cases[0]));
    unlink(token_path);   /* the services have stopped */
    return rc;
}
