/* config.c - environment-variable configuration (see config.h, docs/configuration.md). */
#include "strand/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static st_err_t read_string(const char *name, const char *def, char *dst, size_t len,
                            st_errbuf_t *eb)
{
    const char *value = getenv(name);
    if (value == NULL)
        value = def;
    if (strlen(value) >= len)
        return st_err_set(eb, ST_ERR_CONFIG, "%s is longer than %zu characters", name,
                          len - 1);
    snprintf(dst, len, "%s", value);
    return ST_OK;
}

static st_err_t read_int(const char *name, int def, int min, int max, int *dst,
                         st_errbuf_t *eb)
{
    const char *value = getenv(name);
    if (value == NULL || *value == '\0') {
        *dst = def;
        return ST_OK;
    }
    char *end = NULL;
    errno = 0;
    long n = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || n < min || n > max)
        return st_err_set(eb, ST_ERR_CONFIG, "%s must be an integer from %d to %d, got \"%s\"",
                          name, min, max, value);
    *dst = (int)n;
    return ST_OK;
}

/* Reads a secret from the file named by `name` (a mounted Secret): the first line,
 * without its line end. Empty `name`'s value = nothing to read. */
static st_err_t read_secret_file(const char *name, char *dst, size_t len, st_errbuf_t *eb)
{
    const char *path = getenv(name);
    if (path == NULL || *path == '\0')
        return ST_OK;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return st_err_set(eb, ST_ERR_CONFIG, "%s: could not read %s: %s", name, path,
                          strerror(errno));
    if (fgets(dst, (int)len, f) == NULL)
        dst[0] = '\0';
    int more = fgetc(f) != EOF && strchr(dst, '\n') == NULL;
    fclose(f);
    dst[strcspn(dst, "\r\n")] = '\0';
    if (more)
        return st_err_set(eb, ST_ERR_CONFIG, "%s: the secret in %s is longer than %zu characters",
                          name, path, len - 2);
    if (dst[0] == '\0')
        return st_err_set(eb, ST_ERR_CONFIG, "%s: %s is empty", name, path);
    return ST_OK;
}

/* True when `value` is one of the NULL-terminated `choices`. */
static int one_of(const char *value, const char *const *choices)
{
    for (; *choices != NULL; choices++)
        if (strcmp(value, *choices) == 0)
            return 1;
    return 0;
}

/* Checks the Kafka security settings: a known protocol (lower-cased in place), and
 * with SASL a known mechanism, a user name and exactly one of password / password file. */
static st_err_t check_kafka_security(st_config_t *cfg, st_errbuf_t *eb)
{
    for (char *p = cfg->kafka_security_protocol; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    static const char *const protocols[] = {"plaintext", "ssl", "sasl_plaintext", "sasl_ssl",
                                            NULL};
    if (!one_of(cfg->kafka_security_protocol, protocols))
        return st_err_set(eb, ST_ERR_CONFIG,
                          "STRAND_KAFKA_SECURITY_PROTOCOL must be plaintext, ssl, sasl_plaintext "
                          "or sasl_ssl, got \"%s\"", cfg->kafka_security_protocol);
    const char *file = getenv("STRAND_KAFKA_SASL_PASSWORD_FILE");
    if (file != NULL && *file != '\0' && cfg->kafka_sasl_password[0] != '\0')
        return st_err_set(eb, ST_ERR_CONFIG, "set STRAND_KAFKA_SASL_PASSWORD or "
                          "STRAND_KAFKA_SASL_PASSWORD_FILE, not both");
    st_err_t err = read_secret_file("STRAND_KAFKA_SASL_PASSWORD_FILE", cfg->kafka_sasl_password,
                                    sizeof cfg->kafka_sasl_password, eb);
    if (err != ST_OK)
        return err;
    if (strncmp(cfg->kafka_security_protocol, "sasl_", 5) != 0)
        return ST_OK;
    static const char *const mechanisms[] = {"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", NULL};
    if (!one_of(cfg->kafka_sasl_mechanism, mechanisms))
        return st_err_set(eb, ST_ERR_CONFIG,
                          "STRAND_KAFKA_SASL_MECHANISM must be SCRAM-SHA-512, SCRAM-SHA-256 or "
                          "PLAIN, got \"%s\"", cfg->kafka_sasl_mechanism);
    if (cfg->kafka_sasl_username[0] == '\0' || cfg->kafka_sasl_password[0] == '\0')
        return st_err_set(eb, ST_ERR_CONFIG,
                          "STRAND_KAFKA_SECURITY_PROTOCOL=%s needs STRAND_KAFKA_SASL_USERNAME and "
                          "STRAND_KAFKA_SASL_PASSWORD (or STRAND_KAFKA_SASL_PASSWORD_FILE)",
                          cfg->kafka_security_protocol);
    return ST_OK;
}

st_err_t st_config_load(st_config_t *cfg, const char *service, int default_port,
                        st_errbuf_t *eb)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->service, sizeof cfg->service, "%s", service);
    char host[64] = "strand";
    gethostname(host, sizeof host - 1);
    st_err_t err;
