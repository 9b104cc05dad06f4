/* test_process.c - the process front end (seed 004): compilation to canonical steps,
 * the runtime semantics of waitUntil (any_of / all_of), execute decisions (next
 * states, parallel next states, complete, fail, dead end), the process timeout, and
 * every validator error with its pointer. */
#include <stdlib.h>
#include <string.h>

#include "st_engine_test.h"
#include "st_test.h"
#include "strand/engine.h"

/* True if `name` is among the signals the snapshot waits for. */
static int waits_for(const json_t *snap, const char *name)
{
    json_t *names = st_snapshot_waiting_signals(snap);
    int found = 0;
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n)
        found |= strcmp(json_string_value(n), name) == 0;
    json_decref(names);
    return found;
}

#define ID "22222222-2222-4222-8222-222222222222"
#define NOW 1795400000000LL

/* The example of docs/definitions.md (docs/examples/process_signup.json). */
static const char *SIGNUP =
    "{\"kind\":\"process\",\"name\":\"signup\",\"version\":1,\"id_reuse_policy\":\"allow_if_no_running\","
    "\"timeout\":\"'30d'\",\"queues\":[\"verified\"],"
    "\"attributes\":{\"local\":{\"reminders\":{\"default\":0},\"channel\":{\"default\":\"email\"}},"
    " \"global\":{\"customer_status\":{\"table\":\"customers\",\"column\":\"status\"}}},"
    "\"global_table\":{\"table\":\"app.customers\",\"key\":\"id\"},\"rpcs\":[{\"name\":\"verify_email\",\"queue\":\"verified\"}],\"start\":[\"submit\"],\"states\":["
    "{\"id\":\"submit\",\"execute\":{\"transport\":\"http\",\"request\":{\"action\":\"'send_verification'\","
    " \"email\":\"input.email\"},\"timeout\":\"'30s'\",\"retry\":{\"max_attempts\":3,\"backoff_ms\":1000,"
    " \"multiplier\":2}},\"next\":[\"verify\"]},"
    "{\"id\":\"verify\",\"wait_until\":{\"combine\":\"any_of\",\"commands\":[{\"type\":\"timer\",\"delay\":\"'24h'\"},"
    " {\"type\":\"queue\",\"name\":\"verified\"}]},\"execute\":{\"transport\":\"http\",\"request\":{\"action\":\"'check'\","
    " \"fired\":\"state.fired\",\"verified\":\"state.verified\",\"email\":\"input.email\"}},\"next\":[\"verify\",\"welcome\"]},"
    "{\"id\":\"welcome\",\"complete\":{\"email\":\"input.email\",\"verified\":true}}]}";

/* Runs one event; returns the status or -err; replaces *snap and *effects. */
static int run(const st_defn_t *defn, json_t **snap, json_t *event, json_t **effects)
{
    return st_et_run(defn, snap, event, ID, NOW, effects);
}

/* The first effect of `type` (borrowed from effects), or NULL. */
static json_t *effect_of(json_t *effects, const char *type, int nth)
{
    size_t i;
    json_t *e;
    json_array_foreach(effects, i, e)
        if (strcmp(json_string_value(json_object_get(e, "type")), type) == 0 && nth-- == 0)
            return e;
    return NULL;
}

static json_t *ev(const char *type, const char *token, json_t *payload)
{
    json_t *e = json_pack("{s:s, s:s}", "type", type, "token", token);
    if (payload)
        json_object_set_new(e, "payload", payload);
    return e;
}

static json_t *call_ok(json_t *body)
{
    return json_pack("{s:{s:b, s:o}}", "result", "ok", 1, "body", body);
}

static char *token_of(json_t *effect)
{
    return strdup(json_string_value(json_object_get(effect, "token")));
}

