/*
 * test_wakeups.c - wake-ups and recovery on the real servers (issue 15).
 *
 * 1. Timers inserted while the scheduler's due loop runs its next-due query fire on
 *    time: the notification that arrived during the query sits in libpq's buffer and
 *    must be taken from there before the loop sleeps. The test-only
 *    STRAND_TEST_DUE_LOOP_DELAY_MS widens that window (about a millisecond) to 300 ms;
 *    each pair inserts a far timer (which starts the window) and, inside it, a near
 *    one that must fire at its own due time, not the far one's. And the due loops'
 *    next-deadline expression (ST_PG_SQL_MS_UNTIL) reads a deadline 0.3 ms away as
 *    1 ms, not as due now.
 * 2. Redis is optional: with STRAND_REDIS_URL unset, and with Redis stopped mid-run and
 *    started again, an instance runs from start to completion, a start-and-wait and a
 *    long poll answer within about 100 ms of the change they wait for (printed;
 *    asserted under 1 s, against a wait_ms of 8 s).
 *    Also a long poll parked while PostgreSQL restarts: the API's LISTEN connection
 *    comes back by itself and the poll answers at the change.
 *    With Redis up, the executor's wake-ups rely on the hint and do not notify
 *    strand_wake (a test connection LISTENs and counts); with Redis stopped they
 *    notify again (after the commit, the hint having reached nobody). Those runs set
 *    STRAND_WAIT_RECHECK_MS to 60 s, so that only the hint or the notification can
 *    answer within the asserted second; likewise an API started without Redis beside an
 *    executor with it (its hints reach nobody, so it notifies). And a change that
 *    neither announces (a
 *    transaction with strand.wake_by_hint on and no hint after it: an executor killed
 *    between its commit and its publish) is answered by the API's recheck
 *    (STRAND_WAIT_RECHECK_MS=300) within 2 s, against a wait_ms of 8 s.
 *    The relay is woken the same way: with Redis up, no outbox write notifies
 *    strand_outbox (a second test connection LISTENs and counts), with Redis stopped
 *    they do (strand_outbox_hints_missed_total rises), after Redis restarts the idle
 *    leader is subscribed again within 6 + 3 s (it retries on its 250 ms look, not only
 *    when a write wakes it), and a row committed with
 *    neither (a writer killed between its commit and its hint) is published by the
 *    leader's 250 ms recheck within 2 s, not after its 30 s safety wait.
 * 3. Signals lost by Kafka come back: with the executor stopped, signals are published
 *    to the signals topic, which is then deleted and created again (the Kafka admin
 *    API); instances waiting for those signals and for timers all complete, through
 *    the relay leader's recovery sweep (STRAND_RECOVERY_GRACE_S=3, _INTERVAL_S=1).
 */
#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/pg.h"
#include "strand/timer.h"
#include "strand/util.h"

#define WAIT_MS 8000
#define PAIRS 8

static char tag[40];
static char def_quick[64], def_timer[64], def_signal[64], def_park[64];

static double now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

/* ---- 1. the due loop's query window ---------------------------------------------- */

static void schedule_one(const char *token, long long due_ms)
{
    char id[37];
    st_uuid_new(id);
    st_errbuf_t eb;
    PGconn *conn = it_pg_begin();
    CU_ASSERT_EQUAL(st_timer_schedule_tx(conn, id, token, "timer", due_ms, NULL, &eb), ST_OK);
    it_pg_commit(conn);
}

