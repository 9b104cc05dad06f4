/*
 * test_start_group - the API runs starts queued together as one transaction (docs/
 * configuration.md, STRAND_API_START_GROUP_MAX and STRAND_API_START_LANES), against the
 * real API, executor and PostgreSQL. One lane: a test transaction locks the outbox so
 * that a first start holds the lane; the starts sent meanwhile queue and run as one
 * group once the lock goes. Each start must answer as it would alone:
 *   - valid starts 201 with their own instance, which runs to its end (a start and
 *     wait in the group answers once it has run);
 *   - an unknown definition or version 404, a bad body 400, a repeated request_id the
 *     first's instance (200) - and none of them fails the others;
 *   - a start whose insert fails (a test trigger raises) fails alone: the group rolls
 *     back and each start runs again alone;
 *   - a COMMIT the server refuses (a deferred test trigger raises) rolled back, and so
 *     did a group whose session died before its COMMIT: each start runs again alone;
 *   - a COMMIT that gets no answer (the session dies in it) may have committed: every
 *     start of the group answers the error and none runs again, so nothing is started
 *     twice.
 * And the pool wakes no idle worker for nothing: starts queued behind a busy lane, and
 * the lane's release, wake only the worker that runs the next group (counted in the
 * workers' voluntary context switches, /proc/<pid>/task/<tid>/status).
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/util.h"

static char tag[37];
static pid_t api_pid;
static char def_name[48];   /* group_<tag>: each run (release, sanitizers) imports its own */

typedef struct {
    char body[512];
    const char *path;   /* NULL: /v1/instances */
    long status;
    char id[40], state[16];   /* the answer's instance id and status */
    pthread_t thread;
} start_t;

static void *start_main(void *arg)
{
    start_t *s = arg;
    json_t *out = NULL;
    s->status = it_req(IT_API, NULL, "POST", s->path ? s->path : "/v1/instances", s->body, &out);
    const char *id = json_string_value(json_object_get(out, "id"));
    const char *state = json_string_value(json_object_get(out, "status"));
    snprintf(s->id, sizeof s->id, "%s", id ? id : "");
    snprintf(s->state, sizeof s->state, "%s", state ? state : "");
    json_decref(out);
    return NULL;
}

static void body_for(start_t *s, const char *definition, const char *ref, const char *request_id,
                     int i)
{
    char rid[128] = "";
    if (request_id != NULL)
        snprintf(rid, sizeof rid, ",\"request_id\":\"%s\"", request_id);
    snprintf(s->body, sizeof s->body,
             "{\"definition\":\"%s\",\"input\":{\"i\":%d},\"business_ref\":\"%s\"%s}", definition,
             i, ref, rid);
}

static long long count_for(const char *ref)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE business_ref = '%s'",
             ref);
    return it_sql_number(sql);
}

/* Locks the outbox and sends a first start (`first`, business_ref `first_ref`), which
 * takes the only lane and waits on the lock; returns the lock's connection. */
static PGconn *hold_lane(start_t *first, const char *first_ref)
{
    PGconn *holder = it_pg_begin();
    PQclear(PQexec(holder, "LOCK TABLE strand.outbox IN SHARE ROW EXCLUSIVE MODE"));
    memset(first, 0, sizeof *first);
    body_for(first, def_name, first_ref, NULL, 0);
    CU_ASSERT_EQUAL_FATAL(pthread_create(&first->thread, NULL, start_main, first), 0);
    /* the first start waits on the lock: the lane is taken */
    CU_ASSERT_EQUAL(it_wait_number("SELECT count(*) FROM pg_locks WHERE NOT granted"
                                   " AND relation = 'strand.outbox'::regclass", 1, 20), 1);
    return holder;
}

/* Sends `n` starts, each on a thread of its own, and gives them time to reach the API's
 * queue (the callers' metrics and counts check that they did). */
static void send_starts(start_t *starts, int n)
{
    for (int i = 0; i < n; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&starts[i].thread, NULL, start_main, &starts[i]), 0);
    sleep(2);
}

