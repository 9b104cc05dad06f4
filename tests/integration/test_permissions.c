/*
 * test_permissions.c - roles grant permissions, every route needs one (issue 21).
 *
 * Generated from docs/openapi.json: every documented route (method + path) must have
 * an expectation below (the permission it needs, a request that reaches it with ids
 * that do not exist); a route added to the API without one fails here. Then, against
 * the real API, a principal holding exactly one permission gets a non-403 answer on
 * the routes that permission covers (a 404 after authorisation counts as allowed) and
 * 403 naming the missing permission (`required_permission`) everywhere else; a token
 * with no roles gets 403 everywhere, the admin nowhere. Grants limited to a definition
 * ("instances:start@A") or an ACK consumer ("acks:send:billing") are checked on path
 * names, bodies, list filters and instance and task ids, and the Kafka ingress applies
 * the same rules to the token in its envelope. A definition whose subworkflow steps
 * start another definition needs instances:start on that one to be imported, and its
 * importer still needs it when the child starts (the executor reads the token file too
 * and reloads it on SIGHUP).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/proto/strand.pb-c.h"

#define ZERO_ID "00000000-0000-4000-8000-000000000000"
#define T_ADMIN "perm-admin-token-0123456789"
#define T_NOTHING "perm-nothing-token-0123456789"
#define T_SCOPED "perm-scoped-token-0123456789"
/* definitions:write, definitions:read and instances:start on A only */
#define T_IMP_A "perm-imp-a-token-0123456789"
/* the same and instances:start on B, until the token file is rewritten without it */
#define T_IMP_AB "perm-imp-ab-token-0123456789"

/* Every permission, in the order of the tokens "perm-<i>-token-0123456789". */
static const char *const perms[] = {
    "definitions:read", "definitions:write", "instances:read", "instances:start",
    "instances:signal", "instances:operate", "instances:terminate", "tasks:read", "tasks:act",
    "acks:send", "dead-letters:read", "dead-letters:operate", "triggers:send", "audit:read",
    "admin",
};
#define NPERMS (sizeof perms / sizeof perms[0])

