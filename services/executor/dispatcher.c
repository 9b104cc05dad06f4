/* dispatcher.c - outbound HTTP calls after commit (see dispatcher.h). */
#include "dispatcher.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/call.h"
#include "strand/crash_point.h"
#include "strand/dedup.h"
#include "strand/due_loop.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/pg.h"
#include "strand/signal.h"
#include "strand/util.h"
#include "strand/call_allow.h"
#include "strand/worker_http.h"

#define CLAIM_BATCH 16
#define HOUSEKEEPING_EVERY_S 60
#define STOP_GRACE_S 5.0          /* calls in flight at stop get this long to answer */
#define REPORT_RETRY_S 0.5
/* The lease margin: a claimed call is sent only before claim time + lease - margin on
 * this process's monotonic clock (dispatcher.h), margin = max(1 s, lease / 5), at most
 * half the lease. */
#define LEASE_MARGIN_MIN_MS 1000

/* One claimed call, from the claim until its result is recorded. */
typedef struct call {
    char id[37];
    char instance_id[37];
    char *waiting_token;
    int attempt;
    long long epoch;            /* the claim's lease epoch (Strand-Lease-Epoch) */
    double deadline;            /* monotonic s: the lease is provably held until then */
    st_worker_request_t *req;   /* NULL when the call could not be made, or once done */
    json_t *result;             /* the CALL_RESULT's result, once known */
    double started;
    struct call *next;
} call_t;

struct st_dispatcher {
    st_service_t *svc;
    st_due_loop_t *loop;       /* the claimer: LISTEN strand_calls, leases, stop */
    time_t last_housekeeping;
    int capacity;              /* STRAND_EXECUTOR_CALL_CONCURRENCY */
    int lease_ms;              /* STRAND_EXECUTOR_CALL_LEASE_MS */
    double held_s;             /* lease - margin: how long after a claim or renewal the
                                  lease is provably held (seconds) */

    pthread_t runner;
    int runner_started;
    CURLM *multi;
    pthread_mutex_t lock;      /* guards incoming, nactive, saturated, stop */
    call_t *incoming;          /* claimed, not yet taken by the runner */
    int nactive;               /* claimed and not yet reported */
    int saturated;             /* the claimer left pending calls for want of places */
    int stop;

    /* runner thread only */
    PGconn *conn;
    call_t *running;           /* transfers on the multi handle */
    call_t *finished;          /* results not yet recorded */
    double next_report_try;
    double next_connect_try;

    st_metric_t *m_calls_ok, *m_calls_failed, *m_calls_refused, *m_duration;
    st_metric_t *m_lease_lapsed;   /* claimed calls not sent: their lease was not held */
};

static void call_free(call_t *c)
{
    if (c == NULL)
        return;
    st_worker_request_free(c->req);
    json_decref(c->result);
    free(c->waiting_token);
    free(c);
}

/* Frees every call of the list `*head` and leaves it empty. */
static void call_list_free(call_t **head)
{
    while (*head != NULL) {
        call_t *c = *head;
        *head = c->next;
        call_free(c);
    }
}

/* The CALL_RESULT result of a reply. Caller decrefs. */
static json_t *reply_result(st_err_t err, st_worker_reply_t *reply)
{
    if (err != ST_OK && reply->refused)
        return json_pack("{s:b, s:s, s:s, s:b}", "ok", 0, "error", reply->error, "code",
                         ST_CALL_REFUSED_CODE, "retryable", 0);
    if (err != ST_OK)
        return json_pack("{s:b, s:s, s:b}", "ok", 0, "error", reply->error, "timeout",
                         reply->timed_out);
    json_error_t jerr;
    json_t *parsed = reply->body ? json_loads(reply->body, JSON_DECODE_ANY, &jerr) : NULL;
    if (parsed == NULL)
        parsed = reply->body ? json_string(reply->body) : json_null();
    if (parsed == NULL)   /* not UTF-8 */
        parsed = json_null();
    return json_pack("{s:b, s:i, s:o}", "ok", reply->status >= 200 && reply->status < 300,
                     "status", (int)reply->status, "body", parsed);
}

