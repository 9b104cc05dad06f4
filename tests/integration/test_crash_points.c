/*
 * test_crash_points.c - exactly-once across the windows it depends on, with the named
 * crash points of a test build (libs/common crash_point.h; CMake STRAND_CRASH_POINTS,
 * which scripts/build.sh turns on; without it this program is not built).
 *
 * One phase per point. Each phase starts its victim service with
 * STRAND_CRASH_AT=<point>:<pass>, runs K instances of a flow of its own (an HTTP call
 * to a worker this program runs, a 200 ms timer, a wait for the signal "go" that a
 * batch job over the phase's instances sends), restarts the victim as soon as it has
 * died at its point, and once everything has ended asserts, for the phase's instances:
 *  - the victim died exactly once, with ST_CRASH_EXIT_CODE (it reached its point);
 *  - every instance completed, once, with the right output;
 *  - four applied wake-ups per instance, one of each signal (START, CALL_RESULT,
 *    TIMER_DUE, the batch's SIGNAL), as many as processed_signals says were applied,
 *    and four signal rows in the outbox per instance (nothing enqueued twice);
 *  - one call per instance, succeeded, its key seen by the worker (sent again after a
 *    crash perhaps, with the same key) and its result recorded once;
 *  - one timer per instance, fired once;
 *  - the batch job completed, each item done once: one signal, one audit row, one
 *    applied signal per item.
 * And per point, that its window was really crossed: a replay dropped as a duplicate
 * after executor.after_commit and relay.after_produce, a call sent again after
 * dispatcher.after_send.
 *
 * The pass at which each victim dies is drawn from a seed: STRAND_TEST_SEED, or the
 * clock; it is printed first, so that a failed run can be replayed.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/crash_point.h"

#define K 12                 /* instances per phase */
#define BATCH_CHUNK "4"      /* the scheduler's STRAND_BATCH_CHUNK: K / 4 = 3 chunks */
#define WAIT_S 60            /* for each stage of a phase */

static char suffix[48];
static uint64_t rng_state;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* splitmix64: the one source of randomness, from the printed seed. */
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A number from 1 to `max`. */
static int rng_pass(int max)
{
    return 1 + (int)(rng_next() % (uint64_t)max);
}

/* ---- the worker: answers every call at once, counts each key's requests ---------- */

#define MAX_KEYS 1024

static pthread_mutex_t hits_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char key[160];
    int hits;
} keys[MAX_KEYS];
static int nkeys;
static int worker_port;

static void header(const char *head, const char *name, char *out, size_t len)
{
    out[0] = '\0';
    size_t n = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line != NULL; line = strstr(line + 2, "\r\n")) {
        const char *start = line + 2;
        if (strncasecmp(start, name, n) == 0 && start[n] == ':') {
            start += n + 1;
            while (*start == ' ')
                start++;
            size_t i = 0;
            while (start[i] && start[i] != '\r' && i + 1 < len) {
                out[i] = start[i];
                i++;
            }
            out[i] = '\0';
            return;
        }
    }
}

static void count_key(const char *key)
{
    pthread_mutex_lock(&hits_lock);
    int i = 0;
    while (i < nkeys && strcmp(keys[i].key, key) != 0)
        i++;
    if (i == nkeys && nkeys < MAX_KEYS)
        snprintf(keys[nkeys++].key, sizeof keys[0].key, "%s", key);
    if (i < nkeys)
        keys[i].hits++;
    pthread_mutex_unlock(&hits_lock);
}

/* Requests the worker got with `key` (0: none). */
static int key_hits(const char *key)
{
    int hits = 0;
    pthread_mutex_lock(&hits_lock);
    for (int i = 0; i < nkeys; i++)
        if (strcmp(keys[i].key, key) == 0)
            hits = keys[i].hits;
    pthread_mutex_unlock(&hits_lock);
    return hits;
}

