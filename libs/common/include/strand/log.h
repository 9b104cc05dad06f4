/*
 * log.h - JSON-line logging to stderr.
 *
 * One line per event: {"ts":"2026-11-23T05:20:43.123Z","level":"info","service":"api",
 * "msg":"could not claim outbox rows","detail":"...","hint":"..."}. `msg` is a short
 * factual sentence; detail and hint are optional. Thread-safe (one write(2) per line).
 */
#ifndef STRAND_LOG_H
#define STRAND_LOG_H

typedef enum { ST_LOG_DEBUG, ST_LOG_INFO, ST_LOG_WARN, ST_LOG_ERROR } st_log_level_t;

/* Sets the service name printed on every line and the minimum level.
 * `service` is copied. Call once at start-up, before threads start. */
void st_log_init(const char *service, st_log_level_t min_level);

/* Parses "debug"/"info"/"warn"/"error"; returns ST_LOG_INFO for anything else. */
st_log_level_t st_log_level_parse(const char *text);

/* Writes one line. `detail_fmt` may be NULL; `hint` may be NULL. */
void st_log_write(st_log_level_t level, const char *msg, const char *hint,
                  const char *detail_fmt, ...) __attribute__((format(printf, 4, 5)));

#define st_log_debug(msg, ...) st_log_write(ST_LOG_DEBUG, msg, NULL, __VA_ARGS__)
#define st_log_info(msg, ...)  st_log_write(ST_LOG_INFO, msg, NULL, __VA_ARGS__)
#define st_log_warn(msg, ...)  st_log_write(ST_LOG_WARN, msg, NULL, __VA_ARGS__)
#define st_log_error(msg, ...) st_log_write(ST_LOG_ERROR, msg, NULL, __VA_ARGS__)

#endif
