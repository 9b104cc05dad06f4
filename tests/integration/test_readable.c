/*
 * test_readable.c - everything readable (issue 18, items 3 and 4), on the real
 * servers: a notice is stored as well as published and listed per instance and
 * globally (filters, cursor); the retention run removes old notices and keeps recent
 * ones; task events per task and per instance; audit rows for cancel and terminate
 * (requested by the API, applied or rejected by the executor), dead-letter replay and
 * discard, and the retention run, with the audit:read permission; and stuck
 * detection: an instance waiting on a task whose row was closed behind its back, one
 * whose last wake-up was dead-lettered and one waiting for a signal without a deadline
 * are listed with their reasons, a healthy waiting one is not, the runtime view says
 * the same, and strand-monitor's strand_instances_stuck gauge counts them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/notice.h"
#include "strand/proto/strand.pb-c.h"

#define T_ROOT "readable-root-token-0123456789"   /* admin */
#define T_OPS "readable-ops-token-0123456789"     /* operator */
#define T_VIC "readable-vic-token-0123456789"     /* viewer */
#define T_ALICE "readable-alice-token-0123456789" /* approver (a task role) */
#define T_TESS "readable-tess-token-0123456789"   /* tasks:read only */

static char taskflow[80], sigflow[80];

/* GET `path` with `token`; asserts `want` and returns the body (caller decrefs). */
static json_t *get(const char *token, const char *path, long want)
{
    json_t *body = NULL;
    long got = it_req(IT_API, token, "GET", path, NULL, &body);
    if (got != want) {
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        fprintf(stderr, "\nGET %s: %ld, want %ld: %s\n", path, got, want, text ? text : "");
        free(text);
    }
    CU_ASSERT_EQUAL(got, want);
    return body;
}

/* POST with `token`; asserts `want`; returns the body (caller decrefs). */
static json_t *post(const char *token, const char *path, const char *body, long want)
{
    json_t *out = NULL;
    long got = it_req(IT_API, token, "POST", path, body, &out);
    if (got != want) {
        char *text = out ? json_dumps(out, JSON_COMPACT) : NULL;
        fprintf(stderr, "\nPOST %s: %ld, want %ld: %s\n", path, got, want, text ? text : "");
        free(text);
    }
    CU_ASSERT_EQUAL(got, want);
    return out;
}

static size_t items_count(const json_t *page)
{
    return json_array_size(json_object_get(page, "items"));
}

static const char *item_str(const json_t *page, size_t i, const char *key)
{
    const char *v = json_string_value(json_object_get(json_array_get(json_object_get(page, "items"), i), key));
    return v ? v : "";
}

/* Starts an instance of `def` and waits until it waits (status "waiting"). Caller frees. */
static char *start_waiting(const char *def)
{
    char *id = it_start_instance(T_ROOT, def, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE id = '%s' AND status = 'waiting'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 60), 1);
    return id;
}

/* The stuck entry of `id` in the full stuck list (all pages), as
 * "reason/waiting_kind", or "" when it is not listed. Counts the items with `reason`
 * into *with_reason (NULL: not counted). */
static void stuck_entry(const char *id, char *out, size_t len, const char *reason, long *with_reason)
{
    char path[300] = "/v1/instances/stuck?limit=100";
    out[0] = '\0';
    if (with_reason)
        *with_reason = 0;
    for (int pages = 0; pages < 10000; pages++) {
        json_t *page = get(T_VIC, path, 200);
        if (page == NULL)
            return;
        for (size_t i = 0; i < items_count(page); i++) {
            if (with_reason && strcmp(item_str(page, i, "reason"), reason) == 0)
                (*with_reason)++;
            if (strcmp(item_str(page, i, "instance_id"), id) == 0)
                snprintf(out, len, "%s/%s", item_str(page, i, "reason"), item_str(page, i, "waiting_kind"));
        }
        const char *next = json_string_value(json_object_get(page, "next_cursor"));
        if (next == NULL) {
            json_decref(page);
            return;
        }
        snprintf(path, sizeof path, "/v1/instances/stuck?limit=100&cursor=%s", next);
        json_decref(page);
    }
}