static void test_timers_in_the_query_window_fire_on_time(void)
{
    setenv("STRAND_TEST_DUE_LOOP_DELAY_MS", "300", 1);
    pid_t scheduler = it_start(IT_SCHEDULER);
    unsetenv("STRAND_TEST_DUE_LOOP_DELAY_MS");
    CU_ASSERT_FATAL(scheduler > 0);
    /* Up when its metrics answer; then let its first loop pass settle. */
    time_t deadline = time(NULL) + 60;
    while (time(NULL) < deadline && it_http(IT_SCHEDULER, "GET", "/healthz", NULL, NULL) != 200)
        usleep(100 * 1000);
    sleep(1);
    for (int i = 0; i < PAIRS; i++) {
        char far[96], near[96], sql[256];
        snprintf(far, sizeof far, "far-%s-%d.", tag, i);
        snprintf(near, sizeof near, "near-%s-%d.", tag, i);
        long long t = st_now_ms();
        /* Far enough not to fire during the test: the loop's query (300 ms with the
         * hook) after a firing would itself delay a near timer. */
        schedule_one(far, t + 60000);    /* wakes the loop: its query window opens */
        usleep(100 * 1000);
        schedule_one(near, t + 1000);    /* committed inside the window */
        snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.timers WHERE waiting_token = '%s'"
                 " AND fired_at IS NOT NULL", near);
        it_wait_number(sql, 1, 10);
    }
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(max(extract(epoch FROM fired_at - due_at) * 1000), 99999)::bigint"
             " FROM strand.timers WHERE waiting_token LIKE 'near-%s-%%' AND fired_at IS NOT NULL", tag);
    long long max_late = it_sql_number(sql);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.timers WHERE waiting_token LIKE"
             " 'near-%s-%%' AND fired_at IS NOT NULL", tag);
    long long fired = it_sql_number(sql);
    fprintf(stderr, "\nwakeups: %lld of %d timers inserted in the due loop's query window fired;"
            " max lateness %lld ms\n", fired, PAIRS, max_late);
    CU_ASSERT_EQUAL(fired, PAIRS);
    CU_ASSERT_TRUE(max_late < 500);
    it_stop(IT_SCHEDULER, SIGTERM, 10);
    /* The far timers would fire during a later run's pairs, and the loop's slow query
     * after that firing would delay a near timer there. */
    snprintf(sql, sizeof sql, "WITH d AS (DELETE FROM strand.timers WHERE waiting_token LIKE"
             " 'far-%s-%%' RETURNING 1) SELECT count(*) FROM d", tag);
    CU_ASSERT_EQUAL(it_sql_number(sql), PAIRS);
}

/* A deadline less than a millisecond away reads 1 ms, not 0 ("due now"): the due
 * loop would claim early, find nothing, and after its second look sleep 5 ms past the
 * deadline (st_due_loop_sleep_ms). clock_timestamp() + 300 us is taken first, so the
 * expression sees it 0.3 ms ahead, less the microseconds between the two reads. */
static void test_deadline_under_a_ms_reads_one(void)
{
    CU_ASSERT_EQUAL(it_sql_number("SELECT " ST_PG_SQL_MS_UNTIL("d") " FROM (SELECT"
                                  " clock_timestamp() + interval '300 microseconds' AS d"
                                  " OFFSET 0) t"), 1);
    CU_ASSERT_EQUAL(it_sql_number("SELECT " ST_PG_SQL_MS_UNTIL("d") " FROM (SELECT"
                                  " clock_timestamp() + interval '2.2 ms' AS d OFFSET 0) t"), 3);
    CU_ASSERT(it_sql_number("SELECT " ST_PG_SQL_MS_UNTIL("clock_timestamp() - interval '1 ms'")) <= 0);
}

/* ---- 2. Redis optional ----------------------------------------------------------- */

static void import(const char *name, const char *steps_json)
{
    char doc[1024];
    snprintf(doc, sizeof doc, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":%s}",
             name, steps_json);
    long status = it_http(IT_API, "POST", "/v1/definitions", doc, NULL);
    CU_ASSERT_TRUE(status == 200 || status == 201);
}

static void import_definitions(void)
{
    snprintf(def_quick, sizeof def_quick, "wk-quick-%.8s", tag);
    snprintf(def_timer, sizeof def_timer, "wk-timer-%.8s", tag);
    snprintf(def_signal, sizeof def_signal, "wk-signal-%.8s", tag);
    snprintf(def_park, sizeof def_park, "wk-park-%.8s", tag);   /* only the recheck's */
    import(def_park, "[{\"id\":\"s\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"got\"},"
                     "{\"id\":\"done\",\"type\":\"complete\",\"output\":\"1\"}]");
    import(def_quick, "[{\"id\":\"a\",\"type\":\"set\",\"values\":{\"x\":\"1\"}},"
                      "{\"id\":\"done\",\"type\":\"complete\",\"output\":\"state.x\"}]");
    import(def_timer, "[{\"id\":\"t\",\"type\":\"timer\",\"delay\":\"input.delay\"},"
                      "{\"id\":\"done\",\"type\":\"complete\",\"output\":\"1\"}]");
    import(def_signal, "[{\"id\":\"s\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"got\"},"
                       "{\"id\":\"t\",\"type\":\"timer\",\"delay\":\"input.delay\"},"
                       "{\"id\":\"done\",\"type\":\"complete\",\"output\":\"state.got\"}]");
}

