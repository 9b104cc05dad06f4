/*
 * test_amplification.c - bounded amplification (issue 33 "Fences", item 6) against the
 * real stack: what one principal's requests may make the database keep.
 *
 * - Buffered signals: an instance keeps at most STRAND_SIGNAL_BUFFER_MAX named signals
 *   it does not wait for, and STRAND_SIGNAL_BUFFER_MAX_BYTES of their payloads; a
 *   signal beyond either is refused (dedup outcome "refused", a SignalBufferFull
 *   notice naming the instance, the signal and the bound), strand.signal_buffer does
 *   not grow past the bound, and the instance and the consumer go on.
 * - A signal batch whose args.payload times its items passes
 *   STRAND_BATCH_MAX_PAYLOAD_BYTES answers 413 batch_payload_too_large and creates
 *   nothing.
 * - A principal's (STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL + 1)-th running batch, and
 *   the (STRAND_BATCH_MAX_RUNNING + 1)-th of the cluster, answer 429 too_many_batches
 *   with Retry-After, and create nothing.
 * - Writes beyond STRAND_API_WRITE_RATE / _BURST answer 429 rate_limited with
 *   Retry-After (reads still answer), write nothing, and are audited by exactly one
 *   row "rate_limited" per window with their count; ingress commands beyond it become
 *   dead letters with the same code, counted in the next window's row.
 * - A bad value of any of these settings stops strand-api at start-up, naming it.
 *
 * No scheduler runs, so the batches created here stay running (they are cancelled at
 * the end). The database is shared with the other tests of a run: the running-job
 * limits are set from the jobs already running when this test starts.
 */
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/proto/strand.pb-c.h"

#define BUFFER_MAX 3
#define BUFFER_MAX_BYTES 4096
#define BATCH_MAX_PAYLOAD 8192
#define WRITE_RATE 1
#define WRITE_BURST 4
#define AUDIT_WINDOW_S 3

static char flow[64];
static long long mine_before, all_before;   /* running batches when the test began */
static char jobs[8][40];                    /* batches created here, cancelled at the end */
static int njobs;

/* A flow that waits for the signal "go", then completes. */
static void import_flow(void)
{
    char doc[512];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}",
             flow);
    it_import(NULL, doc);
}

/* Starts an instance of the flow and waits until it waits; returns its id (caller frees). */
static char *start_waiting(void)
{
    char *id = it_start_instance(NULL, flow, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *inst = it_wait_instance(id, "waiting", 30);
    CU_ASSERT_PTR_NOT_NULL(inst);
    json_decref(inst);
    return id;
}

/* A JSON object {"p": "<n bytes of text>"}; caller frees. */
static char *payload_of(size_t n)
{
    char *text = malloc(n + 16);
    memcpy(text, "{\"p\":\"", 6);
    for (size_t i = 0; i < n; i++)
        text[6 + i] = (char)('a' + (i * 7 + i / 26) % 26);
    memcpy(text + 6 + n, "\"}", 3);
    return text;
}

/* ---- an HTTP request that keeps the Retry-After header ----------------------------- */

typedef struct {
    char *data;
    size_t len;
} buf_t;

static size_t on_body(char *ptr, size_t size, size_t n, void *ctx)
{
    buf_t *b = ctx;
    char *grown = realloc(b->data, b->len + size * n + 1);
    if (grown == NULL)
        return 0;
    b->data = grown;
    memcpy(b->data + b->len, ptr, size * n);
    b->len += size * n;
    b->data[b->len] = '\0';
    return size * n;
}

static size_t on_header(char *ptr, size_t size, size_t n, void *ctx)
{
    char *retry_after = ctx;
    size_t len = size * n;
    if (len > 12 && strncasecmp(ptr, "Retry-After:", 12) == 0) {
        size_t start = 12;
        while (start < len && ptr[start] == ' ')
            start++;
        size_t end = start;
        while (end < len && ptr[end] != '\r' && ptr[end] != '\n' && end - start < 15)
            end++;
        memcpy(retry_after, ptr + start, end - start);
        retry_after[end - start] = '\0';
    }
    return len;
}

/* POST `body` to the API's `path`; returns the status, the answer's "code" into `code`
 * (or "") and the Retry-After header into `retry_after` (or ""), 16 bytes each. */
static long post(const char *path, const char *body, char *code, char *retry_after)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", it_port(IT_API), path);
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    buf_t answer = {0};
    code[0] = retry_after[0] = '\0';
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, retry_after);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
    long status = -1;
    if (curl_easy_perform(curl) == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    json_error_t jerr;
    json_t *doc = answer.data ? json_loads(answer.data, 0, &jerr) : NULL;
    snprintf(code, 40, "%s", json_string_value(json_object_get(doc, "code")) ?: "");
    json_decref(doc);
    free(answer.data);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return status;
}

