/*
 * strand_bench.c - whole-stack workloads against a running Strand (the four services
 * on the database STRAND_PG_DSN names, the API at STRAND_API_URL or --api).
 *
 *   strand-bench --workload w1|w2|w3|w4|fill [--n N] [--concurrency C] [--timeout S]
 *                [--window-ms MS] [--api URL[,URL...]] [--label TEXT] [--storage] [--json]
 *
 *   w1    N instances of a 3-step flow with no waits (set, set, complete), started over
 *         HTTP by C client threads. Latency: client send of POST /v1/instances ->
 *         instances.ended_at (the commit that completed it). Throughput: completed /
 *         (last ended_at - first send).
 *   w2    N instances that wait for a signal; once all wait, C threads send the signals
 *         (POST /v1/instances/{id}/signals). Latency: client send of the signal ->
 *         ended_at (the resumed run completes in the same transaction).
 *   w3    N durable timers due evenly over --window-ms starting 2 s + N/2 ms from now, written
 *         as the executor writes them (st_timer_schedule_tx); lateness = fired_at -
 *         due_at (the scheduler's firing transaction). Needs only strand-scheduler.
 *   w4    human task round trip, C sequential clients: start an instance with a task
 *         (start and wait: POST /v1/instances?wait_ms=, answered once it waits for the
 *         task), list GET /v1/tasks?instance_id= (polled every 2 ms until the task is
 *         listed), complete it over the API; latency: send of the start -> ended_at.
 *   fill  adds N waiting instances by copying the rows of one real waiting instance
 *         (instances, runtime_states, history) in SQL: in-flight load for cost curves.
 *
 * W1 and W2 are closed loop: each client thread waits for its instance to end before its
 * next request, as the peers' request/response calls do (W1: the start itself waits,
 * POST /v1/instances?wait_ms=, then GET's long poll if it has not ended; W2: long poll
 * of GET /v1/instances/{id}); --open sends as fast as the API accepts (the executor's backlog then adds
 * to the latency). --api takes several API replicas, comma-separated: client thread i talks to the
 * (i mod count)-th. Every run is bounded by --timeout (default 300 s): unfinished instances are counted,
 * not waited for. Clocks: client times are CLOCK_REALTIME on the same machine as
 * PostgreSQL, whose now() the ended_at/fired_at stamps come from. --storage prints
 * the PostgreSQL rows and bytes added per instance (w1, w2, w4). Exit status 0 only if
 * every instance (timer) completed within the bound.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strand/curl_body.h"
#include "strand/pg.h"
#include "strand/timer.h"
#include "strand/util.h"

typedef struct {
    const char *workload;
    int n;
    int concurrency;
    int timeout_s;
    int window_ms;
    const char *api;
    const char *label;
    int storage;
    int json;
} opts_t;

static opts_t g_opt = {"w1", 1000, 16, 300, 20000, NULL, "", 0, 0};
/* --api may list several API replicas (comma-separated); client thread i uses
 * g_apis[i % g_napis], the main thread the first. */
static char *g_apis[16];
static int g_napis;
static __thread const char *t_api;
static const char *g_dsn;
static char g_tag[64]; /* business_ref of this run's instances */

/* ---- HTTP ---------------------------------------------------------------------- */

/* One request on a caller-owned easy handle (keep-alive per thread). Returns the
 * HTTP status (-1 unreachable) and the parsed body in *out (caller decrefs). */
static long http(CURL *c, const char *method, const char *path, const char *body, json_t **out)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", t_api != NULL ? t_api : g_apis[0], path);
    st_curl_body_t b = {0};
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, st_curl_body_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (body != NULL)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    long status = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    if (out != NULL)
        *out = b.data != NULL ? json_loads(b.data, 0, NULL) : NULL;
    free(b.data);
    return status;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* ---- results ------------------------------------------------------------------- */

typedef struct {
    char id[40];
    double t_send;  /* client time of the request the latency starts at */
    double t_end;   /* ended_at / fired_at in ms since the epoch, 0 if not ended */
} item_t;

static item_t *g_items;
static int g_next; /* next item index handed to a thread */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static double g_deadline_ms;

