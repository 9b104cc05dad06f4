/*
 * metrics.h - a process-wide Prometheus registry (counters, gauges, histograms).
 *
 * Series are created on first use and never freed: the returned st_metric_t pointers
 * are borrowed and valid for the life of the process, so hot paths look a series up
 * once and keep the pointer. Updates are lock-free; registration takes a mutex.
 */
#ifndef STRAND_METRICS_H
#define STRAND_METRICS_H

typedef struct st_metric st_metric_t;

/* Returns the series `name{labels}`, creating it if needed. `labels` is the text
 * between the braces (`route="/v1/instances",status="200"`) or NULL. The first call
 * for a name fixes its help text and type; a later call with another type aborts. */
st_metric_t *st_metrics_counter(const char *name, const char *help, const char *labels);
st_metric_t *st_metrics_gauge(const char *name, const char *help, const char *labels);
/* Histogram with latency buckets from 0.5 ms to 10 s (values in seconds). */
st_metric_t *st_metrics_histogram(const char *name, const char *help, const char *labels);

void st_metric_inc(st_metric_t *m);                /* counter += 1 */
void st_metric_add(st_metric_t *m, double delta);  /* counter or gauge += delta */
void st_metric_set(st_metric_t *m, double value);  /* gauge = value */
void st_metric_observe(st_metric_t *m, double value); /* histogram sample */
double st_metric_value(const st_metric_t *m);      /* counter/gauge value, or histogram count */

/* Renders every series in the Prometheus text format 0.0.4.
 * Caller frees the returned string with free(). */
char *st_metrics_render(void);

#endif
