/*
 * command_pool.c - the API's write commands on worker threads (see command_pool.h).
 *
 * Jobs move through two lists guarded by one mutex: `queued` (loop thread -> workers,
 * signalled by a condition variable) and `done` (workers -> loop thread, signalled by
 * one byte on a pipe whose read end is an event on the loop). A job owns its deferred
 * request until the loop thread answers it; workers never touch the request.
 *
 * A worker is woken only for a job it can run now: a start queued while every group
 * lane is busy wakes nobody, because the worker that frees a lane goes straight on to
 * take the queued starts (woken in vain, each idle worker would cost two context
 * switches; test_start_group counts them).
 */
#define _GNU_SOURCE
#include "command_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "strand/log.h"
#include "strand/metrics.h"

#define ST_COMMAND_POOL_MAX_WORKERS 64

typedef struct st_job {
    struct st_job *next;  /* in a list; in a taken group, the group's next job */
    st_http_req_t *req;   /* deferred; answered and freed on the loop thread */
    st_cmd_fn cmd;
    st_named_cmd_fn named;
    st_principal_t who;
    char *id, *name;      /* owned; may be NULL */
    json_t *args;         /* owned */
    st_command_then_t then;   /* fn NULL: answer directly */
    int groupable;        /* cmd is the pool's group command */
    st_answer_t answer;
} st_job_t;

typedef struct {
    st_job_t *head, *tail;
} st_job_list_t;

struct st_command_pool {
    pthread_mutex_t mu;
    pthread_cond_t work;
    st_job_list_t queued, done;
    int stopping;
    int wake_pipe[2];            /* workers write, the loop reads */
    struct event *wake_event;
    char *dsn;
    int nworkers;
    pthread_t workers[ST_COMMAND_POOL_MAX_WORKERS];
    /* Grouping (st_command_pool_group): at most `group_lanes` groups run at once, so
     * that commands arriving while they run queue up and form the next groups. */
    st_cmd_fn group_cmd;
    st_cmd_group_fn group_fn;
    int group_max, group_lanes, groups_running;
    st_metric_t *m_groups_committed, *m_groups_run_alone, *m_groups_unknown, *m_grouped;
};

static void list_push(st_job_list_t *l, st_job_t *job)
{
    job->next = NULL;
    if (l->tail != NULL)
        l->tail->next = job;
    else
        l->head = job;
    l->tail = job;
}

static st_job_t *list_take_all(st_job_list_t *l)
{
    st_job_t *all = l->head;
    l->head = l->tail = NULL;
    return all;
}

static void job_run(st_job_t *job, PGconn **conn, const char *dsn)
{
    PGconn *c = st_api_connect(conn, dsn, &job->answer);
    if (c == NULL)
        return;
    if (job->cmd != NULL)
        job->cmd(c, &job->who, job->id, job->args, &job->answer);
    else
        job->named(c, &job->who, job->id, job->name, job->args, &job->answer);
}

/* Answers on the loop thread (or after it stopped, at free) and frees the job. A
 * problem with `retry_after_s` (a 429) carries it as the Retry-After header too. */
static void job_answer(st_job_t *job)
{
    json_t *retry_after = json_object_get(job->answer.body, "retry_after_s");
    if (job->answer.status >= 400 && json_is_integer(retry_after)) {
        char seconds[24];
        snprintf(seconds, sizeof seconds, "%lld", (long long)json_integer_value(retry_after));
        st_http_add_header(job->req, "Retry-After", seconds);
    }
    if (job->then.fn != NULL)
        job->then.fn(job->req, &job->answer, job->then.ctx);
    else
        st_api_reply(job->req, &job->answer);
    st_answer_close(&job->answer);
    json_decref(job->args);
    free(job->id);
    free(job->name);
    free(job);
}

/* Runs a taken group (`first` and its `next` chain) in one transaction, or each job
 * alone when it is a single job, when the session is down, or when the group fails. */
static void group_run(st_command_pool_t *pool, st_job_t *first, PGconn **conn)
{
    st_cmd_item_t items[ST_CMD_GROUP_MAX];
    int n = 0;
    for (st_job_t *j = first; j != NULL; j = j->next)
        items[n++] = (st_cmd_item_t){j->args, &j->answer};
    PGconn *c = n > 1 ? st_api_connect(conn, pool->dsn, &first->answer) : NULL;
    if (c != NULL) {
        switch (pool->group_fn(c, items, n)) {
        case ST_GROUP_COMMITTED:
            st_metric_inc(pool->m_groups_committed);
            st_metric_add(pool->m_grouped, n);
            return;
        case ST_GROUP_UNKNOWN:
            st_metric_inc(pool->m_groups_unknown);
            return;
        case ST_GROUP_RUN_ALONE:
            st_metric_inc(pool->m_groups_run_alone);
            break;
        }
    }
    st_answer_close(&first->answer);   /* a failed connect answered it */
    first->answer.status = 0;
    for (st_job_t *j = first; j != NULL; j = j->next)
        job_run(j, conn, pool->dsn);
}

