/*
 * http.h - a small router over libevent's evhttp, shared by every service.
 *
 * Handlers see an opaque st_http_req_t and never include libevent headers. Each
 * request must be answered exactly once with one of the st_http_reply_* functions;
 * a handler that returns without answering gets a 500 and an error log line.
 * Every request is counted in strand_http_requests_total{route,method,status} and
 * timed in strand_http_request_duration_seconds{route}.
 * Before any route or guard runs, the router refuses a request whose path or any query
 * parameter (name or value), percent-decoded, is not UTF-8: 400 invalid_utf8, `field`
 * naming the parameter where it can. So every string st_http_param() and
 * st_http_query() return is UTF-8 text. Every answer carries
 * X-Content-Type-Options: nosniff.
 */
#ifndef STRAND_HTTP_H
#define STRAND_HTTP_H

#include <jansson.h>

#include "strand/err.h"

typedef struct st_http_req st_http_req_t;
typedef struct st_http_server st_http_server_t;
typedef void (*st_http_handler_fn)(st_http_req_t *req, void *ctx);

/* Defaults of the request-head limits (see st_http_server_set_limits()). */
#define ST_HTTP_DEFAULT_MAX_HEAD_BYTES 16384
#define ST_HTTP_DEFAULT_MAX_HEADERS 100
#define ST_HTTP_DEFAULT_HEAD_TIMEOUT_MS 10000

/* Binds addr:port on the event base `base` (a struct event_base *, passed as void *
 * so that callers need no libevent header). Caller frees with st_http_server_free(). */
st_err_t st_http_server_new(void *base, const char *addr, int port, int max_body_bytes,
                            st_http_server_t **out, st_errbuf_t *eb);
void st_http_server_free(st_http_server_t *srv);

/* The request-head limits, checked on the raw bytes before evhttp parses a request
 * (http_edge.c): a head (request line and headers) of at most `max_head_bytes`
 * (431), at most `max_headers` header fields (431), and at most `head_timeout_ms` from
 * its first byte to its end (the connection is closed). Every server also refuses
 * with a problem, before any handler runs: a body over max_body_bytes (413), a
 * repeated Content-Length, Content-Length with Transfer-Encoding, a malformed
 * Content-Length, control characters (NUL, CR) in the head, a target that is not a
 * path (400), any Transfer-Encoding (411: bodies need a Content-Length) and unknown
 * methods or CONNECT (501). ST_ERR_CONFIG if a limit is out of
 * range (head bytes >= 1024, headers >= 1, timeout >= 100 ms). */
st_err_t st_http_server_set_limits(st_http_server_t *srv, int max_head_bytes, int max_headers,
                                   int head_timeout_ms, st_errbuf_t *eb);

/* Serves HTTPS instead of HTTP on the server's port: TLS 1.2 or later with the PEM
 * certificate chain `cert_file` and the PEM private key `key_file`. Plain HTTP on that
 * port then fails the handshake (the connection is closed). The request-head checks
 * run on the decrypted bytes. ST_ERR_CONFIG naming the file when a file cannot be read,
 * is not PEM, or the key does not match the certificate. Call before the loop runs. */
st_err_t st_http_server_set_tls(st_http_server_t *srv, const char *cert_file,
                                const char *key_file, st_errbuf_t *eb);

/* Reads the certificate and key again (`force` = 0: only when either file changed:
 * inode, size or mtime). New connections use the new pair, open ones keep theirs. Sets
 * *reloaded when it took effect; a pair that does not load keeps the old one and
 * returns ST_ERR_CONFIG (the same unchanged files are not reported again). ST_OK and
 * nothing done when the server has no TLS. Event-loop thread only. */
st_err_t st_http_server_reload_tls(st_http_server_t *srv, int force, int *reloaded,
                                   st_errbuf_t *eb);

/* The underlying struct evhttp * (for the fuzz harness, which feeds raw connections
 * into the router). Borrowed; valid until st_http_server_free(). */
