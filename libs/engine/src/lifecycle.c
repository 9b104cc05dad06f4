/*
 * lifecycle.c - the lifecycle front end (seed 003): a blueprint of states, events and
 * transitions, per-state timeouts, and policies that select hooks routed to
 * consumers. Validation here; the run lives beside it (st_lifecycle_run).
 *
 * Runtime model: a lifecycle instance always waits for its next trigger (a named
 * SIGNAL whose name is the event code) until it reaches a final state. A valid
 * transition moves the state and emits work events (one for the transition, one per
 * selected hook), each with per-consumer ACK tracking; an invalid one changes nothing
 * but a notice (TransitionRejected, or NoOpAlreadyInState when the event would lead
 * to the state the instance is already in). Entering a state with a timeout sets a
 * durable timer; when it fires, the timeout event is applied as a system trigger
 * (TimeoutTriggered notice), repeating every `every` up to `max` times while the
 * instance stays in the state.
 *
 * A final state ends the instance (completed). strand-api refuses later triggers for
 * its reference with TransitionRejected, unless the blueprint sets
 * "restart_after_final": true; then the next trigger starts a new instance.
 */
#include "strand/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

static void problem(json_t *problems, const char *pointer, const char *msg)
{
    json_array_append_new(problems, json_pack("{s:s, s:s}", "pointer", pointer, "message", msg));
}

static int has_state(const json_t *doc, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(doc, "states"), i, s)
        if (name && strcmp(json_string_value(json_object_get(s, "name")) ?: "", name) == 0)
            return 1;
    return 0;
}

static int has_event(const json_t *doc, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(doc, "events"), i, e)
        if (name && json_is_string(e) && strcmp(json_string_value(e), name) == 0)
            return 1;
    return 0;
}

static void check_duration(json_t *problems, const char *pointer, const json_t *v)
{
    st_expr_t *e = NULL;
    st_errbuf_t eb;
    if (v == NULL)
        return;
    if (json_is_integer(v) && json_integer_value(v) > 0)
        return;
    if (!json_is_string(v) || st_expr_parse(json_string_value(v), &e, &eb) != ST_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "must be milliseconds or an expression like \"'2d'\"%s%s",
                 json_is_string(v) ? ": " : "", json_is_string(v) ? eb.msg : "");
        problem(problems, pointer, msg);
    }
    st_expr_free(e);
}