/* What each documented route needs, and a request that reaches it. perm NULL: public. */
static const struct {
    const char *method, *route, *perm, *path, *body;
} expect[] = {
    {"GET", "/healthz", NULL, "/healthz", NULL},
    {"GET", "/readyz", NULL, "/readyz", NULL},
    {"GET", "/metrics", NULL, "/metrics", NULL},
    {"GET", "/v1/openapi.json", NULL, "/v1/openapi.json", NULL},
    {"GET", "/v1/schema/definition", "definitions:read", "/v1/schema/definition", NULL},
    {"POST", "/v1/definitions/validate", "definitions:read", "/v1/definitions/validate", "{}"},
    {"GET", "/v1/definitions", "definitions:read", "/v1/definitions", NULL},
    {"GET", "/v1/definitions/{name}", "definitions:read", "/v1/definitions/no_such_def_perm", NULL},
    {"GET", "/v1/definitions/{name}/{version}", "definitions:read",
     "/v1/definitions/no_such_def_perm/1", NULL},
    {"GET", "/v1/definitions/{name}/{version}/diagram.svg", "definitions:read",
     "/v1/definitions/no_such_def_perm/1/diagram.svg", NULL},
    {"POST", "/v1/definitions", "definitions:write", "/v1/definitions", "{}"},
    {"GET", "/v1/instances", "instances:read", "/v1/instances?limit=1", NULL},
    {"GET", "/v1/instances/{id}", "instances:read", "/v1/instances/" ZERO_ID, NULL},
    {"GET", "/v1/instances/{id}/history", "instances:read", "/v1/instances/" ZERO_ID "/history", NULL},
    {"GET", "/v1/instances/{id}/runtime", "instances:read", "/v1/instances/" ZERO_ID "/runtime", NULL},
    {"POST", "/v1/instances", "instances:start", "/v1/instances", "{\"definition\":\"no_such_def_perm\"}"},
    {"POST", "/v1/instances/{id}/signals", "instances:signal", "/v1/instances/" ZERO_ID "/signals",
     "{\"name\":\"x\"}"},
    {"POST", "/v1/instances/{id}/rpc/{name}", "instances:signal", "/v1/instances/" ZERO_ID "/rpc/x", "{}"},
    {"POST", "/v1/signals", "instances:signal", "/v1/signals",
     "{\"business_ref\":\"no-such-ref-perm\",\"name\":\"x\"}"},
    {"POST", "/v1/instances/{id}/cancel", "instances:operate", "/v1/instances/" ZERO_ID "/cancel", "{}"},
    {"POST", "/v1/instances/{id}/terminate", "instances:terminate",
     "/v1/instances/" ZERO_ID "/terminate", "{}"},
    {"GET", "/v1/tasks", "tasks:read", "/v1/tasks?limit=1", NULL},
    {"GET", "/v1/tasks/{id}", "tasks:read", "/v1/tasks/" ZERO_ID, NULL},
    {"POST", "/v1/tasks/{id}/assign", "tasks:act", "/v1/tasks/" ZERO_ID "/assign", "{}"},
    {"POST", "/v1/tasks/{id}/release", "tasks:act", "/v1/tasks/" ZERO_ID "/release", "{}"},
    {"POST", "/v1/tasks/{id}/complete", "tasks:act", "/v1/tasks/" ZERO_ID "/complete", "{\"result\":{}}"},
    {"POST", "/v1/acks", "acks:send", "/v1/acks",
     "{\"ack_guid\":\"" ZERO_ID "\",\"consumer\":\"billing\",\"stage\":\"delivered\"}"},
    {"GET", "/v1/dead-letters", "dead-letters:read", "/v1/dead-letters?limit=1", NULL},
    {"GET", "/v1/dead-letters/{id}", "dead-letters:read", "/v1/dead-letters/999999999", NULL},
    {"POST", "/v1/dead-letters/{id}/replay", "dead-letters:operate", "/v1/dead-letters/999999999/replay", "{}"},
    {"POST", "/v1/dead-letters/{id}/discard", "dead-letters:operate",
     "/v1/dead-letters/999999999/discard", "{}"},
    {"POST", "/v1/triggers", "triggers:send", "/v1/triggers",
     "{\"definition\":\"no_such_def_perm\",\"external_ref\":\"x\",\"event\":\"e\"}"},
    {"POST", "/v1/retention/run", "admin", "/v1/retention/run",
     "{\"older_than_days\":36500,\"dry_run\":true}"},
    {"POST", "/v1/batches", "instances:operate", "/v1/batches", "{}"},
    {"GET", "/v1/batches", "instances:read", "/v1/batches?limit=1", NULL},
    {"GET", "/v1/batches/{id}", "instances:read", "/v1/batches/" ZERO_ID, NULL},
    {"POST", "/v1/batches/{id}/cancel", "instances:operate", "/v1/batches/" ZERO_ID "/cancel", "{}"},
    /* repair verbs (services/api/repair.c) */
    {"POST", "/v1/instances/{id}/retry", "instances:operate", "/v1/instances/" ZERO_ID "/retry",
     "{\"expected_version\":0}"},
    {"POST", "/v1/instances/{id}/fail", "instances:terminate", "/v1/instances/" ZERO_ID "/fail",
     "{\"expected_version\":0,\"error\":{\"code\":\"x\"}}"},
    {"POST", "/v1/instances/{id}/variables", "instances:operate", "/v1/instances/" ZERO_ID "/variables",
     "{\"expected_version\":0,\"patch\":{}}"},
    {"POST", "/v1/instances/{id}/fire-timer", "instances:operate", "/v1/instances/" ZERO_ID "/fire-timer",
     "{\"expected_version\":0}"},
    {"POST", "/v1/instances/{id}/skip-wait", "instances:operate", "/v1/instances/" ZERO_ID "/skip-wait",
     "{\"expected_version\":0}"},
    {"PUT", "/v1/dead-letters/{id}/payload", "dead-letters:operate", "/v1/dead-letters/999999999/payload",
     "{\"payload\":{}}"},
    /* ---- pause ---- */
    {"POST", "/v1/instances/{id}/pause", "instances:operate", "/v1/instances/" ZERO_ID "/pause",
     "{\"expected_version\":0}"},
    {"POST", "/v1/instances/{id}/resume", "instances:operate", "/v1/instances/" ZERO_ID "/resume",
     "{\"expected_version\":0}"},
    {"POST", "/v1/instances/{id}/rewind", "instances:operate", "/v1/instances/" ZERO_ID "/rewind",
     "{\"expected_version\":2,\"to_version\":1}"},
    {"POST", "/v1/definitions/{name}/{version}/pause", "instances:operate",
     "/v1/definitions/no_such_def_perm/1/pause", "{}"},
    {"POST", "/v1/definitions/{name}/{version}/resume", "instances:operate",
     "/v1/definitions/no_such_def_perm/1/resume", "{}"},
    /* ---- readable ---- */
    {"GET", "/v1/instances/stuck", "instances:read", "/v1/instances/stuck?limit=1", NULL},
    {"GET", "/v1/notices", "instances:read", "/v1/notices?limit=1", NULL},
    {"GET", "/v1/instances/{id}/notices", "instances:read", "/v1/instances/" ZERO_ID "/notices", NULL},
    {"GET", "/v1/tasks/{id}/events", "tasks:read", "/v1/tasks/" ZERO_ID "/events", NULL},
    {"GET", "/v1/instances/{id}/task-events", "instances:read",
     "/v1/instances/" ZERO_ID "/task-events", NULL},
    {"GET", "/v1/audit", "audit:read", "/v1/audit?limit=1", NULL},
    /* ---- console (issue 19): the web console's static pages and its reads ---- */
    {"GET", "/ui", NULL, "/ui/", NULL},
    {"GET", "/ui/{p1}", NULL, "/ui/instances", NULL},
    {"GET", "/ui/{p1}/{p2}", NULL, "/ui/instances/" ZERO_ID, NULL},
    {"GET", "/ui/{p1}/{p2}/{p3}", NULL, "/ui/definitions/no_such_def_perm/1", NULL},
    {"GET", "/ui/{p1}/{p2}/{p3}/{p4}", NULL, "/ui/a/b/c/d", NULL},
    {"GET", "/v1/whoami", NULL, "/v1/whoami", NULL},
    {"GET", "/v1/overview", "instances:read", "/v1/overview", NULL},
    {"GET", "/v1/instance-counts", "instances:read", "/v1/instance-counts", NULL},
    {"GET", "/v1/instances/{id}/family", "instances:read", "/v1/instances/" ZERO_ID "/family", NULL},
};
#define NEXPECT (sizeof expect / sizeof expect[0])