static int take_index(void)
{
    pthread_mutex_lock(&g_mu);
    int i = g_next < g_opt.n && now_ms() < g_deadline_ms ? g_next++ : -1;
    pthread_mutex_unlock(&g_mu);
    return i;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double p)
{
    if (n == 0)
        return 0;
    int k = (int)(p * (n - 1) + 0.5);
    return v[k];
}

static void report(const char *what, const char *unit_rate, int n, int done, double *lat,
                   double rate, const char *extra_json)
{
    qsort(lat, (size_t)done, sizeof *lat, cmp_double);
    double p50 = pct(lat, done, 0.50), p95 = pct(lat, done, 0.95), p99 = pct(lat, done, 0.99);
    double mx = done > 0 ? lat[done - 1] : 0;
    if (g_opt.json) {
        printf("{\"engine\":\"strand\",\"workload\":\"%s\",\"label\":\"%s\",\"n\":%d,"
               "\"completed\":%d,\"concurrency\":%d,\"rate\":%.1f,\"rate_unit\":\"%s\","
               "\"p50_ms\":%.2f,\"p95_ms\":%.2f,\"p99_ms\":%.2f,\"max_ms\":%.2f%s%s}\n",
               g_opt.workload, g_opt.label, n, done, g_opt.concurrency, rate, unit_rate, p50,
               p95, p99, mx, extra_json != NULL ? "," : "", extra_json != NULL ? extra_json : "");
    } else {
        printf("%-4s %-40s n=%d completed=%d concurrency=%d\n", g_opt.workload, what, n, done,
               g_opt.concurrency);
        printf("     %-10s %10s %9s %9s %9s %9s\n", unit_rate, "rate", "p50 ms", "p95 ms",
               "p99 ms", "max ms");
        printf("     %-10s %10.1f %9.2f %9.2f %9.2f %9.2f\n", "", rate, p50, p95, p99, mx);
    }
    fflush(stdout);
}

/* ---- database ------------------------------------------------------------------ */

static PGconn *g_pg;

static long long sql_number(const char *sql, int np, const char *const *params)
{
    PGresult *res = NULL;
    st_errbuf_t eb;
    long long v = -1;
    if (st_pg_exec(g_pg, sql, np, params, &res, &eb) == ST_OK && PQntuples(res) == 1)
        v = atoll(PQgetvalue(res, 0, 0));
    else
        fprintf(stderr, "strand-bench: %s\n", eb.msg);
    PQclear(res);
    return v;
}

/* Waits until `want` of this run's instances have ended (or the deadline). */
static long long wait_ended(long long want)
{
    const char *p[] = {g_tag};
    long long got = 0;
    for (;;) {
        got = sql_number("SELECT count(*) FROM strand.instances WHERE business_ref = $1"
                         " AND ended_at IS NOT NULL", 1, p);
        if (got >= want || now_ms() > g_deadline_ms)
            return got;
        usleep(100 * 1000);
    }
}

static long long wait_status(const char *status, long long want)
{
    const char *p[] = {g_tag, status};
    long long got = 0;
    for (;;) {
        got = sql_number("SELECT count(*) FROM strand.instances WHERE business_ref = $1"
                         " AND status = $2", 2, p);
        if (got >= want || now_ms() > g_deadline_ms)
            return got;
        usleep(100 * 1000);
    }
}

static int cmp_item(const void *a, const void *b)
{
    return strcmp(((const item_t *)a)->id, ((const item_t *)b)->id);
}

/* Fills t_end of every item from instances.ended_at (completed ones only). Returns
 * how many completed. */
static int load_ended(int n)
{
    qsort(g_items, (size_t)n, sizeof *g_items, cmp_item);
    const char *p[] = {g_tag};
    PGresult *res = NULL;
    st_errbuf_t eb;
    if (st_pg_exec(g_pg, "SELECT id::text, extract(epoch FROM ended_at) * 1000 FROM"
                         " strand.instances WHERE business_ref = $1 AND status = 'completed'",
                   1, p, &res, &eb) != ST_OK) {
        fprintf(stderr, "strand-bench: %s\n", eb.msg);
        return 0;
    }
    int done = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        item_t key;
        snprintf(key.id, sizeof key.id, "%s", PQgetvalue(res, r, 0));
        item_t *it = bsearch(&key, g_items, (size_t)n, sizeof *g_items, cmp_item);
        if (it != NULL && it->t_send > 0) {
            it->t_end = atof(PQgetvalue(res, r, 1));
            done++;
        }
    }
    PQclear(res);
    return done;
}

