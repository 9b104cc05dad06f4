/*
 * curl_body.h - collecting an HTTP response body with libcurl.
 *
 * Shared by the worker calls (worker_http.c), strandctl, strand-bench and the test
 * harness: set CURLOPT_WRITEFUNCTION to st_curl_body_collect and CURLOPT_WRITEDATA to
 * a zeroed st_curl_body_t. Its own library (strand_curl) so that the command-line
 * client does not link the services' dependencies.
 */
#ifndef STRAND_CURL_BODY_H
#define STRAND_CURL_BODY_H

#include <stddef.h>

typedef struct {
    char *data;     /* NUL-terminated, NULL while empty; the caller frees it */
    size_t len;
    size_t limit;   /* > 0: a body growing past it aborts the transfer */
} st_curl_body_t;

/* libcurl write callback appending to the st_curl_body_t in `body`. Returns 0 (which
 * fails the transfer) on no memory or past the limit. */
size_t st_curl_body_collect(char *ptr, size_t size, size_t nmemb, void *body);

#endif
