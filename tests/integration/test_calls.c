/*
 * test_calls.c - calls to workers on the real servers (issues 15 and 16), against a
 * small HTTP worker that runs inside this test process and records every request:
 *  - the three 1 s calls of a parallel step run at once (about 1 s, not 3 s);
 *  - a slow (3 s) worker does not delay another instance's call to a fast one;
 *  - a Kafka call's `timeout` is a durable timer: no result in time is a failed
 *    attempt, retried, then on_failure; and the monitor's give-up on its ACK resumes
 *    the instance the same way;
 *  - every retry of a call carries the same Idempotency-Key, the attempt apart in
 *    Strand-Attempt;
 *  - a call held by an executor that is kill -9'ed is sent again by another executor
 *    within seconds (its lease lapses), with the same key;
 *  - a call whose instance was cancelled while it waited for a free place is not made.
 * Each figure is printed; the asserted bounds are generous (a busy 2-core machine).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

/* ---- the worker --------------------------------------------------------------------- */

#define MAX_HITS 256

typedef struct {
    char path[64];
    char key[300];
    char attempt[16];
    char instance[40];
    double arrived, answered;   /* monotonic seconds; answered 0 until answered */
} hit_t;

static pthread_mutex_t hits_lock = PTHREAD_MUTEX_INITIALIZER;
static hit_t hits[MAX_HITS];
static int nhits;
static int worker_port;
static char suffix[32];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Copies header `name`'s value out of the request head (case-insensitive). */
static void header(const char *head, const char *name, char *out, size_t len)
{
    out[0] = '\0';
    size_t n = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line != NULL; line = strstr(line + 2, "\r\n")) {
        const char *start = line + 2;
        if (strncasecmp(start, name, n) == 0 && start[n] == ':') {
            start += n + 1;
            while (*start == ' ')
                start++;
            size_t i = 0;
            while (start[i] && start[i] != '\r' && i + 1 < len) {
                out[i] = start[i];
                i++;
            }
            out[i] = '\0';
            return;
        }
    }
}

/* Hits of `path` with this key before this one. */
static int earlier_hits(const char *path, const char *key, int self)
{
    int n = 0;
    for (int i = 0; i < self; i++)
        n += strcmp(hits[i].path, path) == 0 && strcmp(hits[i].key, key) == 0;
    return n;
}

/* Routes: /sleep/<ms> answers after ms; /fail/<n> answers 500 to the first n hits of
 * a key; /hold holds the first hit of a key for 60 s and answers later ones at once. */
static void *serve_one(void *arg)
{
    int fd = (int)(long)arg;
    char buf[16384];
    size_t len = 0;
    char *end = NULL;
    while (len + 1 < sizeof buf) {
        ssize_t got = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (got <= 0)
            break;
        len += (size_t)got;
        buf[len] = '\0';
        if ((end = strstr(buf, "\r\n\r\n")) != NULL) {
            char cl[16];
            *end = '\0';
            header(buf, "Content-Length", cl, sizeof cl);
            *end = '\r';
            size_t body_have = len - (size_t)(end + 4 - buf);
            size_t body_want = (size_t)atol(cl);
            if (body_have >= body_want)
                break;
        }
    }
    if (end == NULL) {
        close(fd);
        return NULL;
    }
    *end = '\0';
    char method[16] = "", path[64] = "";
    sscanf(buf, "%15s %63s", method, path);
    pthread_mutex_lock(&hits_lock);
    int self = nhits < MAX_HITS ? nhits++ : MAX_HITS - 1;
    hit_t *h = &hits[self];
    memset(h, 0, sizeof *h);
    snprintf(h->path, sizeof h->path, "%s", path);
    header(buf, "Idempotency-Key", h->key, sizeof h->key);
    header(buf, "Strand-Attempt", h->attempt, sizeof h->attempt);
    header(buf, "Strand-Instance-Id", h->instance, sizeof h->instance);
    h->arrived = now_s();
    int earlier = earlier_hits(path, h->key, self);
    pthread_mutex_unlock(&hits_lock);
    int status = 200;
    if (strncmp(path, "/sleep/", 7) == 0)
        usleep((useconds_t)atoi(path + 7) * 1000);
    else if (strncmp(path, "/fail/", 6) == 0)
        status = earlier < atoi(path + 6) ? 500 : 200;
    else if (strcmp(path, "/hold") == 0 && earlier == 0)
        sleep(60);
    char answer[256];
    const char *body = status == 200 ? "{\"ok\":true}" : "{\"error\":\"on purpose\"}";
    int n = snprintf(answer, sizeof answer,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     status, status == 200 ? "OK" : "Internal Server Error", strlen(body), body);
    ssize_t sent = send(fd, answer, (size_t)n, MSG_NOSIGNAL);
    (void)sent;
    pthread_mutex_lock(&hits_lock);
    h->answered = now_s();
    pthread_mutex_unlock(&hits_lock);
    close(fd);
    return NULL;
}