void st_lifecycle_validate(const json_t *doc, json_t *problems)
{
    char p[300], msg[300];
    const json_t *states = json_object_get(doc, "states");
    const json_t *events = json_object_get(doc, "events");
    const json_t *transitions = json_object_get(doc, "transitions");
    const json_t *routes = json_object_get(doc, "routes");
    if (!json_is_string(json_object_get(doc, "env")))
        problem(problems, "/env", "env (the environment code) must be a string");
    if (!json_is_array(states) || json_array_size(states) == 0)
        problem(problems, "/states", "states must be a non-empty array of {name, final?, timeout?}");
    if (!json_is_array(events) || json_array_size(events) == 0)
        problem(problems, "/events", "events must be a non-empty array of event codes");
    if (!json_is_array(transitions) || json_array_size(transitions) == 0)
        problem(problems, "/transitions", "transitions must be a non-empty array of {from, event, to}");
    if (!json_is_object(routes))
        problem(problems, "/routes", "routes must be an object of name: {consumers: [...]}");
    const json_t *restart = json_object_get(doc, "restart_after_final");
    if (restart != NULL && !json_is_boolean(restart))
        problem(problems, "/restart_after_final",
                "restart_after_final must be true or false (may a trigger for a reference whose"
                " instance ended start a new instance)");
    const char *initial = json_string_value(json_object_get(doc, "initial"));
    if (!has_state(doc, initial))
        problem(problems, "/initial", "initial must name one of the states");
    const char *troute = json_string_value(json_object_get(doc, "transition_route"));
    if (troute == NULL || json_object_get(routes, troute) == NULL)
        problem(problems, "/transition_route", "transition_route must name a route (who receives transition events)");
    size_t i;
    json_t *item;
    json_t *seen = json_object();
    json_array_foreach(states, i, item) {
        const char *name = json_string_value(json_object_get(item, "name"));
        snprintf(p, sizeof p, "/states/%zu/name", i);
        if (name == NULL || *name == '\0') {
            problem(problems, p, "every state needs a name");
            continue;
        }
        if (json_object_get(seen, name)) {
            snprintf(msg, sizeof msg, "duplicate state '%s'", name);
            problem(problems, p, msg);
        }
        json_object_set_new(seen, name, json_true());
        const json_t *timeout = json_object_get(item, "timeout");
        if (timeout != NULL) {
            snprintf(p, sizeof p, "/states/%zu/timeout/after", i);
            if (json_object_get(timeout, "after") == NULL)
                problem(problems, p, "a timeout needs after (a duration)");
            check_duration(problems, p, json_object_get(timeout, "after"));
            snprintf(p, sizeof p, "/states/%zu/timeout/event", i);
            if (!has_event(doc, json_string_value(json_object_get(timeout, "event"))))
                problem(problems, p, "a timeout needs an event from the events list (its path)");
            const json_t *repeat = json_object_get(timeout, "repeat");
            if (repeat != NULL) {
                snprintf(p, sizeof p, "/states/%zu/timeout/repeat/every", i);
                check_duration(problems, p, json_object_get(repeat, "every"));
                if (json_object_get(repeat, "every") == NULL)
                    problem(problems, p, "repeat needs every (a duration)");
                snprintf(p, sizeof p, "/states/%zu/timeout/repeat/max", i);
                const json_t *max = json_object_get(repeat, "max");
                if (!json_is_integer(max) || json_integer_value(max) < 1 || json_integer_value(max) > 1000)
                    problem(problems, p, "repeat needs max, an integer from 1 to 1000");
            }
        }
    }
    json_decref(seen);
    json_array_foreach(events, i, item) {
        snprintf(p, sizeof p, "/events/%zu", i);
        if (!json_is_string(item) || json_string_length(item) == 0)
            problem(problems, p, "an event code must be a non-empty string");
    }
    json_t *reachable = json_object();
    if (initial)
        json_object_set_new(reachable, initial, json_true());
    json_array_foreach(transitions, i, item) {
        const char *from = json_string_value(json_object_get(item, "from"));
        const char *to = json_string_value(json_object_get(item, "to"));
        const char *event = json_string_value(json_object_get(item, "event"));
        snprintf(p, sizeof p, "/transitions/%zu/from", i);
        if (!has_state(doc, from))
            problem(problems, p, "from must name a state");
        snprintf(p, sizeof p, "/transitions/%zu/to", i);
        if (!has_state(doc, to))
            problem(problems, p, "to must name a state (an undefined target)");
        snprintf(p, sizeof p, "/transitions/%zu/event", i);
        if (!has_event(doc, event))
            problem(problems, p, "event must be one of the events");
        for (size_t j = 0; j < i; j++) {
            const json_t *other = json_array_get(transitions, j);
            const char *of = json_string_value(json_object_get(other, "from"));
            const char *oe = json_string_value(json_object_get(other, "event"));
            if (from && event && of && oe && strcmp(from, of) == 0 && strcmp(event, oe) == 0) {
                snprintf(msg, sizeof msg, "duplicate transition from '%s' on '%s'", from, event);
                problem(problems, p, msg);
            }
        }
    }
    /* Reachability: states no transition chain from the initial state enters. */
    for (int changed = 1; changed;) {
        changed = 0;
        json_array_foreach(transitions, i, item) {
            const char *from = json_string_value(json_object_get(item, "from"));
            const char *to = json_string_value(json_object_get(item, "to"));
            if (from && to && json_object_get(reachable, from) && !json_object_get(reachable, to)) {
                json_object_set_new(reachable, to, json_true());
                changed = 1;
            }
        }
    }
    json_array_foreach(states, i, item) {
        const char *name = json_string_value(json_object_get(item, "name"));
        if (name && !json_object_get(reachable, name)) {
            snprintf(p, sizeof p, "/states/%zu", i);
            snprintf(msg, sizeof msg, "state '%s' is unreachable from the initial state", name);
            problem(problems, p, msg);
        }
    }
    json_decref(reachable);
    const char *rname;
    json_t *route;
    json_object_foreach((json_t *)routes, rname, route) {
        const json_t *consumers = json_object_get(route, "consumers");
        snprintf(p, sizeof p, "/routes/%s/consumers", rname);
        if (!json_is_array(consumers) || json_array_size(consumers) == 0)
            problem(problems, p, "a route needs a non-empty consumers array");
    }
    json_array_foreach(json_object_get(doc, "policies"), i, item) {
        const json_t *when = json_object_get(item, "when");
        snprintf(p, sizeof p, "/policies/%zu/when", i);
        if (!json_is_object(when))
            problem(problems, p, "a policy needs when: {from?, to?, event?}");
        const char *wf = json_string_value(json_object_get(when, "from"));
        const char *wt = json_string_value(json_object_get(when, "to"));
        const char *we = json_string_value(json_object_get(when, "event"));
        if ((wf && !has_state(doc, wf)) || (wt && !has_state(doc, wt)) || (we && !has_event(doc, we)))
            problem(problems, p, "when names a state or event the blueprint does not define");
        size_t j;
        json_t *hook;
        json_array_foreach(json_object_get(item, "hooks"), j, hook) {
            snprintf(p, sizeof p, "/policies/%zu/hooks/%zu/route", i, j);
            const char *hr = json_string_value(json_object_get(hook, "route"));
            if (hr == NULL || json_object_get(routes, hr) == NULL)
                problem(problems, p, "a hook's route must name a route");
            snprintf(p, sizeof p, "/policies/%zu/hooks/%zu/code", i, j);
            if (!json_is_string(json_object_get(hook, "code")))
                problem(problems, p, "a hook needs a code (the requested work)");
        }
        snprintf(p, sizeof p, "/policies/%zu/hooks", i);
        if (!json_is_array(json_object_get(item, "hooks")) || json_array_size(json_object_get(item, "hooks")) == 0)
            problem(problems, p, "a policy needs a non-empty hooks array");
    }
}

