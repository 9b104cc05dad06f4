/*
 * test_failover.c - an executor killed with -9 under load stops only its own partitions,
 * and only for about the session timeout (issue 15; docs/operations.md, "Failover").
 *
 * Two executors share the signals topic (8 partitions). The test waits until the group
 * coordinator says each holds a share of them (DescribeConsumerGroups), notes which
 * partitions the replica holds, then twice starts N instances (STRAND_FAILOVER_N,
 * default 400) of a flow with a 300 ms durable timer at a steady pace and kills the
 * replica with -9 a third of the way in: the first time it stays dead, the second time
 * it is restarted at once with the same node id (a pod restart). An instance's signals
 * are keyed by its id, so the partition it lives on is the producer's: crc32(id) % 8.
 * Each phase asserts, against the documented figures:
 * - every instance completes;
 * - the instances on the killed replica's partitions waited at most the documented
 *   7.6 s plus a stated tolerance (killed), or well under the session timeout
 *   (restarted: static membership gives it its partitions back without a rebalance);
 * - only those partitions stopped: no instance on the survivor's partitions stalled,
 *   the survivor kept completing instances all through the stretch in which the
 *   killed replica's partitions were stopped, and no two consecutive completions are
 *   further apart than a second and a half.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "harness.h"
#include "st_test.h"

#define PARTITIONS 8
#define VICTIM 1   /* executor replica 1; the main executor (replica 0) survives */

/* The figures asserted, all in ms (docs/operations.md, "Failover"). */
#define DOC_STALL_MS 7600          /* documented: the longest stall, 400 instances, one of two killed */
/* The tolerance on it. The documented figure is one measurement; where the kill falls
 * in the dead member's heartbeat cycle (heartbeat.interval.ms = session timeout / 4 =
 * 1.5 s) moves the broker's session expiry, hence the whole stall, by up to one
 * interval: +1.5 s. The signals held meanwhile on the moved partitions (~100 at
 * 25 starts/s) are worked before the newest, and the flow's 300 ms timer is fired by
 * the scheduler's due loop after them: +0.9 s for those under ASan on a loaded
 * 2-core runner. 7.6 + 2.4 = 10 s, still a third of the old 30 s allowance and well
 * below the 45 s (broker default) session it replaced. */
#define STALL_TOLERANCE_MS 2400
/* The survivor's own instances take the flow's 0.3 s plus a wake-up or two; a stall
 * there (its partitions stopped, as an eager rebalance does) shows as seconds. */
#define SURVIVOR_MAX_MS 2500
/* At 25 starts/s the survivor's half of the partitions completes ~12 instances a
 * second; a gap between completions of the whole phase longer than this means that
 * nothing at all was being completed. */
#define GAP_MAX_MS 1500
/* A restarted static member rejoins with its old assignment and needs no session
 * expiry: its stall must stay below the earliest possible expiry, session 6 s minus
 * one heartbeat interval (1.5 s). */
#define RESTART_STALL_MAX_MS 4500

static char def_name[64];
static int n_instances = 400;
static rd_kafka_t *admin;   /* for DescribeConsumerGroups; destroyed at the end */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CRC-32 (IEEE, reflected), as librdkafka's default partitioner (consistent_random)
 * hashes a key: partition = crc32(key) % partitions. The relay sets no partitioner. */
