/*
 * process.c - the process front end (seed 004, XDB): async states, each with an
 * optional waitUntil (timer and queue commands combined any_of / all_of) and an
 * optional execute callback to a worker whose answer is the state's decision (next
 * states, several of them in parallel, complete, fail or dead end).
 *
 * A process compiles to the canonical step form the interpreter already runs, plus
 * two internal step types only this compiler emits:
 *   goto   {targets: [names] | "expression", allowed: [names]}  ends the current
 *          thread's steps and continues it at the first target state; every further
 *          target starts a new thread; no target is a dead end (the thread stops).
 *   spawn  {state: name, daemon: true}  starts a thread at a state without waiting
 *          for it; a daemon thread (the process timeout) does not keep the instance
 *          alive.
 *   merge  {from: "expression", allowed: [names]}  copies the members of an object
 *          (the decision's attribute updates) into state; each must be declared.
 * Each state's steps live at /states/<id>/steps of the canonical form. The instance
 * completes when its last non-daemon thread stops. The source document is kept under
 * "source" so services can show what the author wrote.
 */
#include "strand/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

static void problem(json_t *problems, const char *pointer, const char *fmt, const char *detail)
{
    char msg[600];
    snprintf(msg, sizeof msg, fmt, detail ? detail : "");
    json_array_append_new(problems, json_pack("{s:s, s:s}", "pointer", pointer, "message", msg));
}

static const char *str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static void check_expr(json_t *problems, const char *pointer, const json_t *v)
{
    if (!json_is_string(v))
        return;
    st_expr_t *e = NULL;
    st_errbuf_t eb;
    if (st_expr_parse(json_string_value(v), &e, &eb) != ST_OK)
        problem(problems, pointer, "bad expression: %s", eb.msg);
    st_expr_free(e);
}

/* Every string at any depth of an expression map is an expression. */
static void check_map(json_t *problems, const char *pointer, const json_t *v)
{
    char p[560];
    const char *k;
    size_t i;
    json_t *item;
    if (json_is_string(v)) {
        check_expr(problems, pointer, v);
    } else if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, item) {
            snprintf(p, sizeof p, "%s/%s", pointer, k);
            check_map(problems, p, item);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, item) {
            snprintf(p, sizeof p, "%s/%zu", pointer, i);
            check_map(problems, p, item);
        }
    }
}