/* Latencies (t_end - t_send) of the ended items into a new array; rate over the span
 * from the first send to the last end. */
static double *latencies(int n, int *done, double *rate)
{
    double *lat = calloc((size_t)n + 1, sizeof *lat);
    double first = 0, last = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (g_items[i].t_send > 0 && (first == 0 || g_items[i].t_send < first))
            first = g_items[i].t_send;
        if (g_items[i].t_end > 0) {
            lat[k++] = g_items[i].t_end - g_items[i].t_send;
            if (g_items[i].t_end > last)
                last = g_items[i].t_end;
        }
    }
    *done = k;
    *rate = k > 0 && last > first ? k / ((last - first) / 1000.0) : 0;
    return lat;
}

/* ---- storage per instance ------------------------------------------------------ */

static const char *k_tables[] = {"instances", "runtime_states", "history", "tasks",
                                 "task_events", "outbox", "processed_signals", "requests",
                                 "timers", "signal_buffer"};
enum { NTABLES = sizeof k_tables / sizeof k_tables[0] };

typedef struct {
    long long rows[NTABLES];
    long long bytes[NTABLES];
} storage_t;

static void storage_read(storage_t *s)
{
    for (int i = 0; i < NTABLES; i++) {
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.%s", k_tables[i]);
        s->rows[i] = sql_number(sql, 0, NULL);
        snprintf(sql, sizeof sql, "SELECT pg_total_relation_size('strand.%s')", k_tables[i]);
        s->bytes[i] = sql_number(sql, 0, NULL);
    }
}

static void storage_report(const storage_t *a, const storage_t *b, int n)
{
    if (n <= 0)
        return;
    long long trows = 0, tbytes = 0;
    if (g_opt.json) {
        printf("{\"engine\":\"strand\",\"storage\":\"%s\",\"label\":\"%s\",\"instances\":%d,"
               "\"tables\":{", g_opt.workload, g_opt.label, n);
        for (int i = 0; i < NTABLES; i++)
            printf("%s\"%s\":{\"rows_per_instance\":%.2f,\"bytes_per_instance\":%.0f}",
                   i ? "," : "", k_tables[i], (double)(b->rows[i] - a->rows[i]) / n,
                   (double)(b->bytes[i] - a->bytes[i]) / n);
        printf("}}\n");
        return;
    }
    printf("     PostgreSQL growth per instance (%d instances; outbox rows are purged after"
           " STRAND_OUTBOX_RETENTION_S)\n", n);
    printf("     %-18s %10s %12s\n", "table", "rows", "bytes");
    for (int i = 0; i < NTABLES; i++) {
        long long dr = b->rows[i] - a->rows[i], db = b->bytes[i] - a->bytes[i];
        trows += dr;
        tbytes += db;
        printf("     %-18s %10.2f %12.0f\n", k_tables[i], (double)dr / n, (double)db / n);
    }
    printf("     %-18s %10.2f %12.0f\n", "total", (double)trows / n, (double)tbytes / n);
}

/* ---- definitions --------------------------------------------------------------- */

static const char *k_def_w1 =
    "{\"kind\":\"flow\",\"name\":\"bench_w1\",\"version\":1,\"steps\":["
    "{\"id\":\"a\",\"type\":\"set\",\"values\":{\"x\":\"input.i + 1\"}},"
    "{\"id\":\"b\",\"type\":\"set\",\"values\":{\"y\":\"state.x * 2\"}},"
    "{\"id\":\"c\",\"type\":\"complete\",\"output\":{\"y\":\"state.y\"}}]}";
static const char *k_def_w2 =
    "{\"kind\":\"flow\",\"name\":\"bench_w2\",\"version\":1,\"steps\":["
    "{\"id\":\"w\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"sig\"},"
    "{\"id\":\"c\",\"type\":\"complete\",\"output\":{\"got\":\"state.sig\"}}]}";
