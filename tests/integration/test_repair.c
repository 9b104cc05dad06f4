/*
 * test_repair.c - the operator's repair verbs (issue 18; docs/api.md, "Repairing an
 * instance") on the real servers, for a flow, a process and a lifecycle:
 *   - flow: skip-wait of a task (the task is closed), fire-timer, skip-wait of a
 *     signal that fails the next step, patch-variables of the failed instance, retry
 *     from the failed step to completion (history kept); fail then retry (the wait is
 *     opened again), retry from a named step;
 *   - process: patch-variables then fire-timer to completion; skip-wait into a failure,
 *     patch and retry to completion; fail then retry;
 *   - lifecycle: fire-timer (the state's timeout event); fail, retry, then a trigger
 *     moves it; patch-variables and skip-wait answer 409 not_applicable;
 *   - verbs racing, each ordering forced by a row lock the test holds: two verbs with
 *     one expected_version both accepted (the first applies, the executor rejects the
 *     second); a verb and a signal on the same wait (the verb first: the signal kept;
 *     the wake-up before the API's check: 409; the check first, the wake-up first at
 *     the executor: the verb rejected with a StaleSignal notice and an audit row);
 *   - dead letters: a wake-up dead-lettered by a failing write: its payload edited
 *     (PUT /v1/dead-letters/{id}/payload) then replayed; another retried by the retry
 *     verb once the cause is gone; editing a non-signal letter answers 409;
 *   - bad input: 400 and 404 and 409 (version_mismatch, not_applicable) change nothing;
 *   - the verbs over Kafka ingress (COMMAND_TYPE_PATCH_VARIABLES, _SKIP_WAIT), and
 *     strandctl's subcommands.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "strand/proto/strand.pb-c.h"
#include "st_test.h"

static char sfx[48];
static char flow[80], proc[96], life[80], sig_flow[80], race_flow[80];

/* ---- helpers ---------------------------------------------------------------------- */

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

static char *status_of(const char *id)
{
    json_t *inst = get_instance(id);
    char *s = strdup(inst && json_string_value(json_object_get(inst, "status"))
                         ? json_string_value(json_object_get(inst, "status")) : "?");
    json_decref(inst);
    return s;
}

/* Polls until the instance's runtime says it waits with `kind` (NULL: any wait) and
 * returns its state_version, or -1 after 30 s. */
static long long wait_waiting(const char *id, const char *kind)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states WHERE instance_id = '%s'"
             " AND waiting_kind IS NOT NULL %s%s%s", id, kind ? "AND waiting_kind = '" : "", kind ? kind : "",
             kind ? "'" : "");
    char *v = it_wait_text(sql, 30);
    long long out = v ? atoll(v) : -1;
    if (v == NULL)
        fprintf(stderr, "\n    %s never waited on %s\n", id, kind ? kind : "anything");
    free(v);
    return out;
}

/* Polls until the instance's state_version reaches `want` (its first wake-ups ran);
 * returns the last one seen. */
static long long wait_applied(const char *id, long long want)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT state_version FROM strand.runtime_states WHERE instance_id = '%s'", id);
    return it_wait_number(sql, want, 30);
}

/* POSTs a verb with {expected_version: ev, <extra>}; returns the status, *signal_id
 * (if not NULL, 64 bytes) the accepted signal. */
static long post_verb(const char *id, const char *verb, long long ev, const char *extra, char *signal_id)
{
    char path[160], body[2048];
    snprintf(path, sizeof path, "/v1/instances/%s/%s", id, verb);
    snprintf(body, sizeof body, "{\"expected_version\":%lld%s%s}", ev, extra ? "," : "", extra ? extra : "");
    json_t *out = NULL;
    long status = it_http(IT_API, "POST", path, body, &out);
    if (signal_id != NULL)
        snprintf(signal_id, 64, "%s", json_string_value(json_object_get(out, "signal_id")) ?: "");
    if (status != 202 && getenv("REPAIR_TEST_VERBOSE")) {
        char *t = json_dumps(out, JSON_COMPACT);
        fprintf(stderr, "\n    %s %s -> %ld %s\n", verb, id, status, t ? t : "");
        free(t);
    }
    json_decref(out);
    return status;
}

/* The executor's outcome of the verb signal `signal_id` ("applied" / "rejected"),
 * waited for up to 30 s; caller frees. */
static char *outcome_of(const char *signal_id)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT outcome FROM strand.audit_log WHERE detail->>'signal_id' = '%s'"
             " AND outcome IN ('applied', 'rejected')", signal_id);
    char *o = it_wait_text(sql, 30);
    return o ? o : strdup("none");
}

/* A verb at the current version: asserts 202 and returns the executor's outcome
 * (caller frees). */
static char *apply(const char *id, const char *verb, const char *extra)
{
    char sid[64];
    long long ev = version_of(id);
    long status = post_verb(id, verb, ev, extra, sid);
    CU_ASSERT_EQUAL(status, 202);
    if (status != 202)
        return strdup("not accepted");
    return outcome_of(sid);
}

static long long audit_count(const char *id, const char *action, const char *outcome)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND action = '%s' AND outcome = '%s'", id, action, outcome);
    return it_sql_number(sql);
}

static char *start(const char *definition, const char *input, const char *ref)
{
    char body[400];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":%s%s%s%s}", definition, input ? input : "{}",
             ref ? ",\"business_ref\":\"" : "", ref ? ref : "", ref ? "\"" : "");
    json_t *out = NULL;
    long status = it_http(IT_API, "POST", "/v1/instances", body, &out);
    CU_ASSERT_EQUAL(status, 201);
    char *id = status == 201 ? strdup(json_string_value(json_object_get(out, "id")) ?: "") : NULL;
    json_decref(out);
    return id;
}

