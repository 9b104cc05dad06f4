/*
 * timer_bench.c - timer lateness against a running stack (strand-scheduler running on
 * the database STRAND_PG_DSN names, e.g. after scripts/run.sh).
 *
 *   strand-timer-bench [TIMERS] [WINDOW_MS]      (default 10000 timers over 20000 ms)
 *
 * Schedules TIMERS timers due evenly over WINDOW_MS starting 2 s from now (through
 * st_timer_schedule_tx, as the executor does), waits until all have fired, and prints
 * the firing lateness (fired_at - due_at) p50/p95/p99/max. The fired TIMER_DUE
 * signals name instances that do not exist; the executor drops them as unknown.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strand/pg.h"
#include "strand/timer.h"
#include "strand/util.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    int window_ms = argc > 2 ? atoi(argv[2]) : 20000;
    const char *dsn = getenv("STRAND_PG_DSN");
    if (dsn == NULL) {
        fprintf(stderr, "set STRAND_PG_DSN (eval \"$(scripts/stack.sh env)\")\n");
        return 2;
    }
    PGconn *conn;
    st_errbuf_t eb;
    if (st_pg_connect(dsn, "strand-timer-bench", &conn, &eb) != ST_OK) {
        fprintf(stderr, "%s\n", eb.msg);
        return 1;
    }
    char tag[40];
    st_uuid_new(tag);
    long long base = st_now_ms() + 2000;
    const int batch = 500;
    for (int i = 0; i < n; i += batch) {
        if (st_pg_begin(conn, &eb) != ST_OK)
            break;
        for (int j = i; j < i + batch && j < n; j++) {
            char id[40], token[80];
            st_uuid_new(id);
            snprintf(token, sizeof token, "bench-%s-%d", tag, j);
            long long due = base + (long long)j * window_ms / n;
            if (st_timer_schedule_tx(conn, id, token, "timer", due, NULL, &eb) != ST_OK) {
                fprintf(stderr, "schedule failed: %s\n", eb.msg);
                return 1;
            }
        }
        if (st_pg_commit(conn, &eb) != ST_OK) {
            fprintf(stderr, "%s\n", eb.msg);
            return 1;
        }
    }
    printf("scheduled %d timers over %d ms (tag %s)\n", n, window_ms, tag);
    char like[80];
    snprintf(like, sizeof like, "bench-%s-%%", tag);
    const char *params[] = {like};
    long long deadline = base + window_ms + 60000;
    long long fired = 0;
    while (st_now_ms() < deadline) {
        PGresult *res = NULL;
        if (st_pg_exec(conn, "SELECT count(*) FROM strand.timers WHERE waiting_token LIKE $1"
                             " AND fired_at IS NOT NULL", 1, params, &res, &eb) == ST_OK)
            fired = atoll(PQgetvalue(res, 0, 0));
        PQclear(res);
        if (fired == n)
            break;
        usleep(500 * 1000);
    }
    PGresult *res = NULL;
    if (st_pg_exec(conn,
                   "SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP"
                   " (ORDER BY extract(epoch FROM fired_at - due_at) * 1000),"
                   " max(extract(epoch FROM fired_at - due_at) * 1000),"
                   " min(extract(epoch FROM fired_at - due_at) * 1000)"
                   " FROM strand.timers WHERE waiting_token LIKE $1 AND fired_at IS NOT NULL",
                   1, params, &res, &eb) != ST_OK) {
        fprintf(stderr, "%s\n", eb.msg);
        return 1;
    }
    printf("fired %lld of %d\nlateness ms: p50/p95/p99 %s  max %s  min %s\n", fired, n,
           PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2));
    PQclear(res);
    PQfinish(conn);
    return fired == n ? 0 : 1;
}
