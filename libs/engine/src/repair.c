/*
 * repair.c - the operator's repair verbs on one instance (see engine.h, "repair"):
 * retry, fail, patch_variables, fire_timer and skip_wait, as pure functions from a
 * stored snapshot to a run result. The service (strand-executor) applies the result in
 * the wake-up transaction of a REPAIR signal; strand-api runs the same function first
 * to answer bad input (400) and verbs that do not apply (409) before it accepts one.
 *
 * Flows and processes share the thread/frame snapshot (interp.c). A failed one keeps
 * "failure": {thread, step, threads: [{id, wait}]} (interp.c, record_failure): retry
 * puts every thread alive at the failure back, rewinding a thread that waited to the
 * step that opened its wait (a task, timer, call or child is opened again: the failure
 * ended the old ones) and the failed thread to the failed step (or a named one).
 * Lifecycles keep their state name ("current"); their verbs live in lifecycle.c.
 */
#include "strand/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

/* Pointers are bounded by ST_MAX_POINTER (checked before they are built). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

static const char *const verb_names[] = {
    [ST_REPAIR_RETRY] = "retry",
    [ST_REPAIR_FAIL] = "fail",
    [ST_REPAIR_PATCH_VARIABLES] = "patch_variables",
    [ST_REPAIR_FIRE_TIMER] = "fire_timer",
    [ST_REPAIR_SKIP_WAIT] = "skip_wait",
};

const char *st_repair_verb_name(st_repair_verb_t verb)
{
    if (verb < ST_REPAIR_RETRY || verb > ST_REPAIR_SKIP_WAIT)
        return "unknown";
    return verb_names[verb];
}

st_repair_verb_t st_repair_verb_parse(const char *name)
{
    for (int v = ST_REPAIR_RETRY; name != NULL && v <= ST_REPAIR_SKIP_WAIT; v++)
        if (strcmp(verb_names[v], name) == 0)
            return (st_repair_verb_t)v;
    return 0;
}

json_t *st_json_merge_patch(const json_t *target, const json_t *patch)
{
    if (!json_is_object(patch))
        return json_deep_copy(patch);
    json_t *out = json_is_object(target) ? json_deep_copy(target) : json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)patch, k, v) {
        if (json_is_null(v))
            json_object_del(out, k);
        else
            json_object_set_new(out, k, st_json_merge_patch(json_object_get(out, k), v));
    }
    return out;
}

static const char *str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static const char *str0(const json_t *obj, const char *key)
{
    const char *v = str(obj, key);
    return v ? v : "";
}

/* JSON pointer (no escapes) into `root`. */
static const json_t *resolve(const json_t *root, const char *pointer)
{
    char buf[600];
    if (pointer == NULL || pointer[0] != '/' || strlen(pointer) >= sizeof buf)
        return NULL;
    snprintf(buf, sizeof buf, "%s", pointer);
    const json_t *node = root;
    char *save = NULL;
    for (char *tok = strtok_r(buf, "/", &save); tok && node; tok = strtok_r(NULL, "/", &save)) {
        if (json_is_array(node)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            node = *end == '\0' && idx >= 0 ? json_array_get(node, (size_t)idx) : NULL;
        } else {
            node = json_object_get(node, tok);
        }
    }
    return node;
}

/* Finds the step whose "id" is `id` below `node` (at pointer `at`); writes its pointer
 * into `out`. Returns 1 when found. */
static int find_step_id(const json_t *node, const char *at, const char *id, char *out, size_t len)
{
    char p[600];
    if (json_is_object(node)) {
        if (str(node, "type") != NULL && strcmp(str0(node, "id"), id) == 0) {
            snprintf(out, len, "%s", at);
            return 1;
        }
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)node, k, v) {
            if (at[0] == '\0' && strcmp(k, "source") == 0)
                continue;   /* a process's original document, kept beside its steps */
            snprintf(p, sizeof p, "%s/%s", at, k);
            if (strlen(p) < ST_MAX_POINTER && find_step_id(v, p, id, out, len))
                return 1;
        }
    } else if (json_is_array(node)) {
        size_t i;
        json_t *v;
        json_array_foreach(node, i, v) {
            snprintf(p, sizeof p, "%s/%zu", at, i);
            if (strlen(p) < ST_MAX_POINTER && find_step_id(v, p, id, out, len))
                return 1;
        }
    }
    return 0;
}

