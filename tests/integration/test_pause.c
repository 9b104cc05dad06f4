/*
 * test_pause.c - pause, resume and rewind (issue 18), on the real servers: a pause
 * through a timer (the timer fires while paused and nothing moves; resume applies it),
 * several signals kept while paused applied in arrival order, cancel of a paused
 * instance, pause and resume of a definition version with several instances (and one
 * started meanwhile), rewind past a child (the child is cancelled, the parent continues
 * from the earlier snapshot and completes), rewind of a lifecycle and of a process,
 * a pause racing a wake-up in each order (forced by a row lock the test holds: the pause
 * first, the signal kept; the wake-up first, 409 at the API or the pause rejected by the
 * executor), the verbs over Kafka ingress,
 * 409 on a stale expected_version and 400 on bad input, changing nothing.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/proto/strand.pb-c.h"
#include "strand/signal.h"

#define T_ADMIN "pause-admin-token-0123456789"
#define T_OPS "pause-ops-token-0123456789"      /* instances:operate and read only */
#define T_READER "pause-reader-token-0123456789" /* instances:read only */

static char sfx[48], tim[80], sig3[80], hold[80], dpv[80], kid[80], parent[80], lc[80], proc[80],
    race[80], failing[80];

/* ---- helpers ------------------------------------------------------------------------ */

static long post(const char *token, const char *path, const char *body, json_t **answer)
{
    return it_req(IT_API, token, "POST", path, body, answer);
}

/* POST /v1/instances/{id}/{verb} with `body`; returns the status. */
static long verb(const char *token, const char *id, const char *name, const char *body,
                 json_t **answer)
{
    char path[200];
    snprintf(path, sizeof path, "/v1/instances/%s/%s", id, name);
    return post(token, path, body, answer);
}

/* The instance's state_version (GET), or -1. */
static long long version_of(const char *id)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    json_t *inst = NULL;
    long long v = -1;
    if (it_req(IT_API, T_ADMIN, "GET", path, NULL, &inst) == 200)
        v = (long long)json_integer_value(json_object_get(inst, "state_version"));
    json_decref(inst);
    return v;
}

/* The instance's status (SQL); caller frees. */
static char *status_of(const char *id)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT status FROM strand.instances WHERE id = '%s'", id);
    return it_sql_text(sql);
}

/* Asserts the status is `want` (printing it when not). */
static void expect_status(const char *id, const char *want)
{
    char *got = status_of(id);
    if (got == NULL || strcmp(got, want) != 0)
        fprintf(stderr, "\ninstance %s is %s, want %s\n", id, got ? got : "?", want);
    CU_ASSERT_STRING_EQUAL(got ? got : "", want);
    free(got);
}

/* Polls until the instance's status is `want`; returns 1 when it was within `timeout_s`. */
static int wait_status(const char *id, const char *want, int timeout_s)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s' AND status = '%s'",
             id, want);
    int ok = it_wait_number(sql, 1, timeout_s) == 1;
    if (!ok)
        expect_status(id, want);
    return ok;
}

/* Number of history entries of `kind` of the instance. */
static long long history_count(const char *id, const char *kind)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s' AND kind = '%s'",
             id, kind);
    return it_sql_number(sql);
}

static long long wait_history(const char *id, const char *kind, long long n, int timeout_s)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s' AND kind = '%s'",
             id, kind);
    return it_wait_number(sql, n, timeout_s);
}

/* Audit rows of the instance for `action` with `outcome`. */
static long long audit_count(const char *id, const char *action, const char *outcome)
{
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND action = '%s' AND outcome = '%s'", id, action, outcome);
    return it_sql_number(sql);
}

static long long wait_audit(const char *id, const char *action, const char *outcome, int timeout_s)
{
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND action = '%s' AND outcome = '%s'", id, action, outcome);
    return it_wait_number(sql, 1, timeout_s);
}

/* Sends the instance a named signal; asserts 202. */
static void send_signal(const char *id, const char *name, const char *payload)
{
    char path[160], body[300];
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    snprintf(body, sizeof body, "{\"name\":\"%s\",\"payload\":%s}", name, payload ? payload : "{}");
    long status = post(T_ADMIN, path, body, NULL);
    if (status != 202)
        fprintf(stderr, "\nsignal %s to %s answered %ld\n", name, id, status);
    CU_ASSERT_EQUAL(status, 202);
}

/* Pauses (or resumes) with the current version; asserts 202 and waits for the status. */
static void pause_now(const char *id)
{
    char body[64];
    snprintf(body, sizeof body, "{\"expected_version\":%lld,\"reason\":\"test\"}", version_of(id));
    CU_ASSERT_EQUAL(verb(T_OPS, id, "pause", body, NULL), 202);
    CU_ASSERT_TRUE(wait_status(id, "paused", 30));
}

static void resume_now(const char *id)
{
    char body[64];
    snprintf(body, sizeof body, "{\"expected_version\":%lld}", version_of(id));
    CU_ASSERT_EQUAL(verb(T_OPS, id, "resume", body, NULL), 202);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s' AND status <> 'paused'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
}

/* Waits until the instance waits (status waiting) with a state_version of at least `v`. */
static int wait_waiting(const char *id, long long v, int timeout_s)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances i JOIN strand.runtime_states rs"
             " ON rs.instance_id = i.id WHERE i.id = '%s' AND i.status = 'waiting' AND rs.state_version >= %lld",
             id, v);
    return it_wait_number(sql, 1, timeout_s) == 1;
}

/* Polls GET /v1/instances/{id} (as admin: the harness's it_wait_instance() sends no
 * token) until its status is `want`; returns the instance (caller decrefs) or NULL. */
static json_t *wait_instance(const char *id, const char *want, int timeout_s)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    time_t deadline = time(NULL) + timeout_s;
    const char *last = "?";
    json_t *inst = NULL;
    while (time(NULL) < deadline) {
        json_decref(inst);
        inst = NULL;
        if (it_req(IT_API, T_ADMIN, "GET", path, NULL, &inst) == 200) {
            const char *s = json_string_value(json_object_get(inst, "status"));
            last = s ? s : "?";
            if (s && strcmp(s, want) == 0)
                return inst;
        }
        usleep(50 * 1000);
    }
    fprintf(stderr, "\ninstance %s is %s after %d s, want %s\n", id, last, timeout_s, want);
    json_decref(inst);
    return NULL;
}

