/*
 * test_tree.c - ending an instance ends everything it owns (issue 16), on the real
 * servers: cancelling or terminating a parent reaches its waiting child and the
 * child's task; a child cancelled or terminated on its own wakes its parent as a
 * failure with its own code; the losing branch of a `join: any` and an instance that
 * completes with a task still open cancel that task; a cancelled task refuses every
 * action with 409 task_cancelled; a cancelled instance stops its Kafka call's re-raises;
 * and only admins take a task assigned to someone else. Plus the seam: a parent's cancel
 * racing its child's completion, each ordering forced by a row lock the test holds.
 */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

#define T_ADMIN "tree-admin-token-0123456789"
#define T_ALICE "tree-alice-token-0123456789"   /* approver */
#define T_BOB "tree-bob-token-0123456789"       /* approver */

static char kid[80], parent[80], parent_onfail[80], race[80], early[80], kcall[80], reuse[80];

/* Asserts a problem answer with `status` and `code`. */
static void expect_problem(const char *token, const char *path, const char *body, long status,
                           const char *code)
{
    json_t *p = NULL;
    long got = it_req(IT_API, token, "POST", path, body, &p);
    const char *got_code = json_string_value(json_object_get(p, "code"));
    if (got != status || got_code == NULL || strcmp(got_code, code) != 0)
        fprintf(stderr, "\nPOST %s: got %ld %s, want %ld %s\n", path, got,
                got_code ? got_code : "(no code)", status, code);
    CU_ASSERT_EQUAL(got, status);
    CU_ASSERT_STRING_EQUAL(got_code ? got_code : "", code);
    json_decref(p);
}

/* Waits for the instance's open task named `name`; returns its id (caller frees). */
static char *wait_task(const char *instance_id, const char *name, int timeout_s)
{
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT id FROM strand.tasks WHERE instance_id = '%s' AND name = '%s'"
             " AND status = 'open'", instance_id, name);
    return it_wait_text(sql, timeout_s);
}

/* Waits until the instance has ended; returns the instance (caller decrefs) or NULL. */
static json_t *wait_ended(const char *id, int timeout_s)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    time_t deadline = time(NULL) + timeout_s;
    while (time(NULL) < deadline) {
        json_t *inst = NULL;
        if (it_req(IT_API, T_ADMIN, "GET", path, NULL, &inst) == 200) {
            const char *s = json_string_value(json_object_get(inst, "status"));
            if (s && (strcmp(s, "completed") == 0 || strcmp(s, "failed") == 0 ||
                      strcmp(s, "cancelled") == 0 || strcmp(s, "terminated") == 0))
                return inst;
        }
        json_decref(inst);
        usleep(50 * 1000);
    }
    fprintf(stderr, "\ninstance %s did not end within %d s\n", id, timeout_s);
    return NULL;
}

/* Asserts the instance ended with `status` (and, if not NULL, error.code `code`). */
static void expect_ended(const char *id, const char *status, const char *code)
{
    json_t *inst = wait_ended(id, 60);
    CU_ASSERT_PTR_NOT_NULL_FATAL(inst);
    const char *got = json_string_value(json_object_get(inst, "status"));
    const char *got_code = json_string_value(json_object_get(json_object_get(inst, "error"), "code"));
    if (strcmp(got, status) != 0 || (code && (!got_code || strcmp(got_code, code) != 0)))
        fprintf(stderr, "\ninstance %s ended %s (%s), want %s (%s)\n", id, got,
                got_code ? got_code : "-", status, code ? code : "-");
    CU_ASSERT_STRING_EQUAL(got, status);
    if (code != NULL)
        CU_ASSERT_STRING_EQUAL(got_code ? got_code : "", code);
    json_decref(inst);
}

/* The task's status and its last task event's kind, "status/kind". Caller frees. */
static char *task_state(const char *task)
{
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT t.status || '/' || (SELECT kind FROM strand.task_events e"
             " WHERE e.task_id = t.id ORDER BY e.id DESC LIMIT 1) FROM strand.tasks t"
             " WHERE t.id = '%s'", task);
    return it_sql_text(sql);
}

