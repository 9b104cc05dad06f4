/*
 * defn.c - flow definitions: validation and the canonical form (see engine.h and
 * docs/definitions.md).
 *
 * The validator walks the whole document once and reports every problem with a JSON
 * pointer; compilation succeeds only when there is none, so an invalid definition is
 * never half-built. The canonical form is the validated document with "kind" set, and
 * is what services store and the interpreter runs.
 */
#include "strand/engine.h"

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

struct st_defn {
    json_t *canonical;
    char *name;
    char *kind;
    int version;
};

typedef struct {
    json_t *problems;
    json_t *ids;        /* step id -> pointer of its first use */
} check_t;

static void problem(check_t *c, const char *pointer, const char *fmt, const char *detail)
{
    char msg[700];
    if (snprintf(msg, sizeof msg, fmt, detail ? detail : "") >= (int)sizeof msg)
        msg[sizeof msg - 1] = '\0';   /* a long detail is cut, never overrun */
    json_array_append_new(c->problems, json_pack("{s:s, s:s}", "pointer", pointer, "message", msg));
}

/* Pointers deeper than the buffer are cut; a definition that deep is refused anyway. */
static void child_pointer(char *out, size_t len, const char *base, const char *key)
{
    if (snprintf(out, len, "%s/%s", base, key) >= (int)len)
        out[len - 1] = '\0';
}

/* Checks that `text` parses as an expression. */
static void check_expr_text(check_t *c, const char *pointer, const char *text)
{
    st_expr_t *e = NULL;
    st_errbuf_t eb;
    if (st_expr_parse(text, &e, &eb) != ST_OK)
        problem(c, pointer, "bad expression: %s", eb.msg);
    st_expr_free(e);
}

/* An expression field: a string (an expression) or a JSON literal. */
static void check_expr_value(check_t *c, const char *pointer, const json_t *v)
{
    if (json_is_string(v))
        check_expr_text(c, pointer, json_string_value(v));
}

/* An expression map: every string inside (at any depth) is an expression. */
static void check_expr_map(check_t *c, const char *pointer, const json_t *v)
{
    char p[512];
    if (json_is_string(v)) {
        check_expr_text(c, pointer, json_string_value(v));
    } else if (json_is_object(v)) {
        const char *k;
        json_t *item;
        json_object_foreach((json_t *)v, k, item) {
            child_pointer(p, sizeof p, pointer, k);
            check_expr_map(c, p, item);
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) {
            snprintf(p, sizeof p, "%s/%zu", pointer, i);
            check_expr_map(c, p, item);
        }
    }
}

static void check_steps(check_t *c, const char *pointer, const json_t *steps, int required);

static const char *const step_types[] = {"set", "if", "switch", "while", "repeat", "task",
                                         "wait_signal", "timer", "call", "subworkflow",
                                         "parallel", "complete", "fail", NULL};

static int known_type(const char *type)
{
    for (int i = 0; step_types[i]; i++)
        if (strcmp(step_types[i], type) == 0)
            return 1;
    return 0;
}

/* Requires field `key` to exist; returns it or NULL after a problem. */
static const json_t *need(check_t *c, const char *pointer, const json_t *step, const char *key,
                          const char *what)
{
    const json_t *v = json_object_get(step, key);
    if (v == NULL) {
        char p[512];
        child_pointer(p, sizeof p, pointer, key);
        problem(c, p, "missing %s", what);
    }
    return v;
}

static void check_var_name(check_t *c, const char *pointer, const json_t *step, const char *key)
{
    const json_t *v = json_object_get(step, key);
    char p[512];
    child_pointer(p, sizeof p, pointer, key);
    if (v != NULL && (!json_is_string(v) || json_string_length(v) == 0))
        problem(c, p, "must be a non-empty string (a state variable name)%s", NULL);
}

static void check_positive_int(check_t *c, const char *pointer, const json_t *v, long long max)
{
    if (v != NULL && (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)) {
        char msg[80];
        snprintf(msg, sizeof msg, "must be an integer from 1 to %lld", max);
        problem(c, pointer, "%s", msg);
    }
}