/* ---- cases --------------------------------------------------------------------------- */

static void test_start(void)
{
    char text[32];
    setenv("STRAND_SIGNAL_BUFFER_MAX", "3", 1);   /* BUFFER_MAX */
    setenv("STRAND_SIGNAL_BUFFER_MAX_BYTES", "4096", 1);   /* BUFFER_MAX_BYTES */
    setenv("STRAND_BATCH_MAX_PAYLOAD_BYTES", "8192", 1);   /* BATCH_MAX_PAYLOAD */
    snprintf(text, sizeof text, "%lld", all_before + 10);
    setenv("STRAND_BATCH_MAX_RUNNING", text, 1);
    snprintf(text, sizeof text, "%lld", mine_before + 2);
    setenv("STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL", text, 1);
    it_start_api_executor(NULL);
    CU_ASSERT_FATAL(it_wait_http(IT_EXECUTOR, "/readyz", 200, 60));
    import_flow();
}

/* Counts rows of `what` (a FROM ... WHERE clause) for instance `id`. */
static long long count_for(const char *what, const char *id)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s = '%s'", what, id);
    return it_sql_number(sql);
}

static void send_signal(const char *id, const char *name, const char *payload)
{
    char path[128], body[8192];
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    snprintf(body, sizeof body, "{\"name\":\"%s\",\"payload\":%s}", name, payload ? payload : "{}");
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, body, NULL), 202);
}

/* Waits until the executor has recorded `n` signals for `id` (any outcome). */
static long long wait_processed(const char *id, long long n)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE instance_id = '%s'", id);
    return it_wait_number(sql, n, 30);
}

/* Signals an instance does not wait for: at most BUFFER_MAX kept, then refused with a
 * notice; bytes likewise; the instance still takes the signal it waits for. */
