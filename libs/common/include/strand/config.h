/*
 * config.h - service configuration from environment variables.
 *
 * Every service reads the same variables (docs/configuration.md lists them with their
 * defaults); unknown values are rejected with a clear message rather than guessed.
 */
#ifndef STRAND_CONFIG_H
#define STRAND_CONFIG_H

#include "strand/err.h"

typedef struct {
    char service[32];          /* "api", "executor", ... (set by the caller) */
    char node_id[64];          /* STRAND_NODE_ID, default: host name */
    char pg_dsn[512];          /* STRAND_PG_DSN */
    char kafka_brokers[256];   /* STRAND_KAFKA_BROKERS */
    /* Kafka client security (docs/configuration.md, docs/operations.md "Kafka security"). */
    char kafka_security_protocol[32]; /* STRAND_KAFKA_SECURITY_PROTOCOL: plaintext, ssl,
                                         sasl_plaintext, sasl_ssl */
    char kafka_sasl_mechanism[32];    /* STRAND_KAFKA_SASL_MECHANISM */
    char kafka_sasl_username[256];    /* STRAND_KAFKA_SASL_USERNAME */
    char kafka_sasl_password[512];    /* STRAND_KAFKA_SASL_PASSWORD or the content of
                                         STRAND_KAFKA_SASL_PASSWORD_FILE; never logged */
    char kafka_ssl_ca_file[512];      /* STRAND_KAFKA_SSL_CA_FILE: broker CA (ssl modes) */
    char topic_prefix[64];     /* STRAND_TOPIC_PREFIX */
    int topic_partitions;      /* STRAND_TOPIC_PARTITIONS */
    int topic_replication;     /* STRAND_TOPIC_REPLICATION */
    char auth_file[512];       /* STRAND_AUTH_FILE: bearer tokens; empty = auth off */
    char tls_cert_file[512];   /* STRAND_HTTP_TLS_CERT_FILE: PEM chain; empty = plain HTTP */
    char tls_key_file[512];    /* STRAND_HTTP_TLS_KEY_FILE: its PEM private key */
    char redis_url[256];       /* STRAND_REDIS_URL, empty = no Redis */
    char wake_notify[16];      /* STRAND_WAKE_NOTIFY: "fallback" (the executor's wake-ups
                                  notify PostgreSQL only when a Redis hint reached nobody)
                                  or "always" */
    int wait_recheck_ms;       /* STRAND_WAIT_RECHECK_MS: the API rechecks parked polls */
    char http_addr[64];        /* STRAND_HTTP_ADDR */
    int http_port;             /* STRAND_HTTP_PORT, default per service */
    char log_level[16];        /* STRAND_LOG_LEVEL */
    int executor_concurrency; /* STRAND_EXECUTOR_CONCURRENCY: executor worker threads */
    int executor_group_max;    /* STRAND_EXECUTOR_GROUP_MAX: queued wake-ups per commit */
    int api_workers;           /* STRAND_API_WORKERS: the API's command worker threads */
    int api_start_group_max;   /* STRAND_API_START_GROUP_MAX: queued starts per commit */
    int api_start_lanes;       /* STRAND_API_START_LANES: start transactions at once */
    int api_request_timeout_ms; /* STRAND_API_REQUEST_TIMEOUT_MS: a request's statements */
    int executor_commit_interval_ms; /* STRAND_EXECUTOR_COMMIT_INTERVAL_MS: offset commits */
    int executor_call_concurrency; /* STRAND_EXECUTOR_CALL_CONCURRENCY: calls in flight */
    int executor_call_lease_ms; /* STRAND_EXECUTOR_CALL_LEASE_MS: a sent call's claim */
    int max_attempts;          /* STRAND_MAX_ATTEMPTS: deliveries before dead-lettering */
    int relay_batch;           /* STRAND_RELAY_BATCH: outbox rows per claim */
    int outbox_retention_s;    /* STRAND_OUTBOX_RETENTION_S: published rows kept */
    int dedup_retention_s;     /* STRAND_DEDUP_RETENTION_S: processed signal ids kept */
    int notice_retention_s;    /* STRAND_NOTICE_RETENTION_S: notices the retention run keeps */
    int stuck_interval_s;      /* STRAND_STUCK_INTERVAL_S: the monitor's stuck count */
    int stuck_grace_s;         /* STRAND_STUCK_GRACE_S: no way out this long = stuck */
    int recovery_interval_s;   /* STRAND_RECOVERY_INTERVAL_S: outbox recovery sweeps */
    int recovery_batch;        /* STRAND_RECOVERY_BATCH: outbox rows examined per sweep */
    int recovery_grace_s;      /* STRAND_RECOVERY_GRACE_S: unapplied this long = lost */
    int max_body_bytes;        /* STRAND_HTTP_MAX_BODY: request body limit */
    int max_header_bytes;      /* STRAND_HTTP_MAX_HEADER_BYTES: request line + headers */
    int max_headers;           /* STRAND_HTTP_MAX_HEADERS: header fields per request */
    int header_timeout_ms;     /* STRAND_HTTP_HEADER_TIMEOUT_MS: time to send a head */
    int pg_prepared;           /* STRAND_PG_PREPARED: 1 = prepared statements, 0 = off */
    /* Engine limits (docs/configuration.md, "Engine limits"; engine.h st_engine_limits_t) */
    int run_max_steps;         /* STRAND_RUN_MAX_STEPS: steps one run may execute */
    int run_max_work;          /* STRAND_RUN_MAX_WORK: expression work units per run */
    int run_max_ms;            /* STRAND_RUN_MAX_MS: wall time of one run */
    int state_max_bytes;       /* STRAND_STATE_MAX_BYTES: snapshot and stored values */
    int expr_max_value_bytes;  /* STRAND_EXPR_MAX_VALUE_BYTES: one built array/object */
    int expr_max_string;       /* STRAND_EXPR_MAX_STRING: one built string */
    int data_max_depth;        /* STRAND_DATA_MAX_DEPTH: nesting of stored data */
    int subworkflow_max_depth; /* STRAND_SUBWORKFLOW_MAX_DEPTH: levels of children */
    int diagram_max_nodes;     /* STRAND_DIAGRAM_MAX_NODES: largest diagram the API draws */
    int kafka_session_timeout_ms; /* STRAND_KAFKA_SESSION_TIMEOUT_MS: consumer failover */
    int consumer_poll_limit_ms;   /* STRAND_CONSUMER_POLL_LIMIT_MS: unready past it */
    int kafka_lag_interval_ms;    /* STRAND_KAFKA_LAG_INTERVAL_MS: broker lag queries */
    int kafka_message_max_bytes;  /* STRAND_KAFKA_MESSAGE_MAX_BYTES: producer's and created
                                   * topics' message size limit (the relay sets larger
                                   * outbox rows aside) */
    int stop_timeout_ms;          /* STRAND_STOP_TIMEOUT_MS: a stop longer than this is cut */
    /* Amplification bounds (docs/security.md, "Amplification"; docs/configuration.md). */
    int signal_buffer_max;        /* STRAND_SIGNAL_BUFFER_MAX: named signals one instance
                                   * keeps while it does not wait for them (executor) */
    int signal_buffer_max_bytes;  /* STRAND_SIGNAL_BUFFER_MAX_BYTES: their payloads, as JSON */
    int batch_max_payload_bytes;  /* STRAND_BATCH_MAX_PAYLOAD_BYTES: a signal batch's payload
                                   * size times its items (api) */
    int batch_max_running;        /* STRAND_BATCH_MAX_RUNNING: running batch jobs, all
                                   * principals, counted in PostgreSQL (api) */
    int batch_max_running_per_principal; /* STRAND_BATCH_MAX_RUNNING_PER_PRINCIPAL */
    int api_write_rate;           /* STRAND_API_WRITE_RATE: writes per second per principal
                                   * and API replica; 0 = no limit */
    int api_write_burst;          /* STRAND_API_WRITE_BURST: the bucket's size; 0 = the rate */
    int api_write_audit_window_s; /* STRAND_API_WRITE_AUDIT_WINDOW_S: one rate_limited audit
                                   * row per principal per window */
} st_config_t;

/* Fills `cfg` from the environment with the defaults for `service` applied first.
 * `default_port` is the service's HTTP port when STRAND_HTTP_PORT is unset.
 * Returns ST_ERR_CONFIG with the variable's name and problem in `eb` on bad input. */
st_err_t st_config_load(st_config_t *cfg, const char *service, int default_port,
                        st_errbuf_t *eb);

/* Full name of a topic: prefix + `suffix` ("signals" -> "strand.signals").
 * Writes into `buf` (caller-owned) and returns it. */
const char *st_config_topic(const st_config_t *cfg, const char *suffix, char *buf,
                            size_t len);

#endif
