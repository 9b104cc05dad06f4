/* http.c - evhttp router (see http.h). */
#include "strand/http.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "http_int.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/util.h"

#define MAX_PARAMS 8
#define MAX_SEGMENTS 16

typedef struct route {
    char method[8];
    char pattern[128];
    st_http_handler_fn fn;
    void *ctx;
    int public;
    struct route *next;
} route_t;

struct st_http_server {
    struct evhttp *evhttp;
    route_t *routes, **tail;
    int max_body;
    st_http_guard_fn guard;
    void *guard_ctx;
    st_edge_t edge;  /* request-head checks on the raw bytes (http_edge.c) */
    char tls_cert[1024], tls_key[1024];   /* "" = plain HTTP */
    struct stat tls_seen[2];              /* the files as last read, for the reload check */
};

struct st_http_req {
    struct evhttp_request *ev;
    const route_t *route;
    int nparams;
    char *param_names[MAX_PARAMS];
    char *param_values[MAX_PARAMS];
    struct evkeyvalq query;
    int query_parsed;
    int status;      /* 0 until answered */
    int max_body;
    int deferred;    /* the handler handed it to st_http_defer() */
    int on_heap;     /* a deferred copy: freed by its reply */
    const char *method;   /* static string, kept for metrics after the reply */
    int gone;        /* the client closed the connection while deferred */
    int close;       /* answer with Connection: close */
    char allow[64];  /* an Allow header for the answer, or "" */
    st_edge_t *edge;
    double started;
};

static void record_metrics(const st_http_req_t *req);
static void free_req_parts(st_http_req_t *req);
static void reply_empty(st_http_req_t *req, int status);

static const char *method_name(enum evhttp_cmd_type cmd)
{
    switch (cmd) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_PATCH: return "PATCH";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    default: return "OTHER";
    }
}

/* Splits "/a/b/c" into segments in place; returns the count or -1 if too many. */
static int split_path(char *path, char **segs)
{
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(path, "/", &save); tok != NULL; tok = strtok_r(NULL, "/", &save)) {
        if (n == MAX_SEGMENTS)
            return -1;
        segs[n++] = tok;
    }
    return n;
}