/* ---- running ----------------------------------------------------------------------- */

static const json_t *state_def(const json_t *doc, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(doc, "states"), i, s)
        if (strcmp(json_string_value(json_object_get(s, "name")), name) == 0)
            return s;
    return NULL;
}

static const json_t *find_transition(const json_t *doc, const char *from, const char *event)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(doc, "transitions"), i, t)
        if (strcmp(json_string_value(json_object_get(t, "from")), from) == 0 &&
            strcmp(json_string_value(json_object_get(t, "event")), event) == 0)
            return t;
    return NULL;
}

static long long duration_ms(const json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v);
    json_t *value = NULL;
    json_t *scope = json_object();
    st_errbuf_t eb;
    long long ms = -1;
    if (json_is_string(v) && st_expr_eval_text(json_string_value(v), scope, &value, &eb) == ST_OK) {
        json_t *dscope = json_pack("{s:O}", "x", value);
        json_t *d = NULL;
        if (st_expr_eval_text("duration(x)", dscope, &d, &eb) == ST_OK)
            ms = json_integer_value(d);
        json_decref(d);
        json_decref(dscope);
    }
    json_decref(value);
    json_decref(scope);
    return ms > ST_MAX_DURATION_MS ? ST_MAX_DURATION_MS : ms;
}