/* Polls until the task is cancelled (with its task event) and asserts it. */
static void expect_task_cancelled(const char *task)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND status = 'cancelled'",
             task);
    it_wait_number(sql, 1, 30);
    char *state = task_state(task);
    if (state == NULL || strcmp(state, "cancelled/cancelled") != 0)
        fprintf(stderr, "\ntask %s is %s, want cancelled/cancelled\n", task, state ? state : "?");
    CU_ASSERT_STRING_EQUAL(state ? state : "", "cancelled/cancelled");
    free(state);
    /* every action on it is refused, and nothing changes */
    char path[160];
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", task);
    expect_problem(T_ALICE, path, "{\"result\":{}}", 409, "task_cancelled");
    snprintf(path, sizeof path, "/v1/tasks/%s/assign", task);
    expect_problem(T_ALICE, path, "{}", 409, "task_cancelled");
    snprintf(path, sizeof path, "/v1/tasks/%s/release", task);
    expect_problem(T_ADMIN, path, "{}", 409, "task_cancelled");
    state = task_state(task);
    CU_ASSERT_STRING_EQUAL(state ? state : "", "cancelled/cancelled");
    free(state);
}

/* The child a parent started (waits for it); caller frees. */
static char *wait_child(const char *parent_id)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT id FROM strand.instances WHERE parent_instance_id = '%s'", parent_id);
    return it_wait_text(sql, 30);
}

/* ---- the cases ---------------------------------------------------------------------- */

static void test_setup(void)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/strand-test-tree-tokens-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"tokens\": ["
               "{\"token\": \"%s\", \"principal\": \"root\", \"roles\": [\"admin\"]},"
               "{\"token\": \"%s\", \"principal\": \"alice\", \"roles\": [\"approver\"]},"
               "{\"token\": \"%s\", \"principal\": \"bob\", \"roles\": [\"approver\"]}]}",
            T_ADMIN, T_ALICE, T_BOB);
    fclose(f);
    setenv("STRAND_AUTH_FILE", path, 1);
    CU_ASSERT_FATAL(it_start_all(90));
    unlink(path);
    char doc[2048];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"approver\"]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", kid);
    it_import(T_ADMIN, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"k\",\"type\":\"subworkflow\",\"definition\":\"%s\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", parent, kid);
    it_import(T_ADMIN, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"k\",\"type\":\"subworkflow\",\"definition\":\"%s\",\"on_failure\":["
             "  {\"id\":\"note\",\"type\":\"set\",\"values\":{\"why\":\"state.k.code\"}}]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"why\":\"state.why\"}}]}",
             parent_onfail, kid);
    it_import(T_ADMIN, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"par\",\"type\":\"parallel\",\"join\":\"any\",\"branches\":["
             "  [{\"id\":\"a\",\"type\":\"task\",\"name\":\"A\",\"roles\":[\"approver\"]}],"
             "  [{\"id\":\"b\",\"type\":\"task\",\"name\":\"B\",\"roles\":[\"approver\"]}]]},"
             "{\"id\":\"hold\",\"type\":\"wait_signal\",\"name\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"a\":\"state.a\",\"b\":\"state.b\"}}]}",
             race);
    it_import(T_ADMIN, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"par\",\"type\":\"parallel\",\"join\":\"all\",\"branches\":["
             "  [{\"id\":\"a\",\"type\":\"task\",\"name\":\"A\",\"roles\":[\"approver\"]}],"
             "  [{\"id\":\"w\",\"type\":\"wait_signal\",\"name\":\"finish\"},"
             "   {\"id\":\"end\",\"type\":\"complete\",\"output\":{\"early\":true}}]]}]}",
             early);
    it_import(T_ADMIN, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"quote\",\"type\":\"call\",\"transport\":\"kafka\",\"consumers\":[\"pricing\"],"
             " \"request\":{\"sku\":\"'A-1'\"},\"result\":\"price\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", kcall);
    it_import(T_ADMIN, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"process\",\"name\":\"%s\",\"version\":1,"
             "\"id_reuse_policy\":\"allow_terminate_if_running\",\"start\":[\"s\"],\"states\":["
             "{\"id\":\"s\",\"execute\":{\"transport\":\"kafka\",\"consumers\":[\"pricing\"],"
             "\"request\":{\"x\":1}}}]}", reuse);
    it_import(T_ADMIN, doc);
}