static void *worker_main(void *arg)
{
    int lfd = (int)(long)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_t t;
        if (pthread_create(&t, NULL, serve_one, (void *)(long)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
    return NULL;
}

static int start_worker(int port)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* The port may be taken as some connection's ephemeral port: try the next ones. */
    int bound = 0;
    for (int i = 0; i < 10 && !bound; i++) {
        addr.sin_port = htons((uint16_t)(port + i));
        bound = bind(lfd, (struct sockaddr *)&addr, sizeof addr) == 0;
        if (bound)
            worker_port = port + i;
    }
    if (!bound || listen(lfd, 128) != 0) {
        perror("test worker");
        return 0;
    }
    pthread_t t;
    return pthread_create(&t, NULL, worker_main, (void *)(long)lfd) == 0;
}

/* Copies the hits of `instance` (in arrival order) into out; returns how many. */
static int hits_of(const char *instance, hit_t *out, int max)
{
    int n = 0;
    pthread_mutex_lock(&hits_lock);
    for (int i = 0; i < nhits && n < max; i++)
        if (strcmp(hits[i].instance, instance) == 0)
            out[n++] = hits[i];
    pthread_mutex_unlock(&hits_lock);
    return n;
}

/* Waits until `instance` has `want` hits; returns how many it has. */
static int wait_hits(const char *instance, int want, int timeout_s, hit_t *out, int max)
{
    double deadline = now_s() + timeout_s;
    int n;
    while ((n = hits_of(instance, out, max)) < want && now_s() < deadline)
        usleep(10 * 1000);
    return n;
}

/* ---- helpers -------------------------------------------------------------------------- */

/* Imports flow <name>_<suffix> with `steps` (a JSON array text). */
static void import_flow(const char *name, const char *steps)
{
    char doc[4096];
    snprintf(doc, sizeof doc, "{\"kind\":\"flow\",\"name\":\"%s_%s\",\"version\":1,\"steps\":%s}",
             name, suffix, steps);
    it_import(NULL, doc);
}

/* Starts flow <name>_<suffix> with no input; returns its id (caller frees). */
static char *start(const char *name)
{
    char def[160];
    snprintf(def, sizeof def, "%s_%s", name, suffix);
    return it_start_instance(NULL, def, NULL);
}

static void test_setup(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    char steps[2048], call[512];
    const char *call_fmt = "{\"id\":\"%s\",\"type\":\"call\",\"transport\":\"http\",\"timeout\":%d,"
                           "\"request\":{\"url\":\"'http://127.0.0.1:%d%s'\"}%s}";
    /* three 1 s calls in parallel */
    char a[400], b[400], c[400];
    snprintf(a, sizeof a, call_fmt, "a", 10000, worker_port, "/sleep/1000", "");
    snprintf(b, sizeof b, call_fmt, "b", 10000, worker_port, "/sleep/1000", "");
    snprintf(c, sizeof c, call_fmt, "c", 10000, worker_port, "/sleep/1000", "");
    snprintf(steps, sizeof steps,
             "[{\"id\":\"fork\",\"type\":\"parallel\",\"join\":\"all\",\"branches\":[[%s],[%s],[%s]]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]", a, b, c);
    import_flow("par", steps);
    snprintf(call, sizeof call, call_fmt, "s", 10000, worker_port, "/sleep/3000", "");
    snprintf(steps, sizeof steps, "[%s,{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]", call);
    import_flow("slow", steps);
    snprintf(call, sizeof call, call_fmt, "f", 10000, worker_port, "/sleep/0", "");
    snprintf(steps, sizeof steps, "[%s,{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]", call);
    import_flow("fast", steps);
    snprintf(call, sizeof call, call_fmt, "flaky", 5000, worker_port, "/fail/2",
             ",\"retry\":{\"max_attempts\":3,\"backoff_ms\":100,\"multiplier\":2}");
    snprintf(steps, sizeof steps, "[%s,{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]", call);
    import_flow("retry", steps);
    snprintf(call, sizeof call, call_fmt, "held", 60000, worker_port, "/hold", "");
    snprintf(steps, sizeof steps, "[%s,{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]", call);
    import_flow("hold", steps);
    /* Kafka calls nobody answers: one with a timeout, one whose ACK the monitor gives
     * up on after a second (no timeout of its own) */
    const char *kafka_fmt =
        "[{\"id\":\"k\",\"type\":\"call\",\"transport\":\"kafka\",\"consumers\":[%s],%s"
        "  \"request\":{\"order\":\"'o-1'\"},\"retry\":{\"max_attempts\":2,\"backoff_ms\":100},"
        "  \"on_failure\":[{\"id\":\"note\",\"type\":\"set\",\"values\":{\"gave_up\":true}}]},"
        "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"gave_up\":\"state.gave_up\","
        "  \"attempts\":\"state.k.attempts\",\"error\":\"state.k.error\"}}]";
    snprintf(steps, sizeof steps, kafka_fmt, "\"calls-nobody\"", "\"timeout\":1000,");
    import_flow("ktimeout", steps);
    snprintf(steps, sizeof steps, kafka_fmt,
             "{\"consumer\":\"calls-nobody\",\"delivery_timeout_s\":1,\"max_raises\":0}", "");
    import_flow("kgiveup", steps);
}

/* ---- the cases ------------------------------------------------------------------------ */

/* Issue 15: the three branches' calls reached the worker 1 s apart (3 s in all). */
static void test_parallel_calls_run_at_once(void)
{
    double t0 = now_s();
    char *id = start("par");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, "completed", 30);
    double total = now_s() - t0;
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    hit_t h[8];
    int n = hits_of(id, h, 8);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    double first = h[0].arrived, last = h[0].arrived, end = h[0].answered;
    for (int i = 1; i < n; i++) {
        first = h[i].arrived < first ? h[i].arrived : first;
        last = h[i].arrived > last ? h[i].arrived : last;
        end = h[i].answered > end ? h[i].answered : end;
    }
    printf("\n  parallel: three 1 s calls took %.2f s at the worker (arrivals %.2f s apart),"
           " %.2f s start to completed\n", end - first, last - first, total);
    CU_ASSERT_TRUE(end - first < 2.5);
    free(id);
}

