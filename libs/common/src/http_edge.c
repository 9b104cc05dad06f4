/*
 * http_edge.c - checks on the raw bytes of every request head, before evhttp reads them.
 *
 * libevent 2.1 answers what it cannot parse with its own HTML page, takes the first of
 * two Content-Length headers (the rest of the body then runs as a second request),
 * truncates a header value at a NUL byte, bounds neither the number of headers nor
 * the time a client may take to send them. The edge watches each connection's input
 * buffer (an evbuffer callback on the socket bufferevent evhttp reads from) and, for
 * each request head, before evhttp sees it:
 *   - bounds its size (max_head_bytes) and its header count (max_headers);
 *   - bounds the time from its first byte to its end (head_timeout_ms): the read
 *     timeout is set to what is left, so a client that trickles is cut off;
 *   - refuses control characters, folded lines, malformed request lines (the target
 *     must be a path), unknown methods and CONNECT, a repeated Content-Length, a
 *     malformed one, Content-Length with Transfer-Encoding, any Transfer-Encoding
 *     (411: a body needs a Content-Length, so that the edge and evhttp frame every
 *     request the same way and evhttp never answers an oversized chunked body with
 *     its own HTML page), a body on HEAD/TRACE, and a Content-Length over max_body.
 * A refused head is replaced by a marked request (GET / with Connection: close and
 * X-Strand-Edge: <per-process secret>); the router answers it with the problem the
 * edge recorded, and evhttp closes the connection after the answer. A head is held
 * back from evhttp until it is complete and checked (evhttp parses line by line as
 * bytes arrive); body bytes are counted, not read.
 * With TLS (STRAND_HTTP_TLS_CERT_FILE) the bufferevent is an OpenSSL one: its input
 * buffer, which the edge watches, holds the decrypted bytes, so every check above
 * applies unchanged; a stalled handshake is cut off by evhttp's idle timeout (30 s).
 *
 * Connection states:  HEAD --head ok, body--> BODY --body counted--> HEAD
 *                     HEAD --head ok, no body--> HEAD
 *                     HEAD --refused--> REFUSED (later bytes discarded, until close)
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http_int.h"

enum { EDGE_HEAD = 0, EDGE_BODY, EDGE_REFUSED };

#define MAX_EDGES 8

/* The servers' edges, for the evbuffer callback (which only knows the bufferevent). */
static st_edge_t *edges[MAX_EDGES];

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static st_edge_t *edge_of(struct evhttp *http)
{
    for (int i = 0; i < MAX_EDGES; i++)
        if (edges[i] != NULL && edges[i]->evhttp == http)
            return edges[i];
    return NULL;
}

/* The slot for `fd`, growing the table; NULL if out of memory. */
static st_edge_conn_t *slot_for(st_edge_t *edge, int fd)
{
    if (fd >= edge->nconns) {
        int n = edge->nconns ? edge->nconns : 64;
        while (n <= fd)
            n *= 2;
        st_edge_conn_t *grown = realloc(edge->conns, (size_t)n * sizeof *grown);
        if (grown == NULL)
            return NULL;
        memset(grown + edge->nconns, 0, (size_t)(n - edge->nconns) * sizeof *grown);
        edge->conns = grown;
        edge->nconns = n;
    }
    return &edge->conns[fd];
}

