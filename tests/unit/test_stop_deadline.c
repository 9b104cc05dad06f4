/* test_stop_deadline.c - a service's stop is bounded by STRAND_STOP_TIMEOUT_MS.
 *
 * A child process runs the shared service runtime (st_service_init/run, no servers
 * needed) and, once its loop returns on SIGTERM, blocks for good, as a stop held by a
 * dependency that never answers does (a hung Kafka broker holds librdkafka's close and
 * destroy; test_wakeups' executor outlived its 30 s that way). The deadline must end
 * the process, with status 0 and an error line saying so; a stop that finishes in time
 * must not log it. Before the deadline existed, the child never exited. */
#include "st_test.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "strand/service.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Child: serves until a stop signal, then blocks (`held`) or returns at once. */
static void child_main(int held, const char *log_path)
{
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        _exit(3);
    dup2(fd, STDERR_FILENO);
    dup2(fd, STDOUT_FILENO);
    st_service_t svc;
    st_errbuf_t eb;
    if (st_service_init(&svc, "scheduler", 8082, &eb) != ST_OK)
        _exit(4);
    st_service_run(&svc);
    if (held)
        for (;;)
            pause();
    st_service_close(&svc);
    _exit(0);
}

/* Starts a child, stops it with SIGTERM after it is up; returns its exit status (-1 if
 * it outlived `limit_s`, then killed) and the seconds it took in `*took`. */
static int stop_child(int held, const char *log_path, double limit_s, double *took)
{
    pid_t pid = fork();
    if (pid == 0)
        child_main(held, log_path);
    if (pid < 0)
        return -2;
    usleep(500 * 1000);   /* its loop is running and its signal events are set */
    double t0 = now_s();
    kill(pid, SIGTERM);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (now_s() - t0 > limit_s) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            *took = now_s() - t0;
            return -1;
        }
        usleep(20 * 1000);
    }
    *took = now_s() - t0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int log_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    char line[2048];
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* Sets the child's environment and names its log file in `log_path`. */
static void prepare_env(char *log_path, size_t len)
{
    snprintf(log_path, len, "/tmp/test_stop_deadline-%d.log", (int)getpid());
    char port[16];
    snprintf(port, sizeof port, "%d", 20000 + (int)(getpid() % 20000));
    setenv("STRAND_HTTP_PORT", port, 1);
    setenv("STRAND_HTTP_ADDR", "127.0.0.1", 1);
    setenv("STRAND_STOP_TIMEOUT_MS", "1500", 1);
}

/* A stop that never finishes ends at the deadline, with status 0 and the error line. */
static void test_held_stop_is_cut_at_the_deadline(void)
{
    char log_path[64];
    prepare_env(log_path, sizeof log_path);
    double took = 0;
    int rc = stop_child(1, log_path, 10.0, &took);
    fprintf(stderr, "\nstop_deadline: held stop ended with %d after %.2f s\n", rc, took);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_TRUE(took >= 1.4 && took < 5.0);
    CU_ASSERT_TRUE(log_has(log_path, "stop did not finish in time"));
    CU_ASSERT_TRUE(log_has(log_path, "STRAND_STOP_TIMEOUT_MS"));
    unlink(log_path);
}

/* A stop that finishes in time exits on its own, without the deadline's line. */
static void test_prompt_stop_is_not_cut(void)
{
    char log_path[64];
    prepare_env(log_path, sizeof log_path);
    double took = 0;
    int rc = stop_child(0, log_path, 10.0, &took);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_TRUE(took < 1.4);
    CU_ASSERT_TRUE(log_has(log_path, "stop signal received"));
    CU_ASSERT_FALSE(log_has(log_path, "stop did not finish in time"));
    unlink(log_path);
}

ST_TEST_MAIN("stop_deadline", ST_TEST(test_held_stop_is_cut_at_the_deadline),
             ST_TEST(test_prompt_stop_is_not_cut))