static void import(const char *doc)
{
    it_import(T_ADMIN, doc);
}

/* ---- the cases ---------------------------------------------------------------------- */

static void test_setup(void)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/strand-test-pause-tokens-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"roles\": {\"ops\": [\"instances:read\", \"instances:operate\"],"
               " \"reader\": [\"instances:read\"]},"
               "\"tokens\": ["
               "{\"token\": \"%s\", \"principal\": \"root\", \"roles\": [\"admin\"]},"
               "{\"token\": \"%s\", \"principal\": \"olga\", \"roles\": [\"ops\"]},"
               "{\"token\": \"%s\", \"principal\": \"rita\", \"roles\": [\"reader\"]}]}",
            T_ADMIN, T_OPS, T_READER);
    fclose(f);
    setenv("STRAND_AUTH_FILE", path, 1);
    CU_ASSERT_FATAL(it_start_all(90));
    unlink(path);
    char doc[2048];
    /* a timer, then a signal */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"t\",\"type\":\"timer\",\"delay\":1500},"
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"go\":\"state.go\"}}]}", tim);
    import(doc);
    /* three signals of one name, each kept in its own variable: the order shows */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"m1\",\"type\":\"wait_signal\",\"name\":\"m\"},"
             "{\"id\":\"m2\",\"type\":\"wait_signal\",\"name\":\"m\"},"
             "{\"id\":\"m3\",\"type\":\"wait_signal\",\"name\":\"m\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"a\":\"state.m1.v\",\"b\":\"state.m2.v\","
             "\"c\":\"state.m3.v\"}}]}", sig3);
    import(doc);
    /* waits for go, then for more */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\"},"
             "{\"id\":\"more\",\"type\":\"wait_signal\",\"name\":\"more\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", hold);
    import(doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"go\":\"state.go\"}}]}", dpv);
    import(doc);
    snprintf(doc, sizeof doc, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"finish\",\"type\":\"wait_signal\",\"name\":\"finish\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"kid\":true}}]}", kid);
    import(doc);
    snprintf(doc, sizeof doc, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"a\",\"type\":\"wait_signal\",\"name\":\"a\"},"
             "{\"id\":\"k\",\"type\":\"subworkflow\",\"definition\":\"%s\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"k\":\"state.k\",\"a\":\"state.a.n\"}}]}",
             parent, kid);
    import(doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"lifecycle\",\"name\":\"%s\",\"version\":1,\"env\":\"test\",\"initial\":\"created\","
             "\"states\":[{\"name\":\"created\"},{\"name\":\"paid\",\"timeout\":{\"after\":600000,\"event\":\"remind\"}},"
             "  {\"name\":\"shipped\",\"final\":true}],"
             "\"events\":[\"pay\",\"remind\",\"ship\"],"
             "\"transitions\":[{\"from\":\"created\",\"event\":\"pay\",\"to\":\"paid\"},"
             "  {\"from\":\"paid\",\"event\":\"remind\",\"to\":\"paid\"},"
             "  {\"from\":\"paid\",\"event\":\"ship\",\"to\":\"shipped\"}],"
             "\"transition_route\":\"app\",\"routes\":{\"app\":{\"consumers\":[\"orders-app\"]}}}", lc);
    import(doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"process\",\"name\":\"%s\",\"version\":1,\"queues\":[\"q1\",\"q2\"],"
             "\"start\":[\"a\"],\"states\":["
             "{\"id\":\"a\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"q1\"}]},\"next\":[\"b\"]},"
             "{\"id\":\"b\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"q2\"}]},"
             "\"complete\":{\"done\":true}}]}", proc);
    import(doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\"},"
             "{\"id\":\"more\",\"type\":\"wait_signal\",\"name\":\"more\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", race);
    import(doc);
    /* fails when a's payload says so */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"a\",\"type\":\"wait_signal\",\"name\":\"a\"},"
             "{\"id\":\"check\",\"type\":\"if\",\"condition\":\"state.a.bad\",\"then\":["
             "  {\"id\":\"boom\",\"type\":\"fail\",\"error\":{\"code\":\"'bad_input'\"}}]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"ok\":true}}]}", failing);
    import(doc);
}

/* Pausing through a timer: the timer fires while paused and nothing moves (the wake-up
 * is kept, the state_version stays); resume applies it and the instance continues. */
static void test_pause_through_timer(void)
{
    char *id = it_start_instance(T_ADMIN, tim, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    long long v = version_of(id);
    pause_now(id);
    /* GET shows it, and the list filter finds it */
    char path[300];
    json_t *got = NULL;
    snprintf(path, sizeof path, "/v1/instances?definition=%s&status=paused", tim);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", path, NULL, &got), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(got, "items")), 1);
    json_decref(got);
    /* the timer fires (1.5 s) while paused: its wake-up is kept, nothing else moves */
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
             " AND kind = 'signal_held' AND detail->>'signal_type' = 'TIMER_DUE'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    sleep(1);
    expect_status(id, "paused");
    CU_ASSERT_EQUAL(version_of(id), v);
    CU_ASSERT_EQUAL(history_count(id, "wakeup"), 1);   /* START only */
    /* signals are accepted (and kept) while paused */
    send_signal(id, "go", "{\"n\":1}");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
             " AND kind = 'signal_held'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, 30), 2);
    CU_ASSERT_EQUAL(version_of(id), v);
    resume_now(id);
    /* the timer, then the signal, in arrival order: the instance completes */
    json_t *done = wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(json_object_get(done, "output"), "go"), "n")), 1);
    json_decref(done);
    /* audit: requested and applied, once each; the actor is the principal */
    CU_ASSERT_EQUAL(audit_count(id, "pause", "requested"), 1);
    CU_ASSERT_EQUAL(audit_count(id, "pause", "applied"), 1);
    CU_ASSERT_EQUAL(audit_count(id, "resume", "requested"), 1);
    CU_ASSERT_EQUAL(audit_count(id, "resume", "applied"), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND actor = 'olga' AND before->>'status' = 'waiting' AND after->>'status' = 'paused'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* every wake-up history entry names the state_version it produced */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
             " AND kind = 'wakeup' AND detail ? 'state_version'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 3);
    free(id);
}

