/* test_pg_errors.c - SQLSTATE -> st_err_t: codes decide, never the message text. */
#include "st_test.h"
#include "strand/pg.h"

static void test_exact_codes(void)
{
    CU_ASSERT_EQUAL(st_pg_sqlstate_err("57014"), ST_ERR_TIMEOUT);         /* statement_timeout */
    CU_ASSERT_EQUAL(st_pg_sqlstate_err("40001"), ST_ERR_SERIALIZATION);
    CU_ASSERT_EQUAL(st_pg_sqlstate_err("40P01"), ST_ERR_SERIALIZATION);   /* deadlock */
    CU_ASSERT_EQUAL(st_pg_sqlstate_err("23505"), ST_ERR_DUPLICATE);
}

static void test_classes(void)
{
    CU_ASSERT_EQUAL(st_pg_sqlstate_err("22P02"), ST_ERR_INVALID);         /* bad text repr */
    CU_ASSERT_EQUAL(st_pg_sqlstate_err("23503"), ST_ERR_INVALID);         /* foreign key */
    CU_ASSERT_EQUAL(st_pg_sqlstate_err("08006"), ST_ERR_DB);              /* connection failure */
    CU_ASSERT_EQUAL(st_pg_sqlstate_err("57P01"), ST_ERR_DB);              /* admin shutdown */
    CU_ASSERT_EQUAL(st_pg_sqlstate_err("42P01"), ST_ERR_INTERNAL);        /* undefined table */
    CU_ASSERT_EQUAL(st_pg_sqlstate_err(NULL), ST_ERR_DB);
    CU_ASSERT_EQUAL(st_pg_sqlstate_err(""), ST_ERR_DB);
}

static void test_retryability(void)
{
    /* a timed-out statement and a lost connection may succeed later; a bad value won't */
    CU_ASSERT_TRUE(st_err_retryable(st_pg_sqlstate_err("57014")));
    CU_ASSERT_TRUE(st_err_retryable(st_pg_sqlstate_err("40P01")));
    CU_ASSERT_TRUE(st_err_retryable(st_pg_sqlstate_err("08006")));
    CU_ASSERT_FALSE(st_err_retryable(st_pg_sqlstate_err("22P02")));
}

ST_TEST_MAIN("pg_errors", ST_TEST(test_exact_codes), ST_TEST(test_classes),
             ST_TEST(test_retryability))
