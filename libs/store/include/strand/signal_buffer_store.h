/*
 * signal_buffer_store.h - the owner of strand.signal_buffer: signals an instance cannot
 * take now. Two kinds of row: a named signal that arrived before the instance waited
 * for its name (payload only, `envelope` NULL), and a whole encoded envelope kept while
 * the instance or its definition version is paused (`envelope` set). Callers pass plain
 * values, already serialised; what a kept signal means (its dedup outcome, its history
 * entry, sending it again) is the executor's (services/executor/signal_buffer.h).
 * Every function takes the caller's open transaction (_tx).
 */
#ifndef STRAND_SIGNAL_BUFFER_STORE_H
#define STRAND_SIGNAL_BUFFER_STORE_H

#include <stddef.h>

#include <libpq-fe.h>

#include "strand/err.h"

/* ---- named signals that came early ----------------------------------------------- */

/* Keeps named signal `signal_id` (`name`, `payload_json`: its payload as JSON text) for
 * instance `instance_id`. Borrowed strings. Expects the caller's open transaction. */
st_err_t st_signal_buffer_add_named_tx(PGconn *conn, const char *instance_id, const char *name,
                                       const char *signal_id, const char *payload_json,
                                       st_errbuf_t *eb);

/* What `instance_id` keeps of named signals now: *count rows and *bytes of payload,
 * measured as JSON text (what st_signal_buffer_add_named_tx() was given, as PostgreSQL
 * prints it back). Held envelopes are not counted. Expects the caller's open
 * transaction, holding the instance's lock so that the answer stays true until the
 * caller adds a row (the wake-up's). */
st_err_t st_signal_buffer_named_usage_tx(PGconn *conn, const char *instance_id, long long *count,
                                         long long *bytes, st_errbuf_t *eb);

/* Takes (deletes) the oldest kept named signal of `instance_id` whose name is in
 * `names_json` (a JSON array of names; "*" takes any), locking it first: *row (caller
 * PQclear()s) has zero rows or one: signal_id, payload (JSON text), name. Held
 * envelopes are never taken here. Expects the caller's open transaction. */
st_err_t st_signal_buffer_take_tx(PGconn *conn, const char *instance_id, const char *names_json,
                                  PGresult **row, st_errbuf_t *eb);

/* ---- whole envelopes held while paused ------------------------------------------- */

/* Keeps the encoded envelope `envelope` (`len` bytes, borrowed; st_signal_encode()) of
 * signal `signal_id` named `name` for instance `instance_id`, with payload {}.
 * Expects the caller's open transaction. */
st_err_t st_signal_buffer_add_held_tx(PGconn *conn, const char *instance_id, const char *name,
                                      const char *signal_id, const void *envelope, size_t len,
                                      st_errbuf_t *eb);

/* Takes (deletes) every held envelope of `instance_id`: *rows (caller PQclear()s; set
 * to NULL on failure) has one row per envelope in arrival order, one column, the
 * envelope, in binary format (PQgetvalue() and PQgetlength() give its bytes). Expects
 * the caller's open transaction, so that what is taken is sent again or kept. */
st_err_t st_signal_buffer_take_held_tx(PGconn *conn, const char *instance_id, PGresult **rows,
                                       st_errbuf_t *eb);

#endif
