/*
 * interp.c - the run-to-wait interpreter (see engine.h, docs/definitions.md).
 *
 * Snapshot (a JSON object, schema_version 1):
 *   status   running | waiting | completed | failed
 *   input    the START input;  state: the instance's variables
 *   threads  [{id, parent, stack: [{path, index, loop?}], wait: {...}|null, done}]
 *            thread 0 is the main line; parallel branches are further threads
 *   waiting  the first open wait, for display (kind, token, until_ms, name)
 *   seq      counter behind waiting tokens;  output / error when ended
 * A stack frame points at a list of steps by JSON pointer into the definition and the
 * index of the next step. A run resumes the thread whose wait the event answers, then
 * runs every runnable thread until each waits or ends. All changes happen on a copy
 * of the snapshot, so a failed call leaves the caller's snapshot untouched.
 */
#include "strand/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

/* Step pointers are built with snprintf into fixed buffers. The validator refuses any
 * definition whose pointers would exceed ST_MAX_POINTER (see check_step), so no
 * pointer of an accepted definition is ever cut; GCC cannot see that bound. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

typedef struct {
    const st_defn_t *defn;
    json_t *snap;          /* owned working copy */
    json_t *effects;       /* owned */
    const json_t *event;   /* borrowed */
    const char *instance_id;
    long long now_ms;
    st_run_budget_t *budget; /* what the wake-up has left (steps, work units, time) */
    const char *code;      /* error code for fail_step() when a limit failed the step */
    int ended;             /* completed or failed */
    st_errbuf_t *eb;
    json_t *cur;           /* the thread running or resumed (borrowed): a failure names it */
    char cur_step[560];    /* the step it runs: where a retry starts again (repair.c) */
} run_t;

/* ---- small helpers ---------------------------------------------------------------- */

static const json_t *resolve(const run_t *r, const char *pointer)
{
    /* JSON pointer into the canonical definition ("/steps/1/then"). */
    const json_t *node = st_defn_canonical(r->defn);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", pointer);
    char *save = NULL;
    for (char *tok = strtok_r(buf, "/", &save); tok && node; tok = strtok_r(NULL, "/", &save)) {
        if (json_is_array(node))
            node = json_array_get(node, (size_t)atol(tok));
        else
            node = json_object_get(node, tok);
    }
    return node;
}

static const char *str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* The string member or "" when it is missing: for comparisons on data read from a
 * stored snapshot, which may be damaged (st_snapshot_check catches most of that). */
static const char *str0(const json_t *obj, const char *key)
{
    const char *v = str(obj, key);
    return v ? v : "";
}

static json_t *scope_of(run_t *r)
{
    const json_t *payload = r->event ? json_object_get(r->event, "payload") : NULL;
    return json_pack("{s:O, s:O, s:O, s:I}", "input", json_object_get(r->snap, "input"), "state",
                     json_object_get(r->snap, "state"), "event", payload ? payload : json_null(),
                     "now_ms", (json_int_t)r->now_ms);
}

/* Evaluates an expression field: strings are expressions, other JSON is literal.
 * Returns a new reference or NULL with eb set. */
static json_t *eval_value(run_t *r, const json_t *field)
{
    if (field == NULL)
        return json_null();
    if (!json_is_string(field))
        return json_deep_copy(field);
    st_expr_t *expr = NULL;
    json_t *out = NULL;
    if (st_expr_parse(json_string_value(field), &expr, r->eb) != ST_OK)
        return NULL;
    json_t *scope = scope_of(r);
    if (st_expr_eval_counted(expr, scope, &out, &r->budget->work_left, r->eb) == ST_ERR_LIMIT)
        r->code = r->budget->work_left < 0 ? "budget_exceeded" : "value_too_large";
    json_decref(scope);
    st_expr_free(expr);
    return out;
}

/* Evaluates an expression map (strings at any depth are expressions). */
static json_t *eval_map(run_t *r, const json_t *map)
{
    if (map == NULL)
        return json_object();
    if (json_is_string(map))
        return eval_value(r, map);
    if (json_is_object(map)) {
        json_t *out = json_object();
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)map, k, v) {
            json_t *e = eval_map(r, v);
            if (e == NULL) {
                json_decref(out);
                return NULL;
            }
            json_object_set_new(out, k, e);
        }
        return out;
    }
    if (json_is_array(map)) {
        json_t *out = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(map, i, v) {
            json_t *e = eval_map(r, v);
            if (e == NULL) {
                json_decref(out);
                return NULL;
            }
            json_array_append_new(out, e);
        }
        return out;
    }
    return json_deep_copy(map);
}

/* Checks a value a step is about to store or send (state, a task payload, a call
 * request, a child's input, an output) against the state size and data depth limits.
 * Returns `v`, or NULL with `v` released, eb and r->code set. */
static json_t *checked(run_t *r, json_t *v)
{
    const st_engine_limits_t *lim = st_engine_limits();
    int too_deep = 0;
    if (v == NULL || st_value_fits(v, lim->max_state_bytes, lim->max_data_depth, &r->budget->work_left, &too_deep))
        return v;
    json_decref(v);
    if (too_deep) {
        r->code = "data_too_deep";
        st_err_set(r->eb, ST_ERR_LIMIT, "the step built data nested deeper than %d levels (STRAND_DATA_MAX_DEPTH)",
                   lim->max_data_depth);
    } else {
        r->code = "state_too_large";
        st_err_set(r->eb, ST_ERR_LIMIT, "the step built data larger than %lld bytes as JSON (STRAND_STATE_MAX_BYTES)",
                   lim->max_state_bytes);
    }
    return NULL;
}

/* eval_map() for data that is kept or sent out: checked(). */
static json_t *eval_data(run_t *r, const json_t *map)
{
    return checked(r, eval_map(r, map));
}

/* Evaluates a duration (or, with `max` = ST_MAX_EPOCH_MS, a point in time) in ms. */
static long long eval_ms(run_t *r, const json_t *field, int *ok, long long max)
{
    json_t *v = eval_value(r, field);
    *ok = 0;
    long long ms = 0;
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= max) {
        ms = json_integer_value(v);
        *ok = 1;
    } else if (json_is_string(v)) {
        json_t *arg = v;
        st_errbuf_t eb;
        json_t *scope = json_pack("{s:O}", "x", arg);
        json_t *d = NULL;
        if (st_expr_eval_text("duration(x)", scope, &d, &eb) == ST_OK &&
            json_integer_value(d) <= max) {
            ms = json_integer_value(d);
            *ok = 1;
        } else {
            st_err_set(r->eb, ST_ERR_INVALID, "%s", eb.msg);
        }
        json_decref(d);
        json_decref(scope);
    } else if (v != NULL) {
        st_err_set(r->eb, ST_ERR_INVALID,
                   "a duration must be milliseconds (at most ten years) or a text like '5m'");
    }
    json_decref(v);
    return ms;
}

