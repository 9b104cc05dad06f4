/* test_snapshot.c - stored snapshots as outside input: st_snapshot_check() accepts
 * what the interpreter writes, refuses each kind of damage with a pointer, and the
 * interpreter refuses (never crashes on) randomly damaged snapshots. */
#include <stdlib.h>
#include <string.h>

#include "st_test.h"
#include "strand/engine.h"

#define ID "33333333-3333-4333-8333-333333333333"
#define NOW 1795400000000LL

static st_defn_t *compile(const char *text)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    CU_ASSERT_EQUAL(st_defn_compile(doc, &defn, &problems), ST_OK);
    json_decref(problems);
    json_decref(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(defn);
    return defn;
}

/* A flow waiting in a loop (repeat frame), on a call and in a parallel join. */
static const char *FLOW =
    "{\"kind\":\"flow\",\"name\":\"s\",\"version\":1,\"steps\":["
    "{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"2\",\"body\":["
    " {\"id\":\"p\",\"type\":\"parallel\",\"join\":\"all\",\"branches\":["
    "  [{\"id\":\"c\",\"type\":\"call\",\"transport\":\"http\",\"request\":{},\"retry\":{\"max_attempts\":3}}],"
    "  [{\"id\":\"w\",\"type\":\"wait_signal\",\"name\":\"go\"}],"
    "  [{\"id\":\"t\",\"type\":\"task\",\"name\":\"Check\"}]]}]},"
    "{\"id\":\"d\",\"type\":\"complete\",\"output\":{\"ok\":true}}]}";

static json_t *started(const st_defn_t *d)
{
    json_t *start = json_pack("{s:s, s:{}}", "type", "START", "input");
    st_run_result_t r;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_interp_run(d, NULL, start, ID, NOW, &r, &eb), ST_OK);
    json_decref(start);
    json_t *snap = json_incref(r.snapshot);
    st_run_result_close(&r);
    return snap;
}

/* Applies `mutate` to a copy of `snap` and expects ST_ERR_INVALID mentioning `needle`. */
static void expect_refused(const st_defn_t *d, const json_t *snap, const char *pointer_text, json_t *value,
                           const char *needle)
{
    json_t *bad = json_deep_copy(snap);
    /* pointer_text: "/threads/1/wait/kind" style; the last token is set (or deleted if value NULL) */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", pointer_text);
    char *last = strrchr(buf, '/');
    *last++ = '\0';
    json_t *parent = bad;
    char *save = NULL;
    for (char *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save))
        parent = json_is_array(parent) ? json_array_get(parent, (size_t)atoi(tok)) : json_object_get(parent, tok);
    CU_ASSERT_PTR_NOT_NULL_FATAL(parent);
    if (json_is_array(parent))
        json_array_set_new(parent, (size_t)atoi(last), value ? value : json_null());
    else if (value)
        json_object_set_new(parent, last, value);
    else
        json_object_del(parent, last);
    st_errbuf_t eb;
    CU_ASSERT_EQUAL(st_snapshot_check(d, bad, &eb), ST_ERR_INVALID);
    if (strstr(eb.msg, needle) == NULL)
        fprintf(stderr, "\n%s: '%s' lacks '%s'\n", pointer_text, eb.msg, needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, needle));
    /* the interpreter refuses it too, whatever the event */
    json_t *event = json_pack("{s:s, s:s}", "type", "SIGNAL", "name", "go");
    st_run_result_t r;
    CU_ASSERT_EQUAL(st_interp_run(d, bad, event, ID, NOW, &r, &eb), ST_ERR_INVALID);
    CU_ASSERT_PTR_NULL(r.snapshot);
    json_decref(event);
    json_decref(bad);
}

static int thread_waiting(const json_t *snap, const char *kind)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(snap, "threads"), i, t) {
        const char *k = json_string_value(json_object_get(json_object_get(t, "wait"), "kind"));
        if (k && strcmp(k, kind) == 0)
            return (int)i;
    }
    return -1;
}

static void test_check_accepts_what_runs_write(void)
{
    st_defn_t *d = compile(FLOW);
    json_t *snap = started(d);
    st_errbuf_t eb;
    CU_ASSERT_EQUAL(st_snapshot_check(d, snap, &eb), ST_OK);
    CU_ASSERT_TRUE(thread_waiting(snap, "join") >= 0);
    CU_ASSERT_TRUE(thread_waiting(snap, "call") >= 0);
    json_decref(snap);
    st_defn_free(d);
}