/* The runtime view's stuck reason of `id`, or "null". Caller frees. */
static char *runtime_stuck(const char *id)
{
    char path[200];
    snprintf(path, sizeof path, "/v1/instances/%s/runtime", id);
    json_t *rt = get(T_VIC, path, 200);
    json_t *stuck = json_object_get(rt, "stuck");
    char *out = strdup(json_is_null(stuck) ? "null"
                       : json_string_value(json_object_get(stuck, "reason")) ?: "?");
    json_decref(rt);
    return out;
}

/* Waits until instance `id` has status `want`; asserts it. */
static void wait_status(const char *id, const char *want)
{
    char path[200];
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    const char *got = NULL;
    time_t deadline = time(NULL) + 60;
    json_t *inst = NULL;
    do {
        json_decref(inst);
        inst = NULL;
        it_req(IT_API, T_ROOT, "GET", path, NULL, &inst);
        got = json_string_value(json_object_get(inst, "status"));
        if (got && strcmp(got, want) == 0)
            break;
        usleep(50 * 1000);
    } while (time(NULL) < deadline);
    if (got == NULL || strcmp(got, want) != 0)
        fprintf(stderr, "\ninstance %s is %s, want %s\n", id, got ? got : "?", want);
    CU_ASSERT_STRING_EQUAL(got ? got : "", want);
    json_decref(inst);
}

/* Terminates a leftover instance so that later runs do not list it as stuck. */
static void terminate(const char *id)
{
    char path[200];
    snprintf(path, sizeof path, "/v1/instances/%s/terminate", id);
    json_decref(post(T_ROOT, path, "{}", 202));
    wait_status(id, "terminated");
}

/* Asserts strandctl `args` exits 0 and prints `want`. */
static void expect_ctl(const char *args, const char *want)
{
    char *out = NULL;
    int rc = it_strandctl(T_ROOT, args, &out);
    if (rc != 0 || strstr(out, want) == NULL)
        fprintf(stderr, "\nstrandctl %s: exit %d, want \"%s\" in:\n%s\n", args, rc, want, out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    free(out);
}

/* ---- the cases ---------------------------------------------------------------------- */

static void test_setup(void)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/strand-test-readable-tokens-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"roles\": {\"clerk\": [\"tasks:read\"]}, \"tokens\": ["
               "{\"token\": \"%s\", \"principal\": \"root\", \"roles\": [\"admin\"]},"
               "{\"token\": \"%s\", \"principal\": \"ops\", \"roles\": [\"operator\"]},"
               "{\"token\": \"%s\", \"principal\": \"vic\", \"roles\": [\"viewer\"]},"
               "{\"token\": \"%s\", \"principal\": \"alice\", \"roles\": [\"approver\"]},"
               "{\"token\": \"%s\", \"principal\": \"tess\", \"roles\": [\"clerk\"]}]}",
            T_ROOT, T_OPS, T_VIC, T_ALICE, T_TESS);
    fclose(f);
    setenv("STRAND_AUTH_FILE", path, 1);
    /* stuck at once, counted every second (defaults: 60 s and 60 s) */
    setenv("STRAND_STUCK_GRACE_S", "0", 1);
    setenv("STRAND_STUCK_INTERVAL_S", "1", 1);
    CU_ASSERT_FATAL(it_start_all(90));
    unlink(path);
    char doc[1024];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"approve\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"approver\"]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", taskflow);
    it_import(T_ROOT, doc);
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"hold\",\"type\":\"wait_signal\",\"name\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", sigflow);
    it_import(T_ROOT, doc);
}

/* An ingress command refused (no name for a signal) becomes an IngressRejected notice
 * naming the instance: stored, listed per instance and globally, filtered, paged. */
static char notice_instance[40], notice_letter[24], events_instance[40], events_task[40],
    stale_instance[40];