static void test_buffered_signals_bounded(void)
{
    char *by_count = start_waiting(), *by_bytes = start_waiting();
    long long processed_count = count_for("strand.processed_signals WHERE instance_id", by_count);
    long long processed_bytes = count_for("strand.processed_signals WHERE instance_id", by_bytes);
    /* five small signals to the first: three kept, two refused */
    for (int i = 1; i <= 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "early-%d", i);
        send_signal(by_count, name, "{\"i\":1}");
    }
    /* three of 1,800 bytes to the second: two kept (3,600 <= 4,096), one refused */
    char *big = payload_of(1800);
    for (int i = 1; i <= 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "big-%d", i);
        send_signal(by_bytes, name, big);
    }
    free(big);
    CU_ASSERT_EQUAL(wait_processed(by_count, processed_count + 5), processed_count + 5);
    CU_ASSERT_EQUAL(wait_processed(by_bytes, processed_bytes + 3), processed_bytes + 3);

    char sql[512];
    CU_ASSERT_EQUAL(count_for("strand.signal_buffer WHERE instance_id", by_count), BUFFER_MAX);
    snprintf(sql, sizeof sql, "SELECT string_agg(name, ',' ORDER BY id) FROM strand.signal_buffer"
             " WHERE instance_id = '%s'", by_count);
    char *kept = it_sql_text(sql);
    CU_ASSERT_STRING_EQUAL(kept ?: "", "early-1,early-2,early-3");
    free(kept);
    CU_ASSERT_EQUAL(count_for("strand.signal_buffer WHERE instance_id", by_bytes), 2);
    snprintf(sql, sizeof sql, "SELECT coalesce(sum(octet_length(payload::text)), 0) FROM strand.signal_buffer"
             " WHERE instance_id = '%s'", by_bytes);
    CU_ASSERT_TRUE(it_sql_number(sql) <= BUFFER_MAX_BYTES);
    /* each refusal: outcome "refused" and a notice naming the instance, signal and bound */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE instance_id = '%s'"
             " AND outcome = 'refused'", by_count);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE instance_id = '%s'"
             " AND outcome = 'refused'", by_bytes);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices n JOIN strand.processed_signals p"
             " ON p.signal_id = n.signal_id AND p.outcome = 'refused'"
             " WHERE n.code = 'SignalBufferFull' AND n.instance_id = '%s'"
             " AND n.detail->>'name' IN ('early-4', 'early-5') AND (n.detail->>'max_signals')::int = %d"
             " AND n.message LIKE '%%%s%%' AND n.message LIKE '%%STRAND_SIGNAL_BUFFER_MAX%%'",
             by_count, BUFFER_MAX, by_count);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices WHERE code = 'SignalBufferFull'"
             " AND instance_id = '%s' AND detail->>'name' = 'big-3'"
             " AND (detail->>'max_bytes')::int = %d", by_bytes, BUFFER_MAX_BYTES);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* nothing is stuck: the consumer went on, and each instance takes "go" */
    send_signal(by_count, "go", NULL);
    send_signal(by_bytes, "go", NULL);
    json_t *done = it_wait_instance(by_count, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    done = it_wait_instance(by_bytes, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    free(by_count);
    free(by_bytes);
}

/* Creates a batch with `body`; returns the status and records a created job's id. */
static long create_batch(const char *body, char *code, char *retry_after)
{
    json_t *answer = NULL;
    long status;
    if (retry_after != NULL) {
        status = post("/v1/batches", body, code, retry_after);
    } else {
        status = it_http(IT_API, "POST", "/v1/batches", body, &answer);
        snprintf(code, 40, "%s", json_string_value(json_object_get(answer, "code")) ?: "");
        const char *id = json_string_value(json_object_get(answer, "id"));
        if (status == 201 && id != NULL && njobs < 8)
            snprintf(jobs[njobs++], sizeof jobs[0], "%s", id);
    }
    json_decref(answer);
    return status;
}

static long long batch_rows(void)
{
    return it_sql_number("SELECT (SELECT count(*) FROM strand.batch_jobs) * 1000000"
                         " + (SELECT count(*) FROM strand.batch_items)");
}

/* A signal batch's payload times its items is bounded: 413, nothing created. */
static void test_batch_payload_bounded(void)
{
    char *ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = start_waiting();
    long long before = batch_rows();
    char code[40], body[16384];
    /* 3,000 bytes x 4 instances = 12,000 > 8,192 */
    char *payload = payload_of(3000);
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"status\":\"waiting\"},"
             "\"action\":\"signal\",\"args\":{\"name\":\"go\",\"payload\":%s}}", flow, payload);
    free(payload);
    CU_ASSERT_EQUAL(create_batch(body, code, NULL), 413);
    CU_ASSERT_STRING_EQUAL(code, "batch_payload_too_large");
    /* a payload larger than the bound on its own */
    payload = payload_of(9000);
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\"},"
             "\"action\":\"signal\",\"args\":{\"name\":\"go\",\"payload\":%s}}", flow, payload);
    free(payload);
    CU_ASSERT_EQUAL(create_batch(body, code, NULL), 413);
    CU_ASSERT_STRING_EQUAL(code, "batch_payload_too_large");
    CU_ASSERT_EQUAL(batch_rows(), before);
    /* within it (1,000 x 4): created; it stays running, no scheduler runs */
    payload = payload_of(1000);
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"status\":\"waiting\"},"
             "\"action\":\"signal\",\"args\":{\"name\":\"go\",\"payload\":%s}}", flow, payload);
    free(payload);
    CU_ASSERT_EQUAL(create_batch(body, code, NULL), 201);
    for (int i = 0; i < 4; i++)
        free(ids[i]);
}

/* The principal's third running batch (the limit is those running before + 2): 429. */
static void test_running_batches_bounded(void)
{
    char code[40], retry_after[16], body[512];
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"status\":\"waiting\"},"
             "\"action\":\"cancel\"}", flow);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.batch_jobs WHERE status = 'running'"
             " AND created_by = 'anonymous'");
    CU_ASSERT_EQUAL(it_sql_number(sql), mine_before + 1);   /* the payload case's */
    CU_ASSERT_EQUAL(create_batch(body, code, NULL), 201);
    long long before = batch_rows();
    CU_ASSERT_EQUAL(create_batch(body, code, retry_after), 429);
    CU_ASSERT_STRING_EQUAL(code, "too_many_batches");
    CU_ASSERT_TRUE(atoi(retry_after) >= 1);
    CU_ASSERT_EQUAL(batch_rows(), before);
    /* once one ends, there is room again */
    char path[128];
    snprintf(path, sizeof path, "/v1/batches/%.36s/cancel", jobs[njobs - 1]);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", NULL), 200);
    njobs--;
    CU_ASSERT_EQUAL(create_batch(body, code, NULL), 201);
}

/* Writes beyond the rate: 429 rate_limited with Retry-After, nothing written, one audit
 * row per window; the ingress likewise (dead letters). Also the cluster-wide batch
 * bound, with the API restarted with STRAND_BATCH_MAX_RUNNING at the jobs running. */