/* Matches the decoded path against a route pattern, filling req's parameters. */
static int route_match(const route_t *rt, const char *path, st_http_req_t *req)
{
    char pbuf[128], ubuf[1024];
    char *psegs[MAX_SEGMENTS], *usegs[MAX_SEGMENTS];
    snprintf(pbuf, sizeof pbuf, "%s", rt->pattern);
    if (strlen(path) >= sizeof ubuf)
        return 0;
    snprintf(ubuf, sizeof ubuf, "%s", path);
    int pn = split_path(pbuf, psegs), un = split_path(ubuf, usegs);
    if (pn < 0 || un < 0 || pn != un)
        return 0;
    for (int i = 0; i < pn; i++) {
        if (psegs[i][0] == '{')
            continue;
        if (strcmp(psegs[i], usegs[i]) != 0)
            return 0;
    }
    req->nparams = 0;
    for (int i = 0; i < pn && req->nparams < MAX_PARAMS; i++) {
        if (psegs[i][0] != '{')
            continue;
        size_t len = strlen(psegs[i]);
        req->param_names[req->nparams] = strndup(psegs[i] + 1, len - 2);
        req->param_values[req->nparams] = strdup(usegs[i]);
        req->nparams++;
    }
    return 1;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void record_metrics(const st_http_req_t *req)
{
    char labels[256];
    const char *pattern = req->route ? req->route->pattern : "unmatched";
    snprintf(labels, sizeof labels, "route=\"%s\",method=\"%s\",status=\"%d\"", pattern,
             req->method, req->status);
    st_metric_inc(st_metrics_counter("strand_http_requests_total", "HTTP requests answered",
                                     labels));
    snprintf(labels, sizeof labels, "route=\"%s\"", pattern);
    st_metric_observe(st_metrics_histogram("strand_http_request_duration_seconds",
                                           "HTTP request handling time", labels),
                      now_seconds() - req->started);
}

static void free_req_parts(st_http_req_t *req)
{
    for (int i = 0; i < req->nparams; i++) {
        free(req->param_names[i]);
        free(req->param_values[i]);
    }
    req->nparams = 0;
    if (req->query_parsed)
        evhttp_clear_headers(&req->query);
    req->query_parsed = 0;
}

static void on_connection_closed(struct evhttp_connection *conn, void *arg)
{
    st_http_req_t *req = arg;
    req->gone = 1;
}

st_http_req_t *st_http_defer(st_http_req_t *req)
{
    st_http_req_t *copy = malloc(sizeof *copy);
    if (copy == NULL)
        abort();
    *copy = *req;
    copy->on_heap = 1;
    if (copy->query_parsed) {   /* the query list heads point into the old struct */
        copy->query.tqh_first = NULL;
        copy->query.tqh_last = &copy->query.tqh_first;
        copy->query_parsed = 0;
        evhttp_clear_headers(&req->query);
    }
    req->deferred = 1;
    req->nparams = 0;           /* the copy owns the parameters now */
    req->query_parsed = 0;
    st_edge_conn_t *conn = st_edge_conn_of(req->edge, req->ev);
    if (conn != NULL) {         /* the edge's close callback marks it gone */
        conn->deferred = copy;
        conn->deferred_gone = &copy->gone;
    }
    else                        /* the edge never saw the connection (out of memory) */
        evhttp_connection_set_closecb(evhttp_request_get_connection(req->ev),
                                      on_connection_closed, copy);
    return copy;
}

int st_http_req_gone(const st_http_req_t *req)
{
    return req->gone;
}

/* Adds `method` to a comma-separated Allow list unless it is there already. */
static void allow_add(char *allow, size_t len, const char *method)
{
    const char *p = allow;
    size_t mlen = strlen(method);
    while ((p = strstr(p, method)) != NULL) {
        if ((p == allow || p[-1] == ' ') && (p[mlen] == ',' || p[mlen] == '\0'))
            return;
        p += mlen;
    }
    size_t used = strlen(allow);
    snprintf(allow + used, len - used, "%s%s", used ? ", " : "", method);
}

/* The methods routed for `path`, as an Allow header value (OPTIONS included). */
static void allowed_methods(const st_http_server_t *srv, const char *path, char *allow,
                            size_t len)
{
    allow[0] = '\0';
    for (const route_t *rt = srv->routes; rt != NULL; rt = rt->next) {
        st_http_req_t probe = {0};
        if (!route_match(rt, path, &probe))
            continue;
        free_req_parts(&probe);
        allow_add(allow, len, rt->method);
    }
    allow_add(allow, len, "OPTIONS");
}

/* True when the `len` bytes at `s` are well-formed UTF-8 (RFC 3629): no overlong forms
 * (C0 AF for "/"), no surrogates (ED A0..BF), nothing above U+10FFFF, no sequence cut
 * short. PostgreSQL refuses any other text parameter, and jansson any other string. */
static int utf8_valid(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        size_t n;
        unsigned char lo = 0x80, hi = 0xbf;   /* the range of the second byte */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            if (c == 0xe0)
                lo = 0xa0;   /* overlong */
            else if (c == 0xed)
                hi = 0x9f;   /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            if (c == 0xf0)
                lo = 0x90;   /* overlong */
            else if (c == 0xf4)
                hi = 0x8f;   /* above U+10FFFF */
        } else {
            return 0;        /* a continuation byte, C0, C1, F5..FF */
        }
        if (len - i <= n || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= n; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf)
                return 0;
        i += n + 1;
    }
    return 1;
}

/* True when the `len` bytes at `text`, a query parameter's name or value, are UTF-8
 * once percent-decoded. */
