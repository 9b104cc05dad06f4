/* log.c - JSON-line logger (see log.h). Strings are escaped with jansson. */
#include "strand/log.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char log_service[64] = "strand";
static st_log_level_t log_min_level = ST_LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void st_log_init(const char *service, st_log_level_t min_level)
{
    snprintf(log_service, sizeof log_service, "%s", service);
    log_min_level = min_level;
}

st_log_level_t st_log_level_parse(const char *text)
{
    for (int i = 0; i < 4; i++)
        if (text != NULL && strcasecmp(text, level_names[i]) == 0)
            return (st_log_level_t)i;
    return ST_LOG_INFO;
}

void st_log_write(st_log_level_t level, const char *msg, const char *hint,
                  const char *detail_fmt, ...)
{
    if (level < log_min_level)
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof ts - n, ".%03ldZ", (long)(tv.tv_usec / 1000));

    json_t *line = json_object();
    json_object_set_new(line, "ts", json_string(ts));
    json_object_set_new(line, "level", json_string(level_names[level]));
    json_object_set_new(line, "service", json_string(log_service));
    json_object_set_new(line, "msg", json_string(msg));
    if (detail_fmt != NULL) {
        char detail[1024];
        va_list ap;
        va_start(ap, detail_fmt);
        vsnprintf(detail, sizeof detail, detail_fmt, ap);
        va_end(ap);
        json_object_set_new(line, "detail", json_string(detail));
    }
    if (hint != NULL)
        json_object_set_new(line, "hint", json_string(hint));
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(line);
    if (text == NULL)
        return;
    size_t len = strlen(text);
    text[len] = '\n';   /* json_dumps leaves room for the NUL we overwrite */
    ssize_t ignored = write(STDERR_FILENO, text, len + 1);
    (void)ignored;
    free(text);
}