/* Unlinks `job` from `l`; `prev` is the job before it (NULL: it is the head). */
static void list_unlink(st_job_list_t *l, st_job_t *prev, st_job_t *job)
{
    if (prev != NULL)
        prev->next = job->next;
    else
        l->head = job->next;
    if (l->tail == job)
        l->tail = prev;
    job->next = NULL;
}

/* Unlinks and returns the first job a worker may run now (with pool->mu held), NULL if
 * none: a groupable job only while a group lane is free, and then with every other
 * queued groupable job (up to group_max) chained behind it. */
static st_job_t *take_runnable(st_command_pool_t *pool)
{
    st_job_t *prev = NULL, *job = pool->queued.head;
    while (job != NULL && job->groupable && pool->groups_running >= pool->group_lanes) {
        prev = job;
        job = job->next;
    }
    if (job == NULL)
        return NULL;
    st_job_t *after = job->next;
    list_unlink(&pool->queued, prev, job);
    if (!job->groupable)
        return job;
    pool->groups_running++;
    st_job_t *last = job;
    for (int taken = 1; after != NULL && taken < pool->group_max;) {
        st_job_t *j = after;
        after = j->next;
        if (!j->groupable) {
            prev = j;
            continue;
        }
        list_unlink(&pool->queued, prev, j);
        last->next = j;
        last = j;
        taken++;
    }
    return job;
}

static void *worker_main(void *arg)
{
    st_command_pool_t *pool = arg;
    pthread_setname_np(pthread_self(), ST_COMMAND_WORKER_THREAD);   /* top -H, /proc */
    PGconn *conn = NULL;   /* this worker's own connection */
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        st_job_t *job;
        while ((job = take_runnable(pool)) == NULL &&
               !(pool->stopping && pool->queued.head == NULL))
            pthread_cond_wait(&pool->work, &pool->mu);
        if (job == NULL)
            break;   /* stopping, and nothing is left to run */
        pthread_mutex_unlock(&pool->mu);

        if (job->groupable)
            group_run(pool, job, &conn);
        else
            job_run(job, &conn, pool->dsn);

        pthread_mutex_lock(&pool->mu);
        /* The lane this group frees is taken by this worker itself at the top of the
         * loop, with the starts queued behind it: nobody else needs waking. */
        if (job->groupable)
            pool->groups_running--;
        int was_empty = pool->done.head == NULL;
        for (st_job_t *j = job, *next; j != NULL; j = next) {
            next = j->next;
            list_push(&pool->done, j);
        }
        if (was_empty) {
            char one = 1;
            /* A full pipe already holds a wake-up; nothing is lost. */
            if (write(pool->wake_pipe[1], &one, 1) < 0 && errno != EAGAIN)
                st_log_error("could not wake the event loop", "%s", strerror(errno));
        }
    }
    pthread_mutex_unlock(&pool->mu);
    if (conn != NULL)
        PQfinish(conn);
    return NULL;
}

/* The loop's side: drain the pipe, answer every finished job. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    st_command_pool_t *pool = arg;
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    pthread_mutex_lock(&pool->mu);
    st_job_t *done = list_take_all(&pool->done);
    pthread_mutex_unlock(&pool->mu);
    while (done != NULL) {
        st_job_t *next = done->next;
        job_answer(done);
        done = next;
    }
}

st_err_t st_command_pool_new(void *base, const char *pg_dsn, int nworkers,
                             st_command_pool_t **out, st_errbuf_t *eb)
{
    *out = NULL;
    if (nworkers < 1 || nworkers > ST_COMMAND_POOL_MAX_WORKERS)
        return st_err_set(eb, ST_ERR_CONFIG, "the command pool needs 1 to %d workers, got %d",
                          ST_COMMAND_POOL_MAX_WORKERS, nworkers);
    st_command_pool_t *pool = calloc(1, sizeof *pool);
    if (pool == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the command pool");
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->work, NULL);
    pool->dsn = strdup(pg_dsn ? pg_dsn : "");
    if (pipe2(pool->wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        st_err_t err = st_err_set(eb, ST_ERR_INTERNAL, "could not create the command pool's pipe: %s",
                                  strerror(errno));
        free(pool->dsn);
        free(pool);
        return err;
    }
    pool->wake_event = event_new(base, pool->wake_pipe[0], EV_READ | EV_PERSIST, on_wake, pool);
    event_add(pool->wake_event, NULL);
    for (int i = 0; i < nworkers; i++) {
        if (pthread_create(&pool->workers[i], NULL, worker_main, pool) != 0) {
            st_err_t err = st_err_set(eb, ST_ERR_INTERNAL, "could not start command worker %d", i);
            pool->nworkers = i;
            st_command_pool_free(pool);
            return err;
        }
        pool->nworkers = i + 1;
    }
    *out = pool;
    return ST_OK;
}

void st_command_pool_submit(st_command_pool_t *pool, st_http_req_t *req, st_cmd_fn cmd,
                            st_named_cmd_fn named, const st_principal_t *who, const char *id,
                            const char *name, json_t *args, const st_command_then_t *then)
{
    st_job_t *job = calloc(1, sizeof *job);
    if (job == NULL)
        abort();
    job->req = st_http_defer(req);
    job->cmd = cmd;
    job->named = named;
    job->who = *who;
    job->id = id ? strdup(id) : NULL;
    job->name = name ? strdup(name) : NULL;
    job->args = args;
    if (then != NULL)
        job->then = *then;
    pthread_mutex_lock(&pool->mu);
    job->groupable = cmd != NULL && cmd == pool->group_cmd;
    list_push(&pool->queued, job);
    /* A start that finds every lane busy waits for the worker that frees one (it takes
     * the queued starts as its next group); waking an idle worker for it would only
     * cost two context switches. */
    if (!job->groupable || pool->groups_running < pool->group_lanes)
        pthread_cond_signal(&pool->work);
    pthread_mutex_unlock(&pool->mu);
}