/* The instance's output member `key` as an integer, after it completed (-1 if not). */
static long long output_int(const char *id, const char *key)
{
    json_t *inst = it_wait_instance(id, "completed", 30);
    long long v = -1;
    if (inst != NULL && json_is_integer(json_object_get(json_object_get(inst, "output"), key)))
        v = (long long)json_integer_value(json_object_get(json_object_get(inst, "output"), key));
    json_decref(inst);
    return v;
}

static void expect_outcome(char *got, const char *want)
{
    CU_ASSERT_STRING_EQUAL(got, want);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "\n    outcome %s, want %s\n", got, want);
    free(got);
}

/* ---- cases -------------------------------------------------------------------------- */

static void test_setup(void)
{
    setenv("STRAND_MAX_ATTEMPTS", "2", 1);   /* dead letters come quickly */
    CU_ASSERT_FATAL(it_start_all(90));
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"ops\"],\"result\":\"approval\"},"
             "{\"id\":\"pause\",\"type\":\"timer\",\"delay\":\"'1h'\"},"
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\"},"
             "{\"id\":\"calc\",\"type\":\"set\",\"values\":{\"len\":\"len(keys(state.word))\"}},"
             "{\"id\":\"end\",\"type\":\"complete\",\"output\":{\"len\":\"state.len\",\"ok\":\"state.approval.ok\"}}]}",
             flow);
    it_import(NULL, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"go\"},"
             "{\"id\":\"end\",\"type\":\"complete\",\"output\":{\"bad\":\"state.go.bad\"}}]}", sig_flow);
    it_import(NULL, doc);
    /* waits for go, then for more: a verb and the signal race to complete the first */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"go\"},"
             "{\"id\":\"more\",\"type\":\"wait_signal\",\"name\":\"more\"},"
             "{\"id\":\"end\",\"type\":\"complete\",\"output\":{\"by\":\"state.go.by\"}}]}", race_flow);
    it_import(NULL, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"process\",\"name\":\"%s\",\"version\":1,\"queues\":[\"go\"],"
             "\"id_reuse_policy\":\"allow_if_previous_failed\","
             "\"attributes\":{\"local\":{\"n\":{\"default\":0}}},\"start\":[\"hold\"],\"states\":["
             "{\"id\":\"hold\",\"wait_until\":{\"combine\":\"any_of\",\"commands\":["
             "  {\"type\":\"timer\",\"delay\":\"'1h'\"},{\"type\":\"queue\",\"name\":\"go\"}]},\"next\":[\"done\"]},"
             "{\"id\":\"done\",\"complete\":{\"n\":\"len(state.n)\"}}]}", proc);
    it_import(NULL, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"lifecycle\",\"name\":\"%s\",\"version\":1,\"env\":\"test\",\"initial\":\"created\","
             "\"states\":[{\"name\":\"created\",\"timeout\":{\"after\":3600000,\"event\":\"expire\"}},"
             "  {\"name\":\"paid\"},{\"name\":\"expired\",\"final\":true}],"
             "\"events\":[\"poke\",\"pay\",\"expire\"],"
             "\"transitions\":[{\"from\":\"created\",\"event\":\"pay\",\"to\":\"paid\"},"
             "  {\"from\":\"created\",\"event\":\"expire\",\"to\":\"expired\"}],"
             "\"transition_route\":\"app\",\"routes\":{\"app\":{\"consumers\":[\"repair-app\"]}}}", life);
    it_import(NULL, doc);
}

/* skip-wait (task), fire-timer, skip-wait (signal) into a failure, patch the failed
 * instance, retry from the failed step: completes. */
static void test_flow_verbs(void)
{
    char *id = start(flow, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT(wait_waiting(id, "task") > 0);
    expect_outcome(apply(id, "skip-wait", "\"payload\":{\"ok\":true}"), "applied");
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE instance_id = '%s' AND status = 'open'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);   /* the skipped task is closed */
    CU_ASSERT(wait_waiting(id, "timer") > 0);
    expect_outcome(apply(id, "fire-timer", NULL), "applied");
    CU_ASSERT(wait_waiting(id, "signal") > 0);
    /* The signal's wait completes; the next step (len of a missing word) fails. */
    expect_outcome(apply(id, "skip-wait", "\"payload\":{}"), "applied");
    json_t *failed = it_wait_instance(id, "failed", 30);
    CU_ASSERT_PTR_NOT_NULL(failed);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(failed, "error"), "step")) ?: "",
                           "/steps/3");
    json_decref(failed);
    expect_outcome(apply(id, "variables", "\"patch\":{\"word\":{\"a\":1,\"b\":2,\"c\":3,\"d\":4},\"junk\":null}"), "applied");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s' AND"
             " action = 'patch_variables' AND outcome = 'applied' AND NOT before->'variables' ? 'word'"
             " AND after->'variables'->'word'->>'d' = '4'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);   /* before and after recorded */
    char *st = status_of(id);
    CU_ASSERT_STRING_EQUAL(st, "failed");     /* a patch alone does not revive it */
    free(st);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'", id);
    long long history_before = it_sql_number(sql);
    expect_outcome(apply(id, "retry", "\"reason\":\"word fixed\""), "applied");
    CU_ASSERT_EQUAL(output_int(id, "len"), 4);
    CU_ASSERT(it_sql_number(sql) > history_before);   /* history kept, and added to */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s' AND kind = 'repair'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 5);
    CU_ASSERT_EQUAL(audit_count(id, "retry", "requested"), 1);
    CU_ASSERT_EQUAL(audit_count(id, "retry", "applied"), 1);
    free(id);
}