/* Starts an instance (no wait); returns its id (caller frees) or NULL. */
static char *start(const char *def, const char *delay)
{
    char input[128];
    snprintf(input, sizeof input, "{\"delay\":\"%s\"}", delay);
    return it_start_instance(NULL, def, input);
}

/* Seconds from the moment the instance ended (its wake-up's transaction) to `t`. */
static double since_end(const char *id, double t)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT (extract(epoch FROM ended_at) * 1000000)::bigint"
             " FROM strand.instances WHERE id = '%s'", id);
    long long ended_us = it_sql_number(sql);
    return ended_us > 0 ? t - ended_us / 1e6 : 1e9;
}

/* A connection LISTENing on strand_wake, as the API's is. Caller PQfinish()es. */
static PGconn *wake_listener(void)
{
    return it_pg_session("LISTEN strand_wake");
}

/* A connection LISTENing on strand_outbox, as the relay leader's is. Caller
 * PQfinish()es. */
static PGconn *outbox_listener(void)
{
    return it_pg_session("LISTEN strand_outbox");
}

/* How many notifications reached `listener` since it last looked, those whose payload
 * is `id` (NULL: all); a round trip first, so that everything committed before is in. */
static int notified(PGconn *listener, const char *id)
{
    PGresult *res = PQexec(listener, "SELECT 1");
    PQclear(res);
    PQconsumeInput(listener);
    int n = 0;
    PGnotify *note;
    while ((note = PQnotifies(listener)) != NULL) {
        n += id == NULL || strcmp(note->extra, id) == 0;
        PQfreemem(note);
    }
    return n;
}

/* Waits up to `timeout_s` until one relay leads and is subscribed to outbox hints. */
static void relay_subscribed(double timeout_s)
{
    double deadline = now_s() + timeout_s, leaders = 0, subscribed = 0;
    while (now_s() < deadline && (leaders != 1 || subscribed != 1)) {
        usleep(100 * 1000);
        leaders = subscribed = 0;
        for (int svc = IT_API; svc <= IT_MONITOR; svc++) {
            leaders += it_metric((it_service_t)svc, "strand_outbox_relay_leader", 0);
            subscribed +=
                it_metric((it_service_t)svc, "strand_outbox_relay_hints_subscribed", 0);
        }
    }
    CU_ASSERT_EQUAL(leaders, 1);
    CU_ASSERT_EQUAL(subscribed, 1);
}

/* strand_outbox_hints_missed_total over the four services. */
static double outbox_hints_missed(void)
{
    double sum = 0;
    for (int svc = IT_API; svc <= IT_MONITOR; svc++)
        sum += it_metric((it_service_t)svc, "strand_outbox_hints_missed_total", 0);
    return sum;
}

/* The slice, a start-and-wait and a long poll; `label` names the Redis situation.
 * With `listener`, returns how many strand_wake notifications it received for the long
 * poll's instance (from its start to its end); -1 without. */
