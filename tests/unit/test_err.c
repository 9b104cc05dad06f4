/* test_err.c - the error table: names, messages, retryability, detail formatting. */
#include <string.h>

#include "st_test.h"
#include "strand/err.h"

static void test_names_and_messages(void)
{
    CU_ASSERT_STRING_EQUAL(st_err_name(ST_OK), "ST_OK");
    CU_ASSERT_STRING_EQUAL(st_err_name(ST_ERR_NOT_FOUND), "ST_ERR_NOT_FOUND");
    CU_ASSERT_STRING_EQUAL(st_err_message(ST_ERR_STALE), "stale or out-of-order signal");
    CU_ASSERT_STRING_EQUAL(st_err_name((st_err_t)999), "ST_ERR_UNKNOWN");
}

static void test_retryable_split(void)
{
    CU_ASSERT_TRUE(st_err_retryable(ST_ERR_DB));
    CU_ASSERT_TRUE(st_err_retryable(ST_ERR_SERIALIZATION));
    CU_ASSERT_TRUE(st_err_retryable(ST_ERR_KAFKA));
    CU_ASSERT_FALSE(st_err_retryable(ST_ERR_INVALID));
    CU_ASSERT_FALSE(st_err_retryable(ST_ERR_DUPLICATE));
    CU_ASSERT_FALSE(st_err_retryable(ST_OK));
}

static void test_set_formats_detail(void)
{
    st_errbuf_t eb;
    CU_ASSERT_EQUAL(st_err_set(&eb, ST_ERR_INVALID, "field %s is %d", "x", 3), ST_ERR_INVALID);
    CU_ASSERT_STRING_EQUAL(eb.msg, "field x is 3");
    CU_ASSERT_EQUAL(st_err_set(NULL, ST_ERR_LIMIT, "ignored"), ST_ERR_LIMIT);
}

ST_TEST_MAIN("err", ST_TEST(test_names_and_messages), ST_TEST(test_retryable_split),
             ST_TEST(test_set_formats_detail))