/* fail ends the instance with the operator's error and closes its task; retry opens the
 * wait again; retry from a named step. */
static void test_flow_fail_retry(void)
{
    char *id = start(flow, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT(wait_waiting(id, "task") > 0);
    expect_outcome(apply(id, "fail", "\"error\":{\"code\":\"stopped_by_ops\",\"message\":\"bad order\"}"),
                   "applied");
    json_t *failed = it_wait_instance(id, "failed", 30);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(failed, "error"), "code")) ?: "",
                           "stopped_by_ops");
    json_decref(failed);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE instance_id = '%s' AND status = 'open'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    expect_outcome(apply(id, "retry", NULL), "applied");
    CU_ASSERT(wait_waiting(id, "task") > 0);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);   /* the task is open again */
    /* Fail again, then retry from the named step "go": it waits for the signal. */
    expect_outcome(apply(id, "fail", "\"error\":{\"code\":\"again\"}"), "applied");
    json_decref(it_wait_instance(id, "failed", 30));
    expect_outcome(apply(id, "retry", "\"step\":\"go\""), "applied");
    CU_ASSERT(wait_waiting(id, "signal") > 0);
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"name\":\"go\",\"payload\":{}}", NULL), 202);
    json_decref(it_wait_instance(id, "failed", 30));   /* keys() of no word, as designed */
    expect_outcome(apply(id, "variables", "\"patch\":{\"word\":{\"x\":1,\"y\":2}}"), "applied");
    expect_outcome(apply(id, "retry", NULL), "applied");
    CU_ASSERT_EQUAL(output_int(id, "len"), 2);
    free(id);
}

static void test_process_verbs(void)
{
    char ref[80];
    /* patch, then fire the timer of the any_of wait: completes with the patched value */
    snprintf(ref, sizeof ref, "p1-%s", sfx);
    char *id = start(proc, NULL, ref);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT(wait_waiting(id, NULL) > 0);
    expect_outcome(apply(id, "variables", "\"patch\":{\"n\":\"abc\"}"), "applied");
    expect_outcome(apply(id, "fire-timer", NULL), "applied");
    CU_ASSERT_EQUAL(output_int(id, "n"), 3);
    free(id);
    /* skip the wait: the next state's complete fails (len of 0); patch, retry */
    snprintf(ref, sizeof ref, "p2-%s", sfx);
    id = start(proc, NULL, ref);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT(wait_waiting(id, NULL) > 0);
    expect_outcome(apply(id, "skip-wait", "\"payload\":{\"note\":1}"), "applied");
    json_t *failed = it_wait_instance(id, "failed", 30);
    CU_ASSERT_PTR_NOT_NULL(failed);
    json_decref(failed);
    expect_outcome(apply(id, "variables", "\"patch\":{\"n\":\"xy\"}"), "applied");
    expect_outcome(apply(id, "retry", NULL), "applied");
    CU_ASSERT_EQUAL(output_int(id, "n"), 2);
    free(id);
    /* fail, retry: waits again in state hold; retry from a named state */
    snprintf(ref, sizeof ref, "p3-%s", sfx);
    id = start(proc, NULL, ref);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT(wait_waiting(id, NULL) > 0);
    expect_outcome(apply(id, "fail", "\"error\":{\"code\":\"ops\"}"), "applied");
    json_decref(it_wait_instance(id, "failed", 30));
    expect_outcome(apply(id, "retry", NULL), "applied");
    CU_ASSERT(wait_waiting(id, NULL) > 0);
    char path[160];
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    expect_outcome(apply(id, "variables", "\"patch\":{\"n\":\"q\"}"), "applied");
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"name\":\"go\",\"payload\":{}}", NULL), 202);
    CU_ASSERT_EQUAL(output_int(id, "n"), 1);
    free(id);
    snprintf(ref, sizeof ref, "p4-%s", sfx);
    id = start(proc, NULL, ref);
    CU_ASSERT(wait_waiting(id, NULL) > 0);
    expect_outcome(apply(id, "fail", "\"error\":{\"code\":\"ops\"}"), "applied");
    json_decref(it_wait_instance(id, "failed", 30));
    expect_outcome(apply(id, "variables", "\"patch\":{\"n\":\"four\"}"), "applied");
    expect_outcome(apply(id, "retry", "\"step\":\"done\""), "applied");
    CU_ASSERT_EQUAL(output_int(id, "n"), 4);
    free(id);
}

static long trigger(const char *ref, const char *event, const char *rid, json_t **out)
{
    char body[400];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"external_ref\":\"%s\",\"event\":\"%s\","
             "\"request_id\":\"%s\",\"payload\":{}}", life, ref, event, rid);
    return it_http(IT_API, "POST", "/v1/triggers", body, out);
}