static int check_wakeups(const char *label, PGconn *listener)
{
    /* The slice: start to completion. */
    char *id = start(def_quick, "1ms");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    free(id);

    /* Start and wait: answers after the first wake-up, which completes it. */
    char body[256], path[160];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{}}", def_quick);
    snprintf(path, sizeof path, "/v1/instances?wait_ms=%d", WAIT_MS);
    double t0 = now_s();
    json_t *answer = NULL;
    long status = it_http(IT_API, "POST", path, body, &answer);
    double t1 = now_s();
    CU_ASSERT_EQUAL(status, 201);
    const char *sid = json_string_value(json_object_get(answer, "id"));
    const char *st = json_string_value(json_object_get(answer, "status"));
    CU_ASSERT_STRING_EQUAL(st ? st : "(none)", "completed");
    double start_late = sid ? since_end(sid, t1) : 1e9;
    json_decref(answer);

    /* Long poll: parked while a 1.5 s timer runs, answered when it fires. */
    id = start(def_timer, "1500ms");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    if (listener != NULL)
        notified(listener, "");   /* forget what came before */
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states WHERE"
             " instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    snprintf(path, sizeof path, "/v1/instances/%s?wait_ms=%d&after_version=1", id, WAIT_MS);
    double p0 = now_s();
    status = it_http(IT_API, "GET", path, NULL, &answer);
    double p1 = now_s();
    CU_ASSERT_EQUAL(status, 200);
    st = json_string_value(json_object_get(answer, "status"));
    CU_ASSERT_STRING_EQUAL(st ? st : "(none)", "completed");
    json_decref(answer);
    double poll_late = since_end(id, p1);
    int notes = listener != NULL ? notified(listener, id) : -1;
    free(id);
    fprintf(stderr, "\nwakeups (%s): start-and-wait answered %.0f ms after the wake-up (%.0f ms"
            " in all), long poll %.0f ms after the change (%.0f ms in all), wait_ms %d\n", label,
            start_late * 1000, (t1 - t0) * 1000, poll_late * 1000, (p1 - p0) * 1000, WAIT_MS);
    CU_ASSERT_TRUE(start_late < 1.0);
    CU_ASSERT_TRUE(poll_late < 1.0);
    CU_ASSERT_TRUE(t1 - t0 < WAIT_MS / 2000.0);
    CU_ASSERT_TRUE(p1 - p0 < WAIT_MS / 1000.0 - 1.0);
    return notes;
}

typedef struct {
    char path[200];
    long status;
    json_t *answer;
    double answered_at;
} parked_poll_t;

static void *park_poll(void *arg)
{
    parked_poll_t *p = arg;
    p->status = it_http(IT_API, "GET", p->path, NULL, &p->answer);
    p->answered_at = now_s();
    return NULL;
}

static void test_without_redis(void)
{
    char *saved = getenv("STRAND_REDIS_URL") ? strdup(getenv("STRAND_REDIS_URL")) : NULL;
    unsetenv("STRAND_REDIS_URL");
    CU_ASSERT_FATAL(it_start_all(90));
    if (saved != NULL)
        setenv("STRAND_REDIS_URL", saved, 1);
    free(saved);
    import_definitions();
    check_wakeups("STRAND_REDIS_URL unset", NULL);
    CU_ASSERT_TRUE(it_stop_all());
}

static void test_redis_stopped_mid_run(void)
{
    CU_ASSERT_FATAL(getenv("STRAND_REDIS_URL") != NULL);
    setenv("STRAND_WAIT_RECHECK_MS", "60000", 1);   /* only a hint or a notification */
    CU_ASSERT_FATAL(it_start_all(90));
    unsetenv("STRAND_WAIT_RECHECK_MS");
    import_definitions();
    relay_subscribed(30);
    /* A writer thread whose hint reached nobody before the leader subscribed (the
     * scheduler firing a timer left by an earlier case) notifies once more; one round
     * first, so that the counted one starts with every writer relying on hints. */
    check_wakeups("Redis up, before counting", NULL);
    PGconn *listener = wake_listener();
    PGconn *relay_listener = outbox_listener();
    double missed = it_metric(IT_EXECUTOR, "strand_wake_hints_missed_total", 0);
    double outbox_missed = outbox_hints_missed();
    /* Hints reach the API: the wake-ups of the long poll's instance (its timer step,
     * then its end) do not notify PostgreSQL. And they reach the relay leader: the
     * outbox rows of the starts (the API) and of the timer (the scheduler) do not
     * notify strand_outbox either. */
    CU_ASSERT_EQUAL(check_wakeups("Redis up", listener), 0);
    CU_ASSERT_EQUAL(notified(relay_listener, NULL), 0);
    CU_ASSERT_EQUAL(outbox_hints_missed(), outbox_missed);
    CU_ASSERT_EQUAL(it_stack("stop redis"), 0);
    /* Nobody gets the hints: PostgreSQL's notification answers, and wakes the relay. */
    CU_ASSERT_TRUE(check_wakeups("Redis stopped", listener) >= 1);
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, "strand_wake_hints_missed_total", 0) > missed);
    CU_ASSERT_TRUE(notified(relay_listener, NULL) >= 1);
    CU_ASSERT_TRUE(outbox_hints_missed() > outbox_missed);
    CU_ASSERT_EQUAL(it_stack("start redis"), 0);
    /* Nothing is written meanwhile: the idle leader retries its subscription on its
     * 250 ms look, not only when a write wakes it (30 s); within 9 s (a failed
     * subscription is retried after 5 s). */
    relay_subscribed(9);
    check_wakeups("Redis started again", NULL);
    PQfinish(relay_listener);
    PQfinish(listener);
    CU_ASSERT_TRUE(it_stop_all());
}