static void test_each_kind_of_damage_is_refused(void)
{
    st_defn_t *d = compile(FLOW);
    json_t *snap = started(d);
    char p[128];
    int join = thread_waiting(snap, "join"), call = thread_waiting(snap, "call"),
        sig = thread_waiting(snap, "signal"), task = thread_waiting(snap, "task");
    CU_ASSERT_TRUE_FATAL(join >= 0 && call >= 0 && sig >= 0 && task >= 0);
    expect_refused(d, snap, "/schema_version", json_integer(2), "/schema_version");
    expect_refused(d, snap, "/status", json_string("sleeping"), "/status");
    expect_refused(d, snap, "/state", json_array(), "/state");
    expect_refused(d, snap, "/seq", NULL, "/seq");
    expect_refused(d, snap, "/threads", json_object(), "/threads");
    snprintf(p, sizeof p, "/threads/%d/stack", join);
    expect_refused(d, snap, p, json_string("x"), "a thread needs");
    snprintf(p, sizeof p, "/threads/%d/stack/0/path", join);
    expect_refused(d, snap, p, json_string("/steps/99"), "a frame needs");
    snprintf(p, sizeof p, "/threads/%d/stack/1/loop/step", join);
    expect_refused(d, snap, p, json_string("/steps/1"), "not a loop");
    snprintf(p, sizeof p, "/threads/%d/wait/children", join);
    expect_refused(d, snap, p, json_pack("[s]", "one"), "a join needs");
    snprintf(p, sizeof p, "/threads/%d/wait/step", call);
    expect_refused(d, snap, p, json_string("/nowhere"), "the path of its step");
    snprintf(p, sizeof p, "/threads/%d/wait/kind", call);
    expect_refused(d, snap, p, json_string("nap"), "does not belong");
    snprintf(p, sizeof p, "/threads/%d/wait/attempt", call);
    expect_refused(d, snap, p, json_integer(0), "attempt");
    /* regressions found by fuzz_snapshot: a wait on another kind of step, an attempt
     * count that overflows when the call is retried, a duplicated thread id */
    snprintf(p, sizeof p, "/threads/%d/wait/kind", sig);
    expect_refused(d, snap, p, json_string("task"), "does not belong to a wait_signal step");
    snprintf(p, sizeof p, "/threads/%d/wait/attempt", call);
    expect_refused(d, snap, p, json_integer(795400001000LL), "attempt");
    snprintf(p, sizeof p, "/threads/%d/id", sig);
    expect_refused(d, snap, p, json_integer(json_integer_value(json_object_get(json_array_get(json_object_get(snap, "threads"), (size_t)join), "id"))), "duplicate thread id");
    snprintf(p, sizeof p, "/threads/%d/id", sig);
    expect_refused(d, snap, p, json_integer(99), "next_thread");
    snprintf(p, sizeof p, "/threads/%d/wait/token", sig);
    expect_refused(d, snap, p, NULL, "no token");
    snprintf(p, sizeof p, "/threads/%d/wait/name", task);
    expect_refused(d, snap, p, NULL, "needs its name");
    json_decref(snap);
    st_defn_free(d);
}

/* Replaces or deletes one random node of `v` (returns 1 when it did). */
static int damage(json_t *v, int depth)
{
    size_t n = json_is_object(v) ? json_object_size(v) : json_is_array(v) ? json_array_size(v) : 0;
    if (n == 0)
        return 0;
    size_t pick = (size_t)rand() % n;
    json_t *child;
    const char *key = NULL;
    if (json_is_object(v)) {
        void *it = json_object_iter(v);
        for (size_t i = 0; i < pick; i++)
            it = json_object_iter_next(v, it);
        key = json_object_iter_key(it);
        child = json_object_iter_value(it);
    } else {
        child = json_array_get(v, pick);
    }
    if (depth < 6 && rand() % 3 != 0 && damage(child, depth + 1))
        return 1;
    json_t *replacement;
    switch (rand() % 6) {
    case 0: replacement = json_null(); break;
    case 1: replacement = json_integer(rand() % 5 - 1); break;
    case 2: replacement = json_string(rand() % 2 ? "/steps/0" : "x"); break;
    case 3: replacement = json_array(); break;
    case 4: replacement = json_object(); break;
    default: replacement = NULL; break;
    }
    if (json_is_object(v)) {
        char k[128];
        snprintf(k, sizeof k, "%s", key);
        if (replacement)
            json_object_set_new(v, k, replacement);
        else
            json_object_del(v, k);
    } else if (replacement) {
        json_array_set_new(v, pick, replacement);
    } else {
        json_array_remove(v, pick);
    }
    return 1;
}

static void test_random_damage_never_crashes(void)
{
    st_defn_t *d = compile(FLOW);
    json_t *snap = started(d);
    srand(11);
    int refused = 0, ran = 0;
    for (int n = 0; n < 3000; n++) {
        json_t *bad = json_deep_copy(snap);
        damage(bad, 0);
        const char *types[] = {"SIGNAL", "CALL_RESULT", "TASK_COMPLETED", "RETRY_DUE", "TIMER_DUE"};
        char token[64];
        snprintf(token, sizeof token, "%s/%d", ID, 1 + rand() % 4);
        json_t *event = json_pack("{s:s, s:s, s:s, s:{s:{s:b}}}", "type", types[rand() % 5], "token", token,
                                  "name", "go", "payload", "result", "ok", rand() % 2);
        st_run_result_t r;
        st_errbuf_t eb;
        st_err_t err = st_interp_run(d, bad, event, ID, NOW, &r, &eb);
        CU_ASSERT_TRUE(err == ST_OK || err == ST_ERR_INVALID || err == ST_ERR_STALE || err == ST_ERR_CONFLICT);
        if (err == ST_OK) {
            CU_ASSERT_EQUAL(st_snapshot_check(d, r.snapshot, &eb), ST_OK);   /* output is always sound */
            st_run_result_close(&r);
            ran++;
        } else {
            refused += err == ST_ERR_INVALID;
        }
        json_decref(event);
        json_decref(bad);
    }
    CU_ASSERT_TRUE(refused > 100);
    CU_ASSERT_TRUE(ran > 10);
    json_decref(snap);
    st_defn_free(d);
}

ST_TEST_MAIN("snapshot", ST_TEST(test_check_accepts_what_runs_write), ST_TEST(test_each_kind_of_damage_is_refused),
             ST_TEST(test_random_damage_never_crashes))
