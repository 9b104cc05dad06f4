/*
 * permissions.c - route and command -> permission (see permissions.h).
 *
 * A caller with an unlimited grant (or admin) passes at once, without reading the
 * body or the database. Only a caller whose grants are all limited to definitions
 * (or ACK consumers) makes the request show its target: the path's {name}, the body's
 * definition or consumer, a list's ?definition=, or, for an instance or task id, one
 * primary-key lookup of its definition. An id that does not exist (or is no UUID)
 * passes: the handler answers 404 (or 400) as it would for anyone.
 */
#include "permissions.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/audit.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/pg.h"
#include "strand/proto/strand.pb-c.h"
#include "strand/util.h"

#define RULE(m, p, perm, target) {m, p, ST_PERM_##perm, ST_TARGET_##target}

static const st_perm_rule_t route_rules[] = {
    RULE("GET", "/healthz", ADMIN, PUBLIC),
    RULE("GET", "/readyz", ADMIN, PUBLIC),
    RULE("GET", "/metrics", ADMIN, PUBLIC),
    RULE("GET", "/v1/openapi.json", ADMIN, PUBLIC),
    RULE("GET", "/v1/schema/definition", DEFINITIONS_READ, ANY),
    RULE("POST", "/v1/definitions/validate", DEFINITIONS_READ, ANY),
    RULE("GET", "/v1/definitions", DEFINITIONS_READ, NONE),
    RULE("GET", "/v1/definitions/{name}", DEFINITIONS_READ, PATH_NAME),
    RULE("GET", "/v1/definitions/{name}/{version}", DEFINITIONS_READ, PATH_NAME),
    RULE("GET", "/v1/definitions/{name}/{version}/diagram.svg", DEFINITIONS_READ, PATH_NAME),
    RULE("POST", "/v1/definitions", DEFINITIONS_WRITE, ARG_NAME),
    RULE("GET", "/v1/instances", INSTANCES_READ, QUERY_DEFINITION),
    RULE("GET", "/v1/instances/{id}", INSTANCES_READ, INSTANCE),
    RULE("GET", "/v1/instances/{id}/history", INSTANCES_READ, INSTANCE),
    RULE("GET", "/v1/instances/{id}/runtime", INSTANCES_READ, INSTANCE),
    RULE("POST", "/v1/instances", INSTANCES_START, ARG_DEFINITION),
    RULE("POST", "/v1/instances/{id}/signals", INSTANCES_SIGNAL, INSTANCE),
    RULE("POST", "/v1/instances/{id}/rpc/{name}", INSTANCES_SIGNAL, INSTANCE),
    RULE("POST", "/v1/signals", INSTANCES_SIGNAL, ARG_DEFINITION),
    RULE("POST", "/v1/instances/{id}/cancel", INSTANCES_OPERATE, INSTANCE),
    RULE("POST", "/v1/instances/{id}/terminate", INSTANCES_TERMINATE, INSTANCE),
    RULE("GET", "/v1/tasks", TASKS_READ, NONE),
    RULE("GET", "/v1/tasks/{id}", TASKS_READ, TASK),
    RULE("POST", "/v1/tasks/{id}/assign", TASKS_ACT, TASK),
    RULE("POST", "/v1/tasks/{id}/release", TASKS_ACT, TASK),
    RULE("POST", "/v1/tasks/{id}/complete", TASKS_ACT, TASK),
    RULE("POST", "/v1/acks", ACKS_SEND, ARG_CONSUMER),
    RULE("GET", "/v1/dead-letters", DEAD_LETTERS_READ, NONE),
    RULE("GET", "/v1/dead-letters/{id}", DEAD_LETTERS_READ, NONE),
    RULE("POST", "/v1/dead-letters/{id}/replay", DEAD_LETTERS_OPERATE, NONE),
    RULE("POST", "/v1/dead-letters/{id}/discard", DEAD_LETTERS_OPERATE, NONE),
    RULE("POST", "/v1/triggers", TRIGGERS_SEND, ARG_DEFINITION),
    RULE("POST", "/v1/retention/run", ADMIN, NONE),
    /* Bulk operations: the command checks the action's own permission too (terminate,
     * signal), and a limited grant against the filter's definition (batches.c). */
    RULE("POST", "/v1/batches", INSTANCES_OPERATE, ANY),
    RULE("GET", "/v1/batches", INSTANCES_READ, NONE),
    RULE("GET", "/v1/batches/{id}", INSTANCES_READ, NONE),
    RULE("POST", "/v1/batches/{id}/cancel", INSTANCES_OPERATE, NONE),
    /* repair verbs (repair.c) */
    RULE("POST", "/v1/instances/{id}/retry", INSTANCES_OPERATE, INSTANCE),
    RULE("POST", "/v1/instances/{id}/fail", INSTANCES_TERMINATE, INSTANCE),
    RULE("POST", "/v1/instances/{id}/variables", INSTANCES_OPERATE, INSTANCE),
    RULE("POST", "/v1/instances/{id}/fire-timer", INSTANCES_OPERATE, INSTANCE),
    RULE("POST", "/v1/instances/{id}/skip-wait", INSTANCES_OPERATE, INSTANCE),
    RULE("PUT", "/v1/dead-letters/{id}/payload", DEAD_LETTERS_OPERATE, NONE),
    /* ---- pause ---- */
    RULE("POST", "/v1/instances/{id}/pause", INSTANCES_OPERATE, INSTANCE),
    RULE("POST", "/v1/instances/{id}/resume", INSTANCES_OPERATE, INSTANCE),
    RULE("POST", "/v1/instances/{id}/rewind", INSTANCES_OPERATE, INSTANCE),
    RULE("POST", "/v1/definitions/{name}/{version}/pause", INSTANCES_OPERATE, PATH_NAME),
    RULE("POST", "/v1/definitions/{name}/{version}/resume", INSTANCES_OPERATE, PATH_NAME),
    /* ---- readable (reads.c) ---- */
    RULE("GET", "/v1/instances/stuck", INSTANCES_READ, NONE),
    RULE("GET", "/v1/notices", INSTANCES_READ, NONE),
    RULE("GET", "/v1/instances/{id}/notices", INSTANCES_READ, INSTANCE),
    RULE("GET", "/v1/tasks/{id}/events", TASKS_READ, TASK),
    RULE("GET", "/v1/instances/{id}/task-events", INSTANCES_READ, INSTANCE),
    RULE("GET", "/v1/audit", AUDIT_READ, NONE),
    /* the web console (console.c): static pages, and what it reads */
    RULE("GET", "/ui", ADMIN, PUBLIC),
    RULE("GET", "/ui/{p1}", ADMIN, PUBLIC),
    RULE("GET", "/ui/{p1}/{p2}", ADMIN, PUBLIC),
    RULE("GET", "/ui/{p1}/{p2}/{p3}", ADMIN, PUBLIC),
    RULE("GET", "/ui/{p1}/{p2}/{p3}/{p4}", ADMIN, PUBLIC),
    RULE("GET", "/v1/whoami", ADMIN, SELF),
    RULE("GET", "/v1/overview", INSTANCES_READ, NONE),
    RULE("GET", "/v1/instance-counts", INSTANCES_READ, QUERY_DEFINITION),
    RULE("GET", "/v1/instances/{id}/family", INSTANCES_READ, INSTANCE),
};