/* Issue 15: a 3 s call of one instance held up another instance's fast call. */
static void test_slow_worker_delays_no_other_call(void)
{
    char *slow = start("slow");
    CU_ASSERT_PTR_NOT_NULL_FATAL(slow);
    hit_t h[4];
    CU_ASSERT_EQUAL_FATAL(wait_hits(slow, 1, 20, h, 4), 1);
    double t0 = now_s();
    char *fast = start("fast");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fast);
    CU_ASSERT_EQUAL(wait_hits(fast, 1, 20, h, 4), 1);
    double reached = h[0].arrived - t0;
    json_t *done = it_wait_instance(fast, "completed", 20);
    double completed = now_s() - t0;
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    printf("\n  fast call beside a 3 s call: reached the worker %.2f s after its start,"
           " completed after %.2f s\n", reached, completed);
    CU_ASSERT_TRUE(reached < 2.0);
    done = it_wait_instance(slow, "completed", 20);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    free(slow);
    free(fast);
}

/* Issue 16: every retry carried another key (<instance>:<visit>:<step>:<attempt>). */
static void test_same_key_on_every_retry(void)
{
    char *id = start("retry");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    hit_t h[8];
    int n = hits_of(id, h, 8);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    for (int i = 0; i < n; i++) {
        char want[16];
        snprintf(want, sizeof want, "%d", i + 1);
        printf("%s  attempt %d: Idempotency-Key %s, Strand-Attempt %s", i ? "\n" : "\n", i + 1,
               h[i].key, h[i].attempt[0] ? h[i].attempt : "(none)");
        CU_ASSERT_STRING_EQUAL(h[i].key, h[0].key);
        CU_ASSERT_STRING_EQUAL(h[i].attempt, want);
    }
    printf("\n");
    CU_ASSERT_TRUE(h[0].key[0] != '\0');
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(DISTINCT idempotency_key) FROM strand.calls"
             " WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    free(id);
}