static int valid_name(const char *s)
{
    if (s == NULL || *s == '\0' || strlen(s) > 100 || strncmp(s, "__", 2) == 0)
        return 0;
    for (; *s; s++)
        if (!(*s == '_' || *s == '-' || *s == '.' || (*s >= '0' && *s <= '9') ||
              (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
            return 0;
    return 1;
}

/* A URL the compiler may embed in a quoted expression literal. */
static int valid_url(const char *s)
{
    if (s == NULL || strlen(s) > 1000 ||
        (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0))
        return 0;
    return strpbrk(s, "'\\\" \n\r") == NULL;
}

/* A PostgreSQL identifier the executor may quote: lower case, digits, _; <= 63. */
static int valid_ident(const char *s)
{
    if (s == NULL || *s == '\0' || strlen(s) > 63 || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z')))
            return 0;
    return 1;
}

/* "schema.table", each part a valid identifier, in a schema of the user's own: never
 * Strand's schema or PostgreSQL's catalogs. */
static int valid_table(const char *s)
{
    if (s == NULL || strlen(s) > 127)
        return 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    char *dot = strchr(buf, '.');
    if (dot == NULL)
        return 0;
    *dot = '\0';
    if (strcmp(buf, "strand") == 0 || strncmp(buf, "pg_", 3) == 0 || strcmp(buf, "information_schema") == 0)
        return 0;
    return valid_ident(buf) && valid_ident(dot + 1);
}

static int in_list(const json_t *list, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
        if (json_is_string(v) && name && strcmp(json_string_value(v), name) == 0)
            return 1;
    return 0;
}

static const json_t *find_state(const json_t *doc, const char *id)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(doc, "states"), i, s)
        if (id && str(s, "id") && strcmp(str(s, "id"), id) == 0)
            return s;
    return NULL;
}

/* A list of state names that must all be declared. */
static void check_targets(json_t *problems, const json_t *doc, const char *pointer,
                          const json_t *list, int required)
{
    char p[560];
    size_t i;
    json_t *v;
    if (list == NULL) {
        if (required)
            problem(problems, pointer, "missing (an array of state ids)%s", NULL);
        return;
    }
    if (!json_is_array(list) || (required && json_array_size(list) == 0)) {
        problem(problems, pointer, "must be a%s array of state ids", required ? " non-empty" : "n");
        return;
    }
    json_array_foreach(list, i, v) {
        snprintf(p, sizeof p, "%s/%zu", pointer, i);
        if (!json_is_string(v))
            problem(problems, p, "a state id must be a string%s", NULL);
        else if (find_state(doc, json_string_value(v)) == NULL)
            problem(problems, p, "undefined state '%s'", json_string_value(v));
    }
}

static void check_wait_until(json_t *problems, const json_t *doc, const char *pointer,
                             const json_t *wu)
{
    char p[560], cp[600];
    if (!json_is_object(wu)) {
        problem(problems, pointer, "wait_until must be {combine, commands}%s", NULL);
        return;
    }
    if (json_object_get(wu, "url") != NULL) {
        /* The worker's waitUntil picks the commands (docs/processes.md). */
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)wu, key, v) {
            snprintf(p, sizeof p, "%s/%s", pointer, key);
            if (strcmp(key, "url") && strcmp(key, "timeout") && strcmp(key, "retry"))
                problem(problems, p, "a wait_until with url takes only url, timeout and retry, not '%s'", key);
        }
        snprintf(p, sizeof p, "%s/url", pointer);
        if (!valid_url(str(wu, "url")))
            problem(problems, p, "url must be an http(s) URL without quotes or backslashes%s", NULL);
        snprintf(p, sizeof p, "%s/timeout", pointer);
        check_expr(problems, p, json_object_get(wu, "timeout"));
        return;
    }
    const char *combine = str(wu, "combine");
    snprintf(p, sizeof p, "%s/combine", pointer);
    if (json_object_get(wu, "combine") &&
        (combine == NULL || (strcmp(combine, "any_of") != 0 && strcmp(combine, "all_of") != 0)))
        problem(problems, p, "combine must be any_of or all_of%s", NULL);
    const json_t *cmds = json_object_get(wu, "commands");
    snprintf(p, sizeof p, "%s/commands", pointer);
    if (!json_is_array(cmds) || json_array_size(cmds) == 0 || json_array_size(cmds) > 16) {
        problem(problems, p, "commands must be an array of 1 to 16 timer or queue commands%s", NULL);
        return;
    }
    size_t i;
    json_t *c;
    json_array_foreach(cmds, i, c) {
        snprintf(cp, sizeof cp, "%s/%zu", p, i);
        const char *type = str(c, "type");
        if (type != NULL && strcmp(type, "timer") == 0) {
            const json_t *delay = json_object_get(c, "delay"), *until = json_object_get(c, "until");
            if ((delay == NULL) == (until == NULL))
                problem(problems, cp, "a timer command needs exactly one of delay and until%s", NULL);
            else
                check_expr(problems, cp, delay ? delay : until);
        } else if (type != NULL && strcmp(type, "queue") == 0) {
            const char *q = str(c, "name");
            char np[640];
            snprintf(np, sizeof np, "%s/name", cp);
            if (q == NULL)
                problem(problems, np, "a queue command needs the queue's name%s", NULL);
            else if (!in_list(json_object_get(doc, "queues"), q))
                problem(problems, np, "undeclared queue '%s' (declare it in /queues)", q);
        } else {
            char tp[640];
            snprintf(tp, sizeof tp, "%s/type", cp);
            problem(problems, tp, "a command's type must be timer or queue%s", NULL);
        }
    }
}

static void check_execute(json_t *problems, const json_t *doc, const char *pointer,
                          const json_t *ex)
{
    char p[560];
    if (!json_is_object(ex)) {
        problem(problems, pointer, "execute must be an object {transport, request, ...}%s", NULL);
        return;
    }
    const char *transport = str(ex, "transport");
    snprintf(p, sizeof p, "%s/transport", pointer);
    if (transport == NULL || (strcmp(transport, "http") != 0 && strcmp(transport, "kafka") != 0))
        problem(problems, p, "transport must be http or kafka%s", NULL);
    snprintf(p, sizeof p, "%s/request", pointer);
    const json_t *url = json_object_get(ex, "url");
    if (url != NULL) {
        /* The worker protocol (docs/processes.md): Strand builds the request. */
        snprintf(p, sizeof p, "%s/url", pointer);
        if (!valid_url(json_string_value(url)))
            problem(problems, p, "url must be an http(s) URL without quotes or backslashes%s", NULL);
        if (json_object_get(ex, "request"))
            problem(problems, p, "give either url (the worker protocol) or request, not both%s", NULL);
        if (transport && strcmp(transport, "http") != 0)
            problem(problems, p, "url needs transport http%s", NULL);
    } else if (json_object_get(ex, "request") == NULL) {
        problem(problems, p, "missing request (or url, for the worker protocol)%s", NULL);
    }
    check_map(problems, p, json_object_get(ex, "request"));
    if (transport && strcmp(transport, "kafka") == 0) {
        const json_t *consumers = json_object_get(ex, "consumers");
        snprintf(p, sizeof p, "%s/consumers", pointer);
        if (!json_is_array(consumers) || json_array_size(consumers) == 0)
            problem(problems, p, "consumers must be a non-empty array%s", NULL);
    }
    snprintf(p, sizeof p, "%s/timeout", pointer);
    check_expr(problems, p, json_object_get(ex, "timeout"));
    const json_t *retry = json_object_get(ex, "retry");
    snprintf(p, sizeof p, "%s/retry", pointer);
    if (retry != NULL) {
        const json_t *max = json_object_get(retry, "max_attempts");
        const json_t *backoff = json_object_get(retry, "backoff_ms");
        const json_t *m = json_object_get(retry, "multiplier");
        if (!json_is_object(retry) ||
            (max && (!json_is_integer(max) || json_integer_value(max) < 1 || json_integer_value(max) > 100)) ||
            (backoff && (!json_is_integer(backoff) || json_integer_value(backoff) < 1 ||
                         json_integer_value(backoff) > 86400000LL * 30)) ||
            (m && (!json_is_number(m) || json_number_value(m) < 1 || json_number_value(m) > 10)))
            problem(problems, p, "retry must be {max_attempts 1-100, backoff_ms, multiplier 1-10}%s", NULL);
    }
    const char *on_failure = str(ex, "on_failure");
    snprintf(p, sizeof p, "%s/on_failure", pointer);
    if (json_object_get(ex, "on_failure") && (on_failure == NULL || !find_state(doc, on_failure)))
        problem(problems, p, "on_failure must name a defined state%s", NULL);
}