static const char *k_def_w4 =
    "{\"kind\":\"flow\",\"name\":\"bench_w4\",\"version\":1,\"steps\":["
    "{\"id\":\"t\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"bench\"],"
    "\"result\":\"approval\"},"
    "{\"id\":\"c\",\"type\":\"complete\",\"output\":{\"ok\":\"state.approval.ok\"}}]}";

static int import_def(const char *doc)
{
    CURL *c = curl_easy_init();
    long st = http(c, "POST", "/v1/definitions", doc, NULL);
    curl_easy_cleanup(c);
    if (st != 200 && st != 201) {
        fprintf(stderr, "strand-bench: importing a definition answered %ld (is the API at %s?)\n",
                st, g_apis[0]);
        return 0;
    }
    return 1;
}

/* ---- workers ------------------------------------------------------------------- */

/* True for a status after which an instance does not run again. */
static int status_ended(const char *status)
{
    return status != NULL && strcmp(status, "pending") != 0 && strcmp(status, "waiting") != 0 &&
           strcmp(status, "running") != 0;
}

/* Starts instance `i` of `def`. With `wait`, the start waits for the first wake-up
 * (POST /v1/instances?wait_ms=); *ended and *version (each may be NULL) tell what the
 * answer showed. */
static int start_instance(CURL *c, const char *def, int i, int wait, char id[40], int *ended,
                          long long *version)
{
    char body[256];
    snprintf(body, sizeof body, "{\"definition\":\"%s\",\"input\":{\"i\":%d},\"business_ref\":\"%s\"}",
             def, i, g_tag);
    json_t *out = NULL;
    long st = http(c, "POST", wait ? "/v1/instances?wait_ms=5000" : "/v1/instances", body, &out);
    const char *v = json_string_value(json_object_get(out, "id"));
    int ok = st == 201 && v != NULL;
    if (ok)
        snprintf(id, 40, "%s", v);
    else
        fprintf(stderr, "strand-bench: start answered %ld\n", st);
    if (ended != NULL)
        *ended = status_ended(json_string_value(json_object_get(out, "status")));
    if (version != NULL)
        *version = json_integer_value(json_object_get(out, "state_version"));
    json_decref(out);
    return ok;
}

static const char *g_start_def;
static int g_open; /* --open: do not wait for completion before the next request */

/* Closed loop: long-polls GET /v1/instances/{id} from state_version `after` until the
 * instance has ended (or the deadline), so that a client has one instance in flight at
 * a time, as the peers' request/response calls do. */
static void wait_done(CURL *c, const char *id, long long after)
{
    while (now_ms() < g_deadline_ms) {
        char path[192];
        snprintf(path, sizeof path, "/v1/instances/%s?wait_ms=5000&after_version=%lld", id, after);
        json_t *out = NULL;
        long st = http(c, "GET", path, NULL, &out);
        int ended = status_ended(json_string_value(json_object_get(out, "status")));
        after = json_integer_value(json_object_get(out, "state_version"));
        json_decref(out);
        if (st != 200 || ended)
            return;
    }
}

static void *starter(void *arg)
{
    t_api = arg;
    CURL *c = curl_easy_init();
    int i;
    while ((i = take_index()) >= 0) {
        double t = now_ms();
        int closed = !g_open && strcmp(g_start_def, "bench_w1") == 0, ended;
        long long version;
        if (start_instance(c, g_start_def, i, closed, g_items[i].id, &ended, &version)) {
            g_items[i].t_send = t;
            if (closed && !ended)
                wait_done(c, g_items[i].id, version);
        }
    }
    curl_easy_cleanup(c);
    return NULL;
}

static void *signaller(void *arg)
{
    t_api = arg;
    CURL *c = curl_easy_init();
    int i;
    while ((i = take_index()) >= 0) {
        if (g_items[i].id[0] == '\0')
            continue;
        char path[128];
        snprintf(path, sizeof path, "/v1/instances/%s/signals", g_items[i].id);
        double t = now_ms();
        long st = http(c, "POST", path, "{\"name\":\"go\",\"payload\":{\"v\":1}}", NULL);
        if (st == 202) {
            g_items[i].t_send = t;
            if (!g_open)
                wait_done(c, g_items[i].id, 0);
        } else
            fprintf(stderr, "strand-bench: signal answered %ld\n", st);
    }
    curl_easy_cleanup(c);
    return NULL;
}

