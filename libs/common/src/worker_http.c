/* worker_http.c - outbound calls to workers over libcurl (see worker_http.h). */
#include "strand/worker_http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/curl_body.h"

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

st_err_t st_worker_call(const char *method, const char *url, const char *body,
                        const char *idempotency_key, const char *instance_id,
                        const json_t *headers, long timeout_ms, st_worker_reply_t *reply)
{
    memset(reply, 0, sizeof *reply);
    CURL *curl = curl_easy_init();
    if (curl == NULL) {
        snprintf(reply->error, sizeof reply->error, "could not create an HTTP client");
        return ST_ERR_RETRY;
    }
    struct curl_slist *list = add_header(NULL, "Content-Type", "application/json");
    list = add_header(list, "Idempotency-Key", idempotency_key);
    list = add_header(list, "Strand-Instance-Id", instance_id);
    const char *name;
    json_t *value;
    json_object_foreach((json_t *)headers, name, value)
        list = add_header(list, name, json_string_value(value));
    st_curl_body_t answer = {.limit = ST_WORKER_MAX_ANSWER_BYTES};
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method ? method : "POST");
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body ? body : "{}");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, st_curl_body_collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
    CURLcode rc = curl_easy_perform(curl);
    st_err_t err = ST_OK;
    if (rc == CURLE_OK) {
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply->status);
        reply->body = answer.data;
    } else {
        free(answer.data);
        reply->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
        snprintf(reply->error, sizeof reply->error, "%s", curl_easy_strerror(rc));
        err = reply->timed_out ? ST_ERR_TIMEOUT : ST_ERR_RETRY;
    }
    curl_slist_free_all(list);
    curl_easy_cleanup(curl);
    return err;
}

void st_worker_reply_close(st_worker_reply_t *reply)
{
    free(reply->body);
    memset(reply, 0, sizeof *reply);
}