static void test_lifecycle_verbs(void)
{
    char ref[80];
    json_t *out = NULL;
    snprintf(ref, sizeof ref, "l1-%s", sfx);
    CU_ASSERT_EQUAL_FATAL(trigger(ref, "poke", "l1-1", &out), 202);
    char id[40];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(out, "instance_id")) ?: "");
    json_decref(out);
    CU_ASSERT(wait_applied(id, 2) >= 2);   /* START, then the (rejected) poke */
    expect_outcome(apply(id, "fire-timer", NULL), "applied");   /* expire: to the final state */
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(done, "output"), "state")) ?: "",
                           "expired");
    json_decref(done);

    snprintf(ref, sizeof ref, "l2-%s", sfx);
    CU_ASSERT_EQUAL_FATAL(trigger(ref, "poke", "l2-1", &out), 202);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(out, "instance_id")) ?: "");
    json_decref(out);
    CU_ASSERT(wait_applied(id, 2) >= 2);   /* START, then the (rejected) poke */
    long long v = version_of(id);
    CU_ASSERT_EQUAL(post_verb(id, "variables", v, "\"patch\":{\"a\":1}", NULL), 409);
    CU_ASSERT_EQUAL(post_verb(id, "skip-wait", v, NULL, NULL), 409);
    expect_outcome(apply(id, "fail", "\"error\":{\"code\":\"lost\"}"), "applied");
    json_decref(it_wait_instance(id, "failed", 30));
    CU_ASSERT_EQUAL(post_verb(id, "retry", version_of(id), "\"step\":\"nowhere\"", NULL), 400);
    expect_outcome(apply(id, "retry", NULL), "applied");
    CU_ASSERT(wait_waiting(id, NULL) > 0);
    char *st = status_of(id);
    CU_ASSERT_STRING_EQUAL(st, "waiting");
    free(st);
    CU_ASSERT_EQUAL(trigger(ref, "pay", "l2-2", NULL), 202);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.runtime_states WHERE instance_id = '%s'"
             " AND snapshot->>'current' = 'paid'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
}

/* ---- verbs racing wake-ups, each ordering forced -------------------------------------
 *
 * The API checks a verb (expected_version, under the instance's row lock) and the
 * executor applies a wake-up or a verb under the same lock: the runtime state, FOR
 * UPDATE. The test holds that lock itself, so whatever comes meanwhile queues behind
 * it, and PostgreSQL grants a row lock to its waiters in the order they queued (the
 * first holds the tuple lock the later ones wait for). Sending the second request only
 * once the first is seen waiting decides which one runs first; no outcome depends on
 * timing. */

/* A verb POSTed in a thread of its own: it may queue behind the test's lock. */
typedef struct {
    const char *id, *verb;
    char extra[128];
    long long ev;
    long status;
    json_t *answer;   /* the answer's body (decref it) */
    char signal_id[64];
    pthread_t th;
} racer_t;

static void *race_verb(void *arg)
{
    racer_t *r = arg;
    char path[160], body[300];
    snprintf(path, sizeof path, "/v1/instances/%s/%s", r->id, r->verb);
    snprintf(body, sizeof body, "{\"expected_version\":%lld%s%s}", r->ev, r->extra[0] ? "," : "", r->extra);
    r->status = it_http(IT_API, "POST", path, body, &r->answer);
    snprintf(r->signal_id, sizeof r->signal_id, "%s",
             json_string_value(json_object_get(r->answer, "signal_id")) ?: "");
    return NULL;
}

static void verb_async(racer_t *r, const char *id, const char *verb, long long ev, const char *extra)
{
    memset(r, 0, sizeof *r);
    r->id = id;
    r->verb = verb;
    r->ev = ev;
    snprintf(r->extra, sizeof r->extra, "%s", extra ? extra : "");
    pthread_create(&r->th, NULL, race_verb, r);
}

/* Joins the thread; returns the status (r->answer stays: decref it). */
static long verb_join(racer_t *r)
{
    pthread_join(r->th, NULL);
    return r->status;
}

/* Posts the signal "go" with {by: "signal"}; asserts 202 and returns its id in `sid`
 * (64 bytes). */
static void send_go(const char *id, char *sid)
{
    char path[160];
    json_t *out = NULL;
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"name\":\"go\",\"payload\":{\"by\":\"signal\"}}", &out), 202);
    snprintf(sid, 64, "%s", json_string_value(json_object_get(out, "signal_id")) ?: "");
    json_decref(out);
}

/* The executor's outcome of signal `sid` (strand.processed_signals: applied, stale,
 * buffered), waited for up to 30 s; caller frees. */
static char *signal_outcome(const char *sid)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT outcome FROM strand.processed_signals WHERE signal_id = '%s'", sid);
    char *o = it_wait_text(sql, 30);
    return o ? o : strdup("none");
}

/* The verb signal `sid` was dropped the documented way: outcome stale, a StaleSignal
 * notice, an audit row "rejected" saying the version moved. */
static void expect_rejected_stale(const char *id, const char *sid)
{
    expect_outcome(outcome_of(sid), "rejected");
    expect_outcome(signal_outcome(sid), "stale");
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND outcome = 'rejected' AND detail->>'signal_id' = '%s'"
             " AND detail->>'why' = 'the signal expected another state version'", id, sid);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices WHERE instance_id = '%s'"
             " AND code = 'StaleSignal' AND signal_id = '%s'", id, sid);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
}

/* The instance's variable `go.by` (who completed the wait on go); caller frees. */
static char *go_by(const char *id)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT snapshot->'state'->'go'->>'by' FROM strand.runtime_states"
             " WHERE instance_id = '%s'", id);
    char *by = it_sql_text(sql);
    return by ? by : strdup("(none)");
}

static void expect_go_by(const char *id, const char *want)
{
    char *got = go_by(id);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "\n    the wait on go was completed by %s, want %s\n", got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    free(got);
}

/* Two verbs with one expected_version, both checked by the API before either applies
 * (both queue behind the test's lock; the executor's wake-up for the first can only
 * come after the second's check): both answer 202, the first applies, the executor
 * rejects the second. Twice: two patches (else the second would overwrite the first),
 * then fire-timer and skip-wait on the timer wait (else the second would skip the next
 * wait too). */