static char def_a[64], def_b[64];
static char token_path[256];
static pid_t api_pid, executor_pid;

/* A 403 that names `perm` as the missing permission. */
static int forbidden_for(long status, json_t *p, const char *perm)
{
    return status == 403 &&
           strcmp(json_string_value(json_object_get(p, "code")) ?: "", "forbidden") == 0 &&
           strcmp(json_string_value(json_object_get(p, "required_permission")) ?: "", perm) == 0;
}

/* Expects 403 naming `perm` (perm NULL: any 2xx-4xx answer but 401 and 403). */
static void expect_answer(const char *token, const char *method, const char *path,
                          const char *body, const char *perm)
{
    json_t *p = NULL;
    long got = it_req(IT_API, token, method, path, body, &p);
    int ok = perm ? forbidden_for(got, p, perm) : got >= 200 && got < 500 && got != 401 && got != 403;
    if (!ok)
        fprintf(stderr, "\n%s %s: got %ld (%s), want %s\n", method, path, got,
                json_string_value(json_object_get(p, "required_permission")) ?: "-",
                perm ? perm : "allowed");
    CU_ASSERT_TRUE(ok);
    json_decref(p);
}

/* Writes the token file (a new file renamed over the old one, as docs/api.md says);
 * `imp_ab_starts_b`: the principal imp_ab holds instances:start@B. Returns 1 if done. */
static int write_tokens(int imp_ab_starts_b)
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.new", token_path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return 0;
    fprintf(f, "{\"roles\": {");
    for (size_t i = 0; i < NPERMS; i++)
        if (strcmp(perms[i], "admin") != 0)
            fprintf(f, "\"only-%zu\": [\"%s\"], ", i, perms[i]);
    fprintf(f, "\"scoped\": [\"definitions:read@%s\", \"instances:read@%s\", \"instances:start@%s\","
               " \"tasks:read@%s\", \"acks:send:billing\"],", def_a, def_a, def_a, def_a);
    fprintf(f, "\"importer-a\": [\"definitions:write@%s\", \"definitions:read@%s\", \"instances:start@%s\"],"
               "\"starter-b\": [\"instances:start@%s\"]},", def_a, def_a, def_a, def_b);
    fprintf(f, "\"tokens\": [");
    for (size_t i = 0; i < NPERMS; i++) {
        char role[32];
        snprintf(role, sizeof role, strcmp(perms[i], "admin") == 0 ? "admin" : "only-%zu", i);
        fprintf(f, "{\"token\": \"perm-%zu-token-0123456789\", \"principal\": \"p%zu\", \"roles\": "
                   "[\"%s\"]}, ", i, i, role);
    }
    fprintf(f, "{\"token\": \"%s\", \"principal\": \"root\", \"roles\": [\"admin\"]},"
               "{\"token\": \"%s\", \"principal\": \"nobody\", \"roles\": []},"
               "{\"token\": \"%s\", \"principal\": \"scoped\", \"roles\": [\"scoped\"]},"
               "{\"token\": \"%s\", \"principal\": \"imp_a\", \"roles\": [\"importer-a\"]},"
               "{\"token\": \"%s\", \"principal\": \"imp_ab\", \"roles\": [\"importer-a\"%s]}]}",
            T_ADMIN, T_NOTHING, T_SCOPED, T_IMP_A, T_IMP_AB, imp_ab_starts_b ? ", \"starter-b\"" : "");
    return fclose(f) == 0 && rename(tmp, token_path) == 0;
}

static void test_start_services(void)
{
    snprintf(def_a, sizeof def_a, "perm_a_%d", (int)getpid());
    snprintf(def_b, sizeof def_b, "perm_b_%d", (int)getpid());
    snprintf(token_path, sizeof token_path, "/tmp/strand-test-perm-tokens-%d.json", (int)getpid());
    CU_ASSERT_FATAL(write_tokens(1));
    /* Both read the file (the executor checks a subworkflow's child start against it);
     * it stays until the end, when the last cases rewrite it. */
    setenv("STRAND_AUTH_FILE", token_path, 1);
    CU_ASSERT_FATAL((api_pid = it_start(IT_API)) > 0);
    CU_ASSERT_FATAL((executor_pid = it_start(IT_EXECUTOR)) > 0);
    CU_ASSERT_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
    CU_ASSERT_FATAL(it_wait_http(IT_EXECUTOR, "/readyz", 200, 60));
    /* Two definitions whose instances wait in a task. */
    const char *defs[] = {def_a, def_b};
    for (int i = 0; i < 2; i++) {
        char doc[600];
        snprintf(doc, sizeof doc,
                 "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
                 "{\"id\":\"t\",\"type\":\"task\",\"name\":\"T\",\"roles\":[\"approver\"]},"
                 "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", defs[i]);
        CU_ASSERT_EQUAL_FATAL(it_req(IT_API, T_ADMIN, "POST", "/v1/definitions", doc, NULL), 201);
    }
}