static void test_notices_listed(void)
{
    char *id = start_waiting(sigflow);
    snprintf(notice_instance, sizeof notice_instance, "%s", id);
    char sql[400], path[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices WHERE instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL, T_ROOT, id, "{}"));
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL, T_ROOT, id,
                                      "{\"name\":\"\"}"));
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, 60), 2);
    /* published as well: two notice rows in the outbox for the instance's key */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE topic = 'notices' AND key = '%s'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);

    snprintf(path, sizeof path, "/v1/instances/%s/notices", id);
    json_t *page = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 2);
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "code"), "IngressRejected");
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "instance_id"), id);
    CU_ASSERT_TRUE(item_str(page, 0, "message")[0] != '\0');
    CU_ASSERT_TRUE(json_is_object(json_object_get(json_array_get(json_object_get(page, "items"), 0), "detail")));
    CU_ASSERT_TRUE(json_is_null(json_object_get(page, "next_cursor")));
    json_decref(page);

    /* globally, filtered by instance and code, one per page */
    snprintf(path, sizeof path, "/v1/notices?instance_id=%s&code=IngressRejected&limit=1", id);
    page = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 1);
    const char *next = json_string_value(json_object_get(page, "next_cursor"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(next);
    long long first = json_integer_value(json_object_get(json_array_get(json_object_get(page, "items"), 0), "id"));
    snprintf(path, sizeof path, "/v1/notices?instance_id=%s&code=IngressRejected&limit=1&cursor=%s", id, next);
    json_decref(page);
    page = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 1);
    long long second = json_integer_value(json_object_get(json_array_get(json_object_get(page, "items"), 0), "id"));
    CU_ASSERT_TRUE(second < first);   /* newest first */
    json_decref(page);
    snprintf(path, sizeof path, "/v1/notices?instance_id=%s&code=StaleSignal", id);
    page = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 0);
    json_decref(page);
    page = get(T_VIC, "/v1/notices?since=2999-01-01T00:00:00Z", 200);
    CU_ASSERT_EQUAL(items_count(page), 0);
    json_decref(page);
    page = get(T_VIC, "/v1/notices?code=IngressRejected&since=2020-01-01", 200);
    CU_ASSERT_TRUE(items_count(page) >= 2);
    json_decref(page);
    /* bad input: a clear 400 */
    json_decref(get(T_VIC, "/v1/notices?since=yesterday-ish", 400));
    json_decref(get(T_VIC, "/v1/notices?instance_id=nope", 400));
    json_decref(get(T_VIC, "/v1/notices?cursor=abc", 400));
    json_decref(get(T_VIC, "/v1/instances/nope/notices", 400));
    /* the global list takes instances:read for every definition */
    json_decref(get(T_TESS, "/v1/notices", 403));
    /* the ingress letter, kept for the audit case */
    snprintf(sql, sizeof sql, "SELECT max(id)::text FROM strand.dead_letters WHERE instance_id = '%s'", id);
    char *letter = it_sql_text(sql);
    CU_ASSERT_PTR_NOT_NULL_FATAL(letter);
    snprintf(notice_letter, sizeof notice_letter, "%s", letter);
    free(letter);
    free(id);
}

/* A notice whose text PostgreSQL would refuse (bytes that are not UTF-8, a NUL inside a
 * detail string, an instance "id" that is no UUID) is stored cleaned: the transaction
 * that raises it (a consumer's, say) must never fail because of it. */