static double *g_task_visible; /* w4: start -> task listed, ms */

static void *human(void *arg)
{
    t_api = arg;
    CURL *c = curl_easy_init();
    int i;
    while ((i = take_index()) >= 0) {
        char id[40];
        double t0 = now_ms();
        /* Start and wait (docs/api.md): the answer comes once the instance waits for its
         * task, whose row was committed with that wait; the listing below then finds it
         * at once, and polls only if the wait gave up. */
        if (!start_instance(c, "bench_w4", i, 1, id, NULL, NULL))
            continue;
        snprintf(g_items[i].id, sizeof g_items[i].id, "%s", id);
        char path[160], task[40] = "";
        snprintf(path, sizeof path, "/v1/tasks?instance_id=%s&status=open", id);
        while (task[0] == '\0' && now_ms() < g_deadline_ms) {
            json_t *out = NULL;
            if (http(c, "GET", path, NULL, &out) == 200) {
                json_t *first = json_array_get(json_object_get(out, "items"), 0);
                const char *tid = json_string_value(json_object_get(first, "id"));
                if (tid != NULL)
                    snprintf(task, sizeof task, "%s", tid);
            }
            json_decref(out);
            if (task[0] == '\0')
                usleep(2000);
        }
        if (task[0] == '\0')
            continue;
        g_task_visible[i] = now_ms() - t0;
        snprintf(path, sizeof path, "/v1/tasks/%s/complete", task);
        long st = http(c, "POST", path, "{\"result\":{\"ok\":true}}", NULL);
        if (st != 200 && st != 202) {
            fprintf(stderr, "strand-bench: task complete answered %ld\n", st);
            continue;
        }
        g_items[i].t_send = t0;
    }
    curl_easy_cleanup(c);
    return NULL;
}

static void run_threads(void *(*fn)(void *))
{
    pthread_t *th = calloc((size_t)g_opt.concurrency, sizeof *th);
    g_next = 0;
    for (int i = 0; i < g_opt.concurrency; i++)
        pthread_create(&th[i], NULL, fn, g_apis[i % g_napis]);
    for (int i = 0; i < g_opt.concurrency; i++)
        pthread_join(th[i], NULL);
    free(th);
}

static int count_sent(void)
{
    int k = 0;
    for (int i = 0; i < g_opt.n; i++)
        k += g_items[i].t_send > 0;
    return k;
}

/* ---- workloads ----------------------------------------------------------------- */

static int w1(void)
{
    if (!import_def(k_def_w1))
        return 1;
    storage_t s0, s1;
    if (g_opt.storage)
        storage_read(&s0);
    g_start_def = "bench_w1";
    run_threads(starter);
    int sent = count_sent();
    wait_ended(sent);
    int done = 0;
    load_ended(g_opt.n);
    double rate;
    double *lat = latencies(g_opt.n, &done, &rate);
    report("3-step flow, start -> completed", "inst/s", g_opt.n, done, lat, rate, NULL);
    free(lat);
    if (g_opt.storage) {
        storage_read(&s1);
        storage_report(&s0, &s1, sent);
    }
    return done == g_opt.n ? 0 : 1;
}

static int w2(void)
{
    if (!import_def(k_def_w2))
        return 1;
    storage_t s0, s1;
    if (g_opt.storage)
        storage_read(&s0);
    g_start_def = "bench_w2";
    run_threads(starter);
    int started = count_sent();
    long long waiting = wait_status("waiting", started);
    if (waiting < started)
        fprintf(stderr, "strand-bench: only %lld of %d instances reached waiting\n", waiting,
                started);
    for (int i = 0; i < g_opt.n; i++)
        g_items[i].t_send = 0;
    run_threads(signaller);
    wait_ended(count_sent());
    load_ended(g_opt.n);
    int done = 0;
    double rate;
    double *lat = latencies(g_opt.n, &done, &rate);
    report("signal -> resumed and completed", "resumes/s", g_opt.n, done, lat, rate, NULL);
    free(lat);
    if (g_opt.storage) {
        storage_read(&s1);
        storage_report(&s0, &s1, started);
    }
    return done == g_opt.n ? 0 : 1;
}