static int query_part_utf8(const char *text, size_t len)
{
    char *copy = strndup(text, len);
    size_t out_len = 0;
    char *decoded = copy ? evhttp_uridecode(copy, 1, &out_len) : NULL;
    int ok = decoded != NULL && utf8_valid((const unsigned char *)decoded, out_len);
    free(decoded);
    free(copy);
    return ok;
}

/* A query parameter's name fit to be quoted in a problem's message and as a JSON
 * pointer: a short name of letters, digits, '_', '-' and '.' (every name a route reads). */
static int quotable(const char *name, size_t len)
{
    if (len == 0 || len > 64)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)name[i]) && strchr("_-.", name[i]) == NULL)
            return 0;
    return 1;
}

/* Refuses a request whose path (decoded: `path`, `path_len` bytes) or any query
 * parameter (name or value, percent-decoded) is not UTF-8: 400 invalid_utf8, naming
 * the parameter (a path parameter of a route the path matches, or the query
 * parameter) when it can be named. Returns 1 when it answered. Runs before the guard,
 * like the edge's refusals: no handler (nor the guard's per-definition check) ever
 * sees such text, which PostgreSQL would refuse (a 500) and jansson cannot encode. */
static int refuse_invalid_utf8(const st_http_server_t *srv, st_http_req_t *req,
                               const char *path, size_t path_len)
{
    char field[80] = "", message[160];
    int bad = path != NULL && !utf8_valid((const unsigned char *)path, path_len);
    if (bad) {
        snprintf(message, sizeof message,
                 "the request path is not UTF-8 text (after percent-decoding)");
        for (const route_t *rt = srv->routes; rt != NULL && field[0] == '\0'; rt = rt->next) {
            st_http_req_t probe = {0};
            if (!route_match(rt, path, &probe))
                continue;
            for (int i = 0; i < probe.nparams && field[0] == '\0'; i++) {
                if (utf8_valid((const unsigned char *)probe.param_values[i],
                               strlen(probe.param_values[i])))
                    continue;
                snprintf(field, sizeof field, "/%s", probe.param_names[i]);
                snprintf(message, sizeof message, "the path parameter %s is not UTF-8 text"
                         " (after percent-decoding)", probe.param_names[i]);
            }
            free_req_parts(&probe);
        }
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req->ev);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    for (const char *p = query; !bad && p != NULL && *p != '\0';) {
        size_t len = strcspn(p, "&");
        const char *eq = memchr(p, '=', len);
        size_t name_len = eq ? (size_t)(eq - p) : len;
        if (!query_part_utf8(p, name_len) ||
            (eq != NULL && !query_part_utf8(eq + 1, len - name_len - 1))) {
            bad = 1;
            if (quotable(p, name_len)) {
                snprintf(field, sizeof field, "/%.*s", (int)name_len, p);
                snprintf(message, sizeof message, "the query parameter %.*s is not UTF-8 text"
                         " (after percent-decoding)", (int)name_len, p);
            } else {
                snprintf(message, sizeof message, "a query parameter is not UTF-8 text"
                         " (after percent-decoding)");
            }
        }
        p += len;
        if (*p == '&')
            p++;
    }
    if (!bad)
        return 0;
    st_http_reply_problem(req, 400, "invalid_utf8", message, field[0] ? field : NULL, NULL);
    return 1;
}

/* Answers a request whose head the edge refused (it replaced it by a marked one). */
static int answer_refused(st_http_server_t *srv, st_http_req_t *req)
{
    const char *mark = evhttp_find_header(evhttp_request_get_input_headers(req->ev),
                                          "X-Strand-Edge");
    if (mark == NULL || strcmp(mark, srv->edge.secret) != 0)
        return 0;
    st_edge_conn_t *conn = st_edge_conn_of(&srv->edge, req->ev);
    req->close = 1;
    if (conn == NULL || conn->refused_code == NULL)
        st_http_reply_problem(req, 400, "invalid_request", "the request was refused", NULL, NULL);
    else
        st_http_reply_problem(req, conn->refused_status, conn->refused_code,
                              conn->refused_message, NULL, NULL);
    return 1;
}