/* The token of the principal holding only perms[i]. */
static const char *token_of(size_t i)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "perm-%zu-token-0123456789", i);
    return buf;
}

/* Every route of docs/openapi.json has an expectation here (and so a rule: a route
 * without one answers 403 to the admin below). */
static void test_every_route_has_a_rule(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/openapi.json", getenv("STRAND_TEST_SRC_DIR") ?: ".");
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    const char *route;
    json_t *item;
    int routes = 0, missing = 0;
    json_object_foreach(json_object_get(doc, "paths"), route, item) {
        const char *method;
        json_t *op;
        json_object_foreach(item, method, op) {
            int found = 0;
            for (size_t i = 0; i < NEXPECT && !found; i++)
                found = strcasecmp(expect[i].method, method) == 0 && strcmp(expect[i].route, route) == 0;
            if (!found) {
                fprintf(stderr, "\ndocs/openapi.json has %s %s: give it a rule in "
                        "services/api/permissions.c and an expectation in this test\n", method, route);
                missing++;
            }
            routes++;
        }
    }
    printf("\n  openapi: %d routes, %d without an expectation\n", routes, missing);
    CU_ASSERT_EQUAL(missing, 0);
    CU_ASSERT_EQUAL((size_t)routes, NEXPECT);
    json_decref(doc);
}

/* Each permission alone: allowed exactly on its routes; no roles: nowhere. */
static void test_each_permission_alone(void)
{
    int requests = 0;
    for (size_t r = 0; r < NEXPECT; r++) {
        const char *need = expect[r].perm;
        for (size_t i = 0; i < NPERMS; i++) {
            int allowed = need == NULL || strcmp(perms[i], "admin") == 0 || strcmp(perms[i], need) == 0;
            expect_answer(token_of(i), expect[r].method, expect[r].path, expect[r].body,
                          allowed ? NULL : need);
            requests++;
        }
        if (need != NULL) {
            expect_answer(T_NOTHING, expect[r].method, expect[r].path, expect[r].body, need);
            requests++;
        }
    }
    printf("\n  %d requests: %zu routes x %zu single-permission principals (+ no roles)\n", requests,
           NEXPECT, NPERMS);
}

static char *start_as(const char *token, const char *def, const char *ref)
{
    char body[300];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"business_ref\":\"%s\"}", def, ref);
    json_t *a = NULL;
    long s = it_req(IT_API, token, "POST", "/v1/instances", body, &a);
    const char *id = json_string_value(json_object_get(a, "id"));
    char *copy = s == 201 && id ? strdup(id) : NULL;
    json_decref(a);
    return copy;
}

static void task_of(const char *instance, char *out, size_t n)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.tasks WHERE instance_id = '%s'", instance);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 60), 1);
    char path[200];
    snprintf(path, sizeof path, "/v1/tasks?instance_id=%s", instance);
    json_t *a = NULL;
    it_req(IT_API, T_ADMIN, "GET", path, NULL, &a);
    snprintf(out, n, "%s",
             json_string_value(json_object_get(json_array_get(json_object_get(a, "items"), 0), "id")) ?: "");
    json_decref(a);
}

