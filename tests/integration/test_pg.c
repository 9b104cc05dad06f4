/*
 * test_pg - the PostgreSQL adapter against the real server: prepared statements are
 * made the second time a text is sent on a session, survive nothing they should not
 * (a reset session, DISCARD ALL), and can be turned off; a transaction's BEGIN and
 * queued statements ride along with its next statement or COMMIT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "st_test.h"
#include "strand/pg.h"

static const char *const sql_probe = "SELECT $1::int + 1";

/* Number of prepared statements on this session whose text is `sql_probe`. */
static long prepared_count(PGconn *conn)
{
    static const char *const sql_count =
        "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1";
    const char *params[] = {sql_probe};
    PGresult *res = PQexecParams(conn, sql_count, 1, NULL, params, NULL, NULL, 0);
    long n = PQresultStatus(res) == PGRES_TUPLES_OK ? atol(PQgetvalue(res, 0, 0)) : -1;
    PQclear(res);
    return n;
}

/* The number in the one-row, one-column answer of `sql` run through st_pg_exec(), or
 * -1 (the error is printed). */
static long number_of(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
    PGresult *res = NULL;
    st_errbuf_t eb;
    if (st_pg_exec(conn, sql, nparams, params, &res, &eb) != ST_OK) {
        fprintf(stderr, "%s: %s\n", sql, eb.msg);
        return -1;
    }
    long n = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    return n;
}

/* Runs the probe with `v` and returns its answer, or -1. */
static long probe(PGconn *conn, const char *v)
{
    const char *params[] = {v};
    return number_of(conn, sql_probe, 1, params);
}

/* A new session, with prepared statements on or off (the test stops here if
 * PostgreSQL cannot be reached). */
static PGconn *connect_session(int prepared)
{
    st_pg_set_prepared(prepared);
    PGconn *conn = NULL;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_pg_connect(getenv("STRAND_PG_DSN"), "test_pg", &conn, &eb), ST_OK);
    return conn;
}

static void test_prepared_on_second_use(void)
{
    PGconn *conn = connect_session(1);
    st_errbuf_t eb;
    CU_ASSERT_EQUAL(probe(conn, "1"), 2);
    CU_ASSERT_EQUAL(prepared_count(conn), 0);   /* once: sent as text */
    CU_ASSERT_EQUAL(probe(conn, "2"), 3);
    CU_ASSERT_EQUAL(prepared_count(conn), 1);   /* twice: prepared and run by name */
    CU_ASSERT_EQUAL(probe(conn, "3"), 4);
    CU_ASSERT_EQUAL(prepared_count(conn), 1);
    /* Statement errors come back as before. */
    const char *bad[] = {"x"};
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_probe, 1, bad, NULL, &eb), ST_ERR_INVALID);
    /* The pooler case: the session forgets its statements. The next call fails once
     * (the caller's transaction would be retried), then the text is prepared again. */
    PQclear(PQexec(conn, "DISCARD ALL"));
    CU_ASSERT_EQUAL(probe(conn, "4"), -1);
    CU_ASSERT_EQUAL(probe(conn, "5"), 6);
    CU_ASSERT_EQUAL(probe(conn, "6"), 7);
    CU_ASSERT_EQUAL(prepared_count(conn), 1);
    /* A reset connection is a new session: nothing is assumed prepared. */
    PQreset(conn);
    CU_ASSERT_EQUAL_FATAL(PQstatus(conn), CONNECTION_OK);
    CU_ASSERT_EQUAL(probe(conn, "7"), 8);
    CU_ASSERT_EQUAL(prepared_count(conn), 0);
    CU_ASSERT_EQUAL(probe(conn, "8"), 9);
    CU_ASSERT_EQUAL(prepared_count(conn), 1);
    /* Not for transaction control or other utility statements. */
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_commit(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_commit(conn, &eb), ST_OK);
    PGresult *res = PQexec(conn, "SELECT count(*) FROM pg_prepared_statements");
    CU_ASSERT_STRING_EQUAL(PQgetvalue(res, 0, 0), "1");
    PQclear(res);
    PQfinish(conn);
}