/* The ingress commands, indexed by strand.v1.CommandType; the same rules as the
 * matching HTTP routes (the envelope's target_id is the path's {id}). */
static const struct {
    int type;
    st_perm_rule_t rule;
} command_rules[] = {
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_START, RULE(NULL, "START", INSTANCES_START, ARG_DEFINITION)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL, RULE(NULL, "SIGNAL", INSTANCES_SIGNAL, INSTANCE)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SIGNAL_CORRELATED,
     RULE(NULL, "SIGNAL_CORRELATED", INSTANCES_SIGNAL, ARG_DEFINITION)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_CANCEL, RULE(NULL, "CANCEL", INSTANCES_OPERATE, INSTANCE)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TERMINATE,
     RULE(NULL, "TERMINATE", INSTANCES_TERMINATE, INSTANCE)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TASK_ASSIGN, RULE(NULL, "TASK_ASSIGN", TASKS_ACT, TASK)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TASK_RELEASE, RULE(NULL, "TASK_RELEASE", TASKS_ACT, TASK)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TASK_COMPLETE,
     RULE(NULL, "TASK_COMPLETE", TASKS_ACT, TASK)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_ACK, RULE(NULL, "ACK", ACKS_SEND, ARG_CONSUMER)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_TRIGGER, RULE(NULL, "TRIGGER", TRIGGERS_SEND, ARG_DEFINITION)},
    /* repair verbs (repair.c) */
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_RETRY, RULE(NULL, "RETRY", INSTANCES_OPERATE, INSTANCE)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_FAIL, RULE(NULL, "FAIL", INSTANCES_TERMINATE, INSTANCE)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_PATCH_VARIABLES,
     RULE(NULL, "PATCH_VARIABLES", INSTANCES_OPERATE, INSTANCE)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_FIRE_TIMER, RULE(NULL, "FIRE_TIMER", INSTANCES_OPERATE, INSTANCE)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_SKIP_WAIT, RULE(NULL, "SKIP_WAIT", INSTANCES_OPERATE, INSTANCE)},
    /* ---- pause ---- */
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_PAUSE, RULE(NULL, "PAUSE", INSTANCES_OPERATE, INSTANCE)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_RESUME, RULE(NULL, "RESUME", INSTANCES_OPERATE, INSTANCE)},
    {STRAND__V1__COMMAND_TYPE__COMMAND_TYPE_REWIND, RULE(NULL, "REWIND", INSTANCES_OPERATE, INSTANCE)},
};