/* Grants limited to definition A and to the ACK consumer "billing". */
static void test_limited_grants(void)
{
    char path[300], body[300];
    char *a = start_as(T_SCOPED, def_a, "scoped-a");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    snprintf(body, sizeof body, "{\"definition\":\"%s\"}", def_b);
    expect_answer(T_SCOPED, "POST", "/v1/instances", body, "instances:start");
    expect_answer(T_SCOPED, "POST", "/v1/instances", "{}", "instances:start");   /* names none */
    char *b = start_as(T_ADMIN, def_b, "scoped-b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    /* instance ids: looked up */
    snprintf(path, sizeof path, "/v1/instances/%s", a);
    expect_answer(T_SCOPED, "GET", path, NULL, NULL);
    snprintf(path, sizeof path, "/v1/instances/%s/history", b);
    expect_answer(T_SCOPED, "GET", path, NULL, "instances:read");
    snprintf(path, sizeof path, "/v1/instances/%s", b);
    expect_answer(T_SCOPED, "GET", path, NULL, "instances:read");
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", "/v1/instances/" ZERO_ID, NULL, NULL), 404);
    snprintf(path, sizeof path, "/v1/instances/%s/cancel", a);
    expect_answer(T_SCOPED, "POST", path, "{}", "instances:operate");
    /* lists: only with the definition filter */
    snprintf(path, sizeof path, "/v1/instances?definition=%s", def_a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", path, NULL, NULL), 200);
    snprintf(path, sizeof path, "/v1/instances?definition=%s", def_b);
    expect_answer(T_SCOPED, "GET", path, NULL, "instances:read");
    expect_answer(T_SCOPED, "GET", "/v1/instances", NULL, "instances:read");
    /* read-back lists: an instance's own by its definition; the global ones span
     * definitions */
    snprintf(path, sizeof path, "/v1/instances/%s/notices", a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", path, NULL, NULL), 200);
    snprintf(path, sizeof path, "/v1/instances/%s/task-events", b);
    expect_answer(T_SCOPED, "GET", path, NULL, "instances:read");
    expect_answer(T_SCOPED, "GET", "/v1/notices", NULL, "instances:read");
    expect_answer(T_SCOPED, "GET", "/v1/instances/stuck", NULL, "instances:read");
    /* definitions by path name */
    snprintf(path, sizeof path, "/v1/definitions/%s/1", def_a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", path, NULL, NULL), 200);
    snprintf(path, sizeof path, "/v1/definitions/%s", def_b);
    expect_answer(T_SCOPED, "GET", path, NULL, "definitions:read");
    expect_answer(T_SCOPED, "GET", "/v1/definitions", NULL, "definitions:read");
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", "/v1/schema/definition", NULL, NULL), 200);
    /* a diagram's instance overlay needs instances:read for that definition too */
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=%s", def_a, a);
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", path, NULL, NULL), 200);
    expect_answer(token_of(0), "GET", path, NULL, "instances:read");   /* definitions:read only */
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg", def_a);
    CU_ASSERT_EQUAL(it_req(IT_API, token_of(0), "GET", path, NULL, NULL), 200);
    /* tasks by their instance's definition */
    char ta[40], tb[40];
    task_of(a, ta, sizeof ta);
    task_of(b, tb, sizeof tb);
    snprintf(path, sizeof path, "/v1/tasks/%s", ta);
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", path, NULL, NULL), 200);
    snprintf(path, sizeof path, "/v1/tasks/%s", tb);
    expect_answer(T_SCOPED, "GET", path, NULL, "tasks:read");
    /* ACKs for one consumer */
    expect_answer(T_SCOPED, "POST", "/v1/acks",
                  "{\"ack_guid\":\"" ZERO_ID "\",\"consumer\":\"billing\",\"stage\":\"delivered\"}", NULL);
    expect_answer(T_SCOPED, "POST", "/v1/acks",
                  "{\"ack_guid\":\"" ZERO_ID "\",\"consumer\":\"shipping\",\"stage\":\"delivered\"}",
                  "acks:send");
    /* a bad body is still a 400, not a 403 */
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "POST", "/v1/instances", "{\"definition\":", NULL), 400);
    free(a);
    free(b);
}

/* A scoped caller learns nothing of what it may not read (issue 33): a diagram's
 * overlay answers 404 for another definition's instance as for an id that does not
 * exist (it was 409, an existence oracle), and /family leaves out the relatives of
 * definitions it may not read (it listed them). */
static void test_scope_hides_the_unreadable(void)
{
    char path[300], doc[800], sql[300];
    char *b = start_as(T_ADMIN, def_b, "hidden-b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=%s", def_a, b);
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", path, NULL, NULL), 404);
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", path, NULL, NULL), 409);   /* may read it */
    snprintf(path, sizeof path, "/v1/definitions/%s/1/diagram.svg?instance=%s", def_a, ZERO_ID);
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", path, NULL, NULL), 404);
    /* A parent of A (version 2) with a child of B. */
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":2,\"steps\":["
             "{\"id\":\"child\",\"type\":\"subworkflow\",\"definition\":\"%s\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", def_a, def_b);
    CU_ASSERT_EQUAL_FATAL(it_req(IT_API, T_ADMIN, "POST", "/v1/definitions", doc, NULL), 201);
    char *parent = start_as(T_ADMIN, def_a, "hidden-parent");
    CU_ASSERT_PTR_NOT_NULL_FATAL(parent);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE parent_instance_id = '%s'",
             parent);
    CU_ASSERT_EQUAL_FATAL(it_wait_number(sql, 1, 60), 1);
    snprintf(path, sizeof path, "/v1/instances/%s/family", parent);
    json_t *family = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "GET", path, NULL, &family), 200);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(family, "children")), 1);
    json_decref(family);
    family = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_SCOPED, "GET", path, NULL, &family), 200);
    CU_ASSERT_TRUE(json_is_array(json_object_get(family, "children")));
    CU_ASSERT_EQUAL(json_array_size(json_object_get(family, "children")), 0);
    json_decref(family);
    free(parent);
    free(b);
}