/* Issue 16: a Kafka call's timeout set no timer, so an unanswered call waited for ever. */
static void test_kafka_call_times_out(void)
{
    double t0 = now_s();
    char *id = start("ktimeout");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    json_t *out = json_object_get(done, "output");
    char *text = json_dumps(out, JSON_COMPACT);
    printf("\n  kafka call with a 1 s timeout, 2 attempts: on_failure after %.2f s: %s\n",
           now_s() - t0, text);
    free(text);
    CU_ASSERT_TRUE(json_is_true(json_object_get(out, "gave_up")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(out, "attempts")), 2);
    CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(out, "error"), "timeout")));
    json_decref(done);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.timers WHERE instance_id = '%s'"
             " AND kind = 'call_timeout' AND fired_at IS NOT NULL", id);
    long long fired = it_sql_number(sql);
    printf("  call_timeout timers fired: %lld\n", fired);
    CU_ASSERT_EQUAL(fired, 2);
    free(id);
}

/* Issue 16: the monitor gave up on a Kafka call's ACK without waking the instance. */
static void test_kafka_give_up_resumes_the_call(void)
{
    double t0 = now_s();
    char *id = start("kgiveup");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, "completed", 40);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    json_t *out = json_object_get(done, "output");
    char *text = json_dumps(out, JSON_COMPACT);
    printf("\n  kafka call given up by the monitor, 2 attempts: on_failure after %.2f s: %s\n",
           now_s() - t0, text);
    free(text);
    CU_ASSERT_TRUE(json_is_true(json_object_get(out, "gave_up")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(out, "attempts")), 2);
    CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(out, "error"), "gave_up")));
    json_decref(done);
    free(id);
}

static pid_t replica;

/* Issue 15: a call held by a killed executor was sent again only 65-125 s later. */
static void test_dead_executors_call_sent_again(void)
{
    char *id = start("hold");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    hit_t h[4];
    CU_ASSERT_EQUAL_FATAL(wait_hits(id, 1, 20, h, 4), 1);
    /* A second executor, then the first one dies with the call in hand. */
    replica = it_start_replica(IT_EXECUTOR, 1);
    CU_ASSERT_TRUE_FATAL(replica > 0);
    CU_ASSERT_EQUAL(it_wait_number("SELECT count(*) FROM pg_stat_activity"
                                   " WHERE application_name = 'strand-dispatcher'", 2, 30), 2);
    double killed = now_s();
    CU_ASSERT_EQUAL(it_stop(IT_EXECUTOR, SIGKILL, 10), 128 + SIGKILL);
    int n = wait_hits(id, 2, 30, h, 4);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    double delay = h[1].arrived - killed;
    printf("\n  call of a kill -9'ed executor sent again after %.2f s (key %s, attempt %s)\n",
           delay, h[1].key, h[1].attempt);
    CU_ASSERT_TRUE(delay < 15.0);
    CU_ASSERT_STRING_EQUAL(h[1].key, h[0].key);
    CU_ASSERT_STRING_EQUAL(h[1].attempt, h[0].attempt);
    /* The result's signal may sit on a partition of the dead executor's consumer until
     * the group's session timeout (45 s) moves it. */
    json_t *done = it_wait_instance(id, "completed", 90);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    free(id);
}

