/*
 * ctl.c - strandctl's requests to the API and the printing of its answers and problems
 * (ctl.h). One libcurl easy handle per request: the client makes a handful of requests
 * per run, so nothing is pooled.
 */
#include "ctl.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/curl_body.h"

/* Performs one request; returns the HTTP status (or -1 if unreachable) and the raw
 * body in *raw (caller frees; NULL when empty). */
static long request_raw(const st_ctl_t *ctl, const char *method, const char *path,
                        const char *body, char **raw)
{
    CURL *curl = curl_easy_init();
    char url[2048];
    snprintf(url, sizeof url, "%s%s", ctl->api, path);
    st_curl_body_t buf = {0};
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    const char *token = getenv("STRAND_API_TOKEN");
    if (token != NULL) {
        char auth[1024];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append(headers, auth);
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, st_curl_body_collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    if (body != NULL)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    CURLcode rc = curl_easy_perform(curl);
    long status = -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    else
        fprintf(stderr, "strandctl: could not reach %s: %s\n", url, curl_easy_strerror(rc));
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    *raw = buf.data;
    return status;
}

long st_ctl_request(const st_ctl_t *ctl, const char *method, const char *path, const char *body,
                    json_t **out)
{
    char *raw = NULL;
    long status = request_raw(ctl, method, path, body, &raw);
    json_error_t jerr;
    *out = raw ? json_loads(raw, JSON_DECODE_ANY, &jerr) : NULL;
    free(raw);
    return status;
}

/* The exit status of an HTTP status (-1: unreachable). */
static int exit_status(long status)
{
    return status < 0 ? ST_CTL_UNREACHABLE
                      : (status >= 200 && status < 300) ? ST_CTL_OK : ST_CTL_REFUSED;
}

int st_ctl_run(const st_ctl_t *ctl, const char *method, const char *path, const char *body,
               st_ctl_human_fn human)
{
    json_t *answer = NULL;
    long status = st_ctl_request(ctl, method, path, body, &answer);
    int rc = exit_status(status);
    if (rc == ST_CTL_REFUSED && !ctl->json_output)
        st_ctl_print_problem(answer, status);
    else if (ctl->json_output && answer != NULL) {
        char *text = json_dumps(answer, JSON_INDENT(2) | JSON_ENCODE_ANY);
        puts(text);
        free(text);
    } else if (rc == ST_CTL_OK && answer != NULL)
        human(answer);
    json_decref(answer);
    return rc;
}

int st_ctl_post(const st_ctl_t *ctl, const char *path, json_t *body, st_ctl_human_fn human)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    int rc = st_ctl_run(ctl, "POST", path, text, human);
    free(text);
    return rc;
}

int st_ctl_run_raw(const st_ctl_t *ctl, const char *path)
{
    char *raw = NULL;
    long status = request_raw(ctl, "GET", path, NULL, &raw);
    int rc = exit_status(status);
    if (rc == ST_CTL_OK && raw != NULL) {
        fputs(raw, stdout);
    } else if (rc == ST_CTL_REFUSED) {
        json_error_t jerr;
        json_t *problem = raw ? json_loads(raw, 0, &jerr) : NULL;
        if (ctl->json_output && raw != NULL)
            puts(raw);
        else
            st_ctl_print_problem(problem, status);
        json_decref(problem);
    }
    free(raw);
    return rc;
}

void st_ctl_print_problem(const json_t *body, long status)
{
    const char *message = json_string_value(json_object_get(body, "message"));
    const char *code = json_string_value(json_object_get(body, "code"));
    const char *field = json_string_value(json_object_get(body, "field"));
    fprintf(stderr, "error %ld %s: %s%s%s\n", status, code ? code : "", message ? message : "",
            field && *field ? " at " : "", field && *field ? field : "");
    json_t *problems = json_object_get(body, "problems");
    size_t i;
    json_t *p;
    json_array_foreach(problems, i, p)
        fprintf(stderr, "  %s: %s\n", json_string_value(json_object_get(p, "pointer")),
                json_string_value(json_object_get(p, "message")));
}

void st_ctl_print_object(const json_t *obj)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        if (json_is_string(value)) {
            printf("%-14s %s\n", key, json_string_value(value));
        } else {
            char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
            printf("%-14s %s\n", key, text ? text : "?");
            free(text);
        }
    }
}

char *st_ctl_read_file(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return NULL;
    }
    st_curl_body_t buf = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        st_curl_body_collect(chunk, 1, n, &buf);
    if (f != stdin)
        fclose(f);
    return buf.data ? buf.data : strdup("");
}

void st_ctl_escape(const char *text, char *out, size_t len)
{
    CURL *curl = curl_easy_init();
    char *escaped = curl_easy_escape(curl, text, 0);
    snprintf(out, len, "%s", escaped ? escaped : "");
    curl_free(escaped);
    curl_easy_cleanup(curl);
}
