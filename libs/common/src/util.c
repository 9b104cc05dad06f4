/* util.c - identifiers and time (see util.h). */
#include "strand/util.h"

#include <string.h>
#include <time.h>
#include <uuid/uuid.h>

void st_uuid_new(char out[37])
{
    uuid_t id;
    uuid_generate_random(id);
    uuid_unparse_lower(id, out);
}

int st_uuid_valid(const char *text)
{
    uuid_t id;
    return text != NULL && strlen(text) == 36 && uuid_parse(text, id) == 0;
}

long long st_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double st_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