static void dispatch(struct evhttp_request *ev, void *arg)
{
    st_http_server_t *srv = arg;
    const char *method = method_name(evhttp_request_get_command(ev));
    st_http_req_t req = {.ev = ev, .max_body = srv->max_body, .started = now_seconds(),
                         .method = method, .edge = &srv->edge};
    if (answer_refused(srv, &req)) {
        record_metrics(&req);
        return;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(ev);
    const char *raw_path = uri ? evhttp_uri_get_path(uri) : NULL;
    size_t path_len = 0;
    char *path = raw_path ? evhttp_uridecode(raw_path, 0, &path_len) : NULL;
    if (refuse_invalid_utf8(srv, &req, path, path_len)) {
        record_metrics(&req);
        free(path);
        return;
    }
    int path_known = 0;
    for (const route_t *rt = srv->routes; path != NULL && rt != NULL; rt = rt->next) {
        if (!route_match(rt, path, &req))
            continue;
        path_known = 1;
        if (strcmp(rt->method, method) != 0) {
            for (int i = 0; i < req.nparams; i++) {
                free(req.param_names[i]);
                free(req.param_values[i]);
            }
            req.nparams = 0;
            continue;
        }
        req.route = rt;
        break;
    }
    if (req.route != NULL && !req.route->public && srv->guard != NULL &&
        !srv->guard(&req, srv->guard_ctx)) {
        /* refused and answered by the guard */
    } else if (req.route != NULL) {
        req.route->fn(&req, req.route->ctx);
        if (req.deferred) {
            free(path);
            return;   /* answered later; metrics are recorded then */
        }
        if (req.status == 0) {
            st_log_error("handler returned without a reply", "route=%s", req.route->pattern);
            st_http_reply_problem(&req, 500, "internal", "the handler did not answer", NULL,
                                  NULL);
        }
    } else if (path_known && strcmp(method, "OPTIONS") == 0) {
        allowed_methods(srv, path, req.allow, sizeof req.allow);
        reply_empty(&req, 204);
    } else if (path_known) {
        allowed_methods(srv, path, req.allow, sizeof req.allow);
        char msg[160];
        snprintf(msg, sizeof msg, "this path does not accept %s; it accepts %s", method,
                 req.allow);
        st_http_reply_problem(&req, 405, "method_not_allowed", msg, NULL, NULL);
    } else {
        st_http_reply_problem(&req, 404, "route_not_found", "no such route", NULL, NULL);
    }
    record_metrics(&req);
    free_req_parts(&req);
    free(path);
}

st_err_t st_http_server_new(void *base, const char *addr, int port, int max_body_bytes,
                            st_http_server_t **out, st_errbuf_t *eb)
{
    st_http_server_t *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the HTTP server");
    srv->evhttp = evhttp_new(base);
    srv->tail = &srv->routes;
    srv->max_body = max_body_bytes;
    srv->edge = (st_edge_t){.evhttp = srv->evhttp, .max_body = max_body_bytes,
                            .max_head_bytes = ST_HTTP_DEFAULT_MAX_HEAD_BYTES,
                            .max_headers = ST_HTTP_DEFAULT_MAX_HEADERS,
                            .head_timeout_ms = ST_HTTP_DEFAULT_HEAD_TIMEOUT_MS,
                            .idle_timeout_s = 30};
    st_uuid_new(srv->edge.secret);
    if (srv->evhttp == NULL || st_edge_install(&srv->edge) != 0) {
        if (srv->evhttp)
            evhttp_free(srv->evhttp);
        st_edge_close(&srv->edge);
        free(srv);
        return st_err_set(eb, ST_ERR_NOMEM, "could not set up the HTTP server");
    }
    if (evhttp_bind_socket(srv->evhttp, addr, (ev_uint16_t)port) != 0) {
        evhttp_free(srv->evhttp);
        st_edge_close(&srv->edge);
        free(srv);
        return st_err_set(eb, ST_ERR_CONFIG, "could not listen on %s:%d", addr, port);
    }
    /* The edge refuses oversized heads and bodies with a problem before evhttp reads
     * them; evhttp's own limits stay as a backstop. */
    evhttp_set_max_body_size(srv->evhttp, (ev_ssize_t)max_body_bytes);
    evhttp_set_max_headers_size(srv->evhttp, (ev_ssize_t)srv->edge.max_head_bytes + 1024);
    evhttp_set_timeout(srv->evhttp, srv->edge.idle_timeout_s);
    /* Every method reaches the router, which answers 405 (with Allow), 404 or OPTIONS;
     * the edge refuses methods it does not know (501) before evhttp parses them. */
    evhttp_set_allowed_methods(srv->evhttp, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                                EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH |
                                                EVHTTP_REQ_HEAD | EVHTTP_REQ_OPTIONS |
                                                EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
    evhttp_set_gencb(srv->evhttp, dispatch, srv);
    *out = srv;
    return ST_OK;
}

/* True when `now` differs from `seen` (another file, size or mtime). */
static int file_changed(const struct stat *seen, const struct stat *now)
{
    return now->st_ino != seen->st_ino || now->st_dev != seen->st_dev ||
           now->st_size != seen->st_size || now->st_mtim.tv_sec != seen->st_mtim.tv_sec ||
           now->st_mtim.tv_nsec != seen->st_mtim.tv_nsec;
}

static void stat_or_zero(const char *path, struct stat *st)
{
    if (stat(path, st) != 0)
        memset(st, 0, sizeof *st);
}

st_err_t st_http_server_set_tls(st_http_server_t *srv, const char *cert_file,
                                const char *key_file, st_errbuf_t *eb)
{
    if (strlen(cert_file) >= sizeof srv->tls_cert || strlen(key_file) >= sizeof srv->tls_key)
        return st_err_set(eb, ST_ERR_CONFIG, "the TLS file names are too long");
    snprintf(srv->tls_cert, sizeof srv->tls_cert, "%s", cert_file);
    snprintf(srv->tls_key, sizeof srv->tls_key, "%s", key_file);
    int reloaded;
    st_err_t err = st_http_server_reload_tls(srv, 1, &reloaded, eb);
    if (err != ST_OK)
        srv->tls_cert[0] = srv->tls_key[0] = '\0';
    return err;
}

st_err_t st_http_server_reload_tls(st_http_server_t *srv, int force, int *reloaded,
                                   st_errbuf_t *eb)
{
    *reloaded = 0;
    if (srv->tls_cert[0] == '\0')
        return ST_OK;
    struct stat now[2];
    stat_or_zero(srv->tls_cert, &now[0]);
    stat_or_zero(srv->tls_key, &now[1]);
    if (!force && !file_changed(&srv->tls_seen[0], &now[0]) &&
        !file_changed(&srv->tls_seen[1], &now[1]))
        return ST_OK;
    srv->tls_seen[0] = now[0];   /* a bad pair is reported once, not at every check */
    srv->tls_seen[1] = now[1];
    SSL_CTX *fresh = NULL;
    st_err_t err = st_tls_ctx_load(srv->tls_cert, srv->tls_key, &fresh, eb);
    if (err != ST_OK)
        return err;
    SSL_CTX_free(srv->edge.tls);   /* open connections hold their own references */
    srv->edge.tls = fresh;
    *reloaded = 1;
    return ST_OK;
}

void st_http_server_free(st_http_server_t *srv)
{
    if (srv == NULL)
        return;
    evhttp_free(srv->evhttp);
    st_edge_close(&srv->edge);
    SSL_CTX_free(srv->edge.tls);
    route_t *rt = srv->routes;
    while (rt != NULL) {
        route_t *next = rt->next;
        free(rt);
        rt = next;
    }
    free(srv);
}

static void add_route(st_http_server_t *srv, const char *method, const char *pattern,
                      st_http_handler_fn fn, void *ctx, int public)
{
    route_t *rt = calloc(1, sizeof *rt);
    if (rt == NULL)
        abort();
    snprintf(rt->method, sizeof rt->method, "%s", method);
    snprintf(rt->pattern, sizeof rt->pattern, "%s", pattern);
    rt->fn = fn;
    rt->ctx = ctx;
    rt->public = public;
    *srv->tail = rt;
    srv->tail = &rt->next;
}

st_err_t st_http_server_set_limits(st_http_server_t *srv, int max_head_bytes, int max_headers,
                                   int head_timeout_ms, st_errbuf_t *eb)
{
    if (max_head_bytes < 1024 || max_headers < 1 || head_timeout_ms < 100)
        return st_err_set(eb, ST_ERR_CONFIG, "HTTP limits out of range");
    if (st_edge_set_head_limit(&srv->edge, max_head_bytes) != 0)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the head buffer");
    srv->edge.max_headers = max_headers;
    srv->edge.head_timeout_ms = head_timeout_ms;
    evhttp_set_max_headers_size(srv->evhttp, (ev_ssize_t)max_head_bytes + 1024);
    return ST_OK;
}

void *st_http_server_evhttp(st_http_server_t *srv)
{
    return srv->evhttp;
}

void st_http_route(st_http_server_t *srv, const char *method, const char *pattern,
                   st_http_handler_fn fn, void *ctx)
{
    add_route(srv, method, pattern, fn, ctx, 0);
}

void st_http_route_public(st_http_server_t *srv, const char *method, const char *pattern,
                          st_http_handler_fn fn, void *ctx)
{
    add_route(srv, method, pattern, fn, ctx, 1);
}

void st_http_routes_foreach(const st_http_server_t *srv,
                            void (*fn)(const char *method, const char *pattern, void *ctx),
                            void *ctx)
{
    for (const route_t *rt = srv->routes; rt != NULL; rt = rt->next)
        fn(rt->method, rt->pattern, ctx);
}

void st_http_set_guard(st_http_server_t *srv, st_http_guard_fn fn, void *ctx)
{
    srv->guard = fn;
    srv->guard_ctx = ctx;
}

const char *st_http_param(st_http_req_t *req, const char *name)
{
    for (int i = 0; i < req->nparams; i++)
        if (strcmp(req->param_names[i], name) == 0)
            return req->param_values[i];
    return NULL;
}

const char *st_http_query(st_http_req_t *req, const char *name)
{
    if (!req->query_parsed) {
        req->query.tqh_first = NULL;   /* TAILQ_INIT without <sys/queue.h> */
        req->query.tqh_last = &req->query.tqh_first;
        const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req->ev);
        const char *q = uri ? evhttp_uri_get_query(uri) : NULL;
        if (q != NULL)
            evhttp_parse_query_str(q, &req->query);
        req->query_parsed = 1;
    }
    return evhttp_find_header(&req->query, name);
}

const char *st_http_header(st_http_req_t *req, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(req->ev), name);
}