static void *serve_one(void *arg)
{
    int fd = (int)(long)arg;
    char buf[16384];
    size_t len = 0;
    char *end = NULL;
    while (len + 1 < sizeof buf) {
        ssize_t got = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (got <= 0)
            break;
        len += (size_t)got;
        buf[len] = '\0';
        if ((end = strstr(buf, "\r\n\r\n")) != NULL) {
            char cl[16];
            *end = '\0';
            header(buf, "Content-Length", cl, sizeof cl);
            *end = '\r';
            if (len - (size_t)(end + 4 - buf) >= (size_t)atol(cl))
                break;
        }
    }
    if (end != NULL) {
        *end = '\0';
        char key[160];
        header(buf, "Idempotency-Key", key, sizeof key);
        count_key(key);
        static const char body[] = "{\"ok\":true}";
        char answer[256];
        int n = snprintf(answer, sizeof answer,
                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(body), body);
        ssize_t sent = send(fd, answer, (size_t)n, MSG_NOSIGNAL);
        (void)sent;
    }
    close(fd);
    return NULL;
}

static void *worker_main(void *arg)
{
    int lfd = (int)(long)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_t t;
        if (pthread_create(&t, NULL, serve_one, (void *)(long)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
    return NULL;
}

static int start_worker(int port)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int bound = 0;
    for (int i = 0; i < 10 && !bound; i++) {   /* the port may be some connection's */
        addr.sin_port = htons((uint16_t)(port + i));
        if ((bound = bind(lfd, (struct sockaddr *)&addr, sizeof addr) == 0))
            worker_port = port + i;
    }
    if (!bound || listen(lfd, 128) != 0) {
        perror("test worker");
        return 0;
    }
    pthread_t t;
    return pthread_create(&t, NULL, worker_main, (void *)(long)lfd) == 0;
}

/* ---- the victim ------------------------------------------------------------------ */

static const char *const service_names[IT_NSERVICES] = {"api", "executor", "scheduler",
                                                        "monitor"};

static struct {
    it_service_t svc;
    pid_t pid;
    int crashes;          /* exits with ST_CRASH_EXIT_CODE */
    int other_deaths;     /* any other end */
    double phase_start, died_after;
} victim;

/* Starts `svc` with STRAND_CRASH_AT=<point>:<pass> (the variable is unset again at
 * once: no other service inherits it) and makes it the phase's victim. */
static void start_armed(it_service_t svc, const char *point, int pass)
{
    char spec[96];
    snprintf(spec, sizeof spec, "%s:%d", point, pass);
    setenv("STRAND_CRASH_AT", spec, 1);
    victim.pid = it_start(svc);
    unsetenv("STRAND_CRASH_AT");
    CU_ASSERT_FATAL(victim.pid > 0);
    victim.svc = svc;
    victim.crashes = victim.other_deaths = 0;
    victim.died_after = -1;
}

/* When the victim has ended: records how, and starts it again, unarmed. Called by
 * every wait of a phase. */
static void victim_check(void)
{
    int status;
    if (victim.pid <= 0 || waitpid(victim.pid, &status, WNOHANG) != victim.pid)
        return;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    victim.died_after = now_s() - victim.phase_start;
    if (code == ST_CRASH_EXIT_CODE)
        victim.crashes++;
    else
        victim.other_deaths++;
    fprintf(stderr, "  strand-%s (pid %d) ended with status %d%s %.2f s into the phase;"
            " starting it again\n", service_names[victim.svc], (int)victim.pid, code,
            code == ST_CRASH_EXIT_CODE ? " (its crash point)," : " (NOT its crash point),",
            victim.died_after);
    victim.pid = it_start(victim.svc);
}

/* Polls the count `sql` until it reaches `want` (restarting the victim when it died);
 * returns the last value. */
static long long wait_count(const char *sql, long long want, int timeout_s)
{
    double deadline = now_s() + timeout_s;
    long long v;
    for (;;) {
        victim_check();
        v = it_sql_number(sql);
        if (v >= want || now_s() >= deadline)
            return v;
        usleep(100 * 1000);
    }
}

/* An API request, retried while the API is away (the relay phase kills it). */
static long api_retry(const char *method, const char *path, const char *body, json_t **out)
{
    long status = -1;
    double deadline = now_s() + WAIT_S;
    for (;;) {
        if (out != NULL) {
            json_decref(*out);
            *out = NULL;
        }
        status = it_http(IT_API, method, path, body, out);
        if ((status > 0 && status < 500) || now_s() >= deadline)
            return status;
        victim_check();
        usleep(100 * 1000);
    }
}

/* ---- one phase -------------------------------------------------------------------- */

typedef struct {
    const char *point;
    it_service_t victim;
    int max_pass;          /* the point is passed at least this often in a phase */
    char definition[96];
} phase_t;

static void import_flow(const char *name)
{
    char doc[1536];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"c\",\"type\":\"call\",\"transport\":\"http\",\"timeout\":10000,"
             "  \"request\":{\"url\":\"'http://127.0.0.1:%d/ok'\"}},"
             "{\"id\":\"pause\",\"type\":\"timer\",\"delay\":200},"
             "{\"id\":\"go\",\"type\":\"wait_signal\",\"name\":\"go\",\"result\":\"go\"},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"n\":\"input.n\",\"go\":\"state.go.v\"}}]}",
             name, worker_port);
    CU_ASSERT_EQUAL(api_retry("POST", "/v1/definitions", doc, NULL), 201);
}

