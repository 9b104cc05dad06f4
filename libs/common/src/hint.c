/* hint.c - Redis wake-up hints (see hint.h). */
#include "strand/hint.h"

#include <hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/log.h"
#include "strand/pg.h"

#define BACKOFF_S 5

struct st_hint {
    char host[200];
    int port;
    char channel[96];
    redisContext *redis;
    time_t retry_after;
    int enabled;
};

int st_hint_parse_url(const char *url, char *host, size_t host_len, int *port)
{
    if (url == NULL || strncmp(url, "redis://", 8) != 0)
        return 0;
    const char *h = url + 8;
    const char *colon = strrchr(h, ':');
    size_t n = colon ? (size_t)(colon - h) : strlen(h);
    if (n == 0 || n >= host_len)
        return 0;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = colon ? atoi(colon + 1) : 6379;
    return *port > 0 && *port < 65536;
}

int st_hint_may_replace_notify(const st_config_t *cfg)
{
    return cfg->redis_url[0] != '\0' && strcmp(cfg->wake_notify, "fallback") == 0;
}

st_hint_t *st_hint_new(const st_config_t *cfg, const char *channel)
{
    st_hint_t *hint = calloc(1, sizeof *hint);
    if (hint == NULL)
        abort();
    hint->enabled = st_hint_parse_url(cfg->redis_url, hint->host, sizeof hint->host, &hint->port);
    snprintf(hint->channel, sizeof hint->channel, "%s%s", cfg->topic_prefix, channel);
    return hint;
}

void st_hint_free(st_hint_t *hint)
{
    if (hint == NULL)
        return;
    if (hint->redis != NULL)
        redisFree(hint->redis);
    free(hint);
}

static void hint_fail(st_hint_t *hint, const char *why)
{
    st_log_debug("hint skipped", "%s: %s; retrying in %d s", hint->channel, why, BACKOFF_S);
    if (hint->redis != NULL)
        redisFree(hint->redis);
    hint->redis = NULL;
    hint->retry_after = time(NULL) + BACKOFF_S;
}

int st_hint_publish(st_hint_t *hint, const char *message)
{
    if (hint == NULL || !hint->enabled || time(NULL) < hint->retry_after)
        return -1;
    struct timeval limit = {0, 100000};
    if (hint->redis == NULL) {
        hint->redis = redisConnectWithTimeout(hint->host, hint->port, limit);
        if (hint->redis == NULL || hint->redis->err) {
            hint_fail(hint, hint->redis ? hint->redis->errstr : "no memory");
            return -1;
        }
        redisSetTimeout(hint->redis, limit);
    }
    redisReply *reply = redisCommand(hint->redis, "PUBLISH %s %s", hint->channel, message);
    if (reply == NULL) {
        hint_fail(hint, hint->redis->errstr);
        return -1;
    }
    int receivers = reply->type == REDIS_REPLY_INTEGER ? (int)reply->integer : -1;
    freeReplyObject(reply);
    if (receivers < 0)
        hint_fail(hint, "PUBLISH did not answer with a number");
    return receivers;
}

void st_hint_after_commit(st_hint_t *hint, PGconn *conn, const char *pg_channel,
                          const char *message, int skipped, int *rely_on_hints,
                          st_metric_t *missed)
{
    int reached = st_hint_publish(hint, message);
    if (skipped && reached < 1) {
        st_metric_inc(missed);
        st_errbuf_t eb;
        const char *params[] = {pg_channel, message};
        if (st_pg_exec(conn, "SELECT pg_notify($1, $2)", 2, params, NULL, &eb) != ST_OK)
            st_log_warn("could not notify after a hint that reached nobody; a recheck finds"
                        " the change", "channel=%s: %s", pg_channel, eb.msg);
    }
    if (rely_on_hints != NULL && *rely_on_hints != (reached >= 1)) {
        *rely_on_hints = reached >= 1;
        st_log_info(*rely_on_hints ? "writers rely on Redis hints again"
                                   : "a hint reached nobody; writers notify PostgreSQL",
                    "channel=%s", hint->channel);
    }
}