static int w3(void)
{
    int n = g_opt.n, window_ms = g_opt.window_ms;
    st_errbuf_t eb;
    /* a lead long enough to write every timer before the first is due */
    long long base = st_now_ms() + 2000 + n / 2;
    const int batch = 500;
    for (int i = 0; i < n; i += batch) {
        if (st_pg_begin(g_pg, &eb) != ST_OK) {
            fprintf(stderr, "strand-bench: %s\n", eb.msg);
            return 1;
        }
        for (int j = i; j < i + batch && j < n; j++) {
            char id[40], token[96];
            st_uuid_new(id);
            snprintf(token, sizeof token, "%s-%d", g_tag, j);
            long long due = base + (long long)j * window_ms / n;
            if (st_timer_schedule_tx(g_pg, id, token, "timer", due, NULL, &eb) != ST_OK) {
                fprintf(stderr, "strand-bench: schedule failed: %s\n", eb.msg);
                st_pg_rollback(g_pg);
                return 1;
            }
        }
        if (st_pg_commit(g_pg, &eb) != ST_OK) {
            fprintf(stderr, "strand-bench: %s\n", eb.msg);
            return 1;
        }
    }
    if (st_now_ms() > base)
        fprintf(stderr, "strand-bench: writing the timers took longer than the lead; early"
                        " timers were already due when written\n");
    char like[96];
    snprintf(like, sizeof like, "%s-%%", g_tag);
    const char *p[] = {like};
    /* The run's timers lie between two ids: the poll below reads that range by the
     * primary key, not the whole table (a scan of every timer kept for the retention,
     * four times a second, loaded the machine whose lateness it measures). */
    char first_id[24], last_id[24];
    snprintf(first_id, sizeof first_id, "%lld",
             sql_number("SELECT min(id) FROM strand.timers WHERE waiting_token LIKE $1", 1, p));
    snprintf(last_id, sizeof last_id, "%lld",
             sql_number("SELECT max(id) FROM strand.timers WHERE waiting_token LIKE $1", 1, p));
    const char *range[] = {like, first_id, last_id};
    double until = (double)(base + window_ms) + 60000.0;
    if (until > g_deadline_ms)
        until = g_deadline_ms;
    long long fired = 0;
    while (now_ms() < until) {
        fired = sql_number("SELECT count(*) FROM strand.timers WHERE id BETWEEN $2 AND $3"
                           " AND waiting_token LIKE $1 AND fired_at IS NOT NULL", 3, range);
        if (fired >= n)
            break;
        usleep(250 * 1000);
    }
    PGresult *res = NULL;
    if (st_pg_exec(g_pg, "SELECT extract(epoch FROM fired_at - due_at) * 1000 FROM"
                         " strand.timers WHERE waiting_token LIKE $1 AND fired_at IS NOT NULL",
                   1, p, &res, &eb) != ST_OK) {
        fprintf(stderr, "strand-bench: %s\n", eb.msg);
        return 1;
    }
    int done = PQntuples(res);
    double *lat = calloc((size_t)done + 1, sizeof *lat);
    for (int r = 0; r < done; r++)
        lat[r] = atof(PQgetvalue(res, r, 0));
    PQclear(res);
    char extra[64];
    snprintf(extra, sizeof extra, "\"window_ms\":%d", window_ms);
    report("timer lateness (fired_at - due_at)", "timers/s", n, done, lat,
           (double)n * 1000.0 / window_ms, extra);
    free(lat);
    return done == n ? 0 : 1;
}

