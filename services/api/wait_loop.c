/* wait_loop.c - long polling woken by PostgreSQL notifications and Redis hints (see
 * wait_loop.h). */
#include "wait_loop.h"

#include <adapters/libevent.h>
#include <async.h>
#include <event2/event.h>
#include <hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/hint.h"
#include "strand/instance_store.h"
#include "strand/log.h"
#include "strand/metrics.h"
#include "strand/pg.h"

#define RECONNECT_S 5
#define PG_RECONNECT_MS 500
#define RECENT_HINTS 1024   /* instance ids of the last hints, for st_waiters_hinted_since() */

typedef struct waiter {
    st_waiters_t *owner;
    st_http_req_t *req;
    char instance_id[40];
    long long after_version;
    int status;           /* of the answer when the view loads (200; 201 for a start) */
    struct event *timer;
    struct waiter *next;
} waiter_t;

struct st_waiters {
    st_api_t *api;
    st_view_fn view;   /* st_api_instance_view() */
    waiter_t *head;
    redisAsyncContext *redis;
    struct event *reconnect;
    PGconn *pg;                      /* LISTEN ST_WAKE_CHANNEL; NULL while down */
    struct event *pg_read;           /* readable socket of `pg` */
    struct event *pg_reconnect;
    int pg_was_down;                 /* a notification may have been missed */
    char host[200];
    int port;
    char channel[96];
    struct event *recheck;           /* every STRAND_WAIT_RECHECK_MS */
    st_metric_t *m_woken, *m_woken_pg, *m_woken_recheck, *m_timed_out;
    unsigned long long hints_seen;
    char recent[RECENT_HINTS][40];   /* ring: hint n is at n % RECENT_HINTS */
};

/* Unlinks and frees a waiter, answering its request with `view`, or with a freshly
 * loaded view when `view` is NULL. */
static void finish(waiter_t *wt, st_answer_t *view)
{
    st_waiters_t *w = wt->owner;
    for (waiter_t **p = &w->head; *p; p = &(*p)->next)
        if (*p == wt) {
            *p = wt->next;
            break;
        }
    event_free(wt->timer);
    st_answer_t answer = {0};
    if (view == NULL) {
        w->view(w->api, wt->instance_id, -1, &answer);
        view = &answer;
    }
    if (view->status == 200)
        view->status = wt->status;
    st_api_reply(wt->req, view);
    free(wt);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    waiter_t *wt = arg;
    st_metric_inc(wt->owner->m_timed_out);
    finish(wt, NULL);
}

/* Instance `id` changed (a Redis hint or a PostgreSQL notification, whichever comes
 * first; the other finds nothing left to do, or an unmoved view): answers the waiters
 * on it whose instance moved on. `id` NULL: any instance may have changed (a wake-up
 * path was down), so every waiter looks again. */
static void instance_changed(st_waiters_t *w, const char *id, st_metric_t *woken)
{
    if (id != NULL)
        snprintf(w->recent[w->hints_seen++ % RECENT_HINTS], sizeof w->recent[0], "%s", id);
    else
        w->hints_seen += RECENT_HINTS + 1;   /* st_waiters_hinted_since() cannot tell */
    waiter_t *wt = w->head;
    while (wt != NULL) {
        waiter_t *next = wt->next;
        if (id == NULL || strcmp(wt->instance_id, id) == 0) {
            st_answer_t view = {0};
            int moved = w->view(w->api, wt->instance_id, wt->after_version, &view);
            if (view.status >= 500) {
                /* The read connection died with the server (a restart): the first
                 * statement finds out, the second reconnects. Still down: stay
                 * parked, the timeout answers. */
                st_answer_close(&view);
                moved = w->view(w->api, wt->instance_id, wt->after_version, &view);
                moved = moved && view.status < 500;
            }
            if (moved) {
                st_metric_inc(woken);
                finish(wt, &view);
            } else {
                st_answer_close(&view);
            }
        }
        wt = next;
    }
}

/* ---- the recheck ----------------------------------------------------------------- */

/* Which parked polls' instances moved (ended, or past the poll's version) or are gone:
 * one row per parked poll, $1 the instance ids and $2 the versions, in step. */
static const char *const sql_recheck =
    "SELECT p.id::text, i.status, rs.state_version, p.after"
    " FROM unnest($1::uuid[], $2::bigint[]) AS p(id, after)"
    " LEFT JOIN strand.instances i ON i.id = p.id"
    " LEFT JOIN strand.runtime_states rs ON rs.instance_id = p.id";

/* Every STRAND_WAIT_RECHECK_MS while polls are parked: answers those whose instance
 * moved although neither a hint nor a notification said so (a hint lost with the
 * executor between its commit and its publish, this API's Redis subscription down
 * while the executor's hints reached another API). One query for all of them. */