/* An API configured without Redis beside an executor with it: the executor's hints
 * reach nobody, so it notifies PostgreSQL after each commit, and the API answers on
 * that notification (the recheck is set to 60 s, so it cannot be what answers). */
static void test_api_without_redis_beside_executor_with_it(void)
{
    char *url = strdup(getenv("STRAND_REDIS_URL"));
    setenv("STRAND_WAIT_RECHECK_MS", "60000", 1);
    unsetenv("STRAND_REDIS_URL");
    CU_ASSERT_FATAL(it_start(IT_API) > 0);
    setenv("STRAND_REDIS_URL", url, 1);
    unsetenv("STRAND_WAIT_RECHECK_MS");
    free(url);
    CU_ASSERT_FATAL(it_start(IT_EXECUTOR) > 0 && it_start(IT_SCHEDULER) > 0 &&
                    it_start(IT_MONITOR) > 0);
    for (int svc = IT_API; svc <= IT_MONITOR; svc++)
        CU_ASSERT_FATAL(it_wait_http((it_service_t)svc, "/readyz", 200, 90));
    import_definitions();
    PGconn *listener = wake_listener();
    double missed = it_metric(IT_EXECUTOR, "strand_wake_hints_missed_total", 0);
    CU_ASSERT_TRUE(check_wakeups("the API without Redis, the executor with it", listener) >= 1);
    CU_ASSERT_TRUE(it_metric(IT_EXECUTOR, "strand_wake_hints_missed_total", 0) > missed);
    CU_ASSERT_TRUE(it_metric(IT_API, "strand_long_polls_total{by=\"notify\"}", 0) > 0);
    PQfinish(listener);
    CU_ASSERT_TRUE(it_stop_all());
}

/* A state change that neither notifies nor hints (what an executor killed between its
 * commit and its hint leaves) still answers a parked long poll: the API's recheck. */
static void test_unannounced_change_answered_by_recheck(void)
{
    setenv("STRAND_WAIT_RECHECK_MS", "300", 1);
    CU_ASSERT_FATAL(it_start_all(90));
    unsetenv("STRAND_WAIT_RECHECK_MS");
    import_definitions();
    char *id = start(def_park, "1ms");   /* waits for the signal "go" */
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states WHERE"
             " instance_id = '%s'", id);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 30), 1);
    double rechecked = it_metric(IT_API, "strand_long_polls_total{by=\"recheck\"}", 0);
    parked_poll_t poll = {0};
    snprintf(poll.path, sizeof poll.path, "/v1/instances/%s?wait_ms=%d&after_version=1", id,
             WAIT_MS);
    pthread_t thread;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&thread, NULL, park_poll, &poll), 0);
    usleep(700 * 1000);   /* parked, and rechecked twice with nothing moved */
    PGconn *conn = it_pg_begin();
    PGresult *res = PQexec(conn, "SET LOCAL strand.wake_by_hint = on");
    CU_ASSERT_EQUAL(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    snprintf(sql, sizeof sql, "UPDATE strand.runtime_states SET state_version = 2"
             " WHERE instance_id = '%s'", id);
    res = PQexec(conn, sql);
    CU_ASSERT_EQUAL(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    double changed = now_s();
    it_pg_commit(conn);
    pthread_join(thread, NULL);
    CU_ASSERT_EQUAL(poll.status, 200);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(poll.answer, "state_version")), 2);
    json_decref(poll.answer);
    fprintf(stderr, "\nwakeups (a change with no hint and no notification): answered %.0f ms"
            " after it, STRAND_WAIT_RECHECK_MS 300, wait_ms %d\n",
            (poll.answered_at - changed) * 1000, WAIT_MS);
    CU_ASSERT_TRUE(poll.answered_at - changed < 2.0);
    CU_ASSERT_TRUE(it_metric(IT_API, "strand_long_polls_total{by=\"recheck\"}", 0) >
                   rechecked);
    free(id);
    CU_ASSERT_TRUE(it_stop_all());
}