static void test_notice_bad_bytes(void)
{
    PGconn *conn = it_pg_begin();
    json_t *detail = json_pack("{s:o}", "raw", json_stringn("a\0b", 3));
    st_errbuf_t eb;
    st_err_t err = st_notice_add_tx(conn, "ReadableBadBytes", "not-a-uuid\xff", "sig\xc3\x28",
                                    "bad \xff\xfe bytes \xe2\x82", detail, &eb);
    json_decref(detail);
    if (err != ST_OK)
        fprintf(stderr, "\nst_notice_add_tx: %s\n", eb.msg);
    CU_ASSERT_EQUAL(err, ST_OK);
    /* ...and a dead letter whose reason quotes a key cut in the middle of a character */
    st_dead_letter_source_t src = {"readable-bad-bytes", 0, 0, NULL, "sig-\xe2\x82"};
    err = st_dead_letter_add_tx(conn, &src, "unknown field 'caf\xc3'", 1, "test", "x", 1, &eb);
    if (err != ST_OK)
        fprintf(stderr, "\nst_dead_letter_add_tx: %s\n", eb.msg);
    CU_ASSERT_EQUAL(err, ST_OK);
    it_pg_commit(conn);
    char *reason = it_sql_text("SELECT reason || '|' || signal_id FROM strand.dead_letters"
                               " WHERE source_topic = 'readable-bad-bytes' ORDER BY id DESC LIMIT 1");
    CU_ASSERT_STRING_EQUAL(reason ? reason : "", "unknown field 'caf?'|sig-??");
    free(reason);
    json_t *page = get(T_VIC, "/v1/notices?code=ReadableBadBytes&limit=1", 200);
    CU_ASSERT_EQUAL(items_count(page), 1);
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "message"), "bad ?? bytes ??");
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "signal_id"), "sig?(");
    json_t *item = json_array_get(json_object_get(page, "items"), 0);
    CU_ASSERT_TRUE(json_is_null(json_object_get(item, "instance_id")));
    const char *raw = json_string_value(json_object_get(json_object_get(item, "detail"), "raw"));
    CU_ASSERT_STRING_EQUAL(raw ? raw : "", "a\xef\xbf\xbd" "b");   /* U+FFFD for the NUL */
    json_decref(page);

    /* end to end: an ingress command whose target is not UTF-8 is refused with a notice
     * and a dead letter, and the partition moves on (before: the notice's outbox key
     * failed the refusal's transaction, again and again) */
    long long letters = it_sql_number("SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE '%ingress'");
    long long notices = it_sql_number("SELECT count(*) FROM strand.notices WHERE code = 'IngressRejected'"
                                      " AND instance_id IS NULL");
    long long keyed = it_sql_number("SELECT count(*) FROM strand.outbox WHERE topic = 'notices'"
                                    " AND key = 'bad-?" "?-target'");
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL, T_ROOT,
                                      "bad-\xff\xfe-target", "{\"name\":\"go\"}"));
    CU_ASSERT_EQUAL(it_wait_number("SELECT count(*) FROM strand.notices WHERE code = 'IngressRejected'"
                                   " AND instance_id IS NULL", notices + 1, 30), notices + 1);
    CU_ASSERT_EQUAL(it_wait_number("SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE '%ingress'",
                                   letters + 1, 30), letters + 1);
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM strand.outbox WHERE topic = 'notices'"
                                  " AND key = 'bad-?" "?-target'"), keyed + 1);
}

/* The retention run removes notices older than its cutoff and keeps recent ones, and
 * writes an audit row. */
static void test_notice_retention(void)
{
    char *fresh = start_waiting(sigflow);
    char sql[400], path[300];
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL, T_ROOT, fresh, "{}"));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices WHERE instance_id = '%s'", fresh);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 60), 1);
    /* the first case's notices are made two days old */
    snprintf(sql, sizeof sql, "UPDATE strand.notices SET at = now() - interval '2 days' WHERE instance_id = '%s'",
             notice_instance);
    CU_ASSERT_TRUE(it_sql_exec(sql));
    json_t *dry = post(T_ROOT, "/v1/retention/run", "{\"older_than_s\": 3600, \"dry_run\": true}", 200);
    CU_ASSERT_TRUE(json_integer_value(json_object_get(dry, "notices")) >= 2);
    json_decref(dry);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices WHERE instance_id = '%s'", notice_instance);
    CU_ASSERT_EQUAL(it_sql_number(sql), 2);   /* a dry run deletes nothing */
    json_t *run = post(T_ROOT, "/v1/retention/run", "{\"older_than_s\": 3600}", 200);
    long long deleted = json_integer_value(json_object_get(json_object_get(run, "deleted"), "notices"));
    printf("\n  retention run deleted %lld notices\n", deleted);
    CU_ASSERT_TRUE(deleted >= 2);
    json_decref(run);
    snprintf(path, sizeof path, "/v1/instances/%s/notices", notice_instance);
    json_t *page = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 0);
    json_decref(page);
    snprintf(path, sizeof path, "/v1/instances/%s/notices", fresh);
    page = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 1);
    json_decref(page);
    page = get(T_VIC, "/v1/audit?action=retention_run&limit=1", 200);
    CU_ASSERT_EQUAL(items_count(page), 1);
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "actor"), "root");
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "outcome"), "applied");
    json_decref(page);
    terminate(fresh);
    free(fresh);
}

