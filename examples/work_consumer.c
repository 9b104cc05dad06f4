/*
 * work_consumer.c - an application consuming Strand's work events, as a new user
 * would write it (docs/lifecycle.md walks through it).
 *
 *   strand-example-consumer --brokers HOST:PORT --topic PREFIXwork --consumer NAME
 *                           [--api URL] [--max N] [--timeout SECONDS]
 *
 * It reads strand.v1.WorkEvent messages, keeps those addressed to NAME, acknowledges
 * each one as delivered, "processes" it (prints it), and acknowledges it as
 * processed. Re-raised events carry the same ack_guid; acknowledging them again is
 * harmless. It exits after N events (default: never) or the timeout.
 */
#include <curl/curl.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strand/proto/strand.pb-c.h"

static const char *api = "http://127.0.0.1:8080";

/* POST /v1/acks; returns the HTTP status. */
static long ack(const char *guid, const char *consumer, const char *stage, const char *message)
{
    char body[512], url[512];
    snprintf(body, sizeof body, "{\"ack_guid\":\"%s\",\"consumer\":\"%s\",\"stage\":\"%s\",\"message\":\"%s\"}",
             guid, consumer, stage, message);
    snprintf(url, sizeof url, "%s/v1/acks", api);
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    const char *token = getenv("STRAND_API_TOKEN");
    char auth[600];
    if (token != NULL) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append(headers, auth);
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
    FILE *devnull = fopen("/dev/null", "w");
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, devnull);
    long status = -1;
    if (curl_easy_perform(curl) == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    fclose(devnull);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return status;
}

static int addressed_to(const Strand__V1__WorkEvent *ev, const char *consumer)
{
    for (size_t i = 0; i < ev->n_consumers; i++)
        if (strcmp(ev->consumers[i], consumer) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *topic = NULL, *consumer = NULL;
    int max = -1, timeout_s = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--brokers") == 0) brokers = argv[i + 1];
        else if (strcmp(argv[i], "--topic") == 0) topic = argv[i + 1];
        else if (strcmp(argv[i], "--consumer") == 0) consumer = argv[i + 1];
        else if (strcmp(argv[i], "--api") == 0) api = argv[i + 1];
        else if (strcmp(argv[i], "--max") == 0) max = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--timeout") == 0) timeout_s = atoi(argv[i + 1]);
    }
    if (brokers == NULL || topic == NULL || consumer == NULL) {
        fprintf(stderr, "usage: %s --brokers HOST:PORT --topic PREFIXwork --consumer NAME"
                        " [--api URL] [--max N] [--timeout SECONDS]\n", argv[0]);
        return 2;
    }
    char errstr[512], group[300];
    snprintf(group, sizeof group, "example-%s", consumer);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", errstr, sizeof errstr)) {
        fprintf(stderr, "%s\n", errstr);
        return 2;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "%s\n", errstr);
        return 1;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(subs, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    time_t deadline = timeout_s > 0 ? time(NULL) + timeout_s : 0;
    int handled = 0;
    while ((max < 0 || handled < max) && (deadline == 0 || time(NULL) < deadline)) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(rk, 500);
        if (msg == NULL)
            continue;
        if (!msg->err) {
            Strand__V1__WorkEvent *ev = strand__v1__work_event__unpack(NULL, msg->len, msg->payload);
            if (ev != NULL && addressed_to(ev, consumer)) {
                printf("%s %s %s ref=%s payload=%.*s\n", ev->ack_guid, ev->kind, ev->event_code,
                       ev->external_ref, (int)ev->payload.len, (const char *)ev->payload.data);
                long d = ack(ev->ack_guid, consumer, "delivered", "received");
                /* ... the application's own work happens here ... */
                long p = ack(ev->ack_guid, consumer, "processed", "done");
                printf("  acked delivered=%ld processed=%ld\n", d, p);
                fflush(stdout);
                handled++;
            }
            if (ev != NULL)
                strand__v1__work_event__free_unpacked(ev, NULL);
        }
        rd_kafka_message_destroy(msg);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    curl_global_cleanup();
    return max < 0 || handled >= max ? 0 : 1;
}