static void test_signup_verified_by_queue(void)
{
    st_defn_t *d = st_et_compile_doc(SIGNUP);
    CU_ASSERT_STRING_EQUAL(st_defn_kind(d), "process");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(st_defn_canonical(d), "id_reuse_policy")),
                           "allow_if_no_running");
    json_t *snap = NULL, *fx = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:{s:s}}", "type", "START", "input", "email", "a@b.c"), &fx),
                    ST_RUN_WAITING);
    /* local attributes start at their defaults */
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(snap, "state"), "reminders")), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(snap, "state"), "channel")), "email");
    json_t *call = effect_of(fx, "make_call", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(call);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(call, "request"), "email")), "a@b.c");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(call, "timeout_ms")), 30000);
    json_t *timeout = effect_of(fx, "set_timer", 0);   /* the process timeout */
    CU_ASSERT_PTR_NOT_NULL_FATAL(timeout);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(timeout, "due_ms")), NOW + 30LL * 86400000);
    char *t1 = token_of(call);
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", t1, call_ok(json_pack("{s:[s]}", "next", "verify"))), &fx),
                    ST_RUN_WAITING);
    /* verify waits for a 24h timer and the queue at once */
    json_t *timer = effect_of(fx, "set_timer", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(timer);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(timer, "due_ms")), NOW + 86400000LL);
    char *timer_token = token_of(timer);
    {
        json_t *waits = st_snapshot_waiting_signals(snap);
        CU_ASSERT_EQUAL(json_array_size(waits), 1);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(waits, 0)) ?: "", "verified");
        json_decref(waits);
    }
    /* the old call token is stale now */
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", t1, call_ok(json_object())), &fx), -ST_ERR_STALE);
    json_t *sig = json_pack("{s:s, s:s, s:{s:s}}", "type", "SIGNAL", "name", "verified", "payload", "code", "42");
    CU_ASSERT_EQUAL(run(d, &snap, sig, &fx), ST_RUN_WAITING);
    call = effect_of(fx, "make_call", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(call);
    json_t *req = json_object_get(call, "request");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(req, "fired")), "verified");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(req, "verified"), "code")), "42");
    /* any_of: the timer branch was cancelled, its token is stale */
    CU_ASSERT_EQUAL(run(d, &snap, ev("TIMER_DUE", timer_token, NULL), &fx), -ST_ERR_STALE);
    char *t2 = token_of(call);
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", t2, call_ok(json_pack("{s:[s]}", "next", "welcome"))), &fx),
                    ST_RUN_COMPLETED);
    json_t *out = json_object_get(snap, "output");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(out, "email")), "a@b.c");
    CU_ASSERT_TRUE(json_is_true(json_object_get(out, "verified")));
    CU_ASSERT_PTR_NOT_NULL(effect_of(fx, "complete", 0));
    free(t1);
    free(t2);
    free(timer_token);
    json_decref(snap);
    json_decref(fx);
    st_defn_free(d);
}

static void test_state_reentered_by_timer_gets_new_keys(void)
{
    st_defn_t *d = st_et_compile_doc(SIGNUP);
    json_t *snap = NULL, *fx = NULL;
    run(d, &snap, json_pack("{s:s, s:{s:s}}", "type", "START", "input", "email", "x@y"), &fx);
    char *t = token_of(effect_of(fx, "make_call", 0));
    run(d, &snap, ev("CALL_RESULT", t, call_ok(json_pack("{s:[s]}", "next", "verify"))), &fx);
    free(t);
    char *keys[3] = {0};
    for (int round = 0; round < 3; round++) {
        t = token_of(effect_of(fx, "set_timer", 0));
        CU_ASSERT_EQUAL(run(d, &snap, ev("TIMER_DUE", t, NULL), &fx), ST_RUN_WAITING);
        free(t);
        json_t *call = effect_of(fx, "make_call", 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(call);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(call, "request"), "fired")), "timer");
        keys[round] = strdup(json_string_value(json_object_get(call, "idempotency_key")));
        t = token_of(call);
        /* the worker sends a reminder and goes back to verify */
        CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", t, call_ok(json_pack("{s:s, s:{s:i}}", "next", "verify",
                                                                            "attributes", "reminders", round + 1))), &fx),
                        ST_RUN_WAITING);
        free(t);
    }
    /* finished threads are dropped: re-entering a state does not grow the snapshot
     * (main thread, timeout thread, the two any_of branches of the current wait) */
    CU_ASSERT_TRUE(json_array_size(json_object_get(snap, "threads")) <= 4);
    /* the decisions updated a declared attribute */
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(snap, "state"), "reminders")), 3);
    CU_ASSERT_STRING_NOT_EQUAL(keys[0], keys[1]);
    CU_ASSERT_STRING_NOT_EQUAL(keys[1], keys[2]);
    for (int i = 0; i < 3; i++)
        free(keys[i]);
    /* a decision naming a state that is not in next fails the instance */
    t = token_of(effect_of(fx, "set_timer", 0));
    run(d, &snap, ev("TIMER_DUE", t, NULL), &fx);
    free(t);
    t = token_of(effect_of(fx, "make_call", 0));
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", t, call_ok(json_pack("{s:[s]}", "next", "submit"))), &fx),
                    ST_RUN_FAILED);
    free(t);
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(json_object_get(snap, "error"), "message")),
                                  "not one of this state's next states"));
    json_decref(snap);
    json_decref(fx);
    st_defn_free(d);
}