/* Task events, per task and per instance, oldest first. */
static void test_task_events(void)
{
    char *id = start_waiting(taskflow);
    char *task = it_wait_open_task(T_ROOT, id, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    char path[300];
    snprintf(path, sizeof path, "/v1/tasks/%s/assign", task);
    json_decref(post(T_ALICE, path, "{}", 200));
    snprintf(path, sizeof path, "/v1/tasks/%s/complete", task);
    json_decref(post(T_ALICE, path, "{\"result\":{}}", 200));
    wait_status(id, "completed");

    snprintf(path, sizeof path, "/v1/tasks/%s/events", task);
    json_t *page = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 3);
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "kind"), "created");
    CU_ASSERT_STRING_EQUAL(item_str(page, 1, "kind"), "assigned");
    CU_ASSERT_STRING_EQUAL(item_str(page, 1, "actor"), "alice");
    CU_ASSERT_STRING_EQUAL(item_str(page, 2, "kind"), "completed");
    CU_ASSERT_STRING_EQUAL(item_str(page, 2, "task_id"), task);
    json_decref(page);
    snprintf(path, sizeof path, "/v1/instances/%s/task-events?limit=2", id);
    page = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 2);
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "task_name"), "Approve");
    const char *next = json_string_value(json_object_get(page, "next_cursor"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(next);
    snprintf(path, sizeof path, "/v1/instances/%s/task-events?limit=2&cursor=%s", id, next);
    json_decref(page);
    page = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 1);
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "kind"), "completed");
    json_decref(page);
    json_decref(get(T_VIC, "/v1/tasks/00000000-0000-4000-8000-000000000000/events", 404));
    json_decref(get(T_VIC, "/v1/instances/00000000-0000-4000-8000-000000000000/task-events", 404));
    json_decref(get(T_VIC, "/v1/tasks/nope/events", 400));
    snprintf(events_instance, sizeof events_instance, "%s", id);
    snprintf(events_task, sizeof events_task, "%s", task);
    free(task);
    free(id);
}

/* Asserts the audit rows of `id` (newest first): `outcomes` ("applied,requested"), all
 * by `actor` with `action`; the applied row's before/after statuses. */
static void expect_audit(const char *id, const char *action, const char *actor, const char *after_status)
{
    char path[300];
    snprintf(path, sizeof path, "/v1/audit?instance_id=%s", id);
    json_t *page = get(T_OPS, path, 200);
    CU_ASSERT_EQUAL(items_count(page), 2);
    CU_ASSERT_STRING_EQUAL(item_str(page, 0, "outcome"), "applied");
    CU_ASSERT_STRING_EQUAL(item_str(page, 1, "outcome"), "requested");
    for (size_t i = 0; i < 2; i++) {
        CU_ASSERT_STRING_EQUAL(item_str(page, i, "actor"), actor);
        CU_ASSERT_STRING_EQUAL(item_str(page, i, "action"), action);
    }
    json_t *applied = json_array_get(json_object_get(page, "items"), 0);
    const char *before = json_string_value(json_object_get(json_object_get(applied, "before"), "status"));
    const char *after = json_string_value(json_object_get(json_object_get(applied, "after"), "status"));
    CU_ASSERT_STRING_EQUAL(before ? before : "", "waiting");
    CU_ASSERT_STRING_EQUAL(after ? after : "", after_status);
    json_decref(page);
}

/* Cancel and terminate leave "requested" (API) and "applied" (executor) rows with the
 * principal as actor; a cancel that finds the instance ended is "rejected". */
