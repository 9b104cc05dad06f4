/*
 * test_call_fence.c - a call is sent only while its lease is provably held (issue 33,
 * fences, item 1: a resumed executor sent the calls whose lease had lapsed meanwhile,
 * once attempt 2 after attempt 3 had answered).
 *
 * Two executors, a worker inside this test process that records every request's
 * Idempotency-Key, Strand-Attempt and Strand-Lease-Epoch. Executor A (lease 2 s, one
 * place) is frozen by the test-only freeze point dispatcher.before_send
 * (STRAND_TEST_DISPATCH_DELAY_MS, test builds only: libs/common crash_point.h) for 6 s
 * between its claim of the call and the send: its runner, which also renews leases,
 * stands still as a SIGSTOPped process would. Executor B re-claims the call once the
 * lease has lapsed (epoch 2) and sends it. When A wakes it must send nothing for its
 * lapsed claim (epoch 1): the worker never sees an older epoch after a newer one, every
 * request carries an epoch, the lapsed claim is counted in
 * strand_call_lease_lapsed_total, and the call's result is applied once.
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

#define LEASE_MS "2000"
#define FREEZE_MS "6000"

/* ---- the worker --------------------------------------------------------------------- */

#define MAX_HITS 64

typedef struct {
    char key[300];
    char attempt[16];
    char epoch[24];
    char instance[40];
    double arrived;
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

/* Records the request and answers 200 at once. */
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
            if (len - (size_t)(end + 4 - buf) >= (size_t)atol(cl))
                break;
        }
    }
    if (end == NULL) {
        close(fd);
        return NULL;
    }
    *end = '\0';
    pthread_mutex_lock(&hits_lock);
    if (nhits < MAX_HITS) {
        hit_t *h = &hits[nhits++];
        memset(h, 0, sizeof *h);
        header(buf, "Idempotency-Key", h->key, sizeof h->key);
        header(buf, "Strand-Attempt", h->attempt, sizeof h->attempt);
        header(buf, "Strand-Lease-Epoch", h->epoch, sizeof h->epoch);
        header(buf, "Strand-Instance-Id", h->instance, sizeof h->instance);
        h->arrived = now_s();
    }
    pthread_mutex_unlock(&hits_lock);
    const char *body = "{\"ok\":true}";
    char answer[256];
    int n = snprintf(answer, sizeof answer,
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s", strlen(body), body);
    ssize_t sent = send(fd, answer, (size_t)n, MSG_NOSIGNAL);
    (void)sent;
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
    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int bound = 0;
    for (int i = 0; i < 10 && !bound; i++) {   /* the port may be some connection's */
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

/* ---- the case ----------------------------------------------------------------------- */

static void test_setup(void)
{
    /* Executor A: short lease, one place (its claimer claims nothing more while it
     * holds the call), frozen between claim and send. */
    setenv("STRAND_EXECUTOR_CALL_LEASE_MS", LEASE_MS, 1);
    setenv("STRAND_EXECUTOR_CALL_CONCURRENCY", "1", 1);
    setenv("STRAND_TEST_DISPATCH_DELAY_MS", FREEZE_MS, 1);
    CU_ASSERT_FATAL(it_start_all(90));
    unsetenv("STRAND_TEST_DISPATCH_DELAY_MS");
    unsetenv("STRAND_EXECUTOR_CALL_CONCURRENCY");
    char doc[1024];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"fence_%s\",\"version\":1,\"steps\":["
             "{\"id\":\"c\",\"type\":\"call\",\"transport\":\"http\",\"timeout\":10000,"
             "\"request\":{\"url\":\"'http://127.0.0.1:%d/ok'\"}},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}",
             suffix, worker_port);
    it_import(NULL, doc);
}

static void test_lapsed_claim_not_sent(void)
{
    char def[80];
    snprintf(def, sizeof def, "fence_%s", suffix);
    char *id = it_start_instance(NULL, def, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char sql[400];
    /* A (executor-0, the only executor yet) claims the call: epoch 1. */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.calls WHERE instance_id = '%s'"
             " AND claimed_by = 'executor-0' AND lease_epoch = 1", id);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 20), 1);
    double claimed = now_s();
    /* B starts while A is frozen; it claims the call again once A's lease lapsed. */
    pid_t b = it_start_replica(IT_EXECUTOR, 1);
    CU_ASSERT_TRUE_FATAL(b > 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.calls WHERE instance_id = '%s'"
             " AND lease_epoch >= 2", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 20), 1);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    /* A wakes (6 s after it took the call) and finds its lease gone: not sent. */
    double lapsed = -1;
    while (now_s() < claimed + 20 && (lapsed = it_metric(IT_EXECUTOR, "strand_call_lease_lapsed_total", -1)) < 1)
        usleep(100 * 1000);
    usleep(1000 * 1000);   /* time for a stale send to arrive, were there one */
    hit_t h[8];
    int n = hits_of(id, h, 8);
    printf("\n  %d request(s) reached the worker:", n);
    for (int i = 0; i < n; i++)
        printf(" [attempt %s epoch %s at +%.2f s]", h[i].attempt, h[i].epoch[0] ? h[i].epoch : "(none)",
               h[i].arrived - claimed);
    printf("\n  executor A's strand_call_lease_lapsed_total: %.0f\n", lapsed);
    CU_ASSERT_TRUE(n >= 1);
    long long highest = 0;
    for (int i = 0; i < n; i++) {
        CU_ASSERT_TRUE(h[i].epoch[0] != '\0');   /* every request carries an epoch */
        long long e = atoll(h[i].epoch);
        CU_ASSERT_TRUE(e >= highest);             /* never an older epoch after a newer one */
        if (e > highest)
            highest = e;
        CU_ASSERT_STRING_EQUAL(h[i].key, h[0].key);
    }
    /* The lapsed claim (epoch 1) was not sent at all, and A counted it. */
    for (int i = 0; i < n; i++)
        CU_ASSERT_TRUE(atoll(h[i].epoch) >= 2);
    CU_ASSERT_EQUAL(lapsed, 1);
    /* The result applied once: one call row, answered by the newest claim; START and
     * one CALL_RESULT applied. */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.calls WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.calls WHERE instance_id = '%s'"
             " AND status = 'succeeded' AND lease_epoch = %lld", id, highest);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE"
             " instance_id = '%s' AND outcome = 'applied'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);
    free(id);
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_call_fence"))
        return 1;
    signal(SIGPIPE, SIG_IGN);
    snprintf(suffix, sizeof suffix, "%ld_%d", (long)time(NULL), (int)getpid());
    const char *base = getenv("STRAND_TEST_PORT_BASE");
    if (!start_worker((base ? atoi(base) : 18080) + 70))
        return 1;
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"a lapsed claim is not sent", test_lapsed_claim_not_sent},
    };
    return it_run_suite("call_fence", cases, (int)(sizeof cases / sizeof cases[0]));
}