static const json_t *route_consumers(const json_t *doc, const char *route)
{
    return json_object_get(json_object_get(json_object_get(doc, "routes"), route), "consumers");
}

typedef struct {
    const json_t *doc;
    json_t *snap, *effects;
    const char *instance_id;
    long long now_ms;
} lc_run_t;

static void notice(lc_run_t *r, const char *code, const char *message, json_t *detail)
{
    json_object_set_new(detail, "external_ref", json_copy(json_object_get(r->snap, "external_ref")));
    json_object_set_new(detail, "state", json_copy(json_object_get(r->snap, "current")));
    json_array_append_new(r->effects, json_pack("{s:s, s:s, s:s, s:o}", "type", "emit_notice",
                                                "code", code, "message", message, "detail", detail));
}

static json_t *work(lc_run_t *r, const char *kind, const char *code, json_t *payload,
                    const json_t *consumers)
{
    return json_pack("{s:s, s:s, s:s, s:O, s:O, s:O, s:O, s:o, s:O}", "type", "emit_work", "kind",
                     kind, "event_code", code, "external_ref",
                     json_object_get(r->snap, "external_ref"), "env_code",
                     json_object_get(r->doc, "env"), "definition", json_object_get(r->doc, "name"),
                     "definition_version", json_object_get(r->doc, "version"), "payload", payload,
                     "consumers", consumers);
}

/* Sets the current state's timeout timer (if any) with a fresh token. */
static void arm_timeout(lc_run_t *r, int repeats_done)
{
    const char *current = json_string_value(json_object_get(r->snap, "current"));
    const json_t *timeout = json_object_get(state_def(r->doc, current), "timeout");
    json_object_set_new(r->snap, "waiting", json_pack("{s:s, s:s}", "kind", "trigger", "state", current));
    if (timeout == NULL)
        return;
    const json_t *repeat = json_object_get(timeout, "repeat");
    long long ms;
    if (repeats_done == 0)
        ms = duration_ms(json_object_get(timeout, "after"));
    else if (repeat != NULL && repeats_done <= json_integer_value(json_object_get(repeat, "max")))
        ms = duration_ms(json_object_get(repeat, "every"));
    else
        return;   /* repeated as often as allowed */
    json_int_t seq = json_integer_value(json_object_get(r->snap, "seq")) + 1;
    json_object_set_new(r->snap, "seq", json_integer(seq));
    char token[160];
    snprintf(token, sizeof token, "%s/%lld", r->instance_id, (long long)seq);
    json_array_append_new(r->effects, json_pack("{s:s, s:I, s:s, s:s}", "type", "set_timer", "due_ms",
                                                (json_int_t)(r->now_ms + ms), "token", token,
                                                "kind", "state_timeout"));
    json_object_set_new(r->snap, "waiting", json_pack("{s:s, s:s, s:s, s:I, s:i}", "kind", "trigger",
                                                      "state", current, "token", token, "until_ms",
                                                      (json_int_t)(r->now_ms + ms), "repeats", repeats_done));
}

