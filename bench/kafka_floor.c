/*
 * kafka_floor.c - what one message through the Kafka broker costs the broker, without
 * Strand: a librdkafka producer with the relay's settings (linger.ms 5, idempotence,
 * acks=all) sends N messages of W1's START size (91 bytes, a random 36-byte key, 8
 * partitions) at a fixed rate, and a consumer in the same process reads them all back.
 * It prints the broker's CPU time per message (from /proc/PID/stat of the broker
 * process given) and this process's own.
 *
 *   strand-kafka-floor --brokers HOST:PORT --broker-pid PID [--rate R] [--n N]
 *                      [--topic NAME] [--partitions P]
 *
 * The topic (default strand-floor, 8 partitions) is created if missing and left in
 * place. bench/floor.sh runs it; docs/benchmarks.md ("The floor") records its numbers.
 */
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define PAYLOAD_BYTES 91
#define KEY_BYTES 36

/* Command-line settings. */
typedef struct {
    const char *brokers, *topic;
    long broker_pid;
    int partitions;
    long n;
    double rate;
} floor_args_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds (user + system) of process `pid` so far; -1 when it cannot be read. */
static double process_cpu_s(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    const char *p = strrchr(buf, ')');   /* the command name may hold spaces */
    unsigned long long utime, stime;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                            &utime, &stime) != 2)
        return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static rd_kafka_conf_t *conf_new(const char *brokers, const char *const *pairs)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK) {
        fprintf(stderr, "kafka-floor: %s\n", errstr);
        exit(2);
    }
    for (const char *const *p = pairs; p[0] != NULL; p += 2)
        if (rd_kafka_conf_set(conf, p[0], p[1], errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "kafka-floor: %s: %s\n", p[0], errstr);
            exit(2);
        }
    return conf;
}

/* Creates the topic unless it exists; exits on any other failure. */
static void ensure_topic(rd_kafka_t *rk, const char *topic, int partitions)
{
    char errstr[256];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, 1, errstr, sizeof errstr);
    if (nt == NULL) {
        fprintf(stderr, "kafka-floor: %s\n", errstr);
        exit(2);
    }
    rd_kafka_queue_t *queue = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, NULL, queue);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(queue, 30000);
    int ok = 0;
    if (ev != NULL) {
        size_t cnt;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &cnt);
        rd_kafka_resp_err_t err = cnt == 1 ? rd_kafka_topic_result_error(res[0])
                                           : RD_KAFKA_RESP_ERR__FAIL;
        ok = err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS;
        if (!ok)
            fprintf(stderr, "kafka-floor: could not create %s: %s\n", topic, rd_kafka_err2str(err));
        rd_kafka_event_destroy(ev);
    } else {
        fprintf(stderr, "kafka-floor: no answer to the topic creation\n");
    }
    rd_kafka_queue_destroy(queue);
    rd_kafka_NewTopic_destroy(nt);
    if (!ok)
        exit(1);
}

/* The consumer's state, shared with main. */
typedef struct {
    rd_kafka_t *rk;
    long want, got;          /* got: written by the consumer thread only */
    int stop;                /* set by main (atomic) */
    double last_at;          /* read by main after the join */
} consumer_t;

static void *consume_main(void *arg)
{
    consumer_t *c = arg;
    while (!__atomic_load_n(&c->stop, __ATOMIC_RELAXED) &&
           __atomic_load_n(&c->got, __ATOMIC_RELAXED) < c->want) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, 100);
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            __atomic_add_fetch(&c->got, 1, __ATOMIC_RELAXED);
            c->last_at = now_s();
        }
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: strand-kafka-floor --brokers HOST:PORT --broker-pid PID [--rate R]"
                    " [--n N] [--topic NAME] [--partitions P]\n");
    exit(2);
}

/* The number in `text`, or usage() when it is not one whole number (or decimal). */
static double number_arg(const char *flag, const char *text)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0') {
        fprintf(stderr, "kafka-floor: %s wants a number, not '%s'\n", flag, text);
        usage();
    }
    return v;
}

