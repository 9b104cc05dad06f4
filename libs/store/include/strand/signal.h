/*
 * signal.h - the signal envelope (proto/strand.proto, message Signal) in C terms:
 * building, encoding, decoding and enqueueing through the outbox.
 */
#ifndef STRAND_SIGNAL_H
#define STRAND_SIGNAL_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "strand/err.h"

#define ST_SIGNAL_ENVELOPE_VERSION 1

/* Mirrors strand.v1.SignalType. */
typedef enum {
    ST_SIGNAL_START = 1,
    ST_SIGNAL_TASK_COMPLETED = 2,
    ST_SIGNAL_TIMER_DUE = 3,
    ST_SIGNAL_RETRY_DUE = 4,
    ST_SIGNAL_EXTERNAL = 5,
    ST_SIGNAL_CHILD_COMPLETED = 6,
    ST_SIGNAL_CALL_RESULT = 7,
    ST_SIGNAL_CANCEL = 8,
    ST_SIGNAL_TERMINATE = 9,
    ST_SIGNAL_CONTINUE = 10,
    /* Operator control signals (issue 18): payload {"verb" (REPAIR), "actor", ...},
     * expected_version = the version the operator (or a batch job, under the row lock)
     * saw. REPAIR: services/executor/wakeup.c repair_tx(); PAUSE, RESUME, REWIND:
     * services/executor/pause.c. */
    ST_SIGNAL_REPAIR = 11,
    ST_SIGNAL_PAUSE = 12,
    ST_SIGNAL_RESUME = 13,
    ST_SIGNAL_REWIND = 14,
} st_signal_type_t;

typedef struct {
    char signal_id[40];
    char instance_id[40];
    st_signal_type_t type;
    long long expected_version;   /* -1 = any */
    char waiting_token[128];
    long long occurred_at_ms;
    long long due_at_ms;
    char name[128];
    unsigned attempt;
    json_t *payload;              /* owned; an object; NULL means {} */
} st_signal_t;

/* Initialises `sig` with a fresh signal id, the current time and no payload. */
void st_signal_init(st_signal_t *sig, st_signal_type_t type, const char *instance_id,
                    long long expected_version);
/* Releases the payload. */
void st_signal_close(st_signal_t *sig);

/* Upper-case name of a signal type ("START", "TASK_COMPLETED"...); static storage.
 * This is also the event "type" the interpreter receives. */
const char *st_signal_type_name(st_signal_type_t type);

/* Encodes to protobuf. *buf is owned by the caller (free()). */
st_err_t st_signal_encode(const st_signal_t *sig, uint8_t **buf, size_t *len,
                          st_errbuf_t *eb);

/* Decodes and validates a message from the signals topic. Fails with ST_ERR_INVALID
 * on bad protobuf, an unknown envelope version, a missing id or a payload that is not a
 * JSON object. On success the caller releases `out` with st_signal_close(). */
st_err_t st_signal_decode(const void *buf, size_t len, st_signal_t *out, st_errbuf_t *eb);

/* Encodes `sig` and adds it to the outbox for the signals topic, keyed by instance id.
 * A signal that ends an instance (st_signal_needs_record()) is also recorded in
 * strand.control_signals, the proof that Strand sent it. Expects the caller to hold an
 * open transaction on `conn`. */
st_err_t st_signal_enqueue_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb);

/* 1 for the signal types the executor applies only with Strand's record of them
 * (CANCEL, TERMINATE, and the operator verbs REPAIR, PAUSE, RESUME, REWIND): nothing
 * but Strand's own services may end, repair or pause an instance, so a message produced
 * straight onto the signals topic cannot. */
int st_signal_needs_record(st_signal_type_t type);

/* Takes (deletes) the record st_signal_enqueue_tx() wrote for `sig`: *found is 1 if it
 * was there (same signal id, instance and type), else 0. Expects the caller's open
 * transaction, so a rolled-back wake-up keeps the record. */
st_err_t st_signal_take_record_tx(PGconn *conn, const st_signal_t *sig, int *found,
                                  st_errbuf_t *eb);

#endif