static void new_token(run_t *r, char *out, size_t len)
{
    json_int_t seq = json_integer_value(json_object_get(r->snap, "seq")) + 1;
    json_object_set_new(r->snap, "seq", json_integer(seq));
    snprintf(out, len, "%s/%lld", r->instance_id, (long long)seq);
}

static void effect(run_t *r, json_t *e)
{
    json_array_append_new(r->effects, e);
}

static void end_instance(run_t *r, const char *status, json_t *output, json_t *error)
{
    json_object_set_new(r->snap, "status", json_string(status));
    json_object_set_new(r->snap, "output", output ? output : json_null());
    json_object_set_new(r->snap, "error", error ? error : json_null());
    effect(r, json_pack("{s:s, s:O, s:O}", "type", status[0] == 'c' ? "complete" : "fail",
                        "output", json_object_get(r->snap, "output"), "error",
                        json_object_get(r->snap, "error")));
    r->ended = 1;
}

/* Fails the instance with the message in r->eb and the step's pointer; the code is
 * the limit's (r->code) when a limit failed the step, else step_failed. */
static void fail_step(run_t *r, const char *step_path)
{
    end_instance(r, "failed", NULL,
                 json_pack("{s:s, s:s, s:s}", "code", r->code ? r->code : "step_failed",
                           "message", r->eb->msg, "step", step_path));
}

static json_t *threads(run_t *r)
{
    return json_object_get(r->snap, "threads");
}

static json_t *push_frame(json_t *thread, const char *path)
{
    json_t *frame = json_pack("{s:s, s:i}", "path", path, "index", 0);
    json_array_append_new(json_object_get(thread, "stack"), frame);
    return frame;
}

static void set_var(run_t *r, const json_t *step, json_t *value)
{
    const char *var = str(step, "result");
    if (var == NULL)
        var = str(step, "id");
    json_object_set_new(json_object_get(r->snap, "state"), var, value);
}

/* ---- waits -------------------------------------------------------------------------- */

static void wait_on(json_t *thread, json_t *wait)
{
    json_object_set_new(thread, "wait", wait);
}

static void start_call(run_t *r, json_t *thread, const json_t *step, const char *step_path,
                       int attempt, long long visit)
{
    json_t *request = eval_data(r, json_object_get(step, "request"));
    int ok = 1;
    long long timeout = json_object_get(step, "timeout") ? eval_ms(r, json_object_get(step, "timeout"), &ok, ST_MAX_DURATION_MS)
                                                         : 30000;
    if (request == NULL || !ok) {
        json_decref(request);
        fail_step(r, step_path);
        return;
    }
    char token[160], key[300];
    new_token(r, token, sizeof token);
    /* The key names this visit of the step (the seq of its first attempt), so a call in
     * a loop or a re-entered process state is a new call, and every retry and
     * redelivery of one call carries the same key; the attempt travels apart. */
    if (visit == 0)
        visit = json_integer_value(json_object_get(r->snap, "seq"));
    snprintf(key, sizeof key, "%s:%lld:%s", r->instance_id, visit, str(step, "id"));
    json_t *e = json_pack("{s:s, s:s, s:o, s:I, s:i, s:s, s:s}", "type", "make_call", "transport",
                          str(step, "transport"), "request", request, "timeout_ms",
                          (json_int_t)timeout, "attempt", attempt, "idempotency_key", key,
                          "token", token);
    if (json_object_get(step, "consumers"))
        json_object_set(e, "consumers", json_object_get(step, "consumers"));
    json_object_set(e, "event_code", json_object_get(step, "id"));
    effect(r, e);
    /* A Kafka call has no connection to time out: a step `timeout` is a durable timer
     * on the call's own token, so whichever of result and timer comes first answers
     * the wait and the other is stale. */
    const char *transport = str(step, "transport");
    if (transport != NULL && strcmp(transport, "kafka") == 0 && json_object_get(step, "timeout"))
        effect(r, json_pack("{s:s, s:I, s:s, s:s}", "type", "set_timer", "due_ms",
                            (json_int_t)(r->now_ms + timeout), "token", token, "kind",
                            "call_timeout"));
    wait_on(thread, json_pack("{s:s, s:s, s:s, s:i, s:I}", "kind", "call", "token", token, "step",
                              step_path, "attempt", attempt, "visit", (json_int_t)visit));
}

typedef enum { STEP_NEXT, STEP_WAIT } step_outcome_t;

/* ---- process threads (goto / spawn, emitted only by the process compiler) ------------- */

static json_t *new_thread(run_t *r, json_t *parent_id, const char *path, int daemon)
{
    json_int_t id = (json_int_t)json_integer_value(json_object_get(r->snap, "next_thread"));
    json_object_set_new(r->snap, "next_thread", json_integer(id + 1));
    json_t *t = json_pack("{s:I, s:o, s:[], s:n, s:b}", "id", id, "parent", parent_id, "stack",
                          "wait", "done", 0);
    if (daemon)
        json_object_set_new(t, "daemon", json_true());
    push_frame(t, path);
    json_array_append_new(threads(r), t);
    return t;
}

/* goto: the thread continues at the first target state, further targets get threads of
 * their own, no target stops the thread (a dead end). spawn: a new thread at a state. */
static step_outcome_t exec_goto(run_t *r, json_t *thread, const json_t *step, const char *step_path)
{
    char p[600];
    if (strcmp(str0(step, "type"), "spawn") == 0) {
        snprintf(p, sizeof p, "/states/%s/steps", str(step, "state"));
        new_thread(r, json_null(), p, json_is_true(json_object_get(step, "daemon")));
        return STEP_NEXT;
    }
    json_t *targets = eval_value(r, json_object_get(step, "targets"));
    if (targets == NULL) {
        fail_step(r, step_path);
        return STEP_NEXT;
    }
    if (json_is_string(targets))
        targets = json_pack("[o]", targets);
    else if (json_is_null(targets))
        targets = json_array();
    size_t i;
    json_t *t;
    int ok = json_is_array(targets);
    json_array_foreach(targets, i, t) {
        size_t j;
        json_t *a;
        int allowed = 0;
        json_array_foreach(json_object_get(step, "allowed"), j, a)
            allowed |= json_is_string(t) && strcmp(json_string_value(a), json_string_value(t)) == 0;
        if (!allowed) {
            char *text = json_dumps(t, JSON_ENCODE_ANY);
            st_err_set(r->eb, ST_ERR_INVALID, "the decision names state %s, not one of this state's next states",
                       text ? text : "?");
            free(text);
            ok = 0;
            break;
        }
    }
    if (ok && json_array_size(threads(r)) + json_array_size(targets) > ST_MAX_THREADS) {
        st_err_set(r->eb, ST_ERR_LIMIT, "more than %d threads alive", ST_MAX_THREADS);
        ok = 0;
    } else if (!ok && !json_is_array(targets)) {
        st_err_set(r->eb, ST_ERR_INVALID, "next states must be a state id or an array of them");
    }
    if (!ok) {
        json_decref(targets);
        fail_step(r, step_path);
        return STEP_NEXT;
    }
    json_array_clear(json_object_get(thread, "stack"));
    json_array_foreach(targets, i, t) {
        snprintf(p, sizeof p, "/states/%s/steps", json_string_value(t));
        if (i == 0)
            push_frame(thread, p);
        else
            new_thread(r, json_null(), p, 0);
    }
    json_decref(targets);
    return STEP_NEXT;
}