/* Lets the lane go (commits `holder`) and waits for the answers of `first` and of the
 * `n` starts. */
static void release_lane(PGconn *holder, start_t *first, start_t *starts, int n)
{
    it_pg_commit(holder);
    pthread_join(first->thread, NULL);
    CU_ASSERT_EQUAL(first->status, 201);
    for (int i = 0; i < n; i++)
        pthread_join(starts[i].thread, NULL);
}

/* Holds the outbox locked while a first start takes the only lane, sends `n` starts
 * meanwhile (they queue behind it), then lets everything go and waits for the answers. */
static void run_queued(start_t *starts, int n, const char *first_ref)
{
    start_t first;
    PGconn *holder = hold_lane(&first, first_ref);
    send_starts(starts, n);
    release_lane(holder, &first, starts, n);
}

#define COMMITTED "strand_api_command_groups_total{command=\"start\",outcome=\"committed\"}"
#define RUN_ALONE "strand_api_command_groups_total{command=\"start\",outcome=\"run_alone\"}"
#define UNKNOWN "strand_api_command_groups_total{command=\"start\",outcome=\"commit_unknown\"}"

static double metric(const char *series)
{
    return it_metric(IT_API, series, 0);
}

static void test_setup(void)
{
    setenv("STRAND_API_START_LANES", "1", 1);
    setenv("STRAND_API_START_GROUP_MAX", "64", 1);
    setenv("STRAND_API_WORKERS", "8", 1);   /* the default, spelled out: 7 may idle */
    api_pid = it_start(IT_API);
    CU_ASSERT_FATAL(api_pid > 0);
    CU_ASSERT_FATAL(it_start(IT_EXECUTOR) > 0);
    CU_ASSERT_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
    char doc[512];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"a\",\"type\":\"set\",\"values\":{\"x\":\"input.i + 1\"}},"
             "{\"id\":\"c\",\"type\":\"complete\",\"output\":{\"x\":\"state.x\"}}]}",
             def_name);
    it_import(NULL, doc);
}

static void test_group_answers_each_start(void)
{
    char ref[64], rid[80];
    snprintf(ref, sizeof ref, "group-%s", tag);
    snprintf(rid, sizeof rid, "rid-%s", tag);
    double groups0 = metric(COMMITTED);
    double grouped0 = metric("strand_api_grouped_commands_total{command=\"start\"}");
    start_t s[14];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 8; i++)
        body_for(&s[i], def_name, ref, NULL, i + 1);
    s[0].path = "/v1/instances?wait_ms=20000";   /* start and wait, inside the group */
    body_for(&s[8], "no_such_definition", ref, NULL, 9);
    snprintf(s[9].body, sizeof s[9].body, "{\"definition\":42}");
    body_for(&s[10], def_name, ref, rid, 10);
    body_for(&s[11], def_name, ref, rid, 11);
    /* versions: 1 exists, 2 does not (each looked up on its own, not as the name's first) */
    snprintf(s[12].body, sizeof s[12].body,
             "{\"definition\":\"%s\",\"version\":1,\"input\":{\"i\":12},\"business_ref\":\"%s\"}",
             def_name, ref);
    snprintf(s[13].body, sizeof s[13].body,
             "{\"definition\":\"%s\",\"version\":2,\"input\":{\"i\":13},\"business_ref\":\"%s\"}",
             def_name, ref);
    char first_ref[64];
    snprintf(first_ref, sizeof first_ref, "first-%s", tag);
    run_queued(s, 14, first_ref);

    CU_ASSERT_STRING_EQUAL(s[0].state, "completed");   /* answered once it ran */
    CU_ASSERT_STRING_EQUAL(s[1].state, "pending");
    for (int i = 0; i < 8; i++) {
        CU_ASSERT_EQUAL(s[i].status, 201);
        for (int j = 0; j < i; j++)
            CU_ASSERT_STRING_NOT_EQUAL(s[i].id, s[j].id);
    }
    CU_ASSERT_EQUAL(s[8].status, 404);
    CU_ASSERT_EQUAL(s[9].status, 400);
    /* the same request id twice in one group: one instance, both answers name it */
    CU_ASSERT_TRUE((s[10].status == 201 && s[11].status == 200) ||
                   (s[10].status == 200 && s[11].status == 201));
    CU_ASSERT_STRING_EQUAL(s[10].id, s[11].id);
    CU_ASSERT_EQUAL(s[12].status, 201);
    CU_ASSERT_EQUAL(s[13].status, 404);
    CU_ASSERT_EQUAL(count_for(ref), 10);
    for (int i = 0; i < 11; i++) {
        if (i == 8 || i == 9)
            continue;
        json_t *done = it_wait_instance(s[i].id, "completed", 30);
        CU_ASSERT_PTR_NOT_NULL(done);
        long long x = json_integer_value(json_object_get(json_object_get(done, "output"), "x"));
        /* s[10] and s[11] share one instance: input 10 or 11, whichever claimed the id */
        long long want = i == 10 ? 11 + (s[10].status == 200) : i + 2;
        CU_ASSERT_EQUAL(x, want);
        json_decref(done);
    }
    /* they ran as groups: at least one committed group, and at least two starts in groups */
    double groups = metric(COMMITTED) - groups0;
    double grouped = metric("strand_api_grouped_commands_total{command=\"start\"}") - grouped0;
    printf("\n  groups committed %.0f, starts in them %.0f\n", groups, grouped);
    CU_ASSERT_TRUE(groups >= 1);
    CU_ASSERT_TRUE(grouped >= 2);
}