static void test_prepared_off(void)
{
    PGconn *conn = connect_session(0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(probe(conn, "1"), 2);
    CU_ASSERT_EQUAL(prepared_count(conn), 0);
    PQfinish(conn);
    st_pg_set_prepared(1);
}

/* st_pg_begin() sends its BEGIN with the first statement: that statement runs inside
 * the transaction (whether sent as text, prepared in the same pipeline, or by name),
 * errors come back as before, and an empty transaction costs nothing. */
static void test_begin_with_first_statement(void)
{
    PGconn *conn = connect_session(1);
    st_errbuf_t eb;
    PQclear(PQexec(conn, "CREATE TEMP TABLE t (v int PRIMARY KEY)"));
    static const char *const sql_insert = "INSERT INTO t VALUES ($1::int)";
    static const char *const sql_count = "SELECT count(*) FROM t";
    /* text (first sighting), prepared in the pipeline (second), by name (third) */
    for (int round = 0; round < 3; round++) {
        char v[8];
        snprintf(v, sizeof v, "%d", round);
        const char *params[] = {v};
        CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
        CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);   /* nothing sent yet */
        CU_ASSERT_EQUAL(st_pg_exec(conn, sql_insert, 1, params, NULL, &eb), ST_OK);
        CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_INTRANS);
        st_pg_rollback(conn);
        CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);
        PGresult *res = NULL;
        CU_ASSERT_EQUAL(st_pg_exec(conn, sql_count, 0, NULL, &res, &eb), ST_OK);
        CU_ASSERT_STRING_EQUAL(res ? PQgetvalue(res, 0, 0) : "", "0");   /* rolled back */
        PQclear(res);
    }
    /* committed */
    const char *one[] = {"1"};
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_insert, 1, one, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_commit(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);
    /* the first statement fails: its own error, the transaction aborted */
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_insert, 1, one, NULL, &eb), ST_ERR_DUPLICATE);
    CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_INERROR);
    st_pg_rollback(conn);
    /* a failure the caller ignores: the COMMIT after it commits nothing and says so
     * (PostgreSQL answers it with ROLLBACK, not an error) */
    const char *two[] = {"2"};
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_insert, 1, two, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_insert, 1, one, NULL, &eb), ST_ERR_DUPLICATE);
    CU_ASSERT_EQUAL(st_pg_commit(conn, &eb), ST_ERR_INTERNAL);
    CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);
    st_pg_rollback(conn);
    PGresult *kept = NULL;
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_count, 0, NULL, &kept, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(kept ? PQgetvalue(kept, 0, 0) : "", "1");   /* "2" not committed */
    PQclear(kept);
    /* a statement that fails to prepare inside the pipeline (sent twice: prepared the
     * second time) reports its own error too */
    static const char *const sql_bad = "SELECT v FROM t WHERE nope = $1";
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
        CU_ASSERT_NOT_EQUAL(st_pg_exec(conn, sql_bad, 1, one, NULL, &eb), ST_OK);
        CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "nope"));
        st_pg_rollback(conn);
    }
    /* a BEGIN left pending when the session ends does not follow the PGconn into a
     * new session */
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    PQreset(conn);
    CU_ASSERT_EQUAL_FATAL(PQstatus(conn), CONNECTION_OK);
    PQclear(PQexec(conn, "CREATE TEMP TABLE t (v int PRIMARY KEY)"));
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_insert, 1, one, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);   /* autocommitted */
    /* an empty transaction sends nothing */
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_commit(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);
    PGresult *res = NULL;
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_count, 0, NULL, &res, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(res ? PQgetvalue(res, 0, 0) : "", "1");
    PQclear(res);
    PQfinish(conn);
}

/* Queued statements go out with the transaction's next statement or its COMMIT, in
 * order, and their errors abort the transaction; st_pg_exec_commit() runs the last
 * statement and the COMMIT in one round trip. */