void *st_http_server_evhttp(st_http_server_t *srv);

/* Registers a route. `pattern` is a path with {name} segments ("/v1/instances/{id}").
 * Routes are matched in registration order; `method` is "GET", "POST", ...
 * The server's guard (if any) runs first. */
void st_http_route(st_http_server_t *srv, const char *method, const char *pattern,
                   st_http_handler_fn fn, void *ctx);
/* Registers a route the guard does not apply to (health, readiness, metrics). */
void st_http_route_public(st_http_server_t *srv, const char *method, const char *pattern,
                          st_http_handler_fn fn, void *ctx);

/* Calls `fn` for every registered route, in registration order. */
void st_http_routes_foreach(const st_http_server_t *srv,
                            void (*fn)(const char *method, const char *pattern, void *ctx),
                            void *ctx);

/* A guard runs before every non-public route; to refuse the request it answers
 * (e.g. 401) and returns 0. */
typedef int (*st_http_guard_fn)(st_http_req_t *req, void *ctx);
void st_http_set_guard(st_http_server_t *srv, st_http_guard_fn fn, void *ctx);

/* Path parameter by name, percent-decoded (UTF-8). Borrowed; valid until the reply.
 * NULL if absent. */
const char *st_http_param(st_http_req_t *req, const char *name);
/* Decoded query-string parameter (UTF-8). Borrowed; valid until the reply. NULL if
 * absent. */
const char *st_http_query(st_http_req_t *req, const char *name);
/* Request header. Borrowed; valid until the reply. NULL if absent. */
const char *st_http_header(st_http_req_t *req, const char *name);

/* Parses the body as a JSON object. On failure answers 400 (or 413 if too large)
 * with a problem body itself and returns NULL. Caller decrefs the result. */
json_t *st_http_body_object(st_http_req_t *req);

/* Takes the request out of the handler's hands to answer it later (long polling):
 * returns a request that stays valid until it is answered with st_http_reply_*,
 * which then frees it. The handler must return without answering. If the client goes
 * away first, st_http_req_gone() turns true and the reply only frees. */
st_http_req_t *st_http_defer(st_http_req_t *req);
int st_http_req_gone(const st_http_req_t *req);

/* Adds a response header (Cache-Control, Content-Security-Policy, ...) to the answer
 * the handler is about to send; call before st_http_reply_*. Both strings are copied. */
void st_http_add_header(st_http_req_t *req, const char *name, const char *value);
/* Answers with `len` bytes of `data` (copied), which need not be text. */
void st_http_reply_bytes(st_http_req_t *req, int status, const char *content_type,
                         const void *data, size_t len);
/* Answers with `body` as JSON. Steals the reference to `body`. */
void st_http_reply_json(st_http_req_t *req, int status, json_t *body);
/* Answers with a text body (copied). */
void st_http_reply_text(st_http_req_t *req, int status, const char *content_type,
                        const char *text);
/* The reason phrase of an HTTP status ("Not Found"). Static. */
const char *st_http_status_title(int status);
/* A problem document (RFC 9457): {"type": "urn:strand:problem:<code>", "title": the
 * status's phrase, "status", "detail": message, "code", "message": message (kept for
 * older clients), "field"?}. `field` (a JSON pointer into the request) may be NULL;
 * the members of `extra` (may be NULL; stolen) are added where the body has none.
 * Caller decrefs the result. */
json_t *st_http_problem_new(int status, const char *code, const char *message,
                            const char *field, json_t *extra);
/* Answers with application/problem+json: st_http_problem_new()'s document. */
void st_http_reply_problem(st_http_req_t *req, int status, const char *code,
                           const char *message, const char *field, json_t *extra);

/* The matched route's method ("GET") and pattern ("/v1/instances/{id}"), for a guard
 * that authorises per route. Borrowed; valid until the reply. */
const char *st_http_req_method(const st_http_req_t *req);
const char *st_http_req_route(const st_http_req_t *req);

#endif