static long long count(const char *fmt, const char *arg)
{
    char sql[1024];
    snprintf(sql, sizeof sql, fmt, arg);
    return it_sql_number(sql);
}

/* Every call key of the phase's instances reached the worker; returns how many were
 * sent more than once (asserting each was seen). */
static int check_call_keys(const char *definition)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT c.idempotency_key FROM strand.calls c JOIN strand.instances i"
             " ON i.id = c.instance_id WHERE i.definition_name = '%s'", definition);
    PGconn *conn = PQconnectdb(getenv("STRAND_PG_DSN"));
    PGresult *res = PQexec(conn, sql);
    CU_ASSERT_EQUAL(PQresultStatus(res), PGRES_TUPLES_OK);
    int again = 0, unseen = 0;
    for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++) {
        int hits = key_hits(PQgetvalue(res, i, 0));
        unseen += hits == 0;
        again += hits > 1;
    }
    CU_ASSERT_EQUAL(PQntuples(res), K);
    CU_ASSERT_EQUAL(unseen, 0);
    PQclear(res);
    PQfinish(conn);
    return again;
}

/* The exactly-once invariants over the phase's instances (see the top of the file). */
static void check_exactly_once(const phase_t *p, const char *job)
{
    const char *d = p->definition;
    CU_ASSERT_EQUAL(count("SELECT count(*) FROM strand.instances WHERE definition_name = '%s'", d), K);
    CU_ASSERT_EQUAL(count("SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
                          " AND status = 'completed' AND output->>'n' = input->>'n'"
                          " AND output->>'go' = '7'", d), K);
    /* four applied wake-ups per instance, one per signal, as processed_signals says */
    long long wakeups = count("SELECT count(*) FROM strand.history h JOIN strand.instances i"
                              " ON i.id = h.instance_id WHERE i.definition_name = '%s'"
                              " AND h.kind = 'wakeup'", d);
    long long applied = count("SELECT count(*) FROM strand.processed_signals p JOIN strand.instances i"
                              " ON i.id = p.instance_id WHERE i.definition_name = '%s'"
                              " AND p.outcome = 'applied'", d);
    long long one_each = count(
        "SELECT count(*) FROM (SELECT h.instance_id FROM strand.history h JOIN strand.instances i"
        " ON i.id = h.instance_id WHERE i.definition_name = '%s' AND h.kind = 'wakeup'"
        " GROUP BY h.instance_id HAVING count(*) = 4"
        " AND count(*) FILTER (WHERE h.detail->>'signal_type' = 'START') = 1"
        " AND count(*) FILTER (WHERE h.detail->>'signal_type' = 'CALL_RESULT') = 1"
        " AND count(*) FILTER (WHERE h.detail->>'signal_type' = 'TIMER_DUE') = 1"
        " AND count(*) FILTER (WHERE h.detail->>'signal_type' = 'SIGNAL') = 1) z", d);
    long long outbox = count("SELECT count(*) FROM strand.outbox o JOIN strand.instances i"
                             " ON i.id = o.instance_id WHERE i.definition_name = '%s'"
                             " AND o.topic = 'signals'", d);
    /* one call each, succeeded, with a key of its own; one timer each, fired */
    long long calls = count("SELECT count(*) FROM strand.calls c JOIN strand.instances i"
                            " ON i.id = c.instance_id WHERE i.definition_name = '%s'"
                            " AND c.status = 'succeeded' AND c.result IS NOT NULL", d);
    long long call_keys = count("SELECT count(DISTINCT c.idempotency_key) FROM strand.calls c"
                                " JOIN strand.instances i ON i.id = c.instance_id"
                                " WHERE i.definition_name = '%s'", d);
    long long timers = count("SELECT count(*) FROM strand.timers t JOIN strand.instances i"
                             " ON i.id = t.instance_id WHERE i.definition_name = '%s'", d);
    long long fired = count("SELECT count(*) FROM strand.timers t JOIN strand.instances i"
                            " ON i.id = t.instance_id WHERE i.definition_name = '%s'"
                            " AND t.kind = 'timer' AND t.fired_at IS NOT NULL", d);
    fprintf(stderr, "  wake-ups %lld (applied signals %lld, instances with one of each: %lld),"
            " outbox signal rows %lld, calls succeeded %lld (keys %lld), timers %lld (fired %lld)\n",
            wakeups, applied, one_each, outbox, calls, call_keys, timers, fired);
    CU_ASSERT_EQUAL(wakeups, 4LL * K);
    CU_ASSERT_EQUAL(applied, wakeups);
    CU_ASSERT_EQUAL(one_each, K);
    CU_ASSERT_EQUAL(outbox, 4LL * K);
    CU_ASSERT_EQUAL(calls, K);
    CU_ASSERT_EQUAL(call_keys, K);
    CU_ASSERT_EQUAL(timers, K);
    CU_ASSERT_EQUAL(fired, K);
    /* the batch: each item done once, one signal, one audit row, one applied signal */
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.batch_jobs WHERE id = '%s'"
             " AND status = 'completed' AND total = %d AND done = %d AND failed = 0", job, K, K);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.batch_items WHERE job_id = '%s'"
             " AND state = 'done'", job);
    CU_ASSERT_EQUAL(it_sql_number(sql), K);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT b.seq FROM strand.batch_items b JOIN strand.outbox o"
             " ON o.signal_id = b.signal_id AND o.instance_id = b.instance_id WHERE b.job_id = '%s'"
             " GROUP BY b.seq HAVING count(*) = 1) z", job);
    CU_ASSERT_EQUAL(it_sql_number(sql), K);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.audit_log WHERE target = 'batch:%s'"
             " AND outcome = 'requested'", job);
    long long audit = it_sql_number(sql);
    snprintf(sql, sizeof sql, "SELECT count(DISTINCT instance_id) FROM strand.audit_log"
             " WHERE target = 'batch:%s' AND outcome = 'requested'", job);
    CU_ASSERT_EQUAL(audit, K);
    CU_ASSERT_EQUAL(it_sql_number(sql), K);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.processed_signals p JOIN strand.batch_items b"
             " ON b.signal_id = p.signal_id WHERE b.job_id = '%s' AND p.outcome = 'applied'", job);
    CU_ASSERT_EQUAL(it_sql_number(sql), K);
}