static uint32_t crc32_of(const char *s)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (; *s; s++) {
        crc ^= (uint8_t)*s;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* Who holds each signals partition as the group coordinator says (DescribeConsumerGroups):
 * owner[p] = 0 for the main executor (client.id strand-executor-executor-0), 1 for
 * replica 1, 2 for any other member, -1 for nobody. Returns 1 when the group is Stable
 * and no partition has two holders, 0 otherwise (rebalancing, or no answer). */
static int group_owners(int owner[PARTITIONS])
{
    char errstr[256], group[200], topic[200];
    for (int p = 0; p < PARTITIONS; p++)
        owner[p] = -1;
    if (admin == NULL) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "bootstrap.servers", getenv("STRAND_KAFKA_BROKERS"), errstr,
                              sizeof errstr) != RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(conf);
            return 0;
        }
        admin = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
        if (admin == NULL)
            return 0;
    }
    snprintf(group, sizeof group, "%sexecutor", it_topic_prefix());
    snprintf(topic, sizeof topic, "%ssignals", it_topic_prefix());
    const char *groups[] = {group};
    rd_kafka_queue_t *q = rd_kafka_queue_new(admin);
    rd_kafka_AdminOptions_t *opts =
        rd_kafka_AdminOptions_new(admin, RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS);
    rd_kafka_AdminOptions_set_request_timeout(opts, 5000, errstr, sizeof errstr);
    rd_kafka_DescribeConsumerGroups(admin, groups, 1, opts, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 10000);
    const rd_kafka_DescribeConsumerGroups_result_t *res =
        ev != NULL ? rd_kafka_event_DescribeConsumerGroups_result(ev) : NULL;
    size_t n = 0;
    const rd_kafka_ConsumerGroupDescription_t **descs =
        res != NULL ? rd_kafka_DescribeConsumerGroups_result_groups(res, &n) : NULL;
    int ok = 0;
    if (n == 1 && rd_kafka_ConsumerGroupDescription_error(descs[0]) == NULL) {
        ok = rd_kafka_ConsumerGroupDescription_state(descs[0]) ==
             RD_KAFKA_CONSUMER_GROUP_STATE_STABLE;
        size_t members = rd_kafka_ConsumerGroupDescription_member_count(descs[0]);
        for (size_t m = 0; m < members; m++) {
            const rd_kafka_MemberDescription_t *member =
                rd_kafka_ConsumerGroupDescription_member(descs[0], m);
            const char *id = rd_kafka_MemberDescription_client_id(member);
            int who = id == NULL                                         ? 2
                      : strcmp(id, "strand-executor-executor-0") == 0 ? 0
                      : strcmp(id, "strand-executor-executor-1") == 0 ? 1
                                                                       : 2;
            const rd_kafka_topic_partition_list_t *parts = rd_kafka_MemberAssignment_partitions(
                rd_kafka_MemberDescription_assignment(member));
            for (int i = 0; parts != NULL && i < parts->cnt; i++) {
                int p = parts->elems[i].partition;
                if (strcmp(parts->elems[i].topic, topic) != 0 || p < 0 || p >= PARTITIONS)
                    continue;
                if (owner[p] != -1)
                    ok = 0;
                owner[p] = who;
            }
        }
    }
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_queue_destroy(q);
    return ok;
}

/* Waits (up to 60 s) until the group is Stable with every partition held by the main
 * executor or replica 1 and each holding at least one; fills owner[] and prints the
 * split. Returns 1 when it got there. */
static int wait_both_hold_partitions(int owner[PARTITIONS])
{
    double started = now_s();
    for (;;) {
        int held[3] = {0, 0, 0}, stable = group_owners(owner), nobody = 0;
        for (int p = 0; p < PARTITIONS; p++) {
            if (owner[p] < 0)
                nobody++;
            else
                held[owner[p]]++;
        }
        if (stable && nobody == 0 && held[2] == 0 && held[0] > 0 && held[1] > 0) {
            printf("\n    both executors hold partitions after %.1f s: main %d, replica %d (",
                   now_s() - started, held[0], held[1]);
            for (int p = 0; p < PARTITIONS; p++)
                printf("%s%d", p ? " " : "", owner[p]);
            printf(")\n");
            return 1;
        }
        if (now_s() - started > 60) {
            printf("\n    after 60 s: stable %d, main %d, replica %d, other %d, none %d\n", stable,
                   held[0], held[1], held[2], nobody);
            return 0;
        }
        usleep(200 * 1000);
    }
}

/* The database's clock in ms since the epoch (instances' created_at and ended_at are
 * on it). */