static void test_write_rate_limited(void)
{
    char *target = start_waiting();
    long long audit_base = it_sql_number("SELECT coalesce(max(id), 0) FROM strand.audit_log");
    CU_ASSERT_EQUAL(it_stop(IT_API, SIGTERM, 30), 0);
    char text[32];
    snprintf(text, sizeof text, "%lld", it_sql_number("SELECT count(*) FROM strand.batch_jobs"
                                                      " WHERE status = 'running'"));
    setenv("STRAND_BATCH_MAX_RUNNING", text, 1);
    setenv("STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL", "1000", 1);
    setenv("STRAND_API_WRITE_RATE", "1", 1);    /* WRITE_RATE */
    setenv("STRAND_API_WRITE_BURST", "4", 1);   /* WRITE_BURST */
    setenv("STRAND_API_WRITE_AUDIT_WINDOW_S", "3", 1);   /* AUDIT_WINDOW_S */
    CU_ASSERT_FATAL(it_start(IT_API) > 0);
    CU_ASSERT_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));

    /* the cluster's bound: every running job counts, whoever made it */
    char code[40], retry_after[16], body[512], path[128];
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\"},\"action\":\"cancel\"}", flow);
    long long before = batch_rows();
    CU_ASSERT_EQUAL(create_batch(body, code, retry_after), 429);
    CU_ASSERT_STRING_EQUAL(code, "too_many_batches");
    CU_ASSERT_TRUE(atoi(retry_after) >= 1);
    CU_ASSERT_EQUAL(batch_rows(), before);

    /* a burst of signals: the bucket's rest passes, the others are refused */
    long long processed = count_for("strand.processed_signals WHERE instance_id", target);
    snprintf(path, sizeof path, "/v1/instances/%s/signals", target);
    int passed = 0, refused = 0, with_header = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 12; i++) {
        long status = post(path, "{\"name\":\"noise\"}", code, retry_after);
        if (status == 202) {
            passed++;
        } else if (status == 429 && strcmp(code, "rate_limited") == 0) {
            refused++;
            with_header += atoi(retry_after) >= 1;
        } else {
            fprintf(stderr, "\nunexpected answer %ld %s\n", status, code);
            CU_FAIL("a write answered neither 202 nor 429 rate_limited");
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* the bucket's rest (the batch took one) and what refilled meanwhile */
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CU_ASSERT_TRUE(passed >= 1 && passed <= WRITE_BURST + (int)(took * WRITE_RATE) + 1);
    CU_ASSERT_EQUAL(passed + refused, 12);
    CU_ASSERT_TRUE(refused >= 1);
    CU_ASSERT_EQUAL(with_header, refused);
    /* reads are not limited */
    snprintf(path, sizeof path, "/v1/instances/%s", target);
    CU_ASSERT_EQUAL(it_http(IT_API, "GET", path, NULL, NULL), 200);
    /* what passed was delivered; what was refused wrote nothing */
    CU_ASSERT_EQUAL(wait_processed(target, processed + passed), processed + passed);

    /* exactly one audit row for the window, with the count */
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE id > %lld"
             " AND action = 'rate_limited' AND actor = 'anonymous'", audit_base);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, AUDIT_WINDOW_S + 8), 1);
    sleep(AUDIT_WINDOW_S);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT (detail->>'refused')::int * 1000 + (detail->>'http')::int"
             " FROM strand.audit_log WHERE id > %lld AND action = 'rate_limited'"
             " AND outcome = 'rejected' ORDER BY id LIMIT 1", audit_base);
    /* the cluster-wide 429 was not rate-limited: only the signals' refusals count */
    CU_ASSERT_EQUAL(it_sql_number(sql), refused * 1000 + refused);

    /* the ingress: commands beyond the rate become dead letters with the same code */
    char topic[128];
    snprintf(topic, sizeof topic, "%singress", it_topic_prefix());
    for (int i = 0; i < 16; i++)
        CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL, NULL, target,
                                          "{\"name\":\"noise\"}"));
    snprintf(sql, sizeof sql, "SELECT (SELECT count(*) FROM strand.dead_letters WHERE source_topic = '%s')"
             " + (SELECT count(*) FROM strand.processed_signals WHERE instance_id = '%s')", topic, target);
    long long all = processed + passed + 16;
    CU_ASSERT_EQUAL(it_wait_number(sql, all, 30), all);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE source_topic = '%s'"
             " AND reason LIKE '%%STRAND_API_WRITE_RATE%%'", topic);
    long long letters = it_sql_number(sql);
    CU_ASSERT_TRUE(letters >= 4);   /* 12 here: the bucket holds 4, refilling 1/s */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices WHERE code = 'IngressRejected'"
             " AND detail->>'code' = 'rate_limited' AND instance_id = '%s'", target);
    CU_ASSERT_EQUAL(it_sql_number(sql), letters);
    /* the second window's one row counts them */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE id > %lld"
             " AND action = 'rate_limited' AND actor = 'anonymous'", audit_base);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, AUDIT_WINDOW_S + 8), 2);
    sleep(1);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);
    snprintf(sql, sizeof sql, "SELECT (detail->>'ingress')::int FROM strand.audit_log WHERE id > %lld"
             " AND action = 'rate_limited' ORDER BY id DESC LIMIT 1", audit_base);
    CU_ASSERT_EQUAL(it_sql_number(sql), letters);
    free(target);

    /* back to no limits, and the jobs made here cancelled */
    CU_ASSERT_EQUAL(it_stop(IT_API, SIGTERM, 30), 0);
    unsetenv("STRAND_API_WRITE_RATE");
    unsetenv("STRAND_API_WRITE_BURST");
    unsetenv("STRAND_BATCH_MAX_RUNNING");
    CU_ASSERT_FATAL(it_start(IT_API) > 0);
    CU_ASSERT_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
    for (int i = 0; i < njobs; i++) {
        snprintf(path, sizeof path, "/v1/batches/%.36s/cancel", jobs[i]);
        CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", NULL), 200);
    }
    njobs = 0;
}