/* Prints where the phase's instances are (status, what they wait for: count). */
static void print_where(const char *definition)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT i.status || '/' || coalesce(rs.waiting_kind, '-'), count(*)"
             " FROM strand.instances i LEFT JOIN strand.runtime_states rs ON rs.instance_id = i.id"
             " WHERE i.definition_name = '%s' GROUP BY 1 ORDER BY 1", definition);
    PGconn *conn = PQconnectdb(getenv("STRAND_PG_DSN"));
    PGresult *res = PQexec(conn, sql);
    fprintf(stderr, "  instances by status/waiting kind:");
    for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
        fprintf(stderr, " %s: %s;", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
    fprintf(stderr, "\n");
    PQclear(res);
    PQfinish(conn);
}

/* Signals of the phase's instances that the executor dropped as duplicates (a replay),
 * as its log says: "signal dropped" lines with outcome=duplicate naming one of them.
 * The log is appended to across runs; instance ids are new in each. */
static int duplicates_dropped(const char *definition)
{
    char sql[256], path[1200];
    snprintf(sql, sizeof sql, "SELECT id FROM strand.instances WHERE definition_name = '%s'",
             definition);
    const char *dir = getenv("STRAND_TEST_LOG_DIR");
    snprintf(path, sizeof path, "%s/test_crash_points-executor.log", dir ? dir : "/tmp");
    PGconn *conn = PQconnectdb(getenv("STRAND_PG_DSN"));
    PGresult *res = PQexec(conn, sql);
    FILE *log = fopen(path, "r");
    int found = 0;
    char line[8192];
    while (log != NULL && PQresultStatus(res) == PGRES_TUPLES_OK &&
           fgets(line, sizeof line, log) != NULL) {
        if (strstr(line, "\"signal dropped\"") == NULL || strstr(line, "outcome=duplicate") == NULL)
            continue;
        for (int i = 0; i < PQntuples(res); i++)
            if (strstr(line, PQgetvalue(res, i, 0)) != NULL) {
                found++;
                break;
            }
    }
    if (log != NULL)
        fclose(log);
    else
        fprintf(stderr, "  could not read %s\n", path);
    PQclear(res);
    PQfinish(conn);
    return found;
}