static void check_step(check_t *c, const char *pointer, const json_t *step)
{
    char p[512];
    if (!json_is_object(step)) {
        problem(c, pointer, "a step must be an object%s", NULL);
        return;
    }
    if (strlen(pointer) > ST_MAX_POINTER) {
        problem(c, "", "steps are nested too deeply (a step pointer is longer than 400)%s", NULL);
        return;
    }
    const json_t *id = json_object_get(step, "id");
    child_pointer(p, sizeof p, pointer, "id");
    if (!json_is_string(id) || json_string_length(id) == 0) {
        problem(c, p, "every step needs a non-empty string id%s", NULL);
    } else if (json_object_get(c->ids, json_string_value(id)) != NULL) {
        problem(c, p, "duplicate step id '%s'", json_string_value(id));
    } else {
        json_object_set_new(c->ids, json_string_value(id), json_string(pointer));
    }
    const char *type = json_string_value(json_object_get(step, "type"));
    child_pointer(p, sizeof p, pointer, "type");
    if (type == NULL) {
        problem(c, p, "every step needs a type%s", NULL);
        return;
    }
    if (!known_type(type)) {
        problem(c, p, "unknown step type '%s' (set, if, switch, while, repeat, task, wait_signal, "
                      "timer, call, subworkflow, parallel, complete, fail)", type);
        return;
    }
    const json_t *v;
    if (strcmp(type, "set") == 0) {
        if ((v = need(c, pointer, step, "values", "values (an object of name: expression)"))) {
            child_pointer(p, sizeof p, pointer, "values");
            if (!json_is_object(v) || json_object_size(v) == 0)
                problem(c, p, "values must be a non-empty object%s", NULL);
            else
                check_expr_map(c, p, v);
        }
    } else if (strcmp(type, "if") == 0) {
        if ((v = need(c, pointer, step, "condition", "condition")))
            child_pointer(p, sizeof p, pointer, "condition"), check_expr_value(c, p, v);
        child_pointer(p, sizeof p, pointer, "then");
        check_steps(c, p, json_object_get(step, "then"), 1);
        child_pointer(p, sizeof p, pointer, "else");
        check_steps(c, p, json_object_get(step, "else"), 0);
    } else if (strcmp(type, "switch") == 0) {
        const json_t *cases = need(c, pointer, step, "cases", "cases");
        child_pointer(p, sizeof p, pointer, "cases");
        if (cases != NULL && (!json_is_array(cases) || json_array_size(cases) == 0)) {
            problem(c, p, "cases must be a non-empty array of {when, steps}%s", NULL);
        } else {
            size_t i;
            json_t *cs;
            json_array_foreach(cases, i, cs) {
                char cp[512], fp[560];
                snprintf(cp, sizeof cp, "%s/%zu", p, i);
                const json_t *when = json_object_get(cs, "when");
                snprintf(fp, sizeof fp, "%s/when", cp);
                if (when == NULL)
                    problem(c, fp, "missing when (a condition)%s", NULL);
                else
                    check_expr_value(c, fp, when);
                snprintf(fp, sizeof fp, "%s/steps", cp);
                check_steps(c, fp, json_object_get(cs, "steps"), 1);
            }
        }
        child_pointer(p, sizeof p, pointer, "default");
        check_steps(c, p, json_object_get(step, "default"), 0);
    } else if (strcmp(type, "while") == 0 || strcmp(type, "repeat") == 0) {
        int is_while = type[0] == 'w';
        if ((v = need(c, pointer, step, is_while ? "condition" : "times",
                      is_while ? "condition" : "times (an expression)")))
            child_pointer(p, sizeof p, pointer, is_while ? "condition" : "times"), check_expr_value(c, p, v);
        if (is_while && (v = need(c, pointer, step, "max_iterations", "max_iterations (the loop's bound)")))
            child_pointer(p, sizeof p, pointer, "max_iterations"), check_positive_int(c, p, v, ST_MAX_LOOP);
        child_pointer(p, sizeof p, pointer, "body");
        check_steps(c, p, json_object_get(step, "body"), 1);
    } else if (strcmp(type, "task") == 0) {
        if ((v = need(c, pointer, step, "name", "name")) && !json_is_string(v))
            child_pointer(p, sizeof p, pointer, "name"), problem(c, p, "name must be a string%s", NULL);
        v = json_object_get(step, "roles");
        child_pointer(p, sizeof p, pointer, "roles");
        if (v != NULL) {
            size_t i;
            json_t *r;
            int ok = json_is_array(v);
            json_array_foreach(v, i, r) ok &= json_is_string(r);
            if (!ok)
                problem(c, p, "roles must be an array of strings%s", NULL);
        }
        child_pointer(p, sizeof p, pointer, "payload");
        check_expr_map(c, p, json_object_get(step, "payload"));
        child_pointer(p, sizeof p, pointer, "deadline");
        check_expr_value(c, p, json_object_get(step, "deadline"));
        check_var_name(c, pointer, step, "result");
    } else if (strcmp(type, "wait_signal") == 0) {
        if ((v = need(c, pointer, step, "name", "name (the signal's name)")) &&
            (!json_is_string(v) || json_string_length(v) == 0))
            child_pointer(p, sizeof p, pointer, "name"), problem(c, p, "name must be a non-empty string%s", NULL);
        const json_t *timeout = json_object_get(step, "timeout");
        child_pointer(p, sizeof p, pointer, "timeout");
        check_expr_value(c, p, timeout);
        child_pointer(p, sizeof p, pointer, "on_timeout");
        if (timeout != NULL && json_object_get(step, "on_timeout") == NULL)
            problem(c, p, "a timeout needs an on_timeout path (steps to run when it fires)%s", NULL);
        check_steps(c, p, json_object_get(step, "on_timeout"), 0);
        check_var_name(c, pointer, step, "result");
    } else if (strcmp(type, "timer") == 0) {
        const json_t *delay = json_object_get(step, "delay");
        const json_t *until = json_object_get(step, "until");
        if ((delay == NULL) == (until == NULL)) {
            problem(c, pointer, "a timer needs exactly one of delay (ms or '5m') and until (epoch ms)%s", NULL);
        } else {
            child_pointer(p, sizeof p, pointer, delay ? "delay" : "until");
            check_expr_value(c, p, delay ? delay : until);
        }
    } else if (strcmp(type, "call") == 0) {
        const char *transport = json_string_value(json_object_get(step, "transport"));
        child_pointer(p, sizeof p, pointer, "transport");
        if (transport == NULL || (strcmp(transport, "http") != 0 && strcmp(transport, "kafka") != 0))
            problem(c, p, "transport must be http or kafka%s", NULL);
        if ((v = need(c, pointer, step, "request", "request")))
            child_pointer(p, sizeof p, pointer, "request"), check_expr_map(c, p, v);
        if (transport && strcmp(transport, "kafka") == 0 &&
            (v = need(c, pointer, step, "consumers", "consumers (who must ACK the work event)")) &&
            (!json_is_array(v) || json_array_size(v) == 0))
            child_pointer(p, sizeof p, pointer, "consumers"), problem(c, p, "consumers must be a non-empty array%s", NULL);
        child_pointer(p, sizeof p, pointer, "timeout");
        check_expr_value(c, p, json_object_get(step, "timeout"));
        const json_t *retry = json_object_get(step, "retry");
        if (retry != NULL) {
            child_pointer(p, sizeof p, pointer, "retry");
            if (!json_is_object(retry)) {
                problem(c, p, "retry must be {max_attempts, backoff_ms, multiplier}%s", NULL);
            } else {
                char rp[560];
                snprintf(rp, sizeof rp, "%s/max_attempts", p);
                check_positive_int(c, rp, json_object_get(retry, "max_attempts"), 100);
                snprintf(rp, sizeof rp, "%s/backoff_ms", p);
                check_positive_int(c, rp, json_object_get(retry, "backoff_ms"), 86400000LL * 30);
                const json_t *m = json_object_get(retry, "multiplier");
                snprintf(rp, sizeof rp, "%s/multiplier", p);
                if (m != NULL && (!json_is_number(m) || json_number_value(m) < 1 || json_number_value(m) > 10))
                    problem(c, rp, "multiplier must be a number from 1 to 10%s", NULL);
            }
        }
        child_pointer(p, sizeof p, pointer, "on_failure");
        check_steps(c, p, json_object_get(step, "on_failure"), 0);
        check_var_name(c, pointer, step, "result");
    } else if (strcmp(type, "subworkflow") == 0) {
        if ((v = need(c, pointer, step, "definition", "definition (a name)")) && !json_is_string(v))
            child_pointer(p, sizeof p, pointer, "definition"), problem(c, p, "definition must be a string%s", NULL);
        child_pointer(p, sizeof p, pointer, "version");
        check_positive_int(c, p, json_object_get(step, "version"), 1000000);
        child_pointer(p, sizeof p, pointer, "input");
        check_expr_map(c, p, json_object_get(step, "input"));
        child_pointer(p, sizeof p, pointer, "on_failure");
        check_steps(c, p, json_object_get(step, "on_failure"), 0);
        check_var_name(c, pointer, step, "result");
    } else if (strcmp(type, "parallel") == 0) {
        const json_t *branches = need(c, pointer, step, "branches", "branches (arrays of steps)");
        child_pointer(p, sizeof p, pointer, "branches");
        if (branches != NULL && (!json_is_array(branches) || json_array_size(branches) < 2)) {
            problem(c, p, "a parallel step needs at least two branches to fork%s", NULL);
        } else {
            size_t i;
            json_t *b;
            json_array_foreach(branches, i, b) {
                char bp[560];
                snprintf(bp, sizeof bp, "%s/%zu", p, i);
                check_steps(c, bp, b, 1);
            }
        }
        const char *join = json_string_value(json_object_get(step, "join"));
        child_pointer(p, sizeof p, pointer, "join");
        if (json_object_get(step, "join") != NULL &&
            (join == NULL || (strcmp(join, "all") != 0 && strcmp(join, "any") != 0)))
            problem(c, p, "join must be all or any%s", NULL);
    } else if (strcmp(type, "complete") == 0) {
        child_pointer(p, sizeof p, pointer, "output");
        check_expr_map(c, p, json_object_get(step, "output"));
    } else if (strcmp(type, "fail") == 0) {
        child_pointer(p, sizeof p, pointer, "error");
        check_expr_map(c, p, json_object_get(step, "error"));
    }
}