/* The pointer of the step a retry names: a JSON pointer to a step, a process state's
 * name (its first step) or a step id. ST_ERR_INVALID when it names none. */
static st_err_t named_step(const st_defn_t *defn, const char *name, char *out, size_t len,
                           st_errbuf_t *eb)
{
    const json_t *canonical = st_defn_canonical(defn);
    char p[600];
    if (strlen(name) >= ST_MAX_POINTER)
        return st_err_set(eb, ST_ERR_INVALID, "step names no step of the definition");
    if (name[0] == '/') {
        const json_t *step = resolve(canonical, name);
        const char *slash = strrchr(name, '/');
        if (!json_is_object(step) || str(step, "type") == NULL || slash == name || slash[1] == '\0' ||
            strspn(slash + 1, "0123456789") != strlen(slash + 1))
            goto none;
        snprintf(out, len, "%s", name);
        return ST_OK;
    }
    snprintf(p, sizeof p, "/states/%s/steps", name);
    if (strcmp(st_defn_kind(defn), "process") == 0 && strchr(name, '/') == NULL &&
        json_array_size(resolve(canonical, p)) > 0) {
        snprintf(out, len, "%s/0", p);
        return ST_OK;
    }
    if (find_step_id(canonical, "", name, out, len))
        return ST_OK;
none:
    return st_err_set(eb, ST_ERR_INVALID, "step '%.200s' names no step of the definition "
                      "(a step id, a JSON pointer such as /steps/2, or a process state)", name);
}

static json_t *thread_by_id(json_t *snap, json_int_t id)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(snap, "threads"), i, t)
        if (json_integer_value(json_object_get(t, "id")) == id)
            return t;
    return NULL;
}

/* Moves `thread` back to the step at `pointer`: the innermost frame running that step's
 * list is cut back to it (frames above it dropped). A process thread may also jump to
 * the first step of any state. Returns 0 when the thread has no such frame. */
static int rewind_thread(json_t *thread, const char *pointer)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s", pointer);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return 0;
    *slash = '\0';
    json_int_t index = (json_int_t)atoll(slash + 1);
    json_t *stack = json_object_get(thread, "stack");
    for (size_t d = json_array_size(stack); d-- > 0;) {
        json_t *frame = json_array_get(stack, d);
        if (strcmp(str0(frame, "path"), dir) != 0)
            continue;
        while (json_array_size(stack) > d + 1)
            json_array_remove(stack, json_array_size(stack) - 1);
        json_object_set_new(frame, "index", json_integer(index));
        return 1;
    }
    char state[200];
    char rest[20];
    if (sscanf(dir, "/states/%199[^/]/%19s", state, rest) == 2 && strcmp(rest, "steps") == 0) {
        json_array_clear(stack);
        json_array_append_new(stack, json_pack("{s:s, s:I}", "path", dir, "index", index));
        return 1;
    }
    return 0;
}

/* Marks every live descendant of thread `id` done (its branches): a thread sent back
 * to an earlier step forks them again when it gets there. */
static void drop_descendants(json_t *snap, json_int_t id)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(snap, "threads"), i, t) {
        if (!json_is_integer(json_object_get(t, "parent")) ||
            json_integer_value(json_object_get(t, "parent")) != id || json_is_true(json_object_get(t, "done")))
            continue;
        json_object_set_new(t, "done", json_true());
        json_object_set_new(t, "wait", json_null());
        drop_descendants(snap, json_integer_value(json_object_get(t, "id")));
    }
}

