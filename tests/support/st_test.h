/*
 * st_test.h - the one way Strand's CUnit test programs are put together.
 *
 *   static void test_something(void) { CU_ASSERT_EQUAL(...); }
 *   ST_TEST_MAIN("module", ST_TEST(test_something), ST_TEST(test_other))
 *
 * Each program is one suite, run by ctest as its own process; it exits nonzero if any
 * assertion failed, so a failure can never hide in a green run.
 */
#ifndef STRAND_ST_TEST_H
#define STRAND_ST_TEST_H

#include <CUnit/Basic.h>
#include <stdio.h>

typedef struct {
    const char *name;
    CU_TestFunc fn;
} st_test_case_t;

#define ST_TEST(fn) {#fn, fn}

#define ST_TEST_MAIN(suite_name, ...)                                                   \
    int main(void)                                                                      \
    {                                                                                   \
        static const st_test_case_t cases[] = {__VA_ARGS__};                            \
        if (CU_initialize_registry() != CUE_SUCCESS)                                    \
            return 2;                                                                   \
        CU_pSuite suite = CU_add_suite(suite_name, NULL, NULL);                         \
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)                     \
            CU_add_test(suite, cases[i].name, cases[i].fn);                             \
        CU_basic_set_mode(CU_BRM_VERBOSE);                                              \
        CU_basic_run_tests();                                                           \
        unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed(); \
        unsigned ran = CU_get_number_of_tests_run();                                    \
        CU_cleanup_registry();                                                          \
        if (ran != sizeof cases / sizeof cases[0]) {                                    \
            fprintf(stderr, "only %u of %zu tests ran\n", ran,                          \
                    sizeof cases / sizeof cases[0]);                                    \
            return 1;                                                                   \
        }                                                                               \
        return failed == 0 ? 0 : 1;                                                     \
    }

#endif
