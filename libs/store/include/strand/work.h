/*
 * work.h - actionable work events with per-consumer ACK tracking.
 *
 * st_work_emit_tx() records a WorkEvent (its exact envelope bytes), one ACK row per
 * consumer due for delivery, and the event in the outbox for the work topic, all in
 * the caller's transaction. The monitor re-raises the stored bytes while an ACK stage
 * is overdue; st_work_ack_tx() applies an application's ACK.
 */
#ifndef STRAND_WORK_H
#define STRAND_WORK_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/err.h"

#define ST_WORK_DELIVERY_TIMEOUT_S 30
#define ST_WORK_PROCESSING_TIMEOUT_S 300
#define ST_WORK_MAX_RAISES 10

/* NOTIFY channel the monitor listens on; raised whenever an ACK deadline changes. */
#define ST_WORK_CHANNEL "strand_acks"

typedef struct {
    const char *instance_id;
    const char *kind;            /* "transition", "hook", "call" */
    const char *event_code;
    const char *external_ref;    /* may be NULL */
    const char *env_code;        /* may be NULL */
    const char *definition;      /* may be NULL */
    int definition_version;
    const char *waiting_token;   /* calls: the wait the result answers; else NULL */
    const json_t *payload;       /* borrowed; NULL = {} */
    /* borrowed JSON array; each item a consumer name, or an object {consumer,
     * delivery_timeout_s?, processing_timeout_s?, max_raises?} (a route's settings) */
    const json_t *consumers;
} st_work_event_t;

/* Emits `ev` inside the caller's open transaction; writes the new ack_guid into
 * `ack_guid`. Fails with ST_ERR_INVALID when consumers are missing or malformed. */
st_err_t st_work_emit_tx(PGconn *conn, const st_work_event_t *ev, char ack_guid[37],
                         st_errbuf_t *eb);

/* ---- ACK stages (strand.acks: one row per (ack_guid, consumer); this module owns it) */

/* What happens to one awaited ACK stage. */
typedef enum {
    ST_ACK_DELIVERED,   /* -> processing, due after the processing timeout (message) */
    ST_ACK_PROCESSED,   /* -> done (message) */
    ST_ACK_RETRY,       /* -> delivery again, due at retry_at_ms (error, message) */
    ST_ACK_FAILED,      /* -> failed (error, message) */
    ST_ACK_RERAISED,    /* delivery deadline passed, event raised again: next deadline */
    ST_ACK_REMINDED,    /* processing deadline passed, reminder raised: next deadline */
    ST_ACK_GIVEN_UP,    /* -> failed after the last raise (error, unless one is set) */
} st_ack_move_t;

/* Applies `move` to the ACK stage of (`ack_guid`, `consumer`) in the caller's open
 * transaction; the caller has locked the row and checked the move. `error`, `message`
 * and `retry_at_ms` (epoch ms as text) are used where the move says, else ignored. */
st_err_t st_ack_move_tx(PGconn *conn, const char *ack_guid, const char *consumer,
                        st_ack_move_t move, const char *error, const char *message,
                        const char *retry_at_ms, st_errbuf_t *eb);

/* A CTE body for tree.c's one end-of-instance statement: stops the awaited ACKs of the
 * instance's Kafka-transport calls (stage cancelled, no deadline), those of the wait
 * `token` only unless it is NULL. Arguments are SQL expressions as text literals. */
#define ST_ACK_CANCEL_CALLS_SQL(instance, token)                                             \
    "UPDATE strand.acks SET stage = 'cancelled', due_at = NULL, updated_at = now()"          \
    "   WHERE due_at IS NOT NULL AND ack_guid IN (SELECT ack_guid FROM strand.work_events"   \
    "   WHERE instance_id = " instance " AND kind = 'call'"                                  \
    "   AND (" token "::text IS NULL OR waiting_token = " token "))"

#endif