/* An outbox row committed without the notification and without a hint after it (what
 * a writer killed between its commit and its hint leaves) is published by the relay
 * leader's recheck within about 250 ms, not after its 30 s safety wait. */
static void test_unannounced_outbox_row_published_by_recheck(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    relay_subscribed(30);
    /* The leader's start-up recovery sweep runs every second while it catches up
     * (each run wakes the relay); wait until it has, so that only a hint, a
     * notification or the recheck can publish the row. */
    double sweeps = -1, stable_since = now_s(), deadline = now_s() + 90;
    while (now_s() < deadline) {
        double now_sweeps = 0;
        for (int svc = IT_API; svc <= IT_MONITOR; svc++)
            now_sweeps += it_metric((it_service_t)svc, "strand_outbox_recovery_sweeps_total", 0);
        if (now_sweeps != sweeps) {
            sweeps = now_sweeps;
            stable_since = now_s();
        } else if (now_s() - stable_since > 2.5) {
            break;
        }
        usleep(100 * 1000);
    }
    long long id = it_sql_number("INSERT INTO strand.outbox (topic, key, payload)"
                                 " VALUES ('notices', 'unannounced', '\\x00'::bytea) RETURNING id");
    CU_ASSERT_FATAL(id > 0);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE id = %lld"
             " AND published_at IS NOT NULL", id);
    double t0 = now_s();
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 10), 1);
    double took = now_s() - t0;
    fprintf(stderr, "\nan unannounced outbox row was published after %.0f ms\n", took * 1000);
    CU_ASSERT_TRUE(took < 2.0);
    CU_ASSERT_TRUE(it_stop_all());
}

static void test_long_poll_across_postgres_restart(void)
{
    char *saved = getenv("STRAND_REDIS_URL") ? strdup(getenv("STRAND_REDIS_URL")) : NULL;
    unsetenv("STRAND_REDIS_URL");   /* only the PostgreSQL path can wake it */
    CU_ASSERT_FATAL(it_start_all(90));
    if (saved != NULL)
        setenv("STRAND_REDIS_URL", saved, 1);
    free(saved);
    import_definitions();
    char *id = start(def_timer, "12s");
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states WHERE"
             " instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    parked_poll_t poll = {0};
    snprintf(poll.path, sizeof poll.path, "/v1/instances/%s?wait_ms=30000&after_version=1", id);
    pthread_t thread;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&thread, NULL, park_poll, &poll), 0);
    usleep(500 * 1000);
    CU_ASSERT_EQUAL(it_stack("restart postgres"), 0);
    pthread_join(thread, NULL);
    CU_ASSERT_EQUAL(poll.status, 200);
    const char *status = json_string_value(json_object_get(poll.answer, "status"));
    CU_ASSERT_STRING_EQUAL(status ? status : "(none)", "completed");
    json_decref(poll.answer);
    double late = since_end(id, poll.answered_at);
    fprintf(stderr, "\nwakeups (PostgreSQL restarted under a parked long poll): answered %.0f ms"
            " after the change, wait_ms 30000\n", late * 1000);
    CU_ASSERT_TRUE(late < 1.0);
    free(id);
    CU_ASSERT_TRUE(it_stop_all());
}

/* ---- 3. a signals topic that loses its data --------------------------------------- */