/* Prepares the HTTP request of claimed call `row`; on failure sets c->result. */
static void prepare_http(call_t *c, const st_call_row_t *row)
{
    const char *key = row->idempotency_key;
    json_error_t jerr;
    json_t *request = json_loads(row->request_json, 0, &jerr);
    const char *url = json_string_value(json_object_get(request, "url"));
    const char *method = json_string_value(json_object_get(request, "method"));
    json_t *body_json = json_object_get(request, "body");
    /* The process worker protocol (docs/processes.md) also names the instance, the
     * attempt and the key in the body. */
    const char *protocol = json_string_value(json_object_get(request, "protocol"));
    if (protocol != NULL && strcmp(protocol, "strand.process/1") == 0 && json_is_object(body_json)) {
        json_object_set_new(body_json, "instance_id", json_string(c->instance_id));
        json_object_set_new(body_json, "attempt", json_integer(c->attempt));
        json_object_set_new(body_json, "idempotency_key", json_string(key));
    }
    char *body = body_json ? json_dumps(body_json, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    st_worker_reply_t reply;
    st_err_t err = st_worker_request_new(method, url, body, key, c->instance_id, c->attempt,
                                         c->epoch, json_object_get(request, "headers"),
                                         row->timeout_ms, &c->req, &reply);
    if (err != ST_OK)
        c->result = json_pack("{s:b, s:s}", "ok", 0, "error", reply.error);
    else
        curl_easy_setopt(st_worker_request_handle(c->req), CURLOPT_PRIVATE, c);
    st_worker_reply_close(&reply);
    free(body);
    json_decref(request);
}

/* ---- the claimer (due loop thread) ------------------------------------------------- */

/* The dedup purge: bounded, indexed, once a minute. */
static int housekeeping(st_dispatcher_t *d, PGconn *conn)
{
    if (time(NULL) - d->last_housekeeping < HOUSEKEEPING_EVERY_S)
        return 1;
    st_errbuf_t eb;
    /* The signal dedup window (libs/common dedup.c): older ids are forgotten. */
    if (st_dedup_purge(conn, d->svc->cfg.dedup_retention_s, &eb) != ST_OK) {
        st_log_warn("executor housekeeping failed", "%s", eb.msg);
        return 0;
    }
    d->last_housekeeping = time(NULL);
    return 1;
}

/* Returns calls with a lapsed lease to 'pending'. Returns 0 on a database error. */
static int recover_lapsed(st_dispatcher_t *d, PGconn *conn)
{
    st_errbuf_t eb;
    st_call_row_t *lapsed = NULL;
    int n = 0;
    if (st_call_recover_lapsed(conn, &lapsed, &n, &eb) != ST_OK) {
        st_log_warn("could not recover calls with a lapsed lease", "%s", eb.msg);
        return 0;
    }
    for (int i = 0; i < n; i++)
        st_log_warn("call lease lapsed, sending it again", "call=%s instance=%s owner=%s",
                    lapsed[i].id, lapsed[i].instance_id, lapsed[i].claimed_by);
    st_call_list_free(lapsed, n);
    /* Other executors may have free places when this one has none. */
    if (n > 0 && st_pg_exec(conn, "NOTIFY " ST_CALLS_CHANNEL, 0, NULL, NULL, &eb) != ST_OK)
        return 0;
    (void)d;
    return 1;
}

/* Claims as many calls as there are free places and hands them to the runner (the
 * due loop's `process`). Returns rows claimed, -1 on a database error. */
static int dispatch_batch(PGconn *conn, void *ctx)
{
    st_dispatcher_t *d = ctx;
    if (!housekeeping(d, conn) || !recover_lapsed(d, conn))
        return -1;
    pthread_mutex_lock(&d->lock);
    int want = d->capacity - d->nactive;
    if (want > CLAIM_BATCH)
        want = CLAIM_BATCH;
    if (want <= 0)
        d->saturated = 1;   /* the runner says when a place frees up */
    pthread_mutex_unlock(&d->lock);
    if (want <= 0)
        return 0;
    st_errbuf_t eb;
    st_call_row_t *calls = NULL;
    int n = 0;
    /* Read before the claim is issued: the database counts the lease from its now(),
     * a later moment, so claimed + held_s falls inside the lease. */
    double claimed = st_mono_s();
    if (st_call_claim(conn, want, d->svc->cfg.node_id, d->lease_ms, &calls, &n, &eb) != ST_OK) {
        st_log_warn("could not claim calls", "%s", eb.msg);
        return -1;
    }
    call_t *head = NULL, **tail = &head;
    int taken = 0;
    for (int i = 0; i < n; i++) {
        const st_call_row_t *row = &calls[i];
        if (row->abandoned) {
            st_log_info("call abandoned: its instance no longer waits for it",
                        "call=%s instance=%s", row->id, row->instance_id);
            continue;
        }
        call_t *c = calloc(1, sizeof *c);
        if (c == NULL || (c->waiting_token = strdup(row->waiting_token)) == NULL)
            abort();   /* as the rest of the executor: no memory is not survivable */
        snprintf(c->id, sizeof c->id, "%s", row->id);
        snprintf(c->instance_id, sizeof c->instance_id, "%s", row->instance_id);
        c->attempt = row->attempt;
        c->epoch = row->lease_epoch;
        c->deadline = claimed + d->held_s;
        if (strcmp(row->transport, "http") == 0)
            prepare_http(c, row);
        else
            c->result = json_pack("{s:b, s:s}", "ok", 0, "error", "unsupported call transport");
        *tail = c;
        tail = &c->next;
        taken++;
    }
    st_call_list_free(calls, n);
    pthread_mutex_lock(&d->lock);
    *tail = d->incoming;
    d->incoming = head;
    d->nactive += taken;
    if (n == want && want < CLAIM_BATCH)
        d->saturated = 1;   /* there may be more than the places we had */
    pthread_mutex_unlock(&d->lock);
    if (taken > 0)
        curl_multi_wakeup(d->multi);
    return n;
}

/* Wakes at the earliest lease (a dead executor's calls) or the next housekeeping;
 * new calls arrive by NOTIFY. */
static long long next_wait_ms(PGconn *conn, void *ctx)
{
    st_dispatcher_t *d = ctx;
    long long left = (long long)(d->last_housekeeping + HOUSEKEEPING_EVERY_S - time(NULL)) * 1000;
    if (left < 0)
        left = 0;
    st_errbuf_t eb;
    long long lease = 0;
    int has = 0;
    if (st_call_next_lease_ms(conn, &lease, &has, &eb) == ST_OK && has) {
        lease += 20;   /* just past the lapse */
        if (lease < 0)
            lease = 0;
        if (lease < left)
            left = lease;
    }
    return left;
}

/* ---- the runner ------------------------------------------------------------------- */

static int runner_pg(st_dispatcher_t *d)
{
    if (d->conn != NULL && PQstatus(d->conn) == CONNECTION_OK)
        return 1;
    if (st_mono_s() < d->next_connect_try)
        return 0;
    st_errbuf_t eb;
    if (st_pg_reconnect(&d->conn, d->svc->cfg.pg_dsn, "strand-calls", NULL, &eb) != ST_OK) {
        st_log_warn("call runner could not connect to PostgreSQL", "%s", eb.msg);
        d->next_connect_try = st_mono_s() + REPORT_RETRY_S;
        return 0;
    }
    return 1;
}

/* Records the result and enqueues CALL_RESULT in one transaction. */
static st_err_t report_tx(PGconn *conn, const call_t *c, st_errbuf_t *eb)
{
    int ok = json_is_true(json_object_get(c->result, "ok"));
    char *result_text = json_dumps(c->result, JSON_COMPACT);
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_CALL_RESULT, c->instance_id, -1);
    snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", c->waiting_token);
    sig.payload = json_pack("{s:s, s:i, s:O}", "call_id", c->id, "attempt", c->attempt,
                            "result", c->result);
    int recorded = 0;
    st_err_t err = st_pg_begin(conn, eb);
    if (err == ST_OK)
        err = st_call_record_result_tx(conn, c->id, c->epoch, ok, result_text, &recorded, eb);
    if (err == ST_OK && recorded)
        err = st_signal_enqueue_tx(conn, &sig, eb);
    if (err == ST_OK)
        err = st_pg_commit(conn, eb);
    if (err != ST_OK)
        st_pg_rollback(conn);
    st_signal_close(&sig);
    free(result_text);
    return err;
}