/* Marks every state reachable from `id`. */
static void mark(const json_t *doc, json_t *seen, const char *id)
{
    const json_t *s = find_state(doc, id);
    if (s == NULL || json_object_get(seen, id))
        return;
    json_object_set_new(seen, id, json_true());
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(s, "next"), i, v)
        mark(doc, seen, json_string_value(v));
    mark(doc, seen, str(json_object_get(s, "execute"), "on_failure"));
}

void st_process_validate(const json_t *doc, json_t *problems)
{
    static const char *const known[] = {"kind", "name", "version", "description", "start",
                                        "states", "queues", "attributes", "rpcs", "timeout",
                                        "id_reuse_policy", "global_table", NULL};
    static const char *const policies[] = {"allow_if_no_running", "allow_if_previous_failed",
                                           "disallow_reuse", "allow_terminate_if_running", NULL};
    char p[560];
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)doc, key, v) {
        int ok = 0;
        for (int i = 0; known[i]; i++)
            ok |= strcmp(known[i], key) == 0;
        if (!ok) {
            snprintf(p, sizeof p, "/%s", key);
            problem(problems, p, "unknown field '%s'", key);
        }
    }
    const json_t *queues = json_object_get(doc, "queues");
    if (queues != NULL) {
        size_t i;
        int ok = json_is_array(queues);
        json_array_foreach(queues, i, v) ok &= valid_name(json_string_value(v));
        if (!ok)
            problem(problems, "/queues", "queues must be an array of names (letters, digits, _ - .)%s", NULL);
    }
    const char *policy = str(doc, "id_reuse_policy");
    if (json_object_get(doc, "id_reuse_policy")) {
        int ok = 0;
        for (int i = 0; policy && policies[i]; i++)
            ok |= strcmp(policies[i], policy) == 0;
        if (!ok)
            problem(problems, "/id_reuse_policy", "id_reuse_policy must be allow_if_no_running, "
                    "allow_if_previous_failed, disallow_reuse or allow_terminate_if_running%s", NULL);
    }
    check_expr(problems, "/timeout", json_object_get(doc, "timeout"));
    if (json_object_get(doc, "timeout") && !json_is_string(json_object_get(doc, "timeout")) &&
        !(json_is_integer(json_object_get(doc, "timeout")) && json_integer_value(json_object_get(doc, "timeout")) > 0))
        problem(problems, "/timeout", "timeout must be milliseconds or a duration expression like \"'7d'\"%s", NULL);

    /* attributes: {"local": {name: {"default": json}}, "global": {name: {"table", "column"}}} */
    const json_t *attrs = json_object_get(doc, "attributes");
    if (attrs != NULL) {
        if (!json_is_object(attrs)) {
            problem(problems, "/attributes", "attributes must be {local: {...}, global: {...}}%s", NULL);
        } else {
            json_object_foreach((json_t *)attrs, key, v) {
                snprintf(p, sizeof p, "/attributes/%s", key);
                if (strcmp(key, "local") != 0 && strcmp(key, "global") != 0) {
                    problem(problems, p, "unknown attribute scope '%s' (local, global)", key);
                    continue;
                }
                if (!json_is_object(v)) {
                    problem(problems, p, "must be an object of attribute name: declaration%s", NULL);
                    continue;
                }
                const char *an;
                json_t *decl;
                json_object_foreach(v, an, decl) {
                    char ap[640];
                    snprintf(ap, sizeof ap, "%s/%s", p, an);
                    if (!valid_name(an))
                        problem(problems, ap, "bad attribute name '%s'", an);
                    else if (!json_is_object(decl))
                        problem(problems, ap, "an attribute declaration must be an object%s", NULL);
                    else if (json_is_string(json_object_get(decl, "default")) &&
                             (strchr(str(decl, "default"), '\'') || strchr(str(decl, "default"), '\\') ||
                              strlen(str(decl, "default")) > 500))
                        problem(problems, ap, "a string default may not hold quotes or backslashes%s", NULL);
                    else if (strcmp(key, "local") == 0 && json_object_get(attrs, "global") &&
                             json_object_get(json_object_get(attrs, "global"), an))
                        problem(problems, ap, "attribute '%s' is declared local and global", an);
                }
            }
        }
    }

    /* global attributes: columns of one row of a user table, keyed by the process id */
    const json_t *globals = json_object_get(attrs, "global");
    const json_t *gt = json_object_get(doc, "global_table");
    if (json_object_size(globals) > 0 || gt != NULL) {
        if (!json_is_object(gt) || !valid_table(str(gt, "table")) || !valid_ident(str(gt, "key")))
            problem(problems, "/global_table", "global attributes need global_table {table: "
                    "\"schema.table\", key: \"key_column\"} (lower-case identifiers; a schema of "
                    "your own, not strand or pg_*)%s", NULL);
        json_object_foreach((json_t *)globals, key, v) {
            const char *column = json_is_object(v) && str(v, "column") ? str(v, "column") : key;
            snprintf(p, sizeof p, "/attributes/global/%s/column", key);
            if (!valid_ident(column))
                problem(problems, p, "a global attribute maps to a column (lower-case identifier), "
                        "not '%s'", column);
            else if (json_is_object(gt) && str(gt, "key") && strcmp(column, str(gt, "key")) == 0)
                problem(problems, p, "the key column '%s' cannot be an attribute", column);
        }
    }

    const json_t *states = json_object_get(doc, "states");
    if (!json_is_array(states) || json_array_size(states) == 0 || json_array_size(states) > 1000) {
        problem(problems, "/states", "states must be a non-empty array of at most 1000 states%s", NULL);
        return;
    }
    json_t *ids = json_object();
    size_t i;
    json_t *s;
    json_array_foreach(states, i, s) {
        char sp[64];
        snprintf(sp, sizeof sp, "/states/%zu", i);
        if (!json_is_object(s)) {
            problem(problems, sp, "a state must be an object%s", NULL);
            continue;
        }
        const char *id = str(s, "id");
        snprintf(p, sizeof p, "%s/id", sp);
        if (!valid_name(id))
            problem(problems, p, "a state needs an id (letters, digits, _ - ., not starting with __)%s", NULL);
        else if (json_object_get(ids, id))
            problem(problems, p, "duplicate state id '%s'", id);
        else
            json_object_set_new(ids, id, json_true());
        json_object_foreach(s, key, v) {
            if (strcmp(key, "id") && strcmp(key, "wait_until") && strcmp(key, "execute") &&
                strcmp(key, "next") && strcmp(key, "complete") && strcmp(key, "description")) {
                snprintf(p, sizeof p, "%s/%s", sp, key);
                problem(problems, p, "unknown field '%s'", key);
            }
        }
        if (json_object_get(s, "wait_until")) {
            snprintf(p, sizeof p, "%s/wait_until", sp);
            check_wait_until(problems, doc, p, json_object_get(s, "wait_until"));
        }
        if (json_object_get(s, "execute")) {
            snprintf(p, sizeof p, "%s/execute", sp);
            check_execute(problems, doc, p, json_object_get(s, "execute"));
        }
        snprintf(p, sizeof p, "%s/next", sp);
        check_targets(problems, doc, p, json_object_get(s, "next"), 0);
        if (json_object_get(s, "complete")) {
            snprintf(p, sizeof p, "%s/complete", sp);
            if (json_object_get(s, "execute") || json_array_size(json_object_get(s, "next")))
                problem(problems, p, "complete is the static decision of a state without execute or next%s", NULL);
            check_map(problems, p, json_object_get(s, "complete"));
        }
    }
    json_decref(ids);
    check_targets(problems, doc, "/start", json_object_get(doc, "start"), 1);

    /* rpcs: [{"name", "queue"?}]: a named synchronous entry point that may publish to a queue. */
    const json_t *rpcs = json_object_get(doc, "rpcs");
    if (rpcs != NULL && !json_is_array(rpcs)) {
        problem(problems, "/rpcs", "rpcs must be an array of {name, queue}%s", NULL);
    } else {
        json_t *names = json_object();
        json_array_foreach(rpcs, i, s) {
            snprintf(p, sizeof p, "/rpcs/%zu", i);
            const char *n = str(s, "name");
            if (!valid_name(n))
                problem(problems, p, "an rpc needs a name%s", NULL);
            else if (json_object_get(names, n))
                problem(problems, p, "duplicate rpc '%s'", n);
            else
                json_object_set_new(names, n, json_true());
            if (str(s, "queue") && !in_list(queues, str(s, "queue")))
                problem(problems, p, "rpc publishes to undeclared queue '%s'", str(s, "queue"));
            if (json_object_get(s, "url") && !valid_url(str(s, "url")))
                problem(problems, p, "an rpc's url must be an http(s) URL without quotes%s", NULL);
            if (json_object_get(s, "threads")) {
                char tp[600];
                snprintf(tp, sizeof tp, "%s/threads", p);
                check_targets(problems, doc, tp, json_object_get(s, "threads"), 0);
            }
            const json_t *t = json_object_get(s, "timeout_ms");
            if (t && (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > 60000))
                problem(problems, p, "an rpc's timeout_ms must be 1 to 60000%s", NULL);
        }
        json_decref(names);
    }

    /* Unreachable states, once everything else is sound. */
    if (json_array_size(problems) == 0) {
        json_t *seen = json_object();
        json_array_foreach(json_object_get(doc, "start"), i, v)
            mark(doc, seen, json_string_value(v));
        json_array_foreach(json_object_get(doc, "rpcs"), i, s) {   /* states an RPC may start */
            size_t j;
            json_array_foreach(json_object_get(s, "threads"), j, v)
                mark(doc, seen, json_string_value(v));
        }
        json_array_foreach(states, i, s) {
            if (!json_object_get(seen, str(s, "id"))) {
                snprintf(p, sizeof p, "/states/%zu", i);
                problem(problems, p, "unreachable state '%s' (no start or next leads to it)", str(s, "id"));
            }
        }
        json_decref(seen);
    }
}