void st_command_pool_group(st_command_pool_t *pool, const char *kind, st_cmd_fn cmd,
                           st_cmd_group_fn group, int max, int lanes)
{
    static const char *const groups_help =
        "Groups of two or more commands run in one transaction, by outcome (committed,"
        " run_alone, commit_unknown)";
    char labels[96];
    snprintf(labels, sizeof labels, "command=\"%s\",outcome=\"committed\"", kind);
    pool->m_groups_committed = st_metrics_counter("strand_api_command_groups_total", groups_help,
                                                  labels);
    snprintf(labels, sizeof labels, "command=\"%s\",outcome=\"run_alone\"", kind);
    pool->m_groups_run_alone = st_metrics_counter("strand_api_command_groups_total", groups_help,
                                               labels);
    snprintf(labels, sizeof labels, "command=\"%s\",outcome=\"commit_unknown\"", kind);
    pool->m_groups_unknown = st_metrics_counter("strand_api_command_groups_total", groups_help,
                                                labels);
    snprintf(labels, sizeof labels, "command=\"%s\"", kind);
    pool->m_grouped = st_metrics_counter("strand_api_grouped_commands_total",
                                         "Commands committed in a group of two or more", labels);
    pthread_mutex_lock(&pool->mu);
    pool->group_cmd = max > 1 ? cmd : NULL;
    pool->group_fn = group;
    pool->group_max = max < ST_CMD_GROUP_MAX ? max : ST_CMD_GROUP_MAX;
    pool->group_lanes = lanes > 0 ? lanes : 1;
    pthread_mutex_unlock(&pool->mu);
}

void st_command_pool_free(st_command_pool_t *pool)
{
    if (pool == NULL)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->stopping = 1;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->nworkers; i++)
        pthread_join(pool->workers[i], NULL);
    /* The loop has stopped: answer what finished since its last turn (the replies are
     * buffered and go out, or not, as the server closes). */
    st_job_t *done = list_take_all(&pool->done);
    while (done != NULL) {
        st_job_t *next = done->next;
        free(done->then.ctx);   /* no waiting any more: the answer as it is */
        done->then.fn = NULL;
        job_answer(done);
        done = next;
    }
    event_free(pool->wake_event);
    close(pool->wake_pipe[0]);
    close(pool->wake_pipe[1]);
    pthread_cond_destroy(&pool->work);
    pthread_mutex_destroy(&pool->mu);
    free(pool->dsn);
    free(pool);
}

/* ---- POST routes bound to commands ------------------------------------------------ */

static void handle_command(st_http_req_t *req, void *ctx)
{
    st_command_route_t *route = ctx;
    json_t *args = st_http_body_object(req);
    if (args == NULL)
        return;
    st_command_pool_submit(route->api->pool, req, route->cmd, NULL, &route->api->current,
                           st_http_param(req, "id"), NULL, args, NULL);
}

void st_api_route_command(st_api_t *api, const char *pattern, st_cmd_fn cmd)
{
    if (api->nroutes == ST_API_MAX_COMMAND_ROUTES)
        abort();   /* a programming error: raise ST_API_MAX_COMMAND_ROUTES */
    st_command_route_t *route = &api->routes[api->nroutes++];
    route->api = api;
    route->cmd = cmd;
    st_http_route(api->svc->http, "POST", pattern, handle_command, route);
}
