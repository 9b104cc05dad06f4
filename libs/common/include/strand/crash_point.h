/*
 * crash_point.h - named crash points, for tests only.
 *
 * Compiled in only by the test builds (CMake option STRAND_CRASH_POINTS, which
 * scripts/build.sh turns on for build/ and build-asan/; a shipped build leaves it off
 * and ST_CRASH_POINT() expands to nothing). With it on, a process started with
 *
 *   STRAND_CRASH_AT=<point>      dies at the first pass through <point>
 *   STRAND_CRASH_AT=<point>:<N>  dies at the N-th pass (N >= 1), letting N-1 go by
 *
 * logs one line naming the point and the pass ("crash point reached") and ends at once
 * with _exit(ST_CRASH_EXIT_CODE): no atexit handlers, no flush, no Kafka leave or
 * offset commit, no PostgreSQL COMMIT of an open transaction - as a kill -9 at that
 * line would, but with an exit status a test can tell apart from any other death.
 * The variable is read once, at the first pass through any point.
 *
 * The points and the window each one stands in (tests/integration/test_crash_points.c
 * drives every one):
 *   executor.after_commit    a wake-up's transaction committed, its Kafka offset not
 *                            yet committed (services/executor/executor_loop.c)
 *   relay.after_produce      a batch produced and its delivery reports in, the
 *                            mark-published transaction not yet committed
 *                            (libs/runtime/src/relay.c)
 *   dispatcher.after_send    a call's HTTP answer received, its result not yet
 *                            recorded (services/executor/dispatcher.c)
 *   batch.mid_chunk          half of a batch chunk's items applied in its open
 *                            transaction (services/scheduler/batch_runner.c)
 *   timer.after_commit       a firing batch's timers and their signals committed,
 *                            before any relay of this process publishes them
 *                            (services/scheduler/timer_firing.c)
 *
 * Freeze points (same option; compiled to nothing without it): ST_TEST_FREEZE(name, var)
 * makes the thread that passes it sleep for the milliseconds in environment variable
 * `var` (1 to 60000; unset, 0 or anything else: no sleep), after one log line naming
 * the point ("test freeze"). The points:
 *   dispatcher.before_send   STRAND_TEST_DISPATCH_DELAY_MS: a claimed call taken by the
 *                            call runner, its lease not yet checked, not yet sent
 *                            (services/executor/dispatcher.c; the runner, which also
 *                            renews the leases, stands still like a frozen process;
 *                            tests/integration/test_call_fence.c)
 */
#ifndef STRAND_CRASH_POINT_H
#define STRAND_CRASH_POINT_H

/* The exit status of a process that stopped at its crash point. */
#define ST_CRASH_EXIT_CODE 86

#ifdef STRAND_CRASH_POINTS
/* Passes crash point `name` (a string literal); ends the process when STRAND_CRASH_AT
 * names it and this is the pass it asks for. Thread-safe. */
void st_crash_point(const char *name);
#define ST_CRASH_POINT(name) st_crash_point(name)
/* Sleeps at freeze point `name` for the milliseconds environment variable `var` asks
 * (both string literals). Thread-safe; reads `var` at every pass. */
void st_test_freeze(const char *name, const char *var);
#define ST_TEST_FREEZE(name, var) st_test_freeze(name, var)
#else
#define ST_CRASH_POINT(name) ((void)0)
#define ST_TEST_FREEZE(name, var) ((void)0)
#endif

#endif