static void test_race_two_verbs(void)
{
    char *id = start(flow, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    long long v = wait_waiting(id, "task");
    it_row_lock_t lock;
    racer_t a, b;
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "runtime_states", "instance_id", id));
    verb_async(&a, id, "variables", v, "\"patch\":{\"who\":\"a\"}");
    int queued = it_wait_queued(&lock, "strand-api", 1);
    verb_async(&b, id, "variables", v, "\"patch\":{\"who\":\"b\"}");
    queued = queued && it_wait_queued(&lock, "strand-api", 2);
    it_unlock_row(&lock);
    CU_ASSERT_EQUAL(verb_join(&a), 202);
    CU_ASSERT_EQUAL(verb_join(&b), 202);
    json_decref(a.answer);
    json_decref(b.answer);
    CU_ASSERT_TRUE(queued);
    expect_outcome(outcome_of(a.signal_id), "applied");
    expect_rejected_stale(id, b.signal_id);
    CU_ASSERT_EQUAL(version_of(id), v + 1);   /* one change, not two */
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT snapshot->'state'->>'who' FROM strand.runtime_states"
             " WHERE instance_id = '%s'", id);
    char *who = it_sql_text(sql);
    CU_ASSERT_STRING_EQUAL(who ? who : "", "a");
    free(who);
    CU_ASSERT_EQUAL(audit_count(id, "patch_variables", "requested"), 2);
    CU_ASSERT_EQUAL(audit_count(id, "patch_variables", "applied"), 1);
    CU_ASSERT_EQUAL(audit_count(id, "patch_variables", "rejected"), 1);

    /* on the timer wait: fire-timer first, skip-wait second */
    expect_outcome(apply(id, "skip-wait", NULL), "applied");
    v = wait_waiting(id, "timer");
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "runtime_states", "instance_id", id));
    verb_async(&a, id, "fire-timer", v, NULL);
    queued = it_wait_queued(&lock, "strand-api", 1);
    verb_async(&b, id, "skip-wait", v, NULL);
    queued = queued && it_wait_queued(&lock, "strand-api", 2);
    it_unlock_row(&lock);
    CU_ASSERT_EQUAL(verb_join(&a), 202);
    CU_ASSERT_EQUAL(verb_join(&b), 202);
    json_decref(a.answer);
    json_decref(b.answer);
    CU_ASSERT_TRUE(queued);
    expect_outcome(outcome_of(a.signal_id), "applied");
    expect_rejected_stale(id, b.signal_id);
    CU_ASSERT_EQUAL(wait_waiting(id, "signal"), v + 1);   /* past the timer once, not twice */
    CU_ASSERT_EQUAL(version_of(id), v + 1);
    free(id);
}

/* A fresh instance of `race_flow` waiting for "go"; its state_version in *v. */
static char *race_instance(long long *v)
{
    char *id = start(race_flow, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    *v = wait_waiting(id, "signal");
    CU_ASSERT_FATAL(*v > 0);
    return id;
}

/* The verb first: skip-wait is checked and enqueued before the signal "go" is sent, so
 * it applies first (one instance's signals apply in order): the wait on go completes
 * with the verb's payload, and the signal, whose wait is gone, is kept for a later
 * wait (outcome buffered, history signal_buffered). One change. */
static void test_race_verb_first(void)
{
    long long v;
    char *id = race_instance(&v), go[64], sid[64];
    CU_ASSERT_EQUAL(post_verb(id, "skip-wait", v, "\"payload\":{\"by\":\"verb\"}", sid), 202);
    send_go(id, go);   /* at once: the REPAIR may not have been applied yet */
    expect_outcome(outcome_of(sid), "applied");
    expect_outcome(signal_outcome(go), "buffered");
    expect_go_by(id, "verb");
    CU_ASSERT_EQUAL(wait_waiting(id, "signal"), v + 1);   /* now waiting for "more" */
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.history WHERE instance_id = '%s'"
             " AND kind = 'signal_buffered'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    CU_ASSERT_EQUAL(version_of(id), v + 1);
    free(id);
}

/* The wake-up applied before the API's check: the signal's wake-up queues behind the
 * test's lock first, the verb's check second. The check finds the version moved: 409
 * version_mismatch with the new state_version; no audit row, nothing enqueued. */
static void test_race_wakeup_before_check(void)
{
    long long v;
    char *id = race_instance(&v), go[64];
    it_row_lock_t lock;
    racer_t r;
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "runtime_states", "instance_id", id));
    send_go(id, go);
    int queued = it_wait_queued(&lock, "strand-executor", 1);
    verb_async(&r, id, "skip-wait", v, "\"payload\":{\"by\":\"verb\"}");
    queued = queued && it_wait_queued(&lock, "strand-api", 1);
    it_unlock_row(&lock);
    long status = verb_join(&r);
    if (status != 409)
        fprintf(stderr, "\n    skip-wait after the wake-up answered %ld, want 409\n", status);
    CU_ASSERT_EQUAL(status, 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r.answer, "code")) ?: "", "version_mismatch");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(r.answer, "state_version")), v + 1);
    json_decref(r.answer);
    CU_ASSERT_TRUE(queued);
    expect_outcome(signal_outcome(go), "applied");
    expect_go_by(id, "signal");
    CU_ASSERT_EQUAL(version_of(id), v + 1);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    free(id);
}

/* The API's check before the wake-up, the wake-up before the verb: the verb's check
 * queues behind the test's lock first (202), the signal's wake-up second, and the
 * REPAIR arrives after the wake-up moved the version. The executor drops it (outcome
 * stale, StaleSignal notice, audit row "rejected" with why); the signal completed the
 * wait, once. */