static void check_steps(check_t *c, const char *pointer, const json_t *steps, int required)
{
    if (steps == NULL) {
        if (required)
            problem(c, pointer, "missing steps%s", NULL);
        return;
    }
    if (!json_is_array(steps) || (required && json_array_size(steps) == 0)) {
        problem(c, pointer, "must be a non-empty array of steps%s", NULL);
        return;
    }
    size_t i;
    json_t *step;
    int ended = 0;
    json_array_foreach(steps, i, step) {
        char p[512];
        snprintf(p, sizeof p, "%s/%zu", pointer, i);
        if (ended)
            problem(c, p, "unreachable: a complete or fail step comes before it%s", NULL);
        check_step(c, p, step);
        const char *type = json_string_value(json_object_get(step, "type"));
        if (type && (strcmp(type, "complete") == 0 || strcmp(type, "fail") == 0))
            ended = 1;
    }
}

/* Name and version, common to every kind. */
static void compile_header(const json_t *doc, check_t *c)
{
    const json_t *name = json_object_get(doc, "name");
    const json_t *version = json_object_get(doc, "version");
    if (!json_is_string(name) || json_string_length(name) == 0 || json_string_length(name) > 120)
        problem(c, "/name", "name must be a non-empty string of at most 120 characters%s", NULL);
    if (!json_is_integer(version) || json_integer_value(version) < 1 ||
        json_integer_value(version) > 1000000)
        problem(c, "/version", "version must be a positive integer%s", NULL);
}