/* A parent's CANCEL (or TERMINATE) reaches its waiting child and the child's task, and
 * the child, ended by its parent, does not wake the parent back. */
static void end_parent_with_child(const char *action, const char *status)
{
    char *p = it_start_instance(T_ADMIN, parent, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    char *child = wait_child(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(child);
    char *task = wait_task(child, "Approve", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s/%s", p, action);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{\"reason\":\"tree test\"}", NULL), 202);
    expect_ended(p, status, status);
    expect_ended(child, status, status);
    expect_task_cancelled(task);
    /* the child's end was the parent's doing: no CHILD_COMPLETED went back to it */
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
             " AND kind = '%s' AND detail->>'by_parent' = '%s'", child, status, p);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 10), 1);
    sleep(1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.processed_signals WHERE instance_id = '%s'"
             " AND outcome <> 'applied'", p);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    free(task);
    free(child);
    free(p);
}

static void test_cancel_parent_reaches_child(void)
{
    end_parent_with_child("cancel", "cancelled");
}

static void test_terminate_parent_reaches_child(void)
{
    end_parent_with_child("terminate", "terminated");
}

/* A child cancelled or terminated on its own wakes its parent as a failure with its
 * own code: into on_failure, or the parent fails with it. */
static void test_child_ended_wakes_parent(void)
{
    char path[160];
    /* cancelled child, parent without on_failure: the parent fails with child_cancelled */
    char *p = it_start_instance(T_ADMIN, parent, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    char *child = wait_child(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(child);
    char *task = wait_task(child, "Approve", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", child);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{}", NULL), 202);
    expect_ended(child, "cancelled", "cancelled");
    expect_ended(p, "failed", "child_cancelled");
    expect_task_cancelled(task);
    free(task);
    free(child);
    free(p);

    /* terminated child, parent with on_failure: it runs and sees child_terminated */
    p = it_start_instance(T_ADMIN, parent_onfail, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    child = wait_child(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(child);
    task = wait_task(child, "Approve", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    snprintf(path, sizeof path, "/v1/instances/%s/terminate", child);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{}", NULL), 202);
    expect_ended(child, "terminated", "terminated");
    expect_ended(p, "completed", NULL);
    snprintf(path, sizeof path, "/v1/instances/%s", p);
    json_t *inst = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", path, NULL, &inst), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(inst, "output"), "why")) ?: "",
                           "child_terminated");
    json_decref(inst);
    expect_task_cancelled(task);
    free(task);
    free(child);
    free(p);
}

/* join any over two task branches: the loser's task is cancelled while the instance
 * goes on; completing it answers 409 and changes nothing. */
static void test_join_any_loser_task_cancelled(void)
{
    char *id = it_start_instance(T_ADMIN, race, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char *a = wait_task(id, "A", 30), *b = wait_task(id, "B", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    char path[160], sql[300];
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ALICE, "POST", path, "{\"result\":{\"won\":true}}", NULL), 200);
    /* the instance now waits for the signal "go" */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.runtime_states WHERE instance_id = '%s'"
             " AND waiting_kind = 'signal'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    expect_task_cancelled(b);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s' AND status = 'waiting'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* A task left open by an older release whose wait is gone (the instance now waits
     * for "go"): completing it answers 409 too, and nothing changes. */
    snprintf(sql, sizeof sql, "INSERT INTO strand.tasks (id, instance_id, name, status, roles, waiting_token)"
             " VALUES ('00000000-0000-4000-8000-%.12s', '%s', 'Legacy', 'open', '{approver}', '%s/999')",
             id + 24, id, id);
    CU_ASSERT_TRUE(it_sql_exec(sql));
    snprintf(path, sizeof path, "/v1/tasks/00000000-0000-4000-8000-%.12s/complete", id + 24);
    expect_problem(T_ALICE, path, "{\"result\":{}}", 409, "task_cancelled");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE id = '00000000-0000-4000-8000-%.12s'"
             " AND status = 'open'", id + 24);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{\"name\":\"go\"}", NULL), 202);
    expect_ended(id, "completed", NULL);
    free(a);
    free(b);
    free(id);
}