static const char *const sql_instance_definition =
    "SELECT definition_name FROM strand.instances WHERE id = $1::uuid";
static const char *const sql_task_definition =
    "SELECT i.definition_name FROM strand.tasks t JOIN strand.instances i ON i.id = t.instance_id"
    " WHERE t.id = $1::uuid";

const st_perm_rule_t *st_perm_route_rule(const char *method, const char *pattern)
{
    for (size_t i = 0; method && pattern && i < sizeof route_rules / sizeof route_rules[0]; i++)
        if (strcmp(route_rules[i].method, method) == 0 && strcmp(route_rules[i].pattern, pattern) == 0)
            return &route_rules[i];
    return NULL;
}

const st_perm_rule_t *st_perm_command_rule(int command_type)
{
    for (size_t i = 0; i < sizeof command_rules / sizeof command_rules[0]; i++)
        if (command_rules[i].type == command_type)
            return &command_rules[i].rule;
    return NULL;
}

/* The 403 answer; `limited`: the caller holds the permission for other definitions or
 * consumers only. */
static void refuse(st_answer_t *out, const st_perm_rule_t *rule, int limited)
{
    if (rule == NULL) {
        st_answer_problem(out, 403, "forbidden",
                          "this route has no permission rule; it is refused to every caller",
                          NULL, NULL);
        return;
    }
    char msg[200];
    const char *name = st_perm_name(rule->perm);
    if (!limited)
        snprintf(msg, sizeof msg, "this operation needs the permission %s", name);
    else if (rule->target == ST_TARGET_ARG_CONSUMER)
        snprintf(msg, sizeof msg, "this operation needs the permission %s for this consumer", name);
    else if (rule->target == ST_TARGET_NONE)
        snprintf(msg, sizeof msg, "this operation needs the permission %s for every definition",
                 name);
    else
        snprintf(msg, sizeof msg, "this operation needs the permission %s for this definition",
                 name);
    st_answer_problem(out, 403, "forbidden", msg, NULL,
                      json_pack("{s:s}", "required_permission", name));
}

/* The definition an instance or task id belongs to, into `name` ("" when there is no
 * such row or the id is no UUID). Returns 0 after setting a 503/500 in `out`. */