/* The ingress applies the same rules to the envelope's token. */
static void test_ingress(void)
{
    char sql[600], args[300];
    const char *letters_sql = "SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE '%ingress'";
    const char *refused_sql = "SELECT count(*) FROM strand.dead_letters WHERE source_topic LIKE"
                              " '%ingress' AND reason LIKE '%instances:start%'";
    long long letters = it_sql_number(letters_sql), refused = it_sql_number(refused_sql);
    /* instances:read only (perms[2]) may not start; scoped may start A but not B */
    snprintf(args, sizeof args, "{\"definition\":\"%s\",\"business_ref\":\"ingress-denied\"}", def_a);
    /* (the definitions' names carry the pid: these refs are this run's only) */
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_START, token_of(2), "", args));
    snprintf(args, sizeof args, "{\"definition\":\"%s\",\"business_ref\":\"ingress-denied-b\"}", def_b);
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_START, T_SCOPED, "", args));
    snprintf(args, sizeof args, "{\"definition\":\"%s\",\"business_ref\":\"ingress-ok\"}", def_a);
    CU_ASSERT_TRUE(it_produce_command(STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_START, T_SCOPED, "", args));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE business_ref = 'ingress-ok'"
             " AND definition_name = '%s'", def_a);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 60), 1);
    CU_ASSERT_EQUAL(it_wait_number(letters_sql, letters + 2, 60), letters + 2);
    CU_ASSERT_EQUAL(it_sql_number(refused_sql), refused + 2);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE business_ref LIKE"
             " 'ingress-denied%%' AND definition_name IN ('%s', '%s')", def_a, def_b);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
}

/* ---- a scope is a scope (issue 33): what a definition starts ------------------------ */

/* A flow of A at `version` whose first steps are `first` (steps as JSON text). */
static void flow_of_a(char *doc, size_t n, int version, const char *first)
{
    snprintf(doc, n, "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":%d,\"steps\":[%s,"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"why\":\"state.why\"}}]}",
             def_a, version, first);
}

static long long versions_of_a(int version)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.definitions WHERE name = '%s' AND version = %d",
             def_a, version);
    return it_sql_number(sql);
}

/* An import answered 403 naming instances:start, the definition B and `pointer`. */
static void expect_import_refused(const char *doc, const char *pointer)
{
    json_t *p = NULL;
    long got = it_req(IT_API, T_IMP_A, "POST", "/v1/definitions", doc, &p);
    int ok = forbidden_for(got, p, "instances:start") &&
             strcmp(json_string_value(json_object_get(p, "definition")) ?: "", def_b) == 0 &&
             strcmp(json_string_value(json_object_get(p, "field")) ?: "", pointer) == 0 &&
             strstr(json_string_value(json_object_get(p, "message")) ?: "", def_b) != NULL;
    if (!ok) {
        char *text = p ? json_dumps(p, JSON_COMPACT) : NULL;
        fprintf(stderr, "\nimport by imp_a: got %ld %s, want 403 for %s at %s\n", got, text ?: "",
                def_b, pointer);
        free(text);
    }
    CU_ASSERT_TRUE(ok);
    json_decref(p);
}

/* definitions:write@A and instances:start@A do not import an A that starts B: 403
 * naming instances:start and B, wherever the subworkflow step stands, and nothing is
 * imported; /validate says so. With instances:start@B too, the import succeeds and
 * records its importer. */
