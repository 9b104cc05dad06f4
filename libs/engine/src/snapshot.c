/*
 * snapshot.c - reading stored snapshots: the shape check run before an instance resumes,
 * and the questions services ask a snapshot (which signals it waits for). The snapshot
 * format is described in interp.c and docs/definitions.md.
 *
 * Snapshots come back from the database, so they are checked as outside input: a
 * snapshot that does not fit its definition (a hand-edited row, a definition swapped
 * under a running instance) is refused with ST_ERR_INVALID and a pointer to the bad
 * place, never followed into a crash.
 */
#include "strand/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

static const char *str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* JSON pointer (as the interpreter writes them: no escapes) into `root`. */
static const json_t *resolve(const json_t *root, const char *pointer)
{
    char buf[512];
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

static int is_int(const json_t *obj, const char *key, long long min)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) && json_integer_value(v) >= min;
}

static st_err_t check_thread(const json_t *canonical, const json_t *t, size_t i, st_errbuf_t *eb)
{
    if (!json_is_object(t) || !is_int(t, "id", 0) ||
        !(json_is_null(json_object_get(t, "parent")) || is_int(t, "parent", 0)) ||
        !json_is_boolean(json_object_get(t, "done")) || !json_is_array(json_object_get(t, "stack")))
        return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu: a thread needs id, parent, done and stack", i);
    size_t j;
    json_t *frame;
    json_array_foreach(json_object_get(t, "stack"), j, frame) {
        if (!json_is_object(frame) || !is_int(frame, "index", 0) ||
            !json_is_array(resolve(canonical, str(frame, "path"))))
            return st_err_set(eb, ST_ERR_INVALID,
                              "/threads/%zu/stack/%zu: a frame needs a path to a list of steps and an index", i, j);
        const json_t *loop = json_object_get(frame, "loop");
        if (loop != NULL) {
            const json_t *lstep = resolve(canonical, str(loop, "step"));
            const char *type = str(lstep, "type");
            if (!json_is_object(loop) || !is_int(loop, "iteration", 1) || type == NULL ||
                (strcmp(type, "while") != 0 && strcmp(type, "repeat") != 0) ||
                (strcmp(type, "repeat") == 0 && !is_int(loop, "times", 0)))
                return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu/stack/%zu/loop: not a loop of the definition", i, j);
        }
    }
    const json_t *w = json_object_get(t, "wait");
    if (json_is_null(w))
        return ST_OK;
    const char *kind = str(w, "kind");
    const json_t *step = resolve(canonical, str(w, "step"));
    if (!json_is_object(w) || kind == NULL || !json_is_object(step) || str(step, "type") == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu/wait: a wait needs a kind and the path of its step", i);
    /* The wait must be the one its step makes. */
    static const char *const kind_step[][2] = {{"join", "parallel"}, {"task", "task"},
                                               {"signal", "wait_signal"}, {"timer", "timer"},
                                               {"call", "call"}, {"retry", "call"},
                                               {"child", "subworkflow"}, {NULL, NULL}};
    int fits = 0;
    for (int k = 0; kind_step[k][0]; k++)
        fits |= strcmp(kind_step[k][0], kind) == 0 && strcmp(kind_step[k][1], str(step, "type")) == 0;
    if (!fits)
        return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu/wait: a %s wait does not belong to a %s step", i,
                          kind, str(step, "type"));
    if (strcmp(kind, "join") == 0) {
        const json_t *children = json_object_get(w, "children");
        size_t k;
        json_t *c;
        int ok = json_is_array(children) && str(w, "mode") && is_int(w, "finished", 0);
        json_array_foreach(children, k, c) ok &= json_is_integer(c);
        if (!ok)
            return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu/wait: a join needs children, mode and finished", i);
        return ST_OK;
    }
    static const char *const kinds[] = {"task", "signal", "timer", "call", "retry", "child", NULL};
    int known = 0;
    for (int k = 0; kinds[k]; k++)
        known |= strcmp(kinds[k], kind) == 0;
    if (!known || str(w, "token") == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu/wait: unknown wait kind or no token", i);
    if ((strcmp(kind, "call") == 0 || strcmp(kind, "retry") == 0) &&
        (!is_int(w, "attempt", 1) || json_integer_value(json_object_get(w, "attempt")) > 100))
        return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu/wait: a call wait needs its attempt", i);
    if ((strcmp(kind, "signal") == 0 || strcmp(kind, "task") == 0) && str(w, "name") == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu/wait: a %s wait needs its name", i, kind);
    return ST_OK;
}

st_err_t st_snapshot_check(const st_defn_t *defn, const json_t *snapshot, st_errbuf_t *eb)
{
    if (!json_is_object(snapshot))
        return st_err_set(eb, ST_ERR_INVALID, "a snapshot must be a JSON object");
    if (json_integer_value(json_object_get(snapshot, "schema_version")) != ST_SNAPSHOT_SCHEMA_VERSION)
        return st_err_set(eb, ST_ERR_INVALID, "/schema_version: unknown snapshot schema version");
    const char *status = str(snapshot, "status");
    if (status == NULL || (strcmp(status, "running") && strcmp(status, "waiting") &&
                           strcmp(status, "completed") && strcmp(status, "failed")))
        return st_err_set(eb, ST_ERR_INVALID, "/status: must be running, waiting, completed or failed");
    if (strcmp(st_defn_kind(defn), "lifecycle") == 0)
        return ST_OK;   /* a lifecycle snapshot has its own shape, checked by its runner */
    if (!json_is_object(json_object_get(snapshot, "state")) || !json_is_object(json_object_get(snapshot, "input")))
        return st_err_set(eb, ST_ERR_INVALID, "/state: state and input must be objects");
    if (!is_int(snapshot, "seq", 0) || !is_int(snapshot, "next_thread", 1))
        return st_err_set(eb, ST_ERR_INVALID, "/seq: seq and next_thread must be counters");
    const json_t *threads = json_object_get(snapshot, "threads");
    if (!json_is_array(threads) || json_array_size(threads) > ST_MAX_THREADS)
        return st_err_set(eb, ST_ERR_INVALID, "/threads: must be an array of at most %d threads", ST_MAX_THREADS);
    size_t i, j;
    json_t *t, *o;
    json_int_t next_thread = json_integer_value(json_object_get(snapshot, "next_thread"));
    json_array_foreach(threads, i, t) {
        st_err_t err = check_thread(st_defn_canonical(defn), t, i, eb);
        if (err != ST_OK)
            return err;
        json_int_t id = json_integer_value(json_object_get(t, "id"));
        if (id >= next_thread)
            return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu/id: not below next_thread", i);
        json_array_foreach(threads, j, o)
            if (j < i && json_integer_value(json_object_get(o, "id")) == id)
                return st_err_set(eb, ST_ERR_INVALID, "/threads/%zu/id: duplicate thread id", i);
    }
    return ST_OK;
}

json_t *st_snapshot_waiting_signals(const json_t *snapshot)
{
    json_t *names = json_array();
    if (str(snapshot, "kind") && strcmp(str(snapshot, "kind"), "lifecycle") == 0) {
        if (str(snapshot, "status") && strcmp(str(snapshot, "status"), "waiting") == 0)
            json_array_append_new(names, json_string("*"));
        return names;
    }
    size_t i, j;
    json_t *t, *n;
    json_array_foreach(json_object_get(snapshot, "threads"), i, t) {
        json_t *w = json_object_get(t, "wait");
        if (json_is_true(json_object_get(t, "done")) || !json_is_object(w) || !str(w, "kind") ||
            strcmp(str(w, "kind"), "signal") != 0 || !str(w, "name"))
            continue;
        int seen = 0;
        json_array_foreach(names, j, n) seen |= strcmp(json_string_value(n), str(w, "name")) == 0;
        if (!seen)
            json_array_append_new(names, json_string(str(w, "name")));
    }
    return names;
}

json_t *st_snapshot_with_status(const json_t *snapshot, const char *status)
{
    if (snapshot == NULL)
        return NULL;
    json_t *out = json_deep_copy(snapshot);
    if (json_is_object(out))
        json_object_set_new(out, "status", json_string(status));
    return out;
}

json_t *st_snapshot_with_locals(const json_t *snapshot, const json_t *locals)
{
    if (snapshot == NULL)
        return NULL;
    json_t *out = json_deep_copy(snapshot);
    if (!json_is_object(out))
        return out;
    json_t *state = json_object_get(out, "state");
    if (!json_is_object(state)) {
        state = json_object();
        json_object_set_new(out, "state", state);
    }
    if (json_is_object(locals))
        json_object_update(state, (json_t *)locals);
    return out;
}
