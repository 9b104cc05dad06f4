/*
 * test_api_load.c - a bounded loopback load run against the real API (authentication
 * on) and executor: N concurrent clients, each on its own keep-alive connection, run
 * a mix of reads and writes for a fixed time. Every answer must be a 2xx; the run
 * prints N, requests/s and latency percentiles (recorded in docs/benchmarks.md).
 *
 * Mix per client: 40% GET one instance, 20% list instances by definition, 20% start
 * an instance (it opens a task and waits), 10% list open tasks by role, 10% send a
 * signal to an instance (buffered: it waits for its task).
 * STRAND_LOAD_CLIENTS (default 16) and STRAND_LOAD_SECONDS (default 10) size it.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"

#define TOKEN "h7-load-token-0123456789abcdef"
#define SEED_INSTANCES 32
#define MAX_SAMPLES 400000

static char def_name[64];
static char seed_ids[SEED_INSTANCES][40];
static int clients = 16;
static double seconds = 10;

typedef struct {
    int index;
    long requests, errors;
    double *lat_ms;    /* one per request, up to MAX_SAMPLES / clients */
    long nlat, cap;
    char first_error[200];
} client_t;

static size_t discard(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    return size * nmemb;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long one(CURL *curl, const char *method, const char *path, const char *body)
{
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", it_port(IT_API), path);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    if (body != NULL) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    } else {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    }
    long status = -1;
    if (curl_easy_perform(curl) == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

static void *client_main(void *arg)
{
    client_t *c = arg;
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Authorization: Bearer " TOKEN);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    unsigned int seed = (unsigned int)(c->index * 7919 + 1);
    double end = now_s() + seconds;
    char path[256], body[256];
    while (now_s() < end) {
        int pick = (int)(rand_r(&seed) % 10);
        const char *id = seed_ids[rand_r(&seed) % SEED_INSTANCES];
        const char *method = "GET", *b = NULL;
        if (pick < 4) {
            snprintf(path, sizeof path, "/v1/instances/%s", id);
        } else if (pick < 6) {
            snprintf(path, sizeof path, "/v1/instances?definition=%s&limit=20", def_name);
        } else if (pick < 8) {
            method = "POST";
            snprintf(path, sizeof path, "/v1/instances");
            snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{\"client\":%d}}", def_name,
                     c->index);
            b = body;
        } else if (pick < 9) {
            snprintf(path, sizeof path, "/v1/tasks?role=loader&status=open&limit=20");
        } else {
            method = "POST";
            snprintf(path, sizeof path, "/v1/instances/%s/signals", id);
            snprintf(body, sizeof body, "{\"name\":\"nudge\",\"payload\":{\"c\":%d}}", c->index);
            b = body;
        }
        double t0 = now_s();
        long status = one(curl, method, path, b);
        double ms = (now_s() - t0) * 1000.0;
        c->requests++;
        if (status < 200 || status >= 300) {
            if (c->errors++ == 0)
                snprintf(c->first_error, sizeof c->first_error, "%s %.150s -> %ld", method, path, status);
        }
        if (c->nlat < c->cap)
            c->lat_ms[c->nlat++] = ms;
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void test_setup(void)
{
    const char *n = getenv("STRAND_LOAD_CLIENTS");
    const char *s = getenv("STRAND_LOAD_SECONDS");
    if (n && atoi(n) > 0 && atoi(n) <= 256)
        clients = atoi(n);
    if (s && atof(s) > 0 && atof(s) <= 120)
        seconds = atof(s);
    char path[256];
    snprintf(path, sizeof path, "/tmp/strand-test-api-load-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"roles\": {\"loader\": [\"definitions:write\", \"instances:read\", \"instances:start\","
               " \"instances:signal\", \"tasks:read\", \"tasks:act\"]},"
               " \"tokens\": [{\"token\": \"%s\", \"principal\": \"loader\", \"roles\": [\"loader\"]}]}",
            TOKEN);
    fclose(f);
    it_start_api_executor(path);

    snprintf(def_name, sizeof def_name, "api_load_%d", (int)getpid());
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Authorization: Bearer " TOKEN);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    char doc[600];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"work\",\"type\":\"task\",\"name\":\"Work\",\"roles\":[\"loader\"]},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{}}]}", def_name);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
    CU_ASSERT_EQUAL_FATAL(one(curl, "POST", "/v1/definitions", doc), 201);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    /* Seed instances (with the token, through the harness's own client below). */
    for (int i = 0; i < SEED_INSTANCES; i++) {
        char url[512], body[200];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/instances", it_port(IT_API));
        snprintf(body, sizeof body, "{\"definition\":\"%s\",\"business_ref\":\"seed-%d\"}", def_name, i);
        CURL *c = curl_easy_init();
        struct curl_slist *h = curl_slist_append(NULL, "Authorization: Bearer " TOKEN);
        char *answer = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&answer, &len);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, mem);
        CU_ASSERT_EQUAL(curl_easy_perform(c), CURLE_OK);
        fclose(mem);
        json_error_t jerr;
        json_t *doc_answer = json_loads(answer ? answer : "", 0, &jerr);
        const char *id = json_string_value(json_object_get(doc_answer, "id"));
        CU_ASSERT_PTR_NOT_NULL_FATAL(id);
        snprintf(seed_ids[i], sizeof seed_ids[i], "%s", id);
        json_decref(doc_answer);
        free(answer);
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
    }
}

static void test_load(void)
{
    pthread_t threads[256];
    client_t *cs = calloc((size_t)clients, sizeof *cs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cs);
    double started = now_s();
    for (int i = 0; i < clients; i++) {
        cs[i].index = i;
        cs[i].cap = MAX_SAMPLES / clients;
        cs[i].lat_ms = malloc(sizeof(double) * (size_t)cs[i].cap);
        CU_ASSERT_FATAL(pthread_create(&threads[i], NULL, client_main, &cs[i]) == 0);
    }
    long requests = 0, errors = 0, nlat = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(threads[i], NULL);
        requests += cs[i].requests;
        errors += cs[i].errors;
        nlat += cs[i].nlat;
        if (cs[i].errors)
            fprintf(stderr, "\nclient %d: %ld errors, first: %s\n", i, cs[i].errors, cs[i].first_error);
    }
    double elapsed = now_s() - started;
    double *all = malloc(sizeof(double) * (size_t)(nlat ? nlat : 1));
    long k = 0;
    for (int i = 0; i < clients; i++) {
        memcpy(all + k, cs[i].lat_ms, sizeof(double) * (size_t)cs[i].nlat);
        k += cs[i].nlat;
        free(cs[i].lat_ms);
    }
    qsort(all, (size_t)nlat, sizeof(double), cmp_double);
    double p50 = nlat ? all[(long)(0.50 * (double)(nlat - 1))] : 0;
    double p99 = nlat ? all[(long)(0.99 * (double)(nlat - 1))] : 0;
    double max = nlat ? all[nlat - 1] : 0;
    printf("\napi load: N=%d clients, %.1f s, %ld requests, %.0f req/s, p50 %.2f ms, p99 %.2f ms,"
           " max %.2f ms, errors %ld\n", clients, elapsed, requests, (double)requests / elapsed, p50,
           p99, max, errors);
    fflush(stdout);
    free(all);
    free(cs);
    CU_ASSERT_TRUE(requests > clients);
    CU_ASSERT_EQUAL(errors, 0);
    /* The starts of the run all landed: each is an instance of this definition. */
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'", def_name);
    CU_ASSERT_TRUE(it_sql_number(sql) > SEED_INSTANCES);
}

int main(void)
{
    if (!it_init("test_api_load"))
        return 1;
    static const it_case_t cases[] = {
        {"API and executor start; seed instances", test_setup},
        {"N concurrent clients, no errors", test_load},
    };
    return it_run_suite("api_load", cases, (int)(sizeof cases / sizeof cases[0]));
}