static const char *FANOUT =
    "{\"kind\":\"process\",\"name\":\"fan\",\"version\":1,\"queues\":[\"go\"],\"start\":[\"a\"],\"states\":["
    "{\"id\":\"a\",\"execute\":{\"transport\":\"http\",\"request\":{}},\"next\":[\"b\",\"c\",\"d\"]},"
    "{\"id\":\"b\"},"
    "{\"id\":\"c\",\"wait_until\":{\"combine\":\"all_of\",\"commands\":[{\"type\":\"queue\",\"name\":\"go\"},"
    " {\"type\":\"timer\",\"delay\":1000}]},\"next\":[\"b\"]},"
    "{\"id\":\"d\",\"execute\":{\"transport\":\"http\",\"request\":\"state\"}}]}";

static void test_parallel_next_states_and_dead_ends(void)
{
    st_defn_t *d = st_et_compile_doc(FANOUT);
    json_t *snap = NULL, *fx = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s}", "type", "START"), &fx), ST_RUN_WAITING);
    CU_ASSERT_PTR_NULL(effect_of(fx, "set_timer", 0));   /* no process timeout declared */
    char *t = token_of(effect_of(fx, "make_call", 0));
    /* b dead-ends at once, c waits for a queue and a timer (all_of), d calls */
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", t, call_ok(json_pack("{s:[s,s,s]}", "next", "b", "c", "d"))), &fx),
                    ST_RUN_WAITING);
    free(t);
    char *timer = token_of(effect_of(fx, "set_timer", 0));
    char *dcall = token_of(effect_of(fx, "make_call", 0));
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", dcall, call_ok(json_pack("{s:b}", "dead_end", 1))), &fx),
                    ST_RUN_WAITING);
    CU_ASSERT_EQUAL(run(d, &snap, ev("TIMER_DUE", timer, NULL), &fx), ST_RUN_WAITING);   /* all_of: queue too */
    json_t *sig = json_pack("{s:s, s:s, s:{}}", "type", "SIGNAL", "name", "go", "payload");
    /* c moves to b which dead-ends: no thread is left, the process completes */
    CU_ASSERT_EQUAL(run(d, &snap, sig, &fx), ST_RUN_COMPLETED);
    CU_ASSERT_TRUE(json_is_null(json_object_get(snap, "output")));
    free(timer);
    free(dcall);
    json_decref(snap);
    json_decref(fx);
    st_defn_free(d);
}

static void test_fail_decision_and_process_timeout(void)
{
    st_defn_t *d = st_et_compile_doc(SIGNUP);
    json_t *snap = NULL, *fx = NULL;
    run(d, &snap, json_pack("{s:s, s:{s:s}}", "type", "START", "input", "email", "x@y"), &fx);
    json_t *saved = json_deep_copy(snap);
    char *timeout = token_of(effect_of(fx, "set_timer", 0));
    char *t = token_of(effect_of(fx, "make_call", 0));
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", t, call_ok(json_pack("{s:s}", "fail", "blocked"))), &fx),
                    ST_RUN_FAILED);
    json_t *err = json_object_get(snap, "error");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "code")), "process_failed");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "state")), "submit");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "detail")), "blocked");
    /* from the saved snapshot, an update of an undeclared attribute fails the instance */
    json_decref(snap);
    snap = json_deep_copy(saved);
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", t, call_ok(json_pack("{s:s, s:{s:i}}", "next", "verify",
                                                                        "attributes", "nope", 1))), &fx),
                    ST_RUN_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(json_object_get(snap, "error"), "message")),
                                  "'nope' is not declared"));
    /* and there the process timeout fires instead */
    json_decref(snap);
    snap = saved;
    CU_ASSERT_EQUAL(run(d, &snap, ev("TIMER_DUE", timeout, NULL), &fx), ST_RUN_FAILED);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(snap, "error"), "code")),
                           "process_timeout");
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", t, call_ok(json_object())), &fx), -ST_ERR_STALE);
    free(t);
    free(timeout);
    json_decref(snap);
    json_decref(fx);
    st_defn_free(d);
}

