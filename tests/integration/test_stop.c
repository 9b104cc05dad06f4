/*
 * test_stop.c - every service stops within STRAND_STOP_TIMEOUT_MS, with status 0, when
 * the Kafka broker does not answer: the broker is frozen (SIGSTOP), the clients'
 * connections to it are cut (ss -K), so that they connect again into a broker that
 * accepts and answers nothing, and each service is sent SIGTERM. A stop cut at the
 * deadline says so in its log; the services start, become ready and stop again once
 * the broker resumes (SIGCONT, sent before any assertion can end the case).
 *
 * Found with this setup (by hand, 1 run in 4, the executor stopped for good): the
 * consumer-lag thread held its lock through a watermark query that librdkafka 2.0.2
 * waits on for as long as the broker is away, and st_kafka_consumer_free() waited for
 * that lock (gdb: the main thread in watch_remove(), the lag thread in
 * rd_kafka_query_watermark_offsets()). The lag thread now asks through a client of its
 * own, without the lock; test_stop_deadline covers the deadline deterministically.
 * test_wakeups' executor outlived its SIGTERM in the sanitizer pass of full runs the
 * same way, after its signals topic was deleted under it.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

#define STOP_TIMEOUT_MS 4000
#define STR_(x) #x
#define STR(x) STR_(x)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The test stack's broker, from the pid file scripts/stack.sh writes; 0 if unknown. */
static pid_t broker_pid(void)
{
    const char *dir = getenv("STRAND_STACK_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/kafka.pid", dir != NULL ? dir : ".stack");
    FILE *f = fopen(path, "r");
    long pid = 0;
    if (f != NULL) {
        if (fscanf(f, "%ld", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return (pid_t)pid;
}

/* The number of lines of `service`'s log holding `needle`. */
static long log_lines(const char *service, const char *needle)
{
    const char *dir = getenv("STRAND_TEST_LOG_DIR");
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "grep -c '%s' '%s/test_stop-%s.log'", needle,
             dir != NULL ? dir : "/tmp", service);
    FILE *p = popen(cmd, "r");
    long n = -1;
    if (p == NULL || fscanf(p, "%ld", &n) != 1)
        n = -1;
    if (p != NULL)
        pclose(p);
    return n;
}

static void test_stop_with_frozen_broker(void)
{
    setenv("STRAND_STOP_TIMEOUT_MS", STR(STOP_TIMEOUT_MS), 1);
    /* Lag rounds every 200 ms, so that they run while the broker is frozen. */
    setenv("STRAND_KAFKA_LAG_INTERVAL_MS", "200", 1);
    long assigned_before = log_lines("executor", "partitions assigned");   /* -1: no log yet */
    CU_ASSERT_TRUE_FATAL(it_start_all(60));
    /* The executor holds its partitions and is in its group: its stop has a group to
     * leave and offsets to commit. */
    for (int i = 0; i < 300 && log_lines("executor", "partitions assigned") <= assigned_before; i++)
        usleep(100 * 1000);
    CU_ASSERT_TRUE_FATAL(log_lines("executor", "partitions assigned") > assigned_before);
    pid_t broker = broker_pid();
    CU_ASSERT_TRUE_FATAL(broker > 0);
    /* Everything a fatal assert needs is checked before the broker is frozen: from
     * SIGSTOP to SIGCONT nothing may end the case. */
    const char *brokers = getenv("STRAND_KAFKA_BROKERS");
    const char *colon = brokers != NULL ? strrchr(brokers, ':') : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(colon);
    CU_ASSERT_EQUAL_FATAL(kill(broker, SIGSTOP), 0);
    /* Cut the clients' connections, as a broker's crash or a network cut does: they
     * connect again into a broker that accepts (the kernel does) and answers nothing. */
    char cmd[200];
    snprintf(cmd, sizeof cmd,
             "ss -K -tn state established '( dport = :%d )' >/dev/null 2>&1", atoi(colon + 1));
    int cut_rc = system(cmd);
    CU_ASSERT_TRUE(WIFEXITED(cut_rc) && WEXITSTATUS(cut_rc) == 0);
    sleep(2);   /* the clients notice, and connect again */

    static const struct { it_service_t svc; const char *name; } order[] = {
        {IT_EXECUTOR, "executor"}, {IT_API, "api"}, {IT_SCHEDULER, "scheduler"},
        {IT_MONITOR, "monitor"},
    };
    int rc[4];
    double took[4];
    long cut_before[4];   /* the logs are appended to across runs */
    for (int i = 0; i < 4; i++)
        cut_before[i] = log_lines(order[i].name, "stop did not finish");
    for (int i = 0; i < 4; i++) {
        double t0 = now_s();
        rc[i] = it_stop(order[i].svc, SIGTERM, 30);
        took[i] = now_s() - t0;
    }
    kill(broker, SIGCONT);
    for (int i = 0; i < 4; i++) {
        long cut = log_lines(order[i].name, "stop did not finish") - cut_before[i];
        fprintf(stderr, "\nstop: %s exited with %d in %.1f s with the broker frozen%s",
                order[i].name, rc[i], took[i], cut > 0 ? " (cut short at the deadline)" : "");
        CU_ASSERT_EQUAL(rc[i], 0);
        /* The deadline plus what is left after it: the log line and the exit. */
        CU_ASSERT_TRUE(took[i] < STOP_TIMEOUT_MS / 1000.0 + 6);
        CU_ASSERT_TRUE(cut_before[i] >= 0);
        /* Services that stop within the deadline do not log it; those cut short say so. */
        if (took[i] >= STOP_TIMEOUT_MS / 1000.0)
            CU_ASSERT_EQUAL(cut, 1);
    }
    fprintf(stderr, "\n");
    unsetenv("STRAND_STOP_TIMEOUT_MS");
    unsetenv("STRAND_KAFKA_LAG_INTERVAL_MS");
}

/* After the broker resumes, the services start, become ready and stop again: a cut
 * stop left nothing behind that holds the next start. */
/* True once `svc` reports a partition its consumer holds (its first assignment came; the
 * lag series appear at the first watermark look, within STRAND_KAFKA_LAG_INTERVAL_MS,
 * 5 s by default), within 30 s. */
static int holds_partitions(it_service_t svc)
{
    for (int i = 0; i < 300; i++) {
        char *text = NULL;
        int found = it_http_text(svc, "/metrics", &text) == 200 && text != NULL &&
                    strstr(text, "strand_kafka_consumer_partition_lag_messages{") != NULL;
        free(text);
        if (found)
            return 1;
        usleep(100 * 1000);
    }
    return 0;
}

static void test_start_after_cut_stop(void)
{
    CU_ASSERT_TRUE_FATAL(it_start_all(90));
    CU_ASSERT_EQUAL(it_wait_http(IT_EXECUTOR, "/readyz", 200, 60), 1);
    /* Stopped only once their consumers hold their partitions: librdkafka 2.0.2 aborts
     * (rd_kafka_sticky_assignor_state_destroy, its issue 4312, fixed in 2.3.0) when a
     * cooperative-sticky member is destroyed between its JoinGroup and its first
     * assignment, which a stop 0.1 s after /readyz hit in CI. That is a known defect of
     * a service stopped while it joins (docs/operations.md), not what this case tests. */
    CU_ASSERT_TRUE(holds_partitions(IT_API));
    CU_ASSERT_TRUE(holds_partitions(IT_EXECUTOR));
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_stop"))
        return 1;
    static const it_case_t cases[] = {
        {"every service stops within its deadline with the broker frozen",
         test_stop_with_frozen_broker},
        {"the services start and stop again after the broker resumes", test_start_after_cut_stop},
    };
    return it_run_suite("stop", cases, sizeof cases / sizeof cases[0]);
}
