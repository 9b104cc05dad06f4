/* curl_body.c - collecting an HTTP response body with libcurl (see curl_body.h). */
#include "strand/curl_body.h"

#include <stdlib.h>
#include <string.h>

size_t st_curl_body_collect(char *ptr, size_t size, size_t nmemb, void *body)
{
    st_curl_body_t *b = body;
    size_t n = size * nmemb;
    if (b->limit > 0 && b->len + n > b->limit)
        return 0;
    char *grown = realloc(b->data, b->len + n + 1);
    if (grown == NULL)
        return 0;
    b->data = grown;
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}
