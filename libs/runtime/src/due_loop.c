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
#define DUE_ELSEWHERE_SLEEP_MS 5   /* a due row another replica has claimed */

struct st_due_loop {
    st_service_t *svc;
    st_due_loop_config_t cfg;
    pthread_t thread;
    int stop_pipe[2];
    PGconn *conn;
    int pg_up;   /* atomic */
    int test_delay_ms;   /* STRAND_TEST_DUE_LOOP_DELAY_MS (tests only; see next_wait()) */
};

/* Reads what the server sent and discards the notifications libpq holds; returns 1
 * if there was any. A notification that arrived while a query ran was read off the
 * socket with the query's result and sits in libpq's buffer: poll(2) on the socket
 * would not report it again, so every query is followed by this before a sleep. */
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

/* The owner's next_wait_ms(). With the test-only STRAND_TEST_DUE_LOOP_DELAY_MS set, it
 * runs inside a REPEATABLE READ transaction that first sleeps that long on the server:
 * the query then sees the database as it was before the sleep, so a row committed
 * (and notified) during the sleep is missed by the query exactly as one committed
 * while a real query runs. This widens a window of about a millisecond so that tests
 * can hit it (tests/integration/test_wakeups.c); never set it in production. */
static long long next_wait(st_due_loop_t *l)
{
    if (l->test_delay_ms <= 0)
        return l->cfg.next_wait_ms(l->conn, l->cfg.ctx);
    char sleep_sql[64];
    snprintf(sleep_sql, sizeof sleep_sql, "SELECT pg_sleep(%d / 1000.0)", l->test_delay_ms);
    st_errbuf_t eb;
    long long wait = -1;
    if (st_pg_exec(l->conn, "BEGIN ISOLATION LEVEL REPEATABLE READ", 0, NULL, NULL, &eb) == ST_OK &&
        st_pg_exec(l->conn, sleep_sql, 0, NULL, NULL, &eb) == ST_OK)
        wait = l->cfg.next_wait_ms(l->conn, l->cfg.ctx);
    st_pg_exec(l->conn, "COMMIT", 0, NULL, NULL, &eb);
    return wait;
}

int st_due_loop_sleep_ms(long long wait_ms, int processed, int *looked_again)
{
    if (processed > 0 || wait_ms != 0)
        *looked_again = 0;
    if (wait_ms == 0) {
        /* A row is due already. It fell due while the loop worked: claim it at once (a
         * fixed sleep here was most of the timers' p95 lateness, issue 20). Still due
         * after that second look: another replica holds it; let it commit. */
        if (!*looked_again) {
            *looked_again = 1;
            return -1;
        }
        return DUE_ELSEWHERE_SLEEP_MS;
    }
    if (wait_ms < 0 || wait_ms > MAX_SLEEP_MS)
        return MAX_SLEEP_MS;
    return (int)wait_ms;
}

static void *due_main(void *arg)
{
    st_due_loop_t *l = arg;
    int backoff_ms = 100;
    int looked_again = 0;   /* see st_due_loop_sleep_ms() */
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
        long long wait = next_wait(l);
        /* A row committed while that query ran may be missing from its answer, and
         * its notification is already in libpq's buffer, not on the socket: look
         * again rather than sleep past the new deadline (issue 15). */
        if (drain_notifies(l->conn))
            continue;
        int sleep_ms = st_due_loop_sleep_ms(wait, n, &looked_again);
        if (sleep_ms < 0)
            continue;
        struct pollfd pfd[2] = {{.fd = PQsocket(l->conn), .events = POLLIN},
                                {.fd = l->stop_pipe[0], .events = POLLIN}};
        poll(pfd, 2, sleep_ms);
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
    const char *delay = getenv("STRAND_TEST_DUE_LOOP_DELAY_MS");
    l->test_delay_ms = delay != NULL ? atoi(delay) : 0;
    if (l->test_delay_ms > 10000)
        l->test_delay_ms = 10000;
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