static void on_recheck(evutil_socket_t fd, short what, void *arg)
{
    st_waiters_t *w = arg;
    size_t n = 0;
    for (waiter_t *wt = w->head; wt != NULL; wt = wt->next)
        n++;
    if (n == 0)
        return;
    char *ids = malloc(n * 38 + 3), *versions = malloc(n * 21 + 3);
    if (ids == NULL || versions == NULL)
        abort();
    size_t li = 0, lv = 0;
    ids[li++] = '{';
    versions[lv++] = '{';
    for (waiter_t *wt = w->head; wt != NULL; wt = wt->next) {
        li += (size_t)sprintf(ids + li, "%s%s", wt == w->head ? "" : ",", wt->instance_id);
        lv += (size_t)sprintf(versions + lv, "%s%lld", wt == w->head ? "" : ",",
                              wt->after_version);
    }
    snprintf(ids + li, 2, "}");
    snprintf(versions + lv, 2, "}");
    st_answer_t problem = {0};
    PGconn *conn = st_api_conn(w->api, &problem);
    PGresult *res = NULL;
    st_errbuf_t eb;
    const char *params[] = {ids, versions};
    if (conn == NULL || st_pg_exec(conn, sql_recheck, 2, params, &res, &eb) != ST_OK) {
        st_log_debug("the parked polls' recheck failed; the next one tries again", "%s",
                     conn == NULL ? "no PostgreSQL connection" : eb.msg);
        res = NULL;
    }
    st_answer_close(&problem);
    free(ids);
    free(versions);
    for (int row = 0; res != NULL && row < PQntuples(res); row++) {
        int gone = PQgetisnull(res, row, 1) || PQgetisnull(res, row, 2);
        if (gone || st_instance_status_ended(PQgetvalue(res, row, 1)) ||
            atoll(PQgetvalue(res, row, 2)) > atoll(PQgetvalue(res, row, 3)))
            instance_changed(w, PQgetvalue(res, row, 0), w->m_woken_recheck);
    }
    PQclear(res);
}

static void on_hint(redisAsyncContext *c, void *r, void *privdata)
{
    st_waiters_t *w = privdata;
    redisReply *reply = r;
    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
        reply->element[2]->type != REDIS_REPLY_STRING)
        return;   /* the subscribe confirmation, or a disconnect */
    instance_changed(w, reply->element[2]->str, w->m_woken);
}

/* ---- the PostgreSQL path --------------------------------------------------------- */

static void pg_listen(st_waiters_t *w);

static void pg_down(st_waiters_t *w, const char *why)
{
    if (w->pg_read != NULL)
        event_free(w->pg_read);
    w->pg_read = NULL;
    if (w->pg != NULL) {
        st_log_warn("long polls lost their PostgreSQL notifications; reconnecting", "%s", why);
        PQfinish(w->pg);
    }
    w->pg = NULL;
    w->pg_was_down = 1;
    struct timeval tv = {0, PG_RECONNECT_MS * 1000};
    evtimer_add(w->pg_reconnect, &tv);
}

/* Reads the socket and hands every buffered notification on. Notifications are
 * drained from libpq's buffer after each read, so none waits for the next one. */
static void on_pg_readable(evutil_socket_t fd, short what, void *arg)
{
    st_waiters_t *w = arg;
    if (!PQconsumeInput(w->pg)) {
        pg_down(w, PQerrorMessage(w->pg));
        return;
    }
    PGnotify *note;
    while ((note = PQnotifies(w->pg)) != NULL) {
        instance_changed(w, note->extra, w->m_woken_pg);
        PQfreemem(note);
    }
    if (PQstatus(w->pg) != CONNECTION_OK)
        pg_down(w, "connection closed");
}

static void on_pg_reconnect(evutil_socket_t fd, short what, void *arg)
{
    pg_listen(arg);
}

/* Connects and LISTENs. After an outage every parked waiter looks again: a change
 * may have been notified while nobody listened. */
static void pg_listen(st_waiters_t *w)
{
    st_errbuf_t eb;
    if (st_pg_connect(w->api->svc->cfg.pg_dsn, "strand-api-wake", &w->pg, &eb) != ST_OK ||
        st_pg_exec(w->pg, "LISTEN " ST_WAKE_CHANNEL, 0, NULL, NULL, &eb) != ST_OK) {
        if (w->pg != NULL)
            PQfinish(w->pg);
        w->pg = NULL;
        st_log_debug("long polls could not LISTEN", "%s", eb.msg);
        w->pg_was_down = 1;
        struct timeval tv = {0, PG_RECONNECT_MS * 1000};
        evtimer_add(w->pg_reconnect, &tv);
        return;
    }
    w->pg_read = event_new(w->api->svc->base, PQsocket(w->pg), EV_READ | EV_PERSIST,
                           on_pg_readable, w);
    event_add(w->pg_read, NULL);
    if (w->pg_was_down) {
        w->pg_was_down = 0;
        st_log_info("long polls receive PostgreSQL notifications again", NULL);
        instance_changed(w, NULL, w->m_woken_pg);
    }
    on_pg_readable(-1, EV_READ, w);   /* anything that came with the LISTEN's answer */
}