#define STR(var, def, field) \
    if ((err = read_string(var, def, cfg->field, sizeof cfg->field, eb)) != ST_OK) return err
#define INT(var, def, min, max, field) \
    if ((err = read_int(var, def, min, max, &cfg->field, eb)) != ST_OK) return err
    STR("STRAND_NODE_ID", host, node_id);
    STR("STRAND_PG_DSN", "host=127.0.0.1 port=5432 dbname=strand user=strand", pg_dsn);
    STR("STRAND_KAFKA_BROKERS", "127.0.0.1:9092", kafka_brokers);
    STR("STRAND_KAFKA_SECURITY_PROTOCOL", "plaintext", kafka_security_protocol);
    STR("STRAND_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512", kafka_sasl_mechanism);
    STR("STRAND_KAFKA_SASL_USERNAME", "", kafka_sasl_username);
    STR("STRAND_KAFKA_SASL_PASSWORD", "", kafka_sasl_password);
    STR("STRAND_KAFKA_SSL_CA_FILE", "", kafka_ssl_ca_file);
    STR("STRAND_TOPIC_PREFIX", "strand.", topic_prefix);
    INT("STRAND_TOPIC_PARTITIONS", 8, 1, 4096, topic_partitions);
    INT("STRAND_TOPIC_REPLICATION", 1, 1, 16, topic_replication);
    STR("STRAND_REDIS_URL", "", redis_url);
    STR("STRAND_WAKE_NOTIFY", "fallback", wake_notify);
    INT("STRAND_WAIT_RECHECK_MS", 250, 10, 60000, wait_recheck_ms);
    STR("STRAND_AUTH_FILE", "", auth_file);
    STR("STRAND_HTTP_TLS_CERT_FILE", "", tls_cert_file);
    STR("STRAND_HTTP_TLS_KEY_FILE", "", tls_key_file);
    STR("STRAND_HTTP_ADDR", "127.0.0.1", http_addr);
    INT("STRAND_HTTP_PORT", default_port, 1, 65535, http_port);
    STR("STRAND_LOG_LEVEL", "info", log_level);
    INT("STRAND_EXECUTOR_CONCURRENCY", 4, 1, 256, executor_concurrency);
    INT("STRAND_EXECUTOR_GROUP_MAX", 16, 1, 256, executor_group_max);
    INT("STRAND_API_WORKERS", 8, 1, 64, api_workers);
    INT("STRAND_API_START_GROUP_MAX", 32, 1, 64, api_start_group_max);   /* ST_CMD_GROUP_MAX */
    INT("STRAND_API_START_LANES", 2, 1, 64, api_start_lanes);
    INT("STRAND_API_REQUEST_TIMEOUT_MS", 10000, 100, 600000, api_request_timeout_ms);
    INT("STRAND_EXECUTOR_COMMIT_INTERVAL_MS", 200, 0, 60000, executor_commit_interval_ms);
    INT("STRAND_EXECUTOR_CALL_CONCURRENCY", 32, 1, 1024, executor_call_concurrency);
    INT("STRAND_EXECUTOR_CALL_LEASE_MS", 5000, 1000, 600000, executor_call_lease_ms);
    INT("STRAND_MAX_ATTEMPTS", 5, 1, 1000, max_attempts);
    INT("STRAND_RELAY_BATCH", 500, 1, 10000, relay_batch);
    INT("STRAND_OUTBOX_RETENTION_S", 3600, 0, INT_MAX, outbox_retention_s);
    INT("STRAND_DEDUP_RETENTION_S", 7 * 86400, 3600, INT_MAX, dedup_retention_s);
    INT("STRAND_NOTICE_RETENTION_S", 7 * 86400, 0, INT_MAX, notice_retention_s);
    INT("STRAND_STUCK_INTERVAL_S", 60, 1, 86400, stuck_interval_s);
    INT("STRAND_STUCK_GRACE_S", 60, 0, 86400, stuck_grace_s);
    INT("STRAND_RECOVERY_INTERVAL_S", 60, 1, 86400, recovery_interval_s);
    INT("STRAND_RECOVERY_BATCH", 10000, 1, 1000000, recovery_batch);
    INT("STRAND_RECOVERY_GRACE_S", 120, 1, 86400, recovery_grace_s);
    INT("STRAND_HTTP_MAX_BODY", 1 << 20, 1024, 64 << 20, max_body_bytes);
    INT("STRAND_HTTP_MAX_HEADER_BYTES", 16384, 1024, 1 << 20, max_header_bytes);
    INT("STRAND_HTTP_MAX_HEADERS", 100, 1, 10000, max_headers);
    INT("STRAND_HTTP_HEADER_TIMEOUT_MS", 10000, 100, 600000, header_timeout_ms);
    INT("STRAND_PG_PREPARED", 1, 0, 1, pg_prepared);
    /* Engine limits: the ranges are st_engine_set_limits()'s (libs/engine/src/limits.c). */
    INT("STRAND_RUN_MAX_STEPS", 100000, 10, 100000000, run_max_steps);
    INT("STRAND_RUN_MAX_WORK", 2000000, 1000, INT_MAX, run_max_work);
    INT("STRAND_RUN_MAX_MS", 2000, 10, 3600000, run_max_ms);
    INT("STRAND_STATE_MAX_BYTES", 4 << 20, 1024, 1 << 30, state_max_bytes);
    INT("STRAND_EXPR_MAX_VALUE_BYTES", 1 << 20, 1024, 1 << 30, expr_max_value_bytes);
    INT("STRAND_EXPR_MAX_STRING", 65536, 64, 1 << 30, expr_max_string);
    INT("STRAND_DATA_MAX_DEPTH", 64, 4, 1000, data_max_depth);
    INT("STRAND_SUBWORKFLOW_MAX_DEPTH", 10, 0, 1000, subworkflow_max_depth);
    INT("STRAND_DIAGRAM_MAX_NODES", 500, 10, 2000, diagram_max_nodes);
    INT("STRAND_KAFKA_SESSION_TIMEOUT_MS", 6000, 1000, 300000, kafka_session_timeout_ms);
    INT("STRAND_CONSUMER_POLL_LIMIT_MS", 30000, 1000, 3600000, consumer_poll_limit_ms);
    INT("STRAND_KAFKA_LAG_INTERVAL_MS", 5000, 100, 300000, kafka_lag_interval_ms);
    INT("STRAND_KAFKA_MESSAGE_MAX_BYTES", 1000000, 1000, 100000000, kafka_message_max_bytes);
    INT("STRAND_STOP_TIMEOUT_MS", 20000, 1000, 3600000, stop_timeout_ms);
    /* Amplification bounds (docs/security.md, "Amplification") */
    INT("STRAND_SIGNAL_BUFFER_MAX", 100, 1, 1000000, signal_buffer_max);
    INT("STRAND_SIGNAL_BUFFER_MAX_BYTES", 1 << 20, 1024, 1 << 30, signal_buffer_max_bytes);
    INT("STRAND_BATCH_MAX_PAYLOAD_BYTES", 64 << 20, 1024, INT_MAX, batch_max_payload_bytes);
    INT("STRAND_BATCH_MAX_RUNNING", 16, 1, 100000, batch_max_running);
    INT("STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL", 4, 1, 100000, batch_max_running_per_principal);
    INT("STRAND_API_WRITE_RATE", 0, 0, 1000000, api_write_rate);
    INT("STRAND_API_WRITE_BURST", 0, 0, 10000000, api_write_burst);
    INT("STRAND_API_WRITE_AUDIT_WINDOW_S", 60, 1, 86400, api_write_audit_window_s);