#define WORKERS_MAX 64

/* The voluntary context switches (each a time the thread went to sleep) of every
 * command worker of the API (threads named "strand-cmd"), by thread id; returns how
 * many workers it found. */
static int worker_switches(long tids[WORKERS_MAX], long long switches[WORKERS_MAX])
{
    char path[320], line[256];
    snprintf(path, sizeof path, "/proc/%d/task", (int)api_pid);
    DIR *dir = opendir(path);
    if (dir == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && n < WORKERS_MAX) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)api_pid, e->d_name);
        FILE *f = fopen(path, "r");
        int is_worker = f && fgets(line, sizeof line, f) && strcmp(line, "strand-cmd\n") == 0;
        if (f)
            fclose(f);
        if (!is_worker)
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/status", (int)api_pid, e->d_name);
        f = fopen(path, "r");
        long long v = -1;
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1)
                break;
        if (f)
            fclose(f);
        tids[n] = atol(e->d_name);
        switches[n++] = v;
    }
    closedir(dir);
    return n;
}

/* Sums what each worker of `after` slept more than in `before`; `moved` counts the
 * workers that slept at all. */
static long long slept_since(const long *tids0, const long long *sw0, int n0, const long *tids1,
                             const long long *sw1, int n1, int *moved)
{
    long long sum = 0;
    *moved = 0;
    for (int i = 0; i < n1; i++)
        for (int j = 0; j < n0; j++)
            if (tids1[i] == tids0[j] && sw1[i] > sw0[j]) {
                sum += sw1[i] - sw0[j];
                (*moved)++;
            }
    return sum;
}