static int lookup_definition(PGconn *conn, const char *sql, const char *id, char *name,
                             size_t len, st_answer_t *out)
{
    name[0] = '\0';
    if (id == NULL || !st_uuid_valid(id))
        return 1;
    PGresult *res = NULL;
    st_errbuf_t eb;
    st_err_t err = st_pg_exec(conn, sql, 1, &id, &res, &eb);
    if (err != ST_OK) {
        st_answer_error(out, err, &eb);
        return 0;
    }
    if (PQntuples(res) == 1)
        snprintf(name, len, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return 1;
}

/* What a request names, for a caller whose grants are limited. */
typedef struct {
    const char *name;               /* path {name} */
    const char *id;                 /* path {id} or the envelope's target_id */
    const json_t *args;             /* the body or the command's args */
    const char *query_definition;   /* ?definition= */
} target_t;

/* Decides for a caller that holds the rule's permission only in limited grants:
 * 1 allowed, 0 refused or failed (`out` set). `conn` is used only for ids. */
static int decide_limited(PGconn *conn, const st_principal_t *who, const st_perm_rule_t *rule,
                          const target_t *t, st_answer_t *out)
{
    const char *definition = NULL, *consumer = NULL;
    char looked_up[256];
    switch (rule->target) {
    case ST_TARGET_PUBLIC:
    case ST_TARGET_SELF:
    case ST_TARGET_ANY:
        return 1;
    case ST_TARGET_NONE:
        break;
    case ST_TARGET_PATH_NAME:
        definition = t->name;
        break;
    case ST_TARGET_INSTANCE:
    case ST_TARGET_TASK:
        if (!lookup_definition(conn, rule->target == ST_TARGET_TASK ? sql_task_definition
                                                                    : sql_instance_definition,
                               t->id, looked_up, sizeof looked_up, out))
            return 0;
        if (looked_up[0] == '\0')
            return 1;   /* no such id (or no UUID): the handler's 404 (400) */
        definition = looked_up;
        break;
    case ST_TARGET_ARG_DEFINITION:
        definition = json_string_value(json_object_get(t->args, "definition"));
        break;
    case ST_TARGET_ARG_NAME:
        definition = json_string_value(json_object_get(t->args, "name"));
        break;
    case ST_TARGET_ARG_CONSUMER:
        consumer = json_string_value(json_object_get(t->args, "consumer"));
        break;
    case ST_TARGET_QUERY_DEFINITION:
        definition = t->query_definition;
        break;
    }
    if ((definition != NULL || consumer != NULL) &&
        st_principal_may(who, rule->perm, definition, consumer))
        return 1;
    refuse(out, rule, 1);
    return 0;
}

/* A write: anything but GET, HEAD and OPTIONS. */
static int is_write(const char *method)
{
    return method != NULL && strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 &&
           strcmp(method, "OPTIONS") != 0;
}

int st_api_authorize(st_api_t *api, st_http_req_t *req)
{
    if (st_api_write_limit_enabled() && is_write(st_http_req_method(req))) {
        st_answer_t limited = {0};
        if (!st_api_write_limit_take(api->current.name, 0, &limited)) {
            char seconds[24];
            snprintf(seconds, sizeof seconds, "%lld",
                     (long long)json_integer_value(json_object_get(limited.body, "retry_after_s")));
            st_http_add_header(req, "Retry-After", seconds);
            st_api_reply(req, &limited);
            return 0;
        }
    }
    const st_perm_rule_t *rule = st_perm_route_rule(st_http_req_method(req), st_http_req_route(req));
    st_holds_t holds = rule ? st_principal_holds(&api->current, rule->perm) : ST_HOLDS_NONE;
    if (rule != NULL && (rule->target == ST_TARGET_PUBLIC || rule->target == ST_TARGET_SELF ||
                         holds == ST_HOLDS_ALL))
        return 1;
    st_answer_t answer = {0};
    if (holds == ST_HOLDS_NONE) {
        refuse(&answer, rule, 0);
        st_api_reply(req, &answer);
        return 0;
    }
    target_t t = {st_http_param(req, "name"), st_http_param(req, "id"), NULL,
                  st_http_query(req, "definition")};
    json_t *body = NULL;
    PGconn *conn = NULL;
    if (rule->target == ST_TARGET_ARG_DEFINITION || rule->target == ST_TARGET_ARG_NAME ||
        rule->target == ST_TARGET_ARG_CONSUMER) {
        body = st_http_body_object(req);   /* the handler reads it again */
        if (body == NULL)
            return 0;   /* answered 400/413 */
        t.args = body;
    } else if (rule->target == ST_TARGET_INSTANCE || rule->target == ST_TARGET_TASK) {
        conn = st_api_conn(api, &answer);
        if (conn == NULL) {
            st_api_reply(req, &answer);
            return 0;
        }
    }
    int ok = decide_limited(conn, &api->current, rule, &t, &answer);
    json_decref(body);
    if (!ok)
        st_api_reply(req, &answer);
    else
        st_answer_close(&answer);
    return ok;
}

int st_api_authorize_command(PGconn *conn, const st_principal_t *who, int command_type,
                             const char *target_id, const json_t *args, st_answer_t *out)
{
    const st_perm_rule_t *rule = st_perm_command_rule(command_type);
    st_holds_t holds = rule ? st_principal_holds(who, rule->perm) : ST_HOLDS_NONE;
    if (holds == ST_HOLDS_ALL)
        return 1;
    if (holds == ST_HOLDS_NONE) {
        refuse(out, rule, 0);
        return 0;
    }
    target_t t = {NULL, target_id, args, NULL};
    return decide_limited(conn, who, rule, &t, out);
}

int st_api_require_permission(st_api_t *api, st_http_req_t *req, st_perm_t perm,
                              const char *definition)
{
    st_holds_t holds = st_principal_holds(&api->current, perm);
    if (definition == NULL ? holds != ST_HOLDS_NONE
                           : st_principal_may(&api->current, perm, definition, NULL))
        return 1;
    st_perm_rule_t rule = {NULL, NULL, perm, ST_TARGET_PATH_NAME};
    st_answer_t answer = {0};
    refuse(&answer, &rule, holds != ST_HOLDS_NONE);
    st_api_reply(req, &answer);
    return 0;
}

/* ---- the write rate limit ----------------------------------------------------------
 *
 * A token bucket per principal, in this process (so per API replica): every write (an
 * HTTP POST, PUT, PATCH or DELETE, and every ingress command) takes one token; the
 * bucket holds STRAND_API_WRITE_BURST tokens and refills STRAND_API_WRITE_RATE per
 * second. An empty bucket refuses with 429 rate_limited and Retry-After. Refusals are
 * counted per principal over a window (STRAND_API_WRITE_AUDIT_WINDOW_S) that opens at
 * the first refusal; st_api_write_limit_flush() writes one audit row per ended window
 * with its count, so a refused client writes nothing per request. The HTTP thread and
 * the ingress thread share the table under one mutex; principals come from the token
 * file (or are "anonymous"), and idle ones are forgotten at the flush, so the table
 * stays small. */

#define BUCKETS 64

typedef struct bucket {
    struct bucket *next;
    char principal[128];
    double tokens;
    long long refilled_ns;        /* CLOCK_MONOTONIC of the last refill */
    long long window_ns;          /* the open window's start; 0: none open */
    long long window_wall_ms;     /* the same, as wall-clock time, for the audit row */
    long long refused_http, refused_ingress;
} bucket_t;

static struct {
    int on;                       /* written once before any thread reads it */
    double rate, burst;
    long long window_ns;
    int window_s;
    pthread_mutex_t mu;
    bucket_t *table[BUCKETS];
    st_metric_t *m_refused_http, *m_refused_ingress;
} writes = {.mu = PTHREAD_MUTEX_INITIALIZER};

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void st_api_write_limit_configure(const st_config_t *cfg)
{
    writes.on = cfg->api_write_rate > 0;
    writes.rate = cfg->api_write_rate;
    writes.burst = cfg->api_write_burst > 0 ? cfg->api_write_burst : cfg->api_write_rate;
    writes.window_s = cfg->api_write_audit_window_s;
    writes.window_ns = (long long)cfg->api_write_audit_window_s * 1000000000LL;
    if (!writes.on)
        return;
    static const char *const help = "Writes refused by the per-principal rate limit";
    writes.m_refused_http = st_metrics_counter("strand_api_rate_limited_total", help, "via=\"http\"");
    writes.m_refused_ingress =
        st_metrics_counter("strand_api_rate_limited_total", help, "via=\"ingress\"");
}

int st_api_write_limit_enabled(void)
{
    return writes.on;
}

/* FNV-1a over the principal's name. */
static unsigned bucket_slot(const char *principal)
{
    unsigned h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)principal; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % BUCKETS;
}