static void test_canonical_recompiles_identically(void)
{
    st_defn_t *d = st_et_compile_doc(SIGNUP);
    st_defn_t *again = NULL;
    json_t *problems = NULL;
    CU_ASSERT_EQUAL(st_defn_compile(st_defn_canonical(d), &again, &problems), ST_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(again);
    CU_ASSERT_TRUE(json_equal(st_defn_canonical(d), st_defn_canonical(again)));
    CU_ASSERT_STRING_EQUAL(st_defn_kind(again), "process");
    CU_ASSERT_STRING_EQUAL(st_defn_id_reuse_policy(again), "allow_if_no_running");
    st_defn_free(again);
    st_defn_free(d);
}


/* Checks what must hold of every snapshot a run returns. */
static void check_snapshot(const json_t *snap)
{
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(snap, "schema_version")), 1);
    const char *status = json_string_value(json_object_get(snap, "status"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(status);
    int ended = strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0;
    CU_ASSERT_TRUE(ended || strcmp(status, "waiting") == 0);
    json_t *tokens = json_object();
    size_t i;
    json_t *t;
    int open_waits = 0;
    json_array_foreach(json_object_get(snap, "threads"), i, t) {
        json_t *w = json_object_get(t, "wait");
        if (json_is_true(json_object_get(t, "done"))) {
            CU_ASSERT_TRUE(json_is_null(w));
            continue;
        }
        CU_ASSERT_FALSE(ended);
        const char *tok = json_string_value(json_object_get(w, "token"));
        if (tok != NULL) {
            CU_ASSERT_PTR_NULL(json_object_get(tokens, tok));   /* tokens are unique */
            json_object_set_new(tokens, tok, json_true());
            open_waits++;
        }
    }
    CU_ASSERT_EQUAL(json_is_null(json_object_get(snap, "waiting")), open_waits == 0);
    json_decref(tokens);
}

/* Random answers (right and stale tokens, every kind of decision, signals by name)
 * never corrupt a snapshot, a refused event never changes it, and every instance ends
 * or keeps waiting with unique tokens. */
static void test_random_event_sequences(void)
{
    static const char *const choices[] = {"verify", "welcome", "submit", NULL};
    st_defn_t *defs[2] = {st_et_compile_doc(SIGNUP), st_et_compile_doc(FANOUT)};
    srand(7);
    int completed = 0, failed = 0;
    for (int n = 0; n < 300; n++) {
        st_defn_t *d = defs[n % 2];
        json_t *snap = NULL, *fx = NULL;
        CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:{s:s}}", "type", "START", "input", "email", "e"), &fx),
                        ST_RUN_WAITING);
        json_t *old_tokens = json_array();
        for (int k = 0; k < 40; k++) {
            const char *status = json_string_value(json_object_get(snap, "status"));
            if (strcmp(status, "waiting") != 0)
                break;
            /* pick a live wait, or a stale token, or a signal by name */
            json_t *waits = json_array();
            size_t i;
            json_t *t;
            json_array_foreach(json_object_get(snap, "threads"), i, t)
                if (!json_is_true(json_object_get(t, "done")) && json_object_get(json_object_get(t, "wait"), "token"))
                    json_array_append(waits, json_object_get(t, "wait"));
            json_t *event;
            int r = rand() % 10;
            if (r == 0 && json_array_size(old_tokens) > 0) {
                event = ev("TIMER_DUE", json_string_value(json_array_get(old_tokens, (size_t)rand() % json_array_size(old_tokens))), NULL);
            } else if (r == 1) {
                event = json_pack("{s:s, s:s, s:{}}", "type", "SIGNAL", "name", n % 2 ? "go" : "verified", "payload");
            } else {
                json_t *w = json_array_get(waits, (size_t)rand() % json_array_size(waits));
                const char *kind = json_string_value(json_object_get(w, "kind"));
                const char *tok = json_string_value(json_object_get(w, "token"));
                json_array_append_new(old_tokens, json_string(tok));
                if (strcmp(kind, "call") == 0) {
                    int c = rand() % 6;
                    json_t *body = c == 0   ? json_pack("{s:{}}", "complete")
                                   : c == 1 ? json_pack("{s:s}", "fail", "no")
                                   : c == 2 ? json_pack("{s:[]}", "next")
                                   : c == 3 ? json_pack("{s:s}", "next", n % 2 ? "b" : choices[rand() % 3])
                                            : json_pack("{s:[s,s]}", "next", n % 2 ? "c" : "verify",
                                                        n % 2 ? "d" : "welcome");
                    event = ev("CALL_RESULT", tok, json_pack("{s:{s:b, s:o}}", "result", "ok", rand() % 4 != 0,
                                                             "body", body));
                } else if (strcmp(kind, "signal") == 0) {
                    event = ev("SIGNAL", tok, json_object());
                } else {
                    event = ev("TIMER_DUE", tok, NULL);
                }
            }
            json_decref(waits);
            json_t *before = json_deep_copy(snap);
            int s = run(d, &snap, event, &fx);
            if (s < 0) {
                CU_ASSERT_TRUE(s == -ST_ERR_STALE || s == -ST_ERR_CONFLICT);
                CU_ASSERT_TRUE(json_equal(before, snap));   /* refused: nothing changed */
            } else {
                check_snapshot(snap);
            }
            json_decref(before);
        }
        const char *status = json_string_value(json_object_get(snap, "status"));
        completed += strcmp(status, "completed") == 0;
        failed += strcmp(status, "failed") == 0;
        json_decref(old_tokens);
        json_decref(snap);
        json_decref(fx);
    }
    /* the walk reaches both ends often */
    CU_ASSERT_TRUE(completed > 20);
    CU_ASSERT_TRUE(failed > 20);
    st_defn_free(defs[0]);
    st_defn_free(defs[1]);
}