static void test_race_check_before_wakeup(void)
{
    long long v;
    char *id = race_instance(&v), go[64];
    it_row_lock_t lock;
    racer_t r;
    CU_ASSERT_TRUE_FATAL(it_lock_row(&lock, "runtime_states", "instance_id", id));
    verb_async(&r, id, "skip-wait", v, "\"payload\":{\"by\":\"verb\"}");
    int queued = it_wait_queued(&lock, "strand-api", 1);
    send_go(id, go);
    queued = queued && it_wait_queued(&lock, "strand-executor", 1);
    it_unlock_row(&lock);
    long status = verb_join(&r);
    json_decref(r.answer);
    CU_ASSERT_TRUE(queued);
    CU_ASSERT_EQUAL_FATAL(status, 202);
    expect_outcome(signal_outcome(go), "applied");
    expect_rejected_stale(id, r.signal_id);
    CU_ASSERT_EQUAL(audit_count(id, "skip_wait", "requested"), 1);
    CU_ASSERT_EQUAL(audit_count(id, "skip_wait", "applied"), 0);
    expect_go_by(id, "signal");
    CU_ASSERT_EQUAL(wait_waiting(id, "signal"), v + 1);   /* waiting for "more" */
    CU_ASSERT_EQUAL(version_of(id), v + 1);
    free(id);
}

/* A wake-up that fails on every attempt while the trigger below is in place. */
static void install_failing_write(void)
{
    CU_ASSERT(it_sql_exec(
        "CREATE OR REPLACE FUNCTION public.repair_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'repair test: bad go' USING ERRCODE = 'check_violation'; END $$;"
        "DROP TRIGGER IF EXISTS repair_test_refuse ON strand.runtime_states;"
        "CREATE TRIGGER repair_test_refuse BEFORE UPDATE ON strand.runtime_states FOR EACH ROW"
        " WHEN (NEW.snapshot->'state'->'go'->>'bad' = 'true' OR NEW.snapshot->'input'->>'boom' = 'true') EXECUTE FUNCTION public.repair_test_refuse()"));
}

/* Starts the signal flow and sends go {bad: true}; returns the instance once its wake-up
 * is dead-lettered, with the letter's id in *letter (caller frees both). */
static char *dead_lettered(char **letter)
{
    char *id = start(sig_flow, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT(wait_waiting(id, "signal") > 0);
    char path[160], sql[300];
    snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"name\":\"go\",\"payload\":{\"bad\":true}}", NULL), 202);
    snprintf(sql, sizeof sql, "SELECT last_error->>'dead_letter_id' FROM strand.runtime_states"
             " WHERE instance_id = '%s' AND last_error ? 'dead_letter_id'", id);
    *letter = it_wait_text(sql, 60);
    CU_ASSERT_PTR_NOT_NULL(*letter);
    return id;
}