static floor_args_t parse_args(int argc, char **argv)
{
    floor_args_t a = {NULL, "strand-floor", 0, 8, 10000, 1000.0};
    for (int i = 1; i < argc; i += 2) {
        const char *flag = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            usage();
        if (strcmp(flag, "--brokers") == 0)
            a.brokers = v;
        else if (strcmp(flag, "--topic") == 0)
            a.topic = v;
        else if (strcmp(flag, "--broker-pid") == 0)
            a.broker_pid = (long)number_arg(flag, v);
        else if (strcmp(flag, "--rate") == 0)
            a.rate = number_arg(flag, v);
        else if (strcmp(flag, "--n") == 0)
            a.n = (long)number_arg(flag, v);
        else if (strcmp(flag, "--partitions") == 0)
            a.partitions = (int)number_arg(flag, v);
        else
            usage();
    }
    if (a.brokers == NULL || a.broker_pid <= 0 || a.rate <= 0 || a.n <= 0 || a.partitions <= 0)
        usage();
    if (process_cpu_s(a.broker_pid) < 0) {
        fprintf(stderr, "kafka-floor: cannot read /proc/%ld/stat\n", a.broker_pid);
        exit(2);
    }
    return a;
}

int main(int argc, char **argv)
{
    floor_args_t a = parse_args(argc, argv);
    char errstr[256];
    static const char *const producer_settings[] = {
        "linger.ms", "5", "enable.idempotence", "true", "acks", "all", NULL, NULL};
    rd_kafka_t *producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf_new(a.brokers, producer_settings),
                                        errstr, sizeof errstr);
    if (producer == NULL) {
        fprintf(stderr, "kafka-floor: %s\n", errstr);
        return 1;
    }
    ensure_topic(producer, a.topic, a.partitions);

    /* The consumer is assigned every partition at its end (no group rebalance to wait
     * for) and reads what the producer sends from now on. */
    static const char *const consumer_settings[] = {
        "group.id", "strand-floor", "enable.auto.commit", "false", NULL, NULL};
    rd_kafka_t *crk = rd_kafka_new(RD_KAFKA_CONSUMER, conf_new(a.brokers, consumer_settings),
                                   errstr, sizeof errstr);
    if (crk == NULL) {
        fprintf(stderr, "kafka-floor: %s\n", errstr);
        return 1;
    }
    rd_kafka_poll_set_consumer(crk);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(a.partitions);
    for (int p = 0; p < a.partitions; p++)
        rd_kafka_topic_partition_list_add(parts, a.topic, p)->offset = RD_KAFKA_OFFSET_END;
    rd_kafka_assign(crk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    /* Let the consumer resolve its end offsets before the first message. */
    for (double until = now_s() + 3; now_s() < until;) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(crk, 100);
        if (m != NULL)
            rd_kafka_message_destroy(m);
    }

    consumer_t c = {crk, a.n, 0, 0, 0};
    pthread_t thread;
    pthread_create(&thread, NULL, consume_main, &c);

    char payload[PAYLOAD_BYTES], key[KEY_BYTES + 1];
    memset(payload, 'x', sizeof payload);
    unsigned seed = (unsigned)getpid();
    double broker0 = process_cpu_s(a.broker_pid), self0 = self_cpu_s();
    double start = now_s();
    for (long i = 0; i < a.n; i++) {
        for (int k = 0; k < KEY_BYTES; k++)
            key[k] = "0123456789abcdef"[rand_r(&seed) & 15];
        key[KEY_BYTES] = '\0';
        while (rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(a.topic),
                                 RD_KAFKA_V_KEY(key, KEY_BYTES),
                                 RD_KAFKA_V_VALUE(payload, sizeof payload),
                                 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                 RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(producer, 10);
        rd_kafka_poll(producer, 0);
        double wait = start + (double)(i + 1) / a.rate - now_s();
        if (wait > 0)
            usleep((useconds_t)(wait * 1e6));
    }
    rd_kafka_flush(producer, 30000);
    for (double until = now_s() + 30; __atomic_load_n(&c.got, __ATOMIC_RELAXED) < a.n &&
                                      now_s() < until;)
        usleep(10000);
    __atomic_store_n(&c.stop, 1, __ATOMIC_RELAXED);
    pthread_join(thread, NULL);
    double end = c.last_at > start ? c.last_at : now_s();
    double broker = process_cpu_s(a.broker_pid) - broker0, self = self_cpu_s() - self0;

    printf("kafka-floor: %ld of %ld messages back in %.1f s (%.0f msg/s, asked %.0f); "
           "broker CPU %.0f us per message; this process %.0f us per message\n",
           c.got, a.n, end - start, (double)c.got / (end - start), a.rate,
           broker * 1e6 / (double)a.n, self * 1e6 / (double)a.n);
    rd_kafka_consumer_close(crk);
    rd_kafka_destroy(crk);
    rd_kafka_destroy(producer);
    return c.got == a.n ? 0 : 1;
}
