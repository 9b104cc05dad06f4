/* due_loop.c - the deadline-driven loop (see due_loop.h). */
#include "strand/due_loop.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strand/log.h"
#include "strand/pg.h"

#define MAX_SLEEP_MS 60000

struct st_due_loop {
    st_service_t *svc;
    st_due_loop_config_t cfg;
    pthread_t thread;
    int stop_pipe[2];
    PGconn *conn;
    int pg_up;   /* atomic */
};

static int drain_notifies(PGconn *conn)
{
    int any = 0;
    PQconsumeInput(conn);
    PGnotify *note;
    while ((note = PQnotifies(conn)) != NULL) {
        PQfreemem(note);
        any = 1;
    }
    return any;
}

/* LISTENs on the loop's channel, if it has one. */
static st_err_t listen_channel(st_due_loop_t *l, st_errbuf_t *eb)
{
    if (l->cfg.channel == NULL)
        return ST_OK;
    char sql[128];
    snprintf(sql, sizeof sql, "LISTEN %s", l->cfg.channel);
    return st_pg_exec(l->conn, sql, 0, NULL, NULL, eb);
}

static int connect_listen(st_due_loop_t *l)
{
    st_errbuf_t eb;
    char app[64];
    snprintf(app, sizeof app, "strand-%s", l->cfg.name);
    if (st_pg_connect(l->svc->cfg.pg_dsn, app, &l->conn, &eb) != ST_OK ||
        listen_channel(l, &eb) != ST_OK) {
        st_log_warn("could not connect to PostgreSQL", "%s: %s", l->cfg.name, eb.msg);
        if (l->conn != NULL)
            PQfinish(l->conn);
        l->conn = NULL;
        return 0;
    }
    __atomic_store_n(&l->pg_up, 1, __ATOMIC_RELEASE);
    return 1;
}

static void *due_main(void *arg)
{
    st_due_loop_t *l = arg;
    int backoff_ms = 100;
    while (!st_service_stopping(l->svc)) {
        if (l->conn == NULL || PQstatus(l->conn) != CONNECTION_OK) {
            __atomic_store_n(&l->pg_up, 0, __ATOMIC_RELEASE);
            if (l->conn != NULL)
                PQfinish(l->conn);
            l->conn = NULL;
            if (!connect_listen(l)) {
                struct pollfd p = {.fd = l->stop_pipe[0], .events = POLLIN};
                poll(&p, 1, backoff_ms);
                backoff_ms = backoff_ms < 5000 ? backoff_ms * 2 : 5000;
                continue;
            }
            backoff_ms = 100;
        }
        int n;
        while ((n = l->cfg.process(l->conn, l->cfg.ctx)) >= l->cfg.batch &&
               !st_service_stopping(l->svc))
            ;
        if (n < 0) {
            struct pollfd p = {.fd = l->stop_pipe[0], .events = POLLIN};
            poll(&p, 1, 200);
            continue;
        }
        if (drain_notifies(l->conn))
            continue;   /* something changed while we worked */
        long long wait = l->cfg.next_wait_ms(l->conn, l->cfg.ctx);
        if (wait < 0 || wait > MAX_SLEEP_MS)
            wait = MAX_SLEEP_MS;
        if (wait == 0)
            wait = 5;   /* due now but claimed by another replica: let it commit */
        struct pollfd pfd[2] = {{.fd = PQsocket(l->conn), .events = POLLIN},
                                {.fd = l->stop_pipe[0], .events = POLLIN}};
        poll(pfd, 2, (int)wait);
        drain_notifies(l->conn);
    }
    if (l->conn != NULL)
        PQfinish(l->conn);
    return NULL;
}

static int pg_ready(void *ctx)
{
    st_due_loop_t *l = ctx;
    return __atomic_load_n(&l->pg_up, __ATOMIC_ACQUIRE);
}

st_err_t st_due_loop_start(st_service_t *svc, const st_due_loop_config_t *cfg,
                           st_due_loop_t **out, st_errbuf_t *eb)
{
    st_due_loop_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the %s loop", cfg->name);
    l->svc = svc;
    l->cfg = *cfg;
    if (pipe(l->stop_pipe) != 0 || pthread_create(&l->thread, NULL, due_main, l) != 0) {
        free(l);
        return st_err_set(eb, ST_ERR_INTERNAL, "could not start the %s loop", cfg->name);
    }
    st_service_add_ready(svc, "postgres", pg_ready, l);
    *out = l;
    return ST_OK;
}

void st_due_loop_stop(st_due_loop_t *l)
{
    if (l == NULL)
        return;
    ssize_t ignored = write(l->stop_pipe[1], "x", 1);
    (void)ignored;
    pthread_join(l->thread, NULL);
    close(l->stop_pipe[0]);
    close(l->stop_pipe[1]);
    free(l);
}
