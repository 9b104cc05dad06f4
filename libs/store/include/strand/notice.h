/*
 * notice.h - notices (something an operator should know) and dead letters (a message
 * that could not be processed after bounded attempts). Both are written inside the
 * caller's transaction and reach Kafka through the outbox. The owner of
 * strand.notices and strand.dead_letters.
 */
#ifndef STRAND_NOTICE_H
#define STRAND_NOTICE_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>

#include "strand/err.h"

/* Adds a Notice to the outbox for the notices topic, keyed by instance id, and stores
 * it in strand.notices (the same transaction; both statements queued, no extra round
 * trip). `code` is a stable name (DuplicateSignal, StaleSignal, UnknownInstance...);
 * `instance_id`, `signal_id` and `detail` may be NULL; `detail` is borrowed. Text that
 * PostgreSQL would refuse (bytes that are not UTF-8, a \u0000 escape) is stored
 * replaced, never failing the caller's transaction. An instance id that is no UUID is
 * stored as NULL. Expects the caller to hold an open transaction. */
st_err_t st_notice_add_tx(PGconn *conn, const char *code, const char *instance_id,
                          const char *signal_id, const char *message, const json_t *detail,
                          st_errbuf_t *eb);

/* Where a dead message came from. */
typedef struct {
    const char *topic;       /* full topic name */
    int partition;
    long long offset;
    const char *instance_id; /* may be NULL */
    const char *signal_id;   /* the signal's id where known, else NULL: the recovery
                              * sweep never publishes a dead-lettered signal again */
} st_dead_letter_source_t;

/* Largest payload a dead letter keeps; a longer one is stored empty, with its size in
 * the reason (the DLQ envelope must stay under the broker's 1 MB message limit). */
#define ST_DEAD_LETTER_MAX_PAYLOAD (512 * 1024)

/* Records a dead letter (strand.dead_letters) and adds a DeadLetter envelope to the
 * outbox for the dlq topic. `payload` is the original message, copied; NULL (a
 * tombstone) is stored as empty. The caller strips credentials first: the payload is
 * readable by operators and published on the dlq topic.
 * Expects the caller to hold an open transaction. */
st_err_t st_dead_letter_add_tx(PGconn *conn, const st_dead_letter_source_t *src,
                               const char *reason, int attempts, const char *node_id,
                               const void *payload, size_t len, st_errbuf_t *eb);

/* An open dead letter taken by st_dead_letter_settle_tx(). */
typedef struct {
    char topic[256];   /* the full source topic name */
    char key[37];      /* the instance id it was keyed by, "" for none */
    void *payload;     /* the stored message, owned by the caller (free()) */
    size_t len;
} st_dead_letter_t;

/* Marks the open dead letter `id` (decimal text) `status` ("replayed", "discarded") in
 * the caller's open transaction. *found = 0 when no open letter has this id (nothing
 * changed). With *found and `out` not NULL, `out` receives its source and payload. */
st_err_t st_dead_letter_settle_tx(PGconn *conn, const char *id, const char *status, int *found,
                                  st_dead_letter_t *out, st_errbuf_t *eb);

/* Replaces the stored message of the open dead letter `id` (decimal text) with `payload`
 * (copied), in the caller's open transaction (PUT /v1/dead-letters/{id}/payload).
 * ST_ERR_NOT_FOUND when no open letter has this id. */
st_err_t st_dead_letter_set_payload_tx(PGconn *conn, const char *id, const void *payload, size_t len,
                                       st_errbuf_t *eb);

/* The retention run's part, for its one statement (a CTE body): deletes the letters in
 * the CTE named `letters` (column id) unless `dry`, a boolean SQL expression. Both are
 * SQL text literals. */
#define ST_DEAD_LETTER_PURGE_SQL(letters, dry)                                             \
    "DELETE FROM strand.dead_letters d USING " letters " l WHERE NOT " dry                 \
    " AND d.id = l.id RETURNING 1"

/* The retention run's part for notices, as for dead letters: deletes the notices in
 * the CTE named `notices` (column id) unless `dry`. SQL text literals. */
#define ST_NOTICE_PURGE_SQL(notices, dry)                                                   \
    "DELETE FROM strand.notices n USING " notices " a WHERE NOT " dry                       \
    " AND n.id = a.id RETURNING 1"

#endif