/* Several signals while paused are applied in arrival order on resume. */
static void test_signals_in_order(void)
{
    char *id = it_start_instance(T_ADMIN, sig3, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    pause_now(id);
    send_signal(id, "m", "{\"v\":1}");
    send_signal(id, "m", "{\"v\":2}");
    send_signal(id, "m", "{\"v\":3}");
    CU_ASSERT_EQUAL(wait_history(id, "signal_held", 3, 30), 3);
    expect_status(id, "paused");
    resume_now(id);
    json_t *done = wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    json_t *out = json_object_get(done, "output");
    printf("\n  output after resume: a=%lld b=%lld c=%lld\n",
           (long long)json_integer_value(json_object_get(out, "a")),
           (long long)json_integer_value(json_object_get(out, "b")),
           (long long)json_integer_value(json_object_get(out, "c")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(out, "a")), 1);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(out, "b")), 2);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(out, "c")), 3);
    json_decref(done);
    free(id);
}

/* Cancel still applies to a paused instance; what it kept is never applied. */
static void test_cancel_while_paused(void)
{
    char *id = it_start_instance(T_ADMIN, hold, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    pause_now(id);
    send_signal(id, "go", "{}");
    CU_ASSERT_EQUAL(wait_history(id, "signal_held", 1, 30), 1);
    CU_ASSERT_EQUAL(verb(T_OPS, id, "cancel", "{\"reason\":\"stop\"}", NULL), 202);
    CU_ASSERT_TRUE(wait_status(id, "cancelled", 30));
    CU_ASSERT_EQUAL(history_count(id, "wakeup"), 1);
    /* resume now does not apply: 409 not_applicable, nothing written */
    char body[64];
    snprintf(body, sizeof body, "{\"expected_version\":%lld}", version_of(id));
    json_t *p = NULL;
    CU_ASSERT_EQUAL(verb(T_OPS, id, "resume", body, &p), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "code")) ?: "", "not_applicable");
    json_decref(p);
    CU_ASSERT_EQUAL(audit_count(id, "resume", "requested"), 0);
    free(id);
    /* terminate too */
    id = it_start_instance(T_ADMIN, hold, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    pause_now(id);
    CU_ASSERT_EQUAL(verb(T_ADMIN, id, "terminate", "{}", NULL), 202);
    CU_ASSERT_TRUE(wait_status(id, "terminated", 30));
    free(id);
}

/* A definition version paused: every instance's wake-ups are kept (an instance started
 * meanwhile does not even start); its resume drains every one of them. */
static void test_definition_version_pause(void)
{
    enum { N = 3 };
    char *id[N + 1];
    for (int i = 0; i < N; i++) {
        id[i] = it_start_instance(T_ADMIN, dpv, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(id[i]);
        CU_ASSERT_TRUE_FATAL(wait_waiting(id[i], 1, 30));
    }
    char path[300];
    json_t *got = NULL;
    snprintf(path, sizeof path, "/v1/definitions/%s/1/pause", dpv);
    CU_ASSERT_EQUAL(post(T_OPS, path, "{\"reason\":\"incident\"}", &got), 200);
    CU_ASSERT_TRUE(json_is_true(json_object_get(got, "paused")));
    CU_ASSERT_TRUE(json_is_true(json_object_get(got, "changed")));
    json_decref(got);
    CU_ASSERT_EQUAL(post(T_OPS, path, "{}", &got), 200);   /* again: no change */
    CU_ASSERT_TRUE(json_is_false(json_object_get(got, "changed")));
    json_decref(got);
    snprintf(path, sizeof path, "/v1/definitions/%s/1", dpv);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", path, NULL, &got), 200);
    CU_ASSERT_TRUE(json_is_true(json_object_get(got, "paused")));
    json_decref(got);
    for (int i = 0; i < N; i++) {
        char payload[32];
        snprintf(payload, sizeof payload, "{\"i\":%d}", i);
        send_signal(id[i], "go", payload);
    }
    id[N] = it_start_instance(T_ADMIN, dpv, NULL);   /* its START is kept too */
    CU_ASSERT_PTR_NOT_NULL_FATAL(id[N]);
    for (int i = 0; i <= N; i++)
        CU_ASSERT_EQUAL(wait_history(id[i], "signal_held", 1, 30), 1);
    sleep(1);
    for (int i = 0; i < N; i++)
        expect_status(id[i], "waiting");
    expect_status(id[N], "pending");
    snprintf(path, sizeof path, "/v1/definitions/%s/1/resume", dpv);
    CU_ASSERT_EQUAL(post(T_OPS, path, "{}", &got), 200);
    CU_ASSERT_TRUE(json_is_false(json_object_get(got, "paused")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(got, "instances_drained")), N + 1);
    json_decref(got);
    for (int i = 0; i < N; i++) {
        json_t *done = wait_instance(id[i], "completed", 60);
        CU_ASSERT_PTR_NOT_NULL(done);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(json_object_get(done, "output"), "go"), "i")), i);
        json_decref(done);
        CU_ASSERT_EQUAL(history_count(id[i], "wakeup"), 2);   /* START, go: once each */
    }
    CU_ASSERT_TRUE(wait_waiting(id[N], 1, 60));
    send_signal(id[N], "go", "{\"i\":9}");
    json_t *done = wait_instance(id[N], "completed", 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE target = 'definition:%s/1'"
             " AND outcome = 'applied'", dpv);
    CU_ASSERT_EQUAL(it_sql_number(sql), 3);   /* pause, pause again, resume */
    for (int i = 0; i <= N; i++)
        free(id[i]);
}