/* Gives back `freed` places (calls settled or dropped); when the claimer had left
 * pending calls for want of places, wakes the claimers. */
static void places_freed(st_dispatcher_t *d, int freed)
{
    if (freed == 0)
        return;
    pthread_mutex_lock(&d->lock);
    d->nactive -= freed;
    int wake = d->saturated;
    d->saturated = 0;
    pthread_mutex_unlock(&d->lock);
    st_errbuf_t eb;
    /* Places came free while calls were left pending: wake the claimers. */
    if (wake && runner_pg(d))
        st_pg_exec(d->conn, "NOTIFY " ST_CALLS_CHANNEL, 0, NULL, NULL, &eb);
}

/* Takes the calls the claimer handed over and starts their transfers: each only while
 * its lease is provably held (its deadline has not passed). A call past its deadline
 * is dropped unsent: its lease lapses (or has lapsed) and whichever executor claims it
 * again sends it, under a newer epoch. */
static void take_incoming(st_dispatcher_t *d)
{
    pthread_mutex_lock(&d->lock);
    call_t *list = d->incoming;
    d->incoming = NULL;
    pthread_mutex_unlock(&d->lock);
    int dropped = 0;
    while (list != NULL) {
        call_t *c = list;
        list = c->next;
        ST_TEST_FREEZE("dispatcher.before_send", "STRAND_TEST_DISPATCH_DELAY_MS");
        c->started = st_mono_s();
        if (c->req != NULL && c->started >= c->deadline) {
            st_log_warn("call lease no longer held, not sending it",
                        "call=%s instance=%s attempt=%d epoch=%lld: %.3f s past the lease"
                        " deadline (lease %d ms less the margin); left to the executor that"
                        " claims it again", c->id, c->instance_id, c->attempt, c->epoch,
                        c->started - c->deadline, d->lease_ms);
            st_metric_inc(d->m_lease_lapsed);
            call_free(c);
            dropped++;
            continue;
        }
        if (c->req != NULL &&
            curl_multi_add_handle(d->multi, st_worker_request_handle(c->req)) != CURLM_OK) {
            c->result = json_pack("{s:b, s:s}", "ok", 0, "error", "could not start the call");
            st_worker_request_free(c->req);
            c->req = NULL;
        }
        if (c->req != NULL) {
            c->next = d->running;
            d->running = c;
        } else {
            c->next = d->finished;
            d->finished = c;
        }
    }
    places_freed(d, dropped);
}

