/*
 * test_paused_version.c - a paused definition version holds every path (issue 33,
 * "Fences"; docs/api.md, "Pause, resume and rewind").
 *
 * The runbook's procedure: pause the version of failed instances, fix the cause, retry
 * them (one by HTTP, the others by a batch), resume. Before the fix the repair path ran
 * ahead of the pause check: the retries ran at once and the instances completed while
 * the version was still paused. Now:
 *   - retry and skip-wait on an instance of a paused version are kept like its
 *     wake-ups (the signal's outcome is `buffered`, the instance does not move), and
 *     applied once when the version resumes;
 *   - patch-variables (runs no step) applies at once, as on a paused instance;
 *   - a batch retry's items are sent and kept the same way;
 *   - an RPC answers 409 `definition_version_paused` (it runs the process now and
 *     cannot be kept), and 409 `instance_paused` on a paused instance.
 * Each "does not move" is read after a positive event: the kept signal's outcome row.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

static char flow[96], proc[96];

static json_t *get_instance(const char *id)
{
    char path[128];
    json_t *out = NULL;
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    if (it_http(IT_API, "GET", path, NULL, &out) != 200) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static long long version_of(const char *id)
{
    json_t *inst = get_instance(id);
    long long v = inst ? (long long)json_integer_value(json_object_get(inst, "state_version")) : -1;
    json_decref(inst);
    return v;
}

/* The instance's status; caller frees. */
static char *status_of(const char *id)
{
    json_t *inst = get_instance(id);
    const char *s = inst ? json_string_value(json_object_get(inst, "status")) : NULL;
    char *copy = strdup(s ? s : "?");
    json_decref(inst);
    return copy;
}

static void expect_status(const char *id, const char *want)
{
    char *got = status_of(id);
    CU_ASSERT_STRING_EQUAL(got, want);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "\n    %s is %s, want %s\n", id, got, want);
    free(got);
}

static char *start(const char *definition)
{
    char body[300];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{}}", definition);
    json_t *out = NULL;
    long status = it_http(IT_API, "POST", "/v1/instances", body, &out);
    CU_ASSERT_EQUAL(status, 201);
    char *id = status == 201 ? strdup(json_string_value(json_object_get(out, "id")) ?: "") : NULL;
    json_decref(out);
    return id;
}

static long post(const char *path, const char *body, json_t **out)
{
    return it_http(IT_API, "POST", path, body, out);
}

/* POSTs verb `verb` at the instance's current version with `extra` members; returns the
 * answer's status and copies the accepted signal's id into `signal_id` (64 bytes). */
static long verb(const char *id, const char *name, const char *extra, char *signal_id)
{
    char path[160], body[1024];
    snprintf(path, sizeof path, "/v1/instances/%s/%s", id, name);
    snprintf(body, sizeof body, "{\"expected_version\":%lld%s%s}", version_of(id),
             extra ? "," : "", extra ? extra : "");
    json_t *out = NULL;
    long status = post(path, body, &out);
    snprintf(signal_id, 64, "%s", json_string_value(json_object_get(out, "signal_id")) ?: "");
    json_decref(out);
    return status;
}

/* Waits until the executor recorded signal `signal_id`'s outcome; returns it (caller
 * frees), or "none" after 30 s. */
static char *signal_outcome(const char *signal_id)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT outcome FROM strand.processed_signals WHERE signal_id = '%s'"
             " AND outcome IS NOT NULL AND outcome <> ''", signal_id);
    char *o = it_wait_text(sql, 30);
    return o ? o : strdup("none");
}

static void expect_kept(const char *signal_id)
{
    char *o = signal_outcome(signal_id);
    CU_ASSERT_STRING_EQUAL(o, "buffered");
    if (strcmp(o, "buffered") != 0)
        fprintf(stderr, "\n    signal %s: outcome %s, want buffered (kept)\n", signal_id, o);
    free(o);
}

static long long audit_count(const char *id, const char *action, const char *outcome)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND action = '%s' AND outcome = '%s'", id, action, outcome);
    return it_sql_number(sql);
}

/* Starts an instance that waits for "go"; with `fail`, sends "go" so that the next step
 * (len of a missing word) fails it. */
static char *instance_at(int fail)
{
    char *id = start(flow);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char sql[300], path[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.runtime_states WHERE instance_id = '%s'"
             " AND waiting_kind = 'signal'", id);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 30), 1);
    if (fail) {
        snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
        CU_ASSERT_EQUAL(post(path, "{\"name\":\"go\",\"payload\":{}}", NULL), 202);
        json_decref(it_wait_instance(id, "failed", 30));
        expect_status(id, "failed");
    }
    return id;
}