/* An instance that completes while one of its tasks is still open cancels the task. */
static void test_completed_instance_cancels_open_task(void)
{
    char *id = it_start_instance(T_ADMIN, early, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char *task = wait_task(id, "A", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{\"name\":\"finish\"}", NULL), 202);
    expect_ended(id, "completed", NULL);
    expect_task_cancelled(task);
    free(task);
    free(id);
}

/* A task assigned to alice: bob (same role) cannot take it; the admin can. */
static void test_assigned_task_only_admin_takes(void)
{
    char *id = it_start_instance(T_ADMIN, kid, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char *task = wait_task(id, "Approve", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    char path[160], sql[300];
    snprintf(path, sizeof path, "/v1/tasks/%s/assign", task);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ALICE, "POST", path, "{}", NULL), 200);
    expect_problem(T_BOB, path, "{}", 403, "forbidden");
    expect_problem(T_BOB, path, "{\"assignee\":\"bob\"}", 403, "forbidden");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND assignee = 'alice'", task);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* alice may take it again (hers already); the admin takes it for bob */
    CU_ASSERT_EQUAL(it_req(IT_API, T_ALICE, "POST", path, "{}", NULL), 200);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{\"assignee\":\"bob\"}", NULL), 200);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE id = '%s' AND assignee = 'bob'", task);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", task);
    expect_problem(T_ALICE, path, "{\"result\":{}}", 403, "forbidden");
    CU_ASSERT_EQUAL(it_req(IT_API, T_BOB, "POST", path, "{\"result\":{}}", NULL), 200);
    expect_ended(id, "completed", NULL);
    free(task);
    free(id);
}

/* An instance cancelled while it waits on a Kafka-transport call: the call's awaited
 * ACK is cancelled (no more re-raises), and a late ACK is a harmless duplicate. */
static void test_cancel_stops_kafka_call(void)
{
    char *id = it_start_instance(T_ADMIN, kcall, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char sql[400], path[160], body[300];
    snprintf(sql, sizeof sql, "SELECT ack_guid FROM strand.work_events WHERE instance_id = '%s'"
             " AND kind = 'call'", id);
    char *guid = it_wait_text(sql, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(guid);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.acks WHERE ack_guid = '%s' AND due_at IS NOT NULL",
             guid);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", id);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{}", NULL), 202);
    expect_ended(id, "cancelled", "cancelled");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.acks WHERE ack_guid = '%s'"
             " AND stage = 'cancelled' AND due_at IS NULL", guid);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(body, sizeof body, "{\"ack_guid\":\"%s\",\"consumer\":\"pricing\",\"stage\":\"processed\","
             "\"result\":{\"amount\":1}}", guid);
    json_t *a = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", "/v1/acks", body, &a), 200);
    CU_ASSERT_TRUE(json_is_true(json_object_get(a, "duplicate")));
    json_decref(a);
    free(guid);
    free(id);
}

/* A process run replaced under allow_terminate_if_running (the API terminates it in
 * the start's transaction) ends what it owns too: its Kafka execute's awaited ACK. */
static void test_id_reuse_terminate_reaches_calls(void)
{
    char body[300], sql[400];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"business_ref\":\"r1\",\"input\":{}}", reuse);
    json_t *answer = NULL;
    CU_ASSERT_EQUAL_FATAL(it_req(IT_API, T_ADMIN, "POST", "/v1/instances", body, &answer), 201);
    char *first = strdup(json_string_value(json_object_get(answer, "id")) ?: "");
    json_decref(answer);
    snprintf(sql, sizeof sql, "SELECT ack_guid FROM strand.work_events WHERE instance_id = '%s'"
             " AND kind = 'call'", first);
    char *guid = it_wait_text(sql, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(guid);
    CU_ASSERT_EQUAL_FATAL(it_req(IT_API, T_ADMIN, "POST", "/v1/instances", body, &answer), 201);
    const char *second = json_string_value(json_object_get(answer, "id"));
    CU_ASSERT_STRING_NOT_EQUAL(second ? second : first, first);
    json_decref(answer);
    expect_ended(first, "terminated", "terminated");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.acks WHERE ack_guid = '%s'"
             " AND stage = 'cancelled' AND due_at IS NULL", guid);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    free(guid);
    free(first);
}

