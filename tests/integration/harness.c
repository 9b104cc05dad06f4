/* harness.c - integration-test helpers (see harness.h). */
#include "harness.h"

#include <CUnit/Basic.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
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
static it_service_t replica_svc[MAX_REPLICAS];
static int replica_no[MAX_REPLICAS];
static int port_base = 18080;
static char bin_dir[1024];
static char log_dir[1024];
static char test_name_buf[64];
static char topic_prefix[96];

/* The logs this program writes (<log dir>/<test>-*.log: its services', and those of
 * the tools it runs itself, such as strand-admin), each with its size before this run:
 * logs are appended to across runs, and only this run's part is quoted and scanned
 * for sanitizer reports. */
#define MAX_LOGS 128
static struct {
    char path[1200];
    off_t from;
} test_logs[MAX_LOGS];
static int ntest_logs;
/* Service exits that were not clean (see judge_exit()); each fails the program. */
static int unclean_exits;

static void register_test_logs(void);

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
    register_test_logs();
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

static void log_path_of(it_service_t svc, int replica, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s-%s%s%.0d.log", log_dir, test_name_buf, service_names[svc],
             replica ? "-" : "", replica);
}

/* Notes a log this program writes, with the size it has now (0 if it does not exist
 * yet); one already noted keeps its size. */
static void register_log(const char *path)
{
    for (int i = 0; i < ntest_logs; i++)
        if (strcmp(test_logs[i].path, path) == 0)
            return;
    if (ntest_logs == MAX_LOGS)
        return;
    struct stat st;
    snprintf(test_logs[ntest_logs].path, sizeof test_logs[0].path, "%s", path);
    test_logs[ntest_logs].from = stat(path, &st) == 0 ? st.st_size : 0;
    ntest_logs++;
}

/* Notes every <log dir>/<test>-*.log that exists now. */
static void register_test_logs(void)
{
    char pattern[1200];
    glob_t g;
    snprintf(pattern, sizeof pattern, "%s/%s-*.log", log_dir, test_name_buf);
    if (glob(pattern, 0, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++)
            register_log(g.gl_pathv[i]);
    globfree(&g);
}

/* This run's part of a registered log as a new string (caller frees), or NULL. */
static char *read_log(const char *path)
{
    off_t from = 0;
    for (int i = 0; i < ntest_logs; i++)
        if (strcmp(test_logs[i].path, path) == 0)
            from = test_logs[i].from;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && st.st_size < from)
        from = 0;   /* written again from the start (truncated) */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    char chunk[8192];
    size_t n;
    if (mem != NULL && fseeko(f, from, SEEK_SET) == 0)
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            fwrite(chunk, 1, n, mem);
    if (mem != NULL)
        fclose(mem);
    fclose(f);
    return text;
}

/* Prints the last `nlines` lines of this run's part of a service log. */
static void print_log_tail(const char *path, int nlines)
{
    char *text = read_log(path);
    if (text == NULL) {
        fprintf(stderr, "    (no log at %s)\n", path);
        return;
    }
    const char *p = text + strlen(text);
    if (p > text && p[-1] == '\n')
        p--;
    int seen = 0;
    while (p > text && seen < nlines)
        if (*--p == '\n')
            seen++;
    if (*p == '\n')
        p++;
    fprintf(stderr, "    ---- last %d lines of %s:\n%s%s", nlines, path, p,
            *p && p[strlen(p) - 1] != '\n' ? "\n" : "");
    free(text);
}

/* Judges how a service the harness reaped ended. Clean is exit status 0, or death by
 * `sent`, the signal the test ended it with on purpose (SIGKILL from it_kill9() or
 * it_stop(..., SIGKILL, ...)); `sent` 0 means nobody asked it to end. Anything else (a
 * non-zero status, as LeakSanitizer's or UBSan's exit is, or another signal, as
 * ASan's abort is) is printed with the tail of the service's log and fails the program. */
static void judge_exit(const char *who, const char *log, pid_t pid, int status, int sent)
{
    char how[160];
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return;
    if (WIFSIGNALED(status) && sent != 0 && WTERMSIG(status) == sent)
        return;
    if (WIFEXITED(status))
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(how, sizeof how, "ended with wait status 0x%x", (unsigned)status);
    char asked[80] = "without being asked to end";
    if (sent != 0)
        snprintf(asked, sizeof asked, "after the test sent it signal %d (%s)", sent,
                 strsignal(sent));
    fprintf(stderr, "\nharness: service %s (pid %d) %s %s: not a clean exit\n", who, (int)pid,
            how, asked);
    print_log_tail(log, 25);
    unclean_exits++;
}

/* The name ("executor", "executor-1" for a replica) and log of a pid this harness
 * started; returns 0 if it is not one. */