static void test_import_needs_start_of_children(void)
{
    char doc[2200], step[900];
    snprintf(step, sizeof step, "{\"id\":\"k\",\"type\":\"subworkflow\",\"definition\":\"%s\","
             "\"input\":{\"chosen\":\"'by the importer'\"}}", def_b);
    flow_of_a(doc, sizeof doc, 10, step);
    expect_import_refused(doc, "/steps/0/definition");
    CU_ASSERT_EQUAL(versions_of_a(10), 0);
    /* nested: in an if's else and in a parallel's second branch */
    snprintf(step, sizeof step,
             "{\"id\":\"i\",\"type\":\"if\",\"condition\":\"true\","
             "\"then\":[{\"id\":\"s\",\"type\":\"set\",\"values\":{\"x\":\"1\"}}],"
             "\"else\":[{\"id\":\"k\",\"type\":\"subworkflow\",\"definition\":\"%s\"}]}", def_b);
    flow_of_a(doc, sizeof doc, 11, step);
    expect_import_refused(doc, "/steps/0/else/0/definition");
    snprintf(step, sizeof step,
             "{\"id\":\"p\",\"type\":\"parallel\",\"branches\":["
             "[{\"id\":\"a\",\"type\":\"subworkflow\",\"definition\":\"%s\"}],"
             "[{\"id\":\"b\",\"type\":\"subworkflow\",\"definition\":\"%s\"}]]}", def_a, def_b);
    flow_of_a(doc, sizeof doc, 11, step);
    expect_import_refused(doc, "/steps/0/branches/1/0/definition");
    CU_ASSERT_EQUAL(versions_of_a(11), 0);
    /* /validate lists what the document starts and whether the caller may */
    json_t *v = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_IMP_A, "POST", "/v1/definitions/validate", doc, &v), 200);
    json_t *starts = json_object_get(v, "starts");
    CU_ASSERT_EQUAL(json_array_size(starts), 2);
    CU_ASSERT_TRUE(json_is_true(json_object_get(json_array_get(starts, 0), "allowed")));
    CU_ASSERT_TRUE(json_is_false(json_object_get(json_array_get(starts, 1), "allowed")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(starts, 1), "definition")) ?: "",
                           def_b);
    json_decref(v);
    /* every nesting: a switch's case and default, a loop's body, a wait's on_timeout, a
     * subworkflow's on_failure */
    char sub[200];
    snprintf(sub, sizeof sub, "{\"id\":\"%%s\",\"type\":\"subworkflow\",\"definition\":\"%s\"}", def_b);
    char s1[220], s2[220], s3[220], s4[220];
    snprintf(s1, sizeof s1, sub, "c1");
    snprintf(s2, sizeof s2, sub, "c2");
    snprintf(s3, sizeof s3, sub, "c3");
    snprintf(s4, sizeof s4, sub, "c4");
    char nested[1400];
    snprintf(nested, sizeof nested,
             "{\"id\":\"sw\",\"type\":\"switch\",\"cases\":[{\"when\":\"true\",\"steps\":[%s]}],"
             "\"default\":[{\"id\":\"w\",\"type\":\"while\",\"condition\":\"false\",\"max_iterations\":2,"
             "\"body\":[%s]}]},"
             "{\"id\":\"ws\",\"type\":\"wait_signal\",\"name\":\"go\",\"timeout\":\"1000\","
             "\"on_timeout\":[%s]},"
             "{\"id\":\"c0\",\"type\":\"subworkflow\",\"definition\":\"%s\",\"on_failure\":[%s]}",
             s1, s2, s3, def_a, s4);
    flow_of_a(doc, sizeof doc, 12, nested);
    v = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_IMP_A, "POST", "/v1/definitions/validate", doc, &v), 200);
    starts = json_object_get(v, "starts");
    static const char *const pointers[] = {"/steps/0/cases/0/steps/0/definition",
                                           "/steps/0/default/0/body/0/definition",
                                           "/steps/1/on_timeout/0/definition", "/steps/2/definition",
                                           "/steps/2/on_failure/0/definition"};
    CU_ASSERT_EQUAL(json_array_size(starts), 5);
    for (size_t i = 0; i < 5; i++) {
        json_t *start = NULL;
        for (size_t k = 0; k < json_array_size(starts) && start == NULL; k++)
            if (strcmp(json_string_value(json_object_get(json_array_get(starts, k), "pointer")) ?: "",
                       pointers[i]) == 0)
                start = json_array_get(starts, k);
        if (start == NULL)
            fprintf(stderr, "\nvalidate: no start at %s\n", pointers[i]);
        CU_ASSERT_PTR_NOT_NULL(start);
        CU_ASSERT_EQUAL(json_is_true(json_object_get(start, "allowed")), i == 3);
    }
    json_decref(v);
    /* with instances:start@B: imported, by imp_ab; A v10 fails when B cannot start, A v11
     * handles it in on_failure */
    snprintf(step, sizeof step, "{\"id\":\"k\",\"type\":\"subworkflow\",\"definition\":\"%s\","
             "\"input\":{\"chosen\":\"'by the importer'\"}}", def_b);
    flow_of_a(doc, sizeof doc, 10, step);
    CU_ASSERT_EQUAL(it_req(IT_API, T_IMP_AB, "POST", "/v1/definitions", doc, NULL), 201);
    snprintf(step, sizeof step, "{\"id\":\"k\",\"type\":\"subworkflow\",\"definition\":\"%s\","
             "\"on_failure\":[{\"id\":\"note\",\"type\":\"set\","
             "\"values\":{\"why\":\"state.k.error.code\"}}]}", def_b);
    flow_of_a(doc, sizeof doc, 11, step);
    CU_ASSERT_EQUAL(it_req(IT_API, T_IMP_AB, "POST", "/v1/definitions", doc, NULL), 201);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT imported_by FROM strand.definitions WHERE name = '%s' AND version = 10",
             def_a);
    char *by = it_sql_text(sql);
    CU_ASSERT_STRING_EQUAL(by ?: "", "imp_ab");
    free(by);
}

/* How many lines of the executor's log say `what`. */
static int executor_log_count(const char *what)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/test_permissions-executor.log",
             getenv("STRAND_TEST_LOG_DIR") ?: "/tmp");
    FILE *f = fopen(path, "r");
    int n = 0;
    char line[4096];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        n += strstr(line, what) != NULL;
    if (f != NULL)
        fclose(f);
    return n;
}

/* Starts A `version` as the admin and waits until it ends; returns it (caller
 * decrefs) or NULL. */
static json_t *run_a(int version, char *id, size_t n)
{
    char body[300], sql[300], path[200];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"version\":%d}", def_a, version);
    json_t *a = NULL;
    CU_ASSERT_EQUAL(it_req(IT_API, T_ADMIN, "POST", "/v1/instances", body, &a), 201);
    snprintf(id, n, "%s", json_string_value(json_object_get(a, "id")) ?: "");
    json_decref(a);
    if (id[0] == '\0')
        return NULL;
    snprintf(sql, sizeof sql, "SELECT status FROM strand.instances WHERE id = '%s'"
             " AND status IN ('completed', 'failed', 'cancelled', 'terminated')", id);
    char *status = it_wait_text(sql, 30);
    free(status);
    snprintf(path, sizeof path, "/v1/instances/%s", id);
    a = NULL;
    it_req(IT_API, T_ADMIN, "GET", path, NULL, &a);
    return a;
}