static st_err_t compile_flow(const json_t *doc, check_t *c)
{
    compile_header(doc, c);
    check_steps(c, "/steps", json_object_get(doc, "steps"), 1);
    const char *key;
    json_t *v;
    static const char *const known[] = {"kind", "name", "version", "steps", "description", NULL};
    json_object_foreach((json_t *)doc, key, v) {
        int ok = 0;
        for (int i = 0; known[i]; i++)
            ok |= strcmp(known[i], key) == 0;
        if (!ok) {
            char p[300];
            snprintf(p, sizeof p, "/%s", key);
            problem(c, p, "unknown field '%s'", key);
        }
    }
    return json_array_size(c->problems) ? ST_ERR_INVALID : ST_OK;
}

st_err_t st_defn_compile(const json_t *doc, st_defn_t **out, json_t **problems)
{
    check_t c = {json_array(), json_object()};
    *out = NULL;
    /* A stored process canonical form (services reload what they stored) carries its
     * source; compiling the source again gives the same canonical form. */
    if (json_is_object(doc) && json_string_value(json_object_get(doc, "kind")) &&
        strcmp(json_string_value(json_object_get(doc, "kind")), "process") == 0 &&
        json_is_object(json_object_get(doc, "source")) && json_object_get(doc, "steps"))
        doc = json_object_get(doc, "source");
    const char *kind = json_string_value(json_object_get(doc, "kind"));
    if (!json_is_object(doc)) {
        problem(&c, "", "a definition must be a JSON object%s", NULL);
    } else if (kind == NULL) {
        problem(&c, "/kind", "missing kind (flow, lifecycle, process)%s", NULL);
    } else if (strcmp(kind, "flow") == 0 || strcmp(kind, "canonical") == 0) {
        compile_flow(doc, &c);
    } else if (strcmp(kind, "lifecycle") == 0) {
        compile_header(doc, &c);
        st_lifecycle_validate(doc, c.problems);
    } else if (strcmp(kind, "process") == 0) {
        compile_header(doc, &c);
        st_process_validate(doc, c.problems);
    } else {
        problem(&c, "/kind", "unknown kind '%s' (flow, lifecycle, process)", kind);
    }
    json_decref(c.ids);
    if (json_array_size(c.problems) > 0) {
        *problems = c.problems;
        return ST_ERR_INVALID;
    }
    json_decref(c.problems);
    *problems = NULL;
    st_defn_t *d = calloc(1, sizeof *d);
    if (d == NULL)
        abort();
    const char *canonical_kind = strcmp(kind, "lifecycle") == 0 ? "lifecycle"
                                 : strcmp(kind, "process") == 0 ? "process" : "flow";
    if (strcmp(canonical_kind, "process") == 0) {
        d->canonical = st_process_canonical(doc);
    } else {
        d->canonical = json_deep_copy(doc);
        json_object_set_new(d->canonical, "kind", json_string(canonical_kind));
    }
    d->name = strdup(json_string_value(json_object_get(doc, "name")));
    d->kind = strdup(canonical_kind);
    d->version = (int)json_integer_value(json_object_get(doc, "version"));
    *out = d;
    return ST_OK;
}

void st_defn_free(st_defn_t *defn)
{
    if (defn == NULL)
        return;
    json_decref(defn->canonical);
    free(defn->name);
    free(defn->kind);
    free(defn);
}

const char *st_defn_name(const st_defn_t *defn) { return defn->name; }
int st_defn_version(const st_defn_t *defn) { return defn->version; }
const char *st_defn_kind(const st_defn_t *defn) { return defn->kind; }
const json_t *st_defn_canonical(const st_defn_t *defn) { return defn->canonical; }

const char *st_defn_id_reuse_policy(const st_defn_t *defn)
{
    if (strcmp(defn->kind, "process") != 0)
        return NULL;
    return json_string_value(json_object_get(defn->canonical, "id_reuse_policy"));
}