static long long db_now_ms(void)
{
    return it_sql_number("SELECT (1000 * extract(epoch FROM clock_timestamp()))::bigint");
}

typedef struct {
    long long created_ms, ended_ms;
    int victim;   /* on a partition the killed replica held */
} run_t;

static int by_end(const void *a, const void *b)
{
    const run_t *x = a, *y = b;
    return (x->ended_ms > y->ended_ms) - (x->ended_ms < y->ended_ms);
}

/* What a phase measured, in ms. */
typedef struct {
    long long longest_victim, longest_survivor, gap, stopped;
    /* instances on the survivor's partitions started between the kill and SURVIVOR_MAX_MS
     * before the killed replica's partitions completed again, and how many of them
     * completed before that */
    int survivor_started_in_stop, survivor_done_in_stop;
} phase_t;

/* Starts n_instances (business refs "<tag>-<i>") at ~25/s, kills replica 1 a third of
 * the way in (and with `restart` starts it again at once, with the same node id), waits
 * for all to complete, then measures, with owner[] (who held each partition before the
 * kill), the longest start-to-completion on each side, the longest gap between two
 * consecutive completions, how long the killed replica's partitions completed nothing
 * after the kill and how many instances the survivor completed meanwhile. */
static phase_t run_phase(const char *tag, pid_t *replica, int restart,
                         const int owner[PARTITIONS])
{
    phase_t ph = {-1, -1, -1, -1, 0, 0};
    double started = now_s();
    long long kill_ms = -1;
    for (int i = 0; i < n_instances; i++) {
        if (kill_ms < 0 && i >= n_instances / 3) {
            kill_ms = db_now_ms();
            it_kill9(*replica);
            printf("    %s: killed executor replica 1 (pid %d) after %d starts, at %.1f s", tag,
                   (int)*replica, i, now_s() - started);
            if (restart) {
                *replica = it_start_replica(IT_EXECUTOR, 1);
                CU_ASSERT(*replica > 0);
                printf("; restarted it at once (pid %d)", (int)*replica);
            }
            printf("\n");
        }
        char body[256];
        snprintf(body, sizeof body,
                 "{\"definition\":\"%s\",\"business_ref\":\"%s-%d\",\"input\":{\"n\":%d}}",
                 def_name, tag, i, i);
        CU_ASSERT_EQUAL(it_http(IT_API, "POST", "/v1/instances", body, NULL), 201);
        usleep(40 * 1000);   /* ~25 starts per second */
    }
    char sql[700], where[200];
    snprintf(where, sizeof where, "definition_name = '%s' AND business_ref LIKE '%s-%%'",
             def_name, tag);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strand.instances WHERE %s"
             " AND status = 'completed'", where);
    long long done = it_wait_number(sql, n_instances, 180);
    printf("    %s: %lld of %d instances completed, %.1f s after the first start\n", tag, done,
           n_instances, now_s() - started);
    CU_ASSERT_EQUAL(done, n_instances);
    CU_ASSERT_TRUE(kill_ms > 0);
    snprintf(sql, sizeof sql, "SELECT string_agg(id || ' ' || (1000 * extract(epoch FROM"
             " created_at))::bigint || ' ' || (1000 * extract(epoch FROM ended_at))::bigint, ',')"
             " FROM strand.instances WHERE %s AND ended_at IS NOT NULL", where);
    char *rows = it_sql_text(sql);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rows);
    run_t *runs = calloc((size_t)n_instances, sizeof *runs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(runs);
    int n = 0;
    for (char *save = NULL, *row = strtok_r(rows, ",", &save); row != NULL && n < n_instances;
         row = strtok_r(NULL, ",", &save)) {
        char id[64];
        if (sscanf(row, "%63s %lld %lld", id, &runs[n].created_ms, &runs[n].ended_ms) != 3)
            continue;
        runs[n].victim = owner[crc32_of(id) % PARTITIONS] == VICTIM;
        n++;
    }
    free(rows);
    CU_ASSERT_EQUAL(n, n_instances);
    qsort(runs, (size_t)n, sizeof *runs, by_end);
    long long resumed_ms = -1;   /* the killed replica's partitions' first completion after the kill */
    int victims = 0;
    for (int i = 0; i < n; i++) {
        long long took = runs[i].ended_ms - runs[i].created_ms;
        long long *longest = runs[i].victim ? &ph.longest_victim : &ph.longest_survivor;
        if (took > *longest)
            *longest = took;
        if (i > 0 && runs[i].ended_ms - runs[i - 1].ended_ms > ph.gap)
            ph.gap = runs[i].ended_ms - runs[i - 1].ended_ms;
        victims += runs[i].victim;
        if (runs[i].victim && resumed_ms < 0 && runs[i].ended_ms > kill_ms)
            resumed_ms = runs[i].ended_ms;
    }
    if (resumed_ms > 0) {
        ph.stopped = resumed_ms - kill_ms;
        for (int i = 0; i < n; i++) {
            if (runs[i].victim || runs[i].created_ms < kill_ms ||
                runs[i].created_ms >= resumed_ms - SURVIVOR_MAX_MS)
                continue;
            ph.survivor_started_in_stop++;
            ph.survivor_done_in_stop += runs[i].ended_ms < resumed_ms;
        }
    }
    free(runs);
    printf("    %s: longest start-to-completion %.1f s on the killed replica's partitions"
           " (%d instances), %.1f s on the survivor's; longest gap between completions %.1f s;"
           " the killed replica's partitions completed nothing for %.1f s after the kill,"
           " while the survivor completed %d of the %d instances started on its partitions"
           " meanwhile\n", tag, ph.longest_victim / 1000.0, victims, ph.longest_survivor / 1000.0,
           ph.gap / 1000.0, ph.stopped / 1000.0, ph.survivor_done_in_stop,
           ph.survivor_started_in_stop);
    CU_ASSERT_TRUE(victims > 0 && victims < n);
    return ph;
}