json_t *st_http_body_object(st_http_req_t *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req->ev);
    size_t len = evbuffer_get_length(in);
    if (len > (size_t)req->max_body) {
        st_http_reply_problem(req, 413, "body_too_large", "the request body is too large",
                              NULL, NULL);
        return NULL;
    }
    const char *data = (const char *)evbuffer_pullup(in, -1);
    json_error_t jerr;
    json_t *doc = json_loadb(data ? data : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL) {
        char msg[300];
        snprintf(msg, sizeof msg, "the body is not valid JSON: %s (line %d, column %d)",
                 jerr.text, jerr.line, jerr.column);
        st_http_reply_problem(req, 400, "invalid_json", msg, "", NULL);
        return NULL;
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        st_http_reply_problem(req, 400, "invalid_body", "the body must be a JSON object", "",
                              NULL);
        return NULL;
    }
    return doc;
}

static void reply(st_http_req_t *req, int status, const char *content_type,
                  const char *data, size_t len)
{
    if (req->status != 0) {
        st_log_error("second reply to one request ignored", "status=%d", status);
        return;
    }
    req->status = status;
    if (req->on_heap && req->gone) {   /* the client left; nothing to send */
        free_req_parts(req);
        free(req);
        return;
    }
    struct evkeyvalq *headers = evhttp_request_get_output_headers(req->ev);
    if (content_type != NULL)
        evhttp_add_header(headers, "Content-Type", content_type);
    /* Every answer: a browser takes the Content-Type as it is and never sniffs a JSON
     * or problem body (or a diagram) into HTML or script. */
    if (evhttp_find_header(headers, "X-Content-Type-Options") == NULL)
        evhttp_add_header(headers, "X-Content-Type-Options", "nosniff");
    if (req->allow[0] != '\0')
        evhttp_add_header(headers, "Allow", req->allow);
    if (req->close)
        evhttp_add_header(headers, "Connection", "close");
    struct evbuffer *out = evbuffer_new();
    evbuffer_add(out, data, len);
    if (req->on_heap) {
        st_edge_conn_t *conn = st_edge_conn_of(req->edge, req->ev);
        if (conn != NULL && conn->deferred == req) {
            conn->deferred = NULL;
            conn->deferred_gone = NULL;
        }
        else if (conn == NULL)
            evhttp_connection_set_closecb(evhttp_request_get_connection(req->ev), NULL, NULL);
    }
    evhttp_send_reply(req->ev, status, st_http_status_title(status), out);   /* req->ev may be freed from here */
    evbuffer_free(out);
    if (req->on_heap) {
        record_metrics(req);
        free_req_parts(req);
        free(req);
    }
}