/* Deletes (create = 0) or creates the test's signals topic; returns the error code. */
static rd_kafka_resp_err_t topic_admin(int create)
{
    char errstr[256], name[160];
    snprintf(name, sizeof name, "%ssignals", it_topic_prefix());
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", getenv("STRAND_KAFKA_BROKERS"), errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL)
        return RD_KAFKA_RESP_ERR__FAIL;
    rd_kafka_queue_t *queue = rd_kafka_queue_new(rk);
    rd_kafka_resp_err_t err;
    if (create) {
        rd_kafka_NewTopic_t *t = rd_kafka_NewTopic_new(name, 4, 1, errstr, sizeof errstr);
        rd_kafka_CreateTopics(rk, &t, 1, NULL, queue);
        rd_kafka_NewTopic_destroy(t);
    } else {
        rd_kafka_DeleteTopic_t *t = rd_kafka_DeleteTopic_new(name);
        rd_kafka_DeleteTopics(rk, &t, 1, NULL, queue);
        rd_kafka_DeleteTopic_destroy(t);
    }
    rd_kafka_event_t *ev = rd_kafka_queue_poll(queue, 30000);
    if (ev == NULL) {
        err = RD_KAFKA_RESP_ERR__TIMED_OUT;
    } else if ((err = rd_kafka_event_error(ev)) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        size_t n = 0;
        const rd_kafka_topic_result_t **results =
            create ? rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n)
                   : rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(ev), &n);
        err = n == 1 ? rd_kafka_topic_result_error(results[0]) : RD_KAFKA_RESP_ERR__FAIL;
    }
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(queue);
    rd_kafka_destroy(rk);
    return err;
}

#define LOST_N 20