static void test_idle_workers_stay_asleep(void)
{
    enum { N = 40 };
    char ref[64], first_ref[64];
    snprintf(ref, sizeof ref, "asleep-%s", tag);
    snprintf(first_ref, sizeof first_ref, "asleep-first-%s", tag);
    start_t *s = calloc(N, sizeof *s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    for (int i = 0; i < N; i++)
        body_for(&s[i], def_name, ref, NULL, i);
    long tids0[WORKERS_MAX], tids1[WORKERS_MAX], tids2[WORKERS_MAX];
    long long sw0[WORKERS_MAX], sw1[WORKERS_MAX], sw2[WORKERS_MAX];

    /* a first start takes the only lane and waits on the outbox lock */
    start_t first;
    PGconn *holder = hold_lane(&first, first_ref);
    usleep(200 * 1000);   /* the worker that took it is asleep in its poll */
    int n0 = worker_switches(tids0, sw0);
    CU_ASSERT_EQUAL(n0, 8);

    /* N starts queue behind the busy lane: no worker can run them, none is woken */
    send_starts(s, N);
    int n1 = worker_switches(tids1, sw1), moved1;
    long long queued_wakes = slept_since(tids0, sw0, n0, tids1, sw1, n1, &moved1);
    printf("\n  while %d starts queued: the workers slept %lld more times (%d workers)", N,
           queued_wakes, moved1);
    CU_ASSERT_TRUE(queued_wakes < N / 4);

    /* the lane frees: the worker that held it runs the queued starts as its next group */
    release_lane(holder, &first, s, N);
    for (int i = 0; i < N; i++)
        CU_ASSERT_EQUAL(s[i].status, 201);
    int n2 = worker_switches(tids2, sw2), moved2;
    long long run_wakes = slept_since(tids1, sw1, n1, tids2, sw2, n2, &moved2);
    printf("; after the lane freed: %lld more times, in %d workers\n", run_wakes, moved2);
    CU_ASSERT_TRUE(moved2 <= 2);
    CU_ASSERT_EQUAL(count_for(ref), N);
    free(s);
}

/* A trigger on strand.instances that runs `action` for the rows of business_ref `ref`:
 * at their insert, or (`at_commit`) deferred to the COMMIT. */
static int bad_row_trigger(const char *ref, const char *action, int at_commit)
{
    char sql[700];
    snprintf(sql, sizeof sql,
             "CREATE OR REPLACE FUNCTION public.t_bad_row() RETURNS trigger LANGUAGE plpgsql AS $$"
             " BEGIN IF NEW.business_ref = '%s' THEN %s; END IF; RETURN NEW; END $$", ref, action);
    return it_sql_exec(sql) &&
           it_sql_exec(at_commit ? "CREATE CONSTRAINT TRIGGER t_bad_row AFTER INSERT ON"
                                   " strand.instances DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
                                   " EXECUTE FUNCTION public.t_bad_row()"
                                 : "CREATE TRIGGER t_bad_row BEFORE INSERT ON strand.instances"
                                   " FOR EACH ROW EXECUTE FUNCTION public.t_bad_row()");
}

/* Five good starts and one bad one queued as one group; the bad one's row runs
 * `action` at its insert, or (`at_commit`) at the COMMIT. The group rolls back and
 * each start runs alone, so the five run to their end and only the bad one fails, with
 * `bad_status`. */
static void one_bad_start_fails_alone(const char *name, const char *action, int at_commit,
                                      long bad_status)
{
    char ref[64], bad[64], first_ref[64];
    snprintf(ref, sizeof ref, "%s-%s", name, tag);
    snprintf(bad, sizeof bad, "%s-bad-%s", name, tag);
    snprintf(first_ref, sizeof first_ref, "%s-first-%s", name, tag);
    CU_ASSERT_TRUE_FATAL(bad_row_trigger(bad, action, at_commit));
    double alone0 = metric(RUN_ALONE);
    start_t s[6];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 5; i++)
        body_for(&s[i], def_name, ref, NULL, i + 1);
    body_for(&s[5], def_name, bad, NULL, 6);
    run_queued(s, 6, first_ref);
    CU_ASSERT_TRUE(it_sql_exec("DROP TRIGGER t_bad_row ON strand.instances"));

    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(s[i].status, 201);
    CU_ASSERT_EQUAL(s[5].status, bad_status);
    CU_ASSERT_EQUAL(count_for(ref), 5);
    CU_ASSERT_EQUAL(count_for(bad), 0);
    CU_ASSERT_TRUE(metric(RUN_ALONE) > alone0);
    for (int i = 0; i < 5; i++) {
        json_t *done = it_wait_instance(s[i].id, "completed", 30);
        CU_ASSERT_PTR_NOT_NULL(done);
        json_decref(done);
    }
}

static void test_failed_statement_runs_each_alone(void)
{
    one_bad_start_fails_alone("insert", "RAISE EXCEPTION 'bad start'", 0, 500);
}