/* ---- compilation to canonical steps ------------------------------------------------ */

static json_t *command_step(const char *state, size_t i, const json_t *c)
{
    char id[160];
    snprintf(id, sizeof id, "%s/wait/%zu", state, i);
    if (strcmp(str(c, "type"), "timer") == 0) {
        const char *field = json_object_get(c, "delay") ? "delay" : "until";
        return json_pack("{s:s, s:s, s:O}", "id", id, "type", "timer", field, json_object_get(c, field));
    }
    return json_pack("{s:s, s:s, s:s, s:s}", "id", id, "type", "wait_signal", "name", str(c, "name"),
                     "result", str(c, "name"));
}

static json_t *goto_step(const char *id, json_t *targets, const json_t *allowed)
{
    return json_pack("{s:s, s:s, s:o, s:o}", "id", id, "type", "goto", "targets", targets,
                     "allowed", allowed ? json_deep_copy(allowed) : json_array());
}

/* The worker protocol's execute request (docs/processes.md): POST to the url with
 * the process and state names, the input, every declared attribute (globals as read
 * from the user's row in this wake-up) and the results of the state's commands. */
static json_t *protocol_request(const json_t *doc, const json_t *s, const json_t *attr_names,
                                const char *kind, const char *url)
{
    char lit[1200];
    json_t *attrs = json_object();
    size_t i;
    json_t *v;
    json_array_foreach(attr_names, i, v) {
        snprintf(lit, sizeof lit, "state[\"%s\"]", json_string_value(v));
        json_object_set_new(attrs, json_string_value(v), json_string(lit));
    }
    json_t *results = json_object();
    const json_t *wu = json_object_get(s, "wait_until");
    json_array_foreach(json_object_get(wu, "commands"), i, v) {
        if (strcmp(str(v, "type"), "queue") == 0) {
            snprintf(lit, sizeof lit, "state[\"%s\"]", str(v, "name"));
            json_object_set_new(results, str(v, "name"), json_string(lit));
        }
    }
    if (json_object_get(wu, "url")) {   /* the worker chose among every declared queue */
        json_array_foreach(json_object_get(doc, "queues"), i, v) {
            snprintf(lit, sizeof lit, "state[\"%s\"]", json_string_value(v));
            json_object_set_new(results, json_string_value(v), json_string(lit));
        }
    }
    if (json_array_size(json_object_get(wu, "commands")) > 1 || json_object_get(wu, "url"))
        json_object_set_new(results, "fired", json_string("state.fired"));
    json_t *body = json_object();
    snprintf(lit, sizeof lit, "'%s'", str(doc, "name"));
    json_object_set_new(body, "process", json_string(lit));
    snprintf(lit, sizeof lit, "'%s'", str(s, "id"));
    json_object_set_new(body, "state", json_string(lit));
    snprintf(lit, sizeof lit, "'%s'", kind);
    json_object_set_new(body, "kind", json_string(lit));
    json_object_set_new(body, "input", json_string("input"));
    json_object_set_new(body, "attributes", attrs);
    if (strcmp(kind, "execute") == 0)
        json_object_set_new(body, "command_results", results);
    else
        json_decref(results);
    snprintf(lit, sizeof lit, "'%s'", url);
    return json_pack("{s:s, s:s, s:o}", "url", lit, "protocol", "'strand.process/1'", "body", body);
}