/* A bad value stops the service at start-up with a message naming the variable. */
static void test_bad_values_refused(void)
{
    static const char *const bad[][2] = {
        {"STRAND_SIGNAL_BUFFER_MAX", "0"},
        {"STRAND_SIGNAL_BUFFER_MAX_BYTES", "lots"},
        {"STRAND_BATCH_MAX_PAYLOAD_BYTES", "-1"},
        {"STRAND_BATCH_MAX_RUNNING", "0"},
        {"STRAND_API_WRITE_RATE", "-5"},
        {"STRAND_API_WRITE_BURST", "10"},   /* a burst without a rate */
    };
    CU_ASSERT_EQUAL(it_stop(IT_API, SIGTERM, 30), 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[1024], log[256];
        snprintf(log, sizeof log, "/tmp/test_amplification-badcfg-%d.log", (int)getpid());
        snprintf(cmd, sizeof cmd, "%s=%s STRAND_HTTP_PORT=%d timeout 5 %s/services/api/strand-api"
                 " >%s 2>&1", bad[i][0], bad[i][1], it_port(IT_API), it_bin_dir(), log);
        int rc = system(cmd);
        CU_ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) != 0 && WEXITSTATUS(rc) != 124);
        FILE *f = fopen(log, "r");
        char text[4096] = "";
        if (f != NULL) {
            size_t n = fread(text, 1, sizeof text - 1, f);
            text[n] = '\0';
            fclose(f);
        }
        if (strstr(text, bad[i][0]) == NULL)
            fprintf(stderr, "\n%s=%s: %s\n", bad[i][0], bad[i][1], text);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, bad[i][0]));
        unlink(log);
    }
}

int main(void)
{
    if (!it_init("test_amplification"))
        return 1;
    snprintf(flow, sizeof flow, "amp-%ld-%d", (long)time(NULL), (int)getpid());
    all_before = it_sql_number("SELECT count(*) FROM strand.batch_jobs WHERE status = 'running'");
    mine_before = it_sql_number("SELECT count(*) FROM strand.batch_jobs WHERE status = 'running'"
                                " AND created_by = 'anonymous'");
    if (all_before < 0 || mine_before < 0) {
        fprintf(stderr, "test_amplification: cannot read strand.batch_jobs (is the schema there?)\n");
        /* a fresh database: the services create the schema; nothing runs yet */
        all_before = mine_before = 0;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    static const it_case_t cases[] = {
        {"start the API and the executor with small bounds", test_start},
        {"buffered signals beyond the bound are refused with a notice", test_buffered_signals_bounded},
        {"a batch's payload times its items is bounded: 413", test_batch_payload_bounded},
        {"running batches per principal and in all: 429 with Retry-After", test_running_batches_bounded},
        {"writes beyond the rate: 429, Retry-After, one audit row per window", test_write_rate_limited},
        {"bad values stop the service at start-up", test_bad_values_refused},
    };
    int rc = it_run_suite("amplification", cases, (int)(sizeof cases / sizeof cases[0]));
    curl_global_cleanup();
    return rc;
}