static st_err_t retry_flow(const st_defn_t *defn, const json_t *snapshot, const st_repair_t *repair,
                           const char *instance_id, long long now_ms, st_run_budget_t *budget,
                           st_run_result_t *result, st_errbuf_t *eb)
{
    if (strcmp(str0(snapshot, "status"), "failed") != 0)
        return st_err_set(eb, ST_ERR_CONFLICT, "retry applies to a failed instance; this one is %s",
                          str0(snapshot, "status"));
    const json_t *failure = json_object_get(snapshot, "failure");
    const json_t *error = json_object_get(snapshot, "error");
    char target[600] = "";
    if (repair->step != NULL) {
        st_err_t err = named_step(defn, repair->step, target, sizeof target, eb);
        if (err != ST_OK)
            return err;
    } else if (str(failure, "step") != NULL && str(failure, "step")[0]) {
        snprintf(target, sizeof target, "%s", str(failure, "step"));
    } else if (str(error, "step") != NULL && str(error, "step")[0]) {
        snprintf(target, sizeof target, "%s", str(error, "step"));
    }
    json_t *snap = json_deep_copy(snapshot);
    json_t *failed = NULL;
    const json_t *failed_id = json_object_get(failure, "thread");
    if (json_is_integer(failed_id))
        failed = thread_by_id(snap, json_integer_value(failed_id));
    /* A daemon thread failed it (a process's timeout): its timer starts again, in full. */
    if (failed != NULL && repair->step == NULL && json_is_true(json_object_get(failed, "daemon")) &&
        strncmp(target, "/states/", 8) == 0 && strrchr(target, '/') != NULL)
        strcpy(strrchr(target, '/') + 1, "0");
    size_t i;
    json_t *entry, *t;
    /* Put back every thread alive at the failure; one that waited opens its wait again. */
    json_array_foreach(json_object_get(failure, "threads"), i, entry) {
        t = thread_by_id(snap, json_integer_value(json_object_get(entry, "id")));
        if (t == NULL)
            continue;
        const json_t *wait = json_object_get(entry, "wait");
        json_object_set_new(t, "done", json_false());
        json_object_set_new(t, "wait", json_null());
        if (t == failed)
            continue;
        if (strcmp(str0(wait, "kind"), "join") == 0)
            json_object_set_new(t, "wait", json_deep_copy(wait));
        else if (str(wait, "step") != NULL && !rewind_thread(t, str(wait, "step"))) {
            json_decref(snap);
            return st_err_set(eb, ST_ERR_CONFLICT, "thread %lld cannot go back to the step of its wait",
                              (long long)json_integer_value(json_object_get(t, "id")));
        }
    }
    if (target[0]) {
        /* The failed thread (or, without a record of it, the first thread running that
         * step's list) starts again at the target step. */
        json_t *candidates[ST_MAX_THREADS + 1];
        size_t n = 0;
        if (failed != NULL)
            candidates[n++] = failed;
        json_array_foreach(json_object_get(snap, "threads"), i, t)
            if (t != failed && n < ST_MAX_THREADS && (failure == NULL || !json_is_true(json_object_get(t, "done"))))
                candidates[n++] = t;
        int moved = 0;
        for (size_t c = 0; c < n && !moved; c++) {
            json_t *copy = json_deep_copy(json_object_get(candidates[c], "stack"));
            if (rewind_thread(candidates[c], target)) {
                json_object_set_new(candidates[c], "done", json_false());
                json_object_set_new(candidates[c], "wait", json_null());
                drop_descendants(snap, json_integer_value(json_object_get(candidates[c], "id")));
                moved = 1;
            } else {
                json_object_set_new(candidates[c], "stack", copy);
                copy = NULL;
            }
            json_decref(copy);
        }
        if (!moved) {
            json_decref(snap);
            return st_err_set(eb, ST_ERR_INVALID, "step %.200s is not on the path of the thread that "
                              "failed; name a step in a list it runs (or, in a process, a state)", target);
        }
    } else if (failure == NULL) {
        json_decref(snap);
        return st_err_set(eb, ST_ERR_CONFLICT, "the snapshot does not say where the instance failed; "
                          "name the step to run again");
    }
    json_object_del(snap, "failure");
    json_object_set_new(snap, "status", json_string("running"));
    json_object_set_new(snap, "error", json_null());
    json_object_set_new(snap, "output", json_null());
    json_object_set_new(snap, "waiting", json_null());
    st_err_t err = st_snapshot_check(defn, snap, eb);
    if (err != ST_OK) {
        json_decref(snap);
        return err;
    }
    return st_interp_continue(defn, snap, json_array(), NULL, instance_id, now_ms, budget, result, eb);
}