/* The survivor went on completing its own instances while the killed replica's
 * partitions were stopped: none of its instances stalled, the phase never went
 * GAP_MAX_MS without a completion, and every instance started on its partitions during
 * the stop (but its last SURVIVOR_MAX_MS) completed during the stop. */
static void assert_only_victims_stopped(const phase_t *ph)
{
    CU_ASSERT_TRUE(ph->longest_survivor >= 0 && ph->longest_survivor < SURVIVOR_MAX_MS);
    CU_ASSERT_TRUE(ph->gap >= 0 && ph->gap < GAP_MAX_MS);
    CU_ASSERT_TRUE(ph->survivor_started_in_stop > 0);
    CU_ASSERT_EQUAL(ph->survivor_done_in_stop, ph->survivor_started_in_stop);
}

static void test_failover(void)
{
    const char *n_env = getenv("STRAND_FAILOVER_N");
    if (n_env != NULL && atoi(n_env) > 0)
        n_instances = atoi(n_env);
    setenv("STRAND_TOPIC_PARTITIONS", "8", 1);
    CU_ASSERT_FATAL(it_start_all(90));
    pid_t replica = it_start_replica(IT_EXECUTOR, 1);
    CU_ASSERT_FATAL(replica > 0);
    snprintf(def_name, sizeof def_name, "failover_%d", (int)getpid());
    char doc[1024];
    snprintf(doc, sizeof doc,
             "{\"kind\":\"flow\",\"name\":\"%s\",\"version\":1,\"steps\":["
             "{\"id\":\"greet\",\"type\":\"set\",\"values\":{\"n\":\"input.n\"}},"
             "{\"id\":\"pause\",\"type\":\"timer\",\"delay\":300},"
             "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"n\":\"state.n\"}}]}",
             def_name);
    CU_ASSERT_EQUAL_FATAL(it_http(IT_API, "POST", "/v1/definitions", doc, NULL), 201);
    /* Both executors in the group with their share of the partitions (cooperative
     * assignment takes two rounds). */
    int owner[PARTITIONS];
    CU_ASSERT_FATAL(wait_both_hold_partitions(owner));

    /* A replica that dies and stays away: its partitions move to the survivor after
     * the session timeout. */
    phase_t killed = run_phase("killed", &replica, 0, owner);
    CU_ASSERT_TRUE(killed.longest_victim >= 0 &&
                   killed.longest_victim <= DOC_STALL_MS + STALL_TOLERANCE_MS);
    /* ... and they did stop: the broker cannot expire the session before the session
     * timeout minus one heartbeat interval (4.5 s). */
    CU_ASSERT_TRUE(killed.stopped >= 4000);
    assert_only_victims_stopped(&killed);

    /* A replica that dies and comes back at once (a pod restart): the same node id
     * takes the same partitions back, without waiting for the session timeout. */
    replica = it_start_replica(IT_EXECUTOR, 1);
    CU_ASSERT_FATAL(replica > 0);
    CU_ASSERT_FATAL(wait_both_hold_partitions(owner));
    phase_t restarted = run_phase("restarted", &replica, 1, owner);
    CU_ASSERT_TRUE(restarted.longest_victim >= 0 &&
                   restarted.longest_victim < RESTART_STALL_MAX_MS);
    CU_ASSERT_TRUE(restarted.longest_survivor >= 0 &&
                   restarted.longest_survivor < SURVIVOR_MAX_MS);
    CU_ASSERT_TRUE(restarted.gap >= 0 && restarted.gap < GAP_MAX_MS);
    int after[PARTITIONS];
    CU_ASSERT_FATAL(wait_both_hold_partitions(after));
    CU_ASSERT_EQUAL(memcmp(after, owner, sizeof owner), 0);
}