/* The principal's bucket, made full when new; NULL only when out of memory. Under mu. */
static bucket_t *bucket_get(const char *principal, long long now)
{
    unsigned slot = bucket_slot(principal);
    for (bucket_t *b = writes.table[slot]; b != NULL; b = b->next)
        if (strcmp(b->principal, principal) == 0)
            return b;
    bucket_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    snprintf(b->principal, sizeof b->principal, "%s", principal);
    b->tokens = writes.burst;
    b->refilled_ns = now;
    b->next = writes.table[slot];
    writes.table[slot] = b;
    return b;
}

int st_api_write_limit_take(const char *principal, int via_ingress, st_answer_t *out)
{
    if (!writes.on)
        return 1;
    long long now = mono_ns();
    double wait_s = 0;
    pthread_mutex_lock(&writes.mu);
    bucket_t *b = bucket_get(principal, now);
    if (b != NULL) {
        b->tokens += (double)(now - b->refilled_ns) / 1e9 * writes.rate;
        if (b->tokens > writes.burst)
            b->tokens = writes.burst;
        b->refilled_ns = now;
        if (b->tokens >= 1.0) {
            b->tokens -= 1.0;
            b = NULL;   /* passes */
        } else {
            wait_s = (1.0 - b->tokens) / writes.rate;
            if (b->window_ns == 0) {
                b->window_ns = now;
                b->window_wall_ms = st_now_ms();
            }
            if (via_ingress)
                b->refused_ingress++;
            else
                b->refused_http++;
        }
    }
    pthread_mutex_unlock(&writes.mu);
    if (b == NULL)
        return 1;   /* passed (or no memory for a bucket: never refuse for that) */
    st_metric_inc(via_ingress ? writes.m_refused_ingress : writes.m_refused_http);
    int retry_after = (int)wait_s + ((double)(int)wait_s < wait_s ? 1 : 0);
    if (retry_after < 1)
        retry_after = 1;
    char message[320];
    snprintf(message, sizeof message,
             "%s sends writes faster than the %g per second (bursts of %g) one principal may"
             " send (STRAND_API_WRITE_RATE, STRAND_API_WRITE_BURST); retry after %d s",
             principal, writes.rate, writes.burst, retry_after);
    st_answer_problem(out, 429, "rate_limited", message, NULL,
                      json_pack("{s:i, s:f, s:f}", "retry_after_s", retry_after, "rate",
                                writes.rate, "burst", writes.burst));
    return 0;
}

