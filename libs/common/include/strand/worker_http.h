/*
 * worker_http.h - one outbound HTTP call to an application's worker: the executor's
 * calls (flow call steps, process waitUntil and execute) and the API's RPCs.
 *
 * Every call carries `Content-Type: application/json`, the `Idempotency-Key` (the same
 * on every retry and redelivery of one logical call) and, when given,
 * `Strand-Instance-Id`, `Strand-Attempt` (1 for the first attempt) and
 * `Strand-Lease-Epoch` (the executor's claim of the call, 1 for the first; see
 * docs/definitions.md, calls: a worker may refuse an epoch lower than one it has
 * already seen for the same key and attempt). Only http and
 * https URLs are followed; redirects are not; an answer over 1 MiB fails the call.
 * Every address connected to is checked against STRAND_CALL_ALLOW (call_allow.h)
 * after resolution; proxies from the environment are not used.
 * Never call this with a database transaction open (docs/architecture.md).
 *
 * Two ways to call: st_worker_call() blocks for one call; st_worker_request_new()
 * prepares an easy handle for a caller that runs many at once on a libcurl multi
 * handle (the executor's dispatcher) and st_worker_request_finish() reads its answer.
 */
#ifndef STRAND_WORKER_HTTP_H
#define STRAND_WORKER_HTTP_H

#include <jansson.h>

#include "strand/err.h"

#define ST_WORKER_MAX_ANSWER_BYTES (1 << 20)

typedef struct {
    long status;        /* the HTTP status; 0 when no answer arrived */
    char *body;         /* the answer, NUL-terminated, or NULL if empty; owned */
    int timed_out;      /* no answer within the timeout */
    int refused;        /* the address is not allowed (call_allow.h); not retryable */
    char error[256];    /* why no answer arrived ("" when one did) */
} st_worker_reply_t;

/* Sends `body` (JSON text; NULL sends "{}") with `method` (NULL: POST) to `url`.
 * `instance_id` and `headers` (an object of header name: string value; lines with a
 * newline are skipped) may be NULL. Returns ST_OK when the worker answered, whatever
 * its status; otherwise ST_ERR_TIMEOUT or ST_ERR_RETRY with reply->error set, or
 * ST_ERR_FORBIDDEN with reply->refused when the allow-list refused the address (a
 * permanent failure: retrying cannot help). In both
 * cases release the reply with st_worker_reply_close(). */
st_err_t st_worker_call(const char *method, const char *url, const char *body,
                        const char *idempotency_key, const char *instance_id,
                        const json_t *headers, long timeout_ms, st_worker_reply_t *reply);

/* One prepared call for a libcurl multi handle. */
typedef struct st_worker_request st_worker_request_t;

/* Prepares the call st_worker_call() would make, with `attempt` (> 0) sent as
 * `Strand-Attempt` and `lease_epoch` (> 0; 0 sends no header) as `Strand-Lease-Epoch`,
 * without performing it. Returns ST_OK and *out, which the caller
 * frees with st_worker_request_free(); ST_ERR_INVALID (a URL that is not http(s)) or
 * ST_ERR_NOMEM with `reply->error` set otherwise (release that reply as usual). */
st_err_t st_worker_request_new(const char *method, const char *url, const char *body,
                               const char *idempotency_key, const char *instance_id,
                               int attempt, long long lease_epoch, const json_t *headers,
                               long timeout_ms, st_worker_request_t **out,
                               st_worker_reply_t *reply);

/* The request's easy handle, to add to a multi handle. Borrowed; valid until
 * st_worker_request_free() (remove it from the multi handle before that). */
void *st_worker_request_handle(st_worker_request_t *req);

/* Reads the outcome of a transfer that ended with libcurl code `curl_code` (a
 * CURLcode) into `reply`, taking the answer's body. Returns as st_worker_call(). */
st_err_t st_worker_request_finish(st_worker_request_t *req, int curl_code,
                                  st_worker_reply_t *reply);

/* Frees the request and its easy handle (NULL is ignored). */
void st_worker_request_free(st_worker_request_t *req);

/* Frees the answer's body and zeroes the reply. */
void st_worker_reply_close(st_worker_reply_t *reply);

#endif