static int describe(pid_t pid, char *who, size_t who_len, char *log, size_t log_len)
{
    for (int i = 0; i < IT_NSERVICES; i++)
        if (pids[i] == pid) {
            snprintf(who, who_len, "%s", service_names[i]);
            log_path_of((it_service_t)i, 0, log, log_len);
            return 1;
        }
    for (int i = 0; i < MAX_REPLICAS; i++)
        if (replica_pids[i] == pid) {
            snprintf(who, who_len, "%s-%d", service_names[replica_svc[i]], replica_no[i]);
            log_path_of(replica_svc[i], replica_no[i], log, log_len);
            return 1;
        }
    return 0;
}

static void forget(pid_t pid)
{
    for (int i = 0; i < IT_NSERVICES; i++)
        if (pids[i] == pid)
            pids[i] = 0;
    for (int i = 0; i < MAX_REPLICAS; i++)
        if (replica_pids[i] == pid)
            replica_pids[i] = 0;
}

static int exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Sends `sig` to a service this harness started, waits up to `timeout_s` for it to
 * exit (killing it then), judges the exit and forgets the pid. Returns what it_stop()
 * does. */
static int stop_pid(pid_t pid, int sig, int timeout_s)
{
    char who[64] = "?", log[1200] = "";
    describe(pid, who, sizeof who, log, sizeof log);
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
        judge_exit(who, log, pid, status, 0);   /* it had ended by itself */
        forget(pid);
        return exit_code(status);
    }
    kill(pid, sig);
    for (int waited_ms = 0; waited_ms < timeout_s * 1000; waited_ms += 20) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            judge_exit(who, log, pid, status, sig);
            forget(pid);
            return exit_code(status);
        }
        usleep(20 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (sig != SIGKILL) {
        fprintf(stderr, "\nharness: service %s (pid %d) did not exit within %d s of signal %d"
                        " (%s); killed: not a clean exit\n", who, (int)pid, timeout_s, sig,
                strsignal(sig));
        print_log_tail(log, 25);
        unclean_exits++;
    }
    forget(pid);
    return -1;
}

static pid_t spawn(it_service_t svc, int replica)
{
    char path[1200], log_path[1200], port[16], node[64];
    snprintf(path, sizeof path, "%s/services/%s/strand-%s", bin_dir, service_names[svc],
             service_names[svc]);
    log_path_of(svc, replica, log_path, sizeof log_path);
    register_log(log_path);
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
    /* The service's previous process, if it ended on its own: judge how. */
    int status;
    if (pids[svc] > 0 && waitpid(pids[svc], &status, WNOHANG) == pids[svc]) {
        char who[64], log[1200];
        describe(pids[svc], who, sizeof who, log, sizeof log);
        judge_exit(who, log, pids[svc], status, 0);
        pids[svc] = 0;
    }
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
            replica_svc[i] = svc;
            replica_no[i] = replica;
            break;
        }
    return pid;
}

void it_kill9(pid_t pid)
{
    if (pid <= 0)
        return;
    char who[64], log[1200];
    int ours = describe(pid, who, sizeof who, log, sizeof log);
    int status;
    int sent = 0;   /* one that had ended before the kill (a crash) ended by itself */
    pid_t reaped = waitpid(pid, &status, WNOHANG);
    if (reaped == 0) {
        kill(pid, SIGKILL);
        sent = SIGKILL;
        reaped = waitpid(pid, &status, 0);
    }
    if (reaped == pid && ours)
        judge_exit(who, log, pid, status, sent);
    forget(pid);
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
    return stop_pid(pid, sig, timeout_s);
}

int it_stop_all(void)
{
    int ok = 1;
    for (int i = 0; i < MAX_REPLICAS; i++) {
        if (replica_pids[i] <= 0)
            continue;
        char who[64], log[1200];
        describe(replica_pids[i], who, sizeof who, log, sizeof log);
        int rc = stop_pid(replica_pids[i], SIGTERM, 30);
        if (rc != 0) {
            fprintf(stderr, "%s exited with %d after SIGTERM\n", who, rc);
            ok = 0;
        }
    }
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

/* A line of a sanitizer's report. UBSan's "<file>:<line>:<col>: runtime error: ..." is
 * looked for only outside the services' own JSON log lines, which may quote anything. */
static int sanitizer_line(const char *line, size_t len)
{
    static const char *const marks[] = {
        "ERROR: AddressSanitizer",   "ERROR: LeakSanitizer",
        "ERROR: UndefinedBehaviorSanitizer", "SUMMARY: AddressSanitizer",
        "SUMMARY: LeakSanitizer",    "SUMMARY: UndefinedBehaviorSanitizer",
    };
    char buf[600];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), line);
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
        if (strstr(buf, marks[i]) != NULL)
            return 1;
    return buf[0] != '{' && strstr(buf, "runtime error:") != NULL;
}

/* Scans this run's part of every log of the program for sanitizer reports; prints each
 * report found (up to 120 lines from its first line) and returns how many logs hold
 * one. */
