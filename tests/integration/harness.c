/* harness.c - integration-test helpers (see harness.h). */
#include "harness.h"

#include <CUnit/Basic.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "strand/curl_body.h"
#include "strand/proto/strand.pb-c.h"

static const char *const service_names[IT_NSERVICES] = {"api", "executor", "scheduler",
                                                        "monitor"};
static pid_t pids[IT_NSERVICES];
#define MAX_REPLICAS 16
static pid_t replica_pids[MAX_REPLICAS];
static int port_base = 18080;
static char bin_dir[1024];
static char log_dir[1024];
static char test_name_buf[64];
static char topic_prefix[96];

static void kill_children(void)
{
    for (int i = 0; i < MAX_REPLICAS; i++)
        if (replica_pids[i] > 0) {
            kill(replica_pids[i], SIGKILL);
            waitpid(replica_pids[i], NULL, 0);
            replica_pids[i] = 0;
        }
    for (int i = 0; i < IT_NSERVICES; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
}

int it_init(const char *test_name)
{
    if (getenv("STRAND_PG_DSN") == NULL || getenv("STRAND_KAFKA_BROKERS") == NULL) {
        fprintf(stderr, "%s: STRAND_PG_DSN and STRAND_KAFKA_BROKERS must point at a running "
                        "stack; run the tests with scripts/test.sh\n", test_name);
        return 0;
    }
    const char *bin = getenv("STRAND_TEST_BIN_DIR");
    snprintf(bin_dir, sizeof bin_dir, "%s", bin ? bin : ".");
    const char *logs = getenv("STRAND_TEST_LOG_DIR");
    snprintf(log_dir, sizeof log_dir, "%s", logs ? logs : "/tmp");
    const char *base = getenv("STRAND_TEST_PORT_BASE");
    if (base != NULL)
        port_base = atoi(base);
    snprintf(test_name_buf, sizeof test_name_buf, "%s", test_name);
    snprintf(topic_prefix, sizeof topic_prefix, "it%ld%d.", (long)time(NULL), (int)getpid());
    curl_global_init(CURL_GLOBAL_DEFAULT);
    atexit(kill_children);
    return 1;
}

const char *it_topic_prefix(void)
{
    return topic_prefix;
}

const char *it_bin_dir(void)
{
    return bin_dir;
}

int it_port(it_service_t svc)
{
    return port_base + (int)svc;
}

static pid_t spawn(it_service_t svc, int replica)
{
    char path[1200], log_path[1200], port[16], node[64];
    snprintf(path, sizeof path, "%s/services/%s/strand-%s", bin_dir, service_names[svc],
             service_names[svc]);
    snprintf(log_path, sizeof log_path, "%s/%s-%s%s%.0d.log", log_dir, test_name_buf,
             service_names[svc], replica ? "-" : "", replica);
    snprintf(port, sizeof port, "%d", replica ? port_base + 40 + replica * 4 + (int)svc : it_port(svc));
    snprintf(node, sizeof node, "%s-%d", service_names[svc], replica);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* Die with the test: a crashed test must not leave services behind that would
         * keep claiming the shared outbox under another topic prefix. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
        setenv("STRAND_HTTP_PORT", port, 1);
        setenv("STRAND_TOPIC_PREFIX", topic_prefix, 1);
        setenv("STRAND_TOPIC_PARTITIONS", "4", 0);
        setenv("STRAND_NODE_ID", node, 1);
        /* Test workers listen on 127.0.0.1, which calls may reach only when allowed;
         * a test that needs a narrower list sets STRAND_CALL_ALLOW itself. */
        setenv("STRAND_CALL_ALLOW", "127.0.0.1", 0);
        execl(path, path, (char *)NULL);
        fprintf(stderr, "could not exec %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    return pid;
}

pid_t it_start(it_service_t svc)
{
    pid_t pid = spawn(svc, 0);
    if (pid > 0)
        pids[svc] = pid;
    return pid;
}

pid_t it_start_replica(it_service_t svc, int replica)
{
    pid_t pid = spawn(svc, replica);
    for (int i = 0; pid > 0 && i < MAX_REPLICAS; i++)
        if (replica_pids[i] <= 0) {
            replica_pids[i] = pid;
            break;
        }
    return pid;
}

void it_kill9(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (int i = 0; i < IT_NSERVICES; i++)
        if (pids[i] == pid)
            pids[i] = 0;
    for (int i = 0; i < MAX_REPLICAS; i++)
        if (replica_pids[i] == pid)
            replica_pids[i] = 0;
}

int it_stack(const char *args)
{
    const char *src = getenv("STRAND_TEST_SRC_DIR");
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s/scripts/stack.sh %s >>%s/%s-stack.log 2>&1", src ? src : ".",
             args, log_dir, test_name_buf);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int it_start_all(int timeout_s)
{
    /* A case that ended on a fatal assert skipped its it_stop_all(); its services
     * would still answer on these ports and hide the new ones failing to bind. */
    for (int i = 0; i < IT_NSERVICES; i++)
        if (pids[i] > 0) {
            fprintf(stderr, "%s was left running by the previous case; stopping it\n",
                    service_names[i]);
            it_stop((it_service_t)i, SIGTERM, 30);
        }
    for (int i = 0; i < IT_NSERVICES; i++)
        if (it_start((it_service_t)i) < 0)
            return 0;
    time_t deadline = time(NULL) + timeout_s;
    for (int i = 0; i < IT_NSERVICES; i++) {
        while (it_http((it_service_t)i, "GET", "/readyz", NULL, NULL) != 200) {
            if (time(NULL) >= deadline) {
                fprintf(stderr, "%s did not become ready in %d s (log: %s/%s-%s.log)\n",
                        service_names[i], timeout_s, log_dir, test_name_buf, service_names[i]);
                return 0;
            }
            usleep(100 * 1000);
        }
    }
    return 1;
}

int it_stop(it_service_t svc, int sig, int timeout_s)
{
    pid_t pid = pids[svc];
    if (pid <= 0)
        return -1;
    kill(pid, sig);
    for (int waited_ms = 0; waited_ms < timeout_s * 1000; waited_ms += 20) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            pids[svc] = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(20 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    pids[svc] = 0;
    return -1;
}

int it_stop_all(void)
{
    int ok = 1;
    for (int i = 0; i < IT_NSERVICES; i++) {
        if (pids[i] <= 0)
            continue;
        int rc = it_stop((it_service_t)i, SIGTERM, 30);
        if (rc != 0) {
            fprintf(stderr, "%s exited with %d after SIGTERM\n", service_names[i], rc);
            ok = 0;
        }
    }
    return ok;
}

long it_http_request(it_service_t svc, const char *token, const char *method, const char *path,
                     const char *body, char **raw, char *ctype, size_t ctype_len)
{
    char url[1024], auth[200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", it_port(svc), path);
    CURL *curl = curl_easy_init();
    st_curl_body_t b = {0};
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (token != NULL) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append(headers, auth);
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, st_curl_body_collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
    if (body != NULL)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    long status = -1;
    if (curl_easy_perform(curl) == CURLE_OK) {
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        char *ct = NULL;
        curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ct);
        if (ctype != NULL)
            snprintf(ctype, ctype_len, "%s", ct ? ct : "");
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    *raw = b.data;
    return status;
}

long it_req(it_service_t svc, const char *token, const char *method, const char *path,
            const char *body, json_t **out)
{
    char *raw = NULL;
    long status = it_http_request(svc, token, method, path, body, &raw, NULL, 0);
    if (out != NULL) {
        json_error_t jerr;
        *out = raw ? json_loads(raw, JSON_DECODE_ANY, &jerr) : NULL;
    }
    free(raw);
    return status;
}

long it_http(it_service_t svc, const char *method, const char *path, const char *body,
             json_t **out)
{
    return it_req(svc, NULL, method, path, body, out);
}

long it_http_text(it_service_t svc, const char *path, char **text)
{
    return it_http_request(svc, NULL, "GET", path, NULL, text, NULL, 0);
}

long long it_sql_number(const char *sql)
{
    PGconn *conn = PQconnectdb(getenv("STRAND_PG_DSN"));
    long long value = -1;
    if (PQstatus(conn) == CONNECTION_OK) {
        PGresult *res = PQexec(conn, sql);
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0)
            value = atoll(PQgetvalue(res, 0, 0));
        else
            fprintf(stderr, "query failed: %s: %s\n", sql, PQerrorMessage(conn));
        PQclear(res);
    }
    PQfinish(conn);
    return value;
}

long long it_wait_number(const char *sql, long long want, int timeout_s)
{
    time_t deadline = time(NULL) + timeout_s;
    long long value = -1;
    while (time(NULL) < deadline && (value = it_sql_number(sql)) < want)
        usleep(50 * 1000);
    return value;
}

int it_run_suite(const char *suite_name, const it_case_t *cases, int ncases)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite suite = CU_add_suite(suite_name, NULL, NULL);
    for (int i = 0; i < ncases; i++)
        CU_add_test(suite, cases[i].name, cases[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    unsigned ran = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    it_stop_all();
    return failed == 0 && ran == (unsigned)ncases ? 0 : 1;
}

static int ended(const char *status)
{
    return strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0 ||
           strcmp(status, "cancelled") == 0 || strcmp(status, "terminated") == 0;
}

json_t *it_wait_instance(const char *id, const char *want, int timeout_s)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    time_t deadline = time(NULL) + timeout_s;
    while (time(NULL) < deadline) {
        json_t *answer = NULL;
        if (it_http(IT_API, "GET", path, NULL, &answer) == 200) {
            const char *status = json_string_value(json_object_get(answer, "status"));
            if (status && (want ? strcmp(status, want) == 0 : ended(status)))
                return answer;
            if (status && want && ended(status)) {
                char *text = json_dumps(answer, JSON_COMPACT);
                fprintf(stderr, "instance ended as %s, not %s: %s\n", status, want, text);
                free(text);
                json_decref(answer);
                return NULL;
            }
        }
        json_decref(answer);
        usleep(50 * 1000);
    }
    return NULL;
}

int it_produce_ingress(const void *bytes, size_t len)
{
    const unsigned char *b = bytes;
    char *sql = malloc(len * 2 + 256);
    if (sql == NULL)
        return 0;
    size_t n = (size_t)sprintf(sql, "WITH ins AS (INSERT INTO strand.outbox (topic, key, payload)"
                                    " VALUES ('ingress', 'k', '\\x");
    for (size_t i = 0; i < len; i++)
        n += (size_t)sprintf(sql + n, "%02x", b[i]);
    sprintf(sql + n, "'::bytea) RETURNING 1), n AS (SELECT pg_notify('strand_outbox', ''))"
                     " SELECT count(*) FROM ins, n");
    long long rows = it_sql_number(sql);
    free(sql);
    return rows == 1;
}

char *it_start_instance(const char *token, const char *definition, const char *input)
{
    if (input == NULL)
        input = "{}";
    size_t cap = strlen(definition) + strlen(input) + 64;
    char *body = malloc(cap);
    if (body == NULL)
        return NULL;
    snprintf(body, cap, "{\"definition\":\"%s\",\"input\":%s}", definition, input);
    json_t *answer = NULL;
    long status = it_req(IT_API, token, "POST", "/v1/instances", body, &answer);
    free(body);
    CU_ASSERT_EQUAL(status, 201);
    const char *id = json_string_value(json_object_get(answer, "id"));
    char *copy = status == 201 && id ? strdup(id) : NULL;
    json_decref(answer);
    return copy;
}

void it_import(const char *token, const char *doc)
{
    json_t *answer = NULL;
    long status = it_req(IT_API, token, "POST", "/v1/definitions", doc, &answer);
    if (status != 201) {
        char *text = json_dumps(answer, JSON_COMPACT);
        fprintf(stderr, "import answered %ld: %s\n", status, text ? text : "");
        free(text);
    }
    CU_ASSERT_EQUAL(status, 201);
    json_decref(answer);
}

char *it_wait_open_task(const char *token, const char *instance_id, int timeout_s)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/tasks?instance_id=%s&status=open", instance_id);
    time_t deadline = time(NULL) + timeout_s;
    while (time(NULL) < deadline) {
        json_t *answer = NULL;
        char *copy = NULL;
        if (it_req(IT_API, token, "GET", path, NULL, &answer) == 200) {
            const char *id = json_string_value(json_object_get(
                json_array_get(json_object_get(answer, "items"), 0), "id"));
            copy = id ? strdup(id) : NULL;
        }
        json_decref(answer);
        if (copy)
            return copy;
        usleep(50 * 1000);
    }
    return NULL;
}

char *it_sql_text(const char *sql)
{
    PGconn *conn = PQconnectdb(getenv("STRAND_PG_DSN"));
    char *out = NULL;
    if (PQstatus(conn) == CONNECTION_OK) {
        PGresult *res = PQexec(conn, sql);
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
            out = strdup(PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    PQfinish(conn);
    return out;
}

char *it_wait_text(const char *sql, int timeout_s)
{
    time_t deadline = time(NULL) + timeout_s;
    while (time(NULL) < deadline) {
        char *v = it_sql_text(sql);
        if (v != NULL)
            return v;
        usleep(50 * 1000);
    }
    return NULL;
}

double it_metric(it_service_t svc, const char *series, double absent)
{
    char *text = NULL;
    it_http_text(svc, "/metrics", &text);
    char needle[400];
    snprintf(needle, sizeof needle, "\n%s ", series);
    const char *p = text ? strstr(text, needle) : NULL;
    double v = p ? atof(p + strlen(needle)) : absent;
    free(text);
    return v;
}

int it_wait_http(it_service_t svc, const char *path, long want, int timeout_s)
{
    time_t deadline = time(NULL) + timeout_s;
    for (;;) {
        if (it_http(svc, "GET", path, NULL, NULL) == want)
            return 1;
        if (time(NULL) >= deadline)
            return 0;
        usleep(100 * 1000);
    }
}

size_t it_pack_command(int type, const char *token, const char *target, const char *args,
                       uint8_t *buf, size_t cap)
{
    Strand__V1__IngressCommand cmd = STRAND__V1__INGRESS_COMMAND__INIT;
    cmd.envelope_version = 1;
    cmd.type = (Strand__V1__CommandType)type;
    if (token != NULL)
        cmd.token = (char *)token;
    if (target != NULL)
        cmd.target_id = (char *)target;
    cmd.args.data = (uint8_t *)args;
    cmd.args.len = strlen(args);
    if (strand__v1__ingress_command__get_packed_size(&cmd) > cap)
        return 0;
    return strand__v1__ingress_command__pack(&cmd, buf);
}

int it_produce_command(int type, const char *token, const char *target, const char *args)
{
    uint8_t buf[4096];
    size_t len = it_pack_command(type, token, target, args, buf, sizeof buf);
    return len > 0 && it_produce_ingress(buf, len);
}

int it_sql_exec(const char *sql)
{
    PGconn *conn = PQconnectdb(getenv("STRAND_PG_DSN"));
    PGresult *res = PQexec(conn, sql);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "sql failed: %s: %s\n", sql, PQerrorMessage(conn));
    PQclear(res);
    PQfinish(conn);
    return ok;
}

PGconn *it_pg_session(const char *first)
{
    PGconn *conn = PQconnectdb(getenv("STRAND_PG_DSN"));
    CU_ASSERT_EQUAL_FATAL(PQstatus(conn), CONNECTION_OK);
    PGresult *res = PQexec(conn, first);
    CU_ASSERT_EQUAL(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    return conn;
}

PGconn *it_pg_begin(void)
{
    return it_pg_session("BEGIN");
}

void it_pg_commit(PGconn *conn)
{
    PGresult *res = PQexec(conn, "COMMIT");
    CU_ASSERT_EQUAL(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    PQfinish(conn);
}

void it_start_api_executor(const char *auth_file)
{
    if (auth_file != NULL)
        setenv("STRAND_AUTH_FILE", auth_file, 1);
    CU_ASSERT_FATAL(it_start(IT_API) > 0);
    CU_ASSERT_FATAL(it_start(IT_EXECUTOR) > 0);
    int ready = it_wait_http(IT_API, "/readyz", 200, 60);
    if (auth_file != NULL)
        unlink(auth_file);
    CU_ASSERT_FATAL(ready);
}

int it_strandctl(const char *token, const char *args, char **out)
{
    char cmd[2048], url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", it_port(IT_API));
    setenv("STRAND_API_URL", url, 1);
    if (token)
        setenv("STRAND_API_TOKEN", token, 1);
    else
        unsetenv("STRAND_API_TOKEN");
    snprintf(cmd, sizeof cmd, "%s/services/strandctl/strandctl %s 2>&1", it_bin_dir(), args);
    FILE *p = popen(cmd, "r");
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    char chunk[4096];
    size_t n;
    while (p != NULL && mem != NULL && (n = fread(chunk, 1, sizeof chunk, p)) > 0)
        fwrite(chunk, 1, n, mem);
    if (mem != NULL)
        fclose(mem);
    int status = p ? pclose(p) : -1;
    if (out != NULL)
        *out = text ? text : strdup("");
    else
        free(text);
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