/* ---- the seam: a parent's cancel racing its child's completion, each ordering forced
 *
 * The test holds a row lock that one side needs (the child's task row, or an
 * instance's runtime state, FOR UPDATE): what comes meanwhile queues behind it, and
 * PostgreSQL grants a row lock to its waiters in the order they queued (the first
 * holds the tuple lock the later ones wait for). Sending the second request only once
 * the first is seen waiting decides which one runs first; the rest follows from one
 * instance's signals applying in the order they were sent. No outcome depends on
 * timing. (The cancel applied in full before the completion is the case "cancel a
 * parent" above: the completion answers 409 task_cancelled.) */

/* A POST answered in a thread of its own: it may queue behind the test's lock. */
typedef struct {
    const char *token;
    char path[160];
    long status;
    json_t *answer;   /* decref it */
    pthread_t th;
} async_post_t;

static void *async_post_main(void *p)
{
    async_post_t *a = p;
    a->status = it_req(IT_API, a->token, "POST", a->path, "{\"result\":{}}", &a->answer);
    return NULL;
}

/* Alice completes `task`, in a thread. */
static void complete_async(async_post_t *a, const char *task)
{
    memset(a, 0, sizeof *a);
    a->token = T_ALICE;
    snprintf(a->path, sizeof a->path, "/v1/tasks/%s/complete", task);
    pthread_create(&a->th, NULL, async_post_main, a);
}

static long async_join(async_post_t *a)
{
    pthread_join(a->th, NULL);
    return a->status;
}

/* Alice completes `task`; returns the status. */
static long complete_task(const char *task)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", task);
    return it_req(IT_API, T_ALICE, "POST", path, "{\"result\":{}}", NULL);
}

/* POST /v1/instances/{id}/cancel; returns the status and the signal id in `sid` (64
 * bytes; empty unless 202). */
static long cancel(const char *id, char *sid)
{
    char path[160];
    json_t *answer = NULL;
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", id);
    long status = it_req(IT_API, T_ADMIN, "POST", path, "{\"reason\":\"race\"}", &answer);
    snprintf(sid, 64, "%s", json_string_value(json_object_get(answer, "signal_id")) ?: "");
    json_decref(answer);
    return status;
}

/* A parent waiting for its child, which waits on its task. */
typedef struct {
    char *parent, *child, *task;
} family_t;

static void family_start(family_t *f)
{
    f->parent = it_start_instance(T_ADMIN, parent, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->parent);
    f->child = wait_child(f->parent);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->child);
    f->task = wait_task(f->child, "Approve", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->task);
}

static void family_free(family_t *f)
{
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE instance_id IN ('%s', '%s')"
             " AND status IN ('open', 'assigned')", f->parent, f->child);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);   /* nothing left open, whatever the order */
    free(f->task);
    free(f->child);
    free(f->parent);
}

/* Waits until the instance's status is `want`; returns 1 if it was within 30 s. */
static int wait_status(const char *id, const char *want)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s' AND status = '%s'",
             id, want);
    return it_wait_number(sql, 1, 30) == 1;
}

/* Asserts the task's status and last event ("completed/completed", ...). */
static void expect_task_state(const char *task, const char *want)
{
    char *state = task_state(task);
    if (state == NULL || strcmp(state, want) != 0)
        fprintf(stderr, "\ntask %s is %s, want %s\n", task, state ? state : "?", want);
    CU_ASSERT_STRING_EQUAL(state ? state : "", want);
    free(state);
}

/* A signal of `type` to the instance was dropped as stale, with a StaleSignal notice
 * (waited for up to 30 s). */
static void expect_stale(const char *id, const char *type)
{
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices WHERE instance_id = '%s'"
             " AND code = 'StaleSignal' AND detail->>'signal_type' = '%s'", id, type);
    long long n = it_wait_number(sql, 1, 30);
    if (n != 1)
        fprintf(stderr, "\n%lld StaleSignal notices for a %s to %s, want 1\n", n, type, id);
    CU_ASSERT_EQUAL(n, 1);
}

