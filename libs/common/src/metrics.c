/* metrics.c - Prometheus registry (see metrics.h). */
#include "strand/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };
static const char *const type_names[] = {"counter", "gauge", "histogram"};

static const double bucket_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                       0.1,    0.25,  0.5,    1,     2.5,   5,     10};
#define NBUCKETS (sizeof bucket_bounds / sizeof bucket_bounds[0])

struct st_metric {
    char name[96];
    char labels[192];
    char help[160];
    enum metric_type type;
    double value;                      /* counter/gauge value, histogram sum */
    uint64_t count;                    /* histogram sample count */
    uint64_t buckets[NBUCKETS];        /* histogram: samples <= bound (non-cumulative) */
    struct st_metric *next;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct st_metric *registry_head;
static struct st_metric **registry_tail = &registry_head;

static st_metric_t *lookup(const char *name, const char *help, const char *labels,
                           enum metric_type type)
{
    if (labels == NULL)
        labels = "";
    pthread_mutex_lock(&registry_lock);
    struct st_metric *m;
    for (m = registry_head; m != NULL; m = m->next) {
        if (strcmp(m->name, name) != 0)
            continue;
        if (m->type != type) {
            fprintf(stderr, "metric %s registered with two types\n", name);
            abort();
        }
        if (strcmp(m->labels, labels) == 0)
            break;
    }
    if (m == NULL) {
        m = calloc(1, sizeof *m);
        if (m == NULL)
            abort();
        snprintf(m->name, sizeof m->name, "%s", name);
        snprintf(m->labels, sizeof m->labels, "%s", labels);
        snprintf(m->help, sizeof m->help, "%s", help);
        m->type = type;
        *registry_tail = m;
        registry_tail = &m->next;
    }
    pthread_mutex_unlock(&registry_lock);
    return m;
}

st_metric_t *st_metrics_counter(const char *name, const char *help, const char *labels)
{
    return lookup(name, help, labels, METRIC_COUNTER);
}

st_metric_t *st_metrics_gauge(const char *name, const char *help, const char *labels)
{
    return lookup(name, help, labels, METRIC_GAUGE);
}

st_metric_t *st_metrics_histogram(const char *name, const char *help, const char *labels)
{
    return lookup(name, help, labels, METRIC_HISTOGRAM);
}

static void atomic_add_double(double *target, double delta)
{
    double old, desired;
    __atomic_load(target, &old, __ATOMIC_RELAXED);
    do {
        desired = old + delta;
    } while (!__atomic_compare_exchange(target, &old, &desired, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
}

void st_metric_inc(st_metric_t *m) { atomic_add_double(&m->value, 1.0); }
void st_metric_add(st_metric_t *m, double delta) { atomic_add_double(&m->value, delta); }
void st_metric_set(st_metric_t *m, double value) { __atomic_store(&m->value, &value, __ATOMIC_RELAXED); }

void st_metric_observe(st_metric_t *m, double value)
{
    size_t i = 0;
    while (i < NBUCKETS && value > bucket_bounds[i])
        i++;
    if (i < NBUCKETS)
        __atomic_add_fetch(&m->buckets[i], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&m->count, 1, __ATOMIC_RELAXED);
    atomic_add_double(&m->value, value);
}

double st_metric_value(const st_metric_t *m)
{
    if (m->type == METRIC_HISTOGRAM)
        return (double)__atomic_load_n(&m->count, __ATOMIC_RELAXED);
    double v;
    __atomic_load(&m->value, &v, __ATOMIC_RELAXED);
    return v;
}

/* Appends printf output to a growing buffer. */
typedef struct { char *data; size_t len, cap; } strbuf_t;

static void sb_printf(strbuf_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf_t *sb, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(sb->data + sb->len, sb->cap - sb->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sb->cap - sb->len) {
            sb->len += (size_t)n;
            return;
        }
        sb->cap = sb->cap * 2 + (size_t)n + 64;
        sb->data = realloc(sb->data, sb->cap);
        if (sb->data == NULL)
            abort();
    }
}

static void render_labels(strbuf_t *sb, const char *labels, const char *extra)
{
    if (labels[0] == '\0' && extra == NULL)
        return;
    sb_printf(sb, "{%s%s%s}", labels, labels[0] && extra ? "," : "", extra ? extra : "");
}

static void render_series(strbuf_t *sb, struct st_metric *m)
{
    if (m->type != METRIC_HISTOGRAM) {
        double v;
        __atomic_load(&m->value, &v, __ATOMIC_RELAXED);
        sb_printf(sb, "%s", m->name);
        render_labels(sb, m->labels, NULL);
        sb_printf(sb, " %.17g\n", v);
        return;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i < NBUCKETS; i++) {
        cumulative += __atomic_load_n(&m->buckets[i], __ATOMIC_RELAXED);
        char le[48];
        snprintf(le, sizeof le, "le=\"%g\"", bucket_bounds[i]);
        sb_printf(sb, "%s_bucket", m->name);
        render_labels(sb, m->labels, le);
        sb_printf(sb, " %llu\n", (unsigned long long)cumulative);
    }
    uint64_t count = __atomic_load_n(&m->count, __ATOMIC_RELAXED);
    double sum;
    __atomic_load(&m->value, &sum, __ATOMIC_RELAXED);
    sb_printf(sb, "%s_bucket", m->name);
    render_labels(sb, m->labels, "le=\"+Inf\"");
    sb_printf(sb, " %llu\n%s_sum", (unsigned long long)count, m->name);
    render_labels(sb, m->labels, NULL);
    sb_printf(sb, " %.17g\n%s_count", sum, m->name);
    render_labels(sb, m->labels, NULL);
    sb_printf(sb, " %llu\n", (unsigned long long)count);
}

char *st_metrics_render(void)
{
    strbuf_t sb = {malloc(4096), 0, 4096};
    if (sb.data == NULL)
        abort();
    sb.data[0] = '\0';
    pthread_mutex_lock(&registry_lock);
    /* Families in registration order; all series of a family together. */
    for (struct st_metric *m = registry_head; m != NULL; m = m->next) {
        int rendered = 0;
        for (struct st_metric *p = registry_head; !rendered && p != m; p = p->next)
            rendered = strcmp(p->name, m->name) == 0;
        if (rendered)
            continue;
        sb_printf(&sb, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name,
                  type_names[m->type]);
        for (struct st_metric *p = m; p != NULL; p = p->next)
            if (strcmp(p->name, m->name) == 0)
                render_series(&sb, p);
    }
    pthread_mutex_unlock(&registry_lock);
    return sb.data;
}