static void test_runbook(void)
{
    CU_ASSERT_FATAL(it_start_all(90));
    char doc[2048];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\"},"
             "{\"id\":\"calc\",\"type\":\"set\",\"values\":{\"len\":\"len(keys(state.word))\"}},"
             "{\"id\":\"end\",\"type\":\"complete\",\"output\":{\"len\":\"state.len\"}}]}", flow);
    it_import(NULL, doc);
    char *one = instance_at(1), *two = instance_at(1), *three = instance_at(1);
    char *waiting = instance_at(0);

    char path[200];
    snprintf(path, sizeof path, "/v1/definitions/%s/1/pause", flow);
    CU_ASSERT_EQUAL_FATAL(post(path, "{\"reason\":\"bad deploy\"}", NULL), 200);

    /* The fix, while paused: patch-variables runs no step and applies at once. */
    const char *fixes[] = {one, two, three};
    char sid[64];
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(verb(fixes[i], "variables", "\"patch\":{\"word\":{\"a\":1,\"b\":2}}", sid), 202);
        char *o = signal_outcome(sid);
        CU_ASSERT_STRING_EQUAL(o, "applied");
        free(o);
    }
    /* Retry by HTTP: kept, the instance stays failed. */
    CU_ASSERT_EQUAL(verb(one, "retry", "\"reason\":\"INC-1\"", sid), 202);
    expect_kept(sid);
    expect_status(one, "failed");
    /* skip-wait of a live instance: kept, it still waits. */
    CU_ASSERT_EQUAL(verb(waiting, "skip-wait", "\"payload\":{}", sid), 202);
    expect_kept(sid);
    expect_status(waiting, "waiting");

    /* A batch retry over the version's failed instances: its items are sent and kept. */
    char body[600];
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\",\"version\":1,\"status\":\"failed\"},"
             "\"action\":\"retry\",\"args\":{\"reason\":\"INC-1 batch\"}}", flow);
    json_t *job = NULL;
    CU_ASSERT_EQUAL_FATAL(post("/v1/batches", body, &job), 201);
    char batch_id[64];
    snprintf(batch_id, sizeof batch_id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    json_decref(job);
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.batch_jobs WHERE id = '%s'"
             " AND status IN ('completed', 'failed')", batch_id);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 60), 1);
    /* Every item's signal (the one for `one` too: its own retry is still kept) has its
     * outcome recorded; none ran. */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.batch_items b JOIN strand.processed_signals p"
             " ON p.signal_id = b.signal_id WHERE b.job_id = '%s' AND p.outcome = 'buffered'", batch_id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 3, 30), 3);
    for (int i = 0; i < 3; i++) {
        expect_status(fixes[i], "failed");
        CU_ASSERT_EQUAL(audit_count(fixes[i], "retry", "applied"), 0);
    }

    /* Resume: each kept verb applies once, in arrival order. `one` has two retries kept
     * at one expected_version: the first applies, the second is stale. */
    snprintf(path, sizeof path, "/v1/definitions/%s/1/resume", flow);
    CU_ASSERT_EQUAL(post(path, "{}", NULL), 200);
    for (int i = 0; i < 3; i++) {
        /* (it_wait_instance() stops at the failed status the instance still has) */
        snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s'"
                 " AND status = 'completed' AND output->>'len' = '2'", fixes[i]);
        CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND action = 'retry' AND outcome IN ('applied', 'rejected')", one);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, 30), 2);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(audit_count(fixes[i], "retry", "applied"), 1);
    CU_ASSERT_EQUAL(audit_count(one, "retry", "rejected"), 1);
    /* The skipped wait ran into the missing word: it failed, after the resume. */
    json_decref(it_wait_instance(waiting, "failed", 30));
    expect_status(waiting, "failed");
    CU_ASSERT_EQUAL(audit_count(waiting, "skip_wait", "applied"), 1);
    free(one);
    free(two);
    free(three);
    free(waiting);
}

/* An RPC runs the process now: 409 on a paused version, and on a paused instance. */
static void test_rpc(void)
{
    char doc[2048];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"process\",\"name\":\"%s\",\"version\":1,\"queues\":[\"go\"],"
             "\"rpcs\":[{\"name\":\"poke\",\"url\":\"http://127.0.0.1:9/never\"}],"
             "\"start\":[\"hold\"],\"states\":["
             "{\"id\":\"hold\",\"wait_until\":{\"combine\":\"any_of\",\"commands\":["
             "  {\"type\":\"queue\",\"name\":\"go\"}]},\"next\":[\"done\"]},"
             "{\"id\":\"done\",\"complete\":{}}]}", proc);
    it_import(NULL, doc);
    char *id = start(proc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char sql[300], path[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s'"
             " AND status = 'waiting'", id);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 30), 1);
    snprintf(path, sizeof path, "/v1/definitions/%s/1/pause", proc);
    CU_ASSERT_EQUAL_FATAL(post(path, "{}", NULL), 200);
    char rpc[200];
    snprintf(rpc, sizeof rpc, "/v1/instances/%s/rpc/poke", id);
    json_t *out = NULL;
    CU_ASSERT_EQUAL(post(rpc, "{\"input\":{}}", &out), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "code")) ?: "", "definition_version_paused");
    json_decref(out);
    snprintf(path, sizeof path, "/v1/definitions/%s/1/resume", proc);
    CU_ASSERT_EQUAL(post(path, "{}", NULL), 200);

    char sid[64];
    CU_ASSERT_EQUAL(verb(id, "pause", NULL, sid), 202);
    CU_ASSERT_EQUAL(it_wait_number(
        (snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s'"
                  " AND status = 'paused'", id), sql), 1, 30), 1);
    out = NULL;
    CU_ASSERT_EQUAL(post(rpc, "{\"input\":{}}", &out), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "code")) ?: "", "instance_paused");
    json_decref(out);
    free(id);
}

int main(void)
{
    if (!it_init("test_paused_version"))
        return 1;
    snprintf(flow, sizeof flow, "pv-flow-%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(proc, sizeof proc, "pv-proc-%ld-%d", (long)time(NULL), (int)getpid());
    static const it_case_t cases[] = {
        {"the runbook under a paused version: verbs kept, applied once on resume", test_runbook},
        {"an rpc on a paused version or a paused instance answers 409", test_rpc},
    };
    return it_run_suite("paused_version", cases, (int)(sizeof cases / sizeof cases[0]));
}
