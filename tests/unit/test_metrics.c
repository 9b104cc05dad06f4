/* test_metrics.c - the Prometheus registry and its text format. */
#include <stdlib.h>
#include <string.h>

#include "st_test.h"
#include "strand/metrics.h"

static int count_occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_counter_and_gauge(void)
{
    st_metric_t *c = st_metrics_counter("t_requests_total", "Requests", "code=\"200\"");
    st_metric_inc(c);
    st_metric_add(c, 2);
    CU_ASSERT_DOUBLE_EQUAL(st_metric_value(c), 3.0, 1e-9);
    CU_ASSERT_PTR_EQUAL(st_metrics_counter("t_requests_total", "Requests", "code=\"200\""), c);
    st_metric_t *g = st_metrics_gauge("t_backlog", "Backlog", NULL);
    st_metric_set(g, 42);
    CU_ASSERT_DOUBLE_EQUAL(st_metric_value(g), 42.0, 1e-9);
    char *text = st_metrics_render();
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TYPE t_requests_total counter\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "t_requests_total{code=\"200\"} 3\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "t_backlog 42\n"));
    free(text);
}

static void test_family_series_are_grouped(void)
{
    st_metrics_counter("t_grouped_total", "Grouped", "a=\"1\"");
    st_metrics_gauge("t_between", "Between", NULL);
    st_metric_inc(st_metrics_counter("t_grouped_total", "Grouped", "a=\"2\""));
    char *text = st_metrics_render();
    CU_ASSERT_EQUAL(count_occurrences(text, "# TYPE t_grouped_total"), 1);
    const char *first = strstr(text, "t_grouped_total{a=\"1\"}");
    const char *second = strstr(text, "t_grouped_total{a=\"2\"}");
    const char *between = strstr(text, "# TYPE t_between");
    CU_ASSERT_PTR_NOT_NULL_FATAL(first);
    CU_ASSERT_PTR_NOT_NULL_FATAL(second);
    CU_ASSERT_TRUE(first < second && (between < first || between > second));
    free(text);
}

static void test_histogram_buckets(void)
{
    st_metric_t *h = st_metrics_histogram("t_latency_seconds", "Latency", NULL);
    st_metric_observe(h, 0.0004);
    st_metric_observe(h, 0.003);
    st_metric_observe(h, 100);
    CU_ASSERT_DOUBLE_EQUAL(st_metric_value(h), 3.0, 1e-9);
    char *text = st_metrics_render();
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "t_latency_seconds_bucket{le=\"0.0005\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "t_latency_seconds_bucket{le=\"0.005\"} 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "t_latency_seconds_bucket{le=\"10\"} 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "t_latency_seconds_bucket{le=\"+Inf\"} 3\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "t_latency_seconds_count 3\n"));
    free(text);
}

ST_TEST_MAIN("metrics", ST_TEST(test_counter_and_gauge), ST_TEST(test_family_series_are_grouped),
             ST_TEST(test_histogram_buckets))
