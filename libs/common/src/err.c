/* err.c - names, messages and retryability of st_err_t codes (see err.h). */
#include "strand/err.h"

#include <stdio.h>

const char *st_err_name(st_err_t err)
{
    switch (err) {
#define ST_ERR_NAME(name, value, retryable, message) case name: return #name;
        ST_ERR_TABLE(ST_ERR_NAME)
#undef ST_ERR_NAME
    }
    return "ST_ERR_UNKNOWN";
}

const char *st_err_message(st_err_t err)
{
    switch (err) {
#define ST_ERR_MSG(name, value, retryable, message) case name: return message;
        ST_ERR_TABLE(ST_ERR_MSG)
#undef ST_ERR_MSG
    }
    return "unknown error";
}

bool st_err_retryable(st_err_t err)
{
    switch (err) {
#define ST_ERR_RETRY_CASE(name, value, retryable, message) case name: return retryable;
        ST_ERR_TABLE(ST_ERR_RETRY_CASE)
#undef ST_ERR_RETRY_CASE
    }
    return false;
}

st_err_t st_err_set(st_errbuf_t *eb, st_err_t err, const char *fmt, ...)
{
    if (eb != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(eb->msg, sizeof eb->msg, fmt, ap);
        va_end(ap);
    }
    return err;
}
