/*
 * signal_buffer.h - what the executor does with signals an instance cannot take now.
 * Two kinds: a named signal that arrived before the instance waited for its name (kept,
 * then fed in by the wake-up that waits for it: wakeup.c's drain, which takes it with
 * st_signal_buffer_take_tx()), and a whole envelope kept while the instance or its
 * definition version is paused (sent again on resume: pause.c). Keeping one also records
 * its dedup outcome and a history entry. Named signals are bounded per instance (a
 * signal beyond the bound is refused); held envelopes are not. The rows live in
 * strand.signal_buffer, whose owner (its SQL) is libs/store's
 * strand/signal_buffer_store.h, included here. Every function takes the caller's open
 * transaction.
 */
#ifndef STRAND_EXECUTOR_SIGNAL_BUFFER_H
#define STRAND_EXECUTOR_SIGNAL_BUFFER_H

#include <libpq-fe.h>

#include "strand/err.h"
#include "strand/signal.h"
#include "strand/signal_buffer_store.h"   /* st_signal_buffer_take_tx() */

/* Keeps named signal `sig` for later: records its id as buffered and a history entry
 * "signal_buffered". Bounded per instance (STRAND_SIGNAL_BUFFER_MAX signals and
 * STRAND_SIGNAL_BUFFER_MAX_BYTES of payload as JSON, docs/configuration.md): a signal
 * beyond the bound is not kept but dropped, its id recorded as "refused" with a notice
 * SignalBufferFull naming the instance, the signal and the bound; that is a success
 * (ST_OK), so the wake-up commits and the consumer goes on. */
st_err_t st_signal_buffer_keep_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb);

/* Keeps `sig` (whole envelope) in strand.signal_buffer because its instance or its
 * definition version is paused; records the signal id as buffered and a history entry
 * "signal_held". Expects the wake-up's open transaction. */
st_err_t st_signal_buffer_hold_tx(PGconn *conn, const st_signal_t *sig, st_errbuf_t *eb);

/* Sends again, in arrival order, every signal kept for `instance_id` by
 * st_signal_buffer_hold_tx(): each is deleted from the buffer and enqueued (outbox) under a new
 * signal id in the caller's transaction, so a crash either keeps them all or sends them
 * all. *released is how many. */
st_err_t st_signal_buffer_release_held_tx(PGconn *conn, const char *instance_id, int *released,
                                   st_errbuf_t *eb);

#endif