static void subscribe(st_waiters_t *w);

static void on_reconnect(evutil_socket_t fd, short what, void *arg)
{
    subscribe(arg);
}

static void on_disconnect(const redisAsyncContext *c, int status)
{
    st_waiters_t *w = c->data;
    if (w == NULL)
        return;   /* freed on shutdown */
    w->redis = NULL;
    st_log_info("Redis hints unavailable; long polls wake on PostgreSQL notifications", NULL);
    struct timeval tv = {RECONNECT_S, 0};
    evtimer_add(w->reconnect, &tv);
}

static void on_connect(const redisAsyncContext *c, int status)
{
    if (status != REDIS_OK)
        on_disconnect(c, status);
}

static void subscribe(st_waiters_t *w)
{
    redisAsyncContext *c = redisAsyncConnect(w->host, w->port);
    if (c == NULL || c->err) {
        if (c != NULL)
            redisAsyncFree(c);
        struct timeval tv = {RECONNECT_S, 0};
        evtimer_add(w->reconnect, &tv);
        return;
    }
    c->data = w;
    redisLibeventAttach(c, w->api->svc->base);
    redisAsyncSetConnectCallback(c, on_connect);
    redisAsyncSetDisconnectCallback(c, on_disconnect);
    redisAsyncCommand(c, on_hint, w, "SUBSCRIBE %s", w->channel);
    w->redis = c;
}

st_waiters_t *st_waiters_new(st_api_t *api, st_view_fn view)
{
    st_waiters_t *w = calloc(1, sizeof *w);
    if (w == NULL)
        abort();
    w->api = api;
    w->view = view;
    w->m_woken = st_metrics_counter("strand_long_polls_total", "Long polls answered",
                                    "by=\"hint\"");
    w->m_woken_pg = st_metrics_counter("strand_long_polls_total", "Long polls answered",
                                       "by=\"notify\"");
    w->m_timed_out = st_metrics_counter("strand_long_polls_total", "Long polls answered",
                                        "by=\"timeout\"");
    w->m_woken_recheck = st_metrics_counter("strand_long_polls_total", "Long polls answered",
                                            "by=\"recheck\"");
    w->reconnect = evtimer_new(api->svc->base, on_reconnect, w);
    w->pg_reconnect = evtimer_new(api->svc->base, on_pg_reconnect, w);
    w->recheck = event_new(api->svc->base, -1, EV_PERSIST, on_recheck, w);
    int every_ms = api->svc->cfg.wait_recheck_ms;
    struct timeval every = {every_ms / 1000, (every_ms % 1000) * 1000};
    event_add(w->recheck, &every);
    pg_listen(w);
    snprintf(w->channel, sizeof w->channel, "%s" ST_HINT_WAKE, api->svc->cfg.topic_prefix);
    if (st_hint_parse_url(api->svc->cfg.redis_url, w->host, sizeof w->host, &w->port))
        subscribe(w);
    return w;
}

void st_waiters_free(st_waiters_t *w)
{
    if (w == NULL)
        return;
    while (w->head != NULL)
        finish(w->head, NULL);   /* answer what is parked with the current view */
    if (w->redis != NULL) {
        w->redis->data = NULL;   /* on_disconnect, called by the free, then does nothing */
        redisAsyncFree(w->redis);
    }
    if (w->pg_read != NULL)
        event_free(w->pg_read);
    if (w->pg != NULL)
        PQfinish(w->pg);
    event_free(w->recheck);
    event_free(w->pg_reconnect);
    event_free(w->reconnect);
    free(w);
}

unsigned long long st_waiters_mark(const st_waiters_t *w)
{
    return w->hints_seen;
}

int st_waiters_hinted_since(const st_waiters_t *w, const char *instance_id,
                            unsigned long long mark)
{
    if (w->hints_seen - mark > RECENT_HINTS)
        return 1;   /* the ring went round: cannot tell */
    for (unsigned long long n = mark; n < w->hints_seen; n++)
        if (strcmp(w->recent[n % RECENT_HINTS], instance_id) == 0)
            return 1;
    return 0;
}

void st_waiters_park(st_waiters_t *w, st_http_req_t *req, const char *instance_id,
                     long long after_version, int wait_ms, int status)
{
    waiter_t *wt = calloc(1, sizeof *wt);
    if (wt == NULL)
        abort();
    wt->owner = w;
    wt->req = req;
    snprintf(wt->instance_id, sizeof wt->instance_id, "%s", instance_id);
    wt->after_version = after_version;
    wt->status = status;
    wt->timer = evtimer_new(w->api->svc->base, on_timeout, wt);
    struct timeval tv = {wait_ms / 1000, (wait_ms % 1000) * 1000};
    evtimer_add(wt->timer, &tv);
    wt->next = w->head;
    w->head = wt;
}