static void test_waits_for_sees_every_thread(void)
{
    st_defn_t *d = st_et_compile_doc(
        "{\"kind\":\"process\",\"name\":\"two\",\"version\":1,\"queues\":[\"x\",\"y\"],\"start\":[\"a\",\"b\"],"
        "\"states\":[{\"id\":\"a\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"x\"}]}},"
        "{\"id\":\"b\",\"wait_until\":{\"commands\":[{\"type\":\"queue\",\"name\":\"y\"}]}}]}");
    json_t *snap = NULL, *fx = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s}", "type", "START"), &fx), ST_RUN_WAITING);
    CU_ASSERT_TRUE(waits_for(snap, "x"));
    CU_ASSERT_TRUE(waits_for(snap, "y"));
    CU_ASSERT_FALSE(waits_for(snap, "z"));
    json_t *names = st_snapshot_waiting_signals(snap);
    CU_ASSERT_EQUAL(json_array_size(names), 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(names, 0)), "x");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(names, 1)), "y");
    json_decref(names);
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:s}", "type", "SIGNAL", "name", "z"), &fx), -ST_ERR_CONFLICT);
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:s}", "type", "SIGNAL", "name", "y"), &fx), ST_RUN_WAITING);
    CU_ASSERT_FALSE(waits_for(snap, "y"));
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:s}", "type", "SIGNAL", "name", "x"), &fx), ST_RUN_COMPLETED);
    CU_ASSERT_FALSE(waits_for(snap, "x"));
    json_decref(snap);
    json_decref(fx);
    st_defn_free(d);
}

static int has_problem(const json_t *problems, const char *pointer, const char *needle)
{
    size_t i;
    json_t *p;
    json_array_foreach(problems, i, p)
        if (strcmp(json_string_value(json_object_get(p, "pointer")), pointer) == 0 &&
            strstr(json_string_value(json_object_get(p, "message")), needle))
            return 1;
    char *text = json_dumps(problems, JSON_INDENT(1));
    fprintf(stderr, "\nno problem %s ~ %s in %s\n", pointer, needle, text);
    free(text);
    return 0;
}

static json_t *problems_of(const char *text)
{
    json_t *doc = st_et_load(text);
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    CU_ASSERT_EQUAL(st_defn_compile(doc, &defn, &problems), ST_ERR_INVALID);
    CU_ASSERT_PTR_NULL(defn);
    json_decref(doc);
    return problems;
}

/* The worker protocol's request (execute with "url") and global attributes: the START
 * event's globals are merged into state and reach the worker with the locals and the
 * command results; the canonical form names the table, key and columns. */
static const char *PROTOCOL =
    "{\"kind\":\"process\",\"name\":\"proto\",\"version\":1,\"queues\":[\"go\"],"
    "\"global_table\":{\"table\":\"app.users\",\"key\":\"id\"},"
    "\"attributes\":{\"local\":{\"n\":{\"default\":1}},\"global\":{\"status\":{},\"src\":{\"column\":\"source\"}}},"
    "\"start\":[\"w\"],\"states\":[{\"id\":\"w\",\"wait_until\":{\"combine\":\"any_of\",\"commands\":["
    "{\"type\":\"queue\",\"name\":\"go\"},{\"type\":\"timer\",\"delay\":\"'1h'\"}]},"
    "\"execute\":{\"transport\":\"http\",\"url\":\"http://w:1/x\"},\"next\":[\"w\"]}]}";