static int w4(void)
{
    if (!import_def(k_def_w4))
        return 1;
    storage_t s0, s1;
    if (g_opt.storage)
        storage_read(&s0);
    g_task_visible = calloc((size_t)g_opt.n, sizeof *g_task_visible);
    run_threads(human);
    int sent = count_sent();
    wait_ended(sent);
    load_ended(g_opt.n);
    int done = 0;
    double rate;
    double *lat = latencies(g_opt.n, &done, &rate);
    /* the task-visible latencies, sorted, for the extra fields */
    int kv = 0;
    double *vis = calloc((size_t)g_opt.n + 1, sizeof *vis);
    for (int i = 0; i < g_opt.n; i++)
        if (g_task_visible[i] > 0)
            vis[kv++] = g_task_visible[i];
    qsort(vis, (size_t)kv, sizeof *vis, cmp_double);
    char extra[160];
    snprintf(extra, sizeof extra, "\"task_visible_p50_ms\":%.2f,\"task_visible_p99_ms\":%.2f",
             pct(vis, kv, 0.5), pct(vis, kv, 0.99));
    report("human task: start, list, complete -> completed", "trips/s", g_opt.n, done, lat,
           rate, extra);
    if (!g_opt.json)
        printf("     start -> task listed: p50 %.2f ms, p99 %.2f ms\n", pct(vis, kv, 0.5),
               pct(vis, kv, 0.99));
    free(vis);
    free(lat);
    free(g_task_visible);
    if (g_opt.storage) {
        storage_read(&s1);
        storage_report(&s0, &s1, sent);
    }
    return done == g_opt.n ? 0 : 1;
}

/* Copies one real waiting bench_w2 instance n times, in batches of 10,000 rows. */
static int fill(void)
{
    if (!import_def(k_def_w2))
        return 1;
    CURL *c = curl_easy_init();
    char seed[40];
    int ok = start_instance(c, "bench_w2", 0, 0, seed, NULL, NULL);
    curl_easy_cleanup(c);
    if (!ok || wait_status("waiting", 1) < 1) {
        fprintf(stderr, "strand-bench: the seed instance did not reach waiting\n");
        return 1;
    }
    st_errbuf_t eb;
    double t0 = now_ms();
    int made = 0;
    while (made < g_opt.n && now_ms() < g_deadline_ms) {
        int k = g_opt.n - made < 10000 ? g_opt.n - made : 10000;
        char ks[16];
        snprintf(ks, sizeof ks, "%d", k);
        const char *p[] = {seed, ks};
        PGresult *res = NULL;
        if (st_pg_exec(g_pg,
                       "WITH ids AS (SELECT gen_random_uuid() AS id FROM generate_series(1, $2::int)),"
                       " ins AS (INSERT INTO strand.instances (id, definition_name,"
                       "  definition_version, business_ref, status, input, created_at, updated_at)"
                       "  SELECT ids.id, s.definition_name, s.definition_version, s.business_ref,"
                       "  s.status, s.input, now(), now() FROM ids, strand.instances s"
                       "  WHERE s.id = $1::uuid RETURNING id),"
                       " rs AS (INSERT INTO strand.runtime_states (instance_id, state_version,"
                       "  snapshot_schema_version, snapshot, waiting_kind, waiting_token,"
                       "  waiting_until, last_signal_id, last_executed_by, last_executed_at)"
                       "  SELECT ins.id, r.state_version, r.snapshot_schema_version, r.snapshot,"
                       "  r.waiting_kind, r.waiting_token || '-' || ins.id, r.waiting_until,"
                       "  r.last_signal_id, r.last_executed_by, now()"
                       "  FROM ins, strand.runtime_states r WHERE r.instance_id = $1::uuid"
                       "  RETURNING instance_id)"
                       " INSERT INTO strand.history (instance_id, kind, detail, at)"
                       " SELECT rs.instance_id, h.kind, h.detail, now() FROM rs, strand.history h"
                       " WHERE h.instance_id = $1::uuid",
                       2, p, &res, &eb) != ST_OK) {
            fprintf(stderr, "strand-bench: fill: %s\n", eb.msg);
            return 1;
        }
        PQclear(res);
        made += k;
    }
    const char *p[] = {"bench_w2"};
    long long total = sql_number("SELECT count(*) FROM strand.instances WHERE"
                                 " definition_name = $1 AND status = 'waiting'", 1, p);
    if (g_opt.json)
        printf("{\"engine\":\"strand\",\"workload\":\"fill\",\"added\":%d,\"waiting_total\":%lld,"
               "\"seconds\":%.1f}\n", made + 1, total, (now_ms() - t0) / 1000.0);
    else
        printf("fill: added %d waiting instances in %.1f s; bench_w2 instances waiting: %lld\n",
               made + 1, (now_ms() - t0) / 1000.0, total);
    return made == g_opt.n ? 0 : 1;
}