static void test_audit_cancel_terminate(void)
{
    char *a = start_waiting(sigflow), *b = start_waiting(sigflow);
    char path[300], sql[300];
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", a);
    json_decref(post(T_OPS, path, "{\"reason\":\"test\"}", 202));
    snprintf(path, sizeof path, "/v1/instances/%s/terminate", b);
    json_decref(post(T_ROOT, path, "{}", 202));
    wait_status(a, "cancelled");
    wait_status(b, "terminated");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'", a);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, 30), 2);
    expect_audit(a, "cancel", "ops", "cancelled");
    expect_audit(b, "terminate", "root", "terminated");
    /* filters */
    json_t *page = get(T_VIC, "/v1/audit?actor=ops&action=cancel&outcome=requested&limit=500", 200);
    int seen = 0;
    for (size_t i = 0; i < items_count(page); i++)
        seen += strcmp(item_str(page, i, "instance_id"), a) == 0;
    CU_ASSERT_EQUAL(seen, 1);
    json_decref(page);
    /* two cancels the API accepts while the executor is away: the first applies, the
     * second finds the instance ended and is rejected (audit row and StaleSignal) */
    char *c = start_waiting(sigflow);
    CU_ASSERT_EQUAL(it_stop(IT_EXECUTOR, SIGTERM, 30), 0);
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", c);
    json_decref(post(T_OPS, path, "{}", 202));
    json_decref(post(T_OPS, path, "{}", 202));
    CU_ASSERT_FATAL(it_start(IT_EXECUTOR) > 0);
    CU_ASSERT_TRUE(it_wait_http(IT_EXECUTOR, "/readyz", 200, 60));
    wait_status(c, "cancelled");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'"
             " AND outcome = 'rejected' AND actor = 'ops' AND action = 'cancel'", c);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE instance_id = '%s'", c);
    CU_ASSERT_EQUAL(it_sql_number(sql), 4);   /* requested x2, applied, rejected */
    snprintf(path, sizeof path, "/v1/instances/%s/notices?code=StaleSignal", c);
    snprintf(stale_instance, sizeof stale_instance, "%s", c);
    json_t *stale = get(T_VIC, path, 200);
    CU_ASSERT_EQUAL(items_count(stale), 1);
    json_decref(stale);
    /* reading the audit log takes audit:read */
    json_decref(get(T_TESS, "/v1/audit", 403));
    json_decref(get(T_VIC, "/v1/audit?instance_id=nope", 400));
    free(a);
    free(b);
    free(c);
}

/* Dead-letter replay and discard are audited with the letter as target. */
static void test_audit_dead_letters(void)
{
    char sql[600], path[200];
    /* a letter on the (unconsumed) notices topic replays harmlessly */
    snprintf(sql, sizeof sql,
             "INSERT INTO strand.dead_letters (source_topic, source_partition, source_offset,"
             " instance_id, reason, attempts, node_id, payload) VALUES ('%snotices', 0, 0, '%s',"
             " 'test letter', 1, 'test', '\\x00') RETURNING id", it_topic_prefix(), notice_instance);
    char *replayed = it_sql_text(sql);
    CU_ASSERT_PTR_NOT_NULL_FATAL(replayed);
    snprintf(path, sizeof path, "/v1/dead-letters/%s/replay", replayed);
    json_decref(post(T_OPS, path, "{}", 200));
    snprintf(path, sizeof path, "/v1/dead-letters/%s/discard", notice_letter);
    json_decref(post(T_OPS, path, "{}", 200));
    json_t *page = get(T_OPS, "/v1/audit?actor=ops&limit=10", 200);
    char want_replay[64], want_discard[64];
    snprintf(want_replay, sizeof want_replay, "dead_letter:%s", replayed);
    snprintf(want_discard, sizeof want_discard, "dead_letter:%s", notice_letter);
    int replay_seen = 0, discard_seen = 0;
    for (size_t i = 0; i < items_count(page); i++) {
        if (strcmp(item_str(page, i, "target"), want_replay) == 0) {
            replay_seen++;
            CU_ASSERT_STRING_EQUAL(item_str(page, i, "action"), "dead_letter_replay");
            CU_ASSERT_STRING_EQUAL(item_str(page, i, "instance_id"), notice_instance);
        }
        if (strcmp(item_str(page, i, "target"), want_discard) == 0) {
            discard_seen++;
            CU_ASSERT_STRING_EQUAL(item_str(page, i, "action"), "dead_letter_discard");
            CU_ASSERT_STRING_EQUAL(item_str(page, i, "outcome"), "applied");
        }
    }
    CU_ASSERT_EQUAL(replay_seen, 1);
    CU_ASSERT_EQUAL(discard_seen, 1);
    json_decref(page);
    /* a refused replay (not open any more) writes nothing */
    snprintf(path, sizeof path, "/v1/dead-letters/%s/replay", replayed);
    json_decref(post(T_OPS, path, "{}", 409));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE target = 'dead_letter:%s'", replayed);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    free(replayed);
}

/* Stuck detection: deliberately stuck instances are listed with their reasons, a
 * healthy waiting one is not; the runtime view and the monitor's gauge agree. */