/* Applies one trigger. `system` marks a timeout-driven one. */
static void trigger(lc_run_t *r, const char *event, const json_t *payload, int system)
{
    char current[128];   /* a copy: the snapshot's string is replaced below */
    snprintf(current, sizeof current, "%s", json_string_value(json_object_get(r->snap, "current")));
    const json_t *t = find_transition(r->doc, current, event);
    if (t == NULL) {
        /* Would any transition on this event lead to where we already are? */
        int noop = 0;
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(r->doc, "transitions"), i, x)
            noop |= strcmp(json_string_value(json_object_get(x, "event")), event) == 0 &&
                    strcmp(json_string_value(json_object_get(x, "to")), current) == 0;
        notice(r, noop ? "NoOpAlreadyInState" : "TransitionRejected",
               noop ? "the instance is already in the state this event leads to"
                    : "the event is not allowed from the current state",
               json_pack("{s:s}", "event", event));
        return;
    }
    const char *to = json_string_value(json_object_get(t, "to"));
    json_t *detail = json_pack("{s:s, s:s, s:s, s:s, s:O}", "from", current, "to", to, "event", event,
                               "actor", system ? "system" : (json_string_value(json_object_get(payload, "actor")) ?: ""),
                               "payload", json_object_get(payload, "payload") ?: json_null());
    json_array_append_new(json_object_get(r->snap, "timeline"),
                          json_pack("{s:s, s:s, s:s, s:I}", "from", current, "to", to, "event", event,
                                    "at_ms", (json_int_t)r->now_ms));
    const char *troute = json_string_value(json_object_get(r->doc, "transition_route"));
    json_array_append_new(r->effects, work(r, "transition", event, json_deep_copy(detail),
                                           route_consumers(r->doc, troute)));
    /* Hooks of every policy whose when matches this transition. */
    json_t *scope = json_pack("{s:O, s:O, s:o}", "input", json_object_get(r->snap, "input"), "event",
                              json_object_get(payload, "payload") ?: json_null(), "transition", detail);
    size_t i;
    json_t *policy;
    json_array_foreach(json_object_get(r->doc, "policies"), i, policy) {
        const json_t *when = json_object_get(policy, "when");
        const char *wf = json_string_value(json_object_get(when, "from"));
        const char *wt = json_string_value(json_object_get(when, "to"));
        const char *we = json_string_value(json_object_get(when, "event"));
        if ((wf && strcmp(wf, current) != 0) || (wt && strcmp(wt, to) != 0) || (we && strcmp(we, event) != 0))
            continue;
        size_t j;
        json_t *hook;
        json_array_foreach(json_object_get(policy, "hooks"), j, hook) {
            json_t *hp = json_object();
            const char *k;
            json_t *v;
            json_object_foreach(json_object_get(hook, "payload"), k, v) {
                json_t *value = NULL;
                st_errbuf_t eb;
                if (json_is_string(v) && st_expr_eval_text(json_string_value(v), scope, &value, &eb) == ST_OK)
                    json_object_set_new(hp, k, value);
                else
                    json_object_set(hp, k, v);   /* literals, and expressions that fail, as written */
            }
            json_array_append_new(r->effects,
                                  work(r, "hook", json_string_value(json_object_get(hook, "code")), hp,
                                       route_consumers(r->doc, json_string_value(json_object_get(hook, "route")))));
        }
    }
    json_decref(scope);
    int same = strcmp(current, to) == 0;
    json_object_set_new(r->snap, "current", json_string(to));
    if (json_is_true(json_object_get(state_def(r->doc, to), "final"))) {
        json_object_set_new(r->snap, "status", json_string("completed"));
        json_object_set_new(r->snap, "waiting", json_null());
        json_object_set_new(r->snap, "output", json_pack("{s:s}", "state", to));
        json_array_append_new(r->effects, json_pack("{s:s, s:O}", "type", "complete", "output",
                                                    json_object_get(r->snap, "output")));
        return;
    }
    if (!same || !system)
        arm_timeout(r, 0);
}