static void test_signals_topic_recreated(void)
{
    setenv("STRAND_RECOVERY_GRACE_S", "3", 1);
    setenv("STRAND_RECOVERY_INTERVAL_S", "1", 1);
    CU_ASSERT_FATAL(it_start_all(90));
    import_definitions();
    long long since_ms = it_sql_number("SELECT (extract(epoch FROM now()) * 1000)::bigint");
    /* Instances waiting for a signal (then a short timer), and for a 4 s timer. */
    char *waiting[LOST_N], *timed[LOST_N];
    for (int i = 0; i < LOST_N; i++) {
        waiting[i] = start(def_signal, "500ms");
        timed[i] = start(def_timer, "4s");
        CU_ASSERT_PTR_NOT_NULL_FATAL(waiting[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(timed[i]);
    }
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name IN"
             " ('%s', '%s') AND status = 'waiting' AND created_at >= to_timestamp(%lld / 1000.0)",
             def_signal, def_timer, since_ms);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2 * LOST_N, 60), 2 * LOST_N);
    /* Signals published while no executor consumes them... */
    CU_ASSERT_EQUAL(it_stop(IT_EXECUTOR, SIGTERM, 20), 0);
    for (int i = 0; i < LOST_N; i++) {
        char path[160];
        snprintf(path, sizeof path, "/v1/instances/%s/signals", waiting[i]);
        CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"name\":\"go\",\"payload\":{\"n\":1}}", NULL), 202);
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox o JOIN strand.instances i"
             " ON i.id::text = o.key WHERE i.definition_name = '%s' AND o.topic = 'signals'"
             " AND o.published_at IS NOT NULL", def_signal);   /* only this test's */
    /* START and the signal of each. */
    CU_ASSERT_EQUAL(it_wait_number(sql, 2 * LOST_N, 30), 2 * LOST_N);
    /* ...are lost with the topic. */
    double t0 = now_s();
    CU_ASSERT_EQUAL(topic_admin(0), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_resp_err_t err;
    time_t deadline = time(NULL) + 60;
    while ((err = topic_admin(1)) != RD_KAFKA_RESP_ERR_NO_ERROR && time(NULL) < deadline)
        usleep(500 * 1000);   /* deletion still in progress */
    CU_ASSERT_EQUAL_FATAL(err, RD_KAFKA_RESP_ERR_NO_ERROR);
    fprintf(stderr, "\nwakeups: signals topic deleted and created again in %.1f s\n", now_s() - t0);
    CU_ASSERT_TRUE(it_start(IT_EXECUTOR) > 0);
    /* Every instance completes: the timers fire into the new topic, the lost signals
     * are published again by the sweep. */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name IN"
             " ('%s', '%s') AND status = 'completed' AND created_at >= to_timestamp(%lld / 1000.0)",
             def_signal, def_timer, since_ms);
    long long completed = it_wait_number(sql, 2 * LOST_N, 120);
    snprintf(sql, sizeof sql, "SELECT coalesce(sum(recoveries), 0) FROM strand.outbox o"
             " JOIN strand.instances i ON i.id = o.instance_id WHERE i.definition_name = '%s'",
             def_signal);
    fprintf(stderr, "wakeups: %lld of %d instances completed %.1f s after the topic was deleted;"
            " outbox rows published again: %lld\n", completed, 2 * LOST_N, now_s() - t0,
            it_sql_number(sql));
    CU_ASSERT_EQUAL(completed, 2 * LOST_N);
    /* Each signal applied once. */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history h JOIN strand.instances i"
             " ON i.id = h.instance_id WHERE i.definition_name = '%s' AND h.kind = 'wakeup'",
             def_signal);
    CU_ASSERT_EQUAL(it_sql_number(sql), 3 * LOST_N);   /* START, the signal, the timer */
    for (int i = 0; i < LOST_N; i++) {
        free(waiting[i]);
        free(timed[i]);
    }

    /* Again with the executor running: signals sent while the topic is deleted and
     * created again, some lost in flight, some published into the new topic. */
    since_ms = it_sql_number("SELECT (extract(epoch FROM now()) * 1000)::bigint");
    for (int i = 0; i < LOST_N; i++) {
        waiting[i] = start(def_signal, "200ms");
        CU_ASSERT_PTR_NOT_NULL_FATAL(waiting[i]);
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND status = 'waiting' AND created_at >= to_timestamp(%lld / 1000.0)",
             def_signal, since_ms);
    CU_ASSERT_EQUAL(it_wait_number(sql, LOST_N, 60), LOST_N);
    t0 = now_s();
    for (int i = 0; i < LOST_N; i++) {
        char path[160];
        snprintf(path, sizeof path, "/v1/instances/%s/signals", waiting[i]);
        CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"name\":\"go\",\"payload\":{\"n\":2}}", NULL), 202);
        if (i == LOST_N / 4)
            CU_ASSERT_EQUAL(topic_admin(0), RD_KAFKA_RESP_ERR_NO_ERROR);
        if (i == LOST_N / 2) {
            deadline = time(NULL) + 60;
            while ((err = topic_admin(1)) != RD_KAFKA_RESP_ERR_NO_ERROR && time(NULL) < deadline)
                usleep(500 * 1000);
            CU_ASSERT_EQUAL(err, RD_KAFKA_RESP_ERR_NO_ERROR);
        }
        usleep(50 * 1000);
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND status = 'completed' AND created_at >= to_timestamp(%lld / 1000.0)",
             def_signal, since_ms);
    completed = it_wait_number(sql, LOST_N, 120);
    fprintf(stderr, "wakeups: executor running: %lld of %d instances completed %.1f s after the"
            " first signal\n", completed, LOST_N, now_s() - t0);
    CU_ASSERT_EQUAL(completed, LOST_N);
    for (int i = 0; i < LOST_N; i++)
        free(waiting[i]);
    CU_ASSERT_TRUE(it_stop_all());
    unsetenv("STRAND_RECOVERY_GRACE_S");
    unsetenv("STRAND_RECOVERY_INTERVAL_S");
}

int main(void)
{
    if (!it_init("test_wakeups"))
        return 1;
    st_uuid_new(tag);
    static const it_case_t cases[] = {
        {"timers inserted in the due loop's query window fire on time",
         test_timers_in_the_query_window_fire_on_time},
        {"a deadline under a millisecond away reads 1 ms, not due now",
         test_deadline_under_a_ms_reads_one},
        {"without Redis, waits answer at the change", test_without_redis},
        {"with Redis stopped mid-run, waits answer at the change", test_redis_stopped_mid_run},
        {"an API without Redis beside an executor with it answers on the notification",
         test_api_without_redis_beside_executor_with_it},
        {"a change that neither notifies nor hints is answered by the API's recheck",
         test_unannounced_change_answered_by_recheck},
        {"an outbox row that neither notifies nor hints is published by the relay's recheck",
         test_unannounced_outbox_row_published_by_recheck},
        {"a long poll parked while PostgreSQL restarts answers at the change",
         test_long_poll_across_postgres_restart},
        {"signals lost with the topic are published again", test_signals_topic_recreated},
    };
    return it_run_suite("wakeups", cases, (int)(sizeof cases / sizeof cases[0]));
}