/* Rewind past a child: the child started after that point is cancelled, the parent
 * continues from the earlier snapshot (waits for `a` again), starts a new child and
 * completes. History keeps everything, with an entry "rewound". */
static void test_rewind_past_child(void)
{
    char *id = it_start_instance(T_ADMIN, parent, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    long long before_a = version_of(id);   /* waiting for a */
    send_signal(id, "a", "{\"n\":1}");
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT id FROM strand.instances WHERE parent_instance_id = '%s'", id);
    char *child1 = it_wait_text(sql, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(child1);
    CU_ASSERT_TRUE_FATAL(wait_waiting(child1, 1, 30));
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, before_a + 1, 30));
    long long v = version_of(id);
    /* the version to go back to is in the history */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
             " AND kind = 'wakeup' AND (detail->>'state_version')::bigint = %lld", id, before_a);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    char body[200];
    snprintf(body, sizeof body, "{\"expected_version\":%lld,\"to_version\":%lld,\"reason\":\"redo\"}", v,
             before_a);
    json_t *got = NULL;
    CU_ASSERT_EQUAL(verb(T_OPS, id, "rewind", body, &got), 202);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(got, "status")) ?: "", "accepted");
    json_decref(got);
    CU_ASSERT_TRUE(wait_status(child1, "cancelled", 30));
    CU_ASSERT_EQUAL(wait_history(id, "rewound", 1, 30), 1);
    CU_ASSERT_EQUAL(version_of(id), v + 1);
    expect_status(id, "waiting");
    snprintf(sql, sizeof sql, "SELECT detail->'undone'->>'from_version' || '-' || (detail->'undone'->>'to_version')"
             " FROM strand.history WHERE instance_id = '%s' AND kind = 'rewound'", id);
    char *undone = it_sql_text(sql), want[64];
    snprintf(want, sizeof want, "%lld-%lld", before_a + 1, v);
    CU_ASSERT_STRING_EQUAL(undone ? undone : "", want);
    free(undone);
    CU_ASSERT_EQUAL(wait_audit(id, "rewind", "applied", 30), 1);
    /* the cancelled child did not wake its parent: it waits for a again */
    sleep(1);
    CU_ASSERT_EQUAL(version_of(id), v + 1);
    send_signal(id, "a", "{\"n\":2}");
    snprintf(sql, sizeof sql, "SELECT id FROM strand.instances WHERE parent_instance_id = '%s'"
             " AND id <> '%s'", id, child1);
    char *child2 = it_wait_text(sql, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(child2);
    CU_ASSERT_TRUE_FATAL(wait_waiting(child2, 1, 30));
    send_signal(child2, "finish", "{}");
    json_t *done = wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(done, "output"), "a")), 2);
    json_decref(done);
    expect_status(child1, "cancelled");
    free(child1);
    free(child2);
    free(id);
}

/* Rewind of a lifecycle that reached its final state: back in `paid`, its state timeout
 * armed again; `ship` completes it again. */
static void test_rewind_lifecycle(void)
{
    char body[512], ref[80];
    snprintf(ref, sizeof ref, "lc-%s", sfx);
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"external_ref\":\"%s\",\"event\":\"pay\","
             "\"request_id\":\"p1\",\"payload\":{}}", lc, ref);
    CU_ASSERT_TRUE(post(T_ADMIN, "/v1/triggers", body, NULL) / 100 == 2);
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT id FROM strand.instances WHERE business_ref = '%s'", ref);
    char *id = it_wait_text(sql, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.runtime_states WHERE instance_id = '%s'"
             " AND snapshot->>'current' = 'paid'", id);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 30), 1);
    long long paid = version_of(id);
    /* paused, a trigger is kept; resumed, it applies */
    pause_now(id);
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"external_ref\":\"%s\",\"event\":\"ship\","
             "\"request_id\":\"s1\",\"payload\":{}}", lc, ref);
    CU_ASSERT_TRUE(post(T_ADMIN, "/v1/triggers", body, NULL) / 100 == 2);
    CU_ASSERT_EQUAL(wait_history(id, "signal_held", 1, 30), 1);
    expect_status(id, "paused");
    CU_ASSERT_EQUAL(version_of(id), paid);
    resume_now(id);
    json_t *done = wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL_FATAL(done);
    json_decref(done);
    long long v = version_of(id);
    snprintf(body, sizeof body, "{\"expected_version\":%lld,\"to_version\":%lld}", v, paid);
    CU_ASSERT_EQUAL(verb(T_OPS, id, "rewind", body, NULL), 202);
    CU_ASSERT_TRUE(wait_status(id, "waiting", 30));
    snprintf(sql, sizeof sql, "SELECT snapshot->>'current' FROM strand.runtime_states WHERE instance_id = '%s'", id);
    char *current = it_sql_text(sql);
    CU_ASSERT_STRING_EQUAL(current ? current : "", "paid");
    free(current);
    /* the state timeout is armed again with a fresh token */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.timers t JOIN strand.runtime_states rs"
             " ON rs.instance_id = t.instance_id WHERE t.instance_id = '%s'"
             " AND t.waiting_token = rs.snapshot->'waiting'->>'token' AND t.fired_at IS NULL", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"external_ref\":\"%s\",\"event\":\"ship\","
             "\"request_id\":\"s2\",\"payload\":{}}", lc, ref);
    CU_ASSERT_TRUE(post(T_ADMIN, "/v1/triggers", body, NULL) / 100 == 2);
    done = wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    CU_ASSERT_EQUAL(history_count(id, "rewound"), 1);
    free(id);
}

/* Rewind of a process: back in state a after q1 took it to b; q1 again, then q2,
 * complete it. */
