/*
 * err.h - the one error convention of Strand.
 *
 * Every fallible function returns st_err_t: 0 (ST_OK) on success, a code from the
 * table below otherwise. Codes are grouped: retryable ones (a later attempt may
 * succeed: serialization failure, lost connection, full queue) are kept apart from
 * permanent ones (bad input, not found, conflict). Library errors (libpq, librdkafka,
 * hiredis, jansson) are translated into these codes only in their adapter modules.
 *
 * Detail text travels beside the code in an st_errbuf_t the caller owns.
 */
#ifndef STRAND_ERR_H
#define STRAND_ERR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* X(name, value, retryable, message) */
#define ST_ERR_TABLE(X)                                                            \
    X(ST_OK,              0, false, "success")                                    \
    X(ST_ERR_INVALID,     1, false, "invalid input")                              \
    X(ST_ERR_NOT_FOUND,   2, false, "not found")                                  \
    X(ST_ERR_CONFLICT,    3, false, "conflict with the current state")            \
    X(ST_ERR_DUPLICATE,   4, false, "duplicate request")                          \
    X(ST_ERR_STALE,       5, false, "stale or out-of-order signal")               \
    X(ST_ERR_LIMIT,       6, false, "limit exceeded")                             \
    X(ST_ERR_UNAUTHORIZED,7, false, "not authenticated")                          \
    X(ST_ERR_FORBIDDEN,   8, false, "not allowed")                                \
    X(ST_ERR_NOMEM,       9, false, "out of memory")                              \
    X(ST_ERR_INTERNAL,   10, false, "internal error")                             \
    X(ST_ERR_CONFIG,     11, false, "invalid configuration")                      \
    X(ST_ERR_RETRY,      20, true,  "transient failure, retry")                   \
    X(ST_ERR_DB,         21, true,  "database unavailable")                       \
    X(ST_ERR_SERIALIZATION,22,true, "serialization failure")                      \
    X(ST_ERR_KAFKA,      23, true,  "kafka unavailable")                          \
    X(ST_ERR_TIMEOUT,    24, true,  "timed out")

typedef enum {
#define ST_ERR_ENUM(name, value, retryable, message) name = value,
    ST_ERR_TABLE(ST_ERR_ENUM)
#undef ST_ERR_ENUM
} st_err_t;

/* Stable upper-case name of a code ("ST_ERR_NOT_FOUND"); static storage. */
const char *st_err_name(st_err_t err);
/* Short human message of a code; static storage. */
const char *st_err_message(st_err_t err);
/* True when a later attempt of the same operation may succeed. */
bool st_err_retryable(st_err_t err);

/* Detail text for the last error, owned by the caller (usually on the stack). */
typedef struct {
    char msg[512];
} st_errbuf_t;

/* Formats detail into `eb` (if not NULL) and returns `err`, so that callers write
 * `return st_err_set(eb, ST_ERR_INVALID, "bad field %s", name);`. */
st_err_t st_err_set(st_errbuf_t *eb, st_err_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
