/*
 * test_relay - an outbox row Kafka will never take is set aside; it does not stop
 * the relay.
 *
 * The relay published rows in id order and, on any failure, marked nothing from the
 * failed row on and claimed the same rows again a second later. A row larger than
 * the producer's message.max.bytes (a task result or a worker answer of about 1 MB)
 * failed every time: every row behind it, for every instance, waited forever. This
 * test commits a small row, a signal row of 1.2 MB and more small rows for one key,
 * runs a relay against the real broker and checks that every small row arrives in
 * order, that the big row is set aside (failed_at, publish_error), dead-lettered
 * under its signal id with a notice, and that the recovery sweep does not publish it
 * again.
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "st_test.h"
#include "strand/config.h"
#include "strand/kafka.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/recovery.h"
#include "strand/relay.h"
#include "strand/schema.h"
#include "strand/util.h"

#define SMALL_ROWS 40
#define BIG_BYTES (1200 * 1000)

static st_config_t cfg;

/* Consumes until rows 0 .. SMALL_ROWS - 1 of `key` arrived or `timeout_s` pass;
 * returns how many first arrivals came out of order; *next is the next expected. */
static int consume_small(rd_kafka_t *consumer, const char *key, int *next, int timeout_s)
{
    int out_of_order = 0;
    time_t deadline = time(NULL) + timeout_s;
    while (*next < SMALL_ROWS && time(NULL) < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, 500);
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->key_len == strlen(key) &&
            memcmp(m->key, key, m->key_len) == 0 && m->len < 32) {
            char text[32];
            memcpy(text, m->payload, m->len);
            text[m->len] = '\0';
            int seq = atoi(text);
            if (seq >= *next) {
                if (seq != *next)
                    out_of_order++;
                *next = seq + 1;
            }
        }
        rd_kafka_message_destroy(m);
    }
    return out_of_order;
}

static void test_oversized_row_set_aside(void)
{
    setenv("STRAND_TOPIC_PREFIX", it_topic_prefix(), 1);
    setenv("STRAND_RELAY_BATCH", "16", 1);
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_config_load(&cfg, "test", 18998, &eb), ST_OK);
    PGconn *conn = NULL;
    CU_ASSERT_EQUAL_FATAL(st_pg_connect(cfg.pg_dsn, "test_relay", &conn, &eb), ST_OK);
    CU_ASSERT_EQUAL_FATAL(st_schema_migrate(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL_FATAL(st_kafka_ensure_topics(&cfg, 30000, &eb), ST_OK);
    const char *topics[] = {ST_TOPIC_SIGNALS, NULL};
    rd_kafka_t *consumer = NULL;
    CU_ASSERT_EQUAL_FATAL(st_kafka_consumer_new(&cfg, "relay-test", topics, NULL, &consumer, &eb),
                          ST_OK);

    char key[37], signal_id[37];
    st_uuid_new(key);
    st_uuid_new(signal_id);
    char *big = malloc(BIG_BYTES);
    CU_ASSERT_FATAL(big != NULL);
    memset(big, 'x', BIG_BYTES);
    /* Row 0, the big signal, rows 1 .. SMALL_ROWS - 1: one transaction each. */
    for (int i = 0; i < SMALL_ROWS; i++) {
        char payload[32];
        int len = snprintf(payload, sizeof payload, "%d", i);
        CU_ASSERT_EQUAL_FATAL(st_pg_begin(conn, &eb), ST_OK);
        CU_ASSERT_EQUAL_FATAL(
            st_outbox_add_tx(conn, ST_TOPIC_SIGNALS, key, payload, (size_t)len, &eb), ST_OK);
        CU_ASSERT_EQUAL_FATAL(st_pg_commit(conn, &eb), ST_OK);
        if (i == 0) {
            CU_ASSERT_EQUAL_FATAL(st_pg_begin(conn, &eb), ST_OK);
            CU_ASSERT_EQUAL_FATAL(
                st_outbox_add_signal_tx(conn, signal_id, key, big, BIG_BYTES, &eb), ST_OK);
            CU_ASSERT_EQUAL_FATAL(st_pg_commit(conn, &eb), ST_OK);
        }
    }
    free(big);

    st_relay_t *relay = NULL;
    CU_ASSERT_EQUAL_FATAL(st_relay_start(&cfg, &relay, &eb), ST_OK);
    int next = 0;
    time_t started = time(NULL);
    int out_of_order = consume_small(consumer, key, &next, 90);
    printf("\n  small rows delivered: %d of %d in %ld s, %d out of order\n", next, SMALL_ROWS,
           (long)(time(NULL) - started), out_of_order);
    CU_ASSERT_EQUAL(next, SMALL_ROWS);   /* not stuck behind the big row */
    CU_ASSERT_EQUAL(out_of_order, 0);

    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.outbox WHERE signal_id = '%s' AND failed_at IS NOT NULL"
             " AND published_at IS NOT NULL AND publish_error LIKE '%%not publishable%%'",
             signal_id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.dead_letters WHERE signal_id = '%s'"
             " AND instance_id = '%s'", signal_id, key);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 30), 1);
    /* The dead letter and the notice went out too (nothing is stuck). */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM strand.outbox WHERE topic IN ('dlq', 'notices')"
             " AND key = '%s' AND published_at IS NOT NULL AND failed_at IS NULL", key);
    CU_ASSERT_EQUAL(it_wait_number(sql, 2, 30), 2);
    CU_ASSERT_EQUAL(it_sql_number("SELECT count(*) FROM strand.outbox"
                                  " WHERE published_at IS NULL"), 0);
    st_relay_stop(relay);
    PQfinish(conn);
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
}

