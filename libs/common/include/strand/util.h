/*
 * util.h - identifiers and time.
 */
#ifndef STRAND_UTIL_H
#define STRAND_UTIL_H

/* Writes a new random (v4) UUID in canonical lower-case text form into `out`. */
void st_uuid_new(char out[37]);

/* True if `text` is a UUID in canonical text form. */
int st_uuid_valid(const char *text);

/* Wall-clock milliseconds since the Unix epoch. */
long long st_now_ms(void);

/* Monotonic seconds, for measuring durations. */
double st_mono_s(void);

#endif