static void test_worker_protocol_request_and_globals(void)
{
    st_defn_t *d = st_et_compile_doc(PROTOCOL);
    const json_t *g = json_object_get(st_defn_canonical(d), "globals");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(g, "table")), "app.users");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(g, "key")), "id");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(g, "columns"), "src")), "source");
    json_t *snap = NULL, *fx = NULL;
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:{s:i}, s:{s:{s:s, s:n}}}", "type", "START", "input", "k", 7,
                                            "payload", "globals", "status", "waiting", "src"), &fx),
                    ST_RUN_WAITING);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(snap, "state"), "status")), "waiting");
    json_t *wait = json_object_get(json_array_get(json_object_get(snap, "threads"), 1), "wait");
    CU_ASSERT_PTR_NOT_NULL_FATAL(wait);
    /* the queue message, then the call with the protocol's request */
    json_t *msg = json_pack("{s:s, s:s, s:{s:i}}", "type", "SIGNAL", "name", "go", "payload", "m", 1);
    CU_ASSERT_EQUAL(run(d, &snap, msg, &fx), ST_RUN_WAITING);
    json_t *call = effect_of(fx, "make_call", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(call);
    const json_t *req = json_object_get(call, "request");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(req, "url")), "http://w:1/x");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(req, "protocol")), "strand.process/1");
    const json_t *body = json_object_get(req, "body");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(body, "kind")), "execute");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(body, "process")), "proto");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(body, "state")), "w");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(body, "input"), "k")), 7);
    const json_t *attrs = json_object_get(body, "attributes");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(attrs, "n")), 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(attrs, "status")), "waiting");
    CU_ASSERT_TRUE(json_is_null(json_object_get(attrs, "src")));
    const json_t *results = json_object_get(body, "command_results");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(results, "go"), "m")), 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(results, "fired")), "go");
    /* the decision updates a global attribute in state (the executor writes it back) */
    char *tok = token_of(call);
    CU_ASSERT_EQUAL(run(d, &snap, ev("CALL_RESULT", tok, call_ok(json_pack("{s:{s:s}, s:b}", "attributes", "status",
                                                                          "verified", "dead_end", 1))), &fx),
                    ST_RUN_COMPLETED);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(snap, "state"), "status")), "verified");
    free(tok);
    json_decref(snap);
    json_decref(fx);
    st_defn_free(d);

    /* validation of the new fields */
    json_t *p = problems_of(
        "{\"kind\":\"process\",\"name\":\"g\",\"version\":1,\"attributes\":{\"global\":{\"a\":{\"column\":\"Bad Col\"},"
        "\"id\":{}}},\"global_table\":{\"table\":\"strand.instances\",\"key\":\"id\"},"
        "\"rpcs\":[{\"name\":\"r\",\"url\":\"ftp://x\",\"timeout_ms\":0}],\"start\":[\"s\"],\"states\":["
        "{\"id\":\"s\",\"execute\":{\"transport\":\"http\",\"url\":\"http://x/'\",\"request\":{}}}]}");
    CU_ASSERT_TRUE(has_problem(p, "/global_table", "global_table"));
    CU_ASSERT_TRUE(has_problem(p, "/attributes/global/a/column", "lower-case identifier"));
    CU_ASSERT_TRUE(has_problem(p, "/attributes/global/id/column", "key column"));
    CU_ASSERT_TRUE(has_problem(p, "/rpcs/0", "url"));
    CU_ASSERT_TRUE(has_problem(p, "/rpcs/0", "timeout_ms"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/execute/url", "http(s) URL"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/execute/url", "not both"));
    json_decref(p);
}

/* waitUntil answered by the worker: it picks a timer and queues, any_of or all_of. */
static const char *DYNWAIT =
    "{\"kind\":\"process\",\"name\":\"dyn\",\"version\":1,\"queues\":[\"go\",\"stop\"],\"start\":[\"w\"],"
    "\"states\":[{\"id\":\"w\",\"wait_until\":{\"url\":\"http://w:1/wait\"},"
    "\"execute\":{\"transport\":\"http\",\"url\":\"http://w:1/x\"},\"next\":[\"w\"]}]}";

static json_t *dyn_to_wait(st_defn_t *d, json_t **snap, json_t **fx, json_t *answer)
{
    CU_ASSERT_EQUAL(run(d, snap, json_pack("{s:s, s:{}}", "type", "START", "input"), fx), ST_RUN_WAITING);
    json_t *call = effect_of(*fx, "make_call", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(call);
    const json_t *body = json_object_get(json_object_get(call, "request"), "body");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(body, "kind")), "wait_until");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(call, "request"), "url")), "http://w:1/wait");
    char *tok = token_of(call);
    CU_ASSERT_EQUAL(run(d, snap, ev("CALL_RESULT", tok, call_ok(answer)), fx), ST_RUN_WAITING);
    free(tok);
    return *fx;
}

