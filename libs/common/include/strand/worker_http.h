/*
 * worker_http.h - one outbound HTTP call to an application's worker: the executor's
 * calls (flow call steps, process waitUntil and execute) and the API's RPCs.
 *
 * Every call carries `Content-Type: application/json`, the `Idempotency-Key` (the same
 * on every retry of one logical call) and, when given, `Strand-Instance-Id`. Only http
 * and https URLs are followed; redirects are not; an answer over 1 MiB fails the call.
 * Never call this with a database transaction open (docs/architecture.md).
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
    char error[256];    /* why no answer arrived ("" when one did) */
} st_worker_reply_t;

/* Sends `body` (JSON text; NULL sends "{}") with `method` (NULL: POST) to `url`.
 * `instance_id` and `headers` (an object of header name: string value; lines with a
 * newline are skipped) may be NULL. Returns ST_OK when the worker answered, whatever
 * its status; otherwise ST_ERR_TIMEOUT or ST_ERR_RETRY with reply->error set. In both
 * cases release the reply with st_worker_reply_close(). */
st_err_t st_worker_call(const char *method, const char *url, const char *body,
                        const char *idempotency_key, const char *instance_id,
                        const json_t *headers, long timeout_ms, st_worker_reply_t *reply);

/* Frees the answer's body and zeroes the reply. */
void st_worker_reply_close(st_worker_reply_t *reply);

#endif