static void test_refused_commit_runs_each_alone(void)
{
    one_bad_start_fails_alone("commit", "RAISE EXCEPTION 'bad start'", 1, 500);
}

/* The group's session dies before its COMMIT (PostgreSQL restarted, a pooler dropped
 * it): nothing was committed, so each start runs alone on a new session. */
static void test_session_lost_in_group_runs_each_alone(void)
{
    one_bad_start_fails_alone("session", "PERFORM pg_terminate_backend(pg_backend_pid())", 0,
                              503);
}

static void test_unanswered_commit_runs_none_again(void)
{
    char ref[64], bad[64], rid[80];
    snprintf(ref, sizeof ref, "lost-%s", tag);
    snprintf(bad, sizeof bad, "lostcommit-%s", tag);
    snprintf(rid, sizeof rid, "lost-rid-%s", tag);
    /* the session dies in its COMMIT: the API cannot know whether it committed */
    CU_ASSERT_TRUE_FATAL(bad_row_trigger(bad, "PERFORM pg_terminate_backend(pg_backend_pid())", 1));
    double unknown0 = metric(UNKNOWN), committed0 = metric(COMMITTED);
    start_t s[7];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 4; i++)
        body_for(&s[i], def_name, ref, NULL, i + 1);
    body_for(&s[4], def_name, bad, NULL, 5);
    body_for(&s[5], def_name, ref, rid, 6);   /* the same request id twice: 201 and 200 */
    body_for(&s[6], def_name, ref, rid, 7);
    char first_ref[64];
    snprintf(first_ref, sizeof first_ref, "first4-%s", tag);
    run_queued(s, 7, first_ref);
    CU_ASSERT_TRUE(it_sql_exec("DROP TRIGGER t_bad_row ON strand.instances"));

    /* every start of the group answers the error (the retried request id too: its 200
     * named an instance of the same group), and none ran again */
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(s[i].status, 503);
    CU_ASSERT_EQUAL(count_for(ref), 0);
    CU_ASSERT_EQUAL(count_for(bad), 0);
    CU_ASSERT_TRUE(metric(UNKNOWN) > unknown0);
    CU_ASSERT_EQUAL(metric(COMMITTED), committed0);   /* a lost COMMIT is not counted */
    /* the worker connects again for the next start */
    start_t after;
    memset(&after, 0, sizeof after);
    body_for(&after, def_name, ref, NULL, 8);
    start_main(&after);
    CU_ASSERT_EQUAL(after.status, 201);
    CU_ASSERT_EQUAL(count_for(ref), 1);
}

static void test_teardown(void)
{
    CU_ASSERT_TRUE(it_sql_exec("DROP FUNCTION IF EXISTS public.t_bad_row()"));
    CU_ASSERT_TRUE(it_stop_all());
    unsetenv("STRAND_API_START_LANES");
    unsetenv("STRAND_API_START_GROUP_MAX");
    unsetenv("STRAND_API_WORKERS");
}

int main(void)
{
    if (!it_init("test_start_group"))
        return 1;
    st_uuid_new(tag);
    snprintf(def_name, sizeof def_name, "group_%.8s", tag);
    static const it_case_t cases[] = {
        {"start the API and the executor with one start lane", test_setup},
        {"starts queued together run as one group, each answered as alone",
         test_group_answers_each_start},
        {"a start whose statement fails fails alone; the others run alone and succeed",
         test_failed_statement_runs_each_alone},
        {"a group whose COMMIT the server refuses runs each start alone",
         test_refused_commit_runs_each_alone},
        {"a group whose session dies before its COMMIT runs each start alone",
         test_session_lost_in_group_runs_each_alone},
        {"a group whose COMMIT gets no answer answers the error and starts nothing twice",
         test_unanswered_commit_runs_none_again},
        {"starts queued behind a busy lane, and its release, wake no idle worker",
         test_idle_workers_stay_asleep},
        {"stop", test_teardown},
    };
    return it_run_suite("start_group", cases, (int)(sizeof cases / sizeof cases[0]));
}