/* A waitUntil answered by the worker: a call whose answer
 * {"combine": "any_of" | "all_of", "timer_ms": N?, "queues": [names]?} is kept as
 * state.wait_commands. */
static json_t *dynamic_wait_call(const json_t *doc, const json_t *s, const json_t *attr_names)
{
    const json_t *wu = json_object_get(s, "wait_until");
    char id[160];
    snprintf(id, sizeof id, "%s/wait_until", str(s, "id"));
    json_t *call = json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "call", "transport", "http", "result",
                             "wait_commands", "request",
                             protocol_request(doc, s, attr_names, "wait_until", str(wu, "url")));
    if (json_object_get(wu, "timeout"))
        json_object_set(call, "timeout", json_object_get(wu, "timeout"));
    if (json_object_get(wu, "retry"))
        json_object_set(call, "retry", json_object_get(wu, "retry"));
    return call;
}

/* The commands the worker chose, joined all (all_of) or any (any_of): one branch per
 * possible command (the timer and each declared queue). A branch the worker did not
 * choose completes at once under all_of and never completes under any_of. */
static json_t *dynamic_wait(const json_t *doc, const char *sid, int all)
{
    const char *mode = all ? "all" : "any";
    char id[200], cond[300], what[160];
    json_t *branches = json_array();
    json_t *candidates = json_pack("[s]", "");   /* "" = the timer */
    size_t i;
    json_t *q;
    json_array_foreach(json_object_get(doc, "queues"), i, q)
        json_array_append(candidates, q);
    json_array_foreach(candidates, i, q) {
        const char *name = json_string_value(q);
        json_t *wait;
        if (name[0] == '\0') {
            snprintf(id, sizeof id, "%s/wait/%s/timer", sid, mode);
            wait = json_pack("{s:s, s:s, s:s}", "id", id, "type", "timer", "delay", "state.wait_commands.timer_ms");
            snprintf(cond, sizeof cond, "state.wait_commands.timer_ms != null");
            snprintf(what, sizeof what, "'timer'");
        } else {
            snprintf(id, sizeof id, "%s/wait/%s/%s", sid, mode, name);
            wait = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "type", "wait_signal", "name", name, "result", name);
            snprintf(cond, sizeof cond, "contains(coalesce(state.wait_commands.queues, ''), '%s')", name);
            snprintf(what, sizeof what, "'%s'", name);
        }
        char fid[220], iid[220];
        snprintf(fid, sizeof fid, "%s/fired", id);
        snprintf(iid, sizeof iid, "%s/chosen", id);
        json_t *then = json_pack("[o, {s:s, s:s, s:{s:s}}]", wait, "id", fid, "type", "set", "values", "fired", what);
        json_t *step = json_pack("{s:s, s:s, s:s, s:o}", "id", iid, "type", "if", "condition", cond, "then", then);
        if (!all) {
            char nid[220];
            snprintf(nid, sizeof nid, "%s/never", id);
            json_object_set_new(step, "else", json_pack("[{s:s, s:s, s:s}]", "id", nid, "type", "wait_signal",
                                                        "name", "__strand_not_chosen"));
        }
        json_array_append_new(branches, json_pack("[o]", step));
    }
    json_decref(candidates);
    snprintf(id, sizeof id, "%s/wait/%s", sid, mode);
    return json_pack("{s:s, s:s, s:o, s:s}", "id", id, "type", "parallel", "branches", branches, "join", mode);
}

