/*
 * limits.c - the engine's process-wide limits (see engine.h, docs/configuration.md) and
 * the measure of a JSON value they are checked with.
 *
 * Values built by expressions share sub-values (jansson counts references), so an
 * array of eight copies of the state is cheap in memory but eight times larger as
 * text. st_value_fits() therefore walks the value as its JSON text would be written,
 * stopping as soon as a limit is passed: its cost is bounded by the limit, not by the
 * value, and it is charged to the run's work budget.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "engine_int.h"

static st_engine_limits_t limits = {
    .max_steps = 100000,
    .max_work = 2000000,
    .max_run_ms = 2000,
    .max_state_bytes = 4 << 20,
    .max_value_bytes = 1 << 20,
    .max_string = 65536,
    .max_data_depth = 64,
    .max_subworkflow_depth = 10,
    .clock_ms = NULL,
};

void st_engine_limits_default(st_engine_limits_t *out)
{
    static const st_engine_limits_t defaults = {100000, 2000000, 2000, 4 << 20, 1 << 20, 65536,
                                                64, 10, NULL};
    *out = defaults;
}

st_err_t st_engine_set_limits(const st_engine_limits_t *l, st_errbuf_t *eb)
{
    static const struct {
        const char *name;
        size_t offset;
        long long min, max;
        int is_int;
    } ranges[] = {
        {"max_steps", offsetof(st_engine_limits_t, max_steps), 10, 100000000, 0},
        {"max_work", offsetof(st_engine_limits_t, max_work), 1000, 10000000000LL, 0},
        {"max_run_ms", offsetof(st_engine_limits_t, max_run_ms), 10, 3600000, 0},
        {"max_state_bytes", offsetof(st_engine_limits_t, max_state_bytes), 1024, 1LL << 30, 0},
        {"max_value_bytes", offsetof(st_engine_limits_t, max_value_bytes), 1024, 1LL << 30, 0},
        {"max_string", offsetof(st_engine_limits_t, max_string), 64, 1LL << 30, 0},
        {"max_data_depth", offsetof(st_engine_limits_t, max_data_depth), 4, 1000, 1},
        {"max_subworkflow_depth", offsetof(st_engine_limits_t, max_subworkflow_depth), 0, 1000, 1},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        const char *field = (const char *)l + ranges[i].offset;
        long long v = ranges[i].is_int ? *(const int *)field : *(const long long *)field;
        if (v < ranges[i].min || v > ranges[i].max)
            return st_err_set(eb, ST_ERR_CONFIG, "engine limit %s must be from %lld to %lld, got %lld",
                              ranges[i].name, ranges[i].min, ranges[i].max, v);
    }
    limits = *l;
    return ST_OK;
}

const st_engine_limits_t *st_engine_limits(void)
{
    return &limits;
}

typedef struct {
    long long bytes, max_bytes;
    int max_depth;
    long long *work;
    int too_deep;
} measure_t;

static int digits(json_int_t v)
{
    char buf[32];
    return snprintf(buf, sizeof buf, "%lld", (long long)v);
}

/* Adds the size of `v` at nesting `depth`; 0 once a limit is passed. */
static int measure(measure_t *m, const json_t *v, int depth)
{
    if (m->work != NULL)
        (*m->work)--;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (depth >= m->max_depth) {
            m->too_deep = 1;
            return 0;
        }
        m->bytes += 2;
        const char *k;
        json_t *item;
        json_object_foreach((json_t *)v, k, item) {
            m->bytes += (long long)strlen(k) + 4;
            if (m->bytes > m->max_bytes || !measure(m, item, depth + 1))
                return 0;
        }
        break;
    }
    case JSON_ARRAY: {
        if (depth >= m->max_depth) {
            m->too_deep = 1;
            return 0;
        }
        m->bytes += 2;
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) {
            m->bytes += 1;
            if (m->bytes > m->max_bytes || !measure(m, item, depth + 1))
                return 0;
        }
        break;
    }
    case JSON_STRING:
        m->bytes += (long long)json_string_length(v) + 2;
        break;
    case JSON_INTEGER:
        m->bytes += digits(json_integer_value(v));
        break;
    case JSON_REAL:
        m->bytes += 17;
        break;
    default:
        m->bytes += 5;
        break;
    }
    return m->bytes <= m->max_bytes;
}

int st_value_fits(const json_t *v, long long max_bytes, int max_depth, long long *work,
                  int *too_deep)
{
    measure_t m = {0, max_bytes, max_depth, work, 0};
    int ok = v == NULL || measure(&m, v, 0);
    if (too_deep != NULL)
        *too_deep = m.too_deep;
    return ok;
}

st_err_t st_engine_data_check(const json_t *value, st_errbuf_t *eb)
{
    int too_deep = 0;
    if (st_value_fits(value, limits.max_state_bytes, limits.max_data_depth, NULL, &too_deep))
        return ST_OK;
    if (too_deep)
        return st_err_set(eb, ST_ERR_LIMIT, "data nested deeper than %d levels (STRAND_DATA_MAX_DEPTH)",
                          limits.max_data_depth);
    return st_err_set(eb, ST_ERR_LIMIT, "data larger than %lld bytes as JSON (STRAND_STATE_MAX_BYTES)",
                      limits.max_state_bytes);
}