static void test_stuck(void)
{
    char *healthy = start_waiting(taskflow), *orphan = start_waiting(taskflow),
         *failed = start_waiting(taskflow), *signal = start_waiting(sigflow);
    char *task = it_wait_open_task(T_ROOT, orphan, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(task);
    free(task);
    task = it_wait_open_task(T_ROOT, failed, 30);
    free(task);
    char sql[600], entry[128];
    /* the task row closed behind the instance's back: nothing can wake it */
    snprintf(sql, sizeof sql, "UPDATE strand.tasks SET status = 'cancelled' WHERE instance_id = '%s'", orphan);
    CU_ASSERT_TRUE(it_sql_exec(sql));
    /* its last wake-up dead-lettered (as st_wakeup_failed_tx records it) */
    snprintf(sql, sizeof sql,
             "UPDATE strand.runtime_states SET last_error_code = 'wakeup_dead_lettered',"
             " last_error = jsonb_build_object('code', 'wakeup_dead_lettered', 'message', 'test',"
             " 'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
             " 'dead_letter_id', 1) WHERE instance_id = '%s'", failed);
    CU_ASSERT_TRUE(it_sql_exec(sql));

    long no_wakeup = 0;
    stuck_entry(orphan, entry, sizeof entry, "no_pending_wakeup", &no_wakeup);
    CU_ASSERT_STRING_EQUAL(entry, "no_pending_wakeup/task");
    stuck_entry(failed, entry, sizeof entry, NULL, NULL);
    CU_ASSERT_STRING_EQUAL(entry, "last_wakeup_failed/task");
    stuck_entry(signal, entry, sizeof entry, NULL, NULL);
    CU_ASSERT_STRING_EQUAL(entry, "signal_without_deadline/signal");
    stuck_entry(healthy, entry, sizeof entry, NULL, NULL);
    CU_ASSERT_STRING_EQUAL(entry, "");

    char *r = runtime_stuck(orphan);
    CU_ASSERT_STRING_EQUAL(r, "no_pending_wakeup");
    free(r);
    r = runtime_stuck(failed);
    CU_ASSERT_STRING_EQUAL(r, "last_wakeup_failed");
    free(r);
    r = runtime_stuck(healthy);
    CU_ASSERT_STRING_EQUAL(r, "null");
    free(r);

    /* a pending instance whose START was dead-lettered is stuck too; a pending one
     * without an error is not (its START is on its way) */
    char *pending = start_waiting(sigflow);
    snprintf(sql, sizeof sql, "UPDATE strand.instances SET status = 'pending' WHERE id = '%s'", pending);
    CU_ASSERT_TRUE(it_sql_exec(sql));
    stuck_entry(pending, entry, sizeof entry, NULL, NULL);
    CU_ASSERT_STRING_EQUAL(entry, "");
    snprintf(sql, sizeof sql,
             "UPDATE strand.runtime_states SET last_error_code = 'wakeup_dead_lettered',"
             " last_error = '{\"code\": \"wakeup_dead_lettered\"}' WHERE instance_id = '%s'", pending);
    CU_ASSERT_TRUE(it_sql_exec(sql));
    stuck_entry(pending, entry, sizeof entry, NULL, NULL);
    CU_ASSERT_STRING_EQUAL(entry, "last_wakeup_failed/signal");
    terminate(pending);
    free(pending);

    /* the filter */
    json_t *page = get(T_VIC, "/v1/instances/stuck?reason=last_wakeup_failed&limit=500", 200);
    int seen = 0;
    for (size_t i = 0; i < items_count(page); i++) {
        CU_ASSERT_STRING_EQUAL(item_str(page, i, "reason"), "last_wakeup_failed");
        seen += strcmp(item_str(page, i, "instance_id"), failed) == 0;
    }
    CU_ASSERT_EQUAL(seen, 1);
    json_decref(page);
    /* pages: one per page, each cursor moves on */
    page = get(T_VIC, "/v1/instances/stuck?limit=1", 200);
    const char *next = json_string_value(json_object_get(page, "next_cursor"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(next);
    char first[40], path2[200];
    snprintf(first, sizeof first, "%s", item_str(page, 0, "instance_id"));
    snprintf(path2, sizeof path2, "/v1/instances/stuck?limit=1&cursor=%s", next);
    json_decref(page);
    page = get(T_VIC, path2, 200);
    CU_ASSERT_EQUAL(items_count(page), 1);
    CU_ASSERT_STRING_NOT_EQUAL(item_str(page, 0, "instance_id"), first);
    json_decref(page);
    json_decref(get(T_VIC, "/v1/instances/stuck?reason=bored", 400));
    json_decref(get(T_VIC, "/v1/instances/stuck?cursor=12_nope", 400));
    json_decref(get(T_TESS, "/v1/instances/stuck", 403));

    /* the gauge (counted every second here) reaches what the list says */
    double gauge = -1;
    long listed = 0;
    time_t deadline = time(NULL) + 30;
    do {
        stuck_entry(orphan, entry, sizeof entry, "no_pending_wakeup", &listed);
        gauge = it_metric(IT_MONITOR, "strand_instances_stuck{reason=\"no_pending_wakeup\"}", -1);
        if (gauge == (double)listed && listed >= 1)
            break;
        usleep(300 * 1000);
    } while (time(NULL) < deadline);
    printf("\n  strand_instances_stuck{reason=\"no_pending_wakeup\"} = %.0f, listed %ld\n", gauge, listed);
    CU_ASSERT_TRUE(listed >= 1);
    CU_ASSERT_EQUAL(gauge, (double)listed);
    CU_ASSERT_TRUE(it_metric(IT_MONITOR, "strand_instances_stuck{reason=\"last_wakeup_failed\"}", -1) >= 1);

    /* strandctl's read-back commands */
    char args[300];
    expect_ctl("instances stuck --reason last_wakeup_failed --limit 500", failed);
    snprintf(args, sizeof args, "--json instances runtime %s", orphan);
    expect_ctl(args, "no_pending_wakeup");
    expect_ctl("audit list --actor ops --action cancel", "cancel");
    snprintf(args, sizeof args, "notices list --instance-id %s", stale_instance);
    expect_ctl(args, "StaleSignal");
    snprintf(args, sizeof args, "instances notices %s --code StaleSignal", stale_instance);
    expect_ctl(args, "StaleSignal");
    snprintf(args, sizeof args, "instances task-events %s", events_instance);
    expect_ctl(args, "completed");
    snprintf(args, sizeof args, "tasks events %s", events_task);
    expect_ctl(args, "assigned");

    /* the healthy one becomes stuck too once its task is gone; an ended one never is */
    snprintf(sql, sizeof sql, "UPDATE strand.tasks SET status = 'completed' WHERE instance_id = '%s'", healthy);
    CU_ASSERT_TRUE(it_sql_exec(sql));
    r = runtime_stuck(healthy);
    CU_ASSERT_STRING_EQUAL(r, "no_pending_wakeup");
    free(r);
    terminate(orphan);
    stuck_entry(orphan, entry, sizeof entry, NULL, NULL);
    CU_ASSERT_STRING_EQUAL(entry, "");
    terminate(healthy);
    terminate(failed);
    terminate(signal);
    terminate(notice_instance);
    free(healthy);
    free(orphan);
    free(failed);
    free(signal);
}

int main(void)
{
    if (!it_init("test_readable"))
        return 1;
    char suffix[48];
    snprintf(suffix, sizeof suffix, "%ld-%d", (long)time(NULL), (int)getpid());
    snprintf(taskflow, sizeof taskflow, "readable-task-%s", suffix);
    snprintf(sigflow, sizeof sigflow, "readable-signal-%s", suffix);
    static const it_case_t cases[] = {
        {"setup", test_setup},
        {"a notice is stored and listed per instance and globally", test_notices_listed},
        {"a notice with bytes PostgreSQL refuses is stored cleaned", test_notice_bad_bytes},
        {"the retention run removes old notices, keeps recent ones", test_notice_retention},
        {"task events per task and per instance", test_task_events},
        {"audit rows for cancel and terminate", test_audit_cancel_terminate},
        {"audit rows for dead-letter replay and discard", test_audit_dead_letters},
        {"stuck instances listed with their reasons, healthy ones not", test_stuck},
    };
    return it_run_suite("readable", cases, sizeof cases / sizeof cases[0]);
}