static json_t *compile_state(const json_t *doc, const json_t *s, json_t *attr_names)
{
    const char *sid = str(s, "id");
    char id[160];
    json_t *steps = json_array();
    const json_t *wu = json_object_get(s, "wait_until");
    if (wu != NULL && json_object_get(wu, "url") != NULL) {
        json_array_append_new(steps, dynamic_wait_call(doc, s, attr_names));
        snprintf(id, sizeof id, "%s/wait_mode", sid);
        json_array_append_new(steps, json_pack("{s:s, s:s, s:s, s:[o], s:[o]}", "id", id, "type", "if", "condition",
                                               "state.wait_commands.combine == 'all_of'", "then",
                                               dynamic_wait(doc, sid, 1), "else", dynamic_wait(doc, sid, 0)));
    } else if (wu != NULL) {
        const json_t *cmds = json_object_get(wu, "commands");
        size_t i;
        json_t *c;
        if (json_array_size(cmds) == 1) {
            json_array_append_new(steps, command_step(sid, 0, json_array_get(cmds, 0)));
        } else {
            json_t *branches = json_array();
            json_array_foreach(cmds, i, c) {
                /* Record which command fired, for the worker (state.fired). */
                char what[160];
                snprintf(what, sizeof what, "'%s'", strcmp(str(c, "type"), "timer") == 0 ? "timer" : str(c, "name"));
                snprintf(id, sizeof id, "%s/fired/%zu", sid, i);
                json_array_append_new(branches, json_pack("[o, {s:s, s:s, s:{s:s}}]", command_step(sid, i, c),
                                                          "id", id, "type", "set", "values", "fired", what));
            }
            const char *combine = str(wu, "combine");
            snprintf(id, sizeof id, "%s/wait", sid);
            json_array_append_new(steps, json_pack("{s:s, s:s, s:o, s:s}", "id", id, "type", "parallel",
                                                   "branches", branches, "join",
                                                   combine && strcmp(combine, "all_of") == 0 ? "all" : "any"));
        }
    }
    const json_t *ex = json_object_get(s, "execute");
    if (ex != NULL) {
        json_t *call = json_deep_copy(ex);
        snprintf(id, sizeof id, "%s/execute", sid);
        json_object_set_new(call, "id", json_string(id));
        json_object_set_new(call, "type", json_string("call"));
        json_object_set_new(call, "result", json_string("decision"));
        json_object_del(call, "on_failure");
        if (json_object_get(ex, "url")) {
            json_object_del(call, "url");
            json_object_set_new(call, "request", protocol_request(doc, s, attr_names, "execute", str(ex, "url")));
        }
        if (str(ex, "on_failure")) {
            snprintf(id, sizeof id, "%s/on_failure", sid);
            json_object_set_new(call, "on_failure",
                                json_pack("[o]", goto_step(id, json_pack("[s]", str(ex, "on_failure")),
                                                           json_pack("[s]", str(ex, "on_failure")))));
        }
        json_array_append_new(steps, call);
        /* The decision may update declared attributes: {"attributes": {name: value}}. */
        snprintf(id, sizeof id, "%s/attributes", sid);
        json_array_append_new(steps, json_pack("{s:s, s:s, s:s, s:o}", "id", id, "type", "merge", "from",
                                               "state.decision.attributes", "allowed", json_incref(attr_names)));
        /* The worker's decision: {"next": [...]} | {"complete": out} | {"fail": err} | {"dead_end": true} */
        char fid[160], cid[160], gid[160];
        snprintf(id, sizeof id, "%s/decide", sid);
        snprintf(fid, sizeof fid, "%s/fail", sid);
        snprintf(cid, sizeof cid, "%s/complete", sid);
        snprintf(gid, sizeof gid, "%s/next", sid);
        char lit[200];
        snprintf(lit, sizeof lit, "'%s'", sid);
        json_t *fail = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "id", fid, "type", "fail", "error",
                                 "code", "'process_failed'", "state", lit, "detail", "state.decision.fail");
        json_t *complete = json_pack("{s:s, s:s, s:s}", "id", cid, "type", "complete", "output",
                                     "state.decision.complete");
        json_array_append_new(
            steps, json_pack("{s:s, s:s, s:[{s:s, s:[o]}, {s:s, s:[o]}], s:[o]}", "id", id, "type",
                             "switch", "cases", "when", "state.decision.fail != null", "steps", fail,
                             "when", "state.decision.complete != null", "steps", complete, "default",
                             goto_step(gid, json_string("state.decision.next"), json_object_get(s, "next"))));
    } else if (json_object_get(s, "complete")) {
        snprintf(id, sizeof id, "%s/complete", sid);
        json_array_append_new(steps, json_pack("{s:s, s:s, s:O}", "id", id, "type", "complete", "output",
                                               json_object_get(s, "complete")));
    } else {
        const json_t *next = json_object_get(s, "next");
        snprintf(id, sizeof id, "%s/next", sid);
        json_array_append_new(steps, goto_step(id, next ? json_deep_copy(next) : json_array(), next));
    }
    return json_pack("{s:o}", "steps", steps);
}

