/*
 * topics.h - the names of Strand's Kafka topics, without Kafka.
 *
 * The store names a topic on each outbox row it writes; it never talks to Kafka
 * (libs/store/README.md). The relay and the consumers add STRAND_TOPIC_PREFIX
 * (st_config_topic()).
 */
#ifndef STRAND_TOPICS_H
#define STRAND_TOPICS_H

/* The topic suffixes every deployment has (prefixed with STRAND_TOPIC_PREFIX). */
#define ST_TOPIC_SIGNALS "signals"
#define ST_TOPIC_WORK    "work"
#define ST_TOPIC_NOTICES "notices"
#define ST_TOPIC_INGRESS "ingress"
#define ST_TOPIC_DLQ     "dlq"

#endif