static void set_read_timeout(st_edge_t *edge, struct bufferevent *bev, double seconds)
{
    if (seconds < 0.001)
        seconds = 0.001;
    struct timeval rtv = {(time_t)seconds, (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
    struct timeval wtv = {edge->idle_timeout_s, 0};
    bufferevent_set_timeouts(bev, &rtv, &wtv);
}

static void on_close(struct evhttp_connection *evcon, void *arg)
{
    st_edge_t *edge = arg;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
    int fd = bev ? (int)bufferevent_getfd(bev) : -1;
    if (fd < 0 || fd >= edge->nconns || edge->conns[fd].bev != bev)
        return;
    if (edge->conns[fd].deferred != NULL)
        *edge->conns[fd].deferred_gone = 1;   /* the client of the parked request left */
    if (edge->conns[fd].hold != NULL)
        evbuffer_free(edge->conns[fd].hold);
    memset(&edge->conns[fd], 0, sizeof edge->conns[fd]);
}

/* Keeps the first `keep` bytes of `buf` and drops the rest. */
static void truncate_to(struct evbuffer *buf, size_t keep)
{
    size_t total = evbuffer_get_length(buf);
    if (total <= keep)
        return;
    struct evbuffer *front = evbuffer_new();
    if (front == NULL) {
        evbuffer_drain(buf, total);
        return;
    }
    evbuffer_remove_buffer(buf, front, keep);
    evbuffer_drain(buf, evbuffer_get_length(buf));
    evbuffer_add_buffer(buf, front);
    evbuffer_free(front);
}

/* Replaces the unchecked rest of the input with the marked request that the router
 * answers with this problem. */
static void refuse(st_edge_t *edge, st_edge_conn_t *c, struct evbuffer *buf, int status,
                   const char *code, const char *message)
{
    truncate_to(buf, c->checked);
    if (c->hold != NULL)
        evbuffer_drain(c->hold, evbuffer_get_length(c->hold));
    evbuffer_add_printf(buf, "GET / HTTP/1.1\r\nConnection: close\r\nX-Strand-Edge: %s\r\n\r\n",
                        edge->secret);
    c->checked = evbuffer_get_length(buf);
    c->state = EDGE_REFUSED;
    c->refused_status = status;
    c->refused_code = code;
    c->refused_message = message;
    c->head_started = 0;
    set_read_timeout(edge, c->bev, edge->idle_timeout_s);
}

/* A head's verdict. */
typedef struct {
    int status;              /* 0 = accepted */
    const char *code, *message;
    long long body;          /* accepted: body bytes that follow (Content-Length) */
    int chunked;             /* it had a Transfer-Encoding (then it is refused) */
} verdict_t;

static int refuse_with(verdict_t *v, int status, const char *code, const char *message)
{
    v->status = status;
    v->code = code;
    v->message = message;
    return 0;
}

static int is_tchar(unsigned char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* Trims spaces and tabs around [*s, *e). */
static void trim(const char **s, const char **e)
{
    while (*s < *e && (**s == ' ' || **s == '\t'))
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
}

static int name_is(const char *name, size_t len, const char *want)
{
    return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

static const char *const methods_with_body[] = {"POST", "PUT", "PATCH", "GET", "DELETE",
                                                "OPTIONS"};
static const char *const methods_without_body[] = {"HEAD", "TRACE"};

/* Checks one complete head (`len` bytes, ending with its empty line). */
static int check_head(const st_edge_t *edge, const char *head, size_t len, verdict_t *v)
{
    memset(v, 0, sizeof *v);
    const char *end = head + len, *line = head;
    int nheaders = 0, have_cl = 0, have_te = 0, may_have_body = -1;
    for (int lineno = 0; line < end; lineno++) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *le = nl;
        if (le > line && le[-1] == '\r')
            le--;
        for (const char *p = line; p < le; p++) {
            unsigned char ch = (unsigned char)*p;
            if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                return refuse_with(v, 400, "invalid_header",
                                   "the request head holds a control character (NUL, CR, ...)");
        }
        if (le == line) {   /* the empty line: end of the head */
            if (lineno == 0)
                return refuse_with(v, 400, "invalid_request_line", "the request line is empty");
            break;
        }
        if (lineno == 0) {
            const char *sp1 = memchr(line, ' ', (size_t)(le - line));
            const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(le - sp1 - 1)) : NULL;
            if (sp1 == NULL || sp2 == NULL || sp2 == sp1 + 1 ||
                memchr(sp2 + 1, ' ', (size_t)(le - sp2 - 1)) != NULL ||
                !((le - sp2 - 1 == 8) && (strncmp(sp2 + 1, "HTTP/1.1", 8) == 0 ||
                                          strncmp(sp2 + 1, "HTTP/1.0", 8) == 0)))
                return refuse_with(v, 400, "invalid_request_line",
                                   "the request line must be METHOD SP target SP HTTP/1.1");
            size_t mlen = (size_t)(sp1 - line);
            for (size_t i = 0; i < sizeof methods_with_body / sizeof *methods_with_body; i++)
                if (name_is(line, mlen, methods_with_body[i]))
                    may_have_body = 1;
            for (size_t i = 0; i < sizeof methods_without_body / sizeof *methods_without_body; i++)
                if (name_is(line, mlen, methods_without_body[i]))
                    may_have_body = 0;
            if (may_have_body < 0)
                return refuse_with(v, 501, "method_not_implemented",
                                   "the server does not know this method");
            for (size_t i = 0; i < mlen; i++)
                if (line[i] < 'A' || line[i] > 'Z')
                    return refuse_with(v, 501, "method_not_implemented",
                                       "the server does not know this method");
            if (sp1[1] != '/' || sp1[2] == '/')
                return refuse_with(v, 400, "invalid_request_line",
                                   "the request target must be a path (/v1/...)");
        } else {
            if (*line == ' ' || *line == '\t')
                return refuse_with(v, 400, "invalid_header", "folded header lines are not accepted");
            if (++nheaders > edge->max_headers)
                return refuse_with(v, 431, "too_many_headers",
                                   "the request has more header fields than the limit");
            const char *colon = memchr(line, ':', (size_t)(le - line));
            if (colon == NULL || colon == line)
                return refuse_with(v, 400, "invalid_header", "a header line has no name or no colon");
            for (const char *p = line; p < colon; p++)
                if (!is_tchar((unsigned char)*p))
                    return refuse_with(v, 400, "invalid_header",
                                       "a header name holds a character that is not allowed");
            size_t nlen = (size_t)(colon - line);
            const char *vs = colon + 1, *ve = le;
            trim(&vs, &ve);
            if (name_is(line, nlen, "Content-Length")) {
                if (have_cl++)
                    return refuse_with(v, 400, "duplicate_content_length",
                                       "the request has more than one Content-Length header");
                size_t vlen = (size_t)(ve - vs);
                if (vlen == 0 || vlen > 18 || strspn(vs, "0123456789") < vlen)
                    return refuse_with(v, 400, "invalid_content_length",
                                       "Content-Length must be a decimal number of bytes");
                v->body = 0;
                for (const char *p = vs; p < ve; p++)
                    v->body = v->body * 10 + (*p - '0');
            } else if (name_is(line, nlen, "Transfer-Encoding")) {
                if (have_te++)
                    return refuse_with(v, 400, "invalid_transfer_encoding",
                                       "the request has more than one Transfer-Encoding header");
                v->chunked = 1;
            } else if (name_is(line, nlen, "Expect")) {
                if (!name_is(vs, (size_t)(ve - vs), "100-continue"))
                    return refuse_with(v, 417, "expectation_failed",
                                       "the only expectation accepted is 100-continue");
            } else if (name_is(line, nlen, "X-Strand-Edge")) {
                return refuse_with(v, 400, "invalid_header", "X-Strand-Edge is reserved");
            }
        }
        line = nl + 1;
    }
    if (have_cl && have_te)
        return refuse_with(v, 400, "content_length_with_transfer_encoding",
                           "a request may not carry both Content-Length and Transfer-Encoding");
    if (have_te)
        return refuse_with(v, 411, "length_required",
                           "a request body needs a Content-Length (Transfer-Encoding is not accepted)");
    if (!may_have_body && (v->body > 0 || v->chunked))
        return refuse_with(v, 400, "body_not_allowed", "HEAD and TRACE requests carry no body");
    if (!may_have_body)
        v->body = 0;
    if (v->body > edge->max_body)
        return refuse_with(v, 413, "body_too_large", "the request body is too large");
    return 1;
}

/* The end of a head in `data` (the offset after its empty line), or 0. */
static size_t head_end(const char *data, size_t len)
{
    for (const char *p = data; (p = memchr(p, '\n', (size_t)(data + len - p))) != NULL; p++) {
        if (p + 1 < data + len && p[1] == '\n')
            return (size_t)(p + 2 - data);
        if (p + 2 < data + len && p[1] == '\r' && p[2] == '\n')
            return (size_t)(p + 3 - data);
    }
    return 0;
}

/* Moves everything after the first `keep` bytes of `buf` to the end of `to`. */
static void move_tail(struct evbuffer *buf, size_t keep, struct evbuffer *to)
{
    if (evbuffer_get_length(buf) <= keep)
        return;
    if (keep == 0) {
        evbuffer_add_buffer(to, buf);
        return;
    }
    struct evbuffer *front = evbuffer_new();
    if (front == NULL)
        return;
    evbuffer_remove_buffer(buf, front, keep);
    evbuffer_add_buffer(to, buf);
    evbuffer_add_buffer(buf, front);
    evbuffer_free(front);
}

/* Walks the bytes not yet checked. A head is held back from evhttp (in c->hold) until
 * it is complete and checked: evhttp parses line by line as bytes arrive. */
static void check_input(st_edge_t *edge, st_edge_conn_t *c, struct evbuffer *buf)
{
    for (;;) {
        size_t total = evbuffer_get_length(buf);
        if (c->state == EDGE_REFUSED) {   /* nothing after the marked request is read */
            truncate_to(buf, c->checked);
            return;
        }
        if (c->state == EDGE_BODY) {
            if (c->checked >= total)
                return;
            size_t take = total - c->checked;
            if ((uint64_t)take > c->body_left)
                take = (size_t)c->body_left;
            c->checked += take;
            c->body_left -= take;
            if (c->body_left == 0)
                c->state = EDGE_HEAD;
            continue;
        }
        if (c->hold == NULL && (c->hold = evbuffer_new()) == NULL)
            return;
        move_tail(buf, c->checked, c->hold);
        size_t avail = evbuffer_get_length(c->hold), want = avail;
        if (avail == 0)
            return;
        if (want > (size_t)edge->max_head_bytes + 3)
            want = (size_t)edge->max_head_bytes + 3;
        ev_ssize_t got = evbuffer_copyout(c->hold, edge->scratch, want);
        size_t len = got > 0 ? head_end(edge->scratch, (size_t)got) : 0;
        if (len == 0 || len > (size_t)edge->max_head_bytes) {
            if (len > 0 || avail > (size_t)edge->max_head_bytes) {
                refuse(edge, c, buf, 431, "headers_too_large",
                       "the request head is larger than the limit");
                return;
            }
            double now = now_seconds();
            if (c->head_started == 0)
                c->head_started = now;
            set_read_timeout(edge, c->bev,
                             c->head_started + edge->head_timeout_ms / 1000.0 - now);
            return;
        }
        verdict_t v;
        if (!check_head(edge, edge->scratch, len, &v)) {
            refuse(edge, c, buf, v.status, v.code, v.message);
            return;
        }
        evbuffer_add_buffer(buf, c->hold);   /* the head, and what came after it */
        c->checked += len;
        if (c->head_started != 0)
            set_read_timeout(edge, c->bev, edge->idle_timeout_s);
        c->head_started = 0;
        if (v.body > 0) {
            c->state = EDGE_BODY;
            c->body_left = (uint64_t)v.body;
        }
    }
}

static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct bufferevent *bev = arg;
    void *cbarg = NULL;
    bufferevent_getcb(bev, NULL, NULL, NULL, &cbarg);
    struct evhttp_connection *evcon = cbarg;
    st_edge_t *edge = evcon ? edge_of(evhttp_connection_get_server(evcon)) : NULL;
    int fd = (int)bufferevent_getfd(bev);
    if (edge == NULL || fd < 0)
        return;
    st_edge_conn_t *c = slot_for(edge, fd);
    if (c == NULL)
        return;
    if (c->bev != bev) {   /* the first bytes of a new connection on this socket */
        if (c->hold != NULL)
            evbuffer_free(c->hold);
        memset(c, 0, sizeof *c);
        c->bev = bev;
        evhttp_connection_set_closecb(evcon, on_close, edge);
    }
    if (c->in_callback)
        return;
    c->checked -= info->n_deleted < c->checked ? info->n_deleted : c->checked;
    c->in_callback = 1;
    check_input(edge, c, buf);
    c->in_callback = 0;
}

/* A new connection's bufferevent. With TLS its input buffer holds the decrypted bytes,
 * so the checks below see the same plain HTTP either way. */
static struct bufferevent *make_bufferevent(struct event_base *base, void *arg)
{
    st_edge_t *edge = arg;
    struct bufferevent *bev;
    if (edge->tls != NULL) {
        SSL *ssl = SSL_new(edge->tls);   /* holds its own reference to the context */
        bev = ssl ? bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                                   BEV_OPT_CLOSE_ON_FREE)
                  : NULL;
        if (bev == NULL && ssl != NULL)
            SSL_free(ssl);
        if (bev != NULL)
            bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    } else {
        bev = bufferevent_socket_new(base, -1, 0);
    }
    if (bev != NULL && evbuffer_add_cb(bufferevent_get_input(bev), on_input, bev) == NULL) {
        bufferevent_free(bev);
        return NULL;
    }
    return bev;
}