static void test_dead_letters(void)
{
    install_failing_write();
    char *letter = NULL;
    char *id = dead_lettered(&letter);
    if (letter == NULL) {
        it_sql_exec("DROP TRIGGER IF EXISTS repair_test_refuse ON strand.runtime_states");
        free(id);
        return;
    }
    char path[160], sql[400];
    snprintf(path, sizeof path, "/v1/dead-letters/%s/payload", letter);
    /* bad input changes nothing */
    CU_ASSERT_EQUAL(it_http(IT_API, "PUT", path, "{\"payload\":[1]}", NULL), 400);
    CU_ASSERT_EQUAL(it_http(IT_API, "PUT", path, "{\"payload\":", NULL), 400);
    CU_ASSERT_EQUAL(it_http(IT_API, "PUT", "/v1/dead-letters/999999999/payload", "{\"payload\":{}}", NULL), 404);
    /* edit, then replay: the edited signal is applied */
    json_t *out = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "PUT", path, "{\"payload\":{\"bad\":false}}", &out), 200);
    json_decref(out);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE target = 'dead_letter:%s'"
             " AND action = 'edit_dead_letter' AND before->>'bad' = 'true' AND after->>'bad' = 'false'"
             " AND instance_id = '%s'", letter, id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(path, sizeof path, "/v1/dead-letters/%s/replay", letter);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{}", NULL), 200);
    json_t *done = it_wait_instance(id, "completed", 30);
    CU_ASSERT_PTR_NOT_NULL(done);
    CU_ASSERT(json_is_false(json_object_get(json_object_get(done, "output"), "bad")));
    json_decref(done);
    snprintf(path, sizeof path, "/v1/dead-letters/%s/payload", letter);
    CU_ASSERT_EQUAL(it_http(IT_API, "PUT", path, "{\"payload\":{}}", NULL), 409);   /* not open */
    free(id);
    free(letter);

    /* a dead-lettered control signal (a REPAIR whose patch the failing write refuses)
     * cannot be edited */
    id = start(sig_flow, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT(wait_waiting(id, "signal") > 0);
    CU_ASSERT_EQUAL(post_verb(id, "variables", version_of(id), "\"patch\":{\"go\":{\"bad\":true}}", NULL), 202);
    snprintf(sql, sizeof sql, "SELECT last_error->>'dead_letter_id' FROM strand.runtime_states"
             " WHERE instance_id = '%s' AND last_error ? 'dead_letter_id'", id);
    char *control = it_wait_text(sql, 60);
    CU_ASSERT_PTR_NOT_NULL(control);
    if (control != NULL) {
        snprintf(path, sizeof path, "/v1/dead-letters/%s/payload", control);
        out = NULL;
        CU_ASSERT_EQUAL(it_http(IT_API, "PUT", path, "{\"payload\":{\"verb\":\"fail\"}}", &out), 409);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "code")) ?: "", "not_editable");
        json_decref(out);
    }
    free(control);
    free(id);

    /* retry of a live instance whose wake-up was dead-lettered, once the cause is gone;
     * and of one whose START was (it never ran a step) */
    id = dead_lettered(&letter);
    char *unstarted = start(sig_flow, "{\"boom\":true}", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(unstarted);
    snprintf(sql, sizeof sql, "SELECT last_error->>'dead_letter_id' FROM strand.runtime_states"
             " WHERE instance_id = '%s' AND last_error ? 'dead_letter_id'", unstarted);
    char *start_letter = it_wait_text(sql, 60);
    CU_ASSERT_PTR_NOT_NULL(start_letter);
    if (letter != NULL) {
        long long v = version_of(id);
        CU_ASSERT(it_sql_exec("DROP TRIGGER repair_test_refuse ON strand.runtime_states"));
        char sid[64];
        CU_ASSERT_EQUAL(post_verb(id, "retry", v, "\"reason\":\"trigger dropped\"", sid), 202);
        expect_outcome(outcome_of(sid), "applied");
        done = it_wait_instance(id, "completed", 30);
        CU_ASSERT_PTR_NOT_NULL(done);
        CU_ASSERT(json_is_true(json_object_get(json_object_get(done, "output"), "bad")));
        json_decref(done);
        snprintf(sql, sizeof sql, "SELECT status FROM strand.dead_letters WHERE id = %s", letter);
        char *st = it_sql_text(sql);
        CU_ASSERT_STRING_EQUAL(st ? st : "", "replayed");
        free(st);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s' AND"
                 " action = 'retry' AND outcome = 'applied' AND after->>'redelivered_dead_letter_id' = '%s'",
                 id, letter);
        CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    }
    it_sql_exec("DROP TRIGGER IF EXISTS repair_test_refuse ON strand.runtime_states");
    if (start_letter != NULL) {
        char sid[64];
        CU_ASSERT_EQUAL(post_verb(unstarted, "retry", version_of(unstarted), NULL, sid), 202);
        expect_outcome(outcome_of(sid), "applied");
        CU_ASSERT(wait_waiting(unstarted, "signal") > 0);   /* START ran at last */
    }
    free(unstarted);
    free(start_letter);
    free(id);
    free(letter);

    /* a letter that is not a signal (garbage on the ingress topic): 409 */
    long long before = it_sql_number("SELECT coalesce(max(id), 0) FROM strand.dead_letters");
    CU_ASSERT(it_produce_ingress("not a command", 13));
    snprintf(sql, sizeof sql, "SELECT max(id) FROM strand.dead_letters WHERE id > %lld"
             " AND source_topic LIKE '%%ingress'", before);
    char *other = it_wait_text(sql, 30);
    CU_ASSERT_PTR_NOT_NULL(other);
    if (other != NULL) {
        snprintf(path, sizeof path, "/v1/dead-letters/%s/payload", other);
        out = NULL;
        CU_ASSERT_EQUAL(it_http(IT_API, "PUT", path, "{\"payload\":{}}", &out), 409);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "code")) ?: "", "not_a_signal");
        json_decref(out);
    }
    free(other);
}

/* Bad input: 400 / 404 / 409, and nothing changes (version, audit log). */
static void test_bad_input(void)
{
    char *id = start(flow, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    long long v = wait_waiting(id, "task");
    char path[160], sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'", id);
    snprintf(path, sizeof path, "/v1/instances/%s/variables", id);
    json_t *out = NULL;
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"patch\":{\"a\":1}}", NULL), 400);   /* no expected_version */
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, "{\"expected_version\":\"1\",\"patch\":{}}", NULL), 400);
    CU_ASSERT_EQUAL(post_verb(id, "variables", v, "\"patch\":[1]", NULL), 400);
    CU_ASSERT_EQUAL(post_verb(id, "variables", v, "\"patch\":\"x\"", NULL), 400);
    CU_ASSERT_EQUAL(post_verb(id, "fail", v, "\"error\":{\"message\":\"no code\"}", NULL), 400);
    CU_ASSERT_EQUAL(post_verb(id, "fail", v, NULL, NULL), 400);
    CU_ASSERT_EQUAL(post_verb(id, "skip-wait", v, "\"payload\":5", NULL), 400);
    CU_ASSERT_EQUAL(post_verb(id, "retry", v, "\"step\":7", NULL), 400);
    CU_ASSERT_EQUAL(post_verb("not-a-uuid", "retry", v, NULL, NULL), 400);
    CU_ASSERT_EQUAL(post_verb("00000000-0000-4000-8000-00000000abcd", "retry", 1, NULL, NULL), 404);
    /* 409: a version the instance no longer has, and verbs that do not apply */
    snprintf(path, sizeof path, "/v1/instances/%s/fire-timer", id);
    char body[100];
    snprintf(body, sizeof body, "{\"expected_version\":%lld}", v + 7);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, body, &out), 409);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "code")) ?: "", "version_mismatch");
    json_decref(out);
    out = NULL;
    snprintf(body, sizeof body, "{\"expected_version\":%lld}", v);
    CU_ASSERT_EQUAL(it_http(IT_API, "POST", path, body, &out), 409);   /* waits on a task, no timer */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "code")) ?: "", "not_applicable");
    json_decref(out);
    CU_ASSERT_EQUAL(post_verb(id, "retry", v, NULL, NULL), 409);   /* not failed, nothing dead-lettered */
    CU_ASSERT_EQUAL(post_verb(id, "retry", v, "\"step\":\"nowhere\"", NULL), 409);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);   /* no audit row */
    CU_ASSERT_EQUAL(version_of(id), v);       /* nothing changed */
    /* A completed instance: every verb is 409. */
    expect_outcome(apply(id, "skip-wait", NULL), "applied");
    wait_waiting(id, "timer");
    expect_outcome(apply(id, "variables", "\"patch\":{\"word\":{\"w\":1}}"), "applied");
    expect_outcome(apply(id, "fire-timer", NULL), "applied");
    wait_waiting(id, "signal");
    expect_outcome(apply(id, "skip-wait", NULL), "applied");
    CU_ASSERT_EQUAL(output_int(id, "len"), 1);
    v = version_of(id);
    CU_ASSERT_EQUAL(post_verb(id, "retry", v, NULL, NULL), 409);
    CU_ASSERT_EQUAL(post_verb(id, "variables", v, "\"patch\":{}", NULL), 409);
    CU_ASSERT_EQUAL(post_verb(id, "fail", v, "\"error\":{\"code\":\"x\"}", NULL), 409);
    free(id);
}