/* Moves the transfers that ended to the finished list. */
static void collect_done(st_dispatcher_t *d)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(d->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        call_t *c = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
        CURLcode code = msg->data.result;
        curl_multi_remove_handle(d->multi, msg->easy_handle);
        for (call_t **p = &d->running; *p != NULL; p = &(*p)->next)
            if (*p == c) {
                *p = c->next;
                break;
            }
        st_worker_reply_t reply;
        st_err_t err = st_worker_request_finish(c->req, (int)code, &reply);
        c->result = reply_result(err, &reply);
        st_worker_reply_close(&reply);
        ST_CRASH_POINT("dispatcher.after_send");   /* tests: answered, not yet recorded */
        st_worker_request_free(c->req);
        c->req = NULL;
        st_metric_observe(d->m_duration, st_mono_s() - c->started);
        c->next = d->finished;
        d->finished = c;
    }
}

/* Records the finished calls' results; the ones the database refused stay for the
 * next try. */
static void report_finished(st_dispatcher_t *d)
{
    if (d->finished == NULL || st_mono_s() < d->next_report_try || !runner_pg(d))
        return;
    int freed = 0;
    while (d->finished != NULL) {
        call_t *c = d->finished;
        st_errbuf_t eb;
        if (report_tx(d->conn, c, &eb) != ST_OK) {
            st_log_warn("could not record a call result, retrying", "call=%s: %s", c->id, eb.msg);
            d->next_report_try = st_mono_s() + REPORT_RETRY_S;
            break;
        }
        st_metric_inc(json_is_true(json_object_get(c->result, "ok")) ? d->m_calls_ok
                      : json_is_false(json_object_get(c->result, "retryable")) ? d->m_calls_refused
                                                                              : d->m_calls_failed);
        d->finished = c->next;
        call_free(c);
        freed++;
    }
    places_freed(d, freed);
}

