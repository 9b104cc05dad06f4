/*
 * strand-admin: one-shot operations for deployments. Each service already migrates
 * the schema and creates its topics at start-up (idempotent, see st_service_prepare);
 * this tool does the same steps alone, so a Kubernetes Job (deploy/k8s/base/jobs.yaml)
 * or an operator can run them before the services roll out, and see a clear exit code.
 *
 *   strand-admin migrate        apply pending schema migrations, then exit
 *   strand-admin create-topics  create missing Kafka topics, then exit
 *   strand-admin prepare        both
 *   --wait-seconds N            retry while PostgreSQL/Kafka are unreachable (default 60)
 *
 * Exit status: 0 done, 1 failed (permanent error, or still unreachable after the
 * wait), 2 bad usage or configuration. Reads the same environment as the services
 * (docs/configuration.md). See README.md in this directory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/config.h"
#include "strand/kafka.h"
#include "strand/log.h"
#include "strand/pg.h"
#include "strand/schema.h"

enum { DO_MIGRATE = 1, DO_TOPICS = 2 };

static void usage(FILE *out)
{
    fprintf(out,
            "usage: strand-admin [--wait-seconds N] migrate|create-topics|prepare\n"
            "  migrate        apply pending schema migrations (STRAND_PG_DSN)\n"
            "  create-topics  create missing Kafka topics (STRAND_KAFKA_BROKERS,\n"
            "                 STRAND_TOPIC_PREFIX, STRAND_TOPIC_PARTITIONS, STRAND_TOPIC_REPLICATION)\n"
            "  prepare        both, in that order\n"
            "  --wait-seconds N  retry while the servers are unreachable (default 60, 0 = once)\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static st_err_t migrate_once(const st_config_t *cfg, st_errbuf_t *eb)
{
    PGconn *conn = NULL;
    st_err_t err = st_pg_connect(cfg->pg_dsn, "strand-admin", &conn, eb);
    if (err == ST_OK)
        err = st_schema_migrate(conn, eb);
    if (conn != NULL)
        PQfinish(conn);
    return err;
}

/* Runs one step, retrying retryable errors with backoff until `deadline`. */
static st_err_t run_step(const st_config_t *cfg, int what, double deadline, st_errbuf_t *eb)
{
    int backoff_ms = 200;
    for (;;) {
        st_err_t err = what == DO_MIGRATE ? migrate_once(cfg, eb)
                                          : st_kafka_ensure_topics(cfg, 10000, eb);
        if (err == ST_OK || !st_err_retryable(err) || now_s() + backoff_ms / 1000.0 > deadline)
            return err;
        st_log_warn(what == DO_MIGRATE ? "waiting for PostgreSQL" : "waiting for Kafka", "%s",
                    eb->msg);
        struct timespec ts = {backoff_ms / 1000, (long)(backoff_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        backoff_ms = backoff_ms < 5000 ? backoff_ms * 2 : 5000;
    }
}

int main(int argc, char **argv)
{
    long wait_s = 60;
    int what = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--wait-seconds") == 0 && i + 1 < argc) {
            char *end = NULL;
            errno = 0;
            wait_s = strtol(argv[++i], &end, 10);
            if (errno != 0 || end == argv[i] || *end != '\0' || wait_s < 0 || wait_s > 86400) {
                fprintf(stderr, "strand-admin: --wait-seconds wants 0..86400, got '%s'\n",
                        argv[i]);
                return 2;
            }
        } else if (what == 0 && strcmp(argv[i], "migrate") == 0) {
            what = DO_MIGRATE;
        } else if (what == 0 && strcmp(argv[i], "create-topics") == 0) {
            what = DO_TOPICS;
        } else if (what == 0 && strcmp(argv[i], "prepare") == 0) {
            what = DO_MIGRATE | DO_TOPICS;
        } else {
            fprintf(stderr, "strand-admin: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (what == 0) {
        usage(stderr);
        return 2;
    }

    st_config_t cfg;
    st_errbuf_t eb;
    if (st_config_load(&cfg, "admin", 8089, &eb) != ST_OK) {
        fprintf(stderr, "strand-admin: %s\n", eb.msg);
        return 2;
    }
    st_log_init("admin", st_log_level_parse(cfg.log_level));
    double deadline = now_s() + (double)wait_s;
    if ((what & DO_MIGRATE) != 0) {
        if (run_step(&cfg, DO_MIGRATE, deadline, &eb) != ST_OK) {
            st_log_error("could not migrate the schema", "%s", eb.msg);
            return 1;
        }
        st_log_info("schema is up to date", NULL);
    }
    if ((what & DO_TOPICS) != 0) {
        if (run_step(&cfg, DO_TOPICS, deadline, &eb) != ST_OK) {
            st_log_error("could not create the topics", "%s", eb.msg);
            return 1;
        }
        st_log_info("topics exist", "prefix=%s partitions=%d replication=%d",
                    cfg.topic_prefix, cfg.topic_partitions, cfg.topic_replication);
    }
    return 0;
}