json_t *st_process_canonical(const json_t *doc)
{
    json_t *states = json_object();
    json_t *steps = json_array();
    size_t i;
    json_t *s;
    json_t *attr_names = json_array();
    const char *scope;
    json_t *decls;
    json_object_foreach(json_object_get(doc, "attributes"), scope, decls) {
        const char *name;
        json_t *decl;
        json_object_foreach(decls, name, decl)
            json_array_append_new(attr_names, json_string(name));
    }
    json_array_foreach(json_object_get(doc, "states"), i, s)
        json_object_set_new(states, str(s, "id"), compile_state(doc, s, attr_names));
    json_decref(attr_names);
    /* Local attributes start at their defaults, under state.<name>; a string default
     * becomes a quoted literal (the validator refuses quotes and backslashes in it). */
    json_t *defaults = json_object();
    const char *an;
    json_t *decl;
    json_object_foreach(json_object_get(json_object_get(doc, "attributes"), "local"), an, decl) {
        const json_t *d = json_object_get(decl, "default");
        if (d != NULL && json_is_string(d)) {
            char lit[600];
            snprintf(lit, sizeof lit, "'%s'", json_string_value(d));
            json_object_set_new(defaults, an, json_string(lit));
        } else {
            json_object_set_new(defaults, an, d ? json_deep_copy(d) : json_null());
        }
    }
    if (json_object_size(defaults) > 0)
        json_array_append_new(steps, json_pack("{s:s, s:s, s:O}", "id", "__attributes", "type", "set",
                                               "values", defaults));
    json_decref(defaults);
    /* Global attributes: the executor reads them from the user's row into state before
     * each run (for START, into the event's payload, merged here) and writes the ones
     * that changed back in the run's transaction. */
    const json_t *globals = json_object_get(json_object_get(doc, "attributes"), "global");
    json_t *globals_decl = NULL;
    if (json_object_size(globals) > 0) {
        json_t *columns = json_object();
        json_t *names = json_array();
        json_object_foreach((json_t *)globals, an, decl) {
            const char *column = str(decl, "column") ? str(decl, "column") : an;
            json_object_set_new(columns, an, json_string(column));
            json_array_append_new(names, json_string(an));
        }
        const json_t *gt = json_object_get(doc, "global_table");
        json_array_insert_new(steps, 0, json_pack("{s:s, s:s, s:s, s:o}", "id", "__globals", "type", "merge",
                                                  "from", "event.globals", "allowed", names));
        globals_decl = json_pack("{s:O, s:O, s:o}", "table", json_object_get(gt, "table"), "key",
                                      json_object_get(gt, "key"), "columns", columns);
    }
    /* States an RPC may start a thread in: a daemon thread per state waits for the
     * API's "__start_thread_<state>" signal and starts one (see services/api/rpc.c). */
    json_t *spawnable = json_object();
    json_array_foreach(json_object_get(doc, "rpcs"), i, s) {
        size_t j;
        json_t *v;
        json_array_foreach(json_object_get(s, "threads"), j, v)
            json_object_set_new(spawnable, json_string_value(v), json_true());
    }
    json_t *unused;
    json_object_foreach(spawnable, an, unused) {
        char sid[160], wid[200], pid[200], signal[160], lid[200];
        snprintf(sid, sizeof sid, "__rpc_thread_%s", an);
        snprintf(lid, sizeof lid, "%s/loop", sid);
        snprintf(wid, sizeof wid, "%s/wait", sid);
        snprintf(pid, sizeof pid, "%s/spawn", sid);
        snprintf(signal, sizeof signal, "__start_thread_%s", an);
        json_object_set_new(states, sid,
                            json_pack("{s:[{s:s, s:s, s:b, s:i, s:[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:b}]}]}",
                                      "steps", "id", lid, "type", "while", "condition", 1, "max_iterations", 10000,
                                      "body", "id", wid, "type", "wait_signal", "name", signal, "result",
                                      "__start_thread", "id", pid, "type", "spawn", "state", an, "daemon", 0));
        json_array_append_new(steps, json_pack("{s:s, s:s, s:s, s:b}", "id", sid, "type", "spawn", "state", sid,
                                               "daemon", 1));
    }
    json_decref(spawnable);
    if (json_object_get(doc, "timeout")) {
        json_object_set_new(states, "__timeout",
                            json_pack("{s:[{s:s, s:s, s:O}, {s:s, s:s, s:{s:s}}]}", "steps", "id",
                                      "__timeout/timer", "type", "timer", "delay",
                                      json_object_get(doc, "timeout"), "id", "__timeout/fail", "type",
                                      "fail", "error", "code", "'process_timeout'"));
        json_array_append_new(steps, json_pack("{s:s, s:s, s:s, s:b}", "id", "__timeout", "type", "spawn",
                                               "state", "__timeout", "daemon", 1));
    }
    json_array_append_new(steps, goto_step("__start", json_deep_copy(json_object_get(doc, "start")),
                                           json_object_get(doc, "start")));
    json_t *out = json_pack("{s:s, s:O, s:O, s:o, s:o, s:O}", "kind", "process", "name",
                            json_object_get(doc, "name"), "version", json_object_get(doc, "version"),
                            "steps", steps, "states", states, "source", doc);
    json_object_set_new(out, "id_reuse_policy",
                        json_string(str(doc, "id_reuse_policy") ? str(doc, "id_reuse_policy") : "allow_if_no_running"));
    if (globals_decl != NULL)
        json_object_set_new(out, "globals", globals_decl);
    return out;
}

json_t *st_process_waiting_in(const json_t *snapshot)
{
    /* The state each live thread stands in: the first step of its bottom frame, whose
     * path is /states/<name>/... in the canonical form compiled above. */
    json_t *states = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(snapshot, "threads"), i, t) {
        if (json_is_true(json_object_get(t, "done")) || json_is_true(json_object_get(t, "daemon")))
            continue;
        size_t depth = json_array_size(json_object_get(t, "stack"));
        const char *path = json_string_value(json_object_get(
            json_array_get(json_object_get(t, "stack"), depth ? depth - 1 : 0), "path"));
        char name[128] = "";
        if (path && strncmp(path, "/states/", 8) == 0)
            sscanf(path + 8, "%127[^/]", name);
        int seen = 0;
        size_t j;
        json_t *s;
        json_array_foreach(states, j, s)
            seen |= strcmp(json_string_value(s), name) == 0;
        if (name[0] && !seen)
            json_array_append_new(states, json_string(name));
    }
    return states;
}