/* Pushes the leases of every call this runner holds forward. A lease is renewed only
 * while still held (the claim's epoch, not lapsed: call.c), and a call's deadline moves
 * only when its renewal succeeded, to the moment before the renewal was issued plus the
 * lease less the margin. */
static void renew_leases(st_dispatcher_t *d)
{
    if ((d->running == NULL && d->finished == NULL) || !runner_pg(d))
        return;
    size_t n = 0;
    for (call_t *c = d->running; c != NULL; c = c->next)
        n++;
    for (call_t *c = d->finished; c != NULL; c = c->next)
        n++;
    const char **ids = malloc(n * sizeof *ids);
    long long *epochs = malloc(n * sizeof *epochs);
    int *renewed = malloc(n * sizeof *renewed);
    call_t **calls = malloc(n * sizeof *calls);
    if (ids == NULL || epochs == NULL || renewed == NULL || calls == NULL) {
        free(ids);
        free(epochs);
        free(renewed);
        free(calls);
        return;
    }
    size_t len = 0;
    for (int pass = 0; pass < 2; pass++)
        for (call_t *c = pass ? d->finished : d->running; c != NULL; c = c->next) {
            calls[len] = c;
            epochs[len] = c->epoch;
            ids[len++] = c->id;
        }
    st_errbuf_t eb;
    double issued = st_mono_s();
    if (st_call_renew_leases(d->conn, ids, epochs, len, d->lease_ms, renewed, &eb) != ST_OK) {
        st_log_warn("could not renew call leases", "%s", eb.msg);
    } else {
        for (size_t i = 0; i < len; i++) {
            call_t *c = calls[i];
            if (renewed[i]) {
                c->deadline = issued + d->held_s;
            } else if (c->deadline > 0) {
                /* Lapsed or claimed again: its answer is recorded only if no newer
                 * claim exists (call.c); logged once. */
                st_log_warn("call lease lost while the call was in flight",
                            "call=%s instance=%s epoch=%lld", c->id, c->instance_id, c->epoch);
                c->deadline = 0;
            }
        }
    }
    free(ids);
    free(epochs);
    free(renewed);
    free(calls);
}

static void *runner_main(void *arg)
{
    st_dispatcher_t *d = arg;
    double renew_every = d->lease_ms / 3000.0;
    double next_renew = st_mono_s() + renew_every;
    double stop_deadline = 0;
    for (;;) {
        take_incoming(d);
        int still = 0;
        curl_multi_perform(d->multi, &still);
        collect_done(d);
        report_finished(d);
        double now = st_mono_s();
        if (now >= next_renew) {
            renew_leases(d);
            next_renew = now + renew_every;
        }
        pthread_mutex_lock(&d->lock);
        int stop = d->stop;
        int idle = d->incoming == NULL;
        pthread_mutex_unlock(&d->lock);
        if (stop) {
            if (idle && d->running == NULL && d->finished == NULL)
                break;
            if (stop_deadline == 0)
                stop_deadline = now + STOP_GRACE_S;
            if (now >= stop_deadline)
                break;   /* the rest keep their leases until they lapse */
        }
        double wait_s = next_renew - now;
        if (d->finished != NULL && d->next_report_try - now < wait_s)
            wait_s = d->next_report_try - now;
        if (wait_s > 1.0)
            wait_s = 1.0;
        if (wait_s < 0.001)
            wait_s = 0.001;
        curl_multi_poll(d->multi, NULL, 0, (int)(wait_s * 1000) + 1, NULL);
    }
    while (d->running != NULL) {
        call_t *c = d->running;
        d->running = c->next;
        curl_multi_remove_handle(d->multi, st_worker_request_handle(c->req));
        call_free(c);
    }
    call_list_free(&d->finished);
    if (d->conn != NULL)
        PQfinish(d->conn);
    d->conn = NULL;
    return NULL;
}