/* An ended window taken out of the table, to be audited. */
typedef struct {
    char principal[128];
    long long from_ms, refused_http, refused_ingress;
} ended_t;

void st_api_write_limit_flush(st_api_t *api, int all)
{
    if (!writes.on)
        return;
    ended_t *ended = NULL;
    size_t n = 0, cap = 0;
    long long now = mono_ns();
    pthread_mutex_lock(&writes.mu);
    for (int slot = 0; slot < BUCKETS; slot++) {
        for (bucket_t **link = &writes.table[slot]; *link != NULL;) {
            bucket_t *b = *link;
            if (b->window_ns != 0 && (all || now - b->window_ns >= writes.window_ns)) {
                if (n == cap) {
                    size_t more = cap ? cap * 2 : 8;
                    ended_t *grown = realloc(ended, more * sizeof *ended);
                    if (grown == NULL)
                        break;   /* kept for the next flush */
                    ended = grown;
                    cap = more;
                }
                ended_t *e = &ended[n++];
                snprintf(e->principal, sizeof e->principal, "%s", b->principal);
                e->from_ms = b->window_wall_ms;
                e->refused_http = b->refused_http;
                e->refused_ingress = b->refused_ingress;
                b->window_ns = 0;
                b->refused_http = b->refused_ingress = 0;
            }
            /* idle: full again and nothing to audit; forgotten (a new one starts full) */
            double tokens = b->tokens + (double)(now - b->refilled_ns) / 1e9 * writes.rate;
            if (b->window_ns == 0 && tokens >= writes.burst) {
                *link = b->next;
                free(b);
            } else {
                link = &b->next;
            }
        }
    }
    pthread_mutex_unlock(&writes.mu);
    st_answer_t unused = {0};
    PGconn *conn = n > 0 ? st_api_conn(api, &unused) : NULL;   /* connects only when needed */
    st_answer_close(&unused);
    for (size_t i = 0; i < n; i++) {
        ended_t *e = &ended[i];
        char from[40];
        time_t from_s = (time_t)(e->from_ms / 1000);
        struct tm tm;
        gmtime_r(&from_s, &tm);
        size_t used = strftime(from, sizeof from, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(from + used, sizeof from - used, ".%03dZ", (int)(e->from_ms % 1000));
        json_t *detail = json_pack("{s:I, s:I, s:I, s:s, s:i, s:f, s:f}", "refused",
                                   (json_int_t)(e->refused_http + e->refused_ingress), "http",
                                   (json_int_t)e->refused_http, "ingress",
                                   (json_int_t)e->refused_ingress, "window_from", from,
                                   "window_s", writes.window_s, "rate", writes.rate, "burst",
                                   writes.burst);
        st_audit_entry_t entry = {e->principal, "rate_limited", "rejected", NULL, NULL, NULL,
                                  NULL, detail};
        st_errbuf_t eb;
        if (conn == NULL || st_audit_add_tx(conn, &entry, &eb) != ST_OK)
            st_log_warn("could not audit a rate-limited principal",
                        "principal=%s refused=%lld: %s", e->principal,
                        e->refused_http + e->refused_ingress,
                        conn == NULL ? "no PostgreSQL connection" : eb.msg);
        json_decref(detail);
    }
    free(ended);
}