static void test_rewind_process(void)
{
    char *id = it_start_instance(T_ADMIN, proc, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    long long in_a = version_of(id);
    send_signal(id, "q1", "{\"x\":1}");
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, in_a + 1, 30));
    long long v = version_of(id);
    char body[200];
    snprintf(body, sizeof body, "{\"expected_version\":%lld,\"to_version\":%lld}", v, in_a);
    CU_ASSERT_EQUAL(verb(T_OPS, id, "rewind", body, NULL), 202);
    CU_ASSERT_EQUAL(wait_history(id, "rewound", 1, 30), 1);
    /* waits in a (q1) again: q2 alone is kept for later; q1, sent while paused, is
     * kept until the resume and then moves it on */
    send_signal(id, "q2", "{}");
    sleep(1);
    expect_status(id, "waiting");
    pause_now(id);
    send_signal(id, "q1", "{\"x\":2}");
    CU_ASSERT_EQUAL(wait_history(id, "signal_held", 1, 30), 1);
    expect_status(id, "paused");
    resume_now(id);
    json_t *done = wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
             " AND kind = 'command_result' AND detail->>'queue' = 'q1'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);
    free(id);
}

/* Rewind of a failed instance (Temporal's reset after a failure): it continues from
 * before the failing step, as waiting again. */
static void test_rewind_failed(void)
{
    char *id = it_start_instance(T_ADMIN, failing, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    long long waiting = version_of(id);
    send_signal(id, "a", "{\"bad\":true}");
    json_t *failed = wait_instance(id, "failed", 60);
    CU_ASSERT_PTR_NOT_NULL_FATAL(failed);
    json_decref(failed);
    long long v = version_of(id);
    char body[200];
    /* the failed version itself is no place to continue from */
    snprintf(body, sizeof body, "{\"expected_version\":%lld,\"to_version\":%lld}", v, v);
    CU_ASSERT_EQUAL(verb(T_OPS, id, "rewind", body, NULL), 400);
    snprintf(body, sizeof body, "{\"expected_version\":%lld,\"to_version\":%lld}", v, waiting);
    CU_ASSERT_EQUAL(verb(T_OPS, id, "rewind", body, NULL), 202);
    CU_ASSERT_TRUE(wait_status(id, "waiting", 30));
    json_t *inst = NULL;
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", path, NULL, &inst), 200);
    CU_ASSERT_TRUE(json_is_null(json_object_get(inst, "error")));
    CU_ASSERT_TRUE(json_is_null(json_object_get(inst, "ended_at")));
    json_decref(inst);
    send_signal(id, "a", "{\"bad\":false}");
    json_t *done = wait_instance(id, "completed", 60);
    CU_ASSERT_PTR_NOT_NULL(done);
    json_decref(done);
    free(id);
}

/* A definition version resumed while the executor is down (killed): the drain is in
 * the resume's transaction (outbox), so the restarted executor applies every kept
 * wake-up, once. */
static void test_definition_resume_executor_down(void)
{
    char *id[2];
    for (int i = 0; i < 2; i++) {
        id[i] = it_start_instance(T_ADMIN, dpv, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(id[i]);
        CU_ASSERT_TRUE_FATAL(wait_waiting(id[i], 1, 30));
    }
    char path[300];
    snprintf(path, sizeof path, "/v1/definitions/%s/1/pause", dpv);
    CU_ASSERT_EQUAL(post(T_OPS, path, "{}", NULL), 200);
    for (int i = 0; i < 2; i++)
        send_signal(id[i], "go", "{\"i\":5}");
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL(wait_history(id[i], "signal_held", 1, 30), 1);
    CU_ASSERT_EQUAL(it_stop(IT_EXECUTOR, SIGKILL, 10), 128 + SIGKILL);
    snprintf(path, sizeof path, "/v1/definitions/%s/1/resume", dpv);
    json_t *got = NULL;
    CU_ASSERT_EQUAL(post(T_OPS, path, "{}", &got), 200);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(got, "instances_drained")), 2);
    json_decref(got);
    CU_ASSERT_TRUE_FATAL(it_start(IT_EXECUTOR) > 0);
    for (int i = 0; i < 2; i++) {
        json_t *done = wait_instance(id[i], "completed", 90);
        CU_ASSERT_PTR_NOT_NULL(done);
        json_decref(done);
        CU_ASSERT_EQUAL(history_count(id[i], "wakeup"), 2);
        free(id[i]);
    }
}

/* The executor re-checks: a PAUSE (and a REWIND) whose expected_version moved after the
 * API's check (enqueued here as the API does, with Strand's record) is dropped with a
 * StaleSignal notice and an audit row "rejected"; nothing changes. */
static void test_executor_rechecks(void)
{
    char *id = it_start_instance(T_ADMIN, hold, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    send_signal(id, "go", "{}");
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 2, 30));
    long long v = version_of(id);
    long long notices = it_sql_number("SELECT count(*) FROM strand.outbox WHERE topic = 'notices'");
    PGconn *conn = it_pg_begin();
    st_signal_t sig;
    st_errbuf_t eb;
    st_signal_init(&sig, ST_SIGNAL_PAUSE, id, v - 1);   /* what an operator saw before "go" */
    sig.payload = json_pack("{s:s}", "actor", "olga");
    CU_ASSERT_EQUAL(st_signal_enqueue_tx(conn, &sig, &eb), ST_OK);
    st_signal_close(&sig);
    st_signal_init(&sig, ST_SIGNAL_REWIND, id, v - 1);
    sig.payload = json_pack("{s:s, s:i}", "actor", "olga", "to_version", 1);
    CU_ASSERT_EQUAL(st_signal_enqueue_tx(conn, &sig, &eb), ST_OK);
    st_signal_close(&sig);
    it_pg_commit(conn);
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND outcome = 'rejected' AND detail->>'why' LIKE '%%state_version is %lld%%'", id, v);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, 30), 2);
    CU_ASSERT_TRUE(it_sql_number("SELECT count(*) FROM strand.outbox WHERE topic = 'notices'") >= notices + 2);
    expect_status(id, "waiting");
    CU_ASSERT_EQUAL(version_of(id), v);
    CU_ASSERT_EQUAL(history_count(id, "paused") + history_count(id, "rewound"), 0);
    free(id);
}

/* Repair verbs on a paused instance (a seam of the repair and pause work): the verbs
 * that would run steps (skip-wait, fire-timer, retry) are refused, at the API (409
 * not_applicable) and by the executor (audit "rejected"), so they cannot leave it
 * running with its kept wake-ups never applied; patch_variables applies and the
 * instance stays paused. */
