/*
 * call.h - the owner of strand.calls: an outbound HTTP call an instance waits on
 * (docs/architecture.md, invariant 7). The executor's effects add calls, its
 * dispatcher claims them under a lease, renews the lease, records results and returns
 * lapsed calls to 'pending', and an instance's end cancels its pending calls (tree.c,
 * through ST_CALL_CANCEL_SQL); all through here, in the caller's transaction (_tx) or,
 * for the dispatcher's one-statement steps, as one autocommitted statement.
 *
 * A call's life: pending -> sent (claimed, under a lease) -> succeeded | failed;
 * pending -> abandoned (its instance no longer waits on it) | cancelled (its instance
 * or branch ended); sent -> pending when the lease lapses (sent again, same key).
 *
 * Each claim increments the call's lease epoch (migration 0028): the first claim is
 * epoch 1, a claim after a lapsed lease 2, ... The epoch fences the claim's holder:
 * only the current epoch's claim renews the lease or records the result, and the
 * worker sees it as `Strand-Lease-Epoch` (docs/definitions.md, calls).
 */
#ifndef STRAND_CALL_H
#define STRAND_CALL_H

#include <libpq-fe.h>

#include "strand/err.h"

/* NOTIFY channel raised with each new call and whenever claimers should look again. */
#define ST_CALLS_CHANNEL "strand_calls"

/* A new call, as the make_call effect describes it. Every string is borrowed. */
typedef struct st_call_new {
    const char *id;              /* a fresh uuid */
    const char *instance_id;
    const char *waiting_token;
    const char *transport;       /* "http" */
    const char *request_json;    /* {url, method, headers?, body?, protocol?} */
    long long attempt;
    const char *idempotency_key;
    long long timeout_ms;
} st_call_new_t;

/* A call row as the dispatcher sees it (a claim or a lapsed lease). Strings are owned
 * by the list: free it with st_call_list_free(). Fields a query did not return are
 * empty ("") or 0. */
typedef struct st_call_row {
    char id[37];
    char instance_id[37];
    char *waiting_token;
    char *transport;
    char *request_json;
    int attempt;
    char *idempotency_key;
    long timeout_ms;
    int abandoned;               /* claimed as 'abandoned': never to be sent */
    long long lease_epoch;       /* this claim's epoch (st_call_claim; >= 1 when sent) */
    char *claimed_by;            /* the lapsed lease's owner (st_call_recover_lapsed) */
} st_call_row_t;

/* Adds pending call `call` and raises NOTIFY strand_calls, both in the caller's open
 * transaction on `conn` (the claimers wake when it commits). */
st_err_t st_call_add_tx(PGconn *conn, const st_call_new_t *call, st_errbuf_t *eb);

/* Claims up to `limit` pending calls (oldest first, FOR UPDATE SKIP LOCKED) for node
 * `node_id` under a lease of `lease_ms`: a call whose instance has ended or no longer
 * waits on its token (no live thread of the engine's snapshot waits on it) is marked
 * abandoned instead. Each call claimed 'sent' gets the next lease epoch (row's
 * lease_epoch). The lease is counted from the database's now(), i.e. from a moment
 * after the caller issued the statement. One statement, autocommitted. On success `*out` (caller frees with
 * st_call_list_free()) holds `*n` rows, sent and abandoned alike. */
st_err_t st_call_claim(PGconn *conn, int limit, const char *node_id, int lease_ms,
                       st_call_row_t **out, int *n, st_errbuf_t *eb);

/* Returns up to 100 sent calls whose lease has passed to 'pending'. `*out` (caller
 * frees with st_call_list_free()) holds the `*n` calls returned, with id, instance_id
 * and claimed_by. One statement, autocommitted. */
st_err_t st_call_recover_lapsed(PGconn *conn, st_call_row_t **out, int *n, st_errbuf_t *eb);

/* Pushes the lease of each call `ids[i]` (`n` borrowed uuid strings) claimed under
 * epoch `epochs[i]` to now + `lease_ms`, but only where that claim still holds it: the
 * call is 'sent', still at that epoch and its lease has not passed (a lapsed lease is
 * never revived). `renewed[i]` (n ints) is set to 1 for each lease renewed, 0 for the
 * others. One statement, autocommitted. */
st_err_t st_call_renew_leases(PGconn *conn, const char *const *ids,
                              const long long *epochs, size_t n, int lease_ms,
                              int *renewed, st_errbuf_t *eb);

/* Milliseconds until the earliest lease of a sent call passes (negative: passed);
 * `*has` 0 when no call is sent. A read. */
st_err_t st_call_next_lease_ms(PGconn *conn, long long *ms, int *has, st_errbuf_t *eb);

/* Records call `id`'s outcome (`succeeded` true: 'succeeded', else 'failed') with
 * `result_json`, once, for the claim of epoch `lease_epoch`: `*recorded` is 0 when the
 * call was claimed again since (a newer epoch), another dispatcher already answered it
 * or it was abandoned (then nothing changed and nothing should be signalled).
 * Expects the caller to hold an open transaction on `conn`. */
st_err_t st_call_record_result_tx(PGconn *conn, const char *id, long long lease_epoch,
                                  int succeeded, const char *result_json, int *recorded,
                                  st_errbuf_t *eb);

/* Frees the `n` rows of `rows` (NULL is fine). */
void st_call_list_free(st_call_row_t *rows, int n);

/* One CTE body for tree.c's end-of-instance statement: cancels the pending calls of
 * `instance` (those of the wait `token` only unless it is NULL). Arguments are SQL
 * expressions as text literals. */
#define ST_CALL_CANCEL_SQL(instance, token)                                                 \
    "UPDATE strand.calls SET status = 'cancelled', updated_at = now()"                      \
    "   WHERE instance_id = " instance " AND status = 'pending'"                            \
    "   AND (" token "::text IS NULL OR waiting_token = " token ")"

#endif