/* The child's end was its parent's cancel (history entry with by_parent). */
static void expect_cancelled_by_parent(const family_t *f)
{
    expect_ended(f->child, "cancelled", "cancelled");
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
             " AND kind = 'cancelled' AND detail->>'by_parent' = '%s'", f->child, f->parent);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 10), 1);
}

/* The cancel first, at the child's task too: the test holds the task's row; the
 * parent's cancel applies and its CANCEL reaches the child, whose wake-up queues on
 * the task row (to cancel it); the completion queues second. The task is cancelled
 * first, so the completion answers 409 task_cancelled; everything ends cancelled. */
static void test_race_cancel_takes_task_first(void)
{
    family_t f;
    family_start(&f);
    it_row_lock_t lock;
    async_post_t done;
    char sid[64];
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "tasks", "id", f.task));
    CU_ASSERT_EQUAL(cancel(f.parent, sid), 202);
    int queued = wait_status(f.parent, "cancelled") && it_wait_queued(&lock, "strand-executor", 1);
    complete_async(&done, f.task);
    queued = queued && it_wait_queued(&lock, "strand-api", 1);
    it_unlock_row(&lock);
    long status = async_join(&done);
    CU_ASSERT_TRUE(queued);
    CU_ASSERT_EQUAL(status, 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(done.answer, "code")) ?: "", "task_cancelled");
    json_decref(done.answer);
    expect_ended(f.parent, "cancelled", "cancelled");
    expect_cancelled_by_parent(&f);
    expect_task_state(f.task, "cancelled/cancelled");
    family_free(&f);
}

/* The cancel first at the parent, the completion accepted before the child's CANCEL
 * applies: the test holds the child's runtime state; the parent's cancel applies and
 * its CANCEL to the child queues on the lock; the completion (which needs only the
 * task row) answers 200 meanwhile. The child's CANCEL then applies first: the child
 * ends cancelled by its parent, the completed task stays completed (it is no longer
 * open), and the child's TASK_COMPLETED, arriving at an ended instance, is dropped as
 * stale. */
static void test_race_completion_accepted_before_child_cancel(void)
{
    family_t f;
    family_start(&f);
    it_row_lock_t lock;
    char sid[64];
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "runtime_states", "instance_id", f.child));
    CU_ASSERT_EQUAL(cancel(f.parent, sid), 202);
    int queued = wait_status(f.parent, "cancelled") && it_wait_queued(&lock, "strand-executor", 1);
    long status = complete_task(f.task);
    it_unlock_row(&lock);
    CU_ASSERT_TRUE(queued);
    CU_ASSERT_EQUAL(status, 200);
    expect_ended(f.parent, "cancelled", "cancelled");
    expect_cancelled_by_parent(&f);
    expect_stale(f.child, "TASK_COMPLETED");
    expect_task_state(f.task, "completed/completed");
    family_free(&f);
}

/* The completion first, its news first at the parent: the test holds the parent's
 * runtime state; the task is completed, the child completes and its CHILD_COMPLETED
 * queues on the lock; the cancel is accepted (202: the parent still waits) and its
 * CANCEL comes after it. The parent completes; the CANCEL, arriving at an ended
 * instance, is dropped as stale. */
static void test_race_child_news_before_cancel(void)
{
    family_t f;
    family_start(&f);
    it_row_lock_t lock;
    char sid[64];
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "runtime_states", "instance_id", f.parent));
    long status = complete_task(f.task);
    int queued = wait_status(f.child, "completed") && it_wait_queued(&lock, "strand-executor", 1);
    long cancelled = cancel(f.parent, sid);
    it_unlock_row(&lock);
    CU_ASSERT_TRUE(queued);
    CU_ASSERT_EQUAL(status, 200);
    CU_ASSERT_EQUAL(cancelled, 202);
    expect_ended(f.parent, "completed", NULL);
    expect_ended(f.child, "completed", NULL);
    expect_stale(f.parent, "CANCEL");
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT outcome FROM strand.processed_signals WHERE signal_id = '%s'", sid);
    char *outcome = it_wait_text(sql, 30);
    CU_ASSERT_STRING_EQUAL(outcome ? outcome : "", "stale");
    free(outcome);
    expect_task_state(f.task, "completed/completed");
    family_free(&f);
}