static void test_queued_statements(void)
{
    PGconn *conn = connect_session(1);
    st_errbuf_t eb;
    PQclear(PQexec(conn, "CREATE TEMP TABLE q (v int PRIMARY KEY, b bytea)"));
    static const char *const sql_insert = "INSERT INTO q (v, b) VALUES ($1::int, $2)";
    static const char *const sql_count = "SELECT count(*) FROM q";
    static const char *const sql_sum = "SELECT coalesce(sum(length(b)), 0) FROM q";
    int formats[] = {0, 1};
    int lengths[] = {0, 3};
    /* Five rounds, two queued inserts of one text each: first sighting as text, then
     * PREPAREd inside a pipeline, then by name; the parameters are copied (the buffer is
     * overwritten before the commit), binary ones with their length. */
    for (int round = 0; round < 5; round++) {
        char a[8], b[8], bytes[3] = {'x', '\0', 'y'};
        snprintf(a, sizeof a, "%d", 2 * round);
        snprintf(b, sizeof b, "%d", 2 * round + 1);
        const char *first[] = {a, bytes}, *second[] = {b, bytes};
        CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
        CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, first, lengths, formats, &eb), ST_OK);
        CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, second, lengths, formats, &eb), ST_OK);
        snprintf(a, sizeof a, "999");
        CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);   /* nothing sent yet */
        CU_ASSERT_EQUAL(st_pg_commit(conn, &eb), ST_OK);
        CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);
    }
    CU_ASSERT_EQUAL(number_of(conn, sql_count, 0, NULL), 10);
    CU_ASSERT_EQUAL(number_of(conn, sql_sum, 0, NULL), 30);
    CU_ASSERT_EQUAL(number_of(conn, "SELECT count(*) FROM q WHERE v = 999", 0, NULL), 0);
    /* the next statement of the transaction sees the queued rows; a rollback drops them */
    const char *p10[] = {"10", NULL};
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, p10, NULL, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(number_of(conn, sql_count, 0, NULL), 11);
    CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_INTRANS);
    st_pg_rollback(conn);
    CU_ASSERT_EQUAL(number_of(conn, sql_count, 0, NULL), 10);
    /* a failing queued statement fails the commit and takes the good ones with it */
    const char *dup[] = {"0", NULL};
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, p10, NULL, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, dup, NULL, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_commit(conn, &eb), ST_ERR_DUPLICATE);
    st_pg_rollback(conn);
    CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);
    CU_ASSERT_EQUAL(number_of(conn, sql_count, 0, NULL), 10);
    /* a statement whose PREPARE sat behind that failure in the pipeline was never
     * prepared: it runs later all the same */
    static const char *const sql_max = "SELECT max(v) FROM q WHERE v < $1::int";
    const char *lim[] = {"100"};
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_max, 1, lim, NULL, &eb), ST_OK);   /* first: text */
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, dup, NULL, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_max, 1, lim, NULL, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_commit(conn, &eb), ST_ERR_DUPLICATE);
    st_pg_rollback(conn);
    PGresult *res = NULL;
    CU_ASSERT_EQUAL(st_pg_exec(conn, sql_max, 1, lim, &res, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(res ? PQgetvalue(res, 0, 0) : "", "9");
    PQclear(res);
    /* st_pg_exec_commit: queued rows, the statement and the COMMIT in one round trip */
    const char *p11[] = {"11", NULL};
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, p11, NULL, NULL, &eb), ST_OK);
    res = NULL;
    CU_ASSERT_EQUAL(st_pg_exec_commit(conn, sql_count, 0, NULL, &res, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(res ? PQgetvalue(res, 0, 0) : "", "11");
    PQclear(res);
    CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);
    st_pg_rollback(conn);   /* callers always end with it: a no-op after the commit */
    CU_ASSERT_EQUAL(number_of(conn, sql_count, 0, NULL), 11);
    /* ...and when its statement fails, nothing is committed */
    const char *p12[] = {"12", NULL};
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, p12, NULL, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_exec_commit(conn, "SELECT 1 / 0", 0, NULL, NULL, &eb), ST_ERR_INVALID);
    st_pg_rollback(conn);
    CU_ASSERT_EQUAL(number_of(conn, sql_count, 0, NULL), 11);
    /* without st_pg_begin() a queued statement runs at once */
    const char *p13[] = {"13", NULL};
    CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, p13, NULL, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(number_of(conn, sql_count, 0, NULL), 12);
    /* a queue left behind when the session ends does not follow the PGconn */
    const char *p14[] = {"14", NULL};
    CU_ASSERT_EQUAL(st_pg_begin(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_pg_queue_bin(conn, sql_insert, 2, p14, NULL, NULL, &eb), ST_OK);
    PQreset(conn);
    CU_ASSERT_EQUAL_FATAL(PQstatus(conn), CONNECTION_OK);
    PQclear(PQexec(conn, "CREATE TEMP TABLE q (v int PRIMARY KEY, b bytea)"));
    CU_ASSERT_EQUAL(number_of(conn, sql_count, 0, NULL), 0);
    CU_ASSERT_EQUAL(PQtransactionStatus(conn), PQTRANS_IDLE);
    PQfinish(conn);
}

int main(void)
{
    if (!it_init("test_pg"))
        return 1;
    static const it_case_t cases[] = {
        {"a statement is prepared the second time it is sent", test_prepared_on_second_use},
        {"STRAND_PG_PREPARED=0 prepares nothing", test_prepared_off},
        {"BEGIN goes out with the first statement", test_begin_with_first_statement},
        {"queued statements go out with the next one or the COMMIT", test_queued_statements},
    };
    return it_run_suite("pg", cases, (int)(sizeof cases / sizeof cases[0]));
}
