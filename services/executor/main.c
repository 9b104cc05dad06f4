/*
 * strand-executor: runs workflow instances. Consumes the signals topic, runs the
 * interpreter for one instance per wake-up, and commits snapshot + projections +
 * outbox rows in one PostgreSQL transaction; its outbox relay publishes the results.
 * See README.md in this directory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatcher.h"
#include "effects.h"
#include "executor.h"
#include "strand/auth.h"
#include "strand/engine.h"
#include "strand/log.h"
#include "strand/relay.h"
#include "strand/service.h"
#include "strand/util.h"

/* The monotonic clock a run's wall-time budget is measured on. */
static long long mono_ms(void)
{
    return (long long)(st_mono_s() * 1000.0);
}

/* Applies the engine limits of the configuration (docs/configuration.md). */
static st_err_t apply_engine_limits(const st_config_t *cfg, st_errbuf_t *eb)
{
    st_engine_limits_t lim = {
        .max_steps = cfg->run_max_steps, .max_work = cfg->run_max_work,
        .max_run_ms = cfg->run_max_ms, .max_state_bytes = cfg->state_max_bytes,
        .max_value_bytes = cfg->expr_max_value_bytes, .max_string = cfg->expr_max_string,
        .max_data_depth = cfg->data_max_depth,
        .max_subworkflow_depth = cfg->subworkflow_max_depth, .clock_ms = mono_ms};
    return st_engine_set_limits(&lim, eb);
}

static int relay_ready(void *ctx)
{
    return st_relay_ready(ctx);
}

/* The token file a subworkflow's child start is checked against (effects.h). */
typedef struct {
    const char *path;      /* STRAND_AUTH_FILE; "" = none */
    st_auth_t *auth;       /* NULL until it loads */
    char last_error[sizeof ((st_errbuf_t *)0)->msg];   /* the last load failure logged */
} tokens_t;

/* Loads the token file at start-up. One that does not load does not stop the executor
 * (it runs every instance but starts no checked child, fail closed): it is tried again
 * on SIGHUP and every ST_RELOAD_CHECK_MS until it loads. */
static void load_tokens(tokens_t *t, int forced)
{
    st_errbuf_t eb;
    if (st_auth_load(t->path, &t->auth, &eb) == ST_OK) {
        st_effects_set_auth(t->path[0] != '\0', t->auth);
        if (t->last_error[0] != '\0')
            st_log_info("token file loaded", "file=%s", t->path);
        return;
    }
    t->auth = NULL;
    if (forced || strcmp(t->last_error, eb.msg) != 0)
        st_log_error("could not load the token file: no subworkflow child of a definition "
                     "with a recorded importer starts until it loads", "%s", eb.msg);
    snprintf(t->last_error, sizeof t->last_error, "%s", eb.msg);
}

/* SIGHUP or a changed STRAND_AUTH_FILE: the grants child starts are checked against
 * change at once; a bad file keeps the old ones (auth.h). */
static void reload_tokens(void *ctx, int forced)
{
    tokens_t *t = ctx;
    if (t->auth == NULL) {
        load_tokens(t, forced);
        return;
    }
    st_errbuf_t eb;
    int reloaded = 0;
    if (st_auth_reload(t->auth, forced, &reloaded, &eb) != ST_OK)
        st_log_error("could not reload the token file, keeping the old tokens", "%s", eb.msg);
    else if (reloaded)
        st_log_info("token file reloaded", NULL);
}

int main(void)
{
    st_service_t svc;
    st_errbuf_t eb;
    if (st_service_init(&svc, "executor", 8081, &eb) != ST_OK ||
        apply_engine_limits(&svc.cfg, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        return 1;
    }
    /* The API's token file: a child started by a subworkflow step needs its parent
     * definition's importer to hold instances:start on the child's definition. */
    static tokens_t tokens;
    tokens.path = svc.cfg.auth_file;
    st_effects_set_auth(tokens.path[0] != '\0', NULL);
    load_tokens(&tokens, 1);
    if (tokens.path[0] != '\0')
        st_service_on_reload(&svc, reload_tokens, &tokens);
    if (st_service_prepare(&svc, &eb) != ST_OK) {
        st_log_error("could not prepare PostgreSQL and Kafka", "%s", eb.msg);
        st_service_close(&svc);
        st_auth_free(tokens.auth);
        return 1;
    }
    st_relay_t *relay = NULL;
    st_executor_t *ex = NULL;
    st_dispatcher_t *dispatcher = NULL;
    if (st_relay_start(&svc.cfg, &relay, &eb) != ST_OK ||
        st_dispatcher_start(&svc, &dispatcher, &eb) != ST_OK ||
        st_executor_start(&svc, &ex, &eb) != ST_OK) {
        st_log_error("could not start", "%s", eb.msg);
        __atomic_store_n(&svc.stopping, 1, __ATOMIC_RELEASE);
        st_dispatcher_stop(dispatcher);
        st_relay_stop(relay);
        st_service_close(&svc);
        st_auth_free(tokens.auth);
        return 1;
    }
    st_service_add_ready(&svc, "outbox_relay", relay_ready, relay);
    st_log_info("executor ready", NULL);
    st_service_run(&svc);
    st_executor_stop(ex);
    st_dispatcher_stop(dispatcher);
    st_relay_stop(relay);
    st_service_close(&svc);
    st_effects_set_auth(0, NULL);
    st_auth_free(tokens.auth);
    st_log_info("executor stopped", NULL);
    return 0;
}