/* ---- start and stop --------------------------------------------------------------- */

static void dispatcher_free(st_dispatcher_t *d)
{
    call_list_free(&d->incoming);
    if (d->multi != NULL)
        curl_multi_cleanup(d->multi);
    pthread_mutex_destroy(&d->lock);
    curl_global_cleanup();
    free(d);
}

st_err_t st_dispatcher_start(st_service_t *svc, st_dispatcher_t **out, st_errbuf_t *eb)
{
    st_dispatcher_t *d = calloc(1, sizeof *d);
    if (d == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the dispatcher");
    d->svc = svc;
    d->capacity = svc->cfg.executor_call_concurrency;
    d->lease_ms = svc->cfg.executor_call_lease_ms;
    int margin_ms = d->lease_ms / 5 > LEASE_MARGIN_MIN_MS ? d->lease_ms / 5 : LEASE_MARGIN_MIN_MS;
    if (margin_ms > d->lease_ms / 2)
        margin_ms = d->lease_ms / 2;
    d->held_s = (d->lease_ms - margin_ms) / 1000.0;
    pthread_mutex_init(&d->lock, NULL);
    d->m_calls_ok = st_metrics_counter("strand_calls_total", "Outbound calls by outcome",
                                       "outcome=\"ok\"");
    d->m_calls_failed = st_metrics_counter("strand_calls_total", "Outbound calls by outcome",
                                           "outcome=\"failed\"");
    d->m_calls_refused = st_metrics_counter("strand_calls_total", "Outbound calls by outcome",
                                            "outcome=\"refused\"");
    d->m_lease_lapsed = st_metrics_counter(
        "strand_call_lease_lapsed_total",
        "Claimed calls not sent because their lease was no longer provably held", NULL);
    d->m_duration = st_metrics_histogram("strand_call_duration_seconds",
                                         "Duration of outbound calls", NULL);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    d->multi = curl_multi_init();
    if (d->multi == NULL) {
        dispatcher_free(d);
        return st_err_set(eb, ST_ERR_NOMEM, "could not create the call runner");
    }
    curl_multi_setopt(d->multi, CURLMOPT_MAXCONNECTS, (long)d->capacity);
    if (pthread_create(&d->runner, NULL, runner_main, d) != 0) {
        dispatcher_free(d);
        return st_err_set(eb, ST_ERR_INTERNAL, "could not start the call runner");
    }
    d->runner_started = 1;
    st_due_loop_config_t cfg = {"dispatcher", ST_CALLS_CHANNEL, CLAIM_BATCH, dispatch_batch,
                                next_wait_ms, d};
    st_err_t err = st_due_loop_start(svc, &cfg, &d->loop, eb);
    if (err != ST_OK) {
        pthread_mutex_lock(&d->lock);
        d->stop = 1;
        pthread_mutex_unlock(&d->lock);
        curl_multi_wakeup(d->multi);
        pthread_join(d->runner, NULL);
        dispatcher_free(d);
        return err;
    }
    *out = d;
    return ST_OK;
}

void st_dispatcher_stop(st_dispatcher_t *d)
{
    if (d == NULL)
        return;
    st_due_loop_stop(d->loop);   /* no more claims */
    pthread_mutex_lock(&d->lock);
    d->stop = 1;
    pthread_mutex_unlock(&d->lock);
    curl_multi_wakeup(d->multi);
    pthread_join(d->runner, NULL);
    dispatcher_free(d);
}
