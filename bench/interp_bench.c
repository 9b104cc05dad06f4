/*
 * interp_bench.c - micro-benchmark of the run-to-wait interpreter (no I/O).
 *
 *   strand-interp-bench [INSTANCES]     (default 20000)
 *
 * Runs a 3-step workflow (set, if, complete), a 3-state process with static decisions
 * and a 100-iteration loop to completion, and an event round trip through a task wait
 * (START, then TASK_COMPLETED on the stored snapshot, as the executor does). Prints
 * steps per second and heap allocations (jansson and ours) per step. Numbers go to
 * docs/benchmarks.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/engine.h"

static unsigned long long allocations;

static void *counting_malloc(size_t size)
{
    allocations++;
    return malloc(size);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static st_defn_t *compile(const char *text)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    if (doc == NULL || st_defn_compile(doc, &defn, &problems) != ST_OK) {
        fprintf(stderr, "bench definition does not compile\n");
        exit(1);
    }
    json_decref(doc);
    return defn;
}

static void bench(const char *label, st_defn_t *defn, int instances, int steps_per_instance,
                  int with_task)
{
    json_t *start = json_pack("{s:s, s:{s:i, s:s}}", "type", "START", "input", "amount", 1500,
                              "name", "ada");
    char id[40];
    unsigned long long before = allocations;
    double t0 = now_s();
    for (int i = 0; i < instances; i++) {
        snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", i);
        st_run_result_t run;
        st_errbuf_t eb;
        if (st_interp_run(defn, NULL, start, id, 1795400000000LL, &run, &eb) != ST_OK) {
            fprintf(stderr, "%s: %s\n", label, eb.msg);
            exit(1);
        }
        if (with_task) {
            const char *token = json_string_value(json_object_get(json_object_get(run.snapshot, "waiting"), "token"));
            json_t *done = json_pack("{s:s, s:s, s:{s:{s:b}}}", "type", "TASK_COMPLETED", "token", token,
                                     "payload", "result", "ok", 1);
            st_run_result_t next;
            if (st_interp_run(defn, run.snapshot, done, id, 1795400000000LL, &next, &eb) != ST_OK ||
                next.status != ST_RUN_COMPLETED) {
                fprintf(stderr, "%s: resume failed: %s\n", label, eb.msg);
                exit(1);
            }
            st_run_result_close(&next);
            json_decref(done);
        }
        st_run_result_close(&run);
    }
    double elapsed = now_s() - t0;
    double steps = (double)instances * steps_per_instance;
    printf("%-34s %8d instances  %10.0f steps/s  %8.0f instances/s  %6.1f allocations/step\n", label,
           instances, steps / elapsed, instances / elapsed,
           (double)(allocations - before) / steps);
    json_decref(start);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    json_set_alloc_funcs(counting_malloc, free);
    st_defn_t *three = compile(
        "{\"kind\":\"flow\",\"name\":\"w1\",\"version\":1,\"steps\":["
        "{\"id\":\"a\",\"type\":\"set\",\"values\":{\"greeting\":\"'hello ' + input.name\"}},"
        "{\"id\":\"b\",\"type\":\"if\",\"condition\":\"input.amount > 1000\",\"then\":["
        "  {\"id\":\"c\",\"type\":\"set\",\"values\":{\"review\":true}}]},"
        "{\"id\":\"d\",\"type\":\"complete\",\"output\":{\"g\":\"state.greeting\"}}]}");
    st_defn_t *loop = compile(
        "{\"kind\":\"flow\",\"name\":\"loop\",\"version\":1,\"steps\":["
        "{\"id\":\"i\",\"type\":\"set\",\"values\":{\"i\":\"0\",\"sum\":\"0\"}},"
        "{\"id\":\"w\",\"type\":\"while\",\"condition\":\"state.i < 100\",\"max_iterations\":1000,\"body\":["
        "  {\"id\":\"s\",\"type\":\"set\",\"values\":{\"sum\":\"state.sum + state.i\",\"i\":\"state.i + 1\"}}]},"
        "{\"id\":\"d\",\"type\":\"complete\",\"output\":{\"sum\":\"state.sum\"}}]}");
    st_defn_t *task = compile(
        "{\"kind\":\"flow\",\"name\":\"task\",\"version\":1,\"steps\":["
        "{\"id\":\"t\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"a\"],\"payload\":{\"x\":\"input.amount\"}},"
        "{\"id\":\"d\",\"type\":\"complete\",\"output\":{\"ok\":\"state.t.ok\"}}]}");
    st_defn_t *process = compile(
        "{\"kind\":\"process\",\"name\":\"p\",\"version\":1,\"start\":[\"a\"],\"states\":["
        "{\"id\":\"a\",\"next\":[\"b\"]},{\"id\":\"b\",\"next\":[\"c\"]},"
        "{\"id\":\"c\",\"complete\":{\"name\":\"input.name\"}}]}");
    bench("3 steps (set, if+set, complete)", three, n, 4, 0);
    bench("process: 3 states, static next", process, n, 4, 0);
    bench("while loop, 100 iterations", loop, n / 20, 203, 0);
    bench("task wait + resume (2 runs)", task, n, 2, 1);
    st_defn_free(three);
    st_defn_free(loop);
    st_defn_free(task);
    st_defn_free(process);
    return 0;
}