static int scan_sanitizer_reports(void)
{
    int found = 0;
    register_test_logs();   /* those first written during the run, from their start */
    for (int i = 0; i < ntest_logs; i++) {
        char *text = read_log(test_logs[i].path);
        if (text == NULL)
            continue;
        const char *first = NULL;
        int hits = 0;
        for (const char *line = text; *line;) {
            const char *nl = strchr(line, '\n');
            size_t len = nl ? (size_t)(nl - line) : strlen(line);
            if (sanitizer_line(line, len)) {
                hits++;
                if (first == NULL)
                    first = line;
            }
            line += len + (nl ? 1 : 0);
        }
        if (first != NULL) {
            /* ASan's report opens with a row of '=' on the line before its ERROR. */
            const char *prev = first > text ? first - 1 : text;
            while (prev > text && prev[-1] != '\n')
                prev--;
            if (prev < first && strncmp(prev, "=====", 5) == 0)
                first = prev;
            fprintf(stderr, "\nharness: sanitizer report in %s (%d report line%s):\n",
                    test_logs[i].path, hits, hits == 1 ? "" : "s");
            const char *p = first;
            for (int n = 0; n < 120 && *p; n++) {
                const char *nl = strchr(p, '\n');
                size_t len = nl ? (size_t)(nl - p) : strlen(p);
                fprintf(stderr, "    | %.*s\n", (int)len, p);
                p += len + (nl ? 1 : 0);
            }
            if (*p)
                fprintf(stderr, "    | ... (the rest is in the log)\n");
            found++;
        }
        free(text);
    }
    return found;
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
    /* Every program's services must end cleanly and without a sanitizer report: the
     * cases' own asserts rarely look at how a service exited or what it logged. */
    it_stop_all();
    int reports = scan_sanitizer_reports();
    if (unclean_exits > 0 || reports > 0)
        fprintf(stderr, "\nharness: %s FAILS: %d service exit%s not clean, %d service log%s"
                        " with a sanitizer report (see above)\n", test_name_buf, unclean_exits,
                unclean_exits == 1 ? " was" : "s were", reports, reports == 1 ? "" : "s");
    return failed == 0 && ran == (unsigned)ncases && unclean_exits == 0 && reports == 0 ? 0 : 1;
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

/* ---- forcing an order, and "nothing else happened" ---------------------------------- */

int it_lock_row(it_row_lock_t *l, const char *table, const char *key, const char *id)
{
    char sql[300];
    l->conn = it_pg_begin();
    l->pid = PQbackendPID(l->conn);
    snprintf(sql, sizeof sql, "SELECT 1 FROM strand.%s WHERE %s = '%s' FOR UPDATE", table, key, id);
    PGresult *res = PQexec(l->conn, sql);
    int ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
    PQclear(res);
    CU_ASSERT_TRUE(ok);
    return ok;
}

void it_unlock_row(it_row_lock_t *l)
{
    it_pg_commit(l->conn);
    l->conn = NULL;
}

int it_wait_queued(const it_row_lock_t *l, const char *app, int n)
{
    char sql[800];
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE q(pid) AS ("
             " SELECT pid FROM pg_stat_activity WHERE %d = ANY(pg_blocking_pids(pid))"
             " UNION SELECT a.pid FROM pg_stat_activity a JOIN q ON q.pid = ANY(pg_blocking_pids(a.pid)))"
             " SELECT count(*) FROM q JOIN pg_stat_activity s ON s.pid = q.pid WHERE s.application_name = '%s'",
             l->pid, app);
    long long got = it_wait_number(sql, n, 30);
    if (got < n)
        fprintf(stderr, "\n    %lld %s session(s) queued behind the test's lock, want %d\n", got, app, n);
    CU_ASSERT_TRUE(got >= n);
    return got >= n;
}

int it_marker_worked(const char *id)
{
    static int seq;
    char signal_id[96];
    snprintf(signal_id, sizeof signal_id, "it-marker-%d-%d", (int)getpid(), ++seq);
    Strand__V1__Signal sig = STRAND__V1__SIGNAL__INIT;
    sig.envelope_version = 1;
    sig.signal_id = signal_id;
    sig.instance_id = (char *)id;
    sig.type = STRAND__V1__SIGNAL_TYPE__SIGNAL_TYPE_EXTERNAL;
    sig.expected_version = 0;
    sig.name = "marker";
    sig.payload.data = (uint8_t *)"{}";
    sig.payload.len = 2;
    uint8_t buf[512];
    size_t len = strand__v1__signal__get_packed_size(&sig);
    if (len > sizeof buf)
        return 0;
    strand__v1__signal__pack(&sig, buf);
    char hex[2 * sizeof buf + 1], sql[2048];
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", buf[i]);
    snprintf(sql, sizeof sql,
             "WITH m AS (INSERT INTO strand.outbox (topic, key, payload) VALUES ('signals', '%s',"
             " decode('%s', 'hex')) RETURNING 1), n AS (SELECT pg_notify('strand_outbox', ''))"
             " SELECT count(*) FROM m, n", id, hex);
    if (it_sql_number(sql) != 1)
        return 0;
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE signal_id = '%s'",
             signal_id);
    return it_wait_number(sql, 1, 30) == 1;
}