/* ---- main ---------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: strand-bench --workload w1|w2|w3|w4|fill [--n N] [--concurrency C]\n"
            "                    [--timeout S] [--window-ms MS] [--api URL[,URL...]] [--label TEXT]\n"
            "                    [--storage] [--json] [--open]\n"
            "Needs STRAND_PG_DSN (eval \"$(scripts/stack.sh env)\") and the services running.\n");
}

static int parse_int(const char *name, const char *v, int lo, int hi, int *out)
{
    char *end = NULL;
    long x = v != NULL ? strtol(v, &end, 10) : 0;
    if (v == NULL || *v == '\0' || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "strand-bench: %s must be an integer from %d to %d, got \"%s\"\n", name,
                lo, hi, v != NULL ? v : "");
        return 0;
    }
    *out = (int)x;
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (strcmp(a, "--workload") == 0 && v != NULL)
            g_opt.workload = argv[++i];
        else if (strcmp(a, "--n") == 0)
            ok = parse_int(a, v, 1, 10000000, &g_opt.n), i++;
        else if (strcmp(a, "--concurrency") == 0)
            ok = parse_int(a, v, 1, 1024, &g_opt.concurrency), i++;
        else if (strcmp(a, "--timeout") == 0)
            ok = parse_int(a, v, 1, 86400, &g_opt.timeout_s), i++;
        else if (strcmp(a, "--window-ms") == 0)
            ok = parse_int(a, v, 100, 3600000, &g_opt.window_ms), i++;
        else if (strcmp(a, "--api") == 0 && v != NULL)
            g_opt.api = argv[++i];
        else if (strcmp(a, "--label") == 0 && v != NULL)
            g_opt.label = argv[++i];
        else if (strcmp(a, "--storage") == 0)
            g_opt.storage = 1;
        else if (strcmp(a, "--json") == 0)
            g_opt.json = 1;
        else if (strcmp(a, "--open") == 0)
            g_open = 1;
        else {
            usage();
            return 2;
        }
        if (!ok)
            return 2;
    }
    static const char *known[] = {"w1", "w2", "w3", "w4", "fill"};
    int wk = -1;
    for (int i = 0; i < 5; i++)
        if (strcmp(g_opt.workload, known[i]) == 0)
            wk = i;
    if (wk < 0) {
        fprintf(stderr, "strand-bench: unknown workload \"%s\"\n", g_opt.workload);
        usage();
        return 2;
    }
    g_dsn = getenv("STRAND_PG_DSN");
    if (g_dsn == NULL) {
        fprintf(stderr, "strand-bench: set STRAND_PG_DSN (eval \"$(scripts/stack.sh env)\")\n");
        return 2;
    }
    if (g_opt.api == NULL)
        g_opt.api = getenv("STRAND_API_URL") != NULL ? getenv("STRAND_API_URL")
                                                     : "http://127.0.0.1:8080";
    char *apis = strdup(g_opt.api), *save = NULL;
    for (char *a = strtok_r(apis, ",", &save); a != NULL && g_napis < 16; a = strtok_r(NULL, ",", &save))
        g_apis[g_napis++] = a;
    if (g_napis == 0) {
        fprintf(stderr, "strand-bench: --api names no URL\n");
        free(apis);
        return 2;
    }
    st_errbuf_t eb;
    if (st_pg_connect(g_dsn, "strand-bench", &g_pg, &eb) != ST_OK) {
        fprintf(stderr, "strand-bench: %s\n", eb.msg);
        PQfinish(g_pg);
        free(apis);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char u[40];
    st_uuid_new(u);
    snprintf(g_tag, sizeof g_tag, "bench-%.8s", u);
    g_items = calloc((size_t)g_opt.n, sizeof *g_items);
    g_deadline_ms = now_ms() + g_opt.timeout_s * 1000.0;
    int rc;
    switch (wk) {
    case 0: rc = w1(); break;
    case 1: rc = w2(); break;
    case 2: rc = w3(); break;
    case 3: rc = w4(); break;
    default: rc = fill(); break;
    }
    free(g_items);
    free(apis);
    PQfinish(g_pg);
    curl_global_cleanup();
    return rc;
}