/* Waits until `svc`'s relay publishes the outbox (it holds the lead). */
static int wait_leader(it_service_t svc)
{
    double deadline = now_s() + 30;
    while (it_metric(svc, "strand_outbox_relay_leader", 0) != 1 && now_s() < deadline)
        usleep(100 * 1000);
    return it_metric(svc, "strand_outbox_relay_leader", 0) == 1;
}

static phase_t phases[] = {
    /* The first: it starts the services. START, CALL_RESULT and TIMER_DUE each wait
     * for the one before to be published: three batches at least before "go" */
    {"relay.after_produce", IT_API, 3, ""},
    /* three wake-ups per instance before "go" */
    {"executor.after_commit", IT_EXECUTOR, 3 * K, ""},
    {"dispatcher.after_send", IT_EXECUTOR, K, ""},
    /* the timers may all fire in one batch */
    {"timer.after_commit", IT_SCHEDULER, 1, ""},
    /* K items in chunks of BATCH_CHUNK */
    {"batch.mid_chunk", IT_SCHEDULER, K / 4, ""},
};
#define NPHASES ((int)(sizeof phases / sizeof phases[0]))

static void run_phase(phase_t *p)
{
    int pass = rng_pass(p->max_pass);
    fprintf(stderr, "\n  phase %s: strand-%s dies at pass %d (of at least %d)\n", p->point,
            service_names[p->victim], pass, p->max_pass);
    if (p->victim == IT_API) {
        /* The first phase. The API's relay must be the one that publishes: it starts
         * alone, takes the lead, and only then do the others start (their relays
         * stand by). Its passes must be this phase's rows: an unarmed API publishes
         * first what earlier tests left in the shared outbox (and what its start-up
         * recovery sweep marks again), then makes way. */
        CU_ASSERT_FATAL(it_start(IT_API) > 0);
        CU_ASSERT_FATAL(wait_leader(IT_API));
        for (int i = 0; i < NPHASES; i++)   /* every phase's flow, while unarmed */
            import_flow(phases[i].definition);
        int quiet = 0;   /* two looks in a row, 0.5 s apart, find nothing left */
        for (double end = now_s() + 60; quiet < 2 && now_s() < end; usleep(500 * 1000))
            quiet = it_sql_number("SELECT count(*) FROM strand.outbox WHERE published_at IS NULL")
                            == 0 ? quiet + 1 : 0;
        CU_ASSERT_EQUAL(quiet, 2);
        CU_ASSERT_EQUAL(it_stop(IT_API, SIGKILL, 10), 128 + SIGKILL);
        /* Its passes must be this phase's START rows and nothing else: its own
         * start-up recovery sweep must not mark earlier tests' rows again (a grace of a
         * day examines nothing), and the other services, whose start-up may write rows
         * (overdue timers, ACK reminders of earlier tests), start only after the crash. */
        setenv("STRAND_RECOVERY_GRACE_S", "86400", 1);
        start_armed(IT_API, p->point, pass);
        unsetenv("STRAND_RECOVERY_GRACE_S");
        CU_ASSERT_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
        CU_ASSERT_FATAL(wait_leader(IT_API));
    } else {
        /* The victim is idle (the previous phase ended): SIGKILL, not SIGTERM, which
         * librdkafka may answer with an abort while a consumer's first assignment is
         * still under way (rd_kafka_sticky_assignor_state_destroy), and the victim
         * may have been started again only seconds ago. */
        CU_ASSERT_EQUAL(it_stop(p->victim, SIGKILL, 10), 128 + SIGKILL);
        start_armed(p->victim, p->point, pass);
        CU_ASSERT_FATAL(it_wait_http(p->victim, "/readyz", 200, 60));
    }
    victim.phase_start = now_s();

    /* K instances; each waits for "go" after its call and its timer */
    for (int i = 0; i < K; i++) {
        char body[384];
        snprintf(body, sizeof body, "{\"definition\":\"%s\",\"request_id\":\"%s-%d\",\"input\":{\"n\":%d}}",
                 p->definition, p->definition, i, i);
        long status = api_retry("POST", "/v1/instances", body, NULL);
        CU_ASSERT(status == 201 || status == 200);   /* 200: a retried start, same instance */
    }
    if (p->victim == IT_API) {
        /* The API's relay dies within the phase's first passes (its START rows, which
         * stay unmarked and go out again after it), then the others start. */
        for (double end = now_s() + WAIT_S; victim.crashes == 0 && now_s() < end;
             usleep(100 * 1000))
            victim_check();
        CU_ASSERT_FATAL(victim.crashes == 1);
        CU_ASSERT_FATAL(it_wait_http(IT_API, "/readyz", 200, 60));
        for (int s = IT_EXECUTOR; s < IT_NSERVICES; s++)
            CU_ASSERT_FATAL(it_start((it_service_t)s) > 0);
        for (int s = IT_EXECUTOR; s < IT_NSERVICES; s++)
            CU_ASSERT_FATAL(it_wait_http((it_service_t)s, "/readyz", 200, 60));
    }
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances i JOIN strand.runtime_states rs"
             " ON rs.instance_id = i.id WHERE i.definition_name = '%s' AND rs.waiting_kind = 'signal'",
             p->definition);
    long long waiting = wait_count(sql, K, WAIT_S);
    fprintf(stderr, "  %lld of %d instances wait for \"go\" after %.2f s\n", waiting, K,
            now_s() - victim.phase_start);
    if (waiting != K)
        print_where(p->definition);
    CU_ASSERT_EQUAL_FATAL(waiting, K);   /* lost work: the rest of the phase cannot end */

    /* "go" to all of them, by a batch job */
    char body[512], job[40] = "";
    snprintf(body, sizeof body, "{\"filter\":{\"definition\":\"%s\"},\"action\":\"signal\","
             "\"args\":{\"name\":\"go\",\"payload\":{\"v\":7}}}", p->definition);
    json_t *answer = NULL;
    CU_ASSERT_EQUAL(api_retry("POST", "/v1/batches", body, &answer), 201);
    snprintf(job, sizeof job, "%s", json_string_value(json_object_get(answer, "id")) ?: "");
    json_decref(answer);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE definition_name = '%s'"
             " AND status IN ('completed', 'failed', 'cancelled', 'terminated')", p->definition);
    long long ended = wait_count(sql, K, WAIT_S);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.batch_jobs WHERE id = '%s'"
             " AND status <> 'running'", job);
    CU_ASSERT_EQUAL(wait_count(sql, 1, WAIT_S), 1);
    /* a replay after the victim's death may still be in flight: let it land */
    usleep(1000 * 1000);
    victim_check();
    fprintf(stderr, "  %lld of %d instances ended after %.2f s\n", ended, K,
            now_s() - victim.phase_start);
    if (ended != K)
        print_where(p->definition);
    CU_ASSERT_EQUAL(ended, K);

    if (victim.crashes != 1)
        fprintf(stderr, "  strand-%s did %s its crash point %s at pass %d\n",
                service_names[p->victim], victim.crashes ? "pass" : "NOT reach", p->point, pass);
    CU_ASSERT_EQUAL(victim.crashes, 1);
    CU_ASSERT_EQUAL(victim.other_deaths, 0);
    check_exactly_once(p, job);
    int again = check_call_keys(p->definition);
    int dropped = duplicates_dropped(p->definition);
    fprintf(stderr, "  calls sent more than once: %d; replayed signals dropped as duplicates: %d\n",
            again, dropped);
    /* the window was crossed: what the victim did before its death came again */
    if (strcmp(p->point, "dispatcher.after_send") == 0)
        CU_ASSERT_TRUE(again >= 1);
    if (strcmp(p->point, "executor.after_commit") == 0 || strcmp(p->point, "relay.after_produce") == 0)
        CU_ASSERT_TRUE(dropped >= 1);
}