int st_edge_install(st_edge_t *edge)
{
    edge->scratch = malloc((size_t)edge->max_head_bytes + 3);
    if (edge->scratch == NULL)
        return -1;
    for (int i = 0; i < MAX_EDGES; i++) {
        if (edges[i] == NULL) {
            edges[i] = edge;
            evhttp_set_bevcb(edge->evhttp, make_bufferevent, edge);
            return 0;
        }
    }
    return -1;
}

int st_edge_set_head_limit(st_edge_t *edge, int max_head_bytes)
{
    char *grown = realloc(edge->scratch, (size_t)max_head_bytes + 3);
    if (grown == NULL)
        return -1;
    edge->scratch = grown;
    edge->max_head_bytes = max_head_bytes;
    return 0;
}

void st_edge_close(st_edge_t *edge)
{
    for (int i = 0; i < MAX_EDGES; i++)
        if (edges[i] == edge)
            edges[i] = NULL;
    for (int i = 0; i < edge->nconns; i++)
        if (edge->conns[i].hold != NULL)
            evbuffer_free(edge->conns[i].hold);
    free(edge->conns);
    free(edge->scratch);
    edge->conns = NULL;
    edge->scratch = NULL;
    edge->nconns = 0;
}

st_edge_conn_t *st_edge_conn_of(st_edge_t *edge, struct evhttp_request *ev)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(ev);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    int fd = bev ? (int)bufferevent_getfd(bev) : -1;
    if (fd < 0 || fd >= edge->nconns || edge->conns[fd].bev != bev)
        return NULL;
    return &edge->conns[fd];
}
