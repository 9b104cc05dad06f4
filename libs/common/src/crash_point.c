/* crash_point.c - named crash points for tests (see crash_point.h). */
#include "strand/crash_point.h"

#ifdef STRAND_CRASH_POINTS

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strand/log.h"

static pthread_once_t armed_once = PTHREAD_ONCE_INIT;
static char armed_name[128];   /* "" when STRAND_CRASH_AT is unset: every point passes */
static long armed_pass = 1;
static long passes;            /* atomic: passes through the armed point so far */

/* Reads STRAND_CRASH_AT ("<point>" or "<point>:<N>") once. */
static void arm(void)
{
    const char *spec = getenv("STRAND_CRASH_AT");
    if (spec == NULL || spec[0] == '\0')
        return;
    size_t len = strcspn(spec, ":");
    if (len >= sizeof armed_name)
        len = sizeof armed_name - 1;
    memcpy(armed_name, spec, len);
    armed_name[len] = '\0';
    if (spec[len] == ':') {
        char *end = NULL;
        long n = strtol(spec + len + 1, &end, 10);
        armed_pass = end != spec + len + 1 && *end == '\0' && n >= 1 ? n : 1;
    }
    st_log_warn("crash point armed (test build)", "point=%s pass=%ld", armed_name, armed_pass);
}

void st_crash_point(const char *name)
{
    pthread_once(&armed_once, arm);
    if (armed_name[0] == '\0' || strcmp(name, armed_name) != 0)
        return;
    long pass = __atomic_add_fetch(&passes, 1, __ATOMIC_ACQ_REL);
    if (pass != armed_pass)
        return;
    st_log_error("crash point reached", "point=%s pass=%ld; exiting with status %d", name,
                 pass, ST_CRASH_EXIT_CODE);
    _exit(ST_CRASH_EXIT_CODE);
}

void st_test_freeze(const char *name, const char *var)
{
    const char *text = getenv(var);
    if (text == NULL || text[0] == '\0')
        return;
    char *end = NULL;
    long ms = strtol(text, &end, 10);
    if (end == text || *end != '\0' || ms < 1 || ms > 60000)
        return;
    st_log_warn("test freeze", "point=%s %s=%ld", name, var, ms);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;   /* a signal cut it short: sleep the rest */
}

#else

/* Built without STRAND_CRASH_POINTS: ST_CRASH_POINT() expands to nothing, and this
 * file defines nothing (ISO C wants a declaration in every translation unit). */
typedef int st_crash_points_off_t;

#endif