#undef STR
#undef INT
    static const char *const levels[] = {"debug", "info", "warn", "error", NULL};
    if (!one_of(cfg->log_level, levels))
        return st_err_set(eb, ST_ERR_CONFIG,
                          "STRAND_LOG_LEVEL must be debug, info, warn or error, got \"%s\"",
                          cfg->log_level);
    static const char *const wake_notify[] = {"fallback", "always", NULL};
    if (!one_of(cfg->wake_notify, wake_notify))
        return st_err_set(eb, ST_ERR_CONFIG,
                          "STRAND_WAKE_NOTIFY must be fallback or always, got \"%s\"",
                          cfg->wake_notify);
    if (cfg->kafka_brokers[0] == '\0')
        return st_err_set(eb, ST_ERR_CONFIG, "STRAND_KAFKA_BROKERS must not be empty");
    if ((err = check_kafka_security(cfg, eb)) != ST_OK)
        return err;
    if ((cfg->tls_cert_file[0] == '\0') != (cfg->tls_key_file[0] == '\0'))
        return st_err_set(eb, ST_ERR_CONFIG, "STRAND_HTTP_TLS_CERT_FILE and "
                          "STRAND_HTTP_TLS_KEY_FILE must be set together");
    if (cfg->api_write_burst > 0 && cfg->api_write_rate == 0)
        return st_err_set(eb, ST_ERR_CONFIG, "STRAND_API_WRITE_BURST=%d needs STRAND_API_WRITE_RATE"
                          " (writes per second per principal; 0 turns the limit off)",
                          cfg->api_write_burst);
    if (cfg->redis_url[0] != '\0' && strncmp(cfg->redis_url, "redis://", 8) != 0)
        return st_err_set(eb, ST_ERR_CONFIG,
                          "STRAND_REDIS_URL must look like redis://host:port, got \"%s\"",
                          cfg->redis_url);
    return ST_OK;
}

const char *st_config_topic(const st_config_t *cfg, const char *suffix, char *buf,
                            size_t len)
{
    snprintf(buf, len, "%s%s", cfg->topic_prefix, suffix);
    return buf;
}