st_err_t st_lifecycle_run(const json_t *doc, const json_t *snapshot, const json_t *event,
                          const char *instance_id, long long now_ms, st_run_result_t *result,
                          st_errbuf_t *eb)
{
    const char *type = json_string_value(json_object_get(event, "type"));
    lc_run_t r = {.doc = doc, .instance_id = instance_id, .now_ms = now_ms};
    if (snapshot == NULL) {
        if (type == NULL || strcmp(type, "START") != 0)
            return st_err_set(eb, ST_ERR_STALE, "the instance has not started");
        const json_t *input = json_object_get(event, "input");
        r.snap = json_pack("{s:i, s:s, s:s, s:O, s:o, s:O, s:[], s:i, s:n, s:n, s:n}",
                           "schema_version", ST_SNAPSHOT_SCHEMA_VERSION, "kind", "lifecycle",
                           "status", "waiting", "current", json_object_get(doc, "initial"),
                           "input", json_is_object(input) ? json_deep_copy(input) : json_object(),
                           "external_ref",
                           json_object_get(input, "external_ref") ?: json_null(), "timeline",
                           "seq", 0, "waiting", "output", "error");
        r.effects = json_array();
        arm_timeout(&r, 0);
    } else {
        const char *status = json_string_value(json_object_get(snapshot, "status"));
        if (type == NULL || strcmp(type, "START") == 0 || status == NULL ||
            strcmp(status, "waiting") != 0)
            return st_err_set(eb, ST_ERR_STALE, "the lifecycle instance has %s",
                              type && strcmp(type, "START") == 0 ? "already started" : "ended");
        r.snap = json_deep_copy(snapshot);
        r.effects = json_array();
        const json_t *waiting = json_object_get(r.snap, "waiting");
        const char *token = json_string_value(json_object_get(event, "token"));
        if (strcmp(type, "REWIND") == 0) {
            /* st_interp_rewind(): tokens above the floor; the state's timeout armed again. */
            json_int_t floor = json_integer_value(json_object_get(event, "seq_floor"));
            if (json_integer_value(json_object_get(r.snap, "seq")) < floor)
                json_object_set_new(r.snap, "seq", json_integer(floor));
            if (json_string_value(json_object_get(waiting, "token")) != NULL)
                arm_timeout(&r, (int)json_integer_value(json_object_get(waiting, "repeats")));
        } else if (strcmp(type, "SIGNAL") == 0 && token == NULL) {
            const char *name = json_string_value(json_object_get(event, "name"));
            trigger(&r, name ? name : "", json_object_get(event, "payload"), 0);
        } else if (strcmp(type, "TIMER_DUE") == 0 && token &&
                   json_string_value(json_object_get(waiting, "token")) &&
                   strcmp(token, json_string_value(json_object_get(waiting, "token"))) == 0) {
            char current[128];   /* a copy: trigger() replaces the snapshot's string */
            snprintf(current, sizeof current, "%s", json_string_value(json_object_get(r.snap, "current")));
            const json_t *timeout = json_object_get(state_def(doc, current), "timeout");
            const char *tevent = json_string_value(json_object_get(timeout, "event"));
            int repeats = (int)json_integer_value(json_object_get(waiting, "repeats"));
            notice(&r, "TimeoutTriggered", "the state's timeout fired its event",
                   json_pack("{s:s, s:i}", "event", tevent, "repeat", repeats));
            trigger(&r, tevent, NULL, 1);
            /* Still in the same state (a reminder loop): arm the next repetition. */
            if (strcmp(json_string_value(json_object_get(r.snap, "status")), "waiting") == 0 &&
                strcmp(json_string_value(json_object_get(r.snap, "current")), current) == 0)
                arm_timeout(&r, repeats + 1);
        } else {
            json_decref(r.snap);
            json_decref(r.effects);
            return st_err_set(eb, ST_ERR_STALE, "no current wait has this token");
        }
    }
    const char *status = json_string_value(json_object_get(r.snap, "status"));
    result->status = strcmp(status, "completed") == 0 ? ST_RUN_COMPLETED : ST_RUN_WAITING;
    result->snapshot = r.snap;
    result->effects = r.effects;
    return ST_OK;
}

/* ---- repair (engine.h, st_repair_run) -----------------------------------------------
 *
 * A lifecycle has a state name, not steps, and no variables: retry puts a failed
 * instance back in its state (or the named one) waiting for triggers, with the state's
 * timeout armed again; fail ends it with the operator's error; fire_timer applies the
 * state's timeout now. patch_variables and skip_wait do not apply (a trigger is the way
 * to move a lifecycle). */