/* The first open wait of a live thread for which `fits` says yes; borrowed. */
static const json_t *first_wait(const json_t *snapshot, int (*fits)(const json_t *wait))
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(snapshot, "threads"), i, t) {
        const json_t *w = json_object_get(t, "wait");
        if (!json_is_true(json_object_get(t, "done")) && json_is_object(w) && str(w, "token") && fits(w))
            return w;
    }
    return NULL;
}

static int has_timer(const json_t *w)
{
    const char *kind = str0(w, "kind");
    return strcmp(kind, "timer") == 0 || strcmp(kind, "retry") == 0 ||
           (strcmp(kind, "signal") == 0 && json_object_get(w, "until_ms") != NULL);
}

static int skippable(const json_t *w)
{
    const char *kind = str0(w, "kind");
    return strcmp(kind, "task") == 0 || strcmp(kind, "signal") == 0 || strcmp(kind, "timer") == 0 ||
           strcmp(kind, "call") == 0 || strcmp(kind, "child") == 0;
}

/* Runs `event` (taken) as the interpreter would, then puts `abandon` (taken, may be
 * NULL) first among the effects. */
static st_err_t run_event(const st_defn_t *defn, const json_t *snapshot, json_t *event, json_t *abandon,
                          const char *instance_id, long long now_ms, st_run_budget_t *budget,
                          st_run_result_t *result, st_errbuf_t *eb)
{
    st_run_budget_t fresh;
    if (budget == NULL) {
        st_run_budget_init(&fresh);
        budget = &fresh;
    }
    st_err_t err = st_interp_run_budget(defn, snapshot, event, instance_id, now_ms, budget, result, eb);
    json_decref(event);
    if (err == ST_OK && abandon != NULL)
        json_array_insert_new(result->effects, 0, abandon);
    else
        json_decref(abandon);
    if (err == ST_ERR_STALE || err == ST_ERR_CONFLICT)
        err = st_err_set(eb, ST_ERR_CONFLICT, "%s", eb->msg);
    return err;
}

