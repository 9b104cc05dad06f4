/* test_due_loop.c - the due loop's sleep rule (st_due_loop_sleep_ms): a row found due
 * when the round ends is claimed at once, not after a fixed sleep (issue 20: that sleep
 * was most of W3's p95 timer lateness, 5.4 ms), and a row another replica holds does
 * not make the loop spin. */
#include "st_test.h"
#include "strand/due_loop.h"

/* The round fired timers, and the next one fell due meanwhile: go round at once. */
static void test_due_after_work_goes_round_at_once(void)
{
    int looked_again = 0;
    CU_ASSERT_EQUAL(st_due_loop_sleep_ms(0, 3, &looked_again), -1);
}

/* Fell due between the claim and the next-due query (nothing processed): one more look
 * at once; due again after a round that claimed nothing: another replica holds it. */
static void test_due_elsewhere_sleeps_after_one_look(void)
{
    int looked_again = 0;
    CU_ASSERT_EQUAL(st_due_loop_sleep_ms(0, 0, &looked_again), -1);
    int sleep_ms = st_due_loop_sleep_ms(0, 0, &looked_again);
    CU_ASSERT_TRUE(sleep_ms > 0 && sleep_ms <= 10);
    CU_ASSERT_EQUAL(st_due_loop_sleep_ms(0, 0, &looked_again), sleep_ms);   /* no spin */
    /* The replica committed; this loop fires the next row: the next due row is again
     * looked at once. */
    CU_ASSERT_EQUAL(st_due_loop_sleep_ms(0, 1, &looked_again), -1);
}

/* A deadline ahead resets the rule and is slept to; none, or one past the cap, sleeps
 * the cap (a NOTIFY wakes the loop earlier). */
static void test_deadlines(void)
{
    int looked_again = 1;
    CU_ASSERT_EQUAL(st_due_loop_sleep_ms(7, 0, &looked_again), 7);
    CU_ASSERT_EQUAL(looked_again, 0);
    CU_ASSERT_EQUAL(st_due_loop_sleep_ms(-1, 0, &looked_again), 60000);
    CU_ASSERT_EQUAL(st_due_loop_sleep_ms(10LL * 60000, 0, &looked_again), 60000);
}

ST_TEST_MAIN("due_loop", ST_TEST(test_due_after_work_goes_round_at_once),
             ST_TEST(test_due_elsewhere_sleeps_after_one_look), ST_TEST(test_deadlines))