/* The verbs over Kafka ingress: COMMAND_TYPE_PATCH_VARIABLES, then _FIRE_TIMER. */
static void test_ingress(void)
{
    char *id = start(flow, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    long long v = wait_waiting(id, "task");
    char args[200];
    snprintf(args, sizeof args, "{\"expected_version\":%lld,\"patch\":{\"via\":\"kafka\"}}", v);
    CU_ASSERT(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_PATCH_VARIABLES, NULL, id, args));
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s' AND"
             " action = 'patch_variables' AND outcome = 'applied' AND after->'variables'->>'via' = 'kafka'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    snprintf(args, sizeof args, "{\"expected_version\":%lld,\"payload\":{}}", v + 1);
    CU_ASSERT(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SKIP_WAIT, NULL, id, args));
    CU_ASSERT(wait_waiting(id, "timer") > 0);
    free(id);
}

/* strandctl's repair subcommands reach the routes. */
static void test_strandctl(void)
{
    char *id = start(flow, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    long long v = wait_waiting(id, "task");
    char args[600], sql[300];
    snprintf(args, sizeof args, "instances patch-variables %s --patch '{\"cli\":1}'", id);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, NULL), 2);   /* --expected-version is required */
    snprintf(args, sizeof args, "instances patch-variables %s --expected-version %lld --patch '{\"cli\":1}'"
             " --reason 'from strandctl'", id, v);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, NULL), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s' AND"
             " action = 'patch_variables' AND outcome = 'applied'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    snprintf(args, sizeof args, "instances skip-wait %s --expected-version %lld --payload '{\"ok\":true}'", id, v + 1);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, NULL), 0);
    CU_ASSERT(wait_waiting(id, "timer") > 0);
    snprintf(args, sizeof args, "instances fire-timer %s --expected-version %lld", id, v + 7);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, NULL), 1);   /* 409 version_mismatch */
    snprintf(args, sizeof args, "instances fire-timer %s --expected-version %lld", id, v + 2);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, NULL), 0);
    CU_ASSERT(wait_waiting(id, "signal") > 0);
    snprintf(args, sizeof args, "instances fail %s --expected-version %lld --code cli_stop --message 'by hand'",
             id, v + 3);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, NULL), 0);
    json_decref(it_wait_instance(id, "failed", 30));
    snprintf(args, sizeof args, "instances retry %s --expected-version %lld --step go", id, v + 4);
    CU_ASSERT_EQUAL(it_strandctl(NULL, args, NULL), 0);
    CU_ASSERT(wait_waiting(id, "signal") > 0);
    CU_ASSERT_EQUAL(it_strandctl(NULL, "dead-letters edit 999999999 --payload '{}'", NULL), 1);   /* 404 */
    free(id);
}

int main(void)
{
    if (!it_init("test_repair"))
        return 1;
    snprintf(sfx, sizeof sfx, "%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(flow, sizeof flow, "repair-flow-%s", sfx);
    snprintf(sig_flow, sizeof sig_flow, "repair-sig-%s", sfx);
    snprintf(proc, sizeof proc, "repair-proc-%s", sfx);
    snprintf(race_flow, sizeof race_flow, "repair-race-%s", sfx);
    snprintf(life, sizeof life, "repair-life-%s", sfx);
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"flow: skip-wait, fire-timer, patch a failed instance, retry to completion", test_flow_verbs},
        {"flow: fail, retry reopens the wait, retry from a named step", test_flow_fail_retry},
        {"process: patch, fire-timer, skip-wait, fail, retry", test_process_verbs},
        {"lifecycle: fire-timer, fail, retry; patch and skip-wait do not apply", test_lifecycle_verbs},
        {"two verbs at one version, both accepted: the executor rejects the second", test_race_two_verbs},
        {"a verb racing a wake-up: the verb first, the signal kept", test_race_verb_first},
        {"a verb racing a wake-up: the wake-up before the check, 409", test_race_wakeup_before_check},
        {"a verb racing a wake-up: the check first, the executor rejects it", test_race_check_before_wakeup},
        {"dead letters: edit then replay; retry redelivers", test_dead_letters},
        {"bad input changes nothing", test_bad_input},
        {"verbs over Kafka ingress", test_ingress},
        {"strandctl's repair subcommands", test_strandctl},
    };
    return it_run_suite("repair", cases, (int)(sizeof cases / sizeof cases[0]));
}