static void test_repair_while_paused(void)
{
    char *id = it_start_instance(T_ADMIN, hold, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    pause_now(id);
    long long v = version_of(id);
    char body[160];
    snprintf(body, sizeof body, "{\"expected_version\":%lld}", v);
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(verb(T_OPS, id, "skip-wait", body, &answer), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(answer, "code")) ?: "", "not_applicable");
    json_decref(answer);
    /* the executor agrees when a REPAIR reaches it anyway (a batch, a race) */
    PGconn *conn = it_pg_begin();
    st_signal_t sig;
    st_errbuf_t eb;
    st_signal_init(&sig, ST_SIGNAL_REPAIR, id, v);
    sig.payload = json_pack("{s:s, s:s}", "verb", "skip_wait", "actor", "olga");
    CU_ASSERT_EQUAL(st_signal_enqueue_tx(conn, &sig, &eb), ST_OK);
    st_signal_close(&sig);
    it_pg_commit(conn);
    CU_ASSERT_EQUAL(wait_audit(id, "skip_wait", "rejected", 30), 1);
    expect_status(id, "paused");
    CU_ASSERT_EQUAL(version_of(id), v);
    /* patching the variables of a paused instance is what pausing is for */
    snprintf(body, sizeof body, "{\"expected_version\":%lld,\"patch\":{\"fixed\":true}}", v);
    CU_ASSERT_EQUAL(verb(T_OPS, id, "variables", body, NULL), 202);
    CU_ASSERT_EQUAL(wait_audit(id, "patch_variables", "applied", 30), 1);
    expect_status(id, "paused");
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT (snapshot->'state'->>'fixed')::text FROM strand.runtime_states"
             " WHERE instance_id = '%s'", id);
    char *fixed = it_sql_text(sql);
    CU_ASSERT_STRING_EQUAL(fixed ? fixed : "", "true");
    free(fixed);
    resume_now(id);
    expect_status(id, "waiting");
    free(id);
}

/* ---- a pause racing a wake-up, each ordering forced ---------------------------------
 *
 * The API checks a verb, and the executor applies a wake-up, under the same row lock:
 * the instance's runtime state, FOR UPDATE. The test holds that lock itself, so both
 * queue behind it, and PostgreSQL grants a row lock to its waiters in the order they
 * queued (the first holds the tuple lock the later ones wait for). Sending the second
 * request only once the first is seen waiting decides which one runs first; no
 * outcome depends on timing. */

/* A POST answered in a thread of its own: it may queue behind the test's lock. */
typedef struct {
    char path[200], body[200];
    long status;
    json_t *answer;
    pthread_t th;
} async_post_t;

static void *async_post_main(void *p)
{
    async_post_t *a = p;
    a->status = post(T_OPS, a->path, a->body, &a->answer);
    return NULL;
}

/* POST /v1/instances/{id}/pause {expected_version: v} in a thread. */
static void pause_async(async_post_t *a, const char *id, long long v)
{
    memset(a, 0, sizeof *a);
    snprintf(a->path, sizeof a->path, "/v1/instances/%s/pause", id);
    snprintf(a->body, sizeof a->body, "{\"expected_version\":%lld}", v);
    pthread_create(&a->th, NULL, async_post_main, a);
}

/* Joins the thread; returns the status (the answer stays in a->answer: decref it). */
static long async_join(async_post_t *a)
{
    pthread_join(a->th, NULL);
    return a->status;
}

/* Posts the signal "go" and returns its id in `sid` (64 bytes); asserts 202. */
static void send_go(const char *id, char *sid)
{
    char path[160];
    json_t *answer = NULL;
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    CU_ASSERT_EQUAL(post(T_ADMIN, path, "{\"name\":\"go\",\"payload\":{}}", &answer), 202);
    snprintf(sid, 64, "%s", json_string_value(json_object_get(answer, "signal_id")) ?: "");
    json_decref(answer);
}

/* The executor's outcome of signal `sid` (strand.processed_signals), waited for up to
 * 30 s; caller frees. */
static char *signal_outcome(const char *sid)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT outcome FROM strand.processed_signals WHERE signal_id = '%s'", sid);
    char *o = it_wait_text(sql, 30);
    return o ? o : strdup("none");
}

static void expect_signal_outcome(const char *sid, const char *want)
{
    char *got = signal_outcome(sid);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "\nsignal %s: outcome %s, want %s\n", sid, got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    free(got);
}

/* A fresh instance of `race` waiting for "go"; its state_version in *v. */
static char *race_instance(long long *v)
{
    char *id = it_start_instance(T_ADMIN, race, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    *v = version_of(id);
    return id;
}

/* The signal "go" applied once, by a wake-up that moved the version to `v`. */
static void expect_go_applied_once(const char *id, long long v)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
             " AND kind = 'wakeup' AND detail->>'signal_type' = 'SIGNAL'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    CU_ASSERT_TRUE(wait_waiting(id, v, 30));
    sleep(1);   /* nothing more arrives: still once, still `v` */
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    CU_ASSERT_EQUAL(version_of(id), v);
}

/* Ordering A, the pause first: its check and its PAUSE come before the wake-up (the
 * PAUSE is enqueued first, and one instance's signals apply in order), so it applies;
 * the signal is kept (outcome buffered, history signal_held) and applied once on
 * resume. */
static void test_race_pause_first(void)
{
    long long v;
    char *id = race_instance(&v), go[64];
    char body[64];
    json_t *answer = NULL;
    snprintf(body, sizeof body, "{\"expected_version\":%lld}", v);
    CU_ASSERT_EQUAL(verb(T_OPS, id, "pause", body, &answer), 202);
    json_decref(answer);
    send_go(id, go);   /* at once: the PAUSE may not have been applied yet */
    expect_signal_outcome(go, "buffered");
    CU_ASSERT_EQUAL(wait_audit(id, "pause", "applied", 30), 1);
    expect_status(id, "paused");
    CU_ASSERT_EQUAL(version_of(id), v);
    CU_ASSERT_EQUAL(history_count(id, "signal_held"), 1);
    CU_ASSERT_EQUAL(audit_count(id, "pause", "rejected"), 0);
    resume_now(id);
    expect_go_applied_once(id, v + 1);
    expect_status(id, "waiting");
    free(id);
}