static void test_wait_until_chosen_by_worker(void)
{
    st_defn_t *d = st_et_compile_doc(DYNWAIT);
    json_t *snap = NULL, *fx = NULL;
    /* any_of of a 5 s timer and queue go: the queue wins; stop was not chosen */
    dyn_to_wait(d, &snap, &fx, json_pack("{s:s, s:i, s:[s]}", "combine", "any_of", "timer_ms", 5000, "queues", "go"));
    json_t *timer = effect_of(fx, "set_timer", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(timer);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(timer, "due_ms")), NOW + 5000);
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:s, s:{}}", "type", "SIGNAL", "name", "stop", "payload"), &fx),
                    -(int)ST_ERR_CONFLICT);   /* not waited for: the executor buffers it */
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:s, s:{s:i}}", "type", "SIGNAL", "name", "go", "payload", "v", 3),
                        &fx), ST_RUN_WAITING);
    json_t *call = effect_of(fx, "make_call", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(call);
    const json_t *body = json_object_get(json_object_get(call, "request"), "body");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(body, "kind")), "execute");
    const json_t *results = json_object_get(body, "command_results");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(results, "fired")), "go");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(results, "go"), "v")), 3);
    json_decref(snap);
    snap = NULL;

    /* all_of of queues go and stop, no timer: both are needed */
    dyn_to_wait(d, &snap, &fx, json_pack("{s:s, s:[s, s]}", "combine", "all_of", "queues", "go", "stop"));
    CU_ASSERT_PTR_NULL(effect_of(fx, "set_timer", 0));
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:s, s:{}}", "type", "SIGNAL", "name", "go", "payload"), &fx),
                    ST_RUN_WAITING);
    CU_ASSERT_PTR_NULL(effect_of(fx, "make_call", 0));
    CU_ASSERT_EQUAL(run(d, &snap, json_pack("{s:s, s:s, s:{}}", "type", "SIGNAL", "name", "stop", "payload"), &fx),
                    ST_RUN_WAITING);
    CU_ASSERT_PTR_NOT_NULL(effect_of(fx, "make_call", 0));
    json_decref(snap);
    snap = NULL;

    /* all_of of nothing: execute at once */
    dyn_to_wait(d, &snap, &fx, json_pack("{s:s}", "combine", "all_of"));
    call = effect_of(fx, "make_call", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(call);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(json_object_get(call, "request"), "body"),
                                                             "kind")), "execute");
    json_decref(snap);
    json_decref(fx);
    st_defn_free(d);

    json_t *p = problems_of("{\"kind\":\"process\",\"name\":\"d\",\"version\":1,\"start\":[\"w\"],\"states\":["
                            "{\"id\":\"w\",\"wait_until\":{\"url\":\"x\",\"commands\":[]}}]}");
    CU_ASSERT_TRUE(has_problem(p, "/states/0/wait_until/url", "http(s) URL"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/wait_until/commands", "only url"));
    json_decref(p);
}

static void test_every_validator_error(void)
{
    json_t *p = problems_of(
        "{\"kind\":\"process\",\"name\":\"bad\",\"version\":1,\"queues\":[\"q\"],\"start\":[\"a\",\"nowhere\"],"
        "\"id_reuse_policy\":\"sometimes\",\"timeout\":\"1 +\",\"extra\":1,"
        "\"attributes\":{\"local\":{\"x\":{\"default\":\"it's\"}},\"team\":{}},"
        "\"rpcs\":[{\"name\":\"r\",\"queue\":\"nope\"},{\"name\":\"r\"}],\"states\":["
        "{\"id\":\"a\",\"wait_until\":{\"combine\":\"some_of\",\"commands\":[{\"type\":\"queue\",\"name\":\"z\"},"
        " {\"type\":\"timer\"},{\"type\":\"cron\"}]},\"execute\":{\"transport\":\"smtp\",\"request\":{\"x\":\"1 +\"},"
        " \"on_failure\":\"ghost\"},\"next\":[\"b\",\"missing\"]},"
        "{\"id\":\"a\",\"colour\":\"red\"},"
        "{\"id\":\"b\",\"complete\":{\"v\":\"(\"},\"next\":[\"a\"]}]}");
    CU_ASSERT_TRUE(has_problem(p, "/start/1", "undefined state 'nowhere'"));
    CU_ASSERT_TRUE(has_problem(p, "/id_reuse_policy", "id_reuse_policy must be"));
    CU_ASSERT_TRUE(has_problem(p, "/timeout", "bad expression"));
    CU_ASSERT_TRUE(has_problem(p, "/extra", "unknown field"));
    CU_ASSERT_TRUE(has_problem(p, "/attributes/local/x", "quotes"));
    CU_ASSERT_TRUE(has_problem(p, "/attributes/team", "unknown attribute scope"));
    CU_ASSERT_TRUE(has_problem(p, "/rpcs/0", "undeclared queue 'nope'"));
    CU_ASSERT_TRUE(has_problem(p, "/rpcs/1", "duplicate rpc"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/wait_until/combine", "any_of or all_of"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/wait_until/commands/0/name", "undeclared queue 'z'"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/wait_until/commands/1", "exactly one of delay and until"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/wait_until/commands/2/type", "timer or queue"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/execute/transport", "http or kafka"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/execute/request/x", "bad expression"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/execute/on_failure", "defined state"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/next/1", "undefined state 'missing'"));
    CU_ASSERT_TRUE(has_problem(p, "/states/1/id", "duplicate state id"));
    CU_ASSERT_TRUE(has_problem(p, "/states/1/colour", "unknown field"));
    CU_ASSERT_TRUE(has_problem(p, "/states/2/complete", "static decision"));
    CU_ASSERT_TRUE(has_problem(p, "/states/2/complete/v", "bad expression"));
    json_decref(p);
    /* unreachable states are reported once the rest is sound */
    p = problems_of("{\"kind\":\"process\",\"name\":\"u\",\"version\":1,\"start\":[\"a\"],\"states\":["
                    "{\"id\":\"a\",\"next\":[\"b\"]},{\"id\":\"b\"},{\"id\":\"island\",\"next\":[\"a\"]}]}");
    CU_ASSERT_TRUE(has_problem(p, "/states/2", "unreachable state 'island'"));
    CU_ASSERT_EQUAL(json_array_size(p), 1);
    json_decref(p);
    p = problems_of("{\"kind\":\"process\",\"name\":\"s\",\"version\":1,\"states\":[{\"id\":\"__x\"}]}");
    CU_ASSERT_TRUE(has_problem(p, "/start", "missing"));
    CU_ASSERT_TRUE(has_problem(p, "/states/0/id", "a state needs an id"));
    json_decref(p);
}

/* The engine's part of a process's timeline and of an RPC (engine.h): a run names the
 * states its live threads stand in; the snapshot's locals and status change only
 * through engine calls, which leave the stored snapshot untouched. */
static void test_run_result_and_snapshot_edits(void)
{
    st_defn_t *d = st_et_compile_doc(SIGNUP);
    json_t *start = json_pack("{s:s, s:{s:s}}", "type", "START", "input", "email", "a@b.c");
    st_run_result_t r;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_interp_run(d, NULL, start, ID, NOW, &r, &eb), ST_OK);
    json_decref(start);
    CU_ASSERT_TRUE_FATAL(json_is_array(r.waiting_in));
    CU_ASSERT_EQUAL(json_array_size(r.waiting_in), 1);   /* the timeout's daemon left out */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(r.waiting_in, 0)) ?: "", "submit");

    json_t *locals = json_pack("{s:i}", "reminders", 3);
    json_t *changed = st_snapshot_with_locals(r.snapshot, locals);
    json_t *state = json_object_get(changed, "state");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(state, "reminders")), 3);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(state, "channel")) ?: "", "email");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(r.snapshot, "state"), "reminders")), 0);
    CU_ASSERT_EQUAL(st_snapshot_check(d, changed, &eb), ST_OK);
    json_t *ended = st_snapshot_with_status(changed, "terminated");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(ended, "status")) ?: "", "terminated");
    CU_ASSERT_TRUE(json_equal(json_object_get(changed, "status"), json_object_get(r.snapshot, "status")));
    CU_ASSERT_PTR_NULL(st_snapshot_with_status(NULL, "terminated"));
    CU_ASSERT_PTR_NULL(st_snapshot_with_locals(NULL, locals));
    json_decref(ended);
    json_decref(changed);
    json_decref(locals);
    st_run_result_close(&r);
    CU_ASSERT_PTR_NULL(r.waiting_in);
    st_defn_free(d);
}

ST_TEST_MAIN("process", ST_TEST(test_signup_verified_by_queue), ST_TEST(test_run_result_and_snapshot_edits),
             ST_TEST(test_state_reentered_by_timer_gets_new_keys),
             ST_TEST(test_parallel_next_states_and_dead_ends),
             ST_TEST(test_fail_decision_and_process_timeout),
             ST_TEST(test_canonical_recompiles_identically), ST_TEST(test_random_event_sequences),
             ST_TEST(test_waits_for_sees_every_thread), ST_TEST(test_every_validator_error),
             ST_TEST(test_worker_protocol_request_and_globals), ST_TEST(test_wait_until_chosen_by_worker))
