/*
 * http_int.h - private parts shared by http.c (the router) and http_edge.c (the
 * request-head checks that run on raw bytes before evhttp parses them).
 */
#ifndef STRAND_HTTP_INT_H
#define STRAND_HTTP_INT_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>

#include "strand/err.h"

/* Opaque here: the edge only compares it, and sets the flag http.c registered beside
 * it (deferred_gone), so the edge calls nothing of http.c. */
struct st_http_req;

/* What the edge decided about one connection (indexed by its socket). */
typedef struct st_edge_conn {
    struct bufferevent *bev;   /* identity of the connection; NULL = slot free */
    int state;                 /* EDGE_HEAD, EDGE_BODY, EDGE_REFUSED */
    size_t checked;            /* bytes at the front of the input already checked */
    uint64_t body_left;        /* EDGE_BODY: body bytes still to come */
    double head_started;       /* monotonic seconds when a partial head arrived; 0 none */
    int in_callback;           /* our own buffer edits must not re-enter */
    int refused_status;        /* EDGE_REFUSED: the problem to answer */
    const char *refused_code;  /* static strings */
    const char *refused_message;
    struct st_http_req *deferred;   /* a parked request (http.c's), or NULL */
    int *deferred_gone;        /* its flag, set to 1 when the connection closes */
    struct evbuffer *hold;     /* a partial head, kept from evhttp until complete; owned */
} st_edge_conn_t;

typedef struct st_edge {
    struct evhttp *evhttp;
    int max_body;
    int max_head_bytes;
    int max_headers;
    int head_timeout_ms;
    int idle_timeout_s;
    st_edge_conn_t *conns;     /* indexed by fd; grown on demand */
    int nconns;
    char *scratch;             /* max_head_bytes + 3: a head copied out to be checked */
    char secret[40];           /* marks the requests the edge writes for refused heads */
    SSL_CTX *tls;              /* NULL: plain HTTP; else new connections speak TLS with
                                * it (owned; swapped by a reload, on the loop thread) */
} st_edge_t;

/* Builds a server TLS context (TLS 1.2 or later) from a PEM certificate chain and its
 * PEM private key; checks that they match. Caller frees *out with SSL_CTX_free(). */
st_err_t st_tls_ctx_load(const char *cert_file, const char *key_file, SSL_CTX **out,
                         st_errbuf_t *eb);

/* Installs the edge on `edge->evhttp` (its bufferevent callback); the limits and the
 * secret must be set. Returns 0, or -1 if out of memory or too many servers. */
int st_edge_install(st_edge_t *edge);
/* Changes the head size limit; returns 0 or -1 (out of memory, limit unchanged). */
int st_edge_set_head_limit(st_edge_t *edge, int max_head_bytes);
/* Frees the connection table (after evhttp_free). */
void st_edge_close(st_edge_t *edge);
/* The edge state of the connection carrying `ev`, or NULL. Borrowed. */
st_edge_conn_t *st_edge_conn_of(st_edge_t *edge, struct evhttp_request *ev);

#endif