/* An answer without a body (204 to OPTIONS). */
static void reply_empty(st_http_req_t *req, int status)
{
    reply(req, status, NULL, "", 0);
}

void st_http_add_header(st_http_req_t *req, const char *name, const char *value)
{
    if (req->status == 0 && !(req->on_heap && req->gone))
        evhttp_add_header(evhttp_request_get_output_headers(req->ev), name, value);
}

void st_http_reply_bytes(st_http_req_t *req, int status, const char *content_type,
                         const void *data, size_t len)
{
    reply(req, status, content_type, data, len);
}

void st_http_reply_text(st_http_req_t *req, int status, const char *content_type,
                        const char *text)
{
    reply(req, status, content_type, text, strlen(text));
}

static void reply_json_as(st_http_req_t *req, int status, const char *content_type,
                          json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(body);
    if (text == NULL) {
        reply(req, 500, "text/plain", "could not encode the response", 29);
        return;
    }
    reply(req, status, content_type, text, strlen(text));
    free(text);
}

void st_http_reply_json(st_http_req_t *req, int status, json_t *body)
{
    reply_json_as(req, status, "application/json", body);
}

const char *st_http_status_title(int status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status >= 500 ? "Server Error" : status >= 400 ? "Client Error"
                  : status >= 300 ? "Redirection" : "Success";
    }
}

json_t *st_http_problem_new(int status, const char *code, const char *message,
                            const char *field, json_t *extra)
{
    if (code == NULL)
        code = "error";
    if (message == NULL)
        message = st_http_status_title(status);
    char type[160];
    snprintf(type, sizeof type, "urn:strand:problem:%s", code);
    json_t *body = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s}", "type", type, "title",
                             st_http_status_title(status), "status", status, "detail", message,
                             "code", code, "message", message);
    if (field != NULL)
        json_object_set_new(body, "field", json_string(field));
    if (extra != NULL) {
        json_object_update_missing(body, extra);
        json_decref(extra);
    }
    return body;
}

void st_http_reply_problem(st_http_req_t *req, int status, const char *code,
                           const char *message, const char *field, json_t *extra)
{
    reply_json_as(req, status, "application/problem+json",
                  st_http_problem_new(status, code, message, field, extra));
}

const char *st_http_req_method(const st_http_req_t *req)
{
    return req->method;
}

const char *st_http_req_route(const st_http_req_t *req)
{
    return req->route ? req->route->pattern : NULL;
}