static long long children_of(const char *id)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE parent_instance_id = '%s'", id);
    return it_sql_number(sql);
}

/* The executor checks again when the child starts: once imp_ab no longer holds
 * instances:start@B (the token file rewritten, the executor reloads it), A's
 * subworkflow step fails with child_start_forbidden and no B instance exists; with
 * on_failure, A goes on. */
static void test_child_start_rechecked(void)
{
    int reloads = executor_log_count("token file reloaded");
    CU_ASSERT_FATAL(write_tokens(0));
    CU_ASSERT_EQUAL(kill(api_pid, SIGHUP), 0);
    CU_ASSERT_EQUAL(kill(executor_pid, SIGHUP), 0);
    for (int i = 0; i < 200 && executor_log_count("token file reloaded") <= reloads; i++)
        usleep(50 * 1000);
    CU_ASSERT_TRUE(executor_log_count("token file reloaded") > reloads);
    char id[40];
    json_t *a = run_a(10, id, sizeof id);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "status")) ?: "", "failed");
    const json_t *error = json_object_get(a, "error");
    const json_t *cause = json_object_get(error, "error");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(error, "code")) ?: "", "child_failed");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(error, "step")) ?: "", "/steps/0");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(cause, "code")) ?: "", "child_start_forbidden");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(cause, "principal")) ?: "", "imp_ab");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(cause, "definition")) ?: "", def_b);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(cause, "required_permission")) ?: "",
                           "instances:start");
    if (a == NULL || json_object_get(cause, "code") == NULL) {
        char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
        fprintf(stderr, "\nA v10: %s\n", text ?: "(did not end)");
        free(text);
    }
    json_decref(a);
    CU_ASSERT_EQUAL(children_of(id), 0);
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.notices WHERE instance_id = '%s'"
             " AND code = 'ChildStartForbidden'", id);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    /* the normal failure path: on_failure runs */
    a = run_a(11, id, sizeof id);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "status")) ?: "", "completed");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(a, "output"), "why")) ?: "",
                           "child_start_forbidden");
    json_decref(a);
    CU_ASSERT_EQUAL(children_of(id), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND parent_instance_id IS NOT NULL AND parent_instance_id IN (SELECT id FROM strand.instances"
             " WHERE definition_name = '%s' AND definition_version IN (10, 11))", def_b, def_a);
    CU_ASSERT_EQUAL(it_sql_number(sql), 0);
}

/* An executor that cannot read its token file runs on but fails closed: no principal
 * holds anything, so even the admin's A v2 starts no child; once the file is back (and
 * read on SIGHUP) it does. */
static void test_unreadable_tokens_fail_closed(void)
{
    CU_ASSERT_EQUAL(it_stop(IT_EXECUTOR, SIGTERM, 30), 0);
    CU_ASSERT_EQUAL(unlink(token_path), 0);
    CU_ASSERT_FATAL((executor_pid = it_start(IT_EXECUTOR)) > 0);
    CU_ASSERT_FATAL(it_wait_http(IT_EXECUTOR, "/readyz", 200, 60));
    char id[40];
    json_t *a = run_a(2, id, sizeof id);
    const json_t *cause = json_object_get(json_object_get(a, "error"), "error");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "status")) ?: "", "failed");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(cause, "code")) ?: "", "child_start_forbidden");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(cause, "principal")) ?: "", "root");
    json_decref(a);
    CU_ASSERT_EQUAL(children_of(id), 0);
    /* the file back: read on SIGHUP, and the admin's A v2 starts its child again */
    int loads = executor_log_count("token file loaded");
    CU_ASSERT_FATAL(write_tokens(0));
    CU_ASSERT_EQUAL(kill(executor_pid, SIGHUP), 0);
    for (int i = 0; i < 200 && executor_log_count("token file loaded") <= loads; i++)
        usleep(50 * 1000);
    CU_ASSERT_TRUE(executor_log_count("token file loaded") > loads);
    char body[300], sql[300];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"version\":2}", def_a);
    a = NULL;
    CU_ASSERT_EQUAL_FATAL(it_req(IT_API, T_ADMIN, "POST", "/v1/instances", body, &a), 201);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(a, "id")) ?: "");
    json_decref(a);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE parent_instance_id = '%s'", id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
}

int main(void)
{
    if (!it_init("test_permissions"))
        return 1;
    static const it_case_t cases[] = {
        {"services start with a token file of roles", test_start_services},
        {"every documented route has a permission", test_every_route_has_a_rule},
        {"each permission alone: its routes and no other", test_each_permission_alone},
        {"grants limited to a definition or a consumer", test_limited_grants},
        {"kafka ingress: the same permissions", test_ingress},
        {"a scoped caller sees nothing of what it may not read", test_scope_hides_the_unreadable},
        {"importing a definition needs instances:start on what it starts",
         test_import_needs_start_of_children},
        {"a child's start is checked again against the reloaded token file", test_child_start_rechecked},
        {"an executor without its token file starts no checked child", test_unreadable_tokens_fail_closed},
    };
    int rc = it_run_suite("permissions", cases, (int)(sizeof cases / sizeof cases[0]));
    unlink(token_path);
    return rc;
}