/* Ordering B, the wake-up applied before the API's check: the lock is held, the
 * signal's wake-up queues first and the pause's check second. The check finds the
 * version moved: 409 version_mismatch with the new state_version, nothing enqueued,
 * no audit row. */
static void test_race_wakeup_before_check(void)
{
    long long v;
    char *id = race_instance(&v), go[64];
    it_row_lock_t lock;
    async_post_t pause;
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "runtime_states", "instance_id", id));
    send_go(id, go);
    int queued = it_wait_queued(&lock, "strand-executor", 1);
    pause_async(&pause, id, v);
    queued = queued && it_wait_queued(&lock, "strand-api", 1);
    it_unlock_row(&lock);
    long status = async_join(&pause);
    if (status != 409)
        fprintf(stderr, "\npause after the wake-up answered %ld, want 409\n", status);
    CU_ASSERT_EQUAL(status, 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(pause.answer, "code")) ?: "", "version_mismatch");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(pause.answer, "state_version")), v + 1);
    json_decref(pause.answer);
    expect_signal_outcome(go, "applied");
    expect_go_applied_once(id, v + 1);
    expect_status(id, "waiting");
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    CU_ASSERT_TRUE(queued);
    free(id);
}

/* Ordering B', the API's check before the wake-up, the wake-up before the PAUSE: the
 * lock is held, the pause's check queues first (it answers 202), the signal's wake-up
 * second, and the PAUSE arrives after the wake-up moved the version. The executor
 * drops it: outcome stale, a StaleSignal notice, an audit row "rejected" saying why;
 * the instance was never paused and the signal applied once. */
static void test_race_check_before_wakeup(void)
{
    long long v;
    char *id = race_instance(&v), go[64];
    it_row_lock_t lock;
    async_post_t pause;
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "runtime_states", "instance_id", id));
    pause_async(&pause, id, v);
    int queued = it_wait_queued(&lock, "strand-api", 1);
    send_go(id, go);
    queued = queued && it_wait_queued(&lock, "strand-executor", 1);
    it_unlock_row(&lock);
    long status = async_join(&pause);
    CU_ASSERT_EQUAL(status, 202);
    char sid[64];
    snprintf(sid, sizeof sid, "%s", json_string_value(json_object_get(pause.answer, "signal_id")) ?: "");
    json_decref(pause.answer);
    CU_ASSERT_TRUE(queued);
    CU_ASSERT_EQUAL_FATAL(status, 202);
    expect_signal_outcome(go, "applied");
    expect_signal_outcome(sid, "stale");
    CU_ASSERT_EQUAL(wait_audit(id, "pause", "rejected", 30), 1);
    char sql[500];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND action = 'pause' AND outcome = 'rejected' AND detail->>'signal_id' = '%s'"
             " AND detail->>'why' = 'the instance''s state_version is %lld, not %lld'", id, sid, v + 1, v);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices WHERE instance_id = '%s'"
             " AND code = 'StaleSignal' AND signal_id = '%s'", id, sid);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    CU_ASSERT_EQUAL(audit_count(id, "pause", "requested"), 1);
    CU_ASSERT_EQUAL(audit_count(id, "pause", "applied"), 0);
    expect_go_applied_once(id, v + 1);
    expect_status(id, "waiting");
    CU_ASSERT_EQUAL(history_count(id, "paused") + history_count(id, "signal_held"), 0);
    free(id);
}

/* The verbs over Kafka ingress: PAUSE and RESUME commands, same checks as HTTP. */
static void test_ingress(void)
{
    char *id = it_start_instance(T_ADMIN, hold, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    char args[64];
    snprintf(args, sizeof args, "{\"expected_version\":%lld}", version_of(id));
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_PAUSE, T_OPS, id, args));
    CU_ASSERT_TRUE(wait_status(id, "paused", 60));
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_RESUME, T_OPS, id, args));
    CU_ASSERT_TRUE(wait_status(id, "waiting", 60));
    /* a reader may not */
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_PAUSE, T_READER, id, args));
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.dead_letters WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 60), 1);
    expect_status(id, "waiting");
    CU_ASSERT_EQUAL(audit_count(id, "pause", "applied"), 1);
    free(id);
}

/* 409 on a stale expected_version, 400 on bad input, 403 without the permission,
 * 404 for unknown ids: nothing is written. */
static void test_bad_input_changes_nothing(void)
{
    char *id = it_start_instance(T_ADMIN, hold, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    long long v = version_of(id);
    char body[200];
    json_t *p = NULL;
    snprintf(body, sizeof body, "{\"expected_version\":%lld}", v + 5);
    CU_ASSERT_EQUAL(verb(T_OPS, id, "pause", body, &p), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "code")) ?: "", "version_mismatch");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(p, "state_version")), v);
    json_decref(p);
    static const struct {
        const char *verb, *body;
        long status;
    } bad[] = {
        {"pause", "{}", 400},
        {"pause", "{\"expected_version\":\"1\"}", 400},
        {"pause", "{\"expected_version\":-1}", 400},
        {"pause", "{\"expected_version\":1.5}", 400},
        {"pause", "{\"expected_version\":1,\"reason\":7}", 400},
        {"pause", "[1]", 400},
        {"pause", "not json", 400},
        {"resume", "{}", 400},
        {"rewind", "{\"expected_version\":1}", 400},
        {"rewind", "{\"expected_version\":1,\"to_version\":0}", 400},
        {"rewind", "{\"expected_version\":1,\"to_version\":1}", 400},
        {"rewind", "{\"expected_version\":1,\"to_version\":\"x\"}", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long got = verb(T_OPS, id, bad[i].verb, bad[i].body, NULL);
        if (got != bad[i].status)
            fprintf(stderr, "\n%s %s answered %ld, want %ld\n", bad[i].verb, bad[i].body, got, bad[i].status);
        CU_ASSERT_EQUAL(got, bad[i].status);
    }
    snprintf(body, sizeof body, "{\"expected_version\":%lld}", v);
    CU_ASSERT_EQUAL(verb(T_OPS, id, "resume", body, &p), 409);   /* not paused */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "code")) ?: "", "not_applicable");
    json_decref(p);
    CU_ASSERT_EQUAL(verb(T_READER, id, "pause", "{\"expected_version\":1}", NULL), 403);
    CU_ASSERT_EQUAL(verb(T_OPS, "not-a-uuid", "pause", "{\"expected_version\":1}", NULL), 400);
    CU_ASSERT_EQUAL(verb(T_OPS, "00000000-0000-4000-8000-000000000000", "pause", "{\"expected_version\":1}", NULL), 404);
    char path[300];
    snprintf(path, sizeof path, "/v1/definitions/%s/1/pause", "no-such-definition");
    CU_ASSERT_EQUAL(post(T_OPS, path, "{}", NULL), 404);
    snprintf(path, sizeof path, "/v1/definitions/%s/x/pause", hold);
    CU_ASSERT_EQUAL(post(T_OPS, path, "{}", NULL), 400);
    snprintf(path, sizeof path, "/v1/definitions/%s/1/pause", hold);
    CU_ASSERT_EQUAL(post(T_READER, path, "{}", NULL), 403);
    sleep(1);
    expect_status(id, "waiting");
    CU_ASSERT_EQUAL(version_of(id), v);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.definition_pauses WHERE definition_name = '%s'", hold);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    free(id);
}

