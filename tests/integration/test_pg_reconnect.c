/*
 * test_pg_reconnect.c - st_pg_reconnect(), the one reconnect of every service's
 * connection slot: after the server ends a session, the slot is connected anew and the
 * service's session settings (the API's statement_timeout and UTC) hold again. The old
 * API path reset the connection with PQreset, which silently dropped them; the first
 * case shows that, the second that the helper keeps them. And the SQLSTATE of a
 * cancelled statement is ST_ERR_TIMEOUT by its code.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "st_test.h"
#include "strand/pg.h"

static st_err_t setup(PGconn *conn, st_errbuf_t *eb)
{
    st_err_t err = st_pg_exec(conn, "SET statement_timeout = 1234", 0, NULL, NULL, eb);
    return err == ST_OK ? st_pg_exec(conn, "SET TimeZone = 'UTC'", 0, NULL, NULL, eb) : err;
}

/* Ends the session of `conn` from another connection, as a server restart would. */
static void end_session(PGconn *conn)
{
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)::int", PQbackendPID(conn));
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);
    st_errbuf_t eb;
    /* the first statement finds out that the session is gone */
    CU_ASSERT_NOT_EQUAL(st_pg_exec(conn, "SELECT 1", 0, NULL, NULL, &eb), ST_OK);
}

static char *show(PGconn *conn, const char *setting)
{
    char sql[64];
    snprintf(sql, sizeof sql, "SHOW %s", setting);
    PGresult *res = NULL;
    st_errbuf_t eb;
    if (st_pg_exec(conn, sql, 0, NULL, &res, &eb) != ST_OK)
        return strdup("(failed)");
    char *v = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return v;
}

static void test_reset_drops_settings(void)
{
    PGconn *conn = NULL;
    st_errbuf_t eb;
    CU_ASSERT_FATAL(st_pg_reconnect(&conn, getenv("STRAND_PG_DSN"), "test", setup, &eb) == ST_OK);
    end_session(conn);
    PQreset(conn);   /* what the API did before */
    CU_ASSERT_FATAL(PQstatus(conn) == CONNECTION_OK);
    char *v = show(conn, "statement_timeout");
    printf("\n  after PQreset: statement_timeout = %s\n", v);
    CU_ASSERT_STRING_NOT_EQUAL(v, "1234ms");
    free(v);
    PQfinish(conn);
}

static void test_reconnect_keeps_settings(void)
{
    PGconn *conn = NULL;
    st_errbuf_t eb;
    const char *dsn = getenv("STRAND_PG_DSN");
    CU_ASSERT_FATAL(st_pg_reconnect(&conn, dsn, "test", setup, &eb) == ST_OK);
    PGconn *first = conn;
    CU_ASSERT_EQUAL(st_pg_reconnect(&conn, dsn, "test", setup, &eb), ST_OK);
    CU_ASSERT_PTR_EQUAL(conn, first);   /* a live slot is left alone */
    end_session(conn);
    CU_ASSERT_FATAL(st_pg_reconnect(&conn, dsn, "test", setup, &eb) == ST_OK);
    char *v = show(conn, "statement_timeout");
    char *tz = show(conn, "TimeZone");
    printf("  after st_pg_reconnect: statement_timeout = %s, TimeZone = %s\n", v, tz);
    CU_ASSERT_STRING_EQUAL(v, "1234ms");
    CU_ASSERT_STRING_EQUAL(tz, "UTC");
    free(v);
    free(tz);
    /* the statement_timeout cancels by SQLSTATE 57014, which is ST_ERR_TIMEOUT */
    CU_ASSERT_EQUAL(st_pg_exec(conn, "SELECT pg_sleep(3)", 0, NULL, NULL, &eb), ST_ERR_TIMEOUT);
    PQfinish(conn);
}

static void test_reconnect_failure_empties_slot(void)
{
    PGconn *conn = NULL;
    st_errbuf_t eb;
    st_err_t err = st_pg_reconnect(&conn, "host=127.0.0.1 port=1 connect_timeout=2", "test",
                                   setup, &eb);
    CU_ASSERT_EQUAL(err, ST_ERR_DB);
    CU_ASSERT_PTR_NULL(conn);
}

int main(void)
{
    if (!it_init("test_pg_reconnect"))
        return 1;
    static const it_case_t cases[] = {
        {"PQreset drops session settings", test_reset_drops_settings},
        {"st_pg_reconnect keeps them", test_reconnect_keeps_settings},
        {"a failed reconnect leaves the slot empty", test_reconnect_failure_empties_slot},
    };
    return it_run_suite("pg_reconnect", cases, (int)(sizeof cases / sizeof cases[0]));
}