/* ---- the cases ------------------------------------------------------------------- */

static void test_relay(void)
{
    run_phase(&phases[0]);
}

static void test_executor(void)
{
    run_phase(&phases[1]);
}

static void test_dispatcher(void)
{
    run_phase(&phases[2]);
}

static void test_timer(void)
{
    run_phase(&phases[3]);
}

static void test_batch(void)
{
    run_phase(&phases[4]);
}

static void test_stop(void)
{
    CU_ASSERT_TRUE(it_stop_all());
}

int main(void)
{
    if (!it_init("test_crash_points"))
        return 1;
    signal(SIGPIPE, SIG_IGN);
    const char *seed_env = getenv("STRAND_TEST_SEED");
    uint64_t seed = seed_env != NULL && seed_env[0] != '\0'
                        ? strtoull(seed_env, NULL, 10)
                        : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
    rng_state = seed;
    fprintf(stderr, "test_crash_points: seed %llu (replay: STRAND_TEST_SEED=%llu)\n",
            (unsigned long long)seed, (unsigned long long)seed);
    snprintf(suffix, sizeof suffix, "%ld-%d", (long)time(NULL), (int)getpid());
    for (int i = 0; i < NPHASES; i++)
        snprintf(phases[i].definition, sizeof phases[i].definition, "cp-%s-%s", phases[i].point,
                 suffix);
    setenv("STRAND_BATCH_CHUNK", BATCH_CHUNK, 1);   /* read by the scheduler only */
    /* duplicates_dropped() reads the executor's info lines */
    const char *level = getenv("STRAND_LOG_LEVEL");
    if (level == NULL || strcasecmp(level, "debug") != 0)
        setenv("STRAND_LOG_LEVEL", "info", 1);
    const char *base = getenv("STRAND_TEST_PORT_BASE");
    if (!start_worker((base ? atoi(base) : 18080) + 60))
        return 1;
    static const it_case_t cases[] = {
        {"relay.after_produce: API killed between produce and mark", test_relay},
        {"executor.after_commit: executor killed between commit and offset", test_executor},
        {"dispatcher.after_send: executor killed between a call's answer and its record", test_dispatcher},
        {"timer.after_commit: scheduler killed after a firing commit", test_timer},
        {"batch.mid_chunk: scheduler killed inside a chunk", test_batch},
        {"stop the services", test_stop},
    };
    return it_run_suite("crash_points", cases, (int)(sizeof cases / sizeof cases[0]));
}