/* strandctl's subcommands: instances pause/resume/rewind, definitions pause/resume. */
static void test_strandctl(void)
{
    char *id = it_start_instance(T_ADMIN, hold, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_TRUE_FATAL(wait_waiting(id, 1, 30));
    char args[400], *out = NULL;
    snprintf(args, sizeof args, "instances pause %s", id);
    CU_ASSERT_EQUAL(it_strandctl(T_OPS, args, &out), 2);   /* --expected-version is required */
    free(out);
    snprintf(args, sizeof args, "instances pause %s --expected-version %lld --reason 'look first'", id,
             version_of(id));
    CU_ASSERT_EQUAL(it_strandctl(T_OPS, args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "accepted"));
    free(out);
    CU_ASSERT_TRUE(wait_status(id, "paused", 30));
    snprintf(args, sizeof args, "instances resume %s --expected-version %lld", id, version_of(id));
    CU_ASSERT_EQUAL(it_strandctl(T_OPS, args, &out), 0);
    free(out);
    CU_ASSERT_TRUE(wait_status(id, "waiting", 30));
    send_signal(id, "go", "{}");
    CU_ASSERT_TRUE(wait_waiting(id, 2, 30));
    snprintf(args, sizeof args, "instances rewind %s --expected-version %lld --to-version 1", id, version_of(id));
    CU_ASSERT_EQUAL(it_strandctl(T_OPS, args, &out), 0);
    free(out);
    CU_ASSERT_EQUAL(wait_history(id, "rewound", 1, 30), 1);
    snprintf(args, sizeof args, "instances rewind %s --expected-version 99 --to-version 1", id);
    CU_ASSERT_EQUAL(it_strandctl(T_OPS, args, &out), 1);   /* 409 version_mismatch */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "version_mismatch"));
    free(out);
    snprintf(args, sizeof args, "definitions pause %s 1", hold);
    CU_ASSERT_EQUAL(it_strandctl(T_OPS, args, &out), 0);
    free(out);
    snprintf(args, sizeof args, "definitions resume %s 1", hold);
    CU_ASSERT_EQUAL(it_strandctl(T_OPS, args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "instances_drained"));
    free(out);
    free(id);
}

static void test_stop(void)
{
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_pause"))
        return 1;
    snprintf(sfx, sizeof sfx, "%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(tim, sizeof tim, "pause-tim-%s", sfx);
    snprintf(sig3, sizeof sig3, "pause-sig3-%s", sfx);
    snprintf(hold, sizeof hold, "pause-hold-%s", sfx);
    snprintf(dpv, sizeof dpv, "pause-dpv-%s", sfx);
    snprintf(kid, sizeof kid, "pause-kid-%s", sfx);
    snprintf(parent, sizeof parent, "pause-parent-%s", sfx);
    snprintf(lc, sizeof lc, "pause-lc-%s", sfx);
    snprintf(proc, sizeof proc, "pause_proc_%ld_%d", (long)time(NULL), (int)getpid());
    snprintf(race, sizeof race, "pause-race-%s", sfx);
    snprintf(failing, sizeof failing, "pause-failing-%s", sfx);
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"pause through a timer: kept while paused, applied on resume", test_pause_through_timer},
        {"several signals while paused applied in arrival order", test_signals_in_order},
        {"cancel and terminate apply to a paused instance", test_cancel_while_paused},
        {"a definition version paused and resumed with several instances", test_definition_version_pause},
        {"rewind past a child: child cancelled, parent continues and completes", test_rewind_past_child},
        {"rewind a lifecycle after its final state", test_rewind_lifecycle},
        {"rewind a process", test_rewind_process},
        {"rewind a failed instance", test_rewind_failed},
        {"a definition version resumed while the executor is down", test_definition_resume_executor_down},
        {"the executor re-checks expected_version", test_executor_rechecks},
        {"repair verbs on a paused instance: steps refused, patch keeps it paused", test_repair_while_paused},
        {"a pause racing a wake-up: the pause first, the signal kept", test_race_pause_first},
        {"a pause racing a wake-up: the wake-up before the check, 409", test_race_wakeup_before_check},
        {"a pause racing a wake-up: the check first, the executor rejects it", test_race_check_before_wakeup},
        {"pause and resume over Kafka ingress", test_ingress},
        {"409 on a stale version, 400 on bad input: nothing changes", test_bad_input_changes_nothing},
        {"strandctl pause, resume, rewind, definitions pause/resume", test_strandctl},
        {"stop", test_stop},
    };
    return it_run_suite("pause", cases, (int)(sizeof cases / sizeof cases[0]));
}