/* Two processes with one node id: the broker fences the older static member; it says
 * why in its log and turns unready instead of consuming on as a zombie. */
static void test_duplicate_node_id_is_reported(void)
{
    char errstr[256], group[200], instance[200], topic[200];
    snprintf(group, sizeof group, "%sexecutor", it_topic_prefix());
    snprintf(instance, sizeof instance, "executor-executor-0");   /* the main executor's */
    snprintf(topic, sizeof topic, "%ssignals", it_topic_prefix());
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *settings[][2] = {
        {"bootstrap.servers", getenv("STRAND_KAFKA_BROKERS")}, {"group.id", group},
        {"group.instance.id", instance}, {"enable.auto.commit", "false"},
        {"partition.assignment.strategy", "cooperative-sticky"}, {"session.timeout.ms", "6000"},
    };
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        CU_ASSERT_EQUAL(rd_kafka_conf_set(conf, settings[i][0], settings[i][1], errstr,
                                          sizeof errstr), RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rk);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(subs, topic, RD_KAFKA_PARTITION_UA);
    CU_ASSERT_EQUAL(rd_kafka_subscribe(rk, subs), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(subs);
    int unready = 0;
    double started = now_s();
    while (!unready && now_s() - started < 40) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(rk, 200);
        if (msg != NULL)
            rd_kafka_message_destroy(msg);
        unready = it_http(IT_EXECUTOR, "GET", "/readyz", NULL, NULL) == 503;
    }
    printf("\n    duplicate node id: the fenced executor unready after %.1f s\n",
           now_s() - started);
    CU_ASSERT_TRUE(unready);
    rd_kafka_destroy(rk);
    if (admin != NULL)
        rd_kafka_destroy(admin);
    admin = NULL;
}

int main(void)
{
    if (!it_init("test_failover"))
        return 1;
    static const it_case_t cases[] = {
        {"two executors under load, one killed -9: a stall of seconds", test_failover},
        {"two processes with one node id: the fenced one is unready",
         test_duplicate_node_id_is_reported},
    };
    return it_run_suite("failover", cases, sizeof cases / sizeof cases[0]);
}