/* The cancel first at the parent, the child's completion after it: the test holds the
 * parent's runtime state; the cancel's CANCEL queues on the lock, then the task is
 * completed (200). The parent ends cancelled; the child's TASK_COMPLETED was sent
 * before the CANCEL its parent sends it, so the child completes, and its
 * CHILD_COMPLETED, arriving at the cancelled parent, is dropped as stale. */
static void test_race_cancel_before_child_news(void)
{
    family_t f;
    family_start(&f);
    it_row_lock_t lock;
    char sid[64];
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "runtime_states", "instance_id", f.parent));
    long cancelled = cancel(f.parent, sid);
    int queued = it_wait_queued(&lock, "strand-executor", 1);
    long status = complete_task(f.task);
    it_unlock_row(&lock);
    CU_ASSERT_TRUE(queued);
    CU_ASSERT_EQUAL(cancelled, 202);
    CU_ASSERT_EQUAL(status, 200);
    expect_ended(f.parent, "cancelled", "cancelled");
    expect_ended(f.child, "completed", NULL);
    expect_stale(f.parent, "CHILD_COMPLETED");
    expect_task_state(f.task, "completed/completed");
    family_free(&f);
}

/* The completion applied in full first (the parent completed): the cancel answers 409
 * instance_ended and enqueues nothing. */
static void test_race_completion_first(void)
{
    family_t f;
    family_start(&f);
    CU_ASSERT_EQUAL(complete_task(f.task), 200);
    expect_ended(f.parent, "completed", NULL);
    json_t *p = NULL;
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", f.parent);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", path, "{}", &p), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "code")) ?: "", "instance_ended");
    json_decref(p);
    expect_ended(f.child, "completed", NULL);
    expect_task_state(f.task, "completed/completed");
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND action = 'cancel'", f.parent);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    family_free(&f);
}

static void test_stop(void)
{
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_tree"))
        return 1;
    char suffix[48];
    snprintf(suffix, sizeof suffix, "%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(kid, sizeof kid, "tree-kid-%s", suffix);
    snprintf(parent, sizeof parent, "tree-parent-%s", suffix);
    snprintf(parent_onfail, sizeof parent_onfail, "tree-parent-onfail-%s", suffix);
    snprintf(race, sizeof race, "tree-race-%s", suffix);
    snprintf(early, sizeof early, "tree-early-%s", suffix);
    snprintf(kcall, sizeof kcall, "tree-kcall-%s", suffix);
    snprintf(reuse, sizeof reuse, "tree-reuse-%s", suffix);
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"cancel a parent: its child and the child's task end too", test_cancel_parent_reaches_child},
        {"terminate a parent: its child and the child's task end too", test_terminate_parent_reaches_child},
        {"a child cancelled or terminated wakes its parent as a failure", test_child_ended_wakes_parent},
        {"join any: the losing branch's task is cancelled", test_join_any_loser_task_cancelled},
        {"an instance that completes cancels its open task", test_completed_instance_cancels_open_task},
        {"only admins take a task assigned to someone else", test_assigned_task_only_admin_takes},
        {"cancel vs completion: the cancel takes the task first, 409", test_race_cancel_takes_task_first},
        {"cancel vs completion: completion accepted, the child's cancel first", test_race_completion_accepted_before_child_cancel},
        {"cancel vs completion: the child's news first at the parent", test_race_child_news_before_cancel},
        {"cancel vs completion: the cancel first at the parent", test_race_cancel_before_child_news},
        {"cancel vs completion: the completion applied first, 409", test_race_completion_first},
        {"cancel stops a Kafka call's re-raises", test_cancel_stops_kafka_call},
        {"a run replaced by id reuse ends what it owns", test_id_reuse_terminate_reaches_calls},
        {"stop", test_stop},
    };
    return it_run_suite("tree", cases, (int)(sizeof cases / sizeof cases[0]));
}
