/* worker_http.c - outbound calls to workers over libcurl (see worker_http.h). */
#include "strand/worker_http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>

#include "strand/call_allow.h"
#include "strand/curl_body.h"

struct st_worker_request {
    CURL *curl;
    struct curl_slist *headers;
    char *body;                 /* the request body; libcurl reads it in place */
    st_curl_body_t answer;
    char host[256];             /* the URL's host, without brackets */
    int port;                   /* the URL's port, or the scheme's default */
    int refused;                /* the allow-list refused the address to connect to */
    char why[256];              /* why, when refused */
};

/* Reads the host and port out of `url`; returns 0 when it does not parse. */
static int url_host_port(const char *url, char *host, size_t host_len, int *port)
{
    CURLU *u = curl_url();
    char *h = NULL, *p = NULL;
    int ok = u != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_HOST, &h, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_PORT, &p, CURLU_DEFAULT_PORT) == CURLUE_OK;
    if (ok) {
        size_t len = strlen(h);
        if (len >= 2 && h[0] == '[' && h[len - 1] == ']')
            snprintf(host, host_len, "%.*s", (int)(len - 2), h + 1);
        else
            snprintf(host, host_len, "%s", h);
        char *pct = strchr(host, '%');   /* an IPv6 zone id */
        if (pct != NULL)
            *pct = '\0';
        *port = atoi(p);
    }
    curl_free(h);
    curl_free(p);
    curl_url_cleanup(u);
    return ok;
}

/* libcurl asks here for every socket it would connect, after resolving the name: the
 * allow-list judges the very address, so a name that resolves (or re-resolves) to an
 * internal address is refused. */
static curl_socket_t open_checked_socket(void *ctx, curlsocktype purpose,
                                         struct curl_sockaddr *addr)
{
    st_worker_request_t *req = ctx;
    if (purpose != CURLSOCKTYPE_IPCXN ||
        !st_call_allow_check(req->host, req->port, &addr->addr, req->why, sizeof req->why)) {
        if (purpose != CURLSOCKTYPE_IPCXN)
            snprintf(req->why, sizeof req->why, "call refused: unexpected socket type");
        req->refused = 1;
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype, addr->protocol);
}

static struct curl_slist *add_header(struct curl_slist *list, const char *name, const char *value)
{
    if (value == NULL || strchr(name, '\n') || strchr(name, '\r') || strchr(value, '\n') ||
        strchr(value, '\r'))
        return list;
    char line[1024];
    snprintf(line, sizeof line, "%s: %s", name, value);
    struct curl_slist *grown = curl_slist_append(list, line);
    return grown ? grown : list;
}

st_err_t st_worker_request_new(const char *method, const char *url, const char *body,
                               const char *idempotency_key, const char *instance_id,
                               int attempt, long long lease_epoch, const json_t *headers,
                               long timeout_ms, st_worker_request_t **out,
                               st_worker_reply_t *reply)
{
    memset(reply, 0, sizeof *reply);
    *out = NULL;
    if (url == NULL || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        snprintf(reply->error, sizeof reply->error, "the call has no http(s) url");
        return ST_ERR_INVALID;
    }
    st_worker_request_t *req = calloc(1, sizeof *req);
    if (req != NULL && !url_host_port(url, req->host, sizeof req->host, &req->port)) {
        free(req);
        snprintf(reply->error, sizeof reply->error, "the call's url does not parse");
        return ST_ERR_INVALID;
    }
    if (req != NULL) {
        req->curl = curl_easy_init();
        req->body = strdup(body ? body : "{}");
    }
    if (req == NULL || req->curl == NULL || req->body == NULL) {
        st_worker_request_free(req);
        snprintf(reply->error, sizeof reply->error, "could not create an HTTP client");
        return ST_ERR_NOMEM;
    }
    char attempt_text[16], epoch_text[24];
    snprintf(attempt_text, sizeof attempt_text, "%d", attempt);
    snprintf(epoch_text, sizeof epoch_text, "%lld", lease_epoch);
    struct curl_slist *list = add_header(NULL, "Content-Type", "application/json");
    list = add_header(list, "Idempotency-Key", idempotency_key);
    list = add_header(list, "Strand-Instance-Id", instance_id);
    list = add_header(list, "Strand-Attempt", attempt > 0 ? attempt_text : NULL);
    list = add_header(list, "Strand-Lease-Epoch", lease_epoch > 0 ? epoch_text : NULL);
    const char *name;
    json_t *value;
    json_object_foreach((json_t *)headers, name, value)
        list = add_header(list, name, json_string_value(value));
    req->headers = list;
    req->answer.limit = ST_WORKER_MAX_ANSWER_BYTES;
    CURL *curl = req->curl;
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method ? method : "POST");
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req->body);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, st_curl_body_collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &req->answer);
    /* Every connection is checked against STRAND_CALL_ALLOW; no proxy from the
     * environment (it would be the address checked, not the worker's), no redirects. */
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, open_checked_socket);
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, req);
    curl_easy_setopt(curl, CURLOPT_PROXY, "");
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    *out = req;
    return ST_OK;
}

void *st_worker_request_handle(st_worker_request_t *req)
{
    return req->curl;
}

st_err_t st_worker_request_finish(st_worker_request_t *req, int curl_code,
                                  st_worker_reply_t *reply)
{
    memset(reply, 0, sizeof *reply);
    CURLcode rc = (CURLcode)curl_code;
    if (rc == CURLE_OK) {
        curl_easy_getinfo(req->curl, CURLINFO_RESPONSE_CODE, &reply->status);
        reply->body = req->answer.data;
        req->answer.data = NULL;
        req->answer.len = 0;
        return ST_OK;
    }
    if (req->refused) {
        reply->refused = 1;
        snprintf(reply->error, sizeof reply->error, "%s", req->why);
        return ST_ERR_FORBIDDEN;
    }
    reply->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
    snprintf(reply->error, sizeof reply->error, "%s", curl_easy_strerror(rc));
    return reply->timed_out ? ST_ERR_TIMEOUT : ST_ERR_RETRY;
}

void st_worker_request_free(st_worker_request_t *req)
{
    if (req == NULL)
        return;
    if (req->curl != NULL)
        curl_easy_cleanup(req->curl);
    curl_slist_free_all(req->headers);
    free(req->answer.data);
    free(req->body);
    free(req);
}

st_err_t st_worker_call(const char *method, const char *url, const char *body,
                        const char *idempotency_key, const char *instance_id,
                        const json_t *headers, long timeout_ms, st_worker_reply_t *reply)
{
    st_worker_request_t *req;
    st_err_t err = st_worker_request_new(method, url, body, idempotency_key, instance_id, 0,
                                         0, headers, timeout_ms, &req, reply);
    if (err == ST_ERR_INVALID)
        return ST_ERR_RETRY;   /* as before: a bad URL is a failed call */
    if (err != ST_OK)
        return err == ST_ERR_NOMEM ? ST_ERR_RETRY : err;
    CURLcode rc = curl_easy_perform(req->curl);
    err = st_worker_request_finish(req, (int)rc, reply);
    st_worker_request_free(req);
    return err;
}

void st_worker_reply_close(st_worker_reply_t *reply)
{
    free(reply->body);
    memset(reply, 0, sizeof *reply);
}