/* A call whose instance was cancelled while the call waited for a free place is not
 * made. One place (STRAND_EXECUTOR_CALL_CONCURRENCY=1), taken by a 3 s call. */
static void test_cancelled_instances_call_not_made(void)
{
    /* Leave one executor, with one place: the replica leaves its group cleanly. */
    CU_ASSERT_TRUE_FATAL(replica > 0);
    kill(replica, SIGTERM);
    CU_ASSERT_EQUAL(it_wait_number("SELECT 1 - count(*) FROM pg_stat_activity"
                                   " WHERE application_name = 'strand-dispatcher'", 1, 30), 1);
    it_kill9(replica);   /* reaps it */
    setenv("STRAND_EXECUTOR_CALL_CONCURRENCY", "1", 1);
    CU_ASSERT_TRUE_FATAL(it_start(IT_EXECUTOR) > 0);
    unsetenv("STRAND_EXECUTOR_CALL_CONCURRENCY");
    char *slow = start("slow");
    CU_ASSERT_PTR_NOT_NULL_FATAL(slow);
    hit_t h[4];
    CU_ASSERT_EQUAL_FATAL(wait_hits(slow, 1, 60, h, 4), 1);
    char *fast = start("fast");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fast);
    char sql[300], path[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.calls WHERE instance_id = '%s'", fast);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 20), 1);
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", fast);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"reason\":\"test\"}", NULL), 202);
    json_t *done = it_wait_instance(fast, "cancelled", 20);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    done = it_wait_instance(slow, "completed", 20);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    /* the place is free again: the cancelled instance's call is settled, not made */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.calls WHERE instance_id = '%s'"
             " AND status <> 'pending'", fast);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 20), 1);
    /* A marker call made after it: with one place, the marker is sent only once every
     * call claimed before it (the cancelled one, had it been sent) has been answered. */
    char *marker = start("fast");
    CU_ASSERT_PTR_NOT_NULL_FATAL(marker);
    CU_ASSERT_EQUAL(wait_hits(marker, 1, 20, h, 4), 1);
    printf("\n  cancelled instance's call: %d request(s) reached the worker\n",
           hits_of(fast, h, 4));
    CU_ASSERT_EQUAL(hits_of(fast, h, 4), 0);
    done = it_wait_instance(marker, "completed", 20);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    free(marker);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.calls WHERE instance_id = '%s'"
             " AND status IN ('sent', 'succeeded', 'failed')", fast);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    free(slow);
    free(fast);
}

int main(void)
{
    if (!it_init("test_calls"))
        return 1;
    signal(SIGPIPE, SIG_IGN);
    snprintf(suffix, sizeof suffix, "%ld_%d", (long)time(NULL), (int)getpid());
    const char *base = getenv("STRAND_TEST_PORT_BASE");
    if (!start_worker((base ? atoi(base) : 18080) + 60))
        return 1;
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"parallel calls run at once", test_parallel_calls_run_at_once},
        {"a slow worker delays no other call", test_slow_worker_delays_no_other_call},
        {"the same key on every retry", test_same_key_on_every_retry},
        {"a kafka call times out", test_kafka_call_times_out},
        {"a kafka give-up resumes the call", test_kafka_give_up_resumes_the_call},
        {"a dead executor's call is sent again", test_dead_executors_call_sent_again},
        {"a cancelled instance's call is not made", test_cancelled_instances_call_not_made},
    };
    return it_run_suite("calls", cases, (int)(sizeof cases / sizeof cases[0]));
}