/* ---- executing one step -------------------------------------------------------------- */

static step_outcome_t exec_step(run_t *r, json_t *thread, const json_t *step,
                                const char *step_path)
{
    const char *type = str0(step, "type");
    char p[560];
    if (strcmp(type, "set") == 0) {
        json_t *values = eval_data(r, json_object_get(step, "values"));
        if (values == NULL) {
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        json_object_update(json_object_get(r->snap, "state"), values);
        json_decref(values);
    } else if (strcmp(type, "if") == 0) {
        json_t *c = eval_value(r, json_object_get(step, "condition"));
        if (c == NULL) {
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        int t = st_expr_truthy(c);
        json_decref(c);
        if (t || json_object_get(step, "else")) {
            snprintf(p, sizeof p, "%s/%s", step_path, t ? "then" : "else");
            push_frame(thread, p);
        }
    } else if (strcmp(type, "switch") == 0) {
        size_t i;
        json_t *cs;
        json_array_foreach(json_object_get(step, "cases"), i, cs) {
            json_t *c = eval_value(r, json_object_get(cs, "when"));
            if (c == NULL) {
                fail_step(r, step_path);
                return STEP_NEXT;
            }
            int t = st_expr_truthy(c);
            json_decref(c);
            if (t) {
                snprintf(p, sizeof p, "%s/cases/%zu/steps", step_path, i);
                push_frame(thread, p);
                return STEP_NEXT;
            }
        }
        if (json_object_get(step, "default")) {
            snprintf(p, sizeof p, "%s/default", step_path);
            push_frame(thread, p);
        }
    } else if (strcmp(type, "while") == 0 || strcmp(type, "repeat") == 0) {
        int is_while = type[0] == 'w';
        json_t *c = eval_value(r, json_object_get(step, is_while ? "condition" : "times"));
        if (c == NULL) {
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        long long times = is_while ? (st_expr_truthy(c) ? 1 : 0)
                                   : json_is_integer(c) ? json_integer_value(c) : -1;
        json_decref(c);
        if (times < 0 || times > ST_MAX_LOOP) {
            st_err_set(r->eb, ST_ERR_INVALID, "repeat times must be an integer from 0 to %d", ST_MAX_LOOP);
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        if (times > 0) {
            snprintf(p, sizeof p, "%s/body", step_path);
            json_t *frame = push_frame(thread, p);
            json_object_set_new(frame, "loop", json_pack("{s:s, s:i, s:I}", "step", step_path,
                                                         "iteration", 1, "times", (json_int_t)times));
        }
    } else if (strcmp(type, "task") == 0) {
        json_t *payload = eval_data(r, json_object_get(step, "payload"));
        int ok = 1;
        long long deadline = json_object_get(step, "deadline")
                                 ? eval_ms(r, json_object_get(step, "deadline"), &ok, ST_MAX_DURATION_MS) : -1;
        if (payload == NULL || !ok) {
            json_decref(payload);
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        char token[160];
        new_token(r, token, sizeof token);
        const json_t *roles = json_object_get(step, "roles");
        json_t *e = json_pack("{s:s, s:s, s:o, s:o, s:s, s:s}", "type", "open_task", "name",
                              str(step, "name"), "roles",
                              roles ? json_deep_copy(roles) : json_array(), "payload",
                              payload, "token", token, "step", step_path);
        if (deadline >= 0)
            json_object_set_new(e, "deadline_ms", json_integer(r->now_ms + deadline));
        effect(r, e);
        wait_on(thread, json_pack("{s:s, s:s, s:s, s:s}", "kind", "task", "token", token, "step",
                                  step_path, "name", str(step, "name")));
        return STEP_WAIT;
    } else if (strcmp(type, "wait_signal") == 0) {
        char token[160];
        new_token(r, token, sizeof token);
        json_t *wait = json_pack("{s:s, s:s, s:s, s:s}", "kind", "signal", "token", token, "step",
                                 step_path, "name", str(step, "name"));
        if (json_object_get(step, "timeout")) {
            int ok;
            long long ms = eval_ms(r, json_object_get(step, "timeout"), &ok, ST_MAX_DURATION_MS);
            if (!ok) {
                json_decref(wait);
                fail_step(r, step_path);
                return STEP_NEXT;
            }
            json_object_set_new(wait, "until_ms", json_integer(r->now_ms + ms));
            effect(r, json_pack("{s:s, s:I, s:s, s:s}", "type", "set_timer", "due_ms",
                                (json_int_t)(r->now_ms + ms), "token", token, "kind", "timer"));
        }
        wait_on(thread, wait);
        return STEP_WAIT;
    } else if (strcmp(type, "timer") == 0) {
        int ok;
        const json_t *until = json_object_get(step, "until");
        long long due = until ? eval_ms(r, until, &ok, ST_MAX_EPOCH_MS)
                             : r->now_ms + eval_ms(r, json_object_get(step, "delay"), &ok, ST_MAX_DURATION_MS);
        if (!ok) {
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        char token[160];
        new_token(r, token, sizeof token);
        effect(r, json_pack("{s:s, s:I, s:s, s:s}", "type", "set_timer", "due_ms", (json_int_t)due,
                            "token", token, "kind", "timer"));
        wait_on(thread, json_pack("{s:s, s:s, s:s, s:I}", "kind", "timer", "token", token, "step",
                                  step_path, "until_ms", (json_int_t)due));
        return STEP_WAIT;
    } else if (strcmp(type, "call") == 0) {
        start_call(r, thread, step, step_path, 1, 0);
        return r->ended ? STEP_NEXT : STEP_WAIT;
    } else if (strcmp(type, "subworkflow") == 0) {
        json_t *input = eval_data(r, json_object_get(step, "input"));
        if (input == NULL) {
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        /* A child's depth is its parent's + 1: a definition that starts itself (directly
         * or through others) stops at the limit instead of recursing without end. */
        json_int_t depth = json_integer_value(json_object_get(r->snap, "depth")) + 1;
        if (depth > st_engine_limits()->max_subworkflow_depth) {
            json_decref(input);
            r->code = "subworkflow_depth_exceeded";
            st_err_set(r->eb, ST_ERR_LIMIT, "a subworkflow would be %lld levels deep, more than %d (STRAND_SUBWORKFLOW_MAX_DEPTH)",
                       (long long)depth, st_engine_limits()->max_subworkflow_depth);
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        char token[160];
        new_token(r, token, sizeof token);
        json_t *e = json_pack("{s:s, s:s, s:o, s:s, s:I}", "type", "start_child", "definition",
                              str(step, "definition"), "input", input, "token", token, "depth", depth);
        if (json_object_get(step, "version"))
            json_object_set(e, "version", json_object_get(step, "version"));
        effect(r, e);
        wait_on(thread, json_pack("{s:s, s:s, s:s}", "kind", "child", "token", token, "step",
                                  step_path));
        return STEP_WAIT;
    } else if (strcmp(type, "parallel") == 0) {
        json_t *all = threads(r);
        size_t nbranches = json_array_size(json_object_get(step, "branches"));
        if (json_array_size(all) + nbranches > ST_MAX_THREADS) {
            st_err_set(r->eb, ST_ERR_LIMIT, "more than %d parallel branches alive", ST_MAX_THREADS);
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        json_t *children = json_array();
        for (size_t i = 0; i < nbranches; i++) {
            json_int_t id = (json_int_t)json_integer_value(json_object_get(r->snap, "next_thread"));
            json_object_set_new(r->snap, "next_thread", json_integer(id + 1));
            json_t *child = json_pack("{s:I, s:I, s:[], s:n, s:b}", "id", id, "parent",
                                      json_integer_value(json_object_get(thread, "id")), "stack",
                                      "wait", "done", 0);
            snprintf(p, sizeof p, "%s/branches/%zu", step_path, i);
            push_frame(child, p);
            json_array_append_new(all, child);
            json_array_append_new(children, json_integer(id));
        }
        const char *join = str(step, "join");
        wait_on(thread, json_pack("{s:s, s:s, s:o, s:s, s:i}", "kind", "join", "step", step_path,
                                  "children", children, "mode", join ? join : "all", "finished", 0));
        return STEP_WAIT;
    } else if (strcmp(type, "merge") == 0) {
        json_t *from = checked(r, eval_value(r, json_object_get(step, "from")));
        const char *k;
        json_t *v;
        if (from != NULL && !json_is_null(from) && !json_is_object(from))
            st_err_set(r->eb, ST_ERR_INVALID, "attribute updates must be an object");
        int ok = from != NULL && (json_is_null(from) || json_is_object(from));
        json_object_foreach(json_is_object(from) ? from : NULL, k, v) {
            size_t j;
            json_t *a;
            int declared = 0;
            json_array_foreach(json_object_get(step, "allowed"), j, a)
                declared |= strcmp(json_string_value(a), k) == 0;
            if (!declared && ok) {
                st_err_set(r->eb, ST_ERR_INVALID, "attribute '%s' is not declared", k);
                ok = 0;
            }
        }
        if (!ok) {
            json_decref(from);
            fail_step(r, step_path);
            return STEP_NEXT;
        }
        if (json_is_object(from))
            json_object_update(json_object_get(r->snap, "state"), from);
        json_decref(from);
    } else if (strcmp(type, "goto") == 0 || strcmp(type, "spawn") == 0) {
        return exec_goto(r, thread, step, step_path);
    } else if (strcmp(type, "complete") == 0) {
        json_t *output = eval_data(r, json_object_get(step, "output"));
        if (output == NULL)
            fail_step(r, step_path);
        else
            end_instance(r, "completed", output, NULL);
    } else if (strcmp(type, "fail") == 0) {
        json_t *error = eval_data(r, json_object_get(step, "error"));
        if (error == NULL)
            fail_step(r, step_path);
        else
            end_instance(r, "failed", NULL, error);
    }
    return STEP_NEXT;
}

/* ---- threads -------------------------------------------------------------------------- */

static json_t *thread_by_id(run_t *r, json_int_t id)
{
    size_t i;
    json_t *t;
    json_array_foreach(threads(r), i, t)
        if (json_integer_value(json_object_get(t, "id")) == id)
            return t;
    return NULL;
}

/* Marks a thread and its descendants done (their waits become stale). While the
 * instance goes on (a `join: any` branch that lost), a wait that owns something outside
 * the snapshot (a task, a call, a child instance) gets an `abandon` effect, so the
 * service ends it too; an instance that ended ends everything it owns anyway. */
static void cancel_thread(run_t *r, json_t *t)
{
    const json_t *wait = json_object_get(t, "wait");
    const char *kind = str0(wait, "kind");
    if (!r->ended && str(wait, "token") != NULL &&
        (strcmp(kind, "task") == 0 || strcmp(kind, "call") == 0 || strcmp(kind, "child") == 0))
        effect(r, json_pack("{s:s, s:s, s:s}", "type", "abandon", "kind", kind, "token",
                            str(wait, "token")));
    json_object_set_new(t, "done", json_true());
    json_object_set_new(t, "wait", json_null());
    json_int_t id = json_integer_value(json_object_get(t, "id"));
    size_t i;
    json_t *c;
    json_array_foreach(threads(r), i, c)
        if (json_integer_value(json_object_get(c, "parent")) == id &&
            !json_is_true(json_object_get(c, "done")))
            cancel_thread(r, c);
}

/* A branch ended: update its parent's join, releasing the parent when it is met. */
static void branch_done(run_t *r, json_t *t)
{
    json_t *parent = thread_by_id(r, json_integer_value(json_object_get(t, "parent")));
    json_t *wait = parent ? json_object_get(parent, "wait") : NULL;
    if (wait == NULL || strcmp(str0(wait, "kind") ?: "", "join") != 0)
        return;
    int finished = (int)json_integer_value(json_object_get(wait, "finished")) + 1;
    json_object_set_new(wait, "finished", json_integer(finished));
    int any = strcmp(str0(wait, "mode") ?: "all", "any") == 0;
    if (!any && (size_t)finished < json_array_size(json_object_get(wait, "children")))
        return;
    size_t i;
    json_t *id;
    json_array_foreach(json_object_get(wait, "children"), i, id) {
        json_t *c = thread_by_id(r, json_integer_value(id));
        if (c && !json_is_true(json_object_get(c, "done")))
            cancel_thread(r, c);
    }
    json_object_set_new(parent, "wait", json_null());
}

/* True (with eb and r->code set) when the run has spent its budget: steps, expression
 * work units or wall time (st_engine_limits()). One more step is counted per call. */
static int over_budget(run_t *r)
{
    const st_engine_limits_t *lim = st_engine_limits();
    if (--r->budget->steps_left < 0)
        st_err_set(r->eb, ST_ERR_LIMIT, "more than %lld steps in one run (STRAND_RUN_MAX_STEPS; a loop without a wait?)",
                   lim->max_steps);
    else if (r->budget->work_left < 0)
        st_err_set(r->eb, ST_ERR_LIMIT, "the run spent more than %lld expression work units (STRAND_RUN_MAX_WORK)",
                   lim->max_work);
    else if (r->budget->deadline_ms > 0 && lim->clock_ms != NULL && lim->clock_ms() > r->budget->deadline_ms)
        st_err_set(r->eb, ST_ERR_LIMIT, "the run took longer than %lld ms (STRAND_RUN_MAX_MS)", lim->max_run_ms);
    else
        return 0;
    r->code = "budget_exceeded";
    return 1;
}

/* Runs one thread until it waits or its stack empties. */
static void run_thread(run_t *r, json_t *thread)
{
    json_t *stack = json_object_get(thread, "stack");
    r->cur = thread;
    while (!r->ended && json_is_null(json_object_get(thread, "wait"))) {
        size_t depth = json_array_size(stack);
        if (depth == 0) {
            json_object_set_new(thread, "done", json_true());
            if (json_is_null(json_object_get(thread, "parent"))) {
                /* A root thread ended (the main line, or a process thread at a dead end):
                 * the instance completes when no other non-daemon thread is alive. */
                size_t i;
                json_t *o;
                int alive = 0;
                json_array_foreach(threads(r), i, o)
                    alive |= !json_is_true(json_object_get(o, "done")) &&
                             !json_is_true(json_object_get(o, "daemon"));
                if (!alive)
                    end_instance(r, "completed", NULL, NULL);   /* fell off the end */
            } else {
                branch_done(r, thread);
            }
            return;
        }
        json_t *frame = json_array_get(stack, depth - 1);
        if (over_budget(r)) {
            char at[560];
            snprintf(at, sizeof at, "%s/%lld", str0(frame, "path"),
                     (long long)json_integer_value(json_object_get(frame, "index")));
            snprintf(r->cur_step, sizeof r->cur_step, "%s", at);
            fail_step(r, at);
            return;
        }
        const char *path = str(frame, "path");
        const json_t *list = resolve(r, path);
        json_int_t index = json_integer_value(json_object_get(frame, "index"));
        if (index >= (json_int_t)json_array_size(list)) {
            json_t *loop = json_object_get(frame, "loop");
            if (loop != NULL) {
                const json_t *lstep = resolve(r, str(loop, "step"));
                snprintf(r->cur_step, sizeof r->cur_step, "%s", str0(loop, "step"));
                json_int_t iteration = json_integer_value(json_object_get(loop, "iteration"));
                int again;
                if (strcmp(str0(lstep, "type"), "while") == 0) {
                    json_t *c = eval_value(r, json_object_get(lstep, "condition"));
                    if (c == NULL) {
                        fail_step(r, str(loop, "step"));
                        return;
                    }
                    again = st_expr_truthy(c);
                    json_decref(c);
                    if (again && iteration >= json_integer_value(json_object_get(lstep, "max_iterations"))) {
                        st_err_set(r->eb, ST_ERR_LIMIT, "while loop reached max_iterations (%lld)",
                                   (long long)iteration);
                        fail_step(r, str(loop, "step"));
                        return;
                    }
                } else {
                    again = iteration < json_integer_value(json_object_get(loop, "times"));
                }
                if (again) {
                    json_object_set_new(loop, "iteration", json_integer(iteration + 1));
                    json_object_set_new(frame, "index", json_integer(0));
                    continue;
                }
            }
            json_array_remove(stack, depth - 1);
            continue;
        }
        json_object_set_new(frame, "index", json_integer(index + 1));
        char step_path[560];
        snprintf(step_path, sizeof step_path, "%s/%lld", path, (long long)index);
        snprintf(r->cur_step, sizeof r->cur_step, "%s", step_path);
        exec_step(r, thread, json_array_get(list, (size_t)index), step_path);
    }
}

/* Runs every runnable thread until all wait or the instance ends. */
static void run_all(run_t *r)
{
    int progress = 1;
    while (progress && !r->ended) {
        progress = 0;
        for (size_t i = 0; i < json_array_size(threads(r)) && !r->ended; i++) {
            json_t *t = json_array_get(threads(r), i);
            if (json_is_true(json_object_get(t, "done")) || !json_is_null(json_object_get(t, "wait")))
                continue;
            run_thread(r, t);
            progress = 1;
        }
    }
}

/* ---- resuming a wait -------------------------------------------------------------------- */

static json_t *find_waiting(run_t *r, const char *token, const char *signal_name)
{
    size_t i;
    json_t *t;
    json_array_foreach(threads(r), i, t) {
        json_t *w = json_object_get(t, "wait");
        if (json_is_true(json_object_get(t, "done")) || !json_is_object(w) || str(w, "token") == NULL)
            continue;
        if (token != NULL && strcmp(str0(w, "token"), token) == 0)
            return t;
        if (token == NULL && signal_name != NULL && strcmp(str0(w, "kind"), "signal") == 0 &&
            strcmp(str0(w, "name"), signal_name) == 0)
            return t;
    }
    return NULL;
}

/* Applies the event to the waiting thread. Returns ST_ERR_STALE when the event does
 * not fit the wait. */
static st_err_t resume(run_t *r, json_t *thread, const char *type)
{
    json_t *wait = json_deep_copy(json_object_get(thread, "wait"));
    const char *kind = str0(wait, "kind");
    const char *step_path = str0(wait, "step");
    const json_t *step = resolve(r, step_path);
    const json_t *payload = json_object_get(r->event, "payload");
    char p[600];
    st_err_t err = ST_OK;
    r->cur = thread;
    snprintf(r->cur_step, sizeof r->cur_step, "%s", step_path);
    json_object_set_new(thread, "wait", json_null());
    if (strcmp(kind, "task") == 0 && strcmp(type, "TASK_COMPLETED") == 0) {
        const json_t *result = json_object_get(payload, "result");
        set_var(r, step, result ? json_deep_copy(result) : json_object());
    } else if (strcmp(kind, "signal") == 0 && strcmp(type, "SIGNAL") == 0) {
        set_var(r, step, payload ? json_deep_copy(payload) : json_object());
    } else if (strcmp(kind, "signal") == 0 && strcmp(type, "TIMER_DUE") == 0) {
        snprintf(p, sizeof p, "%s/on_timeout", step_path);
        push_frame(thread, p);
    } else if (strcmp(kind, "timer") == 0 && strcmp(type, "TIMER_DUE") == 0) {
        /* nothing to record: the time has come */
    } else if (strcmp(kind, "call") == 0 &&
               (strcmp(type, "CALL_RESULT") == 0 || strcmp(type, "TIMER_DUE") == 0)) {
        /* TIMER_DUE: a Kafka call's timeout passed before its result came. */
        json_t *timed_out = NULL;
        if (strcmp(type, "TIMER_DUE") == 0)
            timed_out = json_pack("{s:b, s:s, s:b}", "ok", 0, "error",
                                  "no result within the call's timeout", "timeout", 1);
        const json_t *result = timed_out ? timed_out : json_object_get(payload, "result");
        int attempt = (int)json_integer_value(json_object_get(wait, "attempt"));
        if (json_is_true(json_object_get(result, "ok"))) {
            const json_t *body = json_object_get(result, "body");
            set_var(r, step, body ? json_deep_copy(body) : json_null());
        } else {
            const json_t *retry = json_object_get(step, "retry");
            int max = retry ? (int)json_integer_value(json_object_get(retry, "max_attempts")) : 1;
            /* A call the allow-list refused ("retryable": false) fails at once. */
            int permanent = json_is_false(json_object_get(result, "retryable"));
            const char *code = json_string_value(json_object_get(result, "code"));
            if (attempt < max && !permanent) {
                long long backoff = json_integer_value(json_object_get(retry, "backoff_ms"));
                const json_t *m = json_object_get(retry, "multiplier");
                double mult = m ? json_number_value(m) : 2.0;
                double raw = (double)(backoff ? backoff : 1000) * pow(mult, attempt - 1);
                long long delay = raw > (double)ST_MAX_BACKOFF_MS ? ST_MAX_BACKOFF_MS : (long long)raw;
                char token[160];
                new_token(r, token, sizeof token);
                effect(r, json_pack("{s:s, s:I, s:s, s:s}", "type", "set_timer", "due_ms",
                                    (json_int_t)(r->now_ms + delay), "token", token, "kind", "retry"));
                wait_on(thread, json_pack("{s:s, s:s, s:s, s:i, s:I, s:O}", "kind", "retry", "token", token,
                                          "step", step_path, "attempt", attempt, "until_ms",
                                          (json_int_t)(r->now_ms + delay), "visit",
                                          json_object_get(wait, "visit")));
            } else if (json_object_get(step, "on_failure")) {
                set_var(r, step, json_pack("{s:O, s:i}", "error", result ? result : json_null(),
                                           "attempts", attempt));
                snprintf(p, sizeof p, "%s/on_failure", step_path);
                push_frame(thread, p);
            } else {
                end_instance(r, "failed", NULL,
                             json_pack("{s:s, s:s, s:O, s:i}", "code",
                                       permanent && code ? code : "call_failed", "step",
                                       step_path, "result", result ? result : json_null(),
                                       "attempts", attempt));
            }
        }
        json_decref(timed_out);
    } else if (strcmp(kind, "retry") == 0 &&
               (strcmp(type, "TIMER_DUE") == 0 || strcmp(type, "RETRY_DUE") == 0)) {
        start_call(r, thread, step, step_path, (int)json_integer_value(json_object_get(wait, "attempt")) + 1,
                   json_integer_value(json_object_get(wait, "visit")));
    } else if (strcmp(kind, "child") == 0 && strcmp(type, "CHILD_COMPLETED") == 0) {
        if (strcmp(str0(payload, "status") ? str(payload, "status") : "", "completed") == 0) {
            const json_t *output = json_object_get(payload, "output");
            set_var(r, step, output ? json_deep_copy(output) : json_null());
        } else {
            /* failed, or cancelled / terminated on its own (not by this instance) */
            const char *how = str0(payload, "status");
            const char *code = strcmp(how, "cancelled") == 0    ? "child_cancelled"
                               : strcmp(how, "terminated") == 0 ? "child_terminated"
                                                                : "child_failed";
            const json_t *error = json_object_get(payload, "error");
            if (json_object_get(step, "on_failure")) {
                set_var(r, step, json_pack("{s:O, s:s}", "error", error ? error : json_null(),
                                           "code", code));
                snprintf(p, sizeof p, "%s/on_failure", step_path);
                push_frame(thread, p);
            } else {
                end_instance(r, "failed", NULL,
                             json_pack("{s:s, s:s, s:O}", "code", code, "step", step_path,
                                       "error", error ? error : json_null()));
            }
        }
    } else {
        json_object_set(thread, "wait", wait);   /* not an answer to this wait */
        err = ST_ERR_STALE;
    }
    json_decref(wait);
    return err;
}

/* ---- the entry point ------------------------------------------------------------------ */

/* Data entering from outside (a START input, an event's payload) must fit the depth and
 * size limits before it is stored: too deep a value would be stored but could not be
 * read back. Returns 1 when it fits; else fails the instance (at `step_path`), 0;
 * `is_input`: `data` is the START input, which the failed snapshot then leaves out. */
static int entry_check(run_t *r, const json_t *data, int is_input, const char *step_path)
{
    const st_engine_limits_t *lim = st_engine_limits();
    int too_deep = 0;
    /* An event's payload wraps the data in up to two levels ({result: {ok, body}} of a
     * call, {result} of a task, {status, output} of a child): those do not count. */
    int max_depth = lim->max_data_depth + (is_input ? 0 : 2);
    if (st_value_fits(data, lim->max_state_bytes, max_depth, &r->budget->work_left, &too_deep))
        return 1;
    if (is_input)
        json_object_set_new(r->snap, "input", json_object());   /* never store what failed */
    if (too_deep) {
        r->code = "data_too_deep";
        st_err_set(r->eb, ST_ERR_LIMIT, "the %s is nested deeper than %d levels (STRAND_DATA_MAX_DEPTH)",
                   is_input ? "input" : "event's payload",
                   lim->max_data_depth);
    } else {
        r->code = "state_too_large";
        st_err_set(r->eb, ST_ERR_LIMIT, "the data is larger than %lld bytes as JSON (STRAND_STATE_MAX_BYTES)",
                   lim->max_state_bytes);
    }
    fail_step(r, step_path);
    return 0;
}

/* After the run: the whole snapshot must fit the state limit (each stored value was
 * checked, but many may add up). An instance over it fails, and its state is dropped
 * so that what is stored stays small. */
static void check_snapshot_size(run_t *r)
{
    const st_engine_limits_t *lim = st_engine_limits();
    long long work = 0;
    int too_deep = 0;
    if (st_value_fits(r->snap, lim->max_state_bytes, lim->max_data_depth + 8, &work, &too_deep))
        return;
    json_object_set_new(r->snap, "state", json_object());
    json_object_set_new(r->snap, "output", json_null());
    json_array_clear(r->effects);   /* nothing of this run goes out */
    r->ended = 0;
    if (too_deep)
        st_err_set(r->eb, ST_ERR_LIMIT, "the instance's data is nested deeper than %d levels (STRAND_DATA_MAX_DEPTH)",
                   lim->max_data_depth);
    else
        st_err_set(r->eb, ST_ERR_LIMIT, "the instance's snapshot grew past %lld bytes as JSON (STRAND_STATE_MAX_BYTES)",
                   lim->max_state_bytes);
    r->code = too_deep ? "data_too_deep" : "state_too_large";
    r->cur = NULL;   /* no one thread failed: the whole snapshot did */
    r->cur_step[0] = '\0';
    fail_step(r, "");
}

/* A failed instance keeps where it stood (snapshot "failure"): the thread that failed
 * and the step it ran, and every thread alive at that moment with its wait, so that a
 * retry (repair.c) can put them back. */
static void record_failure(run_t *r)
{
    json_t *alive = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(threads(r), i, t)
        if (!json_is_true(json_object_get(t, "done")))
            json_array_append_new(alive, json_pack("{s:O, s:O}", "id", json_object_get(t, "id"), "wait",
                                                   json_object_get(t, "wait") ?: json_null()));
    json_t *failure = json_pack("{s:o, s:o}", "threads", alive, "thread",
                                r->cur ? json_copy(json_object_get(r->cur, "id")) : json_null());
    if (r->cur_step[0])
        json_object_set_new(failure, "step", json_string(r->cur_step));
    json_object_set_new(r->snap, "failure", failure);
}

static void finish_snapshot(run_t *r)
{
    if (r->ended) {
        size_t i;
        json_t *t;
        if (strcmp(str0(r->snap, "status"), "failed") == 0)
            record_failure(r);
        json_array_foreach(threads(r), i, t)
            cancel_thread(r, t);
    }
    json_t *display = json_null();
    size_t i;
    json_t *t;
    /* A waiting instance drops its finished threads, so a long-lived instance that forks
     * again and again (a process state re-entered with several next states, a parallel
     * in a loop) neither grows its snapshot nor reaches ST_MAX_THREADS. Nothing refers
     * to a finished thread: joins look children up by id and skip missing ones. */
    if (!r->ended) {
        for (i = json_array_size(threads(r)); i-- > 0;)
            if (json_is_true(json_object_get(json_array_get(threads(r), i), "done")))
                json_array_remove(threads(r), i);
    }
    json_array_foreach(threads(r), i, t) {
        json_t *w = json_object_get(t, "wait");
        if (json_is_object(w) && str(w, "token") != NULL) {
            display = json_pack("{s:s, s:s}", "kind", str(w, "kind"), "token", str(w, "token"));
            if (json_object_get(w, "until_ms"))
                json_object_set(display, "until_ms", json_object_get(w, "until_ms"));
            if (str(w, "name"))
                json_object_set(display, "name", json_object_get(w, "name"));
            break;
        }
    }
    json_object_set_new(r->snap, "waiting", display);
    if (!r->ended)
        json_object_set_new(r->snap, "status", json_string(json_is_null(display) ? "running" : "waiting"));
}

void st_run_budget_init(st_run_budget_t *budget)
{
    const st_engine_limits_t *lim = st_engine_limits();
    budget->steps_left = lim->max_steps;
    budget->work_left = lim->max_work;
    budget->deadline_ms = lim->clock_ms ? lim->clock_ms() + lim->max_run_ms : 0;
}

st_err_t st_interp_run(const st_defn_t *defn, const json_t *snapshot, const json_t *event,
                       const char *instance_id, long long now_ms, st_run_result_t *result,
                       st_errbuf_t *eb)
{
    st_run_budget_t budget;
    st_run_budget_init(&budget);
    return st_interp_run_budget(defn, snapshot, event, instance_id, now_ms, &budget, result, eb);
}

st_err_t st_interp_run_budget(const st_defn_t *defn, const json_t *snapshot, const json_t *event,
                              const char *instance_id, long long now_ms, st_run_budget_t *budget,
                              st_run_result_t *result, st_errbuf_t *eb)
{
    st_errbuf_t local;
    run_t r = {.defn = defn, .event = event, .instance_id = instance_id, .now_ms = now_ms,
               .eb = eb ? eb : &local, .effects = json_array(), .budget = budget};
    memset(result, 0, sizeof *result);
    if (strcmp(st_defn_kind(defn), "lifecycle") == 0) {
        json_decref(r.effects);
        return st_lifecycle_run(st_defn_canonical(defn), snapshot, event, instance_id, now_ms,
                                result, r.eb);
    }
    const char *type = str(event, "type");
    if (type == NULL) {
        json_decref(r.effects);
        return st_err_set(r.eb, ST_ERR_INVALID, "the event has no type");
    }
    st_err_t err = ST_OK;
    if (snapshot == NULL) {
        if (strcmp(type, "START") != 0) {
            json_decref(r.effects);
            return st_err_set(r.eb, ST_ERR_STALE, "the instance has not started");
        }
        const json_t *input = json_object_get(event, "input");
        r.snap = json_pack("{s:i, s:s, s:o, s:{}, s:[{s:i, s:n, s:n, s:[{s:s, s:i}], s:b}],"
                           " s:i, s:i, s:n, s:n, s:n}",
                           "schema_version", ST_SNAPSHOT_SCHEMA_VERSION, "status", "running",
                           "input", json_is_object(input) ? json_deep_copy(input) : json_object(), "state",
                           "threads", "id", 0, "parent", "wait", "stack", "path", "/steps",
                           "index", 0, "done", 0, "seq", 0, "next_thread", 1, "waiting",
                           "output", "error");
        /* A child started by a subworkflow step carries its depth in START's payload. */
        const json_t *depth = json_object_get(json_object_get(event, "payload"), "depth");
        if (json_is_integer(depth) && json_integer_value(depth) > 0)
            json_object_set_new(r.snap, "depth", json_integer(json_integer_value(depth)));
        entry_check(&r, input, 1, "/steps/0");
    } else {
        const char *status = str(snapshot, "status");
        st_err_t bad = st_snapshot_check(defn, snapshot, r.eb);
        if (bad != ST_OK) {
            json_decref(r.effects);
            return bad;
        }
        if (strcmp(type, "START") == 0 || status == NULL || strcmp(status, "completed") == 0 ||
            strcmp(status, "failed") == 0) {
            json_decref(r.effects);
            return st_err_set(r.eb, ST_ERR_STALE, "the instance has already %s",
                              strcmp(type, "START") == 0 ? "started" : "ended");
        }
        r.snap = json_deep_copy(snapshot);
        const char *token = str(event, "token");
        const char *name = str(event, "name");
        json_t *thread = find_waiting(&r, token, strcmp(type, "SIGNAL") == 0 ? name : NULL);
        if (thread == NULL) {
            err = token == NULL && strcmp(type, "SIGNAL") == 0 && name != NULL
                      ? st_err_set(r.eb, ST_ERR_CONFLICT, "the instance does not wait for signal '%s' now", name)
                      : st_err_set(r.eb, ST_ERR_STALE, "no current wait has this token");
        } else if (entry_check(&r, json_object_get(event, "payload"), 0,
                               str0(json_object_get(thread, "wait"), "step"))) {
            err = resume(&r, thread, type);
            if (err == ST_ERR_STALE)
                st_err_set(r.eb, ST_ERR_STALE, "a %s event does not answer a %s wait", type,
                           str(json_object_get(thread, "wait"), "kind"));
        }
    }
    if (err != ST_OK) {
        json_decref(r.snap);
        json_decref(r.effects);
        return err;
    }
    run_all(&r);
    check_snapshot_size(&r);
    finish_snapshot(&r);
    const char *status = str(r.snap, "status");
    result->status = strcmp(status, "completed") == 0 ? ST_RUN_COMPLETED
                     : strcmp(status, "failed") == 0  ? ST_RUN_FAILED
                                                      : ST_RUN_WAITING;
    result->snapshot = r.snap;
    result->effects = r.effects;
    if (strcmp(st_defn_kind(defn), "process") == 0)
        result->waiting_in = st_process_waiting_in(r.snap);
    return ST_OK;
}

st_err_t st_interp_continue(const st_defn_t *defn, json_t *snap, json_t *effects, json_t *fail_error,
                            const char *instance_id, long long now_ms, st_run_budget_t *budget,
                            st_run_result_t *result, st_errbuf_t *eb)
{
    st_errbuf_t local;
    st_run_budget_t fresh;
    if (budget == NULL) {
        st_run_budget_init(&fresh);
        budget = &fresh;
    }
    run_t r = {.defn = defn, .snap = snap, .effects = effects, .instance_id = instance_id,
               .now_ms = now_ms, .eb = eb ? eb : &local, .budget = budget};
    memset(result, 0, sizeof *result);
    if (fail_error != NULL) {
        end_instance(&r, "failed", NULL, fail_error);
    } else {
        run_all(&r);
        check_snapshot_size(&r);
    }
    finish_snapshot(&r);
    const char *status = str(r.snap, "status");
    result->status = strcmp(status, "completed") == 0 ? ST_RUN_COMPLETED
                     : strcmp(status, "failed") == 0  ? ST_RUN_FAILED
                                                      : ST_RUN_WAITING;
    result->snapshot = r.snap;
    result->effects = r.effects;
    return ST_OK;
}

/* ---- rewind -------------------------------------------------------------------------- */

long long st_snapshot_seq(const json_t *snapshot)
{
    return snapshot ? (long long)json_integer_value(json_object_get(snapshot, "seq")) : 0;
}

/* Enters every open wait again: a thread waiting on a task, timer, signal, child, call
 * or retry goes back one step in its frame (the waiting step, which the frame had moved
 * past) and loses its wait, so run_all() runs the step again. A join's wait stays: its
 * branches are threads of their own. */
static void reenter_waits(run_t *r)
{
    static const char *const kinds[] = {"task", "timer", "signal", "child", "call", "retry", NULL};
    size_t i;
    json_t *t;
    json_array_foreach(threads(r), i, t) {
        json_t *w = json_object_get(t, "wait");
        if (json_is_true(json_object_get(t, "done")) || !json_is_object(w) || str(w, "token") == NULL)
            continue;
        int known = 0;
        for (int k = 0; kinds[k] != NULL; k++)
            known |= strcmp(str0(w, "kind"), kinds[k]) == 0;
        json_t *stack = json_object_get(t, "stack");
        size_t depth = json_array_size(stack);
        if (!known || depth == 0)
            continue;
        json_t *frame = json_array_get(stack, depth - 1);
        json_int_t index = json_integer_value(json_object_get(frame, "index"));
        char expected[600];
        snprintf(expected, sizeof expected, "%s/%lld", str0(frame, "path"), (long long)(index - 1));
        if (index < 1 || strcmp(expected, str0(w, "step")) != 0)
            continue;
        json_object_set_new(frame, "index", json_integer(index - 1));
        json_object_set_new(t, "wait", json_null());
    }
}

st_err_t st_interp_rewind(const st_defn_t *defn, const json_t *old, long long seq_floor,
                          const char *instance_id, long long now_ms, st_run_result_t *result,
                          st_errbuf_t *eb)
{
    st_errbuf_t local;
    st_run_budget_t budget;
    st_run_budget_init(&budget);
    memset(result, 0, sizeof *result);
    if (eb == NULL)
        eb = &local;
    if (old == NULL)
        return st_err_set(eb, ST_ERR_STALE, "there is no snapshot to rewind to");
    const char *status = str(old, "status");
    if (status == NULL || strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0)
        return st_err_set(eb, ST_ERR_STALE, "the snapshot to rewind to is an ended instance");
    json_t *event = json_pack("{s:s, s:I}", "type", "REWIND", "seq_floor", (json_int_t)seq_floor);
    st_err_t err;
    if (strcmp(st_defn_kind(defn), "lifecycle") == 0) {
        err = st_lifecycle_run(st_defn_canonical(defn), old, event, instance_id, now_ms, result, eb);
        json_decref(event);
        return err;
    }
    err = st_snapshot_check(defn, old, eb);
    if (err != ST_OK) {
        json_decref(event);
        return err;
    }
    run_t r = {.defn = defn, .event = event, .instance_id = instance_id, .now_ms = now_ms,
               .eb = eb, .effects = json_array(), .budget = &budget};
    r.snap = json_deep_copy(old);
    if (st_snapshot_seq(old) < seq_floor)
        json_object_set_new(r.snap, "seq", json_integer(seq_floor));
    reenter_waits(&r);
    run_all(&r);
    check_snapshot_size(&r);
    finish_snapshot(&r);
    json_decref(event);
    const char *now = str(r.snap, "status");
    result->status = strcmp(now, "completed") == 0 ? ST_RUN_COMPLETED
                     : strcmp(now, "failed") == 0  ? ST_RUN_FAILED
                                                   : ST_RUN_WAITING;
    result->snapshot = r.snap;
    result->effects = r.effects;
    return ST_OK;
}

void st_run_result_close(st_run_result_t *result)
{
    json_decref(result->snapshot);
    json_decref(result->effects);
    json_decref(result->waiting_in);
    result->snapshot = NULL;
    result->effects = NULL;
    result->waiting_in = NULL;
}