st_err_t st_repair_run(const st_defn_t *defn, const json_t *snapshot, const st_repair_t *repair,
                       const char *instance_id, long long now_ms, st_run_budget_t *budget,
                       st_run_result_t *result, st_errbuf_t *eb)
{
    memset(result, 0, sizeof *result);
    if (!json_is_object(snapshot))
        return st_err_set(eb, ST_ERR_CONFLICT, "the instance has not started yet");
    const char *status = str0(snapshot, "status");
    if (strcmp(status, "completed") == 0)
        return st_err_set(eb, ST_ERR_CONFLICT, "the instance has completed");
    if (repair->verb == ST_REPAIR_FAIL) {
        const json_t *error = repair->error;
        if (!json_is_object(error) || !json_is_string(json_object_get(error, "code")) ||
            json_string_length(json_object_get(error, "code")) == 0 ||
            (json_object_get(error, "message") && !json_is_string(json_object_get(error, "message"))))
            return st_err_set(eb, ST_ERR_INVALID, "error must be {code: non-empty text, message?: text}");
        if (st_engine_data_check(error, eb) != ST_OK)
            return ST_ERR_INVALID;
    }
    if (repair->verb == ST_REPAIR_PATCH_VARIABLES) {
        if (!json_is_object(repair->patch))
            return st_err_set(eb, ST_ERR_INVALID, "patch must be a JSON object (a JSON Merge Patch of "
                              "the variables, which must stay an object)");
    }
    if (repair->verb == ST_REPAIR_SKIP_WAIT && repair->payload != NULL && !json_is_object(repair->payload))
        return st_err_set(eb, ST_ERR_INVALID, "payload must be a JSON object");
    if (strcmp(st_defn_kind(defn), "lifecycle") == 0)
        return st_lifecycle_repair(st_defn_canonical(defn), snapshot, repair, instance_id, now_ms, result, eb);
    st_err_t err = st_snapshot_check(defn, snapshot, eb);
    if (err != ST_OK)
        return err;
    int failed = strcmp(status, "failed") == 0;
    switch (repair->verb) {
    case ST_REPAIR_RETRY:
        return retry_flow(defn, snapshot, repair, instance_id, now_ms, budget, result, eb);
    case ST_REPAIR_FAIL: {
        if (failed)
            return st_err_set(eb, ST_ERR_CONFLICT, "the instance has already failed");
        json_t *error = json_pack("{s:O, s:s, s:b}", "code", json_object_get(repair->error, "code"),
                                  "message", str(repair->error, "message") ? str(repair->error, "message")
                                                                          : "failed by an operator",
                                  "by_operator", 1);
        return st_interp_continue(defn, json_deep_copy(snapshot), json_array(), error, instance_id,
                                  now_ms, budget, result, eb);
    }
    case ST_REPAIR_PATCH_VARIABLES: {
        json_t *state = st_json_merge_patch(json_object_get(snapshot, "state"), repair->patch);
        if ((err = st_engine_data_check(state, eb)) != ST_OK) {
            json_decref(state);
            return ST_ERR_INVALID;
        }
        json_t *snap = json_deep_copy(snapshot);
        json_object_set_new(snap, "state", state);
        result->snapshot = snap;
        result->effects = json_array();
        result->status = failed ? ST_RUN_FAILED : ST_RUN_WAITING;
        return ST_OK;
    }
    case ST_REPAIR_FIRE_TIMER: {
        if (failed)
            return st_err_set(eb, ST_ERR_CONFLICT, "the instance has failed: retry it first");
        const json_t *w = first_wait(snapshot, has_timer);
        if (w == NULL)
            return st_err_set(eb, ST_ERR_CONFLICT, "the instance waits on no timer (a timer step, a "
                              "signal with a timeout or a call's retry backoff)");
        json_t *event = json_pack("{s:s, s:s, s:{}}", "type",
                                  strcmp(str0(w, "kind"), "retry") == 0 ? "RETRY_DUE" : "TIMER_DUE",
                                  "token", str(w, "token"), "payload");
        return run_event(defn, snapshot, event, NULL, instance_id, now_ms, budget, result, eb);
    }
    case ST_REPAIR_SKIP_WAIT: {
        if (failed)
            return st_err_set(eb, ST_ERR_CONFLICT, "the instance has failed: retry it first");
        const json_t *w = first_wait(snapshot, skippable);
        if (w == NULL)
            return st_err_set(eb, ST_ERR_CONFLICT, "the instance waits on nothing that can be skipped "
                              "(a task, signal, timer, call or child)");
        const char *kind = str0(w, "kind");
        json_t *data = repair->payload ? json_deep_copy(repair->payload) : json_object();
        json_t *event = json_pack("{s:s}", "token", str(w, "token"));
        json_t *abandon = NULL;
        if (strcmp(kind, "task") == 0) {
            json_object_set_new(event, "type", json_string("TASK_COMPLETED"));
            json_object_set_new(event, "payload", json_pack("{s:o}", "result", data));
        } else if (strcmp(kind, "signal") == 0) {
            json_object_set_new(event, "type", json_string("SIGNAL"));
            json_object_set(event, "name", json_object_get(w, "name"));
            json_object_set_new(event, "payload", data);
        } else if (strcmp(kind, "timer") == 0) {
            json_object_set_new(event, "type", json_string("TIMER_DUE"));
            json_object_set_new(event, "payload", data);
        } else if (strcmp(kind, "call") == 0) {
            json_object_set_new(event, "type", json_string("CALL_RESULT"));
            json_object_set_new(event, "payload", json_pack("{s:{s:b, s:o}}", "result", "ok", 1, "body", data));
        } else {
            json_object_set_new(event, "type", json_string("CHILD_COMPLETED"));
            json_object_set_new(event, "payload", json_pack("{s:s, s:o}", "status", "completed", "output", data));
        }
        if (strcmp(kind, "task") == 0 || strcmp(kind, "call") == 0 || strcmp(kind, "child") == 0)
            abandon = json_pack("{s:s, s:s, s:s}", "type", "abandon", "kind", kind, "token", str(w, "token"));
        return run_event(defn, snapshot, event, abandon, instance_id, now_ms, budget, result, eb);
    }
    }
    return st_err_set(eb, ST_ERR_INVALID, "unknown repair verb");
}
