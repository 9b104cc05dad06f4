/*
 * test_scheduler.c - durable timers on the real servers: N timers due over a short
 * window all fire, each exactly once in effect, while the scheduler is killed -9
 * mid-window and restarted, a second replica runs beside it, and a third joins and
 * leaves; a timer a week away survives restarts unfired. Effects are counted as
 * TIMER_DUE signals in the outbox per waiting token. N = STRAND_TIMER_TEST_N
 * (default 3,000 over 8 s; docs/benchmarks.md has 10,000 over 20 s).
 */
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/timer.h"
#include "strand/util.h"

static char tag[40];
static int n_timers = 3000;
static const int window_ms = 8000;

static long long count(const char *fmt)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, tag);
    return it_sql_number(sql);
}

static void schedule(long long base, int from, int to, int spread_ms, const char *prefix)
{
    st_errbuf_t eb;
    PGconn *conn = it_pg_begin();
    for (int i = from; i < to; i++) {
        char id[37], token[96];
        st_uuid_new(id);
        /* The trailing dot keeps one token from being a prefix of another. */
        snprintf(token, sizeof token, "%s-%s-%d.", prefix, tag, i);
        long long due = base + (long long)(i - from) * spread_ms / (to - from > 0 ? to - from : 1);
        CU_ASSERT_EQUAL(st_timer_schedule_tx(conn, id, token, "timer", due, NULL, &eb), ST_OK);
    }
    it_pg_commit(conn);
}

static void test_timers_fire_once_through_kills_and_replicas(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    long long base = st_now_ms() + 1500;
    schedule(base, 0, n_timers, window_ms, "t");
    schedule(st_now_ms() + 7LL * 86400000, 0, 1, 0, "week");
    pid_t second = it_start_replica(IT_SCHEDULER, 1);
    CU_ASSERT_FATAL(second > 0);
    /* Mid-window: kill -9 the main scheduler, restart it; a third replica joins... */
    usleep((useconds_t)(1500 + window_ms / 3) * 1000);
    it_stop(IT_SCHEDULER, SIGKILL, 5);
    CU_ASSERT_TRUE(it_start(IT_SCHEDULER) > 0);
    pid_t third = it_start_replica(IT_SCHEDULER, 2);
    usleep((useconds_t)(window_ms / 3) * 1000);
    it_kill9(third);   /* ...and leaves abruptly */
    /* All fire. */
    time_t deadline = time(NULL) + 90;
    long long fired = 0;
    while (time(NULL) < deadline &&
           (fired = count("SELECT count(*) FROM strand.timers WHERE waiting_token LIKE 't-%s-%%'"
                          " AND fired_at IS NOT NULL")) < n_timers)
        usleep(200 * 1000);
    CU_ASSERT_EQUAL(fired, n_timers);
    /* Exactly once in effect: one TIMER_DUE per token, none twice. The outbox holds
     * the envelope bytes; the token is inside, so count rows whose payload contains it
     * (among this run's rows: the join is quadratic in the outbox's size). */
    long long signals = count("SELECT count(*) FROM strand.outbox o JOIN strand.timers t"
                              " ON position(convert_to(t.waiting_token, 'UTF8') in o.payload) > 0"
                              " WHERE o.topic = 'signals' AND t.waiting_token LIKE 't-%s-%%'"
                              " AND o.created_at > now() - interval '5 minutes'");
    CU_ASSERT_EQUAL(signals, n_timers);
    /* The week-away timer is still pending, and survives a restart of everything. */
    CU_ASSERT_EQUAL(count("SELECT count(*) FROM strand.timers WHERE waiting_token = 'week-%s-0.'"
                          " AND fired_at IS NULL"), 1);
    it_kill9(second);
    CU_ASSERT_TRUE(it_stop_all());
    CU_ASSERT_FATAL(it_start_all(90));
    /* The restarted scheduler has fired what is due (a marker timer, due now) and left
     * the week-away one alone. */
    schedule(st_now_ms(), 0, 1, 0, "marker");
    char marker[256];
    snprintf(marker, sizeof marker, "SELECT count(*) FROM strand.timers WHERE waiting_token ="
             " 'marker-%s-0.' AND fired_at IS NOT NULL", tag);
    CU_ASSERT_EQUAL(it_wait_number(marker, 1, 30), 1);
    CU_ASSERT_EQUAL(count("SELECT count(*) FROM strand.timers WHERE waiting_token = 'week-%s-0.'"
                          " AND fired_at IS NULL"), 1);
    /* Lateness of this run (firing time minus due time), for the log. */
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT (percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM fired_at - due_at)"
             " * 1000))::bigint FROM strand.timers WHERE waiting_token LIKE 't-%s-%%'", tag);
    fprintf(stderr, "\nscheduler test: %d timers, p99 lateness %lld ms (with a kill -9 and replicas)\n",
            n_timers, it_sql_number(sql));
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_scheduler"))
        return 1;
    const char *n = getenv("STRAND_TIMER_TEST_N");
    if (n != NULL && atoi(n) > 0)
        n_timers = atoi(n);
    st_uuid_new(tag);
    static const it_case_t cases[] = {
        {"timers fire once through kills and replicas", test_timers_fire_once_through_kills_and_replicas},
    };
    return it_run_suite("scheduler", cases, (int)(sizeof cases / sizeof cases[0]));
}