st_err_t st_lifecycle_repair(const json_t *doc, const json_t *snapshot, const st_repair_t *repair,
                             const char *instance_id, long long now_ms, st_run_result_t *result,
                             st_errbuf_t *eb)
{
    const char *status = json_string_value(json_object_get(snapshot, "status"));
    const char *current = json_string_value(json_object_get(snapshot, "current"));
    if (status == NULL || current == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "the lifecycle snapshot has no status or state");
    int failed = strcmp(status, "failed") == 0;
    lc_run_t r = {.doc = doc, .instance_id = instance_id, .now_ms = now_ms};
    switch (repair->verb) {
    case ST_REPAIR_RETRY: {
        if (!failed)
            return st_err_set(eb, ST_ERR_CONFLICT, "retry applies to a failed instance; this one is %s", status);
        const char *to = repair->step ? repair->step : current;
        if (state_def(doc, to) == NULL || json_is_true(json_object_get(state_def(doc, to), "final")))
            return st_err_set(eb, ST_ERR_INVALID, "step '%.200s' is not a non-final state of the lifecycle", to);
        r.snap = json_deep_copy(snapshot);
        r.effects = json_array();
        json_object_set_new(r.snap, "status", json_string("waiting"));
        json_object_set_new(r.snap, "error", json_null());
        json_object_set_new(r.snap, "current", json_string(to));
        arm_timeout(&r, 0);
        break;
    }
    case ST_REPAIR_FAIL:
        if (failed || strcmp(status, "waiting") != 0)
            return st_err_set(eb, ST_ERR_CONFLICT, "the instance is %s, not waiting", status);
        r.snap = json_deep_copy(snapshot);
        r.effects = json_array();
        json_object_set_new(r.snap, "status", json_string("failed"));
        json_object_set_new(r.snap, "waiting", json_null());
        json_object_set_new(r.snap, "error", json_pack("{s:O, s:s, s:s, s:b}", "code",
                                                       json_object_get(repair->error, "code"), "message",
                                                       json_string_value(json_object_get(repair->error, "message"))
                                                           ?: "failed by an operator",
                                                       "state", current, "by_operator", 1));
        json_array_append_new(r.effects, json_pack("{s:s, s:n, s:O}", "type", "fail", "output", "error",
                                                   json_object_get(r.snap, "error")));
        break;
    case ST_REPAIR_FIRE_TIMER: {
        const char *token = json_string_value(json_object_get(json_object_get(snapshot, "waiting"), "token"));
        if (failed || token == NULL)
            return st_err_set(eb, ST_ERR_CONFLICT, "the lifecycle instance waits on no timeout in state %s",
                              current);
        json_t *event = json_pack("{s:s, s:s, s:{}}", "type", "TIMER_DUE", "token", token, "payload");
        st_err_t err = st_lifecycle_run(doc, snapshot, event, instance_id, now_ms, result, eb);
        json_decref(event);
        return err == ST_ERR_STALE ? st_err_set(eb, ST_ERR_CONFLICT, "%s", eb->msg) : err;
    }
    case ST_REPAIR_PATCH_VARIABLES:
        return st_err_set(eb, ST_ERR_CONFLICT, "a lifecycle instance has no variables to patch");
    case ST_REPAIR_SKIP_WAIT:
        return st_err_set(eb, ST_ERR_CONFLICT, "a lifecycle instance waits for triggers: send one "
                          "(POST /v1/triggers) instead of skipping");
    default:
        return st_err_set(eb, ST_ERR_INVALID, "unknown repair verb");
    }
    const char *now = json_string_value(json_object_get(r.snap, "status"));
    result->status = strcmp(now, "failed") == 0 ? ST_RUN_FAILED : ST_RUN_WAITING;
    result->snapshot = r.snap;
    result->effects = r.effects;
    return ST_OK;
}
