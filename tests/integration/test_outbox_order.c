/*
 * test_outbox_order - messages for one key reach Kafka in the order their outbox rows
 * were committed, however many relays run.
 *
 * Every service runs a relay. They used to claim rows with FOR UPDATE SKIP LOCKED
 * and nothing else, so two relays could take consecutive rows for one instance and
 * the second could publish first. A lifecycle instance then saw "pay" before the
 * "ship" sent ahead of it (seen 2026-11-23 as a test_lifecycle failure in CI). This
 * test runs three relays in one process against two writers committing row after
 * row, and checks the order per key on the topic; then it stops the relay that
 * publishes (the leader) and checks that a standby takes over, in order.
 */
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "st_test.h"
#include "strand/config.h"
#include "strand/kafka.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/relay.h"

#define RELAYS 3
#define WRITERS 2
#define ROWS_PER_WRITER 400

typedef struct {
    int writer;
    int committed;
} writer_arg_t;

static st_config_t cfg;

/* Commits ROWS_PER_WRITER rows for key "k<writer>", one transaction each. */
static void *write_rows(void *arg)
{
    writer_arg_t *w = arg;
    st_errbuf_t eb;
    PGconn *conn = NULL;
    if (st_pg_connect(cfg.pg_dsn, "test_outbox_order", &conn, &eb) != ST_OK) {
        fprintf(stderr, "writer %d: %s\n", w->writer, eb.msg);
        return NULL;
    }
    char key[16];
    snprintf(key, sizeof key, "k%d", w->writer);
    for (int i = 0; i < ROWS_PER_WRITER; i++) {
        char payload[32];
        int len = snprintf(payload, sizeof payload, "%d", i);
        if (st_pg_begin(conn, &eb) != ST_OK ||
            st_outbox_add_tx(conn, ST_TOPIC_SIGNALS, key, payload, (size_t)len, &eb) != ST_OK ||
            st_pg_commit(conn, &eb) != ST_OK) {
            fprintf(stderr, "writer %d row %d: %s\n", w->writer, i, eb.msg);
            st_pg_rollback(conn);
            break;
        }
        w->committed++;
    }
    PQfinish(conn);
    return NULL;
}

/* Consumes until every key k<i> has reached next[i] == ROWS_PER_WRITER or
 * `timeout_s` pass. First arrivals per key must come 0, 1, 2, ...: a redelivery of an
 * earlier number is at-least-once and allowed, a jump ahead is a reordering. Returns
 * the number of jumps. */
static int consume_in_order(rd_kafka_t *consumer, int next[WRITERS], int timeout_s)
{
    int out_of_order = 0;
    time_t deadline = time(NULL) + timeout_s;
    for (;;) {
        int done = 1;
        for (int w = 0; w < WRITERS; w++)
            done &= next[w] >= ROWS_PER_WRITER;
        if (done || time(NULL) >= deadline)
            return out_of_order;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, 500);
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->key_len == 2 &&
            ((const char *)m->key)[0] == 'k') {
            int w = ((const char *)m->key)[1] - '0';
            char text[32];
            size_t n = m->len < sizeof text - 1 ? m->len : sizeof text - 1;
            memcpy(text, m->payload, n);
            text[n] = '\0';
            int seq = atoi(text);
            if (w >= 0 && w < WRITERS && seq >= next[w]) {
                if (seq != next[w] && out_of_order++ < 5)
                    fprintf(stderr, "key k%d: got %d, expected %d\n", w, seq, next[w]);
                next[w] = seq + 1;
            }
        }
        rd_kafka_message_destroy(m);
    }
}

static void test_order_per_key_with_several_relays(void)
{
    setenv("STRAND_TOPIC_PREFIX", it_topic_prefix(), 1);
    setenv("STRAND_RELAY_BATCH", "7", 1);   /* small batches: many claims race */
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_config_load(&cfg, "test", 18999, &eb), ST_OK);
    CU_ASSERT_EQUAL_FATAL(st_kafka_ensure_topics(&cfg, 30000, &eb), ST_OK);
    const char *topics[] = {ST_TOPIC_SIGNALS, NULL};
    rd_kafka_t *consumer = NULL;
    CU_ASSERT_EQUAL_FATAL(st_kafka_consumer_new(&cfg, "outbox-order", topics, NULL, &consumer, &eb),
                          ST_OK);
    st_relay_t *relays[RELAYS] = {0};
    for (int i = 0; i < RELAYS; i++)
        CU_ASSERT_EQUAL_FATAL(st_relay_start(&cfg, &relays[i], &eb), ST_OK);

    pthread_t threads[WRITERS];
    writer_arg_t args[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        args[i] = (writer_arg_t){.writer = i};
        pthread_create(&threads[i], NULL, write_rows, &args[i]);
    }
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(threads[i], NULL);
        CU_ASSERT_EQUAL(args[i].committed, ROWS_PER_WRITER);
    }

    int next[WRITERS] = {0};
    int out_of_order = consume_in_order(consumer, next, 60);
    CU_ASSERT_EQUAL(out_of_order, 0);
    for (int i = 0; i < WRITERS; i++)
        CU_ASSERT_EQUAL(next[i], ROWS_PER_WRITER);

    /* Exactly one relay publishes; when it stops, a standby takes over. */
    int leaders = 0, leader = -1;
    for (int i = 0; i < RELAYS; i++)
        if (st_relay_leading(relays[i])) {
            leaders++;
            leader = i;
        }
    CU_ASSERT_EQUAL(leaders, 1);
    CU_ASSERT_FATAL(leader >= 0);
    st_relay_stop(relays[leader]);
    relays[leader] = NULL;
    writer_arg_t more = {.writer = 0};
    write_rows(&more);   /* key k0 again: 0 .. ROWS_PER_WRITER - 1 */
    CU_ASSERT_EQUAL(more.committed, ROWS_PER_WRITER);
    next[0] = 0;   /* k0 starts over; k1 is complete */
    CU_ASSERT_EQUAL(consume_in_order(consumer, next, 30), 0);
    CU_ASSERT_EQUAL(next[0], ROWS_PER_WRITER);   /* all published after the failover */
    leaders = 0;
    for (int i = 0; i < RELAYS; i++)
        leaders += relays[i] != NULL && st_relay_leading(relays[i]);
    CU_ASSERT_EQUAL(leaders, 1);

    for (int i = 0; i < RELAYS; i++)
        st_relay_stop(relays[i]);
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
}

int main(void)
{
    if (!it_init("test_outbox_order"))
        return 1;
    static const it_case_t cases[] = {
        {"one key's messages keep their commit order across relays",
         test_order_per_key_with_several_relays},
    };
    return it_run_suite("outbox_order", cases, (int)(sizeof cases / sizeof cases[0]));
}