/* The recovery sweep publishes again a signal that was published, never applied, and
 * whose instance still waits, unless it was dead-lettered. It recognised a dead letter
 * only by instance and payload; a payload over 512 KiB is stored empty and the
 * executor's oversize path wrote no instance, so such a signal went out up to 8 more
 * times (9 dead letters for one problem). Now the signal id decides, and a row the
 * relay set aside is never swept. */
static void test_sweep_skips_dead_lettered_signals(void)
{
    setenv("STRAND_RECOVERY_GRACE_S", "1", 1);
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_config_load(&cfg, "test", 18998, &eb), ST_OK);
    char instance[37], dead[37], set_aside[37], lost[37], sql[1024];
    st_uuid_new(instance);
    st_uuid_new(dead);
    st_uuid_new(set_aside);
    st_uuid_new(lost);
    CU_ASSERT_TRUE_FATAL(it_sql_exec(
        "INSERT INTO strand.definitions (name, version, kind, source, canonical)"
        " VALUES ('test_relay_sweep', 1, 'workflow', '{}', '{}') ON CONFLICT DO NOTHING"));
    snprintf(sql, sizeof sql, "INSERT INTO strand.instances (id, definition_name,"
             " definition_version, status) VALUES ('%s', 'test_relay_sweep', 1, 'waiting')",
             instance);
    CU_ASSERT_TRUE_FATAL(it_sql_exec(sql));
    /* Three signals for it, published 10 s ago, never applied: one dead-lettered by the
     * executor as oversized (payload not kept, no instance), one set aside by the relay,
     * one lost (the control: the sweep must publish it again). */
    snprintf(sql, sizeof sql,
             "INSERT INTO strand.outbox (topic, key, payload, signal_id, instance_id,"
             " published_at, failed_at) VALUES"
             " ('signals', '%s', '\\x01', '%s', '%s', now() - interval '10 s', NULL),"
             " ('signals', '%s', '\\x02', '%s', '%s', now() - interval '10 s', now()),"
             " ('signals', '%s', '\\x03', '%s', '%s', now() - interval '10 s', NULL)",
             instance, dead, instance, instance, set_aside, instance, instance, lost, instance);
    CU_ASSERT_TRUE_FATAL(it_sql_exec(sql));
    snprintf(sql, sizeof sql,
             "INSERT INTO strand.dead_letters (source_topic, source_partition, source_offset,"
             " instance_id, reason, attempts, node_id, payload, signal_id) VALUES"
             " ('x.signals', 0, 1, NULL, 'too large (payload of 4000000 bytes not kept)', 1,"
             " 'test', '', '%s')", dead);
    CU_ASSERT_TRUE_FATAL(it_sql_exec(sql));
    PGconn *conn = NULL;
    CU_ASSERT_EQUAL_FATAL(st_pg_connect(cfg.pg_dsn, "test_relay", &conn, &eb), ST_OK);
    st_recovery_t *rec = st_recovery_new(&cfg);
    /* The sweep starts at the outbox's first row and takes STRAND_RECOVERY_BATCH rows at
     * a time; on the suite's shared database (both builds' runs, tens of thousands of
     * rows) it takes several sweeps to reach this test's rows: sweep until it has passed
     * them (bounded), then twice more. A row published within the grace (1 s) stops a
     * sweep: wait until none before this test's rows is (the previous case's). */
    snprintf(sql, sizeof sql, "SELECT max(id) FROM strand.outbox WHERE instance_id = '%s'", instance);
    long long last_id = it_sql_number(sql);
    snprintf(sql, sizeof sql, "SELECT (count(*) = 0)::int FROM strand.outbox WHERE id <= %lld"
             " AND published_at > now() - interval '1 s'", last_id);
    CU_ASSERT_EQUAL(it_wait_number(sql, 1, 10), 1);
    int sweeps = 0;
    while (sweeps < 1000 && st_recovery_checked_id(rec) < last_id) {
        st_recovery_sweep(rec, conn);
        sweeps++;
    }
    printf("\n  sweeps to reach the test's rows: %d (checked id %lld, last row %lld)", sweeps,
           st_recovery_checked_id(rec), last_id);
    for (int i = 0; i < 2; i++)
        st_recovery_sweep(rec, conn);
    st_recovery_free(rec);
    PQfinish(conn);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE signal_id = '%s'"
             " AND recoveries > 0", lost);
    CU_ASSERT_EQUAL(it_sql_number(sql), 1);   /* the sweep ran */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.outbox WHERE signal_id IN"
             " ('%s', '%s') AND (recoveries > 0 OR published_at IS NULL)", dead, set_aside);
    long long swept = it_sql_number(sql);
    printf("\n  dead-lettered or set-aside signals published again: %lld (want 0)\n", swept);
    CU_ASSERT_EQUAL(swept, 0);
    /* Tidy: the lost row was marked for publication, and no relay runs here: an
     * unpublished row would hold up later sweeps (they stop at the first one). */
    snprintf(sql, sizeof sql, "UPDATE strand.instances SET status = 'cancelled' WHERE id = '%s'",
             instance);
    it_sql_exec(sql);
    snprintf(sql, sizeof sql, "UPDATE strand.outbox SET published_at = now(), recoveries = 0"
             " WHERE instance_id = '%s'", instance);
    it_sql_exec(sql);
    unsetenv("STRAND_RECOVERY_GRACE_S");
}

int main(void)
{
    if (!it_init("test_relay"))
        return 1;
    static const it_case_t cases[] = {
        {"an outbox row Kafka refuses for good is set aside, the rest flows on",
         test_oversized_row_set_aside},
        {"the recovery sweep skips dead-lettered signal ids and set-aside rows",
         test_sweep_skips_dead_lettered_signals},
    };
    return it_run_suite("relay", cases, (int)(sizeof cases / sizeof cases[0]));
}
